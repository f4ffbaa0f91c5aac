"""Progress with ETA on stderr for the commands that can take more than a few seconds.

One factory for every command: ``with progress_reporter(json_output) as bar:`` then
``bar("geometries")`` gives a ``(done, total)`` callback for the library's ``progress=``
hooks. Where it goes:

* ``--quiet`` (root option) or ``MOSAIC_QUIET=1``: nowhere;
* stderr is a terminal: a transient rich bar with count, elapsed time and ETA (rich's
  ``TimeRemainingColumn`` estimates from the recent rate);
* stderr is a file or pipe: plain lines ``progress: <label> 120/1092 (11%), 12 s elapsed,
  ETA 98 s``, the first after :data:`FIRST_LINE_S` seconds (short runs print nothing),
  then at most one every :data:`LINE_INTERVAL_S` seconds, and the last when the task ends
  (ETA here is elapsed × remaining / done, the average rate so far);
* with ``--json`` and stderr not a terminal: nowhere either, so a caller that captures
  stdout and stderr together (CI logs, test runners) still gets one JSON document.

Progress never goes to stdout.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mosaic.cli import warning_lines

ProgressFn = Callable[[int, int], None]
Factory = Callable[[str], ProgressFn]

FIRST_LINE_S = 5.0  # "more than a few seconds": quicker tasks print no plain line
LINE_INTERVAL_S = 15.0  # a modest rate for logs
QUIET_ENV = "MOSAIC_QUIET"
_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence progress (or not) from now on in this process: the root ``--quiet``
    option, set by every invocation."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet or os.environ.get(QUIET_ENV, "") not in ("", "0")


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"


def progress_line(label: str, done: int, total: int, elapsed_s: float) -> str:
    """One plain progress line (the ETA assumes the average rate so far holds)."""
    if total <= 0:
        return f"progress: {label} {done}, {_seconds(elapsed_s)} elapsed"
    eta = (f", ETA {_seconds(elapsed_s * (total - done) / done)}" if 0 < done < total
           else "")
    return (f"progress: {label} {done}/{total} ({done / total:.0%}), "
            f"{_seconds(elapsed_s)} elapsed{eta}")


class PlainProgress:
    """Rate-limited plain lines for one task, written to ``stream``."""

    def __init__(self, label: str, stream: Any, clock: Callable[[], float] = time.monotonic,
                 first_line_s: float | None = None, interval_s: float | None = None) -> None:
        self.label, self.stream, self.clock = label, stream, clock
        self.first_line_s = FIRST_LINE_S if first_line_s is None else first_line_s
        self.interval_s = LINE_INTERVAL_S if interval_s is None else interval_s
        self.start = clock()
        self.last: float | None = None

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        elapsed = now - self.start
        finished = total > 0 and done >= total
        due = (elapsed >= self.first_line_s if self.last is None
               else now - self.last >= self.interval_s)
        if due or (finished and self.last is not None):
            self.stream.write(progress_line(self.label, done, total, elapsed) + "\n")
            self.stream.flush()
            self.last = now


def _stderr_is_terminal() -> bool:
    from mosaic.cli.common import error_console

    return error_console.is_terminal


@contextmanager
def progress_reporter(json_output: bool = False) -> Iterator[Factory]:
    """A factory ``label -> (done, total) callback`` reporting on stderr (module docstring)."""
    if is_quiet():
        yield lambda label: _ignore
        return
    if not _stderr_is_terminal():
        if json_output:
            yield lambda label: _ignore
        else:
            yield lambda label: PlainProgress(label, sys.stderr)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from mosaic.cli.common import error_console

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=error_console, transient=True) as bar:
        def factory(label: str) -> ProgressFn:
            task = bar.add_task(label, total=None)

            def update(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return update

        yield factory


def line_reporter(json_output: bool = False) -> Callable[[str], None] | None:
    """For loops that report whole lines (the ladder's rungs and logged steps): each line
    to stderr as ``progress: <line>`` under the same rules as :func:`progress_reporter`
    (no rate limit: the caller already reports sparsely), or None when silenced."""
    if is_quiet() or (json_output and not _stderr_is_terminal()):
        return None

    def report(line: str) -> None:
        warning_lines.release()  # the work has begun: warnings print when they happen
        sys.stderr.write(f"progress: {line}\n")
        sys.stderr.flush()

    return report


def _ignore(done: int, total: int) -> None:
    """The callback of a silenced reporter."""
