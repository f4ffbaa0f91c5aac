"""The co-design search: Eq. 25 token budgets, the TPP range, and exactness."""

import numpy as np
import pytest

from mosaic.perf.layouts import LayoutLimits, enumerate_plans
from mosaic.perf.machine import machine_for
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload
from mosaic.plan import SearchSpace, profile_geometries, score, search

from .conftest import SMALL_SPACE


def test_tokens_saturate_the_window_unless_the_cap_binds(small_result):
    result = small_result
    envelope = result.envelope
    grid = result.grid
    rows = np.flatnonzero(result.feasible)
    budget = result.throughput.tokens_per_s * envelope.train_s * envelope.goodput_fraction
    np.testing.assert_allclose(result.budget_tokens, budget, rtol=1e-12)
    cap = result.space.tpp_max * grid.n_active
    capped = result.tpp_capped[rows]
    assert capped.any() and (~capped).any()  # the fixture exercises both branches
    np.testing.assert_allclose(result.tokens[rows][~capped], budget[rows][~capped], rtol=1e-12)
    np.testing.assert_allclose(result.tokens[rows][capped], cap[rows][capped], rtol=1e-12)


def test_budget_is_eq25_with_mfu(small_result):
    # D* = F_peak·N_dev·T·MFU·η / (6·N_act) (Eq. 25) equals tokens/s·T·η.
    result = small_result
    envelope = result.envelope
    laid_out = result.throughput.has_layout
    eq25 = (envelope.c_peak_flops * result.throughput.mfu * envelope.goodput_fraction
            / (6 * result.grid.n_active))
    np.testing.assert_allclose(result.budget_tokens[laid_out], eq25[laid_out], rtol=1e-9)


def test_too_large_models_are_not_trainable_with_a_reason(small_result):
    result = small_result
    floor = result.space.tpp_min * result.grid.n_active
    short = result.throughput.has_layout & (result.budget_tokens < floor)
    assert short.any()
    assert not result.feasible[short].any()
    assert all("window delivers" in result.reasons[r] for r in np.flatnonzero(short))
    assert np.isnan(result.loss[short]).all()


def test_ranking_is_sorted_and_optimum_is_the_argmin(small_result):
    result = small_result
    losses = result.loss[result.ranking]
    assert np.all(np.diff(losses) >= 0)
    assert result.optimum_index == int(np.nanargmin(result.loss))


def brute_force(envelope, space, law, calibration, limits):
    """Every geometry and every plan one at a time: {row: (loss, plan)} of the trainable."""
    machine = machine_for(envelope.cluster, envelope.precision,
                          envelope.usable_memory_fraction)
    grid = space.enumerate()
    scored = {}
    for row in range(len(grid)):
        workload = Workload(grid.geometry(row), envelope.global_batch, envelope.seq_len,
                            precision=envelope.precision, stack=envelope.stack,
                            dispatcher=envelope.dispatcher)
        plans = enumerate_plans(workload, machine.n_devices,
                                machine.interconnect.scale_up_domain_gpus, limits)
        top = (-np.inf, np.inf, None)  # tokens/s, memory, plan
        for i in range(len(plans)):
            p = predict_step(workload, plans.take(i), machine, calibration)
            key = (p.tokens_per_s[0], -p.memory_bytes[0])
            if p.feasible[0] and key > top[:2] and key != top[:2]:
                top = (p.tokens_per_s[0], -p.memory_bytes[0], plans.row(i))
        if top[2] is None:
            continue
        n_active = grid.n_active[row]
        tokens = top[0] * envelope.train_s * envelope.goodput_fraction
        if tokens < space.tpp_min * n_active:
            continue
        tokens = min(tokens, space.tpp_max * n_active)
        scored[row] = (float(law.predict(grid.n_total[row], tokens, grid.sparsity[row],
                                         grid.split_factor[row])), top[2])
    return scored


def test_search_equals_brute_force(one_node, law, calibration):
    space = SearchSpace(q=(4,), experts=(8, 16), top_k=(1, 2), split_factor=(2,), s_min=0.5)
    limits = LayoutLimits(micro_batches=(1, 2), vpp=(1,), sharding=("zero1",),
                          checkpointing=("none", "full"))
    result = search(one_node, space, law, calibration, limits=limits, workers=1)
    scored = brute_force(one_node, space, law, calibration, limits)
    assert sorted(scored) == sorted(result.ranking.tolist())
    for row, (loss, plan) in scored.items():
        assert result.loss[row] == pytest.approx(loss, rel=1e-12)
        chosen = result.candidate(row)["plan"]
        assert chosen == {key: plan[key] for key in chosen}
    assert result.optimum_index == min(scored, key=lambda r: scored[r][0])


def test_worker_count_does_not_change_the_result(one_node, law, calibration, small_result):
    grid = SMALL_SPACE.enumerate()
    forked = profile_geometries(one_node, grid, calibration, workers=2)
    again = score(forked, one_node, SMALL_SPACE, law)
    np.testing.assert_array_equal(again.throughput.tokens_per_s,
                                  small_result.throughput.tokens_per_s)
    assert again.throughput.plans == small_result.throughput.plans
    np.testing.assert_array_equal(again.ranking, small_result.ranking)


def test_layout_reason_when_nothing_fits(one_node, law, calibration):
    space = SearchSpace(q=(18,), experts=(512,), top_k=(8,), split_factor=(1,))
    result = search(one_node, space, law, calibration, workers=1)
    assert result.optimum_index is None
    assert "run out of memory" in result.reasons[0]



def test_a_geometry_refused_by_the_headroom_alone_is_reported_so(one_node, law, calibration):
    """A geometry whose closest layout fits the device but not the usable share: the
    reason says the planning headroom refused it (a trial read "run out of memory" for
    172.7 GiB on a 178.4 GiB GPU), and the report groups it apart."""
    from dataclasses import replace

    from mosaic.perf.headroom import MemoryHeadroom
    from mosaic.report.plan_report import HEADROOM_CATEGORY, reason_category

    space = SearchSpace(q=(6,), experts=(32,), top_k=(2,), split_factor=(1,))
    tight = replace(one_node, headroom=MemoryHeadroom(0.01, "a test's 1%"))
    result = search(tight, space, law, calibration, workers=1)
    assert result.optimum_index is None
    reason = result.reasons[0]
    needed_gib = float(reason.split("the closest needs ")[1].split(" GiB")[0])
    assert needed_gib < one_node.system.device.hbm_bytes / 2**30
    assert "layouts exceed the 1% planning headroom (--memory-fraction)" in reason
    assert "out of memory" not in reason
    assert reason_category(reason) == HEADROOM_CATEGORY
