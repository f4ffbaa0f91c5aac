"""MoE token-movement bytes per dispatcher (docs/evidence/moe_permute_traffic.md).

One Qwen3-30B-A3B MoE layer (d 2048, 128 experts, top-8) on one rank with T = 4096 routed
tokens (32,768 copies), bf16, counted by hand from each implementation's kernels (bytes per
copy per element of d, per token per element of d; forward, backward):

  analytical count (before): permute + unpermute 2+2 each forward, twice that backward
      fwd 8 x 32768 x 2048                              =   536,870,912
      bwd 16 x 32768 x 2048                             = 1,073,741,824
  Megatron alltoall, TE fused (moe_permute_fusion), 16 experts per rank:
      permute 2+2, unpermute 2 per copy + 2 per token, two chunk sorts 2+2 each:
      fwd (4 + 2 + 8) x 32768 x 2048 + 2 x 4096 x 2048  =   956,301,312
      bwd the same (the inverse kernels)                 =   956,301,312
  Megatron alltoall, unfused (index_select, split+cat, zeros + scatter_add):
      fwd (4 + 4 + 8) x 32768 x 2048 + 2 x 4096 x 2048  = 1,090,519,040
      bwd the same                                       = 1,090,519,040
  Megatron alltoall, fused, one expert per rank (no chunk sorts):
      fwd (4 + 2) x 32768 x 2048 + 2 x 4096 x 2048      =   419,430,400
  Megatron flex + DeepEP, fused: as the previous line  =   419,430,400
  Megatron flex + HybridEP: permute inside the dispatch kernel  0
  torchtitan v0.2.2 MoE.forward (eager):
      fwd 32 x 32768 x 2048 + 10 x 4096 x 2048          = 2,231,369,728
      bwd 38 x 32768 x 2048 + 12 x 4096 x 2048          = 2,650,800,128
"""

from pathlib import Path

import numpy as np
import pytest

from mosaic.arch import Geometry, MoEConfig
from mosaic.hardware import Cluster, get_system
from mosaic.perf.layer_costs import moe_block_times, moe_permute_excess_s
from mosaic.perf.machine import machine_for
from mosaic.perf.moe_permute_traffic import (
    ANALYTICAL_PERMUTE,
    MoePermute,
    permute_bytes,
    permute_traffic,
)
from mosaic.perf.plan import single_plan
from mosaic.perf.workload import Dispatcher, Workload

QWEN3_30B = Geometry(layers=48, d_model=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144,
                     vocab=151936, glu=True,
                     moe=MoEConfig(experts=128, top_k=8, expert_ffn=768, shared_experts=0,
                                   dense_layers=0))
TOKENS = 4096
COPIES = TOKENS * 8
D = 2048


def _workload(stack: str, dispatcher: Dispatcher = Dispatcher.ALLTOALL) -> Workload:
    return Workload(geometry=QWEN3_30B, global_batch=256, seq_len=4096, stack=stack,
                    dispatcher=dispatcher)


BY_HAND = [
    # (stack, dispatcher, local experts, forward bytes, backward bytes)
    ("megatron-bridge", Dispatcher.ALLTOALL, 16, 956_301_312, 956_301_312),
    ("megatron-core", Dispatcher.ALLTOALL, 16, 1_090_519_040, 1_090_519_040),
    ("megatron-bridge", Dispatcher.ALLTOALL, 1, 419_430_400, 419_430_400),
    ("megatron-bridge", Dispatcher.DEEPEP, 16, 419_430_400, 419_430_400),
    ("megatron-bridge", Dispatcher.HYBRIDEP, 16, 0, 0),
    ("torchtitan", Dispatcher.ALLTOALL, 16, 2_231_369_728, 2_650_800_128),
]


@pytest.mark.parametrize("stack, dispatcher, local, forward, backward", BY_HAND)
def test_layer_bytes_by_hand(stack, dispatcher, local, forward, backward):
    fwd, bwd = permute_bytes(_workload(stack, dispatcher), [COPIES], [local])
    assert fwd[0] == forward
    assert bwd[0] == backward


def test_analytical_count_is_what_layer_costs_charged_before():
    assert COPIES * D * ANALYTICAL_PERMUTE.forward_per_copy == 536_870_912
    assert COPIES * D * ANALYTICAL_PERMUTE.backward_per_copy == 1_073_741_824


def test_stack_traits_name_the_permute_code():
    assert _workload("megatron-core").traits.moe_permute == MoePermute.TORCH_INDEX
    assert _workload("megatron-bridge").traits.moe_permute == MoePermute.TE_FUSED
    assert _workload("torchtitan").traits.moe_permute == MoePermute.TORCHTITAN
    # torchtitan's MoE.forward runs eager whatever its dispatcher
    assert (permute_traffic(MoePermute.TORCHTITAN, Dispatcher.DEEPEP, True)
            == permute_traffic(MoePermute.TORCHTITAN, Dispatcher.ALLTOALL, False))


def test_torchtitan_forward_kernel_sum():
    """x[idx] 2+2, vstack 2+2, padded gather 2+2, _unpermute index_put 2+2, unsort zeros 2
    and index_put 2+2, float() 2+4, bmm read 4: 32 B per copy per element."""
    per_copy = (2 + 2) + (2 + 2) + (2 + 2) + (2 + 2) + 2 + (2 + 2) + (2 + 4) + 4
    assert permute_traffic(MoePermute.TORCHTITAN, Dispatcher.ALLTOALL,
                           True).forward_per_copy == per_copy


def test_block_term_is_the_difference_to_the_analytical_count():
    """moe_block_times puts the sourced count in ``streaming`` and names its excess over the
    analytical count (negative for HybridEP) ``moe_permute``; the excesses stand in the
    ratio of their bytes (latency and bandwidth are common to both)."""
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    plan = single_plan(dp=8, ep=8, micro_batch=1)  # 4096 tokens, 16 experts per rank
    bridge = _workload("megatron-bridge")
    hybrid = _workload("megatron-bridge", Dispatcher.HYBRIDEP)
    a, b = moe_block_times(machine, bridge, plan), moe_block_times(machine, hybrid, plan)
    assert (a.streaming - a.moe_permute)[0] == pytest.approx((b.streaming - b.moe_permute)[0])
    assert b.streaming[0] > 0
    fwd, bwd = moe_permute_excess_s(machine, bridge, np.array([COPIES]), np.array([16.0]))
    assert a.moe_permute[0] == pytest.approx(fwd[0] + bwd[0])
    analytical = 536_870_912 + 1_073_741_824
    assert b.moe_permute[0] / a.moe_permute[0] == pytest.approx(
        -analytical / (2 * 956_301_312 - analytical))
    # the forward share is in the block's forward (recomputed under full checkpointing)
    hybrid_fwd = moe_permute_excess_s(machine, hybrid, np.array([COPIES]), np.array([16.0]))[0]
    assert a.forward[0] - b.forward[0] == pytest.approx(fwd[0] - hybrid_fwd[0])


def test_torchtitan_block_pays_more_token_movement_than_megatron():
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    plan = single_plan(dp=8, ep=8, micro_batch=1)
    m = moe_block_times(machine, _workload("megatron-core"), plan)
    t = moe_block_times(machine, _workload("torchtitan"), plan)
    # (32 + 38) + (10 + 12) / 8 against (16 + 16) + (2 + 2) / 8 bytes per copy per element
    analytical = 24
    assert (t.moe_permute[0] / m.moe_permute[0]) == pytest.approx(
        (70 + 22 / 8 - analytical) / (32 + 4 / 8 - analytical))


def test_fitted_residual_and_multiplier_scale_only_the_analytical_count():
    """The step's compute_elementwise carries the sourced token movement; the calibrated
    residual (elementwise_traffic_factor - 1) scales the analytical count only."""
    from mosaic.perf.calibration import default_calibration
    from mosaic.perf.step_time import predict_step

    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    plan = single_plan(dp=8, ep=8, micro_batch=1)
    calibration = default_calibration()
    steps = {dispatcher: predict_step(_workload("megatron-bridge", dispatcher), plan, machine,
                                      calibration)
             for dispatcher in (Dispatcher.ALLTOALL, Dispatcher.HYBRIDEP)}
    a, b = steps[Dispatcher.ALLTOALL], steps[Dispatcher.HYBRIDEP]
    extra = "compute_elementwise_extra"
    assert a.analytic_breakdown_s[extra][0] == pytest.approx(b.analytic_breakdown_s[extra][0])
    assert (a.analytic_breakdown_s["compute_elementwise"][0]
            > b.analytic_breakdown_s["compute_elementwise"][0] > 0)


# torchtitan release eras (docs/evidence/moe_permute_traffic.md, "torchtitan eras"), the
# same layer (32,768 copies, 4096 tokens, d 2048; 32768 x 2048 = 67,108,864 and
# 4096 x 2048 = 8,388,608 element-rows):
#   torchtitan_2510 (fp32 score multiply + scatter_add, Oct 2025), 16 experts per rank:
#       fwd 40 x 67,108,864 + 4 x 8,388,608 = 2,717,908,992
#       bwd 60 x 67,108,864 + 2 x 8,388,608 = 4,043,309,056
#   torchtitan_2604 eager, EP > 1 (16 per rank): 36 / 6 and 54 / 2
#       fwd 2,415,919,104 + 50,331,648 = 2,466,250,752; bwd 3,623,878,656 + 16,777,216
#   torchtitan_2604 eager, EP = 1 (128 per rank): 28 / 6 and 44 / 2
#   torchtitan_2604 compiled, EP = 1: 12 / 6 and 10 / 2; EP > 1: 20 / 6 and 20 / 2
TORCHTITAN_ERAS = [
    # (moe_permute, torch_compile, local experts, forward bytes, backward bytes)
    ("torchtitan_2510", False, 16, 2_717_908_992, 4_043_309_056),
    ("torchtitan_2510", True, 128, 2_717_908_992, 4_043_309_056),  # eager in any case
    ("torchtitan_2604", False, 16, 2_466_250_752, 3_640_655_872),
    ("torchtitan_2604", False, 128, 1_929_379_840, 2_969_567_232),
    ("torchtitan_2604", True, 128, 855_638_016, 687_865_856),
    ("torchtitan_2604", True, 16, 1_392_508_928, 1_358_954_496),
]


@pytest.mark.parametrize("variant, compiled, local, forward, backward", TORCHTITAN_ERAS)
def test_torchtitan_era_bytes_by_hand(variant, compiled, local, forward, backward):
    workload = Workload(geometry=QWEN3_30B, global_batch=256, seq_len=4096,
                        stack="torchtitan", moe_permute=variant, torch_compile=compiled)
    fwd, bwd = permute_bytes(workload, [COPIES], [local])
    assert fwd[0] == forward
    assert bwd[0] == backward


def test_torchtitan_2510_kernel_sums():
    """gather 2+2, vstack 2+2, padded gather 2+2, index_put 2+2, .float() 2+4, * 4+4,
    .to(bf16) 4+2, scatter_add 2+2 forward; backward gather 2+2, cast 2+4, multiply 4+4 and
    4+4+4+4, cast 4+2, slice zero fill + copy 2+2+2, index_put gather 2+2, padded gather
    zero fill + accumulate 2+2+2, gather accumulate 2+2."""
    t = permute_traffic(MoePermute.TORCHTITAN_2510, Dispatcher.ALLTOALL, True)
    assert t.forward_per_copy == 4 + 4 + 4 + 4 + 6 + 8 + 6 + 4
    assert t.backward_per_copy == 4 + 6 + 8 + 16 + 6 + 6 + 4 + 6 + 4


def test_workload_setting_overrides_the_stack_trait_and_records_name_their_era():
    from mosaic.config.run_records import load_run_records
    from mosaic.evaluate.record_settings import with_record_settings

    plain = _workload("torchtitan")
    assert plain.moe_permute is None
    fwd, _ = permute_bytes(plain, [COPIES], [16])
    assert fwd[0] == 2_231_369_728  # v0.2.2 count of the stack trait
    extra = Path(__file__).parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"
    records = {r.id: r for r in load_run_records(extra).records}
    eras = {"tt1789-deepseek-v3-16b-h100-8-lbs4-ep8": "torchtitan_2510",
            "pithtrain79-torchtitan-qwen3-30b-a3b-b200-8-fsdp8": "torchtitan_2604",
            "tt3618-deepseek-v3-16b-h100-96gb-8-ep4-lbs16-fullac-standardep": "torchtitan_2604",
            # code not identified (NousResearch fork) or v0.2.2 era: the stack trait
            "nous19-qwen3-30b-a3b-b200-8-ep8-standard": None,
            "torchao2603-llama4-scout-gb200-256-bf16": None}
    for run_id, era in eras.items():
        assert with_record_settings(records[run_id]).workload.moe_permute == era, run_id
