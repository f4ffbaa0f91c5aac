"""Busiest-EP-rank expert load per routing regime and the MoE host sync, by hand
(mosaic.perf.routing_load; Megatron-LM @ 6a6cd478 moe_utils/token_dispatcher)."""

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.config.job_schema import job_document, load_job
from mosaic.config.recipes import RecipeQuery, recipe_settings
from mosaic.config.run_records import load_run_records
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import concatenate_plans, single_plan
from mosaic.perf.routing_load import (
    expert_counts_reach_host,
    learned_router_imbalance,
    routed_load_factor,
    router_imbalance,
)
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload
from mosaic.stacks import get_stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXTRA_RUNS = Path(__file__).resolve().parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"
# No per-regime calibrated factor: only the modelled load acts.
CALIBRATION = replace(default_calibration(), routing_imbalance={})


def _moe(**changes) -> Workload:
    """A q=4 rung whose router is not stated, so the stack's balancing applies."""
    rung = ladder_geometry(4, experts=64, top_k=2, split_factor=4)
    geometry = replace(rung, moe=replace(rung.moe, router=None))
    return replace(Workload(geometry=geometry, global_batch=256, seq_len=2048), **changes)


def test_a_ladder_rung_is_costed_with_the_papers_router():
    """The loss law was fitted on runs of the paper's Alg. 1 router (sigmoid scores, the LFLB
    bias), so a ladder geometry states it and a megatron-core (aux_loss) job costs the
    loss-free imbalance: 64 experts on 8 ranks, 1 + 0.04 sqrt(1/2)/sqrt(8) (a trial found
    the planner charging the aux-loss router's 0.72)."""
    rung = ladder_geometry(4, experts=64, top_k=2, split_factor=4)
    assert (rung.moe.router.score, rung.moe.router.balancing) == ("sigmoid", "loss_free")
    workload = Workload(geometry=rung, global_batch=256, seq_len=2048)
    assert router_imbalance(workload, single_plan(dp=16, ep=8))[0] == pytest.approx(
        1 + 0.04 * math.sqrt(1 / 2) / math.sqrt(8), rel=1e-12)


def _with_capacity(workload: Workload, capacity_factor: float) -> Workload:
    moe = replace(workload.geometry.moe, capacity_factor=capacity_factor)
    return replace(workload, geometry=replace(workload.geometry, moe=moe))


def test_learned_router_imbalance_by_hand():
    # The violation was measured on 64 experts (Wang et al. 2024's 1B model). 128 experts on 8
    # ranks: ln 8 / ln 64 = 1/2 exactly, 16 experts per rank.
    expected = 1 + 0.72 * math.sqrt(1 / 2) / math.sqrt(16)
    assert learned_router_imbalance(128, 8, 0.72) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.12728, abs=1e-5)
    # One expert per rank of the measured model's 64: the expert-level violation itself; all on
    # one rank: balanced.
    assert learned_router_imbalance(64, 64, 0.72) == pytest.approx(1.72, rel=1e-12)
    assert learned_router_imbalance(64, 1, 0.72) == pytest.approx(1.0)
    # Mixtral's 8 experts on 8 ranks: the largest of 8 loads, not of the measured 64:
    # 1 + 0.72 sqrt(ln 8 / ln 64) = 1 + 0.72 / sqrt(2) (it read 1.72 when the 8 were taken
    # as the measured model's experts; a trial).
    assert learned_router_imbalance(8, 8, 0.72) == pytest.approx(1 + 0.72 / math.sqrt(2))
    assert learned_router_imbalance(8, 8, 0.72, measured_experts=8) == pytest.approx(1.72)
    # More experts per rank average the load out (1/sqrt(experts per rank)).
    loads = learned_router_imbalance(64, np.array([2, 4, 8, 16, 32]), 0.72)
    assert np.all(np.diff(loads) > 0)


def test_routed_load_factor_per_regime_by_hand():
    plans = single_plan(dp=16, ep=8)
    # megatron-core balances a learned router with the auxiliary loss (MaxVio 0.72):
    # 64 experts on 8 ranks -> 1 + 0.72 sqrt(ln 8 / ln 64) / sqrt(8) = 1 + 0.72 sqrt(1/2)/sqrt(8)
    learned = 1 + 0.72 * math.sqrt(0.5) / math.sqrt(8)
    assert learned == pytest.approx(1.18)
    assert routed_load_factor(_moe(), plans)[0] == pytest.approx(learned, rel=1e-12)
    assert routed_load_factor(_moe(routing="balanced"), plans)[0] == 1.0
    assert routed_load_factor(_moe(routing="unknown"), plans)[0] == 1.0
    # Token drop caps every expert at capacity_factor x the even share ...
    drop = _moe(routing="token_drop")
    assert routed_load_factor(drop, plans)[0] == 1.0  # unstated capacity factor: 1.0
    assert routed_load_factor(_with_capacity(drop, 1.1), plans)[0] == pytest.approx(1.1)
    assert routed_load_factor(_with_capacity(drop, 3.0), plans)[0] == pytest.approx(learned)
    # ... and padding makes every expert compute exactly its capacity.
    padded = _with_capacity(replace(drop, pad_to_capacity=True), 1.5)
    assert routed_load_factor(padded, plans)[0] == 1.5
    # A stated imbalance replaces the derived one; torchtitan's bias balancing (MaxVio 0.04).
    assert routed_load_factor(_moe(routing_imbalance=1.4), plans)[0] == 1.4
    assert routed_load_factor(_with_capacity(replace(drop, routing_imbalance=1.4), 2.0),
                              plans)[0] == 1.4
    torchtitan = 1 + 0.04 * math.sqrt(0.5) / math.sqrt(8)
    assert routed_load_factor(_moe(stack="torchtitan"), plans)[0] == pytest.approx(torchtitan)


def test_host_sync_unless_drop_and_pad_on_the_alltoall_dispatcher():
    assert expert_counts_reach_host(_moe())  # dropless: before the expert all-to-all
    assert expert_counts_reach_host(_moe(routing="balanced"))
    # A capacity without padding still sizes its output on the host (before_permutation_1).
    assert expert_counts_reach_host(_moe(routing="token_drop"))
    assert not expert_counts_reach_host(_moe(routing="token_drop", pad_to_capacity=True))
    # DeepEP's normal dispatch waits on the host for the received per-expert counts.
    assert expert_counts_reach_host(_moe(routing="token_drop", dispatcher="deepep"))
    assert not expert_counts_reach_host(_moe(stack="torchtitan"))
    with pytest.raises(MosaicInputError, match="pad_to_capacity with dispatcher deepep"):
        _moe(routing="token_drop", pad_to_capacity=True, dispatcher="deepep")
    with pytest.raises(MosaicInputError, match=r"routing_imbalance 0\.9"):
        _moe(routing_imbalance=0.9)


def test_step_time_adds_the_busiest_ranks_extra_routed_time_by_hand():
    machine = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4), "bf16")
    plan = single_plan(pp=2, dp=16, ep=8, micro_batch=2)
    balanced = predict_step(_moe(routing="balanced"), plan, machine, CALIBRATION)
    skewed = predict_step(_moe(routing_imbalance=1.5), plan, machine, CALIBRATION)
    even = balanced.analytic_breakdown_s
    routed = even["compute_experts"][0] + even["ep_all_to_all"][0]
    extra = skewed.analytic_breakdown_s["expert_load_imbalance"][0]
    assert balanced.analytic_breakdown_s["expert_load_imbalance"][0] == 0.0
    assert extra == pytest.approx(0.5 * routed, rel=1e-12)
    # Same host sync (both sync), so the step differs by the extra load and its share of
    # the pipeline bubble: 256 / (16·2) = 8 micro-batches, bubble (pp − 1)/8 = 1/8 (Eq. 12).
    assert skewed.analytic_breakdown_s["dispatch_floor"][0] == 0.0
    assert skewed.analytic_step_time_s[0] - balanced.analytic_step_time_s[0] == pytest.approx(
        extra * (1 + 1 / 8), rel=1e-9)
    assert skewed.routed_expert_s[0] == pytest.approx(1.5 * balanced.routed_expert_s[0])


def test_stack_router_balancing_traits():
    assert get_stack("megatron-core").router_balancing == "aux_loss"
    assert get_stack("megatron-bridge").router_balancing == "aux_loss"
    assert get_stack("torchtitan").router_balancing == "loss_free"
    assert get_stack("paper-nemo").router_balancing == "loss_free"


def test_capacity_sweep_records_carry_their_capacity_factor():
    records = {r.id: r for r in load_run_records(EXTRA_RUNS).records}
    prefix = "xtuner-qwen3-235b-a22b-h800-256-tp4-ep8-pp8-vpp4-deepep-cap"
    for cap in (1, 2, 3, 5):
        workload = records[f"{prefix}{cap}"].workload
        assert workload.geometry.moe.capacity_factor == cap
        assert workload.routing == "token_drop" and not workload.pad_to_capacity
    # Megatron-Bridge 25.09 token-drop recipes pad to capacity (apply_moe_token_drop).
    settings, matched = recipe_settings(RecipeQuery(
        stack="megatron-bridge", software="NeMo 25.09 container / Megatron-Bridge",
        release=(25, 9), device_name="H100-SXM-80GB", generation="hopper",
        precision="fp8-cs", moe=True, layers=48, d_model=2048, experts=128))
    assert (settings["pad_to_capacity"], settings["routing"]) == (True, "token_drop")
    assert any("apply_moe_token_drop" in recipe.source for recipe in matched)


def test_job_fields_round_trip(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("""
model: {layers: 4, d_model: 512, heads: 8, vocab: 32000, activation: swiglu,
        moe: {experts: 64, top_k: 2, expert_ffn: 512, capacity_factor: 1.25}}
batch: {global_seqs: 256, seq_len: 2048, micro_seqs: 2}
parallelism: {tp: 1, pp: 1, ep: 8, dp: 16}
performance: {routing: token_drop, pad_to_capacity: true, routing_imbalance: 1.3}
hardware: {system: p6-b200.48xlarge}
""")
    spec = load_job(job)
    assert spec.workload.pad_to_capacity and spec.workload.routing_imbalance == 1.3
    performance = job_document(spec)["performance"]
    assert performance["pad_to_capacity"] is True and performance["routing_imbalance"] == 1.3
    assert routed_load_factor(spec.workload, spec.plan)[0] == 1.25


def test_routing_assumptions_name_the_defaults():
    from mosaic.perf.routing_load import routing_assumptions

    (derived,) = routing_assumptions(_moe())
    assert "aux_loss" in derived and "0.72" in derived
    # The derived value is a trained router's; early training from scratch is flagged.
    assert "trained router" in derived and "Megatron-Core MoE README" in derived
    # Token drop at the even share never reads the imbalance; its unstated capacity is 1.0.
    (capacity,) = routing_assumptions(_moe(routing="token_drop"))
    assert "capacity_factor not stated" in capacity and "1 assumed" in capacity
    assert len(routing_assumptions(_with_capacity(_moe(routing="token_drop"), 2.0))) == 1
    assert routing_assumptions(_moe(routing="balanced")) == []
    assert routing_assumptions(_moe(routing_imbalance=1.2)) == []


def test_a_capacity_factor_the_routing_does_not_read_is_named():
    """Only token_drop has a capacity (routed_load_factor): under every other regime a
    stated capacity factor changes nothing, and the assumptions say so."""
    from mosaic.perf.routing_load import routing_assumptions

    plans = single_plan(dp=16, ep=8)
    for routing in ("dropless", "balanced", "unknown"):
        stated = _with_capacity(_moe(routing=routing), 0.5)
        assert (routed_load_factor(stated, plans)[0]
                == routed_load_factor(_moe(routing=routing), plans)[0])
        (unread,) = [line for line in routing_assumptions(stated) if "capacity" in line]
        assert unread.startswith(f"model.moe.capacity_factor 0.5 not read: routing is {routing}")
        assert "performance.routing=token_drop" in unread
    # token_drop reads it: 0.5 caps the busiest rank (min(0.5, imbalance)), no such line
    drop = _with_capacity(_moe(routing="token_drop"), 0.5)
    assert routed_load_factor(drop, plans)[0] == 0.5
    assert not any("not read" in line for line in routing_assumptions(drop))


def test_perf_names_a_capacity_factor_set_under_dropless_routing():
    """`mosaic perf examples/appendix_e.yaml --set moe.capacity_factor=0.5` (dropless) gave
    the same step with no word that the 0.5 was dropped."""
    spec = load_job(EXAMPLES / "appendix_e.yaml", ["moe.capacity_factor=0.5"])
    assert spec.workload.routing == "dropless"
    assert any(line.startswith("model.moe.capacity_factor 0.5 not read: routing is dropless")
               for line in spec.assumptions)


def test_capacity_sweep_load_never_exceeds_the_per_expert_cap_by_hand():
    # XTuner tp4 ep8 sweep (Megatron-LM @ 6a6cd478): each rank routes its SP shard,
    # 4096 / tp 4 = 1024 tokens; get_capacity = ceil(1024 * 8 / 128 * cf) = 64 cf per expert
    # per source rank; 8 source ranks (etp 1) -> at most 512 cf per expert, and the even share
    # is 8 * 1024 * 8 / 128 = 512: no expert, hence no rank, exceeds cf x the even share.
    records = {r.id: r for r in load_run_records(EXTRA_RUNS).records}
    prefix = "xtuner-qwen3-235b-a22b-h800-256-tp4-ep8-pp8-vpp4-deepep-cap"
    for cap in (1, 2, 3, 5):
        capacity = math.ceil(1024 * 8 / 128 * cap)
        assert capacity == 64 * cap and 8 * capacity == 512 * cap
        workload = records[f"{prefix}{cap}"].workload
        plans = single_plan(tp=4, pp=8, dp=8, ep=8)
        # However imbalanced the router is stated to be, the load stops at the capacity
        # (at capacity 1, the even share: routed load cannot slow that run).
        for stated in (1.5, 4.0, 8.0):
            load = routed_load_factor(replace(workload, routing_imbalance=stated), plans)[0]
            assert load == pytest.approx(min(cap, stated))


def test_a_stated_imbalance_is_bounded_by_ep_and_by_experts_over_top_k():
    workload = _moe()
    moe = workload.geometry.moe
    # one EP rank receives at most every routed copy: ep times the even share
    stated = replace(workload, routing_imbalance=3.0)
    loads = router_imbalance(stated, concatenate_plans([single_plan(dp=8, ep=ep)
                                                        for ep in (1, 2, 8)]))
    assert loads.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(MosaicInputError, match="at most experts/top_k"):
        replace(workload, routing_imbalance=moe.experts / moe.top_k + 1)


def test_the_busiest_rank_saves_its_routed_copies():
    """Drop-and-pad at capacity 1.5: every expert computes 1.5x the even share, and saves
    1.5x the expert inputs and intermediates; the rest of the MoE block is unchanged."""
    from mosaic.perf.memory import moe_block_activation_bytes
    from mosaic.perf.shapes import expert_copies
    plans = single_plan(dp=16, ep=8)
    even = _with_capacity(_moe(routing="balanced"), 1.5)
    padded = _with_capacity(replace(_moe(routing="token_drop"), pad_to_capacity=True), 1.5)
    geometry = even.geometry
    copies = expert_copies(even, plans)[0]
    width = geometry.moe.expert_ffn
    per_copy = 2 * geometry.d_model + width * (2 * 2 + 2)  # input, SwiGLU gate/up and output
    extra = 0.5 * copies * per_copy
    assert (moe_block_activation_bytes(padded, plans)[0]
            - moe_block_activation_bytes(even, plans)[0]) == pytest.approx(extra, rel=1e-12)


def _with_router(workload: Workload, **router) -> Workload:
    from mosaic.arch import RouterConfig

    moe = replace(workload.geometry.moe, router=RouterConfig(**router))
    return replace(workload, geometry=replace(workload.geometry, moe=moe))


def test_a_stated_router_balancing_overrides_the_stacks():
    """DeepSeek-V3's expert bias on a megatron-core (aux_loss) job: the imbalance is the
    loss-free router's (MaxVio 0.04), by hand: 64 experts on 8 ranks, ln 8 / ln 64 = 1/2."""
    plans = single_plan(dp=16, ep=8)
    stated = _with_router(_moe(), score="sigmoid", balancing="loss_free")
    expected = 1 + 0.04 * math.sqrt(1 / 2) / math.sqrt(8)
    assert router_imbalance(stated, plans)[0] == pytest.approx(expected, rel=1e-12)
    assert router_imbalance(_moe(), plans)[0] == pytest.approx(
        1 + 0.72 * math.sqrt(1 / 2) / math.sqrt(8), rel=1e-12)
    # a router stating only its scores keeps the stack's balancing
    unstated = _with_router(_moe(), score="sigmoid")
    assert router_imbalance(unstated, plans)[0] == router_imbalance(_moe(), plans)[0]
    from mosaic.perf.routing_load import routing_assumptions

    (note,) = routing_assumptions(stated)
    assert "the model's loss_free" in note and "0.04" in note


def test_group_limited_routing_bounds_the_domains_a_token_reaches_by_hand():
    """DeepSeek-V3's router: 256 experts in 8 groups of 32, a token's experts in its top 4
    groups. EP ranks hold consecutive experts, so over D domains a group lies on ceil(D/8)
    of them when 8 and D divide one another, one more otherwise: D = 8 -> 4; D = 16 (a group
    is two nodes) -> 8; D = 4 -> 4 (every domain); D = 3 (a group can straddle two) ->
    min(3, 4 x 2) = 3. A stated max_nodes_per_token wins; no groups, no bound."""
    from mosaic.arch import MoEConfig, RouterConfig
    from mosaic.perf.routing_load import max_domains_per_token

    base = _moe()
    router = RouterConfig(score="sigmoid", groups=8, top_groups=4)
    moe = replace(base.geometry.moe, experts=256, top_k=8, router=router)
    assert isinstance(moe, MoEConfig)
    limited = replace(base, geometry=replace(base.geometry, moe=moe))
    domains = np.array([8, 16, 4, 3, 1])
    assert max_domains_per_token(limited, domains).tolist() == [4, 8, 4, 3, 1]
    assert max_domains_per_token(replace(limited, max_nodes_per_token=2), domains).tolist() \
        == [2] * 5
    assert max_domains_per_token(base, domains) is None
    with pytest.raises(MosaicInputError, match=r"must divide moe\.experts"):
        replace(moe, experts=100)
    with pytest.raises(MosaicInputError, match="exceeds the 4 experts"):
        replace(moe, router=RouterConfig(groups=64, top_groups=1))
    with pytest.raises(MosaicInputError, match="set together"):
        RouterConfig(groups=8)


def test_a_group_limited_router_costs_a_hybridep_dispatch_as_node_limited_routing():
    """DeepSeek-V3 on 8 nodes of 8 GPUs (EP 64): one group per node, so the router's top 4 of
    8 groups cost the dispatch exactly as max_nodes_per_token 4 does (DeepSeek-V3 report
    Sec. 3.2.2), and less than unrestricted routing."""
    from mosaic.arch import RouterConfig
    from mosaic.perf.layer_costs import dispatch_all_to_all_s

    geometry = ladder_geometry(4, experts=256, top_k=8, split_factor=4)
    grouped = replace(geometry, moe=replace(geometry.moe, router=RouterConfig(
        score="sigmoid", groups=8, top_groups=4)))
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=8), "bf16")
    plan = single_plan(dp=64, ep=64, micro_batch=1)
    common = dict(global_batch=512, seq_len=4096, dispatcher="hybridep")
    by_router = dispatch_all_to_all_s(machine, Workload(geometry=grouped, **common), plan)
    stated = dispatch_all_to_all_s(
        machine, Workload(geometry=geometry, max_nodes_per_token=4, **common), plan)
    free = dispatch_all_to_all_s(machine, Workload(geometry=geometry, **common), plan)
    assert by_router[0] == pytest.approx(stated[0], rel=1e-12)
    assert by_router[0] < free[0]


def test_padding_without_token_drop_is_refused():
    """pad_to_capacity with dropless routing was accepted silently (a fuzz trial): there is
    no capacity to pad to."""
    with pytest.raises(MosaicInputError, match="pad_to_capacity with routing dropless"):
        _moe(pad_to_capacity=True)
