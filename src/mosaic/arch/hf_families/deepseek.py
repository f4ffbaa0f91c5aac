"""HuggingFace families on DeepSeek-V3's blocks (a dense prefix, then routed experts of
``moe_intermediate_size`` with ``n_shared_experts`` shared ones): DeepSeek-V2/V3/V3.2 (MLA),
GLM-4.5, dots.llm1, Ling 2.0."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

from mosaic.arch.geometry import AttentionKind, Geometry, MLAConfig, MoEConfig
from mosaic.arch.hf_fields import ConfigFields
from mosaic.arch.hf_layers import attention_fields
from mosaic.arch.hf_routers import family_router, require_sigmoid_scores
from mosaic.arch.hf_warnings import IgnoredFieldWarning, UnmodelledFieldWarning
from mosaic.errors import MosaicInputError, shown

# DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp config.json: index_n_heads,
# index_head_dim, index_topk): mosaic has no geometry for it
DSA_INDEXER_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")


def deepseek(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
             model_type: str) -> Geometry:
    """``DeepseekV2Config``, ``DeepseekV3Config`` (and DeepSeek-V3.2, read as V3 with its
    indexer warned of): MLA attention, MoE blocks placed by :func:`_deepseek_prefix`, the
    multi-token-prediction layers of ``num_nextn_predict_layers``."""
    where, layers = fields.where, common["layers"]
    if model_type == "deepseek_v32":
        _warn_dsa_indexer(fields)
        model_type = "deepseek_v3"
    dense_layers, every = _deepseek_prefix(fields, layers)
    moe = _deepseek_style_moe(fields, model_type, dense_layers, every, shared_default=0)
    if attention_bias:
        raise MosaicInputError(f"{where}: attention_bias=true is not supported with MLA")
    return Geometry(**common, **_mla(fields), ffn=fields.int("intermediate_size"),
                    moe=moe, mtp_layers=fields.count("num_nextn_predict_layers", 0))


def _deepseek_prefix(fields: ConfigFields, layers: int) -> tuple[int, int]:
    """DeepSeek-V2/V3 block i is MoE when i >= first_k_dense_replace and i % freq == 0."""
    first = fields.count("first_k_dense_replace", 0)
    freq = fields.int("moe_layer_freq", 1)
    sparse = [i for i in range(first, layers) if i % freq == 0]
    if not sparse:
        raise MosaicInputError(f"{fields.where}: no MoE block left by first_k_dense_replace")
    return sparse[0], freq  # the multiples of freq from the first one: prefix + every n-th


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
                      UnmodelledFieldWarning, stacklevel=5)
    return {"heads": heads, "kv_heads": heads, "head_dim": mla.v_head_dim,
            "attention": AttentionKind.MLA, "mla": mla}


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
                     router=family_router(fields, model_type))


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
        "longer than index_topk", UnmodelledFieldWarning, stacklevel=5)


def glm4_moe(fields: ConfigFields, common: dict[str, Any], attention_bias: bool) -> Geometry:
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
    return Geometry(**common, **attention_fields(fields, common["d_model"]),
                    ffn=fields.int("intermediate_size"), moe=moe, qkv_bias=attention_bias,
                    output_bias=False, qk_norm=fields.bool("use_qk_norm", False),
                    mtp_layers=fields.count("num_nextn_predict_layers", 0))


def dots1(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
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
    require_sigmoid_scores(fields, "dots.llm1", "Dots1TopkRouter")
    # DeepSeek's moe_layer_freq: Dots1Config has none, and its decoder layer places MoE
    # blocks by first_k_dense_replace alone
    freq = fields.config.get("moe_layer_freq")
    if freq not in (None, 1):
        warnings.warn(f"{where}: moe_layer_freq {shown(freq)} is ignored: transformers' dots.llm1 "
                      "makes every block from first_k_dense_replace on MoE",
                      IgnoredFieldWarning, stacklevel=4)
    moe = _deepseek_style_moe(fields, "dots1", dense_layers, 1, shared_default=0)
    return Geometry(**common, **attention_fields(fields, common["d_model"]), **window,
                    ffn=fields.int("intermediate_size"), moe=moe, qkv_bias=attention_bias,
                    output_bias=attention_bias, qk_norm=True)


# BailingMoeV2Config fields whose class default differs between its published copies: the
# checkpoints' remote code as Megatron-Bridge models/bailing reads it (use_qk_norm true,
# use_bias false, one shared expert, one dense block, routed_scaling_factor 1.0) and
# inclusionAI/Ming's configuration_bailing_moe_v2.py (false, true, 0, 0, 2.5). Every released
# Ling 2.0 config states them; one that does not is refused rather than read by a guess.
LING_UNSETTLED_DEFAULTS = ("use_qk_norm", "use_bias", "num_shared_experts",
                           "first_k_dense_replace", "routed_scaling_factor")


def bailing_moe_v2(fields: ConfigFields, common: dict[str, Any]) -> Geometry:
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
    router = family_router(fields, "bailing_moe_v2")
    if not fields.bool("moe_router_enable_expert_bias", True):
        router = replace(router, balancing=None)  # no bias: the stack's balancing
    # precision, a norm switch the code does not read (always RMSNorm), a Qwen leftover the
    # code never reads, and the MTP loss weight
    fields.ignored("router_dtype", "use_rmsnorm", "max_window_layers", "mtp_loss_scaling_factor")
    moe = MoEConfig(experts=fields.int("num_experts"), top_k=fields.int("num_experts_per_tok"),
                    expert_ffn=width, shared_experts=shared,
                    shared_expert_ffn=width if shared else None, dense_layers=dense_layers,
                    router=router)
    return Geometry(**common, **attention_fields(fields, common["d_model"]),
                    ffn=fields.int("intermediate_size"), moe=moe,
                    qkv_bias=fields.bool("use_qkv_bias", False),
                    output_bias=fields.bool("use_bias", False),
                    qk_norm=fields.bool("use_qk_norm", True),
                    mtp_layers=fields.count("num_nextn_predict_layers", 0))
