"""Predict measured runs and report the error (paper Sec. 7.2.1; issue "accuracy report").

Errors are fractions: ``error = predicted / measured − 1`` on tokens/s per GPU. Runs that
went out of memory count as correct when the model predicts them infeasible.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mosaic.config.run_records import RunRecord
from mosaic.errors import MosaicInputError
from mosaic.evaluate.plausibility import implausibility, implausible_record_reason
from mosaic.perf.accuracy import (
    max_abs_error,
    median_abs_error,
    oom_prediction_correct,
    relative_errors,
    spearman_within_groups,
    top_k_overlap,
)
from mosaic.perf.calibration import Calibration
from mosaic.perf.device_memory import outside_allocator_bytes
from mosaic.perf.headroom import memory_headroom
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import RUNTIME_RESERVE_BYTES
from mosaic.perf.plan import ParallelPlans, concatenate_plans
from mosaic.perf.step_time import StepPrediction, predict_step
from mosaic.units import GIB

TOP_K = 3  # top-k overlap inside a group of runs sharing model and cluster (Sec. 7.2.1)
# Records predicted together at most when streaming a file: large enough that a layout sweep
# of one model still runs as a few vectorised calls, small enough that a batch's records and
# plans stay a few MB (benchmarks/bench_validate.py).
BATCH_RECORDS = 256


@dataclass(frozen=True)
class RunPrediction:
    """One run: what was measured next to what the model predicts."""

    record: RunRecord
    predicted_tokens_per_s_per_gpu: float
    predicted_memory_gib: float
    feasible: bool
    # predicted MFU with causal attention against the datasheet peak of the GEMMs' precision
    predicted_lane_mfu_with_attention: float = math.nan
    # the memory model's total, the figure `layouts` and `plan` hold against their planning
    # headroom (predicted_memory_gib is that total read the way the record measured it)
    model_memory_gib: float = math.nan

    @property
    def implausible(self) -> str | None:
        """Why the measured throughput or memory looks mis-entered (:mod:`~mosaic.evaluate.
        plausibility`), or None."""
        record = self.record
        measured = record.measured_tokens_per_s_per_gpu
        return implausible_record_reason(
            measured, math.nan if measured is None
            else measured / self.predicted_tokens_per_s_per_gpu,
            self.predicted_lane_mfu_with_attention, record.measured_memory_bytes,
            record.system.device.hbm_bytes)

    @property
    def implausible_throughput(self) -> bool:
        """Whether the measured tokens/s itself looks mis-entered (not only its memory)."""
        measured = self.record.measured_tokens_per_s_per_gpu
        return measured is not None and implausibility(
            measured / self.predicted_tokens_per_s_per_gpu,
            self.predicted_lane_mfu_with_attention) is not None

    @property
    def over_planning_headroom(self) -> bool:
        """Predicted above the usable share `mosaic layouts` and `mosaic plan` keep for the
        run's stack (perf.headroom: 90% by default), though it may fit the device: the
        model's total, as the planner checks it (not the record-measured reading)."""
        record = self.record
        usable = memory_headroom(None, record.workload.stack).usable_fraction
        return self.model_memory_gib * GIB > usable * record.system.device.hbm_bytes

    @property
    def error(self) -> float | None:
        measured = self.record.measured_tokens_per_s_per_gpu
        return None if measured is None else self.predicted_tokens_per_s_per_gpu / measured - 1

    @property
    def memory_error(self) -> float | None:
        measured = self.record.measured_memory_bytes
        if measured is None:
            return None
        return self.predicted_memory_gib * GIB / measured - 1


def measured_like(record: RunRecord, memory_bytes: float) -> float:
    """The model's per-GPU memory as the record's figure measures it
    (:func:`memory_as_measured`)."""
    return memory_as_measured(record.memory_measure, record.plan, memory_bytes)


def memory_as_measured(memory_measure: str, plan: ParallelPlans, memory_bytes: float) -> float:
    """The model's per-GPU memory (``plan``'s first row) as a figure of ``memory_measure``
    reads it: the memory model's total for an allocator figure (its runtime reserve standing
    for what the allocator holds beyond live tensors); its tensors alone, the total less that
    reserve, for an allocated (peak active) figure; for a device figure (nvidia-smi) the total
    plus what lives outside the caching allocator (CUDA context, NCCL buffers:
    perf.device_memory)."""
    if memory_measure == "device":
        return memory_bytes + float(outside_allocator_bytes(plan)[0])
    if memory_measure == "allocated":
        return memory_bytes - RUNTIME_RESERVE_BYTES
    return memory_bytes


def run_prediction(record: RunRecord, step: StepPrediction, row: int) -> RunPrediction:
    """``record`` beside row ``row`` of ``step``, the prediction of its plan."""
    return RunPrediction(
        record=record,
        predicted_tokens_per_s_per_gpu=float(step.tokens_per_s_per_gpu[row]),
        predicted_memory_gib=float(measured_like(record, step.memory_bytes[row]) / GIB),
        feasible=bool(step.feasible[row]),
        predicted_lane_mfu_with_attention=float(step.mfu_with_attention_gemm_lane[row]),
        model_memory_gib=float(step.memory_bytes[row] / GIB),
    )


def predict_runs(records: Sequence[RunRecord], calibration: Calibration,
                 progress: Callable[[int, int], None] | None = None,
                 unpredictable: Callable[[RunRecord, str], None] | None = None
                 ) -> list[RunPrediction]:
    """Predict every record with ``calibration`` (``progress(done, total)`` after each
    group), in record order.

    Records that share a workload and a cluster (a layout sweep of one model) are predicted
    in one vectorised call over their plans: every formula is element-wise over plans, so
    each record gets the values it gets alone (tests/evaluate/test_validation_batches.py).
    A record the model cannot predict (MosaicInputError: e.g. a precision its catalog GPU
    lacks) is left out and passed to ``unpredictable(record, reason)``; without that
    callback the error propagates.
    """
    groups: dict[tuple[Any, Any], list[int]] = {}
    for index, record in enumerate(records):
        groups.setdefault((record.workload, record.cluster), []).append(index)
    predictions: list[RunPrediction | None] = [None] * len(records)
    done = 0
    for (workload, cluster), members in groups.items():
        try:
            machine = machine_for(cluster, workload.precision)
            plans = concatenate_plans([records[i].plan for i in members])
            step = predict_step(workload, plans, machine, calibration)
        except MosaicInputError as exc:
            if unpredictable is None:
                raise
            for index in members:  # one workload and cluster: the same reason for each
                unpredictable(records[index], str(exc))
            done += len(members)
            continue
        for row, index in enumerate(members):
            predictions[index] = run_prediction(records[index], step, row)
        done += len(members)
        if progress is not None:
            progress(done, len(records))
    return [p for p in predictions if p is not None]


def predict_in_batches(records: Iterable[RunRecord], calibration: Calibration,
                       batch_records: int = BATCH_RECORDS,
                       unpredictable: Callable[[RunRecord, str], None] | None = None
                       ) -> Iterator[list[RunPrediction]]:
    """:func:`predict_runs` over consecutive batches of at most ``batch_records`` records,
    one list of predictions per batch, in record order (``unpredictable`` as there).

    Memory is bounded by one batch (``records`` may be a stream). The values are those of
    one :func:`predict_runs` call over all records: grouping only batches plans, each
    formula is element-wise over them (tests/evaluate/test_validation_batches.py).
    """
    batch: list[RunRecord] = []
    for record in records:
        batch.append(record)
        if len(batch) == batch_records:
            yield predict_runs(batch, calibration, unpredictable=unpredictable)
            batch = []
    if batch:
        yield predict_runs(batch, calibration, unpredictable=unpredictable)


def _error_stats(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float | None]:
    if predicted.size == 0:
        return {"mape": None, "median_abs_error": None, "max_abs_error": None, "n_runs": 0}
    return {
        "mape": float(np.mean(np.abs(relative_errors(predicted, measured)))),
        "median_abs_error": median_abs_error(predicted, measured),
        "max_abs_error": max_abs_error(predicted, measured),
        "n_runs": int(predicted.size),
    }


def _top_k_overlap_within_groups(
    predicted: np.ndarray, measured: np.ndarray, groups: Sequence[str]
) -> float | None:
    """Mean top-k overlap over groups with more than ``TOP_K`` runs whose measured and
    predicted top k are both defined: a tie across either boundary (the k-th and the next
    equal) leaves the group out, as Spearman leaves out a group whose values all tie (the
    input order would pick the top k)."""
    groups_array = np.array(groups)
    overlaps = []

    def boundary_tied(values: np.ndarray) -> bool:
        ranked = np.sort(values)[::-1]
        return bool(ranked[TOP_K - 1] == ranked[TOP_K])

    for group in sorted(set(groups)):
        members = groups_array == group
        if members.sum() > TOP_K and not (boundary_tied(measured[members])
                                          or boundary_tied(predicted[members])):
            overlaps.append(top_k_overlap(predicted[members], measured[members], TOP_K))
    return float(np.mean(overlaps)) if overlaps else None


class ValidationSummary:
    """What the validation report keeps of each predicted run: a few numbers, its id and
    its group, in compact columns (about 130 bytes a run) so that the records themselves
    can go once predicted. :meth:`rows` and :meth:`aggregate` give exactly what
    :func:`run_rows` and :func:`aggregate` give for the same predictions.
    """

    def __init__(self) -> None:
        self.ids: list[str] = []
        # per run: predicted tokens/s, measured tokens/s (NaN = None), predicted GiB,
        # measured memory bytes (NaN = None)
        self._numbers = array("d")
        # bit 0 feasible, bit 1 oom, bit 2 MoE, bit 3 not scored, bit 4 over the planning
        # headroom
        self._flags = bytearray()
        self._not_scored: dict[str, str] = {}  # id -> why its throughput is not scored
        self._implausible: dict[str, str] = {}  # id -> why its measurement looks mis-entered
        self._implausible_throughput: set[str] = set()  # ids whose tokens/s looks so
        self._disagreements: dict[str, str] = {}  # id -> its stated consistent: false
        # id -> software text no stack is recognised in (costed as the generic stack)
        self._unrecognised_software: dict[str, str] = {}
        # per run: its assumption lines (the defaults filled in for what its record leaves
        # unstated), as indices into _labels: they repeat across runs
        self._assumptions: list[tuple[int, ...]] = []
        self._group = array("l")  # index into _labels (model @ GPU)
        self._software = array("l")  # index into _labels (software as recorded, or None)
        self._labels: dict[str | None, int] = {}

    @classmethod
    def of(cls, predictions: Iterable[RunPrediction]) -> ValidationSummary:
        summary = cls()
        summary.extend(predictions)
        return summary

    def __len__(self) -> int:
        return len(self.ids)

    def _label(self, text: str | None) -> int:
        return self._labels.setdefault(text, len(self._labels))

    def extend(self, predictions: Iterable[RunPrediction]) -> None:
        """Add each prediction's numbers (the prediction and its record can then go)."""
        nan = math.nan
        for p in predictions:
            record = p.record
            measured = record.measured_tokens_per_s_per_gpu
            memory = record.measured_memory_bytes
            self.ids.append(record.id)
            self._numbers.extend((p.predicted_tokens_per_s_per_gpu,
                                  nan if measured is None else measured,
                                  p.predicted_memory_gib, nan if memory is None else memory))
            not_scored = record.throughput_not_scored
            self._flags.append(p.feasible | record.oom << 1
                               | record.workload.geometry.is_moe << 2
                               | (not_scored is not None) << 3
                               | p.over_planning_headroom << 4)
            if not_scored is not None:
                self._not_scored[record.id] = not_scored
            implausible = p.implausible
            if implausible is not None:
                self._implausible[record.id] = implausible
                if p.implausible_throughput:
                    self._implausible_throughput.add(record.id)
            if record.measurement_disagreement is not None:
                self._disagreements[record.id] = record.measurement_disagreement
            # software that names no known stack, where the record states no stack of its own
            # (stack: other is a statement)
            if record.software_unrecognised:
                self._unrecognised_software[record.id] = record.software
            self._group.append(self._label(record.group_key))
            self._software.append(self._label(record.software))
            self._assumptions.append(tuple(map(self._label, record.assumptions)))

    def _columns(self) -> tuple[list[float | None], ...]:
        """(predicted, measured, predicted GiB, measured bytes) per run, None where unknown."""
        def column(offset: int) -> list[float | None]:
            return self._numbers[offset::4].tolist()

        def optional(offset: int) -> list[float | None]:
            return [None if math.isnan(v) else v for v in self._numbers[offset::4]]

        return column(0), optional(1), column(2), optional(3)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Per-run JSON rows, one at a time (as :func:`run_rows`)."""
        labels = list(self._labels)
        numbers = self._numbers
        for index, run_id in enumerate(self.ids):
            predicted, measured, memory_gib, memory = numbers[4 * index: 4 * index + 4]
            flags = self._flags[index]
            measured_run = None if math.isnan(measured) else measured
            measured_memory = None if math.isnan(memory) else memory
            yield {
                "id": run_id,
                "predicted_tokens_per_s_per_gpu": predicted,
                "measured_tokens_per_s_per_gpu": measured_run,
                "error": None if measured_run is None else predicted / measured_run - 1,
                "predicted_memory_gib": memory_gib,
                "measured_memory_gib": (None if measured_memory is None
                                        else measured_memory / GIB),
                "memory_error": (None if measured_memory is None
                                 else memory_gib * GIB / measured_memory - 1),
                "feasible": bool(flags & 1),
                "oom": bool(flags & 2),
                "moe": bool(flags & 4),
                "group": labels[self._group[index]],
                "throughput_scored": not flags & 8,
                # what the model filled in for the record (a trial could see them only
                # through `mosaic perf RUNS.yaml#ID`, one run at a time)
                "assumptions": [labels[i] for i in self._assumptions[index]],
            }

    def aggregate(self, fitted_runs: frozenset[str] = frozenset()) -> dict[str, Any]:
        """MAPE, median and max error overall / MoE / dense, rank agreement, OOM agreement;
        ``in_sample_runs`` counts the runs among ``fitted_runs``, those the calibration's
        values were fitted on (its own fit's and its base's; their errors score its fit, not
        the model).

        Runs whose throughput is not scored (``RunRecord.throughput_not_scored``) are left
        out of the throughput figures and listed with the reason; their memory still counts.
        Runs whose measurement looks mis-entered (:attr:`RunPrediction.implausible`) are
        listed with the reason and still scored: the user decides (fix or --exclude).
        """
        labels = list(self._labels)
        predicted_all, measured_all, memory_gib, memory_bytes = self._columns()
        feasible = [bool(f & 1) for f in self._flags]
        oom = [bool(f & 2) for f in self._flags]
        measured_runs = [i for i, m in enumerate(measured_all)
                         if m and not self._flags[i] & 8]
        predicted = np.array([predicted_all[i] for i in measured_runs])
        measured = np.array([measured_all[i] for i in measured_runs])
        moe = np.array([bool(self._flags[i] & 4) for i in measured_runs], dtype=bool)
        groups = [labels[self._group[i]] for i in measured_runs]
        spearman = spearman_within_groups(predicted, measured, groups) if measured_runs else None
        # The same groups split by software release: what ranks there is the layout alone,
        # not a container upgrade between two runs of one layout.
        release_groups = [f"{labels[self._group[i]]} | {labels[self._software[i]]}"
                          for i in measured_runs]
        same_release = (spearman_within_groups(predicted, measured, release_groups)
                        if measured_runs else None)
        oom_runs = [i for i, o in enumerate(oom) if o]
        oom_correct = oom_prediction_correct([True] * len(oom_runs),
                                             [feasible[i] for i in oom_runs])
        # an OOM run's figure is where it stopped, not its peak (a trial's OOM record with
        # memory_gib was scored; calibrate's memory scale leaves such runs out too)
        memory = [(memory_gib[i] * GIB, m) for i, m in enumerate(memory_bytes)
                  if m and not oom[i]]
        memory_stats = (
            _error_stats(*(np.array(c) for c in zip(*memory, strict=True)))
            if memory
            else _error_stats(np.array([]), np.array([]))
        )
        # the headline again without the runs whose tokens/s looks mis-entered, which are
        # scored as given and can make it meaningless (a trial's 11,314% from two unit
        # slips); a run flagged for its memory figure alone stays in
        plausible = np.array([self.ids[i] not in self._implausible_throughput
                              for i in measured_runs], dtype=bool)
        without_implausible = (_error_stats(predicted[plausible], measured[plausible])["mape"]
                               if not plausible.all() and plausible.any() else None)
        return {
            **_error_stats(predicted, measured),
            "mape_without_implausible": without_implausible,
            "moe": _error_stats(predicted[moe], measured[moe]),
            "dense": _error_stats(predicted[~moe], measured[~moe]),
            "spearman": None if spearman is None or np.isnan(spearman.mean) else spearman.mean,
            "spearman_groups": {} if spearman is None else dict(spearman.per_group),
            "spearman_same_software": (None if same_release is None
                                       or np.isnan(same_release.mean) else same_release.mean),
            "top_k_overlap": _top_k_overlap_within_groups(predicted, measured, groups),
            "oom_runs": len(oom_runs),
            "oom_correct": int(np.sum(oom_correct)),
            "trained_runs_predicted_infeasible": sum(
                1 for o, f in zip(oom, feasible, strict=True) if not o and not f),
            "trained_runs_predicted_infeasible_ids": [
                self.ids[i] for i, (o, f) in enumerate(zip(oom, feasible, strict=True))
                if not o and not f],
            # what `layouts` and `plan` would leave out of their search (a trial's fastest
            # run fit its GPUs by validate's verdict and not by theirs)
            "trained_runs_over_planning_headroom_ids": [
                self.ids[i] for i, o in enumerate(oom)
                if not o and self._flags[i] & 16],
            "memory": memory_stats,
            "throughput_not_scored": [{"id": run_id, "reason": reason}
                                      for run_id, reason in self._not_scored.items()],
            "implausible_measurements": [{"id": run_id, "reason": reason}
                                         for run_id, reason in self._implausible.items()],
            "stated_inconsistent": [{"id": run_id, "reason": reason}
                                    for run_id, reason in self._disagreements.items()],
            "in_sample_runs": sum(run_id in fitted_runs for run_id in self.ids),
            # a typo in `software` silently costs the run on generic defaults (a trial)
            "unrecognised_software": [{"id": run_id, "software": software}
                                      for run_id, software
                                      in self._unrecognised_software.items()],
        }


def aggregate(predictions: Sequence[RunPrediction]) -> dict[str, Any]:
    """MAPE, median and max error overall / MoE / dense, rank agreement, OOM agreement
    (:meth:`ValidationSummary.aggregate`)."""
    return ValidationSummary.of(predictions).aggregate()


def run_rows(predictions: Sequence[RunPrediction]) -> list[dict[str, Any]]:
    """Per-run JSON rows."""
    return list(ValidationSummary.of(predictions).rows())
