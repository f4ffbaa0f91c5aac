"""Figures of the co-design search (paper Fig. 1, 8, 10, 11) as PNG and SVG.

Uses matplotlib's object API (no pyplot state; rendering through the Agg and SVG canvases),
with a fixed SVG hash salt and no timestamps so the same inputs write the same files.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from mosaic.io_atomic import atomic_path
from mosaic.plan.analysis import FlopCostProfile, ModelFlopsComparison, SparsityFrontier
from mosaic.plan.search import PlanResult
from mosaic.plan.sweep import SweepPoint, optimum_losses

FORMATS = ("png", "svg")
DPI = 150
_PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
            "tab:pink", "tab:gray")
_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}


def split_colour(split_factor: int, all_splits: list[int]) -> str:
    """A stable colour per G (its position among the G values present)."""
    return _PALETTE[sorted(all_splits).index(split_factor) % len(_PALETTE)]


def save_figure(figure: Figure, directory: str | Path, stem: str) -> list[Path]:
    """Write ``stem.png`` and ``stem.svg`` into ``directory`` (created if missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    with mpl.rc_context({"svg.hashsalt": "mosaic"}):
        for fmt in FORMATS:
            path = directory / f"{stem}.{fmt}"
            with atomic_path(path) as temp:  # never a truncated figure (mosaic.io_atomic)
                figure.savefig(temp, format=fmt, dpi=DPI, metadata=_METADATA[fmt],
                               bbox_inches="tight")
            paths.append(path)
    return paths


def _legend_outside(ax: Axes, fontsize: int = 8) -> None:
    """The legend to the right of the axes, where it cannot cover data (the saved figure's
    tight bounding box takes it in)."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0)


def _star(ax: Axes, x: float, y: float, label: str) -> None:
    ax.scatter([x], [y], marker="*", s=320, color="gold", edgecolor="black", zorder=5,
               label=label)


def plot_frontier(result: PlanResult, directory: str | Path,
                  stem: str = "frontier") -> list[Path]:
    """Fig. 10: loss vs realised C_model of every trainable candidate, coloured by G."""
    rows = result.ranking
    grid = result.grid
    figure = Figure(figsize=(7, 4.5))
    ax = figure.add_subplot()
    splits = sorted({int(g) for g in grid.split_factor[rows]})
    for g in splits:
        pick = rows[grid.split_factor[rows] == g]
        ax.scatter(result.c_model_flops[pick], result.loss[pick], s=14, alpha=0.75,
                   color=split_colour(g, splits), label=f"G = {g}")
    if rows.size:
        best = rows[0]
        _star(ax, result.c_model_flops[best], result.loss[best], "MOSAIC optimum")
    envelope = result.envelope
    ax.set_xscale("log")
    ax.set_xlabel("model FLOPs C_model = 6·N_act·D (FLOP)")
    ax.set_ylabel("predicted loss (nats/token)")
    ax.set_title(f"Loss vs model FLOPs: {envelope.n_nodes} × {envelope.system.name}, "
                 f"{envelope.days:g} days (C_peak = {envelope.c_peak_flops:.3g} FLOP)")
    _legend_outside(ax)
    ax.grid(alpha=0.3)
    return save_figure(figure, directory, stem)


def plot_sweep(points: list[SweepPoint], directory: str | Path,
               stem: str | None = None) -> list[Path]:
    """Fig. 11: optimal loss vs budget; markers coloured by G*, annotated with S* and
    N_tot*; dashed lines are the best configuration per G."""
    return save_figure(sweep_figure(points), directory, stem or f"sweep_{points[0].axis}")


def sweep_figure(points: list[SweepPoint]) -> Figure:
    """The figure of :func:`plot_sweep`: points in budget order, node counts on a log axis
    (cluster sizes grow geometrically)."""
    points = sorted(points, key=lambda p: p.value)
    axis = points[0].axis
    values = np.array([p.value for p in points])
    figure = Figure(figsize=(7, 4.5))
    ax = figure.add_subplot()
    splits = sorted({g for p in points for g in p.best_per_split})
    for g in splits:
        losses = [p.result.loss[p.best_per_split[g]] if g in p.best_per_split else np.nan
                  for p in points]
        ax.plot(values, losses, linestyle="--", linewidth=1, color=split_colour(g, splits),
                label=f"best with G = {g}")
    ax.plot(values, optimum_losses(points), color="black", linewidth=1.5,
            label="optimum (marker: its G's colour)")
    for point in points:
        row = point.result.optimum_index
        if row is None:
            continue
        grid = point.result.grid
        g = int(grid.split_factor[row])
        loss = point.result.loss[row]
        ax.scatter([point.value], [loss], s=60, color=split_colour(g, splits),
                   edgecolor="black", zorder=5)
        # below the optimum, where no per-G line runs (each is at or above it)
        ax.annotate(f"S={grid.sparsity[row]:.3f}\nN_tot={grid.n_total[row] / 1e9:.0f}B",
                    (point.value, loss), textcoords="offset points", xytext=(0, -9),
                    ha="center", va="top", fontsize=7)
    envelope = points[0].result.envelope
    fixed = (f"{envelope.n_nodes} × {envelope.system.name}" if axis == "days"
             else f"{envelope.days:g} days on {envelope.system.name}")
    ax.set_xlabel("training window (days)" if axis == "days" else "cluster size (nodes)")
    if axis == "nodes":
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [f"{v:g}" for v in values])  # 16, 32, ... not 2^4, 2^5
        ax.xaxis.set_minor_locator(NullLocator())
    ax.margins(x=0.08, y=0.18)  # room for the labels under the end points
    ax.set_ylabel("optimal predicted loss (nats/token)")
    ax.set_title(f"MOSAIC optimum vs {axis} ({fixed})")
    _legend_outside(ax)
    ax.grid(alpha=0.3)
    return figure


# One line style and marker per top-k K of a figure (colour tells the view), distinct for
# up to 7 K values; more cycle.
_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 3)))
_MARKERS = ("o", "s", "^", "v", "D", "P", "X")


def plot_sparsity_tradeoff(frontier: SparsityFrontier, comparison: ModelFlopsComparison,
                           directory: str | Path, stem: str = "sparsity",
                           cluster_optimum: tuple[float, float] | None = None) -> list[Path]:
    """Fig. 1: L*(S) at fixed C_model (boundary-seeking) and under the hardware budget."""
    return save_figure(sparsity_figure(frontier, comparison, cluster_optimum), directory, stem)


def sparsity_figure(frontier: SparsityFrontier, comparison: ModelFlopsComparison,
                    cluster_optimum: tuple[float, float] | None = None) -> Figure:
    """The figure of :func:`plot_sparsity_tradeoff`: the model-FLOPs view as one line (its
    loss is a function of S), the cluster view one line per top-k K (only E moves along a
    line), points sorted by S; the model-FLOPs optimum (the lowest red point)
    and ``cluster_optimum`` (S, loss) marked."""
    figure = Figure(figsize=(7, 4.5))
    ax = figure.add_subplot()
    views = (("model_flops", "tab:red",
              f"model-FLOPs view, C_model = {frontier.c_model_flops:.3g} FLOP"),
             ("hardware", "tab:green", "cluster view (tokens the window delivers)"))
    top_ks = sorted({top_k for view, _, _ in views for top_k, _ in frontier.series(view)})
    for view, colour, label in views:
        x = getattr(frontier, f"{view}_sparsity")
        y = getattr(frontier, f"{view}_loss")
        for top_k, order in frontier.series(view):
            i = top_ks.index(top_k)  # the same K draws the same way in both views
            ax.plot(x[order], y[order], marker=_MARKERS[i % len(_MARKERS)], markersize=4,
                    color=colour, linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                    label=f"{label}, K = {top_k}" if top_k else f"{label}, every (E, K)")
    undeliverable = ~frontier.delivers_c_model
    ax.scatter(frontier.model_flops_sparsity[undeliverable],
               frontier.model_flops_loss[undeliverable], marker="x", color="black", zorder=4,
               label="C_model not deliverable in the window")
    best = int(np.argmin(frontier.model_flops_loss))
    ax.scatter([frontier.model_flops_sparsity[best]], [frontier.model_flops_loss[best]],
               marker="D", s=70, color="tab:red", edgecolors="black", zorder=5,
               label=f"model-FLOPs optimum (S = {frontier.model_flops_sparsity[best]:.3f})")
    if cluster_optimum is not None:
        ax.scatter([cluster_optimum[0]], [cluster_optimum[1]], marker="*", s=180,
                   color="gold", edgecolors="black", zorder=6,
                   label=f"cluster optimum (S = {cluster_optimum[0]:.3f})")
    if comparison.s_feas_max is not None:
        # over every q at this G, not only the plotted best q per (E, K)
        ax.axvline(comparison.s_feas_max, color="gray", linestyle=":",
                   label=f"S_feas_max = {comparison.s_feas_max:.3f} (any q delivering C_model)")
    ax.set_xlabel("sparsity S = 1 − N_act/N_tot")
    ax.set_ylabel("predicted loss (nats/token)")
    ax.set_title(f"Model-FLOPs vs cluster optimum at G = {frontier.split_factor}")
    _legend_outside(ax, fontsize=7)
    ax.grid(alpha=0.3)
    return figure


def plot_flop_cost(profiles: list[FlopCostProfile], directory: str | Path,
                   stem: str = "flop_cost") -> list[Path]:
    """Fig. 8 right: wall-clock per delivered model FLOP, relative to the first point."""
    return save_figure(flop_cost_figure(profiles), directory, stem)


def flop_cost_figure(profiles: list[FlopCostProfile]) -> Figure:
    """The figure of :func:`plot_flop_cost`: along S one line per top-k K, along G one
    line; points sorted by the knob."""
    figure = Figure(figsize=(5 * len(profiles), 4))
    labels = {"sparsity": "sparsity S", "split_factor": "expert split factor G"}
    for i, profile in enumerate(profiles):
        ax = figure.add_subplot(1, len(profiles), i + 1)
        for j, (top_k, order) in enumerate(profile.series()):
            label = ("time per model FLOP" if profile.knob == "split_factor"
                     else f"time per model FLOP, K = {top_k}")
            ax.plot(profile.knob_values[order], profile.relative[order], marker="o",
                    color=_PALETTE[j % len(_PALETTE)], label=label)
        ax.set_xlabel(labels[profile.knob])
        ax.set_ylabel("wall-clock per model FLOP (relative to the first point)")
        title = f"Systems cost vs {labels[profile.knob]}"
        if profile.knob == "split_factor" and profile.target_sparsity is not None:
            # each G's point is its own geometry: say which
            title += f"\n(each G: its model-FLOPs pick near S = {profile.target_sparsity:.3f})"
            for x, y, text in zip(profile.knob_values, profile.relative,
                                  profile.geometry_labels, strict=True):
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4),
                            fontsize=7)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    figure.tight_layout()
    return figure
