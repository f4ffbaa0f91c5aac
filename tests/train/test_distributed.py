"""torchrun + FSDP2 on CPU (gloo): 2 processes equal one process at the same global batch,
with the experts FSDP-sharded (ep 1) or split over the two ranks with all-to-all (ep 2)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from mosaic.train.config import train_config_from_mapping  # noqa: E402
from mosaic.train.metrics import read_metrics  # noqa: E402
from mosaic.train.trainer import train  # noqa: E402

from .conftest import tiny_job  # noqa: E402

STEPS = 4


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed missing")
@pytest.mark.parametrize("expert_parallel", [1, 2])
def test_two_gloo_processes_match_one_process(tmp_path, expert_parallel):
    job = tiny_job(run={"tokens": STEPS * 8 * 32, "checkpoint_every": 2})
    path = tmp_path / "job.yaml"
    launched = tiny_job(run={"tokens": STEPS * 8 * 32, "checkpoint_every": 2,
                             "expert_parallel": expert_parallel})
    path.write_text(yaml.safe_dump(launched))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", "-m", "mosaic.train", str(path),
               "--out", str(tmp_path / "fsdp"), "--quiet"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    single = train(train_config_from_mapping(job, "job"), tmp_path / "single")
    two = read_metrics(tmp_path / "fsdp" / "metrics.jsonl")
    one = read_metrics(tmp_path / "single" / "metrics.jsonl")
    assert len(two) == len(one) == STEPS
    for a, b in zip(one, two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert b["router"]["load_max_over_mean"] == a["router"]["load_max_over_mean"]
        assert b["router"]["bias_norm"] == pytest.approx(a["router"]["bias_norm"], rel=1e-6)
    info = yaml.safe_load((tmp_path / "fsdp" / "run.json").read_text())
    assert info["world_size"] == 2 and info["accumulation"] == 1
    assert single.world_size == 1
    # The checkpoint holds full tensors (all E experts): it matches the single process's and
    # resumes in a single process.
    a = torch.load(tmp_path / "fsdp" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "single" / "checkpoint.pt", weights_only=False)
    assert a["model"]["blocks.1.ffn.routed.w1"].shape[0] == 8
    for key, value in b["model"].items():
        torch.testing.assert_close(a["model"][key], value, rtol=1e-4, atol=1e-5)
    resumed = train(train_config_from_mapping(job, "job"), tmp_path / "fsdp")
    assert resumed.steps == STEPS


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed missing")
def test_expert_parallel_with_a_rank_that_receives_no_token():
    worker = Path(__file__).with_name("ep_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", str(worker)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # a skipped backward collective would hang here
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 ok" in done.stdout and "rank 1 ok" in done.stdout


def test_the_launcher_entry_point_prints_warnings_as_one_line_each(tmp_path):
    """`python -m mosaic.train` (torchrun's entry) says a warning as `mosaic train` does, one
    `warning:` line, not Python's form with the source line under it (a trial): a GPU's
    name on a CPU run measures nothing."""
    job = tiny_job(run={"tokens": 2 * 8 * 32, "device_name": "H200-SXM-141GB"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    done = subprocess.run([sys.executable, "-m", "mosaic.train", str(path), "--out",
                           str(tmp_path / "run"), "--quiet"],
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "device_name" in line]
    assert lines and all(line.startswith("warning: ") for line in lines), done.stderr
    assert "MosaicWarning" not in done.stderr and "trainer.py" not in done.stderr


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed missing")
def test_a_lock_path_rank_0_cannot_use_stops_every_rank_in_one_line(tmp_path):
    """A FIFO at DIR/.train.lock was refused on rank 0 alone, before the all-reduce that
    tells the others: the one line sat in rank 0's report while torchrun stopped the rest
    (a review). Every rank now stops with a line of its own, rank 0's saying why."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(tiny_job(run={"tokens": STEPS * 8 * 32})))
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / ".train.lock")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", "-m", "mosaic.train", str(path), "--out", str(out),
               "--quiet"]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode != 0
    assert "not a regular file" in done.stderr  # rank 0's reason
    assert "rank 0 cannot take the run folder's lock" in done.stderr  # rank 1's line
    # torchrun's own agent prints its ChildFailedError traceback; no frame is mosaic's
    assert "src/mosaic/" not in done.stderr and "site-packages/mosaic/" not in done.stderr
