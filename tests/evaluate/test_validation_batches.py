"""validate predicts runs of one workload together: the values equal one run at a time."""

import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from mosaic.config.run_records import load_run_records
from mosaic.evaluate.validation_report import predict_runs
from mosaic.perf.calibration import default_calibration
from mosaic.perf.plan import Sharding, concatenate_plans

REPO = Path(__file__).resolve().parents[2]
SHARED_RUNS = REPO.parent / "shared" / "calibration" / "published_runs.yaml"


def _records(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_run_records(path).records


def _alone(records):
    return [predict_runs([record], default_calibration())[0] for record in records]


def _assert_same(batched, alone):
    assert [p.record.id for p in batched] == [p.record.id for p in alone]
    for b, a in zip(batched, alone, strict=True):
        assert b.predicted_tokens_per_s_per_gpu == a.predicted_tokens_per_s_per_gpu, b.record.id
        assert b.predicted_memory_gib == a.predicted_memory_gib, b.record.id
        assert b.feasible == a.feasible, b.record.id


def test_a_layout_sweep_predicted_together_equals_one_run_at_a_time():
    base = _records(REPO / "examples" / "runs_example.yaml")
    sweep = []
    for i, record in enumerate(base):  # each run with its plan under every sharding mode
        for mode in Sharding:
            plan = replace(record.plan, sharding=record.plan.sharding * 0 + int(mode))
            sweep.append(replace(record, id=f"{record.id}-{i}-{mode.name}", plan=plan))
    sweep = sweep[::2] + sweep[1::2]  # interleave the workloads
    batched = predict_runs(sweep, default_calibration())
    _assert_same(batched, _alone(sweep))
    assert len({(r.workload, r.cluster) for r in sweep}) < len(sweep)


def test_published_runs_together_equal_one_at_a_time():
    if not SHARED_RUNS.exists():
        pytest.skip(f"{SHARED_RUNS} not found (shared data lives next to the repository)")
    records = _records(SHARED_RUNS)
    _assert_same(predict_runs(records, default_calibration()), _alone(records))


def test_concatenate_plans_keeps_order():
    records = _records(REPO / "examples" / "runs_example.yaml")
    joined = concatenate_plans([r.plan for r in records])
    assert len(joined) == len(records)
    assert joined.tp.tolist() == [int(r.plan.tp[0]) for r in records]
