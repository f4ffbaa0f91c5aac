"""A loss law: a form plus its coefficients, with prediction and a JSON file format.

Law file (JSON, ``"format": "mosaic-law/1"``)::

    {"format": "mosaic-law/1", "form": "joint",
     "coefficients": {"a": 8.462, ...},        # every coefficient of the form, natural units
     "split_factor": null,                     # per-g laws: the G stratum they describe
     "provenance": {...}}                      # free-form: source, fit settings, metrics, CIs
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.law.forms import DEFAULT_PREFACTOR_BOUNDS, LawForm, get_form
from mosaic.law.provenance_check import check_provenance
from mosaic.limits import is_number

if TYPE_CHECKING:
    from mosaic.law.rundata import RunData

LAW_FILE_FORMAT = "mosaic-law/1"
DEFAULT_LAW_RESOURCE = "joint_table2.json"

ArrayLike = float | np.ndarray


def _positive(name: str, values: ArrayLike) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    good = np.isfinite(array) & (array > 0)
    if not np.all(good):
        bad = float(array[~good].reshape(-1)[0])
        raise MosaicInputError(f"{name} must be a positive finite number, got {bad:g}")
    return array


@dataclass(frozen=True)
class ScalingLaw:
    """A law form with coefficients; ``predict`` takes raw counts (parameters, tokens)."""

    form: LawForm
    coefficients: Mapping[str, float]
    split_factor: float | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        values = self.form.vector(self.coefficients)
        ordered = dict(zip(self.form.params, values.tolist(), strict=True))
        object.__setattr__(self, "coefficients", MappingProxyType(ordered))
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))
        if self.split_factor is not None:
            _positive("split_factor", self.split_factor)
            object.__setattr__(self, "split_factor", float(self.split_factor))

    @property
    def log_coefs(self) -> np.ndarray:
        """(P,) natural logs of the coefficients in ``form.params`` order."""
        return np.log(np.array(list(self.coefficients.values())))

    def check_split_factor(self, split_factor: ArrayLike) -> np.ndarray:
        """Validate G > 0 and, for a per-G law, that it is the G the law describes."""
        g = _positive("split_factor", split_factor)
        if self.split_factor is not None and np.any(g != self.split_factor):
            other = float(g[g != self.split_factor].reshape(-1)[0])
            raise MosaicInputError(
                f"this {self.form.name} law describes split_factor G = {self.split_factor:g} "
                f"only, got {other:g}"
            )
        return g

    def predict(
        self,
        n_total: ArrayLike,
        tokens: ArrayLike,
        sparsity: ArrayLike | None = None,
        split_factor: ArrayLike | None = None,
        log_coefs: np.ndarray | None = None,
    ) -> np.ndarray:
        """Predicted loss, broadcast over the inputs (N_tot in parameters, D in tokens);
        with ``log_coefs`` (B, P) coefficient samples of this form (bootstrap), one
        prediction per sample, shape (B, *inputs)."""
        uses = set(self.form.features)
        logs = {
            "n_total": np.log(_positive("n_total", n_total)),
            "tokens": np.log(_positive("tokens", tokens)),
        }
        if sparsity is not None:
            s = np.asarray(sparsity, dtype=float)
            if not np.all((s >= 0) & (s < 1)):
                bad = float(s[~((s >= 0) & (s < 1))].reshape(-1)[0])
                raise MosaicInputError(f"sparsity must satisfy 0 <= S < 1, got {bad:g}")
            if "active_fraction" not in uses and np.any(s > 0):
                raise MosaicInputError(
                    f"form '{self.form.name}' is a dense law; sparsity must be 0 or omitted"
                )
            logs["active_fraction"] = np.log1p(-s)
        elif "active_fraction" in uses:
            raise MosaicInputError(f"form '{self.form.name}' needs sparsity (0 <= S < 1)")
        if split_factor is not None:
            logs["split_factor"] = np.log(self.check_split_factor(split_factor))
        elif "split_factor" in uses:
            raise MosaicInputError(f"form '{self.form.name}' needs split_factor (G > 0)")
        columns = np.broadcast_arrays(*(logs[f] for f in self.form.features))
        shape = columns[0].shape
        log_features = np.column_stack([c.reshape(-1) for c in columns])
        coefs = self.log_coefs if log_coefs is None else np.atleast_2d(log_coefs)
        log_loss = self.form.log_predict(coefs, self.form.design(log_features)).value
        if log_coefs is None:
            return np.exp(log_loss[0]).reshape(shape)
        return np.exp(log_loss).reshape((len(coefs), *shape))

    def predict_runs(self, data: RunData) -> np.ndarray:
        """Predicted loss for every run in ``data``."""
        design = self.form.design(data.log_features(self.form))
        return np.exp(self.form.log_predict(self.log_coefs, design).value[0])

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": LAW_FILE_FORMAT,
            "form": self.form.name,
            "coefficients": dict(self.coefficients),
            "split_factor": self.split_factor,
            "provenance": dict(self.provenance),
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any], source: str = "law") -> ScalingLaw:
        if not isinstance(payload, Mapping):
            raise MosaicInputError(f"{source}: a law file must hold a JSON object")
        if payload.get("format") != LAW_FILE_FORMAT:
            raise MosaicInputError(
                f"{source}: format is {payload.get('format')!r}; expected {LAW_FILE_FORMAT!r}"
            )
        coefficients = payload.get("coefficients")
        if not isinstance(coefficients, Mapping):
            raise MosaicInputError(f"{source}: 'coefficients' must be an object name -> value")
        for name, value in coefficients.items():
            # Positive (every term of every form is a positive power law, forms.vector),
            # finite and of bounded size: fitted laws have coefficients of 1e-2..1e4
            # (Table 2; Epoch's B = 2143), and 1e308 makes every prediction inf (issue 11).
            # The message named "0 or" a signed value, which forms.vector then refused.
            if not is_number(value) or not MIN_COEFFICIENT <= value <= MAX_COEFFICIENT:
                raise MosaicInputError(
                    f"{source}: coefficients.{name}: got {value!r}; allowed: a positive "
                    f"number in {MIN_COEFFICIENT:g}..{MAX_COEFFICIENT:g}")
        provenance = payload.get("provenance", {})
        if not isinstance(provenance, Mapping):
            raise MosaicInputError(f"{source}: 'provenance' must be an object")
        check_provenance(provenance, source)
        split_factor = payload.get("split_factor")
        if split_factor is not None and not is_number(split_factor):
            raise MosaicInputError(f"{source}: split_factor: expected a number or null (a law "
                                   f"of every G), got {split_factor!r:.60}")
        try:
            return cls(
                form=get_form(str(payload.get("form"))),
                coefficients=coefficients,
                split_factor=split_factor,
                provenance=provenance,
            )
        except (MosaicInputError, TypeError, ValueError) as exc:
            raise MosaicInputError(f"{source}: {exc}") from None

    def save(self, path: str | Path) -> None:
        from mosaic.io_atomic import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ScalingLaw:
        path = Path(path)
        if not path.is_file():
            raise MosaicInputError(f"law file {str(path)!r} does not exist or is not a file")
        if path.suffix.lower() in (".csv", ".parquet"):  # run data given as a law (a trial)
            raise MosaicInputError(
                f"law file {str(path)!r}: a run table, not a law; fit it first (`mosaic law "
                f"fit {path.name} --out law.json`) and pass the law file")
        from mosaic.schema_validation import parse_json, read_text

        text = read_text(path, "law file")
        if path.suffix.lower() in (".yaml", ".yml") and "constants:" in text:
            # a calibration profile given as the law (a trial got "not valid JSON")
            raise MosaicInputError(
                f"law file {str(path)!r}: a calibration profile (constants:), not a law; "
                "give it with --calibration, and a law from `mosaic law fit --out law.json` "
                "with --law")
        payload = parse_json(text, f"law file {str(path)!r}")
        return cls.from_dict(payload, source=str(path))


# A law file accepts every coefficient the fitter can produce (its prefactor bounds reach
# 1e10), so `law fit` / `ladder fit` never write a file the planner refuses; 1e308-style
# garbage still fails, and non-physical predictions are caught where they are used.
MAX_COEFFICIENT = DEFAULT_PREFACTOR_BOUNDS[1]
MIN_COEFFICIENT = 1e-12  # below, a term is numerically absent (1e-320 is a subnormal)


def default_law() -> ScalingLaw:
    """The built-in joint law: Table 2 coefficients of Eq. 10."""
    text = resources.files("mosaic.law").joinpath("data", DEFAULT_LAW_RESOURCE).read_text()
    return ScalingLaw.from_dict(json.loads(text), source=f"built-in {DEFAULT_LAW_RESOURCE}")


def fit_caveats(law: ScalingLaw) -> list[str]:
    """What a fitted law file's provenance says about its trustworthiness: coefficients its
    fit left on their bounds, no held-out error, a fit that explains nothing (a trial
    planned with a tiny ladder's law and saw none of it). Every command that takes --law
    repeats them (a trial: `law optimum` returned 436 tokens from a law whose fit had
    warned, silently)."""
    return provenance_caveats(law.provenance or {})


def provenance_caveats(provenance: dict[str, Any]) -> list[str]:
    """:func:`fit_caveats` of a law's provenance as its file or a plan's JSON holds it (the
    plan report shows them: a trial's report of a plan on a tiny ladder's law had none)."""
    from mosaic.law.fit import bound_note, unidentified_note  # the fitting stack loads here

    notes = []
    at_bound = bound_note(provenance.get("at_bound") or {})
    if at_bound is not None:
        notes.append(f"its fit left {at_bound}")
    # exponents on a feature its runs held constant: a plan choosing another value of that
    # feature reads an arbitrary number (a trial: a G = 8 pick from a law fitted at G = 1)
    unidentified = unidentified_note(provenance.get("unidentified") or {})
    if unidentified is not None:
        notes.append(f"in its fit {unidentified}")
    metrics = provenance.get("metrics") or {}
    if metrics.get("n_heldout") == 0:
        notes.append("its fit held no run out, so its error on new runs is unmeasured")
    if isinstance(metrics.get("r2"), int | float) and metrics["r2"] <= 0:
        notes.append(f"its fit explains none of its runs' variance (R^2 {metrics['r2']:.3g})")
    return notes


# The features every allocation of compute trades: the loss against model size and tokens
ALLOCATION_FEATURES = ("n_total", "tokens")


def require_identified(law: ScalingLaw, where: str, use: str,
                       features: Sequence[str] = ALLOCATION_FEATURES) -> None:
    """Refuse ``use`` of a law whose fit could not identify an exponent on ``features``: its
    answer would be that arbitrary exponent's (a trial: `law optimum` on a law fitted to runs
    of one token count, beta on its bound of 10, answered a 1.9-token run, exit 0)."""
    from mosaic.law.fit import FEATURE_SYMBOLS  # the fitting stack loads here

    unidentified = (law.provenance or {}).get("unidentified") or {}
    named = [f"{FEATURE_SYMBOLS.get(f, f)} (exponent {', '.join(unidentified[f])})"
             for f in features if unidentified.get(f)]
    if named:
        raise MosaicInputError(
            f"{where}: {use} trades model size against tokens, and this law's fit "
            f"could not identify {' or '.join(named)}: its runs hold that quantity (nearly) "
            "constant; fit a law on runs that vary it")


def load_law_file(path: Path | None) -> ScalingLaw:
    """The built-in law (no path), or a law file with its fit's caveats raised as
    `MosaicWarning`s: the one loader behind every command's --law."""
    import warnings

    from mosaic.errors import MosaicWarning

    if path is None:
        return default_law()
    law = ScalingLaw.load(path)
    for note in fit_caveats(law):
        warnings.warn(f"--law {path}: {note}", MosaicWarning, stacklevel=2)
    return law
