"""Result tables on disk: one Parquet + CSV pair per family and a metadata.json.

Every write goes to a temporary file in the same directory and is renamed over the old one
(``os.replace`` is atomic on POSIX), so a run killed at any moment leaves the previous
complete table. Rows carry ``case`` (a stable key of what was measured) and
``metadata_id`` (:mod:`mosaic.bench.metadata`): a rerun skips the cases it already has for
the same metadata. Parquet is the source of truth; the CSV is a copy for people.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mosaic.bench.families import FAMILIES, FIT_COLUMNS, ROW_COLUMNS
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.limits import is_finite_number

METADATA_FILE = "metadata.json"
OK = "ok"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _atomic_frame(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if path.suffix == ".parquet":
        frame.to_parquet(tmp, index=False)
    else:
        frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


def read_family(directory: Path, family: str, for_fit: bool = False) -> pd.DataFrame:
    """The table of ``family`` in ``directory`` (Parquet, else CSV), empty when absent;
    MosaicInputError naming the file for one that cannot be read, lacks the bench's columns
    (those a fit reads too, ``for_fit``) or holds a measured row without a positive time
    (:func:`check_rows`)."""
    parquet, csv = directory / f"{family}.parquet", directory / f"{family}.csv"
    path = parquet if parquet.exists() else csv if csv.exists() else None
    if path is None:
        return pd.DataFrame()
    if path is parquet and csv.exists() and _edited_after(csv, parquet):
        # a trial's negative time typed into the CSV was never read, without a word
        warnings.warn(f"{csv} was changed after {parquet.name}, which is the table read (the "
                      "CSV is a copy for people): to use the edited CSV, delete "
                      f"{parquet.name}", MosaicWarning, stacklevel=2)
    try:  # pyarrow's ArrowInvalid and pandas' ParserError are ValueErrors
        frame = pd.read_parquet(path) if path is parquet else pd.read_csv(path)
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MosaicInputError(f"{path}: not a readable {family} table ({reason}); measure "
                               "it again or remove it (the Parquet file is the source, the "
                               "CSV a copy)") from None
    check_columns(frame, path, family, for_fit)
    check_rows(frame, path)
    return frame


def _edited_after(copy: Path, source: Path) -> bool:
    """Whether ``copy`` was modified after ``source`` (the bench writes the CSV a moment
    after the Parquet file, so only a later edit is past a second's slack)."""
    return copy.stat().st_mtime > source.stat().st_mtime + 1.0


def check_columns(frame: pd.DataFrame, path: Path, family: str, for_fit: bool) -> None:
    """Refuse a table without the columns `mosaic bench` writes for ``family``
    (:data:`~mosaic.bench.families.ROW_COLUMNS`, and for a fit of measured rows
    :data:`~mosaic.bench.families.FIT_COLUMNS`), naming them: the job-format copy in
    measured/ or a hand-made table ended in a KeyError inside the fit (a trial)."""
    if frame.empty and len(frame.columns) == 0:
        return
    measured = "status" not in frame.columns or bool((frame["status"] == OK).any())
    fitted = FIT_COLUMNS.get(family, ()) if for_fit and measured else ()
    # a measured row has its time (`bench compare` ended in a KeyError without it; a trial)
    required = (*ROW_COLUMNS, *(("time_s",) if measured else ()), *fitted)
    missing = [name for name in required if name not in frame.columns]
    if not missing:
        return
    hint = (f"; {path.parent} holds the job-format copies `mosaic bench` writes for "
            f"hardware.*_table: point --microbench at {path.parent.parent}, the bench's "
            "output folder" if path.parent.name == "measured" else
            "; tables written by `mosaic bench` carry them (a hand-edited or foreign table?)")
    raise MosaicInputError(f"{path}: not a `mosaic bench` {family} table: no column "
                           f"{', '.join(missing)}{hint}")


# The size columns the bench writes (gemm m n k; grouped groups m_per_group; attention
# batch heads kv_heads seq head_dim; kernels elements moved_bytes, none for the launch op).
SHAPE_COLUMNS = frozenset({"m", "n", "k", "groups", "m_per_group", "batch", "heads",
                           "kv_heads", "seq", "head_dim", "elements", "moved_bytes"})
MAY_BE_ZERO = frozenset({"elements", "moved_bytes"})


def _numbers(column: pd.Series) -> pd.Series:
    """``column`` as floats, NaN where not a number; a 400-digit integer reads as inf (where
    pd.to_numeric raised OverflowError, a traceback; a fuzz trial)."""
    try:
        return pd.to_numeric(column, errors="coerce")
    except OverflowError:
        return column.map(_float_or_nan).astype(float)


def _float_or_nan(value: Any) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond any float
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        return math.nan


def check_rows(frame: pd.DataFrame, path: Path) -> None:
    """Refuse rows a fit would misread: a row without a status (a truncated line: it was
    dropped without a word, a trial) and a measured row whose times are not positive (a
    negative time reached the fit as "peak_flops_per_s must be > 0", naming neither file
    nor row). Rows are numbered as the file's lines, after the header."""
    if frame.empty or "status" not in frame.columns:
        return
    status = frame["status"]
    missing = status.isna()
    if missing.any():
        row = int(missing.to_numpy().argmax())
        raise MosaicInputError(f"{path}: row {row + 1} has no status (a truncated or "
                               "hand-edited line?); every row needs the columns the bench "
                               "wrote")
    measured = frame[status == OK]
    for column in [c for c in measured.columns if c == "time_s" or c.endswith("_time_s")]:
        times = _numbers(measured[column])
        # time_s is every measured row's; another family's *_time_s may be left empty
        bad = (~np.isfinite(times) | ~(times > 0) if column == "time_s"
               else (times <= 0) | np.isinf(times) | (times.isna() & measured[column].notna()))
        if bad.any():
            index = bad[bad].index[0]
            raise MosaicInputError(f"{path}: row {int(index) + 1}: {column} = "
                                   f"{measured.loc[index, column]}; a measured time must be "
                                   "a positive number of seconds")
    # a measured shape's sizes are positive numbers (the launch op's may be 0), its dtype
    # named (a fuzz trial's 'abc', inf and empty dtype ended in tracebacks inside the fit;
    # negative sizes were fitted)
    for column in [c for c in measured.columns if c in SHAPE_COLUMNS]:
        sizes = _numbers(measured[column])
        bad = (sizes.isna() & measured[column].notna()) | ~np.isfinite(sizes.fillna(1)) | (
            sizes < 0 if column in MAY_BE_ZERO else sizes <= 0)
        if bad.any():
            index = bad[bad].index[0]
            raise MosaicInputError(f"{path}: row {int(index) + 1}: {column} = "
                                   f"{measured.loc[index, column]}; a measured shape's sizes "
                                   "are positive numbers")
    if "dtype" in measured.columns:
        unnamed = measured["dtype"].isna() | (measured["dtype"].astype(str).str.strip() == "")
        if unnamed.any():
            index = unnamed[unnamed].index[0]
            raise MosaicInputError(f"{path}: row {int(index) + 1} has no dtype; every measured "
                                   "row names the precision it ran in")


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that were measured (not skipped as unsupported)."""
    if frame.empty or "status" not in frame.columns:
        return frame
    return frame[frame["status"] == OK].reset_index(drop=True)


class FamilyTable:
    """The rows of one family in one output directory, checkpointed as they come."""

    def __init__(self, directory: Path, family: str, checkpoint_every_s: float = 2.0) -> None:
        self.directory = directory
        self.family = family
        self._checkpoint_every_s = checkpoint_every_s
        self._frame = read_family(directory, family)
        self._new: list[dict[str, Any]] = []
        self._last_write = time.monotonic()

    def done(self, metadata_id: str) -> set[str]:
        """Cases already in the table for ``metadata_id``."""
        rows = [*self._new]
        keys = {r["case"] for r in rows if r.get("metadata_id") == metadata_id}
        if not self._frame.empty:
            mine = self._frame["metadata_id"].astype(str) == metadata_id
            keys |= set(self._frame.loc[mine, "case"].astype(str))
        return keys

    def add(self, row: dict[str, Any]) -> None:
        """Append one row; checkpoint when the last write is older than the interval."""
        self._new.append(row)
        if time.monotonic() - self._last_write >= self._checkpoint_every_s:
            self.flush()

    def flush(self) -> None:
        """Write the table (Parquet, then CSV) atomically."""
        if not self._new:
            return
        new = pd.DataFrame(self._new)
        frames = [f for f in (self._frame, new) if not f.empty]
        self._frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else new
        self._new = []
        self.directory.mkdir(parents=True, exist_ok=True)
        _atomic_frame(self._frame, self.directory / f"{self.family}.parquet")
        _atomic_frame(self._frame, self.directory / f"{self.family}.csv")
        self._last_write = time.monotonic()


def read_metadata(directory: Path) -> dict[str, Any]:
    """metadata.json: {"runs": {metadata_id: metadata}}; empty when absent; MosaicInputError
    naming the file when it is not that (empty, truncated, a list: a trial's tracebacks)."""
    path = directory / METADATA_FILE
    if not path.exists():
        return {"runs": {}}
    try:
        document = json.loads(path.read_text())
    # RecursionError: JSON nested deeper than json.loads follows (a trial's internal error)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MosaicInputError(f"{path}: not readable as the bench's metadata ({reason}); "
                               "rerun `mosaic bench` into a new folder") from None
    runs = document.get("runs") if isinstance(document, dict) else None
    if not isinstance(runs, dict) or not all(isinstance(v, dict) for v in runs.values()):
        raise MosaicInputError(f"{path}: not the bench's metadata: expected "
                               '{"runs": {metadata_id: {...}}}; rerun `mosaic bench` into '
                               "a new folder")
    for run_id, run in runs.items():
        _check_metadata_fields(run, f"{path}: run {run_id}")
    return document


# the fields of a run's metadata that are read, and what each holds (the bench writes them)
_METADATA_TEXT = ("device_name", "device_type", "created_utc")
_METADATA_COUNTS = ("cpu_count", "sm_count", "device_count")


def _check_metadata_fields(run: dict[str, Any], where: str) -> None:
    """A hand-edited metadata.json's fields of the wrong type are named in one line: a text
    load average or core count, or a text SM count, ended in tracebacks in calibrate, and a
    numeric device name was echoed as the device (a fuzz trial)."""
    for name in _METADATA_TEXT:
        value = run.get(name)
        if value is not None and not isinstance(value, str):
            raise MosaicInputError(f"{where}: {name} is {value!r:.60}; the bench writes text "
                                   "there (rerun `mosaic bench` into a new folder)")
    for name in _METADATA_COUNTS:
        value = run.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise MosaicInputError(f"{where}: {name} is {value!r:.60}; the bench writes a "
                                   "positive integer there (rerun `mosaic bench` into a new "
                                   "folder)")
    load = run.get("load_average_1m")
    if load is not None and (not is_finite_number(load) or load < 0):
        raise MosaicInputError(f"{where}: load_average_1m is {load!r:.60}; the bench writes a "
                               "non-negative number there (rerun `mosaic bench` into a new "
                               "folder)")


def record_metadata(directory: Path, metadata: dict[str, Any]) -> None:
    """Add this run's metadata under its id, atomically, unless the id is recorded already:
    the rows under an id were first measured in that entry's host state (a rerun that only
    skipped finished cases replaced its load average and date, and a later calibrate warned
    of a busy host the tables were not measured on; a trial)."""
    directory.mkdir(parents=True, exist_ok=True)
    document = read_metadata(directory)
    runs = document.setdefault("runs", {})
    if metadata["metadata_id"] in runs:
        return
    runs[metadata["metadata_id"]] = metadata
    text = json.dumps(document, indent=2, sort_keys=True, default=str)
    atomic_write_bytes(directory / METADATA_FILE, text.encode())


def families_present(directory: Path) -> Iterable[str]:
    """Families with a table in ``directory``."""
    return [f for f in FAMILIES if (directory / f"{f}.parquet").exists()
            or (directory / f"{f}.csv").exists()]
