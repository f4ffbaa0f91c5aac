"""The stack registry and the traits the model honours (hand-computed cases)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mosaic.arch import Geometry, MoEConfig
from mosaic.config.run_records import RunRecordWarning, load_run_records
from mosaic.errors import MosaicInputError
from mosaic.perf.calibration import default_calibration
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import StageParameters, communication_buffer_bytes, stage_parameters
from mosaic.perf.plan import Sharding, single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload
from mosaic.stacks import MicroBatchDefault, get_stack, known_stacks, stack_for_software


def small_moe() -> Geometry:
    return Geometry(layers=4, d_model=256, heads=4, kv_heads=4, head_dim=64, ffn=1024,
                    vocab=1000, moe=MoEConfig(experts=8, top_k=2, expert_ffn=256,
                                              dense_layers=1))


def test_every_stack_states_a_source_and_typos_name_the_known_stacks() -> None:
    for name in known_stacks():
        assert get_stack(name).source
    with pytest.raises(MosaicInputError) as error:
        Workload(small_moe(), global_batch=8, seq_len=128, stack="megatron-cor")
    message = str(error.value)
    assert "megatron-cor" in message and "megatron-core" in message and "torchtitan" in message


def test_software_text_maps_to_a_stack_or_to_the_explicit_other() -> None:
    assert stack_for_software("MaxText v0.2 on A3 Mega").name == "jax-xla"
    assert stack_for_software("levanter (JAX)").name == "levanter"
    assert stack_for_software("my trainer").name == "other"
    assert get_stack("jax-xla").micro_batch_default is MicroBatchDefault.WHOLE_LOCAL_BATCH


def test_keywords_match_whole_words_not_parts_of_words() -> None:
    # 'accelerate' and 'trl' (hf-transformers) are parts of 'accelerated' and 'ctrl'
    assert stack_for_software("in-house trainer, CUDA-accelerated kernels").name == "other"
    assert stack_for_software("ctrl-lm trainer").name == "other"
    assert stack_for_software("accelerate launch + TRL").name == "hf-transformers"
    # phrases, and words ended by punctuation, digits or underscores still match
    assert stack_for_software("Hugging Face Transformers 4.57").name == "hf-transformers"
    assert stack_for_software("Megatron-LM core_r0.11").name == "megatron-core"
    assert stack_for_software("megatron_bridge main").name == "megatron-bridge"
    assert stack_for_software("MaxText (JAX/XLA)").name == "jax-xla"


SHARED_RUNS = Path(__file__).resolve().parents[2].parent / "shared" / "calibration" / (
    "published_runs.yaml")
EXTRA_RUNS = Path(__file__).resolve().parents[2] / "src" / "mosaic" / "evaluate" / "data" / (
    "extra_runs.yaml")


def _substring_stack(software: str | None) -> str:
    """The stack the keyword rule before whole-word matching gave: the first stack with a
    keyword anywhere in the case-folded text."""
    text = (software or "").casefold()
    for name in known_stacks():
        if any(keyword in text for keyword in get_stack(name).keywords):
            return name
    return "other"


@pytest.mark.parametrize("path", [SHARED_RUNS, EXTRA_RUNS], ids=["published", "extra"])
def test_every_record_keeps_the_stack_substring_matching_gave_it(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"run records not found at {path}")
    runs = yaml.safe_load(path.read_text())["runs"]
    changed = {run["id"]: (run.get("software"), _substring_stack(run.get("software")),
                           stack_for_software(run.get("software")).name)
               for run in runs
               if _substring_stack(run.get("software"))
               != stack_for_software(run.get("software")).name}
    assert len(runs) > 50 and changed == {}


def _gather_buffer_bytes(stack: str) -> float:
    workload = Workload(small_moe(), global_batch=16, seq_len=128, stack=stack)
    plans = single_plan(dp=8, ep=1, sharding=Sharding.FSDP)
    params: StageParameters = stage_parameters(workload.geometry, plans, "last")
    return float(communication_buffer_bytes(workload, plans, params, "last")[0]), params


def test_fp32_at_rest_gathers_twice_the_bytes_of_bf16() -> None:
    jax_bytes, params = _gather_buffer_bytes("jax-xla")
    torch_bytes, _ = _gather_buffer_bytes("torchtitan")
    gathered = float((params.largest_unit + params.largest_block)[0])
    # Two gathered units (current + prefetched) in 4 B instead of 2 B: 2 B/param more.
    assert jax_bytes - torch_bytes == pytest.approx(2 * gathered)


def _jax_fsdp_run(fsdp_moe_run: Callable[..., dict[str, Any]], global_seqs: int
                  ) -> dict[str, Any]:
    return fsdp_moe_run(global_seqs, id=f"jax-fsdp-{global_seqs}", software="MaxText (JAX/XLA)")


def test_whole_batch_fsdp_gathers_once_per_step_so_throughput_rises_with_batch(
        tmp_path: Path, fsdp_moe_run: Callable[..., dict[str, Any]]) -> None:
    batches = (256, 512, 1024)
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [_jax_fsdp_run(fsdp_moe_run, b) for b in batches]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        records = load_run_records(path).records
    assert len(records) == 3
    tokens_per_s = []
    for batch, record in zip(batches, records, strict=True):
        plan = record.plan.row(0)
        assert plan["micro_batch"] == batch // 256  # the whole local batch, one micro-batch
        assert any("whole local batch" in note for note in record.assumptions)
        machine = machine_for(record.cluster, record.workload.precision)
        prediction = predict_step(record.workload, record.plan, machine, default_calibration())
        tokens_per_s.append(float(prediction.tokens_per_s[0]))
    assert tokens_per_s[0] < tokens_per_s[1] < tokens_per_s[2]


def test_a_run_record_may_name_its_stack_and_a_typo_is_refused(
        tmp_path: Path, fsdp_moe_run: Callable[..., dict[str, Any]]) -> None:
    run = _jax_fsdp_run(fsdp_moe_run, 256)
    run.update(software="an in-house trainer", stack="torchtitan", stack_version="0.2.0")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        (record,) = load_run_records(path).records
        assert record.workload.stack == "torchtitan"
        run["stack"] = "torchtitn"
        path.write_text(yaml.safe_dump({"runs": [run]}))
        loaded = load_run_records(path)
    assert loaded.records == ()
    assert "torchtitan" in loaded.skipped[0][1]


def test_stack_names_ignore_case_and_a_typo_gets_the_closest_name():
    from mosaic.arch import ladder_geometry
    from mosaic.perf.workload import Workload
    from mosaic.stacks import get_stack

    assert get_stack("Megatron-Bridge").name == "megatron-bridge"
    workload = Workload(geometry=ladder_geometry(4), global_batch=8, seq_len=1024,
                        stack="TorchTitan")
    assert workload.stack == "torchtitan"  # the key calibration profiles use
    with pytest.raises(MosaicInputError, match="did you mean 'megatron-bridge'"):
        get_stack("megatron-brdge")


def test_an_entry_inherits_the_traits_it_does_not_state():
    from mosaic.stacks.registry import with_inherited_traits

    stacks = {"base": {"description": "b", "keywords": ["b"], "source": "s",
                       "dropless_host_sync": True, "unstated_recompute": "selective"},
              "child": {"description": "c", "keywords": ["c"], "source": "t",
                        "inherits": "base", "unstated_recompute": "full"}}
    child = with_inherited_traits(stacks)["child"]
    assert child == {"description": "c", "keywords": ["c"], "source": "t",
                     "dropless_host_sync": True, "unstated_recompute": "full"}
    with pytest.raises(MosaicInputError, match="inherits 'nope'"):
        with_inherited_traits({"child": {**stacks["child"], "inherits": "nope"}})


def test_a_bf16_gradient_reduce_is_refused_where_the_stack_has_none():
    """torchtitan's FSDP reduces in float32 only (training.mixed_precision_reduce
    Literal["float32"], config/job_config.py @ 1a36996b8): a job saying otherwise is one
    line, not a prediction of a setting the stack cannot run; Megatron-Core has it."""
    from mosaic.arch import ladder_geometry
    from mosaic.perf.workload import Workload

    moe = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
    with pytest.raises(MosaicInputError, match="reduces gradients in float32 only"):
        Workload(moe, 64, 4096, stack="torchtitan", grad_reduce_in_fp32=False)
    assert not Workload(moe, 64, 4096, stack="megatron-core",
                        grad_reduce_in_fp32=False).grad_reduce_in_fp32
