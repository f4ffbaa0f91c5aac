"""Bootstrap intervals (percentile, BCa) and the identifiability scan (App. B.2)."""

import numpy as np
import pytest
from scipy import stats

from mosaic.errors import MosaicInputError
from mosaic.law import (
    CHINCHILLA,
    HOFFMANN_2022_FIT,
    JOINT,
    FitSettings,
    RunData,
    ScalingLaw,
    bca_interval,
    bootstrap_fit,
    default_law,
    fit_law,
    identifiability_scan,
    percentile_interval,
)


def test_bca_matches_scipy_for_a_skewed_mean():
    # Independent check: scipy.stats.bootstrap's BCa interval of the mean of a skewed sample.
    rng = np.random.default_rng(0)
    sample = rng.exponential(size=40)
    replicates = rng.choice(sample, size=(20_000, sample.size)).mean(axis=1)
    jackknife = (sample.sum() - sample) / (sample.size - 1)
    ours = bca_interval(replicates[:, None], np.array([sample.mean()]), jackknife[:, None], 0.95)
    theirs = stats.bootstrap(
        (sample,), np.mean, n_resamples=20_000, method="BCa", random_state=1
    ).confidence_interval
    np.testing.assert_allclose(ours[:, 0], [theirs.low, theirs.high], rtol=0.02)
    # BCa shifts a right-skewed statistic's interval to the right of the percentile one.
    assert ours[1, 0] > percentile_interval(replicates, 0.95)[1]


def test_bca_is_percentile_without_bias_or_skew():
    replicates = np.linspace(-1.0, 1.0, 2001)[:, None]  # symmetric about the estimate: z0 = 0
    jackknife = np.array([[-1.0], [1.0]])  # symmetric: acceleration 0
    np.testing.assert_allclose(
        bca_interval(replicates, np.array([0.0]), jackknife, 0.9),
        percentile_interval(replicates, 0.9),
    )


# In-support operating points (N_tot, S, D) of the synthetic design.
OPERATING_POINTS = [(2e9, 0.9, 5e9), (10e9, 0.95, 10e9), (30e9, 0.97, 40e9), (1e9, 0.7, 3e9)]


def marginal_effects(log_coefs: np.ndarray) -> np.ndarray:
    """(m, 16) loss changes at the operating points (G = 4 unless varied): doubling D,
    G 1 -> 8, doubling N_tot at fixed S, and S + 0.02."""

    def loss(n_total, sparsity, tokens, split):
        log_x = np.log([[n_total, tokens, 1 - sparsity, split]])
        return np.exp(JOINT.log_predict(log_coefs, JOINT.design(log_x)).value[:, 0])

    effects = []
    for n, s, d in OPERATING_POINTS:
        base = loss(n, s, d, 4.0)
        effects += [loss(n, s, 2 * d, 4.0) - base, loss(n, s, d, 8.0) - loss(n, s, d, 1.0)]
        effects += [loss(2 * n, s, d, 4.0) - base, loss(n, s + 0.02, d, 4.0) - base]
    return np.array(effects).T


def test_wild_bootstrap_covers_what_the_data_identify(noisy_joint_fit):
    validated, runs, clean = noisy_joint_fit
    result = bootstrap_fit(validated.fit, method="wild", n_resamples=50, seed=1)
    truth = default_law()
    # Eq. 10 has a flat ridge (App. B.2). On this design the fit drives e to ~0 and lets the
    # floor c/(1-S)^lambda act as the constant; the split of the prefactors and of most
    # exponents (eta included: over 12 noise draws its estimate ranged 0.37-1.66) is a ridge
    # coordinate, and the warm-started intervals are local. We assert on what the data pin
    # down: beta (identified, as in Table 2), the loss changes each input causes at in-support
    # points, and the predicted losses. Coverage is checked against the 95% level with slack
    # for 50 resamples.
    beta = result.intervals["beta"]
    assert beta.bca[0] <= truth.coefficients["beta"] <= beta.bca[1]
    assert beta.percentile[0] <= truth.coefficients["beta"] <= beta.percentile[1]
    effects = result.derived_intervals(marginal_effects)
    true_effects = marginal_effects(truth.log_coefs[None, :])[0]
    covered = [iv.bca[0] <= t <= iv.bca[1] for iv, t in zip(effects, true_effects, strict=True)]
    assert np.mean(covered) >= 0.9
    design = JOINT.design(runs.log_features(JOINT))
    predicted = result.derived_intervals(lambda lc: JOINT.log_predict(lc, design).value)
    low, high = np.array([iv.bca for iv in predicted]).T
    inside = (np.log(clean) >= low) & (np.log(clean) <= high)
    assert np.mean(inside) >= 0.85
    assert inside[validated.parity.held_out].all()  # extrapolation to the largest runs


def test_case_bootstrap_is_seeded(epoch_runs):
    subset = epoch_runs.subset(np.arange(0, 240, 4))
    fit = fit_law(subset, CHINCHILLA, FitSettings(huber_delta=1e-3, starts=256, n_polished=2))
    first = bootstrap_fit(fit, method="case", n_resamples=20, seed=7)
    again = bootstrap_fit(fit, method="case", n_resamples=20, seed=7)
    np.testing.assert_array_equal(first.samples, again.samples)
    for name, interval in first.intervals.items():
        assert interval.percentile[0] <= fit.law.coefficients[name] <= interval.percentile[1]
    with pytest.raises(MosaicInputError, match="'wild' or 'case'"):
        bootstrap_fit(fit, method="jackknife")  # type: ignore[arg-type]


def test_identifiability_scan_on_epoch_data_identifies_everything(epoch_runs):
    fit = fit_law(epoch_runs, CHINCHILLA, FitSettings(huber_delta=1e-3))
    calls: list[tuple[int, int]] = []
    scan = identifiability_scan(fit, n_restarts=32, progress=lambda *c: calls.append(c))
    # one progress call per refit (`law fit --scan` had none: 1,000 refits ran 80 s silent)
    assert calls == [(done, 32) for done in range(1, 33)]
    assert set(scan.verdicts.values()) == {"identified"}
    assert scan.relative_spread.max() < 1e-4


def test_identifiability_scan_finds_a_constructed_ridge():
    # With one token count for every run, B/D^beta + E is a single constant: (E, B, beta)
    # form an exact ridge while A and alpha stay identified.
    rng = np.random.default_rng(0)
    n_params = np.exp(rng.uniform(np.log(1e8), np.log(1e10), 60))
    truth = ScalingLaw(CHINCHILLA, HOFFMANN_2022_FIT)
    loss = truth.predict(n_params, 2e10) * np.exp(0.003 * rng.standard_normal(60))
    runs = RunData(n_total=n_params, tokens=np.full(60, 2e10), loss=loss)
    fit = fit_law(runs, CHINCHILLA, FitSettings(huber_delta=1e-3, starts=256, n_polished=4))
    scan = identifiability_scan(fit, n_restarts=32)
    assert dict(scan.verdicts) == {
        "E": "ridge", "A": "identified", "B": "ridge", "alpha": "identified", "beta": "ridge",
    }  # fmt: skip


def test_bca_is_withheld_where_replicates_pile_up_on_the_estimate():
    """A coefficient fitted on its bound has replicates sitting exactly on it: BCa's bias
    correction assumes a distribution continuous there, and a trial's BCa intervals of such
    coefficients collapsed onto the bound ([1e-10, 1e-10] against a percentile interval
    reaching 1.15). BCa is withheld once that atom outweighs a 2.5% tail, and kept for a
    smooth bootstrap distribution."""
    from mosaic.law.bootstrap import bca_defined

    rng = np.random.default_rng(0)
    bound = np.array([1e-10])
    piled = np.concatenate([np.full(100, bound[0]), rng.uniform(1e-10, 1.2, 900)])[:, None]
    assert not bca_defined(piled, 0.95)[0]  # 10% on the estimate
    few = np.concatenate([np.full(20, bound[0]), rng.uniform(1e-10, 1.2, 980)])[:, None]
    assert bca_defined(few, 0.95)[0]  # 2%: below one tail
    smooth = rng.normal(1.0, 0.1, (1000, 1))
    assert bca_defined(smooth, 0.95)[0]
    # the estimate a hair off the bound the replicates pile on (a trial: gamma 1.00003e-6,
    # 56% of replicates on 1e-6, BCa [1e-6, 1.00016e-6] against percentile [1e-6, 0.40])
    near = np.concatenate([np.full(560, np.log(1e-6)),
                           np.log(rng.uniform(1e-6, 0.4, 440))])[:, None]
    assert not bca_defined(near, 0.95)[0]


def test_identifiability_scan_calls_a_coefficient_pressed_on_its_bound_so():
    """Losses that rise 1% per e-fold of tokens: B/D^beta can only vanish, and beta runs
    to its upper bound 10 in every near-best restart, a spread of ~0 the bound made, not
    the data (a trial's scan called such a c = 1e-10 "identified")."""
    rng = np.random.default_rng(0)
    n_params = np.exp(rng.uniform(np.log(1e8), np.log(1e10), 60))
    tokens = np.exp(rng.uniform(np.log(1e9), np.log(1e11), 60))
    loss = ((1.7 + 400 / n_params**0.34) * (1 + 0.01 * np.log(tokens / 1e9))
            * np.exp(0.003 * rng.standard_normal(60)))
    runs = RunData(n_total=n_params, tokens=tokens, loss=loss)
    fit = fit_law(runs, CHINCHILLA, FitSettings(huber_delta=1e-3, starts=256, n_polished=4))
    scan = identifiability_scan(fit, n_restarts=32)
    # the restarts split between beta on its bound and B on its own (the term vanishes
    # either way): which of the two holds the median of the near-best restarts changes with
    # the machine's floating-point rounding (20 near-best, 7 on beta's bound, on one CI
    # machine), so either verdict is right; "identified" is not
    assert scan.verdicts["beta"] in ("on bound", "ridge")
    assert scan.verdicts["B"] != "identified"
    assert scan.verdicts["A"] == scan.verdicts["alpha"] == "identified"
    # losses whose floor lies below zero (E = -0.05, no law form allows it): E presses on
    # its lower bound (1e-10) in most near-best restarts (16 of 17 here; 8 of 10 to 12 of 14
    # for other seeds), and is called so, not identified at the bound's value
    loss_without_floor = ((400 / n_params**0.34 + 410 / tokens**0.28 - 0.05)
                          * np.exp(0.003 * rng.standard_normal(60)))
    floorless = fit_law(RunData(n_total=n_params, tokens=tokens, loss=loss_without_floor),
                        CHINCHILLA, FitSettings(huber_delta=1e-3, starts=256, n_polished=4))
    scan = identifiability_scan(floorless, n_restarts=32)
    assert scan.verdicts["E"] == "on bound"
    assert all(scan.verdicts[name] == "identified" for name in ("A", "B", "alpha", "beta"))
