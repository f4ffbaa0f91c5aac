"""One schema for jobs, run records, plan results and exports (issue 10, section 1).

A run record loads to the same workload, layout and prediction in every command that takes
it (validate, perf, layouts, explain, compare, export); a job written as a run record and
back exports the same launch config; older spellings load with one deprecation warning
per file; the paper's Appendix E listing loads without one.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.arch.hf_import import load_hf_config
from mosaic.cli.main import app
from mosaic.config.blocks import ModelBlock
from mosaic.config.convert import geometry_from_model, model_document
from mosaic.config.job_schema import (
    _load_run_record_job,
    job_document,
    job_from_document,
    load_job,
)
from mosaic.config.record_entry import run_record_entry
from mosaic.config.run_records import load_run_records
from mosaic.config.spelling import (
    JOB_RULES,
    MosaicDeprecationWarning,
    Rename,
    _lookup,
    _with,
    _without,
)
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import predict_job
from mosaic.evaluate.record_settings import (
    apply_record_settings,
    record_settings,
    with_record_settings,
)
from mosaic.evaluate.validation_report import predict_runs
from mosaic.export import TARGETS, export, spec_from_job
from mosaic.export.targets import HYBRID_TARGETS
from mosaic.perf.calibration import load_calibration
from mosaic.schema_validation import load_yaml_mapping

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RUNS_EXAMPLE = EXAMPLES / "runs_example.yaml"
EXTRA_RUNS = Path(str(resources.files("mosaic.evaluate") / "data" / "extra_runs.yaml"))
PUBLISHED = ROOT.parent / "shared" / "calibration" / "published_runs.yaml"
runner = CliRunner()


def _cli_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _record_files() -> list[Path]:
    files = [RUNS_EXAMPLE, EXTRA_RUNS]
    return files + ([PUBLISHED] if PUBLISHED.is_file() else [])


@pytest.mark.parametrize("path", _record_files(), ids=lambda p: p.name)
def test_every_shipped_record_loads_and_predicts_the_same_as_a_job(path: Path) -> None:
    """perf, layouts, explain, compare and export read RUNS.yaml#ID with load_job_spec;
    validate with load_run_records and the record settings: same workload, layout and
    tokens/s for every usable record."""
    calibration = load_calibration(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = apply_record_settings(load_run_records(path)).records  # as validate does
        document = load_yaml_mapping(path)
    validated = {p.record.id: p for p in predict_runs(records, calibration)}
    for record in records:
        job = _load_run_record_job(document, path, record.id, [], set(),
                                   adjust_record=with_record_settings)  # as load_job_spec
        assert job.workload == record.workload, record.id
        assert job.plan.row(0) == record.plan.row(0), record.id
        predicted = predict_job(job, calibration).prediction
        assert float(predicted.tokens_per_s_per_gpu[0]) == pytest.approx(
            validated[record.id].predicted_tokens_per_s_per_gpu, rel=1e-12), record.id
        # ... and written as a job file, it loads back to the same job (a recorded uneven
        # pipeline split becomes the job file's uneven_stages: unstated)
        again = job_from_document(job_document(job), f"{record.id}.yaml")
        assert again.plan.row(0) == job.plan.row(0), record.id
        assert again.workload == job.workload, record.id
        spec = spec_from_job(job, f"{path.name}#{record.id}")
        for target in TARGETS:
            if job.workload.geometry.is_hybrid and target not in HYBRID_TARGETS:
                with pytest.raises(MosaicInputError, match="hybrid SSM"):
                    export(spec, target)
                continue
            try:
                text = export(spec, target).text
            except MosaicInputError as exc:  # what MaxText's own validation refuses
                # (configs/types.py), said as such; any other refusal of a shipped record
                # is a fault (a review: ": --to" alone matched every refusal)
                assert target == "maxtext" and any(check in str(exc) for check in (
                    "not compatible with gradient accumulation",
                    "must be divisible by the number of stages")), (record.id, target, str(exc))
                continue
            assert text, (record.id, target)


def test_example_records_through_the_cli() -> None:
    validated = {row["id"]: row for row in _cli_json("validate", str(RUNS_EXAMPLE))["runs"]}
    for run_id, row in validated.items():
        reference = f"{RUNS_EXAMPLE}#{run_id}"
        perf = _cli_json("perf", reference)
        assert perf["tokens_per_s_per_gpu"] == pytest.approx(
            row["predicted_tokens_per_s_per_gpu"], rel=1e-12)
        assert perf["memory_gib"] == pytest.approx(row["predicted_memory_gib"], rel=1e-12)
        for target in TARGETS:
            result = runner.invoke(app, ["export", reference, "--to", target])
            assert result.exit_code == 0, result.output
    first, second = list(validated)[:2]
    compare = _cli_json("compare", f"{RUNS_EXAMPLE}#{first}", f"{RUNS_EXAMPLE}#{second}")
    fields = {d["field"] for d in compare["input_differences"]}
    assert {"model.layers", "batch.seq_len", "parallelism.sharding"} <= fields
    small = f"{RUNS_EXAMPLE}#example-torchtitan-llama3.1-8b-h100-8-fsdp"
    layouts = _cli_json("layouts", small, "--top", "3")
    assert layouts["hardware"]["devices"] == 8 and layouts["rows"]
    assert runner.invoke(app, ["explain", small]).exit_code == 0


def test_a_record_with_documented_settings_predicts_the_same_in_perf_and_validate() -> None:
    calibration = load_calibration(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = apply_record_settings(load_run_records(EXTRA_RUNS)).records
    record = next(r for r in records if r.id in record_settings())
    assert any(line.startswith("record settings:") for line in record.assumptions)
    (validated,) = predict_runs([record], calibration)
    perf = _cli_json("perf", f"{EXTRA_RUNS}#{record.id}")
    assert perf["tokens_per_s_per_gpu"] == pytest.approx(
        validated.predicted_tokens_per_s_per_gpu, rel=1e-12)


def test_a_record_reference_names_its_run() -> None:
    with pytest.raises(MosaicInputError, match="holds 4 runs; name one as"):
        load_job(RUNS_EXAMPLE)
    with pytest.raises(MosaicInputError, match="no run with id 'nope'"):
        load_job(Path(f"{RUNS_EXAMPLE}#nope"))
    with pytest.raises(MosaicInputError, match="names a run, but this is a job file"):
        load_job(Path(f"{EXAMPLES / 'appendix_e.yaml'}#x"))


def _as_run_record(spec: Any, tokens_per_s_per_gpu: float, name: str) -> dict[str, Any]:
    """A run-record entry for a job measured at ``tokens_per_s_per_gpu``."""
    return run_record_entry(spec, run_id="roundtrip-1", source="constructed for the "
                            "round-trip test", name=name,
                            tokens_per_s_per_gpu=tokens_per_s_per_gpu, confidence="low")


@pytest.mark.parametrize("overrides", [
    [], ["performance.precision=fp8", "parallelism.dispatch_fp8=true", "parallelism.ep=4"]])
def test_job_to_run_record_to_export_round_trip(tmp_path: Path, overrides: list[str]) -> None:
    # The communication-bound FSDP MoE example on the DGX-H100 reference host (a run
    # record's GPU maps to that host, so both sides run on the same system).
    job = load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml", ["hardware.system=DGX-H100",
                                                          *overrides])
    assert job.workload.dispatch_fp8 is bool(overrides)
    # job -> canonical job document -> job
    again = job_from_document(job_document(job), "again.yaml")
    assert again.workload == job.workload and again.plan.row(0) == job.plan.row(0)
    # job -> run record -> job: the same workload, layout and prediction
    calibration = load_calibration(None)
    predicted = predict_job(job, calibration).prediction
    entry = _as_run_record(job, float(predicted.tokens_per_s_per_gpu[0]), "fsdp-moe")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [entry]}, sort_keys=False))
    from_record = load_job(path)  # one run: no #id needed
    assert replace(from_record.workload, routing=job.workload.routing) == job.workload
    assert from_record.plan.row(0) == job.plan.row(0)
    assert float(predict_job(from_record, calibration).prediction.step_time_s[0]) == (
        pytest.approx(float(predicted.step_time_s[0]), rel=1e-12))
    (record,) = load_run_records(path).records  # what validate reads
    assert record.measured_step_time_s == pytest.approx(float(predicted.step_time_s[0]))
    # ... -> export: every target writes the same launch config from both (the comment
    # lines differ: they list what each source left unstated)
    for target in TARGETS:
        a = export(spec_from_job(job, "the job"), target).text
        b = export(spec_from_job(from_record, "the job"), target).text
        if target == "yaml":  # the job files: the same job (the record's has no nodes)
            a_job, b_job = job_from_document(yaml.safe_load(a), "a"), \
                job_from_document(yaml.safe_load(b), "b")
            assert a_job.plan.row(0) == b_job.plan.row(0)
            assert replace(b_job.workload, routing=a_job.workload.routing) == a_job.workload
            continue
        assert _uncommented(a) == _uncommented(b), target


def _uncommented(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


@pytest.mark.parametrize("name", ["deepseek-v3.json", "qwen3-30b-a3b.json", "gpt-oss-20b.json",
                                  "olmoe-1b-7b-0924.json",
                                  "nemotron-3-nano-30b-a3b.json", "mixtral-8x7b.json"])
def test_model_block_round_trips_hf_models(name: str) -> None:
    path = EXAMPLES / "hf" / name
    if not path.is_file():
        pytest.skip(f"{path} not shipped")
    geometry = load_hf_config(path)
    block = ModelBlock.model_validate(model_document(geometry))
    assert geometry_from_model(block, [], measured=False) == geometry
    assert block.moe is not None and block.moe.router is not None  # the router travels


# ------------------------------------------------------------------ spellings


def _old_spelling(run: dict[str, Any]) -> dict[str, Any]:
    """A canonical record entry in the shared file's older spelling."""
    old = {k: v for k, v in run.items() if k not in ("parallelism", "batch")}
    old["parallel"] = run["parallelism"]
    old["seq_len"] = run["batch"]["seq_len"]
    old["batch"] = {k: v for k, v in run["batch"].items() if k != "seq_len"}
    mla = (run["model"].get("mla") or {})
    if mla:
        old["model"] = {**run["model"], "mla": {
            ("qk_head_dim" if k == "qk_nope_head_dim" else k): v for k, v in mla.items()}}
    return old


def test_old_record_spelling_loads_the_same_with_one_warning_per_file(tmp_path: Path) -> None:
    runs = yaml.safe_load(RUNS_EXAMPLE.read_text())["runs"]
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"runs": [_old_spelling(r) for r in runs]}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = load_run_records(path)
    deprecations = [w for w in caught if issubclass(w.category, MosaicDeprecationWarning)]
    assert len(deprecations) == 1  # one per file, not one per record
    message = str(deprecations[0].message)
    for rename in ("parallel -> parallelism", "seq_len -> batch.seq_len",
                   "model.mla.qk_head_dim -> model.mla.qk_nope_head_dim"):
        assert rename in message
    new = load_run_records(RUNS_EXAMPLE)
    assert [(r.workload, r.plan.row(0)) for r in old.records] == [
        (r.workload, r.plan.row(0)) for r in new.records]


def test_old_job_spelling_and_set_warn_once_paper_listing_does_not(tmp_path: Path) -> None:
    canonical = load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml")
    document = yaml.safe_load((EXAMPLES / "fsdp_moe_comm_bound.yaml").read_text())
    batch = document.pop("batch")
    document["data"] = {"global_batch": batch["global_seqs"], "seq_len": batch["seq_len"],
                        "micro_batch": batch["micro_seqs"]}
    document["parallelism"]["stack"] = document.pop("performance").get("stack",
                                                                       "megatron-core")
    document["performance"] = {"checkpointing": "full"}
    path = tmp_path / "old_job.yaml"
    path.write_text(yaml.safe_dump(document))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = load_job(path, ["data.micro_batch=1"])
    (warning,) = [w for w in caught if issubclass(w.category, MosaicDeprecationWarning)]
    assert "data.global_batch -> batch.global_seqs" in str(warning.message)
    assert "parallelism.stack -> performance.stack" in str(warning.message)
    assert old.workload == canonical.workload and old.plan.row(0) == canonical.plan.row(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the paper's own listing: no warning
        paper = load_job(EXAMPLES / "appendix_e.yaml")
    assert paper.workload.geometry.moe.experts == 128 and paper.workload.global_batch == 8192


def test_two_spellings_of_one_field_must_agree(tmp_path: Path) -> None:
    document = yaml.safe_load((EXAMPLES / "appendix_e.yaml").read_text())
    document["moe"]["expert_tp_degree"] = 2  # the listing's spelling of parallelism.etp
    document["parallelism"]["etp"] = 1
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(MosaicInputError, match="etp = 1 is given twice"):
        load_job(path)


@pytest.mark.parametrize("rule", [r for r in JOB_RULES if r.new], ids=lambda r: r.label())
def test_every_other_spelling_loads_to_the_same_job(rule: Rename) -> None:
    """Each rename, applied backwards to a canonical job file, loads to the same job; only
    mosaic's own older spellings warn."""
    job = load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml")
    document = job_document(job)
    found, value = _lookup(document, rule.new)
    if not found:
        pytest.skip(f"{'.'.join(rule.new)} not in the example job")
    if rule.value is not None:  # glu: the listing's flag for a gated FFN
        value = {"swiglu": True, "gelu": False}[value]
    older = _with(_without(document, rule.new), rule.old, value, "test")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = job_from_document(older, "older.yaml", deprecated := set())
    assert again.workload == job.workload and again.plan.row(0) == job.plan.row(0)
    assert (rule.label() in deprecated) == rule.deprecated
    assert not [w for w in caught if issubclass(w.category, MosaicDeprecationWarning)]


def test_a_what_if_on_a_run_record_is_not_compared_with_its_measurement() -> None:
    """`perf RUNS.yaml#ID --set ...` predicts a changed run: the measured step no longer
    applies (it was still printed with a % error); a job-file block in --set gets a hint
    that records use their own fields (new-user review)."""
    reference = EXAMPLES / "runs_example.yaml#example-bridge-deepseekv3-gb200-256-bf16"
    as_measured = load_job(reference)
    assert as_measured.measured_step_time_s is not None
    what_if = load_job(reference, ["precision=fp8"])
    assert what_if.measured_step_time_s is None
    assert any("--set changed the recorded run" in line for line in what_if.assumptions)
    with pytest.raises(MosaicInputError, match="a run record has no 'performance' block"):
        load_job(reference, ["performance.precision=fp8"])
    assert "measured_step_time_s" not in _cli_json("perf", str(reference), "--set",
                                                   "precision=fp8")


def test_perf_lists_the_defaults_it_filled_in(tmp_path: Path) -> None:
    """A job that leaves the vocabulary and norm unstated runs on the paper's defaults, and
    `perf` says so (its JSON carries every assumption line; new-user review)."""
    canonical = job_document(load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml"))
    canonical["model"].pop("vocab")
    canonical["model"].pop("norm", None)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(canonical))
    assumptions = _cli_json("perf", str(path))["assumptions"]
    assert any(line.startswith("model.vocab not stated") for line in assumptions)
    assert any(line.startswith("model.norm not stated") for line in assumptions)
    stated = _cli_json("perf", str(EXAMPLES / "fsdp_moe_comm_bound.yaml"))["assumptions"]
    assert not any(line.startswith("model.vocab") for line in stated)


def test_a_misspelt_field_gets_the_nearest_name():
    from mosaic.config.job_schema import load_job
    with pytest.raises(MosaicInputError, match=r"moe\.topk: unknown field .*did you mean top_k"):
        load_job(EXAMPLES / "qwen3_next_80b_b200.yaml", ["moe.topk=2"])
    # another framework's spelling of a degree (a trial's run record said ep_size)
    with pytest.raises(MosaicInputError, match=r"ep_size: unknown field .*did you mean ep"):
        load_job(EXAMPLES / "qwen3_next_80b_b200.yaml", ["parallelism.ep_size=8"])
    with pytest.raises(MosaicInputError, match=r"tp_degree: unknown field .*did you mean tp"):
        load_job(EXAMPLES / "qwen3_next_80b_b200.yaml", ["parallelism.tp_degree=2"])
    # a direct misspelling beats a foreign name's target (a fuzz trial got 'pp', from
    # pipeline_parallel, for sequence_parallex)
    with pytest.raises(MosaicInputError, match=r"sequence_parallex: unknown field "
                                               r".*did you mean sequence_parallel\?"):
        load_job(EXAMPLES / "qwen3_next_80b_b200.yaml", ["parallelism.sequence_parallex=true"])


def test_a_job_document_keeps_its_release_and_the_settings_it_turned_off():
    """A 26.06 MXFP8 MoE job on B200 takes the release's bundle (one CUDA graph per step, EP
    overlap) unless it says otherwise; its document carries the release and writes those
    settings explicitly, so reloading neither loses the release nor turns them back on."""
    from mosaic.config.job_schema import job_document, job_from_document

    document = {
        "model": {"layers": 4, "d_model": 512, "heads": 8, "kv_heads": 8, "head_dim": 64,
                  "ffn": 256, "vocab": 1000, "moe": {"experts": 16, "top_k": 2,
                                                     "expert_ffn": 256}},
        "batch": {"global_seqs": 64, "seq_len": 1024},
        "parallelism": {"ep": 8, "dp": 8, "ep_overlap": False},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                        "stack_version": "26.06", "full_iteration_cuda_graph": False},
        "hardware": {"system": "DGX-B200", "nodes": 1}}
    job = job_from_document(document, "test")
    written = job_document(job)
    assert written["performance"]["stack_version"] == "26.06"
    again = job_from_document(written, "again")
    assert again.workload == job.workload
    assert not again.workload.full_iteration_cuda_graph and not again.workload.ep_overlap


def test_a_top_level_moe_block_in_canonical_names_is_model_moe(tmp_path: Path) -> None:
    """docs/schema.md: `moe:` beside `model:` reads as model.moe in canonical names too, and
    a field given in both places with different values is refused."""
    from mosaic.config.model_schema import geometry_from_document

    dense = {"layers": 8, "d_model": 1024, "heads": 8, "ffn": 4096, "vocab": 32000}
    moe = {"experts": 16, "top_k": 2, "expert_ffn": 1024}
    beside = geometry_from_document({"model": dense, "moe": moe}, "beside.yaml")
    nested = geometry_from_document({"model": {**dense, "moe": moe}}, "nested.yaml")
    assert beside == nested and beside.moe.experts == 16 and beside.moe.top_k == 2
    with pytest.raises(MosaicInputError, match="experts = 8 is given twice"):
        geometry_from_document({"model": {**dense, "moe": {**moe, "experts": 8}}, "moe": moe},
                               "both.yaml")


def test_an_mla_block_beside_another_attention_and_a_moe_without_moe_layers_are_refused():
    """Both were accepted silently (a fuzz trial): the MLA dimensions were ignored under
    attention: gqa, and a MoE block whose dense prefix covers every layer exported a MoE
    launch config with no MoE layer."""
    from mosaic.config.convert import geometry_from_model
    from mosaic.config.model_schema import model_block_from_document

    base = {"layers": 4, "d_model": 256, "heads": 4, "kv_heads": 4, "head_dim": 64,
            "ffn": 1024, "vocab": 1000}
    mla = {"kv_lora_rank": 64, "q_lora_rank": None, "qk_nope_head_dim": 32,
           "qk_rope_head_dim": 16, "v_head_dim": 32}
    with pytest.raises(MosaicInputError, match=r"model\.mla is given but model\.attention is"):
        geometry_from_model(model_block_from_document(
            {"model": {**base, "attention": "gqa", "mla": mla}}, "m"), [], measured=False)
    moe = {"experts": 8, "top_k": 2, "expert_ffn": 256, "dense_layers": 4}
    with pytest.raises(MosaicInputError, match="gives no block an MoE FFN"):
        geometry_from_model(model_block_from_document({"model": {**base, "moe": moe}}, "m"), [],
                            measured=False)


@pytest.mark.parametrize("override, message", [
    ("performance.torch_compile=yes", "torch_compile: Input should be a valid boolean"),
    ("performance.dp_comm_overlap=no", "dp_comm_overlap: Input should be a valid boolean"),
    ("hardware.usable_memory_fraction='0.8'", "usable_memory_fraction: Input should be a valid"),
    ("performance.routing_imbalance='1.5'", "routing_imbalance: Input should be a valid"),
])
def test_performance_and_hardware_values_are_not_coerced_across_types(override, message):
    """docs/schema.md: no value is coerced across types; the performance and hardware blocks
    took 'yes' as true and '0.8' as 0.8 while model and parallelism refused them (a fuzz
    trial)."""
    with pytest.raises(MosaicInputError, match=message):
        load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml", [override])


def test_an_error_from_a_set_override_names_the_override():
    """'--set model.layrs=3' was reported as the file's own unknown field (a fuzz trial)."""
    with pytest.raises(MosaicInputError, match=r"layrs: unknown field.*\(from --set "
                                               r"model\.layrs=3\)"):
        load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml", ["model.layrs=3"])


def test_a_stacks_interleaved_default_yields_to_a_batch_too_small_for_it(tmp_path):
    """torchtitan interleaves 2 stages per rank by default, which needs pp micro-batches a
    step; with one micro-batch the default gave an error about a vpp=2 nobody wrote (a fuzz
    trial): the job runs uninterleaved and says why."""
    document = yaml.safe_load((EXAMPLES / "fsdp_moe_comm_bound.yaml").read_text())
    document["parallelism"] = {"tp": 1, "pp": 2, "ep": 1, "sharding": "none"}
    document["batch"] = {"global_seqs": 8, "micro_seqs": 1, "seq_len": 2048}
    document["performance"] = {"stack": "torchtitan"}
    document["hardware"] = {"system": "DGX-H100", "nodes": 2}
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(document))
    spec = load_job(job)
    assert int(spec.plan.vpp[0]) == 1
    assert any("needs at least pp=2 micro-batches per step, and the batch gives 1" in note
               for note in spec.assumptions)


@pytest.mark.parametrize(("local_seqs", "vpp", "said"), [
    (2, 1, "needs at least pp=4 micro-batches per pipeline schedule, and each local batch of "
           "2 gives 2"),
    (4, 2, None),
    (9, 1, "which needs its max(1, n // pp)=2 rounds to divide the 9 micro-batches of a "
           "schedule"),
    (12, 2, None)])
def test_a_stacks_interleaved_default_counts_micro_batches_per_schedule(tmp_path, local_seqs,
                                                                       vpp, said):
    """torchtitan runs one pipeline schedule per local batch: pp 4 x dp 8 on 32 GPUs,
    micro-batch 1 (its default under PP) give global / 8 micro-batches a step but
    local_seqs / 1 a schedule, so a local batch of 2 (< pp) keeps vpp 1 and says why (the
    per-step count chose vpp 2, which the layout rule then refused) and one of 4 (= pp)
    takes the interleaved default of 2; 9 make 9 // 4 = 2 rounds, which torch's
    Interleaved1F1B refuses (vpp 1), 12 make 3 rounds of 4 (vpp 2)."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "model": {"layers": 8, "d_model": 1024, "heads": 8, "ffn": 4096, "vocab": 32000},
        "parallelism": {"tp": 1, "pp": 4, "dp": 8},
        "batch": {"global_seqs": 8 * 2 * local_seqs, "local_seqs": local_seqs,
                  "seq_len": 2048},
        "performance": {"stack": "torchtitan"},
        "hardware": {"system": "DGX-H100", "nodes": 4}}))
    spec = load_job(job)
    assert int(spec.plan.vpp[0]) == vpp
    if said is not None:
        assert any(said in note for note in spec.assumptions)


def test_dates_are_strings_and_a_union_field_is_described_once(tmp_path):
    """YAML 1.2's core schema reads 2024-01-01 as a string (PyYAML 1.1 made a date that the
    name field refused with its Python repr), and a field of a union type names every
    type it takes in one message, not pydantic's per-member errors (a fuzz trial)."""
    from mosaic.schema_validation import load_yaml_mapping

    path = tmp_path / "doc.yaml"
    path.write_text("name: 2024-01-01\n")
    assert load_yaml_mapping(path) == {"name": "2024-01-01"}
    with pytest.raises(MosaicInputError) as error:
        load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml", ["performance.uneven_stages=maybe"])
    assert str(error.value).endswith(
        "uneven_stages: Input should be a valid boolean or 'unstated' (got 'maybe') "
        "(from --set performance.uneven_stages=maybe)")


def test_sequence_parallel_at_tp_1_is_off_as_megatron_turns_it_off(tmp_path: Path) -> None:
    """A stated sequence_parallel with tp 1 went to the Megatron export, which turns it off
    with a warning (megatron/training/arguments.py); the job says so and plans it off."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "model": {"layers": 4, "d_model": 1024, "heads": 8, "vocab": 32000, "ffn": 4096},
        "parallelism": {"tp": 1, "sequence_parallel": True},
        "batch": {"global_seqs": 64, "seq_len": 2048, "micro_seqs": 1},
        "hardware": {"gpu": "H100", "nodes": 1}}))
    spec = load_job(job)
    assert not bool(spec.plan.sequence_parallel[0])
    assert any("sequence_parallel with tp 1" in line for line in spec.assumptions)


@pytest.mark.parametrize(("override", "words"), [
    ("parallelism.ep=", "parallelism: ep is empty: give the expert-parallel degree (1 for none)"),
    ("parallelism.tp=", "parallelism: tp is empty: give the tensor-parallel degree (1 for none)"),
    ("batch.micro_seqs=", "batch: micro_seqs is empty: give the micro-batch in sequences,"),
])
def test_an_empty_degree_is_refused_as_the_studio_refuses_it(override, words):
    """A trial: `--set parallelism.ep=` predicted ep 1 ('not stated: 1 assumed'), `tp=` said
    'Input should be a valid integer (got None)'; both are now one line, and vpp left empty
    still means the stack's default."""
    from mosaic.config.job_schema import load_job

    job = Path(__file__).parents[2] / "examples" / "appendix_e.yaml"
    with pytest.raises(MosaicInputError, match=re.escape(words)):
        load_job(job, [override])
    assert load_job(job, ["parallelism.vpp="]).plan.vpp[0] >= 1


def test_a_set_value_starting_with_a_yaml_alias_sign_is_text():
    """`--set model.hybrid_pattern=*E*E...` (* is attention) was refused as malformed YAML
    (a fuzz trial): a value starting with * or & is the text typed, since an alias or
    anchor is never one field's value; other values still read as YAML scalars."""
    from mosaic.config.job_schema import field_value

    assert field_value("hybrid_pattern", "*E*E", "--set") == "*E*E"
    assert field_value("hybrid_pattern", " &M ", "--set") == "&M"
    assert field_value("layers", "52", "--set") == 52
    assert field_value("stack_version", "25.10", "--set") == "25.10"


@pytest.mark.parametrize(("override", "words"), [
    ("hardware.system=0", "unknown system '0': known systems are"),
    ("hardware.system=1e3", "unknown system '1e3': known systems are"),
    ("performance.stack=true", "stack 'true': unknown; known stacks"),
    ("parallelism.dispatcher=7", "'7' is not a known dispatcher"),
])
def test_a_number_set_into_a_text_field_is_the_text_typed(override, words):
    """`--set hardware.system=0` (and the studio's node type 0 or 1e3) read as the YAML
    number and answered "Input should be a valid string (got 1000.0)": a text field takes
    the text typed, so the message names the value as typed and the known names."""
    with pytest.raises(MosaicInputError) as caught:
        load_job(EXAMPLES / "appendix_e.yaml", [override])
    assert words in str(caught.value) and "valid string" not in str(caught.value)


def test_the_set_a_message_names_most_fully_is_blamed():
    """A fuzz trial: 'top_groups (65) must lie in 1..groups (64)' was blamed on
    '--set ...groups=64'; and a layout perf refuses named neither file nor --set."""
    from mosaic.config.job_schema import blame_override
    from mosaic.errors import MosaicInputError

    both = ["model.moe.router.groups=64", "model.moe.router.top_groups=65"]
    error = MosaicInputError("job.yaml: moe.router.top_groups (65) must lie in 1..groups (64)")
    assert str(blame_override(error, both)).endswith("(from --set model.moe.router.top_groups=65)")
    layout = MosaicInputError("job.yaml: invalid parallel layout: ep=3 must divide experts=128")
    assert str(blame_override(layout, ["parallelism.ep=3"])).endswith(
        "(from --set parallelism.ep=3)")
    # a product of degrees names each of its factors (a trial: tp=3 was not blamed)
    product = MosaicInputError("job.yaml: 1024 devices are not a multiple of tp·pp·cp=24")
    for override in ("parallelism.tp=3", "parallelism.pp=8"):
        assert str(blame_override(product, [override])).endswith(f"(from --set {override})")
    # the layout rules name the batch fields micro_batch and global_batch (a trial)
    batch = MosaicInputError("job.yaml: invalid parallel layout: dp·micro_batch=32·3 must "
                             "divide global_batch=8192")
    for override in ("batch.micro_seqs=3", "batch.global_seqs=1000", "data.gbs=1000"):
        assert str(blame_override(batch, [override])).endswith(f"(from --set {override})")
    step = MosaicInputError("job.yaml: the step is 3 s")  # 'ep' inside a word is no match
    assert str(blame_override(step, ["parallelism.ep=3"])) == str(step)


def test_a_set_in_an_older_spelling_is_blamed_by_the_field_it_renames():
    """A fuzz trial: '--set data.global_batch=-1' was refused as 'batch: global_seqs: ...'
    with no '(from --set ...)', since the message names the canonical field only
    (data.global_batch -> batch.global_seqs, and the paper's data.gbs, docs/schema.md)."""
    from mosaic.config.job_schema import blame_override
    from mosaic.errors import MosaicInputError

    error = MosaicInputError("job.yaml: batch: global_seqs: Input should be greater than 0")
    for override in ("data.global_batch=-1", "data.gbs=-1"):
        assert str(blame_override(error, [override])).endswith(f"(from --set {override})")
    assert str(blame_override(error, ["data.seq_len=8"])) == str(error)  # another field
