"""torchtitan's per-op SAC in MoE blocks: grouped expert GEMMs are recomputed, not saved."""

import pytest

from mosaic.arch import Geometry, MoEConfig
from mosaic.perf.memory import (
    activation_bytes_per_layer,
    layer_input_bytes,
    moe_block_activation_bytes,
    per_op_sac_moe_bytes,
    softmax_statistics_bytes,
)
from mosaic.perf.plan import Checkpointing, single_plan
from mosaic.perf.workload import Workload


def _workload(stack: str) -> Workload:
    geometry = Geometry(layers=4, d_model=512, heads=8, kv_heads=2, head_dim=64, ffn=2048,
                        vocab=1000, moe=MoEConfig(experts=16, top_k=4, expert_ffn=256,
                                                  shared_experts=1, dense_layers=1))
    return Workload(geometry, global_batch=16, seq_len=1024, stack=stack)


@pytest.mark.parametrize("ep", [1, 4])
def test_saved_tensors_by_hand(ep: int) -> None:
    workload = _workload("torchtitan")
    plan = single_plan(dp=4, ep=ep, micro_batch=2, checkpointing=Checkpointing.SELECTIVE,
                       sequence_parallel=False)
    tokens = 2 * 1024
    # Q (8 heads x 64) and V (2 kv heads x 64) matmul outputs, SDPA output (8 x 64), bf16.
    attention = 2 * tokens * (512 + 128 + 512)
    gate = 2 * tokens * 16  # router logits
    shared = 2 * tokens * 256  # one of the shared expert's three matmul outputs
    all_to_all = 2 * 2 * 4 * tokens * 512 if ep > 1 else 0  # dispatch + combine outputs
    expected = (layer_input_bytes(workload, plan)[0] + attention
                + softmax_statistics_bytes(workload, plan)[0] + gate + shared + all_to_all)
    assert per_op_sac_moe_bytes(workload, plan)[0] == pytest.approx(expected)
    assert activation_bytes_per_layer(workload, plan, "moe")[0] == pytest.approx(expected)
    # Below what keeping every expert intermediate costs.
    assert expected < moe_block_activation_bytes(workload, plan)[0]


def test_megatron_selective_still_keeps_the_expert_path() -> None:
    workload = _workload("megatron-core")
    plan = single_plan(dp=4, ep=4, micro_batch=2, checkpointing=Checkpointing.SELECTIVE,
                       sequence_parallel=False)
    assert activation_bytes_per_layer(workload, plan, "moe")[0] > per_op_sac_moe_bytes(
        workload, plan)[0]


def test_per_op_sac_recomputes_the_experts_in_time_too() -> None:
    from mosaic.hardware import Cluster, get_system
    from mosaic.perf.layer_costs import moe_block_times
    from mosaic.perf.machine import machine_for

    machine = machine_for(Cluster(get_system("DGX-H100"), 1), "bf16")
    plan = single_plan(dp=8, ep=4, micro_batch=2, sequence_parallel=False)
    titan = moe_block_times(machine, _workload("torchtitan"), plan)
    megatron = moe_block_times(machine, _workload("megatron-core"), plan)
    assert titan.selective_recompute[0] > titan.mlp_gemm[0] / 3  # the experts' forward
    assert megatron.selective_recompute[0] == megatron.attention_core_forward[0]
