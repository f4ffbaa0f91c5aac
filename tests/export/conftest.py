"""A small plan's JSON, planned once for every export test that reads a plan file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app


@pytest.fixture(scope="session")
def small_plan_text() -> str:
    """`mosaic plan --json` of 8 nodes for 5 days over a small grid."""
    result = CliRunner().invoke(app, ["plan", "--nodes", "8", "--days", "5", "--q", "8,10",
                                      "--experts", "8,16", "--top-k", "1,2",
                                      "--split-factor", "1,2", "--json"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="session")
def plan_json(tmp_path_factory, small_plan_text) -> Path:
    """That plan's JSON in a file."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(small_plan_text)
    return path
