"""Held-out validation (Sec. 4.2): top 10% by N_act per G stratum, metrics in loss units."""

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.law import RunData, default_law, evaluate, holdout_mask


def runs_with_strata(sizes: dict[float, int]) -> RunData:
    split = np.concatenate([np.full(n, g) for g, n in sizes.items()])
    n_active = np.concatenate([np.arange(1, n + 1) * 1e8 for n in sizes.values()])
    return RunData(
        n_total=n_active * 20, tokens=np.full(split.size, 1e10), loss=np.full(split.size, 2.0),
        n_active=n_active, split_factor=split,
    )  # fmt: skip


def test_holdout_takes_the_largest_tenth_of_each_stratum():
    runs = runs_with_strata({1.0: 10, 2.0: 4, 4.0: 15})
    held_out = holdout_mask(runs)
    # round(0.1 * n): 1 of 10, none of 4, 2 of 15 -- always the largest N_act.
    for g, expected in {1.0: [10], 2.0: [], 4.0: [14, 15]}.items():
        rows = runs.split_factor == g
        assert sorted(runs.n_active[rows & held_out] / 1e8) == expected
    assert not holdout_mask(runs, 0.0).any()
    with pytest.raises(MosaicInputError, match="0 <= f < 1"):
        holdout_mask(runs, 1.0)


def test_holdout_ties_are_broken_by_tokens_whatever_the_row_order():
    """Ten runs of one stratum, the largest geometry at two token budgets: round(0.1 * 10)
    = 1 held out, the larger budget, in either row order (a trial's reordered table held
    out the other and fitted another law)."""
    n_active = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 9]) * 1e8
    tokens = np.array([1e10] * 9 + [2e10])

    def held(order: np.ndarray) -> set[tuple[float, float]]:
        runs = RunData(n_total=n_active[order] * 20, tokens=tokens[order],
                       loss=np.full(10, 2.0), n_active=n_active[order],
                       split_factor=np.full(10, 4.0))
        mask = holdout_mask(runs)
        return set(zip(runs.n_active[mask], runs.tokens[mask], strict=True))

    assert held(np.arange(10)) == held(np.arange(10)[::-1]) == {(9e8, 2e10)}


def test_metrics_by_hand():
    law = default_law()
    runs = runs_with_strata({4.0: 4})
    predicted = law.predict_runs(runs)
    errors = np.array([0.01, -0.02, 0.03, -0.04])
    observed = RunData(
        n_total=runs.n_total, tokens=runs.tokens, loss=predicted - errors,
        n_active=runs.n_active, split_factor=runs.split_factor,
    )  # fmt: skip
    held_out = np.array([False, False, False, True])
    metrics, parity = evaluate(law, observed, held_out, objective=0.5)
    assert metrics.rmse == pytest.approx(np.sqrt(np.mean(errors**2)))
    assert metrics.heldout_rmse == pytest.approx(0.04)
    assert metrics.train_rmse == pytest.approx(np.sqrt(np.mean(errors[:3] ** 2)))
    ss_tot = np.sum((observed.loss - observed.loss.mean()) ** 2)
    assert metrics.r2 == pytest.approx(1 - np.sum(errors**2) / ss_tot)
    assert (metrics.n_runs, metrics.n_heldout, metrics.objective) == (4, 1, 0.5)
    np.testing.assert_allclose(parity.predicted - parity.observed, errors)
    np.testing.assert_array_equal(parity.held_out, held_out)


def test_noisy_joint_fit_extrapolates_to_held_out_runs(noisy_joint_fit):
    validated, runs, clean = noisy_joint_fit
    metrics = validated.metrics
    assert metrics.n_runs == 152
    assert metrics.n_heldout == 16  # 4 of each 38-run G stratum
    assert validated.fit.data.n_runs == 136
    # 0.5% noise on L ~ 2.2 is ~0.011 loss units; the fit should be noise-limited.
    noise_rmse = float(np.sqrt(np.mean((runs.loss - clean) ** 2)))
    assert metrics.rmse <= noise_rmse
    assert metrics.heldout_rmse < 2 * noise_rmse
    assert metrics.r2 > 0.95
