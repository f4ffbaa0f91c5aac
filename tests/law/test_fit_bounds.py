"""A fitted coefficient on its bound is written inside the bound and reads back (issue:
`ladder fit` wrote b = 10000000000.000004, one ulp past its own 1e10 bound)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mosaic.law import RunData
from mosaic.law.fit import (
    FitSettings,
    clip_to_bounds,
    fit_law,
    log_bounds,
    unidentified_exponents,
    unidentified_note,
)
from mosaic.law.forms import CHINCHILLA, DEFAULT_PREFACTOR_BOUNDS
from mosaic.law.law import ScalingLaw

HIGH = DEFAULT_PREFACTOR_BOUNDS[1]


def test_exp_of_log_bound_overshoots_and_is_clipped():
    # The floating-point fact behind the issue: exp(log(1e10)) > 1e10 by a few ulps.
    assert math.exp(math.log(HIGH)) > HIGH
    box = log_bounds(CHINCHILLA, None)
    log_coefs = np.array([0.0, 1.0, box[2, 1], -1.0, -1.0])  # B exactly on log(upper)
    values, on_bound = clip_to_bounds(CHINCHILLA, log_coefs, None)
    assert values["B"] == HIGH
    assert on_bound == {"B": {"side": "upper", "bound": HIGH}}


def test_a_coefficient_pushed_near_a_wide_bound_is_reported_on_it():
    """L-BFGS-B stops a few percent short of a bound it is pushed against in a box of 20
    decades: 1.1x the lower bound counts as on it (a trial: e = 1.09998e-10 against 1e-10
    went unreported), a value well inside does not."""
    box = log_bounds(CHINCHILLA, None)
    near = box[:, 0] + np.log(1.1)  # every coefficient 10% above its lower bound
    _, on_bound = clip_to_bounds(CHINCHILLA, near, None)
    assert set(on_bound) == set(CHINCHILLA.params)
    middle = box.mean(axis=1)
    assert clip_to_bounds(CHINCHILLA, middle, None)[1] == {}


def test_fit_on_the_bound_round_trips(tmp_path):
    # Chinchilla runs whose true data prefactor B = 1e13 lies beyond the 1e10 bound
    # (beta = 1.3 keeps B/D^beta in loss units for D in [1e9, 1e11]).
    rng = np.random.default_rng(0)
    n_total = np.exp(rng.uniform(np.log(1e7), np.log(1e9), 40))
    tokens = np.exp(rng.uniform(np.log(1e9), np.log(1e11), 40))
    loss = 1.7 + 400.0 / n_total**0.34 + 1e13 / tokens**1.3
    runs = RunData(n_total=n_total, tokens=tokens, loss=loss, source="synthetic")
    fit = fit_law(runs, CHINCHILLA, FitSettings(starts=256, n_polished=4))
    assert fit.law.coefficients["B"] == HIGH  # on the bound, not one ulp past it
    assert fit.law.provenance["at_bound"] == {"B": {"side": "upper", "bound": HIGH}}
    path = tmp_path / "law.json"
    fit.law.save(path)
    again = ScalingLaw.load(path)  # the reader's check: |value| <= 1e10
    assert again.coefficients["B"] == HIGH
    assert again.coefficients == pytest.approx(fit.law.coefficients)


def test_exponents_on_a_feature_no_run_varies_are_named():
    """With every run at one token count, D^-beta is a constant B absorbs: beta is not
    identified, and the fit's provenance (and law fit's warning) says so."""
    rng = np.random.default_rng(1)
    n_total = np.exp(rng.uniform(np.log(1e7), np.log(1e9), 30))
    tokens = np.full(30, 2e10) * (1 + rng.uniform(0, 0.005, 30))  # within 0.5%
    loss = 1.7 + 400.0 / n_total**0.34 + 410.0 / tokens**0.28
    runs = RunData(n_total=n_total, tokens=tokens, loss=loss, source="synthetic")
    assert unidentified_exponents(runs, CHINCHILLA) == {"tokens": ["beta"]}
    fit = fit_law(runs, CHINCHILLA, FitSettings(starts=64, n_polished=2))
    assert fit.law.provenance["unidentified"] == {"tokens": ["beta"]}
    note = unidentified_note(fit.law.provenance["unidentified"])
    assert note is not None and note.startswith("the runs vary D (exponent beta) by less")
    varied = RunData(n_total=n_total, tokens=tokens * np.linspace(1, 10, 30), loss=loss)
    assert unidentified_exponents(varied, CHINCHILLA) == {}
