"""Embedding and loss in the pipeline split (Megatron-LM --account-for-embedding/loss-in-
pipeline-split): the end stages hold fewer blocks and the slowest stage paces the step."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import Geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.constraints import plan_violations
from mosaic.perf.layer_costs import dense_block_times
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.schedule import stage_layer_counts
from mosaic.perf.step_time import _vocab_stage_times, predict_step
from mosaic.perf.workload import Workload

GEOMETRY = Geometry(layers=94, d_model=4096, heads=32, kv_heads=8, head_dim=128, ffn=12288,
                    vocab=151936)
MACHINE = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=32), "bf16")


def test_the_ends_give_one_slot_each_to_the_embedding_and_the_loss():
    # 94 blocks + 2 slots over pp·vpp = 32·3 chunks of one slot: rank 0 holds slots 0, 32,
    # 64 (the embedding and two blocks), the last rank 31, 63, 95 (two blocks and the loss),
    # every other rank three blocks.
    plan = single_plan(pp=32, vpp=3, dp=8)
    counts = {stage: int(stage_layer_counts(GEOMETRY, plan, stage, vocab_in_split=True)[0][0])
              for stage in ("first", "middle", "last")}
    assert counts == {"first": 2, "middle": 3, "last": 2}
    # Without the flag the layout breaks the even-split rule; with it, pp·vpp | L + 2.
    workload = Workload(geometry=GEOMETRY, global_batch=256, seq_len=4096)
    broken = [v.rule for v in plan_violations(workload, plan, 256) if v.violated[0]]
    assert any("must divide layers=94" in rule for rule in broken)
    split = replace(workload, vocab_in_pipeline_split=True)
    assert not [v.rule for v in plan_violations(split, plan, 256) if v.violated[0]]


def test_the_slowest_stage_paces_the_step_by_hand():
    workload = Workload(geometry=GEOMETRY, global_batch=256, seq_len=4096,
                        vocab_in_pipeline_split=True)
    plan = single_plan(pp=32, vpp=3, dp=8)
    calibration = replace(default_calibration(), stack_overhead={}, chi_a2a=0.0, chi_pp=0.0,
                          chi_overlap=0.0, elementwise_traffic_factor=1.0)
    step = predict_step(workload, plan, MACHINE, calibration)
    block = dense_block_times(MACHINE, workload, plan)
    t_first, t_last, _ = (float(t[0]) for t in _vocab_stage_times(MACHINE, workload, plan))
    per_block = float((block.compute + block.tp_communication)[0])
    # Two blocks + LM head and loss against three blocks: here the head (a 152k vocabulary)
    # outweighs a block, so the last rank paces the pipeline.
    assert 2 * per_block + t_last > 3 * per_block
    n_mb = 256 // (8 * 1)
    f_bubble = 31 / (3 * n_mb)
    expected_vocab = n_mb * t_last * (1 + f_bubble) + t_first
    assert step.analytic_breakdown_s["vocab_stage"][0] == pytest.approx(expected_vocab)
    assert step.analytic_breakdown_s["compute_mlp"][0] == pytest.approx(
        n_mb * 2 * float(block.mlp_gemm[0]))
    # The same plan with the ends full (three blocks each) and the vocabulary on top is
    # slower: Eq. 13 adds the head to a full stage.
    plain = replace(workload, vocab_in_pipeline_split=False, uneven_pipeline_stages=True)
    assert predict_step(plain, plan, MACHINE, calibration).step_time_s[0] > step.step_time_s[0]
    assert np.isclose(sum(v[0] for v in step.breakdown_s.values()), step.step_time_s[0])
