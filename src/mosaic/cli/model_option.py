"""`--model FILE`: a HuggingFace config.json or a mosaic YAML model, for any command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.config.model_file import load_model_file

ModelOption = Annotated[Path | None, typer.Option(
    "--model", help="model geometry: a HuggingFace config.json, or a YAML file with model: "
                    "and moe: blocks; replaces the job's model")]


def model_block(path: Path | None) -> dict[str, Any] | None:
    """The canonical ``model`` block of ``--model FILE`` (None when not given): it replaces
    the job file's model before ``--set`` overrides and validation, so ``--set model.*``
    edits it and a job file may leave its own model out."""
    if path is None:
        return None
    from mosaic.config.convert import model_document

    return model_document(load_model_file(path))
