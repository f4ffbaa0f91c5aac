"""The paper's own results under its own stack (calibration profile paper-p6b200)."""

from __future__ import annotations

import pytest

from mosaic.perf.calibration import built_in_calibration
from mosaic.plan.envelope import SearchSpace
from mosaic.report import paper_reproduction as paper


def _by_quantity(rows: list[paper.Row]) -> dict[str, paper.Row]:
    return {row.quantity: row for row in rows}


def test_appendix_e_listing_under_the_papers_stack() -> None:
    """Appendix E prints 13.69% MFU at 44.9 s. Its FLOPs per step (MFU x peak x GPUs x
    step) are 6·N_act with the embedding and LM head: 17.62 B against mosaic's 14.46 B
    non-embedding N_act (257k vocabulary x 6144 x 2), a ratio the listing's own numbers
    give to within 1%. Like for like (ScalePlan's FLOPs over mosaic's step) mosaic's MFU is
    higher by exactly its shorter step: the step is the prediction compared, within 20%."""
    from mosaic.arch import count_parameters
    from mosaic.config.job_schema import load_job

    rows = _by_quantity(paper.appendix_e(built_in_calibration("paper-p6b200")))
    step = rows["step time (s)"].mosaic
    assert step == pytest.approx(44.9, rel=0.20)
    counts = count_parameters(load_job(paper.APPENDIX_E_JOB).workload.geometry)
    with_head = (counts.n_active + counts.embedding + counts.lm_head) / counts.n_active
    implied = 0.1369 * 44.9 / (rows["MFU (6·N_act, paper Eq. 1)"].mosaic * step)
    assert implied == pytest.approx(with_head, rel=0.01)
    assert rows["MFU on ScalePlan's FLOP count"].mosaic == pytest.approx(0.1369 * 44.9 / step)


def test_appendix_e_host_path_of_the_papers_stack_costs_more_than_a_modern_stacks() -> None:
    """The paper's stack pays host costs ScalePlan measured on it (642 kernels per layer,
    27 us launch gap, 24 ms per micro-batch, 10 ms EP dispatch per MoE layer); the modern
    default has none of them, so the host time of its launch path on the same job (Eq. 11's
    t_disp over the step, block_dispatch_floor_s) is far smaller. Neither binds here: the
    GPU work of a micro-batch is longer."""
    from mosaic.config.job_schema import load_job
    from mosaic.evaluate.job import predict_job

    spec = load_job(paper.APPENDIX_E_JOB)

    def host_path_s(profile: str) -> float:
        prediction = predict_job(spec, built_in_calibration(profile)).prediction
        assert prediction.block_dispatch_floor_s[0] < prediction.block_compute_s[0]
        return float(prediction.block_dispatch_floor_s[0])

    assert 4 * host_path_s("default") < host_path_s("paper-p6b200")


def test_table5_order_by_predicted_loss_and_measured_mfu_order() -> None:
    rows = paper.table5(built_in_calibration("paper-p6b200"))
    # Table 5 ranks IDs 1-4 by predicted loss in the order printed.
    losses = [r["loss"] for r in rows]
    assert losses == sorted(losses)
    # The measured MFU order (normalised 0.84, 0.69, 0.91, 1.00): ID 2 slowest, ID 4
    # fastest; mosaic's predicted MFU must order those two ends the same way.
    mfu = [r["mfu"] for r in rows]
    assert min(mfu) == mfu[1] and max(mfu) == mfu[3]


@pytest.mark.slow
def test_table4_geometry_under_the_papers_stack() -> None:
    """Table 4: q=12, E=96, K=2, G=4 at 12.38% MFU, 1.42 T tokens, loss 1.3898.

    Table 4's MFU and tokens are the paper estimator's predictions at 14.5 B active, 3.3x
    beyond the largest model of the measured sweeps the profile is fitted to. mosaic predicts
    them 20% lower (9.9% MFU, 1.14 T: docs/paper_reproduction.md, pinned here within 1%),
    just outside its own 90% held-out interval (top 12.25%): the gap is documented, not
    tested away (a 20% tolerance used to sit 0.02% from failing; a trial).
    Independent checks: the tokens per point of MFU are the paper's (Eq. 25: D = MFU x peak x
    window / 6 N_act, the same for both at one geometry, window and goodput) to within the
    paper's own rounding (its 1.42 T is 0.4% above Eq. 25 at its 12.38%), and the loss is
    the Table 2 law's at those tokens, within 0.015 nats of the paper's."""
    space = SearchSpace(q=(12,), experts=(96,), top_k=(2,), split_factor=(4,))
    result = paper.table3_plan(built_in_calibration("paper-p6b200"), workers=1, space=space)
    best = result.candidate(int(result.optimum_index))
    assert best["mfu"] == pytest.approx(0.0995, rel=0.01)  # printed 9.9% in the docs
    assert best["tokens"] / 1e12 == pytest.approx(1.136, rel=0.01)  # printed 1.14 T
    per_point = best["tokens"] / best["mfu"]
    paper_per_point = paper.TABLE_4["tokens_t"] * 1e12 / paper.TABLE_4["mfu"]
    assert per_point == pytest.approx(paper_per_point, rel=0.01)
    assert best["loss"] == pytest.approx(paper.TABLE_4["loss"], abs=0.015)


def test_figure1_on_its_own_uncapped_grid_finds_an_interior_cluster_optimum() -> None:
    """Fig. 1 (4 p6 nodes, 5 days, C_model = 3.3e21, "we do not cap any model dimension"):
    the model-FLOPs prescription is infeasible, the cluster optimum sits at an interior
    sparsity below S_feas_max, and it beats the prescription trained for the tokens the
    window gives. On Table 3's grid instead (TPP >= 40, q >= 8: a reviewer's trial) the
    comparison flipped sign, because that grid is not the figure's."""
    rows = _by_quantity(paper.figure1(built_in_calibration("paper-p6b200"), workers=1))
    assert rows["C_model prescription feasible"].mosaic == "no"
    assert rows["cluster-optimal S (G = 4)"].mosaic.endswith("interior")
    assert 0.9 < rows["S_feas_max at C_model"].mosaic < 0.981
    assert rows["loss gap, prescription - cluster optimum (nats)"].mosaic > 0


def test_figure9_reports_the_layout_ranking_validate_reports() -> None:
    """Five 5.4B runs make a top-5 overlap 100% by construction (a reviewer's trial): the
    rows carry each model's Spearman, the same figure `mosaic validate` gives."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from mosaic.cli.main import app

    sweeps = Path(__file__).resolve().parents[3] / "shared/calibration/paper_p6b200_sweeps.yaml"
    if not sweeps.exists():
        pytest.skip(f"{sweeps} not present (the shared calibration data is outside the repo)")
    rows = paper.figure9(sweeps, built_in_calibration("paper-p6b200"))
    result = CliRunner().invoke(app, ["validate", str(sweeps), "--calibration",
                                      "paper-p6b200", "--json"])
    groups = json.loads(result.stdout)["aggregate"]["spearman_groups"]
    assert {row["group"]: row["spearman"] for row in rows} == pytest.approx(groups)


def test_table4_geometry_on_its_own_layout_is_a_plan_of_that_layout() -> None:
    """The like-for-like row (Table 4's geometry on pp8 ep8 mb4) is the plan search's own
    score of that layout: the same step as the Table 3 search pinned to it."""
    from mosaic.perf.layouts import LayoutLimits

    calibration = built_in_calibration("paper-p6b200")
    rows = _by_quantity(paper.table4_own_layout(calibration))
    space = SearchSpace(q=(12,), experts=(96,), top_k=(2,), split_factor=(4,))
    pinned = LayoutLimits(tp=(1,), pp=(8,), vpp=(1,), cp=(1,), ep=(8,), micro_batches=(4,),
                          sharding=("zero1",), checkpointing=("full",))
    result = paper.table3_plan(calibration, workers=1, space=space, limits=pinned)
    best = result.candidate(int(result.optimum_index))
    assert rows["Table 4 geometry on pp8 ep8 mb4: MFU"].mosaic == pytest.approx(best["mfu"],
                                                                                rel=1e-9)
    assert rows["Table 4 geometry on pp8 ep8 mb4: step (s)"].mosaic == pytest.approx(
        best["step_time_s"], rel=1e-9)


def test_table4_own_layout_bubble_is_seven_eighths_of_its_launch_bound_blocks() -> None:
    """Table 4's layout runs 1024 sequences over dp 32 at micro-batch 4: 8 micro-batches on
    8 stages, so the 1F1B bubble is (8 - 1)/8 of the block time (Narayanan et al. 2021),
    and on the paper's stack that block time is its host launch floor (Eq. 11's max), as
    docs/paper_reproduction.md says: the bubble row is 7/8 of the floor's per-step time."""
    calibration = built_in_calibration("paper-p6b200")
    rows = _by_quantity(paper.table4_own_layout(calibration))
    bubble = rows["Table 4 geometry on pp8 ep8 mb4: pipeline bubble (s)"].mosaic
    exposed_floor = rows["Table 4 geometry on pp8 ep8 mb4: launch floor beyond the GPU work "
                         "(s)"].mosaic
    step = paper.table4_own_layout_step(calibration)
    assert exposed_floor > 0  # launch-bound: the floor is longer than the GPU work
    assert step.block_dispatch_floor_s[0] > step.block_compute_s[0]
    # block_dispatch_floor_s is n_mb·t_disp·(1 + f_bubble), f_bubble = 7/8: the bubble is
    # f_bubble·n_mb·t_disp = (7/8)/(15/8) of it
    assert bubble == pytest.approx(7 / 15 * float(step.block_dispatch_floor_s[0]), rel=1e-9)
