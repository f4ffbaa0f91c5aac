"""Each supported HuggingFace family's router (:class:`RouterConfig`) from its config's fields."""

from __future__ import annotations

from mosaic.arch.geometry import RouterConfig
from mosaic.arch.hf_fields import ConfigFields
from mosaic.errors import MosaicInputError, shown

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
#   (router_aux_loss_coef). Read as softmax without renormalisation (phimoe warns).
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


def family_router(fields: ConfigFields, model_type: str) -> RouterConfig:
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


def require_sigmoid_scores(fields: ConfigFields, family: str, router_class: str) -> None:
    """Refuse a ``scoring_func`` other than sigmoid (the default) for a family whose
    transformers router (``router_class``) takes sigmoid scores only."""
    scoring = fields.config.get("scoring_func", "sigmoid")
    if scoring != "sigmoid":
        raise MosaicInputError(f"{fields.where}: scoring_func {shown(scoring)}: {family}'s router "
                               f"takes sigmoid scores ({router_class}); allowed: sigmoid")
