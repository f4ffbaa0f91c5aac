"""`mosaic arch` and `mosaic perf` from the command line: JSON keys, overrides, errors."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.perf.calibration import built_in_calibration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def run_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_arch_json_for_table4_geometry():
    doc = run_json("arch", "--q", "12", "--experts", "96", "--top-k", "2", "--split-factor", "4")
    for key in ("n_total", "n_active", "n_total_with_embedding", "n_active_with_embedding",
                "sparsity", "split_factor", "flops_per_token"):
        assert key in doc
    assert round(doc["n_active"] / 1e9, 1) == 14.5
    assert round(doc["sparsity"], 3) == 0.956
    assert doc["flops_per_token"] == 6 * doc["n_active"]


def test_arch_from_yaml_matches_flags():
    from_file = run_json("arch", "--config", str(EXAMPLES / "q12_moe.yaml"))
    from_flags = run_json("arch", "--q", "12", "--experts", "96", "--top-k", "2",
                          "--split-factor", "4")
    assert from_file["n_total"] == from_flags["n_total"]
    assert from_file["n_active"] == from_flags["n_active"]


def test_arch_expert_ffn_equals_split_factor():
    by_width = run_json("arch", "--q", "8", "--experts", "64", "--top-k", "2",
                        "--split-factor", "2")
    explicit = run_json("arch", "--layers", "32", "--d-model", "4096", "--heads", "32",
                        "--kv-heads", "8", "--ffn", "10240", "--experts", "64", "--top-k", "2",
                        "--expert-ffn", "5120", "--shared-experts", "1", "--dense-layers", "1")
    assert by_width["n_total"] == explicit["n_total"]


TABLE4 = ["arch", "--q", "12", "--experts", "96", "--top-k", "2", "--split-factor", "4"]


@pytest.mark.parametrize(("flags", "n_total", "with_embedding"), [
    # hand counts (d=6144, d_ff=15360, d_expert=3840, V=50257, 47 MoE blocks of 96+1
    # experts): tying removes V·d = 308,779,008; without GLU every FFN is 2·d·w instead of
    # 3·d·w, a third of the 322,964,029,440 FFN weights; MoE on every second block keeps 24
    ([], 327_220_801_536, 327_838_359_552),
    (["--tied-embeddings"], 327_220_801_536, 327_529_580_544),
    (["--no-glu"], 219_566_125_056, 220_183_683_072),
    (["--moe-every", "2"], 175_811_211_264, 176_428_769_280),
])
def test_ladder_seed_takes_the_ffn_embedding_and_placement_flags(flags, n_total,
                                                                 with_embedding):
    summary = run_json(*TABLE4, *flags)
    assert (summary["n_total"], summary["n_total_with_embedding"]) == (n_total,
                                                                        with_embedding)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["arch", "--q", "4", "--experts", "4", "--top-k", "8"], "top_k (8) must not exceed"),
        (["arch", "--layers", "4", "--d-model", "100", "--heads", "3", "--ffn", "8"],
         "must divide --d-model"),
        (["arch", "--q", "4", "--experts", "4", "--top-k", "1", "--split-factor", "7"],
         "split factor G=7"),
        (["arch", "--layers", "-3", "--d-model", "64", "--heads", "4", "--ffn", "8"],
         "--layers: got -3; allowed: an integer in 1..16384"),
        (["arch"], "give --q"),
        # 0 is refused, not read as "unset" (it gave G=1, the GPT-2 vocabulary, MHA)
        (["arch", "--q", "4", "--experts", "4", "--top-k", "1", "--split-factor", "0"],
         "--split-factor: got 0"),
        (["arch", "--q", "4", "--vocab", "0"], "--vocab: got 0"),
        (["arch", "--layers", "2", "--d-model", "64", "--heads", "4", "--ffn", "8",
          "--kv-heads", "0"], "--kv-heads: got 0"),
        # MoE-shaping flags on a dense model were dropped without a word
        (["arch", "--q", "4", "--split-factor", "4"],
         "--split-factor shape MoE blocks, and without --experts"),
        (["arch", "--layers", "2", "--d-model", "64", "--heads", "4", "--ffn", "8",
          "--dense-layers", "1", "--shared-experts", "2"], "--shared-experts, --dense-layers"),
    ],
)
def test_arch_bad_input_is_one_line(args, fragment):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert fragment in result.output
    assert "Traceback" not in result.output


def test_arch_malformed_and_empty_files(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [1, 2\n")
    for path, fragment in ((empty, "file is empty"), (broken, "malformed YAML")):
        result = runner.invoke(app, ["arch", "--config", str(path)])
        assert result.exit_code == 2
        assert fragment in result.output


def test_perf_json_keys_and_consistency():
    doc = run_json("perf", str(EXAMPLES / "appendix_e.yaml"))
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_gib",
                "feasible", "breakdown_s", "memory_breakdown_bytes"):
        assert key in doc
    assert sum(doc["breakdown_s"].values()) == pytest.approx(doc["step_time_s"], rel=1e-9)
    assert "ep_all_to_all" in doc["breakdown_s"] and "dp_reduce_scatter" in doc["breakdown_s"]
    assert doc["tokens_per_s"] == pytest.approx(8192 * 8192 / doc["step_time_s"])


def test_perf_set_overrides_fields():
    base = run_json("perf", str(EXAMPLES / "appendix_e.yaml"))
    changed = run_json("perf", str(EXAMPLES / "appendix_e.yaml"),
                       "--set", "data.global_batch=4096", "--set", "parallelism.ep=16")
    assert changed["plan"]["ep"] == 16
    assert changed["step_time_s"] < base["step_time_s"]


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("parallelism.ep=7", "ep=7 must divide experts=128"),
        ("parallelism.pp=5", "not a multiple of tp·pp·cp=5"),
        ("parallelism.pp=32", "pp·vpp=32·1 must divide layers=48"),
        ("data.bogus=1", "unknown field"),
        ("nonsense", "expected block.field=value"),
        ("hardware.system=TPU-v9", "TPU-v9"),
    ],
)
def test_perf_bad_input_is_one_line(override, fragment):
    result = runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"), "--set", override])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_perf_hierarchical_dispatcher_cuts_cross_node_all_to_all():
    across_nodes = ("--set", "parallelism.ep=32")  # 4 p6-b200 nodes per EP group
    alltoall = run_json("perf", str(EXAMPLES / "appendix_e.yaml"), *across_nodes)
    deepep = run_json("perf", str(EXAMPLES / "appendix_e.yaml"), *across_nodes,
                      "--set", "parallelism.dispatcher=deepep")
    assert deepep["breakdown_s"]["ep_all_to_all"] < alltoall["breakdown_s"]["ep_all_to_all"]


def test_a_job_takes_a_scale_out_what_if_by_its_system_name():
    """`mosaic plan --scale-out-gbps` names its node type 'DGX-H100 (scale-out 200 Gb/s per
    GPU)'; a job's hardware.system of that name predicts on it, as an exported plan does:
    DeepSeek-V3 on 128 DGX-H100 (ep 64 across 8 hosts) is slower at half the rate, and its
    cross-node all-to-all takes longer."""
    job = str(EXAMPLES / "deepseek_v3_h100.yaml")
    full = run_json("perf", job)
    half = run_json("perf", job, "--set", "hardware.system=DGX-H100 (scale-out 200 Gb/s per GPU)")
    assert half["hardware"]["system"] == "DGX-H100 (scale-out 200 Gb/s per GPU)"
    assert half["tokens_per_s"] < full["tokens_per_s"]
    assert half["breakdown_s"]["ep_all_to_all"] > full["breakdown_s"]["ep_all_to_all"]


def test_perf_accepts_uneven_stages_when_asked():
    # 48 layers over pp = 5: rejected as even stages, accepted as chunks of 10, 10, 10, 10, 8,
    # with the first stage carrying ceil(48/5) = 10 blocks.
    layout = ["--set", "search.devices=320", "--set", "parallelism.pp=5",
              "--set", "parallelism.dp=64"]
    even = runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"), *layout])
    assert even.exit_code == 2 and "pp·vpp=5·1 must divide layers=48" in even.output
    doc = run_json("perf", str(EXAMPLES / "appendix_e.yaml"), *layout,
                   "--set", "parallelism.uneven_stages=true")
    assert doc["plan"]["pp"] == 5 and doc["step_time_s"] > 0


def test_perf_takes_the_device_count_from_hardware_nodes(tmp_path):
    job = tmp_path / "dense.yaml"
    job.write_text(
        "model: {n_layers: 32, hidden_sz: 4096, inter_sz: 14336, n_q_heads: 32, n_kv_heads: 8,"
        " vocab_sz: 128256}\n"
        "data: {global_batch: 512, seq_len: 8192}\n"
        "hardware: {system: DGX-H100, nodes: 8}\n"
        "parallelism: {tp: 2, sharding: fsdp}\n"
    )
    doc = run_json("perf", str(job))
    assert doc["hardware"]["devices"] == 64
    assert doc["plan"]["dp"] == 32  # 64 GPUs / tp 2


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["arch", "--bogus", "3"], "No such option: --bogus"),
        (["law", "predict", "--tokens", "abc"], "Invalid value for '--tokens'"),
    ],
)
def test_usage_errors_are_one_line_from_the_entry_point(monkeypatch, capsys, argv, fragment):
    from mosaic.cli.main import main

    monkeypatch.setattr("sys.argv", ["mosaic", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and fragment in err


def test_arch_refuses_size_flags_beside_a_model_file():
    out = CliRunner().invoke(app, ["arch", "--model", "examples/hf/qwen3-next-80b-a3b.json",
                                   "--experts", "256", "--top-k", "4"])
    assert out.exit_code == 2 and "fixes the geometry; drop --experts, --top-k" in out.output


def test_mfu_against_the_gemm_lane_stays_below_one_where_bf16_mfu_passes_it(tmp_path):
    """An NVFP4 step on GB300 counts MFU against the bf16 peak (2.5 PFLOP/s, paper Eq. 1),
    which its GEMM lane exceeds 6x (15 PFLOP/s dense NVFP4, hardware catalog): MFU may pass
    100%, mfu_gemm_lane is the same FLOPs against the lane's peak, MFU / 6, and the output
    says so; a bf16 job's two figures are one."""
    job = tmp_path / "fp4.yaml"
    job.write_text(
        "model: {layers: 32, d_model: 16384, heads: 128, kv_heads: 8, head_dim: 128,"
        " ffn: 53248, vocab: 128256}\n"
        "parallelism: {tp: 4, pp: 1, dp: 16, cp: 1}\n"
        "batch: {global_seqs: 512, seq_len: 8192, micro_seqs: 1}\n"
        "performance: {precision: nvfp4, stack: megatron-bridge, checkpointing: full}\n"
        "hardware: {system: GB300-NVL72, nodes: 16}\n")
    doc = run_json("perf", str(job))
    assert doc["mfu"] > 1.0
    assert doc["mfu_gemm_lane"] == pytest.approx(doc["mfu"] / 6.0, rel=1e-12)
    assert "6x that peak" in doc["mfu_peak"]
    bf16 = run_json("perf", str(job), "--set", "performance.precision=bf16")
    assert bf16["mfu_gemm_lane"] == bf16["mfu"]
    assert "lane" not in bf16["mfu_peak"]


def test_the_contract_mfu_bound_covers_every_catalogued_lane():
    """The output contract bounds MFU by MAX_LANE_TO_BF16_PEAK: no device in the catalog may
    have a GEMM lane faster than that multiple of its bf16 peak (GB300's NVFP4 is 6x)."""
    from mosaic.cli.contract import MAX_LANE_TO_BF16_PEAK
    from mosaic.hardware import get_device, list_devices

    ratios = [max(peak / get_device(name).peak_flops_per_s["bf16"]
                  for peak in get_device(name).peak_flops_per_s.values())
              for name in list_devices() if "bf16" in get_device(name).peak_flops_per_s]
    assert max(ratios) == pytest.approx(6.0)
    assert max(ratios) <= MAX_LANE_TO_BF16_PEAK


def test_a_job_on_part_of_one_host_is_predicted(tmp_path):
    """A single-GPU baseline was refused ('n_devices must be a positive multiple of 8'; a
    trial): a job on fewer GPUs than its host holds runs on part of that host. Hand check of
    the MFU: 6 · N_act · tokens/s per GPU over the H100's 989.4 TFLOP/s bf16 peak."""
    import yaml

    from mosaic.arch import count_parameters
    from mosaic.config.job_schema import load_job

    job = tmp_path / "one_gpu.yaml"
    job.write_text(yaml.safe_dump({
        "model": {"layers": 8, "d_model": 1024, "heads": 8, "kv_heads": 8, "head_dim": 128,
                  "ffn": 2560, "vocab": 50257},
        "batch": {"global_seqs": 8, "micro_seqs": 1, "seq_len": 2048},
        "parallelism": {"tp": 1, "pp": 1, "cp": 1, "dp": 1},
        "performance": {"precision": "bf16", "checkpointing": "none"},
        "hardware": {"system": "DGX-H100", "nodes": 1}, "search": {"devices": 1}}))
    result = runner.invoke(app, ["perf", str(job), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["hardware"]["devices"] == 1
    assert doc["hardware"]["description"] == "1 GPU of one DGX-H100 (8)"
    n_active = count_parameters(load_job(job).workload.geometry).n_active
    assert doc["mfu"] == pytest.approx(6 * n_active * doc["tokens_per_s_per_gpu"] / 989.4e12,
                                       rel=1e-3)


def test_a_step_multiplier_below_one_is_named_over_the_breakdown():
    """Under the default profile megatron-core's multiplier (0.95) scales every term, the
    'analytical' ones too, so one term differed between two profiles with no word (a
    trial): the JSON carries the multiplier and the table's title says so."""
    document = json.loads(runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"),
                                              "--json"]).stdout)
    multiplier = document["step_multiplier"]
    assert 0 < multiplier < 1
    assert sum(document["breakdown_s"].values()) == pytest.approx(document["step_time_s"])
    assert document["breakdown_s"]["calibration"] == 0.0
    shown = runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml")],
                          env={"COLUMNS": "300"})
    assert f"every term x{multiplier:.4g}, the calibration's step multiplier" in shown.stdout


def test_a_stack_the_calibration_has_no_runs_of_is_not_said_to_run_faster(tmp_path):
    """hf-transformers has no runs in the default profile, so its step multiplier is the
    profile's 'default' entry: the breakdown's title said "this stack runs faster than the
    analytical model" of it all the same (a trial); it now says the entry is not fitted on
    it, and a fitted stack keeps the old words."""
    assert "hf-transformers" not in built_in_calibration("default").stack_overhead
    job = tmp_path / "qwen3_8b_hf.yaml"
    job.write_text("model: {layers: 36, d_model: 4096, ffn: 12288, heads: 32, kv_heads: 8,\n"
                   "        head_dim: 128, vocab: 151936}\n"
                   "parallelism: {dp: 8, sharding: fsdp}\n"
                   "batch: {global_seqs: 8, seq_len: 4096}\n"
                   "performance: {stack: hf-transformers}\n"
                   "hardware: {system: DGX-H100, nodes: 1}\n")
    document = json.loads(runner.invoke(app, ["perf", str(job), "--json"]).stdout)
    assert document["stack_multiplier_fitted"] is False and document["step_multiplier"] < 1
    shown = " ".join(runner.invoke(app, ["perf", str(job)], env={"COLUMNS": "300"}).stdout
                     .split())  # the title wraps to the table's width
    assert "for stacks none of its runs used: not fitted on hf-transformers" in shown
    assert "this stack runs faster" not in shown
    fitted = runner.invoke(app, ["perf", str(job), "--set", "performance.stack=torchtitan",
                                 "--json"]).stdout
    assert json.loads(fitted)["stack_multiplier_fitted"] is True


def test_perf_says_what_a_record_measured_and_the_routed_load_it_costs():
    """A run record that ran out of memory says so beside the predicted verdict (a trial
    saw no word of it), and an MoE job states the busiest EP rank's load it is costed with:
    the example Qwen3-30B-A3B record is force-balanced (1.0); with its routing dropless, the
    aux-loss router's 1 + 0.72·sqrt(ln 8 / ln 64)/sqrt(128/8) (perf/routing_load.py)."""
    import math

    runs = EXAMPLES / "runs_example.yaml"
    oom = runner.invoke(app, ["perf", f"{runs}#example-constructed-llama3.1-8b-h100-8-ddp-oom"])
    assert oom.exit_code == 0, oom.output
    assert "measured: out of memory" in " ".join(
        line.strip("│ ") for line in oom.output.splitlines())
    document = json.loads(runner.invoke(app, [
        "perf", f"{runs}#example-constructed-llama3.1-8b-h100-8-ddp-oom", "--json"]).stdout)
    assert document["measured_oom"] is True and "routed_load_factor" not in document
    moe = f"{runs}#example-bridge-qwen3-30b-a3b-b200-8-mxfp8"
    balanced = json.loads(runner.invoke(app, ["perf", moe, "--json"]).stdout)
    assert balanced["routing"] == "balanced" and balanced["routed_load_factor"] == 1.0
    assert "measured_oom" not in balanced
    learned = json.loads(runner.invoke(app, ["perf", moe, "--json", "--set",
                                             "routing=dropless"]).stdout)
    assert learned["routed_load_factor"] == pytest.approx(
        1 + 0.72 * math.sqrt(math.log(8) / math.log(64)) / math.sqrt(16))


def test_perf_warns_of_a_records_mis_entered_measurement_as_validate_does(tmp_path):
    """A record whose step time is in milliseconds (the torchtitan 8B run's 2.8435 s as
    2843.5) is named a unit slip by `perf RUNS.yaml#ID` in `validate`'s words (a trial saw
    validate flag it and perf show it without a word); the record as published is not."""
    import yaml

    runs = EXAMPLES / "runs_example.yaml"
    document = yaml.safe_load(runs.read_text())
    run = dict(document["runs"][0], id="in-ms")
    run["measured"] = {"step_time_s": 1000 * run["measured"]["step_time_s"]}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**document, "runs": [document["runs"][0], run]}))
    validated = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    [flagged] = validated["aggregate"]["implausible_measurements"]
    slipped = runner.invoke(app, ["perf", f"{path}#in-ms"])
    assert slipped.exit_code == 0, slipped.output
    assert f"warning: {flagged['reason']}" in slipped.stderr
    assert json.loads(runner.invoke(app, ["perf", f"{path}#in-ms", "--json"]).stdout)[
        "measurement_warning"] == flagged["reason"]
    page = tmp_path / "perf.html"  # the page says what the terminal says
    assert runner.invoke(app, ["perf", f"{path}#in-ms", "--html", str(page)]).exit_code == 0
    assert "unit slip" in page.read_text()
    good = f"{path}#{document['runs'][0]['id']}"
    assert "measurement_warning" not in json.loads(
        runner.invoke(app, ["perf", good, "--json"]).stdout)


def test_perf_gives_a_records_measured_memory_as_validate_compares_it(tmp_path):
    """perf RUNS.yaml#ID shows the record's measured memory beside the model's figure read
    as it measures it, validate's predicted memory of the record, for each memory_measure (a
    trial read validate's 48.1 GiB and perf's 50.06 GiB for one 'allocated' record); a
    what-if (--set) compares no memory."""
    import yaml

    runs = EXAMPLES / "runs_example.yaml"
    document = yaml.safe_load(runs.read_text())
    published = document["runs"][0]
    variants = [dict(published, id=measure, measured=dict(
        published["measured"], memory_gib=60.0, memory_measure=measure))
        for measure in ("allocator", "allocated", "device")]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**document, "runs": variants}))
    validated = {run["id"]: run for run in json.loads(
        runner.invoke(app, ["validate", str(path), "--json"]).stdout)["runs"]}
    as_measured = set()
    for measure, run in validated.items():
        shown = json.loads(runner.invoke(app, ["perf", f"{path}#{measure}", "--json"]).stdout)
        assert shown["measured_memory_gib"] == pytest.approx(60.0)
        assert shown["memory_gib_as_measured"] == pytest.approx(run["predicted_memory_gib"])
        as_measured.add(round(shown["memory_gib_as_measured"], 3))
        text = " ".join(line.strip("│ ") for line in runner.invoke(
            app, ["perf", f"{path}#{measure}"]).output.splitlines())
        assert f"predicted {run['memory_error']:+.1%} as `validate` reports it" in text
    assert len(as_measured) == 3  # the three measures read the model three ways
    what_if = json.loads(runner.invoke(app, ["perf", f"{path}#device", "--json", "--set",
                                             "batch.micro_seqs=1"]).stdout)
    assert "measured_memory_gib" not in what_if


def test_set_on_a_record_rederives_dp_when_tp_pp_or_cp_change():
    """A record's dp was recorded as num_gpus/(tp·pp·cp); `--set parallelism.tp=2` on the
    8-GPU Qwen3 record was refused (tp·pp·cp·dp = 16, not 8; a trial). dp now follows: 8/2 = 4,
    noted; a dp stated in the same --set is kept (and checked as before)."""
    record = f"{EXAMPLES / 'runs_example.yaml'}#example-bridge-qwen3-30b-a3b-b200-8-mxfp8"
    doc = json.loads(runner.invoke(app, ["perf", record, "--set", "parallelism.tp=2",
                                         "--json"]).stdout)
    assert (doc["plan"]["tp"], doc["plan"]["dp"]) == (2, 4)
    assert any("dp re-derived as num_gpus/(tp·pp·cp) = 8/2 = 4" in a for a in doc["assumptions"])
    stated = runner.invoke(app, ["perf", record, "--set", "parallelism.tp=2", "--set",
                                 "parallelism.dp=8"])
    assert stated.exit_code == 2 and "not num_gpus=8" in stated.output


def test_perf_names_the_model_its_counts_and_its_mtp_modules():
    """A trial's imported DeepSeek-V3 config: one MTP module added 0.9 s a step and 11.6 GiB
    a GPU, and no line of perf named the model or the module. DeepSeek-V3 is 671 B parameters
    with embeddings (its model card), 37 B active."""
    result = CliRunner().invoke(app, ["perf", str(EXAMPLES / "deepseek_v3_h100.yaml"),
                                      "--json"])
    model = json.loads(result.stdout)["model"]
    assert model["name"] == "DeepSeek-V3" and model["mtp_modules"] == 1
    assert model["n_total_with_embedding"] == pytest.approx(671e9, rel=1e-3)
    assert model["n_active"] == pytest.approx(37e9, rel=0.04)  # non-embedding, without head
    text = CliRunner().invoke(app, ["perf", str(EXAMPLES / "deepseek_v3_h100.yaml")]).stdout
    assert "DeepSeek-V3: 671.03 B parameters (669.17 B non-embedding" in text
    assert "1 MTP module" in " ".join(text.split())


def test_arch_reads_a_model_file_from_a_pipe_once():
    # a trial: `mosaic arch --config <(cat model.yaml)` said 'file is empty': the job's
    # seq_len was read from the stream first, and the geometry loader found nothing left
    import os

    examples = Path(__file__).resolve().parents[2] / "examples"
    for name in ("q12_moe.yaml", "hf/mixtral-8x7b.json"):
        read_end, write_end = os.pipe()
        os.write(write_end, (examples / name).read_bytes())
        os.close(write_end)
        try:
            result = runner.invoke(app, ["arch", "--config", f"/dev/fd/{read_end}", "--json"])
        finally:
            os.close(read_end)
        assert result.exit_code == 0, (name, result.output)
        assert json.loads(result.stdout)["n_total"] > 0


def test_arch_refuses_a_model_file_over_the_limit_before_parsing_it(tmp_path, monkeypatch):
    # a review: `mosaic arch --config` parsed a 28 MiB YAML for 112 s, looking for the job's
    # seq_len, before the model loader refused it by its size (16 MiB, as a config.json)
    import mosaic.schema_validation as schema_validation
    from mosaic.arch.hf_import import MAX_MODEL_FILE_BYTES

    path = tmp_path / "model.yaml"
    with path.open("w") as handle:
        handle.write("model: {layers: 2}\nbatch: {seq_len: 64}\n")
        handle.truncate(MAX_MODEL_FILE_BYTES + 1)

    def parsed(*_: object) -> None:
        raise AssertionError("the file over the limit was parsed")

    monkeypatch.setattr(schema_validation, "parse_yaml", parsed)
    result = runner.invoke(app, ["arch", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert f"the limit is {MAX_MODEL_FILE_BYTES:,}" in result.stderr
