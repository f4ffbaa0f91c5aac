"""Other spellings of the job / run-record vocabulary, translated to :mod:`mosaic.config.blocks`.

Two kinds of rename:

- the paper's Appendix E listing names (``n_layers``, ``hidden_sz``, ``gbs``, a top-level
  ``moe:`` block, ...): the published input format of the paper's tool, accepted as written;
- mosaic's own earlier spellings (run records' ``parallel`` and top-level ``seq_len``, MLA's
  Megatron-Core ``qk_head_dim``, job files' ``data:`` block, ...): accepted until mosaic 0.2
  with one :class:`MosaicDeprecationWarning` per file naming each ``old -> new``.

Rules are document paths; a rename never overwrites a different value that is also given.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mosaic.errors import MosaicInputError, shown

REMOVED_IN = "mosaic 0.2"
_DROP = ()  # a rule whose target is empty discards the field (paper fields not modelled)


class MosaicDeprecationWarning(FutureWarning):
    """An input used a spelling that a later release will refuse (shown to users)."""


@dataclass(frozen=True)
class Rename:
    """``old`` path -> ``new`` path; ``deprecated`` False for the paper's listing names."""

    old: tuple[str, ...]
    new: tuple[str, ...]
    deprecated: bool
    value: Callable[[Any], Any] | None = None

    def label(self) -> str:
        target = ".".join(self.new) if self.new else "(dropped: not modelled)"
        return f"{'.'.join(self.old)} -> {target}"


def _glu(value: Any) -> Any:
    """Appendix E's ``glu`` flag -> activation (SwiGLU when gated, the paper's A.1)."""
    return {True: "swiglu", False: "gelu"}.get(value, value) if isinstance(value, bool) else value


def _paper(old: str, new: str, value: Callable[[Any], Any] | None = None) -> Rename:
    return Rename(tuple(old.split(".")), tuple(new.split(".")) if new else _DROP, False, value)


def _old(old: str, new: str) -> Rename:
    return Rename(tuple(old.split(".")), tuple(new.split(".")), True)


# The model block, wherever it appears (job files, --model files, run records).
MODEL_RULES: tuple[Rename, ...] = (
    _paper("moe", "model.moe"),
    *(_paper(f"model.{a}", f"model.{b}") for a, b in (
        ("n_layers", "layers"), ("hidden_sz", "d_model"), ("inter_sz", "ffn"),
        ("n_q_heads", "heads"), ("n_kv_heads", "kv_heads"), ("vocab_sz", "vocab"),
        ("tie_embeddings", "tied_embeddings"))),
    _paper("model.glu", "model.activation", _glu),
    _paper("model.sdpa_precision", ""),
    _paper("model.rotary_embeds", ""),
    _paper("model.dropout", ""),
    *(_paper(f"model.moe.{a}", f"model.moe.{b}") for a, b in (
        ("n_experts", "experts"), ("experts_per_token", "top_k"),
        ("expert_inter_sz", "expert_ffn"), ("moe_frequency", "moe_every"),
        ("n_shared_experts", "shared_experts"), ("shared_expert_inter_sz", "shared_expert_ffn"),
        ("n_dense_layers", "dense_layers"))),
    _paper("model.moe.expert_tp_degree", "parallelism.etp"),
    _old("model.mla.qk_head_dim", "model.mla.qk_nope_head_dim"),
)

JOB_RULES: tuple[Rename, ...] = (
    *MODEL_RULES,
    _paper("model.precision", "performance.precision"),
    _paper("data.gbs", "batch.global_seqs"),
    _paper("data.seqlen", "batch.seq_len"),
    _paper("data.microbatch_sz", "batch.micro_seqs"),
    _old("data.global_batch", "batch.global_seqs"),
    _old("data.seq_len", "batch.seq_len"),
    _old("data.micro_batch", "batch.micro_seqs"),
    _old("data", "batch"),  # anything left in data: (then refused as unknown by batch)
    _paper("performance.activation_checkpointing_type", "performance.checkpointing"),
    _paper("optimizer.optimizer_type", "optimizer.kind"),
    _paper("search.num_devices", "search.devices"),
    _paper("hardware.node_type", "hardware.system"),
    _old("hardware.precision", "performance.precision"),
    _old("parallelism.stack", "performance.stack"),
    _old("parallelism.fsdp_gather", "performance.fsdp_gather"),
    _old("parallelism.uneven_stages", "performance.uneven_stages"),
)

RECORD_RULES: tuple[Rename, ...] = (
    _old("parallel", "parallelism"),
    _old("seq_len", "batch.seq_len"),
    *MODEL_RULES,
)


def _lookup(document: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    node: Any = document
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def _without(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """Copy of ``document`` (copied along ``path`` only) without ``path``; empty parents go."""
    head, *rest = path
    result = dict(document)
    if rest:
        child = _without(result[head], tuple(rest))
        if child:
            result[head] = child
        else:
            del result[head]
    else:
        del result[head]
    return result


def _with(document: dict[str, Any], path: tuple[str, ...], value: Any, where: str) -> dict:
    """Copy of ``document`` with ``value`` at ``path`` (mappings are merged key by key)."""
    head, *rest = path
    result = dict(document)
    if rest:
        child = result.get(head)
        if child is None:
            child = {}
        if not isinstance(child, dict):
            raise MosaicInputError(f"{where}: {head}: expected a mapping, got "
                                   f"{type(child).__name__}")
        result[head] = _with(child, tuple(rest), value, f"{where}: {head}")
    elif isinstance(value, dict) and isinstance(result.get(head), dict):
        merged = dict(result[head])
        for key, item in value.items():
            merged = _with(merged, (key,), item, f"{where}: {head}")
        result[head] = merged
    elif head in result and result[head] != value:
        raise MosaicInputError(f"{where}: {head} = {shown(result[head])} is given twice with "
                               f"another spelling (= {shown(value)}); give it once")
    else:
        result[head] = value
    return result


def canonical_document(document: dict[str, Any], rules: Iterable[Rename], where: str,
                       used: set[str]) -> dict[str, Any]:
    """``document`` in the canonical spelling; deprecated renames applied are added to ``used``.

    The input is not modified; only the mappings on a renamed path are copied.
    """
    for rule in rules:
        found, value = _lookup(document, rule.old)
        if not found:
            continue
        document = _without(document, rule.old)
        if rule.new:
            value = rule.value(value) if rule.value else value
            document = _with(document, rule.new, value, where)
        if rule.deprecated:
            used.add(rule.label())
    return document


def canonical_path(path: tuple[str, ...], rules: Iterable[Rename], used: set[str]
                   ) -> tuple[tuple[str, ...], Callable[[Any], Any] | None]:
    """A ``--set`` path in the canonical spelling and the value rule (if any) on the way."""
    value_rule = None
    for rule in rules:
        if path[: len(rule.old)] == rule.old:
            if not rule.new:
                return (), None
            path = rule.new + path[len(rule.old):]
            value_rule = rule.value or value_rule
            if rule.deprecated:
                used.add(rule.label())
    return path, value_rule


def warn_deprecated(used: set[str], where: str) -> None:
    """One warning naming every deprecated ``old -> new`` spelling a file used."""
    if used:
        warnings.warn(
            f"{where}: deprecated spelling{'s' if len(used) > 1 else ''} "
            f"{', '.join(sorted(used))} (accepted until {REMOVED_IN}; docs/schema.md)",
            MosaicDeprecationWarning, stacklevel=3)
