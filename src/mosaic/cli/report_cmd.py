"""`mosaic report`: the self-contained HTML report of a saved `--json` result."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mosaic.cli.common import error_console, guarded

HtmlOption = Annotated[Path | None, typer.Option(
    "--html", help="also write a self-contained HTML report to this file")]


def check_html(path: Path | None, *inputs: object) -> None:
    """Before any work: the report extra installed, and an ``--html`` file that can be
    written and is none of the command's input files (a job, run records, a law, a
    calibration or catalog file; names that are not files, such as a calibration profile,
    are ignored)."""
    if path is None:
        return
    from mosaic.io_atomic import check_output_file
    from mosaic.report.html import require_plotly

    check_output_file(path, "--html", inputs=[str(i) for i in inputs if i is not None])
    require_plotly()  # a missing report extra is said before the search, not after it


def write_html(document: dict, path: Path | None, kind: str) -> None:
    """`--html FILE` of the plan, perf, layouts, validate, sweep, compare and explain
    commands."""
    if path is None:
        return
    from mosaic.jsonable import to_jsonable
    from mosaic.report.html import write_report

    written = write_report(to_jsonable(document), path, kind)
    error_console.print(f"wrote {written}", markup=False, highlight=False)


def report(
    result: Annotated[Path, typer.Argument(
        help="JSON written by `mosaic plan|sweep|perf|layouts|validate|compare|explain "
        "--json`")],
    out: Annotated[Path, typer.Option("--out", help="HTML file to write")] = Path("report.html"),
    kind: Annotated[str | None, typer.Option(
        "--kind", help="plan, sweep, perf, layouts, validate, compare or explain (default: "
        "detected)")] = None,
) -> None:
    """Write the self-contained HTML report (interactive figures and tables) of a result."""
    from mosaic.io_atomic import check_output_file
    from mosaic.report.html import write_report

    check_output_file(out, "--out", inputs=[result])
    from mosaic.errors import MosaicInputError
    from mosaic.schema_validation import parse_json, read_text

    document = parse_json(read_text(result, "result file"), str(result))
    try:
        written = write_report(document, out, kind)
    except MosaicInputError as error:  # which file the message is about
        message = str(error)
        raise (error if message.startswith(str(result)) else
               MosaicInputError(f"{result}: {message}")) from None
    error_console.print(f"wrote {written}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Attach `mosaic report` to the root command."""
    app.command("report")(guarded(report))
