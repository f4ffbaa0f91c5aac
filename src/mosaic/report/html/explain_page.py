"""Report of one job's diagnosis (`mosaic explain`): the predicted step as `mosaic perf`
draws it, what bounds it, a measured gap where one was given, and the levers as a chart of
their predicted gains."""

from __future__ import annotations

from typing import Any

from mosaic.report.explain_document import levers_that_fit_text, measured_gap_rows
from mosaic.report.html.page import (
    Column,
    Section,
    figure_html,
    fmt_float,
    fmt_percent,
    key_value_html,
    note,
    table_html,
)
from mosaic.report.html.perf_page import perf_sections
from mosaic.report.prediction_summary import hardware_text

# A lever's bar by what it would do: faster, unchanged or slower (and fits), or does not fit
# (a trial read 2.7x slower levers labelled 'no gain'); whether out of memory or only over
# the planning headroom, its hover's reason says (perf.headroom.memory_verdict)
DOES_NOT_FIT = "does not fit in memory"
UNCHANGED_MARK_PX = 12  # the mark of a lever that leaves the step as it is
LEVER_COLOURS = {"faster": "#54A24B", "unchanged": "#9ECAE9", "slower": "#B279A2",
                 DOES_NOT_FIT: "#F58518"}
LEVER_ROW_PX, LEVER_FRAME_PX = 28, 140  # bar height and the figure's title and axes
LEVER_LABEL_CHARS = 60  # a bar's name beside the axis: the description's first characters
LEVER_COLUMNS = [
    Column("rank", "#"), Column("description", "what changes", text=True),
    Column("mfu", "MFU", fmt_percent(2)), Column("step_time_s", "step s", fmt_float(3)),
    Column("gain", "gain (x)", fmt_float(2)), Column("memory_gib", "GiB", fmt_float(1)),
    Column("verdict", "feasible?", text=True),
    Column("set", "--set that gives it", text=True),
]


def explain_title(document: dict[str, Any]) -> tuple[str, str]:
    return "mosaic explain", hardware_text(document["prediction"]["hardware"])


def explain_sections(document: dict[str, Any]) -> list[Section]:
    """The perf page of the job, then its bound, its measured gap and its levers."""
    prediction = perf_sections(document["prediction"])
    return [prediction[0], _bound_section(document), *_gap_sections(document),
            _levers_section(document), *prediction[1:]]


def _bound_section(document: dict[str, Any]) -> Section:
    bound = document["bound"]
    step_s = document["current"]["step_time_s"]
    rows = [{"class": name, "seconds": seconds, "share": seconds / step_s}
            for name, seconds in bound["classes_s"].items()]
    return Section("bound", "What bounds this step", [
        note(f"Bound: {bound['summary']}"),
        table_html([Column("class", "class", text=True),
                    Column("seconds", "seconds", fmt_float(4)),
                    Column("share", "share", fmt_percent(1))], rows, table_id="bound-table")])


def _gap_sections(document: dict[str, Any]) -> list[Section]:
    gap = document.get("gap")
    if not gap:
        return []
    warning = document.get("measurement_warning")  # the terminal's warning: line
    return [Section("gap", "Measured vs predicted", [
        *([note(f"Warning: {warning}")] if warning else []),
        # the terminal's rows, with the record's note when its tokens/s and step disagree
        key_value_html(measured_gap_rows(gap, document["prediction"].get("assumptions", [])),
                       table_id="gap-table"),
        *[note(finding) for finding in gap["findings"]]])]


def _verdict(lever: dict[str, Any]) -> str:
    return "yes" if lever["feasible"] else f"no: {lever['reason']}"


def lever_kind(lever: dict[str, Any]) -> str:
    """'faster', 'unchanged', 'slower' or :data:`DOES_NOT_FIT` (a lever that breaks a rule
    has no bar)."""
    if not lever["feasible"]:
        return DOES_NOT_FIT
    shown = round(lever["gain"], 2)  # as the table and the terminal print it (1.00x)
    return "faster" if shown > 1.0 else "slower" if shown < 1.0 else "unchanged"


def lever_figure(levers: list[dict[str, Any]]) -> dict[str, Any]:
    """Horizontal bars of each predicted lever's gain (tokens/s over the current step) drawn
    from 1x, the job as it is (right: faster, left: slower), best at the top, one colour per
    :func:`lever_kind`; an unchanged lever is a mark on the 1x line."""
    predicted = [lever for lever in levers if lever["gain"] is not None]
    traces = []
    for kind, colour in LEVER_COLOURS.items():
        chosen = [lever for lever in predicted if lever_kind(lever) == kind]
        if not chosen:
            continue
        names = [_label(lever, rank) for rank, lever in enumerate(predicted, start=1)
                 if lever in chosen]
        # an unchanged lever's bar is a few thousandths long or none, nothing to see beside
        # its legend entry (a trial): a mark on the 1x line instead
        shape = ({"type": "bar", "orientation": "h", "marker": {"color": colour},
                  "base": 1.0, "x": [lever["gain"] - 1.0 for lever in chosen]}
                 if kind != "unchanged" else
                 {"type": "scatter", "mode": "markers", "x": [lever["gain"] for lever in chosen],
                  "marker": {"color": colour, "symbol": "diamond-tall",
                             "size": UNCHANGED_MARK_PX,
                             "line": {"color": "#333333", "width": 1}}})
        traces.append({
            **shape, "name": kind, "y": names,
            "customdata": [[lever["description"], _verdict(lever), lever["gain"]]
                           for lever in chosen],
            "hovertemplate": "%{customdata[0]}<br>gain %{customdata[2]:.2f}x<br>fits: "
                             "%{customdata[1]}<extra></extra>"})
    order = [_label(lever, rank) for rank, lever in enumerate(predicted, start=1)]
    return {"data": traces, "layout": {
        "title": {"text": "Predicted gain of each lever (tokens/s over the job as it is)"},
        "barmode": "overlay", "height": LEVER_FRAME_PX + LEVER_ROW_PX * max(len(order), 1),
        "margin": {"t": 50, "b": 40, "l": 20, "r": 20},
        "xaxis": {"title": {"text": "gain (x)"}},
        "yaxis": {"categoryorder": "array", "categoryarray": order[::-1],
                  "automargin": True},
        "shapes": [{"type": "line", "x0": 1, "x1": 1, "yref": "paper", "y0": 0, "y1": 1,
                    "line": {"color": "#333333", "dash": "dot"}}]}}


def _label(lever: dict[str, Any], rank: int) -> str:
    """'3. micro-batch 1 -> 2 sequences' (cut at LEVER_LABEL_CHARS; the hover has it all)."""
    text = lever["description"]
    if len(text) > LEVER_LABEL_CHARS:
        text = text[:LEVER_LABEL_CHARS - 1].rstrip() + "…"
    return f"{rank}. {text}"


def _levers_section(document: dict[str, Any]) -> Section:
    levers = document["levers"]
    rows = [{**lever, "rank": rank, "verdict": _verdict(lever),
             "set": " ".join(lever.get("overrides") or [])}
            for rank, lever in enumerate(levers, start=1)]
    broken = sum(1 for lever in levers if lever["gain"] is None)
    # a job whose levers no --set states (a run record's) has no column of empty cells
    columns = [column for column in LEVER_COLUMNS
               if column.key != "set" or any(row["set"] for row in rows)]
    return Section("levers", "Levers, best feasible first", [
        note("Each lever changes one thing and is predicted as `mosaic perf` would predict "
             "the job with that change; the numerics of a precision change are not judged."
             + (f" {broken} {'that breaks' if broken == 1 else 'that break'} a layout rule "
                f"{'has' if broken == 1 else 'have'} no bar (the table says which rule)."
                if broken else "")),
        *([note(fit)] if (fit := levers_that_fit_text(document)) else []),
        figure_html(lever_figure(levers), "fig-levers") if len(rows) > broken
        else note("No lever could be predicted."),
        table_html(columns, rows, table_id="levers-table")])
