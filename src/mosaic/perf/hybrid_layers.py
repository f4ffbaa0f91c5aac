"""Seconds one GPU spends per micro-batch on each layer of a hybrid SSM/attention model.

A hybrid model (``Geometry.hybrid_pattern``; Megatron-Core's hybrid model,
megatron/core/models/hybrid @ d98e8a64dd) stacks single-purpose layers, each with its own
pre-norm and residual add: a Mamba-2 mixer ('M'), an attention mixer ('*'), an MLP ('-') or
an MoE layer ('E'). A transformer block is an attention layer followed by an MLP or MoE
layer, so the layers here are built from the parts of :mod:`mosaic.perf.layer_costs`'s
blocks: :func:`attention_times`, :func:`dense_ffn_parts` and :func:`moe_ffn_parts`, half of a
block's norm and residual traffic, and one tensor-parallel pair per mixer or MLP layer
(with sequence parallelism an all-gather before its column-parallel GEMM and a
reduce-scatter after its row-parallel one; Korthikanti et al. 2022, Sec. 4.2.2).

The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs"; Megatron-Core ``MambaMixer``,
megatron/core/ssm/mamba_mixer.py) is an input projection to z, x, B, C and dt (column
parallel: heads and groups split over TP), a depthwise causal convolution over x, B and C,
the chunked SSD scan, a gated RMSNorm and an output projection (row parallel). Training runs
mamba_ssm's ``mamba_split_conv1d_scan_combined`` (state-spaces/mamba @ e9594ce
mamba_ssm/ops/triton/ssd_combined.py): five Triton kernels forward (chunk cumsum, chunk
state, state passing, C·Bᵀ, chunk scan); the backward recomputes the convolution and four of
them and runs eleven of its own. The scan is memory-bound and timed by the bytes its kernels
move (:func:`ssd_scan_s`).

The gated DeltaNet mixer ('G'; Yang, Kautz, Hatamizadeh 2025; Megatron-Core
``GatedDeltaNet``, megatron/core/ssm/gated_delta_net) has the same shape: an input projection
to q, k, v, the output gate z and the per-head beta and alpha (column parallel), a depthwise
causal convolution over q, k and v, the chunked gated delta rule (flash-linear-attention's
``chunk_gated_delta_rule``, Triton kernels, with q and k L2-normalised inside and repeated to
the value heads), a gated RMSNorm and the output projection (row parallel); the delta rule
is memory-bound as the SSD scan (:func:`gdn_delta_rule_s`).

Hybrid models run on the stacks that build them (stack trait ``hybrid_models``: Megatron-Core
and its NeMo/Megatron-Bridge, NeMo AutoModel's Nemotron V3, which trains its mixer with the
same fused kernel); selective recompute here is Megatron-Core's recompute modules
(``core_attn``, ``layernorm``, ``mlp``, ``moe_act``, ``shared_experts``, ``moe``), full
recompute as for transformer blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mosaic.arch.flops import (
    FLOPS_PER_MULTIPLY_ADD,
    gdn_forward_flops_per_token,
    ssd_scan_forward_flops_per_token,
)
from mosaic.perf.collectives import all_to_all_time_s
from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.factorise import plan_key
from mosaic.perf.kernels import memory_bound_time_s as streaming_time_s
from mosaic.perf.layer_costs import (
    BACKWARD_TO_FORWARD_GEMM,
    BACKWARD_TO_FORWARD_STREAMING,
    DENSE_BLOCK_KEY,
    MOE_BLOCK_KEY,
    BlockTimes,
    attention_times,
    block_norm_residual_s,
    charged_all_to_all_s,
    dense_ffn_parts,
    fwd_bwd_s,
    gemm_s,
    moe_ffn_parts,
    moe_recompute_modules,
    overlapped_tp_collectives_s,
    quantise_cast_s,
    recompute_modules_forward_s,
    selective_core_attention_s,
    tp_collectives_s,
)
from mosaic.perf.machine import Machine
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.shapes import tokens_per_rank
from mosaic.perf.workload import Workload

# SSD scan kernels launched per layer and micro-batch (ssd_combined.py @ e9594ce):
# _mamba_chunk_scan_combined_fwd runs 5; _mamba_chunk_scan_combined_bwd recomputes 4 of them
# and runs 11 backward kernels.
SSD_FORWARD_KERNELS = 5
SSD_BACKWARD_KERNELS = 4 + 11
# The causal convolution's channels are read and written once forward (causal_conv1d);
# mamba_split_conv1d_scan_combined (checkpoint_lvl 1) recomputes it in the backward.
CONV_STREAMS = 2
# The gate and the norm after the scan: on Megatron-Core's training path (_ssm_training
# passes no rmsnorm_weight) the scan kernel reads z and writes the gated output, then the
# RMSNorm reads it and writes its output: three streams of d_inner.
GATED_NORM_STREAMS = 3
# Forward bytes of the scan per token, in units of its tensors (ssd_combined.py): x, B and C
# are read by two kernels each (chunk state and chunk scan; C·Bᵀ reads B and C), the fp32
# chunk states (H·P·N per chunk) are written, read and written by the state passing, and
# read by the chunk scan, the fp32 C·Bᵀ block (G·Q per token) written and read, and the
# output written with its pre-gate copy (out, out_x).
SSD_INPUT_READS = 2
SSD_STATE_PASSES = 4
SSD_CB_PASSES = 2
SSD_OUTPUT_WRITES = 2
# The chunked gated delta rule (fla-org/flash-linear-attention fla/ops/gated_delta_rule/
# chunk.py, the kernels Megatron-Core's GatedDeltaNet calls): forward the decay cumsum,
# K·Kᵀ, the triangular solve, W/U, the chunk states and the output, plus the L2 norms of q
# and k; backward the recomputed W/U and states, dv, the state gradients, dq/dk/dw/dg, the
# WY backward, the reverse cumsum and the two norm backwards.
GDN_FORWARD_KERNELS = 6 + 2
GDN_BACKWARD_KERNELS = 7 + 2
# Forward bytes per token, in units of its tensors: k is read by the K·Kᵀ, W/U and state
# kernels, q by the output, w and u written and read, the corrected values written and
# read, v read and the output written: six streams of each width; the fp32 C×C block per
# head written by K·Kᵀ, read and written (bf16) by the solve and read by W/U; the bf16
# chunk states (d_k·d_v per head and chunk) written and read.
GDN_QK_STREAMS = 6
GDN_V_STREAMS = 6
GDN_BLOCK_BYTES = FP32_BYTES + FP32_BYTES + 2 * ACTIVATION_BYTES
GDN_STATE_PASSES = 2


@dataclass(frozen=True)
class HybridLayerTimes:
    """Per-micro-batch times of each kind of layer of a hybrid model (arrays over plans)."""

    mamba: BlockTimes
    gdn: BlockTimes
    attention: BlockTimes
    mlp: BlockTimes
    moe: BlockTimes


def _layer_norm_residual_s(machine: Machine, workload: Workload, plans: ParallelPlans
                           ) -> tuple[np.ndarray, np.ndarray]:
    """(forward seconds of one layer's norm and residual add, of its norm): half of a
    transformer block's two of each."""
    block, norms = block_norm_residual_s(machine, workload, plans)
    return block / 2, norms / 2


def _one_tp_pair(machine: Machine, workload: Workload, plans: ParallelPlans,
                 gemm_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(all-gather, reduce-scatter, all-reduce) seconds of a layer's one TP pair, forward
    and backward, the gathers and scatters run under ``gemm_s`` with ``tp_comm_overlap``."""
    activation_bytes = tokens_per_rank(workload, plans) * workload.geometry.d_model * (
        ACTIVATION_BYTES)
    gather, scatter, reduce = tp_collectives_s(machine, plans, activation_bytes, pairs_forward=1)
    gather, scatter = overlapped_tp_collectives_s(workload, plans, gather, scatter, gemm_s)
    return gather, scatter, reduce


def _zero(plans: ParallelPlans) -> np.ndarray:
    return np.zeros(len(plans))


@plan_key(*DENSE_BLOCK_KEY, remember=without_top_k)
def attention_layer_times(machine: Machine, workload: Workload, plans: ParallelPlans
                          ) -> BlockTimes:
    """An attention layer ('*'): the attention part of a transformer block."""
    attention = attention_times(machine, workload, plans)
    block_norm_residual, _ = block_norm_residual_s(machine, workload, plans)
    norm_residual, norm = _layer_norm_residual_s(machine, workload, plans)
    cast_forward = attention.streaming_forward - block_norm_residual
    gather, scatter, reduce = _one_tp_pair(machine, workload, plans, attention.gemm)
    zero = _zero(plans)
    return BlockTimes(
        attention_gemm=attention.gemm, attention_core=attention.core,
        attention_core_forward=attention.core_forward,
        selective_recompute=recompute_modules_forward_s(workload, {
            "core_attn": attention.core_forward, "layernorm": norm}),
        selective_core_recompute=selective_core_attention_s(workload, attention),
        mlp_gemm=zero, shared_expert=zero, router=zero,
        streaming=norm_residual * (1 + BACKWARD_TO_FORWARD_STREAMING), moe_permute=zero,
        quantise_cast=attention.quantise_cast,
        forward=(attention.gemm / (1 + BACKWARD_TO_FORWARD_GEMM) + attention.core_forward
                 + norm_residual + cast_forward),
        tp_all_gather=gather, tp_reduce_scatter=scatter, tp_all_reduce=reduce,
        ep_all_to_all=zero, cp_send_recv=attention.cp_exposed)


@plan_key(*DENSE_BLOCK_KEY, remember=without_top_k)
def mlp_layer_times(machine: Machine, workload: Workload, plans: ParallelPlans) -> BlockTimes:
    """An MLP layer ('-'): the dense FFN part of a transformer block."""
    ffn = dense_ffn_parts(machine, workload, plans)
    norm_residual, norm = _layer_norm_residual_s(machine, workload, plans)
    gemm_forward = ffn.up + ffn.down
    gather, scatter, reduce = _one_tp_pair(machine, workload, plans, fwd_bwd_s(gemm_forward))
    zero = _zero(plans)
    return BlockTimes(
        attention_gemm=zero, attention_core=zero, attention_core_forward=zero,
        selective_recompute=recompute_modules_forward_s(workload, {
            "layernorm": norm, "mlp": gemm_forward + ffn.activation}),
        selective_core_recompute=zero,
        mlp_gemm=fwd_bwd_s(gemm_forward), shared_expert=zero, router=zero,
        streaming=(norm_residual + ffn.activation) * (1 + BACKWARD_TO_FORWARD_STREAMING),
        moe_permute=zero, quantise_cast=ffn.cast_forward + ffn.cast_backward,
        forward=gemm_forward + norm_residual + ffn.activation + ffn.cast_forward,
        tp_all_gather=gather, tp_reduce_scatter=scatter, tp_all_reduce=reduce,
        ep_all_to_all=zero, cp_send_recv=zero)


@plan_key(*MOE_BLOCK_KEY)
def moe_layer_times(machine: Machine, workload: Workload, plans: ParallelPlans) -> BlockTimes:
    """An MoE layer ('E'): the MoE part of a transformer block."""
    moe = moe_ffn_parts(machine, workload, plans)
    norm_residual, norm = _layer_norm_residual_s(machine, workload, plans)
    experts = moe.experts_up + moe.experts_down
    # (no batch-level EP overlap: Megatron-Core's combined 1F1B schedules GPT models only,
    # workload.Workload refuses it for a hybrid model)
    a2a_exposed = charged_all_to_all_s(machine, workload, moe.dispatch, moe.combine,
                                       moe.shared)
    zero = _zero(plans)
    return BlockTimes(
        attention_gemm=zero, attention_core=zero, attention_core_forward=zero,
        selective_recompute=recompute_modules_forward_s(workload, {
            "layernorm": norm, **moe_recompute_modules(moe)}),
        selective_core_recompute=zero,
        mlp_gemm=fwd_bwd_s(experts), shared_expert=fwd_bwd_s(moe.shared),
        router=(fwd_bwd_s(moe.router_gemm)
                + moe.router_stream * (1 + BACKWARD_TO_FORWARD_STREAMING)),
        streaming=((norm_residual + moe.stream) * (1 + BACKWARD_TO_FORWARD_STREAMING)
                   + moe.permute_forward + moe.permute_backward),
        moe_permute=moe.permute_forward + moe.permute_backward,
        quantise_cast=moe.cast_forward + moe.cast_backward,
        forward=(experts + moe.shared + moe.router_gemm + moe.router_stream + norm_residual
                 + moe.stream + moe.permute_forward + moe.cast_forward),
        tp_all_gather=moe.etp_gather, tp_reduce_scatter=moe.etp_scatter, tp_all_reduce=zero,
        ep_all_to_all=a2a_exposed, cp_send_recv=zero)


def _memory_bound_passes_s(machine: Machine, forward_flops: np.ndarray,
                           backward_flops: np.ndarray, forward_bytes: np.ndarray,
                           kernels: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of a memory-bound chain of Triton kernels: each pass the
    longer of its FLOPs at the dense bf16 datasheet peak (a bound only) and its bytes at the
    streaming kernels' HBM efficiency (kernels.memory_bound_time_s), the backward moving
    twice the forward's bytes plus the recomputed forward's, plus one launch latency per
    kernel (``kernels``: forward, backward)."""
    peak = machine.mfu_peak_flops_per_s
    latency = machine.gemm_params.kernel_latency_s
    backward_bytes = (BACKWARD_TO_FORWARD_STREAMING + 1) * forward_bytes
    forward = kernels[0] * latency + np.maximum(
        forward_flops / peak, streaming_time_s(forward_bytes, machine.hbm_bw_bytes_per_s,
                                               kernel_latency_s=0.0))
    backward = kernels[1] * latency + np.maximum(
        backward_flops / peak, streaming_time_s(backward_bytes, machine.hbm_bw_bytes_per_s,
                                                kernel_latency_s=0.0))
    return forward, backward


def ssd_scan_s(machine: Machine, workload: Workload, plans: ParallelPlans
               ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one Mamba layer's chunked SSD scan per micro-batch.

    Bytes: the tensors each kernel reads and writes (module constants). FLOPs:
    :func:`~mosaic.arch.flops.ssd_scan_forward_flops_per_token` over the TP rank's heads
    and groups, the backward twice the forward plus the recomputed C·Bᵀ and chunk states.
    The scan is memory-bound: about 30 FLOPs per byte for Nemotron 3 Nano's shapes against
    a machine balance near 300 on H100 and B200 (:func:`_memory_bound_passes_s`).
    (Consistency, not a fit: per layer this comes out near the flash-attention time of a
    2K-token sequence, where Dao & Gu 2024, Fig. 10, find SSD overtaking FlashAttention-2.)
    """
    mamba = workload.geometry.mamba
    assert mamba is not None
    tokens = tokens_per_rank(workload, plans)
    tp = plans.tp.astype(float)
    forward_flops = tokens * ssd_scan_forward_flops_per_token(workload.geometry) / tp
    recomputed_flops = tokens * FLOPS_PER_MULTIPLY_ADD * (
        mamba.groups * mamba.chunk_size * mamba.state_dim
        + mamba.heads * mamba.state_dim * mamba.head_dim) / tp
    state_elements = mamba.heads * mamba.head_dim * mamba.state_dim / mamba.chunk_size
    forward_bytes = tokens / tp * (
        SSD_INPUT_READS * mamba.conv_channels * ACTIVATION_BYTES
        + SSD_STATE_PASSES * state_elements * FP32_BYTES
        + SSD_CB_PASSES * mamba.groups * mamba.chunk_size * FP32_BYTES
        + SSD_OUTPUT_WRITES * mamba.inner_width * ACTIVATION_BYTES)
    return _memory_bound_passes_s(
        machine, forward_flops, BACKWARD_TO_FORWARD_GEMM * forward_flops + recomputed_flops,
        forward_bytes, (SSD_FORWARD_KERNELS, SSD_BACKWARD_KERNELS))


def gdn_delta_rule_s(machine: Machine, workload: Workload, plans: ParallelPlans
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one gated DeltaNet layer's chunked delta rule per
    micro-batch, as :func:`ssd_scan_s`: the bytes its kernels move (module constants)
    against its FLOPs (:func:`~mosaic.arch.flops.gdn_forward_flops_per_token` over the TP
    rank's value heads; the backward twice the forward plus the recomputed W/U and states).
    About 40 FLOPs per byte for Qwen3-Next's shapes: memory-bound."""
    gdn = workload.geometry.gdn
    assert gdn is not None
    tokens = tokens_per_rank(workload, plans)
    tp = plans.tp.astype(float)
    forward_flops = tokens * gdn_forward_flops_per_token(workload.geometry) / tp
    recomputed_flops = tokens * FLOPS_PER_MULTIPLY_ADD * gdn.value_heads * (
        gdn.chunk_size * (gdn.key_head_dim + gdn.value_head_dim)
        + 2 * gdn.key_head_dim * gdn.value_head_dim) / tp
    query_key_width = gdn.value_heads * gdn.key_head_dim  # repeated to the value heads
    state_elements = gdn.value_heads * gdn.key_head_dim * gdn.value_head_dim / gdn.chunk_size
    forward_bytes = tokens / tp * (
        (GDN_QK_STREAMS * query_key_width + GDN_V_STREAMS * gdn.value_width) * ACTIVATION_BYTES
        + gdn.value_heads * gdn.chunk_size * GDN_BLOCK_BYTES
        + GDN_STATE_PASSES * state_elements * ACTIVATION_BYTES)
    return _memory_bound_passes_s(
        machine, forward_flops, BACKWARD_TO_FORWARD_GEMM * forward_flops + recomputed_flops,
        forward_bytes, (GDN_FORWARD_KERNELS, GDN_BACKWARD_KERNELS))


@dataclass(frozen=True)
class _SequenceMixer:
    """Widths and kernels of a state-space mixer layer (Mamba-2 or gated DeltaNet), before
    TP: its input projection's output, the output projection's input, the convolution's
    channels, how many times the convolution streams (Mamba's is recomputed in the
    backward), and its scan or delta rule, (forward, backward) seconds per micro-batch."""

    in_proj_width: int
    inner_width: int
    conv_channels: int
    conv_passes: float
    rule: tuple[np.ndarray, np.ndarray]


def _sequence_mixer_layer_times(machine: Machine, workload: Workload, plans: ParallelPlans,
                                mixer: _SequenceMixer) -> BlockTimes:
    """A Mamba or gated DeltaNet layer: input projection (column parallel), causal
    convolution, the scan or delta rule, gated norm (three streams of the inner width: the
    rule's output and z read, the output written), output projection (row parallel), one TP
    pair, and under context parallelism the all-to-all of the projection's output to
    head-parallel before the convolution and of the rule's output back, mirrored in the
    backward (Megatron-Core mamba_context_parallel.py pre_conv_ssm / post_conv_ssm;
    gated_delta_net/common.py a2a_cp_to_hp and _gated_norm_and_a2a @ d98e8a64dd; the CP
    group's ranks lie tp apart)."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    tp = plans.tp
    in_width, inner = mixer.in_proj_width / tp, mixer.inner_width / tp
    in_proj = gemm_s(machine, workload, tokens, in_width, geometry.d_model)
    out_proj = gemm_s(machine, workload, tokens, geometry.d_model, inner)
    rule_forward, rule_backward = mixer.rule
    conv = streaming_time_s(tokens * CONV_STREAMS * mixer.conv_channels / tp * ACTIVATION_BYTES,
                            machine.hbm_bw_bytes_per_s)
    gated_norm = streaming_time_s(tokens * GATED_NORM_STREAMS * inner * ACTIVATION_BYTES,
                                  machine.hbm_bw_bytes_per_s)
    norm_residual, norm = _layer_norm_residual_s(machine, workload, plans)
    cast_forward, cast_backward = quantise_cast_s(machine, workload, tokens, (
        (geometry.d_model, in_width), (inner, geometry.d_model)))
    gemm_forward = in_proj + out_proj
    gather, scatter, reduce = _one_tp_pair(machine, workload, plans, fwd_bwd_s(gemm_forward))
    ic = machine.interconnect
    context_parallel = 2 * (
        all_to_all_time_s(tokens * in_width * ACTIVATION_BYTES, plans.cp, tp, ic)
        + all_to_all_time_s(tokens * inner * ACTIVATION_BYTES, plans.cp, tp, ic))
    zero = _zero(plans)
    return BlockTimes(
        attention_gemm=zero, attention_core=zero, attention_core_forward=zero,
        selective_recompute=recompute_modules_forward_s(workload, {"layernorm": norm}),
        selective_core_recompute=zero,
        mlp_gemm=zero, shared_expert=zero, router=zero,
        streaming=((norm_residual + gated_norm) * (1 + BACKWARD_TO_FORWARD_STREAMING)
                   + conv * mixer.conv_passes),
        moe_permute=zero, quantise_cast=cast_forward + cast_backward,
        forward=gemm_forward + rule_forward + conv + gated_norm + norm_residual + cast_forward,
        tp_all_gather=gather, tp_reduce_scatter=scatter, tp_all_reduce=reduce,
        ep_all_to_all=zero, cp_send_recv=np.where(plans.cp > 1, context_parallel, 0.0),
        ssm_gemm=fwd_bwd_s(gemm_forward), ssm_scan=rule_forward + rule_backward)


@plan_key(*DENSE_BLOCK_KEY, remember=without_top_k)
def mamba_layer_times(machine: Machine, workload: Workload, plans: ParallelPlans
                      ) -> BlockTimes:
    """A Mamba-2 layer ('M'): input projection, causal convolution, SSD scan, gated norm,
    output projection (module docstring); the convolution runs once more in the backward
    (mamba_split_conv1d_scan_combined recomputes it, checkpoint_lvl 1)."""
    mamba = workload.geometry.mamba
    assert mamba is not None
    return _sequence_mixer_layer_times(machine, workload, plans, _SequenceMixer(
        mamba.in_proj_width, mamba.inner_width, mamba.conv_channels,
        2 + BACKWARD_TO_FORWARD_STREAMING, ssd_scan_s(machine, workload, plans)))


@plan_key(*DENSE_BLOCK_KEY, remember=without_top_k)
def gdn_layer_times(machine: Machine, workload: Workload, plans: ParallelPlans) -> BlockTimes:
    """A gated DeltaNet layer ('G'): input projection, causal convolution (fla
    causal_conv1d, forward and its backward), chunked delta rule, gated norm, output
    projection (module docstring)."""
    gdn = workload.geometry.gdn
    assert gdn is not None
    return _sequence_mixer_layer_times(machine, workload, plans, _SequenceMixer(
        gdn.in_proj_width, gdn.value_width, gdn.conv_channels,
        1 + BACKWARD_TO_FORWARD_STREAMING, gdn_delta_rule_s(machine, workload, plans)))


def hybrid_layer_times(machine: Machine, workload: Workload, plans: ParallelPlans
                       ) -> HybridLayerTimes:
    """The five layer kinds' times. A kind without its configuration (no ``mamba``, ``gdn``
    or ``moe`` block) has no layers in the pattern, so another kind's times stand in for it,
    counted zero times."""
    geometry = workload.geometry
    attention = attention_layer_times(machine, workload, plans)
    mlp = mlp_layer_times(machine, workload, plans)
    return HybridLayerTimes(
        mamba=mamba_layer_times(machine, workload, plans) if geometry.mamba else attention,
        gdn=gdn_layer_times(machine, workload, plans) if geometry.gdn else attention,
        attention=attention, mlp=mlp,
        moe=moe_layer_times(machine, workload, plans) if geometry.moe else mlp)
