"""A model from a YAML document: its ``model:`` block (any accepted spelling).

The block is :class:`mosaic.config.blocks.ModelBlock`; the paper's Appendix E listing
(``n_layers``, ``hidden_sz``, a separate ``moe:`` block, ...) loads as written.
"""

from __future__ import annotations

from typing import Any

from mosaic.arch.geometry import Geometry
from mosaic.config.blocks import ModelBlock
from mosaic.config.convert import geometry_from_model
from mosaic.config.spelling import JOB_RULES, canonical_document, warn_deprecated
from mosaic.errors import MosaicInputError
from mosaic.schema_validation import validate_mapping


def model_block_from_document(document: dict[str, Any], where: str,
                              deprecated: set[str] | None = None) -> ModelBlock:
    """The validated model block of a document holding ``model:`` (and the paper's ``moe:``).

    Deprecated spellings are added to ``deprecated`` (warned about here when None).
    """
    used: set[str] = set() if deprecated is None else deprecated
    parts = {key: document[key] for key in ("model", "moe") if key in document}
    canonical = canonical_document(parts, JOB_RULES, where, used)
    if deprecated is None:
        warn_deprecated(used, where)
    if "model" not in canonical:
        raise MosaicInputError(f"{where}: missing required block 'model'")
    return validate_mapping(ModelBlock, canonical["model"], f"{where}: model")


def geometry_from_document(document: dict[str, Any], where: str) -> Geometry:
    """Geometry from a parsed YAML document holding ``model:`` (rules: docs/schema.md)."""
    block = model_block_from_document(document, where)
    try:
        return geometry_from_model(block, [], measured=False)
    except MosaicInputError as exc:
        raise MosaicInputError(f"{where}: {exc}") from None
