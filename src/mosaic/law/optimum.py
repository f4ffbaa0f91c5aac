"""Model-FLOPs-optimal allocation under a law (Eq. 16) and the learning-rate rule (Eq. 17).

Eq. 16: minimise L(N_tot, S, D, G) subject to 6 (1 - S) N_tot D = C_model at fixed G, with S
restricted to the data support. At fixed S, write x = log N_act: then log N_tot = x - log(1-S)
and log D = log(C/6) - x are affine in x, so every power-law term is exp(affine(x)) and L is
convex in x; the inner optimum is found by bisection on the sign of dL/dx. The outer search
over S is a grid followed by bounded Brent refinement, because L*(S) need not be convex.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.errors import MosaicInputError
from mosaic.law.extrapolation import data_support
from mosaic.law.forms import FEATURES
from mosaic.law.law import ScalingLaw

DEFAULT_SPARSITY_RANGE: tuple[float, float] = (0.0, 0.981)  # App. C, Table 6: S <= 0.981
DEFAULT_SPLIT_FACTOR = 4.0  # G of Fig. 4 and of the Table 4 optimum
LR_PREFACTOR = 3.30  # Eq. 17
LR_EXPONENT = -0.199  # Eq. 17
_BISECTION_STEPS = 80  # halves a bracket of width log(C/6) < 150 to below 1e-22
_SPARSITY_GRID = 257


# Eq. 17 was fitted on the paper's runs; the smallest run of its sweep (Appendix C: N_act
# 0.104 B, D 2.88 B) has C_model = 6·0.104e9·2.88e9 = 1.80e18 FLOPs, where Eq. 17 gives 7.7e-4.
# Below it the power law is an extrapolation that grows without bound.
EQ17_MIN_C_MODEL_FLOPS = FLOPS_PER_PARAM_TOKEN * 0.104e9 * 2.88e9


def peak_learning_rate(c_model_flops: float | np.ndarray) -> np.ndarray:
    """Eq. 17: lr* = 3.30 * C_model^-0.199, C_model = 6 N_act D in FLOPs."""
    c = np.asarray(c_model_flops, dtype=float)
    if not np.all(np.isfinite(c) & (c > 0)):
        raise MosaicInputError(f"model FLOPs must be positive and finite, got {c_model_flops!r}")
    return LR_PREFACTOR * c**LR_EXPONENT


@dataclass(frozen=True)
class Allocation:
    """Optimal (N_tot, N_act, D) at one or more sparsities, for one budget and G."""

    c_model_flops: float
    split_factor: float | None
    sparsity: np.ndarray
    n_total: np.ndarray
    n_active: np.ndarray
    tokens: np.ndarray
    loss: np.ndarray


@dataclass(frozen=True)
class ComputeOptimum:
    """The Eq. 16 optimum, with the Eq. 17 learning rate and whether S* sits on a bound."""

    c_model_flops: float
    split_factor: float | None
    sparsity: float
    n_total: float
    n_active: float
    tokens: float
    loss: float
    learning_rate: float
    sparsity_range: tuple[float, float]

    @property
    def at_boundary(self) -> bool:
        """True when S* is an end of the allowed range (Sec. 6.1: 'boundary-seeking'); a
        range of one value (a dense law's S = 0, or a fixed S) has no boundary to seek."""
        low, high = self.sparsity_range
        return low < high and self.sparsity in self.sparsity_range


def _check_budget(c_model_flops: float) -> float:
    c = float(c_model_flops)
    if not (np.isfinite(c) and c > FLOPS_PER_PARAM_TOKEN):
        raise MosaicInputError(
            f"compute must be a finite number of FLOPs above 6, got {c_model_flops!r}"
        )
    return c


def _resolve_split_factor(law: ScalingLaw, split_factor: float | None) -> float | None:
    """G to hold fixed: the given one; else, for a law with a G term, the paper's 4 or the
    nearest G the law was fitted on when its file records that range (a trial: a ladder
    fitted on G 1-2 was asked at G 4 and flagged its own default as extrapolation); else
    the law's own."""
    if split_factor is not None:
        return float(law.check_split_factor(split_factor))
    if "split_factor" not in law.form.features:
        return law.split_factor
    fitted = (data_support(law) or {}).get("split_factor")
    if fitted is None:
        return DEFAULT_SPLIT_FACTOR
    return float(min(max(DEFAULT_SPLIT_FACTOR, fitted[0]), fitted[1]))


def _check_sparsity(law: ScalingLaw, sparsity: np.ndarray) -> np.ndarray:
    if not np.all((sparsity >= 0) & (sparsity < 1)):
        bad = float(sparsity[~((sparsity >= 0) & (sparsity < 1))][0])
        raise MosaicInputError(f"sparsity must satisfy 0 <= S < 1, got {bad:g}")
    if law.form.is_dense and np.any(sparsity > 0):
        raise MosaicInputError(f"form '{law.form.name}' is a dense law; sparsity must be 0")
    return sparsity


def _profile(
    law: ScalingLaw, c_model_flops: float, sparsity: np.ndarray, split_factor: float | None
) -> Allocation:
    form = law.form
    log_budget = np.log(c_model_flops / FLOPS_PER_PARAM_TOKEN)  # log(N_act * D)
    log_active_fraction = np.log1p(-sparsity)
    log_g = np.full_like(sparsity, 0.0 if split_factor is None else np.log(split_factor))
    columns = [FEATURES.index(f) for f in form.features]
    slopes = form.term_exponents(law.log_coefs)[0]  # (K, F)
    # d log x_f / dx for x = log N_act: N_tot +1, D -1, 1-S and G fixed.
    dx = np.array([1.0, -1.0, 0.0, 0.0])[columns]
    term_slope = -np.einsum("kf,f->k", slopes, dx)  # (K,) d log(term) / dx

    def evaluate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Columns in FEATURES order: N_tot, D, 1 - S, G.
        logs = np.column_stack(
            [x - log_active_fraction, log_budget - x, log_active_fraction, log_g]
        )
        prediction = form.log_predict(law.log_coefs, form.design(logs[:, columns]))
        return prediction.value[0], np.einsum("nk,k->n", prediction.weights[0], term_slope)

    low = np.zeros_like(sparsity)  # N_act = 1 parameter
    high = np.full_like(sparsity, log_budget)  # D = 1 token
    for _ in range(_BISECTION_STEPS):
        middle = 0.5 * (low + high)
        rising = evaluate(middle)[1] > 0
        high = np.where(rising, middle, high)
        low = np.where(rising, low, middle)
    x = 0.5 * (low + high)
    log_loss = evaluate(x)[0]
    return Allocation(
        c_model_flops=c_model_flops,
        split_factor=split_factor,
        sparsity=sparsity,
        n_total=np.exp(x - log_active_fraction),
        n_active=np.exp(x),
        tokens=np.exp(log_budget - x),
        loss=np.exp(log_loss),
    )


def sparsity_profile(
    law: ScalingLaw,
    c_model_flops: float,
    sparsity: ArrayLike,
    split_factor: float | None = None,
) -> Allocation:
    """L*(S), N_tot*(S), N_act*(S), D*(S) at fixed C_model and G (Fig. 4, Fig. 8 left)."""
    c = _check_budget(c_model_flops)
    s = _check_sparsity(law, np.atleast_1d(np.asarray(sparsity, dtype=float)))
    return _profile(law, c, s, _resolve_split_factor(law, split_factor))


def compute_optimum(
    law: ScalingLaw,
    c_model_flops: float,
    split_factor: float | None = None,
    sparsity_range: tuple[float, float] = DEFAULT_SPARSITY_RANGE,
) -> ComputeOptimum:
    """Eq. 16: the loss-minimising (N_tot, S, D) for a model-FLOPs budget at fixed G.

    Dense laws (no sparsity term) are solved at S = 0 whatever the range.
    """
    c = _check_budget(c_model_flops)
    g = _resolve_split_factor(law, split_factor)
    s_min, s_max = (float(v) for v in sparsity_range)
    if not 0 <= s_min <= s_max < 1:
        raise MosaicInputError(
            f"sparsity range must satisfy 0 <= s_min <= s_max < 1, got {sparsity_range!r}"
        )
    if law.form.is_dense:
        s_min = s_max = 0.0
    grid = np.unique(np.linspace(s_min, s_max, _SPARSITY_GRID))
    profile = _profile(law, c, grid, g)
    best = int(np.argmin(profile.loss))
    candidates = [grid[best]]
    if grid.size > 1:
        from scipy.optimize import minimize_scalar  # here, not at import: fast CLI start-up

        bracket = (grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)])
        refined = minimize_scalar(
            lambda s: float(_profile(law, c, np.array([s]), g).loss[0]),
            bounds=bracket,
            method="bounded",
            options={"xatol": 1e-10},
        )
        candidates.append(float(refined.x))
    finalists = _profile(law, c, np.array(candidates), g)
    pick = int(np.argmin(finalists.loss))
    return ComputeOptimum(
        c_model_flops=c,
        split_factor=g,
        sparsity=float(finalists.sparsity[pick]),
        n_total=float(finalists.n_total[pick]),
        n_active=float(finalists.n_active[pick]),
        tokens=float(finalists.tokens[pick]),
        loss=float(finalists.loss[pick]),
        learning_rate=float(peak_learning_rate(c)),
        sparsity_range=(s_min, s_max),
    )
