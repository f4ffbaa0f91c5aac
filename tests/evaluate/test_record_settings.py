"""Documented settings applied to the runs whose records cannot carry them."""

import copy
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mosaic.config.run_records import _validate_entry, load_run_records, run_record_from_entry
from mosaic.evaluate.record_settings import apply_record_settings, record_settings
from mosaic.perf.memory import COMPONENTS, memory_breakdown_bytes
from mosaic.stacks import CrossEntropy

ROOT = Path(__file__).resolve().parents[2]
EXTRA_RUNS = ROOT / "src/mosaic/evaluate/data/extra_runs.yaml"
PUBLISHED = ROOT.parent / "shared" / "calibration" / "published_runs.yaml"
PAPER_SWEEPS = ROOT.parent / "shared" / "calibration" / "paper_p6b200_sweeps.yaml"


def _records(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_run_records(path)


def test_every_listed_run_exists_in_a_run_file():
    if not PUBLISHED.exists():
        pytest.skip("../shared/calibration/published_runs.yaml not available")
    ids = {r.id for path in (PUBLISHED, PAPER_SWEEPS, EXTRA_RUNS)
           for r in _records(path).records}
    assert sorted(set(record_settings()) - ids) == []


def test_settings_apply_by_id_and_are_noted():
    """fms-fsdp @ ed74fd5 (evidence in record_settings.yaml): bf16 gradient reduction and
    43% of the blocks checkpointed: the gradient buffer halves."""
    records = _records(EXTRA_RUNS)
    target = "fmsfsdp2403-llama2-13b-h100-96"
    amended = {r.id: r for r in apply_record_settings(records).records}[target]
    original = {r.id: r for r in records.records}[target]
    assert (original.workload.grad_reduce_in_fp32, original.workload.recompute_block_fraction
            ) == (True, None)
    assert (amended.workload.grad_reduce_in_fp32, amended.workload.recompute_block_fraction
            ) == (False, 0.43)
    assert any(note.startswith("record settings:") for note in amended.assumptions)
    before = memory_breakdown_bytes(original.workload, original.plan)
    after = memory_breakdown_bytes(amended.workload, amended.plan)
    assert after["gradients"][0] == pytest.approx(before["gradients"][0] / 2)
    assert set(after) == set(COMPONENTS)


def test_a_record_that_states_a_setting_keeps_it():
    records = _records(EXTRA_RUNS)
    target = "fmsfsdp2403-llama2-13b-h100-96"
    stated = tuple(
        replace(r, workload=replace(r.workload, cross_entropy=CrossEntropy.FP32_UPCAST,
                                    recompute_block_fraction=0.5),
                stated_settings=frozenset({"cross_entropy", "recompute_block_fraction"}))
        if r.id == target else r for r in records.records)
    amended = {r.id: r for r in apply_record_settings(replace(records, records=stated)).records}
    assert amended[target].workload.recompute_block_fraction == 0.5
    assert amended[target].workload.grad_reduce_in_fp32 is False  # not stated: applied


def _raw_extra_run(run_id: str) -> dict:
    document = yaml.safe_load(EXTRA_RUNS.read_text())
    return copy.deepcopy(next(r for r in document["runs"] if r["id"] == run_id))


def _load_raw(raw: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_record_from_entry(_validate_entry(raw, "test"))


def test_an_unstated_dispatcher_takes_the_recipes_and_a_stated_one_is_kept():
    """NVIDIA-NeMo/Megatron-Bridge @ v0.2.0 (NeMo 25.11) scripts/performance/configs/gpt_oss/
    workload_base_configs.py: the GPT-OSS-120B presets set no moe_flex_dispatcher_backend, so
    the run used the all-to-all dispatcher, not the stack's Blackwell default (HybridEP)."""
    from mosaic.config.layout import DISPATCHER_NOT_STATED
    from mosaic.perf.workload import Dispatcher

    raw = _raw_extra_run("bridge2511-gpt-oss-120b-gb300-64-bf16")
    record = _load_raw(raw)
    assert record.workload.dispatcher is Dispatcher.ALLTOALL
    assert any("recipe settings" in line and "dispatcher=alltoall" in line
               for line in record.assumptions)
    assert not any(line.startswith(DISPATCHER_NOT_STATED) for line in record.assumptions)
    raw["parallelism"]["dispatcher"] = "hybridep"  # a record that names its dispatcher
    assert _load_raw(raw).workload.dispatcher is Dispatcher.HYBRIDEP


POWER_LIMITED = ("torchtitan-torchao-llama3-8b-b200-8-bf16",
                 "torchtitan-torchao-llama3-8b-b200-8-float8-tensorwise",
                 "torchtitan-torchao-llama3-8b-b200-8-mxfp8-cublas")
# Megatron-Bridge's 25.11 table gives this run EP 8 where the release's B200 preset sets 64
LAYOUT_CONTRADICTED = ("bridge2511-gpt-oss-120b-b200-64-bf16",)


def test_runs_on_hardware_not_as_catalogued_are_predicted_but_not_scored():
    """The torchao B200 rows ran on power-limited GPUs (limit unstated): their tokens/s stay
    out of the fit and the accuracy figures, with the reason; their memory still counts."""
    if not PUBLISHED.exists():
        pytest.skip("../shared/calibration/published_runs.yaml not available")
    from mosaic.evaluate.calibrate import record_baselines
    from mosaic.evaluate.validation_report import aggregate, predict_runs
    from mosaic.perf.calibration import default_calibration

    records = apply_record_settings(_records(PUBLISHED)).records
    unscored = [r for r in records if not r.throughput_scored and not r.oom]
    assert sorted(r.id for r in unscored) == sorted(POWER_LIMITED + LAYOUT_CONTRADICTED)
    contradicted = [r for r in unscored if r.id in LAYOUT_CONTRADICTED]
    assert all("EP 64" in r.throughput_not_scored and "v0.2.0" in r.throughput_not_scored
               for r in contradicted)
    marked = [r for r in unscored if r.id in POWER_LIMITED]
    assert all("power-limited" in r.throughput_not_scored for r in marked)
    # the cross-entropy setting of the same runs still applies (two groups, one run)
    assert {r.workload.cross_entropy for r in marked} == {CrossEntropy.COMPILED}
    baselines = record_baselines([*marked, records[0]], default_calibration())
    assert baselines.ids == (records[0].id,)
    summary = aggregate(predict_runs(marked, default_calibration()))
    assert summary["n_runs"] == 0 and summary["mape"] is None
    assert summary["memory"]["n_runs"] == 3
    assert [row["id"] for row in summary["throughput_not_scored"]] == list(POWER_LIMITED)


def test_a_group_cannot_mark_runs_scored():
    """Only ``throughput_scored: false`` is a statement; ``true`` is every run's default."""
    from pydantic import ValidationError

    from mosaic.evaluate.record_settings import _Settings

    with pytest.raises(ValidationError):
        _Settings(throughput_scored=True)
    assert _Settings(throughput_scored=False).throughput_scored is False


def test_the_loader_records_which_settings_a_run_states(tmp_path):
    """A stated default (ep_overlap: false, grad_reduce_in_fp32: true) is a statement too:
    documented settings never override it; an omitted field is not."""
    import yaml

    document = yaml.safe_load((ROOT / "examples/runs_example.yaml").read_text())
    moe = next(r for r in document["runs"] if (r.get("model") or {}).get("moe"))
    moe["parallelism"]["ep_overlap"] = False
    moe["grad_reduce_in_fp32"] = True
    moe["parallelism"].pop("dispatcher", None)
    document["runs"] = [moe]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(document))
    (record,) = _records(path).records
    assert {"ep_overlap", "grad_reduce_in_fp32"} <= record.stated_settings
    assert "dispatcher" not in record.stated_settings
    assert "cross_entropy" not in record.stated_settings


def test_bf16_optimizer_and_kept_gathered_fsdp_apply_to_their_runs():
    """The published runs whose recipes step bf16 parameters (NeMo AutoModel @ 01926a5c44,
    NeMo 1.0's distributed_fused_adam with dtype bf16) lose the fp32 master and halve the
    moments; the AutoModel Qwen3 run without PP keeps its FSDP units gathered."""
    if not PUBLISHED.exists():
        pytest.skip("../shared/calibration/published_runs.yaml not available")
    from mosaic.perf.workload import OptimizerDtype

    records = _records(PUBLISHED)
    amended = {r.id: r for r in apply_record_settings(records).records}
    original = {r.id: r for r in records.records}
    for run_id in ("nemo2407-nemotron-340b-h100-128-fp8", "automodel-qwen3-30b-a3b-h100-8-bf16"):
        before, after = original[run_id], amended[run_id]
        assert before.workload.optimizer_dtype is OptimizerDtype.FP32
        assert after.workload.optimizer_dtype is OptimizerDtype.BF16
        old = memory_breakdown_bytes(before.workload, before.plan)
        new = memory_breakdown_bytes(after.workload, after.plan)
        assert old["master_weights"][0] > 0 and new["master_weights"][0] == 0
        assert new["optimizer_states"][0] == pytest.approx(old["optimizer_states"][0] / 2)
    assert amended["automodel-qwen3-30b-a3b-h100-8-bf16"].workload.fsdp_keep_gathered
    assert not original["automodel-qwen3-30b-a3b-h100-8-bf16"].workload.fsdp_keep_gathered


def test_async_tp_runs_overlap_their_tp_collectives():
    """The torchtitan float8 + async-TP row runs with tp_comm_overlap; with it the predicted
    TP all-gathers shrink and nothing else in the step moves."""
    from mosaic.perf.calibration import default_calibration
    from mosaic.perf.machine import machine_for
    from mosaic.perf.step_time import predict_step

    records = _records(EXTRA_RUNS)
    target = "torchtitan2024-llama3.1-405b-h100-128-float8-asynctp"
    original = {r.id: r for r in records.records}[target]
    amended = {r.id: r for r in apply_record_settings(records).records}[target]
    assert (original.workload.tp_comm_overlap, amended.workload.tp_comm_overlap) == (False, True)
    machine = machine_for(original.cluster, original.workload.precision)
    before, after = (predict_step(r.workload, r.plan, machine, default_calibration()).breakdown_s
                     for r in (original, amended))
    assert 0 < after["tp_all_gather"][0] < before["tp_all_gather"][0]
    assert after["compute_mlp"][0] == before["compute_mlp"][0]


def test_recompute_applies_to_a_record_that_leaves_it_unknown_only():
    """Megatron-Bridge @ v0.2.0 DeepSeek-V3 on GB300 in bf16 (configs/deepseek/
    workload_base_configs.py DEEPSEEK_V3_GB300_BF16: recompute_modules ['moe_act'];
    deepseek_llm_pretrain.py: recompute_granularity selective): a record with recompute
    'unknown' takes it, in the plan's checkpointing column; one that states it keeps it."""
    from mosaic.perf.plan import Checkpointing

    raw = _raw_extra_run("bridge2511-deepseekv3-w-o-mtp-gb300-256-bf16")
    assert raw["recompute"] == "unknown"
    record = _load_raw(raw)
    assert record.plan.checkpointing[0] == Checkpointing.SELECTIVE
    assert record.workload.recompute_modules == ("moe_act",)
    assert any("recompute=selective" in note for note in record.assumptions)
    raw["recompute"] = "none"
    assert _load_raw(raw).plan.checkpointing[0] == Checkpointing.NONE


def test_the_paper_sweeps_run_on_the_node_type_the_paper_names():
    """The shared sweep file cannot name a node type; the paper ran on p6-b200.48xlarge
    (Sec. 7.2), whose EFA network the records are now costed on, not the B200's reference
    DGX node; a record that names its own system keeps it."""
    if not PAPER_SWEEPS.exists():
        pytest.skip("../shared/calibration/paper_p6b200_sweeps.yaml not available")
    records = apply_record_settings(_records(PAPER_SWEEPS)).records
    assert {r.system.name for r in records} == {"p6-b200.48xlarge"}
    assert all(any("system=p6-b200.48xlarge" in note for note in r.assumptions)
               for r in records)
