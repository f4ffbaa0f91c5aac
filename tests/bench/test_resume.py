"""Atomic, resumable tables: a run killed mid-way continues where it stopped, a rerun with
the same metadata measures nothing, new metadata measures anew."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

from mosaic.bench.cases import Case, run_family
from mosaic.bench.store import FamilyTable, read_family, read_metadata, record_metadata

KEYS = [f"case{i}" for i in range(8)]

# A run in a child process: case "case4" kills its own process with SIGKILL (no cleanup,
# no flush), the way an OOM killer or a lost node would.
CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from mosaic.bench.cases import Case, run_family
    out, kill_at = Path(sys.argv[1]), sys.argv[2]
    cases = [Case("toy", f"case{i}", {"size": i}) for i in range(8)]
    def measure(case):
        if case.key == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"time_s": 1.0 + case.columns["size"]}
    run_family("toy", cases, measure, out, {"metadata_id": "m1"}, progress=False,
               checkpoint_every_s=0.0)
""")


def run_child(out: Path, kill_at: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.run([sys.executable, "-c", CHILD, str(out), kill_at], env=env,
                          timeout=120, check=False).returncode


def test_killed_run_resumes_and_ends_with_the_same_table(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    assert run_child(killed, "case4") == -signal.SIGKILL
    partial = read_family(killed, "toy")
    assert partial["case"].tolist() == KEYS[:4]  # everything before the kill was kept
    assert not list(killed.glob(".*tmp*"))  # no half-written file left behind
    assert run_child(killed, "none") == 0  # rerun: measures only what is missing
    assert run_child(clean, "none") == 0
    resumed, uninterrupted = read_family(killed, "toy"), read_family(clean, "toy")
    assert resumed["case"].tolist() == KEYS
    columns = ["case", "size", "time_s", "status", "metadata_id"]
    pd.testing.assert_frame_equal(resumed[columns], uninterrupted[columns])
    assert read_family(killed, "toy")["case"].is_unique
    assert (killed / "toy.csv").exists()


def test_rerun_with_same_metadata_skips_and_new_metadata_remeasures(tmp_path):
    cases = [Case("toy", k, {"size": i}) for i, k in enumerate(KEYS[:3])]
    calls = []

    def measure(case):
        calls.append(case.key)
        return {"time_s": 0.5}

    first = run_family("toy", cases, measure, tmp_path, {"metadata_id": "a"}, progress=False)
    again = run_family("toy", cases, measure, tmp_path, {"metadata_id": "a"}, progress=False)
    upgraded = run_family("toy", cases, measure, tmp_path, {"metadata_id": "b"}, progress=False)
    assert (first.measured, again.measured, again.already_done) == (3, 0, 3)
    assert upgraded.measured == 3
    assert calls == KEYS[:3] * 2
    table = read_family(tmp_path, "toy")
    assert sorted(table["metadata_id"].unique()) == ["a", "b"]
    assert FamilyTable(tmp_path, "toy").done("a") == set(KEYS[:3])


def test_time_budget_leaves_cases_for_a_rerun(tmp_path):
    import time

    cases = [Case("toy", k, {}) for k in KEYS[:4]]
    report = run_family("toy", cases, lambda c: {"time_s": 1.0}, tmp_path, {"metadata_id": "a"},
                        budget_deadline_s=time.monotonic() - 1.0, progress=False)
    assert (report.measured, report.left_for_budget) == (0, 4)
    report = run_family("toy", cases, lambda c: {"time_s": 1.0}, tmp_path, {"metadata_id": "a"},
                        progress=False)
    assert report.measured == 4


def test_metadata_file_keeps_every_run_as_first_measured(tmp_path):
    """A rerun under a recorded id keeps the entry its rows were measured with (a trial: a
    rerun that measured nothing replaced the load average a later calibrate warned about)."""
    record_metadata(tmp_path, {"metadata_id": "a", "device_name": "x", "load_average_1m": 1.9})
    record_metadata(tmp_path, {"metadata_id": "b", "device_name": "y"})
    record_metadata(tmp_path, {"metadata_id": "a", "device_name": "x", "load_average_1m": 3.2})
    runs = read_metadata(tmp_path)["runs"]
    assert runs == {"a": {"metadata_id": "a", "device_name": "x", "load_average_1m": 1.9},
                    "b": {"metadata_id": "b", "device_name": "y"}}


def test_a_long_case_is_given_up_after_one_call_not_run_past_the_budget(tmp_path):
    # The trial's overrun: one CPU case of many seconds started with budget left and ran
    # 2.4 minutes past it. Now every warm-up call is timed under a budget: a case of 0.2 s
    # calls (3 warm-up, 1 probe, 5 samples: 1.8 s) with 0.5 s left is given up after its
    # first call and left for a rerun; a short case before it is measured.
    import time

    torch = __import__("pytest").importorskip("torch")
    from mosaic.bench.timer import TimingPolicy, time_call

    device = torch.device("cpu")
    policy = TimingPolicy(warmup=3, min_repeats=5, max_repeats=5, min_time_s=0.0)
    seconds = {"case0": 0.0, "case1": 0.2}
    started = []

    def measure(case):
        def call():
            started.append(case.key)
            time.sleep(seconds[case.key])

        summary, _ = time_call(call, device, policy)
        return {"time_s": summary.time_s}

    cases = [Case("toy", k, {}) for k in ("case0", "case1")]
    began = time.monotonic()
    report = run_family("toy", cases, measure, tmp_path, {"metadata_id": "a"},
                        budget_deadline_s=began + 0.5, progress=False)
    assert (report.measured, report.left_for_budget) == (1, 1)
    assert started.count("case1") == 1  # one call, then given up
    assert time.monotonic() - began < 0.5 + 0.2  # ended by the budget plus one call
    assert FamilyTable(tmp_path, "toy").done("a") == {"case0"}  # case1 is left to do


def test_cases_left_for_the_budget_are_named_with_the_way_to_finish_them(tmp_path, capsys):
    """A budget too short for the cases ended with exit 0 and one table column (a trial:
    0 of 165 measured); the run says how many are left and how to finish them."""
    from mosaic.bench.cases import RunReport
    from mosaic.cli.bench_cmd import _render_reports

    _render_reports([RunReport("gemm", planned=5, measured=2, left_for_budget=3)], tmp_path,
                    False)
    assert "3 case(s) left for the --time-budget; rerun the same command" in \
        " ".join(capsys.readouterr().err.split())
    _render_reports([RunReport("gemm", planned=5, measured=5)], tmp_path, False)
    assert "left for the --time-budget" not in capsys.readouterr().err


def test_one_stalled_call_does_not_set_one_call_per_sample():
    """A busy host preempted a 10 us kernel's probe call for 8 ms: one call per sample
    followed, and every sample then measured stalls, the same in every run (a trial). The
    call's duration is the fastest single call (warm-up included): a stall in the probe
    alone leaves many calls per sample."""
    import time

    torch = __import__("pytest").importorskip("torch")
    from mosaic.bench.timer import TimingPolicy, time_call

    calls = []

    def call():
        calls.append(None)
        if len(calls) == 4:  # the probe, after three warm-up calls
            time.sleep(8e-3)

    policy = TimingPolicy(warmup=3, min_repeats=3, max_repeats=3, min_time_s=0.0,
                          target_sample_s=1e-3)
    summary, per_sample = time_call(call, torch.device("cpu"), policy)
    assert per_sample > 10
    assert summary.time_s < 1e-3


def test_a_zero_time_budget_is_refused():
    """--time-budget 0 measured nothing and said every case was left for the budget (a
    trial); durations read as seconds, minutes or hours (8m = 480 s, 1.5h = 5400 s)."""
    import pytest

    from mosaic.cli.bench_cmd import parse_duration_s
    from mosaic.errors import MosaicInputError

    assert [parse_duration_s("--time-budget", t) for t in ("480", "8m", "1.5h")] == [
        480.0, 480.0, 5400.0]
    for zero in ("0", "0m", "0.0s"):
        with pytest.raises(MosaicInputError, match="must be more than 0 s"):
            parse_duration_s("--time-budget", zero)
