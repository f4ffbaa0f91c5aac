"""Exact parameter counts of dense and MoE transformers.

Every formula is plain arithmetic on its arguments, so it accepts Python ints or numpy
arrays alike: the scalar path (:func:`count_parameters`) and the vectorised geometry grid
(:mod:`mosaic.arch.ladder`) share these functions. No biases on linear layers (Llama /
Megatron-style); norms count their gain (and bias for LayerNorm).

Conventions (paper, Table 9 footnote): ``n_total``/``n_active`` are non-embedding counts;
the ``*_with_embedding`` variants add the input embedding and the (untied) LM head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mosaic.arch.geometry import (
    AttentionKind,
    GatedDeltaNetConfig,
    Geometry,
    HybridLayer,
    MambaConfig,
    MLAConfig,
    NormKind,
    QKNormSpan,
)

ArrayLike = Any  # int, float or numpy array: formulas here broadcast over numpy arrays


def params_per_norm(width: ArrayLike, norm: NormKind) -> ArrayLike:
    """A LayerNorm has gain + bias (2·width); an RMSNorm has a gain only (width)."""
    return (2 if norm is NormKind.LAYERNORM else 1) * width


def params_attention_gqa(
    d_model: ArrayLike, heads: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike, gated: bool,
    output_gate: bool = False,
) -> ArrayLike:
    """Q, K, V, O projections of MHA/GQA (Ainslie et al., 2023), plus an output gate.

    Q: d·h·dh, K and V: d·kv·dh each, O: h·dh·d. Gated attention (Qiu et al., 2025;
    paper A.1) adds one sigmoid gate per head computed from the block input: d·h; the
    elementwise output gate (Qwen3-Next's q_proj of width 2·h·dh; Megatron-Core
    ``attention_output_gate``) one per output channel: d·h·dh.
    """
    projections = 2 * d_model * heads * head_dim + 2 * d_model * kv_heads * head_dim
    gate = d_model * heads * (head_dim if output_gate else 1) if gated or output_gate else 0
    return projections + gate


def params_attention_mla(
    d_model: ArrayLike, heads: ArrayLike, mla: MLAConfig, norm: NormKind, gated: bool
) -> ArrayLike:
    """DeepSeek MLA (DeepSeek-V2 Sec. 2.1.2-2.1.3; DeepSeek-V3 Sec. 2.1.1).

    Queries: d→q_lora (down) + norm + q_lora→h·(nope+rope) (up), or d→h·(nope+rope)
    directly. Keys/values: d→kv_lora + rope (shared rope key) + norm, kv_lora→h·(nope+v).
    Output: h·v→d.
    """
    qk_head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank is None:
        query = d_model * heads * qk_head_dim
    else:
        query = (
            d_model * mla.q_lora_rank
            + params_per_norm(mla.q_lora_rank, norm)
            + mla.q_lora_rank * heads * qk_head_dim
        )
    key_value = (
        d_model * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        + params_per_norm(mla.kv_lora_rank, norm)
        + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    )
    output = heads * mla.v_head_dim * d_model
    return query + key_value + output + (d_model * heads if gated else 0)


def attention_weight_tensors(geometry: Geometry) -> int:
    """Separate weight tensors of one attention block, gate excluded, as a per-tensor
    FSDP gather sees them: Q, K, V and output projections; MLA (the layout of
    :func:`params_attention_mla`): the kv down-projection, its latent norm, the kv
    up-projection and the output, with the query's down-projection, latent norm and
    up-projection where ``q_lora_rank`` is set, else one query projection."""
    if geometry.attention is not AttentionKind.MLA:
        return 4
    assert geometry.mla is not None
    return 4 + (3 if geometry.mla.q_lora_rank is not None else 1)


def params_attention_extras(geometry: Geometry) -> int:
    """Small per-block attention parameters beyond the projections (MHA/GQA only).

    Q/K norms (Qwen3: one norm of width head_dim each for Q and K, shared by the heads;
    OLMoE and MiniMax-M2: one across the whole Q projection and one across K, heads·dh and
    kv·dh wide), Q/K/V biases (Qwen2, gpt-oss), an output bias (gpt-oss) and one sink logit
    per head (gpt-oss model card, arXiv:2508.10925 Sec. 2.1).
    """
    extra = 0
    if geometry.qk_norm:
        widths = ((geometry.heads + geometry.kv_heads) * geometry.head_dim
                  if geometry.qk_norm_span is QKNormSpan.PROJECTION else 2 * geometry.head_dim)
        extra += params_per_norm(widths, geometry.norm)
    if geometry.qkv_bias:
        extra += (geometry.heads + 2 * geometry.kv_heads) * geometry.head_dim
    if geometry.output_bias:
        extra += geometry.d_model
    if geometry.attention_sinks:
        extra += geometry.heads
    return extra


def ffn_up_projections(glu: bool) -> int:
    """Up-projection matrices of an FFN: gate and up (W1, W3) with a GLU, W1 without
    (Shazeer, 2020)."""
    return 2 if glu else 1


def ffn_weight_matrices(glu: bool) -> int:
    """Weight matrices of an FFN: its up-projections and the down-projection W2."""
    return ffn_up_projections(glu) + 1


def params_ffn(d_model: ArrayLike, width: ArrayLike, glu: bool, bias: bool = False) -> ArrayLike:
    """Two-matrix FFN (2·d·w) or gated GLU/SwiGLU FFN (3·d·w; Shazeer, 2020).

    ``bias`` adds the linear biases: w per input matrix (two for GLU) plus d for the output.
    """
    weights = ffn_weight_matrices(glu) * d_model * width
    return weights + (ffn_up_projections(glu) * width + d_model if bias else 0)


def params_mamba(d_model: ArrayLike, mamba: MambaConfig) -> ArrayLike:
    """One Mamba-2 mixer (Megatron-Core ``MambaMixer``, megatron/core/ssm/mamba_mixer.py
    @ d98e8a64dd): in_proj d→[z, x, B, C, dt] (no bias), the depthwise causal convolution
    over x, B and C (kernel weights, and a bias per channel unless ``conv_bias`` is off),
    per-head dt bias, A_log and D,
    the gated RMSNorm's gain over d_inner, out_proj d_inner→d (no bias). The layer's
    pre-norm is counted with the norms."""
    per_head = 3 * mamba.heads  # dt_bias, A_log, D
    conv = mamba.conv_channels * (mamba.conv_kernel + int(mamba.conv_bias))
    return (d_model * mamba.in_proj_width + conv + per_head + mamba.inner_width
            + mamba.inner_width * d_model)


def params_gdn(d_model: ArrayLike, gdn: GatedDeltaNetConfig) -> ArrayLike:
    """One gated DeltaNet mixer (Megatron-Core ``GatedDeltaNet``,
    megatron/core/ssm/gated_delta_net/common.py @ d98e8a64dd; HF ``Qwen3NextGatedDeltaNet``):
    in_proj d→[q, k, v, z, beta, alpha] (no bias), the depthwise causal convolution over q, k
    and v (kernel weights, no bias), per-value-head dt bias and A_log, the gated RMSNorm's
    gain over one value head (shared by all heads), out_proj value_width→d (no bias). The
    layer's pre-norm is counted with the norms."""
    per_head = 2 * gdn.value_heads  # dt_bias, A_log
    conv = gdn.conv_channels * gdn.conv_kernel
    return (d_model * gdn.in_proj_width + conv + per_head + gdn.value_head_dim
            + gdn.value_width * d_model)


def params_router(d_model: ArrayLike, experts: ArrayLike) -> ArrayLike:
    """Router W_r ∈ R^{E×d} (Sec. 3.2). The LFLB bias φ is controller state, not a parameter."""
    return experts * d_model


def sparsity(n_active: ArrayLike, n_total: ArrayLike) -> ArrayLike:
    """S = 1 − N_act / N_tot (paper Table 1, Sec. 3.4), of counts or of stated totals."""
    return 1.0 - np.asarray(n_active, dtype=float) / np.asarray(n_total, dtype=float)


@dataclass(frozen=True)
class ParameterCounts:
    """Parameter counts by component; fields are ints or equally shaped numpy arrays.

    Per-layer fields hold the count of one block of that kind; totals are properties.
    A hybrid model (``Geometry.hybrid_pattern``) counts its layers by kind: attention and
    Mamba mixers, MLP and MoE layers, one pre-norm each (``norms_per_layer``).
    """

    layers: ArrayLike
    moe_layers: ArrayLike
    experts: ArrayLike
    top_k: ArrayLike
    attention_per_layer: ArrayLike
    norms_per_layer: ArrayLike
    final_norm: ArrayLike
    dense_ffn_per_layer: ArrayLike
    routed_expert: ArrayLike
    shared_experts_per_layer: ArrayLike
    router_per_layer: ArrayLike
    embedding: ArrayLike
    lm_head: ArrayLike
    mtp: ArrayLike = 0  # DeepSeek-V3 MTP modules, outside every total below
    mamba_layers: ArrayLike = 0
    mamba_per_layer: ArrayLike = 0
    gdn_layers: ArrayLike = 0
    gdn_per_layer: ArrayLike = 0
    hybrid_attention_layers: ArrayLike | None = None  # None: every layer (a transformer)
    hybrid_mlp_layers: ArrayLike | None = None  # None: every layer that is not MoE

    @property
    def dense_layers(self) -> ArrayLike:
        """Layers with a dense FFN."""
        if self.hybrid_mlp_layers is not None:
            return self.hybrid_mlp_layers
        return self.layers - self.moe_layers

    @property
    def attention_layers(self) -> ArrayLike:
        """Layers with an attention mixer."""
        if self.hybrid_attention_layers is not None:
            return self.hybrid_attention_layers
        return self.layers

    @property
    def _backbone(self) -> ArrayLike:
        """Everything every token uses: attention, Mamba and gated DeltaNet mixers, norms,
        dense FFNs."""
        return (
            self.attention_layers * self.attention_per_layer
            + self.mamba_layers * self.mamba_per_layer
            + self.gdn_layers * self.gdn_per_layer
            + self.layers * self.norms_per_layer
            + self.final_norm
            + self.dense_layers * self.dense_ffn_per_layer
        )

    @property
    def routers(self) -> ArrayLike:
        return self.moe_layers * self.router_per_layer

    @property
    def n_total(self) -> ArrayLike:
        """Non-embedding total parameters N_tot (all E routed experts)."""
        moe = self.experts * self.routed_expert + self.shared_experts_per_layer
        return self._backbone + self.moe_layers * (moe + self.router_per_layer)

    @property
    def n_active(self) -> ArrayLike:
        """Non-embedding parameters one token uses N_act (K routed experts + shared)."""
        moe = self.top_k * self.routed_expert + self.shared_experts_per_layer
        return self._backbone + self.moe_layers * (moe + self.router_per_layer)

    @property
    def n_embedding(self) -> ArrayLike:
        """Input embedding plus LM head (zero extra when tied)."""
        return self.embedding + self.lm_head

    @property
    def n_total_with_embedding(self) -> ArrayLike:
        return self.n_total + self.n_embedding

    @property
    def n_active_with_embedding(self) -> ArrayLike:
        return self.n_active + self.n_embedding

    @property
    def n_active_with_head(self) -> ArrayLike:
        """Active parameters with the LM head's matrix but not the input lookup (which
        does no multiply): the convention of model cards such as gpt-oss's (OpenAI, August
        2025: 3.6 B active of 20.9 B for gpt-oss-20b, 5.1 B of 116.8 B for gpt-oss-120b,
        which these counts meet with the unembedding and without the embedding). The head
        reuses the embedding matrix when tied, so it is the embedding's size."""
        return self.n_active + self.embedding

    @property
    def sparsity(self) -> ArrayLike:
        """S = 1 − N_act / N_tot (paper Table 1, Sec. 3.4)."""
        return sparsity(self.n_active, self.n_total)


def build_counts(
    *,
    attention_per_layer: ArrayLike,
    layers: ArrayLike,
    d_model: ArrayLike,
    ffn: ArrayLike,
    glu: bool,
    norm: NormKind,
    vocab: ArrayLike,
    tied_embeddings: bool,
    lm_head_bias: bool = False,
    moe_layers: ArrayLike = 0,
    experts: ArrayLike = 0,
    top_k: ArrayLike = 0,
    expert_ffn: ArrayLike = 0,
    shared_experts: ArrayLike = 0,
    shared_expert_ffn: ArrayLike = 0,
    expert_bias: bool = False,
    router_bias: bool = False,
    shared_expert_gate: bool = False,
) -> ParameterCounts:
    """Assemble :class:`ParameterCounts` from dimensions (scalars or arrays).

    The shared-expert gate (Qwen2-MoE) is a d→1 linear per MoE block, counted with the
    shared experts; a router bias adds E parameters per MoE block (gpt-oss); an LM-head
    bias adds V to the head, which a tied head shares only its weight matrix of
    (Phi-3.5-MoE: HF ``nn.Linear(hidden_size, vocab_size, bias=lm_head_bias)``).
    """
    gate = d_model if shared_expert_gate else 0
    return ParameterCounts(
        layers=layers,
        moe_layers=moe_layers,
        experts=experts,
        top_k=top_k,
        attention_per_layer=attention_per_layer,
        norms_per_layer=2 * params_per_norm(d_model, norm),  # pre-attention + pre-FFN norm
        final_norm=params_per_norm(d_model, norm),
        dense_ffn_per_layer=params_ffn(d_model, ffn, glu),
        routed_expert=params_ffn(d_model, expert_ffn, glu, expert_bias),
        shared_experts_per_layer=(
            shared_experts * params_ffn(d_model, shared_expert_ffn, glu, expert_bias) + gate
        ),
        router_per_layer=params_router(d_model, experts) + (experts if router_bias else 0),
        embedding=vocab * d_model,
        lm_head=(0 if tied_embeddings else vocab * d_model) + (vocab if lm_head_bias else 0),
    )


def attention_params(geometry: Geometry) -> int:
    """Attention parameters of one block of ``geometry``."""
    if geometry.attention is AttentionKind.MLA:
        assert geometry.mla is not None  # guaranteed by Geometry validation
        return params_attention_mla(
            geometry.d_model, geometry.heads, geometry.mla, geometry.norm, geometry.gated_attention
        )
    return params_attention_gqa(
        geometry.d_model,
        geometry.heads,
        geometry.kv_heads,
        geometry.head_dim,
        geometry.gated_attention,
        geometry.attention_output_gate,
    ) + params_attention_extras(geometry)


# The norms of one MTP module besides its block's: the two input norms (HF checkpoint
# ``enorm``/``hnorm``) and the head's norm (``shared_head.norm``); DeepSeek-V3 Sec. 2.2.
MTP_MODULE_NORMS = 3


def params_mtp_projection(d_model: ArrayLike) -> ArrayLike:
    """The projection M ∈ R^{d×2d} of one MTP module (DeepSeek-V3 Sec. 2.2, Eq. 21), which
    maps [norm(h); norm(embedding)] back to the model width."""
    return 2 * d_model * d_model


def params_mtp_module(counts: ParameterCounts, d_model: int, norm: NormKind, moe: bool) -> int:
    """One DeepSeek-V3 multi-token-prediction module (DeepSeek-V3 Sec. 2.2, Eq. 21).

    A transformer block like the main model's last one, the projection M
    (:func:`params_mtp_projection`) and :data:`MTP_MODULE_NORMS` norms; the embedding and
    output head are shared with the main model.
    """
    block = counts.attention_per_layer + counts.norms_per_layer
    if moe:
        block += (counts.experts * counts.routed_expert + counts.shared_experts_per_layer
                  + counts.router_per_layer)
    else:
        block += counts.dense_ffn_per_layer
    return int(block + params_mtp_projection(d_model)
               + MTP_MODULE_NORMS * params_per_norm(d_model, norm))


def params_hybrid_mtp_depth(counts: ParameterCounts, pattern: str, d_model: int,
                            norm: NormKind) -> int:
    """One MTP depth of a hybrid model (Megatron-Core MultiTokenPredictionLayer's hybrid
    path, megatron/core/transformer/multi_token_prediction.py @ d98e8a64dd): the layers of
    ``pattern`` (a ``HybridStack`` with ``post_layer_norm=False``), each counted as the main
    model's layer of that kind (:func:`_hybrid_layer`, its own pre-norm included), the
    projection eh_proj (:func:`params_mtp_projection`) and the :data:`MTP_MODULE_NORMS`
    norms enorm, hnorm and final_layernorm; the embedding and output layer are shared."""
    layers = sum(_hybrid_layer(0, HybridLayer(symbol), counts).total for symbol in pattern)
    return int(layers + params_mtp_projection(d_model)
               + MTP_MODULE_NORMS * params_per_norm(d_model, norm))


def count_parameters(geometry: Geometry) -> ParameterCounts:
    """Exact parameter counts of one geometry."""
    counts = _transformer_counts(geometry)
    if geometry.is_hybrid:
        mamba, gdn = geometry.mamba, geometry.gdn
        counts = replace(
            counts,
            norms_per_layer=params_per_norm(geometry.d_model, geometry.norm),  # one per layer
            mamba_layers=geometry.mamba_layer_count,
            mamba_per_layer=params_mamba(geometry.d_model, mamba) if mamba else 0,
            gdn_layers=geometry.gdn_layer_count,
            gdn_per_layer=params_gdn(geometry.d_model, gdn) if gdn else 0,
            hybrid_attention_layers=geometry.attention_layer_count,
            hybrid_mlp_layers=geometry.dense_layer_count)
        if geometry.mtp_layers:
            mtp = geometry.mtp_layers * params_hybrid_mtp_depth(
                counts, geometry.mtp_pattern or "", geometry.d_model, geometry.norm)
            counts = replace(counts, mtp=mtp)
        return counts
    if geometry.mtp_layers:
        last_is_moe = geometry.is_moe_layer(geometry.layers - 1)
        mtp = geometry.mtp_layers * params_mtp_module(
            counts, geometry.d_model, geometry.norm, last_is_moe)
        counts = replace(counts, mtp=mtp)
    return counts


def _transformer_counts(geometry: Geometry) -> ParameterCounts:
    moe = geometry.moe
    return build_counts(
        attention_per_layer=attention_params(geometry),
        layers=geometry.layers,
        d_model=geometry.d_model,
        ffn=geometry.ffn,
        glu=geometry.glu,
        norm=geometry.norm,
        vocab=geometry.vocab,
        tied_embeddings=geometry.tied_embeddings,
        lm_head_bias=geometry.lm_head_bias,
        moe_layers=geometry.moe_layer_count,
        experts=moe.experts if moe else 0,
        top_k=moe.top_k if moe else 0,
        expert_ffn=moe.expert_ffn if moe else 0,
        shared_experts=moe.shared_experts if moe else 0,
        shared_expert_ffn=moe.shared_width if moe else 0,
        expert_bias=moe.expert_bias if moe else False,
        router_bias=moe.router_bias if moe else False,
        shared_expert_gate=moe.shared_expert_gate if moe else False,
    )


@dataclass(frozen=True)
class LayerParameters:
    """Parameters of one block: total and per-token active."""

    index: int
    kind: str  # "dense" or "moe"; a hybrid model's "mamba", "gdn", "attention", "mlp", "moe"
    attention: int
    norms: int
    ffn_total: int
    ffn_active: int
    router: int
    mamba: int = 0
    gdn: int = 0

    @property
    def total(self) -> int:
        return self.attention + self.mamba + self.gdn + self.norms + self.ffn_total + self.router

    @property
    def active(self) -> int:
        return (self.attention + self.mamba + self.gdn + self.norms + self.ffn_active
                + self.router)


HYBRID_KIND_NAMES = {HybridLayer.MAMBA: "mamba", HybridLayer.GDN: "gdn",
                     HybridLayer.ATTENTION: "attention", HybridLayer.MLP: "mlp",
                     HybridLayer.MOE: "moe"}


def hybrid_mixer_parameters(counts: ParameterCounts, symbol: HybridLayer) -> ArrayLike:
    """Matrix parameters of one hybrid layer's mixer or dense FFN (the layer's norm, router
    and routed experts apart): attention, Mamba, gated DeltaNet, MLP or an MoE layer's
    shared experts."""
    return {HybridLayer.ATTENTION: counts.attention_per_layer,
            HybridLayer.MAMBA: counts.mamba_per_layer, HybridLayer.GDN: counts.gdn_per_layer,
            HybridLayer.MLP: counts.dense_ffn_per_layer,
            HybridLayer.MOE: counts.shared_experts_per_layer}[symbol]


def _hybrid_layer(index: int, symbol: HybridLayer, counts: ParameterCounts) -> LayerParameters:
    """One layer of a hybrid pattern: a mixer (attention, Mamba or gated DeltaNet) or an FFN
    (MLP or MoE)."""
    ffn_total = ffn_active = router = 0
    if symbol is HybridLayer.MLP:
        ffn_total = ffn_active = counts.dense_ffn_per_layer
    elif symbol is HybridLayer.MOE:
        shared = counts.shared_experts_per_layer
        ffn_total = counts.experts * counts.routed_expert + shared
        ffn_active = counts.top_k * counts.routed_expert + shared
        router = counts.router_per_layer
    return LayerParameters(
        index=index, kind=HYBRID_KIND_NAMES[symbol],
        attention=counts.attention_per_layer if symbol is HybridLayer.ATTENTION else 0,
        mamba=counts.mamba_per_layer if symbol is HybridLayer.MAMBA else 0,
        gdn=counts.gdn_per_layer if symbol is HybridLayer.GDN else 0,
        norms=counts.norms_per_layer, ffn_total=ffn_total, ffn_active=ffn_active,
        router=router)


def layer_breakdown(geometry: Geometry) -> list[LayerParameters]:
    """Per-block parameter breakdown (embedding, LM head and final norm excluded)."""
    counts = count_parameters(geometry)
    if geometry.hybrid_pattern is not None:
        return [_hybrid_layer(index, HybridLayer(symbol), counts)
                for index, symbol in enumerate(geometry.hybrid_pattern)]
    rows = []
    for index in range(geometry.layers):
        if geometry.is_moe_layer(index):
            shared = counts.shared_experts_per_layer
            rows.append(
                LayerParameters(
                    index=index,
                    kind="moe",
                    attention=counts.attention_per_layer,
                    norms=counts.norms_per_layer,
                    ffn_total=counts.experts * counts.routed_expert + shared,
                    ffn_active=counts.top_k * counts.routed_expert + shared,
                    router=counts.router_per_layer,
                )
            )
        else:
            rows.append(
                LayerParameters(
                    index=index,
                    kind="dense",
                    attention=counts.attention_per_layer,
                    norms=counts.norms_per_layer,
                    ffn_total=counts.dense_ffn_per_layer,
                    ffn_active=counts.dense_ffn_per_layer,
                    router=0,
                )
            )
    return rows
