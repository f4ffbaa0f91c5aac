"""Result tables on disk: one Parquet + CSV pair per family and a metadata.json.

Every write goes to a temporary file in the same directory and is renamed over the old one
(``os.replace`` is atomic on POSIX), so a run killed at any moment leaves the previous
complete table. Rows carry ``case`` (a stable key of what was measured) and
``metadata_id`` (:mod:`mosaic.bench.metadata`): a rerun skips the cases it already has for
the same metadata. Parquet is the source of truth; the CSV is a copy for people.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

FAMILIES = ("gemm", "grouped", "attention", "kernels", "collectives")
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


def read_family(directory: Path, family: str) -> pd.DataFrame:
    """The table of ``family`` in ``directory`` (Parquet, else CSV), empty when absent."""
    parquet, csv = directory / f"{family}.parquet", directory / f"{family}.csv"
    if parquet.exists():
        return pd.read_parquet(parquet)
    if csv.exists():
        return pd.read_csv(csv)
    return pd.DataFrame()


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
    """metadata.json: {"runs": {metadata_id: metadata}}; empty when absent."""
    path = directory / METADATA_FILE
    if not path.exists():
        return {"runs": {}}
    return json.loads(path.read_text())


def record_metadata(directory: Path, metadata: dict[str, Any]) -> None:
    """Add (or refresh) this run's metadata under its id, atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    document = read_metadata(directory)
    document.setdefault("runs", {})[metadata["metadata_id"]] = metadata
    text = json.dumps(document, indent=2, sort_keys=True, default=str)
    atomic_write_bytes(directory / METADATA_FILE, text.encode())


def families_present(directory: Path) -> Iterable[str]:
    """Families with a table in ``directory``."""
    return [f for f in FAMILIES if (directory / f"{f}.parquet").exists()
            or (directory / f"{f}.csv").exists()]
