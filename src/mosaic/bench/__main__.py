"""``python -m mosaic.bench ...``: the ``mosaic bench`` commands, for torchrun
(``torchrun --nproc-per-node 8 -m mosaic.bench collectives --out DIR``)."""

from __future__ import annotations

import shlex
import sys

from mosaic.torchrun_env import is_rank_zero, under_torchrun

INTERRUPTED = 130  # typer's exit status for Ctrl-C (typer/core.py: Exit(130)), 128 + SIGINT


def interrupted_line(argv: list[str]) -> str | None:
    """What an interrupted ``python -m mosaic.bench ARGV`` says (as ``mosaic bench`` does),
    on rank 0 only under torchrun; None where it says nothing (another rank, a command that
    measures nothing: ``compare``, ``--dry-run``)."""
    if not is_rank_zero():
        return None
    if not argv or argv[0] == "compare" or "--dry-run" in argv or "--help" in argv:
        return "error: interrupted"
    launcher = "torchrun ... -m" if under_torchrun() else "python -m"
    return (f"error: interrupted; rerun {launcher} {shlex.join(['mosaic.bench', *argv])} to "
            "measure the rest (the cases measured are kept)")


def main() -> None:
    from mosaic.cli.bench_cmd import bench_app
    from mosaic.cli.warning_lines import install_immediate

    install_immediate()  # one `warning:` line each, as `mosaic bench` prints them
    try:
        bench_app(prog_name="python -m mosaic.bench")
    except SystemExit as exc:
        # Ctrl-C ended it with status 130 and not a word (a trial): say so, and that a
        # rerun measures the rest, as `mosaic bench` says it
        if exc.code == INTERRUPTED and (line := interrupted_line(sys.argv[1:])) is not None:
            print(line, file=sys.stderr, flush=True)
        raise


if __name__ == "__main__":
    main()
