"""`mosaic validate` writes its table and JSON a chunk at a time, byte for byte as the
whole-document writers (print_table, print_json) write them."""

from __future__ import annotations

import copy
import io
import json
import random
import warnings
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

import mosaic.cli.common as common
from mosaic.cli.main import app
from mosaic.cli.stream_table import print_table_streamed
from mosaic.cli.validate_cmd import _print_json_streamed, _table_row
from mosaic.config.run_records import load_run_records
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.evaluate.validation_report import ValidationSummary, predict_runs
from mosaic.perf.calibration import default_calibration

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "runs_example.yaml"
COLUMNS = ["run", "predicted", "measured", "error", "mem GiB", "measured GiB"]
runner = CliRunner()


def _rows(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[f"run-{'x' * rng.randint(1, 40)}-{i}" + (" two words" if i % 7 == 0 else ""),
             f"{rng.random() * 1e5:,.0f}", "OOM" if i % 11 == 0 else f"{rng.random():.3f}",
             f"{rng.uniform(-1, 1):+.1%}", f"{rng.random() * 200:.1f}",
             "-" if i % 3 else "[b]markup[/b]"] for i in range(n)]


@pytest.mark.parametrize("width", [10_000, 100, 60, 30])
@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "terminal"])
@pytest.mark.parametrize(("n", "chunk"), [(1, 1), (2, 1), (10, 5), (23, 4), (50, 7)])
def test_chunked_table_equals_print_table(monkeypatch, width, terminal, n, chunk):
    """Tables that fit, tables shrunk to a narrow console (cells wrapped over lines),
    ANSI styles, rich markup in cells, chunk boundaries anywhere."""
    def make() -> Console:
        return Console(file=io.StringIO(), width=width, force_terminal=terminal,
                       color_system="truecolor" if terminal else None)

    rows = _rows(n, seed=n * width)
    whole = make()
    monkeypatch.setattr(common, "console", whole)
    common.print_table("Predicted vs measured tokens/s per GPU", COLUMNS, rows)
    chunked = make()
    print_table_streamed(chunked, "Predicted vs measured tokens/s per GPU", COLUMNS,
                         lambda: iter(rows), chunk_rows=chunk)
    assert chunked.file.getvalue() == whole.file.getvalue()


def _summary() -> ValidationSummary:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = apply_record_settings(load_run_records(EXAMPLE)).records
    return ValidationSummary.of(predict_runs(records, default_calibration()))


@pytest.mark.parametrize("chunk_rows", [1, 3, 1000])
def test_chunked_json_equals_print_json(capsys, chunk_rows):
    summary = _summary()
    rest = {"aggregate": summary.aggregate(), "skipped": [{"id": "x", "reason": "a\nb"}],
            "excluded": ["y"]}
    common.print_json({"runs": list(summary.rows()), **rest})
    whole = capsys.readouterr().out
    _print_json_streamed(summary, rest, chunk_rows=chunk_rows)
    assert capsys.readouterr().out == whole


def test_validate_of_a_generated_file_equals_the_whole_file_report(tmp_path, monkeypatch):
    """600 runs (several prediction batches, JSON and table chunks) through the command,
    against the report built from all records at once."""
    monkeypatch.setenv("MOSAIC_QUIET", "1")  # not --quiet: that stays set in this process
    document = yaml.safe_load(EXAMPLE.read_text())
    base = document.pop("runs")
    runs = []
    for index in range(600):
        run = copy.deepcopy(base[index % 4])
        run["id"] = f"{run['id']}-{index}"
        run["batch"]["global_seqs"] *= 1 + index % 3  # more than one workload per model
        if run["measured"].get("step_time_s"):  # not the OOM run
            run["measured"]["step_time_s"] *= 1 + index % 3
        runs.append(run)
    runs[450]["num_gpus"] = 0  # one skipped
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.dump({**document, "runs": runs}, Dumper=yaml.CSafeDumper
                              if hasattr(yaml, "CSafeDumper") else yaml.SafeDumper,
                              sort_keys=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = apply_record_settings(load_run_records(path))
    predictions = predict_runs(loaded.records, default_calibration())
    expected = ValidationSummary.of(predictions)
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert len(doc["runs"]) == 599
    assert doc["runs"] == json.loads(json.dumps(common.to_jsonable(list(expected.rows()))))
    assert doc["aggregate"] == json.loads(json.dumps(common.to_jsonable(expected.aggregate())))
    assert [s["id"] for s in doc["skipped"]] == [runs[450]["id"]]
    assert "(entry 451): num_gpus" in doc["skipped"][0]["reason"]
    table = runner.invoke(app, ["validate", str(path)])
    assert table.exit_code == 0, table.output
    row_lines = [line for line in table.output.splitlines()
                 if line.startswith("│") and "example-" in line]
    assert len(row_lines) == 599
    first = _table_row(next(expected.rows()))
    assert all(cell in row_lines[0] for cell in first)
