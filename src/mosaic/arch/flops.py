"""FLOPs per token under named conventions.

* ``model``: the paper's MFU numerator, 6·N_act with N_act non-embedding and no attention
  term (Eq. 1; Kaplan et al., 2020, Sec. 2.1).
* ``attention``: the causal (or full) attention-core FLOPs that 6·N omits
  (Chowdhery et al., 2022, PaLM, Appendix B: 12·L·H·Q·T for full attention).
* ``lm_head``: the unembedding matmul, 6·V·d per trained token.
* ``ssd_scan``: a hybrid model's Mamba-2 sequence mixing (the chunked SSD scan), which 6·N
  omits as it omits the attention core; the "with attention" convention credits both.
* ``gdn``: likewise a hybrid model's gated DeltaNet mixing (the chunked delta rule).
"""

from __future__ import annotations

from enum import StrEnum

from mosaic.arch.counts import ParameterCounts
from mosaic.arch.geometry import AttentionKind, Geometry, HybridLayer
from mosaic.errors import MosaicInputError

# Training = forward + backward; backward costs twice the forward (Kaplan et al., 2020).
TRAIN_TO_FORWARD_FLOPS = 3
FLOPS_PER_MULTIPLY_ADD = 2
# C_model = 6·N_act·D (paper Sec. 2.1, Eq. 1 and Eq. 16): training FLOPs per parameter and token
FLOPS_PER_PARAM_TOKEN = float(FLOPS_PER_MULTIPLY_ADD * TRAIN_TO_FORWARD_FLOPS)


class FlopConvention(StrEnum):
    """Which FLOPs count as useful work in a utilisation figure."""

    PAPER = "paper"  # 6·N_active, non-embedding, no attention (paper Eq. 1)
    WITH_ATTENTION = "with_attention"  # PAPER + causal attention core (+ SSD / delta rule)


def model_flops_per_token(counts: ParameterCounts) -> float:
    """6·N_act: forward + backward matmul FLOPs per trained token (paper Eq. 1)."""
    return FLOPS_PER_PARAM_TOKEN * counts.n_active


def attended_keys_per_query(seq_len: int, causal: bool, window: int | None = None) -> float:
    """Mean keys a query attends to: T for full attention, (T + 1)/2 for causal; causal in a
    window of W keys (itself included), query i (from 1) attends min(i, W):
    (W(W + 1)/2 + (T - W)·W) / T = W - W(W - 1)/(2T) for T >= W."""
    if seq_len <= 0:
        raise MosaicInputError(f"seq_len must be a positive integer, got {seq_len}")
    if causal and window is not None and window < seq_len:
        return window - window * (window - 1) / (2 * seq_len)
    return (seq_len + 1) / 2 if causal else float(seq_len)


def attention_flops_per_token(geometry: Geometry, seq_len: int, causal: bool = True) -> float:
    """Training FLOPs per token of the attention core (QKᵀ and AV), all layers.

    Forward per token and layer: 2·h·d_qk·ctx for the scores plus 2·h·d_v·ctx for the
    weighted values, ctx the mean attended keys (in its window on a window layer, Geometry.
    sliding_window); training multiplies by 3 (PaLM App. B).
    """
    if geometry.attention is AttentionKind.MLA:
        assert geometry.mla is not None
        qk_dim = geometry.mla.qk_nope_head_dim + geometry.mla.qk_rope_head_dim
        v_dim = geometry.mla.v_head_dim
    else:
        qk_dim = v_dim = geometry.head_dim
    windowed = geometry.window_layer_count
    context = (attended_keys_per_query(seq_len, causal) * (geometry.attention_layer_count
                                                            - windowed)
               + attended_keys_per_query(seq_len, causal, geometry.sliding_window) * windowed)
    forward = FLOPS_PER_MULTIPLY_ADD * geometry.heads * (qk_dim + v_dim) * context
    return TRAIN_TO_FORWARD_FLOPS * forward


def ssd_scan_forward_flops_per_token(geometry: Geometry) -> float:
    """Forward FLOPs per token of one Mamba-2 layer's chunked SSD scan (Dao & Gu 2024,
    Sec. 6, the four steps of Listing 1 over chunks of Q tokens): the intra-chunk C·Bᵀ per
    group (Q·N per token) and its masked product with x per head (Q·P), the chunk states
    Bᵀ·x and the state-to-output C·h per head (N·P each); multiply-adds count 2. The
    intra-chunk Q×Q products are counted whole (C·Bᵀ is; the chunk-scan kernel skips its
    blocks above the diagonal, so this is an upper bound). Zero without Mamba layers."""
    mamba = geometry.mamba
    if mamba is None:
        return 0.0
    q, n, p = mamba.chunk_size, mamba.state_dim, mamba.head_dim
    per_token = mamba.groups * q * n + mamba.heads * (q * p + 2 * n * p)
    return float(FLOPS_PER_MULTIPLY_ADD * per_token)


def ssd_scan_flops_per_token(geometry: Geometry) -> float:
    """Training FLOPs per token of the SSD scans of every Mamba layer (forward + backward =
    3 × forward, as for the attention core)."""
    return (TRAIN_TO_FORWARD_FLOPS * ssd_scan_forward_flops_per_token(geometry)
            * geometry.mamba_layer_count)


def gdn_forward_flops_per_token(geometry: Geometry) -> float:
    """Forward FLOPs per token of one gated DeltaNet layer's chunked delta rule (Yang, Kautz,
    Hatamizadeh 2025, Sec. 3.3, the WY form of Yang et al. 2024, "Parallelizing Linear
    Transformers with the Delta Rule", Sec. 3.2; the kernels of fla/ops/gated_delta_rule/
    chunk.py that Megatron-Core calls), over chunks of C tokens with queries and keys repeated
    to the value heads: per value head and token the chunk's K·Kᵀ and the W = A·K products
    (C·d_k each), U = A·V (C·d_v), the triangular solve (C²/3), the state update and the
    corrected values (d_k·d_v each), the output Q·S (d_k·d_v) and the intra-chunk Q·Kᵀ and
    its product with the values (C·d_k + C·d_v); multiply-adds count 2. The masked C×C
    products are counted whole (an upper bound, as for the SSD scan). Zero without gated
    DeltaNet layers."""
    gdn = geometry.gdn
    if gdn is None:
        return 0.0
    c, dk, dv = gdn.chunk_size, gdn.key_head_dim, gdn.value_head_dim
    per_head = 3 * dk * dv + 3 * c * dk + 2 * c * dv + c * c / 3
    return float(FLOPS_PER_MULTIPLY_ADD * gdn.value_heads * per_head)


def gdn_flops_per_token(geometry: Geometry) -> float:
    """Training FLOPs per token of the delta rule of every gated DeltaNet layer (forward +
    backward = 3 × forward, as for the attention core)."""
    return (TRAIN_TO_FORWARD_FLOPS * gdn_forward_flops_per_token(geometry)
            * geometry.gdn_layer_count)


def sequence_mixing_flops_per_token(geometry: Geometry, seq_len: int) -> float:
    """Training FLOPs per token that 6·N omits for mixing along the sequence: the causal
    attention core, the SSD scans and the gated delta rule (all layers)."""
    return (attention_flops_per_token(geometry, seq_len, causal=True)
            + ssd_scan_flops_per_token(geometry) + gdn_flops_per_token(geometry))


def lm_head_flops_per_token(geometry: Geometry) -> float:
    """Training FLOPs per token of the unembedding matmul: 6·V·d."""
    return 2 * TRAIN_TO_FORWARD_FLOPS * geometry.vocab * geometry.d_model


def mtp_block_flops_per_token(geometry: Geometry, counts: ParameterCounts,
                              seq_len: int) -> float:
    """Training FLOPs per token of the multi-token-prediction modules besides their LM heads
    (DeepSeek-V3 report Sec. 2.2, Eq. 21), which 6·N_act leaves out as N_act leaves out their
    parameters (``counts.mtp``): per module, 6 per parameter a token uses (its block, built
    like the main model's last, with the K routed experts of its E; the 2d→d projection; its
    norms) and the attention core of one block (the mean of the model's attention layers,
    exact where every layer attends alike, as DeepSeek-V3's MLA does). Zero without MTP
    modules. Each module's second LM head is :func:`lm_head_flops_per_token` again."""
    if not geometry.mtp_layers:
        return 0.0
    if geometry.is_hybrid:
        return _hybrid_mtp_flops_per_token(geometry, counts, seq_len)
    skipped = 0
    if geometry.is_moe_layer(geometry.layers - 1):  # counts.params_mtp_module's block
        skipped = geometry.mtp_layers * (counts.experts - counts.top_k) * counts.routed_expert
    attention = (attention_flops_per_token(geometry, seq_len)
                 / geometry.attention_layer_count)
    return float(FLOPS_PER_PARAM_TOKEN * (counts.mtp - skipped)
                 + geometry.mtp_layers * attention)


def _hybrid_mtp_flops_per_token(geometry: Geometry, counts: ParameterCounts,
                                seq_len: int) -> float:
    """:func:`mtp_block_flops_per_token` of a hybrid model, whose every depth is the layers
    of ``mtp_pattern`` (Geometry.mtp_layer_counts): 6 per parameter a token uses (each
    'E' layer's K routed experts of its E) and each layer's sequence mixing, as the main
    model's layers of that kind: full causal attention (a hybrid model's attention takes no
    window), the SSD scan, the delta rule."""
    held = geometry.mtp_layer_counts
    skipped = held[HybridLayer.MOE] * (counts.experts - counts.top_k) * counts.routed_expert
    attention = (TRAIN_TO_FORWARD_FLOPS * FLOPS_PER_MULTIPLY_ADD * geometry.heads
                 * 2 * geometry.head_dim * attended_keys_per_query(seq_len, True))
    mixing = (held[HybridLayer.ATTENTION] * attention
              + held[HybridLayer.MAMBA] * TRAIN_TO_FORWARD_FLOPS
              * ssd_scan_forward_flops_per_token(geometry)
              + held[HybridLayer.GDN] * TRAIN_TO_FORWARD_FLOPS
              * gdn_forward_flops_per_token(geometry))
    return float(FLOPS_PER_PARAM_TOKEN * (counts.mtp - skipped) + mixing)


def useful_flops_per_token(
    geometry: Geometry, counts: ParameterCounts, seq_len: int, convention: FlopConvention
) -> float:
    """FLOPs per token credited as useful under ``convention``."""
    flops = model_flops_per_token(counts)
    if convention is FlopConvention.WITH_ATTENTION:
        flops += sequence_mixing_flops_per_token(geometry, seq_len)
    return flops
