"""Layout search: hand-counted enumerations, pins, vectorised = single-plan, ranking, reasons."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import Geometry, MoEConfig, ladder_geometry
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.constraints import first_reason, plan_violations
from mosaic.perf.layouts import (
    LayoutLimits,
    best_layout,
    candidate_plans,
    divisors,
    enumerate_plans,
    fits_in_memory,
    search_layouts,
)
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import Checkpointing, Sharding
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload
from mosaic.units import GIB

CALIBRATION = default_calibration()
PINNED_MODES = {"sharding": ("zero1",), "checkpointing": ("none",)}


def b200_machine(nodes: int):
    return machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=nodes), "bf16")


def tiny_dense(global_batch: int = 8) -> Workload:
    """6 layers (pp ∈ {1, 2} on 8 GPUs), 4 heads (tp ∈ {1, 2, 4})."""
    geometry = Geometry(layers=6, d_model=64, heads=4, kv_heads=4, head_dim=16, ffn=64,
                        vocab=256)
    return Workload(geometry=geometry, global_batch=global_batch, seq_len=2048)


def tiny_moe() -> Workload:
    geometry = Geometry(layers=4, d_model=64, heads=4, kv_heads=4, head_dim=16, ffn=64,
                        vocab=256, moe=MoEConfig(experts=4, top_k=2, expert_ffn=32))
    return Workload(geometry=geometry, global_batch=64, seq_len=2048)


def moe_workload(global_batch: int = 256, seq_len: int = 2048) -> Workload:
    return Workload(geometry=ladder_geometry(4, experts=64, top_k=2, split_factor=4),
                    global_batch=global_batch, seq_len=seq_len)


@pytest.fixture(scope="module")
def q4_search():
    """Every layout of the paper's q=4 validation model on 4 p6-b200 nodes (Sec. 7.2)."""
    return search_layouts(moe_workload(), b200_machine(4), CALIBRATION, LayoutLimits())


def test_divisors():
    assert divisors(12).tolist() == [1, 2, 3, 4, 6, 12]
    assert divisors(1).tolist() == [1]


def test_dense_enumeration_count_by_hand():
    workload = tiny_dense()
    limits = LayoutLimits(micro_batches=(1, 2), **PINNED_MODES)
    candidates = candidate_plans(workload, 8, 8, limits)
    # tp ∈ {1, 2, 4} (≤ heads), (pp, vpp) ∈ {(1, 1), (2, 1), (2, 2), (2, 4)}, cp = ep = etp
    # = 1, micro-batch ∈ {1, 2}, one sharding, one checkpointing mode.
    assert len(candidates) == 3 * 4 * 2
    valid = enumerate_plans(workload, 8, 8, limits)
    # pp·vpp | 6 leaves vpp = 1; dp·mbs | 8 drops only tp = pp = 1 (dp = 8) with mbs = 2.
    assert len(valid) == 3 * 2 * 2 - 1
    assert set(valid.dp.tolist()) == {8, 4, 2, 1}
    assert np.array_equal(valid.dp * valid.tp * valid.pp * valid.cp, np.full(len(valid), 8))
    assert np.array_equal(valid.sequence_parallel, valid.tp > 1)


def test_moe_enumeration_pairs_expert_tp_with_tp():
    limits = LayoutLimits(tp=(1, 2), pp=1, micro_batches=(1,), **PINNED_MODES)
    plans = enumerate_plans(tiny_moe(), 8, 8, limits)
    # (tp, etp) ∈ {(1, 1), (2, 1), (2, 2)} × ep ∈ divisors(4) = {1, 2, 4}; etp·ep | 8 always.
    assert len(plans) == 3 * 3
    assert set(zip(plans.tp.tolist(), plans.etp.tolist(), strict=True)) == {
        (1, 1), (2, 1), (2, 2)}
    assert set(plans.ep.tolist()) == {1, 2, 4}


def test_rejected_counts_by_rule():
    workload = tiny_dense()
    search = search_layouts(workload, b200_machine(1), CALIBRATION,
                            LayoutLimits(micro_batches=(1, 2), **PINNED_MODES))
    counts = search.rejected_counts()
    assert counts == {"pp·vpp={pp}·{vpp} must divide layers=6": 3 * 2 * 2,
                      "dp·micro_batch={dp}·{micro_batch} must divide global_batch=8": 1}
    assert sum(counts.values()) == search.n_candidates - search.n_plans
    violations = plan_violations(workload, search.candidates, 8)
    for plan, reason in search.rejected_examples(limit=5):
        index = next(i for i in range(search.n_candidates)
                     if search.candidates.row(i) == plan)
        assert reason == first_reason(violations, search.candidates, index)
    assert search.rule_example("dp·micro_batch={dp}·{micro_batch} must divide "
                               "global_batch=8") == "dp·micro_batch=8·2 must divide global_batch=8"


def test_hsdp_shards_inside_one_domain():
    limits = LayoutLimits(tp=2, pp=1, ep=1, micro_batches=(1,), sharding=("hsdp", "fsdp"),
                          checkpointing=("none",))
    plans = enumerate_plans(moe_workload(), 16, 8, limits)
    hsdp = plans.sharding == Sharding.HSDP
    # dp = 16/2 = 8; a domain of 8 GPUs holds 8/(tp·cp) = 4 data-parallel ranks.
    assert plans.hsdp_shard[hsdp].tolist() == [4] * int(hsdp.sum())
    assert np.array_equal(plans.hsdp_shard[~hsdp], plans.dp[~hsdp])


def test_hsdp_with_one_replica_is_not_listed_beside_fsdp():
    # 8 GPUs in one domain, tp = 1: the HSDP shard group is all 8 data-parallel ranks, one
    # replica, the FSDP plan itself; without FSDP among the modes it stays.
    limits = LayoutLimits(tp=1, pp=1, ep=1, micro_batches=(1,), sharding=("hsdp", "fsdp"),
                          checkpointing=("none",))
    both = enumerate_plans(moe_workload(), 8, 8, limits)
    assert both.sharding.tolist() == [Sharding.FSDP]
    only_hsdp = enumerate_plans(moe_workload(), 8, 8, LayoutLimits(
        tp=1, pp=1, ep=1, micro_batches=(1,), sharding=("hsdp",), checkpointing=("none",)))
    assert only_hsdp.sharding.tolist() == [Sharding.HSDP] and only_hsdp.hsdp_shard[0] == 8


@pytest.mark.parametrize("stack", ["hf-transformers", "fms-fsdp"])
def test_block_level_selective_is_not_listed_beside_full(stack):
    """On a stack whose selective checkpointing recomputes whole blocks (trait
    selective_recompute: blocks) it is full checkpointing under another name: the search
    listed every such layout twice with the same prediction (a trial); without full among the
    modes it stays."""
    workload = replace(tiny_dense(), stack=stack)
    limits = LayoutLimits(tp=1, pp=1, ep=1, micro_batches=(1,), sharding=("fsdp",),
                          checkpointing=("none", "selective", "full"))
    both = enumerate_plans(workload, 8, 8, limits)
    assert sorted(both.checkpointing.tolist()) == [Checkpointing.NONE, Checkpointing.FULL]
    only_selective = enumerate_plans(workload, 8, 8, replace(limits,
                                                            checkpointing=("selective",)))
    assert only_selective.checkpointing.tolist() == [Checkpointing.SELECTIVE]
    # where selective recomputes something else, both stay
    megatron = enumerate_plans(tiny_dense(), 8, 8, replace(limits, sharding=("zero1",)))
    assert len(megatron) == 3


def test_pins_and_limits_are_respected():
    limits = LayoutLimits(max_tp=2, pp=(2, 4), ep=(4, 8), micro_batches=(2,),
                          sharding=("zero1", "fsdp"), checkpointing=("full",))
    plans = enumerate_plans(moe_workload(), 32, 8, limits)
    assert len(plans) > 0
    assert set(plans.tp.tolist()) <= {1, 2}
    assert set(plans.pp.tolist()) <= {2, 4}
    assert set(plans.ep.tolist()) <= {4, 8}
    assert set(plans.micro_batch.tolist()) == {2}
    assert set(plans.sharding.tolist()) == {int(Sharding.ZERO1), int(Sharding.FSDP)}
    assert set(plans.checkpointing.tolist()) == {int(Checkpointing.FULL)}
    assert np.all(plans.etp <= plans.tp) and np.all(plans.tp % plans.etp == 0)


def test_default_tp_is_capped_by_the_domain_and_cp_by_sequence_length():
    short = enumerate_plans(moe_workload(), 32, 8, LayoutLimits(**PINNED_MODES))
    assert set(short.tp.tolist()) == {1, 2, 4, 8}
    assert set(short.cp.tolist()) == {1}
    long = enumerate_plans(moe_workload(seq_len=16384), 32, 8,
                           LayoutLimits(**PINNED_MODES))
    assert set(long.cp.tolist()) == {1, 2, 4, 8}
    assert set(enumerate_plans(moe_workload(), 32, 4, LayoutLimits(**PINNED_MODES))
               .tp.tolist()) == {1, 2, 4}


def test_vectorised_search_equals_single_plan_path(q4_search):
    machine = b200_machine(4)
    workload = moe_workload()
    rng = np.random.default_rng(0)
    sample = rng.choice(q4_search.n_plans, size=60, replace=False)
    for i in sample:
        alone = predict_step(workload, q4_search.plans.take(int(i)), machine, CALIBRATION)
        for name in ("step_time_s", "memory_bytes", "mfu"):
            np.testing.assert_allclose(getattr(alone, name)[0],
                                       getattr(q4_search.prediction, name)[i], rtol=1e-9)


def test_chunked_evaluation_equals_one_call(q4_search):
    calls = []
    chunked = search_layouts(moe_workload(), b200_machine(4), CALIBRATION, LayoutLimits(),
                             chunk_plans=997, progress=lambda done, total: calls.append(
                                 (done, total)))
    assert calls[-1] == (q4_search.n_plans, q4_search.n_plans)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    for name in ("step_time_s", "memory_bytes", "mfu", "overshoot_bytes"):
        np.testing.assert_array_equal(getattr(chunked.prediction, name),
                                      getattr(q4_search.prediction, name))
    assert set(chunked.prediction.breakdown_s) == set(q4_search.prediction.breakdown_s)
    np.testing.assert_array_equal(chunked.ranking, q4_search.ranking)


def test_ranking_is_sorted_and_feasible(q4_search):
    ranking = q4_search.ranking
    assert q4_search.n_feasible > 0
    assert np.all(q4_search.prediction.feasible[ranking])
    throughput = q4_search.prediction.tokens_per_s[ranking]
    assert np.all(np.diff(throughput) <= 0)
    assert q4_search.n_feasible + q4_search.out_of_memory().size == q4_search.n_plans


def test_best_layout_is_rank_one(q4_search):
    plan, prediction = best_layout(moe_workload(), b200_machine(4), CALIBRATION)
    top = int(q4_search.ranking[0])
    assert plan == q4_search.plans.row(top)
    assert prediction.step_time_s.shape == (1,)
    assert prediction.step_time_s[0] == q4_search.prediction.step_time_s[top]
    assert prediction.breakdown_s["optimizer"][0] == (
        q4_search.prediction.breakdown_s["optimizer"][top])


@pytest.fixture(scope="module")
def tight_search():
    """The q=8 rung on one node: most layouts cannot hold its experts."""
    workload = Workload(geometry=ladder_geometry(8, experts=64, top_k=2, split_factor=4),
                        global_batch=64, seq_len=2048)
    return workload, search_layouts(workload, b200_machine(1), CALIBRATION, LayoutLimits())


def test_memory_first_best_layout_matches_the_full_search(tight_search):
    workload, search = tight_search
    machine = b200_machine(1)
    fits = fits_in_memory(workload, search.plans, machine, CALIBRATION)
    np.testing.assert_array_equal(fits, search.prediction.feasible)
    plan, prediction = best_layout(workload, machine, CALIBRATION)
    assert plan == search.plans.row(int(search.ranking[0]))
    assert prediction.mfu[0] == search.prediction.mfu[search.ranking[0]]


def test_out_of_memory_reason_in_gib(tight_search):
    _, search = tight_search
    oom = search.out_of_memory()
    assert oom.size > 0 and search.n_feasible > 0
    overshoot = search.prediction.overshoot_bytes[oom]
    assert np.all(overshoot > 0) and np.all(np.diff(overshoot) >= 0)
    reason = search.oom_reason(int(oom[0]))
    assert reason.startswith(f"out of memory by {overshoot[0] / GIB:.2f} GiB")
    assert f"{search.capacity_bytes / GIB:.2f} GiB per GPU" in reason
    parts = {name: float(bytes_[oom[0]])
             for name, bytes_ in search.prediction.memory_breakdown_bytes.items()}
    biggest = max(parts, key=parts.__getitem__)
    assert f"largest: {biggest} {parts[biggest] / GIB:.1f} GiB" in reason


def test_nothing_fits_gives_none():
    huge = Workload(geometry=ladder_geometry(12, experts=96, top_k=2, split_factor=4),
                    global_batch=64, seq_len=2048)
    assert best_layout(huge, b200_machine(1), CALIBRATION) is None


def test_no_valid_plan_is_an_empty_search():
    workload = tiny_dense(global_batch=3)
    limits = LayoutLimits(tp=1, pp=1, **PINNED_MODES)
    search = search_layouts(workload, b200_machine(1), CALIBRATION, limits)
    assert search.n_plans == 0 and search.n_feasible == 0
    assert search.prediction.step_time_s.shape == (0,)
    assert sum(search.rejected_counts().values()) == search.n_candidates
    assert best_layout(workload, b200_machine(1), CALIBRATION, limits) is None


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"tp": 0}, "layout tp=0"),
        ({"pp": (2, True)}, "layout pp=True"),
        ({"max_tp": 0}, "layout max_tp=0"),
        ({"micro_batches": ()}, "layout micro_batches: give at least one value"),
        ({"sharding": ("zero9",)}, "unknown sharding 'zero9'"),
        ({"checkpointing": ("partial",)}, "unknown checkpointing 'partial'"),
    ],
)
def test_bad_limits_name_the_field(kwargs, fragment):
    with pytest.raises(MosaicInputError, match=fragment):
        LayoutLimits(**kwargs)


def test_pins_that_leave_no_pair_are_explained():
    with pytest.raises(MosaicInputError, match="vpp > 1 needs pp > 1"):
        candidate_plans(tiny_dense(), 8, 8, LayoutLimits(pp=1, vpp=2))
    with pytest.raises(MosaicInputError, match="etp must divide tp"):
        candidate_plans(tiny_moe(), 8, 8, LayoutLimits(tp=1, etp=2))


def test_uneven_stages_enumeration_by_hand():
    # 7 layers on 4 GPUs, tp = cp = 1, vpp = 1, one micro-batch size and mode: even stages
    # allow only pp = 1 (gcd(4, 7) = 1); uneven ones add pp = 2 (chunks of 4 + 3 blocks) and
    # pp = 4 (2 + 2 + 2 + 1).
    geometry = Geometry(layers=7, d_model=64, heads=4, kv_heads=4, head_dim=16, ffn=64,
                        vocab=256)
    even = Workload(geometry=geometry, global_batch=8, seq_len=2048)
    uneven = Workload(geometry=geometry, global_batch=8, seq_len=2048,
                      uneven_pipeline_stages=True)
    limits = LayoutLimits(tp=1, cp=1, vpp=1, micro_batches=(1,), **PINNED_MODES)
    assert enumerate_plans(even, 4, 8, limits).pp.tolist() == [1]
    assert sorted(enumerate_plans(uneven, 4, 8, limits).pp.tolist()) == [1, 2, 4]
    # pp = 4 with vpp = 2: 8 chunks of ceil(7/8) = 1 block leave the last one empty.
    plans = candidate_plans(uneven, 4, 8, LayoutLimits(tp=1, cp=1, pp=4, vpp=2,
                                                       micro_batches=(1,), **PINNED_MODES))
    reason = first_reason(plan_violations(uneven, plans, 4), plans, 0)
    assert reason is not None and "without blocks" in reason


def test_a_pin_above_its_cap_is_refused_not_silently_kept():
    """`layouts --tp 8 --max-tp 4` ignored --max-tp without a word (a fuzz trial)."""
    from mosaic.errors import MosaicInputError
    from mosaic.perf.layouts import LayoutLimits

    with pytest.raises(MosaicInputError, match="tp 8 exceeds max_tp 4"):
        LayoutLimits(max_tp=4, tp=(2, 8))
    assert LayoutLimits(max_tp=4, tp=(2, 4)).tp == (2, 4)


def test_torchtitan_builds_its_expert_groups_inside_the_fsdp_shard_ranks():
    """torchtitan's parallel_dims: efsdp = dp_shard·cp·tp / (etp·ep) must be whole, so EP
    needs FSDP (or an HSDP shard group holding ep); Megatron folds experts over tp·cp·dp
    whatever the sharding (a trial's top lever, DDP with ep 8, could not start)."""
    from mosaic.perf.plan import single_plan

    moe = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
    cases = {(Sharding.FSDP, None): False, (Sharding.NONE, None): True,
             (Sharding.HSDP, 8): False, (Sharding.HSDP, 4): True}
    for (sharding, shard), broken in cases.items():
        plan = single_plan(ep=8, dp=16, sharding=sharding, hsdp_shard=shard)
        titan = plan_violations(Workload(moe, 64, 4096, stack="torchtitan"), plan, 16)
        reason = first_reason(titan, plan, 0)
        assert (reason is not None and "FSDP shard ranks" in reason) == broken, reason
        megatron = plan_violations(Workload(moe, 64, 4096, stack="megatron-core"), plan, 16)
        # Megatron's own HSDP rule instead: its dp/hsdp_shard = 4 optimizer instances must
        # divide the expert data-parallel size 16/8 = 2 (parallel_state.py)
        refused = first_reason(megatron, plan, 0)
        assert (refused is not None and "optimizer instances" in refused) == (
            (sharding, shard) == (Sharding.HSDP, 4)), refused


def test_megatron_refuses_biased_moe_linears_beyond_etp_one():
    """Megatron-Core's TransformerConfig: "Bias in Moe is only supported when ETP==1"; an
    attention-output or expert bias turns add_bias_linear on (gpt-oss, Phi-3.5-MoE). A
    trial's gpt-oss export at tp 2 (etp = tp) stopped at start-up; torchtitan has no such
    check."""
    from dataclasses import replace

    from mosaic.perf.plan import single_plan

    base = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
    biased = replace(base, moe=replace(base.moe, expert_bias=True))
    for etp, broken in ((1, False), (2, True)):
        plan = single_plan(tp=2, etp=etp, ep=4, dp=8)
        for geometry, stack, expected in ((biased, "megatron-core", broken),
                                          (biased, "megatron-bridge", broken),
                                          (base, "megatron-core", False),
                                          (biased, "torchtitan", False)):
            reason = first_reason(plan_violations(Workload(geometry, 64, 4096, stack=stack),
                                                  plan, 16), plan, 0)
            assert (reason is not None and "with linear biases" in reason) == expected, (
                etp, stack, reason)



def test_stated_deepep_needs_more_than_one_rank_in_its_group():
    """Megatron-Core's MoEFlexTokenDispatcher asserts "DeepEP dispatcher requires TPxEP > 1"
    over expert-TP x EP (token_dispatcher.py l. 1836 @ d98e8a64dd), and Megatron-Bridge's
    apply_flex_dispatcher_backend sets flex at any EP size; torchtitan raises at ep 1 whatever
    etp. HybridEP has no such assert, and a dispatcher the input left to the stack's default
    is not held to it."""
    from dataclasses import replace

    from mosaic.perf.plan import single_plan
    from mosaic.perf.workload import Dispatcher

    moe = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
    cases = {(1, 1): True, (1, 2): False, (2, 1): False}  # (ep, etp) -> refused
    for (ep, etp), broken in cases.items():
        plan = single_plan(tp=2, etp=etp, ep=ep, dp=8)
        for stack in ("megatron-core", "megatron-bridge", "dualpipe"):
            deepep = Workload(moe, 64, 4096, stack=stack, dispatcher=Dispatcher.DEEPEP)
            reason = first_reason(plan_violations(deepep, plan, 16), plan, 0)
            assert (reason is not None and "asserts TPxEP > 1" in reason) == broken, (
                ep, etp, stack, reason)
            for other in (replace(deepep, dispatcher=Dispatcher.HYBRIDEP),
                          replace(deepep, dispatcher=Dispatcher.ALLTOALL),
                          replace(deepep, dispatcher_stated=False)):
                assert first_reason(plan_violations(other, plan, 16), plan, 0) is None
        # torchtitan's group is EP alone: etp 2 does not make DeepEP launchable at ep 1
        titan = Workload(moe, 64, 4096, stack="torchtitan", dispatcher=Dispatcher.DEEPEP)
        fsdp = single_plan(tp=2, etp=etp, ep=ep, dp=8, sharding=Sharding.FSDP)
        reason = first_reason(plan_violations(titan, fsdp, 16), fsdp, 0)
        assert (reason is not None and "needs ep > 1" in reason) == (ep == 1), (ep, etp, reason)


def test_torchtitan_runs_a_stated_deepep_with_etp_one_only():
    """torchtitan raises NotImplementedError "DeepEP with Expert Tensor Parallelism (ETP) is
    not supported yet" when etp > 1 (models/deepseek_v3/infra/parallelize.py and
    models/llama4/infra/parallelize.py @ 1a36996b8, v0.2.2 73a0e69); Megatron-Core runs
    DeepEP over expert-TP x EP, and torchtitan's all-to-all runs any etp."""
    from dataclasses import replace

    from mosaic.perf.plan import single_plan
    from mosaic.perf.workload import Dispatcher

    moe = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
    titan = Workload(moe, 64, 4096, stack="torchtitan", dispatcher=Dispatcher.DEEPEP)
    megatron = Workload(moe, 64, 4096, stack="megatron-core", dispatcher=Dispatcher.DEEPEP)
    for ep, etp, broken in ((2, 1, False), (8, 1, False), (2, 2, True), (4, 2, True)):
        plan = single_plan(tp=2, etp=etp, ep=ep, dp=8, sharding=Sharding.FSDP,
                           sequence_parallel=False)
        reason = first_reason(plan_violations(titan, plan, 16), plan, 0)
        assert (reason is not None and "runs DeepEP with etp 1 only" in reason) == broken, (
            ep, etp, reason)
        for other in (replace(titan, dispatcher=Dispatcher.ALLTOALL),
                      replace(titan, dispatcher_stated=False), megatron):
            assert first_reason(plan_violations(other, plan, 16), plan, 0) is None, (
                ep, etp, other.stack, other.dispatcher)
    # at ep 1 and etp 2 both rules are broken; the EP one is named first
    plan = single_plan(tp=2, etp=2, ep=1, dp=8, sharding=Sharding.FSDP)
    rules = [v.rule for v in plan_violations(titan, plan, 16) if v.violated[0]]
    assert len(rules) == 2 and "needs ep > 1" in rules[0] and "etp 1 only" in rules[1]


def test_nemo_automodel_runs_deepep_and_hybridep_over_ep_alone():
    """NeMo AutoModel makes its MoEFlexTokenDispatcher (DeepEP and HybridEP alike) only in
    apply_ep, which runs when the EP mesh has more than one rank and asserts
    ep_mesh.size() > 1 (components/moe/parallelizer.py @ 36044ad3d); its dispatcher's group
    is EP alone (tp_size = 1), so etp 2 does not make it launchable at ep 1. Megatron-Core's
    HybridEP has no such check."""
    from dataclasses import replace

    from mosaic.perf.plan import single_plan
    from mosaic.perf.workload import Dispatcher

    moe = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
    cases = {(1, 1): True, (1, 2): True, (2, 1): False, (8, 1): False}  # (ep, etp) -> refused
    for (ep, etp), broken in cases.items():
        # FSDP2 without SP: how AutoModel runs expert parallelism with TP (mesh_utils.py,
        # moe/parallelizer.py)
        plan = single_plan(tp=2, etp=etp, ep=ep, dp=8, sharding=Sharding.FSDP,
                           sequence_parallel=False)
        for dispatcher in (Dispatcher.DEEPEP, Dispatcher.HYBRIDEP):
            automodel = Workload(moe, 64, 4096, stack="nemo-automodel", dispatcher=dispatcher)
            reason = first_reason(plan_violations(automodel, plan, 16), plan, 0)
            assert (reason is not None
                    and f"ep={ep} with the {dispatcher} dispatcher: it needs ep > 1" in reason
                    ) == broken, (ep, etp, dispatcher, reason)
            for other in (replace(automodel, dispatcher=Dispatcher.ALLTOALL),
                          replace(automodel, dispatcher_stated=False)):
                assert first_reason(plan_violations(other, plan, 16), plan, 0) is None
        hybridep = Workload(moe, 64, 4096, stack="megatron-core", dispatcher=Dispatcher.HYBRIDEP)
        assert first_reason(plan_violations(hybridep, plan, 16), plan, 0) is None


def test_nemo_automodel_offers_no_expert_tensor_parallelism():
    """NeMo AutoModel shards routed experts over the EP mesh alone and refuses any TP plan
    that targets them, "routed experts must remain EP-owned" (components/moe/parallelizer.py
    and tp_plan_validation.py @ 36044ad3d): a search on it tries etp 1 only, an etp 2 pin
    is one line, and a job at tp 2, etp 2 is refused while tp 2, etp 1 runs; torchtitan's
    search still pairs tp 2 with etp 2 (test_moe_enumeration_pairs_expert_tp_with_tp)."""
    from dataclasses import replace

    from mosaic.config.job_schema import job_from_document
    from mosaic.errors import InvalidLayoutError
    from mosaic.evaluate.job import predict_job

    limits = LayoutLimits(tp=(1, 2), pp=1, micro_batches=(1,), sharding=("fsdp",),
                          checkpointing=("none",))
    automodel = replace(tiny_moe(), stack="nemo-automodel")
    titan = replace(tiny_moe(), stack="torchtitan")
    assert set(candidate_plans(automodel, 8, 8, limits).etp.tolist()) == {1}
    assert set(candidate_plans(titan, 8, 8, limits).etp.tolist()) == {1, 2}
    with pytest.raises(MosaicInputError,
                       match=r"^layout etp: stack 'nemo-automodel' offers only etp 1$"):
        candidate_plans(automodel, 8, 8, replace(limits, etp=2))

    def job(etp):
        return job_from_document({
            "model": {"layers": 4, "d_model": 1024, "heads": 8, "kv_heads": 8,
                      "head_dim": 128, "ffn": 1024, "vocab": 32000,
                      "moe": {"experts": 16, "top_k": 2, "expert_ffn": 512}},
            "batch": {"global_seqs": 64, "seq_len": 4096},
            "parallelism": {"tp": 2, "etp": etp, "pp": 1, "ep": 4, "sharding": "fsdp"},
            "performance": {"precision": "bf16", "stack": "nemo-automodel"},
            "hardware": {"system": "DGX-H100", "nodes": 2}}, "test")

    assert predict_job(job(1), CALIBRATION).prediction is not None
    with pytest.raises(InvalidLayoutError, match="etp: stack 'nemo-automodel' offers only"):
        predict_job(job(2), CALIBRATION)


def test_a_search_with_deepep_stated_drops_the_layouts_without_an_expert_group():
    """Every layout with ep·etp = 1 is rejected with the DeepEP reason; the same search on
    the all-to-all keeps them."""
    from dataclasses import replace

    from mosaic.perf.workload import Dispatcher

    limits = LayoutLimits(tp=(1, 2), pp=1, micro_batches=(1,), **PINNED_MODES)
    deepep = replace(tiny_moe(), dispatcher=Dispatcher.DEEPEP)
    search = search_layouts(deepep, b200_machine(1), CALIBRATION, limits)
    alltoall = search_layouts(tiny_moe(), b200_machine(1), CALIBRATION, limits)
    # (tp, etp) in {(1, 1), (2, 1), (2, 2)} x ep in {1, 2, 4}: ep = etp = 1 at tp 1 and 2
    rule = next(r for r in search.rejected_counts() if "deepep" in r)
    assert search.rejected_counts()[rule] == 2
    assert alltoall.n_plans - search.n_plans == 2
    assert not np.any((search.plans.ep == 1) & (search.plans.etp == 1))
    assert np.any((alltoall.plans.ep == 1) & (alltoall.plans.etp == 1))
    assert search.rule_example(rule).startswith("etp·ep=1·1 with the deepep dispatcher")


def test_a_layout_under_device_memory_is_refused_by_the_headroom_not_out_of_memory(
        tight_search):
    """Between the usable share and the device's memory a layout is over the planning
    headroom, as perf and explain say; a trial read "out of memory by 0.00 GiB" for a
    layout needing 160.5 of 178.4 GiB. Above the device it is out of memory."""
    from dataclasses import replace as replace_machine

    workload, _ = tight_search
    machine = replace_machine(b200_machine(1), usable_memory_fraction=0.9)
    search = search_layouts(workload, machine, CALIBRATION, LayoutLimits())
    assert search.usable_fraction == 0.9
    memory = search.prediction.memory_bytes
    for index in search.out_of_memory():
        reason = search.oom_reason(int(index))
        overshoot = f"{search.prediction.overshoot_bytes[index] / GIB:.2f} GiB"
        if memory[index] > search.capacity_bytes:
            # the device's shortfall first, then the usable share's, as perf says them
            device = (memory[index] - search.capacity_bytes) / GIB
            assert reason.startswith(f"out of memory by {device:.2f} GiB over the device "
                                     f"({overshoot} over the usable 90%)")
        else:
            under = (search.capacity_bytes - memory[index]) / GIB
            assert reason.startswith(f"over the 90% planning headroom by {overshoot}")
            assert f"{under:.2f} GiB under device memory" in reason
    headroom_only = (memory > 0.9 * search.capacity_bytes) & (memory <= search.capacity_bytes)
    assert headroom_only.any()  # the search has both kinds
    assert (memory > search.capacity_bytes).any()
    assert search.over_headroom().tolist() == [i for i in search.out_of_memory().tolist()
                                               if headroom_only[i]]


def test_per_schedule_interleaving_rule_agrees_between_search_and_single_plans():
    """torchtitan runs one pipeline schedule per local batch: 8 layers on 8 GPUs, global
    batch 64, local_seqs 4. pp 4 x vpp 2 at micro-batch 2 has 64 / (dp·2) >= 8 micro-batches
    a step but 4 / 2 = 2 < pp a schedule (dp 1 with tp 2, dp 2 with tp 1): the two
    rejected candidates, each with its own per-schedule count in its message, which the
    single-plan check gives too; every kept plan predicts as it does alone."""
    geometry = Geometry(layers=8, d_model=64, heads=4, kv_heads=4, head_dim=16, ffn=64,
                        vocab=256)
    workload = Workload(geometry=geometry, global_batch=64, seq_len=2048, stack="torchtitan",
                        local_batch=4)
    machine = b200_machine(1)
    search = search_layouts(workload, machine, CALIBRATION,
                            LayoutLimits(micro_batches=(1, 2), sharding=("fsdp",),
                                         checkpointing=("none",)))
    rule = next(r for r in search.rule_check.rules if "per pipeline schedule" in r)
    assert search.rejected_counts()[rule] == 2
    assert search.rule_example(rule) == (
        "vpp=2 > 1 needs at least pp=4 micro-batches per pipeline schedule; torchtitan runs "
        "one schedule per local batch, of local_seqs/micro_batch=2 (local_seqs=4, "
        "micro_batch=2); with fewer, interleaving cannot shrink the bubble (the stack warns "
        "of it): state vpp 1, a larger local_seqs or a smaller micro-batch")
    for index in range(search.n_candidates):
        alone = search.candidates.take(index)
        reason = first_reason(plan_violations(workload, alone, 8), alone, 0)
        expected = (None if search.rule_check.valid[index]
                    else search.rule_check.message(search.candidates, index))
        assert reason == expected
    # pp 4 x vpp 2 at micro-batch 1 (4 a schedule = pp) is kept
    kept = [search.plans.row(i) for i in range(search.n_plans)]
    assert any(p["pp"] == 4 and p["vpp"] == 2 and p["micro_batch"] == 1 for p in kept)
    for i in range(search.n_plans):
        alone = predict_step(workload, search.plans.take(i), machine, CALIBRATION)
        for name in ("step_time_s", "memory_bytes"):
            np.testing.assert_allclose(getattr(alone, name)[0],
                                       getattr(search.prediction, name)[i], rtol=1e-9)
