"""Progress with ETA: plain rate-limited lines on a redirected stderr, never on stdout."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import progress
from mosaic.cli.main import app
from mosaic.cli.progress import PlainProgress, progress_line

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def test_eta_is_elapsed_times_remaining_over_done():
    # 30 of 120 done in 10 s: 90 left at 3 per second -> 30 s
    assert progress_line("geometries", 30, 120, 10.0) == (
        "progress: geometries 30/120 (25%), 10 s elapsed, ETA 30 s")
    assert progress_line("x", 120, 120, 200.0).endswith("3.3 min elapsed")


def test_plain_lines_wait_for_the_first_delay_then_keep_a_modest_rate():
    now = [0.0]
    out = io.StringIO()
    report = PlainProgress("runs", out, clock=lambda: now[0], first_line_s=5, interval_s=15)
    for t, done in ((1, 1), (4, 2), (6, 3), (10, 4), (22, 5), (23, 6)):
        now[0] = t
        report(done, 6)
    lines = out.getvalue().splitlines()
    # nothing before 5 s; a line at 6 s; none 4 s later; one 16 s later; the last when the
    # task ends
    assert [line.split()[2] for line in lines] == ["3/6", "5/6", "6/6"]


@pytest.fixture
def eager(monkeypatch):
    """Print every progress call (no delay), as a long run would."""
    monkeypatch.setattr(progress, "FIRST_LINE_S", 0.0)
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0)
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    progress.set_quiet(False)
    yield
    progress.set_quiet(False)


def layouts(*args: str):
    return runner.invoke(app, [*args, "layouts", str(EXAMPLES / "appendix_e.yaml"),
                               "--devices", "64", "--top", "2"])


def test_redirected_progress_goes_to_stderr_only(eager):
    result = layouts()
    assert result.exit_code == 0, result.output
    assert "progress: evaluating layouts" in result.stderr
    assert "progress:" not in result.stdout


def test_json_and_quiet_keep_redirected_output_clean(eager):
    result = runner.invoke(app, ["layouts", str(EXAMPLES / "appendix_e.yaml"), "--devices",
                                 "64", "--top", "2", "--json"])
    assert result.exit_code == 0 and result.stderr == ""
    json.loads(result.stdout)
    quiet = layouts("--quiet")
    assert quiet.exit_code == 0 and "progress:" not in quiet.stderr



def test_quiet_does_not_outlive_its_invocation(eager):
    # The root option is process state; a `-q` call must not silence the next call made in
    # the same process (the studio, a test runner, a script invoking the app twice).
    assert "progress:" not in layouts("-q").stderr
    assert "progress: evaluating layouts" in layouts().stderr
