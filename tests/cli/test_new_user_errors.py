"""Errors a new user meets in a job file: each is one line, exit 2, and says what is allowed
(the matching systems for a device's name, the fields of a block, the way to uneven stages,
how the GPU count is derived); `zero3` means fsdp in a job as in `layouts --sharding`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicWarning

runner = CliRunner()
MODEL = {"layers": 4, "d_model": 512, "heads": 8, "kv_heads": 8, "ffn": 2048, "vocab": 32000}


def _job(tmp_path: Path, **blocks: Any) -> str:
    document = {"model": MODEL, "batch": {"global_seqs": 64, "seq_len": 1024},
                "hardware": {"system": "DGX-H100", "nodes": 1}, **blocks}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def _error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_device_name_as_system_lists_the_systems_holding_it(tmp_path):
    message = _error("perf", _job(tmp_path, hardware={"system": "H100", "nodes": 1}))
    assert "unknown system 'H100'" in message
    # the catalog's systems with an H100-SXM-80GB (src/mosaic/hardware/data/systems.yaml)
    assert "systems holding it: HGX-H100-800G, a3-highgpu-8g, DGX-H100, p5.48xlarge" in message


def test_a_misspelt_system_or_device_gets_a_did_you_mean(tmp_path):
    message = _error("perf", _job(tmp_path, hardware={"system": "DGX-H10", "nodes": 1}))
    assert "did you mean 'DGX-H100'" in message
    assert "did you mean 'B200'" in _error("plan", "--gpu", "B20")
    assert "p5.48xlarge is a system holding H100-SXM-80GB" in _error(
        "plan", "--gpu", "p5.48xlarge")


def test_an_unknown_field_lists_the_fields_of_its_block(tmp_path):
    message = _error("perf", _job(tmp_path, hardware={"system": "DGX-H100", "nodes": 1,
                                                      "gpus": 8}))
    # no "did you mean gpu?": gpu names an accelerator, and 8 is a count
    assert "hardware: gpus: unknown field (got 8); allowed: system, gpu, nodes, " \
           "usable_memory_fraction" in message
    message = _error("perf", _job(tmp_path, hardware={"system": "DGX-H100", "nodes": 1,
                                                      "gpus": "H100"}))
    assert "hardware: gpus: unknown field (got 'H100'); did you mean gpu?" in message


def test_layers_not_divisible_by_stages_points_to_uneven_stages(tmp_path):
    model = {**MODEL, "layers": 7}
    job = _job(tmp_path, model=model, parallelism={"pp": 4, "dp": 2})
    message = _error("perf", job)
    assert "pp·vpp=4·1 must divide layers=7 (or set performance.uneven_stages: true)" in message
    # with the option the same layout runs: stages of 2, 2, 2 and 1 blocks
    job = _job(tmp_path, model=model, parallelism={"pp": 4, "dp": 2},
               performance={"uneven_stages": True})
    result = runner.invoke(app, ["perf", job, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plan"]["pp"] == 4


def test_nodes_against_the_layout_says_how_the_count_is_derived(tmp_path):
    message = _error("perf", _job(tmp_path, parallelism={"tp": 2, "dp": 3}))
    assert message == ("error: hardware.nodes=1 gives 8 GPUs (1 x 8 per node) but the layout "
                       "uses tp·pp·cp·dp = 2·1·1·3 = 6; make them equal (an unstated "
                       "parallelism.dp fills the nodes)")


def test_search_devices_against_nodes_names_both(tmp_path):
    """A node count edited under a file that states search.devices (Appendix E's 512) is
    refused naming both fields, not the unstated dp the devices filled (a trial)."""
    job = _job(tmp_path, search={"devices": 16}, parallelism={"tp": 2})
    assert _error("perf", job) == (
        f"error: {job}: search.devices=16 and hardware.nodes=1 (8 GPUs, 8 per node) "
        "disagree; state one of them, or make them equal")
    # layouts searches the layout (its dp is a placeholder): the same two fields named
    assert _error("layouts", job) == (
        "error: hardware.nodes=1 gives 8 GPUs (1 x 8 per node) but search.devices is 16; "
        "state one of them, or make them equal")
    # part of one host stays allowed: 4 of the node's 8 GPUs
    result = runner.invoke(app, ["perf", _job(tmp_path, search={"devices": 4},
                                              parallelism={"tp": 2}), "--json"])
    assert result.exit_code == 0, result.output


def test_zero3_is_fsdp_in_a_job_as_in_layouts(tmp_path):
    def perf(sharding: str) -> dict:
        result = runner.invoke(app, ["perf", _job(tmp_path, parallelism={"sharding": sharding}),
                                     "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    zero3, fsdp = perf("zero3"), perf("fsdp")
    assert zero3["plan"]["sharding"] == "fsdp"
    assert zero3["step_time_s"] == fsdp["step_time_s"]
    assert zero3["memory_gib"] == fsdp["memory_gib"]
    assert "sharding" in _error("perf", _job(tmp_path, parallelism={"sharding": "zero9"}))


@pytest.mark.parametrize("name", ["zero3", "fsdp2", "ddp"])
def test_layouts_and_jobs_take_the_same_sharding_names(name, tmp_path):
    from mosaic.config.blocks import ParallelismBlock
    from mosaic.perf.plan import Sharding

    assert ParallelismBlock(sharding=name).sharding == Sharding.parse(name).name.lower()


def test_hardware_show_suggests_the_closest_names():
    message = _error("hardware", "show", "p5.48xlarg")
    assert "did you mean 'p5.48xlarge'" in message
    assert "'B200'" in _error("hardware", "show", "b20")


def test_the_uneven_stages_hint_names_the_value_that_places_the_layers(tmp_path):
    """61 layers in pp 8 x vpp 4 = 32 chunks: 'true' (remainder last) leaves a chunk without
    blocks, 'unstated' (full first and last stages, Megatron's layout) places them: the hint
    names the value that works, and that value runs."""
    model = {**MODEL, "layers": 61}
    job = _job(tmp_path, model=model, parallelism={"pp": 8, "vpp": 4, "dp": 1})
    message = _error("perf", job)
    assert ("must divide layers=61 (or set performance.uneven_stages: unstated: any split "
            "Megatron's --pipeline-model-parallel-layout places" in message)
    assert "or state the split as parallelism.pipeline_layout)" in message
    job = _job(tmp_path, model=model, parallelism={"pp": 8, "vpp": 4, "dp": 1},
               performance={"uneven_stages": "unstated"})
    result = runner.invoke(app, ["perf", job, "--json"])
    assert result.exit_code == 0, result.output


def test_a_key_given_twice_is_an_error_not_the_last_one(tmp_path):
    """YAML keys are unique (YAML 1.2); PyYAML would keep the second `layers:` silently and
    predict a different model, so a repeated key, in a block or at the top, is refused with
    its line."""
    text = Path(_job(tmp_path)).read_text()
    repeated_field = tmp_path / "twice.yaml"
    repeated_field.write_text(text.replace("  layers: 4\n", "  layers: 4\n  layers: 2\n", 1))
    line = text.splitlines().index("  layers: 4") + 2  # 1-based, the repeated key's line
    message = _error("perf", str(repeated_field))
    assert f"line {line}" in message and "key 'layers' given twice in one mapping" in message
    repeated_block = tmp_path / "block.yaml"
    repeated_block.write_text(text + "model: {layers: 2}\n")
    assert "key 'model' given twice" in _error("perf", str(repeated_block))


def test_an_hsdp_shard_group_without_hybrid_sharding_is_refused(tmp_path):
    """hsdp_shard sizes the shard group of hybrid sharding; with zero1 it would be ignored."""
    message = _error("perf", _job(tmp_path, parallelism={"sharding": "zero1",
                                                         "hsdp_shard": 4}))
    assert "hsdp_shard=4 is the shard group of hybrid sharding" in message


def test_json_plan_rows_paste_back_into_a_job(tmp_path):
    """The plan rows of `layouts --json`, `perf --json` and `explain --json` carry the HSDP
    shard group only under hsdp, so each row's layout is a parallelism block `perf` takes
    (a zero1 row with the group would be refused, as the test above shows)."""
    two_nodes = {"system": "DGX-H100", "nodes": 2}
    job = _job(tmp_path, hardware=two_nodes)
    out = runner.invoke(app, ["layouts", job, "--json", "--top", "400"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["rows"]
    assert {row["sharding"] for row in rows} >= {"hsdp", "zero1"}
    for row in rows:
        assert ("hsdp_shard" in row) == (row["sharding"] == "hsdp")
    for row in (rows[0], next(r for r in rows if r["sharding"] == "hsdp")):
        block = {key: row[key] for key in ("tp", "pp", "cp", "dp", "ep", "sharding",
                                           "hsdp_shard") if key in row}
        pasted = runner.invoke(app, ["perf", _job(tmp_path, parallelism=block, hardware=two_nodes,
                                                  batch={"global_seqs": 64, "seq_len": 1024,
                                                         "micro_seqs": row["micro_batch"]}),
                                     "--set", f"performance.checkpointing={row['checkpointing']}",
                                     "--json"])
        assert pasted.exit_code == 0, pasted.output
        assert json.loads(pasted.stdout)["step_time_s"] == pytest.approx(row["step_time_s"])
    zero1 = _job(tmp_path, hardware=two_nodes, parallelism={"sharding": "zero1"})
    for command in ("perf", "explain"):
        document = json.loads(runner.invoke(app, [command, zero1, "--json"]).stdout)
        plan = document["plan"] if command == "perf" else document["current"]["plan"]
        assert plan["sharding"] == "zero1" and "hsdp_shard" not in plan


def test_validate_given_a_job_file_points_to_perf(tmp_path):
    message = _error("validate", _job(tmp_path))
    assert "a job file (model:, hardware:), not run records (runs:)" in message
    assert "mosaic perf" in message


def test_a_key_that_overrides_a_merged_one_is_not_a_repeat(tmp_path):
    """`<<: *base` then an override of one of its keys is YAML's merge, not a repeated key;
    an anchored mapping reused after its merge (flattened in place) reads the same way,
    whole or streamed record by record."""
    from mosaic.config.run_records import RunRecordReader
    from mosaic.schema_validation import parse_yaml

    text = "base: &b {a: 1, b: 2}\nx: &m {<<: *b, b: 3}\ny: *m\n"
    assert parse_yaml(text, "t") == {"base": {"a": 1, "b": 2}, "x": {"a": 1, "b": 3},
                                     "y": {"a": 1, "b": 3}}
    example = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"
    text = example.read_text()
    first = text[text.index("  - id: "):text.index("\n  - id: ", text.index("  - id: ") + 1)]
    lines = first.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("    model:"))
    end = next(i for i in range(start + 1, len(lines))
               if lines[i].startswith("    ") and not lines[i].startswith("      "))
    model = lines[start + 1:end]
    records = [["    model: &base", *model], ["    model: &m", "      <<: *base",
                                                 "      name: Renamed"], ["    model: *m"]]
    body = ["\n".join(lines[:start] + block + lines[end:]).replace(
        lines[0], f"  - id: r{number}", 1) for number, block in enumerate(records)]
    path = tmp_path / "runs.yaml"
    path.write_text(text[:text.index("runs:")] + "runs:\n" + "\n".join(body) + "\n")
    name = yaml.safe_load(text)["runs"][0]["model"]["name"]
    for stream in (True, False):
        names = [r.model_name for r in RunRecordReader(path, stream=stream)]
        assert names == [name, "Renamed", "Renamed"], stream


def test_an_html_path_that_is_a_directory_is_named_as_given(tmp_path):
    """The message names the option and the path the user gave, not the temporary file
    behind it, and comes before the prediction (the --html check runs first)."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    message = _error("perf", str(examples / "appendix_e.yaml"), "--html", str(tmp_path))
    assert message == f"error: --html {tmp_path}: is a directory; give a file name"


MOE_MODEL = {**MODEL, "moe": {"experts": 16, "top_k": 2, "expert_ffn": 767}}


def test_empty_names_are_errors_not_defaults(tmp_path):
    """An empty GPU, node type, stack or calibration name is refused: it used to mean B200,
    megatron-core or the current directory."""
    assert "hardware.gpu is empty" in _error(
        "perf", _job(tmp_path, hardware={"gpu": "", "nodes": 1}))
    assert "--gpu is empty" in _error("plan", "--gpu", "", "--nodes", "2")
    assert "stack '': unknown; known stacks:" in _error("plan", "--stack", "", "--nodes", "2")
    assert "calibration: the name is empty" in _error("perf", _job(tmp_path),
                                                       "--calibration", "")
    empty = tmp_path / "catalog.yaml"
    empty.write_text("")
    assert "catalog.yaml: file is empty" in _error("--catalog", str(empty), "perf",
                                                    _job(tmp_path))
    assert "--top: got 0" in _error("plan", "--top", "0", "--nodes", "2")


def test_context_parallelism_needs_two_chunks_per_rank(tmp_path):
    """Megatron-LM cuts each sequence into 2·cp chunks (arguments.py: 'seq-length should be
    a multiple of 2 * context-parallel-size'): cp 2 takes 1024 tokens, not 1026."""
    job = _job(tmp_path, parallelism={"cp": 2, "dp": 4},
               batch={"global_seqs": 64, "seq_len": 1026})
    assert "2·cp=2·2 must divide seq_len=1026 (cp > 1)" in _error("perf", job)
    job = _job(tmp_path, parallelism={"cp": 2, "dp": 4},
               batch={"global_seqs": 64, "seq_len": 1024})
    assert runner.invoke(app, ["perf", job]).exit_code == 0


def test_an_all_moe_model_is_not_checked_against_its_placeholder_ffn(tmp_path):
    """Every block MoE and no ffn stated: the placeholder (expert_ffn 767) is used by no
    block, and with etp 1 the experts are not split over tp, so tp 2 runs."""
    job = _job(tmp_path, model=MOE_MODEL, parallelism={"tp": 2, "ep": 4, "dp": 4})
    result = runner.invoke(app, ["perf", job, "--json"])
    assert result.exit_code == 0, result.output
    # the experts' own rule still holds: etp 2 must divide 767
    job = _job(tmp_path, model=MOE_MODEL, parallelism={"tp": 2, "ep": 4, "etp": 2, "dp": 4})
    assert "etp=2 must divide expert_ffn=767" in _error("perf", job)


def test_a_stated_imbalance_above_ep_says_it_is_capped(tmp_path):
    """One EP rank receives at most every routed copy (ep times the even share): a stated
    routing_imbalance above ep predicts as ep, and the job says so."""
    def perf(imbalance: float) -> dict:
        job = _job(tmp_path, model={**MOE_MODEL, "moe": {**MOE_MODEL["moe"],
                                                         "expert_ffn": 768}},
                   parallelism={"ep": 4, "dp": 8},
                   performance={"routing_imbalance": imbalance})
        result = runner.invoke(app, ["perf", job, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    capped, at_ep = perf(6.0), perf(4.0)
    assert capped["step_time_s"] == at_ep["step_time_s"]
    assert any("routing_imbalance 6 is above ep=4" in line for line in capped["assumptions"])
    assert not any("is above ep" in line for line in at_ep["assumptions"])


def test_the_shared_experts_width_must_split_over_tp(tmp_path):
    """Megatron-Core runs the shared experts as one MLP of their summed width, split over
    tp like any column-parallel linear: 2 x 767 = 1534 splits over tp 2, not over tp 4."""
    model = {**MODEL, "moe": {**MOE_MODEL["moe"], "shared_experts": 2,
                              "shared_expert_ffn": 767}}
    job = _job(tmp_path, model=model, parallelism={"tp": 2, "ep": 4, "dp": 4})
    assert runner.invoke(app, ["perf", job]).exit_code == 0
    job = _job(tmp_path, model=model, parallelism={"tp": 4, "ep": 2, "dp": 2})
    assert "tp=4 must divide the shared experts' width=1534" in _error("perf", job)


def test_a_batch_given_in_tokens_is_questioned(tmp_path):
    """global_seqs 2,097,152 (a 2M-token batch typed as sequences) predicted a 35,201 s step
    without a word (a trial): a step of more than 16x DeepSeek-V3's 15,360 x 4,096 tokens
    gets a note; a common batch does not."""
    job = _job(tmp_path, batch={"global_seqs": 2_097_152, "seq_len": 1024})
    with pytest.warns(MosaicWarning, match="tokens rather than sequences"):  # a warning line too
        doc = json.loads(runner.invoke(app, ["perf", job, "--json"]).stdout)
    # 2,097,152 x 1,024 = 2.15e9 tokens, 34x 62.9 M
    assert any("2.15e+09 tokens a step" in a and "34x" in a for a in doc["assumptions"])
    normal = json.loads(runner.invoke(app, ["perf", _job(tmp_path), "--json"]).stdout)
    assert not any("tokens rather than sequences" in a for a in normal["assumptions"])


@pytest.mark.parametrize(("text", "value"), [
    ("034", 34),  # YAML 1.1 (PyYAML): octal 28, and an export wrote --num-layers 28
    ("34:08", "34:08"),  # YAML 1.1: base 60, 2048
    ("yes", "yes"),  # YAML 1.1: True
    ("1e12", 1e12),  # YAML 1.1: the string '1e12'
    ("26.04", 26.04),
    ("true", True),
    ("1_000_000", 1_000_000),  # thousands separated, as Python writes them
    ("3_2", "3_2"),  # not 32: a typo (a studio form read it as 32 nodes)
    ("10_00.5", "10_00.5"),
])
def test_plain_scalars_read_as_yaml_1_2(text, value):
    """A trial's 'layers: 034' trained 28 layers and 'seq_len: 34:08' 2048 tokens without a
    word, while 'training.tokens: 1e12' was refused: mosaic reads YAML 1.2's core schema."""
    from mosaic.schema_validation import parse_yaml

    assert parse_yaml(f"a: {text}", "test") == {"a": value}


def test_a_number_in_exponent_form_and_a_leading_zero_mean_what_they_say(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: {layers: 010, d_model: 512, heads: 8, kv_heads: 8, ffn: 2048, "
                   "vocab: 32000}\nbatch: {global_seqs: 64, seq_len: 1024}\n"
                   "hardware: {system: DGX-H100, nodes: 1}\ntraining: {tokens: 1e12}\n")
    result = runner.invoke(app, ["export", str(job), "--to", "megatron"])
    assert result.exit_code == 0, result.output
    assert "--num-layers 10\n" in result.stdout  # not octal 8
    assert "--train-iters 15258790\n" in result.stdout  # ceil(1e12 / (64 x 1024))


@pytest.mark.parametrize("text", ["a: 12_", "a: 1__0", "a: !!int 0x10"])
def test_an_unreadable_number_is_one_line(text):
    """'12_' matched the integer rule but not int() and ended in an internal error (review)."""
    from mosaic.errors import MosaicInputError
    from mosaic.schema_validation import parse_yaml

    try:
        value = parse_yaml(text, "test")
    except MosaicInputError:
        return
    assert isinstance(value["a"], str)


@pytest.mark.parametrize("command", [["perf"], ["export", "--to", "megatron"]])
def test_a_huggingface_config_given_as_a_job_points_to_model(command):
    """It listed 30 'unknown blocks' with "did you mean 'model'?"."""
    config = Path(__file__).resolve().parents[2] / "examples" / "hf" / "qwen3-30b-a3b.json"
    result = runner.invoke(app, [command[0], str(config), *command[1:]])
    assert result.exit_code == 2
    assert "a HuggingFace config.json (model_type 'qwen3_moe'), not a job; give it with " \
           "--model" in " ".join(result.output.split())


def test_global_flags_typed_after_the_subcommand_are_read_as_global():
    """`mosaic plan ... --quiet` said 'No such option: --quiet (Possible options: --q)'
    (a trial): the root command's flags move before the subcommand."""
    from mosaic.cli.main import hoist_global_flags

    assert hoist_global_flags(["plan", "--q", "12", "--quiet"]) == [
        "--quiet", "plan", "--q", "12"]
    assert hoist_global_flags(["plan", "-q", "--days", "5"]) == ["-q", "plan", "--days", "5"]
    assert hoist_global_flags(["arch", "--q", "8"]) == ["arch", "--q", "8"]


def test_arch_reads_a_job_files_sequence_length():
    """Appendix E's job states seqlen 8192: its attention FLOPs are at T=8192 unless
    --seq-len says otherwise (a trial: T=2048)."""
    job = str(Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml")
    result = runner.invoke(app, ["arch", "--config", job, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["seq_len"] == 8192
    result = runner.invoke(app, ["arch", "--config", job, "--seq-len", "4096", "--json"])
    assert json.loads(result.stdout)["seq_len"] == 4096


def test_every_problem_of_a_block_is_named_not_counted(tmp_path):
    """A misspelt field leaves its real one missing; the line named the typo and then
    '... and 1 more problem' without saying which (a trial): now the missing one too."""
    job = _job(tmp_path, batch={"global_batch": 64, "seq_len": 1024})
    line = _error("perf", job)
    assert "global_batch: unknown field" in line and "did you mean global_seqs?" in line
    assert "also global_seqs: missing" in line and "more problem" not in line


def test_a_precision_in_capitals_is_read_as_the_catalog_reads_it(tmp_path):
    job = _job(tmp_path, performance={"precision": "BF16"})
    result = runner.invoke(app, ["perf", job, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["step_time_s"] > 0


def test_a_run_file_or_a_catalog_given_as_a_calibration_is_named(tmp_path):
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump({"schema_version": 1, "runs": []}))
    catalog = tmp_path / "hw.yaml"
    catalog.write_text(yaml.safe_dump({"systems": {}}))
    job = _job(tmp_path)
    assert "a run-record file (runs:), not a calibration" in _error(
        "perf", job, "--calibration", str(runs))
    assert "a hardware catalog (systems:), not a calibration; give it with --catalog" in (
        _error("perf", job, "--calibration", str(catalog)))


def test_a_misspelt_run_record_field_gets_a_suggestion(tmp_path):
    record = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples"
                             / "runs_example.yaml").read_text())
    entry = record["runs"][0]
    entry["paralelism"] = entry.pop("parallelism")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**record, "runs": [entry]}))
    assert "paralelism (did you mean parallelism?)" in _error("validate", str(path))


def test_validate_strict_fails_on_a_skipped_record(tmp_path):
    """validate scores the usable records and lists the skipped ones (exit 0); --strict
    refuses the file instead, naming the first skipped record (a trial: 6 of 11 skipped,
    exit 0, for a CI over a team's run files)."""
    record = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples"
                             / "runs_example.yaml").read_text())
    broken = dict(record["runs"][0], id="broken")
    broken["paralelism"] = broken.pop("parallelism")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**record, "runs": [*record["runs"], broken]}))
    assert runner.invoke(app, ["validate", str(path), "--json"]).exit_code == 0
    line = _error("validate", str(path), "--strict")
    assert "--strict: 1 record(s) skipped, the first broken:" in line


def test_validate_strict_fails_on_a_mis_entered_run(tmp_path):
    """A trial's per-GPU tokens/s given as the cluster total (1195% MFU) passed --strict,
    which failed only on skipped records; it is scored as given without --strict."""
    record = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples"
                             / "runs_example.yaml").read_text())
    slip = dict(record["runs"][0], id="slip")
    gpus = slip["num_gpus"]
    slip["measured"] = {k: v for k, v in slip["measured"].items() if k != "step_time_s"}
    slip["measured"]["tokens_per_s_per_gpu"] *= gpus  # the cluster total
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**record, "runs": [*record["runs"], slip]}))
    assert runner.invoke(app, ["validate", str(path), "--json"]).exit_code == 0
    line = _error("validate", str(path), "--strict")
    assert "--strict: 1 run(s) look mis-entered, the first slip:" in line


def test_other_schemas_words_for_a_field_are_suggested(tmp_path):
    """A run record's recompute is a job's checkpointing, and 'pipline' is pp (a trial
    got only the list of allowed fields)."""
    job = _job(tmp_path)
    assert ("performance: recompute: unknown field (got 'full'); did you mean "
            "checkpointing?") in _error("perf", job, "--set", "performance.recompute=full")
    assert "parallelism: pipline: unknown field (got 2); did you mean pp?" in _error(
        "perf", job, "--set", "parallelism.pipline=2")


def test_a_misspelt_run_id_gets_the_closest_ids():
    runs = str(Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml")
    message = _error("perf", runs + "#example-torchtitan-llama3.1-8b-h100-8-fsd")
    assert "did you mean example-torchtitan-llama3.1-8b-h100-8-fsdp or " in message
    assert "; ids: example-" in _error("perf", runs + "#nothing-like-it")


def test_tensor_parallelism_beyond_the_nvlink_domain_is_a_warning(tmp_path):
    """tp 16 on 8-GPU DGX-H100 nodes is costed over the network; a trial read only an
    envelope note. Now a warning line says so."""
    job = _job(tmp_path, model={**MODEL, "heads": 16}, parallelism={"tp": 16},
               hardware={"system": "DGX-H100", "nodes": 2})
    with pytest.warns(MosaicWarning, match="parallelism.tp=16 spans 2 NVLink domains of 8 "
                      "GPUs: every tensor-parallel collective crosses the network"):
        result = runner.invoke(app, ["perf", job])
    assert result.exit_code == 0, result.output


def test_a_whole_number_in_float_notation_is_asked_for_as_an_integer():
    """`--set hardware.nodes=1e9` was "a valid integer (got 1000000000.0)" (a studio trial):
    the number is whole, its notation is the problem."""
    job = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"
    result = CliRunner().invoke(app, ["perf", str(job), "--set", "batch.global_seqs=2e3"])
    assert result.exit_code == 2
    assert "a number in float notation: write the integer 2000" in result.output
    # 1e30's integer is a float's rounding (1000000000000000019884624838656), never asked for
    huge = CliRunner().invoke(app, ["perf", str(job), "--set", "batch.seq_len=1e30"])
    assert huge.exit_code == 2 and "write the integer" not in huge.output
    assert "batch.seq_len" in huge.output


def test_a_layout_perf_refuses_names_the_file_and_the_set():
    """'invalid parallel layout: ep=3 must divide experts=128' named neither (a fuzz
    trial)."""
    job = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"
    for command in ("perf", "explain"):
        result = CliRunner().invoke(app, [command, str(job), "--set", "parallelism.ep=3"])
        assert result.exit_code == 2
        assert (f"{job}: invalid parallel layout: ep=3 must divide experts=128 (from --set "
                "parallelism.ep=3)") in " ".join(result.output.split())


def test_a_second_reference_after_a_file_says_one_is_read():
    """`RUNS.yaml#A#B` reads as the file 'RUNS.yaml#A', which is not there (a fuzz trial's
    'plan.json#1#2' was told only 'YAML file not found'): the error says a name takes one
    reference and that the file before it exists; a missing file is told as before."""
    runs = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"
    twice = runner.invoke(app, ["perf", f"{runs}#a#b"])
    assert twice.exit_code == 2
    assert f"a name takes one #ID or #N reference: {runs} exists" in twice.output
    missing = runner.invoke(app, ["perf", str(runs.with_name("absent.yaml"))])
    assert missing.exit_code == 2 and "reference" not in missing.output


@pytest.mark.parametrize("blocks", [{"search": {"devices": 3}}, {"parallelism": {"dp": 3}}])
def test_gpus_that_fill_no_cluster_name_where_the_count_came_from(tmp_path, blocks):
    """Without hardware.nodes the job's GPUs are search.devices, else the layout's
    tp·pp·cp·dp (docs/schema.md): 3 of an 8-GPU host is neither whole hosts nor a divisor of
    one (1, 2, 4). The error named neither field, only "n_devices" (a review)."""
    document = {"model": MODEL, "batch": {"global_seqs": 60, "seq_len": 1024},
                "hardware": {"system": "DGX-H100"}, **blocks}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    message = _error("perf", str(path))
    assert message.startswith("error: 3 GPUs (search.devices or --devices, else the layout's "
                              "tp·pp·cp·dp) and no hardware.nodes:")
    assert "multiple of 8 GPUs per node (whole hosts) or, on part of one host, one of 1, 2, 4" \
        in message
