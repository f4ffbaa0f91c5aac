"""Sec. 6 and Appendix D.3 on synthetic throughput, so they hold whatever the calibration."""

import numpy as np
import pytest

from mosaic.arch import enumerate_ladder_grid
from mosaic.law import compute_optimum, default_law
from mosaic.plan import (
    Envelope,
    SearchSpace,
    allocation_exponents,
    compare_model_flops,
    flop_cost_profile,
    local_mfu_slopes,
    model_flops_loss,
    resolve_system,
    score,
    sparsity_frontier,
)

from .conftest import synthetic_table

ENVELOPE = Envelope(resolve_system("B200"), n_nodes=4, days=10.0)
OPEN_TPP = SearchSpace(s_min=0.0, tpp_min=1.0, tpp_max=1e6)  # keep the TPP range out of it
PEAK = ENVELOPE.peak_flops_per_s_per_device


def scored(grid, mfu):
    table = synthetic_table(grid, ENVELOPE.n_devices, mfu, PEAK)
    return score(table, ENVELOPE, OPEN_TPP, default_law())


def sparsity_penalty(grid):
    """MFU falling with sparsity: 30% at the densest row, ∝ sqrt(1 − S)."""
    return 0.3 * np.sqrt((1 - grid.sparsity) / (1 - grid.sparsity.min()))


def test_model_flops_optimum_is_boundary_seeking(law):
    # Sec. 6.1: at fixed C_model, L*(S) falls over the calibrated range -> S* = S_max.
    for c_model in (1e20, 1e22, 1e24):
        best = compute_optimum(law, c_model, 4, sparsity_range=(0.5, 0.981))
        assert best.at_boundary and best.sparsity == 0.981


def test_grid_model_flops_pick_is_the_sparsest(sparsity_ladder, law):
    result = scored(sparsity_ladder, sparsity_penalty)
    loss = model_flops_loss(result, law, 1e22)
    assert int(np.argmin(loss)) == int(np.argmax(sparsity_ladder.sparsity))


def test_cluster_optimum_is_interior_when_mfu_falls_with_sparsity(sparsity_ladder, law):
    result = scored(sparsity_ladder, sparsity_penalty)
    s = sparsity_ladder.sparsity
    chosen = s[result.optimum_index]
    assert s.min() < chosen < s.max()
    comparison = compare_model_flops(result, law)
    assert comparison.continuous.at_boundary
    assert comparison.model_flops_row == int(np.argmax(s))
    assert not comparison.prescription_feasible  # the sparsest cannot deliver C_model
    assert comparison.s_feas_max == pytest.approx(chosen)
    assert comparison.loss_gap_nats > 0


def test_without_a_systems_penalty_the_cluster_optimum_is_the_sparsest(sparsity_ladder):
    result = scored(sparsity_ladder, lambda g: np.full(len(g), 0.3))
    assert result.optimum_index == int(np.argmax(sparsity_ladder.sparsity))


def test_s_feas_max_is_the_largest_sparsity_delivering_c_model(sparsity_ladder, law):
    result = scored(sparsity_ladder, sparsity_penalty)
    c_model = float(np.median(result.c_deliverable_flops))
    comparison = compare_model_flops(result, law, c_model_flops=c_model, split_factor=4)
    delivers = result.c_deliverable_flops >= c_model
    assert comparison.s_feas_max == pytest.approx(sparsity_ladder.sparsity[delivers].max())


def test_frontier_and_flop_cost(sparsity_ladder, law):
    result = scored(sparsity_ladder, sparsity_penalty)
    frontier = sparsity_frontier(result, law, 1e22, 4)
    assert np.all(np.diff(frontier.model_flops_sparsity) > 0)
    assert np.all(np.diff(frontier.model_flops_loss) < 0)  # boundary-seeking on the grid
    profile = flop_cost_profile(result, law, 1e22, "sparsity", split_factor=4)
    mfu = result.throughput.mfu[profile.rows]
    expected = 1 / (mfu * PEAK * ENVELOPE.n_devices)  # seconds per model FLOP
    np.testing.assert_allclose(profile.seconds_per_flop, expected, rtol=1e-12)
    assert profile.relative[0] == 1 and np.all(np.diff(profile.relative) > 0)


def test_local_mfu_slopes_recover_a_power_law(law):
    grid = enumerate_ladder_grid([8, 10, 12], [16, 32, 64, 128], [1, 2], [2, 4, 8], s_min=0.0)
    omega = {"n": 0.1, "s": 0.3, "g": 0.2}

    def power_law(g):
        return (0.2 * (g.n_total / 1e11) ** omega["n"] * (1 - g.sparsity) ** omega["s"]
                * g.split_factor.astype(float) ** -omega["g"])

    result = scored(grid, power_law)
    slopes, points = local_mfu_slopes(result, result.optimum_index)
    np.testing.assert_allclose(slopes, [omega["n"], omega["s"], omega["g"]], atol=1e-9)
    assert points >= 5
    exponents = allocation_exponents(result, law)
    c = law.coefficients
    p, rho = c["alpha"] / c["lambda"], c["alpha"] / c["beta"]
    g = (c["alpha"] - c["gamma"] - c["alpha"] * c["delta"] / c["lambda"]) / c["eta"]
    nu = 1 / ((1 - 0.1) + (1 - 0.3) * p + rho + 0.2 * g)  # Eq. 30
    assert exponents.nu == pytest.approx(nu)
    assert exponents.tokens_exponent == pytest.approx(rho * nu)
    assert exponents.active_fraction_exponent == pytest.approx(p * nu)
    assert exponents.split_factor_exponent == pytest.approx(g * nu)
    assert exponents.interior["omega_g_positive"]
