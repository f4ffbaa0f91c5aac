"""The MOSAIC co-design search: exact enumeration of Eq. 5 (paper Appendix D.2).

For every ladder geometry Z of the grid:

1. the best feasible layout P*(Z) = the max-throughput plan that fits memory (Eq. 6); the
   law never enters this step (Appendix D.2, "Algorithmic consequence");
2. the token budget D*(Z) = tokens/s · T_train · η_good (Eq. 25, with MFU counted on the
   law's N_act so that tokens/s·6·N_act = MFU·F_peak·N_dev), capped at tpp_max·N_act;
   a geometry whose D* is below tpp_min·N_act is not trainable in the window;
3. the predicted loss L(N_tot, S, D, G) (Eq. 10, or any law given).

The optimum is the exact argmin of the loss over the trainable geometries; ties go to the
earlier grid row. Step 1 depends only on the cluster and batch, not on the window or the
law, so :func:`profile_geometries` is separate and reusable (e.g. for a sweep over days).
Geometries that differ only in top_k or granularity enumerate the same layouts; a block of
rows shares that enumeration and what the per-key evaluation learnt on it
(:func:`_shared_plans`), including the terms that do not read top_k (perf.memo_keys).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from math import gcd
from typing import Any

import numpy as np

from mosaic.allocator import keep_freed_memory
from mosaic.arch import LadderGrid
from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.config.convert import model_document
from mosaic.config.layout import batch_document, parallelism_document, plan_row_document
from mosaic.errors import MosaicInputError
from mosaic.law import ScalingLaw
from mosaic.perf.calibration import Calibration
from mosaic.perf.factorise import take_plans
from mosaic.perf.headroom import OUT_OF_MEMORY, memory_verdict
from mosaic.perf.layouts import (
    LayoutLimits,
    best_feasible,
    candidate_plans,
    check_rules,
    enumerate_plans,
    predict_in_chunks,
    stack_limits,
    take_prediction,
    with_balanced_layouts,
)
from mosaic.perf.machine import Machine, machine_for
from mosaic.perf.memory import feasibility, memory_breakdown_bytes, total_memory_bytes
from mosaic.perf.pipeline_layout import layout_text
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.step_time import StepPrediction
from mosaic.perf.workload import Workload, experts_fuse_grouped_mlp
from mosaic.plan.envelope import TABLE3_LAYOUT_LIMITS, Envelope, SearchSpace
from mosaic.plan.ray_backend import current_backend
from mosaic.threads import limit_blas_threads
from mosaic.units import GIB

PLAN_KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "sharding", "hsdp_shard", "micro_batch",
             "checkpointing")
GEOMETRY_KEYS = ("q", "layers", "d_model", "experts", "top_k", "split_factor", "expert_ffn")

BLOCK_ROWS = 8  # geometries per task handed to a worker process (at least; see _blocks)

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class ThroughputTable:
    """Best feasible layout of every grid geometry on one cluster (arrays over rows).

    ``tokens_per_s`` is 0 and the other metrics NaN where no layout is feasible;
    ``layout_reasons`` then says why ('' where a layout exists). ``plans_evaluated``
    counts the valid plans checked against memory, ``plans_timed`` those that fit and
    were timed; ``limits`` are the layouts the search was allowed.
    """

    grid: LadderGrid
    n_devices: int
    tokens_per_s: np.ndarray
    mfu: np.ndarray
    step_time_s: np.ndarray
    memory_bytes: np.ndarray
    plans: tuple[dict[str, Any] | None, ...]
    layout_reasons: tuple[str, ...]
    plans_evaluated: int
    plans_timed: int
    limits: LayoutLimits = TABLE3_LAYOUT_LIMITS

    @property
    def has_layout(self) -> np.ndarray:
        return self.tokens_per_s > 0


def candidate_workload(envelope: Envelope, grid: LadderGrid, row: int,
                       limits: LayoutLimits = TABLE3_LAYOUT_LIMITS) -> Workload:
    """What grid row ``row`` trains under ``envelope``: the one workload every candidate's
    layout search, breakdown and report uses (batch, precision, stack, dispatcher, optimizer
    and the envelope's workload settings; under ``balanced_pipeline``, a balanced layout for
    each pipeline shape ``limits`` allows)."""
    geometry = grid.geometry(row)
    workload = Workload(
        geometry=geometry,
        global_batch=envelope.global_batch,
        seq_len=envelope.seq_len,
        precision=envelope.precision,
        stack=envelope.stack,
        dispatcher=envelope.dispatcher,
        dispatcher_stated=envelope.dispatcher_stated,
        ep_overlap=envelope.ep_overlap,
        full_iteration_cuda_graph=envelope.full_iteration_cuda_graph,
        fp8_recipe=envelope.fp8_recipe,
        fp8_param_gather=envelope.fp8_param_gather,
        fp4_param_gather=envelope.fp4_param_gather,
        non_tn_fp8_gemms=envelope.system.device.runs_non_tn_fp8_gemms,
        grad_reduce_in_fp32=envelope.grad_reduce_in_fp32,
        cross_entropy=envelope.cross_entropy,
        # the fused grouped MLP is the routed experts' FC1 + SwiGLU + FC2: MoE SwiGLU only
        fused_grouped_mlp=envelope.fused_grouped_mlp and experts_fuse_grouped_mlp(geometry),
        quantised_gemms=envelope.quantised_gemms,  # every grid geometry is an MoE
        optimizer=envelope.optimizer,
        optimizer_dtype=envelope.optimizer_dtype,
    )
    if envelope.balanced_pipeline:
        workload = with_balanced_layouts(workload, envelope.n_devices, limits)
    return workload


def check_layout_limits(envelope: Envelope, space: SearchSpace, limits: LayoutLimits) -> None:
    """Limits the envelope's stack cannot run at all (a sharding mode or pipeline shape it
    does not offer) are one error before any search, not a reason on every geometry."""
    stack_limits(limits, candidate_workload(envelope, space.enumerate(), 0, limits))


@dataclass(frozen=True)
class LayoutOutcome:
    """The best layout of one geometry, or why there is none.

    ``plan``/``prediction`` are None when no plan fits; ``plans_evaluated`` counts the
    plans whose memory was checked, ``plans_timed`` those also timed.
    """

    plan: dict[str, Any] | None
    prediction: StepPrediction | None
    reason: str
    plans_evaluated: int
    plans_timed: int


def best_feasible_layout(workload: Workload, machine: Machine, calibration: Calibration,
                         limits: LayoutLimits,
                         enumerations: dict[tuple[Any, ...], ParallelPlans] | None = None
                         ) -> LayoutOutcome:
    """Max-tokens/s plan that fits memory: the same plan as ``layouts.best_layout``.

    Memory does not depend on time, so plans are first checked against the memory cap
    (the same formula :func:`predict_step` uses) and only those that fit are timed; the
    ranking and its ties (tokens/s, then memory, then enumeration order) are unchanged.
    ``enumerations``: a dict the caller keeps over several geometries, so those that differ
    only in top_k or granularity share one enumeration (:func:`_shared_plans`); the result
    is the same.
    """
    try:
        plans = _shared_plans(workload, machine, limits, enumerations)
    except MosaicInputError as exc:  # an axis with no candidate at all
        return LayoutOutcome(None, None, str(exc), 0, 0)
    if len(plans) == 0:
        return LayoutOutcome(None, None, _broken_rule(workload, machine, limits), 0, 0)
    breakdown = memory_breakdown_bytes(workload, plans, calibration.memory_scale)
    memory = total_memory_bytes(breakdown)
    fits, overshoot = feasibility(memory, machine.hbm_bytes, machine.usable_memory_fraction)
    if not fits.any():
        closest = int(np.argmin(overshoot))
        usable_gib = machine.usable_memory_fraction * machine.hbm_bytes / GIB
        # the closest under the device's memory is refused by the planning headroom alone
        # (a trial read "run out of memory" for 172.7 GiB on a 178.4 GiB GPU)
        refused = ("run out of memory"
                   if memory_verdict(memory[closest], machine.hbm_bytes,
                                     overshoot[closest]) == OUT_OF_MEMORY
                   else f"exceed the {machine.usable_memory_fraction:.0%} planning headroom "
                        "(--memory-fraction)")
        reason = (f"all {len(plans)} layouts {refused}; the closest needs "
                  f"{memory[closest] / GIB:.1f} GiB per GPU, {usable_gib:.1f} usable "
                  f"({machine.usable_memory_fraction:.0%} of {machine.hbm_bytes / GIB:.1f} "
                  f"GiB; {plans.row(closest)['checkpointing']} checkpointing)")
        return LayoutOutcome(None, None, reason, len(plans), 0)
    keep = np.flatnonzero(fits)
    # inherits the distinct rows memory found; with a shared enumeration, the timed keys
    # too (found once on the shared plans for every top_k)
    fitting = take_plans(plans, keep, shared=enumerations is not None)
    prediction = predict_in_chunks(workload, fitting, machine, calibration,
                                   memory_breakdown={name: value[keep]
                                                     for name, value in breakdown.items()})
    best = best_feasible(prediction)
    assert best is not None  # these plans passed the memory check predict_step repeats
    return LayoutOutcome(fitting.row(best), take_prediction(prediction, best), "",
                         len(plans), len(fitting))


def _enumeration_key(workload: Workload, machine: Machine, limits: LayoutLimits
                     ) -> tuple[Any, ...]:
    """What :func:`enumerate_plans` reads: the job, its device count and NVLink domain and
    the limits, with top_k set to 1 and the expert width replaced by its greatest common
    divisor with the device count. No divisibility rule and no candidate axis reads the
    active expert count, and the one rule that reads the expert width (etp | expert_ffn)
    sees only etp values that divide tp, itself a divisor of the device count
    (layouts._tp_etp_pairs, _model_meshes), for which etp | w holds exactly when
    etp | gcd(w, N_dev). So geometries that differ only in top_k or granularity enumerate
    the same plans (tests/plan/test_search_speed.py checks it)."""
    moe = workload.geometry.moe
    if moe is not None:
        width = gcd(moe.expert_ffn, machine.n_devices)
        # (a workload that would not validate so keeps its own key: shared with no one)
        for changes in ({"top_k": 1, "expert_ffn": width}, {"top_k": 1}):
            with contextlib.suppress(MosaicInputError, ValueError):
                workload = replace(workload, geometry=replace(
                    workload.geometry, moe=replace(moe, **changes)))
                break
    return (workload, machine.n_devices, machine.interconnect.scale_up_domain_gpus, limits)


def _shared_plans(workload: Workload, machine: Machine, limits: LayoutLimits,
                  enumerations: dict[tuple[Any, ...], ParallelPlans] | None
                  ) -> ParallelPlans:
    """:func:`enumerate_plans`, shared through ``enumerations`` (when given) by the
    geometries with the same :func:`_enumeration_key`: the plans object also carries what
    the per-key evaluation learnt about its rows (:mod:`mosaic.perf.factorise`), so the
    next geometry reuses that too."""
    if enumerations is None:
        return enumerate_plans(workload, machine.n_devices,
                               machine.interconnect.scale_up_domain_gpus, limits)
    key = _enumeration_key(workload, machine, limits)
    if key not in enumerations:
        enumerations[key] = enumerate_plans(workload, machine.n_devices,
                                            machine.interconnect.scale_up_domain_gpus, limits)
    return enumerations[key]


# the reason a geometry gets when no layout of the cluster passes the divisibility rules
# (read back by the plan report's categories and by `compare`)
NO_DIVIDING_LAYOUT = "no layout satisfies the divisibility rules"


def _broken_rule(workload: Workload, machine: Machine, limits: LayoutLimits) -> str:
    """The divisibility rule most candidates break, with an example."""
    candidates = candidate_plans(workload, machine.n_devices,
                                 machine.interconnect.scale_up_domain_gpus, limits)
    check = check_rules(workload, candidates, machine.n_devices)
    rule = int(np.argmax(np.bincount(check.first_broken[~check.valid],
                                     minlength=len(check.rules))))
    message = check.message(candidates, int(np.flatnonzero(check.first_broken == rule)[0]))
    note = model_parallel_factor_note(machine.n_devices, workload.global_batch)
    return f"{NO_DIVIDING_LAYOUT} (e.g. {message}{note})"


def model_parallel_factor_note(n_devices: int, global_batch: int) -> str:
    """Why few layouts exist when the GPU count has a factor the batch lacks: dp divides the
    global batch (dp·micro_batch | B), so tp·pp·cp = N/dp must carry N / gcd(N, B) (288 GPUs
    at batch 1024: tp·pp·cp a multiple of 9, which few head counts or depths divide)."""
    leftover = n_devices // gcd(n_devices, global_batch)
    if leftover == 1:
        return ""
    return (f"; {n_devices} GPUs and a global batch of {global_batch} sequences share only "
            f"the factor {n_devices // leftover}, so tp·pp·cp must be a multiple of "
            f"{leftover}: a GPU count dividing the batch, or a batch sharing its factors, "
            "leaves more layouts")


@dataclass(frozen=True)
class _Profile:
    """The best layout of a block of rows (plain values: crosses process boundaries)."""

    tokens_per_s: np.ndarray
    mfu: np.ndarray
    step_time_s: np.ndarray
    memory_bytes: np.ndarray
    plans: list[dict[str, Any] | None]
    reasons: list[str]
    plans_evaluated: int
    plans_timed: int


_WORKER_STATE: dict[str, Any] = {}


def _profile_rows(envelope: Envelope, grid: LadderGrid, calibration: Calibration,
                  limits: LayoutLimits, rows: range) -> _Profile:
    machine = machine_for(envelope.cluster, envelope.precision,
                          envelope.usable_memory_fraction, fp8_recipe=envelope.fp8_recipe)
    n = len(rows)
    metrics = {name: np.full(n, np.nan) for name in ("mfu", "step_time_s", "memory_bytes")}
    tokens_per_s = np.zeros(n)
    plans: list[dict[str, Any] | None] = [None] * n
    reasons = [""] * n
    evaluated = timed = 0
    enumerations: dict[tuple[Any, ...], ParallelPlans] = {}  # shared within the block
    for i, row in enumerate(rows):
        workload = candidate_workload(envelope, grid, row, limits)
        outcome = best_feasible_layout(workload, machine, calibration, limits, enumerations)
        evaluated += outcome.plans_evaluated
        timed += outcome.plans_timed
        if outcome.plan is None or outcome.prediction is None:
            reasons[i] = outcome.reason
            continue
        prediction = outcome.prediction
        tokens_per_s[i] = prediction.tokens_per_s[0]
        metrics["mfu"][i] = prediction.mfu[0]
        metrics["step_time_s"][i] = prediction.step_time_s[0]
        metrics["memory_bytes"][i] = prediction.memory_bytes[0]
        plans[i] = {key: outcome.plan[key] for key in PLAN_KEYS}
        pipeline_layout = layout_text(workload.pipeline_layouts, outcome.plan)
        if pipeline_layout is not None:  # the layout that splits its pipeline (Megatron's flag)
            plans[i]["pipeline_layout"] = pipeline_layout
    return _Profile(tokens_per_s, plans=plans, reasons=reasons, plans_evaluated=evaluated,
                    plans_timed=timed, **metrics)


def _init_worker(*state: Any) -> None:
    limit_blas_threads()  # N workers x 1 BLAS thread on N cores (mosaic.threads)
    _WORKER_STATE["state"] = state


def _profile_rows_in_worker(start: int, stop: int) -> _Profile:
    return _profile_rows(*_WORKER_STATE["state"], range(start, stop))


def default_workers() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def _blocks(grid: LadderGrid, size: int) -> list[range]:
    """Consecutive row ranges of at least ``size`` rows (the last may be shorter) that end
    where the model body (layers, width, experts) changes, so the rows that share an
    enumeration (:func:`_shared_plans`) run in one task; a run longer than
    4·``size`` rows is cut every ``size`` rows."""
    n = len(grid)
    body = np.stack([np.asarray(grid.layers), np.asarray(grid.d_model),
                     np.asarray(grid.experts)], axis=1) if n else np.zeros((0, 3))
    changes = [0, *(np.flatnonzero((body[1:] != body[:-1]).any(axis=1)) + 1).tolist(), n]
    blocks: list[range] = []
    start = 0
    for stop in changes[1:]:
        if stop - start >= size:
            if stop - start > 4 * size:
                blocks.extend(range(s, min(s + size, stop)) for s in range(start, stop, size))
            else:
                blocks.append(range(start, stop))
            start = stop
    if start < n:
        blocks.append(range(start, n))
    return blocks


def _run_serial(state: tuple[Any, ...], blocks: list[range],
                progress: ProgressFn | None, total: int) -> list[_Profile]:
    parts = []
    for block in blocks:
        parts.append(_profile_rows(*state, block))
        if progress is not None:
            progress(block.stop, total)
    return parts


def _run_forked(state: tuple[Any, ...], blocks: list[range], workers: int,
                progress: ProgressFn | None, total: int) -> list[_Profile]:
    """Blocks in forked workers: they inherit ``state`` (catalog objects hold read-only
    mappings that do not pickle); only row ranges and plain results are pickled."""
    parts: list[_Profile | None] = [None] * len(blocks)
    done = 0
    with ProcessPoolExecutor(max_workers=min(workers, len(blocks)),
                             mp_context=mp.get_context("fork"),
                             initializer=_init_worker, initargs=state) as pool:
        # Deepest models first (their blocks take longest; cost ~ layers summed over the
        # rows), so no worker is left alone with a long block at the end.
        layers = np.asarray(state[1].layers)
        order = sorted(range(len(blocks)),
                       key=lambda i: -int(layers[blocks[i].start:blocks[i].stop].sum()))
        futures = {pool.submit(_profile_rows_in_worker, blocks[i].start, blocks[i].stop): i
                   for i in order}
        for future in as_completed(futures):
            i = futures[future]
            parts[i] = future.result()
            done += len(blocks[i])
            if progress is not None:
                progress(done, total)
    return [p for p in parts if p is not None]


def profile_geometries(
    envelope: Envelope,
    grid: LadderGrid,
    calibration: Calibration,
    limits: LayoutLimits | None = None,
    progress: ProgressFn | None = None,
    workers: int | None = None,
) -> ThroughputTable:
    """Best feasible layout per geometry (Eq. 6), one full layout search per grid row.

    Rows are independent, so blocks of rows run in ``workers`` forked processes (default:
    the CPUs available); the result does not depend on the number of workers.

    On a cluster whose goodput is 0 (Young-Daly: it fails faster than it checkpoints) no
    geometry trains whatever its layout: every row is left without one, the goodput named
    as the reason, and no layout is searched, so a sweep keeps its other budgets (a node
    sweep ended on its largest cluster). `plan` refuses such a cluster before this.
    """
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise MosaicInputError(f"workers must be >= 1, got {workers}")
    limits = limits or TABLE3_LAYOUT_LIMITS
    idle_reason = envelope.goodput.no_progress_reason(envelope.n_devices)
    if idle_reason is not None:
        n = len(grid)
        if progress is not None:
            progress(n, n)
        return ThroughputTable(
            grid=grid, n_devices=envelope.n_devices, tokens_per_s=np.zeros(n),
            mfu=np.full(n, np.nan), step_time_s=np.full(n, np.nan),
            memory_bytes=np.full(n, np.nan), plans=(None,) * n,
            layout_reasons=(idle_reason,) * n, plans_evaluated=0, plans_timed=0,
            limits=limits)
    keep_freed_memory()  # before the workers fork: they inherit it (mosaic.allocator)
    state = (envelope, grid, calibration, limits)
    blocks = _blocks(grid, BLOCK_ROWS)
    backend = current_backend()
    if backend is not None:  # Ray tasks (mosaic.plan.ray_backend), same blocks, same order
        parts = backend.run_blocks(_profile_rows, state, blocks, progress, len(grid))
    elif workers == 1 or len(blocks) == 1 or "fork" not in mp.get_all_start_methods():
        parts = _run_serial(state, blocks, progress, len(grid))
    else:
        parts = _run_forked(state, blocks, workers, progress, len(grid))
    return ThroughputTable(
        grid=grid,
        n_devices=envelope.n_devices,
        tokens_per_s=np.concatenate([p.tokens_per_s for p in parts]),
        mfu=np.concatenate([p.mfu for p in parts]),
        step_time_s=np.concatenate([p.step_time_s for p in parts]),
        memory_bytes=np.concatenate([p.memory_bytes for p in parts]),
        plans=tuple(plan for p in parts for plan in p.plans),
        layout_reasons=tuple(reason for p in parts for reason in p.reasons),
        plans_evaluated=sum(p.plans_evaluated for p in parts),
        plans_timed=sum(p.plans_timed for p in parts),
        limits=limits,
    )


@dataclass(frozen=True)
class PlanResult:
    """Every geometry of the grid scored under one envelope (arrays over grid rows).

    Attributes:
        budget_tokens: D* = tokens/s · T_train · η_good (Eq. 25); 0 without a layout.
        tokens: the trained D = min(D*, tpp_max·N_act); NaN where not trainable.
        feasible: a layout fits and D* ≥ tpp_min·N_act.
        loss: predicted loss at (N_tot, S, D, G); NaN where not trainable.
        reasons: why a geometry is not trainable ('' where it is).
        ranking: trainable rows by increasing loss (ties: earlier row first).
        global_batch, batch_bound_tokens: per row, the batch chosen by a batch search and
            the bound it respects (:mod:`mosaic.plan.batch`); None for a fixed batch.
    """

    envelope: Envelope
    space: SearchSpace
    throughput: ThroughputTable
    budget_tokens: np.ndarray
    tokens: np.ndarray
    feasible: np.ndarray
    loss: np.ndarray
    reasons: tuple[str, ...]
    ranking: np.ndarray
    global_batch: np.ndarray | None = None
    batch_bound_tokens: np.ndarray | None = None

    @property
    def grid(self) -> LadderGrid:
        return self.throughput.grid

    @property
    def optimum_index(self) -> int | None:
        return int(self.ranking[0]) if self.ranking.size else None

    @property
    def c_model_flops(self) -> np.ndarray:
        """C_model = 6·N_act·D of every row (NaN where not trainable)."""
        return FLOPS_PER_PARAM_TOKEN * self.grid.n_active * self.tokens

    @property
    def c_deliverable_flops(self) -> np.ndarray:
        """C_deliverable = C_peak·MFU·η_good = 6·N_act·D* (Eq. 2)."""
        return FLOPS_PER_PARAM_TOKEN * self.grid.n_active * self.budget_tokens

    @property
    def tpp_capped(self) -> np.ndarray:
        """Rows whose D is the tpp_max cap rather than the wall-clock budget."""
        return self.feasible & (self.budget_tokens > self.space.tpp_max * self.grid.n_active)

    def train_days(self, row: int) -> float:
        """The days of the window training row ``row``'s D takes: all of it unless D is
        capped (D* = tokens/s · T_train · η_good, Eq. 25, so a capped D ends the run D / D*
        early); the days its cost counts (:func:`mosaic.plan.cost.plan_cost`)."""
        if not self.budget_tokens[row] > 0:
            return self.envelope.days
        return self.envelope.days * float(self.tokens[row] / self.budget_tokens[row])

    def candidate(self, row: int) -> dict[str, Any]:
        """One geometry with its tokens, throughput, loss and layout, as plain values."""
        grid = self.grid
        table = self.throughput
        entry: dict[str, Any] = {key: int(getattr(grid, key)[row]) for key in GEOMETRY_KEYS}
        n_active = float(grid.n_active[row])
        entry.update(
            n_active=n_active,
            n_total=float(grid.n_total[row]),
            sparsity=float(grid.sparsity[row]),
            tokens=float(self.tokens[row]),
            tpp=float(self.tokens[row] / n_active),
            tpp_capped=bool(self.tpp_capped[row]),
            budget_tokens=float(self.budget_tokens[row]),
            train_days=self.train_days(row),
            c_model_flops=float(self.c_model_flops[row]),
            mfu=float(table.mfu[row]),
            mfu_gemm_lane=float(table.mfu[row]) / self.envelope.gemm_lane_peak_ratio,
            tokens_per_s=float(table.tokens_per_s[row]),
            step_time_s=float(table.step_time_s[row]),
            memory_bytes=float(table.memory_bytes[row]),
            loss=float(self.loss[row]),
            plan=None if table.plans[row] is None else plan_row_document(table.plans[row]),
            global_batch=self.envelope.global_batch if self.global_batch is None
            else int(self.global_batch[row]),
        )
        if self.space.unique_tokens is not None:  # repeated data: what the law saw
            entry["epochs"] = float(self.space.epochs(self.tokens[row]))
            entry["effective_tokens"] = float(self.space.law_tokens(self.tokens[row]))
        if self.batch_bound_tokens is not None:
            entry["batch_bound_tokens"] = float(self.batch_bound_tokens[row])
        if not grid.is_ladder:  # a backbone variant: the whole model, as a model block
            entry["model"] = model_document(grid.geometry(row))
        plan = table.plans[row]
        if plan is not None:  # the layout and batch as a job file writes them (docs/schema.md)
            entry["parallelism"] = parallelism_document(plan, str(self.envelope.dispatcher),
                                                       self.envelope.stack)
            entry["batch"] = batch_document(entry["global_batch"], self.envelope.seq_len,
                                            int(plan["micro_batch"]))
        return entry

    def candidates(self, top: int | None = None) -> list[dict[str, Any]]:
        """Trainable geometries by increasing loss (the first ``top`` when given)."""
        rows = self.ranking if top is None else self.ranking[:top]
        return [self.candidate(int(row)) for row in rows]

    def infeasible(self) -> list[dict[str, Any]]:
        """Geometries that cannot be trained in the window, with the reason; one whose best
        layout fits but whose window is too short also carries the tokens the window gives
        it (``budget_tokens``, D* of Eq. 25) and the ``min_tokens`` (tpp_min·N_act) it needs,
        so a message can say how far the closest one falls short."""
        grid = self.grid
        floor = self.space.tpp_min * grid.n_active
        short = self.throughput.has_layout & (self.budget_tokens < floor)
        return [
            {**{key: int(getattr(grid, key)[row]) for key in GEOMETRY_KEYS},
             "reason": self.reasons[row],
             **({"budget_tokens": float(self.budget_tokens[row]),
                 "min_tokens": float(floor[row])} if short[row] else {})}
            for row in np.flatnonzero(~self.feasible)
        ]


def score(
    throughput: ThroughputTable, envelope: Envelope, space: SearchSpace, law: ScalingLaw
) -> PlanResult:
    """Token budget (Eq. 25), TPP range and loss of every profiled geometry."""
    grid = throughput.grid
    if throughput.n_devices != envelope.n_devices:
        raise ValueError("throughput table was profiled for another device count")
    budget = throughput.tokens_per_s * envelope.train_s * envelope.goodput_fraction
    floor = space.tpp_min * grid.n_active
    feasible = throughput.has_layout & (budget >= floor)
    tokens = np.where(feasible, np.minimum(budget, space.tpp_max * grid.n_active), np.nan)
    loss = np.full(len(grid), np.nan)
    if feasible.any():
        loss[feasible] = law.predict(
            n_total=grid.n_total[feasible],
            tokens=space.law_tokens(tokens[feasible]),  # D' when the unique data is bounded
            sparsity=grid.sparsity[feasible],
            split_factor=grid.split_factor[feasible],
        )
    reasons = tuple(
        _reason(throughput.layout_reasons[row], budget[row], floor[row], space.tpp_min)
        for row in range(len(grid))
    )
    rows = np.flatnonzero(feasible)
    ranking = rows[np.argsort(loss[rows], kind="stable")]
    return PlanResult(
        envelope=envelope,
        space=space,
        throughput=throughput,
        budget_tokens=budget,
        tokens=tokens,
        feasible=feasible,
        loss=loss,
        reasons=reasons,
        ranking=ranking,
    )


def _reason(layout_reason: str, budget: float, floor: float, tpp_min: float) -> str:
    if layout_reason:
        return layout_reason
    if budget < floor:
        return (f"window delivers D* = {budget:.3g} tokens < {tpp_min:g}·N_act = {floor:.3g} "
                f"(too large for this cluster and window)")
    return ""


def search(
    envelope: Envelope,
    space: SearchSpace,
    law: ScalingLaw,
    calibration: Calibration,
    limits: LayoutLimits | None = None,
    progress: ProgressFn | None = None,
    workers: int | None = None,
) -> PlanResult:
    """Solve Eq. 5 exactly over the grid: profile every geometry, then score it. A cluster
    whose goodput is 0 is refused with the reason."""
    envelope.goodput.require_progress(envelope.n_devices)
    throughput = profile_geometries(envelope, space.enumerate(), calibration, limits, progress,
                                    workers)
    return score(throughput, envelope, space, law)
