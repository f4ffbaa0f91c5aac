"""FP8 recipes (docs/evidence/fp8_recipes.md): one recipe per workload, resolved from the
input's precision or the stack's documented default (an assumption line when the input is
silent), and FP8 parameter gathers costed by hand: one byte per GEMM weight for per-tensor
FP8 weights, bf16 for MXFP8 weights (Megatron-Core gathers them in bf16 and re-quantises)."""

from copy import deepcopy
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mosaic.arch import count_parameters, ladder_geometry
from mosaic.config.job_schema import job_document, job_from_document, job_from_run_record
from mosaic.config.layout import FP8_RECIPE_NOTE, fp8_recipe_for
from mosaic.config.run_records import _validate_entry, run_record_from_entry
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.collectives import all_gather_time_s
from mosaic.perf.data_parallel_time import fsdp_unit_collectives_s, gradient_collectives_s
from mosaic.perf.element_bytes import ACTIVATION_BYTES
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import stage_parameters
from mosaic.perf.plan import Sharding, single_plan
from mosaic.perf.workload import Fp8Recipe, Workload, default_fp8_recipe, stated_fp8_recipe

H100 = Cluster(system=get_system("DGX-H100"), n_nodes=1)
RUNS = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"


def _record(software: str, precision: str):
    runs = yaml.safe_load(RUNS.read_text())["runs"]
    raw = deepcopy(next(r for r in runs if r["id"].startswith("example-bridge-qwen3")))
    raw.update(software=software, gpu="B200", precision=precision)
    return run_record_from_entry(_validate_entry(raw, "test"))


@pytest.mark.parametrize(("precision", "recipe"), [
    ("fp8-cs", Fp8Recipe.CURRENT), ("fp8-blockwise", Fp8Recipe.BLOCKWISE),
    ("mxfp8", Fp8Recipe.MXFP8), ("bf16", Fp8Recipe.NONE), ("fp16", Fp8Recipe.NONE),
    ("fp8", None),
])
def test_a_precision_name_states_its_recipe_or_leaves_it_to_the_stack(precision, recipe):
    assert stated_fp8_recipe(precision) == recipe


@pytest.mark.parametrize(("stack", "recipe", "why"), [
    ("megatron-core", Fp8Recipe.DELAYED, "megatron-core's default"),  # TransformerConfig
    ("megatron-bridge", Fp8Recipe.DELAYED, "megatron-bridge's default"),  # --fp8_recipe ds
    ("torchtitan", Fp8Recipe.CURRENT, "torchtitan's default"),  # torchao dynamic tensorwise
    ("llm-foundry", Fp8Recipe.DELAYED, "llm-foundry documents none"),  # assumed, said so
])
def test_plain_fp8_takes_the_stacks_documented_recipe_with_a_note(stack, recipe, why):
    notes: list[str] = []
    assert fp8_recipe_for("fp8", stack, notes) == recipe == default_fp8_recipe(stack)
    assert len(notes) == 1 and notes[0].startswith(FP8_RECIPE_NOTE) and why in notes[0]


def test_a_stated_recipe_needs_no_note():
    notes: list[str] = []
    assert fp8_recipe_for("mxfp8", "torchtitan", notes) is Fp8Recipe.MXFP8
    assert notes == []


def test_run_records_carry_the_recipe_and_say_when_it_is_assumed():
    record = _record("NeMo 25.11 container / Megatron-Bridge + Megatron-Core", "mxfp8")
    assert record.workload.fp8_recipe is Fp8Recipe.MXFP8
    assert not any(FP8_RECIPE_NOTE in line for line in record.assumptions)
    plain = _record("NeMo 25.11 container / Megatron-Bridge + Megatron-Core", "fp8")
    assert plain.workload.fp8_recipe is Fp8Recipe.DELAYED
    assert any(line.startswith(FP8_RECIPE_NOTE) for line in plain.assumptions)
    assert _record("Megatron-Bridge", "bf16").workload.fp8_recipe is Fp8Recipe.NONE


def test_a_job_keeps_its_recipe_through_its_canonical_document():
    record = _record("NeMo 25.11 container / Megatron-Bridge + Megatron-Core", "mxfp8")
    document = job_document(job_from_run_record(record))
    assert document["performance"]["precision"] == "fp8"
    assert document["performance"]["fp8_recipe"] == "mxfp8"
    assert job_from_document(document, "test").workload.fp8_recipe is Fp8Recipe.MXFP8
    mismatch = deepcopy(document)
    mismatch["performance"].update(precision="bf16")
    with pytest.raises(MosaicInputError, match="fp8_recipe 'mxfp8' does not fit"):
        job_from_document(mismatch, "test")


def test_the_recipe_is_resolved_once_on_the_workload():
    geometry = ladder_geometry(8)
    fp8 = Workload(geometry=geometry, global_batch=8, seq_len=4096, precision="fp8",
                   stack="torchtitan")
    assert fp8.fp8_recipe is Fp8Recipe.CURRENT
    bf16 = replace(fp8, precision="bf16")  # no FP8 GEMMs: no recipe
    assert bf16.fp8_recipe is Fp8Recipe.NONE
    assert replace(bf16, precision="fp8").fp8_recipe is Fp8Recipe.CURRENT
    stated = Workload(geometry=geometry, global_batch=8, seq_len=4096, precision="fp8",
                      fp8_recipe="mxfp8")
    assert stated.fp8_recipe is Fp8Recipe.MXFP8
    with pytest.raises(MosaicInputError, match="fp8_recipe 'blocky'"):
        Workload(geometry=geometry, global_batch=8, seq_len=4096, precision="fp8",
                 fp8_recipe="blocky")
    with pytest.raises(MosaicInputError, match="fp8_param_gather needs precision fp8"):
        Workload(geometry=geometry, global_batch=8, seq_len=4096, fp8_param_gather=True)


def _zero1_gather_s(workload: Workload) -> float:
    machine = machine_for(H100, str(workload.precision))
    plan = single_plan(dp=8, sharding=Sharding.ZERO1)
    return float(gradient_collectives_s(machine, workload, plan)["all_gather"][0])


@pytest.mark.parametrize(("recipe", "gemm_weight_bytes"), [
    (Fp8Recipe.DELAYED, 1), (Fp8Recipe.CURRENT, 1), (Fp8Recipe.BLOCKWISE, 1),
    (Fp8Recipe.MXFP8, 2),  # gathered in bf16 into the gradient buffer, re-quantised
])
def test_distributed_optimizer_gathers_fp8_weights_in_one_byte(recipe, gemm_weight_bytes):
    workload = Workload(geometry=ladder_geometry(8), global_batch=8, seq_len=4096,
                        precision="fp8", fp8_recipe=recipe, fp8_param_gather=True)
    plan = single_plan(dp=8, sharding=Sharding.ZERO1)
    params = stage_parameters(workload.geometry, plan, "last")
    # The block GEMMs' weights in their gather dtype; norms, embedding and LM head in bf16.
    gathered = (params.dense[0] * gemm_weight_bytes
                + (params.replicated[0] + params.vocab[0]) * ACTIVATION_BYTES)
    expected = all_gather_time_s(gathered, 8, 1, machine_for(H100, "fp8").interconnect)
    expected = expected.reshape(-1)
    assert _zero1_gather_s(workload) == pytest.approx(float(expected[0]), rel=1e-12)
    without = replace(workload, fp8_param_gather=False)
    bf16_bytes = (params.dense[0] + params.replicated[0] + params.vocab[0]) * ACTIVATION_BYTES
    assert _zero1_gather_s(without) == pytest.approx(float(all_gather_time_s(
        bf16_bytes, 8, 1, machine_for(H100, "fp8").interconnect)), rel=1e-12)
    assert (_zero1_gather_s(workload) < _zero1_gather_s(without)) == (gemm_weight_bytes == 1)


def test_float8_fsdp_all_gather_moves_one_byte_per_block_parameter():
    geometry = ladder_geometry(8)
    workload = Workload(geometry=geometry, global_batch=8, seq_len=4096, precision="fp8",
                        stack="torchtitan", fp8_param_gather=True)
    machine = machine_for(H100, "fp8")
    plan = single_plan(dp=8, sharding=Sharding.FSDP)
    counts = count_parameters(geometry)
    block = counts.attention_per_layer + counts.dense_ffn_per_layer + counts.norms_per_layer
    gather = fsdp_unit_collectives_s(machine, workload, plan)["unit_gather"][0]
    assert gather == pytest.approx(float(all_gather_time_s(
        block * 1, 8, 1, machine.interconnect)), rel=1e-12)
    bf16_gather = fsdp_unit_collectives_s(machine, replace(workload, fp8_param_gather=False),
                                           plan)["unit_gather"][0]
    assert bf16_gather == pytest.approx(float(all_gather_time_s(
        block * 2, 8, 1, machine.interconnect)), rel=1e-12)  # torchtitan: bf16 gathers


def test_mxfp8_needs_a_blackwell_device():
    # Transformer Engine's check_mxfp8_support: compute capability 10.0 or higher.
    with pytest.raises(MosaicInputError, match=r"mxfp8 needs a Blackwell GPU.*H100"):
        machine_for(H100, "fp8", fp8_recipe=Fp8Recipe.MXFP8)
    machine_for(H100, "fp8", fp8_recipe=Fp8Recipe.CURRENT)  # per-tensor FP8 runs on Hopper
    b200 = Cluster(system=get_system("DGX-B200"), n_nodes=1)
    assert machine_for(b200, "fp8", fp8_recipe=Fp8Recipe.MXFP8).device_name == "B200"
