"""`--model FILE`: a HuggingFace config.json or a mosaic YAML model, for any command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.arch import Geometry
from mosaic.arch.hf_import import is_hf_config_file, load_hf_config
from mosaic.config.model_schema import geometry_from_document
from mosaic.schema_validation import load_yaml_mapping

ModelOption = Annotated[Path | None, typer.Option(
    "--model", help="model geometry: a HuggingFace config.json, or a YAML file with model: "
                    "and moe: blocks; replaces the job's model")]


def load_model_file(path: Path) -> Geometry:
    """Geometry of a HF ``config.json`` (by its .json suffix) or of a mosaic YAML file."""
    if is_hf_config_file(path):
        return load_hf_config(path)
    return geometry_from_document(load_yaml_mapping(path), str(path))


def model_block(path: Path | None) -> dict[str, Any] | None:
    """The canonical ``model`` block of ``--model FILE`` (None when not given): it replaces
    the job file's model before ``--set`` overrides and validation, so ``--set model.*``
    edits it and a job file may leave its own model out."""
    if path is None:
        return None
    from mosaic.config.convert import model_document

    return model_document(load_model_file(path))
