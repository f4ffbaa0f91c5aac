"""Where and why a YAML document failed to parse, for one-line user errors."""

from __future__ import annotations

import yaml


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """' at line L, column C: problem' (the position only when PyYAML knows it)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}: {problem}"
