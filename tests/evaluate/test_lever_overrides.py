"""Each lever of `mosaic explain` says the `--set` overrides that give it, and applying them
to the job file predicts exactly the lever's step (a trial applied a tp lever by hand and got
another expert tp, which an unstated etp follows; an FP8 lever on a job that names its
release got the release's FP8 recipe)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from mosaic.config.job_schema import load_job
from mosaic.evaluate.diagnosis import diagnose
from mosaic.evaluate.job import load_job_spec, predict_job
from mosaic.perf.calibration import default_calibration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CALIBRATION = default_calibration()
# the examples that are jobs (the others are ladders, run files and a job of one block)
JOBS = ["appendix_e.yaml", "deepseek_v3_h100.yaml", "fsdp_moe_comm_bound.yaml",
        "nemotron_3_nano_b200.yaml", "qwen3_next_80b_b200.yaml"]


# (job, the --set that makes the job): an HSDP job's other shardings clear its shard group
# (a review: they stated no overrides); a stack with its own pipeline and data rules
VARIANTS = [*((name, ()) for name in JOBS),
            ("fsdp_moe_comm_bound.yaml", ("parallelism.sharding=hsdp",
                                          "parallelism.hsdp_shard=8")),
            ("fsdp_moe_comm_bound.yaml", ("performance.stack=levanter",)),
            ("fsdp_moe_comm_bound.yaml", ("performance.stack=torchtitan",
                                          "parallelism.sharding=fsdp"))]


@pytest.mark.parametrize(("name", "job_overrides"), VARIANTS)
def test_every_predicted_lever_is_its_overrides_applied_to_the_job(name, job_overrides):
    path = EXAMPLES / name
    levers = diagnose(predict_job(load_job(path, list(job_overrides)), CALIBRATION),
                      CALIBRATION).levers
    predicted = [lever for lever in levers if math.isfinite(lever.step_time_s)]
    assert len(predicted) >= 5
    for lever in predicted:
        assert lever.overrides, lever.name
        applied = predict_job(load_job(path, [*job_overrides, *lever.overrides]), CALIBRATION)
        assert applied.prediction.step_time_s[0] == pytest.approx(lever.step_time_s,
                                                                   rel=1e-12), lever.name
        assert applied.prediction.memory_bytes[0] == pytest.approx(lever.memory_bytes,
                                                                    rel=1e-12), lever.name


def test_a_tp_lever_states_the_expert_tp_and_a_pp_lever_the_stages_it_ran():
    """An unstated etp follows tp and an unstated vpp and micro-batch follow pp when the
    job loads: the lever states the values it was predicted with."""
    levers = {lever.name: lever for lever in diagnose(
        predict_job(load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml"), CALIBRATION),
        CALIBRATION).levers}
    tp = levers["tp_double"].overrides
    assert "parallelism.tp=2" in tp and "parallelism.etp=1" in tp
    assert "parallelism.sequence_parallel=true" in tp


def test_a_tp_lever_on_a_stack_without_unstated_sp_leaves_it_off():
    """NeMo AutoModel leaves sequence parallelism off unless told (FSDP2Config
    .sequence_parallel False) and refuses it for an expert-parallel MoE: the tp lever
    turned it on as Megatron-Core's default does and was refused instead of costed."""
    overrides = ["performance.stack=nemo-automodel", "parallelism.sharding=fsdp"]
    job = load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml", overrides)
    levers = {lever.name: lever for lever in diagnose(predict_job(job, CALIBRATION),
                                                      CALIBRATION).levers}
    tp = levers["tp_double"]
    assert math.isfinite(tp.step_time_s), tp
    assert "parallelism.sequence_parallel=true" not in tp.overrides
    applied = predict_job(load_job(EXAMPLES / "fsdp_moe_comm_bound.yaml",
                                   [*overrides, *tp.overrides]), CALIBRATION)
    assert applied.prediction.step_time_s[0] == pytest.approx(tp.step_time_s, rel=1e-12)


@pytest.mark.parametrize("stack", ["hf-transformers", "megatron-core"])
def test_a_tp_lever_on_a_dense_model_states_no_expert_tp(stack, tmp_path):
    """A dense model has no expert layers for an etp to shard (its unstated etp is 1 at any
    tp): the tp levers state tp, dp and sequence parallelism, not parallelism.etp (a trial
    read etp=1 under a dense Qwen3-8B's tp lever), and still give the lever's step."""
    path = tmp_path / "dense.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"layers": 8, "d_model": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
                  "ffn": 12288, "vocab": 151936},
        "parallelism": {"tp": 2, "pp": 1, "dp": 4, "sharding": "fsdp"},
        "batch": {"global_seqs": 32, "seq_len": 4096, "micro_seqs": 1},
        "performance": {"stack": stack, "checkpointing": "full"},
        "hardware": {"system": "p5.48xlarge", "nodes": 1}}))
    levers = {lever.name: lever for lever in diagnose(predict_job(load_job(path), CALIBRATION),
                                                      CALIBRATION).levers}
    for name in ("tp_double", "tp_halve"):
        lever = levers[name]
        assert any(item.startswith("parallelism.tp=") for item in lever.overrides), name
        assert not any(item.startswith("parallelism.etp=") for item in lever.overrides), name
        if math.isfinite(lever.step_time_s):
            applied = predict_job(load_job(path, list(lever.overrides)), CALIBRATION)
            assert applied.prediction.step_time_s[0] == pytest.approx(lever.step_time_s,
                                                                       rel=1e-12), name


def test_a_release_job_keeps_its_recipe_settings_under_an_fp8_lever():
    levers = diagnose(predict_job(load_job(EXAMPLES / "deepseek_v3_h100.yaml"),
                                  CALIBRATION), CALIBRATION).levers
    fp8 = next(lever for lever in levers if lever.name.startswith("precision_"))
    assert "parallelism.dispatcher=hybridep" in fp8.overrides  # the bf16 cell's, kept


def test_a_run_records_levers_state_no_job_overrides():
    record = Path(__file__).resolve().parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"
    spec = load_job_spec(Path(f"{record}#nebius2603-deepseek-v3-b200-256-tp2pp2ep32-bf16-deepep"))
    levers = diagnose(predict_job(spec, CALIBRATION), CALIBRATION).levers
    assert levers and all(lever.overrides is None for lever in levers)


def test_a_job_without_a_pipeline_is_offered_one_with_its_stacks_default_interleaving():
    """torchtitan interleaves 2 virtual stages per rank by default: a job without a
    pipeline gets pp 2 with vpp 2 beside the plain pp lever (a trial found it faster by
    hand), each reproduced by its overrides (above)."""
    path = EXAMPLES / "fsdp_moe_comm_bound.yaml"
    levers = {lever.name: lever for lever in diagnose(predict_job(load_job(
        path, ["performance.stack=torchtitan", "parallelism.sharding=fsdp"]), CALIBRATION),
        CALIBRATION).levers}
    interleaved = levers["pp_double_interleaved"]
    assert (interleaved.plan["pp"], interleaved.plan["vpp"]) == (2, 2)
    assert "parallelism.vpp=2" in interleaved.overrides
    megatron = {lever.name for lever in diagnose(predict_job(load_job(path), CALIBRATION),
                                                 CALIBRATION).levers}
    assert "pp_double_interleaved" not in megatron  # Megatron's default is one stage


def _job_without_micro_batch(path: Path, stack: str, *, ep: int | None, pp: int) -> Path:
    """An 8-GPU job that states no batch.micro_seqs: the stack's default derives it from the
    global batch, dp and pp (config.layout.default_micro_batch), which levers move."""
    model = {"layers": 8, "d_model": 2048, "heads": 16, "kv_heads": 8, "head_dim": 128,
             "ffn": 8192, "vocab": 32000}
    parallelism = {"tp": 2, "pp": pp, "dp": 4 // pp}
    if ep is not None:  # an MoE model
        model["moe"] = {"experts": 8, "top_k": 2, "expert_ffn": 1408}
        parallelism["ep"] = ep
    path.write_text(yaml.safe_dump({
        "model": model, "parallelism": parallelism,
        "batch": {"global_seqs": 32, "seq_len": 4096},
        "performance": {"stack": stack, "checkpointing": "full"},
        "hardware": {"system": "p5.48xlarge", "nodes": 1}}))
    return path


# (stack, ep or None for a dense model, pp): the stacks whose unstated micro-batch is
# derived (the whole local batch; torchtitan's local batch over pp) and Megatron-Core's one
# sequence; hf-transformers offers ep 1 only, it and levanter pp 1 only (those levers break
# the stack's rules there)
UNSTATED_MICRO_JOBS = [("hf-transformers", None, 1), ("hf-transformers", 1, 1),
                       ("levanter", 2, 1), ("jax-xla", None, 1), ("fms-fsdp", None, 1),
                       ("torchtitan", 2, 1), ("torchtitan", 2, 2),
                       ("megatron-core", 2, 1), ("megatron-core", None, 2)]


@pytest.mark.parametrize(("stack", "ep", "pp"), UNSTATED_MICRO_JOBS)
def test_every_lever_of_a_job_without_a_micro_batch_is_its_overrides_applied(stack, ep, pp,
                                                                             tmp_path):
    """A lever that moves dp or pp runs the micro-batch the job loads with its `--set`
    lines: the stack's default for the new dp and pp (a review: hf-transformers' tp 2 -> 4
    lever kept micro 8 at 0.743 s; its overrides loaded the whole local batch of 16, 0.734
    s). Every predicted lever, tp, pp, ep and the others, reproduces exactly."""
    path = _job_without_micro_batch(tmp_path / "job.yaml", stack, ep=ep, pp=pp)
    levers = diagnose(predict_job(load_job(path), CALIBRATION), CALIBRATION).levers
    predicted = {lever.name: lever for lever in levers if math.isfinite(lever.step_time_s)}
    assert any(name.startswith("tp_") for name in predicted)
    for lever in predicted.values():
        applied = predict_job(load_job(path, list(lever.overrides)), CALIBRATION)
        assert int(applied.spec.plan.micro_batch[0]) == lever.plan["micro_batch"], lever.name
        assert applied.prediction.step_time_s[0] == pytest.approx(lever.step_time_s,
                                                                   rel=1e-12), lever.name
        assert applied.prediction.memory_bytes[0] == pytest.approx(lever.memory_bytes,
                                                                    rel=1e-12), lever.name
