"""Figures are written as non-empty PNG and SVG files."""

from mosaic.plan import compare_model_flops, flop_cost_profile, sparsity_frontier, sweep_days
from mosaic.report import plots

from .conftest import SMALL_SPACE


def assert_written(paths, directory, stem):
    assert sorted(p.name for p in paths) == [f"{stem}.png", f"{stem}.svg"]
    for path in paths:
        assert path.parent == directory and path.stat().st_size > 1000


def test_plan_figures(tmp_path, small_result, law):
    comparison = compare_model_flops(small_result, law)
    g = comparison.split_factor
    c_model = comparison.c_model_flops
    assert_written(plots.plot_frontier(small_result, tmp_path), tmp_path, "frontier")
    frontier = sparsity_frontier(small_result, law, c_model, g)
    assert_written(plots.plot_sparsity_tradeoff(frontier, comparison, tmp_path), tmp_path,
                   "sparsity")
    profiles = [flop_cost_profile(small_result, law, c_model, "sparsity", split_factor=g),
                flop_cost_profile(small_result, law, c_model, "split_factor", tolerance=0.1)]
    assert_written(plots.plot_flop_cost(profiles, tmp_path), tmp_path, "flop_cost")
    assert (tmp_path / "frontier.svg").read_text().startswith("<?xml")


def test_sweep_figure(tmp_path, one_node, law, calibration):
    points = sweep_days(one_node, SMALL_SPACE, law, calibration, [1, 2], workers=1)
    assert_written(plots.plot_sweep(points, tmp_path / "new"), tmp_path / "new", "sweep_days")
