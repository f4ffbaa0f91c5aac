"""Where a calibration holds: the envelope of its runs and its cross-validated residuals.

``mosaic calibrate`` stores a ``coverage`` section in the calibration file (built by
:mod:`mosaic.evaluate.coverage_fit`): the GPUs, stacks, MoE/dense classes, model sizes
(non-embedding total and active parameters) and parallel degrees (tp, pp, ep, cp, dp) of
the runs it was fitted on, and quantiles of measured/predicted ratios:

* tokens/s: held-out ratios of leave-one-group-out cross-validation (each run predicted by
  a fit that never saw its source), per ``stack/class`` where a scope has at least
  :data:`MIN_SCOPE_RUNS` runs, else per class, else pooled over all runs;
* the share of the held-out log tokens/s ratio variance that lies between the
  cross-validation groups (1 − within-group / total variance): how much of the error runs
  of one source (one stack on one cluster) have in common; the planner uses it as the
  correlation of the errors of its candidates (:mod:`mosaic.plan.throughput_spread`);
* memory: in-sample ratios of the runs that report peak memory (the memory model has no
  constant that ``calibrate`` fits, so they are out of sample for the fit), with the same
  fallback.

A prediction is then placed against it: each dimension outside the envelope is listed with
its value, the range and the ratio by which it lies outside, and the interval of the true
value is ``predicted × [q_low, q_high]`` (MFU scales with tokens/s for a fixed job, step
time with its inverse). Empirical quantiles assume the job's error resembles the errors of
the held-out runs of its scope; outside the envelope that is an assumption, which is why
both are reported together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mosaic.hardware.system import parse_host_size_variant, parse_scale_out_variant
from mosaic.schema_validation import validate_mapping

MIN_SCOPE_RUNS = 10  # fewer held-out runs give no usable 5%/95% quantiles of their own
DEFAULT_LEVEL = 0.90  # central interval: 5th to 95th percentile
DEGREES = ("tp", "pp", "ep", "cp", "dp")
POOLED = "all"
# how borrowed memory residuals whose median was divided out are labelled
SPREAD_ONLY_TEXT = "its spread only, centred on this profile's memory scale"


def model_class(is_moe: bool, is_hybrid: bool = False) -> str:
    """The MoE/dense class of a model (a residual scope); a hybrid SSM/attention model is
    its own class, which no calibration has fitted so far."""
    if is_hybrid:
        return "hybrid"
    return "moe" if is_moe else "dense"


# A measured / predicted ratio quantile outside [1/1000, 1000]: the shipped profiles' lie
# within 0.4..2.5, `validate` flags a run 3.5x off as mis-entered, and a thousand times off
# is a unit slip (MiB as GiB); a hand-edited 1e40 printed an MFU interval up to 1e41 %
# (a fuzz trial). `calibrate` checks what it writes against the same bound.
MAX_RATIO_QUANTILE = 1000.0


class _Quantiles(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    scope: str = Field(min_length=1)
    n_runs: int = Field(ge=1)
    low: float = Field(ge=1 / MAX_RATIO_QUANTILE, le=MAX_RATIO_QUANTILE, allow_inf_nan=False)
    median: float = Field(ge=1 / MAX_RATIO_QUANTILE, le=MAX_RATIO_QUANTILE,
                          allow_inf_nan=False)
    high: float = Field(ge=1 / MAX_RATIO_QUANTILE, le=MAX_RATIO_QUANTILE, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> _Quantiles:
        if not self.low <= self.median <= self.high:
            raise ValueError(f"quantiles of scope {self.scope!r} must satisfy low <= median <= "
                             f"high, got {self.low:g}, {self.median:g}, {self.high:g}")
        return self


class _CoverageFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str = Field(min_length=1)
    level: float = Field(gt=0, lt=1)
    devices: tuple[str, ...]
    stacks: tuple[str, ...]
    classes: tuple[str, ...]
    n_total: tuple[float, float]
    n_active: tuple[float, float]
    degrees: dict[str, tuple[int, int]]
    tokens_per_s_ratio: tuple[_Quantiles, ...] = ()
    tokens_per_s_shared_fraction: float | None = Field(default=None, ge=0, le=1)
    memory_ratio: tuple[_Quantiles, ...] = ()
    tokens_per_s_ratio_from: str | None = Field(default=None, min_length=1)
    memory_ratio_from: str | None = Field(default=None, min_length=1)
    memory_ratio_spread_only: bool = False
    systems: tuple[str, ...] = ()
    fitted_runs: tuple[str, ...] = ()
    inherited_runs: tuple[str, ...] | None = None
    stack_classes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _ranges(self) -> _CoverageFile:
        """Each range a positive finite low <= high (a fuzz trial's tp range [1, 0] ended
        in a division by zero in every prediction)."""
        ranges = {"n_total": self.n_total, "n_active": self.n_active,
                  **{f"degrees.{name}": pair for name, pair in self.degrees.items()}}
        for name, (low, high) in ranges.items():
            if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
                raise ValueError(f"coverage.{name} [{low}, {high}]: a range is two positive "
                                 "finite numbers, low <= high")
        for field in ("fitted_runs", "inherited_runs"):
            if any(not run_id.strip() for run_id in getattr(self, field) or ()):
                raise ValueError(f"coverage.{field}: a run id is a non-empty string")
        return self


@dataclass(frozen=True)
class RatioQuantiles:
    """Quantiles of measured/predicted over the ``n_runs`` runs of one scope."""

    scope: str
    n_runs: int
    low: float
    median: float
    high: float


@dataclass(frozen=True)
class CalibrationCoverage:
    """The calibration data's envelope and residual quantiles (module docstring)."""

    source: str
    level: float
    devices: tuple[str, ...]
    stacks: tuple[str, ...]
    classes: tuple[str, ...]
    n_total: tuple[float, float]
    n_active: tuple[float, float]
    degrees: Mapping[str, tuple[int, int]]
    tokens_per_s_ratio: tuple[RatioQuantiles, ...] = ()
    tokens_per_s_shared_fraction: float | None = None
    memory_ratio: tuple[RatioQuantiles, ...] = ()
    # the profile whose held-out tokens/s residuals these are, when not this calibration's
    # own (too few held-out runs of its own: evaluate.coverage_fit.with_borrowed_residuals)
    tokens_per_s_ratio_from: str | None = None
    memory_ratio_from: str | None = None  # the same for the memory residuals
    # the borrowed memory ratios were divided by their median: only their spread is the
    # lender's, centred on this profile's own memory scale
    memory_ratio_spread_only: bool = False
    # the node types the fitted runs ran on (empty: not recorded, a profile written before)
    systems: tuple[str, ...] = ()
    # the ids of the runs the constants were fitted on (validate calls their scores in-sample)
    fitted_runs: tuple[str, ...] = ()
    # the ids of the runs, other than fitted_runs, that a value kept from the profile it was
    # refitted over was fitted on: that base's fitted_runs and inherited_runs (mosaic
    # calibrate; empty: none beyond fitted_runs). None: not recorded (a profile written
    # before, by hand, or over a base that did not record its own), read as "maybe any run"
    # (evaluate.calibrate.base_independent_of)
    inherited_runs: tuple[str, ...] | None = None
    # the (stack, class) pairs the fitted runs hold, as "stack/class" (empty: not recorded):
    # a trial's torchtitan MoE job read 'inside' a profile whose torchtitan runs were dense
    stack_classes: tuple[str, ...] = ()

    def to_document(self) -> dict[str, Any]:
        """The YAML ``coverage`` section."""
        def quantiles(rows: tuple[RatioQuantiles, ...]) -> list[dict[str, Any]]:
            return [{"scope": q.scope, "n_runs": q.n_runs, "low": q.low, "median": q.median,
                     "high": q.high} for q in rows]
        return {
            "source": self.source, "level": self.level, "devices": list(self.devices),
            "stacks": list(self.stacks), "classes": list(self.classes),
            "n_total": list(self.n_total), "n_active": list(self.n_active),
            "degrees": {k: list(v) for k, v in self.degrees.items()},
            "tokens_per_s_ratio": quantiles(self.tokens_per_s_ratio),
            "tokens_per_s_shared_fraction": self.tokens_per_s_shared_fraction,
            "memory_ratio": quantiles(self.memory_ratio),
            **{key: value for key, value in (
                ("tokens_per_s_ratio_from", self.tokens_per_s_ratio_from),
                ("memory_ratio_from", self.memory_ratio_from)) if value is not None},
            **({"memory_ratio_spread_only": True} if self.memory_ratio_spread_only else {}),
            **({"systems": list(self.systems)} if self.systems else {}),
            **({"fitted_runs": list(self.fitted_runs)} if self.fitted_runs else {}),
            # written when recorded, even empty: absent means not recorded
            **({"inherited_runs": list(self.inherited_runs)}
               if self.inherited_runs is not None else {}),
            **({"stack_classes": list(self.stack_classes)} if self.stack_classes else {}),
        }


def parse_coverage(document: Any, where: str) -> CalibrationCoverage:
    """Validate a ``coverage`` section (one-line error naming the field)."""
    parsed = validate_mapping(_CoverageFile, document, f"{where}: coverage")

    def quantiles(rows: tuple[_Quantiles, ...]) -> tuple[RatioQuantiles, ...]:
        return tuple(RatioQuantiles(q.scope, q.n_runs, q.low, q.median, q.high) for q in rows)
    return CalibrationCoverage(
        source=parsed.source, level=parsed.level, devices=parsed.devices,
        stacks=parsed.stacks, classes=parsed.classes, n_total=parsed.n_total,
        n_active=parsed.n_active, degrees=dict(parsed.degrees),
        tokens_per_s_ratio=quantiles(parsed.tokens_per_s_ratio),
        tokens_per_s_shared_fraction=parsed.tokens_per_s_shared_fraction,
        memory_ratio=quantiles(parsed.memory_ratio),
        tokens_per_s_ratio_from=parsed.tokens_per_s_ratio_from,
        memory_ratio_from=parsed.memory_ratio_from,
        memory_ratio_spread_only=parsed.memory_ratio_spread_only, systems=parsed.systems,
        fitted_runs=parsed.fitted_runs, inherited_runs=parsed.inherited_runs,
        stack_classes=parsed.stack_classes)


def ratio_quantiles(ratios: np.ndarray, scope: str, level: float) -> RatioQuantiles:
    """Empirical (linear-interpolation) quantiles of ``ratios`` at the central ``level``,
    rounded to 4 significant digits so a refit writes the same file."""
    tail = (1.0 - level) / 2.0
    low, median, high = np.quantile(np.asarray(ratios, dtype=float), [tail, 0.5, 1.0 - tail])
    return RatioQuantiles(scope, int(np.size(ratios)), *(float(f"{v:.4g}")
                                                        for v in (low, median, high)))


def shared_fraction(ratios: np.ndarray, groups: list[str]) -> float:
    """1 − (mean squared deviation of log ``ratios`` from their group mean) / (their
    variance), clipped to [0, 1] and rounded to 4 digits; 1.0 when all ratios are equal."""
    logs = np.log(np.asarray(ratios, dtype=float))
    total = float(logs.var())
    if total == 0.0:
        return 1.0
    labels = np.array(groups)
    within = np.zeros_like(logs)
    for group in set(groups):
        members = labels == group
        within[members] = logs[members] - logs[members].mean()
    return float(f"{min(max(1.0 - float(np.mean(within**2)) / total, 0.0), 1.0):.4g}")


def scoped_quantiles(ratios: np.ndarray, stacks: list[str], classes: list[str],
                     level: float) -> tuple[RatioQuantiles, ...]:
    """Quantiles per ``stack/class``, per class and pooled over all runs, each only with at
    least :data:`MIN_SCOPE_RUNS` runs (fewer give no 5%/95% quantiles worth showing)."""
    ratios = np.asarray(ratios, dtype=float)
    if ratios.size == 0:
        return ()
    stack_array, class_array = np.array(stacks), np.array(classes)
    rows = []
    for stack, cls in sorted(set(zip(stacks, classes, strict=True))):
        members = (stack_array == stack) & (class_array == cls)
        if members.sum() >= MIN_SCOPE_RUNS:
            rows.append(ratio_quantiles(ratios[members], f"{stack}/{cls}", level))
    for cls in sorted(set(classes)):
        members = class_array == cls
        if members.sum() >= MIN_SCOPE_RUNS:
            rows.append(ratio_quantiles(ratios[members], cls, level))
    if ratios.size >= MIN_SCOPE_RUNS:
        rows.append(ratio_quantiles(ratios, POOLED, level))
    return tuple(rows)


def pick_scope(rows: tuple[RatioQuantiles, ...], stack: str, cls: str
               ) -> RatioQuantiles | None:
    """The narrowest scope that holds the job: ``stack/class``, else class, else pooled."""
    by_scope = {q.scope: q for q in rows}
    for scope in (f"{stack}/{cls}", cls, POOLED):
        if scope in by_scope:
            return by_scope[scope]
    return None


@dataclass(frozen=True)
class OutsideDimension:
    """One dimension of a job outside the calibration envelope."""

    dimension: str
    value: float | str
    calibrated: str  # the calibrated range or set, for people
    ratio: float | None  # how far outside: value/max or min/value (None for categories)

    def to_document(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "value": self.value,
                "calibrated": self.calibrated, "ratio": self.ratio}

    def text(self) -> str:
        times = "" if self.ratio is None else f" ({self.ratio:.3g}x outside)"
        return f"{self.dimension}={self.shown_value} not in {self.calibrated}{times}"

    @property
    def shown_value(self) -> str:
        return shown_dimension_value(self.value)


def shown_dimension_value(value: Any) -> str:
    """An envelope dimension's value for people: 1.033e+12, not 1032848424960.0."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _range_check(name: str, value: float, bounds: tuple[float, float]
                 ) -> OutsideDimension | None:
    low, high = bounds
    shown = f"{low:.4g}..{high:.4g}"
    if value > high:
        return OutsideDimension(name, value, shown, float(value / high))
    if value < low:
        return OutsideDimension(name, value, shown, float(low / value))
    return None


def outside_dimensions(coverage: CalibrationCoverage, *, device: str, stack: str,
                       is_moe: bool, n_total: float, n_active: float,
                       degrees: Mapping[str, int], is_hybrid: bool = False
                       ) -> list[OutsideDimension]:
    """Every dimension of one job outside the calibrated envelope (empty = inside)."""
    outside = []
    cls = model_class(is_moe, is_hybrid)
    for name, value, known in (("gpu", device, coverage.devices),
                               ("stack", stack, coverage.stacks),
                               ("class", cls, coverage.classes)):
        if value not in known:
            outside.append(OutsideDimension(name, value, "{" + ", ".join(known) + "}", None))
    pair = stack_class(stack, cls)
    if (coverage.stack_classes and not outside and pair not in coverage.stack_classes):
        outside.append(OutsideDimension("stack/class", pair,
                                        "{" + ", ".join(coverage.stack_classes) + "}", None))
    for name, value, bounds in (("n_total", n_total, coverage.n_total),
                                ("n_active", n_active, coverage.n_active)):
        hit = _range_check(name, float(value), bounds)
        if hit is not None:
            outside.append(hit)
    for name in job_degrees(is_moe):
        if name in coverage.degrees and name in degrees:
            hit = _range_check(name, int(degrees[name]), coverage.degrees[name])
            if hit is not None:
                outside.append(hit)
    return outside


def stack_class(stack: str, cls: str) -> str:
    """The envelope's joint key of a stack and a model class ('torchtitan/moe')."""
    return f"{stack}/{cls}"


def job_degrees(is_moe: bool) -> tuple[str, ...]:
    """The parallel degrees the envelope judges for a job: ep only for an MoE model (a dense
    model's ep is 1 by definition, and the calibrated ep range is the MoE runs')."""
    return DEGREES if is_moe else tuple(name for name in DEGREES if name != "ep")


def degrees_inside(coverage: CalibrationCoverage, degrees: Mapping[str, np.ndarray],
                   is_moe: bool = True) -> np.ndarray:
    """Per plan, whether its parallel degrees (``degrees``: name -> array over plans) all lie
    in the calibrated ranges, as :func:`outside_dimensions` checks one plan's."""
    inside = np.ones(len(next(iter(degrees.values()))), dtype=bool)
    for name in job_degrees(is_moe):
        if name in coverage.degrees and name in degrees:
            low, high = coverage.degrees[name]
            values = np.asarray(degrees[name])
            inside &= (values >= low) & (values <= high)
    return inside


@dataclass(frozen=True)
class Interval:
    """An interval of a predicted quantity from the residual quantiles of one scope."""

    low: float
    high: float
    scope: str
    n_runs: int
    level: float

    def to_document(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "level": self.level,
                "residual_scope": self.scope, "n_runs": self.n_runs}


def interval(predicted: float, quantiles: RatioQuantiles | None, level: float, *,
             inverse: bool = False) -> Interval | None:
    """``predicted × [low, high]`` of the ratio quantiles (``inverse``: a quantity
    proportional to 1/ratio, e.g. step time against tokens/s)."""
    if quantiles is None:
        return None
    if inverse:
        low, high = predicted / quantiles.high, predicted / quantiles.low
    else:
        low, high = predicted * quantiles.low, predicted * quantiles.high
    return Interval(float(low), float(high), quantiles.scope, quantiles.n_runs, level)


@dataclass(frozen=True)
class Assessment:
    """One prediction placed against its calibration: envelope verdict and intervals."""

    calibration: str
    outside: tuple[OutsideDimension, ...]
    tokens_per_s: Interval | None = None
    tokens_per_s_per_gpu: Interval | None = None
    mfu: Interval | None = None
    step_time_s: Interval | None = None
    memory_gib: Interval | None = None
    note: str | None = None  # why there is no envelope or no interval
    has_envelope: bool = True

    @property
    def inside(self) -> bool | None:
        """Inside the envelope (None when the calibration records none)."""
        return not self.outside if self.has_envelope else None

    def to_document(self) -> dict[str, Any]:
        def maybe(value: Interval | None) -> dict[str, Any] | None:
            return None if value is None else value.to_document()
        return {
            "calibration": self.calibration,
            "inside_calibrated_envelope": self.inside,
            "outside": [o.to_document() for o in self.outside],
            "intervals": {"tokens_per_s": maybe(self.tokens_per_s),
                          "tokens_per_s_per_gpu": maybe(self.tokens_per_s_per_gpu),
                          "mfu": maybe(self.mfu),
                          "step_time_s": maybe(self.step_time_s),
                          "memory_gib": maybe(self.memory_gib)},
            "note": self.note,
        }


# The χ_sys constants (Eq. 15) whose driver a layout may have and a calibration's runs may
# lack (``Calibration.not_informed``: kept at the starting profile's value, not fitted).
UNINFORMED_DRIVERS = {"chi_a2a": "an expert all-to-all across nodes",
                      "chi_pp": "a pipeline across nodes"}


def uninformed_notes(calibration: str, not_informed: Sequence[str], *,
                     ep_crosses_nodes: bool, pp_crosses_nodes: bool) -> list[str]:
    """A note for each χ_sys term this layout has and the calibration's runs never did (a
    trial: a plan chose ep 32 across nodes on a profile whose c_A2A no run had informed)."""
    has = {"chi_a2a": ep_crosses_nodes, "chi_pp": pp_crosses_nodes}
    return [f"no run of calibration {calibration!r} has {what}, which this layout has: "
            f"{name} was not fitted (kept from the profile it started from), so that cost "
            "carries no correction from those runs"
            for name, what in UNINFORMED_DRIVERS.items() if has[name] and name in not_informed]


def _labelled(quantiles: RatioQuantiles | None, lender: str | None,
              spread_only: bool = False) -> RatioQuantiles | None:
    """Quantiles whose scope names the profile they were borrowed from, if any, and whether
    only their spread was borrowed."""
    if quantiles is None or lender is None:
        return quantiles
    return replace(quantiles, scope=f"{quantiles.scope} of profile {lender!r}, borrowed"
                   + (f", {SPREAD_ONLY_TEXT}" if spread_only else ""))


def node_type_note(system: str, calibrated: Sequence[str]) -> str:
    """The note on a node type none of the calibration's runs (on ``calibrated``) ran on. A
    what-if of a calibrated system (``mosaic plan --gpus-per-node``/``--scale-out-gbps``,
    :mod:`mosaic.hardware.system`) says which of its parts are the calibrated system's: the
    device always, the host unless its size changed; its network is the what-if."""
    base, host_changed = system, False
    while True:
        scale_out = parse_scale_out_variant(base)
        host_size = None if scale_out else parse_host_size_variant(base)
        if scale_out is None and host_size is None:
            break
        base = (scale_out or host_size)[0]
        host_changed = host_changed or host_size is not None
    if base == system or base not in calibrated:
        return (f"node type {system} is not one the calibration's runs ran on "
                f"({', '.join(calibrated)}): its network is costed from the catalog, not "
                "fitted (plan --system, a job's hardware.system or a record's system names "
                "another)")
    calibrated_parts = "device is" if host_changed else "device and host are"
    what_if = "host size and network are a what-if" if host_changed else "network is a what-if"
    return (f"node type {system} is a what-if of {base}: its {calibrated_parts} calibrated "
            f"(the calibration's runs ran on {base}), its {what_if}, costed from the catalog's "
            "links and not fitted")


def assess(coverage: CalibrationCoverage | None, calibration: str, *, device: str,
           stack: str, is_moe: bool, n_total: float, n_active: float,
           degrees: Mapping[str, int], tokens_per_s: float, tokens_per_s_per_gpu: float,
           mfu: float, step_time_s: float, memory_gib: float,
           usable_memory_gib: float | None = None, is_hybrid: bool = False,
           extra_notes: Sequence[str] = (), system: str | None = None) -> Assessment:
    """Place one predicted job against ``coverage`` (module docstring); with
    ``usable_memory_gib``, say when the memory interval reaches past it; ``extra_notes``
    (:func:`uninformed_notes`) join the assessment's note; with ``system``, say when the
    job's node type is none the fitted runs ran on (a note, not an envelope dimension: the
    GPU is calibrated, the network comes from the catalog)."""
    if coverage is None:
        return Assessment(calibration, (), has_envelope=False, note=(
            f"calibration {calibration!r} records no coverage; rerun `mosaic calibrate` "
            "with cross-validation to get the envelope and intervals"))
    outside = tuple(outside_dimensions(coverage, device=device, stack=stack, is_moe=is_moe,
                                       n_total=n_total, n_active=n_active, degrees=degrees,
                                       is_hybrid=is_hybrid))
    cls = model_class(is_moe, is_hybrid)
    speed = _labelled(pick_scope(coverage.tokens_per_s_ratio, stack, cls),
                      coverage.tokens_per_s_ratio_from)
    memory = _labelled(pick_scope(coverage.memory_ratio, stack, cls),
                       coverage.memory_ratio_from, coverage.memory_ratio_spread_only)
    level = coverage.level
    missing = [what for what, q in (("tokens/s", speed), ("memory", memory)) if q is None]
    notes = ([f"no residuals for {' or '.join(missing)} in calibration {calibration!r}: a "
              f"calibration keeps them from at least {MIN_SCOPE_RUNS} runs (held out, for "
              "tokens/s; reporting memory, for memory)"]
             if missing else []) + list(extra_notes)
    if system is not None and coverage.systems and system not in coverage.systems:
        notes.append(node_type_note(system, coverage.systems))
    memory_interval = interval(memory_gib, memory, level)
    if (memory_interval is not None and usable_memory_gib is not None
            and memory_interval.high > usable_memory_gib):
        notes.append(f"the memory interval reaches {memory_interval.high:.1f} GiB, above the "
                     f"usable {usable_memory_gib:.1f} GiB: it may not fit")
    return Assessment(
        calibration, outside,
        tokens_per_s=interval(tokens_per_s, speed, level),
        tokens_per_s_per_gpu=interval(tokens_per_s_per_gpu, speed, level),
        mfu=interval(mfu, speed, level),
        step_time_s=interval(step_time_s, speed, level, inverse=True),
        memory_gib=memory_interval,
        note="; ".join(notes) if notes else None)


def summary_lines(assessment: Assessment) -> list[tuple[str, str]]:
    """Key/value rows for a human table: the envelope verdict and the intervals."""
    if not assessment.has_envelope:
        return [("calibrated envelope", str(assessment.note))]
    if not assessment.outside:
        # what 'inside' covers, so a note on the node type beside it does not read as a
        # contradiction (a trial)
        rows = [("calibrated envelope", "inside (GPU, stack, model class and size, parallel "
                                        "degrees)")]
    else:
        rows = [(f"OUTSIDE envelope: {o.dimension}",
                 f"{o.shown_value} not in {o.calibrated}"
                 + ("" if o.ratio is None else f" ({o.ratio:.3g}x)")) for o in assessment.outside]
    for label, value, fmt in (("tokens/s per GPU", assessment.tokens_per_s_per_gpu, ",.0f"),
                              ("MFU", assessment.mfu, ".2%"),
                              ("step time s", assessment.step_time_s, ".3f"),
                              ("memory GiB", assessment.memory_gib, ".1f")):
        if value is not None:
            rows.append((f"{value.level:.0%} interval, {label}",
                         f"{value.low:{fmt}} .. {value.high:{fmt}} (residuals: {value.scope}, "
                         f"{value.n_runs} runs)"))
    if assessment.note:
        rows.append(("note", assessment.note))
    return rows
