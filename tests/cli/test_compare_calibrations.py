"""`mosaic compare JOB JOB --calibration A,B`: one job under two calibration profiles, what
the second profile moved (docs/perf.md "What a profile moved")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.contract import json_problems
from mosaic.cli.main import app
from mosaic.perf.calibration import default_calibration

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "appendix_e.yaml"
STACK_SCALE = 1.1  # the hand-set ratio of the test profile's stack multiplier to default's
runner = CliRunner()


def _job_stack() -> str:
    """The stack the job resolves to under the default profile (`mosaic perf --json`)."""
    result = runner.invoke(app, ["perf", str(JOB), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["stack"]


@pytest.fixture(scope="module")
def acme(tmp_path_factory) -> Path:
    """The default profile with the job's stack multiplier set by hand to 1.1x default's,
    named 'acme' (as `mosaic calibrate runs.yaml --out acme.yaml` would write one)."""
    document = default_calibration().to_document()
    document["name"] = "acme"
    overhead = document["constants"]["stack_overhead"]["value"]
    overhead[_job_stack()] *= STACK_SCALE
    path = tmp_path_factory.mktemp("profiles") / "acme.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_one_job_under_two_profiles_moves_by_the_stack_multiplier(acme):
    """Step time = analytical step x chi_sys x the stack multiplier (perf/step_time.py: the
    step multiplier scales every term, `mosaic perf`'s "every term xM" line), so a stack
    multiplier 1.1x default's gives a step 1.1x as long, tokens/s and MFU 1/1.1, the same
    memory; the document names each side's profile and lists it among the inputs."""
    result = runner.invoke(
        app, ["compare", str(JOB), str(JOB), "--calibration", f"default,{acme}", "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert json_problems(doc) == []
    a, b = doc["a"], doc["b"]
    assert (a["calibration"], b["calibration"]) == ("default", "acme")
    assert b["calibration_source"] == f"{acme} (acme)"
    assert b["step_time_s"] / a["step_time_s"] == pytest.approx(STACK_SCALE, rel=1e-9)
    assert b["tokens_per_s"] / a["tokens_per_s"] == pytest.approx(1 / STACK_SCALE, rel=1e-9)
    assert b["mfu"] / a["mfu"] == pytest.approx(1 / STACK_SCALE, rel=1e-9)
    assert b["memory_gib"] == a["memory_gib"]
    assert sum(b["breakdown_s"].values()) == pytest.approx(b["step_time_s"], rel=1e-9)
    assert doc["input_differences"] == [
        {"field": "calibration", "a": "default", "b": f"{acme} (acme)"}
    ]
    moved = {row["term"]: row for row in doc["calibration_terms"]}
    assert set(moved) == {"stack_multiplier", "step_multiplier"}  # nothing else was edited
    for term in moved.values():
        assert term["ratio_b_over_a"] == pytest.approx(STACK_SCALE, rel=1e-9)


def test_the_table_names_each_sides_profile_and_what_moved(acme):
    result = runner.invoke(
        app, ["compare", str(JOB), str(JOB), "--calibration", f"default,{acme}"], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "A calibration" in text and "B calibration" in text and "(acme)" in text
    assert "Calibrated terms that differ" in text and "stack multiplier" in text
    assert "1.1x" in text  # B / A of the stack multiplier
    assert "step multipliers A" in text  # why every step term moved


def test_one_profile_applies_to_both_sides_and_is_no_difference(acme):
    doc = json.loads(
        runner.invoke(
            app, ["compare", str(JOB), str(JOB), "--calibration", str(acme), "--json"]
        ).stdout
    )
    assert doc["a"]["calibration"] == doc["b"]["calibration"] == "acme"
    assert doc["input_differences"] == [] and doc["calibration_terms"] == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("default,missing.yaml", "--calibration, B's profile 'missing.yaml'"),
        ("missing.yaml,default", "--calibration, A's profile 'missing.yaml'"),
        ("default,default,default", "--calibration must be one profile"),
        ("default,", "--calibration must be one profile"),
        (",default", "--calibration must be one profile"),
    ],
)
def test_a_bad_pair_of_profiles_is_one_line(value, message):
    result = runner.invoke(app, ["compare", str(JOB), str(JOB), "--calibration", value])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    if "missing" in message:
        assert "not found" in lines[0]


def test_the_html_report_names_each_sides_profile_and_what_moved(acme, tmp_path):
    page = tmp_path / "compare.html"
    result = runner.invoke(
        app,
        ["compare", str(JOB), str(JOB), "--calibration", f"default,{acme}", "--html", str(page)],
    )
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert 'id="compare-calibration"' in html and "stack multiplier" in html
    assert "B calibration" in html and "(acme)" in html


def test_a_profiles_own_stack_is_listed_as_an_input_it_set():
    """A job that names no stack runs on its profile's (load_job_spec's default_stack): under
    paper-p6b200 that is the profile file's own ``stack``, an input the profile set."""
    from mosaic.perf.calibration import load_calibration

    paper = load_calibration("paper-p6b200")
    doc = json.loads(
        runner.invoke(
            app, ["compare", str(JOB), str(JOB), "--calibration", "default,paper-p6b200", "--json"]
        ).stdout
    )
    rows = {row["field"]: row for row in doc["input_differences"]}
    assert rows["calibration"]["b"] == "paper-p6b200"
    stack = rows["performance.stack"]
    assert stack["b"] == paper.stack and stack["b_from"] == "calibration paper-p6b200"
    assert doc["a"]["calibration_terms"]["stack"] == stack["a"] != paper.stack


def test_a_term_is_listed_only_where_it_differs_beyond_the_printed_digits():
    """The default profile's balanced-routing factor is 1.00000000954596 against its
    default 1.0 (perf/data/calibration_default.yaml): printed alike, so not listed; an
    overlap credit of 0 against -0.001 is, with no ratio over a zero."""
    from mosaic.report.calibration_terms import calibration_term_rows

    a = {"calibration_terms": {"routing_imbalance": 1.00000000954596, "chi_overlap": 0.0}}
    b = {"calibration_terms": {"routing_imbalance": 1.0, "chi_overlap": -0.001}}
    assert calibration_term_rows(a, b) == [
        {"term": "chi_overlap", "a": 0.0, "b": -0.001, "ratio_b_over_a": None}
    ]
