"""Figures connect only comparable points: one series per top-k K (only E moves S along
it), the model-FLOPs view one curve, sorted by x; node counts on a log axis. Tested on the
plotted data, not pixels."""

import numpy as np
import pytest

from mosaic.plan import compare_model_flops, flop_cost_profile, sparsity_frontier
from mosaic.plan.analysis import comparable_series
from mosaic.plan.sweep import SweepPoint, best_per_split
from mosaic.report import plots


def test_series_group_by_the_held_key_and_sort_by_x():
    held = np.array([1, 2, 1, 2, 1])
    x = np.array([0.5, 0.1, 0.2, np.nan, 0.9])
    series = comparable_series(held, x)
    assert [(k, order.tolist()) for k, order in series] == [(1, [2, 0, 4]), (2, [1])]


def lines_by_label(figure):
    return {line.get_label(): line for ax in figure.axes for line in ax.get_lines()}


def test_sparsity_figure_draws_the_model_flops_view_as_one_curve(small_result, law):
    """At fixed C_model the model-FLOPs loss is L*(S) (Eq. 16): every (E, K) point lies on
    one curve, drawn as one line sorted by S (per K, the lines lay on top of one another: a
    trial); the cluster view keeps one line per K, along which only E moves."""
    comparison = compare_model_flops(small_result, law)
    frontier = sparsity_frontier(small_result, law, comparison.c_model_flops,
                                 comparison.split_factor)
    lines = lines_by_label(plots.sparsity_figure(frontier, comparison))
    (model,) = [v for k, v in lines.items() if k.startswith("model-FLOPs view")]
    xs = np.asarray(model.get_xdata(), dtype=float)
    assert np.all(np.diff(xs) >= 0)  # sorted by S
    assert sorted(xs.tolist()) == sorted(frontier.model_flops_sparsity.tolist())
    assert len(set(frontier.top_k.tolist())) >= 2  # K = 1 and K = 2 share the line
    k_of = dict(zip(frontier.hardware_sparsity.tolist(), frontier.top_k.tolist(),
                    strict=True))
    cluster = {k: v for k, v in lines.items() if k.startswith("cluster view")}
    assert len(cluster) == len(set(frontier.top_k.tolist()))
    for label, line in cluster.items():
        xs = np.asarray(line.get_xdata(), dtype=float)
        assert np.all(np.diff(xs) > 0)
        assert {k_of[x] for x in xs.tolist()} == {int(label.rsplit("= ", 1)[1])}


def test_sparsity_figure_marks_both_optima(small_result, law):
    """The PNG's title promised 'model-FLOPs vs cluster optimum' and marked neither (the
    HTML page did): a diamond at the lowest model-FLOPs loss and a star at the cluster
    optimum the plan chose."""
    comparison = compare_model_flops(small_result, law)
    frontier = sparsity_frontier(small_result, law, comparison.c_model_flops,
                                 comparison.split_factor)
    row = comparison.cluster_row
    point = (float(small_result.grid.sparsity[row]), float(small_result.loss[row]))
    figure = plots.sparsity_figure(frontier, comparison, cluster_optimum=point)
    marks = {c.get_label(): c.get_offsets().tolist() for c in figure.axes[0].collections}
    best = int(np.argmin(frontier.model_flops_loss))
    (diamond,) = [v for k, v in marks.items() if k.startswith("model-FLOPs optimum")]
    assert diamond == [[pytest.approx(frontier.model_flops_sparsity[best]),
                        pytest.approx(frontier.model_flops_loss[best])]]
    (star,) = [v for k, v in marks.items() if k.startswith("cluster optimum")]
    assert star == [[pytest.approx(point[0]), pytest.approx(point[1])]]


def test_flop_cost_along_s_is_one_line_per_top_k(small_result, law):
    comparison = compare_model_flops(small_result, law)
    profile = flop_cost_profile(small_result, law, comparison.c_model_flops, "sparsity",
                                split_factor=comparison.split_factor)
    lines = lines_by_label(plots.flop_cost_figure([profile]))
    assert len(lines) == len(set(profile.top_k.tolist()))
    for line in lines.values():
        assert np.all(np.diff(np.asarray(line.get_xdata(), dtype=float)) > 0)


def test_flop_cost_along_g_names_the_sparsity_held_and_each_points_geometry(small_result,
                                                                            law):
    """Along G each point is the model-FLOPs pick of that G near the optimum's S, a
    different geometry per G; the panel now says so (a trial could not tell what it held)."""
    comparison = compare_model_flops(small_result, law)
    profile = flop_cost_profile(small_result, law, comparison.c_model_flops, "split_factor",
                                tolerance=0.1)
    grid = small_result.grid
    assert profile.target_sparsity == pytest.approx(
        float(grid.sparsity[small_result.optimum_index]))
    assert profile.geometry_labels == tuple(
        (f"q{grid.q[r]}" if grid.q[r] else f"L{grid.layers[r]}")
        + f" E{grid.experts[r]} K{grid.top_k[r]}" for r in profile.rows.tolist())
    ax = plots.flop_cost_figure([profile]).axes[0]
    assert f"near S = {profile.target_sparsity:.3f}" in ax.get_title()
    assert [t.get_text() for t in ax.texts] == list(profile.geometry_labels)


def test_node_sweeps_use_a_log_axis_and_budget_order(small_result):
    # Two points given out of order: the plotted optimum line runs in node order.
    points = [SweepPoint("nodes", value, small_result, best_per_split(small_result))
              for value in (16.0, 2.0)]
    figure = plots.sweep_figure(points)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log"
    # the node counts themselves on the axis (it read 2^1 ... 2^4)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "16"]
    optimum = lines_by_label(figure)["optimum (marker: its G's colour)"]
    assert np.asarray(optimum.get_xdata()).tolist() == pytest.approx([2.0, 16.0])
    days = [SweepPoint("days", v, small_result, best_per_split(small_result)) for v in (1, 2)]
    assert plots.sweep_figure(days).axes[0].get_xscale() == "linear"
