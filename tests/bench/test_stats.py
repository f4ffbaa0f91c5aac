"""Robust timing statistics: median, percentiles, Hampel outlier rejection."""

import numpy as np
import pytest

from mosaic.bench.stats import outlier_mask, summarize
from mosaic.errors import MosaicInputError


def test_summary_of_clean_samples_matches_numpy():
    samples = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    s = summarize(samples)
    assert s.time_s == 4.0
    assert s.p10_s == pytest.approx(np.percentile(samples, 10))
    assert s.p90_s == pytest.approx(np.percentile(samples, 90))
    assert (s.min_s, s.mean_s, s.repeats, s.outliers) == (1.0, 4.0, 7, 0)


def test_a_preempted_sample_is_rejected():
    # MAD of [0.98, 0.99, 1.0, 1.01, 1.02, 10] about the median 1.005 is 0.015 -> 0.0222
    # scaled; 10 is ~400 scaled MADs out, 0.98 about 1.1.
    samples = [1.0, 1.01, 0.99, 1.02, 0.98, 10.0]
    assert outlier_mask(samples).tolist() == [False] * 5 + [True]
    s = summarize(samples)
    assert s.time_s == pytest.approx(1.0)
    assert (s.repeats, s.outliers) == (5, 1)
    assert s.mean_s == pytest.approx(1.0)


def test_few_samples_or_zero_spread_keep_everything():
    assert not outlier_mask([1.0, 1.0, 50.0, 1.0]).any()  # 4 < 5 samples
    assert not outlier_mask([2.0] * 6 + [3.0]).any()  # MAD 0


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [-1.0, 1.0]])
def test_invalid_samples_are_refused(bad):
    with pytest.raises(MosaicInputError):
        summarize(bad)
