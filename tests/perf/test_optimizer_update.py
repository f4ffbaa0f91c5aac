"""The optimizer step's streamed bytes come from the memory model's own states (an
architecture review: the time model had 30 B per parameter for Adam whatever the dtypes,
and sharded over dp·cp under HSDP)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import Geometry, MoEConfig
from mosaic.arch.counts import count_parameters
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import load_calibration
from mosaic.perf.kernels import memory_bound_time_s
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import StageParameters, optimizer_update_bytes
from mosaic.perf.plan import Sharding, single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import OptimizerDtype, OptimizerKind, Workload

GEOMETRY = Geometry(layers=4, d_model=512, heads=8, kv_heads=8, head_dim=64, ffn=2048,
                    vocab=1000, moe=MoEConfig(experts=8, top_k=2, expert_ffn=512))
# a stage of 1e6 non-expert parameters (2e5 of them the embedding) and 3e6 expert ones
PARAMS = StageParameters(
    dense=np.array([8e5]), replicated=np.array([0.0]), vocab=np.array([2e5]),
    expert=np.array([3e6]), largest_block=np.array([1e6]), largest_unit=np.array([1e6]),
    largest_block_without_experts=np.array([2e5]),
    largest_unit_without_experts=np.array([2e5]))


def _bytes(plan: object, **settings: object) -> float:
    workload = replace(Workload(GEOMETRY, global_batch=64, seq_len=512), **settings)
    return float(optimizer_update_bytes(workload, PARAMS, plan)[0])


def test_fp32_adam_streams_30_bytes_per_parameter_unsharded() -> None:
    # 2·(8 moments + 4 main) + 4 fp32 gradient + 2 bf16 weight (Megatron defaults)
    plan = single_plan(dp=4, ep=2, sharding=Sharding.NONE)
    assert _bytes(plan, grad_reduce_in_fp32=True) == pytest.approx(30 * 4e6)


def test_dtype_settings_change_the_bytes() -> None:
    plan = single_plan(dp=4, ep=2, sharding=Sharding.NONE)
    # bf16 moments: 2·(4 + 4) + 2 bf16 gradient + 2 = 20
    assert _bytes(plan, optimizer_dtype=OptimizerDtype.BF16_MOMENTS,
                  grad_reduce_in_fp32=False) == pytest.approx(20 * 4e6)
    # bf16 parameters stepped in place: 2·4 moments + 2 gradient + 2·2 weight read and write
    assert _bytes(plan, optimizer_dtype=OptimizerDtype.BF16,
                  grad_reduce_in_fp32=False) == pytest.approx(14 * 4e6)
    # Muon: one fp32 moment (2·(4 + 4) + 4 + 2 = 22), AdamW's second moment on the
    # embedding (2·4 more per vocabulary parameter)
    assert _bytes(plan, optimizer=OptimizerKind.MUON, grad_reduce_in_fp32=True) == (
        pytest.approx(22 * 4e6 + 8 * 2e5))


def test_zero1_shards_over_dp_and_hsdp_over_its_shard_group() -> None:
    full = _bytes(single_plan(dp=4, ep=2, sharding=Sharding.NONE), grad_reduce_in_fp32=True)
    zero1 = _bytes(single_plan(dp=4, ep=2, sharding=Sharding.ZERO1), grad_reduce_in_fp32=True)
    # dense over dp 4, experts over edp = dp·tp·cp / (ep·etp) = 2
    assert zero1 == pytest.approx(30 * (1e6 / 4 + 3e6 / 2))
    assert zero1 < full
    hsdp = _bytes(single_plan(dp=4, ep=2, sharding=Sharding.HSDP, hsdp_shard=2),
                  grad_reduce_in_fp32=True)
    # shards of 2 of the 4 replicas: dense over 2, experts over 2·2/4 = 1
    assert hsdp == pytest.approx(30 * (1e6 / 2 + 3e6 / 1))


def test_torch_fsdp_fp32_shards_write_no_bf16_copy() -> None:
    # torch FSDP keeps the fp32 shard as the parameter (no bf16 copy at rest, weight_bytes
    # 0): 2·(8 + 4) + 4 fp32 gradient = 28 B per local parameter; unsharded plans keep
    # their bf16 weights and write them (30 B)
    fsdp = single_plan(dp=4, ep=2, sharding=Sharding.FSDP)
    local = 1e6 / 4 + 3e6 / 2
    assert _bytes(fsdp, stack="torchtitan", grad_reduce_in_fp32=True) == pytest.approx(
        28 * local)
    assert _bytes(single_plan(dp=4, ep=2, sharding=Sharding.NONE), stack="torchtitan",
                  grad_reduce_in_fp32=True) == pytest.approx(30 * 4e6)


def test_gradients_are_read_at_their_stored_width() -> None:
    fsdp = single_plan(dp=4, ep=2, sharding=Sharding.FSDP)
    local = 1e6 / 4 + 3e6 / 2
    # bf16 parameters under torch FSDP get bf16 gradients whatever the reduce dtype:
    # 2·4 bf16 moments + 2 gradient + 2·2 weight read and written = 14 B
    assert _bytes(fsdp, stack="torchtitan", optimizer_dtype=OptimizerDtype.BF16,
                  grad_reduce_in_fp32=True) == pytest.approx(14 * local)
    # DeepSpeed ZeRO keeps its gradient partitions in the model dtype: 2·12 + 2 + 2 = 28
    zero2 = single_plan(dp=4, ep=2, sharding=Sharding.ZERO2)
    assert _bytes(zero2, stack="deepspeed", grad_reduce_in_fp32=True) == pytest.approx(
        28 * local)


@pytest.mark.parametrize(("stack", "bytes_per_param"), [("megatron-core", 30),
                                                        ("torchtitan", 28)])
def test_the_step_time_streams_those_bytes(stack: str, bytes_per_param: int) -> None:
    """The time model's optimizer term is one streaming pass over the bytes counted above:
    a dense model, HSDP with shards of 4 of 8 replicas, fp32 Adam, one pipeline stage
    holding every parameter (17,810,432 by hand: 4 layers of 4·512² attention + 3·512·2048
    SwiGLU + 2 LayerNorms of weight and bias, a final one, untied 1000×512 embedding and head)."""
    geometry = Geometry(layers=4, d_model=512, heads=8, kv_heads=8, head_dim=64, ffn=2048,
                        vocab=1000)
    total = count_parameters(geometry).n_total_with_embedding
    assert total == 4 * (4 * 512**2 + 3 * 512 * 2048 + 2 * 1024) + 1024 + 2 * 1000 * 512
    workload = Workload(geometry, global_batch=64, seq_len=512, stack=stack,
                        grad_reduce_in_fp32=True)
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    step = predict_step(workload, single_plan(dp=8, sharding=Sharding.HSDP, hsdp_shard=4),
                        machine, load_calibration(None))
    expected = memory_bound_time_s(bytes_per_param * total / 4, machine.hbm_bw_bytes_per_s)
    assert step.analytic_breakdown_s["optimizer"][0] == pytest.approx(float(expected))
