"""validate's streamed path: batches of records predict what one call over all of them
predicts, and the compact summary gives each prediction's own numbers."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

from mosaic.config.run_records import load_run_records
from mosaic.evaluate.validation_report import (
    GIB,
    ValidationSummary,
    predict_in_batches,
    predict_runs,
)
from mosaic.perf.calibration import default_calibration
from mosaic.perf.memory import RUNTIME_RESERVE_BYTES

REPO = Path(__file__).resolve().parents[2]


def _records():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        example = load_run_records(REPO / "examples" / "runs_example.yaml").records
        extra = load_run_records(REPO / "src/mosaic/evaluate/data/extra_runs.yaml").records
    # a layout sweep of one model (one vectorised group) across batch boundaries, then
    # runs of many workloads
    sweep = [replace(example[i % 4], id=f"sweep-{i}") for i in range(23)]
    return [*sweep, *extra[:40]]


def test_batches_predict_what_one_call_predicts():
    records = _records()
    calibration = default_calibration()
    whole = predict_runs(records, calibration)
    for size in (1, 7):
        batches = list(predict_in_batches(iter(records), calibration, batch_records=size))
        assert all(len(b) <= size for b in batches)
        batched = [p for batch in batches for p in batch]
        assert [p.record.id for p in batched] == [p.record.id for p in whole]
        for b, w in zip(batched, whole, strict=True):  # bit for bit
            assert b.predicted_tokens_per_s_per_gpu == w.predicted_tokens_per_s_per_gpu
            assert b.predicted_memory_gib == w.predicted_memory_gib
            assert b.feasible == w.feasible


def test_summary_rows_hold_each_predictions_numbers():
    predictions = predict_runs(_records(), default_calibration())
    summary = ValidationSummary()
    summary.extend(predictions[:10])  # added in parts, as validate does per batch
    summary.extend(predictions[10:])
    rows = list(summary.rows())
    assert len(summary) == len(rows) == len(predictions)
    for row, p in zip(rows, predictions, strict=True):
        record = p.record
        assert row["id"] == record.id and row["group"] == record.group_key
        assert row["predicted_tokens_per_s_per_gpu"] == p.predicted_tokens_per_s_per_gpu
        assert row["measured_tokens_per_s_per_gpu"] == record.measured_tokens_per_s_per_gpu
        assert row["error"] == p.error and row["memory_error"] == p.memory_error
        assert row["predicted_memory_gib"] == p.predicted_memory_gib
        measured_gib = (None if record.measured_memory_bytes is None
                        else record.measured_memory_bytes / GIB)
        assert row["measured_memory_gib"] == measured_gib
        assert (row["feasible"], row["oom"], row["moe"]) == (
            p.feasible, record.oom, record.workload.geometry.is_moe)
    assert any(r["measured_tokens_per_s_per_gpu"] is None for r in rows)  # the OOM runs
    assert any(r["measured_memory_gib"] is not None for r in rows)


def test_aggregate_counts_from_the_summary():
    predictions = predict_runs(_records(), default_calibration())
    stats = ValidationSummary.of(predictions).aggregate()
    measured = [p for p in predictions if p.record.measured_tokens_per_s_per_gpu]
    assert stats["n_runs"] == len(measured)
    errors = [abs(p.error) for p in measured]
    assert math.isclose(stats["mape"], sum(errors) / len(errors), rel_tol=1e-12)
    assert stats["max_abs_error"] == max(errors)
    assert stats["moe"]["n_runs"] + stats["dense"]["n_runs"] == len(measured)
    assert stats["oom_runs"] == sum(p.record.oom for p in predictions)
    assert stats["memory"]["n_runs"] == sum(
        1 for p in predictions if p.record.measured_memory_bytes)


def test_trained_runs_over_the_planning_headroom_are_counted_by_hand():
    """A run that trained but is predicted above the share layouts and plan keep (90% of
    the device on these stacks) is listed, so validate's 'fits' and layouts' 'out of
    memory' no longer disagree without a word (a trial)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extra = load_run_records(REPO / "src/mosaic/evaluate/data/extra_runs.yaml").records
    predictions = predict_runs(extra, default_calibration())
    stats = ValidationSummary.of(predictions).aggregate()
    assert {p.record.workload.stack for p in predictions}.isdisjoint({"paper-nemo"})
    # the model's total, the figure layouts and plan check (not the record-measured reading)
    by_hand = [p.record.id for p in predictions if not p.record.oom
               and p.model_memory_gib * GIB > 0.9 * p.record.system.device.hbm_bytes]
    assert len(by_hand) > 2  # runs that trained close to their device's memory
    assert stats["trained_runs_over_planning_headroom_ids"] == by_hand
    assert set(stats["trained_runs_predicted_infeasible_ids"]) <= set(by_hand)


def test_the_model_total_and_the_record_reading_differ_by_what_the_record_leaves_out():
    """An allocated (peak active) figure leaves out the runtime reserve the model total
    holds; an allocator figure is the total itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extra = load_run_records(REPO / "src/mosaic/evaluate/data/extra_runs.yaml").records
    predictions = predict_runs(extra, default_calibration())
    seen = set()
    for p in predictions:
        gap_gib = p.model_memory_gib - p.predicted_memory_gib
        if p.record.memory_measure == "allocated":
            assert math.isclose(gap_gib, RUNTIME_RESERVE_BYTES / GIB, rel_tol=1e-9)
        elif p.record.memory_measure == "allocator":
            assert gap_gib == 0.0
        seen.add(p.record.memory_measure)
    assert {"allocated", "allocator"} <= seen
