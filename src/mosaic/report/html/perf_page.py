"""Reports of one job (`mosaic perf`) and of its layout search (`mosaic layouts`)."""

from __future__ import annotations

from typing import Any

from mosaic.perf.constraints import rule_text
from mosaic.perf.headroom import gib_or_mib_text
from mosaic.perf.memory import COMPONENT_MEANINGS
from mosaic.perf.terms import term_meaning
from mosaic.report.html.breakdown import (
    GIB,
    MEMORY_LIMIT_COLOUR,
    layout_label,
    memory_breakdown_figure,
    memory_limits,
    step_breakdown_figure,
)
from mosaic.report.html.page import (
    Column,
    Section,
    figure_html,
    fmt_float,
    fmt_percent,
    key_value_html,
    note,
    row_html,
    table_html,
)
from mosaic.report.layout_search_document import job_limit_notes
from mosaic.report.prediction_document import memory_scale_note
from mosaic.report.prediction_summary import (
    breakdown_scale_note,
    hardware_text,
    prediction_summary_rows,
)

CHECKPOINTING_COLOURS = {"none": "#4C78A8", "selective": "#54A24B", "full": "#E45756"}
LAYOUT_COLUMNS = [
    Column("rank", "#"), *(Column(k, k) for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")),
    Column("sharding", "sharding", text=True), Column("micro_batch", "mbs"),
    Column("checkpointing", "ckpt", text=True),
    Column("tokens_per_s_per_gpu", "tok/s/GPU", fmt_float(0)),
    Column("mfu", "MFU", fmt_percent(2)), Column("step_time_s", "step s", fmt_float(3)),
    Column("memory_gib", "GiB", fmt_float(1)),
]


# --- perf -----------------------------------------------------------------------------------
def perf_sections(document: dict[str, Any]) -> list[Section]:
    """One job: metrics, step-time and memory breakdowns (`mosaic perf --json`)."""
    plan = document["plan"]
    name = layout_label(plan)
    summary = [
        *prediction_summary_rows(document),  # the terminal's rows, in its words
        # a run record's measurement that looks mis-entered (the terminal's warning: line)
        *([("measurement", warning)] if (warning := document.get("measurement_warning"))
          else []),
        *([("memory scale", scaled)] if (scaled := memory_scale_note(document)) else []),
        *([("memory breakdown of", f"pipeline rank {document['memory_stage']} of "
                                   f"{plan['pp']}, the heaviest")]
          if plan.get("pp", 1) > 1 and "memory_stage" in document else []),
        *(tuple(row) for row in document.get("coverage_summary", [])),
    ]
    terms = [{"term": k, "seconds": v, "share": v / document["step_time_s"],
              "source": document["labels"].get(k, ""), "what": term_meaning(k)}
             for k, v in document["breakdown_s"].items() if abs(v) > 0]
    memory = [{"component": k, "gib": v / GIB, "what": COMPONENT_MEANINGS.get(k, "")}
              for k, v in document["memory_breakdown_bytes"].items()]
    capacity = document["memory_capacity_gib"] * GIB
    assumed = [{"assumed": line}
               for line in [*document.get("assumptions", []), *document.get("kernels", [])]]
    return [
        Section("summary", "Predicted step", [key_value_html(summary, table_id="perf-summary")]),
        Section("breakdown", "Step time and memory", [
            note("Communication bars are the exposed time per parallel axis (the model hides "
                 "overlapped communication behind compute)."
                 + (f" Step-time terms{scale}." if (scale := breakdown_scale_note(document))
                    else "")),
            row_html(
                figure_html(step_breakdown_figure([(name, document["breakdown_s"])],
                                                  document["labels"]), "fig-step"),
                figure_html(memory_breakdown_figure(
                    [(name, document["memory_breakdown_bytes"])], capacity,
                    usable_fraction=document.get("usable_memory_fraction")), "fig-memory")),
            table_html([Column("term", "term", text=True),
                        Column("seconds", "seconds", fmt_float(4)),
                        Column("share", "share", fmt_percent(1)),
                        Column("source", "source", text=True),
                        Column("what", "what", text=True)], terms,
                       table_id="terms-table"),
            table_html([Column("component", "memory component", text=True),
                        Column("gib", "GiB", fmt_float(2)),
                        Column("what", "what", text=True)], memory,
                       table_id="memory-table")]),
        Section("assumptions", "Assumed where the input is silent", [
            table_html([Column("assumed", "assumption", text=True)], assumed,
                       table_id="assumptions-table") if assumed
            else note("Nothing assumed: the input states every field the model reads.")]),
    ]


# --- layouts --------------------------------------------------------------------------------
def mfu_memory_figure(points: dict[str, list[Any]], capacity_gib: float | None,
                      title: str, usable_fraction: float | None = None) -> Any:
    """MFU against memory per GPU of every feasible layout (best first), with the device's
    capacity and the usable share feasibility is judged against."""
    import plotly.graph_objects as go

    figure = go.Figure()
    modes = points["checkpointing"]
    for mode, colour in CHECKPOINTING_COLOURS.items():
        pick = [i for i, m in enumerate(modes) if m == mode]
        if not pick:
            continue
        figure.add_trace(go.Scatter(
            x=[points["memory_gib"][i] for i in pick], y=[points["mfu"][i] for i in pick],
            mode="markers", name="no recompute" if mode == "none" else f"{mode} recompute",
            marker={"size": 5, "color": colour, "opacity": 0.6},
            text=[points["labels"][i] for i in pick],
            customdata=[points["step_time_s"][i] for i in pick],
            hovertemplate="%{text}<br>MFU=%{y:.2%}, %{x:.1f} GiB<br>step %{customdata:.3f} s"
                          "<extra></extra>"))
    if points["mfu"]:
        figure.add_trace(go.Scatter(
            x=[points["memory_gib"][0]], y=[points["mfu"][0]], mode="markers",
            name="best layout", marker={"symbol": "star", "size": 16, "color": "gold",
                                        "line": {"color": "black", "width": 1}},
            hoverinfo="skip"))
    if capacity_gib:
        # the lines and labels of the memory bars (breakdown.memory_limits), the usable
        # share's label at the bottom, clear of the capacity's
        for (gib, text, dash), position in zip(memory_limits(capacity_gib, usable_fraction),
                                               ("top right", "bottom left"), strict=False):
            figure.add_vline(x=gib, line_dash=dash, line_color=MEMORY_LIMIT_COLOUR,
                             annotation_text=text, annotation_position=position)
    # a narrow MFU range needs decimals, or ticks repeat ('20%, 20%, 19%')
    spread = max(points["mfu"], default=0) - min(points["mfu"], default=0)
    figure.update_layout(title=title, xaxis_title="memory per GPU (GiB)",
                         yaxis_title="MFU", yaxis_tickformat=".0%" if spread >= 0.05 else ".1%",
                         height=470, margin={"t": 50, "b": 50, "l": 60, "r": 20})
    return figure


def _infeasible_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    infeasible = document["infeasible"]
    rows = []
    if infeasible["out_of_memory"]:
        closest = infeasible.get("min_overshoot_gib")
        headroom = infeasible.get("over_planning_headroom", 0)
        reason = ("out of memory" if not headroom else
                  f"over the usable memory ({headroom:,} under device memory, over the "
                  "planning headroom)")
        rows.append({"reason": reason, "plans": infeasible["out_of_memory"],
                     "example": ("" if closest is None
                                 else f"closest misses by {gib_or_mib_text(closest)}")})
    rows += [{"reason": rule_text(item["rule"]),
              "plans": item["plans"], "example": item["example"]}
             for item in infeasible["rejected"]]
    return rows


def layouts_sections(document: dict[str, Any]) -> list[Section]:
    """Ranked layouts, top breakdowns, MFU-memory scatter, infeasible reasons."""
    hardware = document["hardware"]
    rows = document["rows"]
    summary = [
        ("hardware", hardware_text(hardware)),
        *([("calibration", document["calibration"])] if "calibration" in document else []),
        ("candidates", f"{document['n_candidates']:,} enumerated, {document['n_plans']:,} "
                       f"pass the divisibility rules, {document['n_feasible']:,} fit memory"),
        ("MFU peak", document["mfu_peak"]),
        *((f"layout #1: {key}", value) for key, value in document.get("coverage_summary", [])),
    ]
    sections = [Section("summary", "Layout search",
                        [key_value_html(summary, table_id="layouts-summary"),
                         *(note(line) for line in job_limit_notes(document))])]
    breakdowns = document.get("top_breakdowns")
    compare = Section("breakdowns", "Best layouts side by side")
    if not rows:  # nothing fits (a trial: an empty scatter on a -1..6 GiB axis, a table
        # of headers, and breakdowns said missing from 'older JSON')
        none = ("No layout is feasible: nothing to break down, plot or rank (section 'Why "
                "the other layouts are infeasible' says what each one failed).")
        compare.body.append(note(none))
        return [*sections, compare,
                Section("scatter", "MFU against memory", [note(none)]),
                Section("table", "Ranked layouts (0 listed)", [note(none)]),
                _infeasible_section(document)]
    if breakdowns:
        bars = [(f"#{b['rank']} {layout_label(b['plan'])}", b) for b in breakdowns]
        compare.body.append(note("Communication bars are the exposed time per parallel axis."))
        compare.body.append(row_html(
            figure_html(step_breakdown_figure([(n, b["breakdown_s"]) for n, b in bars],
                                              breakdowns[0]["labels"]), "fig-step"),
            figure_html(memory_breakdown_figure(
                [(n, b["memory_breakdown_bytes"]) for n, b in bars],
                document.get("capacity_bytes"),
                usable_fraction=document["hardware"].get("usable_memory_fraction")),
                "fig-memory")))
    else:
        compare.body.append(note("No breakdowns in this document (`mosaic layouts --json` "
                                 "and `--html` write them; older JSON did not)."))
    sections.append(compare)
    points = document.get("feasible_points") or {
        "mfu": [r["mfu"] for r in rows], "memory_gib": [r["memory_gib"] for r in rows],
        "step_time_s": [r["step_time_s"] for r in rows],
        "labels": [layout_label(r) for r in rows],
        "checkpointing": [r["checkpointing"] for r in rows]}
    capacity = document.get("capacity_bytes")
    shown = len(points["mfu"])
    total = points.get("n_feasible", shown)
    scope = (f"the {len(rows)} listed layouts" if "feasible_points" not in document
             else "every feasible layout" if shown == total
             else f"{shown:,} of {total:,} feasible layouts (best 500, then evenly spaced)")
    sections.append(Section("scatter", "MFU against memory", [figure_html(mfu_memory_figure(
        points, None if capacity is None else capacity / GIB,
        f"MFU vs memory per GPU: {scope}",
        usable_fraction=document["hardware"].get("usable_memory_fraction")),
        "fig-scatter")]))
    sections.append(Section("table", f"Ranked layouts ({len(rows)} listed)", [
        # what the yellow row means, as the plan page says of its optimum
        note("Click a header to sort; the best layout, the scatter's star, is highlighted."),
        table_html(LAYOUT_COLUMNS, rows, table_id="layouts-table", filterable=True,
                   highlight=lambda r: r["rank"] == 1)]))
    sections.append(_infeasible_section(document))
    return sections


def _infeasible_section(document: dict[str, Any]) -> Section:
    return Section("infeasible", "Why the other layouts are infeasible", [
        table_html([Column("reason", "reason", text=True), Column("plans", "layouts"),
                    Column("example", "example", text=True)], _infeasible_rows(document),
                   table_id="infeasible-table")])
