"""The parts of a HuggingFace config that families read alike: the gated activation, the
attention shape, the sliding window, the placement of MoE blocks among dense ones and an MoE
block with at most one shared expert."""

from __future__ import annotations

import warnings
from typing import Any

from mosaic.arch.geometry import AttentionKind, MoEConfig
from mosaic.arch.hf_fields import ConfigFields
from mosaic.arch.hf_routers import family_router
from mosaic.arch.hf_warnings import SlidingWindowIgnoredWarning
from mosaic.errors import MosaicInputError, shown


def gated_activation(fields: ConfigFields) -> str:
    """Every supported transformer family uses a gated MLP: SwiGLU for hidden_act silu or
    swish, GeGLU for gelu; refuse an unexpected one."""
    act = fields.config.get("hidden_act", "silu")
    if act not in ("silu", "swish", "gelu", "gelu_pytorch_tanh"):
        raise MosaicInputError(
            f"{fields.where}: hidden_act {shown(act)} is not supported; allowed: silu, swish, gelu")
    if fields.bool("mlp_bias", False):
        raise MosaicInputError(f"{fields.where}: mlp_bias=true is not supported (FFN biases)")
    return "swiglu" if act in ("silu", "swish") else "geglu"


def moe_with_one_shared_expert(fields: ConfigFields, model_type: str, experts_key: str,
                               shared_width: int, *, shared_expert_gate: bool = False,
                               dense_layers: int = 0, moe_every: int = 1) -> MoEConfig:
    """An MoE block of ``experts_key`` routed experts (top ``num_experts_per_tok``, width
    ``moe_intermediate_size``) and one shared expert of ``shared_width`` where that is not 0
    (Qwen2-MoE, Qwen3-Next, Nemotron-H), gated where ``shared_expert_gate`` says, routed
    as ``model_type``'s router (:func:`~mosaic.arch.hf_routers.family_router`)."""
    return MoEConfig(experts=fields.int(experts_key), top_k=fields.int("num_experts_per_tok"),
                     expert_ffn=fields.int("moe_intermediate_size"),
                     shared_experts=1 if shared_width else 0,
                     shared_expert_ffn=shared_width or None,
                     shared_expert_gate=shared_expert_gate and bool(shared_width),
                     dense_layers=dense_layers, moe_every=moe_every,
                     router=family_router(fields, model_type))


def qwen_sparse_layers(fields: ConfigFields, layers: int) -> list[int]:
    """The blocks HF Qwen2/3-MoE and Qwen3-Next make sparse: block i when i is not in
    ``mlp_only_layers`` and (i + 1) % decoder_sparse_step == 0."""
    step = fields.int("decoder_sparse_step", 1)
    dense_list = fields.index_list("mlp_only_layers", layers)
    return [i for i in range(layers) if i not in dense_list and (i + 1) % step == 0]


QWEN_SPARSE_FIELDS = "mlp_only_layers and decoder_sparse_step"


def prefix_and_every(sparse: list[int], layers: int, where: str,
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


def window_fields(fields: ConfigFields, model_type: str, layers: int) -> dict[str, Any]:
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


def attention_fields(fields: ConfigFields, d_model: int, head_dim_default: int | None = None
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
