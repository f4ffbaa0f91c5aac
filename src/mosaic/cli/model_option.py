"""`--model FILE`: a HuggingFace config.json or a mosaic YAML model, for any command."""

from __future__ import annotations

from dataclasses import replace
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


def with_model(spec: Any, path: Path | None) -> Any:
    """A job spec whose workload uses the geometry in ``path`` (unchanged when None)."""
    if path is None:
        return spec
    return replace(spec, workload=replace(spec.workload, geometry=load_model_file(path)))
