"""Iteration-time model: hand-computed schedule terms and physical invariants."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mosaic.arch import count_parameters, ladder_geometry
from mosaic.config.job_schema import load_job
from mosaic.evaluate.job import predict_job
from mosaic.hardware import Cluster, get_system
from mosaic.hardware.system import job_domain_gpus
from mosaic.perf.calibration import default_calibration
from mosaic.perf.layer_costs import moe_block_times
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import Checkpointing, Sharding, plans_from_columns, single_plan
from mosaic.perf.schedule import bubble_fraction
from mosaic.perf.step_time import predict_step, vocab_stage_s
from mosaic.perf.workload import Workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CALIBRATION = default_calibration()


def b200_machine(nodes: int):
    cluster = Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=nodes)
    return machine_for(cluster, "bf16")


def moe_workload(global_batch: int = 256) -> Workload:
    return Workload(geometry=ladder_geometry(4, experts=64, top_k=2, split_factor=4),
                    global_batch=global_batch, seq_len=2048)


def test_bubble_fraction_eq12_by_hand():
    # (pp − 1)/(vpp · n_mb): pp=4, vpp=2, n_mb=12 -> 3/24.
    assert bubble_fraction(np.array([4]), np.array([2]), np.array([12]))[0] == pytest.approx(0.125)


def test_vocab_stage_eq13_by_hand():
    first, last = np.array([0.1]), np.array([0.3])
    n_mb, f = np.array([8.0]), np.array([0.25])
    expected = 7 * 0.3 + 0.1 + 0.3 + 0.3 * 8 * 0.25
    assert vocab_stage_s(first, last, n_mb, f, np.array([4]))[0] == pytest.approx(expected)
    # One stage runs both ends every micro-batch.
    assert vocab_stage_s(first, last, n_mb, f, np.array([1]))[0] == pytest.approx(8 * 0.4)


def test_breakdown_sums_to_step_time_and_mfu_by_hand():
    workload = moe_workload()
    machine = b200_machine(4)
    plan = single_plan(pp=2, dp=16, ep=8, micro_batch=2)
    p = predict_step(workload, plan, machine, CALIBRATION)
    assert sum(p.breakdown_s.values())[0] == pytest.approx(p.step_time_s[0], rel=1e-12)
    n_active = count_parameters(workload.geometry).n_active
    mfu = 6 * n_active * 256 * 2048 / (p.step_time_s[0] * 32 * 2.25e15)
    assert p.mfu[0] == pytest.approx(mfu, rel=1e-12)
    assert p.tokens_per_s_per_gpu[0] == pytest.approx(256 * 2048 / p.step_time_s[0] / 32)


def test_ep_inside_a_node_is_cheaper_than_across_nodes():
    workload = moe_workload()
    machine = b200_machine(4)
    plan = single_plan(dp=32, ep=8, micro_batch=2)
    inside = predict_step(workload, plan, machine, CALIBRATION)
    split_nodes = replace(machine, interconnect=replace(machine.interconnect,
                                                        scale_up_domain_gpus=4,
                                                        gpus_per_node=4))
    across = predict_step(workload, plan, split_nodes, CALIBRATION)
    assert inside.breakdown_s["ep_all_to_all"][0] < across.breakdown_s["ep_all_to_all"][0]
    assert inside.step_time_s[0] < across.step_time_s[0]


def test_full_checkpointing_trades_time_for_memory():
    # q=8 with 8-sequence micro-batches is compute-bound (in a host-dispatch-bound step the
    # recompute would hide behind the launch floor, Eq. 11).
    workload = Workload(geometry=ladder_geometry(8, experts=64, top_k=2, split_factor=4),
                        global_batch=256, seq_len=2048)
    machine = b200_machine(4)
    plans = plans_from_columns(
        tp=[1, 1], pp=[2, 2], vpp=[1, 1], cp=[1, 1], dp=[16, 16], ep=[8, 8], etp=[1, 1],
        micro_batch=[8, 8], sharding=[1, 1],
        checkpointing=[int(Checkpointing.NONE), int(Checkpointing.FULL)],
        hsdp_shard=[16, 16], sequence_parallel=[False, False])
    p = predict_step(workload, plans, machine, CALIBRATION)
    assert (p.breakdown_s["dispatch_floor"] == 0).all()
    assert p.memory_bytes[1] < p.memory_bytes[0]
    assert p.step_time_s[1] > p.step_time_s[0]
    assert p.hfu[1] > p.mfu[1]


def test_doubling_global_batch_never_lowers_throughput():
    machine = b200_machine(4)
    plan = single_plan(pp=4, dp=8, ep=8, micro_batch=1)
    small = predict_step(moe_workload(128), plan, machine, CALIBRATION)
    large = predict_step(moe_workload(256), plan, machine, CALIBRATION)
    assert large.feasible[0]
    assert large.tokens_per_s[0] >= small.tokens_per_s[0]


def test_per_rank_expert_compute_does_not_shrink_with_ep():
    """At fixed tokens per rank, EP only regroups the same K·tokens expert rows."""
    workload = moe_workload()
    machine = b200_machine(4)
    plans = plans_from_columns(
        tp=[1, 1], pp=[1, 1], vpp=[1, 1], cp=[1, 1], dp=[32, 32], ep=[2, 16], etp=[1, 1],
        micro_batch=[2, 2], sharding=[1, 1], checkpointing=[0, 0], hsdp_shard=[32, 32],
        sequence_parallel=[False, False])
    experts = moe_block_times(machine, workload, plans).mlp_gemm
    # Eight times the EP would be 8x cheaper under a 1/EP model; the grouped GEMM does the
    # same FLOPs on larger tiles, so it may get a little faster but not 8x.
    assert experts[1] > experts[0] / 2


def test_job_domain_packs_hosts_evenly():
    assert job_domain_gpus(72, 4, 256) == 64  # 4 NVL72 racks x 64 GPUs
    assert job_domain_gpus(72, 4, 72) == 72
    assert job_domain_gpus(8, 8, 512) == 8
    assert job_domain_gpus(8, 8, 8) == 8


def test_appendix_e_listing_smoke():
    """The paper's Appendix E listing loads as written and predicts a plausible step.

    The paper's ScalePlan output (differently calibrated stack) prints MFU 13.69%,
    21.30 GB and 44.9 s for this layout; mosaic's uncalibrated prediction is reported in
    the README next to those numbers rather than pinned here.
    """
    result = predict_job(load_job(EXAMPLES / "appendix_e.yaml"), CALIBRATION)
    p = result.prediction
    assert result.cluster.n_devices == 512
    assert result.spec.plan.row(0)["dp"] == 32
    assert 0.05 < p.mfu[0] < 0.30
    assert p.feasible[0]


def test_usable_memory_fraction_tightens_feasibility():
    workload = moe_workload()
    cluster = Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4)
    plan = single_plan(pp=2, dp=16, ep=8, micro_batch=2)
    full = predict_step(workload, plan, machine_for(cluster, "bf16"), CALIBRATION)
    used = full.memory_bytes[0] / cluster.device.hbm_bytes
    tight = predict_step(workload, plan, machine_for(cluster, "bf16", used * 0.9), CALIBRATION)
    assert full.feasible[0] and not tight.feasible[0]
    assert tight.overshoot_bytes[0] == pytest.approx(
        full.memory_bytes[0] - used * 0.9 * cluster.device.hbm_bytes)
    assert tight.step_time_s[0] == full.step_time_s[0]  # memory policy does not change time


def test_dropless_megatron_moe_exposes_the_grouped_gemm_host_floor_by_hand():
    from mosaic.perf.kernels import te_grouped_linear_host_floor_s
    from mosaic.perf.schedule import n_microbatches, stage_layer_counts

    workload = moe_workload()  # routing "dropless", stack "megatron-core"
    machine = b200_machine(4)
    plan = single_plan(pp=2, dp=16, ep=8, micro_batch=2)
    p = predict_step(workload, plan, machine, CALIBRATION)
    local = 64 / 8
    # isolated-call floors x the default profile's in-block factor: ScalePlan's B200 host
    # spends 27 us per launch in a real block against 15 us in an isolated eager chain
    assert CALIBRATION.host_in_block_factor == pytest.approx(27 / 15)
    per_layer = CALIBRATION.host_in_block_factor * 2 * (
        te_grouped_linear_host_floor_s(local)
        + te_grouped_linear_host_floor_s(local, backward=True))
    moe_blocks = max(stage_layer_counts(workload.geometry, plan, s)[1][0]
                     for s in ("first", "last"))
    expected = n_microbatches(workload, plan)[0] * moe_blocks * per_layer
    assert p.analytic_breakdown_s["moe_host_sync"][0] == pytest.approx(expected, rel=1e-12)
    # Drop-and-pad routing needs no host sync; other stacks do not run TE GroupedLinear.
    for other in (replace(workload, routing="token_drop", pad_to_capacity=True),
                  replace(workload, stack="torchtitan")):
        assert predict_step(other, plan, machine, CALIBRATION).breakdown_s[
            "moe_host_sync"][0] == 0.0


def test_bf16_gradient_buffers_halve_the_data_parallel_reduce_scatter_by_hand():
    """The gradient reduction moves the grad buffer's dtype, the one the memory model holds:
    4 B per parameter by default (Megatron's fp32 reduction), 2 B with
    grad_reduce_in_fp32 False. Nothing hides here (one micro-batch, overlap fraction 0)."""
    from mosaic.perf.collectives import reduce_scatter_time_s
    from mosaic.perf.memory import stage_parameters

    machine = b200_machine(4)
    workload = Workload(geometry=ladder_geometry(4), global_batch=32, seq_len=1024)
    plan = single_plan(dp=32, micro_batch=1, sharding=Sharding.ZERO1)
    calibration = replace(default_calibration(), dp_overlap_fraction=0.0, stack_overhead={})
    fp32 = predict_step(workload, plan, machine, calibration)
    bf16 = predict_step(replace(workload, grad_reduce_in_fp32=False), plan, machine,
                        calibration)
    params = stage_parameters(workload.geometry, plan, "last", None, False)
    by_hand = [reduce_scatter_time_s(params.non_expert * grad_bytes, np.array([32]),
                                     np.array([1]), machine.interconnect)[0]
               for grad_bytes in (4, 2)]
    assert fp32.breakdown_s["dp_reduce_scatter"][0] == pytest.approx(by_hand[0], rel=1e-9)
    assert bf16.breakdown_s["dp_reduce_scatter"][0] == pytest.approx(by_hand[1], rel=1e-9)
    assert by_hand[1] < by_hand[0]


def test_a_step_captured_as_one_cuda_graph_pays_no_host_launch_or_moe_sync_by_hand():
    """full_iteration_cuda_graph: the dropless MoE host synchronisation (the grouped GEMMs'
    host floor added to the GPU time) and Eq. 11's launch floor both vanish; the GPU work
    is the same."""
    from mosaic.perf.kernels import te_grouped_linear_host_floor_s

    cluster = Cluster(system=get_system("DGX-H100"), n_nodes=1)
    machine = machine_for(cluster, "bf16")
    geometry = ladder_geometry(4, experts=64, top_k=4, split_factor=1)
    workload = Workload(geometry=geometry, global_batch=64, seq_len=2048, routing="dropless")
    plan = single_plan(dp=8, ep=8, micro_batch=1)
    # Uncalibrated (no stack multiplier scaling every term), as calibrate's baselines.
    calibration = replace(default_calibration(), chi_a2a=0.0, chi_pp=0.0, chi_overlap=0.0,
                          stack_overhead={}, attention_efficiency={}, routing_imbalance={},
                          elementwise_traffic_factor=1.0)
    eager = predict_step(workload, plan, machine, calibration)
    graph = predict_step(replace(workload, full_iteration_cuda_graph=True), plan, machine,
                         calibration)
    # Eager: per micro-batch, every MoE block's up and down projections, forward and
    # backward, over its 64/8 local experts (the ladder's first block is dense).
    n_mb = 64 // 8
    moe_blocks = geometry.layers - geometry.moe.dense_layers
    per_block = calibration.host_in_block_factor * 2 * (
        te_grouped_linear_host_floor_s(8) + te_grouped_linear_host_floor_s(8, backward=True))
    assert eager.breakdown_s["moe_host_sync"][0] == pytest.approx(
        n_mb * moe_blocks * per_block, rel=1e-12)
    assert graph.breakdown_s["moe_host_sync"][0] == 0.0
    assert graph.breakdown_s["dispatch_floor"][0] == 0.0
    assert graph.block_dispatch_floor_s[0] == 0.0
    for term in ("compute_experts", "compute_attention_core", "ep_all_to_all"):
        assert graph.breakdown_s[term][0] == eager.breakdown_s[term][0]
    assert graph.step_time_s[0] == pytest.approx(
        eager.step_time_s[0] - eager.breakdown_s["moe_host_sync"][0]
        - eager.breakdown_s["dispatch_floor"][0], rel=1e-9)


def test_hfu_counts_the_modules_a_selective_recompute_repeats():
    """HFU left out the modules Megatron-Core's selective recompute repeats although the
    step time charges them (a trial). By hand, per token, for the ladder's q=4 (16 blocks of
    width 2048, 15 of them MoE with one shared expert, top-2 of 64): 6·N_act + causal
    attention 6·L·d·(s + 1) (12·L·d per key, (s + 1)/2 keys a query on average) + the LM
    head's 6·V·d; with recompute_modules [moe] the MoE forward again,
    2·15·(2·routed expert + shared expert + router); with [core_attn] the attention core's
    forward, 2·L·d·(s + 1); [layernorm] repeats no GEMM."""
    geometry = ladder_geometry(4, experts=64, top_k=2, split_factor=4)
    machine = b200_machine(4)
    plans = plans_from_columns(
        tp=[1], pp=[1], vpp=[1], cp=[1], dp=[32], ep=[8], etp=[1], micro_batch=[2],
        sharding=[1], checkpointing=[int(Checkpointing.SELECTIVE)], hsdp_shard=[32],
        sequence_parallel=[False])
    counts = count_parameters(geometry)
    tokens = 256 * 2048
    peak = 2.25e15 * 32

    def hfu_flops_per_token(modules: tuple[str, ...]) -> float:
        workload = replace(moe_workload(), recompute_modules=modules)
        p = predict_step(workload, plans, machine, CALIBRATION)
        return float(p.hfu[0] * p.step_time_s[0] * peak / tokens)

    base = hfu_flops_per_token(("layernorm",))
    useful = 6 * counts.n_active + 6 * 16 * 2048 * 2049
    lm_head = 6 * 50257 * 2048
    assert base == pytest.approx(useful + lm_head, rel=1e-9)
    moe = 2 * 15 * (2 * counts.routed_expert + counts.shared_experts_per_layer
                    + counts.router_per_layer)
    assert hfu_flops_per_token(("moe",)) == pytest.approx(base + moe, rel=1e-9)
    assert hfu_flops_per_token(("core_attn",)) == pytest.approx(base + 2 * 16 * 2048 * 2049,
                                                                rel=1e-9)


def _hfu_flops_per_token(workload: Workload, checkpointing: Checkpointing) -> float:
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    plans = single_plan(dp=8, micro_batch=1, sharding=Sharding.FSDP,
                        checkpointing=checkpointing)
    p = predict_step(workload, plans, machine, CALIBRATION)
    tokens = workload.global_batch * workload.seq_len
    return float(p.hfu[0] * p.step_time_s[0] * machine.mfu_peak_flops_per_s * 8 / tokens)


def test_hfu_counts_the_matmuls_per_op_sac_repeats():
    """torchtitan's per-op SAC recomputes every second aten.mm of a block (save list:
    pytorch/torchtitan models/*/infra/parallelize.py) and HFU counted none of it. By hand,
    Llama-3-8B (d 4096, 32 query and 8 KV heads of 128, GLU FFN 14336, 32 blocks): the
    2nd and 4th matmuls K (4096 x 1024) and O (4096 x 4096), then the 6th, W3 (4096 x
    14336): 2 FLOPs each per token, 2 x 32 x 79,691,776 = 5.10 GFLOP a token."""
    from mosaic.arch.hf_import import load_hf_config

    geometry = load_hf_config(EXAMPLES / "hf" / "llama-3-8b.json")
    workload = Workload(geometry=geometry, global_batch=8, seq_len=8192, stack="torchtitan")
    by_hand = 2 * 32 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336)
    extra = (_hfu_flops_per_token(workload, Checkpointing.SELECTIVE)
             - _hfu_flops_per_token(workload, Checkpointing.NONE))
    assert extra == pytest.approx(by_hand, rel=1e-6)


def test_hfu_counts_the_routed_experts_per_op_sac_never_saves():
    """An MoE block under per-op SAC: the grouped expert GEMMs are not on the save list, so
    the top-k routed experts run again; the gate is the 5th matmul after Q, K, V, O and is
    saved. Qwen3-30B-A3B by hand (d 2048, 32 query and 4 KV heads of 128, 48 blocks, top-8
    of 128 experts of width 768): per block K 2048 x 512 and O 4096 x 2048, and 8 experts
    of 3 x 2048 x 768: 2 x 48 x (1,048,576 + 8,388,608 + 37,748,736) = 4.53 GFLOP a token."""
    from mosaic.arch.hf_import import load_hf_config

    geometry = load_hf_config(EXAMPLES / "hf" / "qwen3-30b-a3b.json")
    workload = Workload(geometry=geometry, global_batch=8, seq_len=4096, stack="torchtitan")
    by_hand = 2 * 48 * (2048 * 512 + 4096 * 2048 + 8 * 3 * 2048 * 768)
    extra = (_hfu_flops_per_token(workload, Checkpointing.SELECTIVE)
             - _hfu_flops_per_token(workload, Checkpointing.NONE))
    assert extra == pytest.approx(by_hand, rel=1e-6)


def test_hfu_counts_the_attention_forward_a_save_dots_policy_repeats():
    """MaxText's minimal_flash policy saves the matmul outputs and the attention context;
    the flash kernel's forward runs again for its softmax statistics: 2·L·d_attn·(s + 1) per
    token, a third of causal attention's 6·L·d_attn·(s + 1). Llama-3-8B at s = 8192:
    2 x 32 x 4096 x 8193."""
    from mosaic.arch.hf_import import load_hf_config

    geometry = load_hf_config(EXAMPLES / "hf" / "llama-3-8b.json")
    workload = Workload(geometry=geometry, global_batch=8, seq_len=8192, stack="jax-xla")
    extra = (_hfu_flops_per_token(workload, Checkpointing.SELECTIVE)
             - _hfu_flops_per_token(workload, Checkpointing.NONE))
    assert extra == pytest.approx(2 * 32 * 4096 * 8193, rel=1e-6)


def test_hfu_counts_the_mtp_modules_the_step_time_charges():
    """HFU, what the hardware computes, left out DeepSeek-V3's MTP module although the step
    time charges it (its block, its 2d -> d projection and a second LM head and loss: docs/
    perf.md, "MTP modules"; a trial read 27.6% HFU on the Megatron-Bridge H100 recipe). By
    hand, per token, one module (d 7168, 128 heads; MLA q_lora 1536, kv_lora 512, qk 128 +
    64 rope, v 128; top-8 of 256 experts of width 2048 and one shared; RMSNorm): MLA
    projections 7168·1536 + 1536·128·192 + 7168·576 + 512·128·256 + 128·128·7168 and its
    two latent norms 1536 + 512, two block norms, nine SwiGLU experts of 3·7168·2048, the
    router 256·7168, the projection 2·7168² and three module norms, 6 FLOPs per parameter;
    the attention core 6·128·(192 + 128)·(s + 1)/2; the second LM head 6·129280·7168."""
    from mosaic.arch.hf_import import load_hf_config

    geometry = load_hf_config(EXAMPLES / "hf" / "deepseek-v3.json")
    assert geometry.mtp_layers == 1
    seq = 4096

    def flops(mtp_layers: int) -> float:
        workload = Workload(geometry=replace(geometry, mtp_layers=mtp_layers), global_batch=8,
                            seq_len=seq)
        return _hfu_flops_per_token(workload, Checkpointing.NONE)

    d = 7168
    attention = (d * 1536 + 1536 * 128 * 192 + d * 576 + 512 * 128 * 256 + 128 * 128 * d
                 + 1536 + 512)
    block = attention + 2 * d + 9 * 3 * d * 2048 + 256 * d
    module = 6 * (block + 2 * d * d + 3 * d) + 6 * 128 * 320 * (seq + 1) / 2 + 6 * 129280 * d
    assert flops(1) - flops(0) == pytest.approx(module, rel=1e-9)
