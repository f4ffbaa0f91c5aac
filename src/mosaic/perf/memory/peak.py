"""Per-GPU memory by component on each pipeline stage, the heaviest stage, and whether a
plan fits (usable device memory).
"""

from __future__ import annotations

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.perf.factorise import plan_key
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.memory.activations import stage_activation_bytes
from mosaic.perf.memory.buffers import communication_buffer_bytes
from mosaic.perf.memory.logits import logits_bytes
from mosaic.perf.memory.parameter_states import (
    GRADIENTS_SHARDED,
    master_weight_bytes,
    optimizer_state_bytes,
    rank_parameters,
    sharded_params,
    stored_gradient_bytes,
    weight_bytes,
)
from mosaic.perf.memory.plan_keys import PARAMETER_STATE_KEY
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.schedule import (
    Stage,
    candidate_stages,
    lm_head_stage,
    middle_stage_can_be_heaviest,
    stage_layer_counts,
    stage_rank,
)
from mosaic.perf.workload import Workload
from mosaic.units import GIB

# What the caching allocator holds at the peak beyond the live tensors the model counts: the
# cuBLAS/cuDNN workspaces PyTorch allocates through it and its cached blocks. Assumed, not
# fitted. First sized for the CUDA context (~0.8 GB, pytorch/pytorch#34323), workspaces and
# NCCL; every published figure it is compared with is an allocator peak
# (torch.cuda.max_memory_reserved, which sees neither the context nor NCCL), so it stands for
# the allocator's slack (docs/memory.md, "Runtime reserve"). Memory outside the allocator
# (CUDA context, NCCL buffers) is perf.device_memory's and lies in the planner's headroom.
RUNTIME_RESERVE_BYTES = 2 * GIB
# The components of memory_breakdown_bytes, each with what it holds in a few words (the
# module docstring gives the byte counts) for tables and legends.
COMPONENT_MEANINGS: dict[str, str] = {
    "weights": "parameters this GPU holds",
    "gradients": "gradient buffers",
    "optimizer_states": "optimizer moments",
    "master_weights": "fp32 master copy of the parameters",
    "activations": "saved for the backward pass, every in-flight micro-batch",
    "logits": "LM-head output and cross-entropy working set",
    "communication_buffers": "FSDP/ZeRO, EP and PP buffers",
    "runtime_reserve": "allocator reserve beyond live tensors: workspaces, cached blocks",
}
COMPONENTS: tuple[str, ...] = tuple(COMPONENT_MEANINGS)


@plan_key(*PARAMETER_STATE_KEY, remember=without_top_k)
def parameter_state_bytes(workload: Workload, plans: ParallelPlans, stage: Stage
                          ) -> dict[str, np.ndarray]:
    """Weights, gradients, optimizer states and master weights per GPU of the first or last
    stage, after the plan's (E)DP sharding."""
    params = rank_parameters(workload, plans, stage)
    return {
        "weights": weight_bytes(workload, params, plans),
        "gradients": stored_gradient_bytes(workload, plans)
        * sharded_params(params, plans, GRADIENTS_SHARDED),
        "optimizer_states": optimizer_state_bytes(workload, params, plans),
        "master_weights": master_weight_bytes(workload, params, plans),
    }


def stage_memory_breakdown_bytes(
    workload: Workload, plans: ParallelPlans, stage: Stage
) -> dict[str, np.ndarray]:
    """Per-GPU bytes of the first or last pipeline stage, by component (see module doc)."""
    breakdown = {name: _rows(values, inverse)
                 for components, inverse in _stage_terms(workload, plans, stage)
                 for name, values in components.items()}
    breakdown["runtime_reserve"] = np.full(len(plans), float(RUNTIME_RESERVE_BYTES))
    return breakdown


def largest_components(breakdown: dict[str, np.ndarray], index: int, count: int = 2
                       ) -> list[tuple[str, float]]:
    """The ``count`` largest components of plan ``index`` as (name, bytes), largest first:
    what an out-of-memory plan should shrink first."""
    sizes = [(name, float(breakdown[name][index])) for name in COMPONENTS]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def total_memory_bytes(breakdown: dict[str, np.ndarray],
                       names: tuple[str, ...] = COMPONENTS) -> np.ndarray:
    """Sum of the components ``names`` (all by default) of a breakdown, added in that order
    (the values of np.sum over the stacked components, without building the stack)."""
    total = np.asarray(breakdown[names[0]], dtype=float)
    for name in names[1:]:
        total = total + breakdown[name]
    return total


def _stage_terms(workload: Workload, plans: ParallelPlans, stage: Stage
                 ) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """The components of a stage's breakdown but the runtime reserve, in COMPONENTS order,
    grouped by the term that computes them, per key: (components by name, inverse) per
    term (plan_key's ``per_key``: plan ``i`` takes row ``inverse[i]`` of each)."""
    params = rank_parameters(workload, plans, stage)
    states = parameter_state_bytes.per_key(workload, plans, stage)
    activations, activations_inverse = stage_activation_bytes.per_key(workload, plans, stage)
    logits, logits_inverse = logits_bytes.per_key(workload, plans, lm_head_stage(workload, stage))
    buffers, buffers_inverse = communication_buffer_bytes.per_key(workload, plans, params,
                                                                  stage)
    return [states, ({"activations": activations}, activations_inverse),
            ({"logits": logits}, logits_inverse),
            ({"communication_buffers": buffers}, buffers_inverse)]


def _stage_total(terms: list[tuple[dict[str, np.ndarray], np.ndarray]], reserve: np.ndarray
                 ) -> np.ndarray:
    """:func:`total_memory_bytes` of a stage from its terms per key (:func:`_stage_terms`):
    the components of one term are added per key, then gathered; the same additions in
    the same order."""
    total: np.ndarray | None = None
    for components, inverse in terms:
        rows = _rows(total_memory_bytes(components, tuple(components)), inverse)
        total = rows if total is None else np.add(total, rows, out=total)
    assert total is not None  # (a stage has terms)
    return np.add(total, reserve, out=total)


def _rows(per_key: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """Row ``inverse[i]`` of ``per_key`` for each plan ``i`` (a 0-d value for every plan)."""
    if per_key.ndim == 0:
        return np.full(inverse.shape, per_key)
    return per_key.take(inverse, mode="clip")


def _chosen(candidates: list[tuple[dict[str, np.ndarray], np.ndarray]], choice: np.ndarray
            ) -> dict[str, np.ndarray]:
    """Per plan ``i`` and component, row ``inverse[i]`` of the candidate ``choice[i]``, each
    candidate one stage's term (components per key, inverse). Candidates on one numbering
    of the keys (the same inverse) are gathered at once from their values side by side."""
    names, first = candidates[0]
    if all(inverse is first and all(np.ndim(values) == 1 for values in components.values())
           for components, inverse in candidates):
        keys = len(next(iter(names.values())))
        index = first + keys * choice  # candidate s's rows sit s·keys further on
        return {name: np.concatenate([components[name] for components, _ in candidates]
                                     ).take(index, mode="clip") for name in names}
    return {name: _choose(choice, [_rows(components[name], inverse)
                                   for components, inverse in candidates])
            for name in names}


def _choose(choice: np.ndarray, options: list[np.ndarray]) -> np.ndarray:
    """``np.choose`` for any number of options (numpy's takes at most 32)."""
    if len(options) <= 32:
        return np.choose(choice, options)
    return np.take_along_axis(np.stack(options), choice[None, :], axis=0)[0]


def _heaviest(workload: Workload, plans: ParallelPlans
              ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(breakdown of the heaviest stage, its pipeline rank) per plan.

    Candidates: the first stage (embedding, most in-flight micro-batches), the last (LM
    head, logits; it wins only when strictly heavier) and, when dense blocks sit among the
    MoE blocks (schedule.middle_stage_can_be_heaviest), a middle rank (rank 1), which can
    hold more MoE blocks than the first (it wins only when strictly heavier than both).
    Each stage's terms stay per key: their totals are gathered, and each component is
    gathered once, from the stage that wins.
    """
    # The blocks each stage holds, once per key over all plans (never gathered here): the
    # stage terms below (and the time model's) read them inside their own plan_key sets,
    # which gather these remembered per-key values instead of recomputing them
    # (factorise._parent_values).
    if workload.geometry.is_hybrid or workload.pipeline_layouts:
        return _heaviest_of(workload, plans, candidate_stages(
            workload.geometry, plans, workload.pipeline_layouts))
    middle = middle_stage_can_be_heaviest(workload.geometry)
    stages: tuple[Stage, ...] = ("first", "last", "middle") if middle else ("first", "last")
    for stage in stages:
        stage_layer_counts.per_key(workload.geometry, plans, stage,
                                   workload.stage_split,
                                   workload.vocab_in_pipeline_split, workload.pipeline_layouts)
    reserve = np.full(len(plans), float(RUNTIME_RESERVE_BYTES))
    terms = {stage: _stage_terms(workload, plans, stage) for stage in stages}
    best = _stage_total(terms["first"], reserve)
    last_total = _stage_total(terms["last"], reserve)
    heavier = last_total > best
    choice = heavier.astype(np.intp)  # the position of the heaviest stage in ``stages``
    rank = np.where(heavier, plans.pp - 1, 0)
    if middle:
        chosen = np.flatnonzero(_stage_total(terms["middle"], reserve)
                                > np.maximum(best, last_total))
        choice[chosen] = 2
        rank[chosen] = stage_rank(plans, "middle")[chosen]
    breakdown = {name: values for term in range(len(terms["first"]))
                 for name, values in _chosen([terms[stage][term] for stage in stages],
                                             choice).items()}
    breakdown["runtime_reserve"] = reserve
    return breakdown, rank


def _heaviest_of(workload: Workload, plans: ParallelPlans, stages: tuple[Stage, ...]
                 ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(breakdown of the heaviest of ``stages``, its pipeline rank) per plan: a later stage
    wins only when strictly heavier (a hybrid model's candidates, every rank)."""
    reserve = np.full(len(plans), float(RUNTIME_RESERVE_BYTES))
    terms = [_stage_terms(workload, plans, stage) for stage in stages]
    best = _stage_total(terms[0], reserve)
    choice = np.zeros(len(plans), dtype=np.intp)
    rank = np.zeros_like(plans.pp)
    for position, stage in enumerate(stages[1:], start=1):
        total = _stage_total(terms[position], reserve)
        heavier = total > best
        best = np.where(heavier, total, best)
        choice[heavier] = position
        rank = np.where(heavier, stage_rank(plans, stage), rank)
    breakdown = {name: values for term in range(len(terms[0]))
                 for name, values in _chosen([stage_terms[term] for stage_terms in terms],
                                             choice).items()}
    breakdown["runtime_reserve"] = reserve
    return breakdown, rank


def memory_breakdown_bytes(workload: Workload, plans: ParallelPlans,
                           memory_scale: float = 1.0) -> dict[str, np.ndarray]:
    """Per-GPU bytes on the heaviest pipeline stage, by component, one entry per plan (the
    candidates of :func:`_candidate_stages`), at a calibration's ``memory_scale``
    (:func:`scaled_memory_breakdown`; 1: as derived)."""
    return scaled_memory_breakdown(_heaviest(workload, plans)[0], memory_scale)


def scaled_memory_breakdown(breakdown: dict[str, np.ndarray], memory_scale: float
                            ) -> dict[str, np.ndarray]:
    """``breakdown`` with every component the caching allocator holds multiplied by a
    calibration's ``memory_scale`` (a team's runs' measured over modelled memory,
    evaluate/memory_scale.py); the runtime reserve outside it is kept. The same dict when
    the scale is 1 (the shipped profiles)."""
    if memory_scale == 1.0:
        return breakdown
    return {name: values if name == "runtime_reserve" else values * memory_scale
            for name, values in breakdown.items()}


def heaviest_stage(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Pipeline rank of the heaviest stage per plan (0, 1 or pp−1; any rank for a hybrid
    model or a stated pipeline layout)."""
    return _heaviest(workload, plans)[1]


def feasibility(
    total_bytes: np.ndarray, capacity_bytes: float, usable_fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """(fits, overshoot_bytes): whether each total fits in usable_fraction of the device
    memory (the rest absorbs allocator fragmentation), and by how much it does not."""
    if not 0.0 < usable_fraction <= 1.0:
        raise MosaicInputError(f"usable_fraction must be in (0, 1], got {usable_fraction}")
    budget = capacity_bytes * usable_fraction
    total = np.asarray(total_bytes, dtype=float)
    return total <= budget, np.maximum(total - budget, 0.0)
