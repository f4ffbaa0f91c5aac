"""What a remembered cost term reads of its arguments (``plan_key(remember=...)``).

The co-design search scores geometries that differ only in the MoE top_k on one shared
enumeration of plans (mosaic.plan.search._shared_plans). Terms that never read the active
expert count (parameter counts and their optimizer states, the dense block, the
vocabulary stages, the data-parallel collectives) then compute the same per-key values
for every top_k; :func:`without_top_k` is their memo key, so the values are computed once
per enumeration. tests/perf/test_memo_keys.py checks, term by term, that the values do
not change with top_k.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import replace
from typing import Any

from mosaic.arch import Geometry
from mosaic.errors import MosaicInputError
from mosaic.perf.workload import Workload


def without_top_k(value: Any) -> Any:
    """``value`` with the MoE top_k set to 1 when it is a Workload or a Geometry; any
    other argument unchanged."""
    if isinstance(value, Workload | Geometry):
        return _top_k_one(value)
    return value


@functools.lru_cache(maxsize=256)
def _top_k_one(value: Workload | Geometry) -> Workload | Geometry:
    geometry = value.geometry if isinstance(value, Workload) else value
    moe = geometry.moe
    if moe is None or moe.top_k == 1:
        return value
    # (a geometry that does not validate with top_k 1 keeps its own key: shared with no one)
    with contextlib.suppress(MosaicInputError, ValueError):
        one = replace(geometry, moe=replace(moe, top_k=1))
        return replace(value, geometry=one) if isinstance(value, Workload) else one
    return value
