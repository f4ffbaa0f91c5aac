"""Exposed data-parallel communication per step: DDP's all-reduce, ZeRO's reduce-scatter and
all-gather, and FSDP/HSDP's per-unit gathers, reduce-scatters and replica all-reduces, each
after what compute hides of it (Zhao et al. 2023, PyTorch FSDP; Megatron-Core DDP buckets).
"""

from __future__ import annotations

import numpy as np

from mosaic.arch import HybridLayer, count_parameters
from mosaic.arch.counts import (
    ParameterCounts,
    attention_weight_tensors,
    ffn_weight_matrices,
    hybrid_mixer_parameters,
)
from mosaic.perf.calibration import Calibration
from mosaic.perf.collectives import (
    all_gather_time_s,
    all_reduce_time_s,
    hidden_collective_slowdown_s,
    reduce_scatter_time_s,
)
from mosaic.perf.element_bytes import ACTIVATION_BYTES
from mosaic.perf.factorise import plan_key
from mosaic.perf.machine import Machine
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.memory import (
    STAGE_PARAMETER_KEY,
    gradient_bytes_per_param,
    heaviest_rank_parameters,
    shard_degrees,
)
from mosaic.perf.plan import ParallelPlans, Sharding
from mosaic.perf.schedule import fsdp_gathered_through_step, schedule_passes
from mosaic.perf.shapes import local_experts
from mosaic.perf.workload import Workload


def _moe_block_share(counts: ParameterCounts) -> float:
    """The share of an MoE model's blocks that are MoE blocks (the rest dense: a dense
    prefix, or MoE every k-th block): the weight of each kind in the mean FSDP unit."""
    return counts.moe_layers / counts.layers


def fsdp_unit_parameters(workload: Workload, plans: ParallelPlans
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(dense, routed-expert) parameters per GPU of the mean block, whose gather and
    reduce-scatter each block's traffic is costed by (each transformer block one FSDP unit,
    torchtitan's ``fully_shard`` per block): an MoE model's dense blocks (DeepSeek-V3's first
    three, MoE every k-th block) gather their dense FFN and no experts; a hybrid's layers
    are its units. The mean times the blocks is the stage's traffic. Not the buffer's size:
    the memory model sizes that by the stage's largest unit
    (memory.StageParameters.largest_unit), a different quantity."""
    counts = count_parameters(workload.geometry)
    norms = counts.norms_per_layer
    geometry = workload.geometry
    if geometry.is_hybrid:
        # each layer is one unit; per layer on average (the step gathers and reduces units
        # per layer, so the mean layer times the layers is the stage's traffic): every kind's
        # matrices by its share of the layers, the routed experts only in the MoE layers'
        share = geometry.hybrid_shares
        matrices = sum(share[symbol] * hybrid_mixer_parameters(counts, symbol)
                       for symbol in HybridLayer)
        dense = (matrices / plans.tp + norms
                 + share[HybridLayer.MOE] * counts.router_per_layer)
        expert = (share[HybridLayer.MOE] * counts.experts * counts.routed_expert
                  / (plans.ep * plans.etp))
        return dense, expert
    if workload.geometry.moe is None:
        dense = (counts.attention_per_layer + counts.dense_ffn_per_layer) / plans.tp + norms
        return dense, np.zeros(len(plans))
    moe_share = _moe_block_share(counts)
    dense = ((counts.attention_per_layer + moe_share * counts.shared_experts_per_layer
              + (1 - moe_share) * counts.dense_ffn_per_layer) / plans.tp
             + norms + moe_share * counts.router_per_layer)
    expert = moe_share * counts.experts * counts.routed_expert / (plans.ep * plans.etp)
    return dense, expert


def _fsdp_extra_tensor_gathers(workload: Workload, plans: ParallelPlans
                               ) -> tuple[float, np.ndarray]:
    """(dense, routed-expert) all-gathers beyond the first of each group in the mean block
    on one GPU, as a per-tensor gather sees the block's tensors: separate Q, K, V and output
    projections (MLA: :func:`~mosaic.arch.counts.attention_weight_tensors`), an optional
    attention gate, two block norms, and the FFN matrices (3 with a GLU, else 2) of a dense
    block or, in an MoE block, the router, the shared experts' matrices and each local
    expert's matrices (weighted by the blocks of each kind, as
    :func:`fsdp_unit_parameters`)."""
    geometry = workload.geometry
    ffn_matrices = ffn_weight_matrices(geometry.glu)
    dense = attention_weight_tensors(geometry) + int(geometry.gated_attention) + 2
    if geometry.moe is None:
        return dense + ffn_matrices - 1, np.zeros(len(plans))
    moe = geometry.moe
    moe_share = _moe_block_share(count_parameters(geometry))
    dense += moe_share * (1 + moe.shared_experts * ffn_matrices) + (1 - moe_share) * ffn_matrices
    expert_tensors = local_experts(workload, plans) * ffn_matrices
    return dense - 1, moe_share * np.maximum(expert_tensors - 1, 0)


def data_parallel_collectives_s(machine: Machine, workload: Workload, plans: ParallelPlans
                                 ) -> dict[str, np.ndarray]:
    """Seconds of each data-parallel collective before any overlap: per step for DDP's
    all-reduce, ZeRO's reduce-scatter and all-gather (of the parameter-heaviest pipeline
    rank's parameters); per FSDP unit for its gather, reduce-scatter and HSDP's replica
    all-reduce."""
    return {**gradient_collectives_s(machine, workload, plans),
            **fsdp_unit_collectives_s(machine, workload, plans)}


# DDP's and ZeRO's collectives read neither the sharding mode nor the HSDP shard group, and
# FSDP's per-unit ones not the pipeline split: each is computed once per value of its own
# fields (mosaic.perf.factorise).
@plan_key(*STAGE_PARAMETER_KEY, "cp", "dp", remember=without_top_k)
def gradient_collectives_s(machine: Machine, workload: Workload, plans: ParallelPlans
                            ) -> dict[str, np.ndarray]:
    """DDP's all-reduce, ZeRO's reduce-scatter and all-gather, per step."""
    params = heaviest_rank_parameters(workload, plans)
    ic = machine.interconnect
    dense_group = plans.dense_dp_group
    dense_stride = plans.tp
    expert_group = np.maximum(plans.edp, 1)
    expert_stride = plans.expert_group_stride
    # Gradients reduce in their buffer's dtype, the one the memory model holds (fp32, or
    # bf16 where the recipe sets grad_reduce_in_fp32 False: Megatron-Core DDP communicates
    # the grad buffer as it is, megatron/core/distributed/param_and_grad_buffer.py).
    grad_bytes = gradient_bytes_per_param(workload)
    grad_dense = params.non_expert * grad_bytes
    grad_expert = params.expert * grad_bytes
    # Updated bf16 parameters, the block GEMMs' weights in 8 bits under fp8_param_gather.
    gemm_weight_bytes = workload.gemm_weight_gather_bytes(ACTIVATION_BYTES)
    weight_dense = (params.dense * gemm_weight_bytes
                    + (params.replicated + params.vocab) * ACTIVATION_BYTES)
    weight_expert = params.expert * gemm_weight_bytes

    # DDP: one all-reduce of all gradients; ZeRO-1/2: reduce-scatter of gradients and an
    # all-gather of updated bf16 parameters (Megatron-Core distributed optimizer).
    # A stage without routed experts launches no expert-group collective (not even its
    # zero-byte latency).
    has_experts = params.expert > 0
    all_reduce = (all_reduce_time_s(grad_dense, dense_group, dense_stride, ic)
                  + np.where(has_experts, all_reduce_time_s(grad_expert, expert_group,
                                                            expert_stride, ic), 0.0))
    reduce_scatter = (reduce_scatter_time_s(grad_dense, dense_group, dense_stride, ic)
                      + np.where(has_experts, reduce_scatter_time_s(
                          grad_expert, expert_group, expert_stride, ic), 0.0))
    all_gather = (all_gather_time_s(weight_dense, dense_group, dense_stride, ic)
                  + np.where(has_experts, all_gather_time_s(weight_expert, expert_group,
                                                            expert_stride, ic), 0.0))
    return {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter,
            "all_gather": all_gather}


@plan_key("tp", "cp", "dp", "ep", "etp", "sharding", "hsdp_shard", remember=without_top_k)
def fsdp_unit_collectives_s(machine: Machine, workload: Workload, plans: ParallelPlans
                             ) -> dict[str, np.ndarray]:
    """FSDP's gather and reduce-scatter and HSDP's replica all-reduce, per unit."""
    ic = machine.interconnect
    dense_group = plans.dense_dp_group
    dense_stride = plans.tp
    expert_stride = plans.expert_group_stride
    grad_bytes = gradient_bytes_per_param(workload)
    # FSDP / HSDP (Zhao et al. 2023, PyTorch FSDP): per block, gather parameters before
    # forward and backward and reduce-scatter gradients after backward, prefetching one
    # block ahead; with pp > 1 parameters stay gathered for the step (torchtitan).
    # Dense parameters shard over the (HSDP shard group of the) data-parallel ranks, routed
    # experts over the expert-data-parallel ranks, which sit ep·etp ranks apart (Eq. 24).
    shard_group, expert_shard_group = shard_degrees(plans)
    block_dense, block_expert = fsdp_unit_parameters(workload, plans)
    # Gathered parameters travel in the stack's gather dtype: bf16 for torch FSDP2 with a
    # bf16 param_dtype, fp32 for JAX/XLA trainers whose weights rest in fp32 (stack trait
    # fsdp_gather_bytes_per_param).
    # Float8 FSDP all-gather (torchtitan enable_fsdp_float8_all_gather): the block's
    # weights travel in 8 bits (its norms, a few thousand parameters, counted with them).
    gather_bytes = workload.gemm_weight_gather_bytes(workload.traits.fsdp_gather_bytes_per_param)
    unit_experts = block_expert > 0
    gather = (all_gather_time_s(block_dense * gather_bytes, shard_group, dense_stride, ic)
              + np.where(unit_experts, all_gather_time_s(block_expert * gather_bytes,
                                                         expert_shard_group, expert_stride,
                                                         ic), 0.0))
    scatter = (reduce_scatter_time_s(block_dense * grad_bytes, shard_group, dense_stride, ic)
               + np.where(unit_experts, reduce_scatter_time_s(block_expert * grad_bytes,
                                                              expert_shard_group,
                                                              expert_stride, ic), 0.0))
    if workload.fsdp_gathers_per_tensor:
        # Every tensor beyond the first of each group (dense, routed experts) pays one more
        # all-gather's fixed cost (launch and per-step latency: the zero-byte time of the
        # same collective). Gradients still reduce-scatter in buckets (DeepSpeed ZeRO-3's
        # reduce_bucket_size), so the scatter is unchanged.
        dense_extra, expert_extra = _fsdp_extra_tensor_gathers(workload, plans)
        gather = gather + (dense_extra * all_gather_time_s(0.0, shard_group, dense_stride, ic)
                           + expert_extra * all_gather_time_s(0.0, expert_shard_group,
                                                              expert_stride, ic))
    # HSDP: each unit's reduce-scattered gradient shard is then all-reduced across the
    # replicas, per unit, on a stream of its own (torch FSDP1 _runtime_utils._reduce_grad:
    # dist.all_reduce on state._all_reduce_stream after it waits for the post-backward
    # stream; FSDP2's foreach_reduce likewise all-reduces each unit's shard after its
    # reduce-scatter), so it overlaps the backward of the units after it.
    replicas = np.maximum(dense_group // np.maximum(shard_group, 1), 1)
    # Routed experts shard over their share of the expert-data-parallel group
    # (memory.shard_degrees) and are replicated across the rest of it: edp / that share
    # copies, none where each expert lives on one rank (edp = 1 under ep = dp).
    edp = np.maximum(plans.edp, 1)
    expert_replicas = np.maximum(edp // np.maximum(expert_shard_group, 1), 1)
    dense_replica = np.where(replicas > 1, all_reduce_time_s(
        block_dense * grad_bytes / shard_group, replicas, dense_stride * shard_group, ic), 0.0)
    expert_replica = np.where(unit_experts & (expert_replicas > 1), all_reduce_time_s(
        block_expert * grad_bytes / expert_shard_group, expert_replicas,
        expert_stride * expert_shard_group, ic), 0.0)
    unit_replica = dense_replica + expert_replica
    return {"unit_gather": gather, "unit_scatter": scatter, "unit_replica": unit_replica}


def data_parallel_times(machine: Machine, workload: Workload, plans: ParallelPlans,
                         fwd_block_s: np.ndarray, bwd_block_s: np.ndarray, blocks: np.ndarray,
                         n_mb: np.ndarray, calibration: Calibration
                         ) -> dict[str, np.ndarray]:
    """Exposed data-parallel communication per step, by collective, and the compute time
    the hidden part costs (``dp_overlap_contention``)."""
    collectives = data_parallel_collectives_s(machine, workload, plans)
    sharding = plans.sharding
    # A stack run without DDP/ZeRO overlap reduces and gathers after the passes
    # (Workload.dp_comm_overlap); FSDP below overlaps per unit regardless.
    overlap = calibration.dp_overlap_fraction if workload.dp_comm_overlap else 0.0
    hide_bwd = overlap * bwd_block_s * blocks
    hide_fwd = overlap * fwd_block_s * blocks
    is_ddp = sharding == Sharding.NONE
    is_zero = (sharding == Sharding.ZERO1) | (sharding == Sharding.ZERO2)
    is_fsdp = (sharding == Sharding.FSDP) | (sharding == Sharding.HSDP)
    gather, scatter = collectives["unit_gather"], collectives["unit_scatter"]
    # HSDP's replica all-reduce of a unit (zero otherwise) runs beside the next units'
    # gathers and reduce-scatters: inside the shard group they use the scale-up links, the
    # replicas the network. The last unit's has no backward left to hide behind.
    replica = np.where(sharding == Sharding.HSDP, collectives["unit_replica"], 0.0)
    gather_fwd_exposed = np.maximum(0.0, gather - fwd_block_s)
    gather_bwd_exposed = np.maximum(0.0, gather - bwd_block_s)
    scatter_exposed = (np.maximum(0.0, np.maximum(gather + scatter, replica) - bwd_block_s)
                       - gather_bwd_exposed)
    # torch.distributed.pipelining ends every schedule.step with stage.perform_reduce_grad
    # (FSDP post_backward: reduce-scatter, reshard; DDP: the last backward outside no_sync;
    # torch 2.13 pipelining/schedules.py, stage.py): a stack that runs one schedule per pass
    # reduces, and re-gathers, once per pass (schedule.schedule_passes)
    passes = schedule_passes(workload, plans)
    schedules = passes if passes.max() > 1 else 1  # (no per-schedule array work where one)
    reductions = np.where(fsdp_gathered_through_step(workload, plans), schedules, n_mb)
    gathers_per_step = reductions * blocks
    # The two ends of each pass have no compute to hide behind (Zhao et al. 2023, "PyTorch
    # FSDP", arXiv 2304.11277, Fig. 5: AG0 runs before FWD0, RS0 after BWD0): the first unit's
    # forward gather waits in full, and so do the last unit's reduce-scatter and replica
    # all-reduce, which the end of backward waits for (torch FSDP1
    # _runtime_utils._post_backward_final_callback and FSDP2's root post-backward callback
    # make the compute stream wait on the reduction stream). Once per gathering forward and
    # once per reducing backward.
    # (The last unit's replica all-reduce is already counted in full below.)
    first_gather = gather - gather_fwd_exposed
    last_scatter = np.maximum(0.0, scatter - scatter_exposed)
    fsdp_gather = (gathers_per_step * (gather_fwd_exposed + gather_bwd_exposed)
                   + reductions * first_gather)
    fsdp_scatter = (gathers_per_step * scatter_exposed + reductions * (replica + last_scatter))
    zero = np.zeros(len(plans))
    # DDP's and ZeRO's bucketed collectives hide behind compute except the bucket that ends
    # the pass: the last gradient bucket, reduced after the last backward compute, and the
    # first parameter bucket, which the first forward block waits for.
    edge = _dp_edge_bucket_share(workload, plans, blocks)

    def exposed(collective_s: np.ndarray, hide_s: np.ndarray, uses: np.ndarray
                ) -> np.ndarray:
        if not uses.any():
            return np.zeros_like(zero)  # a term of its own: terms may be summed in place
        return np.where(uses, np.maximum(edge * collective_s, collective_s - hide_s), 0.0)

    terms = {
        "dp_all_reduce": schedules * exposed(collectives["all_reduce"], hide_bwd, is_ddp),
        "dp_reduce_scatter": schedules * exposed(collectives["reduce_scatter"], hide_bwd,
                                                 is_zero),
        "dp_all_gather": schedules * exposed(collectives["all_gather"], hide_fwd, is_zero),
        "fsdp_all_gather": np.where(is_fsdp, fsdp_gather, zero),
        "fsdp_reduce_scatter": np.where(is_fsdp, fsdp_scatter, zero),
    }
    # Every collective counted once as the exposure formulas count it: FSDP's forward and
    # backward gather and its reduce-scatter per unit, HSDP's replica all-reduce per
    # reduction; DDP's all-reduce, ZeRO's reduce-scatter and all-gather per schedule.
    step_collectives = (
        schedules * np.where(is_ddp, collectives["all_reduce"], 0.0)
        + schedules * np.where(is_zero, collectives["reduce_scatter"]
                               + collectives["all_gather"], 0.0)
        + np.where(is_fsdp, gathers_per_step * (2 * gather + scatter) + reductions * replica,
                   0.0))
    terms["dp_overlap_contention"] = hidden_collective_slowdown_s(step_collectives,
                                                                  sum(terms.values()))
    return terms


# Megatron-Core DDP's default gradient bucket: max(4e7, 1e6 x dp) parameters ("larger DP
# sizes need larger buckets to ensure collectives do not become latency-bound"),
# megatron/core/distributed/distributed_data_parallel.py and distributed_data_parallel_config.py
# (NVIDIA/Megatron-LM @ d98e8a64dd).
MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_DP_RANK = 1_000_000


def _dp_edge_bucket_share(workload: Workload, plans: ParallelPlans,
                          blocks: np.ndarray) -> np.ndarray:
    """Share of the stage's DDP/ZeRO collective that ends a pass with nothing to hide
    behind (the stack trait ``dp_last_bucket``): Megatron-Core's default bucket over the
    parameter-heaviest pipeline rank's parameters, one block of ``blocks`` for per-unit
    stacks (FSDP SHARD_GRAD_OP), zero where the stack's bucketing is not modelled."""
    rule = workload.traits.dp_last_bucket
    if rule == "megatron":
        return _megatron_last_bucket_share(workload, plans)
    if rule == "unit":
        return 1.0 / np.maximum(blocks, 1)
    return np.zeros(len(plans))


@plan_key(*STAGE_PARAMETER_KEY, "cp", "dp", remember=without_top_k)
def _megatron_last_bucket_share(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Megatron-Core's default gradient bucket over the parameter-heaviest pipeline rank's
    parameters."""
    bucket = np.maximum(MEGATRON_MIN_BUCKET_PARAMS,
                        MEGATRON_BUCKET_PARAMS_PER_DP_RANK * plans.dense_dp_group)
    stage = heaviest_rank_parameters(workload, plans).total
    return np.minimum(1.0, bucket / np.maximum(stage, 1.0))
