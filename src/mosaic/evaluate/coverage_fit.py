"""Build a calibration's coverage (perf.coverage) from its runs and cross-validation.

Run by ``mosaic calibrate`` once per fit, so a prediction only looks the quantiles up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from mosaic.arch.counts import count_parameters
from mosaic.config.run_records import RunRecord
from mosaic.evaluate.calibrate import CrossValidation, base_lineage_runs
from mosaic.evaluate.validation_report import RunPrediction, predict_runs
from mosaic.perf.calibration import Calibration
from mosaic.perf.coverage import (
    DEFAULT_LEVEL,
    DEGREES,
    CalibrationCoverage,
    model_class,
    scoped_quantiles,
    shared_fraction,
    stack_class,
)
from mosaic.units import GIB


def _span(values: Sequence[float]) -> tuple[float, float]:
    return float(min(values)), float(max(values))


def _degree_runs(name: str, fitted: list[RunRecord]) -> list[RunRecord]:
    """The runs whose ``name`` degree the envelope spans: ep over the MoE runs where there
    are any (a dense run's ep is 1 by definition; a trial's profile spanned ep 1..8 from its
    dense runs, and called an ep=1 MoE layout inside), every other degree over all."""
    moe = [r for r in fitted if r.workload.geometry.is_moe]
    return moe if name == "ep" and moe else fitted


def build_coverage(records: Sequence[RunRecord], fitted_ids: Sequence[str],
                   cv: CrossValidation | None, calibration: Calibration, source: str,
                   level: float = DEFAULT_LEVEL,
                   predictions: Sequence[RunPrediction] | None = None) -> CalibrationCoverage:
    """Envelope of the fitted runs, held-out tokens/s ratios (when ``cv`` is given) and
    memory ratios of the runs that report memory, predicted with ``calibration``.
    ``predictions``: those of ``records``, in their order, made at ``calibration``'s memory
    scale (the memory model reads no other constant), when the caller has them; else the
    runs reporting memory are predicted here."""
    by_id = {r.id: r for r in records}
    fitted = [by_id[i] for i in fitted_ids]
    counts = [count_parameters(r.workload.geometry) for r in fitted]
    stacks = [r.workload.stack for r in fitted]
    classes = [model_class(r.workload.geometry.is_moe, r.workload.geometry.is_hybrid)
               for r in fitted]
    tokens: tuple = ()
    shared = None
    if cv is not None:
        # measured/predicted tokens/s = predicted/measured step time (same tokens per step)
        ratios = cv.predicted_step_time_s / cv.measured_step_time_s
        tokens = scoped_quantiles(ratios, stacks, classes, level)
        shared = shared_fraction(ratios, list(cv.groups))
    with_memory = [r for r in records if r.measured_memory_bytes and not r.oom]
    if predictions is None:
        predictions = predict_runs(with_memory, calibration)
    else:
        predictions = [p for r, p in zip(records, predictions, strict=True)
                       if r.measured_memory_bytes and not r.oom]
    memory_ratios = [r.measured_memory_bytes / (p.predicted_memory_gib * GIB)
                     for r, p in zip(with_memory, predictions, strict=True)]
    memory = scoped_quantiles(np.array(memory_ratios), [r.workload.stack for r in with_memory],
                              [model_class(r.workload.geometry.is_moe,
                                           r.workload.geometry.is_hybrid)
                               for r in with_memory],
                              level)
    return CalibrationCoverage(
        source=source, level=level,
        devices=tuple(sorted({r.system.device.name for r in fitted})),
        systems=tuple(sorted({r.system.name for r in fitted})),
        fitted_runs=tuple(sorted(r.id for r in fitted)),
        stacks=tuple(sorted(set(stacks))), classes=tuple(sorted(set(classes))),
        n_total=_span([float(c.n_total) for c in counts]),
        n_active=_span([float(c.n_active) for c in counts]),
        degrees={name: tuple(int(v) for v in _span([getattr(r.plan, name)[0]
                                                     for r in _degree_runs(name, fitted)]))
                 for name in DEGREES},
        stack_classes=tuple(sorted({stack_class(s, c)
                                    for s, c in zip(stacks, classes, strict=True)})),
        tokens_per_s_ratio=tokens, tokens_per_s_shared_fraction=shared, memory_ratio=memory)


def with_inherited_runs(coverage: CalibrationCoverage, base: Calibration
                        ) -> CalibrationCoverage:
    """``coverage`` of a profile refitted over ``base`` (which keeps its values for what the
    runs lack), recording the runs those kept values were fitted on beyond its own fitted
    runs: every run of ``base``'s lineage (evaluate.calibrate.base_lineage_runs), or None
    (not recorded) where ``base`` does not record its own. A later cross-validation over
    this profile then holds those runs out strictly (a P2 refitted over P1 on other runs had
    recorded only its own, and folds holding out P1's runs kept P1's values)."""
    lineage = base_lineage_runs(base)
    return replace(coverage, inherited_runs=None if lineage is None else tuple(
        sorted(lineage.difference(coverage.fitted_runs))))


def with_borrowed_residuals(coverage: CalibrationCoverage, base: Calibration,
                            memory_scale: float | None = None) -> CalibrationCoverage:
    """``coverage`` with ``base``'s residuals where it has none of its own (tokens/s: fewer
    than MIN_SCOPE_RUNS held-out runs, or no cross-validation; memory: fewer runs reporting
    memory) and ``base`` has some: the plan then shows an interval, labelled as borrowed,
    rather than none (trials: a team calibrating on a handful of its own runs lost every
    interval, and with the memory interval its "may not fit" warning). The base's
    residuals measure the model on other clusters' runs, not on this profile's, so they are
    labelled wherever they are shown. Quantiles of another interval level (a hand-edited
    base file) would be shown under this one's, so they are not borrowed. Under a memory
    scale of this profile's own (``memory_scale`` other than the base's) the base's memory
    ratios are divided by their median: the fitted scale is this profile's centre, so only
    their spread is borrowed (a trial's scale of 1.16 and the default's median ratio of
    1.095 counted one underestimate twice; dividing by the scale's change instead centred
    the interval on the unscaled model, a review)."""
    lender = base.coverage
    if lender is None or not math.isclose(lender.level, coverage.level):
        return coverage
    if not coverage.tokens_per_s_ratio and lender.tokens_per_s_ratio:
        coverage = replace(coverage, tokens_per_s_ratio=lender.tokens_per_s_ratio,
                           tokens_per_s_shared_fraction=lender.tokens_per_s_shared_fraction,
                           tokens_per_s_ratio_from=lender.tokens_per_s_ratio_from or base.name)
    if not coverage.memory_ratio and lender.memory_ratio:
        centred = memory_scale is not None and memory_scale != base.memory_scale
        coverage = replace(
            coverage, memory_ratio=tuple(
                replace(q, low=q.low / q.median, median=1.0, high=q.high / q.median)
                if centred else q for q in lender.memory_ratio),
            memory_ratio_from=lender.memory_ratio_from or base.name,
            memory_ratio_spread_only=centred or lender.memory_ratio_spread_only)
    return coverage
