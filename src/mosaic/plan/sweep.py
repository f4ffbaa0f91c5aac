"""Budget sweeps over the training window or the cluster size (paper Sec. 7.4, Fig. 11).

A window sweep profiles the layouts once (throughput does not depend on the window,
Appendix D.3.1) and rescores per window; a node sweep re-runs the layout search for
every cluster size, as the paper does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.law import ScalingLaw
from mosaic.perf.calibration import Calibration
from mosaic.perf.layouts import LayoutLimits
from mosaic.plan.envelope import Envelope, SearchSpace
from mosaic.plan.search import PlanResult, ProgressFn, profile_geometries, score

Axis = Literal["days", "nodes"]
SweepProgress = Callable[[float], ProgressFn | None]


@dataclass(frozen=True)
class SweepPoint:
    """One budget of a sweep: its value, the search result, and the best row per G."""

    axis: Axis
    value: float
    result: PlanResult
    best_per_split: dict[int, int]


def best_per_split(result: PlanResult) -> dict[int, int]:
    """G -> lowest-loss trainable row with that split factor (the dashed lines of Fig. 11)."""
    grid = result.grid
    best: dict[int, int] = {}
    for row in result.ranking:
        best.setdefault(int(grid.split_factor[row]), int(row))
    return dict(sorted(best.items()))


def _values(axis: Axis, values: Iterable[float]) -> list[float]:
    numbers = list(values)
    if not numbers:
        raise MosaicInputError(f"sweep over {axis} needs at least one value")
    return numbers


def sweep_days(
    envelope: Envelope,
    space: SearchSpace,
    law: ScalingLaw,
    calibration: Calibration,
    days: Iterable[float],
    limits: LayoutLimits | None = None,
    progress: ProgressFn | None = None,
    workers: int | None = None,
) -> list[SweepPoint]:
    """Optimum per training window on a fixed cluster (Fig. 11a)."""
    windows = [envelope.with_budget(days=float(d)) for d in _values("days", days)]
    throughput = profile_geometries(envelope, space.enumerate(), calibration, limits, progress,
                                 workers)
    points = []
    for window in windows:
        result = score(throughput, window, space, law)
        points.append(SweepPoint("days", window.days, result, best_per_split(result)))
    return points


def sweep_nodes(
    envelope: Envelope,
    space: SearchSpace,
    law: ScalingLaw,
    calibration: Calibration,
    nodes: Iterable[int],
    limits: LayoutLimits | None = None,
    progress: SweepProgress | None = None,
    workers: int | None = None,
) -> list[SweepPoint]:
    """Optimum per cluster size at a fixed window (Fig. 11b); ``progress(value)`` may
    return a per-geometry callback for that node count."""
    clusters = [envelope.with_budget(n_nodes=_node_count(n)) for n in _values("nodes", nodes)]
    grid = space.enumerate()
    points = []
    for cluster in clusters:
        callback = progress(cluster.n_nodes) if progress is not None else None
        throughput = profile_geometries(cluster, grid, calibration, limits, callback, workers)
        result = score(throughput, cluster, space, law)
        points.append(SweepPoint("nodes", float(cluster.n_nodes), result,
                                 best_per_split(result)))
    return points


def _node_count(value: float) -> int:
    if float(value) != int(value) or int(value) < 1:
        raise MosaicInputError(f"node counts must be integers >= 1, got {value!r}")
    return int(value)


def optimum_losses(points: list[SweepPoint]) -> np.ndarray:
    """Optimal loss per sweep point (NaN where nothing is trainable)."""
    return np.array([
        np.nan if p.result.optimum_index is None else p.result.loss[p.result.optimum_index]
        for p in points
    ])
