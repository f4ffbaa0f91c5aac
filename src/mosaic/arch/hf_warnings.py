"""The warnings the HuggingFace config importer (:mod:`mosaic.arch.hf_import`) and its family
builders (:mod:`mosaic.arch.hf_families`) give."""

from __future__ import annotations

import warnings

from mosaic.arch.hf_fields import ConfigFields


class SlidingWindowIgnoredWarning(UserWarning):
    """A config's sliding-window attention that mosaic's geometry cannot hold."""


class IgnoredFieldWarning(UserWarning):
    """A config field the transformers model class itself ignores, ignored here too."""


class UnmodelledFieldWarning(UserWarning):
    """A config field or part of the model that mosaic's geometry leaves out (fields never
    read, a vision tower, a sparse-attention indexer, chunked attention)."""


class ModelTypeReadAsWarning(UserWarning):
    """A config whose model_type is not a supported family, read as the family its
    ``architectures`` class belongs to."""


def warn_mtp_left_out(fields: ConfigFields, field: str, count: int, family: str) -> None:
    """Say that ``count`` multi-token-prediction modules a config states (``field``) are left
    out: the HF model has none, so neither the counts nor the costs hold them."""
    if count:
        warnings.warn(f"{fields.where}: {field} {count}: {family} multi-token-prediction "
                      "modules are not part of the HF model and are left out of the counts "
                      "and costs", UnmodelledFieldWarning, stacklevel=5)
