"""`mosaic arch`: parameter and FLOP accounting of one geometry."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.arch import (
    AttentionKind,
    Geometry,
    MoEConfig,
    ParameterCounts,
    RouterConfig,
    attention_flops_per_token,
    count_parameters,
    gdn_flops_per_token,
    ladder_geometry,
    layer_breakdown,
    lm_head_flops_per_token,
    model_flops_per_token,
    ssd_scan_flops_per_token,
)
from mosaic.arch.hf_import import MAX_MODEL_FILE_BYTES, is_hf_config_file
from mosaic.arch.ladder import PAPER_DENSE_LAYERS, PAPER_SHARED_EXPERTS, expert_width
from mosaic.cli.common import JsonFlag, guarded, print_json, print_key_value_table, print_table
from mosaic.config.model_file import load_model_file
from mosaic.errors import MosaicInputError
from mosaic.limits import check_range
from mosaic.schema_validation import load_yaml_mapping


def geometry_from_options(
    *,
    config: Path | None,
    q: int | None,
    layers: int | None,
    d_model: int | None,
    heads: int | None,
    kv_heads: int | None,
    head_dim: int | None,
    ffn: int | None,
    vocab: int | None,
    experts: int | None,
    top_k: int | None,
    split_factor: int | None,
    expert_ffn: int | None,
    shared_experts: int | None,
    dense_layers: int | None,
    moe_every: int,
    gated_attention: bool,
    tied_embeddings: bool,
    glu: bool,
) -> Geometry:
    """Resolve a geometry from a YAML file, a ladder seed, or explicit dimensions."""
    if config is not None:
        given = [flag for flag, value in (
            ("--q", q), ("--layers", layers), ("--d-model", d_model), ("--heads", heads),
            ("--kv-heads", kv_heads), ("--head-dim", head_dim), ("--ffn", ffn),
            ("--vocab", vocab), ("--experts", experts), ("--top-k", top_k),
            ("--split-factor", split_factor), ("--expert-ffn", expert_ffn),
            ("--shared-experts", shared_experts), ("--dense-layers", dense_layers),
            ("--moe-every", None if moe_every == 1 else moe_every),
            ("--gated-attention", gated_attention or None),
            ("--tied-embeddings", tied_embeddings or None), ("--no-glu", None if glu else 1))
            if value is not None]
        if given:
            raise MosaicInputError(f"--model {config} fixes the geometry; drop "
                                   f"{', '.join(given)} (or edit the file)")
        return load_model_file(config)
    if split_factor is not None and expert_ffn is not None:
        raise MosaicInputError("give either --split-factor or --expert-ffn, not both")
    if (top_k is None) != (experts is None):
        raise MosaicInputError("--experts and --top-k go together")
    _check_flag_ranges(kv_heads=kv_heads, head_dim=head_dim, vocab=vocab, experts=experts,
                       top_k=top_k, split_factor=split_factor, expert_ffn=expert_ffn,
                       shared_experts=shared_experts, dense_layers=dense_layers,
                       moe_every=moe_every)
    moe_only = [flag for flag, value in (
        ("--split-factor", split_factor), ("--expert-ffn", expert_ffn),
        ("--shared-experts", shared_experts), ("--dense-layers", dense_layers),
        ("--moe-every", None if moe_every == 1 else moe_every)) if value is not None]
    if experts is None and moe_only:
        raise MosaicInputError(f"{', '.join(moe_only)} shape MoE blocks, and without "
                               "--experts and --top-k the model is dense; give them, or drop "
                               f"{', '.join(moe_only)}")
    if q is not None:
        explicit = [layers, d_model, heads, kv_heads, head_dim, ffn, expert_ffn]
        if any(value is not None for value in explicit):
            raise MosaicInputError(
                "--q fixes the backbone; drop --layers/--d-model/--heads/--kv-heads/"
                "--head-dim/--ffn/--expert-ffn"
            )
        seed = ladder_geometry(
            q,
            experts,
            top_k,
            1 if split_factor is None else split_factor,
            shared_experts=PAPER_SHARED_EXPERTS if shared_experts is None else shared_experts,
            dense_layers=PAPER_DENSE_LAYERS if dense_layers is None else dense_layers,
            gated_attention=gated_attention,
            **({} if vocab is None else {"vocab": vocab}),
        )
        # the ladder's backbone with the FFN, embedding and MoE-placement choices given
        return replace(seed, glu=glu, tied_embeddings=tied_embeddings,
                       moe=None if seed.moe is None else replace(seed.moe, moe_every=moe_every))
    missing = [
        name
        for name, value in {
            "--layers": layers,
            "--d-model": d_model,
            "--heads": heads,
            "--ffn": ffn,
        }.items()
        if value is None
    ]
    if missing:
        raise MosaicInputError(
            f"give --q (ladder seed), --config FILE, or all of {', '.join(missing)}"
        )
    for flag, value, kind in (("--layers", layers, "layers"), ("--d-model", d_model, "width"),
                              ("--heads", heads, "width"), ("--ffn", ffn, "width")):
        check_range(flag, value, kind, integer=True)  # also narrows None away
    assert layers and d_model and heads and ffn
    if head_dim is None:
        if d_model % heads:
            raise MosaicInputError(
                f"--heads ({heads}) must divide --d-model ({d_model}) unless --head-dim is given"
            )
        head_dim = d_model // heads
    kv = heads if kv_heads is None else kv_heads
    moe = None
    if experts is not None:
        assert top_k is not None
        width = (expert_ffn if expert_ffn is not None
                 else expert_width(ffn, 1 if split_factor is None else split_factor))
        moe = MoEConfig(
            experts=experts,
            top_k=top_k,
            expert_ffn=width,
            shared_experts=0 if shared_experts is None else shared_experts,
            dense_layers=0 if dense_layers is None else dense_layers,
            moe_every=moe_every,
        )
    return Geometry(
        layers=layers,
        d_model=d_model,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        ffn=ffn,
        vocab=50257 if vocab is None else vocab,
        glu=glu,
        tied_embeddings=tied_embeddings,
        attention=AttentionKind.MHA if kv == heads else AttentionKind.GQA,
        gated_attention=gated_attention,
        moe=moe,
    )


def _check_flag_ranges(**flags: int | None) -> None:
    """Each stated size flag inside its physical range: 0 is refused, not read as unset."""
    kinds = {"kv_heads": ("width", 1), "head_dim": ("width", 1), "vocab": ("vocab", 1),
             "experts": ("experts", 1), "top_k": ("experts", 1),
             "split_factor": ("split_factor", 1), "expert_ffn": ("width", 1),
             "shared_experts": ("experts", 0), "dense_layers": ("layers", 0),
             "moe_every": ("layers", 1)}
    for name, value in flags.items():
        if value is not None:
            kind, low = kinds[name]
            check_range("--" + name.replace("_", "-"), value, kind, integer=True, low=low)


DEFAULT_SEQ_LEN = 2048  # the paper's ladder context (Appendix A.1)


def _file_seq_len(config: Path | None) -> int | None:
    """The sequence length a job file states (``batch.seq_len`` in any accepted spelling),
    for its attention FLOPs; None for a HF config or a file without one."""
    if config is None or is_hf_config_file(config) or not Path(config).is_file():
        # a pipe or FIFO (`--config <(...)`) can be read once: it is the geometry loader's
        return None
    from mosaic.config.job_schema import canonical_job_document

    try:  # bounded as the geometry loader bounds a model file: one over it is refused
        # there, unread (a review: a 28 MiB file was parsed here for 112 s first)
        document = canonical_job_document(
            load_yaml_mapping(config, max_bytes=MAX_MODEL_FILE_BYTES), str(config), set())
    except MosaicInputError:
        return None  # a model-only file: the geometry loader reports its own errors
    value = (document.get("batch") or {}).get("seq_len")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def geometry_summary(geometry: Geometry, seq_len: int) -> dict[str, Any]:
    """The JSON document `mosaic arch --json` prints."""
    counts = count_parameters(geometry)
    moe = geometry.moe
    return {
        "layers": geometry.layers,
        "d_model": geometry.d_model,
        "heads": geometry.heads,
        "kv_heads": geometry.kv_heads,
        "head_dim": geometry.head_dim,
        "ffn": geometry.ffn,
        "vocab": geometry.vocab,
        "attention": str(geometry.attention),
        "experts": moe.experts if moe else None,
        "top_k": moe.top_k if moe else None,
        "expert_ffn": moe.expert_ffn if moe else None,
        "shared_experts": moe.shared_experts if moe else 0,
        "shared_expert_ffn": moe.shared_width if moe and moe.shared_experts else None,
        "mtp_layers": geometry.mtp_layers,
        "features": geometry_features(geometry),
        # the trained router as stated (None: not stated, the stack's)
        "router": asdict(moe.router) if moe and moe.router else None,
        "dense_layers": geometry.dense_layer_count,
        "moe_layers": geometry.moe_layer_count,
        "n_total": int(counts.n_total),
        "n_active": int(counts.n_active),
        "n_total_with_embedding": int(counts.n_total_with_embedding),
        "n_active_with_embedding": int(counts.n_active_with_embedding),
        "n_active_with_head": int(counts.n_active_with_head),
        "n_embedding": int(counts.n_embedding),
        "router_params": int(counts.routers),
        "mtp_params": int(counts.mtp),
        "sparsity": float(counts.sparsity),
        "split_factor": geometry.split_factor,
        "seq_len": seq_len,
        "sliding_window": geometry.sliding_window,
        "window_layers": geometry.window_layer_count,
        "flops_per_token": float(model_flops_per_token(counts)),
        "attention_flops_per_token": attention_flops_per_token(geometry, seq_len, causal=True),
        "lm_head_flops_per_token": lm_head_flops_per_token(geometry),
        **_hybrid_summary(geometry, counts),
    }


def geometry_features(geometry: Geometry) -> list[str]:
    """The geometry's features beyond its sizes, in words, each counted in its parameters
    and FLOPs (a trial checked an import's QK norm, biases, sinks and tied embeddings only
    through `export --to yaml`)."""
    named = [
        (True, f"{geometry.norm}"),
        (True, geometry.activation or ("gated FFN" if geometry.glu else "plain FFN")),
        (geometry.mla is not None, "MLA"),
        (geometry.tied_embeddings, "tied embeddings"),
        (geometry.qk_norm, f"QK norm per {geometry.qk_norm_span}"),
        (geometry.qkv_bias, "q/k/v biases"),
        (geometry.output_bias, "attention output bias"),
        (geometry.lm_head_bias, "LM-head bias"),
        (geometry.attention_sinks, "attention sinks"),
        (geometry.gated_attention, "gated attention"),
        (geometry.attention_output_gate, "attention output gate"),
        (geometry.mtp_layers > 0, f"{geometry.mtp_layers} MTP module(s)"),
    ]
    return [text for present, text in named if present]


def _hybrid_summary(geometry: Geometry, counts: ParameterCounts) -> dict[str, Any]:
    """A hybrid model's layer mix, Mamba and gated DeltaNet parameters and their sequence
    mixing FLOPs (empty otherwise)."""
    if not geometry.is_hybrid:
        return {}
    return {
        "hybrid_pattern": geometry.hybrid_pattern,
        "mamba_layers": geometry.mamba_layer_count,
        "gdn_layers": geometry.gdn_layer_count,
        "attention_layers": geometry.attention_layer_count,
        "mamba_params_per_layer": int(counts.mamba_per_layer),
        "gdn_params_per_layer": int(counts.gdn_per_layer),
        "ssd_scan_flops_per_token": ssd_scan_flops_per_token(geometry),
        "gdn_flops_per_token": gdn_flops_per_token(geometry),
    }


def _param_count(value: float) -> str:
    """Billions to three decimals; a model below 0.1 B in whole parameters (a CPU ladder
    rung read '0.000 B')."""
    return f"{value / 1e9:,.3f} B" if abs(value) >= 1e8 else f"{value:,.0f}"


def _dense_width_text(summary: dict[str, Any]) -> str:
    """The dense FFN width, and what it is for when no layer uses it: a hybrid's, or an
    all-MoE model's, where it is only the reference of the split factor G = d_ff / expert
    width (the paper's Eq. 3; an HF config's intermediate_size; a trial read Qwen3's 6144
    as a dense block's)."""
    if summary["dense_layers"]:
        return str(summary["ffn"])
    if summary.get("hybrid_pattern"):
        return f"{summary['ffn']} (no MLP layers use it)"
    if summary["experts"]:
        return (f"{summary['ffn']} (no dense block: the reference width of G = d_ff / expert "
                "width, which the law reads)")
    return str(summary["ffn"])


def _print_summary(summary: dict[str, Any]) -> None:
    rows = [
        (
            "layers / d_model / heads (kv)",
            f"{summary['layers']} / {summary['d_model']} / "
            f"{summary['heads']} ({summary['kv_heads']})",
        ),
        ("dense FFN width", _dense_width_text(summary)),
    ]
    if summary.get("hybrid_pattern"):
        rows += [
            ("hybrid layers: Mamba / gated DeltaNet / attention / MLP / MoE",
             f"{summary['mamba_layers']} / {summary['gdn_layers']} / "
             f"{summary['attention_layers']} / {summary['dense_layers']} / "
             f"{summary['moe_layers']}"),
            *([("Mamba parameters per layer", f"{summary['mamba_params_per_layer']:,}")]
              if summary["mamba_layers"] else []),
            *([("gated DeltaNet parameters per layer", f"{summary['gdn_params_per_layer']:,}")]
              if summary["gdn_layers"] else []),
        ]
    if summary["experts"]:
        rows += [
            ("experts E / top-K", f"{summary['experts']} / {summary['top_k']}"),
            (
                "expert width / split factor G",
                f"{summary['expert_ffn']} / {summary['split_factor']:g}",
            ),
            (
                "shared experts, dense / MoE blocks",
                f"{summary['shared_experts']}"
                + (f" of width {summary['shared_expert_ffn']}"
                   if summary.get("shared_expert_ffn") else "")
                + f", {summary['dense_layers']} / {summary['moe_layers']}",
            ),
        ]
        if summary.get("router"):
            rows.append(("router", RouterConfig(**summary["router"]).describe()))
    if summary.get("features"):
        rows.append(("features", ", ".join(summary["features"])))
    rows += [
        ("N_total (non-embedding)", _param_count(summary["n_total"])),
        ("N_active (non-embedding)", _param_count(summary["n_active"])),
        ("N_total with embedding", _param_count(summary["n_total_with_embedding"])),
        ("N_active with embedding", _param_count(summary["n_active_with_embedding"])),
        ("N_active with LM head, no input lookup",
         _param_count(summary["n_active_with_head"])),
        ("router parameters", f"{summary['router_params']:,}"),
        *([("MTP modules (not in N_total)", _param_count(summary["mtp_params"]))]
          if summary.get("mtp_params") else []),
        ("sparsity S = 1 - N_act/N_tot", f"{summary['sparsity']:.4f}"),
        ("model FLOPs/token (6·N_act)", f"{summary['flops_per_token']:.4e}"),
        (
            f"attention FLOPs/token (causal, T={summary['seq_len']}"
            + (f"; {summary['sliding_window']}-key window on {summary['window_layers']} layers"
               if summary.get("sliding_window") else "") + ")",
            f"{summary['attention_flops_per_token']:.4e}",
        ),
        ("LM-head FLOPs/token", f"{summary['lm_head_flops_per_token']:.4e}"),
        *([("SSD-scan FLOPs/token (Mamba layers)", f"{summary['ssd_scan_flops_per_token']:.4e}")]
          if summary.get("mamba_layers") else []),
        *([("delta-rule FLOPs/token (gated DeltaNet layers)",
            f"{summary['gdn_flops_per_token']:.4e}")] if summary.get("gdn_layers") else []),
    ]
    print_key_value_table("Architecture", rows)


def arch(
    config: Annotated[Path | None, typer.Option(
        "--config", "--model",
        help="HuggingFace config.json, or YAML file with model: and moe: blocks")] = None,
    q: Annotated[int | None, typer.Option("--q", help="ladder seed q (Sec. 7.1)")] = None,
    layers: Annotated[int | None, typer.Option(help="transformer blocks")] = None,
    d_model: Annotated[int | None, typer.Option(help="residual width d")] = None,
    heads: Annotated[int | None, typer.Option(help="query heads")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="key/value heads (GQA)")] = None,
    head_dim: Annotated[int | None, typer.Option(help="per-head width")] = None,
    ffn: Annotated[int | None, typer.Option(help="dense FFN width d_ff")] = None,
    vocab: Annotated[int | None, typer.Option(help="vocabulary size")] = None,
    experts: Annotated[int | None, typer.Option(help="routed experts E")] = None,
    top_k: Annotated[int | None, typer.Option(help="experts per token K")] = None,
    split_factor: Annotated[int | None, typer.Option(help="G = d_ff / d_expert")] = None,
    expert_ffn: Annotated[int | None, typer.Option(help="routed expert width d_expert")] = None,
    shared_experts: Annotated[
        int | None, typer.Option(help="shared experts (ladder default 1)")
    ] = None,
    dense_layers: Annotated[
        int | None, typer.Option(help="leading dense blocks (ladder default 1)")
    ] = None,
    moe_every: Annotated[int, typer.Option(help="every n-th block is MoE")] = 1,
    gated_attention: Annotated[bool, typer.Option(help="per-head sigmoid output gate")] = False,
    tied_embeddings: Annotated[bool, typer.Option(help="share embedding and LM head")] = False,
    glu: Annotated[bool, typer.Option(help="gated (SwiGLU) FFN")] = True,
    seq_len: Annotated[int | None, typer.Option(
        help="sequence length for attention FLOPs [default: a job file's batch.seq_len, "
             "else 2048]")] = None,
    per_layer: Annotated[bool, typer.Option(help="add the per-block breakdown")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Exact parameter counts, sparsity and FLOPs per token of a transformer geometry."""
    if seq_len is None:
        seq_len = _file_seq_len(config) or DEFAULT_SEQ_LEN
    check_range("--seq-len", seq_len, "seq_len", integer=True)
    geometry = geometry_from_options(
        config=config,
        q=q,
        layers=layers,
        d_model=d_model,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=vocab,
        experts=experts,
        top_k=top_k,
        split_factor=split_factor,
        expert_ffn=expert_ffn,
        shared_experts=shared_experts,
        dense_layers=dense_layers,
        moe_every=moe_every,
        gated_attention=gated_attention,
        tied_embeddings=tied_embeddings,
        glu=glu,
    )
    summary = geometry_summary(geometry, seq_len)
    breakdown = (
        [
            vars(row) | {"total": row.total, "active": row.active}
            for row in layer_breakdown(geometry)
        ]
        if per_layer
        else None
    )
    if json_output:
        print_json(summary | ({"per_layer": breakdown} if breakdown else {}))
        return
    _print_summary(summary)
    if breakdown:
        hybrid = geometry.is_hybrid
        mixers = [(name, key) for name, key, present in (
            ("Mamba", "mamba", geometry.mamba is not None),
            ("gated DeltaNet", "gdn", geometry.gdn is not None)) if present]
        columns = ["block", "kind", "attention", *(name for name, _ in mixers), "FFN total",
                   "FFN active", "router"]
        print_table(
            "Per-layer parameters" if hybrid else "Per-block parameters",
            columns,
            [
                [
                    str(r["index"]),
                    r["kind"],
                    f"{r['attention']:,}",
                    *(f"{r[key]:,}" for _, key in mixers),
                    f"{r['ffn_total']:,}",
                    f"{r['ffn_active']:,}",
                    f"{r['router']:,}",
                ]
                for r in breakdown
            ],
        )


def register(app: typer.Typer) -> None:
    """Attach `mosaic arch` to the root command."""
    app.command("arch")(guarded(arch))
