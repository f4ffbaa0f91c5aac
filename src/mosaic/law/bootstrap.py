"""Uncertainty of a fitted law: seeded bootstrap intervals and an identifiability scan.

Appendix B.2: warm-started wild-bootstrap refits with Rademacher residual flips on the
log-loss residuals, 95% BCa intervals; and a scan of fresh restarts that separates
identified coefficients from coordinates along a flat ridge. Case resampling is offered
as the classical alternative (Efron & Tibshirani 1993, Ch. 6).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.law.fit import AT_BOUND_LOG_SHARE, FitResult, polish, spread_starts

Method = Literal["wild", "case"]
DEFAULT_LEVEL = 0.95
# a percentile interval needs at least two replicates (one gives a zero-width interval)
MIN_RESAMPLES = 2


@dataclass(frozen=True)
class Interval:
    """Percentile and BCa intervals of one quantity (natural units); ``bca`` is None where
    the replicates pile up on one value, e.g. a bound (:func:`bca_defined`)."""

    estimate: float
    percentile: tuple[float, float]
    bca: tuple[float, float] | None


def percentile_interval(samples: np.ndarray, level: float) -> np.ndarray:
    """(2, ...) percentile interval over axis 0 (Efron & Tibshirani 1993, Eq. 13.5)."""
    tail = (1.0 - level) / 2.0
    return np.quantile(samples, [tail, 1.0 - tail], axis=0)


def min_bca_resamples(level: float) -> int:
    """The fewest replicates whose single one is at most a tail's share, (1 - level) / 2:
    below it every atom outweighs a tail and :func:`bca_defined` is False (40 at 95%)."""
    return math.ceil(round(2.0 / (1.0 - level), 9))


def bca_defined(samples: np.ndarray, level: float) -> np.ndarray:
    """(Q,) whether BCa applies: it assumes a bootstrap distribution continuous around the
    estimate (E&T 1993, Ch. 14; its bias correction z0 is a normal quantile of the share of
    replicates below it). A coefficient fitted on a bound has replicates sitting exactly on
    it; once that atom outweighs one tail, (1 - level) / 2, z0 and the adjusted quantiles
    land inside the atom and the interval collapses to a point (a trial: [1e-10, 1e-10]
    against a percentile interval of [1e-10, 1.15]). The atom is the largest set of equal
    replicates, whether or not the estimate is among them: an estimate a hair off its
    bound (gamma = 1.00003e-6 against 1e-6, 56% of replicates on the bound) collapsed the
    interval just the same (a trial). A continuous distribution has no such ties."""
    atom = np.array([np.unique(column, return_counts=True)[1].max()
                     for column in np.asarray(samples).reshape(len(samples), -1).T])
    enough = len(samples) >= min_bca_resamples(level)
    return enough & (atom <= len(samples) * (1.0 - level) / 2.0 + 1e-9)


def bca_interval(
    samples: np.ndarray, estimate: np.ndarray, jackknife: np.ndarray, level: float
) -> np.ndarray:
    """(2, Q) bias-corrected and accelerated interval (Efron 1987; E&T 1993, Eq. 14.9-14.15).

    samples (B, Q) bootstrap replicates, estimate (Q,) point estimate, jackknife (n, Q)
    leave-one-out estimates.
    """
    from scipy.stats import norm  # 0.6 s to import: only where an interval is computed

    count = samples.shape[0]
    below = (samples < estimate).sum(axis=0) + 0.5 * (samples == estimate).sum(axis=0)
    # Keep z0 finite when every replicate falls on one side of the estimate.
    proportion = np.clip(below / count, 0.5 / count, 1.0 - 0.5 / count)
    z0 = norm.ppf(proportion)  # bias correction, E&T Eq. 14.14
    spread = jackknife.mean(axis=0) - jackknife
    denominator = 6.0 * np.sum(spread**2, axis=0) ** 1.5
    with np.errstate(invalid="ignore", divide="ignore"):
        acceleration = np.where(denominator > 0, np.sum(spread**3, axis=0) / denominator, 0.0)
    tail = (1.0 - level) / 2.0
    bounds = []
    for z_alpha in norm.ppf([tail, 1.0 - tail]):
        shifted = z0 + z_alpha
        adjusted = norm.cdf(z0 + shifted / (1.0 - acceleration * shifted))  # E&T Eq. 14.10
        bounds.append([np.quantile(samples[:, q], adjusted[q]) for q in range(samples.shape[1])])
    return np.array(bounds)


@dataclass(frozen=True)
class BootstrapResult:
    """Bootstrap replicates of the log-coefficients and the intervals they give."""

    fit: FitResult
    method: Method
    level: float
    seed: int
    samples: np.ndarray  # (B, P) replicate log-coefficients
    jackknife: np.ndarray  # (n, P) leave-one-out log-coefficients

    @property
    def intervals(self) -> Mapping[str, Interval]:
        """Per coefficient: estimate, percentile and BCa intervals (natural units)."""
        values = self.derived_intervals(np.exp)
        return MappingProxyType(dict(zip(self.fit.form.params, values, strict=True)))

    def derived_intervals(self, quantity: Callable[[np.ndarray], np.ndarray]) -> list[Interval]:
        """Intervals of a derived quantity ``quantity((m, P) log-coefs) -> (m, Q)``."""
        estimate = np.atleast_1d(quantity(self.fit.log_coefs[None, :])[0])
        samples = quantity(self.samples).reshape(len(self.samples), -1)
        jackknife = quantity(self.jackknife).reshape(len(self.jackknife), -1)
        percentile = percentile_interval(samples, self.level)
        bca = bca_interval(samples, estimate, jackknife, self.level)
        defined = bca_defined(samples, self.level)
        return [
            Interval(
                estimate=float(estimate[q]),
                percentile=(float(percentile[0, q]), float(percentile[1, q])),
                bca=(float(bca[0, q]), float(bca[1, q])) if defined[q] else None,
            )
            for q in range(estimate.size)
        ]


BOOTSTRAP_METHODS = ("wild", "case")


def check_bootstrap_method(method: str) -> None:
    """MosaicInputError unless ``method`` is a bootstrap this module runs (callers check it
    before the point fit, not after it)."""
    if method not in BOOTSTRAP_METHODS:
        raise MosaicInputError(f"bootstrap method must be 'wild' or 'case', got {method!r}")


def bootstrap_fit(
    fit: FitResult,
    *,
    method: Method = "wild",
    n_resamples: int = 500,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    progress: Callable[[int, int], None] | None = None,
) -> BootstrapResult:
    """Seeded bootstrap of ``fit``; every refit is warm-started at the point fit (App. B.2).

    ``wild``: y*_i = log L_hat_i + v_i * r_i with Rademacher v_i and log-loss residuals r_i.
    ``case``: runs resampled with replacement. The jackknife behind the BCa acceleration
    refits once per run left out. ``progress(done, total)`` is called after each refit.
    """
    check_bootstrap_method(method)
    if n_resamples < MIN_RESAMPLES:
        raise MosaicInputError(
            f"bootstrap resamples must be at least {MIN_RESAMPLES}, got {n_resamples}")
    if not 0 < level < 1:
        raise MosaicInputError(f"confidence level must be in (0, 1), got {level}")
    objective = fit.objective_function()
    bounds = fit.log_bounds()
    start = fit.log_coefs
    n_runs = fit.data.n_runs
    rng = np.random.default_rng(seed)
    fitted_log_loss = objective.log_loss + objective.residuals(start)[0]
    residual = objective.log_loss - fitted_log_loss
    samples = np.empty((n_resamples, start.size))
    for b in range(n_resamples):
        if method == "wild":
            flips = rng.choice(np.array([-1.0, 1.0]), size=n_runs)
            resampled = objective.with_log_loss(fitted_log_loss + flips * residual)
        else:
            resampled = objective.subset(rng.integers(0, n_runs, size=n_runs))
        samples[b] = polish(resampled, start, bounds)[0]
        if progress is not None:
            progress(b + 1, n_resamples + n_runs)
    everyone = np.arange(n_runs)
    jackknife = np.empty((n_runs, start.size))
    for i in everyone:
        jackknife[i] = polish(objective.subset(everyone[everyone != i]), start, bounds)[0]
        if progress is not None:
            progress(n_resamples + i + 1, n_resamples + n_runs)
    return BootstrapResult(fit, method, level, seed, samples, jackknife)


Verdict = Literal["identified", "ridge", "undetermined", "on bound"]


@dataclass(frozen=True)
class IdentifiabilityResult:
    """Fresh-restart scan (App. B.2): which coefficients the data pin down."""

    params: tuple[str, ...]
    best_objective: float
    objective_tolerance: float  # restarts within this relative margin of the best count
    spread_threshold: float
    n_restarts: int
    near_best: np.ndarray  # (k, P) natural-unit coefficients of the near-best restarts
    relative_spread: np.ndarray  # (P,) (max - min) / |median| over ``near_best``
    verdicts: Mapping[str, Verdict]


MIN_NEAR_BEST = 3  # fewer near-best restarts than this cannot tell a ridge from a point


def identifiability_scan(
    fit: FitResult,
    *,
    n_restarts: int = 400,
    seed: int = 1,
    objective_tolerance: float = 1e-3,
    spread_threshold: float = 0.05,
    progress: Callable[[int, int], None] | None = None,
) -> IdentifiabilityResult:
    """Refit from ``n_restarts`` fresh spread starts; a coefficient is "identified" when its
    relative spread over restarts within ``objective_tolerance`` of the best objective is at
    most ``spread_threshold``, else "ridge" (App. B.2); "on bound" when most of those
    restarts (their median, in log space) sit within AT_BOUND_LOG_SHARE of the log range
    from one of its bounds, whatever the others do: the value the data favour is then the
    bound's. ``progress(done, total)`` is called after each refit."""
    if n_restarts < 1:
        raise MosaicInputError(f"restarts must be a positive integer, got {n_restarts}")
    objective = fit.objective_function()
    bounds = fit.log_bounds()
    refits = []
    for start in spread_starts(fit.form, n_restarts, seed):
        refits.append(polish(objective, start, bounds))
        if progress is not None:
            progress(len(refits), n_restarts)
    log_coefs = np.array([fit.log_coefs] + [x for x, _ in refits])
    objectives = np.array([fit.objective] + [f for _, f in refits])
    best = objectives.min()
    near = np.exp(log_coefs[objectives <= best * (1.0 + objective_tolerance)])
    spread = (near.max(axis=0) - near.min(axis=0)) / np.abs(np.median(near, axis=0))
    # near-best restarts pressed against a bound agree by construction: the bound, not the
    # data, fixes the value (a trial: c = 1e-10, spread 0, called "identified")
    low, high = bounds[:, 0], bounds[:, 1]
    margin = AT_BOUND_LOG_SHARE * (high - low)
    centre = np.median(np.log(near), axis=0)
    pinned = (centre - low <= margin) | (high - centre <= margin)
    verdicts: dict[str, Verdict] = {}
    for name, value, on_bound in zip(fit.form.params, spread, pinned, strict=True):
        if len(near) < MIN_NEAR_BEST:
            verdicts[name] = "undetermined"
        elif on_bound:
            verdicts[name] = "on bound"
        else:
            verdicts[name] = "identified" if value <= spread_threshold else "ridge"
    return IdentifiabilityResult(
        params=fit.form.params,
        best_objective=float(best),
        objective_tolerance=objective_tolerance,
        spread_threshold=spread_threshold,
        n_restarts=n_restarts,
        near_best=near,
        relative_spread=spread,
        verdicts=MappingProxyType(verdicts),
    )
