"""Data-parallel collectives that end a pass (docs/evidence/data_parallel_scaling.md).

Jobs whose per-block communication hides behind compute (long sequences) still wait for the
collectives at the two ends of a pass: FSDP's first forward gather and last reduce-scatter,
DDP/ZeRO's last bucket. These tests compute that exposed time by hand at two data-parallel
widths of the same per-GPU work.
"""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import count_parameters, ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.collectives import (
    OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN,
    Interconnect,
    all_gather_time_s,
    reduce_scatter_time_s,
)
from mosaic.perf.fitted_constants import fitted
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import gradient_bytes_per_param
from mosaic.perf.plan import Checkpointing, Sharding, single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload

GEOMETRY = ladder_geometry(6)  # 24 blocks, d_model 3072
CALIBRATION = replace(default_calibration(), stack_overhead={})
PROTOCOLS = fitted("collectives", "nccl_protocols")


def _job(stack: str, sharding: Sharding, nodes: int):
    """One 16k-token sequence per GPU on ``nodes`` DGX-H100 hosts (fixed per-GPU work)."""
    dp = 8 * nodes
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=nodes), "bf16")
    workload = Workload(geometry=GEOMETRY, global_batch=dp, seq_len=16384, stack=stack)
    plan = single_plan(dp=dp, micro_batch=1, sharding=sharding,
                       checkpointing=Checkpointing.NONE)
    return machine, workload, predict_step(workload, plan, machine, CALIBRATION)


def _stage_params() -> float:
    """Every parameter on the one stage (pp = 1): blocks, embedding, LM head, final norm."""
    counts = count_parameters(GEOMETRY)
    return (GEOMETRY.layers * (counts.attention_per_layer + counts.dense_ffn_per_layer
                               + counts.norms_per_layer)
            + GEOMETRY.vocab * GEOMETRY.d_model * 2 + GEOMETRY.d_model)


def _ring_by_hand_s(full_bytes: float, n: int, ic: Interconnect) -> float:
    """Ring all-gather / reduce-scatter of ``n`` contiguous ranks over 8-GPU nodes, by the
    alpha-beta formula: launch + (n-1) steps at the network step latency + (n-1)/n of the
    buffer at the ring bus bandwidth min(NVLink, 8 NIC shares), the cheapest of NCCL's
    Simple, LL128 (latency x 0.286, NCCL's 4/14 us; bandwidth x 0.92) and LL (latency x
    0.193, NCCL's 2.7/14 us; bandwidth x 0.5 or the 20.4 GB/s LL cap across more than two
    nodes)."""
    steps = n - 1
    bus_bytes = (n - 1) / n * full_bytes
    bus_bw = min(ic.scale_up_bw_bytes_per_s * ic.ring_scale_up_efficiency,
                 8 * ic.scale_out_bw_bytes_per_s * ic.ring_scale_out_efficiency)
    alpha = ic.scale_out_latency_s
    simple = steps * alpha + bus_bytes / bus_bw
    ll128 = steps * alpha * 0.286 + bus_bytes / (bus_bw * 0.92)
    ll = steps * alpha * 0.193 + max(bus_bytes / (bus_bw * 0.5), bus_bytes / 20.4e9)
    return ic.launch_latency_s + min(simple, ll128, ll)


def test_hand_formula_uses_the_documented_protocol_constants():
    ratio, fraction = PROTOCOLS["step_latency_ratio"], PROTOCOLS["bus_bw_fraction"]
    assert ratio["ll128"]["scale_out"] == 0.286  # NCCL hwLat NET ring: 4.0 / 14 us
    assert ratio["ll"]["scale_out"] == 0.193  # 2.7 / 14 us
    assert (fraction["ll128"], fraction["ll"]) == (0.92, 0.5)
    assert PROTOCOLS["ll_max_bus_bw_bytes_per_s"]["more_domains"] == 20.4e9


@pytest.mark.parametrize("nodes", [2, 32])
def test_fsdp_exposes_the_first_gather_and_the_last_reduce_scatter_by_hand(nodes):
    machine, workload, step = _job("torchtitan", Sharding.FSDP, nodes)
    counts = count_parameters(GEOMETRY)
    unit_params = counts.attention_per_layer + counts.dense_ffn_per_layer + counts.norms_per_layer
    assert gradient_bytes_per_param(workload) == 4  # FSDP2 reduces in fp32 by default
    assert workload.traits.fsdp_gather_bytes_per_param == 2  # bf16 param_dtype
    dp = 8 * nodes
    gather = _ring_by_hand_s(unit_params * 2, dp, machine.interconnect)
    scatter = _ring_by_hand_s(unit_params * 4, dp, machine.interconnect)
    # every other block's gather and reduce-scatter hide behind the block before it
    assert step.breakdown_s["fsdp_all_gather"][0] == pytest.approx(gather, rel=1e-9)
    assert step.breakdown_s["fsdp_reduce_scatter"][0] == pytest.approx(scatter, rel=1e-9)


def test_compute_slowdown_under_collectives_is_the_measured_average():
    # Lee et al. 2025 (arXiv:2507.03114): 18.9% mean compute slowdown under overlapped
    # collectives; an H100 all-gather's 24 CTAs of 132 SMs (18.2%) agree.
    assert OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN == 0.189
    assert abs(24 / 132 - OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN) < 0.01


def test_fsdp_hidden_gathers_and_reduce_scatters_slow_the_compute_by_hand():
    # 24 blocks, each one FSDP unit: a forward and a backward gather and a reduce-scatter
    # per unit, all hidden except the first forward gather and the last reduce-scatter
    # (16k-token blocks outlast every collective), so 47 gathers and 23 reduce-scatters
    # run beside compute and slow it by 18.9% of their time.
    machine, _, step = _job("torchtitan", Sharding.FSDP, 2)
    counts = count_parameters(GEOMETRY)
    unit_params = counts.attention_per_layer + counts.dense_ffn_per_layer + counts.norms_per_layer
    gather = _ring_by_hand_s(unit_params * 2, 16, machine.interconnect)
    scatter = _ring_by_hand_s(unit_params * 4, 16, machine.interconnect)
    hidden = (2 * 24 - 1) * gather + (24 - 1) * scatter
    assert step.breakdown_s["dp_overlap_contention"][0] == pytest.approx(0.189 * hidden,
                                                                        rel=1e-9)


def test_megatron_hidden_buckets_slow_the_compute_and_unhidden_ones_do_not():
    # ZeRO-1 with overlap: all but the last gradient bucket and the first parameter bucket
    # run beside compute; without overlap nothing does.
    machine, workload, step = _job("megatron-core", Sharding.ZERO1, 2)
    stage_params = _stage_params()
    ic = machine.interconnect
    grads = reduce_scatter_time_s(np.array([stage_params * 4.0]), 16, 1, ic)[0]
    params = all_gather_time_s(np.array([stage_params * 2.0]), 16, 1, ic)[0]
    share = 40e6 / stage_params  # Megatron-Core's smallest default bucket
    assert step.breakdown_s["dp_overlap_contention"][0] == pytest.approx(
        0.189 * (1 - share) * (grads + params), rel=1e-5)
    plan = single_plan(dp=16, micro_batch=1, sharding=Sharding.ZERO1,
                       checkpointing=Checkpointing.NONE)
    unhidden = predict_step(replace(workload, dp_comm_overlap=False), plan, machine,
                            CALIBRATION)
    assert unhidden.breakdown_s["dp_overlap_contention"][0] == 0.0


def test_fsdp_exposed_ends_grow_with_the_data_parallel_width():
    # 2 -> 32 nodes at fixed per-GPU work: 240 more ring steps per collective and
    # (n-1)/n from 15/16 to 255/256 of the buffer; nothing else in the step depends on dp
    # except the optimizer shard, which shrinks.
    machine, _, narrow = _job("torchtitan", Sharding.FSDP, 2)
    _, _, wide = _job("torchtitan", Sharding.FSDP, 32)
    exposed = {name: wide.breakdown_s[name][0] - narrow.breakdown_s[name][0]
               for name in ("fsdp_all_gather", "fsdp_reduce_scatter")}
    assert all(value > 0 for value in exposed.values())
    counts = count_parameters(GEOMETRY)
    unit_params = counts.attention_per_layer + counts.dense_ffn_per_layer + counts.norms_per_layer
    ic = machine.interconnect
    assert exposed["fsdp_all_gather"] == pytest.approx(
        _ring_by_hand_s(unit_params * 2, 256, ic) - _ring_by_hand_s(unit_params * 2, 16, ic))


@pytest.mark.parametrize(("nodes", "bucket_params"), [(2, 40e6), (32, 256e6)])
def test_megatron_exposes_its_last_bucket_whose_size_grows_with_dp(nodes, bucket_params):
    # Megatron-Core DDP's default bucket: max(4e7, 1e6 x dp) parameters; the last gradient
    # bucket's reduce-scatter and the first parameter bucket's all-gather have no compute
    # to overlap, the rest hides behind the backward / forward.
    machine, _, step = _job("megatron-core", Sharding.ZERO1, nodes)
    dp = 8 * nodes
    ic = machine.interconnect
    stage_params = _stage_params()
    share = bucket_params / stage_params
    grads = reduce_scatter_time_s(np.array([stage_params * 4.0]), dp, 1, ic)[0]
    params = all_gather_time_s(np.array([stage_params * 2.0]), dp, 1, ic)[0]
    assert step.breakdown_s["dp_reduce_scatter"][0] == pytest.approx(share * grads, rel=1e-6)
    assert step.breakdown_s["dp_all_gather"][0] == pytest.approx(share * params, rel=1e-6)


def test_per_unit_stacks_expose_one_block_of_zero2_collectives():
    # llm-foundry's SHARD_GRAD_OP reduces and gathers per FSDP unit (one block of 24).
    machine, _, step = _job("llm-foundry", Sharding.ZERO2, 2)
    stage_params = _stage_params()
    grads = reduce_scatter_time_s(np.array([stage_params * 4.0]), 16, 1,
                                  machine.interconnect)[0]
    # (rel 1e-5: the stage count may differ from this sum by a norm's d_model parameters)
    assert step.breakdown_s["dp_reduce_scatter"][0] == pytest.approx(grads / 24, rel=1e-5)


def test_stacks_with_unmodelled_buckets_keep_only_the_overlap_rule():
    # DeepSpeed ZeRO-1/2 (dp_last_bucket: none): fully hidden behind the backward here.
    _, _, step = _job("deepspeed", Sharding.ZERO1, 32)
    assert step.breakdown_s["dp_reduce_scatter"][0] == 0.0
    assert step.breakdown_s["dp_all_gather"][0] == 0.0


def test_only_the_data_parallel_terms_and_the_optimizer_change_with_dp():
    # Fixed per-GPU work, 2 -> 32 nodes: the step changes by the exposed data-parallel
    # collectives (which grow) and the optimizer step over the local shard (which shrinks).
    for stack, sharding in (("torchtitan", Sharding.FSDP), ("megatron-core", Sharding.ZERO1),
                            ("llm-foundry", Sharding.ZERO2)):
        narrow = _job(stack, sharding, 2)[2]
        wide = _job(stack, sharding, 32)[2]
        dp_terms = [name for name in wide.breakdown_s if name.startswith(("dp_", "fsdp_"))]
        grown = sum(wide.breakdown_s[n][0] - narrow.breakdown_s[n][0] for n in dp_terms)
        assert grown > 0, stack
        shrunk = wide.breakdown_s["optimizer"][0] - narrow.breakdown_s["optimizer"][0]
        assert shrunk < 0, stack
        assert wide.step_time_s[0] - narrow.step_time_s[0] == pytest.approx(
            grown + shrunk, rel=1e-9, abs=1e-12), stack


def test_without_dp_overlap_the_whole_zero1_reduce_scatter_and_gather_are_exposed():
    # Megatron-LM without --overlap-grad-reduce / --overlap-param-gather (their defaults):
    # the stage's gradients reduce-scatter after the backward, its parameters all-gather
    # after the optimizer step.
    nodes = 2
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=nodes), "bf16")
    workload = Workload(geometry=GEOMETRY, global_batch=16, seq_len=16384,
                        stack="megatron-core", dp_comm_overlap=False)
    plan = single_plan(dp=16, micro_batch=1, sharding=Sharding.ZERO1,
                       checkpointing=Checkpointing.NONE)
    step = predict_step(workload, plan, machine, CALIBRATION)
    stage_params = _stage_params()
    ic = machine.interconnect
    grads = reduce_scatter_time_s(np.array([stage_params * 4.0]), 16, 1, ic)[0]
    params = all_gather_time_s(np.array([stage_params * 2.0]), 16, 1, ic)[0]
    # (rel 1e-5: the stage count may differ from this sum by a norm's d_model parameters)
    assert step.breakdown_s["dp_reduce_scatter"][0] == pytest.approx(grads, rel=1e-5)
    assert step.breakdown_s["dp_all_gather"][0] == pytest.approx(params, rel=1e-5)


def test_flagperf_megatron_runs_are_recorded_without_dp_overlap():
    from mosaic.evaluate.record_settings import record_settings

    settings, evidence = record_settings()["flagperf-llama3-8b-h100-440-pp1-dp220-tp2-bf16-gbs1760"]
    assert settings == {"dp_comm_overlap": False}
    assert "--overlap-grad-reduce" in evidence and "core_v0.6.0" in evidence


def test_dp_comm_overlap_false_leaves_fsdp_alone_and_the_job_says_so(tmp_path):
    from mosaic.config.job_schema import load_job

    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=2), "bf16")
    plan = single_plan(dp=16, micro_batch=1, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.NONE)
    steps = [predict_step(Workload(geometry=GEOMETRY, global_batch=16, seq_len=16384,
                                   stack="megatron-core", dp_comm_overlap=overlap),
                          plan, machine, CALIBRATION).step_time_s[0]
             for overlap in (True, False)]
    assert steps[0] == steps[1]
    path = tmp_path / "fsdp.yaml"
    path.write_text("model: {layers: 16, d_model: 2048, heads: 16, vocab: 32000, ffn: 8192}\n"
                    "batch: {global_seqs: 256, seq_len: 4096, micro_seqs: 1}\n"
                    "hardware: {system: DGX-H100, nodes: 2}\n"
                    "parallelism: {sharding: fsdp}\n"
                    "performance: {dp_comm_overlap: false}\n")
    assert any("dp_comm_overlap=false leaves fsdp/hsdp unchanged" in note
               for note in load_job(path).assumptions)
    path.write_text(path.read_text().replace("fsdp", "zero1"))
    assert not any("dp_comm_overlap" in note for note in load_job(path).assumptions)
