"""`mosaic plan` and `mosaic sweep`: JSON documents, figures, one-line errors."""

import html
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.plan import LawSamples, save_samples

runner = CliRunner()
SMALL = ["--nodes", "1", "--days", "2", "--q", "4,6", "--experts", "8,16,32", "--top-k", "1,2",
         "--split-factor", "1,4", "--s-min", "0.5", "--workers", "1"]
GEOMETRY = ("layers", "d_model", "experts", "top_k", "split_factor", "n_active", "n_total",
            "sparsity", "tokens", "mfu", "tokens_per_s", "loss")
PLAN = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "sharding", "micro_batch", "checkpointing")


def run_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def plan_doc() -> dict:
    return run_json("plan", *SMALL, "--price-per-gpu-hour", "3.5")


def test_plan_json_document(plan_doc):
    optimum = plan_doc["optimum"]
    assert set(GEOMETRY) <= set(optimum) and set(PLAN) <= set(optimum["plan"])
    candidates = plan_doc["candidates"]
    # The optimum is the first candidate, plus the law's extrapolation flags for it and
    # its layout against the calibration (envelope verdict, residual intervals).
    extras = {"coverage", "coverage_summary", "extrapolation"}
    assert {k: v for k, v in candidates[0].items() if k != "extrapolation"} == {
        k: v for k, v in optimum.items() if k not in extras}
    assert candidates[0]["extrapolation"]["flags"] == optimum["extrapolation"]["flags"]
    tokens = optimum["coverage"]["intervals"]["tokens_per_s"]
    assert tokens["low"] < optimum["tokens_per_s"] < tokens["high"]
    # P(optimal) under the performance model's uncertainty even without law samples
    assert plan_doc["uncertainty"]["sources"][0].startswith("performance")
    # without law samples the intervals say the law is taken as exact (a trial)
    assert plan_doc["uncertainty"]["sources"][1].startswith("not the law's")
    assert [c["loss"] for c in candidates] == sorted(c["loss"] for c in candidates)
    assert plan_doc["envelope"]["n_devices"] == 8
    assert plan_doc["c_peak_flops"] == pytest.approx(2.25e15 * 8 * 2 * 86400)
    assert plan_doc["gpu_hours"] == pytest.approx(8 * 48)
    assert plan_doc["cost_usd"] == pytest.approx(8 * 48 * 3.5)
    counts = plan_doc["counts"]
    assert counts["trainable"] == len(candidates)
    assert counts["geometries"] == len(candidates) + len(plan_doc["infeasible"])
    assert plan_doc["model_flops_comparison"]["continuous_optimum"]["at_sparsity_boundary"]
    assert "nu" in plan_doc["allocation_exponents"]


def test_plan_human_output():
    result = runner.invoke(app, ["plan", *SMALL, "--top", "3"])
    assert result.exit_code == 0, result.output
    for fragment in ("MOSAIC optimum", "Top 3 of", "Model-FLOPs view", "C_peak"):
        assert fragment in result.stdout


def test_plan_uncertainty_cheapest_and_plots(tmp_path, law):
    rng = np.random.default_rng(0)
    samples = LawSamples(law.form, law.log_coefs + 0.01 * rng.standard_normal((50, 11)))
    save_samples(samples, tmp_path / "samples.json")
    doc = run_json("plan", *SMALL, "--bootstrap-samples", str(tmp_path / "samples.json"),
                   "--target-loss", "1.8", "--cheapest-nodes", "1,2", "--cheapest-days", "1,2",
                   "--plot", str(tmp_path / "figs"))
    assert doc["uncertainty"]["samples"] == 50
    assert 0 <= doc["uncertainty"]["robust_choice"]["p_optimal"] <= 1
    assert doc["cheapest"]["choice"]["loss"] <= 1.8
    written = {p.split("/")[-1] for p in doc["plots"]}
    assert {"frontier.png", "frontier.svg", "sparsity.svg", "flop_cost.png"} <= written


def test_samples_of_another_law_are_refused(tmp_path, law):
    """Samples scattered around another law made the point optimum's loss lie outside its
    own interval (a fuzz trial): samples whose range misses most of the plan's coefficients
    are refused, naming them."""
    rng = np.random.default_rng(0)
    other = LawSamples(law.form, law.log_coefs + 1.0 + 0.01 * rng.standard_normal((20, 11)))
    save_samples(other, tmp_path / "other.json")
    result = runner.invoke(app, ["plan", *SMALL, "--bootstrap-samples",
                                 str(tmp_path / "other.json")])
    assert result.exit_code == 2
    assert "not drawn around the law in use (11 of 11 coefficients" in result.output


def test_samples_name_the_fit_they_scatter_around(tmp_path, law):
    """Samples of a 19-run fit passed the range check for the law of 13 of those runs (a
    trial): a samples file records the estimate it was bootstrapped around, and another
    law is refused however close its coefficients lie; the law itself is accepted."""
    rng = np.random.default_rng(0)
    near = law.log_coefs + 0.001
    scattered = near + 0.05 * rng.standard_normal((40, 11))
    save_samples(LawSamples(law.form, scattered, near), tmp_path / "near.json")
    result = runner.invoke(app, ["plan", *SMALL, "--bootstrap-samples",
                                 str(tmp_path / "near.json")])
    assert result.exit_code == 2
    assert "bootstrapped around another fit than the law in use (11 of 11" in result.output
    # each coefficient's relative gap, exp(0.001) - 1 = 1.0e-03 by hand (six digits of two
    # seeds' fits read alike, a trial)
    assert "1.0e-03 apart" in " ".join(result.output.split())
    save_samples(LawSamples(law.form, scattered, law.log_coefs), tmp_path / "own.json")
    doc = run_json("plan", *SMALL, "--bootstrap-samples", str(tmp_path / "own.json"))
    assert doc["uncertainty"]["samples"] == 40


def test_young_daly_goodput_option():
    doc = run_json("plan", *SMALL, "--mtbf-gpu-hours", "10000", "--checkpoint-s", "60")
    goodput = doc["envelope"]["goodput"]
    assert goodput["model"] == "young-daly" and 0.9 < goodput["goodput"] < 1


@pytest.mark.parametrize(("args", "fragment"), [
    (["--days", "0"], "days: got 0.0; allowed: a number in"),
    (["--gpu", "X100"], "unknown device 'X100'"),
    (["--experts", "4", "--top-k", "8"], "the architecture grid is empty"),
    (["--experts", ""], "--experts is empty"),
    (["--tpp", "40"], "--tpp must be MIN:MAX"),
    (["--goodput", "0.9", "--mtbf-gpu-hours", "1000", "--checkpoint-s", "60"], "not both"),
    (["--nodes", "1", "--days", "0.01", "--q", "18", "--experts", "512", "--top-k", "8"],
     "no geometry of the grid is trainable"),
    # 12 GPUs: tp=3 cannot divide 32 heads, and dp=12 cannot divide a batch of 1024; the
    # advice names what to change instead of asking for more nodes or days
    (["--gpus-per-node", "3", "--nodes", "4", "--q", "8", "--experts", "16", "--top-k", "1",
      "--split-factor", "1"],
     "divisibility rules (e.g. tp=3 must divide heads=32; 12 GPUs and a global batch of 1024 "
     "sequences share only the factor 4, so tp·pp·cp must be a multiple of 3"),
    # a target below what the largest budget could train at 100% of the peak is refused
    # before the plan's own search
    ([*SMALL, "--target-loss", "0.5"], "target loss 0.5 is out of reach of every budget"),
])
def test_bad_budgets_are_one_line_exit_2(args, fragment):
    result = runner.invoke(app, ["plan", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_sweeps(tmp_path):
    days = run_json("sweep", "days", "--values", "1,2", *SMALL[:2], *SMALL[4:],
                    "--plot", str(tmp_path))
    assert [p["days"] for p in days["points"]] == [1.0, 2.0]
    assert days["points"][1]["optimum"]["loss"] <= days["points"][0]["optimum"]["loss"]
    assert (tmp_path / "sweep_days.png").stat().st_size > 0
    nodes = run_json("sweep", "nodes", "--values", "1,2", "--days", "2", *SMALL[4:])
    assert [p["nodes"] for p in nodes["points"]] == [1, 2]
    assert set(nodes["points"][0]["best_per_split"]) <= {"1", "4"}
    bad = runner.invoke(app, ["sweep", "days", "--values", "5,-1"])
    assert bad.exit_code == 2 and "days: got" in bad.output


def test_a_sweep_table_shows_each_optimums_layout_step_and_memory():
    """A trial had to re-run `plan` to see whether a budget's optimum needs pp16 or FSDP:
    the table carries the optimum's layout, step time and memory, as `plan` prints them."""
    args = ["--values", "1,2", *SMALL[:2], *SMALL[4:]]
    table = runner.invoke(app, ["sweep", "days", *args])
    assert table.exit_code == 0, table.output
    assert all(name in table.stdout for name in ("layout", "step s", "GiB"))
    point = run_json("sweep", "days", *args)["points"][1]["optimum"]
    plan = run_json("plan", *SMALL[:2], "--days", "2", *SMALL[4:])["optimum"]
    assert point["plan"] == plan["plan"] and point["step_time_s"] == plan["step_time_s"]
    assert f"{plan['step_time_s']:.3g}" in table.stdout


def test_model_flops_pick_is_compared_on_the_tables_terms():
    """The model-FLOPs pick trains its prescribed tokens under the same tpp_max cap as every
    row of the search, so its loss is never below its own table row and the gap to the
    cluster optimum is not negative (it read -0.0029 when the pick ignored the cap)."""
    doc = run_json("plan", "--q", "10,12", "--experts", "32,64", "--top-k", "1,2",
                   "--split-factor", "4", "--workers", "1")
    comparison = doc["model_flops_comparison"]
    pick = comparison["model_flops_geometry"]
    row = next(c for c in doc["candidates"]
               if all(c[k] == pick[k] for k in ("q", "experts", "top_k", "split_factor")))
    pick_loss = doc["optimum"]["loss"] + comparison["loss_gap_nats"]
    assert pick_loss >= row["loss"] - 1e-12
    assert comparison["loss_gap_nats"] >= 0


def test_a_plan_near_its_memory_limit_says_its_interval_reaches_past_it():
    """`mosaic perf` of this optimum (q16 E128 K1 G4 on 64 H100 nodes, 70.1 of 71.2 GiB
    usable) notes that its 90% memory interval reaches past usable memory; the plan said
    nothing (a trial). The note is the same one, from the same interval."""
    document = run_json("plan", "--gpu", "H100", "--nodes", "64", "--days", "30", "--stack",
                        "megatron-bridge", "--dispatcher", "deepep", "--q", "16",
                        "--experts", "128", "--top-k", "1", "--split-factor", "4",
                        "--workers", "1")
    coverage = document["optimum"]["coverage"]
    high = coverage["intervals"]["memory_gib"]["high"]
    usable = document["envelope"]["memory_headroom"]["usable_memory_bytes"] / 2**30
    assert high > usable
    assert coverage["note"].endswith(f"the memory interval reaches {high:.1f} GiB, above the "
                                     f"usable {usable:.1f} GiB: it may not fit")


def test_a_capped_optimum_says_how_much_of_the_window_it_trains(plan_doc):
    """D = tokens/s · window · goodput unless held at tpp_max: train_days is the share of the
    window D takes (a trial saw 787.8 B capped tokens trained in 5.7 of 30 days, with the
    cost of all 30 and no word of it)."""
    envelope = plan_doc["envelope"]
    for c in plan_doc["candidates"]:
        if c["tpp_capped"]:
            assert c["tokens"] < c["budget_tokens"]
            assert c["train_days"] == pytest.approx(
                c["tokens"] / (c["tokens_per_s"] * envelope["goodput"]["goodput"] * 86400))
        else:
            assert c["train_days"] == pytest.approx(envelope["days"])
    capped = runner.invoke(app, ["plan", "--nodes", "8", "--days", "40", "--q", "4",
                                 "--experts", "8", "--top-k", "1", "--split-factor", "1",
                                 "--s-min", "0.5", "--workers", "1"],
                           env={"COLUMNS": "300"})  # one line per row
    assert capped.exit_code == 0, capped.output
    assert "capped" in capped.stdout and "days of the window" in capped.stdout
    # what the window would train, for a team whose model is chosen (a trial), and the
    # micro-batches Table 3's search tries, which `layouts` extends to 8
    assert "tokens the window trains" in capped.stdout and "raise --tpp" in capped.stdout
    assert "micro-batches 1, 2, 4 (mosaic layouts also tries 8" in capped.stdout


def test_restart_time_alone_is_refused_as_the_other_young_daly_inputs_are():
    """--mtbf-gpu-hours or --checkpoint-s alone is refused; --restart-s alone was dropped
    without a word (goodput 1.0; a trial)."""
    result = runner.invoke(app, ["plan", *SMALL, "--restart-s", "600"])
    assert result.exit_code == 2
    assert "--restart-s enters the Young-Daly goodput" in result.output


def test_a_zero_goodput_cluster_is_refused_by_plan_and_one_row_of_a_node_sweep():
    """MTBF 1 GPU-hour, 60 s checkpoints: 8 GPUs fail every 450 s and keep
    1 - sqrt(120/450) = 48% of the window, 32 GPUs every 112.5 s, under 2·60 s, so
    sqrt(2·60/112.5) > 1: goodput 0. `plan` on 4 nodes says so in one line; a node sweep
    over 1 and 4 nodes used to stop on the same line, and now plans 1 node with the 4-node
    row empty and that reason under the table."""
    young_daly = ["--mtbf-gpu-hours", "1", "--checkpoint-s", "60"]
    grid = SMALL[4:]
    plan = runner.invoke(app, ["plan", "--nodes", "4", "--days", "2", *grid, *young_daly])
    assert plan.exit_code == 2
    assert "Young-Daly goodput is 0 on 32 GPUs: the job fails every 112 s" in plan.output
    sweep = runner.invoke(app, ["sweep", "nodes", "--values", "1,4", "--days", "2", *grid,
                                *young_daly])
    assert sweep.exit_code == 0, sweep.output
    assert "nodes 4: nothing is trainable on 4 nodes in 2 days: Young-Daly goodput is 0" \
        in " ".join(sweep.stdout.split())
    # each node count's goodput is a column where it differs (it was only in the JSON)
    header, one_node, four_nodes = (
        [cell.strip() for cell in line.split("│" if "│" in line else "┃")[1:3]]
        for line in sweep.stdout.splitlines() if line.startswith(("┃ nodes", "│     1 ",
                                                                  "│     4 ")))
    assert header == ["nodes", "goodput"]
    assert one_node == ["1", f"{1 - (120 / 450) ** 0.5:.3f}"] and four_nodes == ["4", "0.000"]
    pytest.importorskip("plotly")
    from mosaic.report.html.validate_sweep_page import sweep_sections

    document = run_json("sweep", "nodes", "--values", "1,4", "--days", "2", *grid,
                        *young_daly)
    page_table = "".join(next(section for section in sweep_sections(document)
                              if section.anchor == "table").body)
    assert '<th class="">goodput</th>' in page_table and ">0.000</td>" in page_table


def test_an_fp4_plan_gives_its_mfu_against_the_fp4_lane_too():
    """An NVFP4 plan's MFU is against the bf16 peak (paper Eq. 1) and had no GEMM-lane
    figure (a trial); B200's datasheet dense peaks are 9 PFLOP/s NVFP4 and 2.25 bf16, so the
    lane's MFU is a quarter of it."""
    doc = run_json("plan", *SMALL, "--precision", "fp4")
    for candidate in (doc["optimum"], *doc["candidates"]):
        assert candidate["mfu_gemm_lane"] == pytest.approx(candidate["mfu"] * 2.25 / 9.0)
    said = runner.invoke(app, ["-q", "plan", *SMALL, "--precision", "fp4"]).stdout
    assert f"({doc['optimum']['mfu_gemm_lane']:.2%} of the GEMM lane's peak)" in said


def test_a_gpu_count_with_a_factor_the_batch_lacks_is_explained():
    """72 GB200 trays (288 GPUs = 2^5·9) at batch 1024 (2^10): dp divides the batch, so
    tp·pp·cp carries the 9 and most geometries have no layout; a trial was told only
    'tp=3 must divide heads=32'. By hand: gcd(288, 1024) = 32, 288 / 32 = 9."""
    from mosaic.plan.search import model_parallel_factor_note

    assert "share only the factor 32, so tp·pp·cp must be a multiple of 9" in (
        model_parallel_factor_note(288, 1024))
    assert model_parallel_factor_note(256, 1024) == ""
    result = runner.invoke(app, ["plan", "--gpu", "GB200", "--nodes", "72", "--days", "30",
                                 "--q", "8,12", "--experts", "32,64", "--top-k", "2",
                                 "--split-factor", "4", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "Few layouts divide this cluster; 288 GPUs and a global batch of 1024" in " ".join(
        result.stdout.split())


def test_target_loss_prints_every_budget_it_evaluated():
    """The text output named the chosen budget only; the others were in --json alone."""
    args = ["plan", *SMALL, "--target-loss", "1.8", "--cheapest-nodes", "1,2",
            "--cheapest-days", "1,2"]
    doc = run_json(*args)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    table = result.stdout.split("Budgets evaluated", 1)[1]
    for option in doc["cheapest"]["options"]:
        reaches = "yes" if option["loss"] is not None and option["loss"] <= 1.8 else "no"
        cells = [str(option["nodes"]), f"{option['days']:.4g}", f"{option['gpu_hours']:,.0f}",
                 f"{option['loss']:.4f}", reaches]
        assert any(all(cell in line for cell in cells) for line in table.splitlines()), cells
    # the chosen window's node count missed at a shorter one: the true minimum lies between
    # them, said (a trial paid 1.7x the budget a finer window reached)
    choice = doc["cheapest"]["choice"]
    missed = [o["days"] for o in doc["cheapest"]["options"]
              if o["nodes"] == choice["nodes"] and o["days"] < choice["days"]]
    text = " ".join(result.stdout.split())
    assert (f"at {choice['nodes']} nodes it lies between {max(missed):.4g} days (misses)"
            in text) is bool(missed), text


def test_a_law_files_caveats_are_repeated_when_planning_with_it(law):
    """A tiny ladder's law (coefficients on bounds, nothing held out) planned without a word
    about either (a trial): plan repeats what the law file's provenance says."""
    from dataclasses import replace

    from mosaic.law.law import fit_caveats

    assert fit_caveats(replace(law, provenance={})) == []
    shaky = replace(law, provenance={
        "at_bound": {"e": {"side": "lower", "bound": 1e-10}},
        "metrics": {"n_heldout": 0, "r2": -0.1}})
    notes = fit_caveats(shaky)
    assert len(notes) == 3
    assert "e at its lower bound 1e-10" in notes[0] and "held no run out" in notes[1]
    assert "R^2 -0.1" in notes[2]
    # exponents on a feature no run varied (a trial: a G = 8 pick from Clark's G = 1 runs,
    # whose eta only the fit's own output had called arbitrary)
    clark_like = replace(law, provenance={"unidentified": {"split_factor": ["eta"]}})
    (note,) = fit_caveats(clark_like)
    assert "exponent eta" in note and "not identified" in note


def test_a_law_that_could_not_identify_the_token_exponent_plans_nothing(law, tmp_path):
    """Clark et al.'s runs all train on ~130 B tokens: a law fitted to them has an arbitrary
    beta (on its bound of 10), and `law optimum` answered a 1.9-token run with exit 0 (a
    trial). Both commands that trade size against tokens refuse it in one line; G alone
    unidentified is a caveat, not a refusal."""
    from dataclasses import replace

    clark_like = tmp_path / "clark.json"
    replace(law, provenance={"unidentified": {"tokens": ["beta"], "split_factor": ["eta"]}}
            ).save(clark_like)
    for args in (["law", "optimum", "--compute", "1e21"], ["plan", *SMALL]):
        result = runner.invoke(app, [*args, "--law", str(clark_like)])
        assert result.exit_code == 2, result.output
        assert "could not identify D (exponent beta)" in result.output, result.output
    g_only = tmp_path / "g_only.json"
    replace(law, provenance={"unidentified": {"split_factor": ["eta"]}}).save(g_only)
    result = runner.invoke(app, ["law", "optimum", "--compute", "1e21", "--law", str(g_only)])
    assert result.exit_code == 0, result.output


def test_a_sweeps_best_per_g_held_at_the_token_cap_is_marked():
    """A G's best held at the tokens-per-parameter cap read the same loss at every window,
    unmarked (a trial took the column for a bug): its cell says (capped), as D's does."""
    args = ["--values", "2,8", *SMALL[:2], *SMALL[4:], "--tpp", "5:30"]
    doc = run_json("sweep", "days", *args)
    capped = [(point["days"], g) for point in doc["points"]
              for g, best in point["best_per_split"].items() if best["tpp_capped"]]
    assert capped  # G = 4's best trains past 30 tokens per parameter at both windows
    table = runner.invoke(app, ["sweep", "days", *args], terminal_width=400)
    rows = [line for line in table.stdout.splitlines() if line.startswith("│")]
    for days, g in capped:
        best = doc["points"][[p["days"] for p in doc["points"]].index(days)][
            "best_per_split"][g]
        row = next(r for r in rows if r.split("│")[1].strip() == f"{days:g}")
        assert f"{best['loss']:.4f} (capped)" in row, row
    assert "(capped): D held at the tokens-per-parameter cap" in table.stdout


def test_the_uncertainty_rows_say_what_each_rule_trades():
    """The minimax-regret choice read 'P(opt) 0.00' beside the optimum with no figure of what
    it minimises (a trial): each row gives its expected loss and its worst regret."""
    doc = run_json("plan", *SMALL)["uncertainty"]
    text = " ".join(runner.invoke(app, ["plan", *SMALL], terminal_width=300).stdout.split())
    for key in ("optimum", "robust_choice", "minimax_regret_choice"):
        choice = doc[key]
        assert (f"expected {choice['expected_loss']:.4f}, worst regret "
                f"{choice['max_regret']:.4f}") in text, key


@pytest.mark.parametrize("sweep", [["days", "--values", "1,2", "--nodes", "1"],
                                   ["nodes", "--values", "1,2", "--days", "2"]])
def test_a_sweeps_node_price_note_divides_by_its_own_node_types_gpus(sweep):
    """A GB200 node type (an NVL72 tray) holds 4 GPUs: 98 USD per 'GPU-hour' is 24.5 per GPU
    if it is the tray's price. `plan` said so; both sweeps divided by an HGX node's 8 and an
    NVL72 tray's 4 in general terms (a trial)."""
    from mosaic.errors import MosaicNote

    with pytest.warns(MosaicNote) as notes:
        result = runner.invoke(app, ["sweep", *sweep, *SMALL[4:], "--gpu", "GB200",
                                     "--price-per-gpu-hour", "98"])
    assert result.exit_code == 0, result.output
    said = [str(note.message) for note in notes if "a node's price?" in str(note.message)]
    assert said and all(m.endswith("divided by its 4 GPUs it is 24.5") for m in said)
    assert len(said) == 1  # once, not again by each point's cost


def test_the_cheapest_budget_whose_run_stops_early_says_the_days_it_trains():
    """A budget whose optimum is held at tpp_max is costed at the days it trains, and the
    table says so beside its GPU-hours (the window's were printed)."""
    args = ["plan", "--nodes", "1", "--days", "2", "--q", "4", "--experts", "8", "--top-k",
            "1", "--split-factor", "1", "--s-min", "0.5", "--workers", "1",
            "--target-loss", "1.803", "--cheapest-nodes", "1", "--cheapest-days", "2,4,8",
            "--price-per-gpu-hour", "3"]
    doc = run_json(*args)
    choice = doc["cheapest"]["choice"]
    assert choice["train_days"] < choice["days"]
    assert choice["gpu_hours"] == pytest.approx(8 * choice["train_days"] * 24)
    assert choice["cost_usd"] == pytest.approx(choice["gpu_hours"] * 3)
    eight = next(o for o in doc["cheapest"]["options"] if o["days"] == 8)
    assert eight["gpu_hours"] < 8 * 8 * 24
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert f"the {choice['train_days']:.3g} days the run trains" in text
    assert f"({eight['train_days']:.3g} days trained)" in text


# 32 DGX-H100 nodes (400 Gb/s IB per GPU) and one geometry whose layouts must put expert
# parallelism (ep 16) across two 8-GPU hosts
CROSS_NODE = ["--system", "DGX-H100", "--nodes", "32", "--days", "20", "--q", "8",
              "--experts", "64", "--top-k", "2", "--split-factor", "1", "--s-min", "0.5",
              "--ep", "16", "--workers", "1"]


def test_halving_the_scale_out_rate_slows_a_cross_node_layout(tmp_path):
    """`--scale-out-gbps 200` on 400 Gb/s nodes: the envelope names the what-if (system,
    network, bytes/s per GPU), the catalog resolves its name (the plan exports as a job
    that predicts the same tokens/s), and the optimum's ep-16 layout, whose all-to-all
    crosses hosts, predicts fewer tokens/s."""
    from mosaic.hardware import get_system

    full = run_json("plan", *CROSS_NODE)
    half = run_json("plan", *CROSS_NODE, "--scale-out-gbps", "200")
    envelope = half["envelope"]
    assert envelope["system"] == "DGX-H100 (scale-out 200 Gb/s per GPU)"
    assert envelope["scale_out_bw_bytes_per_s_per_device"] == pytest.approx(200e9 / 8)
    assert full["envelope"]["scale_out_bw_bytes_per_s_per_device"] == pytest.approx(400e9 / 8)
    assert "200 Gb/s per GPU" in envelope["network"]
    assert get_system(envelope["system"]).scale_out_bw_bytes_per_s == pytest.approx(25e9)
    assert half["optimum"]["plan"]["ep"] == 16
    assert half["optimum"]["tokens_per_s"] < full["optimum"]["tokens_per_s"]
    (tmp_path / "plan.json").write_text(json.dumps(half))
    exported = runner.invoke(app, ["export", str(tmp_path / "plan.json"), "--to", "yaml",
                                   "--out", str(tmp_path / "job.yaml")])
    assert exported.exit_code == 0, exported.output
    job = run_json("perf", str(tmp_path / "job.yaml"))
    assert job["hardware"]["system"] == envelope["system"]
    assert job["tokens_per_s"] == pytest.approx(half["optimum"]["tokens_per_s"], rel=1e-9)
    # the envelope table names the node type and the links it is costed on
    text = runner.invoke(app, ["plan", *CROSS_NODE, "--scale-out-gbps", "200", "--top", "1"])
    assert text.exit_code == 0, text.output
    rows = {line.split("│")[1].strip() for line in text.stdout.splitlines()
            if line.startswith("│")}
    assert {"hardware", "network"} <= rows
    assert "DGX-H100 (scale-out 200 Gb/s per GPU)" in text.stdout
    assert "InfiniBand NDR 400 Gb/s, what-if rate" in text.stdout


@pytest.mark.parametrize("gbps", ["0", "-1", "nan", "inf"])
def test_a_bad_scale_out_rate_is_one_line_exit_2(gbps):
    result = runner.invoke(app, ["plan", *CROSS_NODE, "--scale-out-gbps", gbps])
    assert result.exit_code == 2, result.output
    assert "--scale-out-gbps: got" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_sweeps_take_the_scale_out_what_if():
    days = run_json("sweep", "days", "--values", "1", *SMALL[:2], *SMALL[4:],
                    "--scale-out-gbps", "100")
    assert days["envelope"]["system"] == "p6-b200.48xlarge (scale-out 100 Gb/s per GPU)"
    nodes = run_json("sweep", "nodes", "--values", "1", "--days", "2", *SMALL[4:],
                     "--scale-out-gbps", "100")
    assert nodes["envelope"]["scale_out_bw_bytes_per_s_per_device"] == pytest.approx(12.5e9)
    text = runner.invoke(app, ["sweep", "days", "--values", "1", *SMALL[:2], *SMALL[4:],
                               "--scale-out-gbps", "100"])
    assert text.exit_code == 0, text.output
    assert "node type: p6-b200.48xlarge (scale-out 100 Gb/s per GPU)" in text.stdout


@pytest.mark.parametrize("axis, fixed_flag", [("nodes", ["--days", "2"]),
                                              ("days", SMALL[:2])])
def test_a_sweep_table_names_what_it_holds_fixed_as_its_page_does(tmp_path, axis, fixed_flag):
    """`sweep nodes` titled its table "MOSAIC optimum per nodes (Fig. 11)" with the fixed
    window nowhere on screen, and `sweep days` without the node count, where the HTML
    report's "Fixed" line gives them (a review): the title names them in the page's words."""
    page = tmp_path / "sweep.html"
    args = ["sweep", axis, "--values", "1,2", *fixed_flag, *SMALL[4:]]
    document = run_json(*args, "--html", str(page))
    envelope = document["envelope"]
    table = runner.invoke(app, args, terminal_width=250)
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())
    held = (f"{envelope['days']:g} days on {envelope['system']}" if axis == "nodes"
            else f"{envelope['nodes']} × {envelope['system']}")
    assert f"(Fig. 11) at {held}" in text
    fixed = html.unescape(page.read_text()).split("Fixed: ", 1)[1].split(", batch ", 1)[0]
    assert f"(Fig. 11) at {fixed}" in text
