"""The plan report: frontier, candidates, chosen layout, uncertainty, cost, assumptions.

Reads the document of `mosaic plan --json` (``mosaic.report.plan_report.plan_document`` plus
the analysis blocks and ``documents.plan_report_blocks``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mosaic.law.extrapolation import extrapolation_rows
from mosaic.law.law import provenance_caveats
from mosaic.plan.analysis import frontier_series
from mosaic.report.html.breakdown import (
    layout_label,
    memory_breakdown_figure,
    step_breakdown_figure,
)
from mosaic.report.html.page import (
    Column,
    Section,
    figure_html,
    fmt_float,
    fmt_percent,
    fmt_si,
    key_value_html,
    note,
    row_html,
    table_html,
)
from mosaic.report.plan_report import (
    GEOMETRY_AXES,
    budget_train_days,
    cheapest_within_window_row,
    cost_text,
    geometry_label,
    grid_template_text,
    is_ladder,
    layout_limits_text,
    loss_gap_text,
    model_limits_text,
    optimizer_text,
    pick_deliverable_text,
    precision_text,
    sampled_uncertainties,
)
from mosaic.units import GIB

# the loss axis of every plan figure, with its unit
LOSS_AXIS_TITLE = "predicted loss (nats/token)"


SPLIT_COLOURS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#B279A2", "#9D755D")

CANDIDATE_COLUMNS = [
    Column("rank", "#"), Column("q", "q"), Column("layers", "L"), Column("d_model", "d"),
    Column("experts", "E"), Column("top_k", "K"),
    Column("split_factor", "G"), Column("sparsity", "S", fmt_float(4)),
    Column("n_active", "N_act", fmt_si()), Column("n_total", "N_tot", fmt_si()),
    Column("tokens", "tokens D", fmt_si()), Column("tpp", "D/N_act", fmt_float(1)),
    Column("mfu", "MFU", fmt_percent(1)), Column("step_time_s", "step s", fmt_float(3)),
    Column("memory_gib", "GiB/GPU", fmt_float(1)), Column("loss", "loss", fmt_float(5)),
    Column("layout", "layout", text=True),
]
UNCERTAINTY_COLUMNS = [
    Column("p_optimal", "P(optimal)", fmt_percent(1)),
    Column("loss_low", "loss low", fmt_float(5)), Column("loss_high", "loss high", fmt_float(5)),
    Column("expected_regret", "E[regret]", fmt_float(5)),
]


# a searched batch (`plan --global-batch auto|MIN:MAX`): each candidate's own batch, as the
# terminal's ranking shows it (its B column, before MFU)
BATCH_COLUMN = Column("global_batch", "B", str)


def batch_searched(document: dict[str, Any]) -> bool:
    """Whether the plan searched its global batch (its ``batch`` block, plan/batch.py)."""
    return (document.get("batch") or {}).get("mode") == "search"


def _batch_text(document: dict[str, Any]) -> str:
    """The batch row of the assumptions: the batch, and for a searched one the candidates
    and the rule that bounded them (a trial's searched plan read as a fixed one)."""
    e = document["envelope"]
    text = f"{e['global_batch']} sequences × {e['seq_len']} tokens"
    if batch_searched(document):
        batch = document["batch"]
        candidates = batch["candidates"]
        text += (f" (the optimum's; searched among {candidates[0]}..{candidates[-1]} "
                 f"sequences under the {batch['rule']['name']} rule: "
                 f"{batch['rule']['source']})")
    return text


def _geometry_key(candidate: dict[str, Any]) -> tuple[Any, ...]:
    """What tells two candidates apart: a backbone grid's variants all have q = 0 and differ
    in depth and width (a trial: nine of them shared one uncertainty row, the last's)."""
    return tuple(candidate.get(axis) for axis in GEOMETRY_AXES)


def _candidate_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    uncertainty = {_geometry_key(u): u for u in document.get("uncertainty_candidates", [])}
    rows = []
    for rank, c in enumerate(document["candidates"], start=1):
        row = {**c, "rank": rank, "memory_gib": c["memory_bytes"] / GIB,
               "layout": layout_label(c["plan"]) if c.get("plan") else ""}
        u = uncertainty.get(_geometry_key(c))
        if u is not None:
            row.update(p_optimal=u["p_optimal"], loss_low=u["loss_interval"][0],
                       loss_high=u["loss_interval"][1], expected_regret=u["expected_regret"])
        rows.append(row)
    return rows


# Line dashes of the top-k values in the frontier figure, and the marker that tells a
# seventh K from the first (a trial's K = 1 and K = 8 drew the same solid line)
K_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
K_EXTRA_SYMBOLS = ("triangle-up", "star", "cross")


def k_line_style(index: int, symbol: str) -> tuple[str, str]:
    """(dash, marker symbol) of the frontier's ``index``-th K line: the view's own symbol
    for the first six dashes, then another symbol for each further round of them."""
    lap = index // len(K_DASHES)
    return (K_DASHES[index % len(K_DASHES)],
            symbol if lap == 0 else K_EXTRA_SYMBOLS[(lap - 1) % len(K_EXTRA_SYMBOLS)])


OPTIMUM_MARKER_PX, PICK_MARKER_PX = 18, 28  # the frontier's star and, around it, diamond


def frontier_figure(document: dict[str, Any]) -> Any:
    """Paper Fig. 1: L*(S) in the model-FLOPs view and under the cluster, S_feas_max and
    both optima marked."""
    import plotly.graph_objects as go

    f = document["sparsity_frontier"]
    comparison = document["model_flops_comparison"]
    optimum = document["optimum"]
    ek = [f"E={e}, K={k}" for e, k in zip(f["experts"], f["top_k"], strict=True)]
    top_k = np.array(f["top_k"])
    figure = go.Figure()
    views = (("model_flops", f"model-FLOPs view (C_model = {f['c_model_flops']:.3g} FLOP)",
              "#E45756", "circle"),
             ("hardware", "cluster view (tokens the window delivers)", "#54A24B", "square"))
    for view, name, colour, symbol in views:
        x = np.array([np.nan if s is None else s for s in f[f"{view}_sparsity"]], dtype=float)
        # the model-FLOPs view one curve, the cluster view one line per K
        for i, (k, order) in enumerate(frontier_series(view, top_k, x)):
            # the view's colour, a dash per K; grouped under the view's title in the legend
            dash, k_symbol = k_line_style(i, symbol)
            figure.add_trace(go.Scatter(
                x=x[order].tolist(), y=[f[f"{view}_loss"][j] for j in order],
                mode="lines+markers", name=f"K = {k}" if k else "every (E, K)",
                legendgroup=view,
                legendgrouptitle_text=name if i == 0 else None,
                line={"color": colour, "dash": dash},
                marker={"symbol": k_symbol}, text=[ek[j] for j in order],
                hovertemplate="%{text}<br>S=%{x:.4f}<br>loss=%{y:.5f}<extra></extra>"))
    undeliverable = [i for i, ok in enumerate(f["delivers_c_model"]) if not ok]
    if undeliverable:
        figure.add_trace(go.Scatter(
            x=[f["model_flops_sparsity"][i] for i in undeliverable],
            y=[f["model_flops_loss"][i] for i in undeliverable], mode="markers",
            marker={"symbol": "x", "size": 9, "color": "black"}, legendgroup="marks",
            legendgrouptitle_text="marks",
            name="C_model not deliverable in the window", hoverinfo="skip"))
    geometry = comparison["model_flops_geometry"]
    flops_loss = min(f["model_flops_loss"])
    figure.add_trace(go.Scatter(
        x=[geometry["sparsity"]], y=[flops_loss], mode="markers",
        # larger than the star drawn over it: where the pick is the optimum (a loss gap of
        # 0) the 14 px diamond hid under the 18 px star and its legend entry had no mark
        marker={"symbol": "diamond", "size": PICK_MARKER_PX, "color": "#E45756",
                "line": {"color": "black", "width": 1}}, legendgroup="marks",
        legendgrouptitle_text=None if undeliverable else "marks",
        # the grid geometry nearest the Eq. 16 optimum, as the terminal names it ("model-FLOPs
        # pick on the grid"; a trial read this legend's S as the continuous S*)
        name=f"model-FLOPs pick on the grid (S = {geometry['sparsity']:.3f})",
        hovertemplate="model-FLOPs pick on the grid<br>S=%{x:.4f}<br>loss=%{y:.5f}"
                      "<extra></extra>"))
    figure.add_trace(go.Scatter(
        x=[optimum["sparsity"]], y=[optimum["loss"]], mode="markers",
        marker={"symbol": "star", "size": OPTIMUM_MARKER_PX, "color": "gold",
                "line": {"color": "black", "width": 1}}, legendgroup="marks",
        name=f"cluster optimum (S = {optimum['sparsity']:.3f})",
        hovertemplate="MOSAIC optimum<br>S=%{x:.4f}<br>loss=%{y:.5f}<extra></extra>"))
    if comparison.get("s_feas_max") is not None:
        figure.add_vline(x=comparison["s_feas_max"], line_dash="dot", line_color="gray",
                         annotation_text=f"S_feas_max = {comparison['s_feas_max']:.3f}",
                         annotation_position="top left")
    figure.update_layout(
        title=f"Loss vs sparsity at G = {f['split_factor']}",
        xaxis_title="sparsity S = 1 − N_act/N_tot", yaxis_title=LOSS_AXIS_TITLE,
        height=520, margin={"t": 50, "b": 50, "l": 60, "r": 20},
        legend={"x": 1.02, "y": 1, "xanchor": "left", "yanchor": "top",
                "tracegroupgap": 10, "groupclick": "toggleitem"})
    return figure


def candidates_figure(rows: list[dict[str, Any]]) -> Any:
    """Loss vs sparsity of every trainable candidate, coloured by G (paper Fig. 10 view)."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for i, g in enumerate(sorted({r["split_factor"] for r in rows})):
        pick = [r for r in rows if r["split_factor"] == g]
        figure.add_trace(go.Scatter(
            x=[r["sparsity"] for r in pick], y=[r["loss"] for r in pick], mode="markers",
            name=f"G = {g}", marker={"color": SPLIT_COLOURS[i % len(SPLIT_COLOURS)], "size": 8},
            customdata=[[r["rank"], geometry_label(r), r["mfu"], r["tokens"]] for r in pick],
            hovertemplate="#%{customdata[0]} %{customdata[1]}<br>S=%{x:.4f} loss=%{y:.5f}<br>"
                          "MFU=%{customdata[2]:.1%} D=%{customdata[3]:.3g}<extra></extra>"))
    if rows:
        figure.add_trace(go.Scatter(
            x=[rows[0]["sparsity"]], y=[rows[0]["loss"]], mode="markers", name="optimum",
            marker={"symbol": "star", "size": 18, "color": "gold",
                    "line": {"color": "black", "width": 1}}, hoverinfo="skip"))
    figure.update_layout(title="Every trainable candidate", xaxis_title="sparsity S",
                         yaxis_title=LOSS_AXIS_TITLE, height=470,
                         margin={"t": 50, "b": 50, "l": 60, "r": 20})
    return figure


def uncertainty_figure(rows: list[dict[str, Any]], level: float, what: str,
                       top: int = 15) -> Any:
    """Loss intervals and P(optimal) of the best candidates over the samples of ``what``
    (the uncertainties the plan propagated: the law's, the throughput's, or both)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pick = [r for r in rows if "p_optimal" in r][:top]
    # ticks name the rank alone, as the ranked table does, and the hover the geometry: the
    # rotated "#3 q=16 E=192 K=1 G=4" ticks ran under the neighbouring panel (a trial)
    names = [f"#{r['rank']}" for r in pick]
    geometries = [geometry_label(r) for r in pick]
    figure = make_subplots(rows=1, cols=2, subplot_titles=(
        f"predicted loss with {level:.0%} interval", f"P(optimal) over {what} samples"))
    figure.add_trace(go.Scatter(
        x=names, y=[r["loss"] for r in pick], mode="markers", name="point law",
        customdata=geometries,
        hovertemplate="%{x} %{customdata}<br>loss %{y:.5f}<extra></extra>",
        error_y={"type": "data", "symmetric": False,
                 "array": [r["loss_high"] - r["loss"] for r in pick],
                 "arrayminus": [r["loss"] - r["loss_low"] for r in pick]}), row=1, col=1)
    figure.add_trace(go.Bar(x=names, y=[r["p_optimal"] for r in pick], name="P(optimal)",
                            customdata=geometries,
                            hovertemplate="%{x} %{customdata}<br>P(optimal) %{y:.1%}"
                                          "<extra></extra>",
                            marker_color="#4C78A8"), row=1, col=2)
    # each panel's quantity and unit on its axis (the titles above them name the panels;
    # a reader saw two bare axes)
    figure.update_yaxes(title_text=LOSS_AXIS_TITLE, row=1, col=1)
    figure.update_yaxes(title_text="P(optimal), share of samples", tickformat=".0%",
                        row=1, col=2)
    # short, in two lines: the long title under each panel ran into its neighbour's at 800 px
    figure.update_xaxes(title_text="candidate rank<br>(hover: geometry)")
    figure.update_layout(height=445, showlegend=False, margin={"t": 50, "b": 75})
    return figure


def goodput_text(goodput: dict[str, Any]) -> str:
    """{'model': 'constant', 'goodput': 1.0} -> '100.0% (constant)'; a model's other fields
    follow its name (it read "constant: goodput 1", a trial)."""
    value = goodput.get("goodput")
    rest = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in goodput.items() if k not in ("model", "goodput"))
    model = str(goodput.get("model", "?")) + (f": {rest}" if rest else "")
    shown = f"{value:.1%}" if isinstance(value, int | float) else "?"
    return f"{shown} ({model})"


def _budget_text(budget: dict[str, Any] | None) -> str:
    """Where a dollar budget set the window (`mosaic plan --budget-usd`), or a shorter
    `--days` beside it did."""
    if not budget:
        return ""
    spent = (f"{budget['usd']:,.0f} USD at {budget['price_usd_per_gpu_hour']:g} USD per "
             "GPU-hour")
    if budget.get("binds") == "days":
        return (f" (set by --days {budget['max_days']:g}, shorter than the "
                f"{budget['budget_days']:.3g} days the budget of {spent} buys)")
    return f" (set by the budget: {spent})"


def _repeated_data_rows(optimum: dict[str, Any], space: dict[str, Any]
                        ) -> list[tuple[str, str]]:
    """The epochs over the unique data and the effective tokens D' the loss is computed
    from, where the plan has a unique-data limit (`--unique-tokens`)."""
    if "epochs" not in optimum:
        return []
    unique = space.get("unique_tokens")
    of = f" of the {fmt_si()(unique)} unique tokens" if unique else " of the unique data"
    return [("repeated data", f"{optimum['epochs']:.2f} epochs{of}: the loss is computed from "
                              f"D' = {fmt_si()(optimum['effective_tokens'])} effective tokens")]


def _summary(document: dict[str, Any]) -> list[tuple[str, Any]]:
    o = document["optimum"]
    e = document["envelope"]
    rows = [
        ("cluster", f"{e['nodes']} × {e['system']} ({e['n_devices']} × {e['gpu']})"),
        *([("network", e["network"])] if "network" in e else []),  # (older documents lack it)
        ("window", f"{e['days']:g} days, goodput {goodput_text(e['goodput'])}"
                   + _budget_text(e.get("dollar_budget"))),
        ("C_peak", f"{document['c_peak_flops']:.3g} FLOP"),
    ]
    if o is not None:
        rows += [
            ("optimum geometry", geometry_label(o) + (
                f" ({o['layers']} layers, d={o['d_model']})" if o["q"] else "")),
            ("parameters", f"N_act {fmt_si()(o['n_active'])}, N_tot {fmt_si()(o['n_total'])}, "
                           f"S = {o['sparsity']:.4f}"),
            ("tokens", f"{fmt_si()(o['tokens'])} ({o['tpp']:.1f} per active parameter"
                       f"{', tpp_max cap' if o['tpp_capped'] else ''})"),
            *_repeated_data_rows(o, document.get("search_space") or {}),
            *([("training time", f"{o['train_days']:.1f} of the {e['days']:g} days: D is held "
                                 "at the tpp_max cap, so the run ends early; GPU-hours and "
                                 "cost count these days")]
              if o["tpp_capped"] and "train_days" in o else []),
            ("predicted loss", f"{o['loss']:.5f} nats/token"),
            *extrapolation_rows(o.get("extrapolation")),
            ("MFU / step", f"{o['mfu']:.2%}, {o['step_time_s']:.3f} s per step, "
                           f"{o['memory_bytes'] / GIB:.1f} GiB per GPU"),
            ("layout", layout_label(o["plan"])),
            # as the terminal's optimum table says a searched batch
            *([("global batch (bound)", f"{o['global_batch']} sequences (bound "
                                        f"{o['batch_bound_tokens']:.3g} tokens per step)")]
              if "batch_bound_tokens" in o else []),
            *(tuple(row) for row in o.get("coverage_summary", [])),
        ]
    comparison = document.get("model_flops_comparison")
    if comparison:
        g = comparison["model_flops_geometry"]
        gap = comparison.get("loss_gap_nats")
        rows += [("model-FLOPs pick", f"{geometry_label(g)}, S = {g['sparsity']:.4f}; "
                  "deliverable in the "
                  f"window: {pick_deliverable_text(g, comparison['c_model_flops'])}"),
                 ("loss gap (model-FLOPs pick − optimum)",
                  f"{gap:.4f} nats" if gap is not None else loss_gap_text(gap, g))]
    return rows


def _cost(document: dict[str, Any]) -> list[tuple[str, Any]]:
    e = document["envelope"]
    hours, priced = cost_text(document, e["days"])  # as the terminal's envelope rows
    rows = [("GPU-hours", hours), ("goodput model", goodput_text(e["goodput"]))]
    if priced is not None:
        rows.append(("cost (USD)", priced))
    else:
        # the CLI's flag and the studio's field (a trial's studio report named the flag only)
        rows.append(("cost", "not computed: no price per GPU-hour was given "
                             "(--price-per-gpu-hour, or the studio's price field)"))
    cheapest = document.get("cheapest")
    if cheapest and cheapest.get("choice"):
        c = cheapest["choice"]
        # as the terminal's table: the budget, its cost and the loss it reaches (the page
        # gave the budget alone, to 6 digits, where the terminal said 4 and the cost)
        cost = ("" if c.get("cost_usd") is None else f", {c['cost_usd']:,.0f} USD")
        # a run that stops early at tpp_max costs the days it trains, as the plan's own
        trained = budget_train_days(c)
        early = (f" (of the {trained:.3g} days it trains)" if trained < c["days"] else "")
        rows.append((f"cheapest budget reaching loss {cheapest['target_loss']:g}",
                     f"{c['nodes']} nodes × {c['days']:.4g} days, {c['gpu_hours']:,.0f} "
                     f"GPU-hours{cost}{early}; optimum loss {c['loss']:.4f} at "
                     f"{geometry_label(c['optimum'])} S={c['optimum']['sparsity']:.4f}"))
        within = cheapest_within_window_row(cheapest)
        rows += [] if within is None else [within]
    return rows


def _assumptions(document: dict[str, Any]) -> list[tuple[str, Any]]:
    e = document["envelope"]
    s = document["search_space"]
    rows = [
        ("batch", f"{_batch_text(document)}, {precision_text(e)}"),
        ("software stack", stack_text(e)),
        ("optimizer", optimizer_text(e)),
        ("usable memory", _headroom_text(e.get("memory_headroom"))),
        ("device", f"{e['gpu']}: peak {e['peak_flops_per_s_per_device'] / 1e12:.0f} TFLOP/s, "
                   f"{e['hbm_bytes_per_device'] / GIB:.1f} GiB HBM (hardware catalog)"),
        ("search space", (f"q {s['q']}" if "q" in s else
                          f"backbone ({s['backbone']['attention']} attention, vocab "
                          f"{s['backbone']['vocab']}): L {s['layers']}, d {s['d_model']}")
                         + f", E {s['experts']}, K {s['top_k']}, "
                         f"G {s['split_factor']}, S ≥ {s['s_min']}, tokens per active "
                         f"parameter {s['tpp'][0]:g}–{s['tpp'][1]:g}"
                         + (f"; limits: {model_limits_text(s)}" if model_limits_text(s) else "")),
        ("geometries", grid_template_text(s)),
    ]
    a = document.get("assumptions")
    if a:
        law = a["law"]
        coefficients = ", ".join(f"{k}={v:.4g}" for k, v in law["coefficients"].items())
        source = law["provenance"].get("source") or law["provenance"]
        caveats = provenance_caveats(law["provenance"])
        rows += [
            ("scaling law", f"{law['form']}: {coefficients}"),
            ("law source", str(source)),
            *([("law fit caveats", "; ".join(caveats))] if caveats else []),
            ("calibration", f"{a['calibration']['name']}: {a['calibration']['provenance']}"),
            ("layout search", layout_limits_text(a["layout_limits"], only_narrowed=False)),
            ("FLOP convention", a["flop_convention"]),
            ("token budget", a["token_budget"]),
            ("MFU peak", a["mfu_peak"]),
            *(("model", line) for line in a.get("model", [])),
        ]
    return rows


VERSUS_COLUMNS = [
    Column("label", "calibration / stack", text=True), Column("q", "q"),
    Column("experts", "E"), Column("top_k", "K"), Column("split_factor", "G"),
    Column("n_active", "N_act", fmt_si()), Column("sparsity", "S", fmt_float(3)),
    Column("tokens", "tokens D", fmt_si()), Column("mfu", "MFU", fmt_percent(1)),
    Column("loss", "loss", fmt_float(4)), Column("layout", "layout", text=True),
]


def _versus_section(versus: dict[str, Any], ladder: bool) -> Section:
    """`plan --versus`: the optimum under each calibration and why they differ, as the
    terminal's table (cli/plan_render.print_versus) gives them, one clause a line; a
    backbone's variants named by depth and width instead of q."""
    columns = list(VERSUS_COLUMNS)
    if not ladder:
        at = [c.key for c in columns].index("q")
        columns[at:at + 1] = [Column("layers", "L"), Column("d_model", "d")]
    rows = []
    for entry in versus["plans"]:
        best = entry["optimum"] or {}  # None: that stack trains nothing here
        rows.append({**{c.key: best.get(c.key) for c in columns},
                     "label": f"{entry['calibration']} / {entry['stack']}",
                     "layout": layout_label(best["plan"]) if best.get("plan") else None})
    first, *rest = versus["why"].split("; ")
    return Section("versus", "The optimum under each stack", [
        table_html(columns, rows, table_id="versus-table", sortable=False),
        note(f"why: {first}" + (";" if rest else "")),
        *(note(clause + (";" if index < len(rest) - 1 else ""))
          for index, clause in enumerate(rest))])


def plan_sections(document: dict[str, Any]) -> list[Section]:
    rows = _candidate_rows(document)
    has_uncertainty = any("p_optimal" in r for r in rows)
    sections = [Section("summary", "Plan", [key_value_html(_summary(document),
                                                           table_id="plan-summary")])]
    frontier = Section("frontier", "Frontier: model-FLOPs vs cluster optimum")
    if "sparsity_frontier" in document and document.get("optimum"):
        frontier.body.append(note(
            "Red: the loss each (E, K) reaches at the fixed model-FLOPs budget C_model "
            "(boundary-seeking in S, paper Eq. 16); green: the loss with the tokens the "
            "cluster delivers in the window (Eq. 25). Beyond S_feas_max, the largest S at "
            "this G whose layouts deliver C_model with any q (not only the q plotted for "
            "each E, K), the model-FLOPs prescription is not deliverable (Eq. 3)."))
        # full width: the legend sits beside the axes (below them it covered the x title)
        frontier.body.append(figure_html(frontier_figure(document), "fig-frontier"))
        frontier.body.append(figure_html(candidates_figure(rows), "fig-candidates"))
    else:
        frontier.body.append(note("No frontier in this document (no trainable optimum, or "
                                  "written by a mosaic without the report blocks)."))
    sections.append(frontier)
    # a backbone's variants all have q = 0: their L and d columns name them (a trial read
    # a column of zeros)
    ladder = is_ladder(document.get("search_space") or {})
    columns = [c for c in CANDIDATE_COLUMNS if ladder or c.key != "q"]
    if batch_searched(document):
        columns.insert([c.key for c in columns].index("mfu"), BATCH_COLUMN)
    columns += UNCERTAINTY_COLUMNS if has_uncertainty else []
    u = document.get("uncertainty") or {}
    interval_note = (
        f" Loss low and high: the {u.get('level', 0.9):.0%} interval of the "
        f"{sampled_uncertainties(u.get('sources'))} uncertainty (section Uncertainty); a "
        "candidate held at the tokens-per-parameter cap gains no tokens from a faster "
        "cluster, so throughput alone leaves it no width on the low side."
        if has_uncertainty else "")  # a trial read equal low and high as an error
    sections.append(Section("candidates", f"Ranked candidates ({len(rows)} trainable)", [
        note("Click a header to sort; the optimum is highlighted." + interval_note),
        table_html(columns, rows, table_id="candidates-table", filterable=True,
                   highlight=lambda r: r["rank"] == 1)]))
    step = document.get("optimum_step")
    chosen = Section("layout", "Chosen layout: step time and memory")
    if step:
        name = layout_label(step["plan"])
        chosen.body.append(note(
            f"{name}: {step['step_time_s']:.3f} s per step, MFU {step['mfu']:.2%}. "
            "Communication bars are the exposed time per parallel axis; overlapped "
            "communication is hidden behind compute and costs no time in the model."))
        if "pipeline_layout" in step["plan"]:
            chosen.body.append(note("Pipeline layout (Megatron --pipeline-model-parallel-layout): "
                                    f"{step['plan']['pipeline_layout']}"))
        chosen.body.append(row_html(
            figure_html(step_breakdown_figure([(name, step["breakdown_s"])], step["labels"]),
                        "fig-step"),
            figure_html(memory_breakdown_figure(
                [(name, step["memory_breakdown_bytes"])], step["capacity_bytes"],
                usable_fraction=(document["envelope"].get("memory_headroom") or {}).get(
                    "usable_memory_fraction")), "fig-memory")))
    else:
        chosen.body.append(note("No breakdown in this document (no trainable optimum)."))
    sections.append(chosen)
    if "versus" in document:  # `plan --versus`: the page left out the terminal's table
        sections.append(_versus_section(document["versus"], ladder))
    uncertainty = Section("uncertainty", "Uncertainty")
    if has_uncertainty:
        uncertainty.body.append(note(
            f"{u.get('samples', '?')} samples; robust choice: "
            f"{u.get('robust_choice_rule', '')}. Propagated: "
            + "; ".join(u.get("sources", ["law coefficient samples"])) + "."))
        uncertainty.body.append(figure_html(uncertainty_figure(
            rows, u.get("level", 0.9), sampled_uncertainties(u.get("sources"))),
            "fig-uncertainty"))
        capped = [r for r in rows if r.get("tpp_capped") and "loss_low" in r]
        if capped:  # why some intervals have no width (a trial asked)
            uncertainty.body.append(note(
                f"{len(capped)} of these candidates train the tokens-per-parameter cap "
                "(D = tpp_max·N_act, D/N_act in the table) rather than all the window "
                "allows: a faster cluster adds no tokens, but a slower one trains fewer once "
                "its budget falls below the cap, so the throughput spread widens their "
                "interval on the high-loss side only (law samples widen both sides); a "
                "candidate whose budget is close to its cap is no safer than the others."))
        for key, label in (("robust_choice", "robust choice"),
                           ("minimax_regret_choice", "minimax-regret choice")):
            c = u.get(key)
            if c:
                uncertainty.body.append(note(
                    f"{label}: {geometry_label(c)}, P(optimal) {c['p_optimal']:.1%}"))
    else:
        uncertainty.body.append(note("Not computed: the calibration records no residuals; "
                                     "pass --bootstrap-samples FILE to `mosaic plan` for "
                                     "P(optimal) and loss intervals under the law's "
                                     "uncertainty."))
    sections.append(uncertainty)
    sections.append(Section("cost", "Cost and goodput",
                            [key_value_html(_cost(document), table_id="cost-table")]))
    infeasible = document.get("infeasible_summary", {})
    sections.append(Section("infeasible", "Geometries not trainable", [
        key_value_html([(k, f"{v} geometries") for k, v in infeasible.items()] or
                       [("none", "every geometry is trainable")], table_id="infeasible-table")]))
    sections.append(Section("assumptions", "Envelope and assumptions",
                            [key_value_html(_assumptions(document),
                                            table_id="assumptions-table")]))
    return sections


def plan_title(document: dict[str, Any]) -> tuple[str, str]:
    e = document["envelope"]
    return ("mosaic plan", f"{e['nodes']} × {e['system']}, {e['days']:g} days — "
            f"{document['counts']['geometries']} geometries, "
            f"{document['counts']['trainable']} trainable; "
            f"{document['counts']['plans_evaluated']:,} layouts evaluated")


def stack_text(envelope: dict[str, Any]) -> str:
    """A plan's or sweep's software stack as the CLI's envelope states it: stack and
    release, MoE dispatcher, and the release settings it carries (older files lack them)."""
    stack = envelope.get("stack")
    if stack is None:
        return "not recorded in this file"
    release = envelope.get("stack_version")
    text = stack + (f" {release}" if release else "")
    if envelope.get("dispatcher") and not _offers_ep1_only(stack):
        text += f", MoE dispatcher {envelope['dispatcher']}"
    switches = [name for name in ("ep_overlap", "full_iteration_cuda_graph", "fp8_param_gather",
                                  "fp4_param_gather") if envelope.get(name)]
    return text + (f"; {', '.join(switches)}" if switches else "")


def _offers_ep1_only(stack: str) -> bool:
    """The stack offers expert parallelism of 1 only (trait ``layout_ep``), so no searched
    layout dispatches tokens: the terminal's envelope says 'none' there (a trial read
    "MoE dispatcher alltoall" on hf-transformers); an unknown name keeps the file's text."""
    from mosaic.errors import MosaicInputError
    from mosaic.stacks import degree_one_only, get_stack

    try:
        return degree_one_only(get_stack(stack).layout_ep)
    except MosaicInputError:
        return False


def _headroom_text(headroom: dict[str, Any] | None) -> str:
    """The memory headroom policy of the plan (docs/plan.md, "Memory headroom")."""
    if not headroom:
        return "the whole device"
    return (f"{headroom['usable_memory_bytes'] / GIB:.1f} GiB per GPU "
            f"({headroom['usable_memory_fraction']:.0%}; {headroom['source']})")
