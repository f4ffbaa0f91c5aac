"""Held-out validation as in the paper: hold out the largest runs, report fit metrics.

Sec. 4.2 / Appendix B.1: the top 10% of runs by N_act within each G stratum are held out of
the fit; RMSE and R^2 are reported in loss units over all runs, and RMSE on the held-out runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.law.fit import FitResult, FitSettings, fit_law, single_split_factor
from mosaic.law.forms import LawForm
from mosaic.law.law import ScalingLaw
from mosaic.law.rundata import RunData

HOLDOUT_FRACTION = 0.1  # Sec. 4.2: "top-10% of runs by N_act within each G-stratum"


def distinct_runs(runs: RunData) -> int:
    """Runs at distinct (N_total, N_active, D, G) points: repeated rows add no information
    a law's coefficients can be fitted from."""
    columns = [c for c in (runs.n_total, runs.n_active, runs.tokens, runs.split_factor)
               if c is not None]
    return int(np.unique(np.column_stack(columns), axis=0).shape[0])


def check_fittable(runs: RunData, law_form: LawForm) -> None:
    """A degenerate data set is an error before the fit, not a meaningless law after it: the
    columns the form reads, more distinct runs than it has coefficients, and losses that
    vary; one G for a form without a split-factor term (said before any warning about the
    fit, as the fit itself would refuse it)."""
    runs.log_features(law_form)  # a column the form needs is missing: say so first
    single_split_factor(runs, law_form)
    n_params = len(law_form.params)
    distinct = distinct_runs(runs)
    if distinct <= n_params:
        repeated = (f" ({len(runs.loss)} rows, {len(runs.loss) - distinct} repeating another)"
                    if distinct < len(runs.loss) else "")
        raise MosaicInputError(
            f"{runs.source}: {distinct} distinct run(s){repeated} for the {law_form.name} "
            f"form's {n_params} coefficients; allowed: at least {n_params + 1} runs")
    log_loss = np.log(runs.loss)
    if not np.all(np.isfinite(log_loss)) or np.ptp(log_loss) < 1e-9:
        raise MosaicInputError(
            f"{runs.source}: every run has the same loss ({runs.loss[0]:g}); a law fit needs "
            "losses that vary with size and tokens")


def holdout_mask(data: RunData, fraction: float = HOLDOUT_FRACTION) -> np.ndarray:
    """True for held-out runs: per G stratum, the round(fraction * n) largest by N_act, ties
    (one geometry at several token budgets) broken by the larger D, then the lower loss: the
    same runs in any row order hold out the same ones (a trial's `ladder collect` table, its
    ladder's runs.csv reordered, fitted alpha 10.0 against 0.976)."""
    if not 0 <= fraction < 1:
        raise MosaicInputError(f"holdout fraction must satisfy 0 <= f < 1, got {fraction}")
    held_out = np.zeros(data.n_runs, dtype=bool)
    for g in np.unique(data.strata):
        rows = np.flatnonzero(data.strata == g)
        count = int(np.floor(fraction * rows.size + 0.5))
        if count:
            largest_first = rows[np.lexsort((data.loss[rows], -data.tokens[rows],
                                             -data.active_params[rows]))]
            held_out[largest_first[:count]] = True
    return held_out


@dataclass(frozen=True)
class ParityData:
    """Observed vs predicted loss per run, for parity plots (Fig. 3, 7)."""

    observed: np.ndarray
    predicted: np.ndarray
    held_out: np.ndarray
    split_factor: np.ndarray


@dataclass(frozen=True)
class FitMetrics:
    """Fit quality in loss units (not log)."""

    rmse: float  # over all runs
    r2: float  # over all runs
    heldout_rmse: float  # over held-out runs; NaN when none are held out
    train_rmse: float
    n_runs: int
    n_heldout: int
    objective: float  # Huber objective at the optimum, on the training runs


@dataclass(frozen=True)
class ValidatedFit:
    """A fit on the training runs together with its held-out evaluation."""

    fit: FitResult
    metrics: FitMetrics
    parity: ParityData

    @property
    def law(self) -> ScalingLaw:
        return self.fit.law


def holdout_to_fit(runs: RunData, law_form: LawForm, holdout: float | None
                   ) -> tuple[float, str | None]:
    """The holdout fraction to fit with, and why it is not the one asked for: without
    --holdout, the paper's 10% (Sec. 4.2) unless holding it out leaves fewer runs than the
    form needs; then every run is fitted and nothing is held out (a tiny ladder with one
    more unbalanced rung than usual could not be fitted; a trial). `law fit` and `ladder
    fit` both (a later trial: the same 13 runs were fitted by one and refused by the other).
    """
    if holdout is not None:
        return holdout, None
    held_out = holdout_mask(runs, HOLDOUT_FRACTION)
    try:
        check_fittable(runs.subset(~held_out), law_form)
    except MosaicInputError:
        return 0.0, (f"holding out {int(held_out.sum())} of {runs.n_runs} runs (the default "
                     f"--holdout {HOLDOUT_FRACTION:g}) would leave too few for the "
                     f"{law_form.name} form; fitted all {runs.n_runs} with none held out, so "
                     "the held-out RMSE is not measured")
    return HOLDOUT_FRACTION, None


def _rmse(error: np.ndarray) -> float:
    return float(np.sqrt(np.mean(error**2))) if error.size else float("nan")


def evaluate(
    law: ScalingLaw, data: RunData, held_out: np.ndarray, objective: float
) -> tuple[FitMetrics, ParityData]:
    """Metrics and parity data of ``law`` on ``data`` given the held-out mask."""
    predicted = law.predict_runs(data)
    error = predicted - data.loss
    total = float(np.sum((data.loss - data.loss.mean()) ** 2))
    metrics = FitMetrics(
        rmse=_rmse(error),
        r2=1.0 - float(np.sum(error**2)) / total if total > 0 else float("nan"),
        heldout_rmse=_rmse(error[held_out]),
        train_rmse=_rmse(error[~held_out]),
        n_runs=data.n_runs,
        n_heldout=int(held_out.sum()),
        objective=objective,
    )
    parity = ParityData(data.loss, predicted, held_out, data.strata)
    return metrics, parity


def fit_with_holdout(
    data: RunData,
    form: LawForm,
    settings: FitSettings | None = None,
    *,
    holdout_fraction: float = HOLDOUT_FRACTION,
    progress: Callable[[int, int], None] | None = None,
) -> ValidatedFit:
    """Hold out the largest runs per G stratum, fit the rest, evaluate on all (Sec. 4.2);
    ``progress`` as in :func:`fit_law`."""
    held_out = holdout_mask(data, holdout_fraction)
    if held_out.all():
        raise MosaicInputError("holdout leaves no runs to fit; lower the holdout fraction")
    fitted = data.subset(~held_out)
    if held_out.any():  # the caller's check_fittable counted the held-out runs too
        try:
            check_fittable(fitted, form)
        except MosaicInputError as exc:
            raise MosaicInputError(
                f"holding out {int(held_out.sum())} of {data.n_runs} runs (holdout "
                f"{holdout_fraction:g}) leaves too little to fit (lower --holdout or add "
                f"runs): {exc}") from None
    fit = fit_law(fitted, form, settings, progress=progress)
    metrics, parity = evaluate(fit.law, data, held_out, fit.objective)
    return ValidatedFit(fit=fit, metrics=metrics, parity=parity)
