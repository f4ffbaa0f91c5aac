"""validate and calibrate report each run predicted and each cross-validation refit."""

import warnings
from pathlib import Path

from mosaic.config.run_records import load_run_records
from mosaic.evaluate.calibrate import leave_one_group_out, record_baselines
from mosaic.evaluate.validation_report import predict_runs
from mosaic.perf.calibration import default_calibration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_prediction_and_cross_validation_loops_report_progress():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = load_run_records(EXAMPLES / "runs_example.yaml").records
    calibration = default_calibration()
    calls: list[tuple[int, int]] = []
    predict_runs(records, calibration, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, len(records)) for i in range(1, len(records) + 1)]
    calls.clear()
    baselines = record_baselines(records, calibration, lambda d, t: calls.append((d, t)))
    assert calls[-1] == (len(baselines.ids), len(baselines.ids))
    calls.clear()
    groups = [f"g{i % 2}" for i in range(len(baselines.ids))]
    leave_one_group_out(baselines, groups, calibration, lambda d, t: calls.append((d, t)))
    assert calls == [(1, 2), (2, 2)]
