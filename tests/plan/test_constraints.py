"""Constraints a team plans under: model caps, layout pins and bounds, a dollar budget."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.perf.layouts import LayoutLimits
from mosaic.plan.envelope import DollarBudget, SearchSpace
from mosaic.text_values import parse_count

runner = CliRunner()
SMALL = ["--nodes", "1", "--days", "2", "--q", "4,6", "--experts", "8,16,32", "--top-k", "1,2",
         "--split-factor", "1,4", "--s-min", "0.5", "--workers", "1"]


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_parse_count_reads_suffixes():
    assert parse_count("--x", "235B") == pytest.approx(2.35e11)
    assert parse_count("--x", "1.5T") == pytest.approx(1.5e12)
    assert parse_count("--x", "800m") == pytest.approx(8e8)
    assert parse_count("--x", "3e10") == pytest.approx(3e10)
    with pytest.raises(MosaicInputError, match="--x must be a count such as 235B"):
        parse_count("--x", "lots")


def test_caps_keep_exactly_the_geometries_at_or_under_them():
    full = SearchSpace().enumerate()
    # a cap equal to a geometry's count keeps it (inclusive); the next larger ones go
    cap = float(np.sort(full.n_total)[len(full) // 2])
    active_cap = float(np.median(full.n_active))
    capped = SearchSpace(max_total_params=cap, max_active_params=active_cap,
                         s_max=0.95).enumerate()
    expected = (full.n_total <= cap) & (full.n_active <= active_cap) & (full.sparsity <= 0.95)
    assert len(capped) == int(expected.sum()) > 0
    assert capped.n_total.max() <= cap and capped.n_active.max() <= active_cap
    assert capped.sparsity.max() <= 0.95
    only_total = SearchSpace(max_total_params=cap).enumerate()
    assert cap in only_total.n_total and len(only_total) == int((full.n_total <= cap).sum())


def test_a_cap_below_every_geometry_names_the_smallest():
    smallest = float(SearchSpace().enumerate().n_total.min())
    with pytest.raises(MosaicInputError, match=r"--max-total-params 1e\+08: no geometry") as err:
        SearchSpace(max_total_params=1e8).enumerate()
    assert f"{smallest:.3g}" in str(err.value)


def test_s_max_below_s_min_is_refused():
    with pytest.raises(MosaicInputError, match=r"--s-max must be in \[s_min, 1\)"):
        SearchSpace(s_min=0.7, s_max=0.5)


def test_a_dollar_budget_buys_the_window_the_run_cost_inverts():
    # 1.5 M USD at 3 USD per GPU-hour on 256 GPUs: 1.5e6 / (3 * 256) h = 1953.125 h
    assert DollarBudget(1.5e6, 3.0).days(256) == pytest.approx(1953.125 / 24)
    with pytest.raises(MosaicInputError, match="--budget-usd must be a positive number"):
        DollarBudget(-1.0, 3.0)
    with pytest.raises(MosaicInputError, match=r"buys .* days, outside"):
        DollarBudget(1e12, 0.01).days(8)
    # the run's cost under a budget is the budget itself: 1e6 at 3.5 on 512 GPUs went round
    # the window to 999,999.9999 (a trial)
    from dataclasses import replace

    from mosaic.plan import Envelope, resolve_system
    from mosaic.plan.cost import run_cost

    envelope = Envelope(resolve_system("H100"), n_nodes=64, days=1.0)
    budgeted = replace(envelope, dollar_budget=DollarBudget(1e6, 3.5))
    assert run_cost(budgeted, 3.5).cost_usd == 1e6
    assert run_cost(budgeted, 7.0).cost_usd == pytest.approx(2e6)  # another price: its own cost


def test_layout_limits_document_round_trips():
    limits = LayoutLimits(tp=2, pp=[1, 2], micro_batches=(1, 2), sharding=["fsdp", "zero1"],
                          checkpointing=["full"])
    document = limits.to_dict()
    assert document == {"tp": [2], "pp": [1, 2], "micro_batches": [1, 2],
                        "sharding": ["zero1", "fsdp"], "checkpointing": ["full"]}
    assert LayoutLimits(**document) == limits


def test_plan_under_layout_pins_reports_and_breaks_down_the_pinned_layout():
    code, out, err = run("plan", *SMALL, "--pp", "1", "--sharding", "fsdp", "--mbs", "1",
                         "--json")
    assert code == 0, err
    document = json.loads(out)
    limits = document["assumptions"]["layout_limits"]
    assert limits["pp"] == [1] and limits["sharding"] == ["fsdp"]
    assert limits["micro_batches"] == [1]
    for candidate in document["candidates"]:
        plan = candidate["plan"]
        assert (plan["pp"], plan["sharding"], plan["micro_batch"]) == (1, "fsdp", 1)
    # the optimum's breakdown is of the pinned layout, not of an unconstrained search's
    step_plan = document["optimum_step"]["plan"]
    assert {k: step_plan[k] for k in document["optimum"]["plan"]} == document["optimum"]["plan"]


def test_plan_caps_show_in_the_envelope_and_bound_every_candidate():
    code, out, err = run("plan", *SMALL, "--max-total-params", "5B", "--top", "3")
    assert code == 0, err
    assert "model and data limits" in out and "N_tot <= 5 B" in out
    code, out, err = run("plan", *SMALL, "--max-total-params", "5B", "--json")
    document = json.loads(out)
    assert document["search_space"]["max_total_params"] == 5e9
    assert max(c["n_total"] for c in document["candidates"]) <= 5e9


def test_plan_with_a_dollar_budget_plans_the_window_it_buys():
    # 8 GPUs at 2 USD per GPU-hour: 960 USD buy 60 hours = 2.5 days
    code, out, err = run("plan", *SMALL[4:], "--nodes", "1", "--price-per-gpu-hour", "2",
                         "--budget-usd", "960", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["envelope"]["days"] == pytest.approx(2.5)
    assert document["cost_usd"] == pytest.approx(960)


def test_days_and_a_dollar_budget_plan_the_shorter_window_and_say_which_binds():
    """"21 days, and at most $1M" was refused ('give either --days or --budget-usd'). 960 USD
    at 2 USD per GPU-hour on 8 GPUs buy 960 / (2 x 8) = 60 hours = 2.5 days."""
    assert DollarBudget(960, 2, max_days=2).days(8) == 2
    assert DollarBudget(960, 2, max_days=2).binds(8) == "days"
    assert DollarBudget(960, 2, max_days=4).days(8) == pytest.approx(2.5)
    assert DollarBudget(960, 2, max_days=4).binds(8) == "budget"
    base = [*SMALL[4:], "--nodes", "1", "--price-per-gpu-hour", "2", "--budget-usd", "960"]
    for days, window, binds in (("2", 2.0, "days"), ("4", 2.5, "budget")):
        code, out, err = run("plan", *base, "--days", days, "--json")
        assert code == 0, err
        envelope = json.loads(out)["envelope"]
        assert envelope["days"] == pytest.approx(window)
        assert envelope["dollar_budget"]["binds"] == binds
        assert envelope["dollar_budget"]["budget_days"] == pytest.approx(2.5)
    code, out, err = run("plan", *base, "--days", "2")
    assert code == 0, err
    assert "--days 2 binds; --budget-usd 960 buys 2.5 days" in out
    code, out, err = run("plan", *base, "--days", "4")
    assert "--budget-usd 960 binds; --days 4 is longer" in out
    # where the days bind, the budget is not what the window costs: 2 days x 8 GPUs x 24 h
    # x 2 USD = 768 USD (the budget's 960 was printed as the cost)
    from mosaic.plan import Envelope, resolve_system
    from mosaic.plan.cost import run_cost

    envelope = Envelope(resolve_system("H100"), n_nodes=1, days=7.0,
                        dollar_budget=DollarBudget(960, 2, max_days=2))
    assert envelope.days == 2 and run_cost(envelope, 2).cost_usd == pytest.approx(768)


def test_a_budget_run_that_stops_at_its_tpp_cap_costs_the_days_it_trains(tmp_path):
    """A trial's budget plan printed its whole 1 M USD for a run that stopped after 5.6 of
    65.1 days at the tokens-per-parameter cap. 960 USD at 2 USD per GPU-hour on 8 GPUs buy
    2.5 days; with --q 4 and --tpp 40:41 the optimum's D is capped below D*, so the run
    trains 2.5 x D / D* days (Eq. 25) and costs 8 GPUs x 24 h x 2 USD for each of them."""
    args = [*SMALL[6:], "--q", "4", "--price-per-gpu-hour", "2", "--budget-usd", "960",
            "--tpp", "40:41"]
    code, out, err = run("plan", *args, "--nodes", "1", "--json", "--html",
                         str(tmp_path / "plan.html"))
    assert code == 0, err
    document = json.loads(out)
    optimum = document["optimum"]
    assert optimum["tpp_capped"]
    days = 2.5 * optimum["tokens"] / optimum["budget_tokens"]
    assert days < 2.4
    assert document["gpu_hours"] == pytest.approx(8 * 24 * days)
    assert document["cost_usd"] == pytest.approx(2 * 8 * 24 * days)
    assert document["train_days"] == pytest.approx(days)
    assert document["window_gpu_hours"] == pytest.approx(480)
    assert document["window_cost_usd"] == pytest.approx(960)
    assert document["budget_usd"] == 960
    cost = f"{2 * 8 * 24 * days:,.0f} at 2 USD per GPU-hour (the {days:.3g} days the run trains"
    assert cost in (tmp_path / "plan.html").read_text()
    code, out, err = run("plan", *args, "--nodes", "1")
    assert code == 0, err
    assert cost in " ".join(out.replace("│", " ").split())
    # a sweep point costs its optimum's days the same way
    code, out, err = run("sweep", "nodes", "--values", "1", *args, "--json")
    assert code == 0, err
    point = json.loads(out)["points"][0]
    assert point["cost_usd"] == pytest.approx(document["cost_usd"])
    assert point["gpu_hours"] == pytest.approx(document["gpu_hours"])
    # one name for the days trained: the candidate's train_days, in the cost block and the
    # sweep point alike (the cost block said cost_days)
    assert document["train_days"] == optimum["train_days"]
    assert point["train_days"] == pytest.approx(point["optimum"]["train_days"])


def test_an_equal_cost_node_sweep_gives_each_cluster_the_window_it_buys():
    # 1,920 USD at 2 USD per GPU-hour: 120 hours on 8 GPUs (5 days), 60 on 16 (2.5 days)
    code, out, err = run("sweep", "nodes", "--values", "1,2", *SMALL[4:], "--budget-usd",
                         "1920", "--price-per-gpu-hour", "2", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert [p["days"] for p in document["points"]] == pytest.approx([5.0, 2.5])
    assert [p["gpu_hours"] for p in document["points"]] == pytest.approx([960, 960])
    assert document["envelope"]["dollar_budget"] == {
        "usd": 1920, "price_usd_per_gpu_hour": 2, "budget_days": 5.0, "binds": "budget"}


@pytest.mark.parametrize(("args", "message"), [
    (["--budget-usd", "1000"], "--budget-usd needs --price-per-gpu-hour"),
    (["--stack", "torchtitan", "--sharding", "zero1"], "offers only none, fsdp, hsdp"),
    (["--max-active-params", "ten"], "--max-active-params must be a count such as 235B"),
    (["--tp", "0"], "--tp"),
    (["--sharding", "fsdp", "--versus", "paper-p6b200"],
     "--versus paper-p6b200: layout sharding: stack 'paper-nemo' offers only zero1"),
])
def test_bad_constraints_are_one_line_errors(args, message):
    code, _, err = run("plan", *SMALL, *args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_sweep_carries_the_constraints():
    code, out, err = run("sweep", "days", "--values", "2,4", *SMALL[4:], "--nodes", "1",
                         "--pp", "1", "--max-active-params", "0.5B", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["layout_limits"]["pp"] == [1]
    assert document["search_space"]["max_active_params"] == 5e8
    assert all(point["optimum"] is not None for point in document["points"])
    for point in document["points"]:
        assert point["optimum"]["plan"]["pp"] == 1
        assert point["optimum"]["n_active"] <= 5e8


def test_pins_that_leave_no_layout_are_named_with_the_rule_they_break():
    code, _, err = run("plan", *SMALL, "--vpp", "2", "--pp", "1")
    assert code == 2
    assert "vpp > 1 needs pp > 1" in err and "loosen --pp 1 --vpp 2" in err


def test_a_dollar_budget_too_small_says_to_raise_it():
    """At a fixed budget the GPU-hours are fixed: more nodes buy no tokens (a review)."""
    code, _, err = run("plan", *SMALL[4:], "--nodes", "1", "--budget-usd", "1",
                       "--price-per-gpu-hour", "2")
    assert code == 2 and err.rstrip().endswith(
        "raise --budget-usd, lower --tpp or search smaller models (--q, --max-total-params)")


def test_the_model_flops_view_flags_an_optimum_above_the_caps():
    """Eq. 16 is unconstrained in N: its continuous optimum was printed 4x above a
    --max-total-params cap without a word (a trial)."""
    code, out, err = run("plan", *SMALL, "--json")
    assert code == 0, err
    free = json.loads(out)["model_flops_comparison"]["continuous_optimum"]
    assert free["outside_caps"] == []
    # 1.3e9 keeps the grid's smallest geometries (1.29e9); Eq. 16 at their C_model asks for
    # about 1.5e9 parameters
    code, out, err = run("plan", *SMALL, "--max-total-params", "1.3e9", "--json")
    assert code == 0, err
    continuous = json.loads(out)["model_flops_comparison"]["continuous_optimum"]
    assert continuous["n_total"] > 1.3e9
    assert continuous["outside_caps"] == [
        f"n_total {continuous['n_total']:.3g} > --max-total-params 1.3e+09"]


def test_cap_errors_point_at_the_axes_that_lower_the_capped_quantity():
    with pytest.raises(MosaicInputError, match="give fewer --experts or more --top-k"):
        SearchSpace(experts=(128,), top_k=(1,), s_max=0.75).enumerate()
    with pytest.raises(MosaicInputError, match="give smaller --q or --top-k values"):
        SearchSpace(max_active_params=1e8).enumerate()


def test_an_unreachable_target_under_caps_names_the_caps():
    code, _, err = run("plan", *SMALL, "--max-total-params", "5B", "--target-loss", "0.5")
    assert code == 2 and "relax --max-total-params" in err


def test_compare_lists_the_layout_limits_that_differ(tmp_path):
    paths = []
    for name, extra in (("a", []), ("b", ["--pp", "1", "--sharding", "fsdp"])):
        code, out, err = run("plan", *SMALL, *extra, "--json")
        assert code == 0, err
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(out)
    code, out, err = run("compare", str(paths[0]), str(paths[1]), "--json")
    assert code == 0, err
    fields = {row["field"]: row for row in json.loads(out)["input_differences"]}
    assert fields["layout_limits.sharding"]["b"] == ["fsdp"]
    assert fields["layout_limits.pp"]["b"] == [1]


def test_bounded_unique_data_scores_the_effective_tokens():
    """--unique-tokens U: the law sees D' = U + U·R*(1 - exp(-(D/U - 1)/R*)) (Muennighoff et
    al. 2023, Eq. 5); a U no run exhausts changes nothing."""
    from mosaic.law import default_law
    from mosaic.law.repetition import R_D_STAR

    code, out, err = run("plan", *SMALL, "--json")
    assert code == 0, err
    free = json.loads(out)
    plenty = json.loads(run("plan", *SMALL, "--unique-tokens", "1e15", "--json")[1])
    assert plenty["optimum"]["loss"] == free["optimum"]["loss"]
    assert plenty["optimum"]["epochs"] < 1
    unique = free["optimum"]["tokens"] / 8  # the unconstrained optimum would read it 8 times
    code, out, err = run("plan", *SMALL, "--unique-tokens", f"{unique:.6g}", "--json")
    assert code == 0, err
    scarce = json.loads(out)
    unique = scarce["search_space"]["unique_tokens"]
    for candidate in scarce["candidates"]:
        repeats = max(candidate["tokens"] / unique - 1, 0)
        effective = min(candidate["tokens"], unique) + unique * R_D_STAR * (
            1 - np.exp(-repeats / R_D_STAR))
        assert candidate["effective_tokens"] == pytest.approx(effective, rel=1e-12)
        assert candidate["epochs"] == pytest.approx(candidate["tokens"] / unique)
        assert candidate["loss"] == pytest.approx(float(default_law().predict(
            candidate["n_total"], effective, candidate["sparsity"],
            candidate["split_factor"])), rel=1e-12)
    assert scarce["optimum"]["loss"] > free["optimum"]["loss"]


def test_repeated_data_reaches_the_uncertainty_and_the_extrapolation_flags():
    """The default (performance-only) uncertainty and the extrapolation flags judged the
    trained tokens D while the law saw D' (a review)."""
    code, out, err = run("plan", *SMALL, "--json")
    free = json.loads(out)
    unique = free["optimum"]["tokens"] / 8
    code, out, err = run("plan", *SMALL, "--unique-tokens", f"{unique:.6g}", "--json")
    assert code == 0, err
    scarce = json.loads(out)
    optimum = scarce["optimum"]
    first = scarce["uncertainty_candidates"][0]
    free_first = free["uncertainty_candidates"][0]
    low, high = first["loss_interval"]
    assert low <= optimum["loss"] <= high  # the interval is of the losses the search scored
    assert first["loss_median"] > free_first["loss_median"]  # repeated data costs loss
    flags = {f["quantity"]: f for f in optimum["extrapolation"]["flags"]}
    if "tokens" in flags:
        assert flags["tokens"]["value"] == pytest.approx(optimum["effective_tokens"])


def test_an_equal_cost_sweep_report_states_the_budget_and_each_window(tmp_path):
    page = tmp_path / "sweep.html"
    code, _, err = run("sweep", "nodes", "--values", "1,2", *SMALL[4:], "--budget-usd",
                       "1920", "--price-per-gpu-hour", "2", "--html", str(page))
    assert code == 0, err
    html = page.read_text()
    assert "1,920 USD (2 USD per GPU-hour), on" in html and "Fixed: 5 days" not in html
    assert "(each node count the window it buys)" in html


# The sweep: 960 USD at 2 USD per GPU-hour buys 2.5 days on one node (8 GPUs), 1.25
# on two; --days 2 is the shorter window on one node only. q=4 at tpp <= 41 stops early.
EARLY_SWEEP = ["sweep", "nodes", "--days", "2", *SMALL[4:], "--q", "4",
               "--price-per-gpu-hour", "2", "--budget-usd", "960", "--tpp", "40:41"]


def test_a_sweep_title_names_the_limit_that_binds_and_marks_runs_that_stop_early():
    """The sweep table said 'at 960 USD' where --days bound, and gave no sign that a point's
    cost counted only the days its run trains (a review)."""
    document = json.loads(run(*EARLY_SWEEP, "--values", "1,2", "--json")[1])
    one, two = document["points"]
    assert one["dollar_budget"]["binds"] == "days" and two["dollar_budget"]["binds"] == "budget"
    for point in (one, two):
        assert point["train_days"] < point["days"]
        assert point["window_cost_usd"] == pytest.approx(point["window_gpu_hours"] * 2)
    result = runner.invoke(app, [*EARLY_SWEEP, "--values", "1,2"], terminal_width=250)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "(Fig. 11) at 960 USD (2 USD per GPU-hour) or 2 days, whichever is shorter" in text
    assert ("window: --days 2 binds at nodes 1 (960 USD buys "
            f"{one['dollar_budget']['budget_days']:.3g} days there); --budget-usd 960 binds "
            "at nodes 2 (--days 2 is longer)") in text
    for point in (one, two):
        assert f"{point['cost_usd']:,.0f} \u2020" in text
        assert (f"nodes {point['nodes']}: {point['train_days']:.3g} of {point['days']:.3g} "
                f"days (the window: {point['window_gpu_hours']:,.0f} GPU-hours, "
                f"{point['window_cost_usd']:,.0f} USD)") in text
    assert "\u2020: GPU-hours and cost count the days the run trains" in text
    # where --days binds at every point, the title names the days, not the budget
    result = runner.invoke(app, [*EARLY_SWEEP, "--values", "1"], terminal_width=250)
    text = " ".join(result.stdout.split())
    assert "(Fig. 11) at 2 days (--days binds: 960 USD at 2 USD per GPU-hour buys more)" in text
    assert "at 960 USD" not in text


def test_a_sweep_page_marks_runs_that_stop_early_and_names_the_limit_that_binds(tmp_path):
    page = tmp_path / "sweep.html"
    code, out, err = run(*EARLY_SWEEP, "--values", "1", "--json", "--html", str(page))
    assert code == 0, err
    point = json.loads(out)["points"][0]
    html = page.read_text()
    assert "Fixed: 2 days (--days binds: 960 USD at 2 USD per GPU-hour buys more), on" in html
    assert "the window it buys" not in html
    for key in ("gpu_hours", "cost_usd"):
        assert f">{point[key]:,.0f} \u2020</td>" in html
    assert "window: --days 2 binds at nodes 1" in html
    assert (f"\u2020: GPU-hours and cost count the days the run trains, D held at the "
            f"tokens-per-parameter cap (--tpp), not the whole window: nodes 1: "
            f"{point['train_days']:.3g} of 2 days") in html
