"""The report of `mosaic compare` (two jobs or two plans): the terminal's tables, and the two
step-time and memory breakdowns as bars side by side."""

from __future__ import annotations

from typing import Any

from mosaic.report import comparison
from mosaic.report.calibration_terms import calibration_term_table, step_scale_note
from mosaic.report.html.breakdown import (
    memory_breakdown_figure,
    memory_limit_lines,
    step_breakdown_figure,
)
from mosaic.report.html.page import (
    Column,
    Section,
    figure_html,
    key_value_html,
    note,
    row_html,
    table_html,
)

SIDES = ("a", "b")


def _text_table(headers: list[str], rows: list[list[str]], table_id: str,
                text_columns: int = 1) -> str:
    """A table of already formatted cells (the terminal's); the first ``text_columns``
    left-aligned as words, the rest right-aligned as numbers."""
    keys = [f"c{i}" for i in range(len(headers))]
    columns = [Column(key, header, text=i < text_columns) for i, (key, header)
               in enumerate(zip(keys, headers, strict=True))]
    cells = [dict(zip(keys, row, strict=True)) for row in rows]
    return table_html(columns, cells, table_id=table_id, sortable=False)


def _side_name(document: dict[str, Any], side: str) -> str:
    """'A: job.yaml', with the side's profile where the two sides' differ (one job under
    two profiles)."""
    name = f"{side.upper()}: {document[side]['source']}"
    profiles = [document[s].get("calibration_source") or document[s].get("calibration")
                for s in SIDES]
    return name if profiles[0] == profiles[1] else f"{name} ({profiles[SIDES.index(side)]})"


def _breakdowns(document: dict[str, Any]) -> list[str]:
    """Both sides' step-time and memory bars, and the per-term tables with B - A."""
    if not comparison.has_breakdowns(document):
        return [note(comparison.NO_BREAKDOWNS)]
    names = [_side_name(document, side) for side in SIDES]
    a, b = document["a"], document["b"]
    terms = calibration_term_table(document.get("calibration_terms") or [])
    scale = step_scale_note(a, b)
    return [
        *([note("Calibrated terms that differ (each side's profile, for its job)"),
           _text_table(["term", "A", "B", "B / A"], terms, "compare-calibration", 3)]
          if terms else []),
        *([note(scale)] if scale else []),
        note("Communication bars are the exposed time per parallel axis (the model hides "
             "overlapped communication behind compute)."),
        row_html(
            figure_html(step_breakdown_figure(
                [(name, document[side]["breakdown_s"]) for name, side in zip(
                    names, SIDES, strict=True)]), "fig-compare-step"),
            figure_html(memory_breakdown_figure(
                [(name, document[side]["memory_breakdown_bytes"]) for name, side in zip(
                    names, SIDES, strict=True)],
                # one capacity line for one GPU kind, each side's own for two
                **memory_limit_lines(a, b)), "fig-compare-memory")),
        row_html(
            _text_table(["term", "A (s)", "B (s)", "B - A (s)"], comparison.step_rows(document),
                        "compare-steps"),
            _text_table(["memory component", "A (GiB)", "B (GiB)", "B - A (GiB)"],
                        comparison.memory_rows(document), "compare-memory")),
    ]


def compare_sections(document: dict[str, Any]) -> list[Section]:
    """The comparison page (`mosaic compare --json`)."""
    notes: list[str] = []
    for part in comparison.side_notes(document):
        if isinstance(part, str):
            notes.append(note(part))
        else:
            heading, rows = part
            notes += [note(heading), _text_table(["side", "note"], [list(r) for r in rows],
                                                 f"compare-notes-{len(notes)}", 2)]
    return [
        Section("compared", "Compared", [key_value_html(comparison.compared_rows(document),
                                                        table_id="compare-summary")]),
        Section("inputs", "Inputs that differ", [
            _text_table(["field", "A", "B"], comparison.difference_rows(document),
                        "compare-inputs", 3)
            if document["input_differences"] else note("None: the two inputs agree.")]),
        Section("side-by-side", "Side by side", [
            _text_table(["quantity", "A", "B", "B / A"], comparison.side_by_side_rows(document),
                        "compare-side-by-side"),
            *(note(line) for line in comparison.footnotes(document))]),
        Section("breakdowns", "Step time and memory", _breakdowns(document)),
        *([Section("notes", "What the predictions say of themselves", notes)]
          if notes else []),
    ]


def compare_title(document: dict[str, Any]) -> tuple[str, str]:
    """'mosaic compare', 'A against B' (their files)."""
    return "mosaic compare", f"{document['a']['source']} against {document['b']['source']}"
