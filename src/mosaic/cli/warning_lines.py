"""Python warnings as one ``warning:`` line each on stderr, held until the command ends.

Held, so a command that fails on its input (exit status 2) prints its one error line and
nothing else (the CLI contract, :mod:`mosaic.cli.contract`). A long command (training, a
ladder) calls :func:`release` once its work has begun, with its first progress line: from
then on a warning prints when it happens, not hours later.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mosaic.errors import MosaicNote

_held: list[str] = []
_released = False
# the lines said so far in this command: one warning met twice (the same check run on the
# same input again, e.g. a train job's geometry read when the job loads and when the model
# is built) is said once; Python's own once-per-place filter forgets what it showed
# whenever any code changes the warning filters (``warnings.catch_warnings``), which a
# trial's `mosaic train` hit: its kv_heads warning printed twice
_said: set[str] = set()


def one_line(text: str) -> str:
    """``text`` as one line: every line break that ``str.splitlines`` knows (\\n, \\r,
    \\v, \\f, \\x1c-\\x1e, \\x85, \\u2028, \\u2029), which a user's path or value may
    carry into a message, read as a space (the CLI contract counts lines that way)."""
    return " ".join(text.splitlines()).strip()


def _emit(line: str) -> None:
    sys.stderr.write(one_line(line) + "\n")


def warning_line(message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: Any = None, line: str | None = None) -> None:
    """``warnings.showwarning`` for the CLI: mosaic's own warnings in its words alone,
    another library's with where it came from (for a report)."""
    if issubclass(category, MosaicNote):
        text = f"note: {message}"
    elif category.__module__.startswith("mosaic."):
        text = f"warning: {message}"
    else:
        text = f"warning: {category.__name__}: {message} ({os.path.basename(filename)}:{lineno})"
    if text in _said:
        return
    _said.add(text)
    if _released:
        _emit(text)
    else:
        _held.append(text)


def flush(exit_code: int) -> None:
    """Print the held warnings, unless the command failed on its input (exit 2)."""
    if exit_code != 2:
        for text in _held:
            _emit(text)
    _held.clear()


def release() -> None:
    """The command's work has begun: print what is held and every later warning at once."""
    global _released
    flush(0)
    _released = True


def hold() -> None:
    """Hold warnings again until :func:`release` (each in-process invocation)."""
    global _released
    _released = False


def reset() -> None:
    """A new command: hold again (the CLI runs many commands in one process in tests)."""
    global _released
    _held.clear()
    _said.clear()
    _released = False


def install_immediate() -> None:
    """For an entry point outside the ``mosaic`` command (``python -m mosaic.bench`` or
    ``mosaic.train`` under torchrun): each warning as its one line, printed at once (a trial
    read them in Python's raw form, with the source line under them)."""
    import warnings

    warnings.showwarning = warning_line
    release()
