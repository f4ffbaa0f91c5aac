"""Calibration fit and cross-validation on runs with known answers."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mosaic.evaluate.calibrate import (
    RecordBaselines,
    calibrated_step_time_s,
    fit_calibration,
    leave_one_group_out,
)
from mosaic.perf.calibration import default_calibration, load_calibration

BASE = default_calibration()


def synthetic_baselines(multipliers: dict[str, float], seed: int = 0) -> RecordBaselines:
    """Runs whose measured time is the analytic time times a known per-stack factor."""
    rng = np.random.default_rng(seed)
    stacks = tuple(s for s in multipliers for _ in range(20))
    analytic = rng.uniform(0.5, 5.0, len(stacks))
    measured = analytic * np.array([multipliers[s] for s in stacks])
    zeros = np.zeros(len(stacks))
    return RecordBaselines(
        ids=tuple(f"run{i}" for i in range(len(stacks))), stacks=stacks,
        routings=("dense",) * len(stacks), analytic_step_time_s=analytic,
        attention_core_s=zeros, routed_expert_s=zeros, elementwise_s=zeros,
        block_compute_s=analytic, block_dispatch_floor_s=zeros, a2a_share=zeros,
        pp_extra_nodes=zeros, deep_local_pipeline=zeros, measured_step_time_s=measured,
        analytic_lane_mfu_with_attention=np.full(len(stacks), 0.4))


def test_fit_recovers_a_single_stack_multiplier_exactly():
    baselines = synthetic_baselines({"torchtitan": 1.5})
    fitted = fit_calibration(baselines, BASE, name="t", provenance="test")
    assert fitted.stack_multiplier("torchtitan") == pytest.approx(1.5, rel=1e-4)
    assert calibrated_step_time_s(baselines, fitted) == pytest.approx(
        baselines.measured_step_time_s, rel=1e-4)


def test_stack_multipliers_are_shrunk_towards_the_shared_value():
    baselines = synthetic_baselines({"megatron-core": 1.1, "torchtitan": 1.5})
    fitted = fit_calibration(baselines, BASE, name="t", provenance="test")
    megatron = fitted.stack_multiplier("megatron-core")
    torchtitan = fitted.stack_multiplier("torchtitan")
    shared = fitted.stack_multiplier("jax")  # unseen stack: the shared multiplier
    # The prior pulls each stack a little towards the shared value (between the two).
    assert 1.1 <= megatron < shared < torchtitan <= 1.5
    assert megatron == pytest.approx(1.1, rel=3e-2)
    assert torchtitan == pytest.approx(1.5, rel=3e-2)


@pytest.mark.xfail(strict=True, reason="known defect: one soft-L1 loss over the runs and "
                   "the priors caps the priors' pull too, so a stack's few runs cannot move "
                   "its deviation; the Gaussian-prior fixes tried move the held-out figures "
                   "both ways and were not adopted (docs/evidence/calibration_weighting.md)")
def test_four_exact_runs_of_a_stack_are_not_outweighed_by_its_prior():
    """Four runs of megatron-core measured at exactly 1.0x the analytical step, twenty of
    torchtitan at 1.5x (noiseless). The priors say a stack is rarely more than ~1.35x off the
    shared multiplier (STACK_PRIOR_LOG_SD 0.3); with the residuals the soft-L1 scale calls
    typical (10%), four exact runs carry 4/0.1² = 400 units of precision against the
    prior's 1/0.3² = 11, so the fit should keep megatron-core within 3% of 1.0, as the
    20-run test above keeps both. It gives 1.148 (and 1.044 for torchtitan when that stack
    has one run against four): a trial's own torchtitan run, 24% slower than predicted,
    moved its stack's multiplier down, 1.010 -> 0.979."""
    both = synthetic_baselines({"megatron-core": 1.0, "torchtitan": 1.5})
    keep = np.array([s == "torchtitan" for s in both.stacks])
    keep[:4] = True  # the first four megatron-core runs
    fitted = fit_calibration(both.subset(keep), BASE, name="t", provenance="test")
    assert fitted.stack_multiplier("megatron-core") == pytest.approx(1.0, rel=3e-2)
    assert fitted.stack_multiplier("torchtitan") == pytest.approx(1.5, rel=3e-2)


def test_a_stack_multiplier_stops_where_the_gemms_would_outrun_the_fastest_measured():
    """A multiplier scales the GEMMs too: below the analytical plateau (0.695 of peak) over
    B200's measured best GEMM rate (1,745 of 2,250 TFLOP/s, the catalog's MAMF), i.e.
    0.695 x 2250 / 1745 = 0.896, they would run faster than any measured GEMM. Runs asking
    for 0.80 get the floor, listed as a bound the fit ended on; 0.95 is left alone."""
    from mosaic.perf.machine import least_step_multiplier

    assert least_step_multiplier() == pytest.approx(0.695 * 2250 / 1745, rel=1e-9)
    low = fit_calibration(synthetic_baselines({"megatron-bridge": 0.80}), BASE, name="t",
                          provenance="test")
    assert low.stack_multiplier("megatron-bridge") == pytest.approx(0.695 * 2250 / 1745)
    assert "stack_overhead[megatron-bridge]" in low.at_bounds
    fine = fit_calibration(synthetic_baselines({"megatron-bridge": 0.95}), BASE, name="t",
                           provenance="test")
    assert fine.stack_multiplier("megatron-bridge") == pytest.approx(0.95, rel=1e-3)
    assert not any(label.startswith("stack_overhead") for label in fine.at_bounds)


def test_fit_recovers_attention_efficiency_factor():
    baselines = synthetic_baselines({"torchtitan": 1.0})
    attention = baselines.analytic_step_time_s * 0.4
    # Attention kernels at half the benchmarked efficiency double the attention time.
    measured = baselines.analytic_step_time_s + attention
    baselines = RecordBaselines(**{**baselines.__dict__, "attention_core_s": attention,
                                   "measured_step_time_s": measured})
    fitted = fit_calibration(baselines, BASE, name="t", provenance="test")
    predicted = calibrated_step_time_s(baselines, fitted)
    assert predicted == pytest.approx(measured, rel=2e-2)


def test_fit_recovers_the_elementwise_traffic_factor():
    # Two stacks with different element-wise shares: only a factor on the element-wise time
    # (not a stack multiplier) explains both; the data say 2.5x the counted traffic.
    baselines = synthetic_baselines({"megatron-core": 1.0, "torchtitan": 1.0})
    share = np.where(np.array(baselines.stacks) == "torchtitan", 0.3, 0.05)
    elementwise = baselines.analytic_step_time_s * share
    measured = baselines.analytic_step_time_s + 1.5 * elementwise
    baselines = RecordBaselines(**{**baselines.__dict__, "elementwise_s": elementwise,
                                   "measured_step_time_s": measured})
    fitted = fit_calibration(baselines, BASE, name="t", provenance="test")
    assert fitted.elementwise_traffic_factor == pytest.approx(2.5, rel=5e-2)
    assert calibrated_step_time_s(baselines, fitted) == pytest.approx(measured, rel=2e-2)


def test_closed_form_keeps_the_launch_floor_max_of_eq_11():
    # A run whose blocks are launch-bound (floor 3 s over 2 s of block work, 1 s outside
    # the blocks): slower element-wise kernels first fill the idle launch time.
    one = {name: np.array([value]) for name, value in (
        ("analytic_step_time_s", 4.0), ("block_compute_s", 2.0),
        ("block_dispatch_floor_s", 3.0), ("elementwise_s", 0.5), ("attention_core_s", 0.0),
        ("routed_expert_s", 0.0), ("a2a_share", 0.0), ("pp_extra_nodes", 0.0),
        ("deep_local_pipeline", 0.0), ("measured_step_time_s", 4.0),
        ("analytic_lane_mfu_with_attention", 0.4))}
    run = RecordBaselines(ids=("r",), stacks=("megatron-core",), routings=("dense",), **one)
    neutral = replace(BASE, chi_a2a=0.0, chi_pp=0.0, chi_overlap=0.0, stack_overhead={},
                      attention_efficiency={}, routing_imbalance={})
    for factor, expected in ((1.0, 4.0), (2.0, 4.0), (3.0, 4.0), (5.0, 1.0 + 2.0 + 4 * 0.5)):
        calibration = replace(neutral, elementwise_traffic_factor=factor)
        assert calibrated_step_time_s(run, calibration)[0] == pytest.approx(expected)


def fitted_on(run_ids: tuple[str, ...] | None, inherited: tuple[str, ...] | None = ()):
    """BASE as if fitted on ``run_ids`` (its coverage.fitted_runs), keeping values fitted on
    ``inherited`` (coverage.inherited_runs); None: not recorded."""
    if run_ids is None:
        return replace(BASE, coverage=None)
    return replace(BASE, coverage=replace(BASE.coverage, fitted_runs=run_ids,
                                          inherited_runs=inherited))


@pytest.mark.parametrize("recorded", ["these runs", "one held-out run", "not recorded",
                                      "kept values fitted on them", "kept values unrecorded"])
def test_leave_one_group_out_predicts_held_out_stack_from_the_others(recorded):
    """A base fitted on (or maybe fitted on) the held-out runs lends them nothing: each
    held-out group's stack is unseen in its training fold and predicted with the fold's
    shared multiplier, 1.2, so the held-out error is ~0. So does one fitted on other runs
    that kept values of a profile fitted on them (P2 refitted over P1: the lineage leak),
    or that does not record what its kept values were fitted on (written before it did)."""
    baselines = synthetic_baselines({"megatron-core": 1.2, "torchtitan": 1.2})
    groups = ["a" if s == "megatron-core" else "b" for s in baselines.stacks]
    base = {"these runs": fitted_on(baselines.ids),
            "one held-out run": fitted_on(("run0", "run39")),
            "not recorded": fitted_on(None),
            "kept values fitted on them": fitted_on(("p2-run",), baselines.ids),
            "kept values unrecorded": fitted_on(("p2-run",), None)}[recorded]
    cv = leave_one_group_out(baselines, groups, base)
    assert np.abs(cv.errors).max() < 1e-2
    assert cv.base_kept_groups == ()


def test_a_fold_the_base_was_not_fitted_on_keeps_the_base_stack_value():
    """A base fitted on other runs (the shipped profile, on the published runs) keeps its
    values for a stack the fold's runs lack, as the profile `mosaic calibrate` writes does:
    the held-out torchtitan runs (measured 1.5x the analytic step) are predicted with the
    base's torchtitan multiplier, error 1.5 / m_torchtitan - 1, not the fold's 1.2."""
    baselines = synthetic_baselines({"megatron-core": 1.2, "torchtitan": 1.5})
    groups = ["a" if s == "megatron-core" else "b" for s in baselines.stacks]
    base = fitted_on(("published-run-1", "published-run-2"), ("older-run",))
    cv = leave_one_group_out(baselines, groups, base)
    held_out = np.array(baselines.stacks) == "torchtitan"
    expected = 1.5 / BASE.stack_overhead["torchtitan"] - 1  # analytic x multiplier: no chi
    assert cv.errors[held_out] == pytest.approx(expected, rel=1e-6)
    assert cv.base_kept_groups == ("a", "b")


def test_built_in_calibration_loads_with_provenance():
    calibration = load_calibration(None)
    assert "published_runs" in calibration.provenance
    assert calibration.stack_multiplier("never-seen-stack") == calibration.stack_overhead[
        "default"]
    assert calibration.sources["chi_a2a"].startswith("c_A2A of Eq. 15")


def test_calibration_files_without_the_elementwise_factor_still_load(tmp_path):
    import yaml

    document = BASE.to_document()
    del document["constants"]["elementwise_traffic_factor"]
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(document))
    assert load_calibration(path).elementwise_traffic_factor == 1.0
    assert BASE.elementwise_traffic_factor > 1.0  # the built-in fit found extra traffic


def test_cross_validation_summary_by_hand():
    """Held-out tokens/s errors measured/predicted step time - 1 = +0.1, -0.2, +0.5."""
    from mosaic.evaluate.calibrate import CrossValidation

    result = CrossValidation(groups=("a", "a", "b"),
                             predicted_step_time_s=np.array([1.0, 1.0, 1.0]),
                             measured_step_time_s=np.array([1.1, 0.8, 1.5]))
    summary = result.summary(np.array([True, False, True]))
    assert summary["mape"] == pytest.approx(0.8 / 3)
    assert summary["moe_mape"] == pytest.approx(0.3) and summary["dense_mape"] == pytest.approx(0.2)
    assert summary["median_abs_error"] == pytest.approx(0.2)
    assert summary["max_abs_error"] == pytest.approx(0.5)
    assert summary["per_group_mape"] == pytest.approx({"a": 0.15, "b": 0.5})
    assert result.summary(np.array([True, True, True]))["dense_mape"] is None


def test_a_fit_on_one_stack_keeps_the_default_multiplier_for_the_others():
    """'default' is what a stack the runs lack gets: runs of one stack cannot tell it from
    their own stack's multiplier, so a fit on them keeps the base's (a trial's megatron-core
    fit moved a levanter job's step by 16%); a fit over several stacks fits it."""
    one = synthetic_baselines({"torchtitan": 1.5})
    fitted = fit_calibration(one, BASE, name="t", provenance="test", keep_unseen=True)
    assert fitted.stack_multiplier("torchtitan") == pytest.approx(1.5, rel=1e-4)
    assert fitted.stack_multiplier("default") == BASE.stack_multiplier("default")
    two = synthetic_baselines({"torchtitan": 1.5, "megatron-core": 1.2})
    refit = fit_calibration(two, BASE, name="t", provenance="test", keep_unseen=True)
    assert refit.stack_multiplier("default") != BASE.stack_multiplier("default")


def test_a_fit_names_the_stack_its_runs_ran_on():
    """The profile's stack (what plans and job files naming none run on) is the base's where
    the runs hold it, else the runs' one stack, else none: a fit on megatron-core runs over
    paper-p6b200 (stack paper-nemo) planned on paper-nemo, outside its own envelope (a
    trial)."""
    paper = load_calibration("paper-p6b200")
    assert paper.stack == "paper-nemo"
    mcore = synthetic_baselines({"megatron-core": 1.2})
    moved = fit_calibration(mcore, paper, name="t", provenance="test")
    assert moved.stack == "megatron-core"
    assert paper.description and not moved.description  # it told of the paper's stack
    assert fit_calibration(mcore, BASE, name="t", provenance="test").stack == "megatron-core"
    both = synthetic_baselines({"megatron-core": 1.2, "torchtitan": 1.4})
    assert fit_calibration(both, paper, name="t", provenance="test").stack is None
    own = synthetic_baselines({"paper-nemo": 1.1, "torchtitan": 1.4})
    kept = fit_calibration(own, paper, name="t", provenance="test")
    assert kept.stack == "paper-nemo" and kept.description == paper.description


def test_a_group_holding_most_runs_is_named_when_cross_validating(capsys):
    """A trial's 7 'acme' runs beside one 'bad' run: holding out acme fitted on one run, and
    its 24% held-out error came with no word of it."""
    from mosaic.cli.validate_cmd import _note_lopsided_groups

    _note_lopsided_groups("source", ["acme"] * 7 + ["bad"])
    assert ("note: --cv source: holding out 'acme' (7 of 8 runs) leaves 1 run(s) to fit"
            in capsys.readouterr().err)
    _note_lopsided_groups("source", ["a", "a", "b", "b", "c"])
    assert capsys.readouterr().err == ""


def test_calibrate_predicts_each_run_once(tmp_path, monkeypatch):
    """`mosaic calibrate` predicted every run with the starting calibration to find those it
    cannot predict, each scored run again uncorrected for the fit, every run again for the
    memory-scale fit and those reporting memory once more for the coverage: 3-4 predictions
    a run (a review). One uncorrected prediction serves all four: the memory model reads no
    calibration constant but the memory scale (perf.memory.scaled_memory_breakdown), which
    the time fit leaves as it was."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app
    from mosaic.config.run_records import load_run_records
    from mosaic.evaluate import calibrate, validation_report

    runs = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"
    n_runs = len(load_run_records(runs).records)
    predicted: list[int] = []
    for module in (calibrate, validation_report):
        real = module.predict_step

        def counting(workload, plans, *args, _real=real, **kwargs):
            predicted.append(len(plans))
            return _real(workload, plans, *args, **kwargs)

        monkeypatch.setattr(module, "predict_step", counting)
    for options in ([], ["--fit-memory"]):  # a fitted scale: the coverage predicts again
        predicted.clear()
        result = CliRunner().invoke(app, ["calibrate", str(runs), "--base", "default",
                                          "--cv", "none", "--out", str(tmp_path / "c.yaml"),
                                          *options])
        assert result.exit_code == 0, result.output
        with_memory = sum(1 for r in load_run_records(runs).records
                          if r.measured_memory_bytes and not r.oom)
        assert sum(predicted) == n_runs + (with_memory if options else 0)
