"""perf, explain, the perf HTML page and compare state memory the same way: the prediction
against the usable budget (90% of a B200's 178.4 GiB = 160.5 GiB, perf/headroom.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.perf.headroom import memory_fit_text

JOB = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"
runner = CliRunner()


def test_memory_fit_text_by_hand():
    assert memory_fit_text(66.54, 178.4, 0.9, 0.0) == (
        "66.54 GiB of 160.6 usable (90% of 178.4 GiB), fits")
    assert memory_fit_text(90.0, 80.0, 1.0, 10.0) == (
        "90.00 GiB of 80.0 usable (100% of 80.0 GiB), OUT OF MEMORY by 10.00 GiB")
    # above the device under a headroom: the device's shortfall first, then the headroom's
    assert memory_fit_text(80.28, 79.1, 0.9, 80.28 - 0.9 * 79.1) == (
        "80.28 GiB of 71.2 usable (90% of 79.1 GiB), OUT OF MEMORY by 1.18 GiB over the "
        "device (9.09 GiB over the usable 90%)")
    # above the 90% planning budget, below the device: not an out-of-memory verdict
    assert memory_fit_text(76.6, 79.1, 0.9, 76.6 - 0.9 * 79.1) == (
        "76.60 GiB of 71.2 usable (90% of 79.1 GiB), over the 90% planning headroom by "
        "5.41 GiB (2.50 GiB under device memory)")


def test_memory_verdict_by_hand():
    """One verdict for every command: within the usable budget it fits; above the device's
    memory it is out of memory; between the two only the planning headroom refuses it."""
    from mosaic.perf.headroom import FITS, OUT_OF_MEMORY, OVER_HEADROOM, memory_verdict

    # 90% of 80 GiB = 72 usable
    assert memory_verdict(70.0, 80.0, 0.0) == FITS
    assert memory_verdict(76.0, 80.0, 76.0 - 72.0) == OVER_HEADROOM
    assert memory_verdict(80.0, 80.0, 8.0) == OVER_HEADROOM  # at the device's capacity
    assert memory_verdict(81.0, 80.0, 9.0) == OUT_OF_MEMORY
    assert (FITS, OVER_HEADROOM, OUT_OF_MEMORY) == ("fits", "over the planning headroom",
                                                    "out of memory")


def test_every_command_reads_the_one_verdict():
    """explain's status and its lever reasons say what memory_verdict says (a review found
    it decided in four modules; layouts and the plan search: tests/perf/test_layouts.py and
    tests/plan/test_search.py)."""
    from mosaic.evaluate.diagnosis import MemoryStatus, _memory_reason

    gib = 2**30
    for memory, overshoot, expected in ((76.0, 4.0, "over the planning headroom"),
                                        (81.0, 9.0, "out of memory")):
        status = MemoryStatus(memory * gib, 80.0 * gib, overshoot * gib, 0.9)
        assert status.status == expected
        assert _memory_reason(memory * gib, overshoot * gib, 80.0 * gib).startswith(
            expected + ": needs")


def _words(text: str) -> str:
    return re.sub(r"[│\s]+", " ", text)


@pytest.fixture(scope="module")
def oom_job(tmp_path_factory) -> Path:
    """Appendix E on pp=2: 24 layers per rank, over the usable memory of a B200."""
    document = yaml.safe_load(JOB.read_text())
    document["parallelism"]["pp"] = 2
    path = tmp_path_factory.mktemp("jobs") / "oom.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_perf_explain_and_html_say_the_same(oom_job, tmp_path):
    perf = runner.invoke(app, ["perf", str(oom_job), "--json"])
    assert perf.exit_code == 0, perf.output
    document = json.loads(perf.stdout)
    assert document["overshoot_gib"] > 0
    # B200: 178.4 GiB, 90% usable = 160.5 GiB
    expected = (f"{document['memory_gib']:.2f} GiB of 160.5 usable (90% of 178.4 GiB), "
                f"OUT OF MEMORY by {document['memory_gib'] - document['memory_capacity_gib']:.2f} "
                f"GiB over the device ({document['overshoot_gib']:.2f} GiB over the usable 90%)")
    human = runner.invoke(app, ["perf", str(oom_job)], terminal_width=250)
    explain = runner.invoke(app, ["explain", str(oom_job)], terminal_width=250)
    html_path = tmp_path / "perf.html"
    page = runner.invoke(app, ["perf", str(oom_job), "--html", str(html_path)])
    for result in (human, explain, page):
        assert result.exit_code == 0, result.output
    # (a table cell may wrap the verdict: compare the words, borders and breaks left out)
    assert expected in _words(human.stdout)
    assert expected in _words(explain.stdout)
    assert expected in html_path.read_text()


def test_perf_names_the_pipeline_rank_its_memory_breakdown_is():
    """DeepSeek-V3 with 3 dense blocks first on 16 stages of 4 blocks: rank 0 holds 3 dense
    and 1 MoE block, rank 1 four MoE blocks; the breakdown is rank 1's, and perf says so (a
    hand audit checked it against the first stage, as the docs said)."""
    from mosaic.evaluate.job import load_job_spec
    from mosaic.perf.memory import heaviest_stage

    overrides = ["parallelism.pp=16", "parallelism.vpp=1", "parallelism.pipeline_layout=null",
                 "parallelism.tp=1", "parallelism.dp=32", "parallelism.ep=32",
                 "batch.micro_seqs=1", "hardware.nodes=64", "search.devices=512"]
    job = Path(__file__).resolve().parents[2] / "examples" / "deepseek_v3_h100.yaml"
    args = [item for o in overrides for item in ("--set", o)]
    result = runner.invoke(app, ["perf", str(job), *args, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    spec = load_job_spec(job, overrides)
    assert document["memory_stage"] == int(heaviest_stage(spec.workload, spec.plan)[0]) == 1
    text = runner.invoke(app, ["perf", str(job), *args]).output
    assert "Memory breakdown (heaviest stage: pipeline rank 1 of 16)" in text


def test_a_calibration_profiles_stack_is_the_stack_of_a_job_that_names_none():
    """`mosaic perf examples/appendix_e.yaml --calibration paper-p6b200` ran megatron-core
    under the paper's profile (a trial); it now runs the profile's paper-nemo, as `mosaic
    plan` does, says so, and a stated stack wins."""
    implied = runner.invoke(app, ["perf", str(JOB), "--calibration", "paper-p6b200", "--json"])
    stated = runner.invoke(app, ["perf", str(JOB), "--calibration", "paper-p6b200", "--set",
                                 "performance.stack=paper-nemo", "--json"])
    other = runner.invoke(app, ["perf", str(JOB), "--calibration", "paper-p6b200", "--set",
                                "performance.stack=megatron-core", "--json"])
    a, b, c = (json.loads(r.stdout) for r in (implied, stated, other))
    assert a["stack"] == b["stack"] == "paper-nemo" and c["stack"] == "megatron-core"
    assert a["step_time_s"] == b["step_time_s"] != c["step_time_s"]
    assert any("the calibration profile's stack" in line for line in a["assumptions"])


def test_compare_runs_a_job_on_its_calibrations_stack_as_perf_does():
    """`mosaic compare --calibration paper-p6b200` costed a stackless job on megatron-core
    while perf used the profile's paper-nemo (a review)."""
    perf = json.loads(runner.invoke(app, ["perf", str(JOB), "--calibration", "paper-p6b200",
                                          "--json"]).stdout)
    result = runner.invoke(app, ["compare", str(JOB), str(JOB), "--calibration",
                                 "paper-p6b200", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["a"]["step_time_s"] == pytest.approx(perf["step_time_s"])


def test_an_overshoot_of_a_few_mib_reads_in_mib():
    """'misses by 0.00 GiB' (layouts page) and 'over by 0.0' (explain) read as no miss (two
    trials): one helper writes both, in MiB where the GiB figure would round to zero."""
    from mosaic.perf.headroom import gib_or_mib_text

    assert gib_or_mib_text(1.254) == "1.25 GiB"
    assert gib_or_mib_text(0.0007) == "0.72 MiB"  # 0.0007 x 1024
    assert gib_or_mib_text(0.04, decimals=1) == "41 MiB"


def test_a_layout_refused_under_a_calibrations_stack_names_where_the_stack_came_from(
        tmp_path):
    """A profile fitted on torchtitan runs names torchtitan; the Appendix E job, which names
    no stack, is then refused for torchtitan's default vpp of 2 (48 layers on pp 16): the
    refusal says the stack is the profile's, not the job's (a trial read it without)."""
    from mosaic.perf.calibration import load_calibration

    document = load_calibration("default").to_document()
    profile = tmp_path / "torchtitan_profile.yaml"
    profile.write_text(yaml.safe_dump({**document, "stack": "torchtitan"}, sort_keys=False))
    refused = runner.invoke(app, ["perf", str(JOB), "--calibration", str(profile)])
    assert refused.exit_code == 2
    assert "pp·vpp=16·2 must divide layers=48" in refused.output
    assert ("performance.stack not stated: torchtitan (the calibration profile's stack)"
            in refused.output)
    stated = runner.invoke(app, ["perf", str(JOB), "--calibration", str(profile), "--set",
                                 "performance.stack=megatron-core"])
    assert stated.exit_code == 0, stated.output
