"""Reports of `mosaic validate` (parity and ranks) and `mosaic sweep` (allocation curves)."""

from __future__ import annotations

import math
from typing import Any

from mosaic.evaluate.envelope_tally import outside_runs_text
from mosaic.report.html.page import (
    Column,
    Section,
    figure_html,
    fmt_float,
    fmt_percent,
    fmt_si,
    fmt_signed_percent,
    fmt_yes_no,
    key_value_html,
    note,
    table_html,
)
from mosaic.report.html.plan_page import SPLIT_COLOURS, stack_text
from mosaic.report.plan_report import (
    EARLY_STOP_MARK,
    grid_template_text,
    is_ladder,
    layout_limits_text,
    layout_text,
    precision_text,
    sweep_cost_notes,
    sweep_extrapolation_rows,
    sweep_fixed_text,
    sweep_point_stops_early,
)
from mosaic.report.validation_summary import accuracy_rows, assumption_counts
from mosaic.units import GIB


# --- validate -------------------------------------------------------------------------------
def parity_figure(runs: list[dict[str, Any]], band: float | None) -> Any:
    """Predicted against measured tokens/s per GPU (log-log, one range on both axes so
    y = x is the diagonal), y = x and a ±band; a run with no measured throughput (an OOM
    record) has no point, and the title counts them."""
    import plotly.graph_objects as go

    measured = [r for r in runs if r["measured_tokens_per_s_per_gpu"] is not None]
    figure = go.Figure()
    for moe, name, colour in ((True, "MoE runs", "#E45756"), (False, "dense runs", "#4C78A8")):
        pick = [r for r in measured if r["moe"] == moe]
        if not pick:
            continue
        figure.add_trace(go.Scatter(
            x=[r["measured_tokens_per_s_per_gpu"] for r in pick],
            y=[r["predicted_tokens_per_s_per_gpu"] for r in pick], mode="markers", name=name,
            marker={"color": colour, "size": 8,
                    "symbol": ["circle" if r["feasible"] else "x" for r in pick]},
            customdata=[[r["id"], r["error"], r["group"]] for r in pick],
            hovertemplate="%{customdata[0]}<br>%{customdata[2]}<br>measured %{x:,.0f}"
                          "<br>predicted %{y:,.0f}<br>error %{customdata[1]:+.1%}"
                          "<extra></extra>"))
    axis_range = None
    if measured:
        values = [v for r in measured for v in (r["measured_tokens_per_s_per_gpu"],
                                                r["predicted_tokens_per_s_per_gpu"])]
        low, high = min(values) / 1.3, max(values) * 1.3
        axis_range = [math.log10(low), math.log10(high)]
        figure.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines",
                                    name="predicted = measured",
                                    line={"color": "black", "dash": "dash"}))
        if band:
            for sign in (1, -1):
                figure.add_trace(go.Scatter(
                    x=[low, high], y=[low * (1 + sign * band), high * (1 + sign * band)],
                    mode="lines", line={"color": "gray", "dash": "dot"},
                    name=f"±{band:.1%} (MAPE)", showlegend=sign == 1, legendgroup="band"))
    unplotted = len(runs) - len(measured)
    title = ("Predicted vs measured tokens/s per GPU (x: predicted infeasible)"
             + (f"; {unplotted} run{'s' * (unplotted > 1)} with no measured tokens/s "
                "(an out-of-memory record) not drawn" if unplotted else ""))
    figure.update_layout(title=title, height=500, margin={"t": 50, "b": 50, "l": 70, "r": 20},
                         xaxis={"type": "log", "title": "measured tokens/s per GPU",
                                "range": axis_range},
                         yaxis={"type": "log", "title": "predicted tokens/s per GPU",
                                "range": axis_range})
    return figure


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: -values[i])
    ranks = [0] * len(values)
    for rank, i in enumerate(order, start=1):
        ranks[i] = rank
    return ranks


# The rank chart's groups: plotly's ten default colours, then each further round of them
# with another marker and dash (the published runs' 40 groups drew four groups in each
# colour, so an off-diagonal line could not be told from the legend)
RANK_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross")
RANK_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
LEGEND_ENTRY_PX = 20  # one vertical legend entry at plotly's default 12 px font
RANK_FRAME_PX = 100  # the rank figure's title and margins


def rank_style(index: int) -> tuple[str, str, str]:
    """(colour, marker symbol, dash) of the ``index``-th group of the rank chart, distinct
    for the first 60 groups."""
    from plotly.colors import qualitative

    colours = qualitative.Plotly
    lap = index // len(colours)
    return (colours[index % len(colours)], RANK_SYMBOLS[lap % len(RANK_SYMBOLS)],
            RANK_DASHES[lap % len(RANK_DASHES)])


def rank_figure(runs: list[dict[str, Any]]) -> Any | None:
    """Per model+GPU group: measured rank against predicted rank (1 = fastest), each group
    drawn its own way (:func:`rank_style`), the figure tall enough that its legend lists
    every group without scrolling."""
    import plotly.graph_objects as go

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        if r["measured_tokens_per_s_per_gpu"] is not None:
            groups.setdefault(r["group"], []).append(r)
    groups = {g: rs for g, rs in groups.items() if len(rs) >= 2}
    if not groups:
        return None
    figure = go.Figure()
    largest = 1
    for index, (group, rs) in enumerate(sorted(groups.items())):
        measured = _ranks([r["measured_tokens_per_s_per_gpu"] for r in rs])
        predicted = _ranks([r["predicted_tokens_per_s_per_gpu"] for r in rs])
        largest = max(largest, len(rs))
        colour, symbol, dash = rank_style(index)
        figure.add_trace(go.Scatter(
            x=measured, y=predicted, mode="markers+lines", name=group,
            text=[r["id"] for r in rs], line={"width": 1, "color": colour, "dash": dash},
            marker={"color": colour, "symbol": symbol, "size": 7},
            hovertemplate="%{text}<br>measured rank %{x}, predicted rank %{y}<extra>"
                          f"{group}</extra>"))
    figure.add_trace(go.Scatter(x=[1, largest], y=[1, largest], mode="lines",
                                name="same rank", line={"color": "black", "dash": "dash"}))
    figure.update_layout(title="Rank within each model+GPU group (1 = fastest)",
                         xaxis_title="measured rank", yaxis_title="predicted rank",
                         height=max(500, RANK_FRAME_PX + LEGEND_ENTRY_PX * len(figure.data)),
                         margin={"t": 50, "b": 50, "l": 60, "r": 20})
    return figure


def validate_sections(document: dict[str, Any]) -> list[Section]:
    runs = document["runs"]
    a = document["aggregate"]

    summary = accuracy_rows(a, len(document.get("skipped", [])))
    if "calibration" in document:  # which profile scored the runs (a trial)
        summary.insert(0, ("calibration", document["calibration"]))
    if document.get("catalog"):  # the hardware catalog files merged over the shipped one
        summary.insert(1, ("hardware catalog", ", ".join(document["catalog"])))
    envelope = document.get("outside_calibration_envelope")
    if envelope:  # runs the profile was not fitted to the like of (a trial)
        summary.insert(1, ("outside the calibration's envelope", outside_runs_text(envelope)))
    ranks = rank_figure(runs)
    columns = [Column("id", "run", text=True), Column("group", "group", text=True),
               Column("predicted_tokens_per_s_per_gpu", "predicted tok/s/GPU", fmt_float(0)),
               Column("measured_tokens_per_s_per_gpu", "measured", fmt_float(0)),
               Column("error", "error", fmt_signed_percent(1)),
               Column("predicted_memory_gib", "mem GiB", fmt_float(1)),
               Column("measured_memory_gib", "measured GiB", fmt_float(1)),
               Column("oom", "OOM run", fmt_yes_no, text=True),
               Column("feasible", "fits", fmt_yes_no, text=True)]
    sections = [
        Section("summary", "Accuracy", [key_value_html(summary, table_id="validate-summary")]),
        Section("parity", "Parity", [figure_html(parity_figure(runs, a["mape"]), "fig-parity")]),
        Section("ranks", "Ranks within groups", [
            figure_html(ranks, "fig-ranks") if ranks is not None
            else note("No group has two or more measured runs.")]),
        Section("runs", f"Runs ({len(runs)})", [
            table_html(columns, runs, table_id="runs-table", filterable=True)]),
    ]
    assumed = [{**entry, "ids": ", ".join(entry["ids"])} for entry in assumption_counts(runs)]
    if assumed:  # what the model filled in or approximated (a trial saw it only in the JSON)
        sections.append(Section("assumptions", "Assumptions made for the runs", [
            table_html([Column("assumption", "assumption", text=True),
                        Column("runs", "runs", fmt_float(0)),
                        Column("ids", "run ids", text=True)], assumed,
                       table_id="assumptions-table", filterable=True)]))
    reason_columns = [Column("id", "run", text=True), Column("reason", "reason", text=True)]
    implausible = a.get("implausible_measurements", [])
    if implausible:
        sections.append(Section("implausible", "Measurements that look mis-entered", [
            note("Scored as given: fix the record or leave it out with --exclude."),
            table_html(reason_columns, implausible, table_id="implausible-table")]))
    skipped = document.get("skipped", [])
    if skipped:
        sections.append(Section("skipped", "Skipped records", [table_html(
            reason_columns, skipped, table_id="skipped-table")]))
    return sections


# --- sweep ----------------------------------------------------------------------------------
CURVES = (("loss", "optimal loss (nats/token)", ".4f"), ("sparsity", "S* = 1 − N_act/N_tot", ".3f"),
          ("split_factor", "G*", "d"), ("n_active", "N_act*", ".3s"),
          ("tokens", "D* (tokens)", ".3s"), ("mfu", "MFU (6·N_act, datasheet peak)", ".1%"))


# Half the smallest S* axis range of the sweep figure (sparsity is a fraction of one).
MIN_SPARSITY_HALF_RANGE = 0.01


def sweep_figure(document: dict[str, Any]) -> Any:
    """The allocation curves: loss, S*, G*, N_act, D and MFU against the swept budget."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    axis = document["axis"]
    points = sorted((p for p in document["points"] if p["optimum"] is not None),
                    key=lambda p: p[axis])
    x = [p[axis] for p in points]
    figure = make_subplots(rows=2, cols=3, subplot_titles=[c[1] for c in CURVES],
                           horizontal_spacing=0.08, vertical_spacing=0.16)
    splits = sorted({int(g) for p in points for g in p["best_per_split"]})
    for j, g in enumerate(splits):  # under the optimum: wide, coloured, dashed
        figure.add_trace(go.Scatter(
            x=x, y=[p["best_per_split"].get(str(g), {}).get("loss") for p in points],
            mode="lines", name=f"best with G = {g}",
            line={"dash": "dash", "width": 2.5, "color": SPLIT_COLOURS[j % len(SPLIT_COLOURS)]},
            hovertemplate=f"G={g}: %{{y:.4f}}<extra></extra>"), row=1, col=1)
    for i, (key, label, fmt) in enumerate(CURVES):
        figure.add_trace(go.Scatter(
            x=x, y=[p["optimum"][key] for p in points], mode="lines+markers",
            name="optimum" if i == 0 else label, line={"color": "black", "width": 1.5},
            marker={"size": 7}, showlegend=i == 0,
            hovertemplate=f"{axis}=%{{x}}<br>{label}=%{{y:{fmt}}}<extra></extra>"),
            row=i // 3 + 1, col=i % 3 + 1)
    sparsities = [p["optimum"]["sparsity"] for p in points]
    # at least ±0.01 around S*: a change of 0.0002 filled the panel as a steep climb
    middle = (max(sparsities) + min(sparsities)) / 2
    half = max((max(sparsities) - min(sparsities)) / 2 * 1.2, MIN_SPARSITY_HALF_RANGE)
    figure.update_yaxes(range=[middle - half, middle + half], row=1, col=2)
    figure.update_yaxes(tickformat=".1%", row=2, col=3)  # whole percents repeated on ticks
    figure.update_xaxes(title_text="training window (days)" if axis == "days"
                        else "cluster size (nodes)", row=2)
    if axis == "nodes":  # cluster sizes grow geometrically
        figure.update_xaxes(type="log")
    figure.update_layout(height=640, title=f"MOSAIC optimum against {axis}",
                         margin={"t": 70, "b": 50, "l": 60, "r": 20})
    return figure


def sweep_sections(document: dict[str, Any]) -> list[Section]:
    axis = document["axis"]
    rows = []
    for p in document["points"]:
        o = p["optimum"] or {}
        rows.append({axis: p[axis], "days": p.get("days"), "c_peak_flops": p["c_peak_flops"],
                     "stops_early": sweep_point_stops_early(p),
                     "gpu_hours": p["gpu_hours"], "cost_usd": p.get("cost_usd"),
                     "goodput": p.get("goodput"),
                     **{k: o.get(k) for k in (
                         "q", "layers", "d_model", "experts", "top_k", "split_factor",
                         "sparsity", "n_active", "n_total", "tokens", "mfu", "step_time_s",
                         "loss")},
                     "layout": layout_text(o.get("plan"), compact=True) if o else None,
                     "memory_gib": o["memory_bytes"] / GIB if o else None})
    def early(row: dict[str, Any]) -> str:  # counts the days the run trains only
        return f" {EARLY_STOP_MARK}" if row["stops_early"] else ""

    columns = [Column(axis, axis), Column("c_peak_flops", "C_peak", fmt_si("FLOP")),
               Column("gpu_hours", "GPU-hours", fmt_float(0), mark=early), Column("q", "q"),
               Column("layers", "L"), Column("d_model", "d"), Column("experts", "E"),
               Column("top_k", "K"), Column("split_factor", "G*"),
               Column("sparsity", "S*", fmt_float(4)), Column("n_active", "N_act", fmt_si()),
               Column("n_total", "N_tot", fmt_si()), Column("tokens", "D", fmt_si()),
               Column("mfu", "MFU", fmt_percent(1)), Column("layout", "layout"),
               Column("step_time_s", "step s", fmt_float(3)),
               Column("memory_gib", "GiB per GPU", fmt_float(1)),
               Column("loss", "loss", fmt_float(5))]
    space = document["search_space"]
    if not is_ladder(space):  # a backbone's variants: q = 0 for all, L and d name them
        columns = [c for c in columns if c.key != "q"]
    e = document["envelope"]
    budget = e.get("dollar_budget")
    if budget is not None:  # an equal-cost node sweep: each node count its own window
        columns.insert(1, Column("days", "days", fmt_float(2)))
    if len({row["goodput"] for row in rows}) > 1:  # Young-Daly: it falls with the nodes
        at = [c.key for c in columns].index("gpu_hours") + 1
        columns.insert(at, Column("goodput", "goodput", fmt_float(3)))
    if "price_usd_per_gpu_hour" in document:  # as the terminal table (a trial missed it)
        at = [c.key for c in columns].index("gpu_hours") + 1
        columns.insert(at, Column("cost_usd", "cost USD", fmt_float(0), mark=early))
    # the profile the points were predicted with, named as in the terminal (a trial)
    calibration = (f", calibration {document['calibration']['name']}"
                   if isinstance(document.get("calibration"), dict) else "")
    fixed = sweep_fixed_text(document)  # as the terminal table's title names it
    flags = sweep_extrapolation_rows(document)
    return [
        Section("curves", "Allocation curves", [
            note(f"Fixed: {fixed}, batch {e['global_batch']} × {e['seq_len']}, "
                 f"{precision_text(e)}, software stack {stack_text(e)}{calibration} (paper "
                 "Sec. 7.4, "
                 "Fig. 11). Black: the optimum; dashed: the best configuration per split "
                 "factor G (the optimum's own G runs under the black line)."),
            *([note("The loss law is extrapolating beyond its fitted data range:"),
               key_value_html(flags, table_id="extrapolation-table")] if flags else []),
            figure_html(sweep_figure(document), "fig-sweep")]),
        Section("table", "Optimum per budget", [
            table_html(columns, rows, table_id="sweep-table"),
            *(note(line) for line in sweep_cost_notes(document))]),
        Section("space", "Search space", [key_value_html(
            # the backbone as the plan page says it, not the model's dictionary printed
            [(k, grid_template_text(space) if k == "backbone"
              else f"{v:.4g}" if k.startswith("max_") else str(v))
             for k, v in space.items()]
            + ([("layout search", layout_limits_text(document["layout_limits"],
                                                     only_narrowed=False))]
               if "layout_limits" in document else []),
            table_id="space-table")]),
    ]
