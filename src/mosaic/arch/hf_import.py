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
  ``attn_config`` and ``ffn_config``; bias-free LayerNorms, see
  :func:`mosaic.arch.hf_families.dbrx.dbrx`).
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
from pathlib import Path
from typing import Any

from mosaic.arch.geometry import Geometry, NormKind
from mosaic.arch.hf_families.dbrx import dbrx
from mosaic.arch.hf_families.deepseek import bailing_moe_v2, deepseek, dots1, glm4_moe
from mosaic.arch.hf_families.dense import dense
from mosaic.arch.hf_families.every_block_moe import (
    gpt_oss,
    hunyuan_v1_moe,
    minimax_m2,
    mixtral,
    olmoe_or_granite,
    phimoe,
)
from mosaic.arch.hf_families.hybrid import granite_moe_hybrid, nemotron_h, qwen3_next
from mosaic.arch.hf_families.interleaved_moe import ernie45_moe, llama4_text, qwen_moe
from mosaic.arch.hf_fields import ConfigFields, ReadTracker, unread_fields
from mosaic.arch.hf_layers import gated_activation, window_fields
from mosaic.arch.hf_warnings import ModelTypeReadAsWarning, UnmodelledFieldWarning
from mosaic.arch.hf_warnings import (  # re-exported: callers catch it by this module's name
    SlidingWindowIgnoredWarning as SlidingWindowIgnoredWarning,
)
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

# The families whose transformers attention takes a sliding window (``window_fields``); another
# family's ``sliding_window`` is left unread and so named in the unread-fields warning
WINDOW_TYPES = (*DENSE_TYPES, "mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "phimoe",
                "dots1")


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


def _require_class_constant_fields(fields: ConfigFields, model_type: str) -> None:
    """Refuse a config that leaves out a field its transformers class sets to a constant."""
    missing = [name for name in CLASS_CONSTANT_ATTENTION_FIELDS.get(model_type, ())
               if fields.config.get(name) is None]
    if missing:
        raise MosaicInputError(
            f"{fields.where}: {', '.join(missing)} not given: for a {model_type} config "
            "transformers fills in its config class's constant, not a value derived from "
            "the other fields; state it (the model card's config.json has it)")


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
    if model_type == "nemotron_h":
        return nemotron_h(fields)
    if model_type == "qwen3_next":
        return qwen3_next(fields)
    if model_type == "granitemoehybrid":
        return granite_moe_hybrid(fields)
    if model_type == "dbrx":
        return dbrx(fields)
    _require_class_constant_fields(fields, model_type)
    activation = gated_activation(fields)
    d_model = fields.int("hidden_size")
    layers = fields.int("num_hidden_layers")
    window = window_fields(fields, model_type, layers) if model_type in WINDOW_TYPES else {}
    common: dict[str, Any] = {
        "layers": layers,
        "d_model": d_model,
        "vocab": fields.int("vocab_size"),
        "glu": True,
        "activation": activation,
        "norm": NormKind.RMSNORM,
        # HF PretrainedConfig defaults tie_word_embeddings to True, but these families'
        # classes override it to False (LlamaConfig, MixtralConfig, Qwen*Config, ...);
        # Ernie4_5_MoeConfig keeps True (ernie45_moe reads it again)
        "tied_embeddings": fields.bool("tie_word_embeddings", False),
        # Glm4MoeConfig rotates half of each head by default
        **fields.rope(fraction_default=0.5 if model_type == "glm4_moe" else 1.0),
    }
    attention_bias = fields.bool("attention_bias", False)

    if model_type in DENSE_TYPES:
        return dense(fields, common, attention_bias, window, model_type)
    if model_type == "mixtral":
        return mixtral(fields, common, window)
    if model_type in ("qwen2_moe", "qwen3_moe"):
        return qwen_moe(fields, common, attention_bias, window, model_type)
    if model_type in ("deepseek_v2", "deepseek_v3", "deepseek_v32"):
        return deepseek(fields, common, attention_bias, model_type)
    if model_type == "glm4_moe":
        return glm4_moe(fields, common, attention_bias)
    if model_type == "llama4_text":
        return llama4_text(fields, common, attention_bias)
    if model_type in ("olmoe", "granitemoe"):
        return olmoe_or_granite(fields, common, attention_bias, model_type)
    if model_type == "minimax_m2":
        return minimax_m2(fields, common)
    if model_type == "ernie4_5_moe":
        return ernie45_moe(fields, common)
    if model_type == "phimoe":
        return phimoe(fields, common, attention_bias, window)
    if model_type == "dots1":
        return dots1(fields, common, attention_bias, window)
    if model_type == "hunyuan_v1_moe":
        return hunyuan_v1_moe(fields, common, attention_bias)
    if model_type == "bailing_moe_v2":
        return bailing_moe_v2(fields, common)
    return gpt_oss(fields, common, attention_bias, window)


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
