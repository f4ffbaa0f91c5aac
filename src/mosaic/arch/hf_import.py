"""Import a HuggingFace ``config.json`` into a :class:`Geometry`.

Supported ``model_type`` values and the HF transformers configuration classes whose field
names (and defaults) they follow:

- ``llama``, ``mistral``, ``qwen2``, ``qwen3`` (dense): ``LlamaConfig``, ``Qwen2Config``...
- ``mixtral``: ``MixtralConfig`` (``num_local_experts``, ``num_experts_per_tok``).
- ``qwen2_moe``, ``qwen3_moe``: ``Qwen2MoeConfig``/``Qwen3MoeConfig`` (``num_experts``,
  ``moe_intermediate_size``, ``shared_expert_intermediate_size``, ``decoder_sparse_step``,
  ``mlp_only_layers``).
- ``deepseek_v2``, ``deepseek_v3``: ``DeepseekV3Config`` (MLA ranks, ``n_routed_experts``,
  ``n_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``,
  ``num_nextn_predict_layers``).
- ``gpt_oss``: ``GptOssConfig`` (biases on attention and experts, attention sinks).
- ``olmoe``: ``OlmoeConfig`` (OLMoE: ``num_experts``, q/k RMSNorms across the whole
  projection).
- ``granitemoe``: ``GraniteMoeConfig`` (Granite 3 MoE: Mixtral's blocks with scalar
  multipliers, which carry no weights).
- ``ernie4_5_moe``: ``Ernie4_5_MoeConfig`` (ERNIE 4.5 MoE: ``moe_num_experts``, ``moe_k``,
  shared experts, MoE blocks from ``moe_layer_start_index`` every ``moe_layer_interval``-th).
- ``minimax_m2``: ``MiniMaxM2Config`` (MiniMax-M2: projection-wide q/k norms, a sigmoid
  router with a correction bias, ``rotary_dim`` of each head rotating).
- ``dots1``: ``Dots1Config`` (dots.llm1: Qwen 3's attention with per-head q/k norms on
  DeepSeek-V3's blocks: ``first_k_dense_replace``, ``n_routed_experts``,
  ``n_shared_experts``, the sigmoid router with its correction bias).
- ``hunyuan_v1_moe``: ``HunYuanMoEV1Config`` (Hunyuan-A13B: every block MoE, ``num_experts``
  routed experts and one shared MLP, all of ``intermediate_size``, ``moe_topk``; per-head q/k
  norms).
- ``nemotron_h``: ``NemotronHConfig`` (hybrid Mamba-2/attention/MLP/MoE layers from
  ``hybrid_override_pattern``; ``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``,
  ``n_groups``, ``conv_kernel``, ``chunk_size``; squared-ReLU FFNs, ``mlp_hidden_act``
  ``relu2``): Nemotron-H and Nemotron 3 Nano (the LatentMoE of ``moe_latent_size``, Nemotron 3
  Super and Ultra, is refused).
- ``qwen3_next``: ``Qwen3NextConfig`` (gated DeltaNet layers where ``layer_types`` says
  ``linear_attention``, else every ``full_attention_interval``-th layer is full attention;
  ``linear_num_key_heads``, ``linear_num_value_heads``, ``linear_key_head_dim``,
  ``linear_value_head_dim``, ``linear_conv_kernel_dim``; gated attention with an elementwise
  output gate, q/k norms; Qwen-MoE experts with a gated shared expert). Each decoder layer
  becomes a mixer layer (``G`` or ``*``) and an FFN layer (``E`` or ``-``). The MTP module
  (``mtp_num_hidden_layers``) is not part of the HF model and is left out.
- ``bailing_moe_v2`` (and ``bailing_moe`` where ``architectures`` names
  ``BailingMoeV2ForCausalLM``, as the released Ling 2.0 and Ring 2.0 configs do):
  ``BailingMoeV2Config`` of the checkpoints' remote code (Ling-mini/flash-2.0, Ling-1T): a
  fused q/k/v projection, per-head q/k norms, DeepSeek-V3's blocks (``first_k_dense_replace``
  dense ones), a sigmoid router over ``n_group`` groups, ``num_nextn_predict_layers`` MTP
  layers after the decoder. Ling 1.x (``BailingMoeForCausalLM``) is refused.
- ``dbrx``: ``DbrxConfig`` (DBRX: its own field names, attention and FFN fields nested in
  ``attn_config`` and ``ffn_config``; bias-free LayerNorms, see :func:`_dbrx`).
- ``granitemoehybrid``: ``GraniteMoeHybridConfig`` (Granite 4.0-H: each layer a Mamba-2 or an
  attention mixer, per ``layer_types``, then Granite's MoE with a shared MLP, or the shared
  MLP alone where ``num_local_experts`` is 0; ``mamba_n_heads``, ``mamba_d_head``,
  ``mamba_n_groups``, ``mamba_d_state``, ``mamba_d_conv``, ``mamba_expand``).

All of these use RMSNorm, SwiGLU experts/FFNs (Nemotron-H: squared ReLU) and no FFN biases
unless stated. Things
that do not change the parameter count (RoPE scaling, dtypes) are ignored; a sliding window
is read where an N-th-layer rule states it (GPT-OSS ``layer_types``, Mistral, Mixtral) and
warned of otherwise.
A field left out takes the value transformers derives (``head_dim`` = hidden_size / heads,
``num_key_value_heads`` = heads); where transformers' config class fills in a constant of its
own instead (:data:`CLASS_CONSTANT_ATTENTION_FIELDS`: gpt_oss, qwen3, qwen3_moe, llama4_text,
glm4_moe, minimax_m2, ernie4_5_moe, phimoe, dots1), the config must state the field.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from mosaic.arch.geometry import (
    AttentionKind,
    GatedDeltaNetConfig,
    Geometry,
    MambaConfig,
    MLAConfig,
    MoEConfig,
    NormKind,
    QKNormSpan,
    RouterConfig,
)
from mosaic.arch.hf_fields import ConfigFields, ReadTracker, unread_fields
from mosaic.errors import MosaicInputError, shown

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32",
             "gpt_oss", "glm4_moe", "llama4", "llama4_text", "olmoe", "granitemoe",
             "minimax_m2", "ernie4_5_moe", "phimoe", "dots1", "hunyuan_v1_moe",
             "bailing_moe_v2", "dbrx")
HYBRID_TYPES = ("nemotron_h", "qwen3_next", "granitemoehybrid")
SUPPORTED_TYPES = DENSE_TYPES + MOE_TYPES + HYBRID_TYPES

# The transformers model class each supported family's config names in ``architectures``:
# a config whose model_type is none of ours but whose class is (Kimi K2's ``kimi_k2`` names
# DeepseekV3ForCausalLM, moonshotai/Kimi-K2-Instruct config.json) is read as that family.
ARCHITECTURE_TYPES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss",
    "Glm4MoeForCausalLM": "glm4_moe", "Llama4ForConditionalGeneration": "llama4",
    "Llama4ForCausalLM": "llama4_text", "NemotronHForCausalLM": "nemotron_h",
    "Qwen3NextForCausalLM": "qwen3_next", "OlmoeForCausalLM": "olmoe",
    "GraniteMoeForCausalLM": "granitemoe", "MiniMaxM2ForCausalLM": "minimax_m2",
    "Ernie4_5_MoeForCausalLM": "ernie4_5_moe", "PhimoeForCausalLM": "phimoe",
    # microsoft/Phi-3.5-MoE-instruct config.json names its remote-code class so
    "PhiMoEForCausalLM": "phimoe",
    "Dots1ForCausalLM": "dots1", "HunYuanMoEV1ForCausalLM": "hunyuan_v1_moe",
    "BailingMoeV2ForCausalLM": "bailing_moe_v2",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "DbrxForCausalLM": "dbrx",
}

# inclusionAI's remote code names both Ling generations' model_type ``bailing_moe``: Ling 1.x
# (Ling-lite, Ling-plus) through ``BailingMoeForCausalLM``, Ling 2.0 and Ring 2.0
# (huggingface.co/inclusionAI/Ling-mini-2.0 config.json) through ``BailingMoeV2ForCausalLM``
BAILING_V2_CLASS = "BailingMoeV2ForCausalLM"

# The families whose transformers attention takes a sliding window (``_window``); another
# family's ``sliding_window`` is left unread and so named in the unread-fields warning
WINDOW_TYPES = (*DENSE_TYPES, "mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "phimoe",
                "dots1")

# DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp config.json: index_n_heads,
# index_head_dim, index_topk): mosaic has no geometry for it
DSA_INDEXER_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")


# Each family's router as its transformers modeling code runs it (transformers 5.x
# models/<type>/modeling_<type>.py): score function, balancing, whether the K chosen weights
# are renormalised (a bool, or the config field with its class default) and the routed
# output's scale (1.0, or the config field with its class default).
# - Mixtral, gpt-oss, Granite MoE: softmax weights renormalised over the top-k
#   (MixtralSparseMoeBlock divides by their sum; GptOssTopKRouter and
#   GraniteMoeTopKGating, transformers' JetMoeTopKGating, take the softmax of the top-k
#   logits), an auxiliary load-balancing loss (router_aux_loss_coef).
# - Qwen2/3-MoE, Qwen3-Next, OLMoE: softmax, renormalised when norm_topk_prob (class
#   defaults False, False, True, False), auxiliary loss.
# - DeepSeek-V2: softmax, never renormalised (DeepseekV2Moe ignores norm_topk_prob), scaled by
#   routed_scaling_factor (default 1.0), auxiliary balance losses (arXiv:2405.04434 Sec. 3.3).
# - DeepSeek-V3, Nemotron-H, GLM-4.5, dots.llm1: sigmoid scores with the
#   e_score_correction_bias of loss-free balancing, renormalised when norm_topk_prob (default
#   True; Dots1Config False), scaled by routed_scaling_factor (DeepseekV3Config 2.5,
#   NemotronHConfig, Glm4MoeConfig and Dots1Config 1.0; Glm4MoeTopkRouter and
#   Dots1TopkRouter are DeepseekV3TopkRouter).
# - ERNIE 4.5: softmax scores with e_score_correction_bias (Ernie4_5_MoeStatics) choosing
#   the experts, the chosen scores always renormalised (Ernie4_5_MoeSparseMoeBlock); the
#   bias is updated only where moe_use_aux_free (ERNIE's own configs), read below.
# - Phi-3.5-MoE: SparseMixer (arXiv:2409.12136; transformers models/phimoe ``sparsemixer``)
#   picks two experts one after the other, each weighted by a softmax over the logits that
#   leaves the other out, so the two weights are not renormalised; an auxiliary loss
#   (router_aux_loss_coef). Read as softmax without renormalisation (_phimoe warns).
# - MiniMax-M2: sigmoid scores with e_score_correction_bias choosing the experts, the chosen
#   scores always renormalised, no scale (MiniMaxM2TopKRouter).
# - Hunyuan-A13B: softmax over the experts, the top-k renormalised (HunYuanMoEV1Moe
#   route_tokens_to_experts), an auxiliary loss (the remote code's topkgating l_aux).
# - Llama 4: the sigmoid of each chosen expert's logit, not renormalised (Llama4TextMoe's
#   router scatters the top-k logits and takes their sigmoid), auxiliary loss.
# - Ling 2.0 (BailingMoeV2Gate, the checkpoints' modeling_bailing_moe_v2.py): sigmoid scores
#   plus the expert_bias buffer choose the experts inside the topk_group best of n_group
#   groups; the chosen scores are always renormalised (norm_topk_prob is not read) and
#   scaled by routed_scaling_factor (BailingMoeV2Config 1.0; Ling 2.0's configs 2.5).
# - Granite 4.0-H: Granite 3's GraniteMoeTopKGating (GraniteMoeHybridMoE is
#   GraniteMoeSharedMoE, which is GraniteMoeMoE).
_ROUTERS: dict[str, tuple[str, str, bool | tuple[str, bool], float | tuple[str, float]]] = {
    "mixtral": ("softmax", "aux_loss", True, 1.0),
    "gpt_oss": ("softmax", "aux_loss", True, 1.0),
    "qwen2_moe": ("softmax", "aux_loss", ("norm_topk_prob", False), 1.0),
    "qwen3_moe": ("softmax", "aux_loss", ("norm_topk_prob", False), 1.0),
    "qwen3_next": ("softmax", "aux_loss", ("norm_topk_prob", True), 1.0),
    "deepseek_v2": ("softmax", "aux_loss", False, ("routed_scaling_factor", 1.0)),
    "deepseek_v3": ("sigmoid", "loss_free", ("norm_topk_prob", True),
                    ("routed_scaling_factor", 2.5)),
    "nemotron_h": ("sigmoid", "loss_free", ("norm_topk_prob", True),
                   ("routed_scaling_factor", 1.0)),
    "glm4_moe": ("sigmoid", "loss_free", ("norm_topk_prob", True),
                 ("routed_scaling_factor", 1.0)),
    "llama4_text": ("sigmoid", "aux_loss", False, 1.0),
    "olmoe": ("softmax", "aux_loss", ("norm_topk_prob", False), 1.0),
    "granitemoe": ("softmax", "aux_loss", True, 1.0),
    "minimax_m2": ("sigmoid", "loss_free", True, 1.0),
    "ernie4_5_moe": ("softmax", "loss_free", True, 1.0),
    "phimoe": ("softmax", "aux_loss", False, 1.0),
    "dots1": ("sigmoid", "loss_free", ("norm_topk_prob", False), ("routed_scaling_factor", 1.0)),
    "hunyuan_v1_moe": ("softmax", "aux_loss", True, 1.0),
    "bailing_moe_v2": ("sigmoid", "loss_free", True, ("routed_scaling_factor", 1.0)),
    "granitemoehybrid": ("softmax", "aux_loss", True, 1.0),
}


# Group-limited routing (n_group groups of consecutive experts, a token's experts inside its
# topk_group best groups), read with each class's defaults: DeepseekV3Config 8 and 4 (its
# router always limits groups; so do BailingMoeV2Config's and BailingMoeV2Gate),
# NemotronHConfig, Glm4MoeConfig and Dots1Config 1 and 1 (no limit),
# DeepSeek-V2 only under topk_method 'group_limited_greedy' (DeepseekV2Config: 'greedy',
# n_group None).
_GROUP_DEFAULTS: dict[str, tuple[int, int] | None] = {
    "deepseek_v3": (8, 4), "nemotron_h": (1, 1), "glm4_moe": (1, 1), "deepseek_v2": None,
    "dots1": (1, 1),
    # BailingMoeV2Config n_group 8, topk_group 4; BailingMoeV2Gate always limits groups
    "bailing_moe_v2": (8, 4)}


# The expert-selection methods of DeepSeek's configs: DeepseekV2Config 'greedy' and
# 'group_limited_greedy', DeepSeek-V3's 'noaux_tc' (its config.json; the bias-corrected
# group-limited top-k). Another value is refused, not read as greedy (a fuzz trial).
_TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def _router_groups(fields: ConfigFields, model_type: str) -> tuple[int | None, int | None]:
    """(groups, top_groups) of a group-limited router; (None, None) where every group is in
    reach (:data:`_GROUP_DEFAULTS`)."""
    if model_type not in _GROUP_DEFAULTS:
        return None, None
    method = fields.config.get("topk_method")
    if method is not None and method not in _TOPK_METHODS:
        raise MosaicInputError(f"{fields.where}: topk_method {shown(method)} is not supported; "
                               f"allowed: {', '.join(_TOPK_METHODS)}")
    defaults = _GROUP_DEFAULTS[model_type]
    if defaults is None:
        if fields.config.get("topk_method", "greedy") != "group_limited_greedy":
            fields.ignored("n_group", "topk_group")
            return None, None
        groups, top_groups = fields.int("n_group"), fields.int("topk_group")
    else:  # a null field takes the class default as an absent one does
        groups = defaults[0] if fields.config.get("n_group") is None else fields.int("n_group")
        top_groups = (defaults[1] if fields.config.get("topk_group") is None
                      else fields.int("topk_group"))
    # every group in reach is no limit; RouterConfig refuses topk_group above n_group
    return (None, None) if top_groups == groups else (groups, top_groups)


def _router(fields: ConfigFields, model_type: str) -> RouterConfig:
    """The router of ``model_type`` (:data:`_ROUTERS`), its config's fields read."""
    score, balancing, normalize, scaling = _ROUTERS[model_type]
    # DeepSeek's original configs state it, and Megatron-Bridge maps it to the score function
    # (models/conversion/model_bridge.py: scoring_func -> moe_router_score_function)
    stated = fields.config.get("scoring_func")
    if stated is not None and model_type in ("deepseek_v2", "deepseek_v3"):
        if stated not in ("softmax", "sigmoid"):
            raise MosaicInputError(f"{fields.where}: scoring_func {shown(stated)} is not "
                                   "supported; allowed: softmax, sigmoid")
        score = stated
    if isinstance(normalize, tuple):
        normalize = fields.bool(*normalize)
    else:  # the family's router ignores it (DeepseekV2Moe never renormalises)
        fields.ignored("norm_topk_prob")
    if isinstance(scaling, tuple):
        scaling = fields.positive_float(*scaling)
    groups, top_groups = _router_groups(fields, model_type)
    try:
        return RouterConfig(score=score, balancing=balancing, normalize_top_k=normalize,
                            top_k_scaling=scaling, groups=groups, top_groups=top_groups)
    except MosaicInputError as error:
        raise MosaicInputError(f"{fields.where}: {error} (routed_scaling_factor, n_group, "
                               "topk_group)") from None


def _gated_activation(fields: ConfigFields) -> str:
    """Every supported transformer family uses a gated MLP: SwiGLU for hidden_act silu or
    swish, GeGLU for gelu; refuse an unexpected one."""
    act = fields.config.get("hidden_act", "silu")
    if act not in ("silu", "swish", "gelu", "gelu_pytorch_tanh"):
        raise MosaicInputError(
            f"{fields.where}: hidden_act {shown(act)} is not supported; allowed: silu, swish, gelu")
    if fields.bool("mlp_bias", False):
        raise MosaicInputError(f"{fields.where}: mlp_bias=true is not supported (FFN biases)")
    return "swiglu" if act in ("silu", "swish") else "geglu"


def _qwen_sparse_layers(fields: ConfigFields, layers: int) -> list[int]:
    """The blocks HF Qwen2/3-MoE and Qwen3-Next make sparse: block i when i is not in
    ``mlp_only_layers`` and (i + 1) % decoder_sparse_step == 0."""
    step = fields.int("decoder_sparse_step", 1)
    dense_list = fields.index_list("mlp_only_layers", layers)
    return [i for i in range(layers) if i not in dense_list and (i + 1) % step == 0]


def _moe_prefix(fields: ConfigFields, layers: int) -> tuple[int, int]:
    """(dense prefix, moe_every) from Qwen-MoE ``mlp_only_layers``/``decoder_sparse_step``
    (:func:`_qwen_sparse_layers`)."""
    return _prefix_and_every(_qwen_sparse_layers(fields, layers), layers, fields.where)


QWEN_SPARSE_FIELDS = "mlp_only_layers and decoder_sparse_step"


def _prefix_and_every(sparse: list[int], layers: int, where: str,
                      placed_by: str = QWEN_SPARSE_FIELDS) -> tuple[int, int]:
    """(dense prefix, moe_every) of the sparse blocks (the config fields ``placed_by`` place
    them), refused unless they are a dense prefix followed by every n-th block."""
    if not sparse:
        raise MosaicInputError(f"{where}: no MoE block left by {placed_by} (of {layers} "
                               "blocks)")
    prefix = sparse[0]
    # one MoE block: a dense prefix up to it, and a period that reaches past the last block
    every = sparse[1] - sparse[0] if len(sparse) > 1 else layers - prefix
    expected = list(range(prefix, layers, every))
    if sparse != expected:
        raise MosaicInputError(
            f"{where}: MoE blocks {sparse} are not a dense prefix followed by every "
            "n-th block; mosaic's geometry cannot express this pattern")
    return prefix, every


def _deepseek_prefix(fields: ConfigFields, layers: int) -> tuple[int, int]:
    """DeepSeek-V2/V3 block i is MoE when i >= first_k_dense_replace and i % freq == 0."""
    first = fields.count("first_k_dense_replace", 0)
    freq = fields.int("moe_layer_freq", 1)
    sparse = [i for i in range(first, layers) if i % freq == 0]
    if not sparse:
        raise MosaicInputError(f"{fields.where}: no MoE block left by first_k_dense_replace")
    return sparse[0], freq  # the multiples of freq from the first one: prefix + every n-th


# Attention fields whose transformers config class fills in a constant of its own when a
# config.json leaves them out, not a value derived from the other fields (head_dim =
# hidden_size / heads, num_key_value_heads = heads): GptOssConfig head_dim 64 and
# num_key_value_heads 8, Qwen3Config 128 and 32, Qwen3MoeConfig num_key_value_heads 4
# (src/transformers/models/{gpt_oss,qwen3,qwen3_moe}/configuration_*.py @ 02b8f42b /
# 008e5743; llama4 and glm4_moe below). Such a config must state them: the class constants
# describe one model size.
CLASS_CONSTANT_ATTENTION_FIELDS = {
    "gpt_oss": ("head_dim", "num_key_value_heads"),
    "qwen3": ("head_dim", "num_key_value_heads"),
    "qwen3_moe": ("num_key_value_heads",),
    # Llama4TextConfig head_dim 128 and num_key_value_heads 8, Glm4MoeConfig
    # num_key_value_heads 8 (transformers models/llama4, models/glm4_moe configuration_*.py)
    "llama4_text": ("head_dim", "num_key_value_heads"),
    "glm4_moe": ("num_key_value_heads",),
    # MiniMaxM2Config head_dim 128 and num_key_value_heads 8 (models/minimax_m2)
    "minimax_m2": ("head_dim", "num_key_value_heads"),
    # Ernie4_5_MoeConfig num_key_value_heads 4 (models/ernie4_5_moe)
    "ernie4_5_moe": ("num_key_value_heads",),
    # PhimoeConfig num_key_value_heads 8 (models/phimoe/configuration_phimoe.py)
    "phimoe": ("num_key_value_heads",),
    # Dots1Config num_key_value_heads 32 (models/dots1/configuration_dots1.py: __post_init__
    # derives it from the heads only when stated null)
    "dots1": ("num_key_value_heads",),
    # BailingMoeV2Config head_dim 128 and num_key_value_heads 4 (the checkpoints'
    # configuration_bailing_moe_v2.py, e.g. huggingface.co/inclusionAI/Ling-flash-base-2.0)
    "bailing_moe_v2": ("head_dim", "num_key_value_heads"),
}


class SlidingWindowIgnoredWarning(UserWarning):
    """A config's sliding-window attention that mosaic's geometry cannot hold."""


class IgnoredFieldWarning(UserWarning):
    """A config field the transformers model class itself ignores, ignored here too."""


class UnmodelledFieldWarning(UserWarning):
    """A config field or part of the model that mosaic's geometry leaves out (fields never
    read, a vision tower, a sparse-attention indexer, chunked attention)."""


class ModelTypeReadAsWarning(UserWarning):
    """A config whose model_type is not a supported family, read as the family its
    ``architectures`` class belongs to."""


def _window(fields: ConfigFields, model_type: str, layers: int) -> dict[str, Any]:
    """The config's sliding window as geometry fields (``sliding_window``,
    ``full_attention_every``), from ``sliding_window`` and the layers' kinds: ``layer_types``
    where given, else as transformers derives them (GptOssConfig: every other layer from the
    first; Mistral and Mixtral: every layer; Qwen with ``use_sliding_window``: the layers from
    ``max_window_layers`` on; Llama takes no window). A pattern no N-th-layer rule states is
    left out with a warning: those layers are then costed and exported as full attention."""
    window = fields.config.get("sliding_window")
    fields.ignored("layer_types")  # all full attention where no window is set
    qwen = model_type.startswith("qwen")
    if window is None or model_type == "llama" or (
            qwen and not fields.config.get("use_sliding_window", False)):
        return {}
    types = fields.config.get("layer_types")
    if types is None:
        if model_type == "gpt_oss":
            types = ["sliding_attention" if (i + 1) % 2 else "full_attention"
                     for i in range(layers)]
        elif qwen or model_type == "dots1":
            # Dots1Config.__post_init__: the layers from max_window_layers (class default 62)
            # on take the window, with no use_sliding_window switch
            start = fields.count("max_window_layers", 62 if model_type == "dots1" else layers)
            types = ["sliding_attention" if i >= start else "full_attention"
                     for i in range(layers)]
        else:
            types = ["sliding_attention"] * layers
    if not isinstance(types, list) or len(types) != layers:
        raise MosaicInputError(f"{fields.where}: layer_types must list one kind per layer "
                               f"({layers}), got {types!r:.80}")
    if "sliding_attention" not in types:
        return {}  # a window no layer uses
    full = [kind != "sliding_attention" for kind in types]
    if not any(full):
        return {"sliding_window": fields.int("sliding_window")}
    every = next((n for n in range(2, layers + 1)
                  if full == [(i + 1) % n == 0 for i in range(layers)]), None)
    if every is not None:
        return {"sliding_window": fields.int("sliding_window"), "full_attention_every": every}
    warnings.warn(f"{fields.where}: sliding_window {window} on layers no N-th-layer rule "
                  "describes: those layers are costed and exported as full causal attention "
                  "(docs/evidence/gpt_oss_attention.md)", SlidingWindowIgnoredWarning,
                  stacklevel=3)
    return {}


def _require_class_constant_fields(fields: ConfigFields, model_type: str) -> None:
    """Refuse a config that leaves out a field its transformers class sets to a constant."""
    missing = [name for name in CLASS_CONSTANT_ATTENTION_FIELDS.get(model_type, ())
               if fields.config.get(name) is None]
    if missing:
        raise MosaicInputError(
            f"{fields.where}: {', '.join(missing)} not given: for a {model_type} config "
            "transformers fills in its config class's constant, not a value derived from "
            "the other fields; state it (the model card's config.json has it)")


def _attention(fields: ConfigFields, d_model: int, head_dim_default: int | None = None
               ) -> dict[str, Any]:
    """Heads, KV heads and head width; an absent head_dim is ``head_dim_default`` where the
    config class has a constant of its own, else hidden_size / heads."""
    heads = fields.int("num_attention_heads")
    kv_heads = fields.int("num_key_value_heads", heads)
    if head_dim_default is None and fields.config.get("head_dim") is None and d_model % heads:
        raise MosaicInputError(
            f"{fields.where}: num_attention_heads ({heads}) must divide hidden_size "
            f"({d_model}) when head_dim is not given")
    head_dim = fields.int("head_dim", head_dim_default or d_model // heads)
    return {
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "attention": AttentionKind.MHA if kv_heads == heads else AttentionKind.GQA,
    }


def _mla(fields: ConfigFields) -> dict[str, Any]:
    heads = fields.int("num_attention_heads")
    fields.ignored("num_key_value_heads")  # MLA has as many key heads as queries
    mla = MLAConfig(
        kv_lora_rank=fields.int("kv_lora_rank"),
        qk_nope_head_dim=fields.int("qk_nope_head_dim"),
        qk_rope_head_dim=fields.int("qk_rope_head_dim"),
        v_head_dim=fields.int("v_head_dim"),
        q_lora_rank=fields.optional_int("q_lora_rank"),
    )
    # DeepseekV2Config/DeepseekV3Config set head_dim = qk_rope_head_dim, the rotary width
    # (transformers models/deepseek_v3/configuration_deepseek_v3.py), and transformers >= 5
    # writes it into saved configs: no shape of its own. Another value is said, not used.
    stated = fields.config.get("head_dim")
    if stated is not None and stated != mla.qk_rope_head_dim:
        warnings.warn(f"{fields.where}: head_dim {shown(stated)} is not qk_rope_head_dim "
                      f"({mla.qk_rope_head_dim}), the value DeepSeek's config classes derive; "
                      "MLA is built from qk_nope_head_dim, qk_rope_head_dim and v_head_dim",
                      UnmodelledFieldWarning, stacklevel=4)
    return {"heads": heads, "kv_heads": heads, "head_dim": mla.v_head_dim,
            "attention": AttentionKind.MLA, "mla": mla}


def geometry_from_hf_config(config: Mapping[str, Any], where: str = "config.json") -> Geometry:
    """Build the geometry of a HuggingFace model config (see the module docstring).

    Warns (:class:`UnmodelledFieldWarning`) of every field it never read that may change
    the model's shape, and of the parts of a model it leaves out."""
    if not isinstance(config, Mapping):
        raise MosaicInputError(f"{where}: expected a JSON object")
    model_type = _supported_type(config, where)
    if model_type == "llama4":  # the text model of the multimodal config
        config, where = _llama4_text_config(config, where), f"{where}: text_config"
        model_type = "llama4_text"
    tracker = ReadTracker(config)
    tracker.read.add("model_type")
    try:
        geometry = _geometry_of_type(ConfigFields(tracker, where), model_type)
    except MosaicInputError as error:  # the geometry's own rules: name the file
        text = str(error)
        if text.startswith(f"{where}:"):
            raise
        raise MosaicInputError(f"{where}: {text} (in mosaic's field names)"
                               ) from None
    unread = unread_fields(tracker)
    if unread:
        warnings.warn(f"{where}: fields mosaic does not read: {', '.join(unread)}; if one "
                      "changes the model's shape or work (extra projections, an MTP module, a "
                      "sparse or chunked attention), the counts and costs leave it out",
                      UnmodelledFieldWarning, stacklevel=2)
    return geometry


def _supported_type(config: Mapping[str, Any], where: str) -> str:
    """The config's model_type, or the supported family its ``architectures`` class names
    (:data:`ARCHITECTURE_TYPES`, warned of); a clear error otherwise."""
    model_type = config.get("model_type")
    if model_type is None:
        raise MosaicInputError(f"{where}: no model_type field; a HuggingFace config.json names "
                               f"its architecture there, one of {', '.join(SUPPORTED_TYPES)}")
    if model_type in SUPPORTED_TYPES:
        return model_type
    classes = config.get("architectures")
    if model_type == "bailing_moe":
        if isinstance(classes, list) and BAILING_V2_CLASS in classes:
            return "bailing_moe_v2"  # Ling 2.0's own configs: not relabelled, not warned of
        raise MosaicInputError(
            f"{where}: model_type 'bailing_moe' with architectures {classes!r:.60} (Ling 1.x, "
            f"BailingMoeForCausalLM) is not supported: only Ling 2.0's {BAILING_V2_CLASS} "
            "layout is read (Ling 1.x's modeling code was not checked against this import)")
    named = [ARCHITECTURE_TYPES[c] for c in classes if isinstance(c, str)
             and c in ARCHITECTURE_TYPES] if isinstance(classes, list) else []
    if named:
        warnings.warn(f"{where}: model_type {shown(model_type)} is read as {named[0]} (its "
                      f"architectures field names {classes[0] if len(classes) == 1 else classes}"
                      f"); a field it leaves out takes {named[0]}'s default",
                      ModelTypeReadAsWarning, stacklevel=3)
        return named[0]
    raise MosaicInputError(
        f"{where}: model_type {shown(model_type)} is not supported; allowed: "
        f"{', '.join(SUPPORTED_TYPES)} (or a config whose architectures field names one of "
        "their transformers classes)")


def _llama4_text_config(config: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """The ``text_config`` of a Llama 4 (Llama4ForConditionalGeneration) config; its vision
    encoder and projector are left out, with a warning."""
    text = config.get("text_config")
    if not isinstance(text, Mapping):  # a text_config [1] was said to be missing
        found = "missing" if text is None else f"a {type(text).__name__}: {text!r:.40}"
        raise MosaicInputError(f"{where}: a llama4 config holds its language model in "
                               f"text_config (a JSON object); here it is {found}")
    if config.get("vision_config") is not None:
        warnings.warn(f"{where}: vision_config is left out: mosaic counts and costs the text "
                      "model (text_config), not the vision encoder and its projector",
                      UnmodelledFieldWarning, stacklevel=3)
    return text


def _geometry_of_type(fields: ConfigFields, model_type: str) -> Geometry:
    """The geometry of a supported ``model_type`` from its fields."""
    config, where = fields.config, fields.where
    if model_type == "nemotron_h":
        return _nemotron_h(fields)
    if model_type == "qwen3_next":
        return _qwen3_next(fields)
    if model_type == "granitemoehybrid":
        return _granite_moe_hybrid(fields)
    if model_type == "dbrx":
        return _dbrx(fields)
    _require_class_constant_fields(fields, model_type)
    activation = _gated_activation(fields)
    d_model = fields.int("hidden_size")
    layers = fields.int("num_hidden_layers")
    window = _window(fields, model_type, layers) if model_type in WINDOW_TYPES else {}
    common: dict[str, Any] = {
        "layers": layers,
        "d_model": d_model,
        "vocab": fields.int("vocab_size"),
        "glu": True,
        "activation": activation,
        "norm": NormKind.RMSNORM,
        # HF PretrainedConfig defaults tie_word_embeddings to True, but these families'
        # classes override it to False (LlamaConfig, MixtralConfig, Qwen*Config, ...);
        # Ernie4_5_MoeConfig keeps True (_ernie45_moe reads it again)
        "tied_embeddings": fields.bool("tie_word_embeddings", False),
        # Glm4MoeConfig rotates half of each head by default
        **fields.rope(fraction_default=0.5 if model_type == "glm4_moe" else 1.0),
    }
    attention_bias = fields.bool("attention_bias", False)

    if model_type in DENSE_TYPES:
        return Geometry(
            **common, **_attention(fields, d_model), **window,
            ffn=fields.int("intermediate_size"),
            # Qwen2's q/k/v projections always carry biases (HF Qwen2Attention: bias=True).
            qkv_bias=model_type == "qwen2" or attention_bias,
            output_bias=attention_bias and model_type != "qwen2",
            qk_norm=model_type == "qwen3",
        )

    if model_type == "mixtral":
        width = fields.int("intermediate_size")
        moe = MoEConfig(experts=fields.int("num_local_experts"),
                        top_k=fields.int("num_experts_per_tok"), expert_ffn=width,
                        router=_router(fields, model_type))
        return Geometry(**common, **_attention(fields, d_model), **window, ffn=width, moe=moe)

    if model_type in ("qwen2_moe", "qwen3_moe"):
        qwen2 = model_type == "qwen2_moe"
        dense_layers, every = _moe_prefix(fields, layers)
        # Qwen2MoeConfig defaults the shared expert's width to 5632 and always builds it
        # (with its sigmoid gate); Qwen3MoeConfig has none (transformers 5.x)
        shared_width = fields.count("shared_expert_intermediate_size", 5632 if qwen2 else 0)
        if shared_width and not qwen2:
            # HF Qwen3MoeSparseMoeBlock is the router and the routed experts alone
            warnings.warn(f"{where}: shared_expert_intermediate_size is ignored: transformers' "
                          "Qwen3-MoE has no shared expert (Qwen2-MoE and Qwen3-Next do)",
                          IgnoredFieldWarning, stacklevel=2)
            shared_width = 0
        moe = MoEConfig(
            experts=fields.int("num_experts"),
            top_k=fields.int("num_experts_per_tok"),
            expert_ffn=fields.int("moe_intermediate_size"),
            shared_experts=1 if shared_width else 0,
            shared_expert_ffn=shared_width or None,
            dense_layers=dense_layers,
            moe_every=every,
            shared_expert_gate=bool(shared_width),  # HF Qwen2MoeSparseMoeBlock
            router=_router(fields, model_type),
        )
        return Geometry(
            **common, **_attention(fields, d_model), **window,
            ffn=fields.int("intermediate_size"), moe=moe,
            # Qwen2MoeConfig.qkv_bias (default true) sets the q/k/v biases, o_proj has none
            # (transformers 5.x models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeAttention)
            qkv_bias=fields.bool("qkv_bias", True) if qwen2 else attention_bias,
            output_bias=attention_bias and not qwen2, qk_norm=not qwen2,
        )

    if model_type in ("deepseek_v2", "deepseek_v3", "deepseek_v32"):
        if model_type == "deepseek_v32":
            _warn_dsa_indexer(fields)
            model_type = "deepseek_v3"
        dense_layers, every = _deepseek_prefix(fields, layers)
        moe = _deepseek_style_moe(fields, model_type, dense_layers, every, shared_default=0)
        if attention_bias:
            raise MosaicInputError(f"{where}: attention_bias=true is not supported with MLA")
        return Geometry(**common, **_mla(fields), ffn=fields.int("intermediate_size"),
                        moe=moe, mtp_layers=fields.count("num_nextn_predict_layers", 0))

    if model_type == "glm4_moe":
        return _glm4_moe(fields, common, attention_bias)
    if model_type == "llama4_text":
        return _llama4_text(fields, common, attention_bias)
    if model_type in ("olmoe", "granitemoe"):
        return _olmoe_or_granite(fields, common, attention_bias, model_type)
    if model_type == "minimax_m2":
        return _minimax_m2(fields, common)
    if model_type == "ernie4_5_moe":
        return _ernie45_moe(fields, common)
    if model_type == "phimoe":
        return _phimoe(fields, common, attention_bias, window)
    if model_type == "dots1":
        return _dots1(fields, common, attention_bias, window)
    if model_type == "hunyuan_v1_moe":
        return _hunyuan_v1_moe(fields, common, attention_bias)
    if model_type == "bailing_moe_v2":
        return _bailing_moe_v2(fields, common)

    # gpt_oss: every block is MoE; attention_bias covers Q, K, V and O (HF GptOssAttention),
    # experts carry biases (gate_up_proj_bias, down_proj_bias), the router has a bias.
    width = fields.int("intermediate_size")
    top_k = fields.int("num_experts_per_tok", config.get("experts_per_token"))
    if config.get("experts_per_token") is not None and config["experts_per_token"] != top_k:
        # gpt-oss's released config.json states both (4 and 4); HF reads num_experts_per_tok
        raise MosaicInputError(
            f"{fields.where}: num_experts_per_tok ({top_k}) and experts_per_token "
            f"({shown(config['experts_per_token'])}) disagree; the config states top-k twice")
    moe = MoEConfig(experts=fields.int("num_local_experts"), top_k=top_k, expert_ffn=width,
                    expert_bias=True, router_bias=True, router=_router(fields, "gpt_oss"))
    return Geometry(**common, **_attention(fields, d_model), **window, ffn=width, moe=moe,
                    qkv_bias=attention_bias, output_bias=attention_bias, attention_sinks=True)


def _deepseek_style_moe(fields: ConfigFields, model_type: str, dense_layers: int, every: int,
                        shared_default: int) -> MoEConfig:
    """DeepSeek's MoE block as DeepSeek-V2/V3 and GLM-4.5 configs state it: routed experts
    of ``moe_intermediate_size``, ``n_shared_experts`` shared ones each as wide as a routed
    one (HF DeepseekV3MoE and Glm4MoeMoE: one MLP of moe_intermediate_size times
    n_shared_experts; stated, so exports need not assume it), the family's router."""
    width = fields.int("moe_intermediate_size")
    shared = fields.count("n_shared_experts", shared_default)
    return MoEConfig(experts=fields.int("n_routed_experts"),
                     top_k=fields.int("num_experts_per_tok"), expert_ffn=width,
                     shared_experts=shared, shared_expert_ffn=width if shared else None,
                     dense_layers=dense_layers, moe_every=every,
                     router=_router(fields, model_type))


def _warn_dsa_indexer(fields: ConfigFields) -> None:
    """DeepSeek-V3.2 is DeepSeek-V3 with a lightning indexer that picks ``index_topk`` keys
    per query (DeepSeek Sparse Attention, DeepSeek-V3.2-Exp); mosaic has no geometry for it,
    so say what its counts and costs leave out."""
    stated = ", ".join(f"{name} {value}" for name in DSA_INDEXER_FIELDS
                       if (value := fields.config.get(name)) is not None)
    warnings.warn(
        f"{fields.where}: DeepSeek-V3.2's lightning indexer"
        + (f" ({stated})" if stated else "")
        + " is left out: its weights are not counted and attention is costed as dense "
        "causal attention over every key, more than the sparse attention does on sequences "
        "longer than index_topk", UnmodelledFieldWarning, stacklevel=4)


def _glm4_moe(fields: ConfigFields, common: dict[str, Any], attention_bias: bool) -> Geometry:
    """HF ``Glm4MoeConfig`` (GLM-4.5, 4.6, 4.5-Air; transformers models/glm4_moe): GQA
    attention whose q, k and v carry biases when ``attention_bias`` (o_proj never does),
    per-head q/k RMSNorm when ``use_qk_norm``, the first ``first_k_dense_replace`` blocks
    dense (class default 1) and the rest DeepSeek-V3-style MoE blocks: routed experts of
    ``moe_intermediate_size``, ``n_shared_experts`` shared ones (one MLP of n times that
    width), the sigmoid router with its correction bias. ``num_nextn_predict_layers`` MTP
    layers are counted as DeepSeek-V3's are (transformers leaves them out of its model)."""
    layers = common["layers"]
    dense_layers = fields.count("first_k_dense_replace", 1)
    if dense_layers >= layers:
        raise MosaicInputError(f"{fields.where}: no MoE block left by first_k_dense_replace "
                               f"({dense_layers} of {layers} blocks)")
    moe = _deepseek_style_moe(fields, "glm4_moe", dense_layers, 1, shared_default=1)
    return Geometry(**common, **_attention(fields, common["d_model"]),
                    ffn=fields.int("intermediate_size"), moe=moe, qkv_bias=attention_bias,
                    output_bias=False, qk_norm=fields.bool("use_qk_norm", False),
                    mtp_layers=fields.count("num_nextn_predict_layers", 0))


def _llama4_text(fields: ConfigFields, common: dict[str, Any], attention_bias: bool
                 ) -> Geometry:
    """HF ``Llama4TextConfig`` (Llama 4 Scout and Maverick; transformers models/llama4):
    MoE blocks at ``moe_layers`` (default every ``interleave_moe_layer_step``-th block from
    step - 1), each with ``num_local_experts`` routed experts and one shared expert, all of
    ``intermediate_size``, and a bias-free router; dense blocks of ``intermediate_size_mlp``.
    The q/k norm (``use_qk_norm``) is an L2 norm without weights. Three blocks in four
    (``no_rope_layers``) attend within chunks of ``attention_chunk_size``; mosaic costs them
    as full causal attention, which is the same work for sequences no longer than a chunk."""
    layers, where = common["layers"], fields.where
    step = fields.int("interleave_moe_layer_step", 1)
    if fields.config.get("moe_layers") is not None:  # as stated, an empty list included
        sparse = sorted(set(fields.index_list("moe_layers", layers)))
        placed_by = "moe_layers"
    else:
        sparse, placed_by = list(range(step - 1, layers, step)), "interleave_moe_layer_step"
    dense_layers, every = _prefix_and_every(sparse, layers, where, placed_by)
    width = fields.int("intermediate_size")
    moe = MoEConfig(experts=fields.int("num_local_experts"),
                    top_k=fields.int("num_experts_per_tok"), expert_ffn=width,
                    shared_experts=1, shared_expert_ffn=width, dense_layers=dense_layers,
                    moe_every=every,
                    router=_router(fields, "llama4_text"))
    fields.bool("use_qk_norm", False)  # read: no weights either way
    fields.ignored("no_rope_layers")  # which blocks chunk (said below)
    chunk = fields.optional_int("attention_chunk_size")
    if chunk is not None:
        warnings.warn(f"{where}: attention_chunk_size {chunk}: the chunked attention of the "
                      "RoPE blocks is costed as full causal attention (the same work for "
                      f"sequences of at most {chunk:,} tokens, more beyond)",
                      UnmodelledFieldWarning, stacklevel=4)
    return Geometry(**common, **_attention(fields, common["d_model"]),
                    # Llama4TextConfig's class default, as for an absent head_dim below
                    ffn=fields.int("intermediate_size_mlp", 16384), moe=moe,
                    qkv_bias=attention_bias, output_bias=attention_bias)


def _olmoe_or_granite(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
                      model_type: str) -> Geometry:
    """HF ``OlmoeConfig`` (OLMoE-1B-7B; transformers models/olmoe) and ``GraniteMoeConfig``
    (Granite 3 MoE; models/granitemoe): every block MoE, routed experts of
    ``intermediate_size`` behind a bias-free router, q/k/v/o biases when ``attention_bias``.
    OLMoE's ``num_experts`` experts follow q/k RMSNorms across the whole projection
    (``OlmoeAttention``: q_norm of hidden_size, k_norm of head_dim x kv heads); Granite's
    ``num_local_experts`` follow plain attention, its embedding, residual, attention and
    logit multipliers scale activations and carry no weights."""
    width = fields.int("intermediate_size")
    olmoe = model_type == "olmoe"
    moe = MoEConfig(experts=fields.int("num_experts" if olmoe else "num_local_experts"),
                    top_k=fields.int("num_experts_per_tok"), expert_ffn=width,
                    router=_router(fields, model_type))
    attention = _attention(fields, common["d_model"])
    if olmoe and attention["heads"] * attention["head_dim"] != common["d_model"]:
        raise MosaicInputError(f"{fields.where}: OLMoE's q_norm is hidden_size wide, so "
                               "num_attention_heads x head_dim must equal hidden_size")
    return Geometry(**common, **attention, ffn=width, moe=moe, qkv_bias=attention_bias,
                    output_bias=attention_bias, qk_norm=olmoe,
                    qk_norm_span=QKNormSpan.PROJECTION if olmoe else QKNormSpan.HEAD)


# MiniMax-M2 config.json qk_norm_type -> what its q/k norms span (MiniMaxM2Attention is
# FlexOlmoAttention, i.e. Olmo2Attention: q_norm heads x head_dim, k_norm kv x head_dim wide)
MINIMAX_QK_NORM_SPANS = {"per_layer": QKNormSpan.PROJECTION, "per_head": QKNormSpan.HEAD}


def _require_sigmoid_scores(fields: ConfigFields, family: str, router_class: str) -> None:
    """Refuse a ``scoring_func`` other than sigmoid (the default) for a family whose
    transformers router (``router_class``) takes sigmoid scores only."""
    scoring = fields.config.get("scoring_func", "sigmoid")
    if scoring != "sigmoid":
        raise MosaicInputError(f"{fields.where}: scoring_func {shown(scoring)}: {family}'s router "
                               f"takes sigmoid scores ({router_class}); allowed: sigmoid")


def _minimax_m2(fields: ConfigFields, common: dict[str, Any]) -> Geometry:
    """MiniMax-M2 (transformers models/minimax_m2 ``MiniMaxM2Config`` and modeling): every
    block MoE, ``num_local_experts`` routed experts of ``intermediate_size`` behind a sigmoid
    router with a correction bias, no shared expert, bias-free GQA whose q/k RMSNorms span
    the projection (``MiniMaxM2Attention`` is Olmo 2's, which always builds them).
    The model's own config.json (huggingface.co/MiniMaxAI/MiniMax-M2, for its remote code)
    adds fields transformers' class does not read, read here as that code does:
    ``use_qk_norm`` and ``qk_norm_type`` (per_layer: across the projection), ``rotary_dim``
    (transformers takes the rotating share from ``partial_rotary_factor``; the two must agree
    where both are given), ``attn_type_list`` (1 = full softmax attention on every layer)
    and the MTP modules (``num_mtp_modules``), which the HF model leaves out and so does
    mosaic, with a warning."""
    where = fields.where
    kinds = fields.config.get("attn_type_list")
    if kinds is not None and (not isinstance(kinds, list) or any(k != 1 for k in kinds)):
        raise MosaicInputError(f"{where}: attn_type_list {kinds!r:.60}: only full softmax "
                               "attention on every layer (1) is supported; MiniMax's "
                               "lightning attention (0) has no geometry in mosaic")
    if kinds is not None and len(kinds) != common["layers"]:
        raise MosaicInputError(f"{where}: attn_type_list has {len(kinds)} entries for "
                               f"{common['layers']} layers (num_hidden_layers)")
    _require_sigmoid_scores(fields, "MiniMax-M2", "MiniMaxM2TopKRouter")
    fields.ignored("use_routing_bias", "mlp_intermediate_size")  # a buffer; no dense blocks
    if fields.count("shared_intermediate_size", 0):
        warnings.warn(f"{where}: shared_intermediate_size is ignored: transformers' "
                      "MiniMax-M2 has no shared expert", IgnoredFieldWarning, stacklevel=4)
    span_name = fields.config.get("qk_norm_type", "per_layer")
    if span_name not in MINIMAX_QK_NORM_SPANS:
        raise MosaicInputError(f"{where}: qk_norm_type {shown(span_name)}; allowed: "
                               f"{', '.join(MINIMAX_QK_NORM_SPANS)}")
    modules = fields.count("num_mtp_modules", 0) if fields.bool("use_mtp", False) else 0
    fields.ignored("num_mtp_modules", "mtp_transformer_layers")
    _warn_mtp_left_out(fields, "num_mtp_modules", modules, "MiniMax-M2's")
    attention = _attention(fields, common["d_model"])
    rotary = fields.optional_int("rotary_dim")
    if rotary is not None:
        if rotary > attention["head_dim"]:
            raise MosaicInputError(f"{where}: rotary_dim {rotary} exceeds head_dim "
                                   f"{attention['head_dim']}")
        fraction = rotary / attention["head_dim"]
        stated = fields.rotary_fraction()
        if stated is not None and abs(stated - fraction) > 1e-9:
            raise MosaicInputError(f"{where}: rotary_dim {rotary} rotates {fraction:g} of each "
                                   f"{attention['head_dim']}-wide head, partial_rotary_factor "
                                   f"says {stated:g}: state one, or make them agree")
        common = common | {"rope_fraction": fraction}
    moe = MoEConfig(experts=fields.int("num_local_experts"),
                    top_k=fields.int("num_experts_per_tok"),
                    expert_ffn=fields.int("intermediate_size"),
                    router=_router(fields, "minimax_m2"))
    qk_norm = fields.bool("use_qk_norm", True)
    return Geometry(**common, **attention, ffn=moe.expert_ffn, moe=moe, qk_norm=qk_norm,
                    qk_norm_span=MINIMAX_QK_NORM_SPANS[span_name] if qk_norm
                    else QKNormSpan.HEAD)


# DbrxExpertGLU's activation (transformers models/dbrx/modeling_dbrx.py: ACT2FN[name] of
# ffn_config.ffn_act_fn, gating v1's output) as mosaic's gated FFN
DBRX_ACTIVATIONS = {"silu": "swiglu", "gelu": "geglu"}


def _dbrx(fields: ConfigFields) -> Geometry:
    """``DbrxConfig`` (DBRX; transformers models/dbrx configuration_dbrx.py and
    modeling_dbrx.py): ``n_layers`` blocks of ``d_model``, each a bias-free ``nn.LayerNorm``
    (``norm_1``), attention with one fused bias-free ``Wqkv`` (d -> d + 2 x kv_n_heads x
    head_dim, head_dim = d_model / n_heads) and a bias-free ``out_proj``, a second bias-free
    LayerNorm (``norm_2``), then ``DbrxFFN``: a bias-free router over ``moe_num_experts``
    GLU experts (w1, v1: d -> ffn_hidden_size, w2 back) of which ``moe_top_k`` run; a
    bias-free final LayerNorm (``norm_f``), an untied LM head (``DbrxConfig`` refuses
    ``tie_word_embeddings``). The router (``DbrxRouter``): softmax over every expert, the
    top-k weights divided by their p-norm, p = ``moe_normalize_expert_weights`` (1: they
    sum to 1; null: not renormalised), and ``load_balancing_loss_func`` weighted by
    ``moe_loss_weight``. ``clip_qkv`` clamps the q/k/v activations and ``moe_jitter_eps``
    scales the router's input by noise in training: neither has weights or changes FLOPs.

    mosaic's LayerNorm counts a gain and a bias (:func:`mosaic.arch.counts.params_per_norm`);
    DBRX's have the gain alone, so the counts hold d_model parameters a norm more than the
    checkpoint (2 x n_layers + 1 norms), said in a warning."""
    where = fields.where
    attn, ffn = fields.block("attn_config"), fields.block("ffn_config")
    if fields.bool("tie_word_embeddings", False):
        raise MosaicInputError(f"{where}: tie_word_embeddings=true: DbrxConfig refuses it "
                               "(DBRX's LM head is its own)")
    act = ffn.block("ffn_act_fn").config.get("name", "silu")  # DbrxFFNConfig: silu if absent
    if act not in DBRX_ACTIVATIONS:
        raise MosaicInputError(f"{where}: ffn_config.ffn_act_fn.name {shown(act)} is not "
                               f"supported; allowed: {', '.join(DBRX_ACTIVATIONS)}")
    d_model, heads = fields.int("d_model"), fields.int("n_heads")
    if d_model % heads:
        raise MosaicInputError(f"{where}: n_heads ({heads}) must divide d_model ({d_model}): "
                               "DbrxAttention's head_dim is d_model / n_heads")
    kv_heads = attn.int("kv_n_heads")  # DbrxAttentionConfig's 1 describes no DBRX: state it
    norm_power = ffn.config.get("moe_normalize_expert_weights", 1.0)
    if norm_power not in (None, 1):
        warnings.warn(f"{where}: ffn_config.moe_normalize_expert_weights {shown(norm_power)}: "
                      "the top-k weights divided by their p-norm are read as renormalised to "
                      "sum to 1 (p = 1): the same weights and FLOPs, but exports write a "
                      "sum-to-one router", UnmodelledFieldWarning, stacklevel=4)
    router = RouterConfig(score="softmax", balancing="aux_loss",
                          normalize_top_k=norm_power is not None, top_k_scaling=1.0)
    # training behaviours without weights: dropouts, the q/k/v clamp, router input noise and
    # loss weight, MegaBlocks' uniform_expert_assignment (round-robin expert indices for
    # benchmarks; megablocks/layers/router.py), which DbrxRouter does not read; and the
    # rotary position limit
    fields.ignored("emb_pdrop", "resid_pdrop", "max_seq_len")
    attn.ignored("attn_pdrop", "clip_qkv")
    ffn.ignored("moe_jitter_eps", "moe_loss_weight", "uniform_expert_assignment")
    layers = fields.int("n_layers")
    warnings.warn(f"{where}: DBRX's LayerNorms have no bias (nn.LayerNorm(bias=False)); "
                  f"mosaic's LayerNorm counts one, {2 * layers + 1} norms x {d_model} = "
                  f"{(2 * layers + 1) * d_model:,} parameters more than the checkpoint",
                  UnmodelledFieldWarning, stacklevel=4)
    moe = MoEConfig(experts=ffn.int("moe_num_experts"), top_k=ffn.int("moe_top_k"),
                    expert_ffn=ffn.int("ffn_hidden_size"), router=router)
    return Geometry(layers=layers, d_model=d_model, vocab=fields.int("vocab_size"),
                    glu=True, activation=DBRX_ACTIVATIONS[act], norm=NormKind.LAYERNORM,
                    tied_embeddings=False, **attn.rope(), heads=heads, kv_heads=kv_heads,
                    head_dim=d_model // heads,
                    attention=AttentionKind.MHA if kv_heads == heads else AttentionKind.GQA,
                    ffn=moe.expert_ffn, moe=moe)


def _warn_mtp_left_out(fields: ConfigFields, field: str, count: int, family: str) -> None:
    """Say that ``count`` multi-token-prediction modules a config states (``field``) are left
    out: the HF model has none, so neither the counts nor the costs hold them."""
    if count:
        warnings.warn(f"{fields.where}: {field} {count}: {family} multi-token-prediction "
                      "modules are not part of the HF model and are left out of the counts "
                      "and costs", UnmodelledFieldWarning, stacklevel=5)


ERNIE_SPARSE_FIELDS = "moe_layer_start_index, moe_layer_end_index and moe_layer_interval"


def _ernie45_moe(fields: ConfigFields, common: dict[str, Any]) -> Geometry:
    """HF ``Ernie4_5_MoeConfig`` (ERNIE 4.5 MoE; transformers models/ernie4_5_moe): block i
    is MoE when start <= i <= end and (i + 1) % interval == 0 (``Ernie4_5_MoeDecoderLayer``),
    else a dense MLP of ``intermediate_size``; ``moe_num_experts`` routed experts of
    ``moe_intermediate_size``, ``moe_num_shared_experts`` shared ones (one MLP of n times
    that width), a bias-free router whose correction bias is not trained (not counted);
    embeddings tied unless stated (the class default). ``num_nextn_predict_layers`` MTP
    layers are not part of the HF model and are left out, with a warning."""
    where, layers = fields.where, common["layers"]
    if fields.bool("use_bias", False):
        raise MosaicInputError(f"{where}: use_bias=true is not supported (biases on every "
                               "projection, the experts' and the LM head's included)")
    start = fields.count("moe_layer_start_index", 1)
    end = (layers - 1 if fields.config.get("moe_layer_end_index", -1) in (-1, None)
           else fields.count("moe_layer_end_index"))
    interval = fields.int("moe_layer_interval", 1)
    sparse = [i for i in range(layers) if start <= i <= end and (i + 1) % interval == 0]
    dense_layers, every = _prefix_and_every(sparse, layers, where, ERNIE_SPARSE_FIELDS)
    width = fields.int("moe_intermediate_size")
    shared = fields.count("moe_num_shared_experts", 2)
    router = _router(fields, "ernie4_5_moe")
    if not fields.bool("moe_use_aux_free", True):  # the bias stays at zero
        router = replace(router, balancing="aux_loss")
    fields.ignored("moe_norm_min")  # a floor on the renormalising sum
    moe = MoEConfig(experts=fields.int("moe_num_experts"), top_k=fields.int("moe_k"),
                    expert_ffn=width, shared_experts=shared,
                    shared_expert_ffn=width if shared else None, dense_layers=dense_layers,
                    moe_every=every, router=router)
    _warn_mtp_left_out(fields, "num_nextn_predict_layers",
                       fields.count("num_nextn_predict_layers", 0), "ERNIE 4.5's")
    return Geometry(**(common | {"tied_embeddings": fields.bool("tie_word_embeddings", True)}),
                    **_attention(fields, common["d_model"]),
                    ffn=fields.int("intermediate_size"), moe=moe)


def _phimoe(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
            window: dict[str, Any]) -> Geometry:
    """HF ``PhimoeConfig`` (Phi-3.5-MoE; transformers models/phimoe): Mixtral's block with
    LayerNorms (weight and bias) for every norm, q/k/v/o biases when ``attention_bias``, an
    LM-head bias when ``lm_head_bias`` (``PhimoeForCausalLM``) and the SparseMixer router,
    which always picks two experts (``sparsemixer`` selects one, masks it out and selects a
    second). Phi-3.5-MoE-instruct: 41.9 B parameters, 6.6 B active (its model card)."""
    top_k = fields.int("num_experts_per_tok")
    if top_k != 2:
        raise MosaicInputError(f"{fields.where}: num_experts_per_tok {top_k}: Phi-3.5-MoE's "
                               "SparseMixer router always picks 2 experts (transformers "
                               "models/phimoe sparsemixer); state 2")
    warnings.warn(f"{fields.where}: SparseMixer routing (Phi-3.5-MoE) is read as a softmax "
                  "top-2 router without renormalisation: the same weights and FLOPs, but "
                  "exports write the target's softmax router, not SparseMixer's sampling "
                  "and gradient estimator", UnmodelledFieldWarning, stacklevel=4)
    # the jitter multiplies activations (training noise); the long-RoPE fields set angles
    fields.ignored("input_jitter_noise", "original_max_position_embeddings")
    width = fields.int("intermediate_size")
    moe = MoEConfig(experts=fields.int("num_local_experts"), top_k=top_k, expert_ffn=width,
                    router=_router(fields, "phimoe"))
    return Geometry(**(common | {"norm": NormKind.LAYERNORM}),
                    **_attention(fields, common["d_model"]), **window, ffn=width, moe=moe,
                    qkv_bias=attention_bias, output_bias=attention_bias,
                    lm_head_bias=fields.bool("lm_head_bias", False))


def _dots1(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
           window: dict[str, Any]) -> Geometry:
    """HF ``Dots1Config`` (dots.llm1; transformers models/dots1/modular_dots1.py): Qwen 3's
    attention (per-head q/k RMSNorms, q/k/v/o biases when ``attention_bias``) on
    DeepSeek-V3's blocks (``Dots1DecoderLayer`` is ``DeepseekV3DecoderLayer``: block i is MoE
    when i >= ``first_k_dense_replace``, else a dense MLP of ``intermediate_size``), routed
    experts of ``moe_intermediate_size``, ``n_shared_experts`` shared ones as one MLP of n
    times that width, and DeepSeek-V3's sigmoid router with its correction bias (a buffer)."""
    where, layers = fields.where, common["layers"]
    dense_layers = fields.count("first_k_dense_replace", 0)
    if dense_layers >= layers:
        raise MosaicInputError(f"{where}: no MoE block left by first_k_dense_replace "
                               f"({dense_layers} of {layers} blocks)")
    _require_sigmoid_scores(fields, "dots.llm1", "Dots1TopkRouter")
    # DeepSeek's moe_layer_freq: Dots1Config has none, and its decoder layer places MoE
    # blocks by first_k_dense_replace alone
    freq = fields.config.get("moe_layer_freq")
    if freq not in (None, 1):
        warnings.warn(f"{where}: moe_layer_freq {shown(freq)} is ignored: transformers' dots.llm1 "
                      "makes every block from first_k_dense_replace on MoE",
                      IgnoredFieldWarning, stacklevel=4)
    moe = _deepseek_style_moe(fields, "dots1", dense_layers, 1, shared_default=0)
    return Geometry(**common, **_attention(fields, common["d_model"]), **window,
                    ffn=fields.int("intermediate_size"), moe=moe, qkv_bias=attention_bias,
                    output_bias=attention_bias, qk_norm=True)


def _per_layer_int(fields: ConfigFields, name: str, layers: int, default: int) -> int:
    """A count a config states as one integer or as a per-layer list (Hunyuan's
    ``moe_topk``, ``num_experts``, ``moe_intermediate_size``, ``num_shared_expert``); a list
    must hold one equal value per layer, which mosaic's geometry can hold."""
    value = fields.config.get(name)
    if not isinstance(value, list):
        return fields.int(name, default)
    if len(value) != layers or any(v != value[0] for v in value):
        raise MosaicInputError(f"{fields.where}: {name} must be one value, or one equal value "
                               f"per layer ({layers}); mosaic's geometry holds no per-layer "
                               f"MoE shapes, got {value!r:.80}")
    return ConfigFields({name: value[0]}, fields.where).int(name)


def _hunyuan_v1_moe(fields: ConfigFields, common: dict[str, Any], attention_bias: bool
                    ) -> Geometry:
    """HF ``HunYuanMoEV1Config`` (Hunyuan-A13B; transformers models/hunyuan_v1_moe): Llama's
    attention (q/k/v/o biases when ``attention_bias``) with per-head q/k RMSNorms
    (``query_layernorm``, ``key_layernorm``: always built), and in every block
    ``HunYuanMoEV1Moe``: a bias-free router over ``num_experts`` experts (``MixtralExperts``)
    and one shared MLP, all of ``intermediate_size``, ``moe_topk`` chosen. Tencent's
    config.json states per-layer lists its remote code reads (``moe_intermediate_size``,
    ``num_shared_expert``): read where they agree with what transformers builds, else
    refused, since the two would then count different models."""
    where, layers = fields.where, common["layers"]
    width = fields.int("intermediate_size")
    expert_width = _per_layer_int(fields, "moe_intermediate_size", layers, width)
    shared = _per_layer_int(fields, "num_shared_expert", layers, 1)
    if expert_width != width or shared != 1:
        raise MosaicInputError(
            f"{where}: moe_intermediate_size {expert_width} and num_shared_expert {shared}: "
            f"transformers' HunYuanMoEV1 builds one shared MLP and experts all of "
            f"intermediate_size ({width}); mosaic reads the model transformers builds")
    if fields.bool("use_cla", False):
        raise MosaicInputError(f"{where}: use_cla=true (cross-layer attention: layers share "
                               "key/value projections) is not supported: mosaic's geometry "
                               "gives every layer its own")
    # transformers builds the q/k norms and the shared MLP whatever these say, and drops no
    # tokens (its HunYuanMoEV1Moe has no capacity)
    fields.ignored("use_qk_norm", "use_mixed_mlp_moe", "moe_drop_tokens",
                   "moe_random_routing_dropped_token")
    moe = MoEConfig(experts=_per_layer_int(fields, "num_experts", layers, 1),
                    top_k=_per_layer_int(fields, "moe_topk", layers, 1), expert_ffn=width,
                    shared_experts=1, shared_expert_ffn=width,
                    router=_router(fields, "hunyuan_v1_moe"))
    # Tencent's config.json names the head width attention_head_dim (its remote code)
    return Geometry(**common, **_attention(fields, common["d_model"],
                                           fields.optional_int("attention_head_dim")),
                    ffn=width, moe=moe, qkv_bias=attention_bias, output_bias=attention_bias,
                    qk_norm=True)


def _nemotron_h(fields: ConfigFields) -> Geometry:
    """HF ``NemotronHConfig`` (transformers models/nemotron_h/configuration_nemotron_h.py):
    one layer per ``hybrid_override_pattern`` symbol, Mamba-2 mixers, squared-ReLU MLP and
    expert FFNs without biases, one shared expert of ``moe_shared_expert_intermediate_size``
    when that is non-zero (Nemotron 3 Nano 30B-A3B config.json)."""
    where = fields.where
    act = fields.config.get("mlp_hidden_act", "relu2")
    if act != "relu2":
        raise MosaicInputError(f"{where}: mlp_hidden_act {shown(act)} is not supported; allowed: "
                               "relu2")
    for flag in ("mlp_bias", "use_bias", "mamba_proj_bias", "attention_bias"):
        if fields.bool(flag, False):
            raise MosaicInputError(f"{where}: {flag}=true is not supported (linear biases)")
    # without a shape here: the Mamba-2 mixer is mamba_num_heads x mamba_head_dim wide
    # whatever expand says, the shared expert's width is its own field (transformers'
    # NemotronH builds from these two, not from expand or n_shared_experts)
    fields.ignored("expand", "n_shared_experts", "rope_theta")
    if fields.config.get("moe_latent_size"):
        # NemotronHConfig.moe_latent_size (LatentMoE, Nemotron 3 Super/Ultra): the experts
        # run at the latent width between fc1_latent_proj and fc2_latent_proj
        raise MosaicInputError(
            f"{where}: moe_latent_size={shown(fields.config['moe_latent_size'])} (LatentMoE) "
            "is not supported: its experts work at the latent width behind d->latent and latent->d "
            "projections, which mosaic's MoE geometry cannot hold (counts would be wrong)")
    pattern = fields.config.get("hybrid_override_pattern")
    if pattern is None:
        raise MosaicInputError(f"{where}: missing required field 'hybrid_override_pattern'")
    if not isinstance(pattern, str) or not pattern:
        raise MosaicInputError(f"{where}: hybrid_override_pattern must be a string of layer "
                               f"symbols (M, *, -, E), got {shown(pattern)}")
    d_model = fields.int("hidden_size")
    moe = None
    if "E" in pattern:
        shared_width = fields.count("moe_shared_expert_intermediate_size", 0)
        moe = MoEConfig(experts=fields.int("n_routed_experts"),
                        top_k=fields.int("num_experts_per_tok"),
                        expert_ffn=fields.int("moe_intermediate_size"),
                        shared_experts=1 if shared_width else 0,
                        shared_expert_ffn=shared_width or None,
                        router=_router(fields, "nemotron_h"))
    width = fields.config.get("intermediate_size")
    ffn = fields.int("intermediate_size") if width is not None or "-" in pattern else (
        moe.expert_ffn if moe else d_model)
    heads = fields.int("mamba_num_heads") if "M" in pattern else 0
    head_dim, state_dim = fields.int("mamba_head_dim", 64), fields.int("ssm_state_size", 128)
    groups, conv_kernel = fields.int("n_groups", 8), fields.int("conv_kernel", 4)
    chunk_size, conv_bias = fields.int("chunk_size", 128), fields.bool("use_conv_bias", True)
    common = {"layers": fields.int("num_hidden_layers"), "d_model": d_model,
              "vocab": fields.int("vocab_size"), "norm": NormKind.RMSNORM,
              "tied_embeddings": fields.bool("tie_word_embeddings", False),
              # the remote-code NemotronHConfig's attention_head_dim (Nemotron-H 8B/47B/56B
              # config.json), read where head_dim is not stated (a trial: only warned of)
              **_attention(fields, d_model, fields.optional_int("attention_head_dim"))}
    try:  # the geometry's own rules (pattern, mixer): name the file
        mamba = MambaConfig(heads=heads, head_dim=head_dim, state_dim=state_dim, groups=groups,
                            conv_kernel=conv_kernel, chunk_size=chunk_size,
                            conv_bias=conv_bias) if "M" in pattern else None
        return Geometry(**common, glu=False, activation="squared_relu", ffn=ffn, moe=moe,
                        hybrid_pattern=pattern, mamba=mamba)
    except MosaicInputError as error:
        raise MosaicInputError(f"{where}: {error}") from None


def _qwen3_next_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """Per decoder layer ``linear_attention`` or ``full_attention``: ``layer_types`` when
    given, else full attention on every ``full_attention_interval``-th layer (HF
    Qwen3NextConfig's default, interval 4)."""
    types = fields.config.get("layer_types")
    if types is None:
        interval = fields.int("full_attention_interval", 4)
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                for i in range(layers)]
    # the interval only builds layer_types when they are not given (Qwen3NextConfig), as the
    # released config's are: not warned of as unread (a trial)
    fields.ignored("full_attention_interval")
    return _checked_layer_types(fields, types, layers, ("linear_attention", "full_attention"))


def _checked_layer_types(fields: ConfigFields, types: Any, layers: int,
                         allowed: tuple[str, ...]) -> list[str]:
    """A hybrid config's ``layer_types`` as stated: a list of ``layers`` entries, each one
    of ``allowed``; a one-line error naming the file otherwise."""
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in allowed for t in types)):
        raise MosaicInputError(f"{fields.where}: layer_types must list {layers} entries, each "
                               f"{' or '.join(allowed)}")
    return types


def _qwen3_next(fields: ConfigFields) -> Geometry:
    """HF ``Qwen3NextConfig`` (transformers models/qwen3_next/configuration_qwen3_next.py;
    Megatron-Bridge ``Qwen3NextBridge`` maps it to the same layers): each decoder layer is a
    gated DeltaNet or a gated full-attention mixer followed by an MoE FFN (a dense MLP of
    ``intermediate_size`` on ``mlp_only_layers`` and off the ``decoder_sparse_step``)."""
    where = fields.where
    activation = _gated_activation(fields)
    if fields.bool("attention_bias", False):
        raise MosaicInputError(f"{where}: attention_bias=true is not supported")
    d_model = fields.int("hidden_size")
    layers = fields.int("num_hidden_layers")
    types = _qwen3_next_layer_types(fields, layers)
    fields.index_list("mlp_only_layers", layers)  # every index names a layer
    sparse = _qwen_sparse_layers(fields, layers) if fields.count("num_experts", 0) else []
    pattern = "".join(("G" if kind == "linear_attention" else "*") + ("E" if i in sparse else "-")
                      for i, kind in enumerate(types))
    moe = None
    if sparse:
        shared_width = fields.count("shared_expert_intermediate_size", 0)
        moe = MoEConfig(experts=fields.int("num_experts"),
                        top_k=fields.int("num_experts_per_tok"),
                        expert_ffn=fields.int("moe_intermediate_size"),
                        shared_experts=1 if shared_width else 0,
                        shared_expert_ffn=shared_width or None,
                        shared_expert_gate=bool(shared_width),  # HF Qwen3NextSparseMoeBlock
                        router=_router(fields, "qwen3_next"))
    linear = {name: fields.int(f"linear_{key}", default) for name, key, default in (
        ("key_heads", "num_key_heads", 16), ("value_heads", "num_value_heads", 32),
        ("key_head_dim", "key_head_dim", 128), ("value_head_dim", "value_head_dim", 128),
        ("conv_kernel", "conv_kernel_dim", 4))}
    common = {"layers": 2 * layers, "d_model": d_model, "vocab": fields.int("vocab_size"),
              "norm": NormKind.RMSNORM, "ffn": fields.int("intermediate_size"),
              "tied_embeddings": fields.bool("tie_word_embeddings", False),
              # Qwen3NextConfig: a quarter of each head rotates by default; (1 + w) RMSNorm
              # gains (Qwen3NextRMSNorm; Qwen3NextBridge layernorm_zero_centered_gamma)
              **fields.rope(fraction_default=0.25), "zero_centered_norm": True,
              # HF Qwen3NextConfig's head_dim defaults to 256, not d_model / heads
              **_attention(fields, d_model, head_dim_default=256)}
    gated = {"glu": True, "activation": activation, "qk_norm": True,
             "attention_output_gate": True}
    try:  # the geometry's own rules (pattern, mixer): name the file
        if "G" not in pattern:
            # full attention everywhere: a transformer whose MoE blocks Qwen-MoE's rules
            # place (an irregular placement stays a hybrid pattern)
            transformer_moe, regular = moe, True
            if moe is not None:
                try:
                    dense_layers, every = _prefix_and_every(sparse, layers, where)
                    transformer_moe = replace(moe, dense_layers=dense_layers, moe_every=every)
                except MosaicInputError:
                    regular = False
            if regular:
                return Geometry(**(common | {"layers": layers}), **gated, moe=transformer_moe)
        gdn = GatedDeltaNetConfig(**linear) if "G" in pattern else None
        return Geometry(**common, **gated, moe=moe, hybrid_pattern=pattern, gdn=gdn)
    except MosaicInputError as error:
        raise MosaicInputError(f"{where}: {error}") from None


# BailingMoeV2Config fields whose class default differs between its published copies: the
# checkpoints' remote code as Megatron-Bridge models/bailing reads it (use_qk_norm true,
# use_bias false, one shared expert, one dense block, routed_scaling_factor 1.0) and
# inclusionAI/Ming's configuration_bailing_moe_v2.py (false, true, 0, 0, 2.5). Every released
# Ling 2.0 config states them; one that does not is refused rather than read by a guess.
LING_UNSETTLED_DEFAULTS = ("use_qk_norm", "use_bias", "num_shared_experts",
                           "first_k_dense_replace", "routed_scaling_factor")


def _bailing_moe_v2(fields: ConfigFields, common: dict[str, Any]) -> Geometry:
    """``BailingMoeV2Config`` (Ling 2.0, Ring 2.0; the checkpoints' remote code
    modeling_bailing_moe_v2.py, as copied in Megatron-Bridge models/bailing and mapped by its
    ``BailingMoeV2Bridge``): ``query_key_value`` d -> (heads + 2 kv) x head_dim with biases
    when ``use_qkv_bias``, ``dense`` (the output) with a bias when ``use_bias``, per-head q/k
    RMSNorms when ``use_qk_norm``; block i a dense MLP of ``intermediate_size`` when
    i < ``first_k_dense_replace``, else ``num_experts`` routed experts of
    ``moe_intermediate_size`` and one shared MLP of ``moe_intermediate_size`` x
    ``num_shared_experts`` (``BailingMoeV2SparseMoeBlock``); ``num_nextn_predict_layers``
    ``BailingMoeV2MTPLayer`` after the decoder layers, each an MoE block with eh_proj (2d -> d),
    enorm, hnorm and final_layernorm: DeepSeek-V3's MTP module, counted apart."""
    where, layers = fields.where, common["layers"]
    missing = [name for name in LING_UNSETTLED_DEFAULTS if name not in fields.config]
    if missing:
        raise MosaicInputError(
            f"{where}: {', '.join(missing)} not given: the published copies of Ling 2.0's "
            "config class disagree on the default; state it (the model's config.json has it)")
    dense_layers = fields.count("first_k_dense_replace", 1)
    if dense_layers >= layers:
        raise MosaicInputError(f"{where}: no MoE block left by first_k_dense_replace "
                               f"({dense_layers} of {layers} blocks)")
    scoring = fields.config.get("score_function", "sigmoid")
    if scoring != "sigmoid":  # BailingMoeV2Gate takes torch.sigmoid whatever it says
        raise MosaicInputError(f"{where}: score_function {shown(scoring)}: Ling 2.0's router takes "
                               "sigmoid scores (BailingMoeV2Gate); allowed: sigmoid")
    width = fields.int("moe_intermediate_size")
    # a stated null builds no shared MLP (``if config.num_shared_experts is not None``)
    stated_null = "num_shared_experts" in fields.config and fields.config[
        "num_shared_experts"] is None
    shared = 0 if stated_null else fields.count("num_shared_experts", 1)
    # configs state the shared MLP's width too; the model builds width x shared experts
    stated = fields.optional_int("moe_shared_expert_intermediate_size")
    if stated is not None and stated != width * shared:
        raise MosaicInputError(
            f"{where}: moe_shared_expert_intermediate_size {stated}: Ling 2.0's modeling code "
            f"builds one shared MLP of moe_intermediate_size x num_shared_experts "
            f"({width} x {shared}); mosaic reads the model it builds")
    router = _router(fields, "bailing_moe_v2")
    if not fields.bool("moe_router_enable_expert_bias", True):
        router = replace(router, balancing=None)  # no bias: the stack's balancing
    # precision, a norm switch the code does not read (always RMSNorm), a Qwen leftover the
    # code never reads, and the MTP loss weight
    fields.ignored("router_dtype", "use_rmsnorm", "max_window_layers", "mtp_loss_scaling_factor")
    moe = MoEConfig(experts=fields.int("num_experts"), top_k=fields.int("num_experts_per_tok"),
                    expert_ffn=width, shared_experts=shared,
                    shared_expert_ffn=width if shared else None, dense_layers=dense_layers,
                    router=router)
    return Geometry(**common, **_attention(fields, common["d_model"]),
                    ffn=fields.int("intermediate_size"), moe=moe,
                    qkv_bias=fields.bool("use_qkv_bias", False),
                    output_bias=fields.bool("use_bias", False),
                    qk_norm=fields.bool("use_qk_norm", True),
                    mtp_layers=fields.count("num_nextn_predict_layers", 0))


def _granite_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """Per decoder layer ``mamba`` or ``attention``: ``layer_types`` (alias
    ``layers_block_type``), else every layer Mamba (``GraniteMoeHybridConfig
    .layers_block_type``)."""
    types = fields.config.get("layer_types")
    if types is None:
        types = fields.config.get("layers_block_type")
    if types is None:
        return ["mamba"] * layers
    return _checked_layer_types(fields, types, layers, ("mamba", "attention"))


def _granite_moe_hybrid(fields: ConfigFields) -> Geometry:
    """``GraniteMoeHybridConfig`` (Granite 4.0-H; transformers models/granitemoehybrid
    modular_granitemoehybrid.py): decoder layer i is a Mamba-2 mixer (``BambaMixer``) or GQA
    attention (``GraniteMoeSharedAttention``, q/k/v/o biases when ``attention_bias``) per
    ``layer_types``, each behind ``input_layernorm``, then behind
    ``post_attention_layernorm`` Granite's MoE (``num_local_experts`` experts of
    ``intermediate_size``, a bias-free softmax top-k router) plus a shared MLP of
    ``shared_intermediate_size``, or that MLP alone when ``num_local_experts`` is 0. Each
    decoder layer becomes a mixer layer (``M`` or ``*``) and an FFN layer (``E`` or ``-``).
    The embedding, residual, attention and logit multipliers carry no weights."""
    where = fields.where
    activation = _gated_activation(fields)
    if fields.bool("mamba_proj_bias", False):
        raise MosaicInputError(f"{where}: mamba_proj_bias=true is not supported (biases on the "
                               "Mamba-2 in_proj and out_proj, which mosaic's mixer has not)")
    d_model, layers = fields.int("hidden_size"), fields.int("num_hidden_layers")
    types = _granite_layer_types(fields, layers)
    experts = fields.count("num_local_experts", 8)
    shared_width = fields.int("shared_intermediate_size", 1024)
    pattern = "".join(("M" if kind == "mamba" else "*") + ("E" if experts else "-")
                      for kind in types)
    moe = None
    if experts:
        moe = MoEConfig(experts=experts, top_k=fields.int("num_experts_per_tok", 2),
                        expert_ffn=fields.int("intermediate_size"), shared_experts=1,
                        shared_expert_ffn=shared_width,
                        router=_router(fields, "granitemoehybrid"))
    else:  # the dense model builds no MoE: its router fields are not read
        fields.ignored("intermediate_size", "num_experts_per_tok")
    # GraniteMoeHybridConfig: the mixer is mamba_expand x hidden_size wide, mamba_d_head
    # ("auto") that over mamba_n_heads, and the two must agree
    heads = fields.int("mamba_n_heads", 128)
    inner = fields.int("mamba_expand", 2) * d_model
    head_dim = (inner // heads if fields.config.get("mamba_d_head", "auto") == "auto"
                else fields.int("mamba_d_head"))
    if head_dim * heads != inner:
        raise MosaicInputError(f"{where}: mamba_d_head {head_dim} x mamba_n_heads {heads} must "
                               f"equal mamba_expand x hidden_size ({inner}): the Mamba-2 "
                               "mixer's width (GraniteMoeHybridConfig)")
    # NoPE unless position_embedding_type is rope (GraniteMoeHybridModel.rotary_emb)
    rope = fields.config.get("position_embedding_type") == "rope"
    if not rope:
        fields.ignored("rope_theta", "partial_rotary_factor", "rope_parameters")
    fields.ignored("normalization_function")  # not a GraniteMoeHybridConfig field: RMSNorm
    common = {"layers": 2 * layers, "d_model": d_model, "vocab": fields.int("vocab_size"),
              "norm": NormKind.RMSNORM, "glu": True, "activation": activation,
              "ffn": moe.expert_ffn if moe else shared_width,
              "tied_embeddings": fields.bool("tie_word_embeddings", False),
              **(fields.rope() if rope else {}), **_attention(fields, d_model)}
    attention_bias = fields.bool("attention_bias", False)
    try:  # the geometry's own rules (pattern, mixer): name the file
        mamba = MambaConfig(
            heads=heads, head_dim=head_dim, state_dim=fields.int("mamba_d_state", 256),
            groups=fields.int("mamba_n_groups", 1), conv_kernel=fields.int("mamba_d_conv", 4),
            chunk_size=fields.int("mamba_chunk_size", 256),
            conv_bias=fields.bool("mamba_conv_bias", True)) if "M" in pattern else None
        return Geometry(**common, moe=moe, hybrid_pattern=pattern, mamba=mamba,
                        qkv_bias=attention_bias, output_bias=attention_bias)
    except MosaicInputError as error:
        raise MosaicInputError(f"{where}: {error}") from None


# A model's config.json (or a mosaic model file) is kilobytes; one this large is another
# file, refused before it is read (a fuzz case's 242 MiB of nested lists took 20 s to parse
# before its error).
MAX_MODEL_FILE_BYTES = 16 * 2**20


def load_hf_config(path: Path) -> Geometry:
    """Read a ``config.json`` file and import its geometry."""
    from mosaic.schema_validation import parse_json, read_text

    config = parse_json(read_text(path, "config.json", max_bytes=MAX_MODEL_FILE_BYTES),
                        str(path))
    return geometry_from_hf_config(config, str(path))


def is_hf_config_file(path: Path) -> bool:
    """Whether ``path`` names a JSON file (HF config) rather than a mosaic YAML file."""
    return Path(path).suffix.lower() == ".json"
