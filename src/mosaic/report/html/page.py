"""One self-contained HTML page: inlined plotly.js, styles and table script, then sections.

Figures are plotly figures written with ``Figure.to_html(include_plotlyjs=False)`` after a
single inlined copy of plotly.js (plotly docs, "Interactive HTML Export in Python":
https://plotly.com/python/interactive-html-export/), so the file opens without a network.
Element ids are fixed (no random ids), so the same document gives the same file.
"""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from mosaic.units import significant

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True,
                 "toImageButtonOptions": {"format": "svg"}}


def asset_text(name: str) -> str:
    """A file of ``mosaic/report/html/assets`` (CSS and the table script)."""
    return resources.files("mosaic.report.html").joinpath("assets", name).read_text()


def plotly_js() -> str:
    """The plotly.js bundle shipped inside the plotly package (no network)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


# --- Tables ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One table column: the row key, its header and how to print the value."""

    key: str
    label: str
    fmt: Callable[[Any], str] = str
    text: bool = False  # left-aligned free text (no numeric sort value)
    # a footnote mark after a row's value ('' for none): a sweep's early-stopping points
    mark: Callable[[dict[str, Any]], str] | None = None


def fmt_float(digits: int) -> Callable[[Any], str]:
    """Fixed decimals with thousands separators, as the CLI's tables print them."""
    return lambda v: "–" if v is None else f"{v:,.{digits}f}"


def fmt_yes_no(value: Any) -> str:
    """A flag as a reader says it (a trial read Python's True and False in a table)."""
    return "–" if value is None else ("yes" if value else "no")


def fmt_percent(digits: int = 1) -> Callable[[Any], str]:
    return lambda v: "–" if v is None else f"{v:.{digits}%}"


def fmt_signed_percent(digits: int = 1) -> Callable[[Any], str]:
    """+9.1% / -3.0%: an error's direction, as the terminal table shows it."""
    return lambda v: "–" if v is None else f"{v:+.{digits}%}"


def fmt_si(unit: str = "", digits: int = 3) -> Callable[[Any], str]:
    """1.42e12 -> '1.42 T' (k, M, B/G, T, P); from 1e18 on, scientific: '4.38e+23 FLOP',
    not '4.38e+08 PFLOP'."""
    def fmt(value: Any) -> str:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return "–"
        if abs(value) >= 1e18:
            return f"{value:.{digits}g} {unit}".rstrip()
        for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= factor:  # digits with their zeros: 3.00 T beside 3.91 T
                return f"{significant(value / factor, digits)} {prefix}{unit}".rstrip()
        return f"{value:.{digits}g} {unit}".rstrip()
    return fmt


def _sort_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return repr(float(value))
    return ""


WHOLE_TABLE_ROWS = 30  # a table of at most this many rows is not put in a scroll box
# A text column whose every value is at most this long is a label kept on one line
# ("pp4 vpp4 ep8 dp16 mb4 zero2", "yes"); a longer one is prose, wrapped in lines of at
# least 12em (report.css). In a table wider than the page the browser squeezed every text
# column to its longest word: at 800 px the plan's layout column read one word a line and
# each ranked candidate took six lines (a trial).
LABEL_CHARS = 32


def _text_class(column: Column, shown: Sequence[str]) -> str:
    """The class of a column's cells: '' (a number), 'text label' or 'text prose'."""
    if not column.text:
        return ""
    return "text label" if all(len(text) <= LABEL_CHARS for text in shown) else "text prose"


def table_html(columns: Sequence[Column], rows: Sequence[dict[str, Any]], *, table_id: str,
               sortable: bool = True, highlight: Callable[[dict[str, Any]], bool] | None = None,
               filterable: bool = False) -> str:
    """An HTML table; numeric cells carry their raw value for sorting."""
    classes = "data sortable" if sortable else "data"
    shown = [["–" if row.get(c.key) is None
              else c.fmt(row.get(c.key)) + (c.mark(row) if c.mark else "") for c in columns]
             for row in rows]
    cell_classes = [_text_class(c, [texts[i] for texts in shown])
                    for i, c in enumerate(columns)]
    head = "".join(f'<th class="{"text" if c.text else ""}">{esc(c.label)}</th>'
                   for c in columns)
    body = []
    for row, texts in zip(rows, shown, strict=True):
        cells = [f'<td class="{cell_class}" '
                 f'data-value="{esc(_sort_value(row.get(c.key)))}">{esc(text)}</td>'
                 for c, cell_class, text in zip(columns, cell_classes, texts, strict=True)]
        marked = ' class="highlight"' if highlight is not None and highlight(row) else ""
        body.append(f"<tr{marked}>{''.join(cells)}</tr>")
    search = (f'<input class="filter" placeholder="filter rows" data-filter-for="{table_id}">'
              if filterable else "")
    # a long table scrolls in its own box; a short one is shown whole (a trial missed the
    # step-time table's 18th row, its wrapped text past the box's height)
    box = "scroll" if len(rows) > WHOLE_TABLE_ROWS else "whole"
    return (f'{search}<div class="{box}"><table id="{table_id}" class="{classes}">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def key_value_html(rows: Sequence[tuple[str, Any]], *, table_id: str) -> str:
    """A two-column table (quantity, value)."""
    body = "".join(f'<tr><td class="text">{esc(k)}</td><td class="text">{esc(v)}</td></tr>'
                   for k, v in rows)
    return f'<table id="{table_id}" class="data kv"><tbody>{body}</tbody></table>'


# --- Figures --------------------------------------------------------------------------------
# A figure title's line at plotly's 17 px title font: ~44 characters are ~420 px, inside a
# 500 px phone's plot and left of the toolbar of a full-width figure (the validate parity
# title ran under the toolbar at 1280 px and off the figure at 500 px: a trial)
TITLE_LINE_CHARS = 44
TITLE_LINE_PX = 22  # the height a title line takes
TITLE_TOP_PX = 12  # room above the title's first line


def title_lines(text: str, line_chars: int = TITLE_LINE_CHARS) -> list[str]:
    """``text`` broken at spaces into lines of at most ``line_chars`` characters (a longer
    word keeps its own line); a text with plotly line breaks (``<br>``) is kept as it is."""
    if "<br>" in text or len(text) <= line_chars:
        return [text]
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= line_chars:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def with_wrapped_title(figure: dict[str, Any]) -> dict[str, Any]:
    """A figure dictionary whose long title is broken into lines (:func:`title_lines`),
    hung from the figure's top with the top margin and the height grown by the added lines,
    so the plot keeps its size: the report's and the studio's one title look."""
    layout = figure.get("layout") or {}
    title = layout.get("title")
    title = {"text": title} if isinstance(title, str) else dict(title or {})
    lines = title_lines(str(title.get("text") or ""))
    if len(lines) < 2:
        return figure
    margin = dict(layout.get("margin") or {})
    extra_px = TITLE_LINE_PX * (len(lines) - 1)
    margin["t"] = max(int(margin.get("t", 80)) + extra_px,
                      TITLE_TOP_PX + TITLE_LINE_PX * len(lines) + 10)
    title.update(text="<br>".join(lines), yref="container", y=1, yanchor="top",
                 pad={"t": TITLE_TOP_PX})
    wrapped = {**layout, "title": title, "margin": margin}
    if layout.get("height"):
        wrapped["height"] = layout["height"] + extra_px
    return {**figure, "layout": wrapped}


def figure_html(figure: Any, div_id: str) -> str:
    """A plotly figure (a ``Figure`` or its dictionary) as a <div> (plotly.js is inlined
    once in the page head), its title wrapped (:func:`with_wrapped_title`)."""
    import plotly.graph_objects as go

    if not isinstance(figure, dict):
        figure = figure.to_plotly_json()
    # validates the dictionary against plotly's schema
    figure = go.Figure(with_wrapped_title(figure))
    inner = figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                           config=PLOTLY_CONFIG)
    return f'<div class="figure" data-figure="{div_id}">{inner}</div>'


@functools.cache
def _default_template() -> dict[str, Any]:
    import plotly.io as pio

    return pio.templates[pio.templates.default].to_plotly_json()


def figure_json(figure: dict[str, Any]) -> dict[str, Any]:
    """A figure dictionary as ``Figure.to_plotly_json`` gives it: plotly.py's default
    template written into the layout and its title wrapped, so plotly.js draws it as the
    report does."""
    figure = with_wrapped_title(figure)
    return {**figure, "layout": {"template": _default_template(), **figure["layout"]}}


def row_html(*blocks: str) -> str:
    return f'<div class="row">{"".join(blocks)}</div>'


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


# --- Page -----------------------------------------------------------------------------------
@dataclass
class Section:
    """A titled part of the page; ``body`` is HTML built with the helpers above."""

    anchor: str
    title: str
    body: list[str] = field(default_factory=list)


def render_page(title: str, subtitle: str, sections: Sequence[Section], *,
                footer: str = "") -> str:
    """The whole self-contained page."""
    toc = "".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in sections)
    parts = "".join(
        f'<section class="block" id="{s.anchor}"><h2>{esc(s.title)}</h2>{"".join(s.body)}'
        f"</section>" for s in sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc(title)}</title><link rel=\"icon\" href=\"data:,\">"
        f"<style>{asset_text('report.css')}</style>"
        f"<script>{plotly_js()}</script></head><body>"
        f"<header class=\"page\"><h1>{esc(title)}</h1><p>{esc(subtitle)}</p></header>"
        f"<nav class=\"toc\">{toc}</nav><main>{parts}</main>"
        f"<footer class=\"page\">{esc(footer)}</footer>"
        f"<script>{asset_text('table.js')}</script>"
        f"<script>{asset_text('figures.js')}</script></body></html>\n"
    )
