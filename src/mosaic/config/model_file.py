"""A model geometry from a file: a HuggingFace ``config.json`` or a mosaic model YAML."""

from __future__ import annotations

from pathlib import Path

from mosaic.arch import Geometry
from mosaic.arch.hf_import import (
    MAX_MODEL_FILE_BYTES,
    geometry_from_hf_config,
    is_hf_config_file,
    load_hf_config,
)
from mosaic.config.model_schema import geometry_from_document
from mosaic.errors import MosaicInputError
from mosaic.schema_validation import load_yaml_mapping


def load_model_file(path: Path) -> Geometry:
    """Geometry of a HF ``config.json`` (by its .json suffix, or a file of any name whose
    top level holds ``model_type`` and no ``model`` block), of a model snapshot folder's
    ``config.json``, or of a mosaic YAML file. A trial's config saved as ``.cfg`` or without
    a suffix read as a mosaic YAML ('missing required block model'), and a snapshot folder
    was refused as 'a directory; expected a YAML file'."""
    path = Path(path)
    if path.is_dir():
        inside = path / "config.json"
        if not inside.is_file():
            raise MosaicInputError(f"{path}: a folder without a config.json; give a "
                                   "HuggingFace config.json or a mosaic model YAML file")
        path = inside
    if is_hf_config_file(path):
        return load_hf_config(path)
    # YAML reads JSON too; a model file of any name is kilobytes, bounded as a config.json
    document = load_yaml_mapping(path, max_bytes=MAX_MODEL_FILE_BYTES)
    if "model_type" in document and "model" not in document:
        return geometry_from_hf_config(document, str(path))
    return geometry_from_document(document, str(path))
