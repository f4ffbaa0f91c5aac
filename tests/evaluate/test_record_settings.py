"""Documented settings applied to the runs whose records cannot carry them."""

import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from mosaic.config.run_records import load_run_records
from mosaic.evaluate.record_settings import apply_record_settings, record_settings
from mosaic.perf.memory import COMPONENTS, memory_breakdown_bytes
from mosaic.stacks import CrossEntropy

ROOT = Path(__file__).resolve().parents[2]
EXTRA_RUNS = ROOT / "src/mosaic/evaluate/data/extra_runs.yaml"
PUBLISHED = ROOT.parent / "shared" / "calibration" / "published_runs.yaml"


def _records(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_run_records(path)


def test_every_listed_run_exists_in_a_run_file():
    if not PUBLISHED.exists():
        pytest.skip("../shared/calibration/published_runs.yaml not available")
    ids = {r.id for path in (PUBLISHED, EXTRA_RUNS) for r in _records(path).records}
    assert sorted(set(record_settings()) - ids) == []


def test_settings_apply_by_id_and_are_noted():
    records = _records(EXTRA_RUNS)
    target = "bridge2511-llama3-70b-gb300-64-fp8cs"
    amended = {r.id: r for r in apply_record_settings(records).records}[target]
    original = {r.id: r for r in records.records}[target]
    assert (original.workload.grad_reduce_in_fp32, original.workload.offloaded_activation_layers
            ) == (True, 0)
    assert (amended.workload.grad_reduce_in_fp32, amended.workload.offloaded_activation_layers
            ) == (False, 20)
    assert any(note.startswith("record settings:") for note in amended.assumptions)
    before = memory_breakdown_bytes(original.workload, original.plan)
    after = memory_breakdown_bytes(amended.workload, amended.plan)
    assert after["gradients"][0] == pytest.approx(before["gradients"][0] / 2)
    assert after["activations"][0] < before["activations"][0]
    assert set(after) == set(COMPONENTS)


def test_a_record_that_states_a_setting_keeps_it():
    records = _records(EXTRA_RUNS)
    target = "bridge2511-llama3-70b-gb300-64-fp8cs"
    stated = tuple(
        replace(r, workload=replace(r.workload, cross_entropy=CrossEntropy.FP32_UPCAST,
                                    offloaded_activation_layers=3),
                stated_settings=frozenset({"cross_entropy", "offloaded_activation_layers"}))
        if r.id == target else r for r in records.records)
    amended = {r.id: r for r in apply_record_settings(replace(records, records=stated)).records}
    assert amended[target].workload.offloaded_activation_layers == 3
    assert amended[target].workload.grad_reduce_in_fp32 is False  # not stated: applied


def test_an_unstated_dispatcher_takes_the_recipes_and_a_stated_one_is_kept():
    from mosaic.config.layout import DISPATCHER_NOT_STATED
    from mosaic.perf.workload import Dispatcher

    records = _records(EXTRA_RUNS)
    target = "bridge2511-gpt-oss-120b-gb300-64-bf16"  # the recipe sets no flex backend
    original = {r.id: r for r in records.records}[target]
    # Unstated: the megatron-bridge default on Blackwell, overridden by the recipe's setting.
    assert original.workload.dispatcher is Dispatcher.HYBRIDEP
    assert any(line.startswith(DISPATCHER_NOT_STATED) for line in original.assumptions)
    amended = {r.id: r for r in apply_record_settings(records).records}[target]
    assert amended.workload.dispatcher is Dispatcher.ALLTOALL
    # A record that names its dispatcher keeps it.
    assert "dispatcher" not in original.stated_settings
    stated = replace(original, stated_settings=frozenset({"dispatcher"}))
    kept = apply_record_settings(replace(records, records=(stated,))).records[0]
    assert kept.workload.dispatcher is Dispatcher.HYBRIDEP


POWER_LIMITED = ("torchtitan-torchao-llama3-8b-b200-8-bf16",
                 "torchtitan-torchao-llama3-8b-b200-8-float8-tensorwise",
                 "torchtitan-torchao-llama3-8b-b200-8-mxfp8-cublas")


def test_runs_on_hardware_not_as_catalogued_are_predicted_but_not_scored():
    """The torchao B200 rows ran on power-limited GPUs (limit unstated): their tokens/s stay
    out of the fit and the accuracy figures, with the reason; their memory still counts."""
    if not PUBLISHED.exists():
        pytest.skip("../shared/calibration/published_runs.yaml not available")
    from mosaic.evaluate.calibrate import record_baselines
    from mosaic.evaluate.validation_report import aggregate, predict_runs
    from mosaic.perf.calibration import default_calibration

    records = apply_record_settings(_records(PUBLISHED)).records
    marked = [r for r in records if not r.throughput_scored and not r.oom]
    assert sorted(r.id for r in marked) == sorted(POWER_LIMITED)
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
    """Megatron-Bridge's DeepSeek-V3 recipes run selective recompute: a record with recompute
    'unknown' (Megatron-Core's default: none) takes it, in the plan's checkpointing column;
    one that states its recompute keeps it."""
    from mosaic.perf.plan import Checkpointing

    records = _records(EXTRA_RUNS)
    target = "bridge2511-deepseekv3-w-o-mtp-gb300-256-bf16"
    original = {r.id: r for r in records.records}[target]
    amended = {r.id: r for r in apply_record_settings(records).records}[target]
    assert original.plan.checkpointing[0] == Checkpointing.NONE  # the stack's default
    assert amended.plan.checkpointing[0] == Checkpointing.SELECTIVE
    assert any("recompute=selective" in note for note in amended.assumptions)
    stated = replace(records, records=tuple(
        replace(r, stated_settings=r.stated_settings | {"recompute"}) if r.id == target else r
        for r in records.records))
    kept = {r.id: r for r in apply_record_settings(stated).records}[target]
    assert kept.plan.checkpointing[0] == Checkpointing.NONE
