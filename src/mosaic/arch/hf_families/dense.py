"""Dense HuggingFace transformers: Llama, Mistral, Qwen2, Qwen 3."""

from __future__ import annotations

from typing import Any

from mosaic.arch.geometry import Geometry
from mosaic.arch.hf_fields import ConfigFields
from mosaic.arch.hf_layers import attention_fields


def dense(fields: ConfigFields, common: dict[str, Any], attention_bias: bool,
          window: dict[str, Any], model_type: str) -> Geometry:
    """``LlamaConfig``, ``MistralConfig``, ``Qwen2Config``, ``Qwen3Config``: MHA or GQA and
    a gated MLP of ``intermediate_size`` in every block."""
    d_model = common["d_model"]
    return Geometry(
        **common, **attention_fields(fields, d_model), **window,
        ffn=fields.int("intermediate_size"),
        # Qwen2's q/k/v projections always carry biases (HF Qwen2Attention: bias=True).
        qkv_bias=model_type == "qwen2" or attention_bias,
        output_bias=attention_bias and model_type != "qwen2",
        qk_norm=model_type == "qwen3",
    )
