"""HuggingFace MoE families whose every block is MoE (Mixtral's layout): Mixtral, gpt-oss,
OLMoE, Granite 3 MoE, Phi-3.5-MoE, MiniMax-M2, Hunyuan-A13B."""

from __future__ import annotations

import warnings
from typing import Any

from mosaic.arch.geometry import Geometry, MoEConfig, NormKind, QKNormSpan
from mosaic.arch.hf_fields import ConfigFields
from mosaic.arch.hf_layers import attention_fields
from mosaic.arch.hf_routers import family_router, require_sigmoid_scores
from mosaic.arch.hf_warnings import (
    IgnoredFieldWarning,
    UnmodelledFieldWarning,
    warn_mtp_left_out,
)
from mosaic.errors import MosaicInputError, shown


def mixtral(fields: ConfigFields, common: dict[str, Any], window: dict[str, Any]) -> Geometry:
    """``MixtralConfig``: ``num_local_experts`` routed experts of ``intermediate_size`` in
    every block, ``num_experts_per_tok`` chosen."""
    d_model = common["d_model"]
    width = fields.int("intermediate_size")
    moe = MoEConfig(experts=fields.int("num_local_experts"),
                    top_k=fields.int("num_experts_per_tok"), expert_ffn=width,
                    router=family_router(fields, "mixtral"))
    return Geometry(**common, **attention_fields(fields, d_model), **window, ffn=width, moe=moe)


def gpt_oss(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
            window: dict[str, Any]) -> Geometry:
    """``GptOssConfig``: biases on attention, experts and router, attention sinks."""
    config, d_model = fields.config, common["d_model"]
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
                    expert_bias=True, router_bias=True, router=family_router(fields, "gpt_oss"))
    return Geometry(**common, **attention_fields(fields, d_model), **window, ffn=width, moe=moe,
                    qkv_bias=attention_bias, output_bias=attention_bias, attention_sinks=True)


def olmoe_or_granite(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
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
                    router=family_router(fields, model_type))
    attention = attention_fields(fields, common["d_model"])
    if olmoe and attention["heads"] * attention["head_dim"] != common["d_model"]:
        raise MosaicInputError(f"{fields.where}: OLMoE's q_norm is hidden_size wide, so "
                               "num_attention_heads x head_dim must equal hidden_size")
    return Geometry(**common, **attention, ffn=width, moe=moe, qkv_bias=attention_bias,
                    output_bias=attention_bias, qk_norm=olmoe,
                    qk_norm_span=QKNormSpan.PROJECTION if olmoe else QKNormSpan.HEAD)


# MiniMax-M2 config.json qk_norm_type -> what its q/k norms span (MiniMaxM2Attention is
# FlexOlmoAttention, i.e. Olmo2Attention: q_norm heads x head_dim, k_norm kv x head_dim wide)
MINIMAX_QK_NORM_SPANS = {"per_layer": QKNormSpan.PROJECTION, "per_head": QKNormSpan.HEAD}


def minimax_m2(fields: ConfigFields, common: dict[str, Any]) -> Geometry:
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
    require_sigmoid_scores(fields, "MiniMax-M2", "MiniMaxM2TopKRouter")
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
    warn_mtp_left_out(fields, "num_mtp_modules", modules, "MiniMax-M2's")
    attention = attention_fields(fields, common["d_model"])
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
                    router=family_router(fields, "minimax_m2"))
    qk_norm = fields.bool("use_qk_norm", True)
    return Geometry(**common, **attention, ffn=moe.expert_ffn, moe=moe, qk_norm=qk_norm,
                    qk_norm_span=MINIMAX_QK_NORM_SPANS[span_name] if qk_norm
                    else QKNormSpan.HEAD)


def phimoe(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
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
                    router=family_router(fields, "phimoe"))
    return Geometry(**(common | {"norm": NormKind.LAYERNORM}),
                    **attention_fields(fields, common["d_model"]), **window, ffn=width, moe=moe,
                    qkv_bias=attention_bias, output_bias=attention_bias,
                    lm_head_bias=fields.bool("lm_head_bias", False))


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


def hunyuan_v1_moe(fields: ConfigFields, common: dict[str, Any], attention_bias: bool
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
                    router=family_router(fields, "hunyuan_v1_moe"))
    # Tencent's config.json names the head width attention_head_dim (its remote code)
    return Geometry(**common, **attention_fields(fields, common["d_model"],
                                                 fields.optional_int("attention_head_dim")),
                    ffn=width, moe=moe, qkv_bias=attention_bias, output_bias=attention_bias,
                    qk_norm=True)
