"""torchrun + FSDP2 on CPU (gloo): 2 processes equal one process at the same global batch."""

import os
import subprocess
import sys

import pytest
import yaml

torch = pytest.importorskip("torch")

from mosaic.train.config import train_config_from_mapping  # noqa: E402
from mosaic.train.metrics import read_metrics  # noqa: E402
from mosaic.train.trainer import train  # noqa: E402

from .conftest import tiny_job  # noqa: E402

STEPS = 4


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed missing")
def test_two_gloo_processes_match_one_process(tmp_path):
    job = tiny_job(run={"tokens": STEPS * 8 * 32, "checkpoint_every": 2})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
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
        assert b["router"]["load_max_over_mean"] == a["router"]["load_max_over_mean"]
        assert b["router"]["bias_norm"] == pytest.approx(a["router"]["bias_norm"], rel=1e-6)
    info = yaml.safe_load((tmp_path / "fsdp" / "run.json").read_text())
    assert info["world_size"] == 2 and info["accumulation"] == 1
    assert single.world_size == 1
    # The FSDP checkpoint is a full state dict: it resumes in a single process.
    resumed = train(train_config_from_mapping(job, "job"), tmp_path / "fsdp")
    assert resumed.steps == STEPS
