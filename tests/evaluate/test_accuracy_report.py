"""benchmarks/accuracy_report.py: it reads the runs as `mosaic validate` does (record
settings applied), its per-GPU/per-stack cells are plain means, and --compare lines up a
report written before."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy_report.py"


@pytest.fixture(scope="module")
def bench(load_by_path):
    return load_by_path("mosaic_bench_accuracy_report", _PATH)


def _record(run_id: str, moe: bool, gpu: str, stack: str) -> SimpleNamespace:
    geometry = SimpleNamespace(is_moe=moe)
    return SimpleNamespace(id=run_id, group_key=f"Some model @ {gpu}",
                           workload=SimpleNamespace(geometry=geometry, stack=stack))


def test_breakdown_cells_are_means_of_signed_and_absolute_errors(bench):
    records = [_record("a", True, "H100", "megatron-core"),
               _record("b", True, "H100", "torchtitan"),
               _record("c", False, "B200", "torchtitan"),
               _record("unscored", True, "H100", "torchtitan")]
    cells = bench.breakdown(records, {"a": 0.10, "b": -0.30, "c": 0.20})
    assert cells["MoE on H100"] == {"n": 2, "mean": pytest.approx(-0.10),
                                    "mape": pytest.approx(0.20)}
    assert cells["MoE with torchtitan"] == {"n": 1, "mean": pytest.approx(-0.30),
                                            "mape": pytest.approx(0.30)}
    assert cells["dense on B200"]["n"] == 1
    assert "MoE with megatron-core" in cells and len(cells) == 5


def test_the_extra_set_scores_as_mosaic_validate_reports_it(bench, tmp_path):
    # The CLI streams the records through its own loader and batches; the report must read
    # the same runs with the same record settings (an unscored run counted, or a record
    # setting missed, changes these figures).
    out = tmp_path / "report.json"
    assert bench.main(["--calibration", "default", "--worst", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    cli = CliRunner().invoke(app, ["-q", "validate", str(bench.EXTRA), "--json"])
    assert cli.exit_code == 0, cli.output
    expected = json.loads(cli.stdout)["aggregate"]
    got = report["extra"]["aggregate"]
    for key in ("mape", "spearman", "oom_correct", "trained_runs_predicted_infeasible"):
        assert got[key] == pytest.approx(expected[key], rel=1e-9), key
    assert got["moe"]["mape"] == pytest.approx(expected["moe"]["mape"], rel=1e-9)
    assert len(report["extra"]["errors"]) == expected["n_runs"]


def test_compare_prints_each_headline_beside_the_base_report(bench, capsys):
    report = {"calibration": "x", "extra": {
        "aggregate": {"mape": 0.20, "moe": {"mape": 0.25}, "dense": {"mape": 0.1},
                      "spearman": 0.75, "memory": {"mape": 0.15}, "oom_correct": 16,
                      "trained_runs_predicted_infeasible": 3},
        "breakdown": {}, "errors": {}}}
    base = json.loads(json.dumps(report))
    base["extra"]["aggregate"]["mape"] = 0.189
    bench.print_report(report, 0, base)
    printed = capsys.readouterr().out
    assert "extra MAPE" in printed and "20.00%" in printed and "(base   18.90%)" in printed
    assert "extra OOMs predicted infeasible        16   (base       16)" in printed
    assert "published" not in printed.split("\n\n")[0]  # no published set, no such lines
