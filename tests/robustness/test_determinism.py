"""Same inputs, byte-identical output: every command's --json twice in one process, and
files written by the commands (issue 11, section 4)."""

from __future__ import annotations

import pytest

from .conftest import assert_contract

RUNS_CSV = ("n_total,sparsity,tokens,split_factor,loss\n" + "".join(
    f"{n:.6g},{s},{d:.6g},{g},{2.0 + 40 / (n ** 0.1) + 300 / (d ** 0.15):.6f}\n"
    for n, s, d, g in [(1e9, 0.5, 1e10, 1), (3e9, 0.75, 2e10, 2), (1e10, 0.9, 5e10, 4),
                       (2e9, 0.6, 3e10, 8), (5e9, 0.8, 1e10, 1), (8e9, 0.7, 8e10, 2),
                       (2e10, 0.95, 2e10, 4), (4e9, 0.85, 6e10, 8), (6e9, 0.55, 4e10, 1),
                       (1.5e10, 0.65, 9e10, 2), (3e10, 0.9, 3e10, 4), (7e9, 0.8, 5e10, 8)]))
SMALL_PLAN = ["--q", "8", "--experts", "8,16", "--top-k", "1,2", "--split-factor", "1,4",
              "--workers", "2", "--nodes", "2"]

COMMANDS = {
    "arch": ["arch", "--q", "12", "--experts", "96", "--top-k", "2", "--split-factor", "4",
             "--per-layer", "--json"],
    "perf": ["perf", "examples/appendix_e.yaml", "--json"],
    "layouts": ["layouts", "examples/appendix_e.yaml", "--devices", "64", "--top", "5",
                "--json"],
    "explain": ["explain", "examples/fsdp_moe_comm_bound.yaml", "--measured-step-time-s", "2",
                "--json"],
    "law predict": ["law", "predict", "--q", "12", "--experts", "96", "--top-k", "2",
                    "--split-factor", "4", "--tokens", "1.42e12", "--json"],
    "law optimum": ["law", "optimum", "--compute", "1e22", "--profile", "4", "--json"],
    "law fit": ["law", "fit", "RUNS", "--starts", "16", "--refine", "1", "--seed", "3",
                "--json"],
    "validate": ["validate", "examples/runs_example.yaml", "--json"],
    "plan": ["plan", *SMALL_PLAN, "--json"],
    "sweep days": ["sweep", "days", *SMALL_PLAN, "--values", "10,20", "--json"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_json_is_byte_identical_across_runs(name, tmp_path):
    runs = tmp_path / "runs.csv"
    runs.write_text(RUNS_CSV)
    argv = [str(runs) if part == "RUNS" else part for part in COMMANDS[name]]
    first = assert_contract(argv, expect_exit=0)
    second = assert_contract(argv, expect_exit=0)
    assert first.stdout == second.stdout
    assert first.stdout.lstrip().startswith("{")


def test_written_law_file_is_byte_identical(tmp_path):
    runs = tmp_path / "runs.csv"
    runs.write_text(RUNS_CSV)
    contents = []
    for _ in range(2):
        argv = ["law", "fit", str(runs), "--starts", "16", "--refine", "1", "--out",
                str(tmp_path / "law.json"), "--parity", str(tmp_path / "parity.csv")]
        assert_contract(argv, expect_exit=0, json_output=False)
        contents.append(((tmp_path / "law.json").read_bytes(),
                         (tmp_path / "parity.csv").read_bytes()))
    assert contents[0] == contents[1]
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary file
