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

    Searched over Table 4's own geometry on the Table 3 envelope. Tolerances: MFU and
    tokens within 20%, the profile's held-out error on the 5.4B sweep (19.7%, the measured
    panel nearest Table 4's 14.5 B active), and the loss within 0.015 nats (the Table 2
    law's slope over a 20% token change). The prediction sits at -19.7% MFU and -20.0%
    tokens (docs/paper_reproduction.md): this is a reproduction at the edge of the model's
    measured error, and a change that moves it further fails here."""
    space = SearchSpace(q=(12,), experts=(96,), top_k=(2,), split_factor=(4,))
    result = paper.table3_plan(built_in_calibration("paper-p6b200"), workers=1, space=space)
    best = result.candidate(int(result.optimum_index))
    assert best["mfu"] == pytest.approx(paper.TABLE_4["mfu"], rel=0.20)
    assert best["tokens"] / 1e12 == pytest.approx(paper.TABLE_4["tokens_t"], rel=0.20)
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
