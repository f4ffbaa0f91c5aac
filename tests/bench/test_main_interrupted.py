"""`python -m mosaic.bench` (the torchrun entry point) interrupted says so, and that a rerun
measures the rest, as `mosaic bench` does (it exited 130 without a word: a trial)."""

import sys

import pytest

from mosaic.bench import __main__ as bench_main


def interrupt(*args, **kwargs):
    raise SystemExit(130)


@pytest.mark.parametrize("env, argv, line", [
    ({}, ["gemm", "--out", "b"],
     "error: interrupted; rerun python -m mosaic.bench gemm --out b to measure the rest "
     "(the cases measured are kept)\n"),
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "0"}, ["collectives", "--out", "b"],
     "error: interrupted; rerun torchrun ... -m mosaic.bench collectives --out b to measure "
     "the rest (the cases measured are kept)\n"),
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "1"}, ["collectives", "--out", "b"], ""),
    ({}, ["compare", "a", "b"], "error: interrupted\n"),
])
def test_an_interrupt_is_one_line(monkeypatch, capsys, env, argv, line):
    from mosaic.cli import bench_cmd

    for name in ("TORCHELASTIC_RUN_ID", "RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(bench_cmd, "bench_app", interrupt)
    monkeypatch.setattr(sys, "argv", ["mosaic/bench/__main__.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        bench_main.main()
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == line
