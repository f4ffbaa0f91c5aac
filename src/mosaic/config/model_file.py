"""A model geometry from a file: a HuggingFace ``config.json`` or a mosaic model YAML."""

from __future__ import annotations

from pathlib import Path

from mosaic.arch import Geometry
from mosaic.arch.hf_import import is_hf_config_file, load_hf_config
from mosaic.config.model_schema import geometry_from_document
from mosaic.schema_validation import load_yaml_mapping


def load_model_file(path: Path) -> Geometry:
    """Geometry of a HF ``config.json`` (by its .json suffix) or of a mosaic YAML file."""
    if is_hf_config_file(path):
        return load_hf_config(path)
    return geometry_from_document(load_yaml_mapping(path), str(path))
