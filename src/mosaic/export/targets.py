"""The export targets: name -> renderer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mosaic.errors import MosaicInputError
from mosaic.export.spec import ExportSpec


@dataclass(frozen=True)
class ExportResult:
    """A rendered launch config and the settings the target could not express."""

    target: str
    text: str
    file_suffix: str
    unsupported: list[str] = field(default_factory=list)


def _renderers() -> dict[str, Callable[[ExportSpec], ExportResult]]:
    from mosaic.export import maxtext, megatron, nemo, torchtitan

    return {"megatron": megatron.render, "nemo": nemo.render,
            "torchtitan": torchtitan.render, "maxtext": maxtext.render}


TARGETS = ("megatron", "nemo", "torchtitan", "maxtext")


def export(spec: ExportSpec, target: str) -> ExportResult:
    """Render ``spec`` for ``target`` (one of :data:`TARGETS`)."""
    renderers = _renderers()
    if target not in renderers:
        raise MosaicInputError(f"--to {target!r} is not a target; allowed: {', '.join(TARGETS)}")
    return renderers[target](spec)


def header_lines(spec: ExportSpec, target: str, unsupported: list[str]) -> list[str]:
    """Comment lines (without the comment marker) that open every exported file."""
    g = spec.geometry
    lines = [
        f"{target} launch config written by `mosaic export` from {spec.source or 'a job'}",
        f"{spec.n_devices} GPUs = tp {spec.tp} x pp {spec.pp} x cp {spec.cp} x dp {spec.dp}; "
        f"ep {spec.ep}, etp {spec.etp}, vpp {spec.vpp}",
        f"model: {g.layers} layers, d_model {g.d_model}, {g.heads} heads ({g.kv_heads} kv, "
        f"head_dim {g.head_dim}), ffn {g.ffn}, vocab {g.vocab}"
        + (f", {g.moe.experts} experts top-{g.moe.top_k} width {g.moe.expert_ffn}, "
           f"{g.moe.shared_experts} shared, {g.moe.dense_layers} dense-first"
           if g.moe else ""),
        f"batch: {spec.global_seqs} x {spec.seq_len} tokens, micro-batch {spec.micro_seqs}; "
        f"{spec.precision}; recompute {spec.checkpointing}; sharding {spec.sharding}; "
        f"dispatcher {spec.dispatcher}",
    ]
    lines += [f"NOT EXPRESSED: {item}" for item in unsupported]
    return lines
