"""Predict measured runs and report the error (paper Sec. 7.2.1; issue "accuracy report").

Errors are fractions: ``error = predicted / measured − 1`` on tokens/s per GPU. Runs that
went out of memory count as correct when the model predicts them infeasible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mosaic.config.run_records import RunRecord
from mosaic.perf.accuracy import (
    max_abs_error,
    median_abs_error,
    oom_prediction_correct,
    relative_errors,
    spearman_within_groups,
    top_k_overlap,
)
from mosaic.perf.calibration import Calibration
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import concatenate_plans
from mosaic.perf.step_time import predict_step

GIB = 2**30
TOP_K = 3  # top-k overlap inside a group of runs sharing model and cluster (Sec. 7.2.1)


@dataclass(frozen=True)
class RunPrediction:
    """One run: what was measured next to what the model predicts."""

    record: RunRecord
    predicted_tokens_per_s_per_gpu: float
    predicted_memory_gib: float
    feasible: bool

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


def predict_runs(records: Sequence[RunRecord], calibration: Calibration,
                 progress: Callable[[int, int], None] | None = None) -> list[RunPrediction]:
    """Predict every record with ``calibration`` (``progress(done, total)`` after each
    group), in record order.

    Records that share a workload and a cluster (a layout sweep of one model) are predicted
    in one vectorised call over their plans: every formula is element-wise over plans, so
    each record gets the values it gets alone (tests/evaluate/test_validation_batches.py).
    """
    groups: dict[tuple[Any, Any], list[int]] = {}
    for index, record in enumerate(records):
        groups.setdefault((record.workload, record.cluster), []).append(index)
    predictions: list[RunPrediction | None] = [None] * len(records)
    done = 0
    for (workload, cluster), members in groups.items():
        machine = machine_for(cluster, workload.precision)
        plans = concatenate_plans([records[i].plan for i in members])
        step = predict_step(workload, plans, machine, calibration)
        for row, index in enumerate(members):
            predictions[index] = RunPrediction(
                record=records[index],
                predicted_tokens_per_s_per_gpu=float(step.tokens_per_s_per_gpu[row]),
                predicted_memory_gib=float(step.memory_bytes[row] / GIB),
                feasible=bool(step.feasible[row]),
            )
        done += len(members)
        if progress is not None:
            progress(done, len(records))
    return [p for p in predictions if p is not None]


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
    """Mean top-k overlap over groups with more than ``TOP_K`` runs."""
    groups_array = np.array(groups)
    overlaps = []
    for group in sorted(set(groups)):
        members = groups_array == group
        if members.sum() > TOP_K:
            overlaps.append(top_k_overlap(predicted[members], measured[members], TOP_K))
    return float(np.mean(overlaps)) if overlaps else None


def aggregate(predictions: Sequence[RunPrediction]) -> dict[str, Any]:
    """MAPE, median and max error overall / MoE / dense, rank agreement, OOM agreement.

    Runs whose throughput is not scored (``RunRecord.throughput_not_scored``) are left out
    of the throughput figures and listed with the reason; their memory still counts.
    """
    measured_runs = [p for p in predictions
                     if p.record.throughput_scored and p.record.measured_tokens_per_s_per_gpu]
    predicted = np.array([p.predicted_tokens_per_s_per_gpu for p in measured_runs])
    measured = np.array([p.record.measured_tokens_per_s_per_gpu for p in measured_runs])
    moe = np.array([p.record.workload.geometry.is_moe for p in measured_runs], dtype=bool)
    groups = [p.record.group_key for p in measured_runs]
    spearman = spearman_within_groups(predicted, measured, groups) if measured_runs else None
    # The same groups split by software release: what ranks there is the layout alone, not
    # a container upgrade between two runs of one layout.
    release_groups = [f"{p.record.group_key} | {p.record.software}" for p in measured_runs]
    same_release = (spearman_within_groups(predicted, measured, release_groups)
                    if measured_runs else None)
    oom_runs = [p for p in predictions if p.record.oom]
    oom_correct = oom_prediction_correct([True] * len(oom_runs), [p.feasible for p in oom_runs])
    memory = [
        (p.predicted_memory_gib * GIB, p.record.measured_memory_bytes)
        for p in predictions
        if p.record.measured_memory_bytes
    ]
    memory_stats = (
        _error_stats(*(np.array(c) for c in zip(*memory, strict=True)))
        if memory
        else _error_stats(np.array([]), np.array([]))
    )
    return {
        **_error_stats(predicted, measured),
        "moe": _error_stats(predicted[moe], measured[moe]),
        "dense": _error_stats(predicted[~moe], measured[~moe]),
        "spearman": None if spearman is None or np.isnan(spearman.mean) else spearman.mean,
        "spearman_groups": {} if spearman is None else dict(spearman.per_group),
        "spearman_same_software": (None if same_release is None or np.isnan(same_release.mean)
                                   else same_release.mean),
        "top_k_overlap": _top_k_overlap_within_groups(predicted, measured, groups),
        "oom_runs": len(oom_runs),
        "oom_correct": int(np.sum(oom_correct)),
        "trained_runs_predicted_infeasible": sum(
            1 for p in predictions if not p.record.oom and not p.feasible),
        "memory": memory_stats,
        "throughput_not_scored": [{"id": p.record.id, "reason": p.record.throughput_not_scored}
                                  for p in predictions if p.record.throughput_not_scored],
    }


def run_rows(predictions: Sequence[RunPrediction]) -> list[dict[str, Any]]:
    """Per-run JSON rows."""
    return [
        {
            "id": p.record.id,
            "predicted_tokens_per_s_per_gpu": p.predicted_tokens_per_s_per_gpu,
            "measured_tokens_per_s_per_gpu": p.record.measured_tokens_per_s_per_gpu,
            "error": p.error,
            "predicted_memory_gib": p.predicted_memory_gib,
            "measured_memory_gib": (
                None
                if p.record.measured_memory_bytes is None
                else p.record.measured_memory_bytes / GIB
            ),
            "memory_error": p.memory_error,
            "feasible": p.feasible,
            "oom": p.record.oom,
            "moe": p.record.workload.geometry.is_moe,
            "group": p.record.group_key,
        }
        for p in predictions
    ]
