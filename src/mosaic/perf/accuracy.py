"""Accuracy metrics of predictions against measurements (used by validate and calibrate).

Errors are fractions (0.12 = 12%). The relative error of one run is predicted/measured − 1,
so +0.1 means the model predicts 10% more than was measured. Ranking metrics follow the
paper's Sec. 7.2.1: Spearman rank correlation within groups of comparable runs and the
top-k overlap of predicted and measured best configurations.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from numpy.typing import ArrayLike

MIN_GROUP_RUNS = 3  # a rank correlation over fewer runs says nothing


def _pair(predicted: ArrayLike, measured: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Equal-length, finite, non-empty 1-D float arrays."""
    p = np.asarray(predicted, dtype=float).ravel()
    m = np.asarray(measured, dtype=float).ravel()
    if p.shape != m.shape:
        raise ValueError(f"predicted has {p.size} values, measured {m.size}")
    if p.size == 0:
        raise ValueError("no values to compare")
    if not (np.isfinite(p).all() and np.isfinite(m).all()):
        raise ValueError("predicted and measured must be finite")
    return p, m


def relative_errors(predicted: ArrayLike, measured: ArrayLike) -> np.ndarray:
    """predicted / measured − 1, per run (measured must be positive)."""
    p, m = _pair(predicted, measured)
    if (m <= 0).any():
        raise ValueError("measured values must be positive")
    return p / m - 1.0


def mape(predicted: ArrayLike, measured: ArrayLike) -> float:
    """Mean absolute percentage error, as a fraction: mean |predicted/measured − 1|."""
    return float(np.mean(np.abs(relative_errors(predicted, measured))))


def median_abs_error(predicted: ArrayLike, measured: ArrayLike) -> float:
    """Median of |predicted/measured − 1|."""
    return float(np.median(np.abs(relative_errors(predicted, measured))))


def max_abs_error(predicted: ArrayLike, measured: ArrayLike) -> float:
    """Largest |predicted/measured − 1|."""
    return float(np.max(np.abs(relative_errors(predicted, measured))))


@dataclass(frozen=True)
class GroupSpearman:
    """Spearman rank correlation within groups.

    Attributes:
        mean: mean over groups with a defined correlation (NaN if there is none).
        per_group: correlation per group with at least ``MIN_GROUP_RUNS`` runs; NaN where
            it is undefined (all predicted or all measured values tied).
    """

    mean: float
    per_group: Mapping[str, float]


def spearman_within_groups(
    predicted: ArrayLike, measured: ArrayLike, groups: Sequence[str]
) -> GroupSpearman:
    """Mean Spearman correlation of predicted vs measured over groups of ≥3 runs.

    Groups with fewer runs are left out; so are groups whose correlation is undefined,
    from the mean (they stay in ``per_group`` as NaN).
    """
    p, m = _pair(predicted, measured)
    labels = np.asarray(groups, dtype=object)
    if labels.shape != p.shape:
        raise ValueError(f"groups has {labels.size} labels for {p.size} values")
    from scipy import stats  # here, not at the top: scipy.stats costs ~1 s of start-up

    per_group: dict[str, float] = {}
    for group in dict.fromkeys(labels.tolist()):
        members = labels == group
        if members.sum() < MIN_GROUP_RUNS:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.ConstantInputWarning)
            per_group[group] = float(stats.spearmanr(p[members], m[members]).statistic)
    defined = [value for value in per_group.values() if np.isfinite(value)]
    mean = float(np.mean(defined)) if defined else float("nan")
    return GroupSpearman(mean=mean, per_group=MappingProxyType(per_group))


def top_k_overlap(
    predicted: ArrayLike, measured: ArrayLike, k: int, *, higher_is_better: bool = True
) -> float:
    """Fraction of the measured top-k configurations that the predicted top-k recovers.

    Paper Sec. 7.2.1 ("Top-5 overlap is 100%"): |top_k(predicted) ∩ top_k(measured)| / k.
    Use ``higher_is_better=False`` for step times. Ties keep input order (stable sort).
    """
    p, m = _pair(predicted, measured)
    if not 1 <= k <= p.size:
        raise ValueError(f"k must be between 1 and {p.size}, got {k}")
    sign = -1.0 if higher_is_better else 1.0
    best_predicted = set(np.argsort(sign * p, kind="stable")[:k].tolist())
    best_measured = set(np.argsort(sign * m, kind="stable")[:k].tolist())
    return len(best_predicted & best_measured) / k


def oom_prediction_correct(measured_oom: ArrayLike, predicted_feasible: ArrayLike) -> np.ndarray:
    """Per run: whether the feasibility prediction agrees with what happened.

    A run that went out of memory counts as correct when the model predicts it infeasible;
    a run that trained counts as correct when the model predicts it feasible.
    """
    oom = np.asarray(measured_oom, dtype=bool).ravel()
    feasible = np.asarray(predicted_feasible, dtype=bool).ravel()
    if oom.shape != feasible.shape:
        raise ValueError(f"measured_oom has {oom.size} values, predicted_feasible {feasible.size}")
    return oom != feasible
