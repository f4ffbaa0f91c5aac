"""`calibrate --microbench DIR --out FILE` refuses a FILE of the bench folder it reads (a
trial's `--out DIR/metadata.json` replaced the bench's metadata with the calibration, and the
folder could no longer be read or resumed)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A real bench folder: the kernels family, tiny and quick (seconds on a CPU)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("bench") / "b"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "mosaic.bench", "kernels", "--preset", "tiny",
                           "--quick", "--no-progress", "--threads", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("name", ["metadata.json", "kernels.csv", "kernels.parquet"])
def test_a_file_of_the_bench_folder_is_refused_before_the_fit(measured, tmp_path, name):
    bench = tmp_path / "b"
    shutil.copytree(measured, bench)
    before = (bench / name).read_bytes()
    result = CliRunner().invoke(app, ["calibrate", "--microbench", str(bench), "--out",
                                      str(bench / name)])
    assert result.exit_code == 2
    assert "is the input file; writing it would replace what the command reads" in " ".join(
        result.output.split())
    assert (bench / name).read_bytes() == before


def test_another_file_in_the_folder_is_no_input(measured, tmp_path):
    """A calibration written into the folder is not one of its tables: a rerun may replace
    it (the fit itself then needs a GEMM peak sweep, which this kernels-only folder lacks)."""
    bench = tmp_path / "b"
    shutil.copytree(measured, bench)
    (bench / "cal.yaml").write_text("name: earlier\n")
    result = CliRunner().invoke(app, ["calibrate", "--microbench", str(bench), "--out",
                                      str(bench / "cal.yaml")])
    assert "is the input file" not in result.output
    assert "measure a gemm peak sweep" in " ".join(result.output.split())
