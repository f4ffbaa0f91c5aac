"""`mosaic layouts` from the command line: JSON rows, pins, devices, reasons, errors."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()
ROW_FIELDS = {"rank", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "sharding", "micro_batch",
              "checkpointing", "tokens_per_s_per_gpu", "mfu", "step_time_s", "memory_gib"}
# The paper's q=4 validation model (Sec. 7.2: 0.7B active on 4 p6-b200 nodes).
Q4_JOB = {
    "model": {"n_layers": 16, "hidden_sz": 2048, "inter_sz": 5120, "n_q_heads": 16,
              "n_kv_heads": 8, "head_dim": 128},
    "moe": {"n_experts": 64, "experts_per_token": 2, "expert_inter_sz": 1280,
            "n_shared_experts": 1, "n_dense_layers": 1},
    "data": {"gbs": 256, "seqlen": 2048},
    "hardware": {"node_type": "p6-b200.48xlarge", "nodes": 4},
    "parallelism": {"tp": 3, "pp": 5},  # invalid on purpose: the search ignores it
}


@pytest.fixture
def q4_job(tmp_path):
    path = tmp_path / "q4.yaml"
    path.write_text(yaml.safe_dump(Q4_JOB))
    return path


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["layouts", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_json_rows_have_the_required_fields_and_are_ranked(q4_job):
    doc = run_json(str(q4_job), "--top", "7")
    assert len(doc["rows"]) == 7
    for row in doc["rows"]:
        assert set(row) >= ROW_FIELDS
    assert [row["rank"] for row in doc["rows"]] == list(range(1, 8))
    throughput = [row["tokens_per_s_per_gpu"] for row in doc["rows"]]
    assert throughput == sorted(throughput, reverse=True)
    assert doc["hardware"]["devices"] == 32
    assert doc["n_candidates"] >= doc["n_plans"] >= doc["n_feasible"] >= 7
    rejected = sum(item["plans"] for item in doc["infeasible"]["rejected"])
    assert rejected == doc["n_candidates"] - doc["n_plans"]


def test_pins_reach_the_search(q4_job):
    doc = run_json(str(q4_job), "--pp", "2", "--ep", "4,8", "--mbs", "1,2", "--max-tp", "2",
                   "--sharding", "zero1,fsdp", "--checkpointing", "none,full", "--top", "50")
    assert doc["rows"]
    for row in doc["rows"]:
        assert row["pp"] == 2 and row["ep"] in (4, 8) and row["micro_batch"] in (1, 2)
        assert row["tp"] <= 2
        assert row["sharding"] in ("zero1", "fsdp")
        assert row["checkpointing"] in ("none", "full")


def test_the_jobs_own_degrees_are_said_to_be_searched_unless_pinned(q4_job):
    """The job states tp 3 and pp 5; the search replaces them, and says so with the pins
    that would keep them (a trial's ep=8 was searched over without a word)."""
    assert run_json(str(q4_job), "--top", "1")["job_degrees_searched"] == {"tp": 3, "pp": 5}
    assert run_json(str(q4_job), "--top", "1", "--pp", "2")["job_degrees_searched"] == {
        "tp": 3}
    text = runner.invoke(app, ["layouts", str(q4_job), "--top", "1"], terminal_width=200)
    said = "The job's tp=3, pp=5 are searched over, not kept (pin them: --tp 3 --pp 5)."
    assert said in text.stdout


def test_the_layouts_page_says_what_the_terminal_says_of_the_jobs_degrees(q4_job, tmp_path):
    """The page left out the line the terminal printed (a trial)."""
    html = tmp_path / "layouts.html"
    runner.invoke(app, ["layouts", str(q4_job), "--top", "1", "--html", str(html)])
    assert ("The job&#x27;s tp=3, pp=5 are searched over, not kept (pin them: --tp 3 --pp 5)."
            in html.read_text())


def test_devices_option_and_nodes_default(q4_job):
    assert run_json(str(q4_job), "--devices", "64", "--top", "1")["hardware"]["devices"] == 64
    document = {**Q4_JOB, "search": {"num_devices": 16},
                "hardware": {"node_type": "p6-b200.48xlarge"}}
    q4_job.write_text(yaml.safe_dump(document))
    assert run_json(str(q4_job), "--top", "1")["hardware"]["devices"] == 16


def test_show_infeasible_lists_reasons():
    doc = run_json(str(EXAMPLES / "appendix_e.yaml"), "--pp", "16", "--ep", "8", "--tp", "1",
                   "--top", "3", "--show-infeasible")
    infeasible = doc["infeasible"]
    assert infeasible["out_of_memory"] > 0
    for plan in infeasible["out_of_memory_plans"]:
        assert plan["overshoot_gib"] > 0
        # over the device's memory, or under it and over the planning headroom (perf's
        # wording for the two, a trial), judged from the plan's memory and the device's
        above_gib = plan["memory_gib"] - doc["capacity_bytes"] / 2**30
        verdict = (f"out of memory by {above_gib:.2f} GiB over the device "
                   f"({plan['overshoot_gib']:.2f} GiB over the usable 90%)" if above_gib > 0
                   else f"over the 90% planning headroom by {plan['overshoot_gib']:.2f} GiB")
        assert plan["reason"].startswith(verdict)
    # the count of those under the device's memory, by hand from every listed plan
    every = run_json(str(EXAMPLES / "appendix_e.yaml"), "--pp", "16", "--ep", "8", "--tp",
                     "1", "--top", "100000", "--show-infeasible")["infeasible"]
    assert len(every["out_of_memory_plans"]) == every["out_of_memory"]
    under = sum(plan["memory_gib"] * 2**30 <= doc["capacity_bytes"]
                for plan in every["out_of_memory_plans"])
    assert every["over_planning_headroom"] == infeasible["over_planning_headroom"] == under
    assert infeasible["rejected"][0]["rule"] == "pp·vpp={pp}·{vpp} must divide layers=48"
    assert infeasible["rejected_plans"][0]["reason"].endswith("must divide layers=48")


def test_set_overrides_the_job(q4_job):
    base = run_json(str(q4_job), "--top", "1")
    larger = run_json(str(q4_job), "--top", "1", "--set", "data.global_batch=512")
    assert larger["rows"][0]["step_time_s"] > base["rows"][0]["step_time_s"]


def test_human_table(q4_job):
    result = runner.invoke(app, ["layouts", str(q4_job), "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "Layouts by predicted throughput" in result.output
    assert "tok/s/GPU" in result.output and "MFU" in result.output
    assert "--show-infeasible" in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--tp", "a"], "--tp must be comma-separated integers, got 'a'"),
        (["--sharding", "zero9"], "unknown sharding 'zero9'"),
        (["--pp", "5"], "tp·pp·cp must divide the device count 32"),
        (["--ep", "3"], "no layout of 32 GPUs passes the divisibility rules"),
        (["--pp", "1", "--vpp", "2"], "vpp > 1 needs pp > 1"),
        (["--devices", "12"], "must be a multiple of 8 GPUs per node"),
        (["--set", "data.bogus=1"], "unknown field"),
        (["--tp", "8", "--max-tp", "4"], "--tp 8 exceeds --max-tp 4"),
        # no layout searched has a pipeline for the flag to split (it was accepted unread)
        (["--pp", "1", "--balanced-pipeline"], "--balanced-pipeline splits a pipeline, and "
                                               "pp is pinned to 1"),
    ],
)
def test_bad_input_is_one_line(q4_job, args, fragment):
    result = runner.invoke(app, ["layouts", str(q4_job), *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_missing_device_count_is_one_line(q4_job):
    document = {**Q4_JOB, "hardware": {"node_type": "p6-b200.48xlarge"}}
    q4_job.write_text(yaml.safe_dump(document))
    result = runner.invoke(app, ["layouts", str(q4_job)])
    assert result.exit_code == 2
    assert "give --devices, search.devices or hardware.nodes" in result.output


def test_human_infeasible_table_shows_rules_without_value_slots():
    result = runner.invoke(app, ["layouts", str(EXAMPLES / "appendix_e.yaml"), "--pp", "16",
                                 "--ep", "8", "--tp", "1", "--top", "3", "--show-infeasible"])
    assert result.exit_code == 0, result.output
    assert "pp·vpp must divide layers=48" in result.output
    assert "{pp}" not in result.output and "{vpp}" not in result.output


def test_balanced_pipeline_rows_carry_their_layout():
    from mosaic.perf.pipeline_layout import balanced_layout, parse_pipeline_layout

    result = runner.invoke(app, ["layouts", str(EXAMPLES / "appendix_e.yaml"), "--devices",
                                 "512", "--top", "5", "--balanced-pipeline", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    for row in rows:
        if row["pp"] > 1:  # the layout each pipelined row was predicted with, as Megatron's
            assert row["pipeline_layout"] == balanced_layout(48, 0, row["pp"], row["vpp"])
            parse_pipeline_layout(row["pipeline_layout"], row["pp"], row["vpp"], 48, 0)
    refused = runner.invoke(app, ["layouts", str(EXAMPLES / "nemotron_3_nano_b200.yaml"),
                                  "--balanced-pipeline"])
    assert refused.exit_code == 2 and "hybrid" in refused.output


@pytest.mark.parametrize(("override", "words"), [
    ("parallelism.ep=16", "pin it with --ep 16"),
    ("batch.micro_seqs=2", "pin it with --mbs 2"),
    ("performance.checkpointing=full", "pin it with --checkpointing full"),
    ("parallelism.dp=4", "it follows from the GPUs and the other degrees"),
])
def test_a_set_of_a_searched_field_is_refused_with_the_option_that_pins_it(override, words):
    """`layouts --set parallelism.ep=16` ranked every ep as if nothing were set (a trial)."""
    result = runner.invoke(app, ["layouts", str(EXAMPLES / "appendix_e.yaml"), "--set",
                                 override])
    assert result.exit_code == 2
    assert words in " ".join(result.output.split())


def test_a_run_record_is_searched_under_the_planning_headroom():
    """`validate` reads a record against its device (did it fit?); `layouts` plans the next
    run, so a record's search keeps the 90% headroom a job file's does (a trial found a
    record's search admitting layouts validate says layouts and plan leave out)."""
    record = f"{EXAMPLES / 'runs_example.yaml'}#example-torchtitan-llama3.1-8b-h100-8-fsdp"
    result = runner.invoke(app, ["layouts", record, "--top", "400", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["hardware"]["usable_memory_fraction"] == 0.9
    capacity_gib = document["capacity_bytes"] / 2**30
    assert all(row["memory_gib"] <= 0.9 * capacity_gib for row in document["rows"])


def test_a_jobs_search_block_limits_the_layouts_and_an_option_overrides_it(q4_job, tmp_path):
    """A plan's --pp 1 --sharding zero1 travels with its job file (search block): layouts
    ranks only those, says so, and an option of the same name wins (a trial: the exported
    job's layouts ranked zero2 first although the plan allowed zero1 alone)."""
    job = yaml.safe_load(q4_job.read_text())
    job["search"] = {"pp": [1], "sharding": ["zero1"], "micro_batches": [1, 2]}
    limited = tmp_path / "limited.yaml"
    limited.write_text(yaml.safe_dump(job))
    document = run_json(str(limited), "--top", "50")
    assert document["limits_from_job"] == job["search"]
    assert {(r["pp"], r["sharding"], r["micro_batch"] <= 2) for r in document["rows"]} == \
        {(1, "zero1", True)}
    free = run_json(str(q4_job), "--top", "200")
    assert {r["sharding"] for r in free["rows"]} > {"zero1"}  # the limit is what narrows it
    overridden = run_json(str(limited), "--sharding", "zero2", "--top", "50")
    assert {r["sharding"] for r in overridden["rows"]} == {"zero2"}
    assert "sharding" not in overridden["limits_from_job"]
    job["search"]["sharding"] = ["zero9"]
    limited.write_text(yaml.safe_dump(job))
    result = runner.invoke(app, ["layouts", str(limited)])
    assert result.exit_code == 2 and "search" in result.output and "zero9" in result.output


def test_an_option_for_tp_sets_aside_the_jobs_tp_cap_and_pins(q4_job, tmp_path):
    """A job's search max_tp 2 with --tp 4 was refused as '--tp 4 exceeds --max-tp 2', an
    option the user never gave (a review)."""
    job = yaml.safe_load(q4_job.read_text())
    job["search"] = {"max_tp": 2, "pp": [1]}
    capped = tmp_path / "capped.yaml"
    capped.write_text(yaml.safe_dump(job))
    pinned = run_json(str(capped), "--tp", "4", "--top", "20")
    assert {r["tp"] for r in pinned["rows"]} == {4}
    assert pinned["limits_from_job"] == {"pp": [1]}


def test_memory_fraction_option_the_over_headroom_line_names(tmp_path):
    """The over-headroom count names --memory-fraction; layouts takes it (a trial got 'No
    such option'), for a run record as for a job file: the layouts under the device's memory
    but over the 90% headroom are admitted at 1, and a value outside (0, 1] is refused."""
    record = f"{EXAMPLES / 'runs_example.yaml'}#example-torchtitan-llama3.1-8b-h100-8-fsdp"
    result = runner.invoke(app, ["layouts", record, "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "--memory-fraction" in result.output
    headroom = run_json(record, "--top", "1")
    whole = run_json(record, "--top", "1", "--memory-fraction", "1")
    assert whole["hardware"]["usable_memory_fraction"] == 1.0
    assert headroom["hardware"]["usable_memory_fraction"] == 0.9
    assert whole["n_feasible"] == (headroom["n_feasible"]
                                   + headroom["infeasible"]["over_planning_headroom"])
    job = run_json(str(EXAMPLES / "appendix_e.yaml"), "--top", "1", "--memory-fraction", "0.5")
    assert job["hardware"]["usable_memory_fraction"] == 0.5
    refused = runner.invoke(app, ["layouts", record, "--memory-fraction", "1.5"])
    assert refused.exit_code == 2 and "(0, 1]" in refused.output
