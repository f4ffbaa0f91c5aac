"""Fixtures of the stack tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"


@pytest.fixture
def fsdp_moe_run() -> Callable[..., dict[str, Any]]:
    """A factory of run-record entries: the MoE run of examples/runs_example.yaml on 256 GPUs
    with plain FSDP (tp = pp = cp = ep = 1), ``global_seqs`` sequences of 4096 tokens, a
    placeholder measurement, and the top-level fields in ``changes`` (id, software, ...)."""
    def make(global_seqs: int, **changes: Any) -> dict[str, Any]:
        run = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text())["runs"][1])
        run.update(num_gpus=256, **changes)
        run["parallelism"].update(tp=1, pp=1, vpp=None, cp=1, dp=256, ep=1, etp=1,
                                  sequence_parallel=False, sharding="fsdp")
        run["batch"] = {"global_seqs": global_seqs, "micro_seqs": None, "seq_len": 4096}
        run["measured"] = {"tokens_per_s_per_gpu": 1000.0, "step_time_s": 1.0,
                           "mfu_reported": None, "tflops_per_gpu_reported": None,
                           "memory_gib": None, "consistent": False, "oom": False}
        return run
    return make
