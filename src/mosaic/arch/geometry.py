"""Geometry of a decoder-only transformer, dense or Mixture-of-Experts.

The vocabulary follows the paper (Sec. 3.2, 3.4): ``d_model`` is the residual width d,
``ffn`` the reference dense FFN width d_ff, ``expert_ffn`` the routed-expert width
d_expert, and the split factor is G = d_ff / d_expert (Eq. 8).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from mosaic.errors import MosaicInputError, shown
from mosaic.limits import LIMITS, shown_number


class AttentionKind(StrEnum):
    """Attention variants whose parameter counts differ."""

    MHA = "mha"  # kv_heads == heads
    GQA = "gqa"  # kv_heads divides heads (Ainslie et al., 2023)
    MLA = "mla"  # DeepSeek multi-head latent attention (DeepSeek-V2, 2024)


# FFN activations by name; the gated ones multiply two projections (Shazeer 2020)
ACTIVATIONS = ("swiglu", "geglu", "gelu", "relu", "squared_relu")
GATED_ACTIVATIONS = ("swiglu", "geglu")


class HybridLayer(StrEnum):
    """Layers of a hybrid model's pattern, one symbol per layer as Megatron-Core spells them
    (megatron/core/models/hybrid/hybrid_layer_allocation.py ``Symbols`` @ d98e8a64dd):
    each is a whole layer with its own pre-norm and residual, so a transformer block is an
    attention layer followed by an MLP (or MoE) layer."""

    MAMBA = "M"
    GDN = "G"
    ATTENTION = "*"
    MLP = "-"
    MOE = "E"


class QKNormSpan(StrEnum):
    """What one query (key) norm normalises: each head's head_dim values (Qwen3
    ``Qwen3Attention.q_norm``, Megatron-Core ``qk_layernorm``) or the whole projection,
    heads x head_dim wide for queries and kv_heads x head_dim for keys (OLMoE
    ``OlmoeAttention.q_norm``, OLMo 2 and MiniMax-M2; transformers models/olmoe,
    models/olmo2)."""

    HEAD = "head"
    PROJECTION = "projection"


class NormKind(StrEnum):
    """Normalisation layers: LayerNorm has a gain and a bias, RMSNorm only a gain."""

    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise MosaicInputError(message)


# Upper bounds per field (mosaic.limits): no geometry beyond them is a trainable model,
# and counts built from them stay far inside float64.
_RANGE_KIND = {"layers": "layers", "experts": "experts", "top_k": "experts", "vocab": "vocab",
               "moe_every": "layers", "shared_experts": "experts", "dense_layers": "layers"}


def _require_positive(owner: str, **values: int | None) -> None:
    for name, value in values.items():
        if value is not None and value <= 0:
            raise MosaicInputError(f"{owner}.{name} must be a positive integer, got {value}")
        if value is not None:
            _require_below_bound(owner, name, value)


def _require_below_bound(owner: str, name: str, value: int, low: int = 1) -> None:
    """``value`` at most its field's upper bound (mosaic.limits), with one line naming it."""
    bound = LIMITS[_RANGE_KIND.get(name, "width")]
    if value > bound.high:
        shown = shown_number(value)
        raise MosaicInputError(f"{owner}.{name}: got {shown}; allowed: an integer in "
                               f"{low}..{int(bound.high)} ({bound.why})")


@dataclass(frozen=True)
class MLAConfig:
    """Dimensions of DeepSeek's multi-head latent attention (DeepSeek-V2 Sec. 2.1).

    ``q_lora_rank`` None means queries are projected directly (no low-rank query path).
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        _require_positive(
            "mla",
            kv_lora_rank=self.kv_lora_rank,
            qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
            q_lora_rank=self.q_lora_rank,
        )


@dataclass(frozen=True)
class MambaConfig:
    """A Mamba-2 mixer layer (Dao & Gu 2024, "Transformers are SSMs", Sec. 7; Megatron-Core
    ``MambaMixer``, megatron/core/ssm/mamba_mixer.py @ d98e8a64dd).

    Attributes:
        heads: SSM heads H (``mamba_num_heads``); the inner width is H·head_dim.
        head_dim: channels per head P (``mamba_head_dim``, default 64).
        state_dim: SSM state size N (``mamba_state_dim``/``ssm_state_size``, default 128).
        groups: B/C groups G shared by H/G heads each (``mamba_num_groups``/``n_groups``).
        conv_kernel: width of the depthwise causal convolution over x, B and C (``d_conv``, 4).
        chunk_size: tokens per chunk of the chunked SSD scan (Sec. 6; ``chunk_size``, 128).
        conv_bias: the convolution carries a bias per channel (MambaMixer ``conv_bias``,
            HF ``use_conv_bias``; default true).
    """

    heads: int
    head_dim: int = 64
    state_dim: int = 128
    groups: int = 8
    conv_kernel: int = 4
    chunk_size: int = 128
    conv_bias: bool = True

    def __post_init__(self) -> None:
        _require_positive("model.mamba", heads=self.heads, head_dim=self.head_dim,
                          state_dim=self.state_dim, groups=self.groups,
                          conv_kernel=self.conv_kernel, chunk_size=self.chunk_size)
        _require(self.heads % self.groups == 0,
                 f"model.mamba.groups ({self.groups}) must divide model.mamba.heads "
                 f"({self.heads}) "
                 "(Megatron-Core MambaMixer: nheads % ngroups == 0)")

    @property
    def inner_width(self) -> int:
        """d_inner = H·P, the width of x, z and the SSD output."""
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels the causal convolution filters: x, B and C (d_inner + 2·G·N)."""
        return self.inner_width + 2 * self.groups * self.state_dim

    @property
    def in_proj_width(self) -> int:
        """Output width of the input projection: z, x, B, C and dt (2·d_inner + 2·G·N + H)."""
        return self.inner_width + self.conv_channels + self.heads


@dataclass(frozen=True)
class GatedDeltaNetConfig:
    """A gated DeltaNet mixer layer (Yang, Kautz, Hatamizadeh 2025, "Gated Delta Networks",
    arXiv 2412.06464; Megatron-Core ``GatedDeltaNet``, megatron/core/ssm/gated_delta_net @
    d98e8a64dd; HF ``Qwen3NextGatedDeltaNet``): Qwen3-Next's linear-attention layers.

    Attributes:
        key_heads: query/key heads (``linear_num_key_heads``).
        value_heads: value heads (``linear_num_value_heads``), a multiple of ``key_heads``
            (each key head serves value_heads/key_heads value heads).
        key_head_dim: channels per query/key head (``linear_key_head_dim``, 128).
        value_head_dim: channels per value head (``linear_value_head_dim``, 128).
        conv_kernel: width of the depthwise causal convolution over q, k and v
            (``linear_conv_kernel_dim``, 4); without bias (Megatron-Core ``conv_bias`` False,
            HF ``bias=False``).
        chunk_size: tokens per chunk of the chunked delta rule (64 in both implementations).
    """

    key_heads: int
    value_heads: int
    key_head_dim: int = 128
    value_head_dim: int = 128
    conv_kernel: int = 4
    chunk_size: int = 64

    def __post_init__(self) -> None:
        _require_positive("model.gdn", key_heads=self.key_heads, value_heads=self.value_heads,
                          key_head_dim=self.key_head_dim, value_head_dim=self.value_head_dim,
                          conv_kernel=self.conv_kernel, chunk_size=self.chunk_size)
        _require(self.value_heads % self.key_heads == 0,
                 f"model.gdn.key_heads ({self.key_heads}) must divide model.gdn.value_heads "
                 f"({self.value_heads}) (each key head serves a whole group of value heads)")

    @property
    def key_width(self) -> int:
        """Width of q and of k: key_heads·key_head_dim."""
        return self.key_heads * self.key_head_dim

    @property
    def value_width(self) -> int:
        """Width of v, of the output gate z and of the mixer output: value_heads·value_head_dim."""
        return self.value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels the causal convolution filters: q, k and v."""
        return 2 * self.key_width + self.value_width

    @property
    def in_proj_width(self) -> int:
        """Output width of the input projection: q, k, v, z and the per-value-head beta and
        alpha (Megatron-Core ``in_proj_split_sections``)."""
        return self.conv_channels + self.value_width + 2 * self.value_heads


ROUTER_SCORES = ("softmax", "sigmoid")
ROUTER_BALANCING = ("aux_loss", "loss_free")


@dataclass(frozen=True)
class RouterConfig:
    """How a trained MoE model scores, picks and weights its experts (none of it changes a
    parameter count; the time model reads ``balancing``, exports write all of it).

    Attributes:
        score: ``softmax`` over the experts' logits or an independent ``sigmoid`` per expert
            (DeepSeek-V3, arXiv:2412.19437 Sec. 2.1.2; the paper's Alg. 1).
        balancing: ``aux_loss`` (an auxiliary balance loss, Switch/GShard) or ``loss_free``
            (a per-expert selection bias nudged toward under-used experts, Wang et al. 2024,
            arXiv:2408.15664; HF ``e_score_correction_bias``); None = the stack's default
            (its ``router_balancing`` trait).
        normalize_top_k: the K selected weights are renormalised to sum to 1 (HF
            ``norm_topk_prob``; Megatron-Core's softmax after top-k).
        top_k_scaling: the combined routed output is multiplied by this (HF
            ``routed_scaling_factor``, DeepSeek-V3's 2.5).
        groups: group-limited routing: the experts form this many equal groups of
            consecutive experts (HF ``n_group``; DeepSeek-V3's 8, one per node of its EP
            group, arXiv:2412.19437 Sec. 2.1.2 and 3.2.2); None = no groups.
        top_groups: each token picks its K experts inside its ``top_groups`` best groups
            (HF ``topk_group``, DeepSeek-V3's 4); set with ``groups``.
    """

    score: str = "softmax"
    balancing: str | None = None
    normalize_top_k: bool = True
    top_k_scaling: float = 1.0
    groups: int | None = None
    top_groups: int | None = None

    def __post_init__(self) -> None:
        _require(self.score in ROUTER_SCORES,
                 f"moe.router.score must be one of {', '.join(ROUTER_SCORES)}, "
                 f"got {shown(self.score)}")
        _require(self.balancing is None or self.balancing in ROUTER_BALANCING,
                 f"moe.router.balancing must be one of {', '.join(ROUTER_BALANCING)} or "
                 f"unset, got {shown(self.balancing)}")
        _require(0 < self.top_k_scaling <= 1e3,
                 f"moe.router.top_k_scaling must lie in (0, 1000], got {self.top_k_scaling}")
        _require((self.groups is None) == (self.top_groups is None),
                 "moe.router.groups and moe.router.top_groups are set together (group-limited "
                 f"routing), got groups={self.groups}, top_groups={self.top_groups}")
        if self.groups is not None and self.top_groups is not None:
            _require(1 <= self.top_groups <= self.groups,
                     f"moe.router.top_groups ({self.top_groups}) must lie in 1..groups "
                     f"({self.groups})")
            if self.top_groups == self.groups:  # every group in reach: no limit, one value
                object.__setattr__(self, "groups", None)
                object.__setattr__(self, "top_groups", None)

    @property
    def limits_groups(self) -> bool:
        """Whether routing is group-limited: some groups are out of a token's reach."""
        return (self.groups is not None and self.top_groups is not None
                and self.top_groups < self.groups)

    def group_misfit(self, experts: int, top_k: int) -> str | None:
        """Why this router's expert groups do not fit ``experts`` routed experts chosen
        ``top_k`` at a time (groups must split the experts evenly and the best groups hold
        the K chosen); None where they fit or there are no groups."""
        if self.groups is None or self.top_groups is None:
            return None
        if experts % self.groups:
            return (f"moe.router.groups ({self.groups}) must divide moe.experts ({experts}) "
                    "into equal groups")
        reachable = self.top_groups * experts // self.groups
        if top_k > reachable:
            return (f"moe.top_k ({top_k}) exceeds the {reachable} experts of "
                    f"moe.router.top_groups ({self.top_groups}) groups")
        return None

    def describe(self) -> str:
        """One phrase, e.g. 'sigmoid scores, loss-free (expert-bias) balancing, top-k
        normalised, scaled 2.5'."""
        balancing = {"aux_loss": "auxiliary-loss balancing",
                     "loss_free": "loss-free (expert-bias) balancing",
                     None: "the stack's balancing"}[self.balancing]
        parts = [f"{self.score} scores", balancing,
                 "top-k normalised" if self.normalize_top_k else "top-k not normalised"]
        if self.top_k_scaling != 1.0:
            parts.append(f"scaled {self.top_k_scaling:g}")
        if self.limits_groups:
            parts.append(f"experts in the top {self.top_groups} of {self.groups} groups")
        return ", ".join(parts)


@dataclass(frozen=True)
class MoEConfig:
    """The routed part of an MoE transformer.

    Attributes:
        experts: routed experts E per MoE layer.
        top_k: routed experts K activated per token.
        expert_ffn: hidden width d_expert of one routed expert.
        shared_experts: always-active shared experts per MoE layer (paper: 1, Sec. 3.1).
        shared_expert_ffn: hidden width of a shared expert; None means ``expert_ffn``
            (the paper's choice, Appendix A.1).
        dense_layers: leading blocks kept dense (the paper keeps block 1 dense, Sec. 3.1).
        moe_every: after the dense prefix, every n-th block is MoE (1 = all of them).
        expert_bias: routed/shared expert linears carry biases (gpt-oss, OpenAI 2025 model
            card arXiv:2508.10925).
        router_bias: the router linear carries a bias (gpt-oss).
        shared_expert_gate: a sigmoid gate d→1 scales the shared experts' output
            (Qwen2-MoE, HF transformers ``Qwen2MoeSparseMoeBlock.shared_expert_gate``).
        capacity_factor: tokens an expert accepts, as a multiple of the even share
            (GShard/Switch token dropping); None = dropless. Carried to launch configs and
            read by the time model's expert load (perf/routing_load.py); it changes no
            parameter count.
        router: how the trained router scores and weights its experts; None = not stated
            (the stack's router; exports leave the framework's or recipe's).
    """

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    shared_expert_ffn: int | None = None
    dense_layers: int = 0
    moe_every: int = 1
    expert_bias: bool = False
    router_bias: bool = False
    shared_expert_gate: bool = False
    capacity_factor: float | None = None
    router: RouterConfig | None = None

    def __post_init__(self) -> None:
        _require_positive(
            "moe",
            experts=self.experts,
            top_k=self.top_k,
            expert_ffn=self.expert_ffn,
            shared_expert_ffn=self.shared_expert_ffn,
            moe_every=self.moe_every,
        )
        _require(
            self.shared_experts >= 0, f"moe.shared_experts must be >= 0, got {self.shared_experts}"
        )
        _require(self.dense_layers >= 0, f"moe.dense_layers must be >= 0, got {self.dense_layers}")
        # the same upper bounds as experts and layers (a count past them overflows float64 in
        # the FLOP and parameter sums)
        _require_below_bound("moe", "shared_experts", self.shared_experts, low=0)
        _require_below_bound("moe", "dense_layers", self.dense_layers, low=0)
        _require(
            self.top_k <= self.experts,
            f"moe.top_k ({self.top_k}) must not exceed moe.experts ({self.experts})",
        )
        misfit = None if self.router is None else self.router.group_misfit(self.experts,
                                                                            self.top_k)
        _require(misfit is None, misfit or "")

    @property
    def shared_width(self) -> int:
        """Hidden width of one shared expert."""
        return self.shared_expert_ffn if self.shared_expert_ffn is not None else self.expert_ffn

    @property
    def shared_total_width(self) -> int:
        """Summed hidden width of the shared experts: they run as one MLP of this width
        (Megatron-Core SharedExpertMLP, ``moe_shared_expert_intermediate_size``); 0 without."""
        return self.shared_experts * self.shared_width


@dataclass(frozen=True)
class Geometry:
    """A decoder-only transformer; ``moe`` None means dense.

    Attributes:
        layers: transformer blocks L.
        d_model: residual width d.
        heads: query heads.
        kv_heads: key/value heads (== heads for MHA; ignored for MLA).
        head_dim: per-head width of queries/keys/values (MHA/GQA).
        ffn: reference dense FFN hidden width d_ff (used by dense blocks).
        vocab: vocabulary size (GPT-2 BPE, 50,257, in the paper's runs, Appendix A.1).
        glu: gated FFN (SwiGLU: three matrices) instead of two.
        tied_embeddings: input embedding shared with the LM head.
        attention: MHA, GQA or MLA.
        mla: MLA dimensions, required when ``attention`` is MLA.
        gated_attention: per-head sigmoid output gate (Qiu et al., 2025; paper A.1).
        attention_output_gate: elementwise sigmoid gate on the attention output, one per
            output channel from its own query-projection columns (Qiu et al., 2025, the
            elementwise variant; Qwen3-Next, Megatron-Core ``attention_output_gate``).
        norm: LayerNorm (the paper's pre-LN, A.1) or RMSNorm.
        moe: the routed part, or None for a dense model.
        qk_norm: norms of queries and keys (Qwen3; HF ``Qwen3Attention.q_norm``).
        qk_norm_span: what each q/k norm spans (:class:`QKNormSpan`): one head (Qwen3,
            the default) or the whole projection (OLMoE, MiniMax-M2).
        qkv_bias: biases on the Q, K and V projections (Qwen2, gpt-oss).
        output_bias: bias on the attention output projection (gpt-oss).
        lm_head_bias: a bias on the LM head's logits, one per vocabulary entry (Phi-3.5-MoE,
            HF ``lm_head_bias``); counted with the head, tied or not.
        attention_sinks: one learned sink logit per head (gpt-oss model card, Sec. 2.1).
        mtp_layers: DeepSeek-V3 multi-token-prediction modules (DeepSeek-V3 Sec. 2.2); their
            parameters are counted apart from ``n_total`` (the published 671 B excludes them).
        mtp_pattern: a hybrid model's MTP depth, one :class:`HybridLayer` symbol per layer
            (Megatron-Core's unified ``hybrid_layer_pattern`` "<main>/<mtp>/<mtp>...", one
            ``/``-part per depth, all alike; the legacy ``mtp_hybrid_override_pattern``;
            megatron/core/models/hybrid/hybrid_layer_allocation.py ``parse_hybrid_pattern``
            @ d98e8a64dd); Nemotron 3.5 Lightning's ``*E`` is one attention and one MoE
            layer. Required with a hybrid pattern and ``mtp_layers`` > 0 (Megatron-Core's
            hybrid model builds no MTP block without one: hybrid_model.py ``mtp_process``
            needs ``mtp_pattern is not None``), None otherwise.
        activation: the FFN activation's name when the source states it (swiglu, geglu, gelu,
            relu, squared_relu; the first two gated, as ``glu`` says); None means SwiGLU
            when ``glu``, else GELU, and stating that default stores None. Parameter and
            FLOP counts read only ``glu``; launch configs read the name (Nemotron-H and
            Nemotron-4 use squared ReLU).
        hybrid_pattern: a hybrid model's layers, one :class:`HybridLayer` symbol each
            (Megatron-Core ``hybrid_layer_pattern``, e.g. Nemotron-H 8B
            ``M-M-M-M*-...``); None for a transformer, whose every block is attention + FFN.
            ``layers`` then counts pattern symbols, ``ffn`` is the MLP layers' width and
            ``moe`` the MoE layers' experts.
        mamba: the Mamba-2 mixer of the pattern's ``M`` layers.
        gdn: the gated DeltaNet mixer of the pattern's ``G`` layers.
        rope_base: the rotary embedding's base θ (HF ``rope_theta``: Llama 3 500,000,
            Qwen3-Next 10,000,000); None = not stated (each framework's default). Launch
            configs read it; counts do not.
        rope_fraction: the share of each head's dimensions that rotates (HF
            ``partial_rotary_factor``, Megatron ``rotary_percent``; Qwen3-Next 0.25).
        zero_centered_norm: norm gains stored as 1 + w (Qwen3-Next's RMSNorm; Megatron-Core
            ``layernorm_zero_centered_gamma``); the same parameters.
        sliding_window: keys a window layer's query attends, itself included (HF
            ``sliding_window``: GPT-OSS 128, Mistral 7B 4096); None = full causal attention
            on every layer. The same parameters; FLOP counts take the window.
        full_attention_every: with a window, every N-th layer (the N-th, 2N-th, ... counting
            from 1) keeps full causal attention (Megatron ``--window-attn-skip-freq N``;
            GPT-OSS alternates, N = 2); None = every layer windowed.
    """

    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int = 50257
    glu: bool = True
    tied_embeddings: bool = False
    attention: AttentionKind = AttentionKind.GQA
    mla: MLAConfig | None = None
    gated_attention: bool = False
    attention_output_gate: bool = False
    norm: NormKind = NormKind.LAYERNORM
    moe: MoEConfig | None = field(default=None)
    qk_norm: bool = False
    qk_norm_span: QKNormSpan = QKNormSpan.HEAD
    qkv_bias: bool = False
    output_bias: bool = False
    lm_head_bias: bool = False
    attention_sinks: bool = False
    mtp_layers: int = 0
    mtp_pattern: str | None = None
    activation: str | None = None
    hybrid_pattern: str | None = None
    mamba: MambaConfig | None = None
    gdn: GatedDeltaNetConfig | None = None
    rope_base: float | None = None
    rope_fraction: float = 1.0
    zero_centered_norm: bool = False
    sliding_window: int | None = None
    full_attention_every: int | None = None

    def __post_init__(self) -> None:
        _require_positive(
            "model",
            layers=self.layers,
            d_model=self.d_model,
            heads=self.heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            ffn=self.ffn,
            vocab=self.vocab,
        )
        _require(self.mtp_layers >= 0, f"model.mtp_layers must be >= 0, got {self.mtp_layers}")
        object.__setattr__(self, "attention", AttentionKind(self.attention))
        object.__setattr__(self, "norm", NormKind(self.norm))
        object.__setattr__(self, "qk_norm_span", QKNormSpan(self.qk_norm_span))
        _require(self.qk_norm or self.qk_norm_span is QKNormSpan.HEAD,
                 "model.qk_norm_span projection needs model.qk_norm: true")
        if self.attention is AttentionKind.MLA:
            _require(self.mla is not None, "model.mla dimensions are required for MLA attention")
        else:
            _require(
                self.heads % self.kv_heads == 0,
                f"model.kv_heads ({self.kv_heads}) must divide model.heads ({self.heads})",
            )
            if self.attention is AttentionKind.MHA:
                _require(
                    self.kv_heads == self.heads,
                    f"MHA needs kv_heads == heads, got {self.kv_heads} and {self.heads}",
                )
        if self.moe is not None:
            _require(
                self.moe.dense_layers <= self.layers,
                f"moe.dense_layers ({self.moe.dense_layers}) exceeds model.layers ({self.layers})",
            )
        _require(0.0 < self.rope_fraction <= 1.0, f"model.rope_fraction {self.rope_fraction!r}: "
                 "allowed: a share of the head dimensions in (0, 1]")
        _require(self.rope_base is None or 1.0 < self.rope_base < 1e12,
                 f"model.rope_base {self.rope_base!r}: allowed: a base θ above 1 (HF rope_theta)")
        if self.activation is not None:
            _require(self.activation in ACTIVATIONS, f"model.activation {shown(self.activation)}: "
                     f"allowed values are {', '.join(ACTIVATIONS)}")
            _require((self.activation in GATED_ACTIVATIONS) == self.glu,
                     f"model.activation {self.activation} and glu={self.glu} disagree (gated: "
                     f"{', '.join(GATED_ACTIVATIONS)})")
            if self.activation == ("swiglu" if self.glu else "gelu"):
                # the default spelled out is the default: one geometry, one value
                object.__setattr__(self, "activation", None)
        _require(not (self.gated_attention and self.attention_output_gate),
                 "model.gated_attention (per head) and model.attention_output_gate "
                 "(elementwise) are two forms of one gate: choose one")
        _require(not (self.attention_output_gate and self.attention is AttentionKind.MLA),
                 "model.attention_output_gate with MLA attention is not supported")
        self._check_window()
        if self.hybrid_pattern is not None:
            self._check_hybrid()
        else:
            _require(self.moe is None or self.moe_layer_count > 0,
                     f"model.moe gives no block an MoE FFN (moe.dense_layers "
                     f"{self.moe.dense_layers if self.moe else 0} of {self.layers} layers): "
                     "drop the moe block for a dense model, or lower moe.dense_layers")
            _require(self.mamba is None,
                     "model.mamba needs model.hybrid_pattern (which layers are Mamba layers)")
            _require(self.gdn is None, "model.gdn needs model.hybrid_pattern (which layers "
                     "are gated DeltaNet layers)")
            _require(self.mtp_pattern is None, "model.mtp_pattern needs model.hybrid_pattern "
                     "(a transformer's MTP module is one block like its last)")

    def _check_window(self) -> None:
        if self.sliding_window is None:
            _require(self.full_attention_every is None, "model.full_attention_every needs "
                     "model.sliding_window (the window its other layers attend)")
            return
        seq = LIMITS["seq_len"]
        _require(isinstance(self.sliding_window, int) and 1 <= self.sliding_window <= seq.high,
                 f"model.sliding_window {self.sliding_window!r}: allowed: an integer in "
                 f"{seq.describe()} (keys a window layer's query attends)")
        layers = LIMITS["layers"]
        _require(self.full_attention_every is None
                 or 2 <= self.full_attention_every <= layers.high,
                 f"model.full_attention_every {self.full_attention_every!r}: allowed: an "
                 f"integer in 2..{int(layers.high)} (every N-th layer full; above the layers, "
                 "none), or null (every layer windowed)")
        _require(self.hybrid_pattern is None and self.attention is not AttentionKind.MLA,
                 "model.sliding_window is supported for transformer attention (MHA/GQA) only")

    @property
    def window_layer_count(self) -> int:
        """Attention layers with a sliding window (:attr:`sliding_window`); 0 without one."""
        if self.sliding_window is None:
            return 0
        every = self.full_attention_every
        return self.layers - (self.layers // every if every else 0)

    def _check_hybrid(self) -> None:
        pattern = self.hybrid_pattern
        assert pattern is not None
        allowed = "".join(symbol.value for symbol in HybridLayer)
        unknown = sorted(set(pattern) - set(allowed))
        _require(not unknown, f"model.hybrid_pattern: unknown layer symbol(s) "
                 f"{', '.join(repr(c) for c in unknown)}; allowed: 'M' (Mamba), 'G' (gated "
                 "DeltaNet), '*' (attention), '-' (MLP), 'E' (MoE), one per layer (leave out "
                 "Megatron's pipeline '|' separators: the layout's pp and vpp cut the "
                 "pattern; state an MTP depth's '/' pattern as model.mtp_pattern)")
        _require(len(pattern) == self.layers, f"model.hybrid_pattern has {len(pattern)} "
                 f"layers but model.layers is {self.layers}")
        has = {symbol: symbol.value in pattern for symbol in HybridLayer}
        _require(has[HybridLayer.MAMBA] == (self.mamba is not None),
                 "model.mamba is required with 'M' layers in model.hybrid_pattern"
                 if has[HybridLayer.MAMBA] else
                 "model.mamba is given but model.hybrid_pattern has no 'M' layer")
        _require(has[HybridLayer.GDN] == (self.gdn is not None),
                 "model.gdn is required with 'G' layers in model.hybrid_pattern"
                 if has[HybridLayer.GDN] else
                 "model.gdn is given but model.hybrid_pattern has no 'G' layer")
        _require(has[HybridLayer.MOE] == (self.moe is not None),
                 "model.moe is required with 'E' layers in model.hybrid_pattern"
                 if has[HybridLayer.MOE] else
                 "model.moe is given but model.hybrid_pattern has no 'E' layer")
        if self.moe is not None:
            _require(self.moe.dense_layers == 0 and self.moe.moe_every == 1,
                     "moe.dense_layers and moe.moe_every do not apply to a hybrid model: "
                     "its pattern places the MoE ('E') layers")
        _require(self.attention is not AttentionKind.MLA,
                 "model.hybrid_pattern with MLA attention is not supported (only MHA/GQA "
                 "attention layers)")
        self._check_mtp_pattern(allowed)

    def _check_mtp_pattern(self, allowed: str) -> None:
        """A hybrid model's MTP depth (:attr:`mtp_pattern`): stated exactly when it has MTP
        modules, in the hybrid alphabet, each kind's mixer configured."""
        pattern = self.mtp_pattern
        if not self.mtp_layers:
            _require(pattern is None, "model.mtp_pattern needs model.mtp_layers > 0 (the MTP "
                     "depths, each one copy of the pattern)")
            return
        _require(pattern is not None, "model.mtp_layers with a hybrid pattern needs "
                 "model.mtp_pattern, the layers of one MTP depth (Megatron-Core "
                 "hybrid_layer_pattern '<main>/<mtp>/...', e.g. '*E' for one attention and one "
                 "MoE layer)")
        assert pattern is not None
        unknown = sorted(set(pattern) - set(allowed))
        _require(bool(pattern) and not unknown, f"model.mtp_pattern {shown(pattern)}: allowed: "
                 "one or more of 'M' (Mamba), 'G' (gated DeltaNet), '*' (attention), '-' "
                 "(MLP), 'E' (MoE), one per layer of one MTP depth")
        for symbol, config, name in ((HybridLayer.MAMBA, self.mamba, "mamba"),
                                     (HybridLayer.GDN, self.gdn, "gdn"),
                                     (HybridLayer.MOE, self.moe, "moe")):
            _require(symbol.value not in pattern or config is not None,
                     f"model.mtp_pattern has '{symbol.value}' layers but model.{name} is not "
                     "given")

    @property
    def mtp_depth_layer_counts(self) -> dict[HybridLayer, int]:
        """Layers of each kind in one MTP depth of a hybrid model (:attr:`mtp_pattern`);
        zero for a transformer, whose MTP blocks :attr:`mtp_layers` counts."""
        pattern = self.mtp_pattern or ""
        return {symbol: pattern.count(symbol.value) for symbol in HybridLayer}

    @property
    def mtp_layer_counts(self) -> dict[HybridLayer, int]:
        """Layers of each kind in all MTP depths of a hybrid model
        (:attr:`mtp_depth_layer_counts` times :attr:`mtp_layers`)."""
        return {symbol: self.mtp_layers * count
                for symbol, count in self.mtp_depth_layer_counts.items()}

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def linear_biases(self) -> bool:
        """Biases on the attention-output or expert linears: what Megatron-Core's one
        add_bias_linear switch turns on (its QKV bias has a switch of its own)."""
        return self.output_bias or (self.moe is not None and self.moe.expert_bias)

    @property
    def activation_name(self) -> str:
        """The FFN activation: the stated one, else SwiGLU when gated and GELU when not."""
        return self.activation or ("swiglu" if self.glu else "gelu")

    @property
    def is_hybrid(self) -> bool:
        """A hybrid model: layers from a pattern rather than uniform transformer blocks."""
        return self.hybrid_pattern is not None

    @property
    def hybrid_shares(self) -> dict[HybridLayer, float]:
        """Each layer kind's share of a hybrid model's layers (zero for a transformer): the
        weights of its mean layer."""
        return {symbol: self.hybrid_count(symbol) / self.layers for symbol in HybridLayer}

    def hybrid_count(self, symbol: HybridLayer) -> int:
        """Layers of one kind in the hybrid pattern (zero for a transformer)."""
        return self.hybrid_pattern.count(symbol.value) if self.hybrid_pattern else 0

    @property
    def moe_layer_count(self) -> int:
        """Blocks that carry an MoE FFN (Sec. 3.1: all but the dense prefix, every n-th); a
        hybrid model's 'E' layers."""
        if self.hybrid_pattern is not None:
            return self.hybrid_count(HybridLayer.MOE)
        return moe_layer_count(self.layers, self.moe) if self.moe else 0

    @property
    def dense_layer_count(self) -> int:
        """Blocks with a dense FFN; a hybrid model's MLP ('-') layers."""
        if self.hybrid_pattern is not None:
            return self.hybrid_count(HybridLayer.MLP)
        return self.layers - self.moe_layer_count

    @property
    def attention_layer_count(self) -> int:
        """Layers with attention: every block of a transformer, a hybrid model's '*' layers."""
        if self.hybrid_pattern is not None:
            return self.hybrid_count(HybridLayer.ATTENTION)
        return self.layers

    @property
    def mamba_layer_count(self) -> int:
        return self.hybrid_count(HybridLayer.MAMBA)

    @property
    def gdn_layer_count(self) -> int:
        return self.hybrid_count(HybridLayer.GDN)

    def is_moe_layer(self, index: int) -> bool:
        """Whether block ``index`` (0-based) is an MoE block."""
        if self.hybrid_pattern is not None:
            return self.hybrid_pattern[index] == HybridLayer.MOE.value
        if self.moe is None or index < self.moe.dense_layers:
            return False
        return (index - self.moe.dense_layers) % self.moe.moe_every == 0

    @property
    def split_factor(self) -> float:
        """G = d_ff / d_expert (Eq. 8); 1.0 for a dense model."""
        return self.ffn / self.moe.expert_ffn if self.moe else 1.0


def moe_layer_count(layers: int, moe: MoEConfig) -> int:
    """Number of MoE blocks: ceil((L - dense prefix) / moe_every)."""
    remaining = max(0, layers - moe.dense_layers)
    return -(-remaining // moe.moe_every)
