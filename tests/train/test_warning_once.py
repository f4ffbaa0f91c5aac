"""A warning met twice in one command prints once (a trial: `mosaic train` of a rung whose
kv_heads do not divide its query heads printed the same warning line twice: the geometry is
read when the job loads and again when the model is built, and Python's once-per-place
filter had been reset in between by a ``warnings.catch_warnings`` elsewhere)."""

import os
import subprocess
import sys

import pytest
import yaml

from mosaic.cli import warning_lines
from mosaic.errors import MosaicWarning

from .conftest import REPO, tiny_job


def test_the_same_line_is_said_once_per_command(capsys):
    warning_lines.reset()
    for _ in range(2):
        warning_lines.warning_line(MosaicWarning("kv"), MosaicWarning, "x.py", 1)
    warning_lines.warning_line(MosaicWarning("other"), MosaicWarning, "x.py", 1)
    warning_lines.flush(0)
    assert capsys.readouterr().err.splitlines() == ["warning: kv", "warning: other"]
    warning_lines.reset()  # a new command says it again
    warning_lines.warning_line(MosaicWarning("kv"), MosaicWarning, "x.py", 1)
    warning_lines.flush(0)
    assert capsys.readouterr().err.splitlines() == ["warning: kv"]


def test_train_says_a_kv_heads_warning_once(tmp_path):
    pytest.importorskip("torch")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job(ladder={"kv_heads": 3})))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "from mosaic.cli.main import main; main()", "train", str(job),
         "--out", str(tmp_path / "run"), "--stop-after", "1", "--quiet"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "ladder.kv_heads 3" in line]
    assert said == ["warning: ladder.kv_heads 3 does not divide the 4 query heads of q=1: "
                    "the rung uses gcd = 1 KV heads"]
