"""An export to a framework that runs another stack than the job was costed for says what
mosaic predicts under that stack, and the file is written as that stack is costed (a trial:
a Megatron-Core plan exported to torchtitan, slower and over its memory there, without a
word, with torch.compile off where the torchtitan costing assumes it on)."""

import json
import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.config.job_schema import load_job
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import default_calibration

runner = CliRunner()
JOB = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"  # megatron-core
ONE_STAGE = ["--set", "parallelism.pp=1", "--set", "parallelism.ep=8"]


def _note(text: str) -> str:
    notes = [line for line in text.splitlines() if line.startswith("# NOTE: mosaic costed")]
    assert len(notes) == 1, text[:2000]
    return notes[0]


def test_a_megatron_job_written_for_torchtitan_is_costed_as_torchtitan_runs_it():
    result = runner.invoke(app, ["export", str(JOB), "--to", "torchtitan", *ONE_STAGE])
    assert result.exit_code == 0, result.output
    note = _note(result.stdout)
    assert "a torchtitan file runs torchtitan (sharding fsdp, as the file writes it)" in note
    # the same job by hand: torchtitan, FSDP2 for the job's zero1
    sets = ["parallelism.pp=1", "parallelism.ep=8", "performance.stack=torchtitan",
            "parallelism.sharding=fsdp"]
    by_hand = predict_job(load_job(JOB, sets), default_calibration()).prediction
    step_s = float(re.search(r"predicts ([0-9.e+]+) s per step", note).group(1))
    assert step_s == pytest.approx(by_hand.step_time_s[0], rel=1e-3)
    assert f"{by_hand.mfu[0]:.1%} MFU" in note
    # the file compiles the model, as the torchtitan costing assumes
    assert tomllib.loads(result.stdout)["compile"]["enable"] is True
    assert "note: mosaic costed this job" in result.stderr


@pytest.mark.parametrize("target", ["megatron", "nemo"])
def test_a_target_of_the_costed_stack_adds_no_note(target):
    result = runner.invoke(app, ["export", str(JOB), "--to", target, *ONE_STAGE])
    assert result.exit_code == 0, result.output
    assert "mosaic costed this job for stack" not in result.output


def test_a_plan_exported_to_another_stack_is_costed_under_it(plan_json):
    document = json.loads(plan_json.read_text())
    result = runner.invoke(app, ["export", str(plan_json), "--to", "torchtitan"])
    assert result.exit_code == 0, result.output
    note = _note(result.stdout)
    assert f"stack {document['envelope'].get('stack', 'megatron-core')}" in note
    assert "s per step" in note or "cannot cost it" in note


def test_perf_refuses_a_sharding_mode_the_stack_does_not_offer():
    """layouts and plan never search zero1 on torchtitan; perf costed it (a trial). An
    unstated sharding is torchtitan's own fsdp, said (stack trait unstated_sharding)."""
    result = runner.invoke(app, ["perf", str(JOB), *ONE_STAGE,
                                 "--set", "performance.stack=torchtitan",
                                 "--set", "parallelism.sharding=zero1"])
    assert result.exit_code == 2
    assert "stack 'torchtitan' offers only none, fsdp, hsdp (not zero1)" in result.output
    unstated = runner.invoke(app, ["perf", str(JOB), *ONE_STAGE,
                                   "--set", "performance.stack=torchtitan", "--json"])
    assert unstated.exit_code == 0, unstated.output
    assert json.loads(unstated.stdout)["plan"]["sharding"] == "fsdp"
    result = runner.invoke(app, ["perf", str(JOB), *ONE_STAGE, "--set",
                                 "performance.stack=torchtitan", "--set",
                                 "parallelism.sharding=fsdp"])
    assert result.exit_code == 0, result.output
