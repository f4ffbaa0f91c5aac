"""Shared CLI plumbing: JSON/table output and turning input errors into one clear line."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mosaic.cli.stream_table import build_table, column_justify, plain_cells, plain_title
from mosaic.cli.warning_lines import one_line
from mosaic.errors import MosaicInputError
from mosaic.jsonable import to_jsonable

# Off a terminal (file, pipe, CI log) rich assumes 80 columns and cuts cells with '…'; use a
# width no table reaches so numbers and names print in full (COLUMNS, if set, still wins).
REDIRECTED_WIDTH = 10_000


def _stdout_console() -> Console:
    console = Console(emoji=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = REDIRECTED_WIDTH
    return console


# emoji=False: rich would turn ':100:' of a user's '--global-batch 1000:100' into an emoji
console = _stdout_console()
error_console = Console(stderr=True, emoji=False)


def print_json(payload: Mapping[str, Any]) -> None:
    """Write a JSON document to stdout (no rich markup, machine readable)."""
    typer.echo(json.dumps(to_jsonable(payload), indent=2))


# A key-value table holds prose (sources, notes) as well as numbers: off a terminal it is
# wrapped at this width rather than padded to its longest cell (2,800 columns a line for
# `hardware show B200 > file`), and prose values are left-aligned.
KEY_VALUE_REDIRECTED_WIDTH = 120
PROSE_VALUE_CHARS = 60


def print_key_value_table(title: str, rows: list[tuple[str, str]]) -> None:
    """Render a two-column table for humans."""
    prose = any(len(value) > PROSE_VALUE_CHARS for _, value in rows)
    table = Table(title=plain_title(title), show_header=False, title_justify="left")
    table.add_column("quantity", style="bold", no_wrap=True)
    # fold, not '…': a URL or path longer than the width wraps and stays whole
    table.add_column("value", justify="left" if prose else "right", overflow="fold")
    for key, value in rows:
        table.add_row(*plain_cells((key, value)))
    console.print(table, width=(None if console.is_terminal or "COLUMNS" in os.environ
                                else KEY_VALUE_REDIRECTED_WIDTH))


# explain's levers table (Megatron flags, a sentence a cell) is wrapped at this width off a
# terminal instead of running to its longest row (1,002 columns a line in a trial's log).
PROSE_TABLE_REDIRECTED_WIDTH = 160


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """Render a table with a header row for humans: columns of numbers right-aligned,
    columns of words left-aligned (printed as :mod:`mosaic.cli.stream_table` prints a
    streamed one)."""
    table = build_table(title, columns, column_justify(columns, rows))
    for row in rows:
        table.add_row(*plain_cells(row))
    console.print(table)


def prose_table_width(cells: Iterable[object]) -> int | None:
    """The width to print a header-row table at: PROSE_TABLE_REDIRECTED_WIDTH off a terminal
    when a cell holds prose, else rich's own (the terminal's, or REDIRECTED_WIDTH)."""
    redirected = not console.is_terminal and "COLUMNS" not in os.environ
    prose = any(len(str(cell)) > PROSE_VALUE_CHARS for cell in cells)
    return PROSE_TABLE_REDIRECTED_WIDTH if prose and redirected else None


@contextmanager
def user_errors() -> Iterator[None]:
    """Report MosaicInputError (and file errors) as one line and exit with status 2."""
    try:
        yield
    except (MosaicInputError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        error_console.print(f"error: {_one_line(exc)}", markup=False, highlight=False,
                            soft_wrap=True)
        raise typer.Exit(code=2) from None


_FILE_ERRORS = {FileNotFoundError: "no such file or directory",
                IsADirectoryError: "is a directory, not a file",
                PermissionError: "permission denied"}


def _one_line(exc: Exception) -> str:
    """A file error as 'PATH: what is wrong' (what a MosaicInputError says as it is), on one
    line: a path or value with a line break in it (`perf $'a\\nb.yaml'`) printed two."""
    what = _FILE_ERRORS.get(type(exc))
    filename = getattr(exc, "filename", None)
    if what is None or filename is None:
        return one_line(str(exc))
    if isinstance(exc, FileNotFoundError) and not Path(filename).parent.exists():
        what = f"directory {Path(filename).parent} does not exist"
    return one_line(f"{filename}: {what}")


def guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of :func:`user_errors` for command functions."""
    import functools

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with user_errors():
            return function(*args, **kwargs)

    return wrapper


# Parameter types shared by the subcommands (one definition, one help text).
JsonFlag = Annotated[bool, typer.Option("--json", help="machine-readable output")]
CalibrationOption = Annotated[str | None, typer.Option(
    "--calibration", help="calibration profile (default, paper-p6b200) or YAML file")]
SetOption = Annotated[
    list[str] | None,
    # (examples short enough for an 80-column help panel: rich cuts a longer word with an
    # ellipsis, a trial read "performance.torch_c…")
    typer.Option("--set", help="override a field: block.field=value (repeatable), e.g. "
                 "parallelism.ep=16 or performance.precision=fp8; a run record takes its "
                 "own field names (docs/schema.md, docs/run_records.md)"),
]
JobArgument = Annotated[
    Path, typer.Argument(help="job YAML (model, parallelism, batch, performance, hardware; "
                              "docs/schema.md) or a run record as RUNS.yaml#ID")
]
