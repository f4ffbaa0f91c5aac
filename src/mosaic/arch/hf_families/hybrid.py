"""HuggingFace hybrid families whose layers mix Mamba-2 or gated-DeltaNet mixers with attention:
Nemotron-H, Qwen3-Next, Granite 4.0-H. Each decoder layer becomes a mixer layer and an FFN
layer of mosaic's ``hybrid_pattern``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mosaic.arch.geometry import GatedDeltaNetConfig, Geometry, MambaConfig, MoEConfig, NormKind
from mosaic.arch.hf_fields import ConfigFields
from mosaic.arch.hf_layers import (
    attention_fields,
    gated_activation,
    moe_with_one_shared_expert,
    prefix_and_every,
    qwen_sparse_layers,
)
from mosaic.arch.hf_routers import family_router
from mosaic.errors import MosaicInputError, shown


def nemotron_h(fields: ConfigFields) -> Geometry:
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
        moe = moe_with_one_shared_expert(
            fields, "nemotron_h", "n_routed_experts",
            fields.count("moe_shared_expert_intermediate_size", 0))
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
              **attention_fields(fields, d_model, fields.optional_int("attention_head_dim"))}
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


def qwen3_next(fields: ConfigFields) -> Geometry:
    """HF ``Qwen3NextConfig`` (transformers models/qwen3_next/configuration_qwen3_next.py;
    Megatron-Bridge ``Qwen3NextBridge`` maps it to the same layers): each decoder layer is a
    gated DeltaNet or a gated full-attention mixer followed by an MoE FFN (a dense MLP of
    ``intermediate_size`` on ``mlp_only_layers`` and off the ``decoder_sparse_step``)."""
    where = fields.where
    activation = gated_activation(fields)
    if fields.bool("attention_bias", False):
        raise MosaicInputError(f"{where}: attention_bias=true is not supported")
    d_model = fields.int("hidden_size")
    layers = fields.int("num_hidden_layers")
    types = _qwen3_next_layer_types(fields, layers)
    fields.index_list("mlp_only_layers", layers)  # every index names a layer
    sparse = qwen_sparse_layers(fields, layers) if fields.count("num_experts", 0) else []
    pattern = "".join(("G" if kind == "linear_attention" else "*") + ("E" if i in sparse else "-")
                      for i, kind in enumerate(types))
    moe = None
    if sparse:
        moe = moe_with_one_shared_expert(  # gated: HF Qwen3NextSparseMoeBlock
            fields, "qwen3_next", "num_experts",
            fields.count("shared_expert_intermediate_size", 0), shared_expert_gate=True)
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
              **attention_fields(fields, d_model, head_dim_default=256)}
    gated = {"glu": True, "activation": activation, "qk_norm": True,
             "attention_output_gate": True}
    try:  # the geometry's own rules (pattern, mixer): name the file
        if "G" not in pattern:
            # full attention everywhere: a transformer whose MoE blocks Qwen-MoE's rules
            # place (an irregular placement stays a hybrid pattern)
            transformer_moe, regular = moe, True
            if moe is not None:
                try:
                    dense_layers, every = prefix_and_every(sparse, layers, where)
                    transformer_moe = replace(moe, dense_layers=dense_layers, moe_every=every)
                except MosaicInputError:
                    regular = False
            if regular:
                return Geometry(**(common | {"layers": layers}), **gated, moe=transformer_moe)
        gdn = GatedDeltaNetConfig(**linear) if "G" in pattern else None
        return Geometry(**common, **gated, moe=moe, hybrid_pattern=pattern, gdn=gdn)
    except MosaicInputError as error:
        raise MosaicInputError(f"{where}: {error}") from None


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


def granite_moe_hybrid(fields: ConfigFields) -> Geometry:
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
    activation = gated_activation(fields)
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
                        router=family_router(fields, "granitemoehybrid"))
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
              **(fields.rope() if rope else {}), **attention_fields(fields, d_model)}
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
