"""Run-record files: the example and the shared calibration set load; bad records are skipped."""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from mosaic.config.run_records import (
    RunRecordWarning,
    load_run_records,
    reference_system,
    stack_label,
)
from mosaic.errors import MosaicInputError
from mosaic.perf.plan import Checkpointing
from mosaic.perf.workload import Precision
from mosaic.units import GIB

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "runs_example.yaml"
PUBLISHED = REPO_ROOT.parent / "shared" / "calibration" / "published_runs.yaml"


def _example_runs() -> list[dict[str, Any]]:
    return yaml.safe_load(EXAMPLE.read_text())["runs"]


def _load_one(tmp_path: Path, run: dict[str, Any]):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        return load_run_records(path)


def _skip_reason(tmp_path: Path, run: dict[str, Any]) -> str:
    loaded = _load_one(tmp_path, run)
    assert loaded.records == ()
    ((run_id, reason),) = loaded.skipped
    assert run_id == run["id"]
    assert repr(run["id"]) in reason
    return reason


# ------------------------------------------------------------------ example file


def test_example_file_loads_every_record_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_run_records(EXAMPLE)
    assert loaded.skipped == ()
    assert [r.id for r in loaded.records] == [run["id"] for run in _example_runs()]


def test_example_dense_record_maps_to_grand_teton_with_measured_values() -> None:
    dense = load_run_records(EXAMPLE).records[0]
    assert dense.system.name == "Grand-Teton-H100"
    assert dense.n_devices == 8 and dense.cluster.n_nodes == 1
    assert dense.workload.geometry.glu and not dense.workload.geometry.is_moe
    assert dense.workload.stack == "torchtitan"
    assert dense.workload.tokens_per_step == 16 * 8192
    assert dense.plan.row(0)["checkpointing"] == "selective"
    assert dense.plan.row(0)["sharding"] == "fsdp"
    assert dense.measured_tokens_per_s_per_gpu == 5762.0
    assert dense.measured_memory_bytes == pytest.approx(82.4 * GIB)
    assert dense.group_key == "Llama-3.1-8B @ H100-SXM-96GB-500W"
    assert dense.source_key == "example"


def test_example_all_moe_record_fills_ffn_recompute_and_precision_with_notes() -> None:
    moe = load_run_records(EXAMPLE).records[1]
    geometry = moe.workload.geometry
    assert geometry.ffn == geometry.moe.expert_ffn == 768
    assert moe.workload.precision is Precision.FP8 and moe.precision_recipe == "mxfp8"
    # recompute unknown: Megatron-Core's default (TransformerConfig recompute_granularity None)
    assert moe.plan.checkpointing[0] == Checkpointing.NONE
    assert moe.system.name == "DGX-B200" and moe.routing == "balanced"
    notes = " | ".join(moe.assumptions)
    for fragment in ("model.ffn not stated", "tied_embeddings", "recompute unknown", "mxfp8"):
        assert fragment in notes


def test_example_mla_record_on_nvl72_keeps_its_uneven_pipeline() -> None:
    mla = load_run_records(EXAMPLE).records[2]
    geometry = mla.workload.geometry
    assert geometry.mla.qk_nope_head_dim == 128 and geometry.mla.q_lora_rank == 1536
    assert geometry.head_dim == geometry.mla.v_head_dim
    assert mla.system.name == "GB200-NVL72" and mla.cluster.n_nodes == 64
    assert (mla.plan.pp[0], mla.plan.vpp[0], geometry.layers) == (4, 4, 61)


def test_example_oom_record_has_no_throughput() -> None:
    oom = load_run_records(EXAMPLE).records[3]
    assert oom.oom
    assert oom.measured_tokens_per_s_per_gpu is None and oom.measured_step_time_s is None
    assert oom.plan.micro_batch[0] == 1
    assert "batch.micro_seqs not stated: 1 assumed" in oom.assumptions


# ------------------------------------------------------------------ shared calibration set


def test_published_runs_load_with_the_verified_skip_count() -> None:
    if not PUBLISHED.is_file():
        pytest.skip(f"shared calibration set not found at {PUBLISHED}")
    with pytest.warns(RunRecordWarning, match="skipped 2 of 127"):
        loaded = load_run_records(PUBLISHED)
    assert (len(loaded.records), len(loaded.skipped)) == (125, 2)
    reasons = Counter(reason.split(": ", 1)[1] for _, reason in loaded.skipped)
    assert reasons == {"model.mla: null, but MLA attention needs its dimensions": 1,
                       "parallelism.ep: not stated (null) for an MoE run": 1}
    derived = [r for r in loaded.records
               if any(a.startswith("model.head_dim not stated") for a in r.assumptions)]
    assert len(derived) == 43  # 32 MHA + 11 GQA records state heads but not head_dim
    assert sum(r.workload.geometry.is_moe for r in loaded.records) == 28
    assert {r.system.name for r in loaded.records} == {
        "DGX-A100",
        "DGX-H100",
        "Grand-Teton-H100",
        "DGX-H200",
        "DGX-B200",
        "GB200-NVL72",
    }


# ------------------------------------------------------------------ bad records are skipped


def test_missing_essential_is_skipped_naming_record_and_field(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    del run["model"]["layers"]
    assert "model.layers: Field required" in _skip_reason(tmp_path, run)


def test_null_head_dim_is_derived_and_noted_or_skipped(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    run["model"]["head_dim"] = None
    run["model"]["heads"] = 7  # does not divide d_model: cannot derive
    assert "model.head_dim: not stated and heads=7" in _skip_reason(tmp_path, run)


def test_unknown_fields_are_all_listed(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    run["colour"] = "blue"
    run["model"]["rope_theta"] = 500000
    reason = _skip_reason(tmp_path, run)
    assert "unknown field(s) colour, model.rope_theta" in reason


def test_bad_value_names_the_field_and_value(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    run["precision"] = "fp4"
    reason = _skip_reason(tmp_path, run)
    assert "precision:" in reason and "'fp4'" in reason


def test_unknown_gpu_is_a_skip_reason(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    run["gpu"] = "TPU-v5p"
    reason = _skip_reason(tmp_path, run)
    assert "gpu: unknown device 'TPU-v5p'" in reason and "MI300X" in reason  # the catalog's
    assert "--catalog" in reason


def test_a_gpu_without_a_reference_host_runs_on_the_catalog_system_holding_it(
        tmp_path: Path) -> None:
    """An MI300X record with 8 GPUs a host and an 8-GPU Infinity Fabric domain runs on the
    catalog's ND-MI300X-v5, as `plan --gpu MI300X` and a job's hardware.gpu do (before,
    every such record was skipped: "no reference node type"; found by a new-user trial)."""
    from mosaic.config.run_records import reference_system

    assert reference_system("MI300X", 8, 8).name == "ND-MI300X-v5"
    with pytest.raises(MosaicInputError, match="do not match ND-MI300X-v5"):
        reference_system("MI300X", 4, 4)


def test_layout_that_does_not_multiply_to_num_gpus_is_skipped(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    run["parallelism"]["dp"] = 4
    reason = _skip_reason(tmp_path, run)
    assert "parallelism.dp: tp·pp·cp·dp = 1·1·1·4 = 4, not num_gpus=8" in reason


def test_inconsistent_throughput_and_step_time_is_skipped(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    run["measured"]["step_time_s"] = 3.5
    assert "measured.consistent" in _skip_reason(tmp_path, run)


def test_one_measurement_states_the_other_by_hand(tmp_path: Path) -> None:
    """tokens/s/GPU = global_seqs·seq_len/(step·GPUs): either figure alone is enough (a trial
    had both required), and the derived one is noted."""
    run = copy.deepcopy(_example_runs()[0])
    tokens = run["batch"]["global_seqs"] * run["batch"]["seq_len"]
    step_s = run["measured"].pop("step_time_s")
    (record,) = _load_one(tmp_path, run).records
    assert record.measured_step_time_s == pytest.approx(
        tokens / (run["measured"]["tokens_per_s_per_gpu"] * run["num_gpus"]))
    assert record.measured_step_time_s == pytest.approx(step_s, rel=0.02)
    assert any("step_time_s not stated" in note for note in record.assumptions)
    run["measured"]["step_time_s"] = step_s
    tokens_per_s = run["measured"].pop("tokens_per_s_per_gpu")
    (record,) = _load_one(tmp_path, run).records
    assert record.measured_tokens_per_s_per_gpu == pytest.approx(
        tokens / (step_s * run["num_gpus"]))
    assert record.measured_tokens_per_s_per_gpu == pytest.approx(tokens_per_s, rel=0.02)
    run["measured"].pop("step_time_s")
    assert "give tokens_per_s_per_gpu or step_time_s" in _skip_reason(tmp_path, run)


@pytest.mark.parametrize(("field", "scale", "hint"), [
    ("tokens_per_s_per_gpu", "gpus_per_node", "per-node figure"),
    ("step_time_s", 1000, "milliseconds"),
])
def test_a_unit_slip_is_named_where_the_gap_matches_it(tmp_path: Path, field, scale, hint):
    run = copy.deepcopy(_example_runs()[0])
    factor = run[scale] if isinstance(scale, str) else scale
    run["measured"][field] *= factor
    reason = _skip_reason(tmp_path, run)
    assert "measured.consistent" in reason and hint in reason, reason


def test_every_unit_slip_a_gap_matches_is_named(tmp_path: Path) -> None:
    """On 1024 GPUs a step in milliseconds (x1000) and a cluster total (x1024) give gaps 2.4%
    apart: both are named, not the first that matched (a review's record followed the wrong
    advice). The per-node hint for a 2-node run too."""
    run = copy.deepcopy(_example_runs()[0])
    run["num_gpus"], run["parallelism"]["dp"] = 1024, 1024
    run["batch"]["global_seqs"] = 2048
    tokens = run["batch"]["global_seqs"] * run["batch"]["seq_len"]
    run["measured"]["step_time_s"] = 2.0
    run["measured"]["tokens_per_s_per_gpu"] = tokens / (2.0 * 1024)
    run["measured"]["step_time_s"] = 2000.0
    reason = _skip_reason(tmp_path, run)
    assert "milliseconds" in reason and "whole cluster's" in reason, reason
    run["measured"]["step_time_s"] = 2.0
    run["measured"]["tokens_per_s_per_gpu"] *= run["gpus_per_node"]
    reason = _skip_reason(tmp_path, run)
    assert "per-node figure" in reason and "milliseconds" not in reason, reason


def test_global_seqs_in_tokens_is_named(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[0])
    run["batch"]["global_seqs"] *= run["batch"]["seq_len"]
    assert "counts sequences of batch.seq_len tokens" in _skip_reason(tmp_path, run)


def test_duplicate_id_is_skipped_and_the_first_kept(tmp_path: Path) -> None:
    run = _example_runs()[0]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run, run]}))
    with pytest.warns(RunRecordWarning, match="skipped 1 of 2"):
        loaded = load_run_records(path)
    assert len(loaded.records) == 1
    assert "duplicate of entry 1" in loaded.skipped[0][1]


def test_entry_that_is_not_a_mapping_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": ["just text"]}))
    with pytest.warns(RunRecordWarning):
        loaded = load_run_records(path)
    assert loaded.skipped == (
        ("<entry 1>", "run '<entry 1>' (entry 1): expected a mapping, got str"),
    )


# ------------------------------------------------------------------ malformed files raise


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("runs: [unclosed\n", "malformed YAML"),
        ("description: no runs here\n", "expected a 'runs' list of run records, got nothing"),
        ("runs: {id: x}\n", "expected a 'runs' list of run records, got dict"),
        ("runs: []\nrecords: []\n", "unknown top-level field(s) records"),
        ("schema_version: 2\nruns: []\n", "schema_version 2 is not supported"),
    ],
)
def test_malformed_file_raises_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(MosaicInputError, match=r"bad\.yaml") as info:
        load_run_records(path)
    assert message in str(info.value)


# ------------------------------------------------------------------ mapping rules


@pytest.mark.parametrize(
    ("gpu", "per_node", "domain", "system"),
    [
        ("A100-SXM-80GB", 8, 8, "DGX-A100"),
        ("H100-SXM-80GB", 8, 8, "DGX-H100"),
        ("H100-SXM-96GB-500W", 8, 8, "Grand-Teton-H100"),
        ("H200-SXM-141GB", 8, 8, "DGX-H200"),
        ("H800-SXM-80GB", 8, 8, "H800-node"),
        ("B200", 8, 8, "DGX-B200"),
        ("GB200", 4, 72, "GB200-NVL72"),
    ],
)
def test_reference_system_per_gpu(gpu: str, per_node: int, domain: int, system: str) -> None:
    assert reference_system(gpu, per_node, domain).name == system


def test_reference_system_rejects_a_host_shape_the_catalog_lacks() -> None:
    with pytest.raises(MosaicInputError, match="gpus_per_node/scaleup_domain: 8/8"):
        reference_system("GB200", 8, 8)


@pytest.mark.parametrize(
    ("software", "label"),
    [
        ("NeMo 25.11 container / Megatron-Bridge + Megatron-Core", "megatron-bridge"),
        ("NeMo 25.04", "megatron-core"),
        ("NeMo AutoModel main (PyTorch FSDP2 + EP), TE + DeepEP", "nemo-automodel"),
        ("torch 2.8.0a0 (NGC 25.05), torchao 0afa4c1, torchtitan e7c0cae", "torchtitan"),
        ("Composer/llm-foundry (PyTorch FSDP1), flash/triton attention", "llm-foundry"),
        ("MaxText", "jax-xla"),
        ("Megatron-DeepSpeed ZeRO-3", "deepspeed"),
        ("NeMo + Megatron-Core MoE stack as in the paper's Appendix F.3", "paper-nemo"),
        ("an in-house trainer", "other"),
        (None, "other"),
    ],
)
def test_stack_label(software: str | None, label: str) -> None:
    assert stack_label(software) == label


def test_torchtitan_pipeline_defaults_fill_unstated_vpp_and_micro_batch(tmp_path: Path) -> None:
    # torchtitan interleaves at least two stages per rank, and its pipeline micro-batch is one
    # sequence unless stated (pipeline_parallel_microbatch_size = 1, config/job_config.py
    # @ v0.2.2; before pytorch/torchtitan#1073 it split the local batch into pp micro-batches:
    # 8 GPUs as pp=2 x dp=4, 16 sequences -> local 4 -> micro-batch 2 then)
    run = copy.deepcopy(_example_runs()[0])
    assert run["software"].startswith("torchtitan")
    run["num_gpus"], run["parallelism"] = 8, {**run["parallelism"], "pp": 2, "dp": 4, "vpp": None}
    run["batch"] = {**run["batch"], "global_seqs": 16, "micro_seqs": None}
    (record,) = _load_one(tmp_path, run).records
    row = record.plan.row(0)
    assert (row["vpp"], row["micro_batch"]) == (2, 1)
    assert any("pipeline_parallel_microbatch_size defaults to 1" in a
               for a in record.assumptions)
    # Other stacks keep the neutral default of one sequence and no interleaving.
    run["software"] = "NeMo 25.09 container / Megatron-Bridge + Megatron-Core"
    (record,) = _load_one(tmp_path, run).records
    assert (record.plan.row(0)["vpp"], record.plan.row(0)["micro_batch"]) == (1, 1)


def test_dispatcher_is_read_from_the_record(tmp_path: Path) -> None:
    run = copy.deepcopy(_example_runs()[1])
    assert run["model"]["moe"] is not None
    run["parallelism"]["dispatcher"] = "DeepEP"
    (record,) = _load_one(tmp_path, run).records
    assert record.workload.dispatcher == "deepep"
    run["parallelism"]["dispatcher"] = "carrier-pigeon"  # a typo is refused, never guessed
    reason = _skip_reason(tmp_path, run)
    assert "parallelism.dispatcher: 'carrier-pigeon'" in reason and "deepep" in reason


def test_a_memory_figure_in_gb_is_pointed_at_gib_with_the_conversion(tmp_path):
    """measured.memory_gb only suggested memory_gib, which a trial renamed without
    converting (7% high); the hint now gives the figure in GiB: 65.5e9 / 2**30."""
    run = copy.deepcopy(_example_runs()[0])
    run["measured"].pop("memory_gib", None)
    run["measured"]["memory_gb"] = 65.5
    reason = _skip_reason(tmp_path, run)
    assert f"did you mean memory_gib? GiB are 2^30 bytes: 65.5 GB = {65.5e9 / GIB:.4g} GiB" \
        in reason


def test_a_flat_hf_moe_name_points_at_the_moe_block(tmp_path: Path) -> None:
    """model.num_experts (HuggingFace's name) got no hint: the nearest model field by
    spelling is no MoE field (a trial). It now names model.moe.experts."""
    run = copy.deepcopy(_example_runs()[1])
    run["model"]["num_experts"] = 128
    reason = _skip_reason(tmp_path, run)
    assert "model.num_experts (did you mean model.moe.experts?)" in reason


def test_unstated_degrees_of_a_record_are_said_and_a_mistyped_release_is_named(tmp_path):
    """A trial's pp=4 record without pp and dp was scored as pp=1 with no line; its
    stack_version '25.O9' read as no release, so the recipes' settings were left out
    unsaid. A commit or tag (600d069b, core_v0.6.0) is a version, not a mistyped release."""
    from mosaic.errors import MosaicWarning

    run = copy.deepcopy(_example_runs()[0])
    for name in ("pp", "dp"):
        run["parallelism"].pop(name, None)
    (record,) = _load_one(tmp_path, run).records
    assert "parallelism.pp not stated: 1 assumed" in record.assumptions
    assert any(line.startswith("parallelism.dp not stated: ") for line in record.assumptions)
    bridge = copy.deepcopy(_example_runs()[0]) | {"stack": "megatron-bridge"}
    for version, warned in (("25.O9", True), ("25.9", True), ("25.09", False),
                            ("600d069b", False), ("core_v0.6.0", False)):
        path = tmp_path / "runs.yaml"
        path.write_text(yaml.safe_dump({"runs": [bridge | {"stack_version": version}]}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load_run_records(path)
        said = [w for w in caught if issubclass(w.category, MosaicWarning)
                and "names no YY.MM release" in str(w.message)]
        assert bool(said) == warned, version


def test_a_model_given_as_a_path_says_the_block_is_inline(tmp_path):
    # a trial's record named its HF config.json and read "Input should be a valid dictionary
    # or instance of ModelBlock"
    run = copy.deepcopy(_example_runs()[0]) | {"model": "examples/hf/mixtral-8x7b.json"}
    reason = _skip_reason(tmp_path, run)
    assert "a run record holds the model block inline" in reason
    assert "--model CONFIG.json --to yaml" in reason


# ------------------------------------------------------------------ trained, no throughput


def _trained_run() -> dict[str, Any]:
    run = copy.deepcopy(_example_runs()[0])
    run["id"] = "preset-trained"
    run["measured"] = {"tokens_per_s_per_gpu": None, "step_time_s": None, "oom": False,
                       "trained": True}
    return run


def test_a_trained_record_without_throughput_loads_unscored(tmp_path: Path) -> None:
    # measured.trained: the run trained (a shipped preset), nothing measured: a memory check
    (record,) = _load_one(tmp_path, _trained_run()).records
    assert not record.oom
    assert record.measured_tokens_per_s_per_gpu is None and record.measured_step_time_s is None
    assert not record.throughput_scored
    assert "no throughput" in record.throughput_not_scored


def test_a_record_without_throughput_still_needs_trained_or_oom(tmp_path: Path) -> None:
    run = _trained_run()
    del run["measured"]["trained"]
    assert "unless measured.oom" in _skip_reason(tmp_path, run)


def test_a_trained_record_cannot_be_oom(tmp_path: Path) -> None:
    run = _trained_run()
    run["measured"]["oom"] = True
    assert "measured.trained" in _skip_reason(tmp_path, run)


def test_trained_with_a_throughput_stated_is_scored_as_any_run(tmp_path: Path) -> None:
    # docs/run_records.md: measured.trained changes nothing where a throughput is stated
    run = _trained_run()
    run["measured"]["tokens_per_s_per_gpu"] = 1000.0
    (record,) = _load_one(tmp_path, run).records
    assert record.throughput_scored and record.throughput_not_scored is None
    assert record.measured_tokens_per_s_per_gpu == 1000.0
