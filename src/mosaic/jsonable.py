"""Plain JSON values from numpy results: one conversion for the CLI, the studio and the
reports."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def to_jsonable(value: Any, whole_bytes: bool = False) -> Any:
    """Convert numpy scalars/arrays and non-finite floats into plain JSON values.

    A number under a key ending in ``bytes`` (``memory_bytes``, ``headroom_bytes``, each
    entry of ``memory_breakdown_bytes``) is a whole number of bytes: a model's 75860332219.57
    or a headroom's 8493299999.999998 is written rounded (a trial read them as a units slip).
    """
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, whole_bytes or str(k).endswith("bytes"))
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v, whole_bytes) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v, whole_bytes) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if whole_bytes:
            return round(value)
    return value
