"""Calibration coverage: residual quantiles, scope fallback, envelope checks, intervals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.perf.coverage import (
    CalibrationCoverage,
    assess,
    interval,
    outside_dimensions,
    parse_coverage,
    pick_scope,
    ratio_quantiles,
    scoped_quantiles,
    shared_fraction,
)


def test_quantiles_of_a_tiny_residual_set_match_a_hand_calculation() -> None:
    # ratios 0.8, 0.9, 1.0, 1.1, 1.2: numpy's linear rule puts the 5% quantile at position
    # 0.05·4 = 0.2 -> 0.8 + 0.2·0.1 = 0.82, the 95% quantile at 3.8 -> 1.1 + 0.8·0.1 = 1.18.
    q = ratio_quantiles(np.array([1.2, 0.8, 1.0, 0.9, 1.1]), "all", 0.90)
    assert (q.low, q.median, q.high, q.n_runs) == (pytest.approx(0.82), 1.0,
                                                   pytest.approx(1.18), 5)
    # Predicted 1000 tokens/s -> the truth lies in [820, 1180]; step time inversely.
    tokens = interval(1000.0, q, 0.9)
    assert (tokens.low, tokens.high) == (pytest.approx(820.0), pytest.approx(1180.0))
    step = interval(2.0, q, 0.9, inverse=True)
    assert (step.low, step.high) == (pytest.approx(2 / 1.18), pytest.approx(2 / 0.82))


def test_scopes_fall_back_from_stack_and_class_to_class_to_pooled() -> None:
    # 12 megatron MoE runs (enough for their own scope), 3 torchtitan MoE runs, 4 dense.
    stacks = ["megatron-core"] * 12 + ["torchtitan"] * 3 + ["torchtitan"] * 4
    classes = ["moe"] * 15 + ["dense"] * 4
    ratios = np.concatenate([np.full(12, 1.0), np.full(3, 2.0), np.full(4, 0.5)])
    rows = scoped_quantiles(ratios, stacks, classes, 0.9)
    assert [q.scope for q in rows] == ["megatron-core/moe", "moe", "all"]
    assert pick_scope(rows, "megatron-core", "moe").median == 1.0
    moe = pick_scope(rows, "torchtitan", "moe")  # too few of its own: all 15 MoE runs
    assert (moe.scope, moe.n_runs) == ("moe", 15)
    dense = pick_scope(rows, "torchtitan", "dense")  # 4 dense runs: pooled over 19
    assert (dense.scope, dense.n_runs, dense.median) == ("all", 19, 1.0)


# 12 held-out runs, 6 MoE and 6 dense: too few for a class scope, enough for the pool.
RATIOS = np.array([0.9, 1.0, 1.1] * 4)
COVERAGE = CalibrationCoverage(
    source="test", level=0.9, devices=("H100-SXM-80GB", "B200"), stacks=("megatron-core",),
    classes=("dense", "moe"), n_total=(1e9, 1e11), n_active=(1e9, 2e10),
    degrees={"tp": (1, 8), "pp": (1, 16), "ep": (1, 64), "cp": (1, 2), "dp": (1, 512)},
    tokens_per_s_ratio=tuple(scoped_quantiles(RATIOS, ["megatron-core"] * 12,
                                              ["moe"] * 6 + ["dense"] * 6, 0.9)))
INSIDE = {"device": "B200", "stack": "megatron-core", "is_moe": True, "n_total": 5e10,
          "n_active": 5e9, "degrees": {"tp": 2, "pp": 4, "ep": 8, "cp": 1, "dp": 64}}


def test_a_job_inside_every_range_has_no_outside_dimension() -> None:
    assert outside_dimensions(COVERAGE, **INSIDE) == []


def test_a_catalog_gpu_the_data_lacks_and_a_huge_model_are_flagged_with_ratios() -> None:
    job = dict(INSIDE, device="H800-SXM-80GB", n_total=1e12, n_active=6e10,
               degrees=dict(INSIDE["degrees"], tp=16, cp=1))
    outside = {o.dimension: o for o in outside_dimensions(COVERAGE, **job)}
    assert set(outside) == {"gpu", "n_total", "n_active", "tp"}
    assert outside["gpu"].ratio is None and "B200" in outside["gpu"].calibrated
    assert outside["n_total"].ratio == pytest.approx(10.0)  # 1e12 / 1e11
    assert outside["n_active"].ratio == pytest.approx(3.0)  # 6e10 / 2e10
    assert outside["tp"].ratio == pytest.approx(2.0)
    assert outside["tp"].text() == "tp=16 not in 1..8 (2x outside)"


def test_a_stack_known_only_for_the_other_class_and_a_dense_jobs_ep_are_judged() -> None:
    """A trial's torchtitan MoE job read 'inside' a profile whose torchtitan runs were all
    dense; the ep range is the MoE runs' (a dense run's ep is 1 by definition)."""
    coverage = dataclasses.replace(
        COVERAGE, stacks=("megatron-core", "torchtitan"),
        stack_classes=("megatron-core/moe", "torchtitan/dense"),
        degrees=dict(COVERAGE.degrees, ep=(8, 64)))
    moe = dict(INSIDE, stack="torchtitan")
    (outside,) = outside_dimensions(coverage, **moe)
    assert outside.text().startswith("stack/class=torchtitan/moe not in {megatron-core/moe")
    dense = dict(INSIDE, stack="torchtitan", is_moe=False,
                 degrees=dict(INSIDE["degrees"], ep=1))
    assert outside_dimensions(coverage, **dense) == []  # ep=1 of a dense job is not judged
    assert [o.dimension for o in outside_dimensions(
        coverage, **dict(INSIDE, degrees=dict(INSIDE["degrees"], ep=1)))] == ["ep"]
    # a profile written before the pairs were recorded judges stack and class alone
    assert outside_dimensions(dataclasses.replace(coverage, stack_classes=()), **moe) == []


def test_assessment_carries_intervals_and_says_when_memory_residuals_are_missing() -> None:
    a = assess(COVERAGE, "t", tokens_per_s=1000.0, tokens_per_s_per_gpu=125.0, mfu=0.4,
               step_time_s=2.0, memory_gib=50.0, **INSIDE)
    doc = a.to_document()
    assert doc["inside_calibrated_envelope"] is True
    q = ratio_quantiles(RATIOS, "x", 0.9)
    assert doc["intervals"]["tokens_per_s"]["low"] == pytest.approx(1000 * q.low)
    assert doc["intervals"]["mfu"]["high"] == pytest.approx(0.4 * q.high)
    # 6 runs are too few for a megatron-core/moe scope of their own: labelled as pooled
    assert doc["intervals"]["tokens_per_s"]["residual_scope"] == "all"
    assert doc["intervals"]["tokens_per_s"]["n_runs"] == 12
    assert doc["intervals"]["memory_gib"] is None and "memory" in doc["note"]


def test_too_few_runs_give_no_interval_and_a_memory_interval_past_the_budget_is_named():
    assert scoped_quantiles(np.array([0.9, 1.0, 1.1]), ["megatron-core"] * 3,
                            ["moe"] * 3, 0.9) == ()
    memory = tuple(scoped_quantiles(RATIOS, ["megatron-core"] * 12, ["moe"] * 12, 0.9))
    coverage = dataclasses.replace(COVERAGE, memory_ratio=memory)
    a = assess(coverage, "t", tokens_per_s=1000.0, tokens_per_s_per_gpu=125.0, mfu=0.4,
               step_time_s=2.0, memory_gib=70.0, usable_memory_gib=71.0, **INSIDE)
    assert a.memory_gib is not None and a.memory_gib.high > 71.0
    assert "may not fit" in a.note


def test_without_coverage_the_verdict_is_unknown_not_inside() -> None:
    a = assess(None, "old", tokens_per_s=1.0, tokens_per_s_per_gpu=1.0, mfu=0.1,
               step_time_s=1.0, memory_gib=1.0, **INSIDE)
    assert a.inside is None and "mosaic calibrate" in a.note


def test_coverage_round_trips_and_a_bad_section_is_one_line() -> None:
    assert parse_coverage(COVERAGE.to_document(), "f") == COVERAGE
    bad = dict(COVERAGE.to_document(), level=1.5)
    with pytest.raises(MosaicInputError, match="f: coverage: level"):
        parse_coverage(bad, "f")


def test_shared_fraction_is_the_between_group_share_of_the_log_variance() -> None:
    # log ratios ±a around group means ±b: total variance a² + b², within a² -> b²/(a²+b²)
    a, b = 0.1, 0.2
    logs = np.array([b + a, b - a, -b + a, -b - a])
    share = shared_fraction(np.exp(logs), ["s1", "s1", "s2", "s2"])
    assert share == pytest.approx(b**2 / (a**2 + b**2), abs=1e-4)
    assert shared_fraction(np.exp(logs), ["s1", "s2", "s3", "s4"]) == 1.0  # no within spread
    assert shared_fraction(np.exp(logs), ["x"] * 4) == 0.0  # one group: nothing between


def test_a_layout_with_a_driver_no_calibration_run_had_is_noted():
    """A trial's plan chose ep 32 across nodes on a profile whose c_A2A no run had informed
    (kept from its base, listed under not_informed) without a word. App. E on 512 B200 at
    ep 16 (etp 1: two 8-GPU nodes) and pp 16 (16 nodes): both drivers present."""
    from dataclasses import replace
    from pathlib import Path

    from mosaic.config.job_schema import load_job
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.calibration import load_calibration
    from mosaic.perf.prediction_coverage import assess_plan

    job = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"
    spec = load_job(job, ["parallelism.ep=16"])
    base = load_calibration("default")
    for not_informed, expected in ((("chi_a2a", "chi_pp"), ["chi_a2a", "chi_pp"]),
                                   (("chi_overlap",), [])):
        calibration = replace(base, not_informed=not_informed)
        prediction = predict_job(spec, calibration).prediction
        note = assess_plan(calibration, spec.workload, spec.plan, "B200", prediction).note or ""
        assert [name for name in ("chi_a2a", "chi_pp") if f"{name} was not fitted" in note] \
            == expected


def test_a_plan_rows_layout_is_placed_on_nodes_as_the_time_model_places_it():
    from dataclasses import replace

    from mosaic.perf.calibration import load_calibration
    from mosaic.plan.coverage import _uninformed

    calibration = replace(load_calibration("default"), not_informed=("chi_a2a", "chi_pp"))
    row = {"tp": 1, "pp": 1, "cp": 1, "dp": 64, "ep": 32, "etp": 1}
    # ep 32 at stride 1 spans four 8-GPU nodes; no pipeline
    (note,) = _uninformed(calibration, row, 8)
    assert "chi_a2a was not fitted" in note
    assert _uninformed(calibration, {**row, "ep": 8}, 8) == []  # one node
    assert len(_uninformed(calibration, {**row, "ep": 8, "pp": 2, "dp": 32}, 8)) == 1  # pp


@pytest.mark.parametrize(("quantiles", "message"), [
    ({"low": 1.5, "median": 1.0, "high": 0.5}, "must satisfy low <= median <= high"),
    ({"low": 0.5, "median": 1.0, "high": 1e40}, "high: Input should be less than or equal to 1000"),
])
def test_ratio_quantiles_out_of_order_or_range_are_refused(quantiles, message) -> None:
    """A fuzz trial's hand-edited profile printed a tokens/s interval 4,772 .. 1,591 and an
    MFU interval up to 1e41 %."""
    document = COVERAGE.to_document()
    document["tokens_per_s_ratio"] = [{"scope": "all", "n_runs": 5, **quantiles}]
    with pytest.raises(MosaicInputError, match=message):
        parse_coverage(document, "f")


@pytest.mark.parametrize(("field", "value"), [("degrees.tp", [1, 0]), ("n_total", [-1, 1e12]),
                                              ("n_active", [1e9, float("inf")]),
                                              ("degrees.ep", [8, 2])])
def test_a_coverage_range_that_is_no_range_is_refused(field, value) -> None:
    """A fuzz trial: a tp range [1, 0] in a calibration file ended every prediction in a
    division by zero; negative and infinite bounds loaded without a word."""
    import copy
    from importlib import resources

    import yaml

    document = yaml.safe_load(resources.files("mosaic.perf").joinpath(
        "data", "calibration_default.yaml").read_text())
    coverage = copy.deepcopy(document["coverage"])
    block, _, key = field.rpartition(".")
    (coverage[block] if block else coverage)[key] = value
    with pytest.raises(MosaicInputError, match=rf"coverage\.{field} .*a range is two positive"):
        parse_coverage(coverage, "cal.yaml")


def test_inherited_runs_load_absent_as_not_recorded_and_round_trip_even_empty() -> None:
    """coverage.inherited_runs: absent (a profile written before) is None, "not recorded",
    which the cross-validation reads as maybe any run; [] is recorded, none beyond
    fitted_runs, and is written back, not dropped as the other empty lists are."""
    document = COVERAGE.to_document()
    assert "inherited_runs" not in document and parse_coverage(document, "f").inherited_runs \
        is None
    for recorded in ((), ("p1-run-a", "p1-run-b")):
        coverage = dataclasses.replace(COVERAGE, inherited_runs=recorded)
        assert coverage.to_document()["inherited_runs"] == list(recorded)
        assert parse_coverage(coverage.to_document(), "f") == coverage
    for bad, message in ((["ok", ""], "coverage.inherited_runs: a run id is a non-empty"),
                         ("p1-run-a", "inherited_runs"), ([3], "inherited_runs")):
        with pytest.raises(MosaicInputError, match=message):
            parse_coverage(dict(document, inherited_runs=bad), "f")
