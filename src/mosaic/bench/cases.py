"""A measurement case, the options every family shares, and the run loop.

A family module turns :class:`~mosaic.bench.shapes.BenchShapes` into :class:`Case` s (pure
data: the key and descriptive columns, no torch) and measures one case at a time. The run
loop skips cases already in the table for the same metadata (resume), stops starting new
cases when the time budget is spent (they stay to do for a rerun), prints progress with an
ETA on stderr, and checkpoints the table atomically as rows arrive.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from mosaic.bench.stats import TimingSummary
from mosaic.bench.store import OK, FamilyTable
from mosaic.bench.timer import OutOfBudget, TimingPolicy, budget_deadline
from mosaic.units import GIB


class Unsupported(Exception):  # noqa: N818 (a skip reason, not an error)
    """This device or torch build cannot run the case (recorded, not retried)."""


@dataclass(frozen=True)
class Case:
    """One thing to time: a stable key and the columns that describe it."""

    family: str
    key: str
    columns: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.family} {self.key}"


@dataclass(frozen=True)
class BenchOptions:
    """Options shared by the kernel families."""

    policy: TimingPolicy = field(default_factory=TimingPolicy)
    dtypes: tuple[str, ...] = ("bf16", "fp8", "mxfp8")
    """GEMM precisions; fp8 runs where the device supports it (CUDA capability >= 8.9),
    mxfp8 on Blackwell (>= 10.0); elsewhere their cases are recorded as skipped."""
    max_tensor_bytes: float = 8 * GIB
    """Cases whose operands exceed this are skipped (a memory cap)."""
    skew_alpha: float = 1.0
    """Zipf exponent of the skewed expert loads (tokens of expert i proportional to
    1/(i+1)^alpha)."""
    attention_backends: tuple[str, ...] = ("cudnn", "flash", "efficient", "math")


def summary_columns(summary: TimingSummary, calls: int) -> dict[str, Any]:
    """The timing columns of a row."""
    return {"time_s": summary.time_s, "p10_s": summary.p10_s, "p90_s": summary.p90_s,
            "min_s": summary.min_s, "mean_s": summary.mean_s, "repeats": summary.repeats,
            "outliers": summary.outliers, "calls_per_sample": calls}


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


class Progress:
    """One status line per case on stderr: count, elapsed, ETA (mean case time x left)."""

    def __init__(self, total: int, title: str, stream: TextIO | None = None,
                 enabled: bool = True) -> None:
        self.total = total
        self.title = title
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.start = time.monotonic()
        self.done = 0

    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def mean_case_s(self) -> float:
        return self.elapsed_s() / self.done if self.done else 0.0

    def eta_s(self) -> float:
        return self.mean_case_s() * (self.total - self.done)

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        percent = 100.0 * self.done / max(self.total, 1)
        self.stream.write(f"[{self.title}] {self.done}/{self.total} ({percent:.0f}%) "
                          f"elapsed {format_duration(self.elapsed_s())} "
                          f"ETA {format_duration(self.eta_s())}  {label}\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        if self.enabled:
            self.stream.write(f"[{self.title}] {text}\n")
            self.stream.flush()


@dataclass
class RunReport:
    """What one family run did."""

    family: str
    planned: int = 0
    already_done: int = 0
    measured: int = 0
    skipped: int = 0
    left_for_budget: int = 0


def todo(cases: Sequence[Case], table: FamilyTable, metadata_id: str) -> list[Case]:
    """Cases not yet in ``table`` for ``metadata_id``."""
    done = table.done(metadata_id)
    return [c for c in cases if c.key not in done]


def run_family(family: str, cases: Sequence[Case], measure: Callable[[Case], dict[str, Any]],
               out_dir: Path, metadata: dict[str, Any], budget_deadline_s: float | None = None,
               progress: bool = True, checkpoint_every_s: float = 2.0) -> RunReport:
    """Measure the cases of one family that the table lacks; checkpoint as rows arrive.

    ``budget_deadline_s`` is a ``time.monotonic()`` value after which no new case starts
    when the mean case time says it would not finish in time, and a case whose first calls
    show it would not end by then is given up and left for a rerun (:func:`~mosaic.bench.
    timer.time_call`); rows reach the disk at
    least every ``checkpoint_every_s`` (a killed run loses at most that much work).
    """
    table = FamilyTable(out_dir, family, checkpoint_every_s)
    pending = todo(cases, table, metadata["metadata_id"])
    report = RunReport(family, planned=len(cases), already_done=len(cases) - len(pending))
    bar = Progress(len(pending), f"bench {family}", enabled=progress)
    if report.already_done:
        bar.note(f"{report.already_done} of {len(cases)} cases already measured; skipping them")
    base = {"metadata_id": metadata["metadata_id"], "device": metadata.get("device_name")}
    try:
        for i, case in enumerate(pending):
            if budget_deadline_s is not None and (
                    time.monotonic() + bar.mean_case_s() > budget_deadline_s):
                report.left_for_budget = len(pending) - i
                bar.note(f"time budget reached: {report.left_for_budget} cases left for a "
                         "rerun (it resumes here)")
                break
            row = {"family": family, "case": case.key, **base, **case.columns}
            try:
                with budget_deadline(budget_deadline_s):
                    row.update(measure(case))
                row["status"] = OK
                report.measured += 1
            except Unsupported as exc:
                row["status"] = f"skipped: {exc}"
                report.skipped += 1
            except OutOfBudget:
                report.left_for_budget = len(pending) - i
                bar.note(f"time budget reached during {case.key} (its first calls show it "
                         f"would not end in time): {report.left_for_budget} cases left for "
                         "a rerun (it resumes here)")
                break
            row["measured_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
            table.add(row)
            time_s = row.get("time_s")
            bar.step(f"{case.key}  " + (f"{time_s * 1e3:.4g} ms" if row["status"] == OK
                                        and time_s is not None else row["status"]))
    finally:
        table.flush()
    return report
