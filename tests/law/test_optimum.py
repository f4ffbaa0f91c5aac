"""Eq. 16 optimum (boundary-seeking in S, Sec. 6.1; Fig. 4 trends) and the Eq. 17 lr rule."""

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.law import (
    CHINCHILLA,
    HOFFMANN_2022_FIT,
    ScalingLaw,
    compute_optimum,
    default_law,
    peak_learning_rate,
    sparsity_profile,
)

FIG4_BUDGETS = [3e19, 6e19, 1e20, 3e20, 6e20]  # Sec. 6.1


@pytest.mark.parametrize("budget", [*FIG4_BUDGETS, 1e22])
def test_model_flops_optimum_is_boundary_seeking(budget):
    best = compute_optimum(default_law(), budget, split_factor=4)
    assert best.sparsity == 0.981  # the top of the data support (App. C)
    assert best.at_boundary
    assert 6 * best.n_active * best.tokens == pytest.approx(budget, rel=1e-12)
    assert best.n_active == pytest.approx((1 - best.sparsity) * best.n_total, rel=1e-12)
    assert best.learning_rate == pytest.approx(3.30 * budget**-0.199)


@pytest.mark.parametrize("budget", FIG4_BUDGETS)
def test_profile_trends_of_figure_4(budget):
    profile = sparsity_profile(default_law(), budget, np.linspace(0.5, 0.981, 40), 4)
    assert np.all(np.diff(profile.n_total) > 0)  # N_tot* increases with S
    assert np.all(np.diff(profile.n_active) < 0)  # N_act* decreases
    assert np.all(np.diff(profile.loss) < 0)  # L* decreases


def test_inner_optimum_beats_a_brute_force_scan():
    law = default_law()
    budget, sparsity = 1e21, 0.9
    best = sparsity_profile(law, budget, [sparsity], 4)
    n_active = np.geomspace(1e8, 1e11, 20_001)
    losses = law.predict(n_active / (1 - sparsity), budget / (6 * n_active), sparsity, 4)
    assert float(best.loss[0]) <= losses.min() + 1e-12
    assert best.n_active[0] == pytest.approx(n_active[np.argmin(losses)], rel=1e-3)


def test_sparsity_range_is_configurable():
    best = compute_optimum(default_law(), 1e21, 4, sparsity_range=(0.5, 0.9))
    assert best.sparsity == 0.9
    with pytest.raises(MosaicInputError, match="0 <= s_min <= s_max < 1"):
        compute_optimum(default_law(), 1e21, 4, sparsity_range=(0.5, 1.0))


def test_chinchilla_optimum_matches_closed_form():
    # Hoffmann et al. 2022, Eq. 4: N_opt = G (C/6)^(beta/(alpha+beta)),
    # G = (alpha A / (beta B))^(1/(alpha+beta)).
    law = ScalingLaw(CHINCHILLA, HOFFMANN_2022_FIT)
    c = HOFFMANN_2022_FIT
    budget = 5.76e23  # Chinchilla's training compute
    exponent = c["beta"] / (c["alpha"] + c["beta"])
    scale = (c["alpha"] * c["A"] / (c["beta"] * c["B"])) ** (1 / (c["alpha"] + c["beta"]))
    best = compute_optimum(law, budget)
    assert best.sparsity == 0.0
    assert best.n_total == pytest.approx(scale * (budget / 6) ** exponent, rel=1e-9)


def test_learning_rate_rule_by_hand():
    # Eq. 17 at C = 1e21: 3.30 * 10^(-21 * 0.199).
    assert float(peak_learning_rate(1e21)) == pytest.approx(3.30 * 10 ** (-4.179), rel=1e-12)
    with pytest.raises(MosaicInputError, match="positive and finite"):
        peak_learning_rate(-1.0)


def test_bad_budget_and_split_factor_are_reported():
    with pytest.raises(MosaicInputError, match="compute must be a finite number"):
        compute_optimum(default_law(), float("nan"))
    with pytest.raises(MosaicInputError, match="split_factor must be a positive finite number"):
        compute_optimum(default_law(), 1e21, split_factor=0)
