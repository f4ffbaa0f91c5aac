"""Tables a person reads: every step-time term and memory component says what it is, and
columns of words are left-aligned while columns of numbers stay right-aligned."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console
from typer.testing import CliRunner

import mosaic.cli.common as common
from mosaic.cli.main import app
from mosaic.cli.stream_table import column_justify
from mosaic.perf.memory import COMPONENT_MEANINGS, COMPONENTS
from mosaic.perf.terms import STEP_TERMS, term_meaning

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_every_term_and_component_has_a_meaning():
    assert all(term.meaning for term in STEP_TERMS.values())
    assert all(COMPONENT_MEANINGS.get(name) for name in COMPONENTS)
    assert term_meaning("not_a_term") == ""


def test_perf_tables_say_what_each_row_is():
    result = CliRunner().invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml")],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    vocab = next(line for line in result.stdout.splitlines() if "│ vocab_stage" in line)
    assert "embedding, LM head and loss (Eq. 13)" in vocab
    logits = next(line for line in result.stdout.splitlines() if "│ logits" in line)
    assert "cross-entropy working set" in logits


def test_words_align_left_and_numbers_right(monkeypatch):
    rows = [["vocab_stage", "15.5459", "37.6%", "—"], ["optimizer", "0.0210", "0.1%", "ok"]]
    assert column_justify(["term", "s", "share", "note"], rows) == [
        "left", "right", "right", "left"]
    console = Console(file=io.StringIO(), width=80)
    monkeypatch.setattr(common, "console", console)
    common.print_table("t", ["term", "seconds"], [["a", "1.5"], ["longer", "12.25"]])
    lines = console.file.getvalue().splitlines()
    assert "│ a      │     1.5 │" in lines and "│ longer │   12.25 │" in lines


def test_the_versus_table_names_backbone_variants_by_depth_and_width(capsys):
    """A --backbone plan's variants all have q = 0 (the terminal's ranking shows L×d): the
    --versus table printed a column of 0s (a report review)."""
    from mosaic.cli.plan_render import print_versus

    best = {"q": 0, "layers": 48, "d_model": 2048, "experts": 128, "top_k": 8,
            "split_factor": 8, "n_active": 2.731e9, "sparsity": 0.909, "tokens": 4.096e11,
            "mfu": 0.083, "loss": 1.5896}
    versus = {"plans": [{"calibration": "default", "stack": "megatron-core",
                         "optimum": best}], "why": "same geometry"}
    print_versus(versus, ladder=False)
    backbone = capsys.readouterr().out
    assert "L×d" in backbone and "48×2048" in backbone
    print_versus(versus)
    ladder = capsys.readouterr().out
    assert "L×d" not in ladder and "48×2048" not in ladder  # a ladder's q names it


def test_a_cheapest_budget_past_the_plans_days_names_the_cheapest_within_them(capsys):
    # a trial: --days 30 --target-loss 1.33 chose 32 nodes x 51.43 days and never said that
    # 64 nodes x 25.72 days reached the target at the same cost
    from mosaic.cli.plan_render import print_cheapest

    optimum = {"q": 18, "experts": 128, "top_k": 1, "split_factor": 8, "sparsity": 0.9655}
    choice = {"nodes": 32, "days": 51.43, "gpu_hours": 316014.0, "cost_usd": 790036.0,
              "price_usd_per_gpu_hour": 2.5,
              "loss": 1.3293, "optimum": optimum}
    within = {"nodes": 64, "days": 25.72, "gpu_hours": 316014.0, "cost_usd": 790036.0,
              "loss": 1.3299, "optimum": optimum}
    document = {"target_loss": 1.33, "choice": choice, "window_days": 30.0,
                "choice_within_window": within, "options": [choice, within]}
    print_cheapest(document)
    out = capsys.readouterr().out
    assert "within --days 30" in out
    assert "64 nodes × 25.72 days, loss 1.3299, 790,036 USD (the same cost)" in out
    del document["choice_within_window"]
    print_cheapest(document)
    assert "no budget evaluated reaches the target" in capsys.readouterr().out
    document["window_days"] = 60.0  # the choice fits: nothing more to say
    print_cheapest(document)
    assert "within --days" not in capsys.readouterr().out


def test_a_bracketed_value_prints_as_written_in_every_table(capsys):
    # rich read '[mla_up_proj, mlp]' as a style tag and dropped it: explain's FP8 lever
    # printed 'recompute_modules=' (a trial); no table of mosaic styles a cell by markup
    from mosaic.cli.common import print_key_value_table, print_table

    value = "recompute_modules=[mla_up_proj, mlp]"
    print_key_value_table("settings", [("recipe", value)])
    print_table("settings", ["name", "value"], [["recipe", value]])
    out = capsys.readouterr().out
    assert out.count("[mla_up_proj, mlp]") == 2


def test_a_bracketed_title_prints_as_written(monkeypatch):
    # a review: titles were still read as markup, so `calibrate --out runs[bf16]/c.yaml`
    # and `bench --out runs[bf16]` named their folder 'runs/' (cells were plain already)
    import mosaic.cli.layouts_cmd as layouts_cmd
    from mosaic.cli.common import print_key_value_table, print_table

    console = Console(file=io.StringIO(), width=200)
    monkeypatch.setattr(common, "console", console)
    monkeypatch.setattr(layouts_cmd, "console", console)
    wide = "x" * 60  # a table wider than its title: the title is not wrapped
    print_key_value_table("Calibration written to runs[bf16]/c.yaml", [("k", wide)])
    print_table("mosaic bench -> runs[bf16]", ["a"], [[wide]])
    layouts_cmd._print_compact_table("Layouts of runs[bf16]/job.yaml", ["a"], [[wide]])
    assert console.file.getvalue().count("runs[bf16]") == 3


def test_the_within_days_row_says_what_to_change_and_how_long_a_capped_run_trains(capsys):
    # trials: --days 2 --cheapest-days 20,40 was told to add nodes, where no window as short
    # as 2 days had been evaluated; and a budget within --days 6 read '1 nodes x 6.804 days'
    # for a run that stops at tpp_max after 5.86
    from mosaic.cli.plan_render import print_cheapest

    optimum = {"q": 4, "experts": 8, "top_k": 1, "split_factor": 1, "sparsity": 0.7373}
    choice = {"nodes": 1, "days": 27.22, "train_days": 27.22, "gpu_hours": 5225.0,
              "cost_usd": None, "loss": 1.6492, "optimum": optimum}
    longer = {"nodes": 2, "days": 20.0, "train_days": 20.0, "gpu_hours": 7680.0,
              "cost_usd": None, "loss": 1.6213, "optimum": optimum}
    document = {"target_loss": 1.65, "choice": choice, "window_days": 2.0,
                "options": [choice, longer]}
    print_cheapest(document)
    out = " ".join(capsys.readouterr().out.split())
    assert "no budget evaluated trains within them (--cheapest-days with windows up to 2" in out
    assert "--cheapest-nodes" not in out
    capped = {"nodes": 2, "days": 6.804, "train_days": 5.862, "gpu_hours": 2251.0,
              "cost_usd": None, "loss": 1.8021, "optimum": optimum}
    document.update(window_days=6.0, choice_within_window=capped,
                    options=[choice, capped])
    print_cheapest(document)
    out = " ".join(capsys.readouterr().out.split())
    assert "2 nodes × 6.804 days (5.86 days trained), loss 1.8021" in out


def _same_cost_budgets() -> tuple[dict[str, Any], dict[str, Any]]:
    """A trial's 1 node x 27.22 days (loss 1.6492) and 2 nodes x 13.61 days (1.6494): the
    same GPU-days, the last bit of their GPU-hours apart."""
    optimum = {"q": 6, "experts": 8, "top_k": 1, "split_factor": 1, "sparsity": 0.7435}
    return ({"nodes": 1, "days": 27.2158, "gpu_hours": 5225.433600669608,
             "cost_usd": None, "loss": 1.6492, "optimum": optimum},
            {"nodes": 2, "days": 13.6079, "gpu_hours": 5225.433600669607,
             "cost_usd": None, "loss": 1.6494, "optimum": optimum})


def test_the_within_days_row_calls_costs_equal_but_for_rounding_the_same(capsys):
    from mosaic.cli.plan_render import print_cheapest

    choice, within = _same_cost_budgets()
    print_cheapest({"target_loss": 1.65, "choice": choice, "window_days": 20.0,
                    "choice_within_window": within, "options": [choice, within]})
    out = " ".join(capsys.readouterr().out.split())
    assert "2 nodes × 13.61 days, loss 1.6494, 5,225 GPU-hours (the same cost)" in out


def test_budgets_of_the_same_cost_are_listed_as_the_choice_orders_them(capsys):
    # a review: the 'Budgets evaluated' table sorted by the raw GPU-hours, so 2 nodes x
    # 13.61 days (the last bit cheaper, loss 1.6494) was listed above the choice, 1 node x
    # 27.22 days at loss 1.6492, which plan.cost orders first (equal cost: the lower loss)
    from mosaic.cli.plan_render import print_cheapest

    choice, other = _same_cost_budgets()
    print_cheapest({"target_loss": 1.65, "choice": choice, "window_days": 30.0,
                    "options": [choice, other]})
    table = capsys.readouterr().out.split("Budgets evaluated")[1]
    rows = [line.split()[1] for line in table.splitlines() if "5,225" in line]
    assert rows == ["1", "2"], table
