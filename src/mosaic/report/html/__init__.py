"""The self-contained HTML report of plan, sweep, perf, layouts, validate, compare and
explain documents.

Every page is built from the JSON document the matching command writes with ``--json``
(plus, for ``--html``, blocks too large for JSON), so ``mosaic report RESULT.json`` and
``mosaic <command> --html FILE`` draw the same page. Needs plotly (``mosaic[report]``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mosaic.errors import MosaicInputError, require_extra
from mosaic.io_atomic import write_text_atomic
from mosaic.output_kinds import (
    RESULT_SIGNATURES,
    output_command,
    result_kind,
    with_current_keys,
)
from mosaic.report.html.traced import Trail, missing_field, plain_types, traced

KINDS = tuple(RESULT_SIGNATURES)


def detect_kind(document: Any) -> str:
    """Which command wrote ``document``; a one-line error when none matches."""
    kind = result_kind(document)
    if kind is not None:
        return kind
    expected = "`mosaic report` draws the JSON of `mosaic plan|sweep|perf|layouts|validate|" \
               "compare|explain --json`"
    written_by = output_command(document)
    if written_by is not None:  # another command's output: named, not "not a mosaic result"
        plots = (" (a training run's curves: `run.plot: true` in its job writes metrics.html)"
                 if written_by.startswith("train") else "")
        raise MosaicInputError(f"the file that `mosaic {written_by}` writes, which has no "
                               f"HTML report; {expected}{plots}")
    raise MosaicInputError(f"not a mosaic result: {expected}")


def _kind_or_none(document: Any) -> str | None:
    """The detected kind, or None where no signature matches (the stated kind decides)."""
    try:
        return detect_kind(document)
    except MosaicInputError:
        return None


def _builders() -> dict[str, tuple[Callable[[dict[str, Any]], list[Any]],
                                   Callable[[dict[str, Any]], tuple[str, str]]]]:
    from mosaic.report.html import (
        compare_page,
        explain_page,
        perf_page,
        plan_page,
        validate_sweep_page,
    )
    from mosaic.report.prediction_summary import hardware_text

    return {
        "plan": (plan_page.plan_sections, plan_page.plan_title),
        "sweep": (validate_sweep_page.sweep_sections,
                  lambda d: ("mosaic sweep", f"optimum against {d['axis']}")),
        "perf": (perf_page.perf_sections,
                 lambda d: ("mosaic perf", hardware_text(d["hardware"]))),
        "layouts": (perf_page.layouts_sections,
                    lambda d: ("mosaic layouts", hardware_text(d["hardware"]))),
        "validate": (validate_sweep_page.validate_sections,
                     lambda d: ("mosaic validate", f"{len(d['runs'])} runs")),
        "compare": (compare_page.compare_sections, compare_page.compare_title),
        "explain": (explain_page.explain_sections, explain_page.explain_title),
    }


def require_plotly() -> None:
    """One-line error when the report extra is missing."""
    require_extra("plotly", "report")


def render_report(document: dict[str, Any], kind: str | None = None) -> str:
    """The HTML page of a result document (kind detected when not given)."""
    require_plotly()
    document = with_current_keys(document)  # a perf document saved before its keys had units
    detected = detect_kind(document) if kind is None else _kind_or_none(document)
    kind = kind or detected
    if kind not in KINDS:
        raise MosaicInputError(f"report kind {kind!r}: allowed {', '.join(KINDS)}")
    if detected is not None and detected != kind:
        raise MosaicInputError(f"the document is the JSON of `mosaic {detected}`, not of "
                               f"`mosaic {kind}`: use --kind {detected} or leave --kind out")
    if detected is None and output_command(document) is not None:
        detect_kind(document)  # another command's output: named (with --kind it read as an
        # incomplete document of that kind, "it lacks the field plan")
    from mosaic import __version__
    from mosaic.report.html.page import render_page

    sections, title = _builders()[kind]
    trail = Trail()
    view = traced(document, "", trail)  # says where a malformed document failed
    try:
        parts = sections(view)
        heading, subtitle = title(view)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError, ZeroDivisionError,
            OverflowError) as exc:  # a hand-edited or truncated document (a 400-digit number)
        what = (f"it lacks the field {missing_field(exc, trail)}" if isinstance(exc, KeyError)
                else f"a field is null or of the wrong type ({plain_types(str(exc))}; the "
                     f"last field read: {trail.last or 'none'})")
        raise MosaicInputError(f"the {kind} document is incomplete or malformed: {what}; "
                               f"write it again with `mosaic {kind} ... --json`") from None
    return render_page(heading, subtitle, parts,
                       footer=f"mosaic {__version__} — {kind} report. "
                              "Self-contained: opens without a network.")


def write_report(document: dict[str, Any], path: str | Path, kind: str | None = None) -> Path:
    """Write the page of a plain (JSON-ready) document to ``path`` (folders created)."""
    html = render_report(document, kind)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, html)
    return path
