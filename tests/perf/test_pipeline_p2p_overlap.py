"""Pipeline stage transfers: blocking, or hidden behind the next virtual chunk (Megatron-Core
overlap_p2p_comm with the interleaved schedule)."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.collectives import send_recv_time_s
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.step_time import _pipeline_send_recv
from mosaic.perf.workload import Workload

MACHINE = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=4), "bf16")
WORKLOAD = Workload(geometry=ladder_geometry(4), global_batch=64, seq_len=4096,
                    stack="megatron-core")


def _boundary_s(plan) -> float:
    """One transfer by hand: micro-batch tokens x d_model x 2 bytes; tp=1 and the stage
    stride dp = 8 puts adjacent stages on different nodes (scale-out)."""
    message = plan.micro_batch[0] * 4096 * WORKLOAD.geometry.d_model * 2
    return float(send_recv_time_s(np.array([message]), np.array([True]),
                                  MACHINE.interconnect)[0])


def test_interleaved_transfers_hide_behind_one_chunk_forward():
    plan = single_plan(pp=4, vpp=2, dp=8, micro_batch=1)
    boundary = _boundary_s(plan)
    chunk = np.array([0.4 * boundary])
    exposed = _pipeline_send_recv(MACHINE, WORKLOAD, plan, chunk)[0]
    # 2 directions x vpp chunks, each exposing what the chunk's forward cannot cover.
    assert exposed == pytest.approx(2 * 2 * 0.6 * boundary)
    assert _pipeline_send_recv(MACHINE, WORKLOAD, plan, np.array([10 * boundary]))[0] == 0.0


def test_without_interleaving_or_on_a_stack_without_overlap_every_transfer_blocks():
    chunk = np.array([1.0])  # a long chunk would hide everything if overlap applied
    plain = single_plan(pp=4, vpp=1, dp=8, micro_batch=1)
    assert _pipeline_send_recv(MACHINE, WORKLOAD, plain, chunk)[0] == pytest.approx(
        2 * _boundary_s(plain))
    interleaved = single_plan(pp=4, vpp=2, dp=8, micro_batch=1)
    titan = replace(WORKLOAD, stack="torchtitan")
    assert _pipeline_send_recv(MACHINE, titan, interleaved, chunk)[0] == pytest.approx(
        2 * 2 * _boundary_s(interleaved))
    assert _pipeline_send_recv(MACHINE, WORKLOAD, single_plan(dp=32), chunk)[0] == 0.0
