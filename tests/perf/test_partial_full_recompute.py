"""Full recompute of a share of the blocks (Megatron-Core ``--recompute-method block
--recompute-num-layers k``, as NeMo 2's performance scripts set it for Llama 3 70B on GB200:
10 or 20 of 80 blocks). Expected values by hand: the recompute term scales with the share,
and a block keeps on average share x its input plus (1 - share) x its working set."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.config.job_schema import job_from_document
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import load_calibration
from mosaic.perf.memory import activation_bytes_per_layer, layer_input_bytes
from mosaic.perf.plan import Checkpointing


def _job(checkpointing: str, fraction: float | None = None):
    performance = {"precision": "bf16", "stack": "megatron-core", "checkpointing": checkpointing}
    if fraction is not None:
        performance["recompute_block_fraction"] = fraction
    return job_from_document({
        "model": {"layers": 80, "d_model": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128,
                  "ffn": 28672, "vocab": 128256},
        "batch": {"global_seqs": 128, "seq_len": 8192, "micro_seqs": 1},
        "parallelism": {"tp": 1, "pp": 1, "dp": 64, "sharding": "fsdp"},
        "performance": performance,
        "hardware": {"system": "GB200-NVL72", "nodes": 16}}, "test")


def _recompute_s(spec) -> float:
    breakdown = predict_job(spec, load_calibration("default")).prediction.analytic_breakdown_s
    return float(breakdown["compute_recompute"][0])


def test_the_recompute_term_scales_with_the_share_of_blocks():
    every = _recompute_s(_job("full"))
    assert every > 0
    assert _recompute_s(_job("full", 0.125)) == pytest.approx(every * 0.125, rel=1e-9)
    assert _recompute_s(_job("full", 1.0)) == pytest.approx(every, rel=1e-12)


def test_a_block_keeps_its_input_or_its_working_set_in_proportion():
    spec = _job("full", 0.25)
    plans = spec.plan
    none = replace(plans, checkpointing=np.full_like(plans.checkpointing,
                                                     int(Checkpointing.NONE)))
    working_set = activation_bytes_per_layer(spec.workload, none)[0]
    block_input = layer_input_bytes(spec.workload, plans)[0]
    assert block_input < working_set
    assert activation_bytes_per_layer(spec.workload, plans)[0] == pytest.approx(
        0.25 * block_input + 0.75 * working_set, rel=1e-12)
