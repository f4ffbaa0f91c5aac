"""Budget sweeps (Fig. 11) and the cheapest budget reaching a loss."""

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.plan import (
    SearchSpace,
    cheapest_plan,
    run_cost,
    score,
    sweep_days,
    sweep_nodes,
)
from mosaic.plan.cost import check_target_reachable, same_cost_key
from mosaic.plan.peak_bound import peak_bound
from mosaic.plan.sweep import optimum_losses

SPACE = SearchSpace(q=(4, 6), experts=(8, 32), top_k=(1, 2), split_factor=(1, 4), s_min=0.5)


def test_days_sweep_rescoring_and_monotone_loss(one_node, law, calibration):
    points = sweep_days(one_node, SPACE, law, calibration, [1, 2, 4, 8], workers=1)
    losses = optimum_losses(points)
    assert np.all(np.diff(losses) <= 0)  # a longer window never hurts
    # One layout search serves every window; each point is a plain rescoring.
    table = points[0].result.throughput
    assert all(p.result.throughput is table for p in points)
    again = score(table, one_node.with_budget(days=4), SPACE, law)
    np.testing.assert_array_equal(again.loss, points[2].result.loss)
    for point in points:
        for g, row in point.best_per_split.items():
            rows = point.result.ranking[point.result.grid.split_factor[point.result.ranking]
                                        == g]
            assert row == rows[0]


def test_nodes_sweep(one_node, law, calibration):
    points = sweep_nodes(one_node.with_budget(days=2), SPACE, law, calibration, [1, 2],
                         workers=1)
    assert [p.result.envelope.n_devices for p in points] == [8, 16]
    assert optimum_losses(points)[1] <= optimum_losses(points)[0]
    with pytest.raises(MosaicInputError, match="integers >= 1"):
        sweep_nodes(one_node, SPACE, law, calibration, [1.5])


def test_cost_and_cheapest_plan(one_node, law, calibration):
    cost = run_cost(one_node, price_per_gpu_hour=4.0)
    assert cost.gpu_hours == pytest.approx(8 * 2 * 24) and cost.cost_usd == pytest.approx(1536.0)
    with pytest.raises(MosaicInputError, match="price per GPU-hour"):
        run_cost(one_node, -1.0)
    cheapest = cheapest_plan(one_node, SPACE, law, calibration, target_loss=1.8,
                             nodes=[1, 2], days=[1, 2, 4], workers=1)
    hours = [same_cost_key(o.cost.gpu_hours) for o in cheapest.options]  # to rounding
    assert hours == sorted(hours)
    reaching = [o for o in cheapest.options if o.loss is not None and o.loss <= 1.8]
    assert cheapest.choice is reaching[0]
    assert cheapest.choice.loss <= 1.8
    # equal GPU-hours (1 node x 2 days, 2 nodes x 1 day): the lower loss first (a trial: 128
    # nodes x 30 days was chosen over 64 x 60 at the same cost and a higher loss)
    for first, second in zip(cheapest.options, cheapest.options[1:], strict=False):
        if first.cost.gpu_hours == second.cost.gpu_hours:
            assert first.loss <= second.loss
    # Below the real optimum but above the loss at the full bf16 peak: searched, not reached.
    window = one_node.with_budget(days=1)
    best = next(o.loss for o in cheapest_plan(one_node, SPACE, law, calibration,
                                              target_loss=5.0, nodes=[1], days=[1],
                                              workers=1).options if o.days == 1.0)
    floor = peak_bound(window, SPACE, law).best_loss
    assert floor < best
    unreached = cheapest_plan(one_node, SPACE, law, calibration,
                              target_loss=0.5 * (floor + best), nodes=[1], days=[1], workers=1)
    assert unreached.choice is None
    assert [o.loss for o in unreached.options] == pytest.approx([best])
    # Below what even 100% of the peak could train: refused before any layout search.
    with pytest.raises(MosaicInputError, match=r"out of reach .* best any budget could reach"):
        cheapest_plan(one_node, SPACE, law, calibration, target_loss=0.999 * floor, nodes=[1],
                      days=[1], workers=1)


def test_a_target_loss_outside_the_loss_range_is_refused(one_node, law):
    # a cross-entropy above 50 nats (ln of any vocabulary is < 17) is no target: every
    # budget would "reach" 1e308, which was planned and echoed (fuzz trial)
    # and a loss must be above 0: the range said leaves the 0 out, one message for both ends
    # and for NaN (limits.LIMITS['loss'], check_range(above_low=True))
    for loss in (1e308, 51.0, 0.0, -1.0, np.nan):
        with pytest.raises(MosaicInputError,
                           match=r"^target loss: got .*; allowed: a number in \(0, 50\]"):
            check_target_reachable(one_node, SPACE, law, loss, nodes=[1], days=[1])


def test_peak_bound_is_a_floor_under_every_plan(one_node, law, calibration):
    """Hand check of the bound: tokens = F_bf16 · N_dev · T · η / (6 N_act) capped at
    tpp_max · N_act, and no searched geometry trains more tokens or reaches a lower loss."""
    result = sweep_days(one_node, SPACE, law, calibration, [1], workers=1)[0].result
    bound = peak_bound(one_node.with_budget(days=1), SPACE, law, result.grid)
    grid = result.grid
    peak = one_node.system.device.peak_flops_per_s_for("bf16") * one_node.n_devices
    expected = np.minimum(peak * 86400 * one_node.goodput_fraction / (6 * grid.n_active),
                          SPACE.tpp_max * grid.n_active)
    np.testing.assert_allclose(bound.tokens, expected)
    rows = result.feasible
    assert np.all(result.tokens[rows] <= bound.tokens[rows])
    assert np.all(result.loss[rows] >= bound.loss[rows])
    assert bound.best_loss <= np.nanmin(result.loss)


def test_a_budget_with_nothing_trainable_says_why(one_node, law, calibration):
    """A sweep point without an optimum printed a row of dashes and '"optimum": null' with
    no reason (a fuzz trial): the JSON carries plan's untrainable message."""
    from mosaic.report.plan_report import sweep_document

    points = sweep_days(one_node, SPACE, law, calibration, [1e-4, 4], workers=1)
    document = sweep_document(points)
    first, second = document["points"]
    assert first["optimum"] is None
    assert first["untrainable"].startswith("no geometry of the grid is trainable")
    assert second["optimum"] is not None and "untrainable" not in second


def test_each_sweep_point_states_its_goodput(one_node, law, calibration):
    """Young-Daly goodput falls with the GPUs (more failures per hour): each point of a
    nodes sweep carries its own; the document's envelope is the first point's (a trial read
    the 8-node goodput for the whole sweep)."""
    from dataclasses import replace

    from mosaic.plan.goodput import YoungDalyGoodput
    from mosaic.report.plan_report import sweep_document

    envelope = replace(one_node.with_budget(days=2), goodput=YoungDalyGoodput(
        mtbf_gpu_s=50_000 * 3600, checkpoint_s=120, restart_s=600))
    document = sweep_document(sweep_nodes(envelope, SPACE, law, calibration, [1, 2],
                                          workers=1))
    first, second = document["points"]
    assert document["envelope_of_point"] == 0
    assert first["goodput"] == document["envelope"]["goodput"]["goodput"]
    assert second["goodput"] < first["goodput"] < 1


def test_a_node_price_given_per_gpu_is_noted_not_refused():
    """AWS's p5.48xlarge listed at 98.32 USD an hour for 8 H100 (12.29 per GPU-hour); a
    trial gave 98.32 per GPU-hour and got an 8x cost without a word. Above 40 the price is
    kept and noted, with the per-GPU figure a node price gives; 12.29 passes silently."""
    import warnings

    from mosaic.errors import MosaicNote
    from mosaic.plan.cost import check_price

    with pytest.warns(MosaicNote, match=r"a node's price\? divided by the 8 GPUs of an HGX "
                                        r"node it is 12\.29, by the 4 of an NVL72 tray 24\.58"):
        assert check_price(98.32) == 98.32
    # the node type known: its own GPUs (a trial's 4-GPU GB300 tray was divided by 8)
    with pytest.warns(MosaicNote, match=r"divided by its 4 GPUs it is 108$"):
        assert check_price(432, gpus_per_node=4) == 432
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_price(12.29) == 12.29


def test_a_priced_sweep_gives_each_point_its_cost(one_node, law, calibration):
    """`sweep days --price-per-gpu-hour` was refused and a lead worked loss per dollar out by
    hand: each point's cost is its allocated GPU-hours (GPUs x days x 24) x the price."""
    from mosaic.report.plan_report import sweep_document

    document = sweep_document(sweep_days(one_node, SPACE, law, calibration, [2, 4],
                                         workers=1), 3.0)
    assert document["price_usd_per_gpu_hour"] == 3.0
    for entry, days in zip(document["points"], (2, 4), strict=True):
        assert entry["cost_usd"] == pytest.approx(one_node.n_devices * days * 24 * 3.0)
    # the page's table carries the cost column the terminal's does (a trial missed it)
    pytest.importorskip("plotly")
    from mosaic.report.html import render_report

    page = render_report(document)
    assert ">cost USD</th>" in page
    assert f">{one_node.n_devices * 4 * 24 * 3.0:,.0f}</td>" in page
    assert "cost_usd" not in sweep_document(sweep_days(one_node, SPACE, law, calibration, [2],
                                                       workers=1))["points"][0]


def test_refined_windows_lie_between_the_last_miss_and_the_first_reach():
    from mosaic.plan.cost import REFINED_WINDOWS, refined_windows

    windows = refined_windows([(7.5, 1.44), (15.0, 1.40), (30.0, 1.365), (60.0, 1.33)], 1.36)
    assert len(windows) == REFINED_WINDOWS and 30.0 < min(windows) < max(windows) < 60.0
    ratios = np.diff(np.log([30.0, *windows, 60.0]))
    np.testing.assert_allclose(ratios, ratios[0])  # geometric steps
    assert refined_windows([(7.5, 1.35), (15.0, 1.33)], 1.36) == []  # the first reaches
    assert refined_windows([(7.5, 1.45), (15.0, None)], 1.36) == []  # none reaches


def test_the_cheapest_budget_is_searched_between_the_grids_windows(one_node, law,
                                                                   calibration):
    """A trial paid 1.7x: 32 nodes x 60 days where 35 days reached the target. Windows
    between a node count's last miss and first reach are rescored on its layouts: the
    choice is no dearer than the grid's own, and lies in that bracket."""
    grid = cheapest_plan(one_node, SPACE, law, calibration, target_loss=1.8, nodes=[1],
                         days=[1, 2, 4], workers=1)
    coarse = [o for o in grid.options if o.days in (1.0, 2.0, 4.0)]
    reach = [o for o in coarse if o.loss is not None and o.loss <= 1.8]
    assert reach and grid.choice.cost.gpu_hours <= min(o.cost.gpu_hours for o in reach)
    missed = [o.days for o in coarse if o.loss is None or o.loss > 1.8]
    if missed:  # (the grid's shortest window may already reach it)
        assert max(missed) < grid.choice.days <= min(o.days for o in reach)
        assert len(grid.options) > len(coarse)


def test_a_window_that_already_reaches_is_searched_below(one_node, law, calibration):
    """A trial's 8 nodes reached the target at 5 days, its shortest window, and 2.5 days
    (cheaper than the answer) was never tried: the shortest window is halved until one
    misses, then the bracket is refined as between the grid's own windows."""
    from mosaic.plan.cost import MAX_WINDOW_HALVINGS

    coarse = cheapest_plan(one_node, SPACE, law, calibration, target_loss=1.8, nodes=[1],
                           days=[1, 2, 4, 8], workers=1)
    target = coarse.choice.loss + 1e-9  # what the grid's cheapest reaches, exactly
    start = 4 * coarse.choice.days  # a grid whose shortest window reaches it with room
    found = cheapest_plan(one_node, SPACE, law, calibration, target_loss=target, nodes=[1],
                          days=[start], workers=1)
    shorter = sorted(o.days for o in found.options if o.days < start)
    assert shorter[-1] == start / 2 and len(shorter) > 2
    assert found.choice.days <= coarse.choice.days * 1.0000001 < start
    misses = [o.days for o in found.options if o.loss is None or o.loss > target]
    assert misses and max(misses) < found.choice.days
    halvings = [d for d in shorter if np.log2(start / d).is_integer()]
    assert len(halvings) <= MAX_WINDOW_HALVINGS


def test_a_cluster_that_fails_faster_than_it_checkpoints_is_one_untrainable_sweep_point(
        one_node, law, calibration):
    """Young-Daly with MTBF 1 GPU-hour, 60 s checkpoints and 100 s restarts: on 8 GPUs the
    job fails every M = 3600/8 = 450 s and loses sqrt(2·60/450) + 100/450 = 0.738 of the
    window; on 16 GPUs (M = 225 s) sqrt(120/225) + 100/225 = 1.175, goodput 0. The 16-GPU
    point used to abort the whole node sweep and cheapest-budget search (one refused
    envelope); it is now one untrainable point with that reason, and no layout search is
    spent on it. A single plan on it is still refused."""
    from dataclasses import replace

    from mosaic.plan import search
    from mosaic.plan.goodput import YoungDalyGoodput
    from mosaic.report.plan_report import sweep_document

    failing = replace(one_node.with_budget(days=20), goodput=YoungDalyGoodput(
        mtbf_gpu_s=3600.0, checkpoint_s=60.0, restart_s=100.0))
    assert failing.goodput_fraction == pytest.approx(1 - (120 / 450) ** 0.5 - 100 / 450)
    points = sweep_nodes(failing, SPACE, law, calibration, [1, 2], workers=1)
    small, large = sweep_document(points)["points"]
    assert small["optimum"] is not None
    assert large["goodput"] == 0.0 and large["optimum"] is None
    assert large["untrainable"].startswith(
        "nothing is trainable on 2 nodes in 20 days: Young-Daly goodput is 0 on 16 GPUs: the "
        "job fails every 225 s")
    assert points[1].result.throughput.plans_evaluated == 0  # no layout search

    cheapest = cheapest_plan(failing, SPACE, law, calibration, small["optimum"]["loss"],
                             [1, 2], [20.0], workers=1)
    assert cheapest.choice is not None and cheapest.choice.n_nodes == 1
    assert all(o.loss is None for o in cheapest.options if o.n_nodes == 2)

    with pytest.raises(MosaicInputError, match="Young-Daly goodput is 0 on 16 GPUs"):
        search(failing.with_budget(n_nodes=2), SPACE, law, calibration, workers=1)


def test_a_budget_whose_run_stops_early_is_costed_at_the_days_it_trains(one_node, law,
                                                                      calibration):
    """The cheapest-plan search costed every budget at its whole window, where `plan` costs
    a run whose D is held at tpp_max at the days it trains: one model (q=4, E=8) reaches its
    cap after ~3.1 days, so the 4- and 8-day windows train as long and cost the same."""
    space = SearchSpace(q=(4,), experts=(8,), top_k=(1,), split_factor=(1,), s_min=0.5)
    cheapest = cheapest_plan(one_node, space, law, calibration, target_loss=1.803, nodes=[1],
                             days=[2, 4, 8], price_per_gpu_hour=3.0, workers=1)
    early = [o for o in cheapest.options if o.result.optimum_index is not None
             and o.result.tpp_capped[o.result.optimum_index]]
    assert {o.days for o in early} >= {4.0, 8.0}
    for option in early:
        trained = option.result.train_days(option.result.optimum_index)
        assert trained < option.days
        assert option.cost.gpu_hours == pytest.approx(8 * trained * 24)
        assert option.cost.cost_usd == pytest.approx(8 * trained * 24 * 3.0)
        assert option.cost.window_gpu_hours == pytest.approx(8 * option.days * 24)
    choice = cheapest.choice
    assert choice is not None and choice.cost.ends_early
    # the shortest of the windows that train alike is named
    assert choice.days == min(o.days for o in early)
    assert choice.cost.gpu_hours == pytest.approx(min(o.cost.gpu_hours for o in early))


def test_a_choice_longer_than_the_plans_window_names_the_cheapest_within_it(
        one_node, law, calibration):
    # a trial: --days 30 with --target-loss chose 32 nodes x 51 days, while 64 nodes x 25.7
    # days reached the target at the same GPU-hours; the output now names that budget too
    everything = cheapest_plan(one_node, SPACE, law, calibration, target_loss=5.0,
                               nodes=[1, 2], days=[1, 2, 4], workers=1)
    loss = {(o.n_nodes, o.days): o.loss for o in everything.options}
    # 1 node x 4 days and 2 nodes x 2 days cost the same; aim at the higher of their losses
    target = max(loss[(1, 4.0)], loss[(2, 2.0)])
    cheapest = cheapest_plan(one_node, SPACE, law, calibration, target_loss=target,
                             nodes=[1, 2], days=[1, 2, 4], workers=1)
    assert cheapest.window_days == one_node.days == 2.0
    choice, within = cheapest.choice, cheapest.choice_within_window
    if choice.days <= 2.0:
        assert within is None
    else:
        reaching = [o for o in cheapest.options
                    if o.loss is not None and o.loss <= target and o.days <= 2.0]
        assert within is reaching[0] and within.days <= 2.0
        assert within.cost.gpu_hours >= choice.cost.gpu_hours


def test_a_choice_whose_run_stops_within_the_plans_days_fits_them(one_node, law,
                                                                 calibration):
    # a trial: --days 6 chose 1 node x a 6.3-day window whose run stops at tpp_max after
    # 5.86 days, and said 'within --days 6: no budget evaluated reaches the target'
    from mosaic.report.plan_report import cheapest_document, cheapest_within_window_row

    space = SearchSpace(q=(4,), experts=(8,), top_k=(1,), split_factor=(1,), s_min=0.5)
    probe = cheapest_plan(one_node, space, law, calibration, target_loss=1.803, nodes=[1],
                          days=[2, 4, 8], workers=1)
    capped = [o for o in probe.options if o.loss is not None and o.cost.ends_early]
    target = max(o.loss for o in capped)  # only the runs that stop at the cap reach it
    first = min(capped, key=lambda o: o.days)
    trained = first.cost.train_days
    assert trained < first.days
    window = one_node.with_budget(days=0.5 * (trained + first.days))
    # 2 nodes reach the target within the window too, at a higher cost
    cheapest = cheapest_plan(window, space, law, calibration, target_loss=target,
                             nodes=[1, 2], days=[2, 4, 8], workers=1)
    choice = cheapest.choice
    assert choice is not None and choice.n_nodes == 1 and choice.days > window.days
    assert choice.cost.train_days <= window.days  # it trains within the window
    assert any(o.n_nodes == 2 and o.days <= window.days and o.loss <= target
               for o in cheapest.options)
    assert cheapest.choice_within_window is None
    assert cheapest_within_window_row(cheapest_document(cheapest)) is None


def test_budgets_of_equal_cost_but_for_rounding_are_ordered_by_loss(one_node, law,
                                                                    calibration):
    # a trial: 2 nodes x 13.61 days (loss 1.6494) was chosen over 1 node x 27.22 days (loss
    # 1.6492), both 5,225 GPU-hours; their GPU-hours differed in the last bit, 2 nodes' lower
    space = SearchSpace(q=(4, 6), experts=(8,), top_k=(1,), split_factor=(1,), s_min=0.5)
    cheapest = cheapest_plan(one_node, space, law, calibration, target_loss=1.66,
                             nodes=[1, 2], days=[8, 16], workers=1)
    pairs = [(a, b) for a, b in zip(cheapest.options, cheapest.options[1:], strict=False)
             if a.cost.gpu_hours == pytest.approx(b.cost.gpu_hours, rel=1e-9)]
    assert any(a.cost.gpu_hours != b.cost.gpu_hours for a, b in pairs)  # the case is here
    for first, second in pairs:
        if first.loss is not None and second.loss is not None:
            assert first.loss <= second.loss
