"""Seconds one GPU spends per micro-batch on each kind of transformer block.

Every term is an array over plans (:class:`~mosaic.perf.plan.ParallelPlans`). Shapes follow
Megatron-Core's parallel layers (Shoeybi et al. 2019; Korthikanti et al. 2022): a
micro-batch on one CP rank has ``b·s/cp`` tokens; column-parallel GEMMs split their output
and row-parallel GEMMs their reduction over TP; with sequence parallelism, norms and
residuals run on ``1/tp`` of the tokens and TP communicates by all-gather/reduce-scatter.
MoE blocks route ``b·s/(cp·tp)`` tokens per rank (sequence-parallel input), K copies each,
over E/ep local experts; the grouped-GEMM tile per expert is
``M = tokens_per_rank·ep·etp·K/E`` (paper Sec. 5.3), which does not shrink with EP.

Backward GEMMs cost twice the forward (data and weight gradients); flash-attention
backward is timed by its own fit (Dao 2023).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from mosaic.arch import AttentionKind
from mosaic.arch.counts import ffn_up_projections, ffn_weight_matrices
from mosaic.arch.flops import TRAIN_TO_FORWARD_FLOPS
from mosaic.perf.attention_kernels import (
    JAX_FLASH_BLOCK_TOKENS,
    AttentionKernel,
    materialises_scores,
    resolve_attention_kernel,
)
from mosaic.perf.collectives import (
    DEEPEP_COMMUNICATION_SMS,
    all_gather_time_s,
    all_reduce_time_s,
    all_to_all_time_s,
    group_placement,
    hidden_collective_slowdown_s,
    node_deduplicated_dispatch_time_s,
    reduce_scatter_time_s,
    send_recv_time_s,
)
from mosaic.perf.element_bytes import ACTIVATION_BYTES, BF16_BYTES, FP32_BYTES
from mosaic.perf.factorise import plan_key
from mosaic.perf.kernels import (
    FLASH_BACKWARD_TO_FORWARD_FLOPS,
    flash_attention_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
)
from mosaic.perf.kernels import memory_bound_time_s as streaming_time_s
from mosaic.perf.machine import Machine
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.moe_permute_traffic import ANALYTICAL_PERMUTE
from mosaic.perf.moe_permute_traffic import permute_bytes as sourced_permute_bytes
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.ring_attention import (
    TORCH_RING,
    ULYSSES,
    ring_kernels,
    torch_ring_exposed_s,
    torch_ring_streaming_s,
)
from mosaic.perf.routing_load import max_domains_per_token
from mosaic.perf.shapes import (
    attention_widths,
    expert_copies,
    local_experts,
    mla_input_projections,
    routed_tokens,
    sequence_shard_tokens,
    tokens_per_expert,
    tokens_per_rank,
)
from mosaic.perf.workload import (
    NVFP4_ELEMENT_BYTES,
    Dispatcher,
    Precision,
    Workload,
    measured_table_dtype,
)
from mosaic.stacks import SelectiveRecompute

# dgrad + wgrad, each the forward's FLOPs: training's 3x forward less the forward itself
BACKWARD_TO_FORWARD_GEMM = float(TRAIN_TO_FORWARD_FLOPS - 1)
BACKWARD_TO_FORWARD_STREAMING = 2.0  # element-wise backward reads grads and saved inputs
# Streamed bytes per token of one block's forward, in units of d (bf16, read + write):
# two norms (read d, write d) and two residual adds (read 2d, write d) (Korthikanti et al.
# 2022 Sec. 4.1 count the same tensors).
NORM_BYTES_PER_TOKEN_PER_D = 2 * 2 * ACTIVATION_BYTES
NORM_RESIDUAL_BYTES_PER_TOKEN_PER_D = NORM_BYTES_PER_TOKEN_PER_D + 2 * 3 * ACTIVATION_BYTES
# The FFN activation's bf16 streams per element of its width: SwiGLU reads gate and up and
# writes one; GELU reads one and writes one.
GLU_STREAMS = 3
ACTIVATION_STREAMS = 2
# Router scores are fp32 (paper F.3: "the fp32 router is a precision island"): sigmoid,
# top-k and gate normalisation each stream E fp32 values per token.
ROUTER_STREAMS = 3
# An FP8 GEMM operand is quantised from bf16 by a streaming kernel that reads it (2 B) and
# writes a row-wise and a column-wise (transposed) FP8 copy (1 B each), because the other
# GEMM that consumes it in backward needs the transposed layout (Transformer Engine FP8
# primer; Micikevicius et al. 2022, "FP8 formats for deep learning", Sec. 3). Forward
# quantises each GEMM input, backward each output gradient; weights are cast once per
# step (Megatron-Core's is_first_microbatch caching) and left out.
FP8_CAST_BYTES_PER_ELEMENT = ACTIVATION_BYTES + 2
# An NVFP4 GEMM input or output gradient (both take the random Hadamard transform on their
# column-wise copy) is quantised by three kernels, each reading the bf16 tensor: the per-
# tensor amax of the input and of its transformed transpose (nvte_hadamard_transform_amax),
# the row-wise cast and the fused transform-and-cast of the column-wise copy, each writing
# NVFP4_ELEMENT_BYTES (transformer_engine/pytorch/csrc/quantizer.cpp NVFP4Quantizer::
# quantize_impl @ v2.9; recipe NVFP4BlockScaling applies the transform to inputs and
# gradients, transformer_engine/common/recipe/__init__.py). That is the fused path (bf16
# input, rows a multiple of 64, columns of 128, as block GEMMs' shapes are); otherwise TE
# writes and re-reads a transformed bf16 copy first, which is not counted.
NVFP4_CAST_BYTES_PER_ELEMENT = 3 * ACTIVATION_BYTES + 2 * NVFP4_ELEMENT_BYTES
CAST_BYTES_PER_ELEMENT = {Precision.FP8: FP8_CAST_BYTES_PER_ELEMENT,
                          Precision.FP4: NVFP4_CAST_BYTES_PER_ELEMENT}
# An FP8 dispatch payload: one byte per element plus one E8M0 scale byte per 32-element
# block (OCP Microscaling Formats (MX) v1.0, MXFP8; Megatron-Core moe_dispatch_fwd_dtype
# 'mxfp8', transformer_config.py @ 7afe031974).
FP8_DISPATCH_BYTES_PER_ELEMENT = 1 + 1 / 32
# Materialised attention's softmax per score element, bf16: forward reads the scores and
# writes the probabilities; backward reads P and dP and writes dS.
REFERENCE_SOFTMAX_FWD_BYTES_PER_SCORE = 2 * ACTIVATION_BYTES
REFERENCE_SOFTMAX_BWD_BYTES_PER_SCORE = 3 * ACTIVATION_BYTES
# The plan fields a block's costs read (mosaic.perf.factorise): per-rank tokens (micro-batch,
# cp), TP with sequence parallelism, and for MoE blocks the expert layout (ep, etp). A
# layout search evaluates each block once per distinct value of these fields.
DENSE_BLOCK_KEY = ("tp", "cp", "micro_batch", "sequence_parallel")
MOE_BLOCK_KEY = (*DENSE_BLOCK_KEY, "ep", "etp")


@dataclass(frozen=True)
class BlockTimes:
    """Per-micro-batch seconds of one block on one GPU (arrays over plans), fwd + bwd."""

    attention_gemm: np.ndarray
    attention_core: np.ndarray
    attention_core_forward: np.ndarray
    selective_recompute: np.ndarray  # forward time SELECTIVE checkpointing recomputes
    selective_core_recompute: np.ndarray  # its attention-core part
    mlp_gemm: np.ndarray  # dense FFN (dense blocks) or routed experts (MoE blocks)
    shared_expert: np.ndarray
    router: np.ndarray
    streaming: np.ndarray  # norms, residuals, activation function, permute/unpermute
    # the part of streaming by which the MoE token movement as the stack runs it exceeds
    # (negative: falls short of) the analytical permute + unpermute count
    moe_permute: np.ndarray
    quantise_cast: np.ndarray  # FP8 or NVFP4 quantisation of GEMM operands (else zero)
    forward: np.ndarray  # forward share of all of the above (recomputed under full)
    tp_all_gather: np.ndarray  # sequence-parallel gathers (and expert-TP token gathers)
    tp_reduce_scatter: np.ndarray  # sequence-parallel scatters (and expert-TP scatters)
    tp_all_reduce: np.ndarray  # TP without sequence parallelism
    ep_all_to_all: np.ndarray  # exposed part, after overlap with the shared expert
    cp_send_recv: np.ndarray  # exposed part, after overlap with attention
    # a hybrid model's state-space mixers (Mamba-2 and gated DeltaNet layers,
    # perf/hybrid_layers.py): in/out projections, and the chunked SSD scan or delta rule,
    # forward + backward; zero in transformer blocks
    ssm_gemm: np.ndarray | float = 0.0
    ssm_scan: np.ndarray | float = 0.0

    @property
    def tp_communication(self) -> np.ndarray:
        return self.tp_all_gather + self.tp_reduce_scatter + self.tp_all_reduce

    @property
    def compute(self) -> np.ndarray:
        return (self.attention_gemm + self.attention_core + self.mlp_gemm
                + self.shared_expert + self.router + self.streaming + self.quantise_cast
                + self.ssm_gemm + self.ssm_scan)


def weighted_block_times(parts: list[tuple[np.ndarray | float, BlockTimes]]) -> BlockTimes:
    """Field by field, the sum of weight × times over ``parts`` (e.g. a hybrid model's
    average layer: each kind's times weighted by its share of the layers)."""
    fields = {name: sum(weight * getattr(times, name) for weight, times in parts)
              for name in BlockTimes.__dataclass_fields__}
    return BlockTimes(**fields)


def gemm_s(
    machine: Machine, workload: Workload, m: ArrayLike, n: ArrayLike, k: ArrayLike,
    routed_experts: bool = False,
) -> np.ndarray:
    """Forward seconds of an m×k by k×n GEMM at the workload's GEMM precision; in bf16 when
    only the routed experts are quantised and this GEMM is not theirs (``routed_experts``:
    Workload.quantised_gemms)."""
    if not (routed_experts or workload.dense_gemms_quantised):
        return gemm_time_s(m, n, k, machine.bf16_gemm_rate_flops_per_s,
                           machine.hbm_bw_bytes_per_s, machine.sm_count,
                           bytes_per_element=BF16_BYTES, params=machine.gemm_params,
                           table=machine.gemm_table, dtype=str(Precision.BF16))
    element_bytes = workload.gemm_element_bytes
    return gemm_time_s(m, n, k, machine.gemm_rate_flops_per_s, machine.hbm_bw_bytes_per_s,
                       machine.sm_count, bytes_per_element=element_bytes,
                       params=machine.gemm_params, table=machine.gemm_table,
                       dtype=gemm_dtype(workload))


def gemm_dtype(workload: Workload) -> str:
    """Dtype key of measured GEMM tables for the workload's precision."""
    return measured_table_dtype(workload.precision, workload.fp8_recipe)


def _grouped_gemm(machine: Machine, workload: Workload, groups: ArrayLike,
                  m_per_group: ArrayLike, n: ArrayLike, k: ArrayLike) -> np.ndarray:
    element_bytes = workload.gemm_element_bytes
    return grouped_gemm_time_s(groups, m_per_group, n, k, machine.gemm_rate_flops_per_s,
                               machine.hbm_bw_bytes_per_s, machine.sm_count,
                               bytes_per_element=element_bytes, params=machine.gemm_params,
                               table=machine.grouped_gemm_table, dtype=gemm_dtype(workload))


def quantise_cast_s(machine: Machine, workload: Workload, tokens: ArrayLike,
                    gemms: tuple[tuple[ArrayLike, ArrayLike], ...],
                    routed_experts: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds quantising the operands of FP8 or NVFP4 GEMMs of
    ``tokens`` rows, each given as (k, n): forward casts the tokens×k input, backward the
    tokens×n output gradient (:data:`CAST_BYTES_PER_ELEMENT`). Zero unless the workload runs
    these GEMMs in low precision (``routed_experts``: they are the routed experts', which
    Workload.quantised_gemms routed_experts quantises alone)."""
    cast_bytes = CAST_BYTES_PER_ELEMENT.get(workload.precision)
    if cast_bytes is None or not (routed_experts or workload.dense_gemms_quantised):
        zero = np.zeros(np.shape(tokens))
        return zero, zero
    rows = cast_bytes * np.asarray(tokens, dtype=float)
    forward = sum(streaming_time_s(rows * np.asarray(k, dtype=float), machine.hbm_bw_bytes_per_s)
                  for k, _ in gemms)
    backward = sum(streaming_time_s(rows * np.asarray(n, dtype=float),
                                    machine.hbm_bw_bytes_per_s) for _, n in gemms)
    return forward, backward


def fwd_bwd_s(forward_s: np.ndarray) -> np.ndarray:
    """Forward and backward seconds of GEMMs whose forward takes ``forward_s``."""
    return forward_s * (1 + BACKWARD_TO_FORWARD_GEMM)


def tp_collectives_s(machine: Machine, plans: ParallelPlans, activation_bytes: np.ndarray,
                    pairs_forward: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(all-gather, reduce-scatter, all-reduce) seconds of ``pairs_forward`` TP pairs, fwd+bwd.

    With sequence parallelism each pair is an all-gather plus a reduce-scatter of the full
    activation; without it, one all-reduce (Korthikanti et al. 2022, Sec. 4.2.2). The
    backward mirrors the forward.
    """
    ic = machine.interconnect
    sp = plans.sequence_parallel
    repeats = 2 * pairs_forward
    gather = np.where(sp, repeats * all_gather_time_s(activation_bytes, plans.tp, 1, ic), 0.0)
    scatter = np.where(sp, repeats * reduce_scatter_time_s(activation_bytes, plans.tp, 1, ic),
                       0.0)
    reduce = np.where(sp, 0.0, repeats * all_reduce_time_s(activation_bytes, plans.tp, 1, ic))
    return gather, scatter, reduce


def _pipelined_exposed_s(communication_s: np.ndarray, gemm_s: np.ndarray,
                         chunks: np.ndarray) -> np.ndarray:
    """Communication a chunked GEMM does not hide: n equal stages of communication C and
    compute G take max(C, G) + min(C, G)/n, so max(0, C − G) + min(C, G)/n stays exposed."""
    return (np.maximum(0.0, communication_s - gemm_s)
            + np.minimum(communication_s, gemm_s) / chunks)


def overlapped_tp_collectives_s(workload: Workload, plans: ParallelPlans, gather: np.ndarray,
                               scatter: np.ndarray, gemm_s: np.ndarray
                               ) -> tuple[np.ndarray, np.ndarray]:
    """Exposed (all-gather, reduce-scatter) seconds when ``workload.tp_comm_overlap`` runs
    the sequence-parallel collectives under the TP GEMMs that consume or produce them
    (``gemm_s``, forward + backward; the collectives split evenly between the passes).

    Both implementations split the forward GEMMs into tp chunks and move one chunk's
    activations while the previous chunk multiplies: Transformer Engine's userbuffers
    behind Megatron-Core --tp-comm-overlap (megatron/training/arguments.py; TE
    transformer_engine/pytorch/module/base.py initialize_ub), which also overlaps the
    backward's collectives with the dgrad and wgrad GEMMs (its bulk overlaps), and
    PyTorch's micro-pipelined TP behind torchtitan's async TP (torch/distributed/
    _symmetric_memory fused_all_gather_matmul / fused_matmul_reduce_scatter), reported to
    speed up the forward pass (~20-29%) far more than the step (~8%), so on stacks whose
    ``tp_overlap_passes`` is ``forward`` the backward's collectives stay exposed
    (discuss.pytorch.org/t/209487, "Introducing Async Tensor Parallelism in PyTorch").
    Unchanged without sequence parallelism (both need it) or without the overlap.
    """
    if not workload.tp_comm_overlap:
        return gather, scatter
    half = (gather + scatter) / 2
    gemm_forward = gemm_s / (1 + BACKWARD_TO_FORWARD_GEMM)
    exposed = _pipelined_exposed_s(half, gemm_forward, plans.tp) + (
        _pipelined_exposed_s(half, gemm_s - gemm_forward, plans.tp)
        if workload.traits.tp_overlap_passes == "forward_backward" else half)
    communication = 2 * half
    # the part hidden under the GEMMs still slows them, charged to the collectives it
    # comes from
    exposed = exposed + hidden_collective_slowdown_s(communication, exposed)
    share = np.divide(exposed, communication, out=np.ones_like(communication),
                      where=communication > 0)
    return gather * share, scatter * share


@dataclass(frozen=True)
class AttentionTimes:
    """Per-micro-batch seconds of one attention block (arrays over plans)."""

    gemm: np.ndarray  # QKV and output projections, forward + backward
    qkv_forward: np.ndarray
    output_forward: np.ndarray
    core: np.ndarray  # flash attention, forward + backward
    core_forward: np.ndarray
    streaming: np.ndarray  # norms and residuals, forward + backward
    streaming_forward: np.ndarray  # forward norms and residuals plus forward FP8/NVFP4 casts
    layernorm_forward: np.ndarray  # forward of the block's two norms (recompute module)
    quantise_cast: np.ndarray  # FP8/NVFP4 quantisation of the projections' operands, fwd + bwd
    cp_exposed: np.ndarray


def _reference_attention_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                           heads: np.ndarray, seq_q: np.ndarray, head_dim: int
                           ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of materialised attention on one GPU per micro-batch.

    Forward: QK^T and PV as GEMMs over all b·h·s_q·s_k scores (the causal mask is applied
    to the full matrix, so no work is skipped) and one fused softmax that reads the bf16
    scores and writes bf16 probabilities. Backward: the four GEMMs for dQ, dK, dV and dP
    (twice the forward's) and the softmax gradient, which reads P and dP and writes dS
    (Vaswani et al. 2017 attention as einsums, as XLA lowers MaxText's dot_product path).
    """
    rows = plans.micro_batch * heads * seq_q  # query rows over all local heads
    seq_k = workload.seq_len
    scores = rows * seq_k
    qk = gemm_s(machine, workload, rows, seq_k, head_dim)
    pv = gemm_s(machine, workload, rows, head_dim, seq_k)
    softmax_fwd = streaming_time_s(scores * REFERENCE_SOFTMAX_FWD_BYTES_PER_SCORE,
                                   machine.hbm_bw_bytes_per_s)
    softmax_bwd = streaming_time_s(scores * REFERENCE_SOFTMAX_BWD_BYTES_PER_SCORE,
                                   machine.hbm_bw_bytes_per_s)
    return qk + pv + softmax_fwd, BACKWARD_TO_FORWARD_GEMM * (qk + pv) + softmax_bwd


# Levanter's blockwise attention backward (models/flash_attention.py
# _flash_attention_backward) per block pair: S = QK^T and P recomputed from the saved
# log-sum-exp, then dV = P^T dO, dP = dO V^T, dQ = dS K and dK = dS^T Q: five GEMMs of the
# forward's two shapes, 2.5 times the forward's GEMM FLOPs.
JAX_FLASH_BACKWARD_TO_FORWARD_GEMM = FLASH_BACKWARD_TO_FORWARD_FLOPS


def jax_flash_block_fraction(seq_len: int, block_tokens: int = JAX_FLASH_BLOCK_TOKENS
                             ) -> float:
    """Share of the s x s block pairs levanter's causal blockwise attention computes: with
    n = s / block query and key blocks it runs key blocks 0..i for query block i
    (flash_attention.py do_o_block: j_end = min(i + 1, Tc)), n(n + 1)/2 of n^2 pairs."""
    n = max(1, -(-seq_len // block_tokens))
    return (n + 1) / (2 * n)


def _jax_flash_attention_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                           heads: np.ndarray, seq_q: np.ndarray, head_dim: int
                           ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of levanter's blockwise XLA attention per micro-batch.

    Every computed block pair is the reference kernel on a block: the QK^T and PV GEMMs over
    its block x block scores and a softmax pass that reads the scores and writes the
    probabilities through HBM (XLA fuses the element-wise ops, not the GEMMs). Forward: the
    causal share of the pairs (:func:`jax_flash_block_fraction`). Backward: the five GEMMs of
    ``JAX_FLASH_BACKWARD_TO_FORWARD_GEMM`` plus the recomputed forward softmax and the
    softmax gradient on the same pairs. A sequence shorter than a block runs materialised
    attention (``_reference_attention_s``)."""
    block = min(JAX_FLASH_BLOCK_TOKENS, workload.seq_len)
    fraction = jax_flash_block_fraction(workload.seq_len)
    rows = plans.micro_batch * heads * seq_q
    pairs_per_row = fraction * workload.seq_len / block  # key blocks each query row meets
    qk = pairs_per_row * gemm_s(machine, workload, rows, block, head_dim)
    pv = pairs_per_row * gemm_s(machine, workload, rows, head_dim, block)
    scores = rows * workload.seq_len * fraction
    softmax_fwd = streaming_time_s(scores * REFERENCE_SOFTMAX_FWD_BYTES_PER_SCORE,
                                   machine.hbm_bw_bytes_per_s)
    softmax_bwd = streaming_time_s(scores * (REFERENCE_SOFTMAX_FWD_BYTES_PER_SCORE
                                             + REFERENCE_SOFTMAX_BWD_BYTES_PER_SCORE),
                                   machine.hbm_bw_bytes_per_s)
    return (qk + pv + softmax_fwd,
            JAX_FLASH_BACKWARD_TO_FORWARD_GEMM * (qk + pv) + softmax_bwd)


def block_norm_residual_s(machine: Machine, workload: Workload, plans: ParallelPlans
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(forward seconds of one block's norms and residual adds, forward seconds of its two
    norms alone, the ``layernorm`` recompute module), on the SP-sharded tokens."""
    sequence_tokens = sequence_shard_tokens(workload, plans)
    d_model = workload.geometry.d_model
    return (streaming_time_s(sequence_tokens * d_model * NORM_RESIDUAL_BYTES_PER_TOKEN_PER_D / 2,
                             machine.hbm_bw_bytes_per_s),
            streaming_time_s(sequence_tokens * d_model * NORM_BYTES_PER_TOKEN_PER_D,
                             machine.hbm_bw_bytes_per_s))


def attention_times(machine: Machine, workload: Workload, plans: ParallelPlans
                    ) -> AttentionTimes:
    """Times of one attention block (projections, core, streaming kernels, CP exchange)."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    widths = attention_widths(geometry)
    head_dim = widths.head_dim
    qkv = gemm_s(machine, workload, tokens, widths.projection_per_rank(plans.tp),
                 geometry.d_model)
    out = gemm_s(machine, workload, tokens, geometry.d_model, widths.output / plans.tp)
    heads = geometry.heads / plans.tp
    seq_q = workload.seq_len / plans.cp
    mode = workload.traits.context_parallel
    ring = None
    kernel = resolve_attention_kernel(workload.attention_kernel, workload.stack,
                                      machine.device_name).kernel
    if materialises_scores(kernel, workload.seq_len):
        core_fwd, core_bwd = _reference_attention_s(machine, workload, plans, heads, seq_q,
                                                    head_dim)
    elif kernel == AttentionKernel.JAX_FLASH:
        core_fwd, core_bwd = _jax_flash_attention_s(machine, workload, plans, heads, seq_q,
                                                    head_dim)
    elif mode == ULYSSES:  # heads all-to-all'd, one causal kernel over the whole sequence
        core_fwd = flash_attention_time_s(plans.micro_batch, heads, seq_q, workload.seq_len,
                                          head_dim, True, machine.attention_peak_flops_per_s,
                                          efficiency=machine.attention_fwd)
        core_bwd = flash_attention_time_s(plans.micro_batch, heads, seq_q, workload.seq_len,
                                          head_dim, True, machine.attention_peak_flops_per_s,
                                          backward=True, efficiency=machine.attention_bwd)
    else:
        # A ring runs one kernel per step on the load-balanced chunks (perf/ring_attention);
        # with cp = 1 that is the one causal kernel over the sequence.
        ring = ring_kernels(plans.micro_batch, heads, workload.seq_len, plans.cp, head_dim,
                            machine.attention_peak_flops_per_s, machine.attention_fwd,
                            machine.attention_bwd)
        core_fwd, core_bwd = ring.forward, ring.backward
    streaming, layernorm_forward = block_norm_residual_s(machine, workload, plans)
    # Ring attention (Liu et al. 2023): cp−1 exchanges of the local K/V chunk forward and
    # of K/V plus their gradients backward, overlapped with the attention core.
    kv_bytes = tokens * widths.key_value_per_rank(plans.tp) * ACTIVATION_BYTES
    crosses = plans.tp * plans.cp > machine.interconnect.scale_up_domain_gpus
    exchange = send_recv_time_s(kv_bytes, crosses, machine.interconnect)
    cp_fwd = np.maximum(0.0, (plans.cp - 1) * exchange - core_fwd)
    cp_bwd = np.maximum(0.0, 2 * (plans.cp - 1) * exchange - core_bwd)
    if mode == TORCH_RING and ring is not None:
        # torch's ring: eager fp32 merges between the kernels (part of the attention op as
        # run, so recomputed with it) and an all-gather of K/V at the query-head count.
        query_elements = tokens * heads * head_dim
        merge_fwd, merge_bwd = torch_ring_streaming_s(query_elements, query_elements,
                                                      plans.cp, machine.hbm_bw_bytes_per_s)
        core_fwd = core_fwd + merge_fwd
        core_bwd = core_bwd + merge_bwd
        cp_fwd, cp_bwd = torch_ring_exposed_s(ring, 2 * query_elements * ACTIVATION_BYTES,
                                              plans.cp, plans.tp, crosses,
                                              machine.interconnect)
    cast_fwd, cast_bwd = quantise_cast_s(machine, workload, tokens, (
        (geometry.d_model, widths.projection_per_rank(plans.tp)),
        (widths.output / plans.tp, geometry.d_model)))
    return AttentionTimes(
        gemm=fwd_bwd_s(qkv + out), qkv_forward=qkv, output_forward=out,
        core=core_fwd + core_bwd, core_forward=core_fwd,
        streaming=streaming * (1 + BACKWARD_TO_FORWARD_STREAMING),
        streaming_forward=streaming + cast_fwd, quantise_cast=cast_fwd + cast_bwd,
        layernorm_forward=layernorm_forward,
        cp_exposed=np.where(plans.cp > 1, cp_fwd + cp_bwd, 0.0),
    )


def _ffn_streaming_bytes(tokens: np.ndarray, width: np.ndarray, glu: bool) -> np.ndarray:
    """SwiGLU reads gate and up (2w) and writes w; GELU reads w and writes w (bf16)."""
    return tokens * width * (GLU_STREAMS if glu else ACTIVATION_STREAMS) * ACTIVATION_BYTES


def _mla_input_projection_flops(workload: Workload, plans: ParallelPlans
                                ) -> list[np.ndarray]:
    """Per-token forward FLOPs/2 on one TP rank of MLA's input projections in forward order
    (:func:`~mosaic.perf.shapes.mla_input_projections`: input width times output width)."""
    return [fan_in * width for fan_in, width in mla_input_projections(workload, plans)]


def per_op_sac_attention_recomputed(workload: Workload, plans: ParallelPlans
                                    ) -> tuple[np.ndarray, bool]:
    """(FLOP share of the input projections, whether the output projection) per-op
    selective checkpointing recomputes in a block's attention part: the 2nd, 4th, ...
    matmuls, those ``memory.activations._per_op_sac_attention_bytes`` does not save.
    GQA/MHA (Q, K, V, O): K, by its FLOP share of the fused QKV GEMM, and the output
    projection. MLA: wq_b and
    wkv_b after a compressed query (wq_a, wq_b, wkv_a, wkv_b, wo), else wkv_a and wo (wq,
    wkv_a, wkv_b, wo), by FLOP share of the lumped projections."""
    if workload.geometry.attention is AttentionKind.MLA:
        flops = _mla_input_projection_flops(workload, plans)
        recomputed = sum(flops[1::2], np.zeros(len(plans))) / sum(flops)
        return recomputed, len(flops) % 2 == 1  # wo is the len(flops)-th matmul
    widths = attention_widths(workload.geometry)
    return (widths.key_value_per_rank(plans.tp) / 2 / widths.projection_per_rank(plans.tp)
            * np.ones(len(plans)), True)


def _per_op_sac_attention_recompute(workload: Workload, plans: ParallelPlans,
                                    attention: AttentionTimes) -> np.ndarray:
    """Forward time per-op selective checkpointing recomputes in a block's attention part
    (:func:`per_op_sac_attention_recomputed`)."""
    share, output_recomputed = per_op_sac_attention_recomputed(workload, plans)
    return (share * attention.qkv_forward
            + (attention.output_forward if output_recomputed else 0.0))


def _attention_matmul_count(workload: Workload, plans: ParallelPlans) -> int:
    """aten.mm calls of a block's attention part (Q, K, V, O; MLA: its input projections
    and wo), the count per-op SAC's every-second rule continues from."""
    if workload.geometry.attention is AttentionKind.MLA:
        return len(_mla_input_projection_flops(workload, plans)) + 1
    return 4


def per_op_sac_moe_matmul_shares(workload: Workload, plans: ParallelPlans
                                 ) -> tuple[float, float]:
    """(router gate, shared experts) forward shares per-op SAC recomputes in an MoE block:
    the matmuls after the attention part are the gate then the shared experts' W1, W3, W2
    (W1, W2 without a GLU; equal FLOPs each), and every second one by the block's running
    count is recomputed (``memory.per_op_sac_moe_bytes`` keeps the others)."""
    moe = workload.geometry.moe
    shared = (ffn_weight_matrices(workload.geometry.glu)
              if moe is not None and moe.shared_experts else 0)
    first = _attention_matmul_count(workload, plans)  # running index of the gate
    recomputed = [(first + i) % 2 == 1 for i in range(1 + shared)]
    shared_share = sum(recomputed[1:]) / shared if shared else 0.0
    return float(recomputed[0]), shared_share


def _per_op_sac_recompute(workload: Workload, plans: ParallelPlans, attention: AttentionTimes,
                          up: np.ndarray, down: np.ndarray, streaming_forward: np.ndarray
                          ) -> np.ndarray:
    """Forward time per-op selective checkpointing recomputes in a dense block: the
    attention part's, then W3 with a GLU or W2 without (see
    ``memory.activations.per_op_sac_dense_bytes``), apportioned by FLOPs within the fused
    up GEMM, and every element-wise kernel."""
    mlp = up / 2 if workload.geometry.glu else down
    return (_per_op_sac_attention_recompute(workload, plans, attention) + mlp
            + streaming_forward)


def _mla_up_projection_forward_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                                 tokens: np.ndarray) -> np.ndarray:
    """Forward GEMMs of MLA's query and key/value up-projections (latent -> heads), the
    work Megatron-Core's ``mla_up_proj`` recompute module repeats."""
    geometry = workload.geometry
    mla = geometry.mla
    if geometry.attention is not AttentionKind.MLA or mla is None:
        return np.zeros(len(plans))
    qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    query_in = mla.q_lora_rank or geometry.d_model
    query = gemm_s(machine, workload, tokens, geometry.heads * qk_dim / plans.tp, query_in)
    key_value = gemm_s(machine, workload, tokens,
                      geometry.heads * (mla.qk_nope_head_dim + mla.v_head_dim) / plans.tp,
                      mla.kv_lora_rank)
    return query + key_value


def recompute_modules_forward_s(workload: Workload, modules: dict[str, np.ndarray]
                                ) -> np.ndarray:
    """Forward seconds Megatron-Core's fine-grained selective recompute repeats beyond the
    attention core (``Workload.recompute_modules``; megatron/core/transformer/
    transformer_config.py ``recompute_modules``, the bytes
    ``memory.activations.recompute_module_bytes`` drops): each named module's forward time,
    from ``modules`` (module -> seconds; a module the block does not have is absent).
    ``moe`` covers the whole MoE part, dispatch and combine included, so its own
    sub-modules are not added again."""
    chosen = set(workload.selective_recompute_modules)
    if "moe" in chosen and "moe" in modules:
        chosen -= {"moe_act", "shared_experts"}
    total = 0.0 * next(iter(modules.values()))
    for name in sorted(chosen & set(modules)):
        total = total + modules[name]
    return total


def selective_core_attention_s(workload: Workload, attention: AttentionTimes) -> np.ndarray:
    """Attention-core forward that Megatron-Core's selective recompute repeats: all of it
    when its modules include core_attn (the default), else none."""
    if "core_attn" in workload.selective_recompute_modules:
        return attention.core_forward
    return np.zeros_like(attention.core_forward)


def _save_dots_recompute(attention: AttentionTimes, streaming_forward: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(recompute, its attention-core part) of a block under a save-the-matmuls policy
    (SelectiveRecompute.SAVE_DOTS, memory.activations.save_dots_bytes): every element-wise
    kernel of the forward, and the flash kernel's forward again for its unsaved softmax
    statistics."""
    return attention.core_forward + streaming_forward, attention.core_forward


def _block_level_recompute(workload: Workload, forward: np.ndarray, tp_communication: np.ndarray,
                           core_forward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(recomputed forward, its attention-core part) per block under a block-level selective
    policy: the checkpointed share f of the blocks repeats its whole forward, as FULL does
    for every block (forward plus the forward half of its TP collectives), so on average
    f times that per block (``Workload.checkpointed_block_fraction``)."""
    share = workload.checkpointed_block_fraction
    return share * repeated_block_forward_s(forward, tp_communication), share * core_forward


def repeated_block_forward_s(forward_s: np.ndarray, tp_communication_s: np.ndarray
                             ) -> np.ndarray:
    """Seconds that repeating blocks' forward costs: their forward compute and the forward
    half of their TP collectives (a block's TP collectives split evenly between its forward
    and its backward: an all-gather and a reduce-scatter each way with sequence parallelism,
    an all-reduce each way without; Korthikanti et al. 2022, Sec. 4.2.2)."""
    return forward_s + tp_communication_s / 2


@dataclass(frozen=True)
class DenseFfnParts:
    """Forward seconds of a dense FFN's pieces, one micro-batch (arrays over plans)."""

    up: np.ndarray  # W1 (and W3 of a GLU), column-parallel
    down: np.ndarray  # W2, row-parallel
    activation: np.ndarray  # the activation function's streaming kernel
    cast_forward: np.ndarray  # FP8/NVFP4 operand casts, forward
    cast_backward: np.ndarray  # and backward


def dense_ffn_parts(machine: Machine, workload: Workload, plans: ParallelPlans
                    ) -> DenseFfnParts:
    """The dense FFN of a block (or of a hybrid model's MLP layer): d→w (2w for a GLU) and
    w→d GEMMs split over TP, the activation's streaming, the operand casts."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    width = geometry.ffn / plans.tp
    up = gemm_s(machine, workload, tokens, ffn_up_projections(geometry.glu) * width,
                geometry.d_model)
    down = gemm_s(machine, workload, tokens, geometry.d_model, width)
    activation = streaming_time_s(_ffn_streaming_bytes(tokens, width, geometry.glu),
                                  machine.hbm_bw_bytes_per_s)
    cast_fwd, cast_bwd = quantise_cast_s(machine, workload, tokens, (
        (geometry.d_model, ffn_up_projections(geometry.glu) * width),
        (width, geometry.d_model)))
    return DenseFfnParts(up, down, activation, cast_fwd, cast_bwd)


@plan_key(*DENSE_BLOCK_KEY, remember=without_top_k)
def dense_block_times(machine: Machine, workload: Workload, plans: ParallelPlans) -> BlockTimes:
    """One dense block per micro-batch."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    attention = attention_times(machine, workload, plans)
    ffn = dense_ffn_parts(machine, workload, plans)
    up, down, activation = ffn.up, ffn.down, ffn.activation
    cast_fwd, cast_bwd = ffn.cast_forward, ffn.cast_backward
    streaming = attention.streaming + activation * (1 + BACKWARD_TO_FORWARD_STREAMING)
    streaming_forward = attention.streaming_forward + activation + cast_fwd
    activation_bytes = tokens * geometry.d_model * ACTIVATION_BYTES
    forward = (attention.gemm / (1 + BACKWARD_TO_FORWARD_GEMM) + attention.core_forward + up
               + down + streaming_forward)
    zero = np.zeros(len(plans))
    gather, scatter, reduce = tp_collectives_s(machine, plans, activation_bytes, pairs_forward=2)
    gather, scatter = overlapped_tp_collectives_s(workload, plans, gather, scatter,
                                                 attention.gemm + fwd_bwd_s(up + down))
    policy = workload.traits.selective_recompute
    if policy is SelectiveRecompute.PER_OP:
        selective = _per_op_sac_recompute(workload, plans, attention, up, down,
                                          streaming_forward)
        selective_core = np.zeros(len(plans))
    elif policy is SelectiveRecompute.BLOCKS:
        selective, selective_core = _block_level_recompute(
            workload, forward, gather + scatter + reduce, attention.core_forward)
    elif policy is SelectiveRecompute.SAVE_DOTS:
        selective, selective_core = _save_dots_recompute(attention, streaming_forward)
    else:
        selective_core = selective_core_attention_s(workload, attention)
        selective = recompute_modules_forward_s(workload, {
            "core_attn": attention.core_forward,
            "mla_up_proj": _mla_up_projection_forward_s(machine, workload, plans, tokens),
            "layernorm": attention.layernorm_forward,
            "mlp": up + down + activation,
        })
    return BlockTimes(
        attention_gemm=attention.gemm, attention_core=attention.core,
        attention_core_forward=attention.core_forward, selective_recompute=selective,
        selective_core_recompute=selective_core, mlp_gemm=fwd_bwd_s(up + down),
        shared_expert=zero, router=zero, streaming=streaming, moe_permute=zero,
        quantise_cast=attention.quantise_cast + cast_fwd + cast_bwd,
        forward=forward,
        tp_all_gather=gather, tp_reduce_scatter=scatter, tp_all_reduce=reduce,
        ep_all_to_all=zero, cp_send_recv=attention.cp_exposed,
    )


@dataclass(frozen=True)
class MoeFfnParts:
    """Seconds of an MoE FFN's pieces, one micro-batch (arrays over plans): forward times
    unless named otherwise."""

    experts_up: np.ndarray  # grouped expert GEMMs d→w (2w for a GLU)
    experts_down: np.ndarray  # and w→d
    shared: np.ndarray  # the shared experts' GEMMs
    router_gemm: np.ndarray
    router_stream: np.ndarray  # softmax/top-K over the fp32 logits
    stream: np.ndarray  # permute + unpermute (analytical), expert and shared activations
    permute_forward: np.ndarray  # the stack's token movement beyond the analytical count
    permute_backward: np.ndarray
    expert_activation: np.ndarray  # the routed experts' activation kernel (moe_act)
    cast_forward: np.ndarray  # FP8/NVFP4 operand casts of expert and shared GEMMs
    cast_backward: np.ndarray
    dispatch: np.ndarray  # EP all-to-all, one direction, forward + backward
    combine: np.ndarray
    etp_gather: np.ndarray  # expert-TP all-gathers and reduce-scatters, fwd + bwd
    etp_scatter: np.ndarray


def moe_ffn_parts(machine: Machine, workload: Workload, plans: ParallelPlans) -> MoeFfnParts:
    """The MoE FFN of a block (or of a hybrid model's MoE layer): router, dispatch, routed
    and shared experts, combine."""
    geometry = workload.geometry
    moe = geometry.moe
    assert moe is not None
    tokens = tokens_per_rank(workload, plans)
    routed = routed_tokens(workload, plans)  # the sequence-parallel MoE input
    glu_factor = ffn_up_projections(geometry.glu)
    # Grouped expert GEMM: E/ep local experts, per-expert tile M (paper Sec. 5.3).
    experts_here = local_experts(workload, plans)
    m_per_expert = tokens_per_expert(workload, plans)
    expert_width = moe.expert_ffn / plans.etp
    experts_up = _grouped_gemm(machine, workload, experts_here, m_per_expert,
                               glu_factor * expert_width, geometry.d_model)
    experts_down = _grouped_gemm(machine, workload, experts_here, m_per_expert,
                                 geometry.d_model, expert_width)
    if workload.expert_gemm == "xla_expanded":
        # XLA's RaggedDotRewriter (ragged_dot_rewriter.cc RaggedToDense): every routed copy
        # is multiplied by every local expert's weights, masked to zero outside its own
        # group: one dense [copies, E_loc·k] x [E_loc·k, n] dot, E_loc times the FLOPs (the
        # backward's input and weight gradients likewise, BACKWARD_TO_FORWARD_GEMM).
        copies_here = experts_here * m_per_expert
        experts_up = gemm_s(machine, workload, copies_here, glu_factor * expert_width,
                            experts_here * geometry.d_model, routed_experts=True)
        experts_down = gemm_s(machine, workload, copies_here, geometry.d_model,
                              experts_here * expert_width, routed_experts=True)
    shared_fwd = np.zeros(len(plans))
    if moe.shared_experts:
        shared_width = moe.shared_total_width / plans.tp
        shared_fwd = (gemm_s(machine, workload, tokens, glu_factor * shared_width,
                            geometry.d_model)
                      + gemm_s(machine, workload, tokens, geometry.d_model, shared_width))
    router_gemm = gemm_time_s(routed, moe.experts, geometry.d_model,
                              machine.bf16_gemm_rate_flops_per_s, machine.hbm_bw_bytes_per_s,
                              machine.sm_count, bytes_per_element=FP32_BYTES,
                              params=machine.gemm_params)
    router_stream = streaming_time_s(routed * moe.experts * FP32_BYTES * ROUTER_STREAMS,
                                     machine.hbm_bw_bytes_per_s)
    copies = expert_copies(workload, plans)
    # Permute + unpermute read and write every token copy; expert activation on each copy.
    permute_bytes = copies * geometry.d_model * ANALYTICAL_PERMUTE.forward_per_copy
    # Transformer Engine's fused grouped MLP runs the activation in FC1's epilogue (and its
    # backward in FC2's dgrad epilogue): no activation kernel (Workload.fused_grouped_mlp;
    # Megatron-Core runs it unfused with expert TP)
    fused = workload.fused_grouped_mlp & (plans.etp == 1)
    expert_act_bytes = np.where(fused, 0.0,
                                _ffn_streaming_bytes(copies, expert_width, geometry.glu))
    shared_act_bytes = (_ffn_streaming_bytes(tokens, moe.shared_total_width / plans.tp,
                                             geometry.glu)
                        if moe.shared_experts else np.zeros(len(plans)))
    moe_stream = streaming_time_s(permute_bytes + expert_act_bytes + shared_act_bytes,
                                  machine.hbm_bw_bytes_per_s)
    # The token movement (permute, chunk sorts, unpermute) as the stack's MoE code and its
    # dispatcher run it (perf/moe_permute_traffic), beyond (or, for DeepEP and HybridEP,
    # below) that analytical count, forward and backward.
    permute_fwd, permute_bwd = moe_permute_excess_s(machine, workload, copies, experts_here)
    expert_gemms = ((geometry.d_model, glu_factor * expert_width),
                    (expert_width, geometry.d_model))
    cast_fwd, cast_bwd = quantise_cast_s(machine, workload, copies, expert_gemms,
                                         routed_experts=True)
    if fused.any():
        # fused: FC2's input is quantised in FC1's epilogue and FC1's output gradient in
        # FC2's dgrad epilogue; the routed tokens into FC1 and the gradient into FC2 remain
        fused_fwd, fused_bwd = quantise_cast_s(machine, workload, copies,
                                               ((geometry.d_model, geometry.d_model),),
                                               routed_experts=True)
        cast_fwd = np.where(fused, fused_fwd, cast_fwd)
        cast_bwd = np.where(fused, fused_bwd, cast_bwd)
    if moe.shared_experts:
        shared_cast = quantise_cast_s(machine, workload, tokens, (
            (geometry.d_model, glu_factor * shared_width), (shared_width, geometry.d_model)))
        cast_fwd, cast_bwd = cast_fwd + shared_cast[0], cast_bwd + shared_cast[1]
    dispatch, combine = dispatch_and_combine_s(machine, workload, plans)
    # Expert TP: routed tokens are all-gathered within the etp group and reduce-scattered
    # back, forward and backward.
    ic = machine.interconnect
    etp_bytes = copies * geometry.d_model * ACTIVATION_BYTES
    return MoeFfnParts(
        experts_up=experts_up, experts_down=experts_down, shared=shared_fwd,
        router_gemm=router_gemm, router_stream=router_stream, stream=moe_stream,
        permute_forward=permute_fwd, permute_backward=permute_bwd,
        expert_activation=streaming_time_s(expert_act_bytes, machine.hbm_bw_bytes_per_s),
        cast_forward=cast_fwd, cast_backward=cast_bwd, dispatch=dispatch, combine=combine,
        etp_gather=2 * all_gather_time_s(etp_bytes, plans.etp, 1, ic),
        etp_scatter=2 * reduce_scatter_time_s(etp_bytes, plans.etp, 1, ic))


def ep_overlap_exposed_s(a2a_pair: np.ndarray, other_compute: np.ndarray) -> np.ndarray:
    """Exposed EP all-to-all seconds under batch-level EP overlap (Megatron-Core
    --overlap-moe-expert-parallel-comm, MoE README "merging FWD-BWD passes of adjacent
    microbatches"; DeepSeek's DualPipe pairs chunks the same way, Liu et al. 2024, Sec.
    3.2.1): the four all-to-alls of one micro-batch run while the other micro-batch's layer
    computes (``other_compute``), so only what exceeds it stays exposed (what the rest
    costs that compute: :func:`charged_all_to_all_s`)."""
    return np.maximum(0.0, 2 * a2a_pair - other_compute)


@plan_key(*MOE_BLOCK_KEY)
def moe_block_times(machine: Machine, workload: Workload, plans: ParallelPlans) -> BlockTimes:
    """One MoE block per micro-batch (routed experts, shared experts, router, dispatch)."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    attention = attention_times(machine, workload, plans)
    moe = moe_ffn_parts(machine, workload, plans)
    experts_up, experts_down, shared_fwd = moe.experts_up, moe.experts_down, moe.shared
    router_gemm, router_stream = moe.router_gemm, moe.router_stream
    moe_stream, permute_fwd, permute_bwd = moe.stream, moe.permute_forward, moe.permute_backward
    cast_fwd, cast_bwd = moe.cast_forward, moe.cast_backward
    moe_stream_fwd = moe_stream + permute_fwd
    streaming = (attention.streaming + moe_stream * (1 + BACKWARD_TO_FORWARD_STREAMING)
                 + permute_fwd + permute_bwd)
    # EP dispatch and combine, forward and backward (4 all-to-alls); the shared expert runs
    # while tokens are in flight (Megatron-Core shared-expert overlap, paper F.3).
    # the other micro-batch's block under EP overlap: its forward + backward GEMMs and
    # attention
    other_compute = (attention.gemm + attention.core + fwd_bwd_s(experts_up + experts_down)
                     + fwd_bwd_s(shared_fwd)) if workload.overlaps_ep_communication else None
    a2a_exposed = charged_all_to_all_s(machine, workload, moe.dispatch, moe.combine,
                                       shared_fwd, other_compute)
    activation_bytes = tokens * geometry.d_model * ACTIVATION_BYTES
    gather, scatter, reduce = tp_collectives_s(machine, plans, activation_bytes, pairs_forward=1)
    gather, scatter = overlapped_tp_collectives_s(workload, plans, gather, scatter,
                                                 attention.gemm)
    gather = gather + moe.etp_gather
    scatter = scatter + moe.etp_scatter
    mlp_fwd = experts_up + experts_down
    forward = (attention.gemm / (1 + BACKWARD_TO_FORWARD_GEMM) + attention.core_forward
               + mlp_fwd + shared_fwd + router_gemm + router_stream
               + attention.streaming_forward + moe_stream_fwd + cast_fwd)
    policy = workload.traits.selective_recompute
    if policy is SelectiveRecompute.PER_OP:
        # torchtitan's per-op SAC does not save grouped GEMMs: it recomputes the routed
        # experts, the attention part's unsaved matmuls, every second of the router gate
        # and shared-expert matmuls continuing the count, and every element-wise kernel
        # (memory.per_op_sac_moe_bytes saves the rest).
        gate_share, shared_share = per_op_sac_moe_matmul_shares(workload, plans)
        selective = (_per_op_sac_attention_recompute(workload, plans, attention) + mlp_fwd
                     + gate_share * router_gemm + shared_share * shared_fwd
                     + attention.streaming_forward + moe_stream_fwd + cast_fwd)
        selective_core = np.zeros(len(plans))
    elif policy is SelectiveRecompute.BLOCKS:
        selective, selective_core = _block_level_recompute(
            workload, forward, gather + scatter + reduce, attention.core_forward)
    elif policy is SelectiveRecompute.SAVE_DOTS:
        selective, selective_core = _save_dots_recompute(
            attention, attention.streaming_forward + moe_stream_fwd + cast_fwd)
    else:
        selective_core = selective_core_attention_s(workload, attention)
        selective = recompute_modules_forward_s(workload, {
            "core_attn": attention.core_forward,
            "mla_up_proj": _mla_up_projection_forward_s(machine, workload, plans, tokens),
            "layernorm": attention.layernorm_forward,
            **moe_recompute_modules(moe),
        })
    return BlockTimes(
        attention_gemm=attention.gemm, attention_core=attention.core,
        attention_core_forward=attention.core_forward,
        selective_recompute=selective,
        selective_core_recompute=selective_core,
        mlp_gemm=fwd_bwd_s(mlp_fwd), shared_expert=fwd_bwd_s(shared_fwd),
        router=fwd_bwd_s(router_gemm) + router_stream * (1 + BACKWARD_TO_FORWARD_STREAMING),
        streaming=streaming, moe_permute=permute_fwd + permute_bwd,
        quantise_cast=attention.quantise_cast + cast_fwd + cast_bwd,
        forward=forward,
        tp_all_gather=gather, tp_reduce_scatter=scatter,
        tp_all_reduce=reduce, ep_all_to_all=a2a_exposed,
        cp_send_recv=attention.cp_exposed,
    )


def moe_recompute_modules(moe: MoeFfnParts) -> dict[str, np.ndarray]:
    """Forward seconds of the MoE part's Megatron-Core recompute modules: ``moe_act`` (the
    routed experts' activation), ``shared_experts``, and ``moe`` (the whole MoE part,
    dispatch and combine included)."""
    return {
        "moe_act": moe.expert_activation,
        "shared_experts": moe.shared,
        "moe": (moe.experts_up + moe.experts_down + moe.shared + moe.router_gemm
                + moe.router_stream + moe.stream + moe.permute_forward + moe.dispatch
                + moe.combine),
    }


def communication_sm_slowdown_s(machine: Machine, workload: Workload,
                                hidden_s: np.ndarray) -> np.ndarray:
    """Compute time lost while ``hidden_s`` seconds of all-to-all run behind it: DeepEP's
    kernels hold DEEPEP_COMMUNICATION_SMS of the device's SMs, so the overlapping compute
    runs on the rest and finishes hidden·(S_comm/S) later (compute of C seconds at full
    rate that overlaps A seconds of communication takes A + (C − A·(S − S_comm)/S) =
    C + A·S_comm/S); NCCL's all-to-all and HybridEP, whose SMs come from settings the model
    does not read, slow it by the measured average of any collective
    (:func:`~mosaic.perf.collectives.hidden_collective_slowdown_s`)."""
    if workload.dispatcher is not Dispatcher.DEEPEP:
        return hidden_collective_slowdown_s(hidden_s)
    return hidden_s * min(DEEPEP_COMMUNICATION_SMS / machine.sm_count, 1.0)


def moe_permute_excess_s(machine: Machine, workload: Workload, copies: np.ndarray,
                         experts_here: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one MoE block's token movement as its stack and
    dispatcher run it (:func:`mosaic.perf.moe_permute_traffic.permute_bytes`) minus the
    analytical permute + unpermute ``streaming`` already holds (negative where the sourced
    count is lower, e.g. HybridEP's permute inside its dispatch kernel)."""
    sourced_fwd, sourced_bwd = sourced_permute_bytes(workload, copies, experts_here)
    d = workload.geometry.d_model
    analytic_fwd = copies * d * ANALYTICAL_PERMUTE.forward_per_copy
    analytic_bwd = copies * d * ANALYTICAL_PERMUTE.backward_per_copy
    bandwidth = machine.hbm_bw_bytes_per_s
    return (streaming_time_s(sourced_fwd, bandwidth) - streaming_time_s(analytic_fwd, bandwidth),
            streaming_time_s(sourced_bwd, bandwidth) - streaming_time_s(analytic_bwd, bandwidth))


def dispatch_all_to_all_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                          element_bytes: float = ACTIVATION_BYTES) -> np.ndarray:
    """One EP dispatch (or combine): each rank sends its K copies of its routed tokens
    (``element_bytes`` per element), as a pairwise all-to-all or, with a hierarchical
    dispatcher (DeepEP, HybridEP), one network copy per remote node, at most
    :func:`max_domains_per_token` of them under node- or group-limited routing
    (:func:`node_deduplicated_dispatch_time_s`)."""
    moe = workload.geometry.moe
    if moe is None:
        return np.zeros(len(plans))
    token_bytes = routed_tokens(workload, plans) * workload.geometry.d_model * element_bytes
    if workload.dispatcher.deduplicates_per_node:
        ic = machine.interconnect
        domains = group_placement(plans.ep, plans.etp, ic.scale_up_domain_gpus).domains_spanned
        return node_deduplicated_dispatch_time_s(token_bytes, moe.top_k, moe.experts,
                                                 plans.ep, plans.etp, ic,
                                                 max_domains_per_token(workload, domains))
    return all_to_all_time_s(token_bytes * moe.top_k, plans.ep, plans.etp,
                             machine.interconnect)


def dispatch_and_combine_s(machine: Machine, workload: Workload, plans: ParallelPlans
                           ) -> tuple[np.ndarray, np.ndarray]:
    """(dispatch, combine) seconds in one direction. Of the four all-to-alls, the forward
    dispatch and the combine's backward carry expert inputs (8-bit with ``dispatch_fp8``);
    the forward combine and the dispatch's backward carry bf16 outputs."""
    combine = dispatch_all_to_all_s(machine, workload, plans)
    if not workload.dispatch_fp8:
        return combine, combine
    return dispatch_all_to_all_s(machine, workload, plans, FP8_DISPATCH_BYTES_PER_ELEMENT), combine


def charged_all_to_all_s(machine: Machine, workload: Workload, dispatch: np.ndarray,
                         combine: np.ndarray, shared_fwd: np.ndarray,
                         other_compute: np.ndarray | None = None) -> np.ndarray:
    """Seconds one MoE block's four all-to-alls cost the step: what the shared experts
    (or, under EP overlap, ``other_compute``, the other micro-batch's block) leave exposed,
    plus what the hidden rest costs the compute beside it
    (:func:`communication_sm_slowdown_s`)."""
    pair = dispatch + combine
    exposed = (shared_expert_overlap_exposed_s(workload, dispatch, combine, shared_fwd)
               if other_compute is None
               else ep_overlap_exposed_s(pair, other_compute))
    return exposed + communication_sm_slowdown_s(machine, workload,
                                                 np.maximum(0.0, 2 * pair - exposed))


def shared_expert_overlap_exposed_s(workload: Workload, dispatch: np.ndarray,
                                    combine: np.ndarray, shared_fwd: np.ndarray
                                    ) -> np.ndarray:
    """Seconds of one MoE block's four all-to-alls (``dispatch`` and ``combine`` per
    direction) that its shared experts (forward ``shared_fwd``, backward twice that) do not
    hide, as the stack trait ``ep_shared_expert_overlap`` says: ``dispatch_combine`` hides
    each direction's pair behind the shared experts of that direction; ``forward_combine``
    hides only the forward combine, the dispatch being consumed as soon as it lands and
    every backward all-to-all being waited at once (torchtitan)."""
    pair = dispatch + combine
    if workload.traits.ep_shared_expert_overlap == "forward_combine":
        return dispatch + np.maximum(0.0, combine - shared_fwd) + pair
    backward_shared = BACKWARD_TO_FORWARD_GEMM * shared_fwd
    return np.maximum(0.0, pair - shared_fwd) + np.maximum(0.0, pair - backward_shared)


@plan_key(*MOE_BLOCK_KEY)
def expert_all_to_all_s(machine: Machine, workload: Workload, plans: ParallelPlans
                        ) -> np.ndarray:
    """Wire time of one MoE block's four all-to-alls per micro-batch (t_A2A of Eq. 15)."""
    dispatch, combine = dispatch_and_combine_s(machine, workload, plans)
    return 2 * (dispatch + combine)
