"""Law and performance uncertainty through the search -> ranking risk.

Two sources, alone or together, each as B samples:

* the law: bootstrap coefficient samples re-score the candidates at their tokens;
* the performance model: a throughput multiplier per candidate and sample
  (:mod:`mosaic.plan.throughput_spread`, seeded) scales its token budget D* (Eq. 25);
  the trained tokens are min(D*·m, tpp_max·N_act), and the loss is taken at them (the
  tpp_min floor selects the candidates once, at the point prediction, and is not
  re-applied per sample). With both, law sample b is paired with multiplier draw b.

The candidates are the geometries trainable at the point prediction. Per candidate we
report the probability of being the optimum, a percentile loss interval, the expected loss
and the regret L_i − min_j L_j (per sample). The **robust choice** is the candidate of
minimum expected loss over the samples (equivalently minimum expected regret); the
minimax-regret candidate is reported next to it.

Samples file (written by :func:`save_samples`, e.g. from ``bootstrap_fit``; a law file of
``mosaic law fit --out`` stores intervals, not samples):

* JSON ``{"format": "mosaic-law-samples/1", "form": "joint", "params": [...],
  "log_coefficients": [[...], ...]}`` — one row per sample, natural-log coefficients;
* or CSV with a header of coefficient names and one row per sample in natural units.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.io_atomic import write_text_atomic
from mosaic.law import BootstrapResult, ScalingLaw
from mosaic.law.forms import LawForm, get_form
from mosaic.plan.search import PlanResult
from mosaic.plan.throughput_spread import ThroughputSpread
from mosaic.table_files import read_table

SAMPLES_FORMAT = "mosaic-law-samples/1"
DEFAULT_LEVEL = 0.90
PERF_SAMPLES = 2000  # throughput draws when no law samples set the count
# A law file stores each coefficient to full float precision, clipped into its bounds (an
# ulp beyond exp(log bound) is pulled back): its log differs from the fit's by far less.
ESTIMATE_LOG_TOLERANCE = 1e-9


@dataclass(frozen=True)
class LawSamples:
    """Coefficient samples of one law form: (B, P) natural-log coefficients, and the point
    fit's (P,) log-coefficients they were bootstrapped around (None when not recorded: a
    CSV, or a file from before it was)."""

    form: LawForm
    log_coefs: np.ndarray
    estimate: np.ndarray | None = None

    def __post_init__(self) -> None:
        shape = self.log_coefs.shape
        if self.log_coefs.ndim != 2 or shape[1] != len(self.form.params) or shape[0] < 2:
            raise MosaicInputError(
                f"law samples must be a (B >= 2, {len(self.form.params)}) array for form "
                f"'{self.form.name}', got shape {shape}")
        if not np.all(np.isfinite(self.log_coefs)):
            raise MosaicInputError("law samples hold a non-finite log-coefficient")
        if self.estimate is not None and (self.estimate.shape != (shape[1],)
                                          or not np.all(np.isfinite(self.estimate))):
            raise MosaicInputError(f"the samples' estimate must be {shape[1]} finite "
                                   f"log-coefficients, got shape {self.estimate.shape}")

    @classmethod
    def from_bootstrap(cls, result: BootstrapResult) -> LawSamples:
        return cls(result.fit.form, np.asarray(result.samples, dtype=float),
                   np.asarray(result.fit.log_coefs, dtype=float))


def save_samples(samples: LawSamples, path: str | Path) -> None:
    """Write ``samples`` as a JSON samples file."""
    payload = {"format": SAMPLES_FORMAT, "form": samples.form.name,
               "params": list(samples.form.params),
               "log_coefficients": samples.log_coefs.tolist()}
    if samples.estimate is not None:
        payload["estimate_log_coefficients"] = samples.estimate.tolist()
    write_text_atomic(path, json.dumps(payload) + "\n")


def load_samples(path: str | Path, form_name: str = "joint") -> LawSamples:
    """Read a JSON or CSV samples file (module docstring); CSV rows are of ``form_name``."""
    path = Path(path)
    if not path.is_file():
        raise MosaicInputError(f"samples file {str(path)!r} does not exist or is not a file")
    if path.suffix.lower() == ".csv":
        return _samples_from_csv(path, get_form(form_name))
    from mosaic.schema_validation import parse_json, read_text

    payload = parse_json(read_text(path, "samples file"), f"samples file {str(path)!r}")
    if not isinstance(payload, dict) or payload.get("format") != SAMPLES_FORMAT:
        raise MosaicInputError(f"{path}: expected a JSON object with format {SAMPLES_FORMAT!r}")
    form = get_form(str(payload.get("form")))
    if list(payload.get("params", [])) != list(form.params):
        raise MosaicInputError(f"{path}: params must be {list(form.params)} in that order")
    try:
        log_coefs = np.asarray(payload["log_coefficients"], dtype=float)
        estimate = payload.get("estimate_log_coefficients")
        estimate = None if estimate is None else np.asarray(estimate, dtype=float)
    except (KeyError, TypeError, ValueError):
        raise MosaicInputError(f"{path}: 'log_coefficients' must be a list of number rows "
                               "and 'estimate_log_coefficients' (optional) a number list"
                               ) from None
    return LawSamples(form, log_coefs, estimate)


def check_samples_describe(samples: LawSamples, law: ScalingLaw, where: str) -> None:
    """MosaicInputError when ``samples`` were not drawn around ``law``: more than half of the
    coefficients lie outside the samples' range (a bootstrap scatters around the law it
    refits; samples of another law gave a point optimum outside its own loss interval)."""
    if samples.form.name != law.form.name:
        raise MosaicInputError(f"{where}: samples of form '{samples.form.name}' for a "
                               f"'{law.form.name}' law")
    point = law.log_coefs
    if samples.estimate is not None:
        # the file names the fit it scattered around: it must be this law (a trial: samples
        # of a 19-run fit passed the range check below for the law of 13 of those runs)
        # with the relative gap: two fits of one table under other seeds agree to ~1e-6,
        # which six digits showed as equal figures (a trial)
        differ = [f"{name} {np.exp(own):.6g} (samples' fit {np.exp(theirs):.6g}, "
                  f"{abs(np.expm1(own - theirs)):.1e} apart)"
                  for name, own, theirs in zip(law.form.params, point, samples.estimate,
                                               strict=True)
                  if abs(own - theirs) > ESTIMATE_LOG_TOLERANCE]
        if differ:
            raise MosaicInputError(
                f"{where}: these samples were bootstrapped around another fit than the "
                f"law in use ({len(differ)} of {len(point)} coefficients differ: "
                f"{'; '.join(differ[:3])}): pass the law of the same fit (its seed "
                "included) with --law, or bootstrap this one (`mosaic law fit ... --bootstrap "
                "N --samples-out`)")
        return
    low, high = samples.log_coefs.min(axis=0), samples.log_coefs.max(axis=0)
    outside = [name for name, value, lo, hi in zip(law.form.params, point, low, high,
                                                   strict=True)
               if not lo - 1e-9 <= value <= hi + 1e-9]
    if 2 * len(outside) > len(point):
        raise MosaicInputError(
            f"{where}: these samples were not drawn around the law in use ({len(outside)} of "
            f"{len(point)} coefficients, {', '.join(outside[:4])}, lie outside their range): "
            "pass the law they were bootstrapped from with --law")


def _samples_from_csv(path: Path, form: LawForm) -> LawSamples:
    # read as every table is (table_files.read_table): an empty or non-UTF-8 file raised
    # pandas' EmptyDataError / UnicodeDecodeError out of plan (a trial)
    table = read_table(path, "samples file")
    missing = [p for p in form.params if p not in table.columns]
    if missing:
        raise MosaicInputError(f"{path}: columns {missing} of form '{form.name}' are missing")
    try:
        values = table[list(form.params)].to_numpy(dtype=float)
    except (TypeError, ValueError):  # a cell of text ('abc' raised ValueError out of plan)
        values = np.full(1, np.nan)
    if not np.all(values > 0):
        raise MosaicInputError(f"{path}: coefficients must be positive numbers")
    return LawSamples(form, np.log(values))


@dataclass(frozen=True)
class Uncertainty:
    """Per trainable candidate (in ``rows`` order, the point-law ranking).

    Attributes:
        p_optimal: share of samples in which the candidate has the lowest loss.
        loss_low, loss_median, loss_high: percentile interval at ``level``.
        expected_loss, expected_regret, max_regret: over the samples.
        robust_row: minimum expected loss (the robust choice).
        minimax_row: minimum worst-case regret.
        sources: what was propagated (law samples, throughput spread), for reports.
    """

    rows: np.ndarray
    samples: int
    level: float
    p_optimal: np.ndarray
    loss_low: np.ndarray
    loss_median: np.ndarray
    loss_high: np.ndarray
    expected_loss: np.ndarray
    expected_regret: np.ndarray
    max_regret: np.ndarray
    robust_row: int
    minimax_row: int
    sources: tuple[str, ...] = ()

    def summary(self, row: int) -> dict[str, Any]:
        """The uncertainty columns of one grid row."""
        i = int(np.flatnonzero(self.rows == row)[0])
        return {
            "p_optimal": float(self.p_optimal[i]),
            "loss_interval": [float(self.loss_low[i]), float(self.loss_high[i])],
            "loss_median": float(self.loss_median[i]),
            "expected_loss": float(self.expected_loss[i]),
            "expected_regret": float(self.expected_regret[i]),
            "max_regret": float(self.max_regret[i]),
        }


def sample_losses(result: PlanResult, samples: LawSamples, rows: np.ndarray,
                  tokens: np.ndarray | None = None) -> np.ndarray:
    """(B, n) predicted loss of grid ``rows`` under every coefficient sample, at the
    result's tokens or at ``tokens`` the law sees ((B, n): sample b at row b)."""
    logs = _log_features(result, rows)
    form = samples.form
    if tokens is None:
        features = np.column_stack([logs[f] for f in form.features])
        return np.exp(form.log_predict(samples.log_coefs, form.design(features)).value)
    return losses_at_tokens(form, samples.log_coefs, logs, np.log(tokens))


def _log_features(result: PlanResult, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The law's log-features of grid ``rows`` at the result's tokens."""
    grid = result.grid
    return {
        "n_total": np.log(grid.n_total[rows]),
        "tokens": np.log(result.space.law_tokens(result.tokens[rows])),  # D' (repetition)
        "active_fraction": np.log1p(-grid.sparsity[rows]),
        "split_factor": np.log(grid.split_factor[rows].astype(float)),
    }


def losses_at_tokens(form: LawForm, log_coefs: np.ndarray, logs: dict[str, np.ndarray],
                     log_tokens: np.ndarray) -> np.ndarray:
    """(B, n) loss at per-sample tokens: (M, P) coefficients, M = 1 or B (row b pairs with
    sample b). Only D varies, and log L is a log-sum-exp of terms linear in log D
    (Eq. 10), so each term is evaluated once at log D = 0 and shifted by its D exponent:
    term_k(b, n) = term_k(n; D = 1) − ε_k·log D(b, n)."""
    features = np.column_stack([np.zeros_like(logs["n_total"]) if f == "tokens" else logs[f]
                                for f in form.features])
    base = form.term_logs(log_coefs, form.design(features))  # (M, n, K)
    slope = form.term_exponents(log_coefs)[:, :, form.features.index("tokens")]  # (M, K)
    terms = base - log_tokens[:, :, None] * slope[:, None, :]  # (B, n, K)
    top = terms.max(axis=2, keepdims=True)
    return np.exp(top[:, :, 0] + np.log(np.exp(terms - top).sum(axis=2)))


def sampled_tokens(result: PlanResult, rows: np.ndarray, multipliers: np.ndarray
                   ) -> np.ndarray:
    """(B, n) trained tokens min(D*·m, tpp_max·N_act) of ``rows`` under multipliers m."""
    cap = result.space.tpp_max * result.grid.n_active[rows]
    return np.minimum(result.budget_tokens[rows] * multipliers, cap)


def propagate(
    result: PlanResult, law: ScalingLaw, samples: LawSamples | None,
    level: float = DEFAULT_LEVEL, *, spread: ThroughputSpread | None = None,
    seed: int = 0, perf_samples: int = PERF_SAMPLES,
) -> Uncertainty:
    """Re-score the trainable candidates of ``result`` under law ``samples`` and/or
    throughput multipliers drawn from ``spread`` (for the candidates in ranking order)."""
    if samples is None and spread is None:
        raise MosaicInputError("nothing to propagate: give law samples or a throughput spread")
    if samples is not None and samples.form.name != law.form.name:
        raise MosaicInputError(
            f"samples are of form '{samples.form.name}' but the law is '{law.form.name}'")
    if not 0 < level < 1:
        raise MosaicInputError(f"interval level must be in (0, 1), got {level!r}")
    rows = result.ranking
    if rows.size == 0:
        raise MosaicInputError("no trainable geometry to propagate uncertainty through")
    sources = []
    tokens = None
    if spread is not None:
        if len(spread.scopes) != rows.size:
            raise ValueError("throughput spread must have one entry per ranked candidate")
        draws = perf_samples if samples is None else samples.log_coefs.shape[0]
        # the tokens the law sees: D' under bounded unique data (SearchSpace.law_tokens)
        tokens = result.space.law_tokens(sampled_tokens(result, rows,
                                                        spread.sample(draws, seed)))
        sources.append(f"performance: {spread.description}, {draws} draws (seed {seed})")
    if samples is not None:
        sources.insert(0, f"law: {samples.log_coefs.shape[0]} coefficient samples")
        losses = sample_losses(result, samples, rows, tokens)
    else:
        # the intervals then hold the throughput's spread alone: a law far outside its data
        # showed a zero-width loss interval (a trial)
        sources.append("not the law's: its coefficients are taken as exact (give "
                       "--bootstrap-samples from `law fit`/`ladder fit --bootstrap N "
                       "--samples-out`)")
        losses = losses_at_tokens(law.form, law.log_coefs[None, :],
                                  _log_features(result, rows), np.log(tokens))
    regret = losses - losses.min(axis=1, keepdims=True)
    winners = np.argmin(losses, axis=1)
    tail = (1 - level) / 2
    low, median, high = np.quantile(losses, [tail, 0.5, 1 - tail], axis=0)
    expected = losses.mean(axis=0)
    worst = regret.max(axis=0)
    return Uncertainty(
        rows=rows,
        samples=losses.shape[0],
        level=level,
        p_optimal=np.bincount(winners, minlength=rows.size) / losses.shape[0],
        loss_low=low,
        loss_median=median,
        loss_high=high,
        expected_loss=expected,
        expected_regret=regret.mean(axis=0),
        max_regret=worst,
        robust_row=int(rows[np.argmin(expected)]),
        minimax_row=int(rows[np.argmin(worst)]),
        sources=tuple(sources),
    )
