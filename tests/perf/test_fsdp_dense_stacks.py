"""Torch-FSDP dense-run mechanisms: fms-fsdp's block-level selective checkpointing, its
stack traits and record settings, and HSDP's per-unit replica all-reduce overlapped with
backward (torch FSDP1 _runtime_utils._reduce_grad)."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import count_parameters, ladder_geometry
from mosaic.errors import MosaicInputError
from mosaic.evaluate.record_settings import record_settings
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.collectives import all_gather_time_s, all_reduce_time_s, reduce_scatter_time_s
from mosaic.perf.layer_costs import dense_block_times
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import (
    activation_bytes_per_layer,
    layer_input_bytes,
    layer_working_set_bytes,
)
from mosaic.perf.plan import Checkpointing, Sharding, single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload
from mosaic.stacks import SelectiveRecompute, get_stack, stack_for_software

MACHINE = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
GEOMETRY = ladder_geometry(4)
SELECTIVE = single_plan(dp=8, micro_batch=2, sharding=Sharding.FSDP,
                        checkpointing=Checkpointing.SELECTIVE)
FULL = replace(SELECTIVE, checkpointing=np.array([int(Checkpointing.FULL)]))
NONE = replace(SELECTIVE, checkpointing=np.array([int(Checkpointing.NONE)]))
CALIBRATION = default_calibration()


def _fms(fraction=None, **kw) -> Workload:
    return Workload(geometry=GEOMETRY, global_batch=16, seq_len=4096, stack="fms-fsdp",
                    recompute_block_fraction=fraction, **kw)


def test_fms_fsdp_is_its_own_stack_with_its_documented_traits():
    software = "fms-fsdp (PyTorch FSDP1, SDPA flash-attention v2), no torch.compile"
    traits = stack_for_software(software)
    assert traits.name == "fms-fsdp"
    assert traits.selective_recompute is SelectiveRecompute.BLOCKS
    # torch SDPA before PyTorch 2.5 runs FlashAttention-2 on Ampere and Hopper
    assert traits.attention_kernel["hopper"] == "fa2"
    assert traits.attention_kernel["ampere"] == "fa2"
    assert traits.unstated_recompute == "none"  # fsdp_activation_checkpointing False
    assert get_stack("FMS-FSDP") is traits


def test_block_fraction_recomputes_that_share_of_full_recompute_by_hand():
    full = dense_block_times(MACHINE, _fms(), SELECTIVE)
    # f = 1 (fms-fsdp's default selective_checkpointing): every block repeats its forward,
    # as FULL does (tp = 1: no TP collectives to repeat).
    assert full.selective_recompute[0] == pytest.approx(full.forward[0])
    assert full.selective_core_recompute[0] == pytest.approx(full.attention_core_forward[0])
    half = dense_block_times(MACHINE, _fms(0.5), SELECTIVE)
    assert half.selective_recompute[0] == pytest.approx(0.5 * full.forward[0])
    none = dense_block_times(MACHINE, _fms(0.0), SELECTIVE)
    assert none.selective_recompute[0] == 0.0
    # the block's own work does not depend on the share
    assert half.compute[0] == pytest.approx(full.compute[0])


def test_block_fraction_in_the_step_matches_full_recompute_scaled():
    calibration = replace(CALIBRATION, stack_overhead={})
    full_plan = predict_step(_fms(), FULL, MACHINE, calibration)
    share = predict_step(_fms(0.25), SELECTIVE, MACHINE, calibration)
    # 4 blocks, 16 / 8 / 2 = 1 micro-batch: FULL repeats 4 block forwards, f = 1/4 one
    expected = 0.25 * full_plan.breakdown_s["compute_recompute"][0]
    assert share.breakdown_s["compute_recompute"][0] == pytest.approx(expected)
    # HFU counts the recomputed forward: f/3 of the model and attention FLOPs on top
    # (FULL: 1/3), so the HFU/MFU ratios differ by (1 - f)/3 of (model + attention)/model
    with_attention = share.mfu_with_attention[0] / share.mfu[0]
    gap = full_plan.hfu[0] / full_plan.mfu[0] - share.hfu[0] / share.mfu[0]
    assert gap == pytest.approx((1 - 0.25) / 3 * with_attention)


def test_block_fraction_memory_keeps_inputs_of_checkpointed_blocks_by_hand():
    workload = _fms(0.25)
    tokens = 2 * 4096  # micro-batch 2, no TP/CP
    block_input = 2 * tokens * GEOMETRY.d_model  # bf16 input, Korthikanti 2sbh
    assert layer_input_bytes(workload, SELECTIVE)[0] == block_input
    working = layer_working_set_bytes(workload, SELECTIVE, "dense")[0]
    kept = activation_bytes_per_layer(workload, SELECTIVE, "dense")[0]
    assert kept == pytest.approx(0.25 * block_input + 0.75 * working)
    # the ends agree with FULL and NONE
    assert activation_bytes_per_layer(_fms(1.0), SELECTIVE, "dense")[0] == pytest.approx(
        activation_bytes_per_layer(_fms(1.0), FULL, "dense")[0])
    assert activation_bytes_per_layer(_fms(0.0), SELECTIVE, "dense")[0] == pytest.approx(
        activation_bytes_per_layer(_fms(0.0), NONE, "dense")[0])


def test_block_fraction_out_of_range_is_rejected_with_the_field_name():
    with pytest.raises(MosaicInputError, match=r"recompute_block_fraction 1\.5"):
        _fms(1.5)


def test_fms_fsdp_record_settings_reduce_in_bf16_and_carry_the_hfu_over_mfu_share():
    table = record_settings()
    settings, evidence = table["fmsfsdp2403-llama2-13b-h100-96"]
    assert settings["grad_reduce_in_fp32"] is False
    # README @ 4ffb9bd: 13B on H100, MFU 0.35, HFU 0.40: p = 3 (0.40/0.35 - 1) = 0.43
    assert settings["recompute_block_fraction"] == pytest.approx(3 * (0.40 / 0.35 - 1),
                                                                 abs=0.005)
    assert "bfSixteen" in evidence
    # 7B rows run no AC: bf16 reduction only
    assert table["fmsfsdp2405-llama2-7b-h100-96"][0] == {"grad_reduce_in_fp32": False}


def _hsdp_step(shard: int, n_nodes: int, seq_len: int):
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=n_nodes), "bf16")
    dp = 8 * n_nodes
    workload = Workload(geometry=GEOMETRY, global_batch=dp, seq_len=seq_len, stack="fms-fsdp",
                        grad_reduce_in_fp32=False)
    plan = single_plan(dp=dp, micro_batch=1, sharding=Sharding.HSDP, hsdp_shard=shard,
                       checkpointing=Checkpointing.NONE)
    calibration = replace(CALIBRATION, stack_overhead={})
    return machine, workload, predict_step(workload, plan, machine, calibration)


def test_hsdp_replica_all_reduce_hides_behind_backward_but_the_last_units():
    # 4 nodes, shard inside each node (FSDP1 HYBRID_SHARD), long sequences: every unit's
    # backward outlasts its collectives, so only the pass ends are exposed: the last unit's
    # reduce-scatter and replica all-reduce, and the first unit's forward gather.
    machine, _, step = _hsdp_step(shard=8, n_nodes=4, seq_len=32768)
    counts = count_parameters(GEOMETRY)
    unit_params = counts.attention_per_layer + counts.dense_ffn_per_layer + counts.norms_per_layer
    shard_bytes = unit_params * 2 / 8  # bf16 gradient shard of one block
    ic = machine.interconnect
    tail = all_reduce_time_s(np.array([shard_bytes]), np.array([4]), np.array([8]), ic)[0]
    last_scatter = reduce_scatter_time_s(np.array([unit_params * 2]), 8, 1, ic)[0]
    first_gather = all_gather_time_s(np.array([unit_params * 2]), 8, 1, ic)[0]
    assert step.breakdown_s["fsdp_reduce_scatter"][0] == pytest.approx(tail + last_scatter)
    assert step.breakdown_s["fsdp_all_gather"][0] == pytest.approx(first_gather)
    # the whole step's gradient all-reduce (every block's shard) is far more than that
    assert tail < 0.3 * all_reduce_time_s(np.array([4 * shard_bytes]), np.array([4]),
                                          np.array([8]), machine.interconnect)[0]


def test_hsdp_without_replicas_costs_like_fsdp_in_the_same_group():
    _, _, hsdp = _hsdp_step(shard=8, n_nodes=1, seq_len=4096)
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    workload = Workload(geometry=GEOMETRY, global_batch=8, seq_len=4096, stack="fms-fsdp",
                        grad_reduce_in_fp32=False)
    plan = single_plan(dp=8, micro_batch=1, sharding=Sharding.FSDP)
    fsdp = predict_step(workload, plan, machine, replace(CALIBRATION, stack_overhead={}))
    assert hsdp.step_time_s[0] == pytest.approx(fsdp.step_time_s[0])


def _hsdp_moe_step(experts: int, ep: int):
    """A q=4 MoE on 4 DGX-H100 nodes under HSDP with one node per shard group: its
    geometry, machine, step, the dense parameters per block and the dense shard's
    all-reduce across the 4 replicas plus the last block's reduce-scatter (by hand)."""
    geometry = ladder_geometry(4, experts=experts, top_k=2, split_factor=2)
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=4), "bf16")
    # torchtitan's FSDP reduces gradients in float32 (4 bytes; its mixed_precision_reduce is
    # Literal["float32"])
    workload = Workload(geometry=geometry, global_batch=32, seq_len=32768, stack="torchtitan")
    plan = single_plan(dp=32, ep=ep, micro_batch=1, sharding=Sharding.HSDP, hsdp_shard=8)
    step = predict_step(workload, plan, machine, replace(CALIBRATION, stack_overhead={}))
    counts = count_parameters(geometry)
    # the mean block: the ladder keeps block 1 dense (its FFN, no router, Sec. 3.1)
    share = counts.moe_layers / counts.layers
    dense = (counts.attention_per_layer + counts.norms_per_layer
             + share * (counts.shared_experts_per_layer + counts.router_per_layer)
             + (1 - share) * counts.dense_ffn_per_layer)
    # dense shards over the node's 8 GPUs, all-reduced across 4 replicas; the last block's
    # reduce-scatter inside the shard group
    dense_tail = (all_reduce_time_s(np.array([dense * 4 / 8]), np.array([4]), np.array([8]),
                                    machine.interconnect)[0]
                  + reduce_scatter_time_s(np.array([dense * 4]), 8, 1, machine.interconnect)[0])
    return counts, machine, step, dense_tail


def test_hsdp_replica_all_reduce_carries_the_routed_experts_too():
    # MoE, 4 nodes, ep 8 inside each node, shard group 8 (one node): the experts' gradient
    # shards are all-reduced across the 4 replicas as the dense ones are, so the exposed
    # tail is both all-reduces of the last block (the experts' shard group is one rank:
    # nothing to scatter).
    counts, machine, step, dense_tail = _hsdp_moe_step(experts=16, ep=8)
    # 16 experts over ep = 8, in the MoE blocks' share of the mean block
    experts = counts.moe_layers / counts.layers * counts.experts * counts.routed_expert / 8
    # each expert's 1 (= edp 4 x 8 / 32) copy per node
    expert_ar = all_reduce_time_s(np.array([experts * 4 / 1]), np.array([4]), np.array([8]),
                                  machine.interconnect)[0]
    assert step.breakdown_s["fsdp_reduce_scatter"][0] == pytest.approx(dense_tail + expert_ar)


def test_hsdp_does_not_all_reduce_experts_that_live_on_one_rank():
    """ep = dp (edp 1): every routed expert exists on exactly one rank, so HSDP has no expert
    replicas to all-reduce; only the dense shards cross the 4 replicas (a trial found the
    experts all-reduced across the dense replica count, 3-5x the step)."""
    _, _, step, dense_tail = _hsdp_moe_step(experts=32, ep=32)
    assert step.breakdown_s["fsdp_reduce_scatter"][0] == pytest.approx(dense_tail)


def test_an_moe_models_dense_blocks_gather_their_ffn_and_no_experts() -> None:
    """Each block is one FSDP unit: the per-block traffic is the mean block's. Four blocks,
    the first dense (DeepSeek-V3 style), tp 1, ep 2, by hand: attention 4·512² and two
    LayerNorms (2·2·512) in every block, the dense FFN 3·512·2048 in one block of four,
    the router 512·8 and the experts 8·3·512·512 (4 per ep rank) in three."""
    from mosaic.arch import Geometry, MoEConfig
    from mosaic.perf.data_parallel_time import fsdp_unit_parameters

    geometry = Geometry(layers=4, d_model=512, heads=8, kv_heads=8, head_dim=64, ffn=2048,
                        vocab=1000, moe=MoEConfig(experts=8, top_k=2, expert_ffn=512,
                                                  dense_layers=1))
    workload = Workload(geometry, global_batch=8, seq_len=128, stack="torchtitan")
    dense, expert = fsdp_unit_parameters(workload, single_plan(dp=2, ep=2,
                                                                sharding=Sharding.FSDP))
    assert float(dense[0]) == pytest.approx(4 * 512**2 + 2 * 1024 + 3 * 512 * 2048 / 4
                                            + 0.75 * 512 * 8)
    assert float(expert[0]) == pytest.approx(0.75 * 8 * 3 * 512 * 512 / 2)
