"""Step-time and memory breakdowns as stacked bars (one bar per layout or job).

The terms are those of ``mosaic.perf.step_time.StepPrediction.breakdown_s`` (they sum to
the step time exactly); communication terms are the *exposed* time the model charges on
the critical path (paper Sec. 5.4-5.5: overlapped communication is hidden behind compute
and is not a term), so each parallel axis shows its exposed share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from mosaic.perf.memory import COMPONENT_MEANINGS
from mosaic.perf.terms import term_meaning
from mosaic.report.plan_report import layout_text
from mosaic.units import GIB

# term -> group; the group names the parallel axis for communication (exposed time).
TERM_GROUPS: dict[str, str] = {
    "compute_attention_gemm": "compute",
    "compute_attention_core": "compute",
    "compute_mlp": "compute",
    "compute_experts": "compute",
    "compute_shared_expert": "compute",
    "compute_router": "compute",
    "compute_elementwise": "compute",
    "compute_quantise_cast": "compute",
    "compute_elementwise_unfused": "compute",
    "compute_elementwise_extra": "compute",
    # a hybrid model's Mamba-2 / DeltaNet mixers (a trial found a third of Nemotron-H's
    # step drawn as "other")
    "compute_ssm_gemm": "compute",
    "compute_ssm_scan": "compute",
    "compute_recompute": "recompute",
    "routing_imbalance": "EP (routing imbalance)",
    "expert_load_imbalance": "EP (routing imbalance)",
    "tp_all_gather": "TP comm, exposed",
    "tp_reduce_scatter": "TP comm, exposed",
    "tp_all_reduce": "TP comm, exposed",
    "ep_all_to_all": "EP comm, exposed",
    "cp_send_recv": "CP comm, exposed",
    "pp_send_recv": "PP comm, exposed",
    "activation_offload": "host copies (offload), exposed",
    "pipeline_bubble": "PP bubble",
    "dp_all_reduce": "DP comm, exposed",
    "dp_reduce_scatter": "DP comm, exposed",
    "dp_all_gather": "DP comm, exposed",
    "fsdp_all_gather": "DP comm, exposed",
    "fsdp_reduce_scatter": "DP comm, exposed",
    "dp_overlap_contention": "DP comm, exposed",
    "moe_host_sync": "host / launch",
    "dispatch_floor": "host / launch",
    "vocab_stage": "embedding + LM head",
    "optimizer": "optimizer",
    "calibration": "calibration (χ_sys, stack)",
}
GROUP_COLOURS: dict[str, str] = {
    "compute": "#4C78A8",
    "recompute": "#9ECAE9",
    "EP (routing imbalance)": "#B279A2",
    "TP comm, exposed": "#F58518",
    "EP comm, exposed": "#E45756",
    "CP comm, exposed": "#FF9DA6",
    "PP comm, exposed": "#72B7B2",
    "PP bubble": "#54A24B",
    "DP comm, exposed": "#EECA3B",
    "host copies (offload), exposed": "#8C6D31",
    "host / launch": "#9D755D",
    "embedding + LM head": "#BAB0AC",
    "optimizer": "#79706E",
    "calibration (χ_sys, stack)": "#D6D6D6",
    "other": "#333333",
}


_FRAME: dict[str, Any] = {"margin": {"t": 50, "b": 40, "l": 60, "r": 20}, "height": 430}
# a bar legend entry's height in plotly's default font, what the figure title, the legend
# title and the margins take, and the height per character of a bar name slanted at 45°
LEGEND_ROW_PX, LEGEND_BASE_PX, LABEL_LINE_PX = 30, 150, 16
# Characters per line of a bar's name under the axis: "pp16 vpp4 ep16 dp16 mb2 zero1
# ckpt=none" as three short lines stays level under its bar, where plotly slanted the long
# one under the neighbouring bars (a trial found them running into each other).
BAR_NAME_LINE_CHARS = 16


def _word_pieces(word: str) -> list[str]:
    """A word longer than ``BAR_NAME_LINE_CHARS`` cut after each '/', '_' or '-' (a file
    path, 'examples/deepseek_v3_h100.yaml'), the pieces joined again up to the line's
    length: a compare page's two paths ran into each other under their bars at 500 px."""
    if len(word) <= BAR_NAME_LINE_CHARS:
        return [word]
    pieces: list[str] = []
    for piece in re.split(r"(?<=[/_-])", word):
        if pieces and len(pieces[-1]) + len(piece) <= BAR_NAME_LINE_CHARS:
            pieces[-1] += piece
        elif piece:
            pieces.append(piece)
    return pieces


def bar_names(bars: Sequence[tuple[str, Any]]) -> list[str]:
    """Each bar's name broken at spaces into lines of at most ``BAR_NAME_LINE_CHARS``
    characters (plotly's ``<br>``); a longer word is cut after its '/', '_' or '-'
    (:func:`_word_pieces`), else keeps its own line."""
    names = []
    for name, _ in bars:
        lines: list[str] = []
        for piece in (piece for word in name.split() for piece in _word_pieces(word)):
            if lines and len(lines[-1]) + 1 + len(piece) <= BAR_NAME_LINE_CHARS:
                lines[-1] += f" {piece}"
            else:
                lines.append(piece)
        names.append("<br>".join(lines) or name)
    return names


def term_group(term: str) -> str:
    return TERM_GROUPS.get(term, "other")


def grouped_seconds(breakdown_s: Mapping[str, float]) -> dict[str, float]:
    """Seconds per group (communication per parallel axis), in ``GROUP_COLOURS`` order."""
    totals: dict[str, float] = {}
    for term, seconds in breakdown_s.items():
        group = term_group(term)
        totals[group] = totals.get(group, 0.0) + float(seconds)
    return {g: totals[g] for g in GROUP_COLOURS if g in totals}


def step_breakdown_figure(bars: Sequence[tuple[str, Mapping[str, float]]],
                          labels: Mapping[str, str] | None = None,
                          title: str = "") -> dict[str, Any]:
    """Stacked bar of step-time terms, one bar per (name, breakdown_s); terms coloured by
    group, hover shows seconds, share and (when given) the term's source label.

    Returned as a plotly figure dictionary (``data`` and ``layout``, plotly.js's JSON
    figure format: https://plotly.com/javascript/reference/): the studio sends it as it is
    and ``page.figure_html`` draws it, so a prediction's chart costs no figure objects.
    """
    names = bar_names(bars)
    terms = [t for t in dict.fromkeys(t for _, b in bars for t in b) if any(
        abs(float(b.get(t, 0.0))) > 0 for _, b in bars)]
    terms.sort(key=lambda t: list(GROUP_COLOURS).index(term_group(t)))
    totals = [sum(float(v) for v in b.values()) for _, b in bars]
    traces: list[dict[str, Any]] = []
    shown_groups: set[str] = set()
    for term in terms:
        group = term_group(term)
        values = [float(b.get(term, 0.0)) for _, b in bars]
        share = [v / t if t else 0.0 for v, t in zip(values, totals, strict=True)]
        source = (labels or {}).get(term, "")
        traces.append({
            "type": "bar", "x": names, "y": values, "name": group, "legendgroup": group,
            "showlegend": group not in shown_groups, "marker": {"color": GROUP_COLOURS[group]},
            # the legend lists the groups top down as they are stacked, as the memory chart
            # beside it lists its components (it read compute, the bottom segment, first)
            "legendrank": len(GROUP_COLOURS) - list(GROUP_COLOURS).index(group),
            "customdata": [[term, s, source, term_meaning(term)] for s in share],
            "hovertemplate": "%{customdata[0]}: %{y:.4f} s (%{customdata[1]:.1%})"
                             "<br>%{customdata[3]}<br>%{customdata[2]}<extra>%{x}</extra>"})
        shown_groups.add(group)
    # tall enough that the legend lists every group without scrolling (a trial found the
    # largest grey segment's entry, "embedding + LM head", scrolled out of view), plus the
    # lines of the bars' names under the axis, which take from the plot's height
    name_px = LABEL_LINE_PX * max((n.count("<br>") for n in names), default=0)
    height = max(_FRAME["height"],
                 LEGEND_BASE_PX + LEGEND_ROW_PX * len(shown_groups) + name_px)
    return {"data": traces, "layout": {
        "barmode": "relative", "title": {"text": title or "Step time"},
        "yaxis": {"title": {"text": "seconds per step"}},
        "legend": {"title": {"text": "term group"}},
        **_FRAME, "height": height}}


def memory_breakdown_figure(bars: Sequence[tuple[str, Mapping[str, float]]],
                            capacity_bytes: float | None = None,
                            title: str = "", usable_fraction: float | None = None,
                            bar_limits: Sequence[tuple[float, float | None]] | None = None
                            ) -> dict[str, Any]:
    """Stacked bar of per-GPU memory components (bytes in, GiB shown), capacity as a
    dotted line across the plot and, below it, the usable share feasibility is judged
    against (a plotly figure dictionary, as ``step_breakdown_figure``). ``bar_limits``
    (capacity bytes and usable fraction of each bar, for bars on different GPUs) draws
    each bar's own lines over that bar alone instead."""
    names = bar_names(bars)
    components = list(dict.fromkeys(c for _, b in bars for c in b))
    traces = [{"type": "bar", "x": names, "name": component.replace("_", " "),
               "y": [float(b.get(component, 0.0)) / GIB for _, b in bars],
               "hovertemplate": f"{component}: %{{y:.2f}} GiB"
                                f"<br>{COMPONENT_MEANINGS.get(component, '')}"
                                "<extra>%{x}</extra>"}
              for component in components]
    layout: dict[str, Any] = {"barmode": "stack", "title": {"text": title or "Memory per GPU"},
                              "yaxis": {"title": {"text": "GiB"}}, **_FRAME}
    if bar_limits is not None:
        layout["shapes"], layout["annotations"] = _per_bar_limit_lines(bar_limits)
    elif capacity_bytes:
        lines = memory_limits(capacity_bytes / GIB, usable_fraction)
        ends = ("left", "right")
        # horizontal lines over the x domain, each labelled above one end
        layout["shapes"] = [{"type": "line", "xref": "x domain", "x0": 0, "x1": 1,
                             "yref": "y", "y0": gib, "y1": gib,
                             "line": {"color": MEMORY_LIMIT_COLOUR, "dash": dash}}
                            for gib, _, dash in lines]
        # the usable share's label above its line, between the two; where a bar rises
        # past the capacity the axis stretches, the 10% gap between the lines shrinks below
        # the text's height and the dotted line ran through the label (a trial: an out of
        # memory H100 job, 391 GiB on 79 GiB): then it hangs below its line, over the bar
        # it would cover anyway
        over = max((sum(b.values()) for _, b in bars), default=0.0) > capacity_bytes
        layout["annotations"] = [{"text": text, "showarrow": False, "xref": "x domain",
                                  "x": 0 if end == "left" else 1, "xanchor": end,
                                  "yref": "y", "y": gib,
                                  "yanchor": "top" if over and index else "bottom"}
                                 for index, ((gib, text, _), end)
                                 in enumerate(zip(lines, ends, strict=False))]
    return {"data": traces, "layout": layout}


MEMORY_LIMIT_COLOUR = "#b3261e"  # the device's capacity (dotted) and usable share (dashed)


def memory_limits(capacity_gib: float, usable_fraction: float | None
                  ) -> list[tuple[float, str, str]]:
    """(GiB, label, plotly dash) of the device's capacity and, below it, the usable share
    feasibility is judged against: the lines of every memory chart (the bars and the
    layouts' MFU-memory scatter said '178 GiB' and '178.4 GiB' in two colours)."""
    lines = [(capacity_gib, f"capacity {capacity_gib:.1f} GiB", "dot")]
    if usable_fraction is not None and usable_fraction < 1:
        usable_gib = capacity_gib * usable_fraction
        lines.append((usable_gib, f"usable {usable_gib:.1f} GiB ({usable_fraction:.0%})",
                      "dash"))
    return lines


def memory_limit_lines(*sides: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`memory_breakdown_figure` for bars of ``sides`` (prediction
    documents): one capacity line where every side has the same device memory (and the
    usable share where they share one), else each side's own lines; none where a side
    states no device memory (a plan's document)."""
    capacities = [side.get("memory_capacity_gib") for side in sides]
    usable = [side.get("usable_memory_fraction") for side in sides]
    if len(set(capacities)) == 1:
        return {"capacity_bytes": capacities[0] * GIB if capacities[0] else None,
                "usable_fraction": usable[0] if len(set(usable)) == 1 else None}
    if any(capacity is None for capacity in capacities):
        return {}
    return {"bar_limits": [(capacity * GIB, fraction)
                           for capacity, fraction in zip(capacities, usable, strict=True)]}


def _per_bar_limit_lines(bar_limits: Sequence[tuple[float, float | None]]
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each bar's capacity (dotted) and usable share (dashed) as segments over that bar
    alone (category i spans i - 0.4 .. i + 0.4 on plotly's category axis), the usable one
    labelled: two GPUs' lines across the whole plot would misplace one bar's limit (a
    trial's B, out of memory on an H100, drawn under A's B200 lines)."""
    shapes: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    for index, (capacity_bytes, usable_fraction) in enumerate(bar_limits):
        capacity_gib = capacity_bytes / GIB
        lines = memory_limits(capacity_gib, usable_fraction)
        shapes += [{"type": "line", "xref": "x", "x0": index - 0.4, "x1": index + 0.4,
                    "yref": "y", "y0": gib, "y1": gib,
                    "line": {"color": MEMORY_LIMIT_COLOUR, "dash": dash}}
                   for gib, _, dash in lines]
        usable_gib = lines[-1][0]
        text = (f"usable {usable_gib:.1f} of {capacity_gib:.1f} GiB" if len(lines) > 1
                else f"capacity {capacity_gib:.1f} GiB")
        # above the top (capacity) line: between the two, an H100's 8 GiB gap was less than
        # the text's height and the dotted line ran through 'usable 71.2 of 79.1 GiB'
        labels.append({"text": text, "showarrow": False, "xref": "x", "x": index,
                       "yref": "y", "y": capacity_gib, "yanchor": "bottom"})
    return shapes, labels


def layout_label(plan: Mapping[str, Any]) -> str:
    """A chart's name for a layout: 'pp16 ep8 dp32 mb2 zero1 ckpt=full', the compact
    spelling `mosaic plan` prints."""
    return layout_text(plan, compact=True)
