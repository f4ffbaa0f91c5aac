"""HuggingFace MoE families whose MoE blocks a layer rule places among dense ones: Qwen2-MoE and
Qwen3-MoE (``mlp_only_layers``, ``decoder_sparse_step``), Llama 4 (``moe_layers``,
``interleave_moe_layer_step``), ERNIE 4.5 (``moe_layer_start_index``, ``moe_layer_interval``)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

from mosaic.arch.geometry import Geometry, MoEConfig
from mosaic.arch.hf_fields import ConfigFields
from mosaic.arch.hf_layers import (
    attention_fields,
    moe_with_one_shared_expert,
    prefix_and_every,
    qwen_sparse_layers,
)
from mosaic.arch.hf_routers import family_router
from mosaic.arch.hf_warnings import (
    IgnoredFieldWarning,
    UnmodelledFieldWarning,
    warn_mtp_left_out,
)
from mosaic.errors import MosaicInputError


def _moe_prefix(fields: ConfigFields, layers: int) -> tuple[int, int]:
    """(dense prefix, moe_every) from Qwen-MoE ``mlp_only_layers``/``decoder_sparse_step``
    (:func:`qwen_sparse_layers`)."""
    return prefix_and_every(qwen_sparse_layers(fields, layers), layers, fields.where)


def qwen_moe(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
             window: dict[str, Any], model_type: str) -> Geometry:
    """``Qwen2MoeConfig``, ``Qwen3MoeConfig``: MoE blocks placed by :func:`_moe_prefix`,
    Qwen2-MoE's gated shared expert and q/k/v biases, Qwen 3's q/k norms."""
    where, layers, d_model = fields.where, common["layers"], common["d_model"]
    qwen2 = model_type == "qwen2_moe"
    dense_layers, every = _moe_prefix(fields, layers)
    # Qwen2MoeConfig defaults the shared expert's width to 5632 and always builds it
    # (with its sigmoid gate); Qwen3MoeConfig has none (transformers 5.x)
    shared_width = fields.count("shared_expert_intermediate_size", 5632 if qwen2 else 0)
    if shared_width and not qwen2:
        # HF Qwen3MoeSparseMoeBlock is the router and the routed experts alone
        warnings.warn(f"{where}: shared_expert_intermediate_size is ignored: transformers' "
                      "Qwen3-MoE has no shared expert (Qwen2-MoE and Qwen3-Next do)",
                      IgnoredFieldWarning, stacklevel=3)
        shared_width = 0
    moe = moe_with_one_shared_expert(  # gated: HF Qwen2MoeSparseMoeBlock
        fields, model_type, "num_experts", shared_width, shared_expert_gate=True,
        dense_layers=dense_layers, moe_every=every)
    return Geometry(
        **common, **attention_fields(fields, d_model), **window,
        ffn=fields.int("intermediate_size"), moe=moe,
        # Qwen2MoeConfig.qkv_bias (default true) sets the q/k/v biases, o_proj has none
        # (transformers 5.x models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeAttention)
        qkv_bias=fields.bool("qkv_bias", True) if qwen2 else attention_bias,
        output_bias=attention_bias and not qwen2, qk_norm=not qwen2,
    )


def llama4_text(fields: ConfigFields, common: dict[str, Any], attention_bias: bool
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
    dense_layers, every = prefix_and_every(sparse, layers, where, placed_by)
    width = fields.int("intermediate_size")
    moe = MoEConfig(experts=fields.int("num_local_experts"),
                    top_k=fields.int("num_experts_per_tok"), expert_ffn=width,
                    shared_experts=1, shared_expert_ffn=width, dense_layers=dense_layers,
                    moe_every=every,
                    router=family_router(fields, "llama4_text"))
    fields.bool("use_qk_norm", False)  # read: no weights either way
    fields.ignored("no_rope_layers")  # which blocks chunk (said below)
    chunk = fields.optional_int("attention_chunk_size")
    if chunk is not None:
        warnings.warn(f"{where}: attention_chunk_size {chunk}: the chunked attention of the "
                      "RoPE blocks is costed as full causal attention (the same work for "
                      f"sequences of at most {chunk:,} tokens, more beyond)",
                      UnmodelledFieldWarning, stacklevel=4)
    return Geometry(**common, **attention_fields(fields, common["d_model"]),
                    # Llama4TextConfig's class default, as for an absent head_dim below
                    ffn=fields.int("intermediate_size_mlp", 16384), moe=moe,
                    qkv_bias=attention_bias, output_bias=attention_bias)


ERNIE_SPARSE_FIELDS = "moe_layer_start_index, moe_layer_end_index and moe_layer_interval"


def ernie45_moe(fields: ConfigFields, common: dict[str, Any]) -> Geometry:
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
    dense_layers, every = prefix_and_every(sparse, layers, where, ERNIE_SPARSE_FIELDS)
    width = fields.int("moe_intermediate_size")
    shared = fields.count("moe_num_shared_experts", 2)
    router = family_router(fields, "ernie4_5_moe")
    if not fields.bool("moe_use_aux_free", True):  # the bias stays at zero
        router = replace(router, balancing="aux_loss")
    fields.ignored("moe_norm_min")  # a floor on the renormalising sum
    moe = MoEConfig(experts=fields.int("moe_num_experts"), top_k=fields.int("moe_k"),
                    expert_ffn=width, shared_experts=shared,
                    shared_expert_ffn=width if shared else None, dense_layers=dense_layers,
                    moe_every=every, router=router)
    warn_mtp_left_out(fields, "num_nextn_predict_layers",
                      fields.count("num_nextn_predict_layers", 0), "ERNIE 4.5's")
    return Geometry(**(common | {"tied_embeddings": fields.bool("tie_word_embeddings", True)}),
                    **attention_fields(fields, common["d_model"]),
                    ffn=fields.int("intermediate_size"), moe=moe)
