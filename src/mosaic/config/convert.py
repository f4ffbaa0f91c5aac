"""The ``model`` block <-> :class:`mosaic.arch.Geometry` (layouts: :mod:`mosaic.config.layout`).

One set of rules for job files, model files and run records. Where the block leaves a field
unstated (``None``), the rule fills it in and appends one line to ``notes``.
``measured=True`` (a run record: someone else's run) refuses to guess the key/value heads of
an MHA/GQA model; a job (your own plan) takes MHA instead. Arch-only imports: ``mosaic
arch`` stays light.
"""

from __future__ import annotations

from dataclasses import asdict

from mosaic.arch.geometry import (
    GATED_ACTIVATIONS,
    AttentionKind,
    GatedDeltaNetConfig,
    Geometry,
    HybridLayer,
    MambaConfig,
    MLAConfig,
    MoEConfig,
    NormKind,
    QKNormSpan,
    RouterConfig,
)
from mosaic.config.blocks import ModelBlock
from mosaic.errors import MosaicInputError

# The paper's runs use the GPT-2 BPE vocabulary and SwiGLU FFNs (Appendix A.1).
PAPER_VOCAB = 50257
PAPER_ACTIVATION = "swiglu"


def _heads(model: ModelBlock, attention: AttentionKind, measured: bool, notes: list[str]
           ) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim); MLA ignores kv_heads and head_dim (its dims are in mla)."""
    if model.heads is None:
        raise MosaicInputError("model.heads: not stated (null)")
    kv_heads, head_dim = model.kv_heads, model.head_dim
    if kv_heads is None:
        if attention is not AttentionKind.MLA and (measured or attention is AttentionKind.GQA):
            raise MosaicInputError("model.kv_heads: not stated (null)")
        kv_heads = model.heads
        why = "unused by MLA" if attention is AttentionKind.MLA else "MHA"
        notes.append(f"model.kv_heads not stated: set to heads ({why})")
    if head_dim is None:
        if attention is AttentionKind.MLA:
            assert model.mla is not None
            head_dim = model.mla.v_head_dim
            notes.append("model.head_dim unused by MLA (its dims are in model.mla): "
                         "set to v_head_dim")
        elif model.d_model % model.heads:
            raise MosaicInputError(f"model.head_dim: not stated and heads={model.heads} does "
                                   f"not divide d_model={model.d_model}")
        else:
            head_dim = model.d_model // model.heads
            notes.append(f"model.head_dim not stated: d_model/heads = {head_dim} assumed")
    return model.heads, kv_heads, head_dim


def _attention(model: ModelBlock) -> AttentionKind:
    if model.attention is not None:
        kind = AttentionKind(model.attention)
    elif model.mla is not None:
        kind = AttentionKind.MLA
    elif model.kv_heads is None or model.kv_heads == model.heads:
        kind = AttentionKind.MHA
    else:
        kind = AttentionKind.GQA
    if kind is AttentionKind.MLA and model.mla is None:
        raise MosaicInputError("model.mla: null, but MLA attention needs its dimensions")
    if kind is not AttentionKind.MLA and model.mla is not None:
        raise MosaicInputError(f"model.mla is given but model.attention is {kind.value!r}: "
                               "set attention: mla, or drop the mla block")
    return kind


def _moe(model: ModelBlock, notes: list[str]) -> MoEConfig | None:
    moe = model.moe
    if moe is None:
        return None
    if moe.shared_experts and moe.shared_expert_ffn is None:
        notes.append("model.moe.shared_expert_ffn not stated: expert_ffn assumed")
    return MoEConfig(
        experts=moe.experts, top_k=moe.top_k, expert_ffn=moe.expert_ffn,
        shared_experts=moe.shared_experts, shared_expert_ffn=moe.shared_expert_ffn,
        dense_layers=moe.dense_layers, moe_every=moe.moe_every, expert_bias=moe.expert_bias,
        router_bias=moe.router_bias, shared_expert_gate=moe.shared_expert_gate,
        capacity_factor=moe.capacity_factor,
        router=None if moe.router is None else RouterConfig(**moe.router.model_dump()))


def _ffn(model: ModelBlock, moe: MoEConfig | None, notes: list[str]) -> int:
    if model.ffn is not None:
        return model.ffn
    if moe is None:
        raise MosaicInputError("model.ffn: not stated (null) for a dense model")
    for name, pattern in (("hybrid_pattern", model.hybrid_pattern),
                          ("mtp_pattern", model.mtp_pattern)):
        if pattern is not None and HybridLayer.MLP.value in pattern:
            raise MosaicInputError(f"model.ffn: not stated (null), but model.{name} has MLP "
                                   "('-') layers that need it")
    if moe.dense_layers or moe.moe_every > 1:
        raise MosaicInputError("model.ffn: not stated (null), but the model has dense blocks "
                               f"(moe.dense_layers={moe.dense_layers}, "
                               f"moe.moe_every={moe.moe_every}) that need it")
    notes.append("model.ffn not stated (every block is MoE): moe.expert_ffn used as a "
                 "placeholder (no dense block uses it; the split factor reads 1, which the "
                 "loss law reads: state model.ffn for the model's own)")
    return moe.expert_ffn


# The model block's MTP field, whose unstated default a stack recipe may replace
# (config.layout.with_recipe_mtp_modules).
MTP_LAYERS_FIELD = "model.mtp_layers"


def _default(value: object, field: str, default: object, notes: list[str], why: str) -> object:
    if value is not None:
        return value
    notes.append(f"{_unstated(field)}: {default} assumed ({why})")
    return default


def _unstated(field: str) -> str:
    return f"{field} not stated"


def drop_unstated_note(notes: list[str], field: str) -> None:
    """Remove the note :func:`geometry_from_model` wrote for an unstated ``field`` (a stack
    recipe has supplied its value, and says so in its own note)."""
    notes[:] = [note for note in notes if not note.startswith(_unstated(field))]


def sliding_window_note(window: int) -> str:
    """What mosaic does with a sliding attention window: the kernels skip the out-of-window
    tiles (docs/evidence/gpt_oss_attention.md), but what GPT-OSS's sink attention costs is
    unmeasured and its runs already predict fast, so only the FLOP counts take it."""
    return (f"sliding window of {window} keys: FLOP counts take the window; step time and "
            "memory cost its layers' attention as full causal attention "
            "(docs/evidence/gpt_oss_attention.md)")


def geometry_modelling_notes(geometry: Geometry) -> list[str]:
    """What the performance model leaves out of a model it is given whole (e.g. a
    ``--backbone``): the notes a model block's conversion would add for these fields."""
    return [] if geometry.sliding_window is None else [sliding_window_note(
        geometry.sliding_window)]


def geometry_from_model(model: ModelBlock, notes: list[str], *, measured: bool) -> Geometry:
    """The :class:`Geometry` of a model block (rules: docs/schema.md)."""
    attention = _attention(model)
    heads, kv_heads, head_dim = _heads(model, attention, measured, notes)
    moe = _moe(model, notes)
    activation = _default(model.activation, "model.activation", PAPER_ACTIVATION, notes,
                          "the paper's FFN, A.1")
    vocab = _default(model.vocab, "model.vocab", PAPER_VOCAB, notes, "GPT-2 BPE, paper A.1")
    tied = _default(model.tied_embeddings, "model.tied_embeddings", False, notes, "untied")
    norm = _default(model.norm, "model.norm", "layernorm", notes, "the paper's pre-LN, A.1")
    mtp = _default(model.mtp_layers, MTP_LAYERS_FIELD, 0, notes, "no MTP modules")
    if model.sliding_window is not None:
        notes.append(sliding_window_note(model.sliding_window))
    mla = None if model.mla is None else MLAConfig(
        kv_lora_rank=model.mla.kv_lora_rank, qk_nope_head_dim=model.mla.qk_nope_head_dim,
        qk_rope_head_dim=model.mla.qk_rope_head_dim, v_head_dim=model.mla.v_head_dim,
        q_lora_rank=model.mla.q_lora_rank)
    return Geometry(
        layers=model.layers, d_model=model.d_model, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, ffn=_ffn(model, moe, notes), vocab=int(vocab),  # type: ignore[arg-type]
        glu=activation in GATED_ACTIVATIONS, activation=model.activation,
        tied_embeddings=bool(tied), attention=attention,
        mla=mla if attention is AttentionKind.MLA else None,
        gated_attention=model.gated_attention,
        attention_output_gate=model.attention_output_gate, norm=NormKind(norm), moe=moe,
        qk_norm=model.qk_norm, qk_norm_span=QKNormSpan(model.qk_norm_span),
        qkv_bias=model.qkv_bias, output_bias=model.output_bias,
        lm_head_bias=model.lm_head_bias,
        rope_base=model.rope_base, rope_fraction=model.rope_fraction,
        zero_centered_norm=model.zero_centered_norm,
        sliding_window=model.sliding_window, full_attention_every=model.full_attention_every,
        attention_sinks=model.attention_sinks, mtp_layers=int(mtp),  # type: ignore[arg-type]
        hybrid_pattern=model.hybrid_pattern, mtp_pattern=model.mtp_pattern,
        mamba=None if model.mamba is None else MambaConfig(**model.mamba.model_dump()),
        gdn=None if model.gdn is None else GatedDeltaNetConfig(**model.gdn.model_dump()),
    )


def model_document(geometry: Geometry, name: str | None = None) -> dict[str, object]:
    """The canonical ``model`` block of a geometry (the inverse of :func:`geometry_from_model`:
    loading it gives the same geometry). Flags at their default are left out."""
    document: dict[str, object] = {} if name is None else {"name": name}
    document |= {
        "layers": geometry.layers, "d_model": geometry.d_model, "heads": geometry.heads,
        "kv_heads": geometry.kv_heads, "head_dim": geometry.head_dim, "ffn": geometry.ffn,
        "activation": geometry.activation_name,
        "vocab": geometry.vocab,
        "tied_embeddings": geometry.tied_embeddings, "attention": str(geometry.attention),
        "norm": str(geometry.norm), "mtp_layers": geometry.mtp_layers,
    }
    for flag in ("gated_attention", "attention_output_gate", "qk_norm", "qkv_bias",
                 "output_bias", "lm_head_bias", "attention_sinks", "zero_centered_norm"):
        if getattr(geometry, flag):
            document[flag] = True
    if geometry.qk_norm_span is not QKNormSpan.HEAD:
        document["qk_norm_span"] = str(geometry.qk_norm_span)
    if geometry.sliding_window is not None:
        document["sliding_window"] = geometry.sliding_window
        if geometry.full_attention_every is not None:
            document["full_attention_every"] = geometry.full_attention_every
    if geometry.rope_base is not None:
        document["rope_base"] = geometry.rope_base
    if geometry.rope_fraction != 1.0:
        document["rope_fraction"] = geometry.rope_fraction
    if geometry.mla is not None:
        mla = geometry.mla
        document["mla"] = {"kv_lora_rank": mla.kv_lora_rank, "q_lora_rank": mla.q_lora_rank,
                           "qk_nope_head_dim": mla.qk_nope_head_dim,
                           "qk_rope_head_dim": mla.qk_rope_head_dim,
                           "v_head_dim": mla.v_head_dim}
    moe = geometry.moe
    if moe is not None:
        block: dict[str, object] = {
            "experts": moe.experts, "top_k": moe.top_k, "expert_ffn": moe.expert_ffn,
            "shared_experts": moe.shared_experts, "shared_expert_ffn": moe.shared_expert_ffn,
            "dense_layers": moe.dense_layers, "moe_every": moe.moe_every}
        for flag in ("expert_bias", "router_bias", "shared_expert_gate"):
            if getattr(moe, flag):
                block[flag] = True
        if moe.capacity_factor is not None:
            block["capacity_factor"] = moe.capacity_factor
        if moe.router is not None:
            block["router"] = asdict(moe.router)
        document["moe"] = block
    if geometry.hybrid_pattern is not None:
        document["hybrid_pattern"] = geometry.hybrid_pattern
    if geometry.mtp_pattern is not None:
        document["mtp_pattern"] = geometry.mtp_pattern
    if geometry.mamba is not None:
        mamba = geometry.mamba
        document["mamba"] = {"heads": mamba.heads, "head_dim": mamba.head_dim,
                             "state_dim": mamba.state_dim, "groups": mamba.groups,
                             "conv_kernel": mamba.conv_kernel, "chunk_size": mamba.chunk_size,
                             **({} if mamba.conv_bias else {"conv_bias": False})}
    if geometry.gdn is not None:
        gdn = geometry.gdn
        document["gdn"] = {"key_heads": gdn.key_heads, "value_heads": gdn.value_heads,
                           "key_head_dim": gdn.key_head_dim,
                           "value_head_dim": gdn.value_head_dim,
                           "conv_kernel": gdn.conv_kernel, "chunk_size": gdn.chunk_size}
    return document
