"""`mosaic export`: FP8 recipes, routing, unstated architecture fields, the yaml target and
plan documents under any name, torchtitan stage splits and sharding.

Expected flags are written from the targets' own code, independently of the exporter:
Megatron-LM TransformerConfig.fp8_recipe Literal['tensorwise', 'delayed', 'mxfp8',
'blockwise'] and moe_expert_capacity_factor (None = dropless); Megatron-Bridge
mixed_precision.py recipe names (bf16_with_mxfp8_mixed sets fp8 'e4m3'; the subchannel recipe
sets fp8_param_gather False, the others True); torchtitan v0.2.2 converter names
(quantize.linear.float8 / .mx, quantize.grouped_mm.float8 / .mx); MaxText
QuantizationType te_fp8_delayedscaling / te_fp8_currentscaling / te_mxfp8.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.export_cmd import load_export_spec
from mosaic.cli.main import app
from mosaic.config.job_schema import is_plan_document, load_job
from mosaic.errors import MosaicInputError
from mosaic.export import TARGETS, ExportSpec, export
from mosaic.export.torchtitan import model_parts

from .test_export import parse_megatron

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "appendix_e.yaml"
QWEN3_RECORD = (f"{ROOT / 'examples' / 'runs_example.yaml'}"
                "#example-bridge-qwen3-30b-a3b-b200-8-mxfp8")
runner = CliRunner()


def job(*overrides: str) -> ExportSpec:
    return load_export_spec(JOB, list(overrides), None)


# --- 1. FP8 recipes ----------------------------------------------------------------------
# recipe -> (Megatron --fp8-recipe, --fp8-format, Bridge recipe, MaxText quantization)
RECIPES = {
    "delayed": ("delayed", "hybrid", "bf16_with_fp8_delayed_scaling_mixed",
                "te_fp8_delayedscaling"),
    "current": ("tensorwise", "hybrid", "bf16_with_fp8_current_scaling_mixed",
                "te_fp8_currentscaling"),
    "blockwise": ("blockwise", "hybrid", "bf16_with_fp8_subchannel_scaling_mixed",
                  "te_fp8_currentscaling"),  # MaxText has no TE blockwise recipe: flagged
    "mxfp8": ("mxfp8", "e4m3", "bf16_with_mxfp8_mixed", "te_mxfp8"),
}


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_each_fp8_recipe_reaches_each_target(recipe):
    # (pp 1: torchtitan's float8 expert converter is written only without pipelining)
    spec = job("performance.precision=fp8", f"performance.fp8_recipe={recipe}",
               "parallelism.pp=1")
    megatron_recipe, fp8_format, bridge, maxtext = RECIPES[recipe]
    a = parse_megatron(export(spec, "megatron").text)
    assert (a.fp8_recipe, a.fp8_format, a.bf16) == (megatron_recipe, fp8_format, True)
    mixed = yaml.safe_load(export(spec, "nemo").text)["mixed_precision"]
    # the name where it carries the job's settings, else its fields with the job's own
    assert mixed == bridge or (mixed["fp8"], mixed["fp8_recipe"]) == (fp8_format,
                                                                      megatron_recipe)
    if recipe == "current":  # mosaic costs every block in FP8, as the perf scripts run it
        assert mixed["first_last_layers_bf16"] is False
    if isinstance(mixed, dict):
        # every field stated: a recipe holding its own config object is merged key by key
        from mosaic.export.nemo import MIXED_PRECISION_DEFAULTS

        assert set(MIXED_PRECISION_DEFAULTS) <= set(mixed)
        # Megatron-LM's DDP config asserts fp8_param_gather under the MXFP8 buffer reuse
        assert not mixed["reuse_grad_buf_for_mxfp8_param_ag"] or mixed["fp8_param_gather"]
        assert mixed["fp8_param"] == mixed["fp8_param_gather"]
    if recipe == "delayed":  # MaxText's validation refuses it with accumulation (a trial)
        assert export(spec, "yaml").text  # the job itself is fine
        with pytest.raises(MosaicInputError, match="not compatible with gradient accumulation"):
            export(spec, "maxtext")
    else:
        assert yaml.safe_load(export(spec, "maxtext").text)["quantization"] == maxtext
    titan = export(spec, "torchtitan")
    doc = tomllib.loads(titan.text)
    if recipe == "mxfp8":
        assert doc["model"]["converters"] == ["quantize.linear.mx", "quantize.grouped_mm.mx"]
        assert doc["quantize"]["grouped_mm"]["mx"] == {"recipe_name": "mxfp8",
                                                       "fqns": ["experts"]}
    else:
        assert doc["model"]["converters"] == ["quantize.linear.float8",
                                              "quantize.grouped_mm.float8"]
        assert doc["quantize"]["grouped_mm"]["float8"]["fqns"] == ["experts"]
        expected_name = "rowwise" if recipe == "blockwise" else None  # None = tensorwise
        assert doc["quantize"]["linear"]["float8"].get("recipe_name") == expected_name
    flagged = {"delayed": "fp8 recipe delayed", "blockwise": "fp8 recipe blockwise"}
    if recipe in flagged:
        assert any(n.startswith(flagged[recipe]) for n in titan.unsupported)
    if recipe != "delayed":  # (refused above)
        assert (recipe == "blockwise") == any(n.startswith("fp8 recipe blockwise")
                                              for n in export(spec, "maxtext").unsupported)


def test_mxfp8_and_fp8_exports_differ_as_in_the_trial():
    """The trial's repro: megatron-bridge with mxfp8 was byte-identical to fp8."""
    common = ("performance.stack=megatron-bridge",)
    mx = export(job(*common, "performance.precision=mxfp8"), "megatron").text
    fp8 = export(job(*common, "performance.precision=fp8"), "megatron").text
    assert mx != fp8
    assert parse_megatron(mx).fp8_recipe == "mxfp8"
    assert parse_megatron(fp8).fp8_recipe == "delayed"  # megatron-core's default (stack trait)
    assert "fp8 (recipe mxfp8)" in mx.splitlines()[3]


def test_fp8_parameter_gathers():
    spec = job("performance.precision=fp8", "performance.fp8_recipe=current",
               "performance.fp8_param_gather=true")
    assert parse_megatron(export(spec, "megatron").text).fp8_param_gather
    linear = tomllib.loads(export(spec, "torchtitan").text)["quantize"]["linear"]["float8"]
    assert linear["enable_fsdp_float8_all_gather"] is True
    assert not any("fp8_param_gather" in n for n in export(spec, "nemo").unsupported)
    off = job("performance.precision=fp8", "performance.fp8_recipe=current")
    assert not parse_megatron(export(off, "megatron").text).fp8_param_gather
    # the Bridge current-scaling recipe gathers in FP8: the job's 'no' is written
    mixed = yaml.safe_load(export(off, "nemo").text)["mixed_precision"]
    assert (mixed["fp8_recipe"], mixed["fp8_param_gather"]) == ("tensorwise", False)
    # the subchannel recipe does not gather in FP8: the job's 'yes' is written
    block = job("performance.precision=fp8", "performance.fp8_recipe=blockwise",
                "performance.fp8_param_gather=true")
    mixed = yaml.safe_load(export(block, "nemo").text)["mixed_precision"]
    assert (mixed["fp8_recipe"], mixed["fp8_param_gather"]) == ("blockwise", True)
    assert not any("fp8_param_gather" in n for n in export(block, "nemo").unsupported)
    bf16 = parse_megatron(export(job(), "megatron").text)
    assert (bf16.fp8_format, bf16.fp8_recipe, bf16.fp8_param_gather) == (None, None, False)


# --- 2. architecture fields the source did not state -------------------------------------
def test_a_record_without_model_norm_says_layernorm_was_assumed():
    result = runner.invoke(app, ["export", QWEN3_RECORD, "--to", "megatron"])
    assert result.exit_code == 0, result.output
    a = parse_megatron(result.stdout)
    assert a.normalization == "LayerNorm" and not a.qk_layernorm  # not invented ...
    header = [line for line in result.stdout.splitlines() if line.startswith("# ASSUMED")]
    assert any("model.norm not stated: layernorm assumed" in line
               and "set model.norm if the model differs" in line for line in header)
    assert any("model.qk_norm false written" in line for line in header)
    # ... and said on stderr too
    assert "warning: ASSUMED (not stated in" in result.stderr
    assert "model.norm not stated" in result.stderr


def test_stating_the_norm_exports_it_without_the_warning():
    result = runner.invoke(app, ["export", QWEN3_RECORD, "--to", "megatron", "--set",
                                 "model.norm=rmsnorm", "--set", "model.qk_norm=true"])
    assert result.exit_code == 0, result.output
    a = parse_megatron(result.stdout)
    assert a.normalization == "RMSNorm" and a.qk_layernorm
    assert "model.norm not stated" not in result.output
    nemo = yaml.safe_load(runner.invoke(app, ["export", QWEN3_RECORD, "--to", "nemo", "--set",
                                              "model.norm=rmsnorm", "--set",
                                              "model.qk_norm=true"]).stdout)["model"]
    assert (nemo["normalization"], nemo["qk_layernorm"]) == ("RMSNorm", True)


# --- 3. routing ---------------------------------------------------------------------------
def test_dropless_writes_no_capacity_factor_anywhere():
    spec = job("performance.routing=dropless")  # the listing states capacity_factor 1.0
    assert parse_megatron(export(spec, "megatron").text).moe_expert_capacity_factor is None
    nemo = yaml.safe_load(export(spec, "nemo").text)["model"]
    # stated dropless (None), so a recipe's capacity factor does not stay under the merge
    assert nemo["moe_expert_capacity_factor"] is None
    assert nemo["moe_pad_expert_input_to_capacity"] is False
    maxtext = yaml.safe_load(export(spec, "maxtext").text)
    assert (maxtext["capacity_factor"], maxtext["sparse_matmul"]) == (-1.0, True)
    for target in ("megatron", "nemo", "torchtitan", "maxtext"):
        assert any(n.startswith("model.moe.capacity_factor 1 not written: routing is dropless")
                   for n in export(spec, target).unsupported), target


def test_token_drop_writes_the_capacity_factor_and_padding():
    spec = job("performance.routing=token_drop", "performance.pad_to_capacity=true")
    a = parse_megatron(export(spec, "megatron").text)
    assert a.moe_expert_capacity_factor == 1.0 and a.moe_pad_expert_input_to_capacity
    nemo = yaml.safe_load(export(spec, "nemo").text)["model"]
    assert nemo["moe_expert_capacity_factor"] == 1.0
    assert nemo["moe_pad_expert_input_to_capacity"] is True
    # MaxText drops only on its dense (einsum, capacity-padded) path
    maxtext = yaml.safe_load(export(spec, "maxtext").text)
    assert (maxtext["capacity_factor"], maxtext["sparse_matmul"], maxtext["megablox"]) == \
        (1.0, False, False)
    assert "token_drop routing (capacity factor 1, padded): torchtitan's MoE routes dropless" \
        in export(spec, "torchtitan").unsupported
    unpadded = parse_megatron(export(job("performance.routing=token_drop"), "megatron").text)
    assert unpadded.moe_expert_capacity_factor == 1.0
    assert not unpadded.moe_pad_expert_input_to_capacity
    # MaxText's capacity is per sequence (layers/moe.py generate_masks), Megatron's per
    # micro-batch: said where the micro-batch holds more than one sequence
    for micro_seqs, said in ((2, True), (1, False)):
        notes = export(job("performance.routing=token_drop", "performance.pad_to_capacity=true",
                           f"batch.micro_seqs={micro_seqs}"), "maxtext").unsupported
        assert any(n.startswith("token_drop capacity: MaxText caps each sequence")
                   for n in notes) is said, micro_seqs


# --- 4. one target list; the yaml target ------------------------------------------------
def test_yaml_is_a_target_of_the_library_and_the_cli(tmp_path):
    assert "yaml" in TARGETS
    out = tmp_path / "job.yaml"
    result = runner.invoke(app, ["export", str(JOB), "--to", "yaml", "--out", str(out),
                                 "--set", "performance.routing=token_drop"])
    assert result.exit_code == 0, result.output
    source, again = load_job(JOB, ["performance.routing=token_drop"]), load_job(out)
    assert again.plan.row(0) == source.plan.row(0)
    assert again.workload == source.workload


# --- 5. plan documents are told by content ----------------------------------------------
@pytest.fixture(scope="module")
def plan_out(tmp_path_factory, small_plan_text) -> Path:
    path = tmp_path_factory.mktemp("plan") / "default.out"  # not a .json name
    path.write_text(small_plan_text)
    return path


def test_a_plan_saved_under_another_name_exports(plan_out):
    assert is_plan_document(json.loads(plan_out.read_text()))
    result = runner.invoke(app, ["export", str(plan_out), "--to", "megatron"])
    assert result.exit_code == 0, result.output
    optimum = json.loads(plan_out.read_text())["optimum"]
    assert parse_megatron(result.stdout).num_layers == optimum["layers"]


@pytest.mark.parametrize("command", ["perf", "layouts", "explain"])
def test_job_commands_refuse_a_plan_in_one_line(plan_out, command):
    result = runner.invoke(app, [command, str(plan_out)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "a plan (`mosaic plan --json` output), not a job file" in result.output
    assert f"mosaic export {plan_out} --to yaml" in result.output
    # a candidate's reference is kept in the advice (a trial's #2 was sent to #1's export)
    second = runner.invoke(app, [command, f"{plan_out}#2"])
    assert second.exit_code == 2
    assert f"write candidate #2's job with `mosaic export {plan_out}#2 --to yaml" in \
        second.output


def test_a_plans_job_file_predicts_the_plans_optimum(plan_out, tmp_path):
    job_file = tmp_path / "job.yaml"
    result = runner.invoke(app, ["export", str(plan_out), "--to", "yaml", "--out",
                                 str(job_file)])
    assert result.exit_code == 0, result.output
    perf = runner.invoke(app, ["perf", str(job_file), "--json"])
    assert perf.exit_code == 0, perf.output
    optimum = json.loads(plan_out.read_text())["optimum"]
    assert json.loads(perf.stdout)["step_time_s"] == pytest.approx(optimum["step_time_s"],
                                                                   rel=1e-9)


# --- 6. torchtitan stage split and sharding -----------------------------------------------
def titan_spec(layers: int, pp: int, vpp: int, sharding: str = "fsdp",
               stack: str = "torchtitan") -> ExportSpec:
    base = job()
    return ExportSpec(geometry=dataclasses.replace(base.geometry, layers=layers), tp=1, pp=pp,
                      vpp=vpp, cp=1, dp=4, ep=1, etp=1, micro_seqs=1, global_seqs=64,
                      seq_len=2048, sharding=sharding, stack=stack, source="t")


def test_torchtitan_stage_split_when_no_layers_per_stage_fits():
    # The split mosaic costs is even: the embedding and the head weigh no layers
    # (pipeline_parallel_first/last_stage_less_layers 0; torchtitan's default 1 gives the end
    # stages a layer fewer: Appendix E's 48 layers on pp 16 became 3,4,3,...,3,2).
    # 64 blocks on pp 8 x vpp 8 = 64 stages: one block a stage
    even = tomllib.loads(export(titan_spec(64, 8, 8), "torchtitan").text)["parallelism"]
    assert (even["pipeline_parallel_first_stage_less_layers"],
            even["pipeline_parallel_last_stage_less_layers"],
            even["pipeline_parallel_layers_per_stage"]) == (0, 0, 1)
    # 9 blocks on pp 2 x vpp 3 = 6 stages: ceil(9 / n) never gives 6, so the parts are
    # listed, the embedding first and the head last, in torchtitan's own split (floor(9/6)
    # a part, the first 9 % 6 one more: generate_llm_fqn_per_model_part), the one costed
    result = export(titan_spec(9, 2, 3), "torchtitan")
    parallelism = tomllib.loads(result.text)["parallelism"]
    parts = parallelism["module_fqns_per_model_part"]
    assert "pipeline_parallel_layers_per_stage" not in parallelism
    assert len(parts) == 6 and parts[0][0] == "tok_embeddings" and parts[-1][-1] == "output"
    assert [len([m for m in p if m.startswith("layers.")]) for p in parts] == [2, 2, 2, 1, 1, 1]
    assert not any("pipeline stages" in n for n in result.unsupported)
    # a split that accounts for the embedding and the loss keeps torchtitan's weights of 1:
    # 64 blocks on 64 stages, ceil((64 + 2) / n) never gives 64: parts listed
    weighted = dataclasses.replace(titan_spec(64, 8, 8), vocab_in_pipeline_split=True)
    listed = tomllib.loads(export(weighted, "torchtitan").text)["parallelism"]
    assert listed["pipeline_parallel_first_stage_less_layers"] == 1
    assert len(listed["module_fqns_per_model_part"]) == 64
    # 32 blocks on pp 4 x vpp 2 with the weights: ceil(34 / n) never gives 8, but 2 stages
    # per rank is torchtitan's own default for an interleaved schedule: nothing to write
    default = tomllib.loads(export(dataclasses.replace(
        titan_spec(32, 4, 2), vocab_in_pipeline_split=True), "torchtitan").text)["parallelism"]
    assert default["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert not {"pipeline_parallel_layers_per_stage", "module_fqns_per_model_part"} & set(
        default)
    # a Megatron-Core plan of 61 blocks on pp 8 was costed with ceil(61/8) = 8 a stage, the
    # last holding 5; torchtitan's own split would run 8,8,8,8,8,7,7,7: the parts are listed
    megatron = tomllib.loads(export(titan_spec(61, 8, 1, stack="megatron-core"),
                                    "torchtitan").text)["parallelism"]
    assert [sum(m.startswith("layers.") for m in p)
            for p in megatron["module_fqns_per_model_part"]] == [8] * 7 + [5]
    assert model_parts([2, 1])[0] == ["tok_embeddings", "layers.0", "layers.1"]
    # more stages than blocks cannot be split: said in words
    crowded = export(titan_spec(8, 4, 4), "torchtitan")
    assert "pp 4 x vpp 4 = 16 virtual pipeline stages for 8 transformer blocks: more stages " \
        "than blocks" in crowded.unsupported


def test_torchtitan_sharding_notes():
    zero2 = export(titan_spec(48, 1, 1, "zero2"), "torchtitan")
    assert tomllib.loads(zero2.text)["parallelism"]["fsdp_reshard_after_forward"] == "never"
    assert any(n.startswith("zero2 is not a torchtitan mode (FSDP2 only)")
               for n in zero2.unsupported)
    assert not any("zero" in n for n in export(titan_spec(48, 1, 1), "torchtitan").unsupported)
    # a stack whose registry lists its modes (paper-nemo: zero1 only) flags another
    other = export(titan_spec(48, 1, 1, "fsdp", stack="paper-nemo"), "torchtitan")
    assert "sharding fsdp is not among stack paper-nemo's modes (zero1)" in other.unsupported


def test_a_release_plans_job_file_keeps_its_recipe_settings(tmp_path):
    """A plan under Megatron-Bridge 26.06 NVFP4 recipes (FP4 parameter gathers, bf16
    gradient reduce, TE loss) exports a job file that predicts its optimum exactly: the
    envelope's workload-wide settings travel with it."""
    plan_file, job_file = tmp_path / "plan.json", tmp_path / "job.yaml"
    planned = runner.invoke(app, ["plan", "--gpu", "GB200", "--nodes", "4", "--q", "6",
                                  "--experts", "8", "--top-k", "1", "--split-factor", "1",
                                  "--stack", "megatron-bridge", "--stack-version", "26.06",
                                  "--precision", "nvfp4", "--json"])
    assert planned.exit_code == 0, planned.output
    plan_file.write_text(planned.stdout)
    envelope = json.loads(planned.stdout)["envelope"]
    assert envelope["precision"] == "fp4" and envelope["fp4_param_gather"] is True
    assert envelope["grad_reduce_in_fp32"] is False
    result = runner.invoke(app, ["export", str(plan_file), "--to", "yaml", "--out",
                                 str(job_file)])
    assert result.exit_code == 0, result.output
    performance = yaml.safe_load(job_file.read_text())["performance"]
    assert performance["precision"] == "nvfp4" and performance["fp4_param_gather"] is True
    perf = runner.invoke(app, ["perf", str(job_file), "--json"])
    assert perf.exit_code == 0, perf.output
    optimum = json.loads(planned.stdout)["optimum"]
    assert json.loads(perf.stdout)["step_time_s"] == pytest.approx(optimum["step_time_s"],
                                                                   rel=1e-9)


def test_an_mxfp8_plan_exports_its_recipe(tmp_path):
    """The envelope's fp8_recipe is the recipe the plan ran: the job file and the launch
    flags keep it (they used to fall back to the stack's default, delayed)."""
    planned = runner.invoke(app, ["plan", "--gpu", "B200", "--nodes", "4", "--q", "6",
                                  "--experts", "8", "--top-k", "1", "--split-factor", "1",
                                  "--precision", "mxfp8", "--json"])
    assert planned.exit_code == 0, planned.output
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.stdout)
    job = runner.invoke(app, ["export", str(plan_file), "--to", "yaml"])
    assert job.exit_code == 0, job.output
    assert yaml.safe_load(job.stdout)["performance"]["fp8_recipe"] == "mxfp8"
    flags = runner.invoke(app, ["export", str(plan_file), "--to", "megatron"]).stdout
    assert "--fp8-recipe mxfp8" in flags and "not stated in the plan" not in flags


def test_an_fp16_job_states_the_fp32_gradient_reduce_it_was_costed_with():
    """fp16_mixed sets grad_reduce_in_fp32 false, while a default fp16 job is costed with
    fp32 gradient buffers (a review: 63.7 GiB against 53.9 GiB): the file says true."""
    mixed = yaml.safe_load(export(job("performance.precision=fp16"), "nemo").text)[
        "mixed_precision"]
    assert (mixed["fp16"], mixed["grad_reduce_in_fp32"]) == (True, True)
    bf16_reduce = job("performance.precision=fp16", "performance.grad_reduce_in_fp32=false")
    assert yaml.safe_load(export(bf16_reduce, "nemo").text)["mixed_precision"] == "fp16_mixed"
