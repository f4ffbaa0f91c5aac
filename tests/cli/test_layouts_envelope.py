"""`mosaic layouts` names the best layout inside the calibrated envelope when the best one
lies beyond it (a trial took a 4x-beyond-dp layout over the recipe's)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.perf.calibration import default_calibration

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _search(job: str, *options: str) -> dict:
    result = runner.invoke(app, ["layouts", str(EXAMPLES / job), "--top", "400", "--json",
                                 *options])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_first_ranked_layout_inside_the_calibrated_degrees_is_named():
    document = _search("deepseek_v3_h100.yaml")  # 1,024 H100: dp up to 1,024
    ranges = default_calibration().coverage.degrees

    def inside(row: dict) -> bool:
        return all(ranges[axis][0] <= row[axis] <= ranges[axis][1]
                   for axis in ("tp", "pp", "ep", "cp", "dp") if axis in ranges)

    rows = document["rows"]
    assert not inside(rows[0])
    named = document["best_inside_envelope"]
    by_hand = next(row for row in rows if inside(row))
    assert named["rank"] == by_hand["rank"]
    assert named["tokens_per_s_per_gpu"] == by_hand["tokens_per_s_per_gpu"]
    text = runner.invoke(app, ["layouts", str(EXAMPLES / "deepseek_v3_h100.yaml"),
                               "--top", "3"]).output
    assert f"Best layout inside the calibrated envelope: #{named['rank']}" in text


def test_nothing_is_named_when_the_best_layout_is_inside():
    document = _search("deepseek_v3_h100.yaml", "--devices", "256")
    assert document["rows"][0]["coverage"]["outside"] == []
    assert document["best_inside_envelope"] is None
