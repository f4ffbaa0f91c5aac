"""The DualPipe schedule (deepseek-ai/DualPipe README and example @ 3da1bbe) as the
``dualpipe`` stack runs it, node-limited routing in the hierarchical dispatch, the
communication SMs of DeepEP under EP overlap, and the BF16-moment and FP8-GLU-input
settings. Every expected value is computed by hand."""

from dataclasses import replace
from math import comb
from pathlib import Path

import numpy as np
import pytest
import yaml

from mosaic.arch import count_parameters, ladder_geometry
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import load_calibration
from mosaic.perf.collectives import Interconnect, node_deduplicated_dispatch_time_s
from mosaic.perf.layer_costs import communication_sm_slowdown_s
from mosaic.perf.layouts import LayoutLimits, candidate_plans
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import (
    layer_input_bytes,
    master_weight_bytes,
    moe_block_activation_bytes,
    optimizer_state_bytes,
    rank_parameters,
    stage_activation_bytes,
    stage_parameters,
)
from mosaic.perf.plan import single_plan
from mosaic.perf.routing_load import routed_load_factor
from mosaic.perf.schedule import (
    bubble_fraction,
    in_flight_microbatches,
    mirror_in_flight_microbatches,
    n_microbatches,
    pp_transfers_overlap_compute,
)
from mosaic.perf.step_time import predict_step, shared_rank_vocab_stage_s
from mosaic.perf.workload import Dispatcher, Workload
from mosaic.stacks import stack_for_software

REPO = Path(__file__).resolve().parents[2]
SHARED_RUNS = REPO.parent / "shared" / "calibration" / "published_runs.yaml"
EXTRA_RUNS = REPO / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml"

DENSE = ladder_geometry(4)  # a small dense model; its layer count is set per test
MOE = ladder_geometry(4, experts=64, top_k=4, split_factor=4)


def _workload(stack: str, geometry=MOE, **kwargs) -> Workload:
    return Workload(geometry=geometry, global_batch=256, seq_len=4096, stack=stack, **kwargs)


# --- the schedule ----------------------------------------------------------------------
def test_dualpipe_bubble_is_table_2s_with_f_and_b_equal_f_plus_b_and_w_equal_f():
    pp, n_mb = np.array([16, 8, 2, 1]), np.array([120.0, 20.0, 10.0, 4.0])
    one = np.ones(4, dtype=int)
    # (PP/2 - 1)(F&B + B - 3W) with F&B = F + B, B = 2F, W = F: (PP/2 - 1)·2F, over the
    # steady work n_mb·(F + B) = n_mb·3F.
    expected = [7 * 2 / (3 * 120), 3 * 2 / (3 * 20), 0.0, 0.0]
    assert bubble_fraction(pp, one, n_mb, dualpipe=True) == pytest.approx(expected)
    # 1F1B, Eq. 12: (pp - 1)/n_mb.
    assert bubble_fraction(pp, one, n_mb) == pytest.approx([15 / 120, 7 / 20, 1 / 10, 0.0])


def test_dualpipe_keeps_pp_plus_one_chunks_in_flight_on_every_rank():
    workload = _workload("dualpipe")
    plan = single_plan(pp=16, dp=8, micro_batch=1)  # n_mb = 256/8 = 32, 16 per direction
    assert n_microbatches(workload, plan)[0] == 32
    # DualPipe.step: pp - k chunks of phase 0 and k + 1 of phase 1 (k = the half-rank);
    # phase 0 is the own stage on the first half of the ranks, the mirror on the second.
    expected = {"first": (16, 1), "middle": (15, 2), "last": (1, 16)}
    for stage, (own, mirror) in expected.items():
        assert in_flight_microbatches(workload, plan, stage)[0] == own
        assert mirror_in_flight_microbatches(workload, plan, stage)[0] == mirror
    # 1F1B: pp on the first rank, one on the last, no mirror.
    megatron = _workload("megatron-core")
    assert in_flight_microbatches(megatron, plan, "first")[0] == 16
    assert in_flight_microbatches(megatron, plan, "last")[0] == 1
    assert mirror_in_flight_microbatches(megatron, plan, "first")[0] == 0
    # Never more than a direction's micro-batches; no pipeline, one and no mirror.
    few = single_plan(pp=16, dp=32, micro_batch=1)  # n_mb = 8, 4 per direction
    assert in_flight_microbatches(workload, few, "first")[0] == 4
    flat = single_plan(dp=8)
    assert in_flight_microbatches(workload, flat, "first")[0] == 1
    assert mirror_in_flight_microbatches(workload, flat, "first")[0] == 0


def test_a_dualpipe_rank_holds_its_stage_and_the_mirror_stage():
    geometry = replace(DENSE, layers=8)
    workload = _workload("dualpipe", geometry=geometry)
    plan = single_plan(pp=4, dp=2)  # chunks of 2 blocks; rank 0 holds blocks 0-1 and 6-7
    counts = count_parameters(geometry)
    rank0 = rank_parameters(workload, plan, "first")
    block = counts.attention_per_layer + counts.dense_ffn_per_layer
    assert rank0.dense[0] == pytest.approx(4 * block)
    assert rank0.vocab[0] == pytest.approx(counts.embedding + geometry.vocab * geometry.d_model)
    # The same rank seen as the last stage; 1F1B's first rank holds two blocks, embedding only.
    assert rank_parameters(workload, plan, "last").total[0] == pytest.approx(rank0.total[0])
    one_f_one_b = rank_parameters(_workload("megatron-core", geometry=geometry), plan, "first")
    assert one_f_one_b.dense[0] == pytest.approx(2 * block)
    assert one_f_one_b.total[0] == pytest.approx(
        stage_parameters(geometry, plan, "first").total[0])
    # Without a pipeline there is one copy.
    flat = single_plan(dp=8)
    assert rank_parameters(workload, flat, "first").total[0] == pytest.approx(
        stage_parameters(geometry, flat, "first").total[0])


def test_dualpipe_activations_are_pp_plus_one_stage_units():
    workload = _workload("dualpipe", geometry=replace(DENSE, layers=16))
    megatron = replace(workload, stack="megatron-core")
    plan = single_plan(pp=8, dp=4, micro_batch=1)  # 2 equal blocks per stage, n_mb = 64
    # 1F1B's first stage: 8 micro-batches of its 2 blocks, no LM head.
    one_f_one_b = stage_activation_bytes(megatron, plan, "first")[0]
    # DualPipe's first rank: 8 + 1 chunks of 2 equal blocks, plus the LM head's inputs (the
    # final norm's and the head's, one micro-batch), for it also runs the last stage.
    head_inputs = 2 * layer_input_bytes(workload, plan)[0]
    dualpipe = stage_activation_bytes(workload, plan, "first")[0]
    assert dualpipe == pytest.approx(9 / 8 * one_f_one_b + head_inputs)
    # The same rank read as the last stage: the same bytes.
    assert stage_activation_bytes(workload, plan, "last")[0] == pytest.approx(dualpipe)


def test_the_vocabulary_rank_runs_each_end_for_half_of_the_micro_batches():
    t_first, t_last = np.array([1.0, 1.0]), np.array([3.0, 3.0])
    n_mb, bubble, pp = np.array([10.0, 10.0]), np.array([0.1, 0.1]), np.array([4, 1])
    # pp > 1: 10/2·(1 + 3)·1.1 = 22; one stage runs both every micro-batch: 10·4 = 40.
    assert shared_rank_vocab_stage_s(t_first, t_last, n_mb, bubble, pp) == pytest.approx(
        [22.0, 40.0])


def test_dualpipe_hides_pipeline_transfers_and_1f1b_only_when_interleaved():
    plans = single_plan(pp=4, dp=2)
    assert pp_transfers_overlap_compute(_workload("dualpipe"), plans).all()
    assert not pp_transfers_overlap_compute(_workload("megatron-core"), plans).any()
    assert pp_transfers_overlap_compute(_workload("megatron-core"),
                                        single_plan(pp=4, vpp=2, dp=2)).all()


def test_the_step_reads_the_dualpipe_bubble_and_vocab_terms():
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=4), "bf16")
    workload = _workload("dualpipe", dispatcher="deepep")
    plan = single_plan(pp=8, dp=4, ep=4, micro_batch=1)
    step = predict_step(workload, plan, machine, load_calibration("default"))
    terms = step.analytic_breakdown_s
    n_mb = 256 / 4
    block = sum(v[0] for k, v in terms.items()
                if k not in ("pipeline_bubble", "vocab_stage", "optimizer")
                and not k.startswith("dp_"))
    assert terms["pipeline_bubble"][0] == pytest.approx(3 * 2 / 3 / n_mb * block)
    assert terms["pp_send_recv"][0] == pytest.approx(0.0, abs=1e-12)


# --- node-limited routing and the communication SMs ------------------------------------
IC = Interconnect(
    scale_up_domain_gpus=8, gpus_per_node=8, scale_up_bw_bytes_per_s=100e9,
    scale_out_bw_bytes_per_s=10e9, scale_up_latency_s=2e-6, scale_out_latency_s=10e-6,
    launch_latency_s=5e-6, ring_scale_up_efficiency=1.0, ring_scale_out_efficiency=1.0,
    p2p_scale_up_efficiency=1.0, p2p_scale_out_efficiency=1.0)


def test_node_limited_routing_sends_a_token_to_at_most_m_nodes():
    # DeepSeek-V3: 256 experts over 8 nodes (EP64), top-8, M = 4. The 4 chosen nodes hold
    # 128 experts; a chosen node holds none of the token's 8 with C(96, 8)/C(128, 8); the
    # token touches 4·(1 - that) nodes, 7/8 of them remote.
    token_bytes = 1e9
    remote = 4 * (1 - comb(96, 8) / comb(128, 8)) * 7 / 8
    intra = 8 * 63 / 64 * token_bytes / (100e9 * 153 / 200)
    expected = 5e-6 + 63 * 10e-6 + max(remote * token_bytes / 10e9, intra)
    got = float(node_deduplicated_dispatch_time_s(token_bytes, 8, 256, 64, 1, IC, 4))
    assert got == pytest.approx(expected, rel=1e-12)
    # Unrestricted: 7·(1 - C(224, 8)/C(256, 8)) remote copies, more than the limited 3.18.
    free = 7 * (1 - comb(224, 8) / comb(256, 8))
    assert free > remote
    assert float(node_deduplicated_dispatch_time_s(token_bytes, 8, 256, 64, 1, IC)) == (
        pytest.approx(5e-6 + 63 * 10e-6 + free * token_bytes / 10e9, rel=1e-12))
    # M at or above the nodes spanned changes nothing.
    assert float(node_deduplicated_dispatch_time_s(token_bytes, 8, 256, 64, 1, IC, 8)) == (
        float(node_deduplicated_dispatch_time_s(token_bytes, 8, 256, 64, 1, IC)))


def test_deepep_overlap_runs_the_hidden_compute_on_112_of_132_sms():
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    assert machine.sm_count == 132
    hidden = np.array([1.0, 0.0])
    deepep = _workload("dualpipe", dispatcher=Dispatcher.DEEPEP)
    assert communication_sm_slowdown_s(machine, deepep, hidden) == pytest.approx(
        [20 / 132, 0.0])
    # NCCL's all-to-all: the measured mean slowdown of compute beside a collective
    # (Lee et al. 2025: 18.9%)
    nccl = _workload("dualpipe", dispatcher=Dispatcher.ALLTOALL)
    assert communication_sm_slowdown_s(machine, nccl, hidden) == pytest.approx([0.189, 0.0])


# --- memory: BF16 moments ---------------------------------------------------------------
def test_bf16_moments_halve_the_adam_moments_and_keep_the_fp32_master():
    workload = _workload("dualpipe")
    plan = single_plan(pp=2, dp=4, ep=4)
    params = rank_parameters(workload, plan, "first")
    fp32 = optimizer_state_bytes(workload, params, plan)[0]
    moments = replace(workload, optimizer_dtype="bf16_moments")
    assert optimizer_state_bytes(moments, params, plan)[0] == pytest.approx(fp32 / 2)
    assert master_weight_bytes(moments, params, plan)[0] == pytest.approx(
        master_weight_bytes(workload, params, plan)[0])
    assert master_weight_bytes(moments, params, plan)[0] > 0


def test_fp8_glu_inputs_save_the_gate_and_up_outputs_in_one_byte():
    workload = _workload("dualpipe", precision="fp8")
    plan = single_plan(dp=8, ep=8, micro_batch=1)
    moe = MOE.moe
    # 8 ranks, 4096 tokens each, top-4 of 64 experts: 4·4096 copies land on a rank on
    # average, the learned router's imbalance more on the busiest (perf/routing_load.py);
    # the gate and up outputs are expert_ffn wide each and lose one of their two bytes.
    copies = 4 * 4096 * routed_load_factor(workload, plan)[0]
    saved = copies * 2 * moe.expert_ffn * 1
    assert (moe_block_activation_bytes(workload, plan)[0]
            - moe_block_activation_bytes(replace(workload, fp8_glu_inputs=True), plan)[0]
            ) == pytest.approx(saved)
    with pytest.raises(MosaicInputError, match="fp8_glu_inputs needs precision fp8"):
        _workload("dualpipe", fp8_glu_inputs=True)


def test_a_dualpipe_layout_search_offers_only_even_pipelines():
    workload = _workload("dualpipe", geometry=replace(MOE, layers=12))
    plans = candidate_plans(workload, 48, 8, LayoutLimits())
    # pp divides gcd(48 devices, 12 layers) = 12: 1, 2, 3, 4, 6, 12; DualPipe drops 3.
    assert set(np.unique(plans.pp).tolist()) == {1, 2, 4, 6, 12}
    assert np.all(plans.vpp == 1)
    megatron = candidate_plans(replace(workload, stack="megatron-core"), 48, 8, LayoutLimits())
    assert 3 in set(megatron.pp)


def test_a_dualpipe_job_with_an_odd_pipeline_breaks_a_layout_rule():
    """DualPipe pairs stage r with stage pp - 1 - r ("PP denotes the number of pp stages
    (even)", deepseek-ai/DualPipe README @ 3da1bbe): a job on the stack with pp 3 breaks a
    rule, as the layout search already drops it; pp 1, 2 and 4 do not, nor pp 3 elsewhere."""
    from mosaic.perf.constraints import plan_violations

    # 48 devices, 12 layers; a global batch of 96 divides every dp = 48/pp below
    workload = replace(_workload("dualpipe", geometry=replace(MOE, layers=12)), global_batch=96)

    def broken(stack: str, pp: int) -> list[str]:
        plan = single_plan(pp=pp, dp=48 // pp)
        return [v.rule for v in plan_violations(replace(workload, stack=stack), plan, 48)
                if v.violated[0]]

    assert [rule for rule in broken("dualpipe", 3) if "DualPipe" in rule]
    for pp in (1, 2, 4):
        assert broken("dualpipe", pp) == []
    assert broken("megatron-core", 3) == []


# --- the stack entry ------------------------------------------------------------------------
def test_software_text_naming_dualpipe_maps_to_the_stack_and_nothing_else_moves():
    assert stack_for_software("a trainer with DualPipe and DeepEP").name == "dualpipe"
    for text, stack in (("Megatron-Bridge DeepSeek-V3 recipe", "megatron-bridge"),
                        ("torchtitan deepseek_v3", "torchtitan"),
                        ("NeMo 25.09 DeepSeek-V3", "megatron-core")):
        assert stack_for_software(text).name == stack
    keywords = stack_for_software("dualpipe").keywords
    for path in (SHARED_RUNS, EXTRA_RUNS):
        if not path.exists():
            pytest.skip(f"{path} absent (../shared not checked out)")
        for run in yaml.safe_load(path.read_text())["runs"]:
            text = (run.get("software") or "").casefold()
            assert not any(k in text for k in keywords), run["id"]


def test_the_dualpipe_schedule_overlaps_ep_without_stating_it():
    """DualPipe pairs a forward and a backward chunk so that each one's all-to-all hides
    behind the other's compute (its README): a dualpipe job that states no ep_overlap costs
    its all-to-alls as an ep_overlap job does (a trial found them all exposed)."""
    from dataclasses import replace as with_

    from mosaic.arch import ladder_geometry
    from mosaic.hardware import Cluster, get_system
    from mosaic.perf.calibration import default_calibration
    from mosaic.perf.machine import machine_for
    from mosaic.perf.plan import single_plan
    from mosaic.perf.step_time import predict_step
    from mosaic.perf.workload import Workload

    workload = Workload(geometry=ladder_geometry(8, 64, 4, 4), global_batch=256,
                        seq_len=4096, stack="dualpipe", dispatcher="deepep")
    assert workload.overlaps_ep_communication
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=8), "bf16")
    plan = single_plan(pp=4, dp=16, ep=16, micro_batch=1)
    calibration = default_calibration()
    implied = predict_step(workload, plan, machine, calibration)
    stated = predict_step(with_(workload, ep_overlap=True), plan, machine, calibration)
    assert implied.step_time_s[0] == stated.step_time_s[0]
    megatron = predict_step(with_(workload, stack="megatron-core"), plan, machine, calibration)
    assert (implied.breakdown_s["ep_all_to_all"][0]
            < megatron.breakdown_s["ep_all_to_all"][0])
