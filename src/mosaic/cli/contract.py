"""The CLI's promise to its users, as code that runs one command and checks it.

Contract (issue 11): every invocation either exits 0 with finite, physically ranged output
(with ``--json``: a JSON document whose numbers are finite and inside their physical range,
and no ``null`` where a number was expected unless a reason field explains it), or exits 2
with exactly one line on stderr; never a traceback, never longer than a time bound.

Used by ``benchmarks/fuzz_cli.py`` (10,000 generated cases) and the regression corpus in
``tests/robustness``. Cases run in-process through :func:`mosaic.cli.main.main` with a
patched ``sys.argv`` (no interpreter start per case); :func:`run_subprocess` runs the
installed command for a sample.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mosaic.limits import LIMITS, is_number

# Physical ranges of well-known output fields: (lowest, highest), inclusive. A field whose
# name ends in one of these suffixes (or equals it) must lie inside.
# MFU counts against the bf16 peak; FP8 and NVFP4 GEMMs run on lanes up to 6x it (GB300's
# NVFP4, hardware catalog), so MFU is bounded by that multiple and mfu_gemm_lane (against the
# lane's own peak) by 1.
MAX_LANE_TO_BF16_PEAK = 6.0
RANGES: dict[str, tuple[float, float]] = {
    "mfu_gemm_lane": (0.0, 1.0),
    "mfu": (0.0, MAX_LANE_TO_BF16_PEAK),
    "hfu": (0.0, MAX_LANE_TO_BF16_PEAK),  # recompute counted; still bounded by the peak
    "mfu_with_attention": (0.0, MAX_LANE_TO_BF16_PEAK),
    "loss": (LIMITS["loss"].low, LIMITS["loss"].high),
    "sparsity": (0.0, 1.0),
    "goodput": (0.0, 1.0),
}
NONNEGATIVE_SUFFIXES = ("_s", "_bytes", "_gib", "tokens", "_per_s", "_flops", "n_total",
                        "n_active", "devices", "nodes", "days")
REASON_KEYS = ("reason", "note", "why", "error", "message")


@dataclass
class Outcome:
    """What one invocation did."""

    argv: list[str]
    exit_code: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    crash: str | None = None  # traceback text of an exception that escaped main()
    timed_out: bool = False
    problems: list[str] = field(default_factory=list)


class CaseTimeout(BaseException):
    """Raised by SIGALRM inside an in-process case that ran past its bound."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


@contextlib.contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def materialise(files: Mapping[str, bytes], argv: list[str], root: Path) -> list[str]:
    """Write ``files`` under ``root`` and replace ``{dir}`` in ``argv`` with it."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return [part.replace("{dir}", str(root)) for part in argv]


def run_in_process(argv: list[str], files: Mapping[str, bytes] | None = None,
                   timeout_s: float = 30.0, cwd: Path | None = None) -> Outcome:
    """Run ``mosaic <argv>`` through ``main()`` in this process, capturing its output."""
    from mosaic.cli.main import main

    with tempfile.TemporaryDirectory(prefix="mosaic-case-") as tmp:
        real_argv = materialise(files or {}, list(argv), Path(tmp))
        out, err = io.StringIO(), io.StringIO()
        saved_argv, saved_cwd = sys.argv, os.getcwd()
        code: int | None = None
        crash = None
        timed_out = False
        start = time.perf_counter()
        try:
            sys.argv = ["mosaic", *real_argv]
            if cwd is not None:
                os.chdir(cwd)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    _time_bound(timeout_s):
                os.environ["MOSAIC_DEBUG"] = "1"  # let internal errors escape to us
                try:
                    main()
                    code = 0
                finally:
                    os.environ.pop("MOSAIC_DEBUG", None)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except CaseTimeout:
            timed_out = True
        except BaseException:  # anything escaping main() is what we look for
            crash = traceback.format_exc(limit=-8)
        finally:
            sys.argv = saved_argv
            os.chdir(saved_cwd)
        elapsed_s = time.perf_counter() - start
    return Outcome(list(argv), code, out.getvalue(), err.getvalue(), elapsed_s, crash,
                   timed_out)


def run_subprocess(argv: list[str], files: Mapping[str, bytes] | None = None,
                   timeout_s: float = 60.0, executable: str | None = None,
                   cwd: Path | None = None) -> Outcome:
    """Run the installed ``mosaic`` command as a fresh process."""
    exe = executable or str(Path(sys.executable).with_name("mosaic"))
    with tempfile.TemporaryDirectory(prefix="mosaic-case-") as tmp:
        real_argv = materialise(files or {}, list(argv), Path(tmp))
        start = time.perf_counter()
        try:
            done = subprocess.run([exe, *real_argv], capture_output=True, timeout=timeout_s,
                                  check=False, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            return Outcome(list(argv), None, _text(exc.stdout), _text(exc.stderr),
                           time.perf_counter() - start, timed_out=True)
        elapsed_s = time.perf_counter() - start
    stderr = _text(done.stderr)
    crash = stderr if "Traceback (most recent call last)" in stderr else None
    return Outcome(list(argv), done.returncode, _text(done.stdout), stderr, elapsed_s, crash)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def json_problems(value: Any, path: str = "$", explained: bool = False) -> list[str]:
    """Numbers that are not finite or outside their physical range; unexplained nulls
    (a reason field in the same object or an enclosing one explains them; an aggregate
    ``min_``/``max_`` over nothing is null by definition)."""
    problems: list[str] = []
    if isinstance(value, Mapping):
        explained = explained or any(
            any(word in str(key).lower() for word in REASON_KEYS) for key in value)
        for key, item in value.items():
            where = f"{path}.{key}"
            if (item is None and not explained and _numeric_name(str(key))
                    and not str(key).startswith(("min_", "max_"))):
                problems.append(f"{where}: null without a reason field")
            problems += json_problems(item, where, explained)
            if isinstance(item, int) and not isinstance(item, bool) and abs(item) > 1e300:
                problems.append(f"{where}: integer beyond any physical value ({len(str(item))} "
                                "digits)")
            elif is_number(item):
                problems += _range_problems(str(key), float(item), where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            problems += json_problems(item, f"{path}[{index}]", explained)
    elif isinstance(value, float) and not math.isfinite(value):
        problems.append(f"{path}: non-finite number {value}")
    return problems


def _numeric_name(key: str) -> bool:
    return key in RANGES or key.endswith(NONNEGATIVE_SUFFIXES)


def _range_problems(key: str, number: float, where: str) -> list[str]:
    if not math.isfinite(number):
        return []  # reported by json_problems
    name = key.lower()
    if any(word in name for word in ("gap", "delta", "diff", "change")):
        return []  # differences of physical quantities may take either sign
    bounds = RANGES.get(name)
    if bounds is None:
        for suffix, candidate in RANGES.items():
            if name.endswith("_" + suffix) or name.startswith(suffix + "_"):
                bounds = candidate
                break
    if bounds is not None and not bounds[0] <= number <= bounds[1]:
        return [f"{where}: {number} outside the physical range {bounds}"]
    if bounds is None and name.endswith(NONNEGATIVE_SUFFIXES) and not name.startswith(
            ("delta", "gap", "diff", "change", "error", "d_", "log")) and number < 0:
        return [f"{where}: negative {number}"]
    return []


def check(outcome: Outcome, json_expected: bool, time_bound_s: float) -> list[str]:
    """The contract's violations for one outcome (empty when it kept its promise)."""
    problems: list[str] = []
    if outcome.crash:
        last = outcome.crash.strip().splitlines()[-1]
        problems.append(f"traceback: {last}")
    if outcome.timed_out or outcome.elapsed_s > time_bound_s:
        problems.append(f"hang: ran {outcome.elapsed_s:.1f} s (bound {time_bound_s:.0f} s)")
    if problems:
        return problems
    err_lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    if outcome.exit_code == 2:
        if len(err_lines) != 1 or not err_lines[0].startswith("error: "):
            problems.append(f"exit 2 without exactly one 'error:' line: {err_lines[:3]}")
    elif outcome.exit_code == 0:
        # a warning's own indented lines (one run each) continue it; a note is context
        # (mosaic.errors.MosaicNote, a small calibration's reduced fit)
        stray = [line for line in err_lines
                 if not line.startswith(("warning:", "note:", "progress", "wrote ", "  "))]
        if "Traceback" in outcome.stderr:
            problems.append("traceback on stderr")
        elif stray and json_expected:
            problems.append(f"exit 0 with unexpected stderr: {stray[:2]}")
        if json_expected:
            try:
                document = json.loads(outcome.stdout, parse_constant=_reject_constant)
            except ValueError as exc:
                problems.append(f"exit 0 but stdout is not JSON: {exc}")
            else:
                problems += json_problems(document)[:5]
    else:
        problems.append(f"exit status {outcome.exit_code}: {err_lines[-1:] or ''}")
    return problems


def _reject_constant(name: str) -> float:
    raise ValueError(f"JSON carries {name}")
