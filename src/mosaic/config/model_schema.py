"""The ``model:`` and ``moe:`` blocks of a job/architecture YAML file.

Field names follow the paper's Appendix E listing (ScalePlan's input format) so such
files load as written; the extra fields (attention kind, MLA, shared experts, dense
prefix, ...) cover the architectures the paper's listing cannot express.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mosaic.arch.geometry import AttentionKind, Geometry, MLAConfig, MoEConfig, NormKind
from mosaic.errors import MosaicInputError
from mosaic.limits import LIMITS
from mosaic.schema_validation import validate_mapping

Precision = Literal["bf16", "fp16", "fp32", "fp8"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MLABlock(_Strict):
    """DeepSeek MLA dimensions."""

    kv_lora_rank: int = Field(gt=0, le=LIMITS["width"].high)
    qk_nope_head_dim: int = Field(gt=0, le=LIMITS["width"].high)
    qk_rope_head_dim: int = Field(gt=0, le=LIMITS["width"].high)
    v_head_dim: int = Field(gt=0, le=LIMITS["width"].high)
    q_lora_rank: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)


class ModelBlock(_Strict):
    """Backbone of a decoder-only transformer (Appendix E listing names)."""

    n_layers: int = Field(gt=0, le=LIMITS["layers"].high, description="transformer blocks L")
    hidden_sz: int = Field(gt=0, le=LIMITS["width"].high, description="residual width d")
    inter_sz: int = Field(gt=0, le=LIMITS["width"].high, description="dense FFN hidden width d_ff")
    n_q_heads: int = Field(gt=0, le=LIMITS["width"].high, description="query heads")
    n_kv_heads: int | None = Field(default=None, gt=0, le=LIMITS["width"].high,
                                   description="KV heads; default = n_q_heads")
    head_dim: int | None = Field(default=None, gt=0, le=LIMITS["width"].high,
                                 description="default hidden_sz / n_q_heads")
    vocab_sz: int = Field(default=50257, gt=0, le=LIMITS["vocab"].high)
    precision: Precision = "bf16"
    sdpa_precision: Precision = "bf16"
    glu: bool = True
    rotary_embeds: bool = True
    dropout: bool = False
    tie_embeddings: bool = False
    attention: AttentionKind | None = Field(default=None, description="mha, gqa or mla")
    mla: MLABlock | None = None
    gated_attention: bool = False
    norm: NormKind = NormKind.LAYERNORM


class MoEBlock(_Strict):
    """Routed-expert part (Appendix E names plus shared experts and dense prefix)."""

    n_experts: int = Field(gt=0, le=LIMITS["experts"].high, description="routed experts E")
    experts_per_token: int = Field(gt=0, le=LIMITS["experts"].high, description="top-K")
    expert_inter_sz: int = Field(gt=0, le=LIMITS["width"].high,
                                 description="routed expert width d_expert")
    capacity_factor: float | None = Field(default=None, gt=0, le=1024, allow_inf_nan=False,
                                          description="None = dropless")
    moe_frequency: int = Field(default=1, gt=0, le=LIMITS["layers"].high,
                               description="every n-th block after the prefix")
    expert_tp_degree: int = Field(default=1, gt=0, le=LIMITS["parallel_degree"].high,
                                  description="expert tensor parallelism")
    n_shared_experts: int = Field(default=0, ge=0, le=LIMITS["experts"].high)
    shared_expert_inter_sz: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)
    n_dense_layers: int = Field(default=0, ge=0, le=LIMITS["layers"].high,
                                description="leading dense blocks")


def _attention_kind(block: ModelBlock, kv_heads: int) -> AttentionKind:
    if block.attention is not None:
        return block.attention
    if block.mla is not None:
        return AttentionKind.MLA
    return AttentionKind.MHA if kv_heads == block.n_q_heads else AttentionKind.GQA


def geometry_from_blocks(model: ModelBlock, moe: MoEBlock | None) -> Geometry:
    """Build a :class:`Geometry` from validated blocks."""
    if model.head_dim is None and model.hidden_sz % model.n_q_heads:
        raise MosaicInputError(
            f"model.n_q_heads ({model.n_q_heads}) must divide model.hidden_sz "
            f"({model.hidden_sz}) unless model.head_dim is given"
        )
    kv_heads = model.n_kv_heads or model.n_q_heads
    mla = MLAConfig(**model.mla.model_dump()) if model.mla else None
    moe_config = None
    if moe is not None:
        moe_config = MoEConfig(
            experts=moe.n_experts,
            top_k=moe.experts_per_token,
            expert_ffn=moe.expert_inter_sz,
            shared_experts=moe.n_shared_experts,
            shared_expert_ffn=moe.shared_expert_inter_sz,
            dense_layers=moe.n_dense_layers,
            moe_every=moe.moe_frequency,
        )
    return Geometry(
        layers=model.n_layers,
        d_model=model.hidden_sz,
        heads=model.n_q_heads,
        kv_heads=kv_heads,
        head_dim=model.head_dim or model.hidden_sz // model.n_q_heads,
        ffn=model.inter_sz,
        vocab=model.vocab_sz,
        glu=model.glu,
        tied_embeddings=model.tie_embeddings,
        attention=_attention_kind(model, kv_heads),
        mla=mla,
        gated_attention=model.gated_attention,
        norm=model.norm,
        moe=moe_config,
    )


def geometry_from_document(document: dict[str, Any], where: str) -> Geometry:
    """Geometry from a parsed YAML document holding ``model:`` and optional ``moe:``."""
    if "model" not in document:
        raise MosaicInputError(f"{where}: missing required block 'model'")
    model = validate_mapping(ModelBlock, document["model"], f"{where}: model")
    moe_data = document.get("moe")
    moe = validate_mapping(MoEBlock, moe_data, f"{where}: moe") if moe_data is not None else None
    return geometry_from_blocks(model, moe)
