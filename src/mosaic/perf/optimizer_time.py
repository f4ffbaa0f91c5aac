"""The optimizer step's time: a streaming update over the local shard of the
parameter-heaviest pipeline rank's parameters, plus Muon's Newton-Schulz FLOPs.
"""

from __future__ import annotations

import numpy as np

from mosaic.arch import HybridLayer, count_parameters
from mosaic.perf.factorise import plan_key
from mosaic.perf.kernels import memory_bound_time_s as streaming_time_s
from mosaic.perf.machine import Machine
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.memory import PARAMETER_STATE_KEY, heaviest_rank_parameters, optimizer_update_bytes
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.shapes import local_experts
from mosaic.perf.workload import OptimizerKind, Workload

# Muon: 5 Newton-Schulz iterations, each 4·m²·n + 2·m³ FLOPs for an m×n matrix, m ≤ n
# (Jordan et al. 2024, "Muon"); the work is spread over data-parallel ranks (Liu et al.
# 2025, "Muon is Scalable for LLM Training", distributed Muon).
MUON_ITERATIONS = 5
# The Newton-Schulz GEMMs run at half the large-GEMM rate: an assumption, not a measurement
# (each iteration chains small square products on one matrix at a time; no public trace of
# their rate was found); the Appendix E job's optimizer term is 0.05% of its step (21 ms of
# 41.3 s, `mosaic perf examples/appendix_e.yaml`).
NEWTON_SCHULZ_GEMM_RATE_FRACTION = 0.5


def _matrix_newton_schulz_flops(rows: float, cols: float) -> float:
    small, large = min(rows, cols), max(rows, cols)
    return MUON_ITERATIONS * (4 * small * small * large + 2 * small**3)


@plan_key(*PARAMETER_STATE_KEY, remember=without_top_k)
def optimizer_update_s(machine: Machine, workload: Workload, plans: ParallelPlans
                        ) -> np.ndarray:
    """Streaming optimizer update over the local shard of the parameter-heaviest pipeline
    rank's parameters."""
    params = heaviest_rank_parameters(workload, plans)
    return streaming_time_s(optimizer_update_bytes(workload, params, plans),
                            machine.hbm_bw_bytes_per_s)


def optimizer_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                 blocks: np.ndarray) -> np.ndarray:
    """Streaming optimizer update over the local shard (+ Muon's Newton-Schulz FLOPs)."""
    update = optimizer_update_s(machine, workload, plans)
    if workload.optimizer is not OptimizerKind.MUON:
        return update
    geometry = workload.geometry
    d = geometry.d_model
    counts = count_parameters(geometry)
    attention = _matrix_newton_schulz_flops(d, counts.attention_per_layer / d)
    mlp = _matrix_newton_schulz_flops(d, counts.dense_ffn_per_layer / d)
    expert_share = 1.0
    if geometry.is_hybrid:  # a mean layer: each kind's matrices by its share of the layers
        share = geometry.hybrid_shares
        mamba, gdn = geometry.mamba, geometry.gdn
        mixer = (_matrix_newton_schulz_flops(d, mamba.in_proj_width)
                 + _matrix_newton_schulz_flops(mamba.inner_width, d)) if mamba else 0.0
        delta_net = (_matrix_newton_schulz_flops(d, gdn.in_proj_width)
                     + _matrix_newton_schulz_flops(gdn.value_width, d)) if gdn else 0.0
        dense_matrix_flops = (share[HybridLayer.ATTENTION] * attention
                              + share[HybridLayer.MAMBA] * mixer
                              + share[HybridLayer.GDN] * delta_net
                              + share[HybridLayer.MLP] * mlp)
        expert_share = share[HybridLayer.MOE]
    else:
        dense_matrix_flops = attention + mlp
    block_flops = np.full(len(plans), dense_matrix_flops) / plans.tp**2
    if geometry.moe is not None:
        expert = _matrix_newton_schulz_flops(d, counts.routed_expert / d)
        block_flops = block_flops + (expert_share * local_experts(workload, plans) * expert
                                     / plans.etp**2)
    ns_flops = blocks * block_flops / np.maximum(plans.dense_dp_group, 1)
    return update + ns_flops / (machine.gemm_rate_flops_per_s
                                * NEWTON_SCHULZ_GEMM_RATE_FRACTION)
