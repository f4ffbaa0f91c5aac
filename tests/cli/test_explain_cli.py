"""`mosaic explain` from the command line: JSON keys, human output, measurements, errors."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "fsdp_moe_comm_bound.yaml")
# drop-and-pad routing: the FSDP communication bounds the step (the example's header)
DROP_AND_PAD = ("--set", "performance.routing=token_drop", "--set",
                "performance.pad_to_capacity=true")
LEVER_KEYS = {"name", "description", "plan", "step_time_s", "mfu", "tokens_per_s", "gain",
              "feasible", "reason"}
runner = CliRunner()


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["explain", EXAMPLE, *DROP_AND_PAD, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_json_keys_and_verdict():
    doc = run_json()
    assert {"bound", "breakdown", "gap", "levers"} <= set(doc)
    assert doc["gap"] is None
    assert doc["bound"]["limiter"] == "communication"
    assert doc["bound"]["part"] == "dp/fsdp"
    assert sum(term["seconds"] for term in doc["breakdown"]) == pytest.approx(
        doc["current"]["step_time_s"], rel=1e-9)
    for lever in doc["levers"]:
        assert set(lever) >= LEVER_KEYS
    top = doc["levers"][0]
    assert top["feasible"] and top["gain"] > 1.4 and top["reason"] is None


def test_json_reports_rule_breaking_lever_with_nulls():
    doc = run_json()
    lever = next(x for x in doc["levers"] if x["name"] == "micro_batch_double")
    assert lever["feasible"] is False
    assert lever["step_time_s"] is None and lever["gain"] is None
    assert "must divide global_batch=256" in lever["reason"]


def test_perf_predicts_a_few_percent_mfu_for_the_example():
    result = runner.invoke(app, ["perf", EXAMPLE, "--json"])
    assert result.exit_code == 0, result.output
    assert 0.015 <= json.loads(result.output)["mfu"] <= 0.05  # the example's "~2% MFU"


def test_measured_tokens_per_s_gives_the_gap():
    base = run_json()
    predicted_tokens_per_s = base["current"]["tokens_per_s"]
    doc = run_json("--measured-tokens-per-s", str(predicted_tokens_per_s / 2))
    gap = doc["gap"]
    assert gap["ratio"] == pytest.approx(2.0)
    assert gap["measured_step_time_s"] == pytest.approx(2 * base["current"]["step_time_s"])
    assert gap["more_plausible"] in {"compute", "communication"}
    assert gap["findings"][-1].startswith("inference:")


def test_human_output_says_why_and_what_to_try():
    result = runner.invoke(app, ["explain", EXAMPLE, *DROP_AND_PAD, "--measured-step-time-s",
                                 "2.0"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "Bound: communication-bound" in text
    assert "Measured vs predicted" in text
    assert "inference:" in text
    levers = text[text.index("Levers"):]
    first_row = next(line for line in levers.splitlines() if "│  1 │" in line)
    assert "expert parallelism" in first_row and "yes" in first_row


def test_set_override_reaches_the_diagnosis():
    doc = run_json("--set", "parallelism.ep=8")
    assert doc["current"]["plan"]["ep"] == 8
    assert all(lever["name"] != "ep_in_domain" for lever in doc["levers"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--measured-tokens-per-s", "1e6", "--measured-step-time-s", "1"], "not both"),
        (["--measured-step-time-s", "-1"], "--measured-step-time-s: got -1.0; allowed"),
        (["--measured-tokens-per-s", "0"], "--measured-tokens-per-s: got 0.0; allowed"),
        (["--set", "parallelism.ep=7"], "ep=7 must divide experts=128"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, fragment):
    result = runner.invoke(app, ["explain", EXAMPLE, *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_measured_per_gpu_tokens_per_s_is_the_cluster_total_over_the_gpus():
    perf = json.loads(runner.invoke(app, ["perf", EXAMPLE, *DROP_AND_PAD, "--json"]).stdout)
    gpus = perf["hardware"]["devices"]
    per_gpu = perf["tokens_per_s_per_gpu"] / 2
    by_gpu = run_json("--measured-tokens-per-s-per-gpu", str(per_gpu))
    by_total = run_json("--measured-tokens-per-s", str(per_gpu * gpus))
    assert by_gpu["gap"]["ratio"] == pytest.approx(2.0)
    assert by_gpu["gap"] == by_total["gap"]


def test_a_per_gpu_figure_given_as_cluster_total_gets_a_hint_on_stderr():
    perf = json.loads(runner.invoke(app, ["perf", EXAMPLE, *DROP_AND_PAD, "--json"]).stdout)
    per_gpu = perf["tokens_per_s_per_gpu"]
    result = runner.invoke(app, ["explain", EXAMPLE, "--measured-tokens-per-s",
                                 str(per_gpu * 0.8), "--json"])
    assert result.exit_code == 0, result.output
    assert "--measured-tokens-per-s takes the cluster total" in result.stderr
    assert "--measured-tokens-per-s-per-gpu" in result.stderr
    json.loads(result.stdout)  # stdout stays the JSON document
    total = runner.invoke(app, ["explain", EXAMPLE, "--measured-tokens-per-s",
                                str(perf["tokens_per_s"] * 0.8), "--json"])
    assert total.exit_code == 0 and total.stderr == ""
    both = runner.invoke(app, ["explain", EXAMPLE, "--measured-tokens-per-s", "1e6",
                               "--measured-tokens-per-s-per-gpu", "1e3"])
    assert both.exit_code == 2 and "not both" in both.output


def test_a_measurement_faster_than_the_peak_is_rejected():
    current = run_json()["current"]
    # the predicted MFU m (with attention, GEMM lane) at step t: a step of t·m/2 would be an
    # MFU of 200%
    mfu = current["mfu_with_attention_gemm_lane"]
    assert mfu > current["mfu"] * 1.0001  # causal attention counted on top of 6·N_act
    too_fast = current["step_time_s"] * mfu / 2
    result = runner.invoke(app, ["explain", EXAMPLE, "--measured-step-time-s", str(too_fast)])
    assert result.exit_code == 2
    assert "implies an MFU of 200%" in result.output
    ok = runner.invoke(app, ["explain", EXAMPLE, "--measured-step-time-s",
                             str(current["step_time_s"] * mfu * 1.25)])  # 80%
    assert ok.exit_code == 0, ok.output
    # a tokens/s figure is named as given, with the step it means
    per_gpu = runner.invoke(app, ["explain", EXAMPLE, "--measured-tokens-per-s-per-gpu",
                                  "1e7"])
    assert per_gpu.exit_code == 2
    assert "(--measured-tokens-per-s-per-gpu 1e+07) implies an MFU" in per_gpu.output


def test_a_measurement_more_than_ten_times_slower_is_explained_with_a_units_warning():
    """A step time given in milliseconds (1000x the seconds) is still explained, with a
    warning naming the likely slip (found by a new-user trial: it read '1000x slower;
    slower compute kernels is the more plausible main source')."""
    step = run_json()["current"]["step_time_s"]
    result = runner.invoke(app, ["explain", EXAMPLE, *DROP_AND_PAD, "--measured-step-time-s",
                                 str(step * 1000), "--json"])
    assert result.exit_code == 0, result.output
    assert "1,000x slower than predicted" in result.stderr and "milliseconds" in result.stderr
    assert "1,000x slower" in json.loads(result.stdout)["measurement_warning"]
    near = runner.invoke(app, ["explain", EXAMPLE, *DROP_AND_PAD, "--measured-step-time-s",
                               str(step * 3)])
    assert near.exit_code == 0 and "warning" not in near.stderr


def test_explain_on_an_amd_gpu_offers_no_nvidia_only_kernel(tmp_path):
    """levanter's blockwise JAX attention on an MI300X: the cuDNN what-if would be refused
    there (cuDNN runs on NVIDIA GPUs only), so explain leaves it out instead of failing."""
    levers = _levers_of(tmp_path, (
        "model: {layers: 16, d_model: 4096, heads: 32, kv_heads: 8, ffn: 14336, vocab: 128256}\n"
        "parallelism: {sharding: fsdp}\n"
        "batch: {global_seqs: 64, seq_len: 4096, micro_seqs: 1}\n"
        "performance: {precision: bf16, stack: levanter, checkpointing: full}\n"
        "hardware: {system: ND-MI300X-v5, nodes: 1}\n"))
    assert levers and "attention_cudnn" not in levers


def _levers_of(tmp_path, job_text: str) -> dict:
    """`mosaic explain --json` of a job written from ``job_text``: its levers by name."""
    job = tmp_path / "job.yaml"
    job.write_text(job_text)
    result = runner.invoke(app, ["explain", str(job), "--json"])
    assert result.exit_code == 0, result.output
    return {lever["name"]: lever for lever in json.loads(result.stdout)["levers"]}


def test_explain_offers_offloading_fewer_layers(tmp_path, offload_job):
    """Llama-3-8B on 8 B200s with 20 of its 32 layers' activations offloaded over PCIe: the
    copies outlast the block compute, and offloading none (which fits) is the best lever
    (found by a new-user trial: no lever offered it)."""
    levers = _levers_of(tmp_path, offload_job("DGX-B200").read_text())
    assert levers["offload_none"]["feasible"] and levers["offload_halve"]["feasible"]
    assert levers["offload_none"]["gain"] > levers["offload_halve"]["gain"] > 1.0


def test_a_measurement_given_for_a_run_record_says_it_replaces_the_records():
    record = str(Path(__file__).resolve().parents[2]
                 / "examples/runs_example.yaml#example-torchtitan-llama3.1-8b-h100-8-fsdp")
    given = runner.invoke(app, ["explain", record, "--measured-step-time-s", "5", "--json"])
    assert given.exit_code == 0, given.output
    assert "replaces the record's measured step (2.844 s)" in given.stderr
    assert json.loads(given.stdout)["gap"]["measured_step_time_s"] == 5.0
    own = runner.invoke(app, ["explain", record, "--json"])
    assert own.exit_code == 0 and "replaces" not in own.stderr


def test_a_records_own_mis_entered_measurement_names_the_record_not_the_options(tmp_path):
    """explain RUNS.yaml#ID on a record whose measurement looks mis-entered speaks of the
    record's measured block in `validate`'s words, not of --measured-... options the user
    never gave (a trial): a cluster total given per GPU is refused naming the record, a step
    time in milliseconds is explained with validate's warning."""
    import yaml

    runs = Path(__file__).resolve().parents[2] / "examples/runs_example.yaml"
    document = yaml.safe_load(runs.read_text())
    published = document["runs"][0]
    cluster = dict(published, id="cluster", measured={
        "tokens_per_s_per_gpu": published["measured"]["tokens_per_s_per_gpu"] * 8})
    in_ms = dict(published, id="in-ms", measured={
        "step_time_s": published["measured"]["step_time_s"] * 1000})
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**document, "runs": [published, cluster, in_ms]}))
    reasons = {flagged["id"]: flagged["reason"] for flagged in json.loads(runner.invoke(
        app, ["validate", str(path), "--json"]).stdout)["aggregate"]["implausible_measurements"]}
    refused = runner.invoke(app, ["explain", f"{path}#cluster"])
    assert refused.exit_code == 2
    assert f"{path}#cluster" in refused.output and reasons["cluster"] in refused.output
    assert "--measured-tokens-per-s is" not in refused.output
    slow = runner.invoke(app, ["explain", f"{path}#in-ms", "--json"])
    assert slow.exit_code == 0, slow.output
    assert reasons["in-ms"] in json.loads(slow.stdout)["measurement_warning"]
    page = tmp_path / "explain.html"  # the page says what the terminal says
    assert runner.invoke(app, ["explain", f"{path}#in-ms", "--html", str(page)]).exit_code == 0
    assert "unit slip" in page.read_text()


def test_a_job_that_does_not_fit_is_told_which_levers_make_it_fit():
    """A trial looked through the table for the levers that fit an out-of-memory job: the
    lines after it name them by rank, and each lever states its memory."""
    result = runner.invoke(app, ["explain", EXAMPLE, "--json", "--set",
                                 "hardware.usable_memory_fraction=0.15"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["bound"]["memory"]["status"] != "fits"
    fitting = [str(rank) for rank, lever in enumerate(document["levers"], start=1)
               if lever["feasible"]]
    assert all(lever["memory_gib"] is not None for lever in document["levers"]
               if lever["gain"] is not None)
    text = runner.invoke(app, ["explain", EXAMPLE, "--set",
                               "hardware.usable_memory_fraction=0.15"]).output
    expected = ("the levers that make it fit: " + ", ".join(fitting) if fitting
                else "no single lever makes it fit")
    assert "The job does not fit; " + expected in " ".join(text.split())


def test_the_printed_set_line_holds_a_list_override_whole():
    """A trial copied the FP8 lever's printed `set` line of the DeepSeek-V3 example and got
    27.98 s, 67.9 GiB against the lever's 27.59 s, 50.5 GiB: rich read the list value of
    'performance.recompute_modules=[mla_up_proj, mlp]' as a style tag and printed
    'performance.recompute_modules='. Every word of every lever's overrides is printed."""
    job = str(Path(EXAMPLE).parent / "deepseek_v3_h100.yaml")
    result = runner.invoke(app, ["explain", job, "--json"])
    assert result.exit_code == 0, result.output
    overrides = [item for lever in json.loads(result.stdout)["levers"]
                 for item in lever["overrides"] or ()]
    assert any("[" in item for item in overrides)  # the case this test is about
    text = runner.invoke(app, ["explain", job]).output
    levers = text[text.index("Levers"):]
    assert all(word in levers for item in overrides for word in item.split())
