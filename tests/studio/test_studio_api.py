"""The studio's JSON API against the CLI: same schema, same numbers, bounded work."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.main import app as cli
from mosaic.studio.jobs import DEFAULT_FORM
from mosaic.studio.plan_runner import MAX_GEOMETRIES, PlanRunner
from mosaic.studio.server import bind_warning, is_loopback

from .conftest import running_studio

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY_PLAN = {"plan.q": "8,10", "plan.experts": "8,16", "plan.top_k": "1,2",
             "plan.split_factor": "1,2", "plan.nodes": "4", "plan.days": "10"}
TINY_PLAN_ARGS = ["--q", "8,10", "--experts", "8,16", "--top-k", "1,2", "--split-factor",
                  "1,2", "--nodes", "4", "--days", "10", "--workers", "1"]


def cli_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def wait_plan(studio, timeout_s: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, body = studio.call("/api/plan/status")
        if body["current"] and body["current"]["state"] != "running":
            return body["current"]
        time.sleep(0.2)
    raise AssertionError("the plan did not finish")


def test_prediction_is_the_cli_prediction_of_the_exported_job(studio, tmp_path):
    """Export the edited job as YAML, run `mosaic perf` on it: the same numbers."""
    form = {**DEFAULT_FORM, "batch.micro_seqs": "2", "parallelism.pp": "4"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 200 and body["ok"], body
    _, exported = studio.call("/api/export", {"form": form, "target": "yaml"})
    path = tmp_path / exported["filename"]
    path.write_text(exported["text"])
    document = cli_json("perf", str(path))
    prediction = body["prediction"]
    for key in ("step_time_s", "tokens_per_s", "mfu", "memory_gib", "feasible"):
        assert prediction[key] == pytest.approx(document[key], rel=1e-12), key
    assert prediction["breakdown_s"] == pytest.approx(document["breakdown_s"], rel=1e-12)
    assert prediction["coverage"] == document["coverage"]  # envelope verdict and intervals
    assert prediction["plan"]["micro_batch"] == 2 and prediction["plan"]["pp"] == 4
    # the model block is the ladder geometry q=12, E=96, K=2, G=4 (paper Table 4: 327 B)
    assert body["model"]["n_total"] == pytest.approx(327.2e9, rel=1e-3)


def test_prediction_reports_its_server_time_and_valid_charts(studio):
    # the latency itself is measured by benchmarks/bench_studio.py, not asserted here
    import plotly.graph_objects as go

    _, body = studio.call("/api/perf", {"form": dict(DEFAULT_FORM)})
    assert 0 < body["predict_ms"] <= body["total_ms"]
    for name in ("step", "memory"):
        figure = go.Figure(body["figures"][name])  # raises on anything outside plotly's schema
        assert figure.layout.template.layout.colorway  # drawn with the report's template
    capacity_gib = body["prediction"]["memory_capacity_gib"]
    capacity, usable = go.Figure(body["figures"]["memory"]).layout.shapes
    assert capacity.y0 == capacity.y1 == pytest.approx(capacity_gib)
    # and the usable share feasibility is judged against (90% of the device by default)
    fraction = body["prediction"]["usable_memory_fraction"]
    assert fraction == 0.9 and usable.y0 == pytest.approx(capacity_gib * fraction)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("batch.micro_seqs", "0", "greater than 0"),
    ("batch.global_seqs", "abc", "integer"),
    ("parallelism.sharding", "zero9", "sharding"),
    ("hardware.system", "no-such-node", "unknown system"),
    # a number typed into a text field is the text typed (it answered "Input should be a
    # valid string (got 1000.0)", naming no node type)
    ("hardware.system", "0", "unknown system '0': known systems are"),
    ("hardware.system", "1e3", "unknown system '1e3': known systems are"),
    ("performance.stack", "1e3", "stack '1e3': unknown; known stacks"),
    # the job schema's "job: unknown device ..." was in the general line, beside no field
    ("hardware.gpu", "B2OO", "unknown device 'B2OO'"),
    ("ladder.q", "0", "1..819"),
    ("ladder.split_factor", "7", "divisor of d_ff"),
])
def test_errors_name_the_field(studio, field, value, words):
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, field: value}})
    assert status == 422 and not body["ok"]
    assert list(body["errors"]) == [field], body
    assert words in body["errors"][field]


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"hardware.gpu": "B2OO", "hardware.system": "DGX-B200"}, "hardware.gpu",
     "unknown device 'B2OO'"),
    ({"hardware.gpu": "B200", "hardware.system": "B2OO"}, "hardware.system",
     "unknown system 'B2OO'"),
])
def test_an_unknown_catalog_name_is_beside_its_field_with_both_given(studio, changes, field,
                                                                     words):
    """With both hardware fields given, the job schema resolves them ('job: unknown ...'):
    the message is beside the field whose name the catalog lacks, not the general line."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, **changes}})
    assert status == 422 and list(body["errors"]) == [field], body
    assert words in body["errors"][field]


@pytest.mark.parametrize("field", ["hardware.system", "hardware.gpu", "performance.stack",
                                   "ladder.q", "parallelism.dispatcher"])
def test_a_long_field_value_is_not_echoed_whole(studio, field):
    """A 200,000-character node type came back whole in the 422 message (a trial): the
    message shows its start and its length."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, field: "x" * 200_000}})
    assert status == 422 and list(body["errors"]) == [field], body.get("errors", {}).keys()
    assert "(200,000 characters)" in body["errors"][field]
    assert len(body["errors"][field]) < 1000


def test_a_rule_on_two_fields_is_shown_beside_both(studio):
    """dp·micro_batch must divide the batch: the node count sets dp, so the rule belongs to
    the nodes field as much as to the micro-batch (a trial's 100,000 nodes were blamed on
    the micro-batch alone), and to the global batch it names."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, "batch.micro_seqs": "3"}})
    assert status == 422
    assert sorted(body["errors"]) == ["batch.global_seqs", "batch.micro_seqs", "hardware.nodes"]
    assert all("dp·micro_batch=32·3 must divide global_batch=1024" in message
               for message in body["errors"].values())


@pytest.mark.parametrize(("changes", "fields", "words"), [
    ({"batch.global_seqs": "1023"},
     ["hardware.nodes", "batch.micro_seqs", "batch.global_seqs"],
     "dp·micro_batch=32·4 must divide global_batch=1023"),
    ({"batch.seq_len": "2050", "parallelism.cp": "2"},
     ["parallelism.cp", "batch.seq_len"], "2·cp=2·2 must divide seq_len=2050"),
    ({"ladder.experts": "100"}, ["parallelism.ep", "ladder.experts"],
     "ep=8 must divide experts=100"),
    ({"parallelism.ep": "5"}, ["parallelism.ep", "ladder.experts"],
     "ep=5 must divide experts=96"),
    # a model imported from a config.json: no ladder field is shown to hold the message
    ({"model.source": "hf", "hf.config": json.dumps({
        "model_type": "mixtral", "hidden_size": 1024, "num_hidden_layers": 8,
        "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2048,
        "vocab_size": 32000, "num_local_experts": 12, "num_experts_per_tok": 2})},
     ["parallelism.ep"], "ep=8 must divide experts=12"),
])
def test_a_layout_rule_naming_a_job_quantity_is_beside_its_field(studio, changes, fields,
                                                                words):
    """A trial typed a global batch of 1023 (a sequence length of 2050 under cp 2, a ladder
    E of 100): the refusal, which names global_batch (seq_len, experts), was shown beside the
    nodes and degrees but not beside the field just edited."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, **changes}})
    assert status == 422 and list(body["errors"]) == fields, body
    assert all(words in message for message in body["errors"].values())


@pytest.mark.parametrize(("changes", "fields"), [
    ({"performance.fp8_dot_product_attention": "true"},
     ["performance.fp8_dot_product_attention", "performance.precision"]),
    ({"performance.fused_grouped_mlp": "true"},
     ["performance.fused_grouped_mlp", "performance.precision"]),
    ({"hardware.system": "DGX-H100", "performance.precision": "nvfp4"},
     ["performance.precision"]),
    # a lane the device has no peak for (a trial found it above the form)
    ({"hardware.system": "DGX-A100", "performance.precision": "fp8"},
     ["performance.precision"]),
    ({"performance.stack": "torchtitan"}, ["parallelism.sharding", "performance.stack"]),
    ({"performance.quantised_gemms": "routed_experts"},
     ["performance.quantised_gemms", "performance.stack"]),
    ({"performance.quantised_gemms": "routed_experts", "performance.stack": "torchtitan",
      "parallelism.sharding": "fsdp"},
     ["performance.quantised_gemms", "performance.precision"]),
])
def test_a_rule_between_settings_is_shown_beside_the_fields_it_names(studio, changes, fields):
    """A trial found these messages above the form, beside no field: each goes beside the
    fields it names ('fp8_dot_product_attention needs precision fp8 or mxfp8')."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, **changes}})
    assert status == 422 and list(body["errors"]) == fields, body
    assert "layout: layout" not in next(iter(body["errors"].values()))


def test_a_layout_rule_naming_the_sharding_and_the_stack_is_beside_those_fields(studio):
    """nemo-automodel runs zero1 only with pp = ep = 1: the refusal ('sharding zero1 with
    pp=8, ep=8: nemo-automodel runs ...') was shown beside pp and ep alone, though changing
    the sharding or the stack is as much the fix (a trial)."""
    form = {**DEFAULT_FORM, "performance.stack": "nemo-automodel"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 422, body
    assert list(body["errors"]) == ["parallelism.sharding", "parallelism.pp",
                                    "parallelism.ep", "performance.stack"], body["errors"]
    assert len(set(body["errors"].values())) == 1
    assert "invalid parallel layout: sharding zero1" in body["errors"]["performance.stack"]


def test_messages_in_the_pages_words(studio):
    """The export target and a missing editor are said without the CLI's --to or the
    internal '_general' key; a left-out ladder field is missing, not "got ''" (a trial)."""
    status, body = studio.call("/api/export", {"form": DEFAULT_FORM, "target": None})
    assert status == 422 and body["errors"]["_general"].startswith("export target None is")
    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, "plan.grid": "model"}})
    assert status == 422 and "_general" not in body["errors"]["plan.grid"]
    form = {k: v for k, v in DEFAULT_FORM.items() if k != "ladder.q"}
    status, body = studio.call("/api/perf", {"form": form})
    _, emptied = studio.call("/api/perf", {"form": {**form, "ladder.q": ""}})
    assert status == 422 and list(body["errors"]) == ["ladder.q"]
    assert body["errors"] == emptied["errors"] and "got" not in body["errors"]["ladder.q"]


def test_a_stage_count_rule_is_shown_beside_pp_and_vpp(studio):
    """pp·vpp = 16·4 = 64 stages for 48 layers: the schema's message goes beside both
    fields of the product (a trial found it beside pp alone)."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, "parallelism.pp": "16",
                                                      "parallelism.vpp": "4"}})
    assert status == 422
    assert sorted(body["errors"]) == ["parallelism.pp", "parallelism.vpp"], body
    assert all("pp·vpp = 16·4 = 64 pipeline stages for 48 layers" in m
               for m in body["errors"].values())


def test_the_ways_out_of_an_uneven_pipeline_are_form_fields(studio):
    """q=13 has 52 layers, which pp 8 does not divide; the message names
    performance.uneven_stages and parallelism.pipeline_layout, and the page has both (a
    trial found the message naming fields the page lacked): either makes the job valid."""
    form = {**DEFAULT_FORM, "ladder.q": "13"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 422
    message = body["errors"]["parallelism.pp"]
    assert "pp·vpp=8·1 must divide layers=52 (or set performance.uneven_stages" in message
    script = studio.text("/assets/studio.js")[1]
    for field in ("performance.uneven_stages", "parallelism.pipeline_layout"):
        assert f'["{field}", ' in script
    status, uneven = studio.call("/api/perf", {"form": {**form,
                                                        "performance.uneven_stages": "true"}})
    assert status == 200 and uneven["ok"], uneven
    # 52 blocks on 8 stages by hand: 7 on each of the first seven, 3 on the last
    stated = "Et*7|(t*7|)*6t*3L"
    status, given = studio.call("/api/perf", {"form": {**form,
                                                       "parallelism.pipeline_layout": stated}})
    assert status == 200 and given["ok"], given
    assert given["prediction"]["step_time_s"] == pytest.approx(
        uneven["prediction"]["step_time_s"], rel=1e-9)


def test_devices_not_filling_the_model_axes_are_shown_beside_them(studio):
    """pp=3 on 32 nodes of 8: 256 devices are not a multiple of tp·pp·cp=3; the message
    goes beside tp, pp, cp and the node count, not above the results (a trial)."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, "parallelism.pp": "3"}})
    assert status == 422
    assert sorted(body["errors"]) == ["hardware.nodes", "parallelism.cp", "parallelism.pp",
                                      "parallelism.tp"], body
    assert all("not a multiple of tp·pp·cp=3" in m for m in body["errors"].values())


def test_a_dense_model_with_expert_parallelism_says_it_has_no_experts(studio):
    """E = 0 (dense) beside the form's ep = 8 said 'ep=8 must divide experts=1' (a trial)."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, "ladder.experts": "0"}})
    assert status == 422
    assert "ep=8 > 1 needs experts: a dense model has none (use ep=1)" in body["errors"][
        "parallelism.ep"]
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, "ladder.experts": "0",
                                                      "parallelism.ep": "1"}})
    assert status == 200, body


def test_huggingface_config_model(studio):
    config = (EXAMPLES / "hf" / "mixtral-8x7b.json").read_text()
    form = {**DEFAULT_FORM, "model.source": "hf", "hf.config": config, "parallelism.pp": "4"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 200, body
    # Mixtral 8x7B: 46.7 B parameters, 12.9 B active (Jiang et al. 2024, Sec. 2)
    assert body["model"]["n_total_with_embedding"] == pytest.approx(46.7e9, rel=2e-3)
    assert body["model"]["n_active_with_embedding"] == pytest.approx(12.9e9, rel=5e-3)
    status, body = studio.call("/api/perf", {"form": {**form, "hf.config": "{oops"}})
    assert status == 422 and "not valid JSON" in body["errors"]["hf.config"]


def test_out_of_memory_is_a_prediction_with_its_reason(studio):
    form = {**DEFAULT_FORM, "parallelism.pp": "1", "batch.micro_seqs": "4",
            "performance.checkpointing": "none"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 200
    p = body["prediction"]
    assert not p["feasible"] and p["overshoot_gib"] > 0
    # The overshoot is over the usable share (perf.headroom: 0.9 by default), not the device.
    assert p["usable_memory_fraction"] == 0.9
    assert p["memory_gib"] == pytest.approx(
        p["usable_memory_fraction"] * p["memory_capacity_gib"] + p["overshoot_gib"])


def test_explain_ranks_the_levers_like_the_cli(studio, tmp_path):
    form = {**DEFAULT_FORM, "hardware.nodes": "8"}
    status, body = studio.call("/api/explain", {"form": form})
    assert status == 200, body
    _, exported = studio.call("/api/export", {"form": form, "target": "yaml"})
    path = tmp_path / "job.yaml"
    path.write_text(exported["text"])
    document = cli_json("explain", str(path))
    assert [lever["name"] for lever in body["levers"]] == [
        lever["name"] for lever in document["levers"]]
    assert [lever["gain"] for lever in body["levers"]] == pytest.approx(
        [lever["gain"] for lever in document["levers"]], nan_ok=True)
    assert body["bound"] == document["bound"]["summary"]
    # gains as bars from the 1x line, an unchanged lever a mark on it (49a9e1e5)
    traces = body["figure"]["data"]
    assert traces and all(t["base"] == 1.0 for t in traces if t["type"] == "bar")
    assert all(t["name"] == "unchanged" for t in traces if t["type"] != "bar")
    status, body = studio.call("/api/explain", {"form": {**form, "batch.micro_seqs": "3"}})
    assert status == 422 and "batch.micro_seqs" in body["errors"]


def test_layouts_rank_like_the_cli(studio, tmp_path):
    form = {**DEFAULT_FORM, "hardware.nodes": "8"}
    status, body = studio.call("/api/layouts", {"form": form})
    assert status == 200, body
    rows = body["rows"]
    tokens = [r["tokens_per_s_per_gpu"] for r in rows]
    assert tokens == sorted(tokens, reverse=True)
    _, exported = studio.call("/api/export", {"form": form, "target": "yaml"})
    path = tmp_path / "job.yaml"
    path.write_text(exported["text"])
    document = cli_json("layouts", str(path), "--top", "3")
    assert document["n_plans"] == body["n_plans"] and document["n_feasible"] == body["n_feasible"]
    assert [r["tokens_per_s_per_gpu"] for r in document["rows"]] == pytest.approx(tokens[:3])
    reasons = [r["reason"] for r in body["infeasible"]["out_of_memory_plans"]]
    assert reasons and all(r.startswith(("out of memory by", "over the 90% planning headroom by"))
                           for r in reasons)


def test_launch_config_export(studio):
    _, options = studio.call("/api/options")
    assert "megatron" in options["export_targets"]
    status, body = studio.call("/api/export", {"form": DEFAULT_FORM, "target": "megatron"})
    assert status == 200 and "--pipeline-model-parallel-size 8" in body["text"]
    status, body = studio.call("/api/export", {"form": DEFAULT_FORM, "target": "nope"})
    assert status == 422 and "export target 'nope' is not one of" in body["errors"]["_general"]


def test_plan_runs_to_a_report_equal_to_the_cli(studio):
    status, body = studio.call("/api/plan", {"form": TINY_PLAN})
    assert status == 200 and body["total"] == 12, body
    job = wait_plan(studio)
    assert job["state"] == "done" and job["done"] == job["total"] == 12
    optimum = cli_json("plan", *TINY_PLAN_ARGS)["optimum"]
    assert job["summary"]["loss"] == pytest.approx(optimum["loss"], rel=1e-12)
    assert job["summary"]["geometry"] == (f"q={optimum['q']} E={optimum['experts']} "
                                          f"K={optimum['top_k']} G={optimum['split_factor']}")
    status, html = studio.text(job["report_url"])
    assert status == 200 and "mosaic plan" in html and 'data-figure="fig-frontier"' in html
    # the CLI's whole document: uncertainty from the calibration's residuals (a trial: the
    # studio's report said 'not computed: the calibration records no residuals')
    assert 'data-figure="fig-uncertainty"' in html and "Not computed" not in html
    assert studio.text("/report/999")[0] == 404


def test_plan_with_a_price_a_budget_and_failures_equals_the_cli(studio):
    """A trial: the form had no price (its report said 'pass --price-per-gpu-hour'), no USD
    budget and no Young-Daly goodput. 4 nodes of 8 B200 at 3 USD per GPU-hour for 23,040
    USD buy 23,040 / (3 x 32) / 24 = 10 days."""
    form = {**TINY_PLAN, "plan.days": "", "plan.price_per_gpu_hour": "3",
            "plan.budget_usd": "23040", "plan.mtbf_gpu_hours": "50000",
            "plan.checkpoint_s": "120", "plan.restart_s": "600"}
    status, body = studio.call("/api/plan", {"form": form})
    assert status == 200, body
    job = wait_plan(studio)
    assert job["state"] == "done", job
    args = [a for a in TINY_PLAN_ARGS if a not in ("--days", "10")]
    cli = cli_json("plan", *args, "--price-per-gpu-hour", "3", "--budget-usd", "23040",
                   "--mtbf-gpu-hours", "50000", "--checkpoint-s", "120", "--restart-s", "600")
    assert cli["envelope"]["days"] == pytest.approx(10.0)
    assert job["summary"]["loss"] == pytest.approx(cli["optimum"]["loss"], rel=1e-12)
    # the goodput that scaled the tokens, for the page's plan table (a trial: it showed
    # none): Young-Daly on 32 GPUs, M = 50,000 h x 3,600 / 32 = 5.625e6 s, so
    # 1 - sqrt(2 x 120 / M) - 600 / M = 0.99336 (plan/goodput.py)
    job_mtbf_s = 50_000 * 3600 / 32
    expected = 1 - (2 * 120 / job_mtbf_s) ** 0.5 - 600 / job_mtbf_s
    assert job["summary"]["goodput"] == pytest.approx(expected, rel=1e-12)
    assert job["summary"]["goodput"] == cli["envelope"]["goodput"]["goodput"]
    assert job["summary"]["goodput_model"] == "young-daly"
    status, html = studio.text(job["report_url"])
    assert f"{cli['cost_usd']:,.0f} at 3 USD per GPU-hour" in html
    assert "set by the budget: 23,040 USD" in html
    # a bad price is a form error before any search (a review: it failed the job after it)
    status, body = studio.call("/api/plan", {"form": {**form, "plan.price_per_gpu_hour": "-3"}})
    assert status == 422 and "price" in str(body["errors"])
    # days beside a budget: the shorter window, as `mosaic plan --days 5 --budget-usd` (they
    # were refused together); the budget's 10 days are longer, so the 5 days bind
    status, body = studio.call("/api/plan", {"form": {**form, "plan.days": "5"}})
    assert status == 200, body
    job = wait_plan(studio)
    assert job["state"] == "done", job
    status, html = studio.text(job["report_url"])
    assert "set by --days 5, shorter than the 10 days the budget of 23,040 USD" in html


def test_plan_under_constraints_equals_the_cli(studio):
    """The form's caps and layout pins are `mosaic plan`'s options (docs/plan.md)."""
    form = {**TINY_PLAN, "plan.pp": "1", "plan.sharding": "fsdp",
            "plan.max_total_params": "40B"}
    status, body = studio.call("/api/plan", {"form": form})
    assert status == 200, body
    job = wait_plan(studio)
    assert job["state"] == "done", job
    optimum = cli_json("plan", *TINY_PLAN_ARGS, "--pp", "1", "--sharding", "fsdp",
                       "--max-total-params", "40B")["optimum"]
    assert optimum["plan"]["pp"] == 1 and optimum["plan"]["sharding"] == "fsdp"
    assert job["summary"]["loss"] == pytest.approx(optimum["loss"], rel=1e-12)
    status, html = studio.text(job["report_url"])
    assert "pp 1; " in html and "N_tot &lt;= 40 B" in html


def test_plan_with_a_searched_batch_equals_the_cli(studio):
    """`mosaic plan --global-batch auto` searches B_global in 64, 128, ..., 65,536 with the
    layout (plan/batch.py); the form answered "must be an integer, got 'auto'" (a trial). The
    studio's plan of auto is the CLI's: the same optimum at the same batch, which respects
    its DeepSeek bound and is not the fixed default's 1024."""
    from mosaic.plan.batch import AUTO_BATCHES

    small = {**TINY_PLAN, "plan.q": "8", "plan.top_k": "1"}  # 4 geometries
    status, body = studio.call("/api/plan", {"form": {**small, "plan.global_batch": "auto"}})
    assert status == 200 and body["total"] == 4 * len(AUTO_BATCHES), body
    job = wait_plan(studio, 240)
    assert job["state"] == "done" and job["done"] == job["total"], job
    assert job["batches"] == len(AUTO_BATCHES)
    args = ["--q", "8", "--experts", "8,16", "--top-k", "1", "--split-factor", "1,2",
            "--nodes", "4", "--days", "10", "--workers", "1"]
    cli = cli_json("plan", *args, "--global-batch", "auto")
    optimum = cli["optimum"]
    assert cli["batch"]["mode"] == "search" and cli["batch"]["candidates"] == list(AUTO_BATCHES)
    summary = job["summary"]
    assert summary["geometry"] == (f"q={optimum['q']} E={optimum['experts']} "
                                   f"K={optimum['top_k']} G={optimum['split_factor']}")
    assert summary["loss"] == pytest.approx(optimum["loss"], rel=1e-12)
    assert summary["global_batch"] == optimum["global_batch"] != 1024
    assert summary["batch_mode"] == "search" and summary["batch_rule"] == "deepseek"
    assert optimum["global_batch"] * 2048 <= optimum["batch_bound_tokens"]  # T_seq 2048
    # MIN:MAX reads as the CLI reads it: MIN, 2·MIN, ... up to MAX, under the form's rule
    from mosaic.studio.plan_runner import plan_batches

    batches, rule = plan_batches({"plan.global_batch": "512:1500", "plan.batch_rule": "kaplan"})
    assert batches == (512, 1024) and rule is not None and rule.name == "kaplan"
    assert plan_batches({"plan.global_batch": "1024"}) == ((1024,), None)  # fixed: no rule
    # the default rule, typed or left empty, with a fixed batch is `mosaic plan` without
    # --batch-rule; another rule would not be read, and is refused as --batch-rule is
    assert plan_batches({"plan.global_batch": "1024", "plan.batch_rule": ""}) == ((1024,), None)
    from mosaic.studio.jobs import FormError

    with pytest.raises(FormError) as refused:
        plan_batches({"plan.global_batch": "1024", "plan.batch_rule": "kaplan"})
    assert list(refused.value.errors) == ["plan.batch_rule"]
    assert "with a fixed global_batch 1024 it is not read" in refused.value.errors[
        "plan.batch_rule"]


def test_second_plan_is_refused_and_cancel_stops_the_first(studio):
    bigger = {**TINY_PLAN, "plan.q": "8,10,12,14", "plan.experts": "8,16,32,64,128",
              "plan.nodes": "32"}
    status, first = studio.call("/api/plan", {"form": bigger})
    assert status == 200, first
    status, second = studio.call("/api/plan", {"form": TINY_PLAN})
    assert status == 409 and "still running" in second["errors"]["_general"]
    _, cancelled = studio.call("/api/plan/cancel", {})
    assert cancelled["cancelled"]
    job = wait_plan(studio)
    assert job["state"] == "cancelled" and job["done"] < job["total"]
    assert job["report_url"] is None and "stopped after" in job["message"]


def test_a_cancel_after_the_last_geometry_keeps_the_finished_plan(studio):
    """A trial's cancel arrived after all 16 of 16 geometries were searched: the status said
    'stopped after 16/16 geometries, no report: cancelled'. The search is complete then;
    a cancel (or the time limit) stops only a search with geometries left."""
    from mosaic.studio.plan_runner import PlanJob, _StoppedError

    runner = PlanRunner(studio.app.state.runner.calibration, time_limit_s=1e-9)
    job = PlanJob(job_id=1, request={}, started_s=0.0)
    update = runner._progress(job)
    runner._cancel.set()
    update(16, 16)  # complete: neither the cancel nor the (long past) limit stops it
    assert (job.done, job.total) == (16, 16)
    with pytest.raises(_StoppedError):
        update(15, 16)


def test_a_cancel_after_the_last_batch_the_rule_leaves_keeps_the_finished_plan(monkeypatch):
    """A searched batch whose rule prunes the larger candidates (search_batch skips them
    before any layout search, and reports no progress for them): a cancel arriving as the
    last batch actually searched finishes left done < total, and threw the finished plan
    away. Every remaining batch pruned is a finished search; a cancel during an earlier
    batch still stops it."""
    import mosaic.plan.batch as batch_module
    from mosaic.perf.calibration import load_calibration

    real = batch_module.profile_geometries
    form = {**TINY_PLAN, "plan.q": "8", "plan.top_k": "1", "plan.global_batch": "auto"}

    def run(cancel_at: int | None) -> tuple[dict[str, Any], list[int]]:
        """The plan, with a cancel as batch ``cancel_at``'s last geometry is reported."""
        runner = PlanRunner(load_calibration(None))
        searched: list[int] = []

        def spy(envelope, grid, calibration, limits, progress, workers):
            searched.append(envelope.global_batch)

            def report(done: int, total: int) -> None:
                if envelope.global_batch == cancel_at and done >= total:
                    runner.cancel()  # arrives as this batch's search ends
                progress(done, total)
            return real(envelope, grid, calibration, limits, report, workers)

        monkeypatch.setattr(batch_module, "profile_geometries", spy)
        runner.start(form)
        runner.wait(240)
        return runner.status()["current"], searched

    finished, searched = run(None)
    assert finished["state"] == "done", finished
    # the case at hand: the rule pruned some candidates before their search
    assert 0 < len(searched) < finished["batches"], searched
    late, _ = run(searched[-1])
    assert late["state"] == "done" and late["report_url"], late
    assert late["summary"]["loss"] == pytest.approx(finished["summary"]["loss"], rel=1e-12)
    early, _ = run(searched[0])
    assert early["state"] == "cancelled" and early["report_url"] is None, early


def test_a_plan_asked_for_while_a_cancelled_one_stops_is_told_it_is_stopping(monkeypatch):
    """A cancel stops the search at its next progress report; a plan started in between was
    refused with 'still running ...; cancel it or wait', naming the cancel just sent."""
    import threading

    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.plan_runner import PlanBusyError, _StoppedError

    runner = PlanRunner(load_calibration(None))
    gate = threading.Event()

    def search(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        gate.wait(60)  # the search between two progress reports
        raise _StoppedError("cancelled")

    monkeypatch.setattr(runner, "_search", search)
    runner.start(TINY_PLAN)
    with pytest.raises(PlanBusyError, match=r"still running .*cancel it or wait"):
        runner.start(TINY_PLAN)
    assert runner.cancel()
    with pytest.raises(PlanBusyError) as refused:
        runner.start(TINY_PLAN)
    assert "is stopping (cancelled at 0/12 geometries)" in str(refused.value)
    assert "cancel it" not in str(refused.value)
    gate.set()
    runner.wait(60)
    assert runner.status()["current"]["state"] == "cancelled"
    assert runner.start(TINY_PLAN).job_id == 2  # once stopped, the next plan starts
    runner.cancel()
    runner.wait(60)


def test_plan_time_limit(studio):
    plans = PlanRunner(studio.app.state.runner.calibration, time_limit_s=1e-3)
    plans.start(TINY_PLAN)
    plans.wait(60)
    job = plans.status()["current"]
    assert job["state"] == "timed out" and "limit is 0.001 s" in job["message"]
    # what to change, not only the count (a trial)
    assert "--plan-time-limit-s" in job["message"] and "narrow the grid" in job["message"]


@pytest.mark.parametrize(("field", "value", "words"), [
    ("plan.tpp", "40", "MIN:MAX"), ("plan.tpp", "150:40", "TPP range"),
    ("plan.nodes", "x", "integer"),
    ("plan.days", "-1", "days"), ("plan.q", "8,y", "integers"),
    ("plan.gpu", "Z80", "unknown device"),
    ("plan.experts", ",".join(str(e) for e in range(2, 400)), str(MAX_GEOMETRIES)),
    # a grid too large is said under the field that lists the most values (a trial grew q
    # and saw it under experts)
    ("plan.q", ",".join(str(q) for q in range(4, 400)), str(MAX_GEOMETRIES)),
    ("plan.max_total_params", "lots", "a count such as 235B"),
    ("plan.max_active_params", "1e3", "no geometry"),
    ("plan.sharding", "zero9", "unknown sharding"), ("plan.pp", "0", "pp"),
    ("plan.unique_tokens", "a lot", "a count such as 235B"),
    # rules between fields are shown beside the field they name (a trial found them above
    # the form)
    ("plan.price_per_gpu_hour", "-1", "price per GPU-hour must be a positive number"),
    ("plan.memory_fraction", "0", "memory fraction must be a number in (0, 1]"),
    ("plan.nodes", "1000000", "devices (nodes x GPUs per node)"),
    # the batch by `mosaic plan --global-batch`'s parser, its rule by --batch-rule's
    ("plan.global_batch", "lots", "global_batch must be N, MIN:MAX or auto"),
    ("plan.global_batch", "3_2", "global_batch must be N, MIN:MAX or auto"),
    ("plan.global_batch", "4096:256", "MIN must not exceed MAX"),
    ("plan.batch_rule", "mccandlish", "allowed values are deepseek, kaplan or tokens:N"),
    # a rule other than the default with a fixed batch bounds nothing (a fixed 1024 was
    # planned under 'kaplan' without a word, as `mosaic plan --batch-rule` was)
    ("plan.batch_rule", "tokens:4M", "bounds a searched batch"),
])
def test_plan_form_errors(studio, field, value, words):
    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, field: value}})
    assert status == 422 and list(body["errors"]) == [field], body
    assert words in body["errors"][field]


def test_a_precision_the_gpu_has_no_peak_for_is_beside_the_precision_field(studio):
    """An A100 has no fp8 lane: the refusal was in the general line under the plan form,
    beside no field (a trial); it is beside the precision, as nvfp4's is."""
    form = {**TINY_PLAN, "plan.gpu": "A100", "plan.precision": "fp8"}
    status, body = studio.call("/api/plan", {"form": form})
    assert status == 422 and list(body["errors"]) == ["plan.precision"], body
    assert "A100-SXM-80GB has no fp8 peak" in body["errors"]["plan.precision"]


def test_a_searched_batch_counts_geometry_batch_pairs_against_the_limit(studio):
    """`auto` profiles every geometry at each of its 11 candidate batches (plan/batch.py), 11
    times a fixed batch's work; the limit counted geometries alone, so 11 x 2,000 pairs
    were planned (or timed out) where 2,000 geometries were allowed."""
    from mosaic.plan.batch import AUTO_BATCHES
    from mosaic.studio.plan_runner import validate_plan_form

    grid = {**TINY_PLAN, "plan.q": ",".join(str(q) for q in range(4, 54))}  # 50 x 2 x 2 x 2
    _, space, _ = validate_plan_form({**grid, "plan.global_batch": "1024"})
    n = len(space.enumerate())
    assert n <= MAX_GEOMETRIES < n * len(AUTO_BATCHES)
    status, body = studio.call("/api/plan", {"form": {**grid, "plan.global_batch": "auto"}})
    assert status == 422 and list(body["errors"]) == ["plan.global_batch"], body
    message = body["errors"]["plan.global_batch"]
    assert (f"{n} geometries x {len(AUTO_BATCHES)} candidate batches = "
            f"{n * len(AUTO_BATCHES)} geometry-batch pairs" in message)
    assert str(MAX_GEOMETRIES) in message
    # two candidates (1024:2048) stay inside it
    validate_plan_form({**grid, "plan.global_batch": "1024:2048"})


def test_plan_with_a_checkpoint_interval_and_a_scale_out_what_if_equals_the_cli(studio):
    """The plan form had no field for `mosaic plan --checkpoint-interval-s` nor
    `--scale-out-gbps` (a review). Hourly checkpoints of 120 s on 4 x 8 B200 at an MTBF of
    50,000 h per GPU (M = 50,000 x 3,600 / 32 s) lose 120 / 3,600 + 3,600 / (2 M) (the
    first-order Young-Daly loss at the stated interval, Young 1974; plan/goodput.py)."""
    form = {**TINY_PLAN, "plan.mtbf_gpu_hours": "50000", "plan.checkpoint_s": "120",
            "plan.checkpoint_interval_s": "3600", "plan.scale_out_gbps": "100"}
    status, body = studio.call("/api/plan", {"form": form})
    assert status == 200, body
    job = wait_plan(studio)
    assert job["state"] == "done", job
    cli = cli_json("plan", *TINY_PLAN_ARGS, "--mtbf-gpu-hours", "50000", "--checkpoint-s",
                   "120", "--checkpoint-interval-s", "3600", "--scale-out-gbps", "100")
    job_mtbf_s = 50_000 * 3600 / 32
    assert job["summary"]["goodput"] == pytest.approx(1 - 120 / 3600 - 3600 / (2 * job_mtbf_s),
                                                      rel=1e-12)
    assert job["summary"]["goodput"] == cli["envelope"]["goodput"]["goodput"]
    assert "scale-out 100 Gb/s per GPU" in cli["envelope"]["system"]
    assert job["summary"]["cluster"] == f"4 × {cli['envelope']['system']}"
    for key in ("loss", "mfu", "tokens"):
        assert job["summary"][key] == pytest.approx(cli["optimum"][key], rel=1e-12), key


@pytest.mark.parametrize(("form", "field", "words"), [
    ({"plan.scale_out_gbps": "0"}, "plan.scale_out_gbps", "scale_out_gbps: got 0.0; allowed"),
    ({"plan.scale_out_gbps": "fast"}, "plan.scale_out_gbps", "must be a number"),
    ({"plan.checkpoint_interval_s": "3600"}, "plan.checkpoint_interval_s",
     "checkpoint_interval_s enters the Young-Daly goodput: give it with mtbf_gpu_hours"),
    ({"plan.mtbf_gpu_hours": "1000", "plan.checkpoint_s": "60",
      "plan.checkpoint_interval_s": "-1"}, "plan.checkpoint_interval_s",
     "checkpoint_interval_s: got -1.0; allowed"),
])
def test_a_bad_interval_or_scale_out_rate_is_shown_beside_its_field(studio, form, field, words):
    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, **form}})
    assert status == 422 and list(body["errors"]) == [field], body
    assert words in body["errors"][field], body


@pytest.mark.parametrize(("field", "value"), [("plan.checkpoint_s", "-60"),
                                             ("plan.checkpoint_s", "0"),
                                             ("plan.restart_s", "-1")])
def test_a_bad_young_daly_time_is_shown_beside_its_field(studio, field, value):
    """A negative checkpoint or restart time beside an MTBF was answered above the form as
    'checkpoint time must be a finite number > 0', beside no field (a trial)."""
    form = {**TINY_PLAN, "plan.mtbf_gpu_hours": "1000", "plan.checkpoint_s": "60", field: value}
    status, body = studio.call("/api/plan", {"form": form})
    name = field.partition(".")[2]
    assert status == 422 and list(body["errors"]) == [field], body
    assert body["errors"][field].startswith(f"{name}: got {float(value)}; allowed:"), body


@pytest.mark.parametrize(("form", "words"), [
    # 1 GPU-hour MTBF over 4 x 8 GPUs: the job fails every 3600 / 32 = 112 s, less than
    # one 600 s checkpoint, so goodput is 0 (plan/goodput.py)
    ({"plan.mtbf_gpu_hours": "1", "plan.checkpoint_s": "600"},
     "Young-Daly goodput is 0 on 32 GPUs: the job fails every 112 s"),
    ({"plan.mtbf_gpu_hours": "1000"}, "needs both mtbf_gpu_hours and checkpoint_s"),
    ({"plan.checkpoint_s": "60"}, "needs both mtbf_gpu_hours and checkpoint_s"),
])
def test_a_young_daly_goodput_error_is_shown_beside_the_mtbf(studio, form, words):
    """A cluster that fails faster than it checkpoints (goodput 0) was refused beside the
    constant-goodput field, which the user had left empty for the MTBF (a trial)."""
    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, **form}})
    assert status == 422 and list(body["errors"]) == ["plan.mtbf_gpu_hours"], body
    assert words in body["errors"]["plan.mtbf_gpu_hours"]
    # a constant goodput beside an MTBF stays the goodput field's error
    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, "plan.goodput": "0.9",
                                                      "plan.mtbf_gpu_hours": "1000",
                                                      "plan.checkpoint_s": "60"}})
    assert status == 422 and list(body["errors"]) == ["plan.goodput"], body


def test_plan_form_errors_name_the_form_fields_not_cli_options(studio):
    """'--q is empty' beside the q field (a trial); an option the form lacks keeps its
    spelling."""
    from mosaic.studio.plan_runner import in_form_words

    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, "plan.q": ""}})
    assert status == 422 and body["errors"]["plan.q"].startswith("q is empty")
    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, "plan.nodes": "3_2"}})
    assert status == 422 and "must be an integer" in body["errors"]["plan.nodes"]
    assert in_form_words("allow more memory (--memory-fraction); --top-k 9",
                         {"plan.top_k"}) == "allow more memory (--memory-fraction); top_k 9"


def test_requests_are_bounded(studio):
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM,
                                                      "hf.config": "x" * 1_100_000}})
    assert status == 422 and "larger than" in body["errors"]["_general"]
    status, body = studio.call("/api/perf", {"nothing": 1})
    assert status == 422 and "'form'" in body["errors"]["_general"]
    status, body = studio.call("/api/layouts", {"form": {**DEFAULT_FORM,
                                                         "hardware.nodes": "100000"}})
    assert status == 422 and "at most" in body["errors"]["hardware.nodes"]


def test_a_layout_search_with_no_valid_layout_names_the_rule(studio):
    """7 nodes of 8 and a prime batch of 1021 sequences: no dp·micro_batch divides it; the
    studio names the rule most layouts break, as `mosaic layouts` does (a trial)."""
    form = {**DEFAULT_FORM, "hardware.nodes": "7", "batch.global_seqs": "1021"}
    status, body = studio.call("/api/layouts", {"form": form})
    assert status == 422
    message = body["errors"]["_general"]
    assert message.startswith("no layout of 56 GPUs passes the divisibility rules")
    assert "most fail" in message and "must divide global_batch=1021" in message


def test_localhost_by_default_and_a_warning_elsewhere(monkeypatch):
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "127.0.0.2"))
    assert bind_warning("127.0.0.1") is None
    for host in ("0.0.0.0", "192.168.1.5", "example.org"):
        assert "not only on this machine" in bind_warning(host)
    import webbrowser

    import uvicorn

    from mosaic.studio import server

    calls: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.update(kw))
    monkeypatch.setattr(webbrowser, "open", lambda url: calls.setdefault("opened", url))
    lines: list[str] = []
    server.serve(host="0.0.0.0", port=8766, open_browser=False, log=lines.append)
    assert calls == {"host": "0.0.0.0", "port": 8766, "log_level": "warning"}
    assert "warning" in lines[0] and "0.0.0.0" in lines[0]
    lines.clear()
    server.serve(open_browser=False, log=lines.append)
    assert calls["host"] == "127.0.0.1" and calls["port"] == 8765
    assert len(lines) == 1 and "http://127.0.0.1:8765/" in lines[0]


def test_studio_command_line_errors(tmp_path):
    result = runner.invoke(cli, ["studio", "--port", "0", "--no-browser"])
    assert result.exit_code == 2 and "--port" in result.output
    bad = tmp_path / "job.yaml"
    bad.write_text("data: {global_batch: 0}\n")
    result = runner.invoke(cli, ["studio", "--job", str(bad), "--no-browser"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_compare_two_jobs(studio):
    a = dict(DEFAULT_FORM)
    b = {**DEFAULT_FORM, "batch.micro_seqs": "1", "performance.checkpointing": "selective"}
    status, body = studio.call("/api/compare", {"forms": [a, b]})
    assert status == 200, body
    for form, prediction in zip((a, b), body["predictions"], strict=True):
        _, single = studio.call("/api/perf", {"form": form})
        assert prediction["step_time_s"] == single["prediction"]["step_time_s"]
    bars = body["figures"]["step"]["data"]
    assert all(list(trace["x"]) == ["A", "B"] for trace in bars)
    status, body = studio.call("/api/compare", {"forms": [a]})
    assert status == 422 and "two forms" in body["errors"]["_general"]


def test_compare_on_two_gpus_draws_each_sides_own_memory_limits(studio):
    """A on the default B200 node, B on a DGX-H100: one capacity line across both bars
    would put B under A's 178 GiB (a trial's out-of-memory B looked comfortable)."""
    a = dict(DEFAULT_FORM)
    b = {**DEFAULT_FORM, "hardware.system": "DGX-H100"}
    status, body = studio.call("/api/compare", {"forms": [a, b]})
    assert status == 200, body
    capacities = [p["memory_capacity_gib"] for p in body["predictions"]]
    assert capacities[0] != capacities[1]
    layout = body["figures"]["memory"]["layout"]
    # each bar's lines span that bar alone (category i: i - 0.4 .. i + 0.4), at its own GiB
    for index, prediction in enumerate(body["predictions"]):
        mine = [shape for shape in layout["shapes"]
                if shape["x0"] == index - 0.4 and shape["x1"] == index + 0.4]
        assert prediction["memory_capacity_gib"] in [shape["y0"] for shape in mine]
        usable = prediction["memory_capacity_gib"] * prediction["usable_memory_fraction"]
        assert any(abs(shape["y0"] - usable) < 1e-9 for shape in mine)


def test_exported_yaml_holds_the_whole_hf_model(studio):
    from mosaic.arch.hf_import import load_hf_config
    from mosaic.config.job_schema import job_from_document

    path = EXAMPLES / "hf" / "qwen3-30b-a3b.json"
    form = {**DEFAULT_FORM, "model.source": "hf", "hf.config": path.read_text(),
            "parallelism.pp": "1"}
    status, body = studio.call("/api/export", {"form": form, "target": "yaml"})
    assert status == 200 and "NOT EXPRESSED" not in body["text"]
    assert body["text"].index("model:") < body["text"].index("batch:")
    job = job_from_document(yaml.safe_load(body["text"]), "exported.yaml")
    assert job.workload.geometry == load_hf_config(path)  # qk_norm included


def test_malformed_requests_get_json_errors(studio):
    import urllib.request

    for path in ("/api/perf", "/api/compare", "/api/export", "/api/layouts", "/api/plan"):
        request = urllib.request.Request(studio.url + path, data=b"{nope",
                                         headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=30)
        except urllib.error.HTTPError as error:
            assert error.code == 422, path
            assert "not JSON" in json.loads(error.read())["errors"]["_general"]
        else:
            raise AssertionError(f"{path} accepted a malformed body")
    status, body = studio.call("/api/compare", {"forms": [1, 2]})
    assert status == 422 and "two forms" in body["errors"]["_general"]


def test_job_file_starts_the_editor_with_its_own_numbers():
    """`mosaic studio --job FILE`: the initial form predicts what `mosaic perf FILE` does
    (devices become nodes, aliases and the listing's spelling of the system resolve)."""
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import predict_form
    from mosaic.studio.server import load_job_document

    path = EXAMPLES / "appendix_e.yaml"
    document = load_job_document(path)
    form = options_document(document)["form"]
    assert form["model.source"] == "job" and form["hardware.nodes"] == "64"
    assert form["hardware.system"] == "p6-b200.48xlarge" and form["batch.micro_seqs"] == "2"
    _, result = predict_form(form, document, load_calibration(None))
    expected = cli_json("perf", str(path))
    assert float(result.prediction.step_time_s[0]) == pytest.approx(expected["step_time_s"],
                                                                    rel=1e-12)


def test_a_job_file_naming_no_stack_is_on_the_calibration_profiles_stack():
    """`mosaic studio --job FILE --calibration P` predicts FILE as `mosaic perf FILE
    --calibration P` does: a job naming no stack runs on the profile's (paper-nemo here; a
    profile `mosaic calibrate` fits on one stack's runs names that stack), and the plan form
    follows it. The studio put such a job on megatron-core."""
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import predict_form
    from mosaic.studio.server import load_job_document

    path = EXAMPLES / "appendix_e.yaml"
    profile = load_calibration("paper-p6b200")
    document = load_job_document(path)
    assert "stack" not in (document.get("performance") or {})
    options = options_document(document, profile)
    assert options["form"]["performance.stack"] == options["plan_form"]["plan.stack"] == \
        "paper-nemo"
    _, result = predict_form(options["form"], document, profile)
    expected = cli_json("perf", str(path), "--calibration", "paper-p6b200")
    assert float(result.prediction.step_time_s[0]) == pytest.approx(expected["step_time_s"],
                                                                    rel=1e-12)
    # the editor's own starting job keeps the stack its layout is written for
    assert options_document(None, profile)["form"]["performance.stack"] == "megatron-core"


def test_studio_plans_under_the_same_memory_headroom_as_the_cli():
    """The plan form has no headroom field, so it takes the stack's default (90% of HBM for
    modern stacks), as `mosaic plan` does; it used to plan against the whole device."""
    from mosaic.plan.inputs import build_inputs
    from mosaic.studio.plan_runner import DEFAULT_PLAN_FORM, validate_plan_form

    envelope, _, _ = validate_plan_form(dict(DEFAULT_PLAN_FORM))
    cli_envelope, _ = build_inputs(
        gpu="B200", system=None, nodes=32, gpus_per_node=None, days=20, goodput=1.0,
        mtbf_gpu_hours=None, checkpoint_s=None, restart_s=0.0, global_batch=1024,
        seq_len=2048, memory_fraction=None, q="8", experts="16", top_k="1",
        split_factor="1", tpp="40:150", s_min=0.7)
    assert envelope.usable_memory_fraction == cli_envelope.usable_memory_fraction == 0.9


def test_options_offer_every_precision_a_job_accepts():
    from mosaic.studio.app import options_document

    assert options_document(None)["precisions"] == ["bf16", "fp16", "fp8", "mxfp8", "nvfp4"]


@pytest.mark.parametrize("name", ["qwen3_next_80b_b200.yaml", "nemotron_h_56b_b200.yaml",
                                  "nemotron_3_nano_b200.yaml", "fsdp_moe_comm_bound.yaml"])
def test_a_job_file_the_editor_opens_predicts_as_the_cli_does(name):
    """Fields a job leaves to the schema (checkpointing none, ep 1 for a dense model, the
    release's recipe settings) start the editor as the CLI resolves them, not as the
    editor's own defaults (full recompute, ep 8)."""
    from mosaic.evaluate.job import load_job_spec, predict_job
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import predict_form
    from mosaic.studio.server import load_job_document

    document = load_job_document(EXAMPLES / name)
    _, result = predict_form(options_document(document)["form"], document,
                             load_calibration(None))
    cli = predict_job(load_job_spec(EXAMPLES / name, []), load_calibration(None)).prediction
    assert float(result.prediction.step_time_s[0]) == pytest.approx(
        float(cli.step_time_s[0]), rel=1e-12)


def test_an_hf_sliding_window_the_geometry_cannot_hold_is_among_the_assumptions(studio):
    """The CLI prints the import's warning; the studio lists it with the job's assumptions
    (a Qwen window, from max_window_layers on, has no N-th-layer rule)."""
    config = json.loads((EXAMPLES / "hf" / "qwen3-30b-a3b.json").read_text())
    config.update(use_sliding_window=True, sliding_window=4096, max_window_layers=28)
    form = {**DEFAULT_FORM, "model.source": "hf", "hf.config": json.dumps(config),
            "parallelism.pp": "1"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 200, body
    assert any("sliding_window 4096" in line for line in body["prediction"]["assumptions"])


def test_the_kernel_switches_state_a_setting_or_leave_it_to_the_recipe():
    """A Megatron-Bridge 26.06 MXFP8 job on GB200: the recipe turns both on (empty switch);
    the switch states false, and a job file's stated true opens the editor as 'true'."""
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import predict_form

    document = {
        "model": {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                  "ffn": 6144, "vocab": 151936,
                  "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
        "batch": {"global_seqs": 256, "seq_len": 4096, "micro_seqs": 1},
        "parallelism": {"ep": 8, "dp": 8},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                        "stack_version": "26.06"},
        "hardware": {"system": "GB300-NVL72", "nodes": 2}}
    assert options_document(None)["switches"] == ["", "true", "false"]
    form = options_document(document)["form"]
    assert form["performance.fused_grouped_mlp"] == ""  # unstated: the recipe's (on)
    stated = {**document, "performance": {**document["performance"], "fused_grouped_mlp": True}}
    assert options_document(stated)["form"]["performance.fused_grouped_mlp"] == "true"
    calibration = load_calibration(None)
    for value, expected in (("", True), ("false", False), ("true", True)):
        edited = {**form, "performance.fused_grouped_mlp": value,
                  "performance.fp8_dot_product_attention": value}
        workload = predict_form(edited, document, calibration)[1].spec.workload
        assert workload.fused_grouped_mlp is expected
        assert workload.fp8_dot_product_attention is expected


@pytest.mark.parametrize("name, stated", [("appendix_e.yaml", {"dp": 32}),
                                          ("deepseek_v3_h100.yaml", {})])
def test_layout_search_of_a_job_that_states_its_dp_or_pipeline_layout(name, stated, tmp_path):
    """A job stating dp (every exported plan does) or a pipeline layout (the DeepSeek-V3
    recipe's Et|(tt|)*30mL, resolved into the form) searched no layout in the studio: 422.
    The search sets them aside as `mosaic layouts` does and finds the CLI's count."""
    document = yaml.safe_load((EXAMPLES / name).read_text())
    document["parallelism"] = {**document["parallelism"], **stated}
    _studio_layouts_equal_the_clis(document, tmp_path / name)


def _studio_layouts_equal_the_clis(document: dict, path: Path) -> dict:
    """The studio's layout search of a job file opened in it, checked against `mosaic
    layouts` of the file (candidates and feasible counts); the studio's reply."""
    from mosaic.studio.app import options_document
    from mosaic.studio.server import load_job_document

    path.write_text(yaml.safe_dump(document))
    job = load_job_document(path)
    with running_studio(job_document=job) as running:
        status, body = running.call("/api/layouts", {"form": options_document(job)["form"]})
    assert status == 200, body
    cli = cli_json("layouts", str(path), "--top", "1")
    assert (body["n_plans"], body["n_feasible"]) == (cli["n_plans"], cli["n_feasible"])
    return body


def test_the_plan_form_takes_the_stack_and_precision_and_refuses_unknown_fields():
    """The plan form had no stack or precision (a studio opened on a Megatron-Bridge job
    planned on megatron-core) and ignored misspelt fields (a trial): the form carries both,
    seeded from the job, as `mosaic plan --stack --precision` builds its envelope."""
    from mosaic.plan.inputs import build_inputs
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import FormError
    from mosaic.studio.plan_runner import DEFAULT_PLAN_FORM, validate_plan_form
    from mosaic.studio.server import load_job_document

    form = {**DEFAULT_PLAN_FORM, "plan.stack": "torchtitan", "plan.precision": "fp8"}
    envelope, _, _ = validate_plan_form(form)
    cli, _ = build_inputs(
        gpu="B200", system=None, nodes=32, gpus_per_node=None, days=20, goodput=1.0,
        mtbf_gpu_hours=None, checkpoint_s=None, restart_s=0.0, global_batch=1024,
        seq_len=2048, memory_fraction=None, q="8,10,12", experts="16,32,64,128",
        top_k="1,2", split_factor="1,2,4", tpp="40:150", s_min=0.7, stack="torchtitan",
        precision="fp8")
    assert (envelope.stack, envelope.precision) == (cli.stack, cli.precision)
    assert envelope.usable_memory_fraction == cli.usable_memory_fraction
    with pytest.raises(FormError, match="unknown plan field"):
        validate_plan_form({"plan.stak": "torchtitan"})
    # a field without the plan. prefix was ignored, planning on the default (a trial)
    with pytest.raises(FormError, match=r"unknown plan field\(s\) \['nodes'\]"):
        validate_plan_form({"nodes": "4"})
    # every bad number is named at once, not only the first (a trial)
    with pytest.raises(FormError) as bad:
        validate_plan_form({"plan.nodes": "four", "plan.days": "x", "plan.seq_len": "2k",
                            "plan.price_per_gpu_hour": "two"})
    assert set(bad.value.errors) == {"plan.nodes", "plan.days", "plan.seq_len",
                                     "plan.price_per_gpu_hour"}
    seeded = options_document(load_job_document(EXAMPLES / "deepseek_v3_h100.yaml"))
    job_form = seeded["form"]
    assert {k: seeded["plan_form"][k] for k in ("plan.gpu", "plan.stack", "plan.nodes")} == {
        "plan.gpu": "H100-SXM-80GB", "plan.stack": "megatron-bridge", "plan.nodes": "128"}
    # and the job's release and dispatcher, whose recipes the plan then runs (a trial)
    assert (seeded["plan_form"]["plan.stack_version"], seeded["plan_form"]["plan.dispatcher"]) \
        == (job_form["performance.stack_version"], job_form["parallelism.dispatcher"]) \
        == ("26.04", "hybridep")
    # the job's node type, batch and sequence length, not the GPU's default node type and
    # the form's defaults (a trial planned a custom InfiniBand cluster on AWS p5 nodes)
    assert seeded["plan_form"]["plan.system"] == job_form["hardware.system"]
    assert seeded["plan_form"]["plan.global_batch"] == job_form["batch.global_seqs"]
    assert seeded["plan_form"]["plan.seq_len"] == job_form["batch.seq_len"]
    planned, _, _ = validate_plan_form({**seeded["plan_form"], "plan.q": "8",
                                        "plan.experts": "16", "plan.top_k": "1",
                                        "plan.split_factor": "1"})
    assert planned.system.name == job_form["hardware.system"]
    with pytest.raises(FormError) as clash:
        validate_plan_form({"plan.gpu": "B200", "plan.system": job_form["hardware.system"]})
    assert list(clash.value.errors) == ["plan.system"]


@pytest.mark.parametrize(("field", "value", "expected_field", "words"), [
    ("foo.bar", "1", "foo.bar", "unknown field"),  # was accepted with 200
    ("ladder.qq", "3", "ladder.qq", "unknown field"),
    ("hardware.nodes", "3_2", "hardware.nodes", "valid integer"),  # was read as 32
    ("ladder.experts", "9_6", "ladder.experts", "must be an integer"),
    ("hardware.nodes", "", "hardware.nodes", "give the number of nodes"),
    ("hardware.nodes", "1048576", "hardware.nodes", "8388608 devices; allowed: 1..1048576"),
    # a stack or dispatcher the form's menu does not hold, sent to the API, was "_general"
    ("performance.stack", "abc", "performance.stack", "'abc': unknown; known stacks"),
    ("parallelism.dispatcher", "abc", "parallelism.dispatcher", "abc"),
])
def test_form_fields_the_job_has_not_are_named(studio, field, value, expected_field, words):
    """A trial's studio inputs: an unknown field ignored, '3_2' read as 32 nodes, node
    counts blamed on another field or on none."""
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, field: value}})
    assert status == 422, body
    assert list(body["errors"]) == [expected_field] and words in body["errors"][expected_field]


def test_a_model_grid_plans_around_the_editors_model_as_plan_backbone_does(studio, tmp_path):
    """The studio could only plan the paper's ladder (a trial wanted variants of its own
    model): `plan.grid: model` searches around the model in the editor, the search
    `mosaic plan --backbone` runs on that model's file; empty axes keep its own values."""
    job_form = {**DEFAULT_FORM, "ladder.q": "8", "ladder.experts": "16", "ladder.top_k": "2",
                "ladder.split_factor": "1"}
    form = {**TINY_PLAN, "plan.days": "30", "plan.grid": "model", "plan.experts": "16,32",
            "plan.top_k": "", "plan.split_factor": "", "plan.layers": "",
            "plan.d_model": ""}
    status, body = studio.call("/api/plan", {"form": form, "job": job_form})
    assert status == 200 and body["total"] == 2, body
    job = wait_plan(studio)
    assert job["state"] == "done", job
    _, exported = studio.call("/api/export", {"form": job_form, "target": "yaml"})
    model = tmp_path / "model.yaml"
    model.write_text(yaml.safe_dump({"model": yaml.safe_load(exported["text"])["model"]}))
    optimum = cli_json("plan", "--backbone", str(model), "--experts", "16,32", "--nodes", "4",
                       "--days", "30", "--workers", "1")["optimum"]
    assert job["summary"]["loss"] == pytest.approx(optimum["loss"], rel=1e-12)
    assert job["summary"]["geometry"].startswith(f"L={optimum['layers']} ")
    # the editor's model must be valid, and the grid one of two
    bad_model = {**job_form, "ladder.q": "x"}
    status, body = studio.call("/api/plan", {"form": form, "job": bad_model})
    assert status == 422 and "the model editor above is not valid" in body["errors"]["plan.grid"]
    status, body = studio.call("/api/plan", {"form": {**form, "plan.grid": "zoo"},
                                             "job": job_form})
    assert status == 422 and "allowed: ladder, model" in body["errors"]["plan.grid"]


def test_a_model_grid_request_that_leaves_out_e_k_and_g_plans_the_model_alone(studio, tmp_path):
    """An API request for a model-grid plan that left out plan.experts, plan.top_k and
    plan.split_factor planned the ladder's lists around the model (182 geometries), where
    the page (which clears them) and `mosaic plan --backbone` (without --experts, --top-k,
    --split-factor) plan the model alone (a trial)."""
    _, options = studio.call("/api/options")
    job_form = options["form"]
    status, body = studio.call("/api/plan", {"form": {"plan.grid": "model"}, "job": job_form})
    try:
        assert status == 200, body
        _, exported = studio.call("/api/export", {"form": job_form, "target": "yaml"})
        model = tmp_path / "model.yaml"
        model.write_text(yaml.safe_dump({"model": yaml.safe_load(exported["text"])["model"]}))
        counts = cli_json("plan", "--backbone", str(model), "--workers", "1")["counts"]
        assert body["total"] == counts["geometries"], body
        job = wait_plan(studio)
        assert job["state"] == "done", job
        assert job["summary"]["geometries"] == counts["geometries"]
    finally:  # a wrong grid runs on: stop it for the tests after this one
        studio.app.state.runner.cancel()
        studio.app.state.runner.wait(60)


def test_an_unchanged_plan_form_plans_what_mosaic_plan_plans():
    """The studio's plan defaults are the CLI's (a trial: a narrower studio grid had picked
    a different, worse optimum for the same envelope): same envelope, same 1,092-geometry
    Table 3 grid."""
    import inspect

    from mosaic.cli.plan_cmd import plan
    from mosaic.plan.inputs import build_inputs
    from mosaic.studio.plan_runner import DEFAULT_PLAN_FORM, validate_plan_form

    cli = {name: p.default for name, p in inspect.signature(plan).parameters.items()}
    envelope, space, _ = validate_plan_form(DEFAULT_PLAN_FORM)
    cli_envelope, cli_space = build_inputs(
        gpu=cli["gpu"], system=cli["system"], nodes=cli["nodes"], gpus_per_node=None,
        days=cli["days"] or 20.0, goodput=cli["goodput"], mtbf_gpu_hours=None,
        checkpoint_s=None, restart_s=cli["restart_s"], global_batch=int(cli["global_batch"]),
        seq_len=cli["seq_len"], memory_fraction=None, q=cli["q"], experts=cli["experts"],
        top_k=cli["top_k"], split_factor=cli["split_factor"], tpp=cli["tpp"],
        s_min=cli["s_min"])
    assert space == cli_space
    # Table 3's axes: q 8..18 (6), 13 expert counts, 5 top-k, 4 split factors
    assert (len(space.q), len(space.experts), len(space.top_k), len(space.split_factor)) == (
        6, 13, 5, 4)
    assert (envelope.system.name, envelope.n_nodes, envelope.days) == (
        cli_envelope.system.name, cli_envelope.n_nodes, cli_envelope.days)


def test_a_studio_on_a_profile_plans_what_mosaic_plan_plans_under_it():
    """`mosaic plan --calibration paper-p6b200` plans on the profile's stack, paper-nemo,
    with its whole HBM usable (envelope.planning_stack); `mosaic studio --calibration
    paper-p6b200` opened its plan form on megatron-core at 90% (a trial), and a request that
    left the stack out planned there too."""
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.app import options_document

    profile = load_calibration("paper-p6b200")
    assert profile.stack == "paper-nemo"
    assert options_document(None, profile)["plan_form"]["plan.stack"] == "paper-nemo"
    assert options_document(None, None)["plan_form"]["plan.stack"] == "megatron-core"
    cli = cli_json("plan", *TINY_PLAN_ARGS, "--calibration", "paper-p6b200")
    assert cli["envelope"]["stack"] == "paper-nemo"
    with running_studio(calibration=profile, plan_time_limit_s=120) as studio:
        status, body = studio.call("/api/plan", {"form": TINY_PLAN})  # no plan.stack
        assert status == 200, body
        job = wait_plan(studio)
    assert job["state"] == "done", job
    assert job["summary"]["loss"] == pytest.approx(cli["optimum"]["loss"], rel=1e-12)
    assert job["summary"]["geometry"] == (f"q={cli['optimum']['q']} E={cli['optimum']['experts']} "
                                          f"K={cli['optimum']['top_k']} "
                                          f"G={cli['optimum']['split_factor']}")


def test_the_plan_form_offers_the_precisions_mosaic_plan_takes(studio):
    """A trial: the plan form offered the job schema's lanes only (no fp8-cs or
    fp8-blockwise), which `mosaic plan --precision` takes."""
    from mosaic.plan.inputs import PRECISION_NAMES

    _, options = studio.call("/api/options")
    assert {"fp8-cs", "fp8-blockwise", "mxfp8", "nvfp4"} <= set(options["plan_precisions"])
    assert set(options["plan_precisions"]) == set(PRECISION_NAMES) - {"fp4"}


def test_the_studio_predicts_with_the_calibration_it_was_started_with():
    """`mosaic studio --calibration FILE`: a team's profile (its memory scale included)
    reaches every prediction; the page says which calibration and scale it used; a bad
    file is one line before any server starts."""
    from dataclasses import replace

    from mosaic.perf.calibration import default_calibration

    scaled = replace(default_calibration(), name="acme", memory_scale=1.25)
    with running_studio(calibration=scaled, plan_time_limit_s=60) as running:
        status, body = running.call("/api/perf", {"form": DEFAULT_FORM})
        assert status == 200, body
        prediction = body["prediction"]
        assert prediction["calibration"] == "acme" and prediction["memory_scale"] == 1.25
    result = CliRunner().invoke(cli, ["studio", "--calibration", "/no/such/cal.yaml",
                                      "--no-browser"])
    assert result.exit_code == 2 and "cal.yaml" in result.output


def test_export_refuses_a_layout_perf_refuses(studio):
    """ep=5 over 96 experts: the exported file was one `mosaic perf` refuses (a trial)."""
    form = {**DEFAULT_FORM, "parallelism.ep": "5"}
    for target in ("yaml", "megatron"):
        status, body = studio.call("/api/export", {"form": form, "target": target})
        assert status == 422, body
        assert "ep=5 must divide experts=96" in body["errors"]["parallelism.ep"]


@pytest.mark.parametrize("key", ["parallelism.ep", "parallelism.pp", "batch.micro_seqs"])
def test_an_emptied_degree_is_an_error_not_a_degree_of_one(studio, key):
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, key: " "}})
    assert status == 422 and body["errors"][key].startswith("give the ")
    assert ("(1 for none)" in body["errors"][key]) == key.startswith("parallelism.")


@pytest.mark.parametrize("value", ["", None])
@pytest.mark.parametrize(("key", "words"), [
    ("batch.seq_len", "sequence length"), ("batch.global_seqs", "global batch"),
    ("hardware.nodes", "number of nodes"), ("parallelism.ep", "expert-parallel degree"),
    ("batch.micro_seqs", "micro-batch"), ("ladder.q", "seed q"), ("ladder.experts", "experts E"),
    ("hf.config", "config.json")])
def test_an_empty_job_field_is_asked_for_by_name(studio, key, words, value):
    """An empty sequence length or batch read "job: batch: seq_len: Field required" where an
    empty node count or degree read "give the ...", and a JSON null "... (got 'None')" (a
    trial): each is asked for in one wording, naming the field, on /api/perf and
    /api/compare."""
    form = {**DEFAULT_FORM, **({"model.source": "hf"} if key == "hf.config" else {}),
            key: value}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 422 and list(body["errors"]) == [key], body
    message = body["errors"][key]
    assert message.startswith("give the ") and words in message, message
    status, compared = studio.call("/api/compare", {"forms": [DEFAULT_FORM, form]})
    assert status == 422 and compared["errors"] == body["errors"]


@pytest.mark.parametrize("value", ["", None])
@pytest.mark.parametrize(("key", "words"), [
    ("plan.nodes", "number of nodes"), ("plan.seq_len", "sequence length"),
    ("plan.global_batch", "global batch"), ("plan.s_min", "sparsity floor"),
    ("plan.tpp", "tokens per active parameter"), ("plan.stack", "software stack")])
def test_an_empty_plan_field_is_asked_for_by_name(studio, key, words, value):
    """The plan form's empty required fields read "must be an integer, got ''" (or "got
    'None'" for a JSON null): asked for as the job form asks, naming the field."""
    status, body = studio.call("/api/plan", {"form": {**TINY_PLAN, key: value}})
    assert status == 422 and list(body["errors"]) == [key], body
    message = body["errors"][key]
    assert message.startswith("give the ") and words in message, message


def test_a_ladder_plan_ignores_the_model_grid_fields_the_page_hides(studio):
    """Depths typed under the model grid stay in the (hidden) field when the user goes back
    to the ladder; the plan was refused by a message on that hidden field (a trial)."""
    form = {**TINY_PLAN, "plan.grid": "ladder", "plan.layers": "24,48", "plan.d_model": "2048"}
    status, body = studio.call("/api/plan", {"form": form})
    assert status == 200 and body["total"] == 12, body
    assert wait_plan(studio)["state"] == "done"


def test_a_top_k_above_the_experts_is_marked_on_k(studio):
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, "ladder.top_k": "200"}})
    assert status == 422
    assert "must not exceed moe.experts (96)" in body["errors"]["ladder.top_k"]
    assert "ladder.experts" not in body["errors"]


def test_a_field_that_is_no_yaml_scalar_is_marked_on_its_field():
    """A form value YAML cannot read (a python tag) was answered above the form with the
    field's name in the text, beside no field."""
    from mosaic.studio.jobs import FormError, validate_form

    with pytest.raises(FormError) as refused:
        validate_form({**DEFAULT_FORM, "batch.seq_len": "!!python/object:os.system 'x'"},
                      None)
    assert list(refused.value.errors) == ["batch.seq_len"]
    assert "malformed YAML" in refused.value.errors["batch.seq_len"]


def test_a_report_address_that_is_no_plan_number_is_answered_in_words(studio):
    status, body = studio.text("/report/abc")
    assert status == 404 and "reports are numbered by plan" in body
    status, body = studio.text("/report/987654")
    assert status == 404 and "no report 987654" in body
    # more digits than int() converts, and digits of another script: no plan numbers either
    for address in ("9" * 5000, "%D9%A3"):
        status, body = studio.text(f"/report/{address}")
        assert status == 404 and "reports are numbered by plan" in body, body[:200]


def test_the_plan_form_quantises_the_routed_experts_alone_as_the_job_does():
    """A job that quantises its routed experts alone seeds the plan form with it, and the
    form's setting reaches the envelope as `mosaic plan --quantised-gemms` does."""
    from mosaic.perf.workload import QuantisedGemms
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import FormError
    from mosaic.studio.plan_runner import DEFAULT_PLAN_FORM, validate_plan_form

    moe = {"experts": 32, "top_k": 4, "expert_ffn": 768}
    job = {"model": {"layers": 4, "d_model": 2048, "heads": 16, "ffn": 8192, "moe": moe},
           "batch": {"global_seqs": 128, "seq_len": 4096, "micro_seqs": 2},
           "parallelism": {"ep": 4, "sharding": "fsdp"},
           "performance": {"stack": "torchtitan", "precision": "mxfp8",
                           "quantised_gemms": "routed_experts"},
           "hardware": {"nodes": 1, "system": "DGX-B200"}}
    seeded = options_document(job)
    assert seeded["form"]["performance.quantised_gemms"] == "routed_experts"
    assert seeded["plan_form"]["plan.quantised_gemms"] == "routed_experts"
    assert seeded["quantised_gemms"] == ["", "all", "routed_experts"]  # "": the job's
    envelope, _, _ = validate_plan_form({**seeded["plan_form"], "plan.q": "8",
                                         "plan.experts": "16", "plan.top_k": "1",
                                         "plan.split_factor": "1"})
    assert envelope.quantised_gemms is QuantisedGemms.ROUTED_EXPERTS
    with pytest.raises(FormError) as refused:
        validate_plan_form({**DEFAULT_PLAN_FORM, "plan.quantised_gemms": "routed_experts"})
    assert list(refused.value.errors) == ["plan.quantised_gemms"]


def test_the_studio_searches_within_a_jobs_search_block(tmp_path):
    """A plan's job keeps the layouts its team runs in its search block; the studio searched
    every layout regardless (a review). It now finds what `mosaic layouts` finds."""
    document = yaml.safe_load((EXAMPLES / "appendix_e.yaml").read_text())
    document["search"] = (document.get("search") or {}) | {"pp": [1, 2], "sharding": ["zero1"]}
    body = _studio_layouts_equal_the_clis(document, tmp_path / "limited.yaml")
    assert {(r["pp"] in (1, 2), r["sharding"]) for r in body["rows"]} == {(True, "zero1")}


def test_a_cleared_pipeline_layout_field_drops_the_job_files_split():
    """The pipeline-layout field shows a --job file's stated split; cleared (by hand, or by
    a layouts row whose pp it would not fit), the split is no longer stated: the job file's
    came back from the base document (a review)."""
    from mosaic.studio.app import form_from_job
    from mosaic.studio.jobs import job_document

    base = yaml.safe_load((EXAMPLES / "appendix_e.yaml").read_text())
    base["parallelism"]["pipeline_layout"] = "Et*6|(t*6|)*6t*6L"
    form = form_from_job(base)
    assert form["parallelism.pipeline_layout"] == "Et*6|(t*6|)*6t*6L"
    assert job_document(form, None, base)["parallelism"]["pipeline_layout"] == (
        "Et*6|(t*6|)*6t*6L")
    cleared = job_document({**form, "parallelism.pipeline_layout": ""}, None, base)
    assert "pipeline_layout" not in cleared["parallelism"]


RECORD = "runs_example.yaml#example-bridge-deepseekv3-gb200-256-bf16"


def test_a_run_record_opens_as_the_job_it_measured():
    """`mosaic studio --job RUNS.yaml#ID` was refused ("tp·pp·cp·dp = 1·1·1·1 = 1, not
    num_gpus=8": the dp=1 of the check) while `mosaic perf` reads the record (a trial): it
    opens on the record's job and predicts what `mosaic perf RUNS.yaml#ID` prints."""
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import predict_form
    from mosaic.studio.server import load_job_document

    document = load_job_document(EXAMPLES / RECORD)
    form = options_document(document)["form"]
    assert (form["model.source"], form["hardware.system"], form["hardware.nodes"]) == (
        "job", "GB200-NVL72", "64")
    _, result = predict_form(form, document, load_calibration(None))
    expected = cli_json("perf", str(EXAMPLES / RECORD))
    assert float(result.prediction.step_time_s[0]) == pytest.approx(expected["step_time_s"],
                                                                    rel=1e-12)


@pytest.mark.parametrize("source", ["appendix_e", "record"])
def test_a_stated_dp_follows_the_edited_node_count(source, tmp_path):
    """The editor has no dp field: a job file's stated dp (every exported plan states one)
    or a run record's refused every edit of the node count ("make them equal") and every
    layouts row of another dp. dp is what the nodes leave, as for a job that states none."""
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.app import options_document
    from mosaic.studio.jobs import predict_form
    from mosaic.studio.server import load_job_document

    if source == "record":
        path = EXAMPLES / RECORD
    else:
        stated = yaml.safe_load((EXAMPLES / "appendix_e.yaml").read_text())
        stated["parallelism"]["dp"] = 32
        path = tmp_path / "stated_dp.yaml"
        path.write_text(yaml.safe_dump(stated))
    document = load_job_document(path)
    form = {k: v for k, v in options_document(document)["form"].items()
            if k != "parallelism.dp"}  # the page's form: no dp field
    nodes = int(form["hardware.nodes"])
    calibration = load_calibration(None)
    before = predict_form(form, document, calibration)[1].spec.plan.row(0)["dp"]
    _, result = predict_form({**form, "hardware.nodes": str(2 * nodes)}, document, calibration)
    assert result.spec.plan.row(0)["dp"] == 2 * before


def test_an_untrainable_plan_says_why_in_the_forms_words(studio):
    """The page's plan with pp 3 on 32 GPUs failed with the CLI's advice, "loosen --pp 3 or
    choose --nodes, ... and --global-batch": the fields are pp, nodes and global batch (a
    trial)."""
    from mosaic.studio.plan_runner import DEFAULT_PLAN_FORM

    form = {**DEFAULT_PLAN_FORM, **TINY_PLAN, "plan.pp": "3"}
    status, body = studio.call("/api/plan", {"form": form})
    assert status == 200, body
    current = wait_plan(studio)
    assert current["state"] == "failed", current
    message = current["message"]
    assert message.startswith("no geometry of the grid is trainable"), message
    assert "loosen pp 3" in message and "global_batch" in message, message
    assert "--pp" not in message and "--nodes" not in message and "--global-batch" not in message


def test_an_untrainable_plan_names_the_node_type_for_the_host_size(studio):
    """A batch the cluster's GPUs cannot divide: the advice "choose --nodes, --gpus-per-node
    and --global-batch" named a CLI option the studio has no field for (a review); the
    studio sets the GPUs per node through the node type, so the advice names that field."""
    form = {**TINY_PLAN, "plan.nodes": "3", "plan.global_batch": "1000"}
    status, body = studio.call("/api/plan", {"form": form})
    assert status == 200, body
    current = wait_plan(studio)
    message = current["message"]
    assert current["state"] == "failed" and "divisibility" in message, current
    assert "--" not in message, message
    assert "choose nodes, system (its GPUs per node) and global_batch" in message, message


def test_a_bad_hsdp_shard_group_is_shown_beside_its_field(studio):
    """The editor's HSDP shard group: "hsdp_shard=3 must divide dp=32" was shown beside the
    node count alone."""
    form = {**DEFAULT_FORM, "parallelism.sharding": "hsdp", "parallelism.hsdp_shard": "3"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 422
    assert "hsdp_shard=3 must divide" in body["errors"]["parallelism.hsdp_shard"]
    status, body = studio.call("/api/perf", {"form": {**form, "parallelism.hsdp_shard": "8"}})
    assert status == 200 and body["prediction"]["plan"]["hsdp_shard"] == 8


@pytest.mark.parametrize("typed", ["4", "x"])
def test_a_typed_hsdp_shard_group_under_another_sharding_is_refused_as_the_cli_does(
        studio, tmp_path, typed):
    """A shard group typed into the editor under sharding zero1 was dropped without a word
    (a trial); `mosaic perf` refuses a job file stating both, so the editor shows the CLI's
    message beside the field. The job file's own group, which the form cannot clear (its
    empty field is the job's), is still dropped when the form picks another sharding."""
    from mosaic.studio.jobs import validate_form

    form = {**DEFAULT_FORM, "parallelism.sharding": "zero1"}
    status, body = studio.call("/api/export", {"form": form, "target": "yaml"})
    assert status == 200, body
    document = yaml.safe_load(body["text"])
    document["parallelism"]["hsdp_shard"] = 4 if typed == "4" else typed
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    result = runner.invoke(cli, ["perf", str(path)])
    assert result.exit_code == 2
    cli_message = result.output.split(f"{path}: ", 1)[1].split("\n")[0].strip()
    assert ("set sharding: hsdp or drop hsdp_shard" if typed == "4"
            else "valid integer") in cli_message
    status, body = studio.call("/api/perf", {"form": {**form, "parallelism.hsdp_shard": typed}})
    assert status == 422, body
    assert body["errors"]["parallelism.hsdp_shard"] == f"job: {cli_message}"
    # the job file's hybrid sharding and group (hsdp/8), switched to zero1 in the form
    base = {**document, "parallelism": {**document["parallelism"], "sharding": "hsdp",
                                        "hsdp_shard": 8}}
    job = validate_form(form, base)
    assert "hsdp_shard" not in job.document["parallelism"]
    assert job.spec.plan.hsdp_shard[0] == job.spec.plan.dp[0]  # none: the dp group


def test_every_step_term_is_drawn_in_a_named_group():
    """Nemotron-H's Mamba-2 GEMMs and scan (a third of its step) were drawn as a black
    "other" bar in the studio and every perf report: every term of the model has a group,
    and the hybrid job's step chart has no "other"."""
    from mosaic.perf.calibration import load_calibration
    from mosaic.perf.terms import STEP_TERMS
    from mosaic.report.html.breakdown import TERM_GROUPS
    from mosaic.studio.app import options_document
    from mosaic.studio.server import load_job_document

    assert [term for term in STEP_TERMS if term not in TERM_GROUPS] == []
    document = load_job_document(EXAMPLES / "nemotron_h_56b_b200.yaml")
    with running_studio(job_document=document,
                        calibration=load_calibration(None)) as running:
        status, body = running.call("/api/perf", {"form": options_document(document)["form"]})
    assert status == 200, body
    groups = {trace["name"] for trace in body["figures"]["step"]["data"]}
    assert "compute" in groups and "other" not in groups, groups


def test_a_run_records_layouts_are_searched_as_mosaic_layouts_searches_them():
    """The record's job is predicted against its device (as `mosaic perf` reads a record)
    but its layouts are searched under the planning headroom, as `mosaic layouts
    RUNS.yaml#ID` plans the next run: the studio listed 3,860 fitting layouts where the CLI
    lists 3,788."""
    from mosaic.studio.app import options_document
    from mosaic.studio.server import is_run_record, load_job_document, load_run_record

    path = EXAMPLES / "runs_example.yaml#example-bridge-qwen3-30b-a3b-b200-8-mxfp8"
    assert is_run_record(path) and not is_run_record(EXAMPLES / "appendix_e.yaml")
    document = load_job_document(path)
    with running_studio(job_document=document, record=load_run_record(path)) as running:
        form = options_document(document)["form"]
        status, perf = running.call("/api/perf", {"form": form})
        status_layouts, layouts = running.call("/api/layouts", {"form": form})
    assert status == status_layouts == 200
    assert perf["prediction"]["usable_memory_fraction"] == 1.0  # `mosaic perf`'s reading
    cli = cli_json("layouts", str(path), "--top", "1")
    assert (layouts["n_plans"], layouts["n_feasible"]) == (cli["n_plans"], cli["n_feasible"])


def test_a_run_records_explain_shows_its_measured_gap_as_the_cli_does():
    """`mosaic explain RUNS.yaml#ID` prints the measured-vs-predicted gap; the studio opened
    on the record explained its job without it (it kept only the job). The record's job as
    recorded gets the CLI's rows and findings; an edit is a what-if, said, with no gap."""
    from mosaic.report.explain_document import measured_gap_rows
    from mosaic.studio.app import options_document
    from mosaic.studio.server import load_job_document, load_run_record

    path = EXAMPLES / "runs_example.yaml#example-bridge-qwen3-30b-a3b-b200-8-mxfp8"
    document = load_job_document(path)
    record = load_run_record(path)
    with running_studio(job_document=document, record=record) as running:
        form = options_document(document)["form"]
        status, body = running.call("/api/explain", {"form": form})
        status_edit, edited = running.call("/api/explain",
                                           {"form": {**form, "batch.micro_seqs": "2"}})
    assert status == status_edit == 200, (body, edited)
    cli = cli_json("explain", str(path))
    assert body["gap"]["rows"] == [list(row) for row in measured_gap_rows(
        cli["gap"], record.assumptions)]
    assert body["gap"]["findings"] == cli["gap"]["findings"]
    assert body["gap_note"] is None
    assert edited["gap"] is None and "not the recorded run" in edited["gap_note"]
    assert load_run_record(EXAMPLES / "appendix_e.yaml") is None


def test_an_exported_job_names_the_catalog_and_profile_it_was_predicted_with(tmp_path):
    """Started with --catalog, the studio exported a job on the user's node type headed "run
    it with `mosaic perf job.yaml`", which then answers "unknown system" (a trial); and one
    predicted under another profile named none, so perf used the default. The header's
    command now reproduces the studio's step time, as `mosaic export --to yaml` does."""
    from mosaic.hardware import use_catalog
    from mosaic.perf.calibration import load_calibration

    catalog = tmp_path / "hw.yaml"
    catalog.write_text(yaml.safe_dump({"systems": [{
        "name": "acme-h100-roce", "device": "H100-SXM-80GB",
        "gpus_per_node": {"value": 8, "source": "our BOM"},
        "scale_up_domain_gpus": {"value": 8, "source": "our BOM"},
        "nics_per_node": {"value": 8, "source": "8x 200G NICs"},
        "nic_bw_bytes_per_s": {"value": 2.5e10, "source": "200 Gb/s"},
        "scale_out_fabric": "RoCE 200 Gb/s"}]}))
    form = {**DEFAULT_FORM, "hardware.system": "acme-h100-roce", "hardware.nodes": "8"}
    use_catalog(catalog)
    try:
        with running_studio(calibration=load_calibration("paper-p6b200")) as studio:
            status, body = studio.call("/api/perf", {"form": form})
            assert status == 200, body
            _, exported = studio.call("/api/export", {"form": form, "target": "yaml"})
    finally:
        use_catalog()
    header = exported["text"].splitlines()[0]
    command = f"`mosaic --catalog {catalog} perf job.yaml --calibration paper-p6b200`"
    assert command in header, header
    path = tmp_path / "job.yaml"
    path.write_text(exported["text"])
    try:
        document = cli_json("--catalog", str(catalog), "perf", str(path),
                            "--calibration", "paper-p6b200")
    finally:
        use_catalog()
    assert document["step_time_s"] == pytest.approx(body["prediction"]["step_time_s"],
                                                    rel=1e-12)


def test_a_node_price_in_the_plan_form_is_noted_against_the_node_types_gpus():
    """A GB200 tray holds 4 GPUs: 98 USD per 'GPU-hour' is 24.5 per GPU if it is the tray's
    price, as `plan` and the sweeps say; the form's early check said '8 GPUs of an HGX node'
    before the node type was known (a review)."""
    from mosaic.errors import MosaicNote
    from mosaic.studio.plan_runner import validate_plan_form

    with pytest.warns(MosaicNote) as notes:
        validate_plan_form({**TINY_PLAN, "plan.gpu": "GB200", "plan.system": "",
                            "plan.price_per_gpu_hour": "98"})
    said = [str(note.message) for note in notes if "a node's price?" in str(note.message)]
    assert said and all(m.endswith("divided by its 4 GPUs it is 24.5") for m in said)


def test_the_plan_form_takes_the_jobs_optimizer():
    """A studio opened on a Muon job with bf16 optimizer state planned every candidate with
    AdamW in fp32 (the form had no optimizer; a review): the job seeds the plan form's
    optimizer fields, which reach the envelope as `mosaic plan --optimizer
    --optimizer-dtype` do."""
    from mosaic.perf.workload import OptimizerDtype, OptimizerKind
    from mosaic.studio.app import options_document
    from mosaic.studio.plan_runner import DEFAULT_PLAN_FORM, validate_plan_form

    job = {"model": {"layers": 4, "d_model": 2048, "heads": 16, "ffn": 8192,
                     "moe": {"experts": 32, "top_k": 4, "expert_ffn": 768}},
           "batch": {"global_seqs": 128, "seq_len": 4096, "micro_seqs": 2},
           "parallelism": {"ep": 4}, "optimizer": {"kind": "muon"},
           "performance": {"optimizer_dtype": "bf16"},
           "hardware": {"nodes": 1, "system": "DGX-B200"}}
    seeded = options_document(job)
    assert (seeded["plan_form"]["plan.optimizer"],
            seeded["plan_form"]["plan.optimizer_dtype"]) == ("muon", "bf16")
    assert set(seeded["optimizer_dtypes"]) == {"fp32", "bf16", "bf16_moments"}
    grid = {"plan.q": "8", "plan.experts": "16", "plan.top_k": "1", "plan.split_factor": "1"}
    envelope, _, _ = validate_plan_form({**seeded["plan_form"], **grid})
    assert (envelope.optimizer, envelope.optimizer_dtype) == (OptimizerKind.MUON,
                                                              OptimizerDtype.BF16)
    envelope, _, _ = validate_plan_form({**DEFAULT_PLAN_FORM, **grid})
    assert (envelope.optimizer, envelope.optimizer_dtype) == (OptimizerKind.ADAMW,
                                                              OptimizerDtype.FP32)


@pytest.mark.parametrize(("changes", "fields", "words"), [
    # a dispatcher the stack has no path to: beside the stack (and the dispatcher, sent)
    ({"performance.stack": "torchtitan", "parallelism.sharding": "fsdp",
      "parallelism.dispatcher": "hybridep"}, ["parallelism.dispatcher", "performance.stack"],
     "dispatcher hybridep on stack torchtitan: the stack has no hybridep path"),
    # Megatron-Core's flex dispatcher asserts TPxEP > 1: beside etp and ep
    ({"parallelism.ep": "1", "parallelism.dispatcher": "deepep"},
     ["parallelism.etp", "parallelism.ep"], "etp·ep=1·1 with the deepep dispatcher"),
    # NeMo AutoModel keeps routed experts EP-owned: its one etp is named as a degree, not as
    # Python's tuple 'etp in (1,)' (a review); beside the stack too, which it names
    ({"performance.stack": "nemo-automodel", "parallelism.sharding": "fsdp",
      "parallelism.etp": "2"}, ["parallelism.etp", "performance.stack"],
     "etp: stack 'nemo-automodel' offers only etp 1"),
])
def test_a_stack_refusal_is_shown_beside_its_fields(studio, changes, fields, words):
    status, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, **changes}})
    assert status == 422 and list(body["errors"]) == fields, body
    assert all(words in message and "\n" not in message and "(1,)" not in message
               for message in body["errors"].values()), body


def test_a_jobs_stated_deepep_the_layout_refuses_is_the_plan_forms_dispatcher():
    """A Megatron-Core job stating DeepEP at ep 1 (etp·ep = 1, which perf refuses beside etp
    and ep) opened with its dispatcher left out of the plan form: megatron-core's default is
    the all-to-all (no moe_dispatcher trait), so the plan ran another dispatcher than the
    job states. The plan form holds the stated one, as `mosaic plan --dispatcher deepep`."""
    from mosaic.studio.app import options_document

    document = yaml.safe_load((EXAMPLES / "q12_moe.yaml").read_text())
    document.update({
        "hardware": {"system": "DGX-H100", "nodes": 8},
        "batch": {"global_seqs": 1024, "seq_len": 4096, "micro_seqs": 1},
        "parallelism": {"tp": 1, "pp": 4, "ep": 1, "etp": 1, "sharding": "zero1",
                        "dispatcher": "deepep"},
        "performance": {"precision": "bf16", "stack": "megatron-core"}})
    options = options_document(document)
    assert options["plan_form"]["plan.dispatcher"] == "deepep"
    with running_studio(job_document=document) as studio:
        status, body = studio.call("/api/perf", {"form": options["form"]})
    assert status == 422 and sorted(body["errors"]) == ["parallelism.ep", "parallelism.etp"]


def test_refused_recompute_modules_of_the_job_file_are_shown_beside_the_recompute_field(
        tmp_path):
    """A job file's recompute_modules naming MLA's up-projections, unread under its full
    recompute: the editor's switch to selective is refused (Megatron-Core checks the modules
    there), and the refusal was shown in the general line; the page has no field for the
    modules, so it goes beside the recompute field under which they are read."""
    from mosaic.studio.app import options_document
    from mosaic.studio.server import load_job_document

    document = yaml.safe_load((EXAMPLES / "appendix_e.yaml").read_text())
    document["performance"] = {**document["performance"], "recompute_modules": ["mla_up_proj"]}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    job = load_job_document(path)
    form = options_document(job)["form"]
    assert "performance.recompute_modules" not in form  # (no field on the page)
    with running_studio(job_document=job) as running:
        status, body = running.call("/api/perf", {"form": form})
        assert status == 200, body
        status, body = running.call("/api/perf", {"form": {
            **form, "performance.checkpointing": "selective"}})
    assert status == 422 and list(body["errors"]) == ["performance.checkpointing"], body
    assert "recompute_modules: mla_up_proj" in body["errors"]["performance.checkpointing"]


def test_a_refused_sequence_parallel_is_shown_beside_its_switch(studio):
    """NeMo AutoModel refuses sequence parallelism on an expert-parallel MoE's TP: the
    refusal was shown beside tp and ep only, not the sequence-parallel switch it refuses."""
    form = {**DEFAULT_FORM, "performance.stack": "nemo-automodel", "parallelism.pp": "1",
            "parallelism.sharding": "fsdp", "parallelism.tp": "2",
            "parallelism.sequence_parallel": "true"}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 422, body
    assert "sequence_parallel on stack" in body["errors"]["parallelism.sequence_parallel"]
    status, body = studio.call("/api/perf", {"form": {
        **form, "parallelism.sequence_parallel": "false"}})
    assert status == 200, body


def test_a_local_batch_is_edited_and_checked_beside_its_field(studio):
    """batch.local_seqs (torchtitan's and NeMo AutoModel's local batch): 1024 sequences over
    dp 32 are 32 per rank; a local batch of 8 runs 4 pipeline schedules on torchtitan (four
    bubbles), one of 48 is no whole number of passes and is refused beside its field."""
    form = {**DEFAULT_FORM, "performance.stack": "torchtitan", "parallelism.sharding": "fsdp"}
    _, whole = studio.call("/api/perf", {"form": form})
    _, passes = studio.call("/api/perf", {"form": {**form, "batch.local_seqs": "8"}})
    bubble = [body["prediction"]["breakdown_s"]["pipeline_bubble"] for body in (whole, passes)]
    assert bubble[1] == pytest.approx(4 * bubble[0], rel=1e-9)
    status, body = studio.call("/api/perf", {"form": {**form, "batch.local_seqs": "48"}})
    assert status == 422 and "batch.local_seqs" in body["errors"], body
    assert "local_seqs=32·48 must divide" in body["errors"]["batch.local_seqs"]


def test_a_cleared_local_batch_field_drops_the_job_files_local_batch(tmp_path):
    """The page labels the local batch "empty: all": a studio opened on a job file stating
    ``local_seqs: 4`` predicted the stated 4 once the field was cleared (15.5 s, not the
    whole per-rank batch's 11.6 s `mosaic perf` predicts for the job without it; a trial),
    so the field could not be cleared. Cleared, it is no longer stated, as the pipeline
    layout's field (job_document)."""
    base = {"model": {"name": "Llama-3.1-8B", "layers": 32, "d_model": 4096, "heads": 32,
                      "kv_heads": 8, "head_dim": 128, "ffn": 14336, "activation": "swiglu",
                      "vocab": 128256, "attention": "gqa"},
            "parallelism": {"tp": 1, "pp": 2, "ep": 1, "sharding": "fsdp"},
            "batch": {"global_seqs": 64, "micro_seqs": 2, "seq_len": 8192},
            "performance": {"precision": "bf16", "checkpointing": "selective",
                            "stack": "torchtitan"},
            "hardware": {"system": "Grand-Teton-H100", "nodes": 1}}
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump({**base, "batch": {**base["batch"], "local_seqs": 4}}))
    without = tmp_path / "whole.yaml"
    without.write_text(yaml.safe_dump(base))
    whole = cli_json("perf", str(without))
    with running_studio(job_document=yaml.safe_load(path.read_text())) as running:
        _, options = running.call("/api/options")
        form = options["form"]
        assert form["batch.local_seqs"] == "4"
        _, stated = running.call("/api/perf", {"form": form})
        status, cleared = running.call("/api/perf", {"form": {**form, "batch.local_seqs": ""}})
        assert status == 200, cleared
        status, exported = running.call("/api/export", {"form": {**form, "batch.local_seqs": ""}})
    assert stated["prediction"]["step_time_s"] != pytest.approx(whole["step_time_s"])
    assert cleared["prediction"]["step_time_s"] == pytest.approx(whole["step_time_s"], rel=1e-12)
    assert status == 200 and "local_seqs" not in exported["text"], exported


@pytest.mark.parametrize(("pasted", "hinted"), [
    ((EXAMPLES / "appendix_e.yaml").read_text(), True),
    ((EXAMPLES / "deepseek_v3_h100.yaml").read_text(), True),
    ('{"hidden_size": 4096,', False),  # a config.json cut short: JSON's own message alone
    ("just: words", False)])
def test_a_job_yaml_pasted_as_the_config_json_says_how_to_open_it(studio, pasted, hinted):
    """A job YAML pasted into the config.json box read "config.json: not valid JSON
    (Expecting value: line 1, column 1)" alone (a trial): it names what was pasted and how
    a job file is opened (`mosaic studio --job`)."""
    form = {**DEFAULT_FORM, "model.source": "hf", "hf.config": pasted}
    status, body = studio.call("/api/perf", {"form": form})
    assert status == 422 and "not valid JSON" in body["errors"]["hf.config"], body
    assert ("mosaic studio --job" in body["errors"]["hf.config"]) == hinted, body


def test_the_options_form_posted_back_with_more_nodes_predicts_them():
    """`GET /api/options` of a studio on a job held ``parallelism.dp`` (the job's resolved
    dp), a field the editor has not: an API client posting that form back with twice the
    nodes was refused ("hardware.nodes=64 gives 512 GPUs ... but the layout uses ... 256;
    make them equal"; a trial), where the page predicted dp 64. dp is what the nodes leave."""
    with running_studio(job_document=yaml.safe_load(
            (EXAMPLES / "deepseek_v3_h100.yaml").read_text())) as running:
        _, options = running.call("/api/options")
        form = options["form"]
        assert "parallelism.dp" not in form
        nodes = int(form["hardware.nodes"])
        status, body = running.call("/api/perf", {"form": {**form,
                                                           "hardware.nodes": str(2 * nodes)}})
    assert status == 200, body
    assert body["prediction"]["plan"]["dp"] == 2 * 64


def test_a_recipes_pipeline_layout_is_not_stated_by_the_editor():
    """deepseek_v3_h100.yaml states no pipeline layout; its Megatron-Bridge 26.04 recipe
    splits pp 8 · vpp 4 as 'Et|(tt|)*30mL'. The editor showed that split in its field
    ("empty: none stated") and so stated it: an edit to pp 4 was refused ("32 chunks, but
    pp·vpp = 4·4 = 16"), where `mosaic perf FILE --set parallelism.pp=4` predicts (a trial).
    The field shows what the job states, as the row choices; the recipe splits the rest."""
    path = EXAMPLES / "deepseek_v3_h100.yaml"
    cli = {pp: cli_json("perf", str(path), "--set", f"parallelism.pp={pp}") for pp in (8, 4)}
    with running_studio(job_document=yaml.safe_load(path.read_text())) as running:
        _, options = running.call("/api/options")
        form = options["form"]
        assert form["parallelism.pipeline_layout"] == ""
        bodies = {pp: running.call("/api/perf", {"form": {**form, "parallelism.pp": str(pp)}})
                  for pp in (8, 4)}
    for pp, (status, body) in bodies.items():
        assert status == 200, body
        assert body["prediction"]["step_time_s"] == pytest.approx(cli[pp]["step_time_s"],
                                                                  rel=1e-12)


def page_fields() -> set[str]:
    """The job editor's fields (studio.js JOB_FIELDS): what the page sends of a form."""
    import re

    script = (Path(__file__).resolve().parents[2] / "src" / "mosaic" / "studio" / "static" /
              "studio.js").read_text()
    block = script[script.index("var JOB_FIELDS"):script.index("var PLAN_FIELDS")]
    return set(re.findall(r'\["(\w+\.\w+)", "', block))


def test_a_recipes_kernel_switches_are_not_stated_by_the_editor(tmp_path):
    """A Megatron-Bridge 26.06 MXFP8 job on GB300 that states neither Transformer Engine
    switch: its recipe turns both on, and the editor showed them as 'true', so stated them:
    an edit to bf16 was refused ("fused_grouped_mlp needs precision mxfp8"), where `mosaic
    perf FILE --set performance.precision=bf16` predicts with both off (a trial). A switch
    shows what the job states (empty: the recipe's), as the page's empty choice says."""
    document = {
        "model": {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                  "ffn": 6144, "vocab": 151936,
                  "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
        "batch": {"global_seqs": 256, "seq_len": 4096, "micro_seqs": 1},
        "parallelism": {"ep": 8},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                        "stack_version": "26.06"},
        "hardware": {"system": "GB300-NVL72", "nodes": 2}}
    path = tmp_path / "recipe_switches.yaml"
    path.write_text(yaml.safe_dump(document))
    cli = {p: cli_json("perf", str(path), "--set", f"performance.precision={p}")
           for p in ("mxfp8", "bf16")}
    with running_studio(job_document=document) as running:
        _, options = running.call("/api/options")
        form = {key: value for key, value in options["form"].items() if key in page_fields()}
        assert form["performance.fused_grouped_mlp"] == ""
        assert form["performance.fp8_dot_product_attention"] == ""
        bodies = {p: running.call("/api/perf", {"form": {**form, "performance.precision": p}})
                  for p in ("mxfp8", "bf16")}
    for precision, (status, body) in bodies.items():
        assert status == 200, body
        assert body["prediction"]["step_time_s"] == pytest.approx(
            cli[precision]["step_time_s"], rel=1e-12)
        assert body["prediction"]["fused_grouped_mlp"] is (precision == "mxfp8")
