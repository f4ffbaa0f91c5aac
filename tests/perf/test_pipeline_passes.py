"""Gradient accumulation over whole pipeline schedules (stack trait
``pipeline_schedule_per_pass``): torchtitan and NeMo AutoModel call
torch.distributed.pipelining's ``schedule.step`` once per local batch, so every pass
fills and drains the pipeline on its own (torchtitan trainer.py, AutoModel
recipes/llm/benchmark.py and train_ft.py; sources in stacks.yaml)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.config.job_schema import job_document, load_job
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import predict_job
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.schedule import (
    microbatches_per_schedule,
    microbatches_per_schedule_of,
    schedule_passes,
)
from mosaic.perf.step_time import predict_step, vocab_stage_s
from mosaic.perf.workload import Workload

CALIBRATION = default_calibration()
# pp 4 x dp 8 on 32 GPUs, 256 sequences: 32 micro-batches of one sequence per DP rank
PLAN = single_plan(pp=4, dp=8, micro_batch=1)


@pytest.fixture
def torchtitan_job(tmp_path):
    """A torchtitan pipeline job whose local batch of 8 makes 4 passes (32 per rank)."""
    path = tmp_path / "job.yaml"
    path.write_text("""
model: {layers: 8, d_model: 1024, heads: 8, ffn: 4096, vocab: 32000}
parallelism: {tp: 1, pp: 4, dp: 8}
batch: {global_seqs: 256, micro_seqs: 1, local_seqs: 8, seq_len: 2048}
performance: {stack: torchtitan}
hardware: {system: DGX-H100, nodes: 4}
""")
    return path


def _workload(stack: str, local_batch: int | None) -> Workload:
    return Workload(geometry=ladder_geometry(4), global_batch=256, seq_len=2048,
                    stack=stack, local_batch=local_batch)


def _machine():
    return machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=4), "bf16")


def test_passes_by_hand() -> None:
    """256 / (dp 8 x local 8) = 4 passes of 8 micro-batches on AutoModel; Megatron-Core runs
    one schedule of 32 whatever the local batch; no local batch is one pass."""
    automodel = _workload("nemo-automodel", 8)
    assert schedule_passes(automodel, PLAN)[0] == 4
    assert microbatches_per_schedule(automodel, PLAN)[0] == 8
    assert schedule_passes(_workload("megatron-core", 8), PLAN)[0] == 1
    assert schedule_passes(_workload("torchtitan", None), PLAN)[0] == 1
    assert microbatches_per_schedule(_workload("torchtitan", None), PLAN)[0] == 32


@pytest.mark.parametrize("stack", ["nemo-automodel", "torchtitan", "megatron-core"])
@pytest.mark.parametrize("local", [None, 1, 2, 8, 32])
@pytest.mark.parametrize(("pp", "dp", "micro"), [(4, 8, 1), (4, 8, 2), (1, 32, 1), (2, 4, 4)])
def test_one_layouts_count_per_schedule_equals_the_vectorised_one(stack, local, pp, dp,
                                                                  micro) -> None:
    """microbatches_per_schedule_of (a job's unstated vpp is chosen from it) is the count the
    model and the layout rules read (microbatches_per_schedule)."""
    if local is not None and local % micro:
        pytest.skip("micro-batch does not divide the local batch (a layout rule refuses it)")
    plan = single_plan(pp=pp, dp=dp, micro_batch=micro)
    expected = microbatches_per_schedule(_workload(stack, local), plan)[0]
    assert microbatches_per_schedule_of(stack, 256, dp, micro, local, pp) == expected


def test_four_passes_have_four_bubbles() -> None:
    """Eq. 12 per schedule: (pp - 1) / (vpp n) with n = 8 micro-batches is 4x the bubble
    fraction of one schedule of 32, over the same block work, so the bubble term is exactly
    4x; the blocks' own time does not move."""
    machine = _machine()
    one = predict_step(_workload("torchtitan", None), PLAN, machine, CALIBRATION)
    four = predict_step(_workload("torchtitan", 8), PLAN, machine, CALIBRATION)
    bubble_one, bubble_four = (p.breakdown_s["pipeline_bubble"][0] for p in (one, four))
    assert bubble_one > 0
    assert bubble_four == pytest.approx(4 * bubble_one, rel=1e-12)
    assert four.breakdown_s["compute_mlp"][0] == pytest.approx(
        one.breakdown_s["compute_mlp"][0], rel=1e-12)
    assert four.step_time_s[0] > one.step_time_s[0]
    # Megatron-Core's one schedule over every micro-batch: a stated local batch changes nothing
    megatron = [predict_step(_workload("megatron-core", local), PLAN, machine, CALIBRATION)
                for local in (None, 8)]
    assert megatron[1].step_time_s[0] == pytest.approx(megatron[0].step_time_s[0], rel=1e-12)


def test_vocab_stage_fills_and_drains_once_per_schedule() -> None:
    """Eq. 13 summed over two schedules of 4 micro-batches: 2 x (3 max + first + last) +
    last x 8 f."""
    first, last, f = np.array([0.1]), np.array([0.3]), np.array([0.75])
    expected = 2 * (3 * 0.3 + 0.1 + 0.3) + 0.3 * 8 * 0.75
    assert vocab_stage_s(first, last, np.array([8.0]), f, np.array([4]),
                         np.array([2.0]))[0] == pytest.approx(expected)


def test_job_local_seqs_round_trips_and_is_checked(torchtitan_job) -> None:
    path = torchtitan_job
    spec = load_job(path)
    assert spec.workload.local_batch == 8
    assert job_document(spec)["batch"]["local_seqs"] == 8
    # 256 / (dp 8 x 48) is no whole number of passes: the layout rule names it
    path.write_text(path.read_text().replace("local_seqs: 8", "local_seqs: 48"))
    with pytest.raises(MosaicInputError, match=r"dp·local_seqs=8·48 must divide"):
        predict_job(load_job(path), CALIBRATION)


def test_workload_refuses_a_non_positive_local_batch() -> None:
    with pytest.raises(MosaicInputError, match="local_seqs"):
        replace(_workload("torchtitan", 8), local_batch=0)


def test_kimi_k2_record_runs_two_schedules_and_a_bad_local_batch_is_refused() -> None:
    """NeMo AutoModel's Kimi-K2 benchmark (kimi_k2_te_deepep.yaml @ 01926a5c44): 512
    sequences, dp 32, local_batch_size 8 -> 512 / (32 x 8) = 2 passes of 8 micro-batches."""
    from importlib.resources import files

    import yaml

    from mosaic.config.run_records import run_record_from_raw

    runs = yaml.safe_load((files("mosaic.evaluate") / "data" / "extra_runs.yaml").read_text())
    raw = next(run for run in runs["runs"] if run["id"] == "automodel-kimi-k2-h100-256-bf16-mla")
    record = run_record_from_raw(raw, "test")
    assert schedule_passes(record.workload, record.plan)[0] == 2
    assert microbatches_per_schedule(record.workload, record.plan)[0] == 8
    bad = {**raw, "batch": {**raw["batch"], "local_seqs": 48}}
    with pytest.raises(MosaicInputError, match=r"batch\.local_seqs: 48"):
        run_record_from_raw(bad, "test")


def test_torchtitan_export_writes_the_stated_local_batch(torchtitan_job) -> None:
    """torchtitan's local_batch_size is one rank's batch per pass: 8 of the job's 32 per
    rank, so the file's global batch 256 over dp 8 takes 4 passes, as costed."""
    import re

    from mosaic.export import export, spec_from_job

    text = export(spec_from_job(load_job(torchtitan_job), str(torchtitan_job)), "torchtitan").text
    assert re.search(r"^local_batch_size = 8$", text, re.M), text
    assert re.search(r"^global_batch_size = 256$", text, re.M)


def test_explain_offers_the_whole_local_batch_and_its_overrides_reproduce_it(torchtitan_job
                                                                            ) -> None:
    """4 passes of 8 on a torchtitan pipeline: `explain` offers the whole per-rank batch of
    32 (one schedule, a quarter of the bubble), and `--set batch.local_seqs=32` predicts
    exactly that step."""
    from mosaic.evaluate.diagnosis import diagnose

    current = predict_job(load_job(torchtitan_job), CALIBRATION)
    lever = next(lever for lever in diagnose(current, CALIBRATION).levers
                 if lever.name == "local_batch_whole")
    assert lever.overrides == ("batch.local_seqs=32",)
    assert lever.step_time_s < current.prediction.step_time_s[0]
    applied = predict_job(load_job(torchtitan_job, list(lever.overrides)), CALIBRATION)
    assert applied.prediction.step_time_s[0] == pytest.approx(lever.step_time_s, rel=1e-12)
    bubble = (current.prediction.breakdown_s["pipeline_bubble"][0],
              applied.prediction.breakdown_s["pipeline_bubble"][0])
    assert bubble[1] == pytest.approx(bubble[0] / 4, rel=1e-12)


@pytest.mark.parametrize("sharding", ["fsdp", "none"])
def test_gradients_are_reduced_once_per_schedule(sharding: str) -> None:
    """torch.distributed.pipelining ends every ``schedule.step`` with
    ``stage.perform_reduce_grad`` (FSDP: post_backward reduce-scatter and reshard; DDP: the
    last backward outside ``no_sync``), torch 2.13 schedules.py/stage.py: four passes reduce
    four times and re-gather each unit four times, with the same collectives each time, so
    every data-parallel term is exactly 4x that of one schedule."""
    from mosaic.perf.plan import Sharding

    machine, plan = _machine(), single_plan(pp=4, dp=8, micro_batch=1,
                                            sharding=Sharding.parse(sharding))
    one, four = (predict_step(_workload("torchtitan", local), plan, machine, CALIBRATION)
                 for local in (None, 8))
    terms = (("fsdp_all_gather", "fsdp_reduce_scatter") if sharding == "fsdp"
             else ("dp_all_reduce",))
    for term in terms:
        assert one.breakdown_s[term][0] > 0, term
        assert four.breakdown_s[term][0] == pytest.approx(4 * one.breakdown_s[term][0],
                                                          rel=1e-12), term


def test_torchtitan_without_pp_runs_the_stated_local_batch_in_one_pass(torchtitan_job
                                                                       ) -> None:
    """torchtitan v0.2.2 without PP runs each local_batch_size batch in one forward and
    accumulates global / (local·dp) of them (train.py, gradient_accumulation_steps): at pp 1,
    dp 32, local 8 with no micro-batch stated the forward is 8 sequences, not 1, and the
    export writes local_batch_size 8 as stated."""
    import re

    from mosaic.export import export, spec_from_job

    path = torchtitan_job
    path.write_text(path.read_text().replace("pp: 4, dp: 8", "pp: 1, dp: 32")
                    .replace("micro_seqs: 1, ", ""))
    spec = load_job(path)
    assert int(spec.plan.micro_batch[0]) == 8
    text = export(spec_from_job(spec, str(path)), "torchtitan").text
    assert re.search(r"^local_batch_size = 8$", text, re.M), text


def test_a_refused_local_batch_reads_as_its_rule() -> None:
    """The rule column of `layouts --show-infeasible` drops the per-plan values and the fixed
    factors beside them: it read 'dp·local_seqs·16 must divide ...' and '2·cp=2·{cp}'."""
    from mosaic.perf.constraints import rule_text

    assert (rule_text("dp·local_seqs={dp}·16 must divide global_batch=512")
            == "dp·local_seqs must divide global_batch=512")
    assert (rule_text("2·cp=2·{cp} must divide seq_len=1026 (cp > 1)")
            == "2·cp must divide seq_len=1026 (cp > 1)")
    assert (rule_text("pp·vpp={pp}·{vpp} must divide layers=48")
            == "pp·vpp must divide layers=48")


def test_torchtitan_without_pp_refuses_a_micro_batch_below_the_local_batch(torchtitan_job
                                                                           ) -> None:
    """At pp 1 torchtitan's local_batch_size is the forward batch (v0.2.2 train.py): micro 2
    under a local batch of 8 is no torchtitan job (its export wrote local_batch_size 2), and
    the same job on Megatron-Core, which has no local batch, is not refused by it."""
    path = torchtitan_job
    path.write_text(path.read_text().replace("pp: 4, dp: 8", "pp: 1, dp: 32")
                    .replace("micro_seqs: 1", "micro_seqs: 2"))
    with pytest.raises(MosaicInputError, match=r"micro_batch=2 must equal local_seqs=8 at pp=1"):
        predict_job(load_job(path), CALIBRATION)
    predict_job(load_job(path, ["performance.stack=megatron-core"]), CALIBRATION)
