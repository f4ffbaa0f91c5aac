"""An interleaved pipeline (vpp > 1) needs at least pp micro-batches per step: Megatron-Core
runs micro-batches in groups of pp per model chunk and refuses fewer (schedules.py @
core_v0.16.0); with one micro-batch the chunks run one after another, so the bubble formula
(pp-1)/(vpp·n_mb) would credit interleaving that cannot happen (a new user's trial found
pp=2, vpp=4 at one micro-batch ranked first by `mosaic layouts`)."""

from __future__ import annotations

import numpy as np
import pytest

from mosaic.arch import Geometry
from mosaic.errors import MosaicInputError
from mosaic.perf.constraints import plan_violations
from mosaic.perf.plan import concatenate_plans, single_plan
from mosaic.perf.workload import Workload

DENSE = Geometry(layers=48, d_model=2048, heads=32, kv_heads=4, head_dim=128, ffn=8192,
                 vocab=32000)
RULE = "micro-batches per step"


def _violated(global_batch: int, **layout: int) -> bool:
    workload = Workload(geometry=DENSE, global_batch=global_batch, seq_len=4096)
    plans = concatenate_plans([single_plan(**layout)])
    hits = [v for v in plan_violations(workload, plans, 512) if RULE in v.rule]
    return bool(hits and np.any(hits[0].violated))


def test_one_micro_batch_per_step_refuses_interleaving():
    # dp 256 x micro-batch 2 = 512 sequences: the whole global batch in one micro-batch
    assert _violated(512, pp=2, vpp=4, dp=256, micro_batch=2)
    assert not _violated(512, pp=2, vpp=1, dp=256, micro_batch=2)  # plain 1F1B is fine


def test_pp_micro_batches_are_enough():
    # 1024 / (256·2) = 2 = pp micro-batches; one fewer than pp (pp=4) is refused
    assert not _violated(1024, pp=2, vpp=4, dp=256, micro_batch=2)
    assert _violated(1536, pp=4, vpp=2, dp=128, micro_batch=4)  # 1536/512 = 3 < 4


def test_offloading_every_layer_is_refused_as_megatron_does():
    # Megatron-Core: cpu_offloading_num_layers must be < num_layers (transformer_config.py)
    Workload(geometry=DENSE, global_batch=512, seq_len=4096, offloaded_activation_layers=47)
    with pytest.raises(MosaicInputError, match="below the model's 48 layers, got 48"):
        Workload(geometry=DENSE, global_batch=512, seq_len=4096, offloaded_activation_layers=48)
