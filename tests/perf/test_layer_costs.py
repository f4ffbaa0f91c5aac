"""Per-block cost terms computed by hand: FP8 operand casts, FSDP per-tensor gathers, FP8
dispatch, kept-gathered FSDP, per-op SAC of MLA blocks."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.collectives import all_gather_time_s
from mosaic.perf.kernels import fitted
from mosaic.perf.layer_costs import quantise_cast_s
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import Sharding, single_plan
from mosaic.perf.shapes import attention_widths
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload

H100 = Cluster(system=get_system("DGX-H100"), n_nodes=1)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_fp8_cast_of_one_ffn_gemm_by_hand():
    machine = machine_for(H100, "fp8")
    workload = Workload(geometry=ladder_geometry(8), global_batch=8, seq_len=4096,
                        precision="fp8")
    fwd, bwd = quantise_cast_s(machine, workload, 4096.0, ((4096, 14336),))
    bandwidth = 3.35e12 * fitted("kernels", "elementwise_hbm_efficiency")
    latency = fitted("kernels", "kernel_latency_s")
    # Read 2 B of bf16, write a row-wise and a column-wise FP8 copy: 4 B per element of the
    # 4096 x 4096 input (forward) and of the 4096 x 14336 output gradient (backward).
    assert fwd == pytest.approx(latency + 4096 * 4096 * 4 / bandwidth, rel=1e-12)
    assert bwd == pytest.approx(latency + 4096 * 14336 * 4 / bandwidth, rel=1e-12)
    bf16 = replace(workload, precision="bf16")
    assert quantise_cast_s(machine, bf16, 4096.0, ((4096, 14336),)) == (0.0, 0.0)


def test_fp8_step_pays_for_the_casts_of_every_block_gemm():
    machine = machine_for(H100, "fp8")
    geometry = ladder_geometry(8)
    fp8 = Workload(geometry=geometry, global_batch=8, seq_len=4096, precision="fp8")
    plan = single_plan(dp=8)  # one 4096-token micro-batch per GPU
    # Unit multipliers: the breakdown terms are then the analytical seconds.
    calibration = replace(default_calibration(), stack_overhead={}, chi_a2a=0.0, chi_pp=0.0,
                          chi_overlap=0.0)
    with_casts = predict_step(fp8, plan, machine, calibration)
    without = predict_step(replace(fp8, precision="bf16"), plan, machine_for(H100, "bf16"),
                           calibration)
    widths = attention_widths(fp8.geometry)
    d, w = geometry.d_model, geometry.ffn
    gemms = ((d, widths.projection), (widths.output, d), (d, 2 * w), (w, d))
    per_block = sum(quantise_cast_s(machine, fp8, 4096.0, gemms))
    # The casts are their own term, counted byte for byte: the calibrated element-wise
    # traffic factor (unfused norm/activation chains) does not scale them.
    assert with_casts.breakdown_s["compute_quantise_cast"][0] == pytest.approx(
        geometry.layers * per_block, rel=1e-9)
    assert without.breakdown_s["compute_quantise_cast"][0] == 0.0
    assert (with_casts.breakdown_s["compute_elementwise"][0]
            == pytest.approx(without.breakdown_s["compute_elementwise"][0], rel=1e-12))


def test_per_tensor_fsdp_gathers_cost_one_collective_latency_per_extra_tensor():
    # A small model over 64 GPUs: gathers are latency-bound and cannot hide.
    cluster = Cluster(system=get_system("DGX-H100"), n_nodes=8)
    machine = machine_for(cluster, "bf16")
    workload = Workload(geometry=ladder_geometry(2), global_batch=64, seq_len=1024,
                        stack="torchtitan")
    plan = single_plan(dp=64, sharding=Sharding.FSDP)
    # No stack multiplier: a fitted one below 1 scales every breakdown term.
    calibration = replace(default_calibration(), stack_overhead={})
    block = predict_step(workload, plan, machine, calibration)
    tensor = predict_step(replace(workload, fsdp_gather="tensor"), plan, machine, calibration)
    assert tensor.breakdown_s["fsdp_all_gather"][0] > block.breakdown_s["fsdp_all_gather"][0]
    # Both gathers (forward and backward) of every block are exposed here, so each block
    # pays 8 more zero-byte all-gathers over the 64 ranks twice (9 tensors: Q, K, V, O,
    # two norms, three GLU matrices).
    one_call = all_gather_time_s(0.0, np.array([64]), np.array([1]), machine.interconnect)[0]
    extra = (tensor.breakdown_s["fsdp_all_gather"][0]
             - block.breakdown_s["fsdp_all_gather"][0])
    assert extra == pytest.approx(workload.geometry.layers * 2 * 8 * one_call, rel=1e-9)
    assert not workload.fsdp_gathers_per_tensor
    assert replace(workload, stack="deepspeed").fsdp_gathers_per_tensor


def test_per_op_sac_recomputes_k_o_and_w3_by_hand():
    from mosaic.arch import Geometry
    from mosaic.perf.layer_costs import AttentionTimes, _per_op_sac_recompute

    # 4 query heads and 2 KV heads of 16: QKV width 64 + 2·32, so K is 32/128 = 1/4 of it.
    glu = Workload(geometry=Geometry(layers=2, d_model=64, heads=4, kv_heads=2, head_dim=16,
                                     ffn=160, vocab=256), global_batch=8, seq_len=128)
    one = np.ones(1)
    attention = AttentionTimes(gemm=one, qkv_forward=4 * one, output_forward=one, core=one,
                               core_forward=one, streaming=one, streaming_forward=one,
                               quantise_cast=0 * one, layernorm_forward=one, cp_exposed=one)
    up, down, streaming = 2 * one, 3 * one, 0.5 * one
    # GLU: K (1/4 of QKV), O, W3 (half the fused up GEMM) and all element-wise kernels.
    plan = single_plan(dp=1)
    assert _per_op_sac_recompute(glu, plan, attention, up, down, streaming)[0] == (
        pytest.approx(0.25 * 4 + 1 + 1 + 0.5))
    # Without a GLU the unsaved MLP matmul is W2 (the down projection).
    gelu = replace(glu, geometry=replace(glu.geometry, glu=False))
    assert _per_op_sac_recompute(gelu, plan, attention, up, down, streaming)[0] == (
        pytest.approx(0.25 * 4 + 1 + 3 + 0.5))


def test_torchtitan_selective_recomputes_matmuls_not_the_attention_core():
    from mosaic.perf.plan import Checkpointing

    machine = machine_for(H100, "bf16")
    workload = Workload(geometry=ladder_geometry(8), global_batch=8, seq_len=8192,
                        stack="torchtitan")
    calibration = default_calibration()
    by_mode = {mode: predict_step(workload, single_plan(dp=8, checkpointing=mode), machine,
                                  calibration) for mode in Checkpointing}
    none, sel, full = (by_mode[m] for m in (Checkpointing.NONE, Checkpointing.SELECTIVE,
                                            Checkpointing.FULL))
    assert sel.attention_core_s[0] == pytest.approx(none.attention_core_s[0])
    assert 0 < sel.breakdown_s["compute_recompute"][0] < full.breakdown_s["compute_recompute"][0]


def test_fp8_dispatch_halves_the_two_all_to_alls_that_carry_expert_inputs_by_hand():
    """dispatch_fp8: the forward dispatch and the combine's backward send 1 B per element
    plus one E8M0 scale byte per 32 (MXFP8); the forward combine and the dispatch's backward
    stay bf16. Pairwise all-to-all over ep=16 ranks on two 8-GPU nodes."""
    from mosaic.errors import MosaicInputError
    from mosaic.perf.collectives import all_to_all_time_s
    from mosaic.perf.layer_costs import expert_all_to_all_s
    from mosaic.perf.shapes import routed_tokens

    cluster = Cluster(system=get_system("DGX-H100"), n_nodes=2)
    machine = machine_for(cluster, "fp8")
    geometry = ladder_geometry(6, experts=64, top_k=4, split_factor=1)
    workload = Workload(geometry=geometry, global_batch=64, seq_len=2048, precision="fp8")
    plan = single_plan(dp=16, ep=16, micro_batch=1)
    tokens = routed_tokens(workload, plan)[0]

    def one(element_bytes: float) -> float:
        payload = tokens * geometry.d_model * element_bytes * geometry.moe.top_k
        return all_to_all_time_s(payload, np.array([16]), np.array([1]),
                                 machine.interconnect)[0]

    bf16 = expert_all_to_all_s(machine, workload, plan)[0]
    fp8 = expert_all_to_all_s(machine, replace(workload, dispatch_fp8=True), plan)[0]
    assert bf16 == pytest.approx(4 * one(2.0), rel=1e-12)
    assert fp8 == pytest.approx(2 * one(2.0) + 2 * one(1 + 1 / 32), rel=1e-12)
    assert fp8 < bf16
    with pytest.raises(MosaicInputError, match="dispatch_fp8 needs precision fp8"):
        Workload(geometry=geometry, global_batch=64, seq_len=2048, dispatch_fp8=True)


def test_fsdp_units_kept_gathered_gather_and_scatter_once_per_step():
    """Without PP, FSDP gathers and reduce-scatters every unit in each of the n_mb
    micro-batches; with fsdp_keep_gathered (NeMo AutoModel) once per step, the same
    predicate the memory model uses for its whole-stage buffers (schedule.py)."""
    from mosaic.perf.schedule import fsdp_gathered_through_step

    cluster = Cluster(system=get_system("DGX-H100"), n_nodes=8)
    machine = machine_for(cluster, "bf16")
    workload = Workload(geometry=ladder_geometry(2), global_batch=256, seq_len=1024,
                        stack="torchtitan")
    plan = single_plan(dp=64, micro_batch=1, sharding=Sharding.FSDP)  # n_mb = 4
    calibration = replace(default_calibration(), stack_overhead={})
    every = predict_step(workload, plan, machine, calibration).breakdown_s
    kept = predict_step(replace(workload, fsdp_keep_gathered=True), plan, machine,
                        calibration).breakdown_s
    for term in ("fsdp_all_gather", "fsdp_reduce_scatter"):
        assert every[term][0] > 0
        assert kept[term][0] == pytest.approx(every[term][0] / 4, rel=1e-9)
    assert not fsdp_gathered_through_step(workload, plan)[0]
    assert fsdp_gathered_through_step(replace(workload, fsdp_keep_gathered=True), plan)[0]


def test_megatron_fsdp_under_pp_regathers_each_micro_batch_torchtitan_keeps_the_stage():
    """With pp > 1, torch FSDP2 under torch.distributed.pipelining keeps each stage gathered
    and reduce-scatters once per step (its buffers hold the whole stage); Megatron-FSDP frees
    the un-sharded weights after fprop/dgrad and reduce-scatters in every backward (Megatron-LM
    docs megatron_fsdp.md): one unit and its prefetch, gathered again per micro-batch."""
    from mosaic.perf.memory import memory_breakdown_bytes
    from mosaic.perf.schedule import fsdp_gathered_through_step

    cluster = Cluster(system=get_system("DGX-H100"), n_nodes=8)
    machine = machine_for(cluster, "bf16")
    plan = single_plan(dp=16, pp=4, micro_batch=1, sharding=Sharding.FSDP)  # n_mb = 16
    calibration = replace(default_calibration(), stack_overhead={})
    runs = {}
    for stack in ("torchtitan", "megatron-core"):
        workload = Workload(geometry=ladder_geometry(4), global_batch=256, seq_len=1024,
                            stack=stack)
        runs[stack] = (fsdp_gathered_through_step(workload, plan)[0],
                       predict_step(workload, plan, machine, calibration).breakdown_s,
                       memory_breakdown_bytes(workload, plan)["communication_buffers"][0])
    (kept, titan, titan_buffers), (regathered, megatron, megatron_buffers) = runs.values()
    assert kept and not regathered
    assert megatron["fsdp_all_gather"][0] > 4 * titan["fsdp_all_gather"][0]
    assert megatron_buffers < titan_buffers / 2


@pytest.mark.parametrize("q_lora_rank", [None, 1536])
def test_per_op_sac_recomputes_the_unsaved_mla_matmuls_by_hand(q_lora_rank):
    """torchtitan's per-op SAC saves every second aten.mm of a block. MLA without a
    compressed query runs wq, wkv_a, wkv_b, wo: wkv_a and wo are recomputed; with one,
    wq_a, wq_b, wkv_a, wkv_b, wo: wq_b and wkv_b. The share of the lumped projection GEMM
    is by FLOPs (per TP rank: latent projections are not split). The router gate continues
    the count: after the odd count (compressed query) it is recomputed."""
    from mosaic.arch.hf_import import load_hf_config
    from mosaic.perf.kernels import memory_bound_time_s
    from mosaic.perf.layer_costs import (
        _ffn_streaming_bytes,
        attention_times,
        dense_block_times,
        gemm_s,
        per_op_sac_moe_matmul_shares,
    )
    from mosaic.perf.plan import Checkpointing

    geometry = load_hf_config(EXAMPLES / "hf" / "deepseek-v3.json")
    mla = replace(geometry.mla, q_lora_rank=q_lora_rank)
    geometry = replace(geometry, mla=mla)
    workload = Workload(geometry=geometry, global_batch=8, seq_len=2048, stack="torchtitan")
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    plan = single_plan(tp=2, dp=4, micro_batch=1, checkpointing=Checkpointing.SELECTIVE)
    d, heads, tp, tokens = geometry.d_model, geometry.heads, 2, np.array([2048.0])
    query = heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)
    wkv_a = d * (mla.kv_lora_rank + mla.qk_rope_head_dim)
    wkv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim) / tp
    if q_lora_rank:
        wq_a, wq_b = d * q_lora_rank, q_lora_rank * query / tp
        share, output_recomputed = (wq_b + wkv_b) / (wq_a + wq_b + wkv_a + wkv_b), False
    else:
        share, output_recomputed = wkv_a / (d * query / tp + wkv_a + wkv_b), True
    attention = attention_times(machine, workload, plan)
    width = geometry.ffn / tp
    up = gemm_s(machine, workload, tokens, 2 * width, d)  # W1 and W3: W3 recomputed
    activation = memory_bound_time_s(_ffn_streaming_bytes(tokens, width, True),
                                     machine.hbm_bw_bytes_per_s)
    by_hand = (share * attention.qkv_forward
               + (attention.output_forward if output_recomputed else 0.0)
               + up / 2 + attention.streaming_forward + activation)
    block = dense_block_times(machine, workload, plan)
    assert block.selective_recompute[0] == pytest.approx(by_hand[0], rel=1e-12)
    gate, _ = per_op_sac_moe_matmul_shares(workload, plan)
    assert gate == (1.0 if q_lora_rank else 0.0)


def _exposed_by_hand(communication_s: float, gemm_s: float, chunks: int) -> float:
    # A pipeline of `chunks` equal stages: max(C, G) + min(C, G)/n, minus the GEMM itself.
    return max(communication_s, gemm_s) + min(communication_s, gemm_s) / chunks - gemm_s


@pytest.mark.parametrize("stack", ["megatron-core", "torchtitan"])
def test_tp_comm_overlap_exposes_what_the_chunked_gemms_do_not_hide_by_hand(stack):
    """tp_comm_overlap on a tp=8 sequence-parallel dense block: each pass's all-gathers and
    reduce-scatters (half the block's TP communication each) run in 8 chunks under that
    pass's TP GEMMs; Megatron-Core (TE userbuffers) hides both passes, torchtitan's async
    TP the forward only."""
    from mosaic.perf.layer_costs import BACKWARD_TO_FORWARD_GEMM, dense_block_times

    machine = machine_for(H100, "bf16")
    workload = Workload(geometry=ladder_geometry(8), global_batch=8, seq_len=8192,
                        stack=stack)
    plan = single_plan(tp=8, micro_batch=1, sequence_parallel=True)
    plain = dense_block_times(machine, workload, plan)
    overlapped = dense_block_times(machine, replace(workload, tp_comm_overlap=True), plan)
    communication = plain.tp_all_gather[0] + plain.tp_reduce_scatter[0]
    gemm = plain.attention_gemm[0] + plain.mlp_gemm[0]
    gemm_forward = gemm / (1 + BACKWARD_TO_FORWARD_GEMM)
    forward = _exposed_by_hand(communication / 2, gemm_forward, 8)
    backward = (_exposed_by_hand(communication / 2, gemm - gemm_forward, 8)
                if stack == "megatron-core" else communication / 2)
    # the hidden rest slows the GEMMs beside it by 18.9% of its time (collectives.
    # OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN), charged to the collectives
    charged = forward + backward + 0.189 * (communication - forward - backward)
    assert overlapped.tp_all_gather[0] + overlapped.tp_reduce_scatter[0] == pytest.approx(
        charged, rel=1e-12)
    assert overlapped.tp_all_gather[0] == pytest.approx(
        plain.tp_all_gather[0] * charged / communication, rel=1e-12)
    # At tp=8 an 8B block's forward collectives outlast its forward GEMMs: the overlap hides
    # all but the excess and one chunk.
    assert communication / 2 > gemm_forward
    assert forward == pytest.approx(communication / 2 - gemm_forward * 7 / 8, rel=1e-12)
    # Everything else in the block is untouched.
    assert overlapped.forward[0] == plain.forward[0]
    assert overlapped.mlp_gemm[0] == plain.mlp_gemm[0]


def test_tp_comm_overlap_needs_sequence_parallelism():
    """Without sequence parallelism TP is an all-reduce, which neither implementation
    overlaps: nothing changes."""
    from mosaic.perf.layer_costs import dense_block_times

    machine = machine_for(H100, "bf16")
    workload = Workload(geometry=ladder_geometry(8), global_batch=8, seq_len=8192)
    plan = single_plan(tp=8, micro_batch=1, sequence_parallel=False)
    plain = dense_block_times(machine, workload, plan)
    overlapped = dense_block_times(machine, replace(workload, tp_comm_overlap=True), plan)
    assert plain.tp_all_reduce[0] > 0
    assert overlapped.tp_all_reduce[0] == plain.tp_all_reduce[0]
    assert overlapped.tp_all_gather[0] == plain.tp_all_gather[0] == 0.0


def test_save_dots_recomputes_the_element_wise_kernels_and_the_flash_forward():
    """jax-xla's selective (MaxText minimal_flash) keeps every matmul output: its backward
    reruns the forward's element-wise kernels and the flash forward (the softmax statistics
    are not saved), nothing else: exactly the forward's share outside the matmuls."""
    from mosaic.perf.layer_costs import dense_block_times

    machine = machine_for(H100, "bf16")
    workload = Workload(geometry=ladder_geometry(8), global_batch=8, seq_len=4096,
                        stack="jax-xla")
    block = dense_block_times(machine, workload, single_plan(dp=8, micro_batch=1))
    assert block.selective_core_recompute[0] == pytest.approx(block.attention_core_forward[0])
    matmuls_forward = (block.forward - block.attention_core_forward)[0]
    elementwise_forward = (block.selective_recompute - block.selective_core_recompute)[0]
    assert 0 < elementwise_forward < matmuls_forward
    # the element-wise forward is the block forward less its matmuls: attention GEMMs
    # (a third of their forward + backward time) and the FFN's up and down projections
    gemm_forward = block.attention_gemm[0] / 3 + block.mlp_gemm[0] / 3
    assert elementwise_forward == pytest.approx(matmuls_forward - gemm_forward, rel=1e-9)
