"""Performance-model uncertainty for the planner: random throughput multipliers.

A candidate's real tokens/s is its predicted tokens/s times a multiplier m (measured /
predicted). Its distribution comes from the calibration's held-out residuals
(:mod:`mosaic.perf.coverage`): the 5/50/95% quantiles (q_lo, q_med, q_hi) of the scope the
candidate falls in (stack/class, else class, else pooled). We sample m from the two-piece
log-normal that matches the three quantiles exactly:

    log m = log q_med + z · (σ_lo if z < 0 else σ_hi),   z ~ N(0, 1),
    σ_lo = (log q_med − log q_lo) / z_level,  σ_hi = (log q_hi − log q_med) / z_level,

with z_level the standard-normal quantile of the interval's upper tail (1.645 at 90%).

Correlation (the assumption, stated): candidates of one plan run the same stack on the
same cluster, so part of their error is common. z of candidate i in scope s is
√ρ·u_s + √(1−ρ)·e_i with u_s, e_i independent N(0, 1): one common draw per scope, ρ the
calibration's measured between-source share of the held-out log-ratio variance
(``tokens_per_s_shared_fraction``; 1 = fully shared when the calibration records none).
Draws are seeded, so the same inputs give the same samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

from mosaic.perf.calibration import Calibration
from mosaic.perf.coverage import RatioQuantiles, model_class, pick_scope

FULLY_SHARED = 1.0  # the correlation assumed when a calibration records none


@dataclass(frozen=True)
class ThroughputSpread:
    """Per candidate: median and the two log-widths of its multiplier, and its scope.

    Attributes:
        median, sigma_low, sigma_high: (n,) arrays (module docstring).
        scopes: the residual scope of each candidate (candidates of one scope share u_s).
        shared_fraction: ρ, the share of the log-variance common to a scope's candidates.
        description: what was assumed, for reports.
    """

    median: np.ndarray
    sigma_low: np.ndarray
    sigma_high: np.ndarray
    scopes: tuple[str, ...]
    shared_fraction: float
    description: str

    @classmethod
    def from_quantiles(cls, quantiles: list[RatioQuantiles], level: float,
                       shared_fraction: float = FULLY_SHARED) -> ThroughputSpread:
        """The spread of candidates whose residual scopes are ``quantiles`` (one each)."""
        z_level = NormalDist().inv_cdf(0.5 + level / 2.0)
        median = np.array([q.median for q in quantiles])
        scopes = tuple(q.scope for q in quantiles)
        described = ", ".join(f"{q.scope}: {q.low:.3g}..{q.high:.3g} of {q.n_runs} runs"
                              for q in {q.scope: q for q in quantiles}.values())
        return cls(
            median=median,
            sigma_low=np.log(median / np.array([q.low for q in quantiles])) / z_level,
            sigma_high=np.log(np.array([q.high for q in quantiles]) / median) / z_level,
            scopes=scopes, shared_fraction=shared_fraction,
            description=(f"throughput multiplier from held-out measured/predicted tokens/s "
                         f"({level:.0%} ranges {described}), shared fraction "
                         f"{shared_fraction:.2f} within a scope"))

    def sample(self, n_samples: int, seed: int) -> np.ndarray:
        """(n_samples, n) multipliers, reproducible for a seed."""
        rng = np.random.default_rng(seed)
        unique = sorted(set(self.scopes))
        common = rng.standard_normal((n_samples, len(unique)))
        own = rng.standard_normal((n_samples, len(self.scopes)))
        scope_index = np.array([unique.index(s) for s in self.scopes])
        rho = self.shared_fraction
        z = np.sqrt(rho) * common[:, scope_index] + np.sqrt(1.0 - rho) * own
        return self.median * np.exp(z * np.where(z < 0, self.sigma_low, self.sigma_high))


def spread_for(calibration: Calibration, stack: str, is_moe: np.ndarray
               ) -> ThroughputSpread | None:
    """The spread of candidates of ``stack`` (MoE or dense each), or None when the
    calibration records no tokens/s residuals."""
    coverage = calibration.coverage
    if coverage is None or not coverage.tokens_per_s_ratio:
        return None
    quantiles = [pick_scope(coverage.tokens_per_s_ratio, stack, model_class(bool(moe)))
                 for moe in np.asarray(is_moe)]
    shared = coverage.tokens_per_s_shared_fraction
    spread = ThroughputSpread.from_quantiles(
        [q for q in quantiles if q is not None], coverage.level,
        FULLY_SHARED if shared is None else shared)
    if coverage.tokens_per_s_ratio_from is None:
        return spread
    return replace(spread, description=f"{spread.description} (residuals borrowed from "
                                       f"profile {coverage.tokens_per_s_ratio_from!r})")
