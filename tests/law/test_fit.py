"""Fitting: Epoch's Chinchilla replication, scale invariance, exact synthetic recovery."""

import numpy as np
import pytest
from scipy.optimize import minimize

from mosaic.errors import MosaicInputError
from mosaic.law import (
    CHINCHILLA,
    EPOCH_HUBER_FIT,
    EPOCH_HUBER_OBJECTIVE,
    HOFFMANN_2022_FIT,
    JOINT,
    PER_G,
    FitSettings,
    HuberLogObjective,
    default_law,
    fit_law,
    polish,
    starts_from_values,
)
from mosaic.law.fit import log_bounds

EPOCH_SETTINGS = FitSettings(huber_delta=1e-3, reduction="sum")


def assert_epoch_fit(fit):
    """Epoch's Huber fit of the Chinchilla form (arXiv:2404.10102) on the 240 kept rows."""
    coefs = fit.law.coefficients
    assert coefs["E"] == pytest.approx(EPOCH_HUBER_FIT["E"], abs=2e-4)
    assert coefs["alpha"] == pytest.approx(EPOCH_HUBER_FIT["alpha"], abs=2e-4)
    assert coefs["beta"] == pytest.approx(EPOCH_HUBER_FIT["beta"], abs=2e-4)
    assert coefs["A"] == pytest.approx(EPOCH_HUBER_FIT["A"], rel=2e-3)
    assert coefs["B"] == pytest.approx(EPOCH_HUBER_FIT["B"], rel=2e-3)
    assert fit.objective == pytest.approx(EPOCH_HUBER_OBJECTIVE, rel=1e-5)


def test_epoch_data_has_240_rows(epoch_runs):
    assert epoch_runs.n_runs == 240
    assert np.all(epoch_runs.tokens > 0)


def test_epoch_fit_from_spread_of_starts(epoch_runs):
    fit = fit_law(epoch_runs, CHINCHILLA, EPOCH_SETTINGS)
    assert_epoch_fit(fit)
    assert fit.n_starts == 4096


def test_epoch_fit_from_hoffmann_start_only(epoch_runs):
    hoffmann = starts_from_values(CHINCHILLA, [HOFFMANN_2022_FIT])
    assert_epoch_fit(fit_law(epoch_runs, CHINCHILLA, EPOCH_SETTINGS, initial=hoffmann))


def test_plain_lbfgsb_stops_early_on_a_small_objective(epoch_runs):
    # The failure polish() guards against: scipy's ftol test is relative to max(|f|, 1), so
    # an objective of ~1e-3 "converges" after a few steps from Hoffmann's values.
    objective = HuberLogObjective.build(epoch_runs, CHINCHILLA, EPOCH_SETTINGS)
    start = starts_from_values(CHINCHILLA, [HOFFMANN_2022_FIT])[0]
    naive = minimize(
        lambda x: (objective(x)[0][0], objective(x)[1][0]), start, jac=True, method="L-BFGS-B"
    )
    assert naive.fun > 1.1 * EPOCH_HUBER_OBJECTIVE
    _, polished = polish(objective, start, log_bounds(CHINCHILLA, None))
    assert polished == pytest.approx(EPOCH_HUBER_OBJECTIVE, rel=1e-5)


def test_optimum_does_not_depend_on_objective_scale(epoch_runs):
    start = starts_from_values(CHINCHILLA, [HOFFMANN_2022_FIT])[0]
    bounds = log_bounds(CHINCHILLA, None)
    summed = HuberLogObjective.build(epoch_runs, CHINCHILLA, EPOCH_SETTINGS)
    n = epoch_runs.n_runs
    variants = {
        "sum": summed,
        "mean": HuberLogObjective.build(epoch_runs, CHINCHILLA, FitSettings(1e-3, "mean")),
        "x1e-6": HuberLogObjective(
            CHINCHILLA, summed.design, summed.log_loss, np.full(n, 1e-6), 1e-3
        ),
    }
    optima = {name: np.exp(polish(obj, start, bounds)[0]) for name, obj in variants.items()}
    np.testing.assert_allclose(optima["mean"], optima["sum"], rtol=1e-6)
    np.testing.assert_allclose(optima["x1e-6"], optima["sum"], rtol=1e-6)


def test_joint_law_recovered_exactly_from_noiseless_runs(joint_runs_factory):
    runs, clean = joint_runs_factory(noise=0.0)
    fit = fit_law(runs, JOINT, FitSettings(n_polished=4))
    truth = default_law()
    for name in JOINT.params:
        assert fit.law.coefficients[name] == pytest.approx(truth.coefficients[name], rel=1e-4)
    np.testing.assert_allclose(fit.law.predict_runs(runs), clean, rtol=1e-9)


def test_per_g_form_fits_one_split_factor_at_a_time(joint_runs_factory):
    runs, _ = joint_runs_factory(noise=0.0)
    with pytest.raises(MosaicInputError, match=r"fits one G at a time; .*\[1.0, 2.0, 4.0, 8.0\]"):
        fit_law(runs, PER_G)
    g4 = runs.subset(runs.split_factor == 4.0)
    fit = fit_law(g4, PER_G, FitSettings(n_polished=8))
    assert fit.law.split_factor == 4.0
    # Eq. 9 is Eq. 10 at fixed G, with the joint prefactor absorbing G: j_G = j / G^eta.
    table2 = default_law().coefficients
    expected = {p: table2[p] for p in PER_G.params} | {"j": table2["j"] / 4.0 ** table2["eta"]}
    for name in PER_G.params:
        assert fit.law.coefficients[name] == pytest.approx(expected[name], rel=1e-4)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"huber_delta": 0.0}, "huber_delta must be a positive number"),
        ({"reduction": "median"}, "reduction must be 'sum' or 'mean'"),
        ({"starts": 0}, "starts must be a positive integer"),
    ],
)
def test_bad_settings_are_reported(settings, message):
    with pytest.raises(MosaicInputError, match=message):
        FitSettings(**settings)


def test_bounds_are_validated_and_respected(epoch_runs):
    with pytest.raises(MosaicInputError, match="unknown coefficient 'gamma'"):
        log_bounds(CHINCHILLA, {"gamma": (0.1, 1.0)})
    with pytest.raises(MosaicInputError, match="need 0 < low < high"):
        log_bounds(CHINCHILLA, {"E": (2.0, 1.0)})
    capped = FitSettings(huber_delta=1e-3, starts=256, n_polished=2, bounds={"E": (1.0, 1.7)})
    assert fit_law(epoch_runs, CHINCHILLA, capped).law.coefficients["E"] == pytest.approx(1.7)
