"""Robust summary of repeated timings: median, spread and outlier rejection.

Outliers are samples farther than ``OUTLIER_MADS`` scaled median absolute deviations from
the median (Hampel filter; Leys et al. 2013, "Detecting outliers: Do not use standard
deviation around the mean, use absolute deviation around the median", J. Exp. Soc.
Psychol. 49(4)). 1.4826 makes the MAD a consistent estimator of the standard deviation
for normal data (same reference).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mosaic.errors import MosaicInputError

MAD_TO_SIGMA = 1.4826
OUTLIER_MADS = 5.0
MIN_SAMPLES_FOR_OUTLIERS = 5


@dataclass(frozen=True)
class TimingSummary:
    """Statistics of one measured case (seconds per call)."""

    time_s: float  # median of the kept samples
    p10_s: float
    p90_s: float
    min_s: float
    mean_s: float
    repeats: int  # samples kept
    outliers: int  # samples rejected

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative width of the middle 80%."""
        return (self.p90_s - self.p10_s) / self.time_s if self.time_s > 0 else 0.0


def outlier_mask(samples: npt.ArrayLike, mads: float = OUTLIER_MADS) -> np.ndarray:
    """True for samples more than ``mads`` scaled MADs from the median; nothing is rejected
    with fewer than ``MIN_SAMPLES_FOR_OUTLIERS`` samples or a zero MAD (most samples equal).
    """
    x = np.asarray(samples, dtype=float)
    if x.size < MIN_SAMPLES_FOR_OUTLIERS:
        return np.zeros(x.shape, dtype=bool)
    median = np.median(x)
    mad = MAD_TO_SIGMA * np.median(np.abs(x - median))
    if mad == 0:
        return np.zeros(x.shape, dtype=bool)
    return np.abs(x - median) > mads * mad


def summarize(samples: npt.ArrayLike) -> TimingSummary:
    """Median, 10th/90th percentiles, minimum and mean of the samples that are not outliers."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0 or np.any(~np.isfinite(x)) or np.any(x < 0):
        raise MosaicInputError(f"timing samples must be finite and >= 0, got {x[:8]}")
    reject = outlier_mask(x)
    kept = x[~reject]
    return TimingSummary(
        time_s=float(np.median(kept)),
        p10_s=float(np.percentile(kept, 10)),
        p90_s=float(np.percentile(kept, 90)),
        min_s=float(kept.min()),
        mean_s=float(kept.mean()),
        repeats=int(kept.size),
        outliers=int(reject.sum()),
    )
