"""An MoE run record that leaves its dispatcher unstated takes its stack's documented default
on the record's GPU generation (stack trait moe_dispatcher); a stated one always wins."""

from copy import deepcopy
from pathlib import Path

import pytest
import yaml

from mosaic.config.run_records import _validate_entry, run_record_from_entry
from mosaic.perf.workload import Dispatcher

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"


def _bridge_moe_record() -> dict:
    runs = yaml.safe_load(EXAMPLES.read_text())["runs"]
    return deepcopy(next(r for r in runs if r["id"].startswith("example-bridge-qwen3")))


def _load(raw: dict):
    return run_record_from_entry(_validate_entry(raw, "test"))


@pytest.mark.parametrize(("gpu", "expected"), [("B200", Dispatcher.HYBRIDEP),
                                               ("H100-SXM-80GB", Dispatcher.DEEPEP)])
def test_megatron_bridge_records_default_to_the_recipes_flex_dispatcher(gpu, expected):
    raw = _bridge_moe_record()
    raw["gpu"] = gpu
    raw["software"] = "Megatron-Bridge (release not stated)"  # no recipe of a release applies
    raw["parallelism"].pop("dispatcher", None)
    record = _load(raw)
    assert record.workload.stack == "megatron-bridge"
    assert record.workload.dispatcher is expected
    assert any("dispatcher not stated" in line for line in record.assumptions)


def test_a_stated_dispatcher_and_other_stacks_keep_the_pairwise_all_to_all():
    raw = _bridge_moe_record()
    raw["parallelism"]["dispatcher"] = "alltoall"
    assert _load(raw).workload.dispatcher is Dispatcher.ALLTOALL
    core = _bridge_moe_record()
    core["parallelism"].pop("dispatcher", None)
    core["software"] = "Megatron-LM core_r0.14"
    record = _load(core)
    assert record.workload.stack == "megatron-core"
    assert record.workload.dispatcher is Dispatcher.ALLTOALL


def test_a_job_file_takes_its_stacks_dispatcher_on_its_systems_gpu():
    from mosaic.config.job_schema import job_from_document

    document = yaml.safe_load((EXAMPLES.parent / "fsdp_moe_comm_bound.yaml").read_text())
    document["performance"]["stack"] = "megatron-bridge"  # p5.48xlarge: H100
    spec = job_from_document(deepcopy(document), "test")
    assert spec.workload.dispatcher is Dispatcher.DEEPEP
    document["parallelism"]["dispatcher"] = "alltoall"
    assert job_from_document(document, "test").workload.dispatcher is Dispatcher.ALLTOALL


def test_a_plan_on_a_stack_with_a_dispatcher_default_takes_it_unless_told():
    from mosaic.plan.inputs import build_inputs

    common = dict(gpu="B200", system=None, nodes=2, gpus_per_node=None, days=10.0,
                  goodput=None, mtbf_gpu_hours=None, checkpoint_s=None, restart_s=0.0,
                  global_batch=1024, seq_len=4096, memory_fraction=None, q="8",
                  experts="64", top_k="2", split_factor="4", tpp="1:1000", s_min=0.0)
    bridge, _ = build_inputs(**common, stack="megatron-bridge")
    assert bridge.dispatcher is Dispatcher.HYBRIDEP
    core, _ = build_inputs(**common, stack="megatron-core")
    assert core.dispatcher is Dispatcher.ALLTOALL
    told, _ = build_inputs(**common, stack="megatron-bridge", dispatcher="alltoall")
    assert told.dispatcher is Dispatcher.ALLTOALL


def test_megatrons_flex_dispatcher_is_its_default_backend_deepep():
    """A trial's record named Megatron's own `flex` and was refused; Megatron-Core's flex
    dispatcher runs its default backend, DeepEP (TransformerConfig.moe_flex_dispatcher_backend
    = "deepep" @ d98e8a64dd), and the record says so."""
    raw = _bridge_moe_record()
    raw["parallelism"]["dispatcher"] = "flex"
    record = _load(raw)
    assert record.workload.dispatcher is Dispatcher.DEEPEP
    assert any(line.startswith("parallelism.dispatcher flex: Megatron-Core's flex dispatcher")
               for line in record.assumptions)
