"""Repeated data (Muennighoff et al. 2023): the authors' own law reproduced, and its shape."""

import numpy as np
import pytest

from mosaic.law.repetition import R_D_STAR, R_N_STAR, effective_tokens, repeated_value


def _datablations_law(n: float, d: float, u: float) -> float:
    """The parametric fit of huggingface/datablations' README ("Parametric Fit", @ 13701315):
    its coefficients, with U_N = min(N, the compute-optimal N for U)."""
    a, b, e, alpha, beta = 6.255414, 7.3049974, 0.6254804, 0.3526596, 0.3526596
    big_a, big_b = np.exp(a), np.exp(b)
    g = ((alpha * big_a) / (beta * big_b)) ** (1 / (alpha + beta))
    unique_params = min(n, (u * g) ** (beta / alpha) * g)
    return float(np.exp(e) + big_a / repeated_value(n, unique_params, R_N_STAR) ** alpha
                 + big_b / repeated_value(d, u, R_D_STAR) ** beta)


def test_the_authors_figure_1_models_are_reproduced_to_the_printed_digits():
    # README: scaling_law(6.34e9, 242e9, 25e9) # 2.2256440889984477, and 2.2269634075087867
    assert _datablations_law(6.34e9, 242e9, 25e9) == pytest.approx(2.2256440889984477,
                                                                   rel=1e-12)
    assert _datablations_law(8.67e9, 178e9, 25e9) == pytest.approx(2.2269634075087867,
                                                                   rel=1e-12)


def test_repeated_tokens_lose_value_as_the_paper_describes():
    unique = 1e12
    # one epoch or less: every token is new
    assert effective_tokens(5e11, unique) == pytest.approx(5e11)
    assert effective_tokens(1e12, unique) == pytest.approx(1e12)
    # four epochs are nearly as good as new data (Sec. 1: "negligible changes"): R = 3 gives
    # U(1 + R*(1 - e^(-3/R*))) = 3.73 U, 93% of 4 U
    assert effective_tokens(4e12, unique) / 4e12 == pytest.approx(
        (1 + R_D_STAR * (1 - np.exp(-3 / R_D_STAR))) / 4, rel=1e-12)
    assert 0.9 < effective_tokens(4e12, unique) / 4e12 < 0.95
    # many epochs approach the ceiling U(1 + R*)
    assert effective_tokens(1e15, unique) == pytest.approx(unique * (1 + R_D_STAR), rel=1e-6)
    assert effective_tokens(7e11, None) == 7e11  # unbounded data: unchanged
