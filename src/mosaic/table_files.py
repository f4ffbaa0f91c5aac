"""Read a measured table (CSV or Parquet) with one-line errors for every way it can fail.

One reader for run data (law fits), kernel and collective tables: missing, empty,
non-UTF-8, malformed or truncated files and a missing Parquet engine all become a
MosaicInputError naming the file, instead of a pandas/pyarrow traceback.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mosaic.errors import MosaicInputError, shown
from mosaic.schema_validation import MAX_FILE_BYTES

if TYPE_CHECKING:
    import pandas as pd

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def read_table(path: str | Path, what: str = "table", *, allow_no_rows: bool = False
               ) -> pd.DataFrame:
    """The rows of a .csv/.parquet file as a DataFrame (at least one unless allowed)."""
    import pandas as pd

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES and path.is_dir():  # (a trial's hardware.gemm_table=DIR
        # of `mosaic bench` was told of an "unknown extension ''")
        bench = (path / "metadata.json").is_file() and (path / "measured").is_dir()
        tables = sorted(p.name for p in (path / "measured").glob("*.csv")) if bench else []
        kind = what.lower()
        wanted = ("grouped_gemm.csv" if "grouped" in kind else "gemm.csv" if "gemm" in kind
                  else "collectives.csv" if "collective" in kind else None)
        example = wanted if wanted in tables else tables[0] if tables else None
        raise MosaicInputError(
            f"{what} {path}: a folder, not a table file (.csv/.parquet)"
            + (f"; a `mosaic bench` folder: name one of its tables, e.g. "
               f"{path / 'measured' / example} (measured/ holds {', '.join(tables)})"
               if example else ""))
    if suffix not in TABLE_SUFFIXES:
        raise MosaicInputError(f"{what} {path}: unknown extension {shown(suffix)}; allowed: "
                               f"{', '.join(TABLE_SUFFIXES)}")
    try:
        if not path.is_file():
            raise MosaicInputError(f"{what} {path}: does not exist or is not a file")
        size = path.stat().st_size
    except OSError as exc:
        raise MosaicInputError(f"{what}: cannot read {str(path)[:120]}: {exc.strerror}"
                               ) from None
    if size == 0:
        raise MosaicInputError(f"{what} {path}: file is empty")
    if size > MAX_FILE_BYTES:
        raise MosaicInputError(f"{what} {path}: {size:,} bytes; the limit is "
                               f"{MAX_FILE_BYTES:,}")
    try:
        with warnings.catch_warnings():
            # index_col=False: a row's trailing comma is no extra column (pandas otherwise
            # makes the first column the index and shifts every name: a trial's loss read
            # as empty); a row with more values than the header names is refused
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = (pd.read_csv(path, encoding="utf-8", index_col=False) if suffix == ".csv"
                     else pd.read_parquet(path))
    except pd.errors.ParserWarning:
        raise MosaicInputError(f"{what} {path}: {_long_row(path)} holds more values than the "
                               "header has column names") from None
    except ImportError:
        raise MosaicInputError(f"{what} {path}: reading Parquet needs `pip install pyarrow`"
                               ) from None
    except pd.errors.EmptyDataError:
        raise MosaicInputError(f"{what} {path}: file is empty") from None
    except UnicodeDecodeError as exc:
        raise MosaicInputError(f"{what} {path}: not UTF-8 text (offset {exc.start})") from None
    except pd.errors.ParserError as exc:
        # the C parser's "Expected 3 fields in line 3, saw 4" counts the header as line 1
        # (a trial): name the row as the run data's errors number rows, when one is found
        row = _long_row(path)
        if row != "a row":
            raise MosaicInputError(f"{what} {path}: {row} holds more values than the "
                                   "header has column names") from None
        row = _long_row(path, empty_extras=True)
        if row != "a row":
            raise MosaicInputError(f"{what} {path}: {row} ends in a comma the other rows lack "
                                   "(an empty value past the header's names)") from None
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MosaicInputError(f"{what} {path}: could not be read: {message}") from None
    except ( OSError, ValueError, TypeError) as exc:
        # pyarrow's ArrowInvalid is a ValueError
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MosaicInputError(f"{what} {path}: could not be read: {message}") from None
    if suffix == ".csv":
        _refuse_repeated_names(path, what)
    if len(frame) == 0 and not allow_no_rows:
        raise MosaicInputError(f"{what} {path}: has a header but no rows")
    return frame


def _long_row(path: Path, empty_extras: bool = False) -> str:
    """'row R (V values for N names)' for the first data row (numbered from 1, as the run
    data's errors number them) with a value past the header's names; 'a row' if none is
    found. A trailing comma (an empty last value) is harmless where pandas only warns, so
    empty extras count only with ``empty_extras`` (its C parser refuses a row longer than
    the others). The docs promise the row (docs/law.md, "Run-data files"); pandas names none
    or counts the header as line 1. Blank lines are no rows, as read_csv skips them
    (skip_blank_lines)."""
    import csv

    with open(path, encoding="utf-8", newline="") as handle:
        rows = (row for row in csv.reader(handle) if row)  # csv reads a blank line as []
        names = len(next(rows, []))
        for number, row in enumerate(rows, start=1):
            if len(row) > names and (empty_extras
                                     or any(value.strip() for value in row[names:])):
                return f"row {number} ({len(row)} values for {names} names)"
    return "a row"


def _refuse_repeated_names(path: Path, what: str) -> None:
    """A CSV header that names one column twice is refused: pandas renames the second
    'loss' to 'loss.1' (read_csv's duplicate-name mangling), so every reader took the first
    and ignored the other without a word (a run table with two differing n_total columns
    was fitted on the first)."""
    import csv

    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:  # as pandas read it
            header = next(csv.reader(handle), [])
    except (csv.Error, OSError, UnicodeDecodeError):  # pandas read it: its own names stand
        return
    seen: dict[str, int] = {}
    for index, name in enumerate(header, start=1):
        if name in seen and name != "":
            raise MosaicInputError(f"{what} {path}: the header names column {shown(name)} twice "
                                   f"(columns {seen[name]} and {index}); allowed: each name "
                                   "once (rename or drop one)")
        seen.setdefault(name, index)


def bad_row_error(what: str, frame: pd.DataFrame, column: str, bad: Any,
                  allowed: str) -> MosaicInputError:
    """The one-line error for the first row of ``frame`` flagged in ``bad`` (a boolean mask):
    rows counted from 1, the first after the header, and the value as the file has it (a
    trial read 'row 0: time_s=np.float64(-0.0001)')."""
    import numpy as np

    row = int(np.flatnonzero(np.asarray(bad, dtype=bool))[0])
    value = frame[column].iloc[row]
    item = value.item() if hasattr(value, "item") else value
    return MosaicInputError(f"{what} row {row + 1}: {column}={shown(item)}; allowed: {allowed}")


def float_column(raw: pd.Series) -> Any:
    """A column as a float array; entries that are no number (or overflow a float, an
    integer of hundreds of digits) become NaN."""
    import numpy as np
    import pandas as pd

    try:
        return pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
    except OverflowError:
        return np.array([_float_or_nan(value) for value in raw], dtype=float)


def _float_or_nan(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return float("nan")


def numeric_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    """``frame`` with ``columns`` as floats; :func:`bad_row_error` for the first value that
    is not a finite number (a trial's time_s=abc ended in a ValueError traceback)."""
    import numpy as np

    converted = {}
    for column in columns:
        values = float_column(frame[column])
        bad = ~np.isfinite(values)
        if bad.any():
            raise bad_row_error(what, frame, column, bad, "a finite number")
        converted[column] = values
    return frame.assign(**converted)
