"""Turn pydantic validation errors and YAML problems into one line a person can act on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from mosaic.errors import MosaicInputError
from mosaic.yaml_errors import describe_yaml_error

SchemaT = TypeVar("SchemaT", bound=BaseModel)


def describe_validation_error(exc: ValidationError, where: str) -> str:
    """First problem of ``exc`` as "<where>: <field path>: <message> (got <value>)"."""
    first = exc.errors()[0]
    field_path = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    got = first.get("input")
    detail = "" if first["type"] == "missing" else f" (got {got!r})"
    more = len(exc.errors()) - 1
    suffix = f"; and {more} more problem{'s' if more > 1 else ''}" if more else ""
    return f"{where}: {field_path}: {message}{detail}{suffix}"


def validate_mapping(schema: type[SchemaT], data: Any, where: str) -> SchemaT:
    """Validate ``data`` against ``schema`` or raise a one-line MosaicInputError."""
    if not isinstance(data, dict):
        raise MosaicInputError(f"{where}: expected a mapping, got {type(data).__name__}")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise MosaicInputError(describe_validation_error(exc, where)) from None


def load_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file whose top level is a mapping; clear errors otherwise."""
    path = Path(path)
    if not path.is_file():
        raise MosaicInputError(f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise MosaicInputError(f"{path}: malformed YAML{describe_yaml_error(exc)}") from None
    if data is None:
        raise MosaicInputError(f"{path}: file is empty")
    if not isinstance(data, dict):
        raise MosaicInputError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data
