"""Accuracy metrics, hand-computed on small arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mosaic.perf.accuracy import (
    mape,
    max_abs_error,
    median_abs_error,
    oom_prediction_correct,
    relative_errors,
    spearman_within_groups,
    top_k_overlap,
)

PREDICTED = [1.1, 2.0, 2.7]
MEASURED = [1.0, 2.5, 3.0]  # relative errors +10%, -20%, -10%


def test_relative_errors_are_predicted_over_measured_minus_one() -> None:
    np.testing.assert_allclose(relative_errors(PREDICTED, MEASURED), [0.1, -0.2, -0.1])


def test_error_summaries_by_hand() -> None:
    assert mape(PREDICTED, MEASURED) == pytest.approx((0.1 + 0.2 + 0.1) / 3)
    assert median_abs_error(PREDICTED, MEASURED) == pytest.approx(0.1)
    assert max_abs_error(PREDICTED, MEASURED) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("predicted", "measured"),
    [([1.0, 2.0], [1.0]), ([], []), ([1.0], [0.0]), ([np.nan], [1.0])],
)
def test_bad_inputs_raise(predicted: list[float], measured: list[float]) -> None:
    with pytest.raises(ValueError):
        relative_errors(predicted, measured)


def test_spearman_within_groups_of_known_permutations() -> None:
    # group a: ranks 1,2,3,5,4 vs 1..5 -> rho = 1 - 6·Σd²/(n(n²-1)) = 1 - 6·2/120 = 0.9
    # group b: reversed -> -1; group c: two runs, left out; group d: constant -> NaN, left out
    predicted = [1, 2, 3, 5, 4, 3, 2, 1, 7, 8, 5, 5, 5]
    measured = [10, 20, 30, 40, 50, 1, 2, 3, 1, 2, 1, 2, 3]
    groups = ["a"] * 5 + ["b"] * 3 + ["c"] * 2 + ["d"] * 3
    result = spearman_within_groups(predicted, measured, groups)
    assert result.per_group["a"] == pytest.approx(0.9)
    assert result.per_group["b"] == pytest.approx(-1.0)
    assert "c" not in result.per_group
    assert math.isnan(result.per_group["d"])
    assert result.mean == pytest.approx((0.9 - 1.0) / 2)


def test_spearman_without_a_large_enough_group_is_nan() -> None:
    result = spearman_within_groups([1, 2], [1, 2], ["a", "a"])
    assert math.isnan(result.mean) and dict(result.per_group) == {}


def test_top_k_overlap_by_hand() -> None:
    measured = [10, 9, 8, 7, 6]
    predicted = [10, 8, 9, 1, 7]  # predicted top-2 = {0, 2}, measured top-2 = {0, 1}
    assert top_k_overlap(predicted, measured, 2) == 0.5
    assert top_k_overlap(predicted, measured, 3) == 1.0
    assert top_k_overlap(predicted, measured, 4) == 0.75  # run 4 ranked above run 3
    # step times: lower is better; the same ordering read backwards
    step_times = [-p for p in predicted], [-m for m in measured]
    assert top_k_overlap(*step_times, 2, higher_is_better=False) == 0.5


def test_top_k_out_of_range_raises() -> None:
    with pytest.raises(ValueError, match="k must be between 1 and 3"):
        top_k_overlap([1, 2, 3], [1, 2, 3], 4)


def test_oom_rule_counts_an_infeasible_prediction_of_an_oom_run_as_correct() -> None:
    measured_oom = [True, True, False, False]
    predicted_feasible = [False, True, True, False]
    np.testing.assert_array_equal(
        oom_prediction_correct(measured_oom, predicted_feasible), [True, False, True, False]
    )


def test_top_k_overlap_leaves_out_a_group_whose_measured_top_k_ties() -> None:
    """A group whose measured values all tie showed 'top-3 overlap 66.7%' (a trial): with
    the 3rd and 4th measured equal its top 3 is not defined, so it is left out."""
    from mosaic.evaluate.validation_report import _top_k_overlap_within_groups

    predicted = np.array([4.0, 3.0, 2.0, 1.0, 4.0, 3.0, 2.0, 1.0])
    tied = np.array([5.0, 5.0, 5.0, 5.0])
    ranked = np.array([4.0, 3.0, 1.0, 2.0])  # top 3 {0, 1, 3} against predicted {0, 1, 2}
    groups = ["tied"] * 4 + ["ranked"] * 4
    assert _top_k_overlap_within_groups(predicted, np.concatenate([tied, ranked]),
                                        groups) == pytest.approx(2 / 3)
    assert _top_k_overlap_within_groups(predicted[:4], tied, groups[:4]) is None


def test_top_k_overlap_leaves_out_a_group_whose_predicted_top_k_ties() -> None:
    """All-tied predictions (a trial's group) left the input order to pick the predicted
    top 3, and showed 66.7%; Spearman said n/a there."""
    from mosaic.evaluate.validation_report import _top_k_overlap_within_groups

    measured = np.array([4.0, 3.0, 1.0, 2.0])
    assert _top_k_overlap_within_groups(np.full(4, 7.0), measured, ["g"] * 4) is None
    assert _top_k_overlap_within_groups(np.array([4.0, 3.0, 2.0, 1.0]), measured,
                                        ["g"] * 4) == pytest.approx(2 / 3)
