"""Batch-level EP overlap (Megatron-Core --overlap-moe-expert-parallel-comm, DualPipe): one
micro-batch's all-to-alls hide behind the other micro-batch's block compute."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.layer_costs import dispatch_all_to_all_s, moe_block_times
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.workload import Workload

WORKLOAD = Workload(geometry=ladder_geometry(4, experts=64, top_k=4, split_factor=4),
                    global_batch=256, seq_len=4096)


def _machine(nodes: int):
    return machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=nodes), "bf16")


def test_overlap_exposes_only_the_all_to_all_beyond_the_other_blocks_compute():
    machine = _machine(8)
    plan = single_plan(dp=64, ep=64, micro_batch=1)  # EP across 8 nodes: a long exchange
    a2a = dispatch_all_to_all_s(machine, WORKLOAD, plan)[0]
    off = moe_block_times(machine, WORKLOAD, plan)
    on = moe_block_times(machine, replace(WORKLOAD, ep_overlap=True), plan)
    # Without the overlap only the shared expert (forward, then twice that in backward)
    # hides the four all-to-alls (dispatch and combine, forward and backward).
    shared_fwd = off.shared_expert[0] / 3
    exposed_off = max(0.0, 2 * a2a - shared_fwd) + max(0.0, 2 * a2a - 2 * shared_fwd)
    # what is hidden still slows the compute beside it by 18.9% (NCCL's all-to-all)
    assert off.ep_all_to_all[0] == pytest.approx(exposed_off + 0.189 * (4 * a2a - exposed_off))
    other = (on.attention_gemm + on.attention_core + on.mlp_gemm + on.shared_expert)[0]
    exposed_on = max(0.0, 4 * a2a - other)
    assert on.ep_all_to_all[0] == pytest.approx(exposed_on + 0.189 * (4 * a2a - exposed_on))
    assert on.ep_all_to_all[0] < off.ep_all_to_all[0]
    # Compute is untouched: overlap moves no FLOPs.
    assert on.compute[0] == pytest.approx(off.compute[0])


def test_an_exchange_shorter_than_the_other_blocks_compute_is_fully_hidden():
    machine = _machine(1)
    plan = single_plan(dp=8, ep=8, micro_batch=4)  # EP inside one NVLink domain
    on = moe_block_times(machine, replace(WORKLOAD, ep_overlap=True), plan)
    a2a = dispatch_all_to_all_s(machine, WORKLOAD, plan)[0]
    assert 4 * a2a < (on.attention_gemm + on.mlp_gemm)[0]
    # nothing exposed: only the 18.9% the hidden exchange costs the compute beside it
    assert on.ep_all_to_all[0] == pytest.approx(0.189 * 4 * a2a)
    assert np.all(moe_block_times(machine, WORKLOAD, plan).ep_all_to_all > 0.0)
