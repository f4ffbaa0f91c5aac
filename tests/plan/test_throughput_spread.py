"""Performance uncertainty in the planner: multipliers from held-out residuals change
P(optimal) and the robust pick where they should."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from mosaic.arch import enumerate_ladder_grid
from mosaic.perf.coverage import RatioQuantiles
from mosaic.plan import Envelope, LawSamples, SearchSpace, propagate, resolve_system
from mosaic.plan.search import score
from mosaic.plan.throughput_spread import ThroughputSpread, spread_for

from .conftest import synthetic_table

PEAK_FLOPS_PER_S = 2.25e15  # B200 dense bf16 datasheet peak (hardware catalog)
ENVELOPE = Envelope(resolve_system("B200"), n_nodes=16, days=30.0)
# Two rungs (q = 4 and 8, E = 8, K = 1, G = 1); tpp_max = 20 caps the small one.
SPACE = SearchSpace(q=(4, 8), experts=(8,), top_k=(1,), split_factor=(1,), s_min=0.0,
                    tpp_min=0.01, tpp_max=20.0)
GRID = enumerate_ladder_grid([4, 8], [8], [1], [1], s_min=0.0)
SMALL_MFU = 0.5  # the q = 4 rung's budget is thousands of times its tpp_max cap


def crafted(law, loss_gap: float):
    """A plan where the capped q = 4 rung (A) is insensitive to throughput and the q = 8 rung
    (B), limited by its budget, has point loss L_A − ``loss_gap``."""
    def result(mfu_big: float):
        table = synthetic_table(GRID, ENVELOPE.n_devices,
                                lambda g: np.array([SMALL_MFU, mfu_big]), PEAK_FLOPS_PER_S)
        return score(table, ENVELOPE, SPACE, law)

    mfu = brentq(lambda m: (lambda r: r.loss[0] - r.loss[1] - loss_gap)(result(m)),
                 1e-4, 1e-2, xtol=1e-14)
    out = result(mfu)
    assert out.tpp_capped[0] and not out.tpp_capped[1]
    return out


def spread(low: float, high: float, shared: float = 0.0) -> ThroughputSpread:
    q = RatioQuantiles("test", 20, low, 1.0, high)
    return ThroughputSpread.from_quantiles([q, q], 0.90, shared)


def test_draws_reproduce_the_three_quantiles_they_were_built_from():
    draws = spread(0.6, 1.2).sample(200_000, seed=1)
    assert np.quantile(draws, [0.05, 0.5, 0.95]) == pytest.approx([0.6, 1.0, 1.2], rel=0.01)
    np.testing.assert_array_equal(draws, spread(0.6, 1.2).sample(200_000, seed=1))


def test_shared_fraction_one_moves_all_candidates_together():
    draws = spread(0.8, 1.25, shared=1.0).sample(1000, seed=0)
    np.testing.assert_array_equal(draws[:, 0], draws[:, 1])
    independent = spread(0.8, 1.25, shared=0.0).sample(1000, seed=0)
    assert abs(np.corrcoef(np.log(independent).T)[0, 1]) < 0.1


def test_equal_point_losses_split_p_optimal_evenly(law):
    # A is capped, so its loss ignores the multiplier; B wins exactly when its m > 1,
    # i.e. with probability 1/2 (binomial sd over 2000 draws: 0.011).
    plan = crafted(law, loss_gap=0.0)
    u = propagate(plan, law, None, spread=spread(0.9, 1 / 0.9))
    assert u.p_optimal.sum() == pytest.approx(1.0)
    assert u.p_optimal == pytest.approx([0.5, 0.5], abs=0.04)
    # A gap far larger than the spread leaves no doubt.
    clear = propagate(crafted(law, loss_gap=0.1), law, None, spread=spread(0.9, 1 / 0.9))
    assert clear.p_optimal[0] == 1.0  # the point optimum (first in ranking order)
    assert any("performance" in s for s in u.sources)


def test_a_wide_slow_tail_moves_the_robust_pick_to_the_insensitive_candidate(law):
    plan = crafted(law, loss_gap=0.005)  # B better by 0.005 nats at the point prediction
    b, a = 1, 0
    assert plan.optimum_index == b
    narrow = propagate(plan, law, None, spread=spread(0.98, 1.02))
    assert narrow.robust_row == b
    # Measured/predicted as low as 0.5 (5% of runs) costs B far more loss when slow than
    # it gains when fast; A stays at its cap.
    wide = propagate(plan, law, None, spread=spread(0.5, 1.05))
    assert wide.robust_row == a
    i_a = int(np.flatnonzero(wide.rows == a)[0])  # arrays are in point-ranking order
    assert wide.loss_high[i_a] - wide.loss_low[i_a] == pytest.approx(0.0, abs=1e-12)


def test_law_and_performance_samples_combine_and_stay_deterministic(law):
    plan = crafted(law, loss_gap=0.0)
    rng = np.random.default_rng(0)
    samples = LawSamples(law.form, law.log_coefs + 0.01 * rng.standard_normal((300, 11)))
    both = propagate(plan, law, samples, spread=spread(0.8, 1.25), seed=3)
    again = propagate(plan, law, samples, spread=spread(0.8, 1.25), seed=3)
    np.testing.assert_array_equal(both.p_optimal, again.p_optimal)
    assert both.samples == 300 and len(both.sources) == 2


def test_spread_for_a_calibration_uses_the_candidates_scope(calibration):
    from mosaic.perf.coverage import pick_scope

    s = spread_for(calibration, "megatron-core", np.array([True, False]))
    rows = calibration.coverage.tokens_per_s_ratio
    assert s.scopes == (pick_scope(rows, "megatron-core", "moe").scope,
                        pick_scope(rows, "megatron-core", "dense").scope)
    # the MoE candidate's multiplier is centred on its scope's median ratio
    assert s.median[0] == pick_scope(rows, "megatron-core", "moe").median
    shared = calibration.coverage.tokens_per_s_shared_fraction
    assert s.shared_fraction == (1.0 if shared is None else shared)
    # residuals another profile measured are named as such in the plan's uncertainty
    from dataclasses import replace

    borrowed = replace(calibration, coverage=replace(calibration.coverage,
                                                     tokens_per_s_ratio_from="default"))
    lent = spread_for(borrowed, "megatron-core", np.array([True, False]))
    assert lent.description == (f"{s.description} (residuals borrowed from profile "
                                "'default')")
    assert np.array_equal(lent.median, s.median)


def test_a_real_search_gets_its_optimum_assessed_and_performance_uncertainty(
        small_result, law, calibration):
    from mosaic.plan.coverage import candidate_assessment, plan_uncertainty

    best = small_result.optimum_index
    a = candidate_assessment(small_result, calibration, best)
    assert a.has_envelope and a.tokens_per_s.scope in {"megatron-core/moe", "moe", "all"}
    assert a.tokens_per_s.low < small_result.throughput.tokens_per_s[best] < a.tokens_per_s.high
    u = plan_uncertainty(small_result, law, None, calibration)
    assert u is not None and u.p_optimal.sum() == pytest.approx(1.0)
    assert u.sources[0].startswith("performance")


def test_shifted_terms_equal_the_full_law_at_every_sampled_token_count(small_result, law):
    from mosaic.plan.uncertainty import _log_features, losses_at_tokens

    rows = small_result.ranking
    grid = small_result.grid
    rng = np.random.default_rng(0)
    tokens = small_result.tokens[rows] * rng.uniform(0.3, 3.0, (5, rows.size))
    logs = _log_features(small_result, rows)
    fast = losses_at_tokens(law.form, law.log_coefs[None, :], logs, np.log(tokens))
    full = law.predict(grid.n_total[rows], tokens, grid.sparsity[rows], grid.split_factor[rows])
    np.testing.assert_allclose(fast, full, rtol=1e-12)
    coefs = law.log_coefs + 0.02 * rng.standard_normal((5, law.log_coefs.size))
    paired = losses_at_tokens(law.form, coefs, logs, np.log(tokens))
    for b in range(5):
        one = LawSamples(law.form, np.vstack([coefs[b], coefs[b]]))
        feats = np.column_stack([np.log(tokens[b]) if f == "tokens" else logs[f]
                                 for f in law.form.features])
        expected = np.exp(one.form.log_predict(one.log_coefs, one.form.design(feats)).value[0])
        np.testing.assert_allclose(paired[b], expected, rtol=1e-12)
