"""`mosaic plan --balanced-pipeline`: every pipelined layout of every candidate is split by
the balanced Megatron layout `mosaic layouts --balanced-pipeline` uses, the optimum carries
its layout string, and the export of that optimum predicts the same step again."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.arch.hf_import import geometry_from_hf_config
from mosaic.cli.main import app
from mosaic.config.job_schema import load_job
from mosaic.evaluate.job import predict_job
from mosaic.export import export, spec_from_plan_document
from mosaic.perf.layouts import LayoutLimits, best_layout, with_balanced_layouts
from mosaic.perf.machine import machine_for
from mosaic.perf.pipeline_layout import balanced_layout, layout_for
from mosaic.perf.workload import Precision
from mosaic.plan import Envelope, SearchSpace, resolve_system, search
from mosaic.plan.search import candidate_workload

# A DeepSeek-V3-shaped toy: MLA, one shared expert, a dense first block and one MTP module;
# 6 blocks, so a 4-stage pipeline cannot split the blocks evenly but 6 + 2 + 1 = 9 slots
# spread 3/2/2/2 over four chunks.
TOY_V3 = {"model_type": "deepseek_v3", "hidden_size": 512, "intermediate_size": 1536,
          "moe_intermediate_size": 256, "num_hidden_layers": 6, "num_attention_heads": 8,
          "num_key_value_heads": 8, "q_lora_rank": 192, "kv_lora_rank": 128,
          "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
          "n_routed_experts": 16, "n_shared_experts": 1, "num_experts_per_tok": 2,
          "first_k_dense_replace": 1, "num_nextn_predict_layers": 1, "vocab_size": 32000,
          "tie_word_embeddings": False}
PIPELINED = LayoutLimits(pp=(4,), vpp=(1,), micro_batches=(1,), sharding=("zero1",),
                         checkpointing=("none",))


def _envelope(balanced: bool) -> Envelope:
    return Envelope(resolve_system("B200"), n_nodes=1, days=0.05, global_batch=64,
                    precision=Precision.BF16, stack="megatron-bridge",
                    balanced_pipeline=balanced)


def _space() -> SearchSpace:
    toy = geometry_from_hf_config(TOY_V3)
    return SearchSpace(backbone=toy, layers=(6,), d_model=(512,), experts=(16,), top_k=(2,),
                       split_factor=(6,), s_min=0.0, tpp_min=1.0, tpp_max=1e6)


def test_the_balanced_layout_of_the_toy_by_hand():
    """9 slots over 4 chunks: floor 2 each, one extra; the last chunk holds the MTP module
    and the loss (Megatron-Core requires them together) with no block, the first chunk the
    embedding and one block, the extra slot goes to the second chunk."""
    assert balanced_layout(6, 1, 4, 1) == "Et|t*3|tt|mL"


def test_candidate_workload_carries_a_balanced_layout_only_when_asked(law, calibration):
    grid = _space().enumerate()
    plain = candidate_workload(_envelope(False), grid, 0, PIPELINED)
    balanced = candidate_workload(_envelope(True), grid, 0, PIPELINED)
    assert plain.pipeline_layouts == ()
    assert layout_for(balanced.pipeline_layouts, 4, 1).text == "Et|t*3|tt|mL"
    # the same workload `mosaic layouts --balanced-pipeline` searches
    assert balanced == with_balanced_layouts(plain, 8, PIPELINED)


def test_the_planned_optimum_is_the_layout_search_of_its_workload(law, calibration):
    """Four stages cannot split 6 blocks evenly, so Megatron's default split has no layout;
    the balanced one has, and the planner's best is the layout search's best for the same
    workload."""
    result = search(_envelope(True), _space(), law, calibration, limits=PIPELINED, workers=1)
    default = search(_envelope(False), _space(), law, calibration, limits=PIPELINED,
                     workers=1)
    assert default.optimum_index is None and "must divide layers=6" in default.reasons[0]
    row = result.optimum_index
    assert row is not None
    plan = result.throughput.plans[row]
    assert plan["pp"] == 4 and plan["pipeline_layout"] == "Et|t*3|tt|mL"
    workload = candidate_workload(_envelope(True), result.grid, row, PIPELINED)
    machine = machine_for(_envelope(True).cluster, Precision.BF16,
                          _envelope(True).usable_memory_fraction)
    found = best_layout(workload, machine, calibration, PIPELINED)
    assert found is not None
    assert float(found[1].step_time_s[0]) == pytest.approx(
        float(result.throughput.step_time_s[row]), rel=1e-12)


def test_two_stages_split_nine_slots_four_and_five(law, calibration):
    """On two stages the default split gives each 3 blocks (the embedding on the first, the
    MTP module and the loss on the last); the balanced one counts them as slots: 5 and 4
    (Et*4|ttmL), another step time."""
    limits = LayoutLimits(pp=(2,), vpp=(1,), micro_batches=(1,), sharding=("zero1",),
                          checkpointing=("none",))
    result = search(_envelope(True), _space(), law, calibration, limits=limits, workers=1)
    default = search(_envelope(False), _space(), law, calibration, limits=limits, workers=1)
    assert result.optimum_index == default.optimum_index == 0
    assert result.throughput.plans[0]["pipeline_layout"] == "Et*4|ttmL"
    assert "pipeline_layout" not in default.throughput.plans[0]
    assert float(default.throughput.step_time_s[0]) != pytest.approx(
        float(result.throughput.step_time_s[0]), rel=1e-6)


def test_cli_plan_exports_its_layout_and_predicts_the_same_step(tmp_path):
    """`plan --balanced-pipeline --json` -> the optimum's job file -> `perf`: the same step
    time; the Megatron export writes the layout flag (and no separate vpp flag)."""
    config = tmp_path / "toy.json"
    config.write_text(json.dumps(TOY_V3))
    args = ["plan", "--backbone", str(config), "--nodes", "1", "--gpu", "B200", "--days",
            "0.05", "--global-batch", "64", "--tpp", "1:1000000", "--s-min", "0",
            "--stack", "megatron-bridge", "--workers", "1", "--balanced-pipeline", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert document["envelope"]["balanced_pipeline"] is True
    optimum = document["optimum"]
    spec = spec_from_plan_document(document, "plan.json")
    if optimum["plan"]["pp"] > 1:  # the planner may prefer no pipeline on one node
        assert spec.pipeline_layout == optimum["parallelism"]["pipeline_layout"]
        assert "--pipeline-model-parallel-layout" in export(spec, "megatron").text
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(spec.job))
    prediction = predict_job(load_job(job), calibration=_shipped())
    assert float(prediction.prediction.step_time_s[0]) == pytest.approx(
        optimum["step_time_s"], rel=1e-9)


def test_a_pipelined_optimum_exports_its_layout(tmp_path, law, calibration):
    """Pinned to four stages through the library, the optimum's parallelism block states its
    balanced layout and the job file it exports reloads to that layout."""
    result = search(_envelope(True), _space(), law, calibration, limits=PIPELINED, workers=1)
    candidate = result.candidate(int(result.optimum_index))
    assert candidate["parallelism"]["pipeline_layout"] == "Et|t*3|tt|mL"
    document = {"optimum": candidate, "envelope": result.envelope.to_dict()}
    spec = spec_from_plan_document(document, "plan.json")
    assert spec.pipeline_layout == "Et|t*3|tt|mL"
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(spec.job))
    reloaded = load_job(job)
    assert layout_for(reloaded.workload.pipeline_layouts, 4, 1).text == "Et|t*3|tt|mL"
    prediction = predict_job(reloaded, calibration)
    assert float(prediction.prediction.step_time_s[0]) == pytest.approx(
        candidate["step_time_s"], rel=1e-9)


def _shipped():
    from mosaic.perf.calibration import load_calibration

    return load_calibration(None)


def test_a_stack_without_megatrons_layout_flag_is_refused_before_the_search():
    from mosaic.errors import MosaicInputError

    with pytest.raises(MosaicInputError, match="stack torchtitan does not take"):
        Envelope(resolve_system("B200"), n_nodes=1, days=0.05, global_batch=64,
                 stack="torchtitan", balanced_pipeline=True)


def test_the_plans_report_and_printout_name_the_layout(law, calibration, capsys):
    """The optimum's step document (the HTML report's chosen layout) and the printed optimum
    carry the balanced layout string; the printed envelope names the split."""
    from mosaic.cli.plan_render import print_envelope, print_optimum
    from mosaic.plan.cost import run_cost
    from mosaic.report.html.documents import optimum_step_document

    result = search(_envelope(True), _space(), law, calibration, limits=PIPELINED, workers=1)
    step = optimum_step_document(result, calibration)  # the limits the search ran under
    assert step is not None and step["plan"]["pipeline_layout"] == "Et|t*3|tt|mL"
    print_optimum(result.candidate(int(result.optimum_index)))
    print_envelope(result, run_cost(result.envelope, None))
    out = capsys.readouterr().out
    assert "Et|t*3|tt|mL" in out and "balanced Megatron layouts" in out


def test_balanced_pipeline_with_pp_pinned_to_one_is_refused_before_the_search():
    """--pp 1 leaves no pipelined layout for --balanced-pipeline to split: the plan was the
    one without the flag, and said nothing of it."""
    result = CliRunner().invoke(app, ["plan", "--balanced-pipeline", "--pp", "1", "--q", "8",
                                      "--experts", "64", "--top-k", "8", "--split-factor", "8",
                                      "--nodes", "4", "--workers", "1", "--stack",
                                      "megatron-core"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: --balanced-pipeline splits a pipeline, and pp is pinned to 1 (no layout "
        "searched has one): allow pp > 1, or drop --balanced-pipeline")


@pytest.mark.parametrize(("stack", "limits", "split"), [
    ("hf-transformers", LayoutLimits(), "none: stack hf-transformers runs no pipeline (pp 1)"),
    ("megatron-core", LayoutLimits(pp=1), "none: pp pinned to 1"),
    ("megatron-core", LayoutLimits(), "Megatron's default: whole blocks per stage"),
])
def test_the_printed_split_is_none_where_no_layout_searched_has_a_pipeline(
        stack, limits, split, law, calibration, capsys):
    """A stack that runs no pipeline (layout_pp [1]) or a search pinned to pp 1 splits no
    blocks over stages: the envelope says so rather than naming Megatron's default split
    (a trial read it on hf-transformers)."""
    from mosaic.cli.plan_render import print_envelope
    from mosaic.plan.cost import run_cost

    envelope = Envelope(resolve_system("B200"), n_nodes=1, days=0.05, global_batch=64,
                        precision=Precision.BF16, stack=stack)
    result = search(envelope, _space(), law, calibration,
                    limits=replace(limits, micro_batches=(1,), sharding=("fsdp",),
                                   checkpointing=("full",)), workers=1)
    print_envelope(result, run_cost(result.envelope, None))
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if "pipeline split" in line)
    assert split in row
    assert ("Megatron" in row) == split.startswith("Megatron")
    # no EP dispatcher either where the stack offers ep 1 only (hf-transformers)
    dispatcher = next(line for line in lines if "precision / dispatcher" in line)
    assert ("alltoall" in dispatcher) == (stack != "hf-transformers")


@pytest.mark.parametrize(("stack", "owner", "uneven"), [
    ("megatron-core", "Megatron's default", "puts the short chunk last"),
    ("torchtitan", "torchtitan's default", "gives the first L mod (pp·vpp) chunks one block more"),
    ("nemo-automodel", "nemo-automodel's default",
     "gives the first L mod (pp·vpp) chunks one block more"),
])
def test_the_printed_split_is_the_stacks_own(stack, owner, uneven):
    """The split line names the stack's own cut (trait uneven_stage_split): torchtitan and
    NeMo AutoModel give the first stages the extra blocks, not Megatron's default (a review
    read "Megatron's default" on torchtitan)."""
    from mosaic.cli.plan_render import _pipeline_split_text

    envelope = Envelope(resolve_system("B200"), n_nodes=1, stack=stack)
    text = _pipeline_split_text(envelope, LayoutLimits())
    assert text.startswith(owner) and uneven in text
    assert ("Megatron" in text) == (stack == "megatron-core")


@pytest.mark.parametrize(("stack", "limits", "dispatcher"), [
    ("hf-transformers", LayoutLimits(),
     "none (ep 1: stack hf-transformers offers no expert parallelism)"),
    ("megatron-core", LayoutLimits(ep=1), "none (ep pinned to 1)"),
    ("megatron-core", LayoutLimits(ep=(1, 2)), "alltoall"),
    ("megatron-core", LayoutLimits(), "alltoall"),
])
def test_the_printed_dispatcher_is_none_where_no_layout_searched_has_ep(stack, limits,
                                                                       dispatcher):
    """No layout searched dispatches tokens where the stack offers ep 1 only (trait
    layout_ep) or ep is pinned to 1: the envelope names no dispatcher there (a trial read
    "bf16 / alltoall" on hf-transformers, which offers ep 1 only)."""
    from mosaic.cli.plan_render import _dispatcher_text

    envelope = Envelope(resolve_system("H100"), n_nodes=8, stack=stack)
    assert _dispatcher_text(envelope, limits) == dispatcher
