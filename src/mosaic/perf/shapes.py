"""Per-GPU tensor shapes of a plan, defined once for the time and memory models.

A micro-batch on one context-parallel rank holds ``b·s/cp`` tokens; sequence parallelism
shards the norm/residual regions (and the MoE layer's input) over tp (Korthikanti et al.
2022); the MoE layer routes that shard, K copies per token, over E/ep local experts with a
grouped-GEMM tile of ``M = routed·ep·etp·K/E`` rows per expert (paper Sec. 5.3; Megatron-Core
requires sequence parallelism with tp > 1 in MoE layers, and without it every TP rank
routes the whole CP shard). Functions are written over the arrays of
:class:`~mosaic.perf.plan.ParallelPlans`; :func:`derive_shapes` bundles them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mosaic.arch import AttentionKind, Geometry, count_parameters
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.workload import Workload


def tokens_per_rank(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Tokens of one micro-batch on one CP rank, b·s/cp."""
    return plans.micro_batch * workload.seq_len / plans.cp


def vocab_shard(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Vocabulary entries of one tensor-parallel rank's LM head and logits, V/tp
    (Megatron-Core's vocab-parallel output layer; Shoeybi et al. 2019, Sec. 3)."""
    return workload.geometry.vocab / plans.tp


def sequence_shard_divisor(plans: ParallelPlans) -> np.ndarray:
    """tp where sequence parallelism shards norm/residual regions, else 1."""
    return np.where(plans.sequence_parallel, plans.tp, 1).astype(float)


def sequence_shard_tokens(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Tokens of one micro-batch in one GPU's sequence shard, the tokens its norms, residual
    adds and pipeline sends see: b·s/(cp·tp) with sequence parallelism, the whole CP shard
    without it."""
    return tokens_per_rank(workload, plans) / sequence_shard_divisor(plans)


def routed_tokens(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Tokens one GPU routes per micro-batch: its sequence shard."""
    return sequence_shard_tokens(workload, plans)


def local_experts(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Routed experts one GPU holds, E/ep (zero for a dense model)."""
    moe = workload.geometry.moe
    return moe.experts / plans.ep if moe is not None else np.zeros(len(plans))


def expert_copies(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Token copies one GPU's grouped expert GEMMs see per micro-batch, routed·K·etp."""
    moe = workload.geometry.moe
    top_k = moe.top_k if moe is not None else 0
    return routed_tokens(workload, plans) * top_k * plans.etp


def tokens_per_expert(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Grouped-GEMM rows per local expert, M = ceil(routed·ep·etp·K/E), at least 1."""
    moe = workload.geometry.moe
    if moe is None:
        return np.zeros(len(plans))
    return np.maximum(np.ceil(routed_tokens(workload, plans) * plans.ep * plans.etp
                              * moe.top_k / moe.experts), 1)


@dataclass(frozen=True)
class Shapes:
    """The shape quantities both models read (arrays over plans)."""

    tokens_per_rank: np.ndarray
    sequence_shard_divisor: np.ndarray
    routed_tokens: np.ndarray
    local_experts: np.ndarray
    expert_copies: np.ndarray
    tokens_per_expert: np.ndarray


def derive_shapes(workload: Workload, plans: ParallelPlans) -> Shapes:
    """Every shape quantity of ``plans``, computed once."""
    return Shapes(
        tokens_per_rank=tokens_per_rank(workload, plans),
        sequence_shard_divisor=sequence_shard_divisor(plans),
        routed_tokens=routed_tokens(workload, plans),
        local_experts=local_experts(workload, plans),
        expert_copies=expert_copies(workload, plans),
        tokens_per_expert=tokens_per_expert(workload, plans),
    )


@dataclass(frozen=True)
class AttentionWidths:
    """Per-token widths of one attention block, all heads, before TP; the time and memory
    models both read them."""

    query: int
    key_value: int  # K and V together (GQA: 2·kv·dh; MLA: after the up-projection)
    output: int  # attention output = input of the output projection
    kv_groups: int  # heads K/V are split by under TP (kv_heads for GQA, heads for MLA)
    latent: int  # MLA low-rank latents kept for the up-projections (0 for MHA/GQA)
    projection: int  # all input projections (Q, K, V, gates, MLA down/up), as one GEMM's N
    head_dim: int  # per-head width the attention kernel sees

    def key_value_per_rank(self, tp: np.ndarray) -> np.ndarray:
        """K/V width on one TP rank: split over min(tp, kv_groups), since a TP degree above
        the KV head count replicates the KV heads rather than splitting one."""
        return self.key_value / np.minimum(tp, self.kv_groups)

    def projection_per_rank(self, tp: np.ndarray) -> np.ndarray:
        """The input projections' width on one TP rank: all but K/V split over tp, K/V as
        :meth:`key_value_per_rank` (for MLA, kv_groups = heads >= tp: projection / tp)."""
        return (self.projection - self.key_value) / tp + self.key_value_per_rank(tp)


def attention_widths(geometry: Geometry) -> AttentionWidths:
    """Widths of ``geometry``'s attention (MHA/GQA or MLA)."""
    output_and_inputs = count_parameters(geometry).attention_per_layer // geometry.d_model
    if geometry.attention is AttentionKind.MLA:
        assert geometry.mla is not None  # guaranteed by Geometry validation
        mla = geometry.mla
        qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        output = geometry.heads * mla.v_head_dim
        # q latent before and after its norm; kv latent (+ shared rope key) likewise
        q_latent = 2 * mla.q_lora_rank if mla.q_lora_rank else 0
        return AttentionWidths(
            query=geometry.heads * qk_dim, key_value=geometry.heads * (qk_dim + mla.v_head_dim),
            output=output, kv_groups=geometry.heads,
            latent=q_latent + 2 * mla.kv_lora_rank + mla.qk_rope_head_dim,
            projection=output_and_inputs - output, head_dim=(qk_dim + mla.v_head_dim) // 2)
    output = geometry.heads * geometry.head_dim
    return AttentionWidths(
        query=geometry.heads * geometry.head_dim,
        key_value=2 * geometry.kv_heads * geometry.head_dim, output=output,
        kv_groups=geometry.kv_heads, latent=0, projection=output_and_inputs - output,
        head_dim=geometry.head_dim)


def mla_input_projections(workload: Workload, plans: ParallelPlans
                          ) -> list[tuple[int, np.ndarray]]:
    """(input width, output width per TP rank) of an MLA block's input projections in
    forward order, as torchtitan runs them (models/deepseek_v3/model/model.py
    Attention.forward): wq, or wq_a then wq_b when the query is compressed; wkv_a (the kv
    latent and the rope key); wkv_b (per-head k_nope and v). Latent projections are not
    split over TP. The per-op SAC memory and recompute both count these matmuls."""
    geometry, mla = workload.geometry, workload.geometry.mla
    assert mla is not None
    d, heads, tp = geometry.d_model, geometry.heads, plans.tp
    full = np.ones(len(plans))
    query = heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) / tp
    q_path = ([(d, mla.q_lora_rank * full), (mla.q_lora_rank, query)] if mla.q_lora_rank
              else [(d, query)])
    return [*q_path, (d, (mla.kv_lora_rank + mla.qk_rope_head_dim) * full),
            (mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim) / tp)]
