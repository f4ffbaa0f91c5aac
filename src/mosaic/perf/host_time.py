"""Host time of a step per micro-batch: the kernel-launch floor (Eq. 11: launches times the
calibrated gap, or the measured grouped-GEMM host floor), and the host time a
host-device synchronisation in every MoE layer leaves exposed.
"""

from __future__ import annotations

import numpy as np

from mosaic.perf.calibration import Calibration
from mosaic.perf.kernels import te_grouped_linear_host_floor_s
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.routing_load import expert_counts_reach_host
from mosaic.perf.shapes import local_experts
from mosaic.perf.workload import Workload, measured_table_dtype


def floor_precision(workload: Workload) -> str | None:
    """The precision a measured GroupedLinear host floor of ``workload``'s GEMMs is keyed by
    (``mosaic bench te-grouped``): bf16 for 16-bit GEMMs, mxfp8 or fp8 for the FP8 lane by
    recipe; None for FP4 (not measured)."""
    key = measured_table_dtype(workload.precision, workload.fp8_recipe)
    return {"fp16": "bf16", "fp4": None}.get(key, key)


def grouped_linear_host_floor_s(workload: Workload, calibration: Calibration, device_name: str,
                                groups: np.ndarray, backward: bool) -> np.ndarray:
    """Host floor of one GroupedLinear call over ``groups`` local experts: the line measured
    on this device in this precision where the calibration holds one (calibrate
    --microbench of `mosaic bench te-grouped`), else the built-in isolated-call fit."""
    measured = calibration.microbench
    key = floor_precision(workload)
    if (measured is not None and key in measured.grouped_host_floor
            and measured.applies(device_name)):
        fixed_s, per_group_s = measured.grouped_host_floor[key][1 if backward else 0]
        return fixed_s + per_group_s * np.asarray(groups, dtype=float)
    return te_grouped_linear_host_floor_s(groups, backward=backward)


def expert_gemm_host_floor_s(workload: Workload, plans: ParallelPlans, moe_blocks: np.ndarray,
                         calibration: Calibration, device_name: str) -> np.ndarray:
    """Host floor of a stage's grouped expert GEMMs per micro-batch: up and down
    projections, forward and backward, over the E/ep local experts of each MoE block
    (:func:`grouped_linear_host_floor_s`: an isolated-call benchmark, the device's own where
    measured), times the calibration's ``host_in_block_factor`` (what a launch costs the
    host between a training block's other kernels over what it costs alone); zero for a
    dense model."""
    moe = workload.geometry.moe
    if moe is None or workload.traits.expert_gemm_launch == "one_op":
        # One compiled op per expert projection (stack trait expert_gemm_launch one_op:
        # jax.lax.ragged_dot_general is one HLO instruction however many groups it has):
        # its launch is one of the layer's kernels, with no per-expert host work.
        return np.zeros(len(plans))
    experts_here = local_experts(workload, plans)
    return calibration.host_in_block_factor * moe_blocks * 2 * sum(
        grouped_linear_host_floor_s(workload, calibration, device_name, experts_here, backward)
        for backward in (False, True))


def moe_host_sync_s(workload: Workload, expert_host_floor_s: np.ndarray) -> np.ndarray:
    """Per micro-batch: host time of the grouped expert GEMMs that no GPU work hides.

    With a host-device synchronisation in every MoE layer the host cannot run ahead of the
    GPU, so the measured GroupedLinear host floor (up and down projections, forward and
    backward) adds to the GPU time instead of overlapping it (Eq. 11's max assumes a host
    that runs ahead). Zero for drop-and-pad routing on the all-to-all dispatcher, dense
    models and stacks without TE GroupedLinear (:func:`~mosaic.perf.routing_load.
    expert_counts_reach_host`), and for a step captured as one CUDA graph (its MoE layers
    run on a static per-rank token budget, Workload.full_iteration_cuda_graph). Fit
    evidence: leave-one-source-out MoE tokens/s MAPE on the published runs drops from 22.8%
    to 17.2% with this term (docs/perf.md).
    """
    if not expert_counts_reach_host(workload) or workload.full_iteration_cuda_graph:
        return np.zeros_like(expert_host_floor_s)
    return expert_host_floor_s


def dispatch_floor_s(workload: Workload, plans: ParallelPlans, blocks: np.ndarray,
                      moe_blocks: np.ndarray, expert_host_floor_s: np.ndarray,
                      calibration: Calibration) -> np.ndarray:
    """t_disp = L_stage·(κ0 + κ1·E_loc)·t_gap + t_host (Eq. 11), per micro-batch.

    The per-local-expert launches are costed one of two ways: by the kernel-count law's κ1
    when the calibration states one (the paper's ScalePlan measured κ1 = 7.29 kernels per
    local expert from its stack's profiler traces, dlcalc/utils/kernel_launch.py), else by
    the measured host floor of the grouped expert GEMMs (``expert_host_floor_s``), never
    both. With ep > 1, each MoE block adds the host cost of the token permutation and
    all-to-all dispatch path (ScalePlan: ~10 ms per MoE-layer execution on the paper's
    Megatron-Core stack, from the same traces); zero in calibrations that do not state it.
    """
    launched_per_expert = (local_experts(workload, plans)
                           if workload.traits.expert_gemm_launch == "per_group" else 0.0)
    kernels = (calibration.kernels_per_layer_base * blocks
               + calibration.kernels_per_local_expert * launched_per_expert * moe_blocks)
    experts_host = (expert_host_floor_s if calibration.kernels_per_local_expert == 0
                    else np.zeros(len(plans)))
    ep_dispatch = np.where(plans.ep > 1, moe_blocks
                           * calibration.ep_dispatch_host_s_per_moe_layer, 0.0)
    if workload.full_iteration_cuda_graph or workload.layer_cuda_graphs:
        # One graph launch replays the step's kernels (Megatron-Core FullCudaGraphWrapper,
        # docs/user-guide/features/cuda_graph.md), or one per layer and pass (the per-layer
        # CudaGraphManager): the host issues nothing per kernel, and a graph launch (tens
        # of microseconds per layer) is left out.
        return np.zeros(len(plans))
    return (kernels * calibration.dispatch_gap_s + experts_host + ep_dispatch
            + calibration.host_overhead_per_microbatch_s)
