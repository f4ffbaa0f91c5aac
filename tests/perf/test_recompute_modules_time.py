"""Megatron-Core's fine-grained selective recompute (recompute_modules) costs the forward
time of each module it drops from memory."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.element_bytes import ACTIVATION_BYTES
from mosaic.perf.kernels import memory_bound_time_s
from mosaic.perf.layer_costs import (
    dense_block_times,
    dispatch_all_to_all_s,
    moe_block_times,
)
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import Checkpointing, single_plan
from mosaic.perf.shapes import expert_copies
from mosaic.perf.workload import Workload

MACHINE = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
PLAN = single_plan(dp=8, ep=8, micro_batch=1, checkpointing=Checkpointing.SELECTIVE)


def _moe(modules):
    return Workload(geometry=ladder_geometry(4, experts=64, top_k=4, split_factor=4),
                    global_batch=64, seq_len=4096, recompute_modules=modules)


def test_moe_act_recomputes_the_expert_activation_kernel_by_hand():
    base = moe_block_times(MACHINE, _moe(None), PLAN)
    act = moe_block_times(MACHINE, _moe(("core_attn", "moe_act")), PLAN)
    workload = _moe(None)
    moe = workload.geometry.moe
    # SwiGLU over every routed token copy: read gate and up, write the product (bf16).
    act_bytes = float(expert_copies(workload, PLAN)[0]) * moe.expert_ffn * 3 * ACTIVATION_BYTES
    expected = memory_bound_time_s(act_bytes, MACHINE.hbm_bw_bytes_per_s)
    assert (act.selective_recompute - base.selective_recompute)[0] == pytest.approx(expected)
    # Without core_attn in the list Megatron does not checkpoint the attention core
    # (attention.py: checkpoint_core_attention needs "core_attn" in recompute_modules).
    act_only = moe_block_times(MACHINE, _moe(("moe_act",)), PLAN)
    assert act_only.selective_recompute[0] == pytest.approx(
        base.selective_recompute[0] + expected - base.attention_core_forward[0])
    assert act_only.selective_core_recompute[0] == 0.0


def test_moe_recomputes_the_whole_moe_part_once_and_includes_its_dispatch():
    base = moe_block_times(MACHINE, _moe(None), PLAN)
    whole = moe_block_times(MACHINE, _moe(("core_attn", "moe", "moe_act", "shared_experts")),
                            PLAN)
    moe_only = moe_block_times(MACHINE, _moe(("core_attn", "moe")), PLAN)
    # moe covers its sub-modules: naming them too adds nothing.
    assert whole.selective_recompute[0] == pytest.approx(moe_only.selective_recompute[0])
    extra = (moe_only.selective_recompute - base.selective_recompute)[0]
    a2a = dispatch_all_to_all_s(MACHINE, _moe(None), PLAN)[0]
    experts_forward = base.mlp_gemm[0] / 3  # forward is a third of fwd + bwd
    assert extra > experts_forward + 2 * a2a
    # Dense blocks: mlp recomputes the FFN's GEMMs and activation.
    dense = Workload(geometry=ladder_geometry(4), global_batch=64, seq_len=4096)
    plain = dense_block_times(MACHINE, dense, PLAN)
    mlp = dense_block_times(MACHINE, replace(dense, recompute_modules=("core_attn", "mlp")),
                            PLAN)
    assert (mlp.selective_recompute - plain.selective_recompute)[0] > plain.mlp_gemm[0] / 3
    assert np.all(mlp.compute == plain.compute)  # the block's own work is unchanged

