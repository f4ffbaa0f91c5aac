"""A table with a header row printed a chunk of rows at a time, byte for byte as
:func:`mosaic.cli.common.print_table` prints it whole.

rich lays a table out from all its cells and renders it in one piece, holding every row's
text and segments: memory grows with the rows (tens of MB for `mosaic validate` of 20,000
runs). Its layout depends on the rows only through each column's largest minimum and
largest maximum cell width (``rich.table.Table._measure_column``: the column's measurement
is the maximum of its cells' measurements, then shrunk to the console if too wide). So:

1. a first pass over the rows measures each cell (``rich.measure.Measurement.get``) and
   keeps, per column, the cell with the largest minimum and the one with the largest
   maximum width;
2. a table of the header and those cells gives the column widths rich would choose;
3. a second pass renders chunks of rows as tables with those widths fixed and prints the
   lines that belong to the whole table: the first chunk's title and header, each chunk's
   rows, the last chunk's bottom edge. An empty row before and after a chunk (dropped from
   the output) keeps each row's position in the box (rich draws a table's first and last
   row with the box's head and foot characters).

tests/cli/test_stream_table.py checks the output against ``print_table`` for tables that
fit, tables shrunk to a narrow console (cells wrapped) and cells with rich markup.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

CHUNK_ROWS = 500  # rows rendered at once; a few hundred KB of segments


def plain_cells(row: Sequence[str | Text]) -> list[Text]:
    """A row's cells as plain text: rich reads '[word ...]' in a string as a style tag and
    drops it (a trial's 'recompute_modules=[mla_up_proj, mlp]' printed as
    'recompute_modules='), and no table of mosaic styles its cells by markup."""
    return [cell if isinstance(cell, Text) else Text(str(cell)) for cell in row]


def plain_title(title: str | None) -> Text | None:
    """A table's title as plain text, as its cells are (:func:`plain_cells`): a title
    naming a path ('Calibration written to runs[bf16]/c.yaml') lost its '[bf16]'."""
    return None if title is None else Text(title)


# A cell that starts like a number (digits, sign, decimal point, currency); cells with no
# value do not decide a column's alignment.
_NUMBER_START = re.compile(r"[-+−.$\d]")
_NO_VALUE = frozenset({"", "-", "—", "n/a"})


def is_text_cell(cell: object) -> bool:
    """True for a cell of words: a column holding one is left-aligned, a column of numbers
    right-aligned so its digits line up."""
    text = str(cell).strip()
    return text not in _NO_VALUE and not _NUMBER_START.match(text)


def column_justify(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The alignment of each column: "left" where a cell holds words, else "right"."""
    text = [False] * len(columns)
    for row in rows:
        for index, cell in enumerate(row[:len(columns)]):
            text[index] = text[index] or is_text_cell(cell)
    return ["left" if words else "right" for words in text]


def build_table(title: str | None, columns: Sequence[str], justify: Sequence[str],
                widths: Sequence[int] | None = None, show_header: bool = True) -> Table:
    """The header-row table mosaic prints (optionally with fixed content widths and no
    title or header), each column aligned as ``justify`` says."""
    table = Table(title=plain_title(title), title_justify="left", show_header=show_header)
    for index, column in enumerate(columns):
        table.add_column(column, justify=justify[index],  # type: ignore[arg-type]
                         width=None if widths is None else widths[index])
    return table


def _layout(console: Console, title: str, columns: Sequence[str],
            rows: Iterable[Sequence[str]]) -> tuple[list[int] | None, list[str], int]:
    """Content width of each column as rich lays out the whole table (None when rich's
    layout cannot be reproduced: then the caller prints whole), each column's alignment
    (:func:`column_justify`) and the row count."""
    options = console.options
    widest_min: list[tuple[int, Text]] = [(-1, Text())] * len(columns)
    widest_max: list[tuple[int, Text]] = [(-1, Text())] * len(columns)
    text = [False] * len(columns)
    count = 0
    for row in rows:
        count += 1
        for index, cell in enumerate(plain_cells(row)):
            low, high = Measurement.get(console, options, cell)
            if low > widest_min[index][0]:
                widest_min[index] = (low, cell)
            if high > widest_max[index][0]:
                widest_max[index] = (high, cell)
            text[index] = text[index] or is_text_cell(cell.plain)
    justify = ["left" if words else "right" for words in text]
    proxy = build_table(title, columns, justify)
    proxy.add_row(*(cell for _, cell in widest_min))
    proxy.add_row(*(cell for _, cell in widest_max))
    layout = getattr(proxy, "_calculate_column_widths", None)  # rich's own layout
    padding = getattr(proxy, "_get_padding_width", None)
    if layout is None or padding is None or count == 0:
        return None, justify, count
    # as Table.__rich_console__ does for a table printed at the top level
    widths = layout(console, options.update_width(options.max_width - proxy._extra_width))
    content = [width - padding(index) for index, width in enumerate(widths)]
    return (content if min(content) >= 1 else None), justify, count


def print_table_streamed(console: Console, title: str, columns: Sequence[str],
                         rows: Callable[[], Iterable[Sequence[str]]],
                         chunk_rows: int = CHUNK_ROWS) -> None:
    """Print the table of ``rows()`` (called twice: each call iterates the rows afresh)."""
    widths, justify, count = _layout(console, title, columns, rows())
    if widths is None or count <= chunk_rows:  # small (or unusual): rich in one piece
        table = build_table(title, columns, justify)
        for row in rows():
            table.add_row(*plain_cells(row))
        console.print(table)
        return
    blank = [""] * len(columns)
    chunk: list[Sequence[str]] = []
    done = 0

    def flush(last: bool) -> None:
        first = done == len(chunk)
        table = build_table(title if first else None, columns, justify, widths,
                            show_header=first)
        if not first:
            table.add_row(*blank)
        for row in chunk:
            table.add_row(*plain_cells(row))
        if not last:
            table.add_row(*blank)
        with console.capture() as capture:
            console.print(table)
        lines = capture.get().splitlines(keepends=True)
        start = 0 if first else 2  # top edge and the blank row
        stop = len(lines) if last else len(lines) - 2  # the blank row and bottom edge
        console.file.write("".join(lines[start:stop]))

    for row in rows():
        chunk.append(row)
        done += 1
        if len(chunk) == chunk_rows:
            flush(last=done == count)
            chunk = []
    if chunk:
        flush(last=True)
    console.file.flush()
