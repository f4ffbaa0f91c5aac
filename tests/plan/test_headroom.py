"""Memory headroom (issue 10 §2): one rule for plan and jobs, visible in the output.

The rule (mosaic.perf.headroom): the user's fraction, else the stack's documented one
(paper-nemo: 1.0, the paper's M_dev = the whole device, Table 3), else 0.9.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.perf.headroom import DEFAULT_USABLE_MEMORY_FRACTION, memory_headroom
from mosaic.plan import Envelope, resolve_system

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def test_the_rule():
    assert DEFAULT_USABLE_MEMORY_FRACTION == 0.9
    assert memory_headroom(None, "megatron-core").usable_fraction == 0.9
    assert memory_headroom(None, "megatron-core").origin == "default"
    assert memory_headroom(None, "paper-nemo").usable_fraction == 1.0
    assert memory_headroom(0.8, "paper-nemo").usable_fraction == 0.8
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(MosaicInputError, match="memory fraction"):
            memory_headroom(bad, "megatron-core")


def test_envelope_document_states_the_headroom_in_bytes():
    envelope = Envelope(resolve_system("B200"), n_nodes=1, days=1.0)
    hbm = envelope.system.device.hbm_bytes
    document = envelope.to_dict()["memory_headroom"]
    assert document["usable_memory_fraction"] == envelope.usable_memory_fraction == 0.9
    assert document["usable_memory_bytes"] == pytest.approx(0.9 * hbm)
    assert document["headroom_bytes"] == pytest.approx(0.1 * hbm)
    paper = Envelope(resolve_system("B200"), n_nodes=1, days=1.0, stack="paper-nemo")
    assert paper.usable_memory_fraction == 1.0  # the paper reproduction keeps M_dev = HBM


def perf_json(*args: str) -> dict:
    result = runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_jobs_take_the_same_rule_and_feasibility_uses_it():
    default = perf_json()
    assert default["usable_memory_fraction"] == 0.9
    assert perf_json("--set", "performance.stack=paper-nemo")["usable_memory_fraction"] == 1.0
    # Just below the job's own footprint: infeasible, short by memory - f·capacity.
    fraction = round(default["memory_gib"] / default["memory_capacity_gib"] - 0.01, 4)
    tight = perf_json("--set", f"hardware.usable_memory_fraction={fraction}")
    assert tight["usable_memory_fraction"] == fraction and not tight["feasible"]
    assert tight["overshoot_gib"] == pytest.approx(
        tight["memory_gib"] - fraction * tight["memory_capacity_gib"])
    assert default["feasible"] and default["memory_gib"] == tight["memory_gib"]
