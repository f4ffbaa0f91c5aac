"""Robust multi-start fitting of a loss law: Huber on log-loss residuals, L-BFGS-B.

Objective (Sec. 4.2; Hoffmann et al. 2022, Sec. 3.3; Epoch, arXiv:2404.10102):

    F(theta) = sum_i w_i * Huber_delta(log L_pred(x_i; theta) - log L_i)

minimised over theta = log-coefficients. Scale invariance: scipy's L-BFGS-B stops when
``(f_k - f_k+1) / max(|f_k|, |f_k+1|, 1) <= ftol``, an *absolute* test whenever |f| < 1, so a
small objective (a mean, or Huber with delta = 1e-3) stops far from the optimum. ``polish``
therefore divides F by its value at the start of each round and repeats rounds until a
round no longer improves, which makes the optimum independent of sum/mean/any scale.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.law.extrapolation import support_of_runs
from mosaic.law.forms import LawForm
from mosaic.law.law import ScalingLaw
from mosaic.law.rundata import RunData

Reduction = Literal["sum", "mean"]

DEFAULT_HUBER_DELTA = 0.1  # Sec. 4.2 ("delta_Huber = 0.1"); Chinchilla literature uses 1e-3
DEFAULT_STARTS = 4096  # size of the spread of initialisations (a scrambled Sobol design)
DEFAULT_POLISHED = 32  # best screened starts refined to convergence with L-BFGS-B
SCREEN_CHUNK = 2048  # starts evaluated per vectorised block while screening

_FTOL = 1e-14  # relative test on an objective normalised to 1 at each round's start
_GTOL = 1e-10  # projected-gradient test on the same normalised objective
_MAX_ROUNDS = 8
_MAX_ITER = 20_000
_MAXCOR = 30  # L-BFGS memory; the ridges of Eq. 10 need more than scipy's 10
_ROUND_IMPROVEMENT = 1e-12  # stop rounds once one improves F by less than this fraction


@dataclass(frozen=True)
class FitSettings:
    """How to fit: objective, starts and bounds (validated on construction).

    Attributes:
        huber_delta: Huber threshold on log-loss residuals (paper: 0.1; Chinchilla: 1e-3).
        reduction: "sum" or "mean" over runs; the optimum does not depend on it.
        starts: size of the seeded spread of initialisations screened vectorised.
        n_polished: best screened starts refined to convergence with L-BFGS-B.
        bounds: optional natural-unit (low, high) per coefficient name.
        seed: seed of the spread of initialisations.
    """

    huber_delta: float = DEFAULT_HUBER_DELTA
    reduction: Reduction = "sum"
    starts: int = DEFAULT_STARTS
    n_polished: int = DEFAULT_POLISHED
    bounds: Mapping[str, tuple[float, float]] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.huber_delta) and self.huber_delta > 0):
            raise MosaicInputError(
                f"huber_delta must be a positive number, got {self.huber_delta!r}"
            )
        if self.reduction not in ("sum", "mean"):
            raise MosaicInputError(f"reduction must be 'sum' or 'mean', got {self.reduction!r}")
        if self.starts < 1:
            raise MosaicInputError(f"starts must be a positive integer, got {self.starts}")
        if self.n_polished < 1:
            raise MosaicInputError(f"n_polished must be a positive integer, got {self.n_polished}")


@dataclass(frozen=True)
class HuberLogObjective:
    """Weighted Huber loss of log-loss residuals, vectorised over coefficient sets."""

    form: LawForm
    design: np.ndarray  # (n, K, P)
    log_loss: np.ndarray  # (n,) observed log loss
    weights: np.ndarray  # (n,) per-run multipliers (1 for a sum, 1/n for a mean)
    delta: float

    @classmethod
    def build(cls, data: RunData, form: LawForm, settings: FitSettings) -> HuberLogObjective:
        weights = np.full(data.n_runs, 1.0 / data.n_runs if settings.reduction == "mean" else 1.0)
        return cls(
            form=form,
            design=form.design(data.log_features(form)),
            log_loss=np.log(data.loss),
            weights=weights,
            delta=float(settings.huber_delta),
        )

    def subset(self, rows: np.ndarray) -> HuberLogObjective:
        """The objective on a subset of runs (indices may repeat: case resampling)."""
        return HuberLogObjective(
            self.form, self.design[rows], self.log_loss[rows], self.weights[rows], self.delta
        )

    def with_log_loss(self, log_loss: np.ndarray) -> HuberLogObjective:
        """The same runs with replaced observations (wild bootstrap)."""
        return HuberLogObjective(self.form, self.design, log_loss, self.weights, self.delta)

    def residuals(self, log_coefs: np.ndarray) -> np.ndarray:
        """(m, n) residuals log L_pred - log L_obs."""
        return self.form.log_predict(log_coefs, self.design).value - self.log_loss

    def __call__(self, log_coefs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Objective (m,) and its gradient (m, P) for (m, P) log-coefficients."""
        prediction = self.form.log_predict(log_coefs, self.design)
        residual = prediction.value - self.log_loss
        size = np.abs(residual)
        # Huber (1964), same convention as scipy.special.huber: r^2/2 inside, linear outside.
        huber = np.where(
            size <= self.delta, 0.5 * residual**2, self.delta * (size - 0.5 * self.delta)
        )
        slope = np.clip(residual, -self.delta, self.delta) * self.weights
        return np.einsum("mn,n->m", huber, self.weights), prediction.pullback(slope)


def natural_bounds(form: LawForm,
                   bounds: Mapping[str, tuple[float, float]] | None) -> np.ndarray:
    """(P, 2) natural-unit bounds: form defaults, overridden per coefficient by ``bounds``."""
    natural = form.default_bounds()
    for name, pair in (bounds or {}).items():
        if name not in form.params:
            raise MosaicInputError(
                f"bounds: unknown coefficient {name!r} for form '{form.name}'; "
                f"allowed: {list(form.params)}"
            )
        low, high = (float(v) for v in pair)
        if not (0 < low < high and np.isfinite(high)):
            raise MosaicInputError(
                f"bounds[{name!r}] = {pair!r}; need 0 < low < high (coefficients are positive)"
            )
        natural[form.params.index(name)] = (low, high)
    return natural


def log_bounds(form: LawForm, bounds: Mapping[str, tuple[float, float]] | None) -> np.ndarray:
    """(P, 2) log-space bounds: the log of :func:`natural_bounds`."""
    return np.log(natural_bounds(form, bounds))


# A coefficient within this share of its box's log range of a bound is reported as on it:
# L-BFGS-B stops exactly on an active bound, but in a box of 20 decades it also stops a few
# percent in value short of one it is pushed against (a trial: e = 1.09998e-10 against
# 1e-10 and gamma = 1.00003e-6 against 1e-6 went unreported).
AT_BOUND_LOG_SHARE = 0.01


def clip_to_bounds(form: LawForm, log_coefs: np.ndarray,
                   bounds: Mapping[str, tuple[float, float]] | None
                   ) -> tuple[dict[str, float], dict[str, dict[str, float | str]]]:
    """Natural-unit coefficients clipped into the declared bounds, and those on a bound.

    exp(log(high)) can exceed ``high`` by an ulp (1e10 -> 10000000000.000004), a value the
    law file's own check refuses; clipping in natural units makes what is written readable.
    """
    natural = natural_bounds(form, bounds)
    values = np.clip(np.exp(np.asarray(log_coefs, dtype=float)), natural[:, 0], natural[:, 1])
    on_bound: dict[str, dict[str, float | str]] = {}
    for name, value, (low, high) in zip(form.params, values, natural, strict=True):
        margin = AT_BOUND_LOG_SHARE * np.log(high / low)
        if np.log(value / low) <= margin:
            on_bound[name] = {"side": "lower", "bound": float(low)}
        elif np.log(high / value) <= margin:
            on_bound[name] = {"side": "upper", "bound": float(high)}
    return dict(zip(form.params, values.tolist(), strict=True)), on_bound


def bound_note(on_bound: Mapping[str, Mapping[str, float | str]]) -> str | None:
    """One line naming the coefficients that sit on a fit bound, or None."""
    if not on_bound:
        return None
    parts = [f"{name} at its {info['side']} bound {float(info['bound']):g}"
             for name, info in on_bound.items()]
    return ("coefficient(s) on the fit's bound, not a free optimum: " + ", ".join(parts)
            + "; the data do not pin them (more, longer or more varied runs)")


# A feature spanning less than this factor (max / min) over the fitted runs leaves the
# exponents on it unidentified: x^-p is then a constant its term's prefactor absorbs.
CONSTANT_FEATURE_SPAN = 1.01
FEATURE_SYMBOLS = {"n_total": "N_total", "tokens": "D", "active_fraction": "1 - S",
                   "split_factor": "G"}


def unidentified_exponents(data: RunData, form: LawForm) -> dict[str, list[str]]:
    """Per feature the runs hold (nearly) constant, the form's exponents on it: the data
    cannot tell them from their prefactors, so their fitted values are arbitrary."""
    logs = data.log_features(form)
    constant = {}
    for column, feature in enumerate(form.features):
        if np.ptp(logs[:, column]) < np.log(CONSTANT_FEATURE_SPAN):
            constant[feature] = [exponent for term in form.terms
                                 for name, exponent in term.factors if name == feature]
    return constant


def unidentified_note(unidentified: Mapping[str, Sequence[str]]) -> str | None:
    """One line naming the exponents no run varies, or None."""
    if not unidentified:
        return None
    parts = [f"{FEATURE_SYMBOLS.get(feature, feature)} (exponent {', '.join(exponents)})"
             for feature, exponents in unidentified.items()]
    return (f"the runs vary {' or '.join(parts)} by less than "
            f"{CONSTANT_FEATURE_SPAN - 1:.0%}: those exponents are not identified and their "
            "fitted values are arbitrary (a different --seed gives others); vary them across "
            "runs to fit them, and read predictions away from the runs' values as unsupported")


def spread_starts(form: LawForm, n_starts: int, seed: int) -> np.ndarray:
    """(n, P) log-coefficient starts filling ``form.init_box`` (scrambled Sobol, log-uniform)."""
    box = np.log(np.array([form.init_box[p] for p in form.params]))
    # Sobol' balance holds for powers of two: draw the next one up and keep the first n.
    from scipy.stats import qmc  # imported here: scipy.stats costs ~0.2 s at start-up

    sampler = qmc.Sobol(d=len(form.params), scramble=True, seed=seed)
    unit = sampler.random_base2(int(np.ceil(np.log2(n_starts))))[:n_starts]
    return box[:, 0] + unit * (box[:, 1] - box[:, 0])


def starts_from_values(form: LawForm, values: Sequence[Mapping[str, float]]) -> np.ndarray:
    """(n, P) log-coefficient starts from explicit natural-unit coefficient sets."""
    return np.log(np.array([form.vector(v) for v in values]))


def polish(
    objective: HuberLogObjective, start: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, float]:
    """Run L-BFGS-B from one start to convergence; returns (log-coefficients, objective).

    Each round divides the objective by its value at the round's start, so the stopping
    tests act on relative changes whatever the objective's scale (see the module docstring).
    """
    from scipy.optimize import minimize  # imported here for fast CLI start-up
    x = np.clip(start, bounds[:, 0], bounds[:, 1])
    f = float(objective(x)[0][0])
    for _ in range(_MAX_ROUNDS):
        if not 0.0 < f < np.inf:  # an exact fit, or a start where the law overflows
            break
        scale = f

        def normalised(z: np.ndarray, scale: float = scale) -> tuple[float, np.ndarray]:
            value, grad = objective(z)
            return float(value[0]) / scale, grad[0] / scale

        result = minimize(
            normalised,
            x,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={
                "ftol": _FTOL,
                "gtol": _GTOL,
                "maxcor": _MAXCOR,
                "maxiter": _MAX_ITER,
                "maxfun": _MAX_ITER,
            },
        )
        f_new = float(result.fun) * scale
        if not f_new < f:
            break
        improvement = (f - f_new) / f
        x, f = result.x, f_new
        if improvement < _ROUND_IMPROVEMENT:
            break
    return x, f


@dataclass(frozen=True)
class FitResult:
    """Outcome of a multi-start fit, with what is needed to refit (bootstrap, scans)."""

    law: ScalingLaw
    objective: float  # F at the optimum, in the settings' reduction
    log_coefs: np.ndarray  # (P,) optimum in log-coefficient space
    data: RunData  # the runs that were fitted
    settings: FitSettings
    n_starts: int  # initialisations screened
    polished_objectives: np.ndarray  # objective reached from each refined start, ascending

    @property
    def form(self) -> LawForm:
        return self.law.form

    def objective_function(self) -> HuberLogObjective:
        return HuberLogObjective.build(self.data, self.form, self.settings)

    def log_bounds(self) -> np.ndarray:
        return log_bounds(self.form, self.settings.bounds)


def single_split_factor(data: RunData, form: LawForm) -> float | None:
    """For forms without a G term (Eq. 9 is fit per G, Sec. 4.1): the one G in the data."""
    if "split_factor" in form.features or data.split_factor is None:
        return None
    values = np.unique(data.split_factor)
    if values.size > 1:
        raise MosaicInputError(
            f"form '{form.name}' has no split-factor term, so it fits one G at a time; "
            f"the data has G in {values.tolist()}: fit the rows of one G (--split-factor G, "
            "or a runs file holding one split_factor) or use --form joint"
        )
    return float(values[0])


def fit_law(
    data: RunData,
    form: LawForm,
    settings: FitSettings | None = None,
    *,
    initial: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FitResult:
    """Fit ``form`` to ``data``: screen many starts vectorised, refine the best with L-BFGS-B.

    ``initial`` optionally replaces the seeded spread by explicit (n, P) log-coefficient
    starts (see ``starts_from_values``), e.g. a single published fit. ``progress(done,
    total)`` is called after each screened block and each refined start.
    """
    settings = settings or FitSettings()
    stratum = single_split_factor(data, form)
    objective = HuberLogObjective.build(data, form, settings)
    box = log_bounds(form, settings.bounds)
    if initial is None:
        initial = spread_starts(form, settings.starts, settings.seed)
    initial = np.atleast_2d(np.asarray(initial, dtype=float))
    if initial.shape[1] != len(form.params) or not np.all(np.isfinite(initial)):
        raise MosaicInputError(
            f"initial must be finite log-coefficients of shape (n, {len(form.params)})"
        )
    initial = np.clip(initial, box[:, 0], box[:, 1])
    blocks = np.array_split(initial, -(-len(initial) // SCREEN_CHUNK))
    steps = len(blocks) + min(settings.n_polished, len(initial))
    scores = []
    for done, block in enumerate(blocks, start=1):
        scores.append(objective(block)[0])
        if progress is not None:
            progress(done, steps)
    screened = np.concatenate(scores)
    screened = np.where(np.isfinite(screened), screened, np.inf)
    order = np.argsort(screened, kind="stable")[: settings.n_polished]
    refined = []
    for done, i in enumerate(order, start=len(blocks) + 1):
        refined.append(polish(objective, initial[i], box))
        if progress is not None:
            progress(done, steps)
    objectives = np.array([f for _, f in refined])
    best = int(np.argmin(objectives))
    log_coefs = refined[best][0]
    coefficients, on_bound = clip_to_bounds(form, log_coefs, settings.bounds)
    provenance: dict[str, object] = {}
    if on_bound:
        provenance["at_bound"] = on_bound
    unidentified = unidentified_exponents(data, form)
    if unidentified:
        provenance["unidentified"] = unidentified
    law = ScalingLaw(
        form=form,
        coefficients=coefficients,
        split_factor=stratum,
        provenance={
            **provenance,
            "fit": f"Huber (delta {settings.huber_delta:g}) on log L, multi-start L-BFGS-B",
            "n_runs": data.n_runs,
            "data": data.source,
            "data_support": support_of_runs(data.n_total, data.tokens, data.n_active,
                                            data.split_factor, data.recorded_vocab),
        },
    )
    return FitResult(
        law=law,
        objective=float(objectives[best]),
        log_coefs=log_coefs,
        data=data,
        settings=settings,
        n_starts=len(initial),
        polished_objectives=np.sort(objectives),
    )
