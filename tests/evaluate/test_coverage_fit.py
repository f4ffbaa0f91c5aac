"""The built-in profiles' coverage sections are what `mosaic calibrate` measures today."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mosaic.config.run_records import load_run_records
from mosaic.evaluate.calibrate import leave_one_group_out, record_baselines
from mosaic.evaluate.coverage_fit import build_coverage, with_inherited_runs
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.perf.calibration import built_in_calibration

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "calibration"
# Profile -> (run file it is fitted on, cross-validation grouping); the docs give the commands.
FIT_DATA = {"default": ("published_runs.yaml", "source"),
            "paper-p6b200": ("paper_p6b200_sweeps.yaml", "group")}
REGENERATE = ("mosaic calibrate ../shared/calibration/{runs} --base {name} --name {name} "
              "--cv {cv} --out src/mosaic/perf/data/calibration_{name}.yaml")


@pytest.mark.parametrize("profile", sorted(FIT_DATA))
def test_shipped_coverage_is_up_to_date(profile: str) -> None:
    runs_name, cv = FIT_DATA[profile]
    runs = SHARED / runs_name
    if not runs.exists():
        pytest.skip(f"{runs} not present (the shared calibration data is outside the repo)")
    shipped = built_in_calibration(profile)
    records = apply_record_settings(load_run_records(runs)).records  # as `mosaic calibrate`
    baselines = record_baselines(records, shipped)
    by_id = {r.id: r for r in records}
    groups = [by_id[i].source_key if cv == "source" else by_id[i].group_key
              for i in baselines.ids]
    held_out = leave_one_group_out(baselines, groups, shipped)
    coverage = with_inherited_runs(  # refitted over itself, as the command does
        build_coverage(records, baselines.ids, held_out, shipped, shipped.coverage.source),
        shipped)
    assert coverage == shipped.coverage, "stale coverage; regenerate with: " + REGENERATE.format(
        runs=runs_name, name=profile, cv=cv)
    # The held-out ratios are measured/predicted tokens/s: 1 / (1 + the CV error).
    ratios = held_out.predicted_step_time_s / held_out.measured_step_time_s
    assert ratios == pytest.approx(1.0 / (1.0 + held_out.errors))
    pooled = next(q for q in coverage.tokens_per_s_ratio if q.scope == "all")
    assert pooled.n_runs == len(baselines.ids)
    assert pooled.low <= np.median(ratios) <= pooled.high
