"""Run `mosaic` in-process and assert the CLI contract (src/mosaic/cli/contract.py)."""

from __future__ import annotations

from pathlib import Path

from mosaic.cli.contract import Outcome, check, run_in_process

REPO = Path(__file__).resolve().parents[2]
TIME_BOUND_S = 30.0


def assert_contract(argv: list[str], files: dict[str, bytes] | None = None,
                    expect_exit: int | None = None, json_output: bool = True) -> Outcome:
    """Run one case; fail with the contract's violations, or on an unexpected exit status."""
    outcome = run_in_process(argv, files or {}, timeout_s=TIME_BOUND_S, cwd=REPO)
    problems = check(outcome, json_output, TIME_BOUND_S)
    assert not problems, f"{argv}: {problems}\n{(outcome.crash or outcome.stderr)[-2000:]}"
    if expect_exit is not None:
        assert outcome.exit_code == expect_exit, (argv, outcome.exit_code, outcome.stderr)
    return outcome
