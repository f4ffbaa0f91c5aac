"""Fit the performance model's few free constants to measured runs, and cross-validate.

The fitted constants act on the analytical step time t_a of each run in closed form:

    t = (t_rest + max(t_cmp + Δ, t_disp)) · χ_sys(c_A2A, c_PP, c_ovl) · m_stack,
    Δ = (1/a_stack − 1)·t_att + (r_routing − 1)·t_moe + (e − 1)·t_elem,
    m_stack = exp(b + u_stack)

(paper Eqs. 14-15, one time multiplier and one flash-attention efficiency factor a per
software stack, one load-imbalance factor r >= 1 per MoE routing regime, one element-wise
traffic factor e >= 1 shared by all runs; t_att, t_moe and t_elem are the attention-core,
routed-expert and element-wise times on the critical path; the block work t_cmp and its
launch floor t_disp keep Eq. 11's max, so a factor that only fills idle launch time does
not stretch the step; t_rest is everything outside the blocks). e says how many times real
stacks move the data the streaming model counts once (unfused norms, rotary embedding,
casts, masks and the many small kernels it does not itemise). ``b`` is shared by
all stacks; the per-stack deviations ``u`` and log a are shrunk towards 0 (Gaussian priors
of width ``STACK_PRIOR_LOG_SD`` and ``ATTENTION_PRIOR_LOG_SD``), so a stack seen in few
runs borrows strength from the rest and an unseen stack is predicted with exp(b) alone.
The fit is robust least squares on
the log of predicted/measured step time (scipy ``least_squares``, soft-L1 loss).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mosaic.config.run_records import RunRecord
from mosaic.errors import MosaicInputError
from mosaic.evaluate.plausibility import implausibility, implausible_record_reason
from mosaic.evaluate.validation_report import RunPrediction, run_prediction
from mosaic.perf.calibration import FITTABLE_CONSTANTS, Calibration
from mosaic.perf.machine import least_step_multiplier, machine_for
from mosaic.perf.step_time import predict_step
from mosaic.text_values import parse_names

STACK_PRIOR_LOG_SD = 0.3  # a stack is rarely more than ~1.35x off the shared multiplier
# Attention kernels differ up to ~2x: FlashAttention-2 reaches 35% of an H100's bf16 peak,
# FlashAttention-3 75% (740 TFLOP/s), 1.5-2.0x faster (Shah et al. 2024, arXiv 2407.08608,
# abstract). A stack's factor on the model's kernel curve spans a bit more than that ratio
# below (0.30 < 0.35/0.75 = 0.47: an unfused or older kernel) and little above (1.22: a
# kernel somewhat better than the curve's fits), so the prior's SD is about ln 2 / 1.4.
ATTENTION_PRIOR_LOG_SD = 0.5
ATTENTION_LOG_BOUNDS = (-1.2, 0.2)
ROUTING_LOG_BOUNDS = (0.0, 1.5)  # imbalance only slows the busiest rank: r in [1, 4.5]
ROUTING_PRIOR_LOG_SD = 0.5
# Residual element-wise traffic common to every stack, in units of the analytical count and
# added to each implementation's sourced traffic (perf/elementwise_traffic): none to 3x more.
# It fits near its upper bound (3.85 of 4), driven by small-expert MoE runs (Qwen3-30B-A3B)
# whose permute/unpermute traffic the analytical count under-states (docs/evidence/
# elementwise_fusion.md).
ELEMENTWISE_LOG_BOUNDS = (0.0, np.log(4.0))
ROBUST_SCALE_LOG = 0.1  # soft-L1 transition: residuals beyond ~10% count linearly
# Eq. 15 terms. c_A2A scales the all-to-all share of the step (a straggler can at most
# multiply the exposed all-to-all several times over); c_PP is the slowdown per extra node a
# pipeline spans (at most doubling the step per node); c_ovl is the paper's intra-node
# overlap *credit* (c_ovl < 0, Sec. 5.5), bounded by the share of a step that pipeline
# send/recv and bubble can hide in a deep single-node pipeline (~10% for n_mb >= 4·pp).
CHI_BOUNDS = {"chi_a2a": (0.0, 10.0), "chi_pp": (0.0, 1.0), "chi_overlap": (-0.1, 0.0)}
STACK_LOG_BOUNDS = (-1.0, 1.0)  # a stack multiplier within e^±1 of the analytical step
DEFAULT_STACK_KEY = "default"
ProgressFn = Callable[[int, int], None]
FITTED = "fitted by mosaic calibrate (robust least squares on log step time)"


@dataclass(frozen=True)
class RecordBaselines:
    """What the fit needs of each run, from one uncalibrated prediction (arrays over runs)."""

    ids: tuple[str, ...]
    stacks: tuple[str, ...]
    routings: tuple[str, ...]
    analytic_step_time_s: np.ndarray
    attention_core_s: np.ndarray
    routed_expert_s: np.ndarray
    elementwise_s: np.ndarray
    block_compute_s: np.ndarray
    block_dispatch_floor_s: np.ndarray
    a2a_share: np.ndarray
    pp_extra_nodes: np.ndarray
    deep_local_pipeline: np.ndarray
    measured_step_time_s: np.ndarray
    # MFU with causal attention against the GEMM lane's peak at analytic_step_time_s: with
    # the measured step, what the measurement implies (mosaic.evaluate.plausibility)
    analytic_lane_mfu_with_attention: np.ndarray

    def subset(self, mask: np.ndarray) -> RecordBaselines:
        keep = np.flatnonzero(mask)
        return RecordBaselines(
            ids=tuple(self.ids[i] for i in keep),
            stacks=tuple(self.stacks[i] for i in keep),
            routings=tuple(self.routings[i] for i in keep),
            analytic_step_time_s=self.analytic_step_time_s[keep],
            attention_core_s=self.attention_core_s[keep],
            routed_expert_s=self.routed_expert_s[keep],
            elementwise_s=self.elementwise_s[keep],
            block_compute_s=self.block_compute_s[keep],
            block_dispatch_floor_s=self.block_dispatch_floor_s[keep],
            a2a_share=self.a2a_share[keep],
            pp_extra_nodes=self.pp_extra_nodes[keep],
            deep_local_pipeline=self.deep_local_pipeline[keep],
            measured_step_time_s=self.measured_step_time_s[keep],
            analytic_lane_mfu_with_attention=self.analytic_lane_mfu_with_attention[keep],
        )


# StepPrediction fields the closed form reads, copied one per run into RecordBaselines.
_PREDICTION_COLUMNS = ("analytic_step_time_s", "attention_core_s", "routed_expert_s",
                       "elementwise_s", "block_compute_s", "block_dispatch_floor_s")
# ChiDrivers fields (the inputs of Eq. 15), copied the same way.
_DRIVER_COLUMNS = ("a2a_share", "pp_extra_nodes", "deep_local_pipeline")


def _routing_key(record: RunRecord) -> str:
    return record.workload.routing if record.workload.geometry.is_moe else "dense"


def scored(record: RunRecord) -> bool:
    """Whether ``record`` enters the fit: a scored throughput (not OOM, hardware as
    catalogued) and a measured step time."""
    return bool(record.throughput_scored and record.measured_step_time_s)


def uncorrected(base: Calibration) -> Calibration:
    """``base`` without the constants the fit sets: the analytical step time the closed
    form acts on (the memory scale and measured kernel constants stay ``base``'s)."""
    return replace(base, chi_a2a=0.0, chi_pp=0.0, chi_overlap=0.0, stack_overhead={},
                   attention_efficiency={}, routing_imbalance={}, elementwise_traffic_factor=1.0)


def record_baselines(records: Sequence[RunRecord], base: Calibration,
                     progress: ProgressFn | None = None) -> RecordBaselines:
    """Predict every run with a scored throughput (not OOM, hardware as catalogued) once,
    uncorrected, and keep the fit's inputs
    (``progress(done, total)`` after each run)."""
    rows = [r for r in records if scored(r)]
    if not rows:
        raise MosaicInputError("no run with a measured step time to calibrate on")
    return fit_predictions(rows, base, progress)[0]


def fit_predictions(records: Sequence[RunRecord], base: Calibration,
                    progress: ProgressFn | None = None,
                    unpredictable: Callable[[RunRecord, str], None] | None = None
                    ) -> tuple[RecordBaselines, list[RunPrediction]]:
    """Every record predicted once, uncorrected (:func:`uncorrected`): the fit's inputs of
    the :func:`scored` ones, and each predictable record's prediction, whose memory (which
    depends on the calibration's memory scale alone, perf.memory) serves the memory-scale
    fit and the coverage at ``base``'s scale (`calibrate` predicted each run three or four
    times: a review). A record the model cannot predict goes to ``unpredictable(record,
    reason)``, as in :func:`~mosaic.evaluate.validation_report.predict_runs`; without that
    callback the error propagates. ``progress(done, total)`` after each record."""
    base = uncorrected(base)
    rows: list[RunRecord] = []
    predictions: list[RunPrediction] = []
    columns: dict[str, list[float]] = {
        name: [] for name in _PREDICTION_COLUMNS + _DRIVER_COLUMNS}
    lane_mfu: list[float] = []
    for done, record in enumerate(records, start=1):
        try:
            machine = machine_for(record.cluster, record.workload.precision)
            prediction = predict_step(record.workload, record.plan, machine, base)
        except MosaicInputError as exc:
            if unpredictable is None:
                raise
            unpredictable(record, str(exc))
        else:
            predictions.append(run_prediction(record, prediction, 0))
            if scored(record):
                rows.append(record)
                for name in _PREDICTION_COLUMNS:
                    columns[name].append(getattr(prediction, name)[0])
                for name in _DRIVER_COLUMNS:
                    columns[name].append(getattr(prediction.chi_drivers, name)[0])
                lane_mfu.append(float(prediction.mfu_with_attention_gemm_lane[0]
                                      * prediction.step_time_s[0]
                                      / prediction.analytic_step_time_s[0]))
        if progress is not None:
            progress(done, len(records))
    return RecordBaselines(
        ids=tuple(r.id for r in rows),
        stacks=tuple(r.workload.stack for r in rows),
        routings=tuple(_routing_key(r) for r in rows),
        **{name: np.array(values, dtype=float) for name, values in columns.items()},
        measured_step_time_s=np.array([r.measured_step_time_s for r in rows], dtype=float),
        analytic_lane_mfu_with_attention=np.array(lane_mfu, dtype=float),
    ), predictions


def implausible_measurements(baselines: RecordBaselines, records: Sequence[RunRecord]
                             ) -> dict[str, str]:
    """Run id -> why its measurement (throughput or memory) looks mis-entered, as `mosaic
    validate` words it, judged against the uncalibrated prediction (a factor of ten is far
    beyond any fitted constant)."""
    by_id = {r.id: r for r in records}
    found = {}
    for i, run_id in enumerate(baselines.ids):
        ratio = float(baselines.analytic_step_time_s[i] / baselines.measured_step_time_s[i])
        record = by_id[run_id]
        reason = implausible_record_reason(
            record.measured_tokens_per_s_per_gpu, ratio,
            float(baselines.analytic_lane_mfu_with_attention[i]),
            record.measured_memory_bytes, record.system.device.hbm_bytes)
        if reason is not None:
            found[run_id] = reason
    return found


# A fit needs at least this many runs per free parameter to pin its constants down (below
# it, `mosaic calibrate` fits only the stack multiplier unless told otherwise).
MIN_RUNS_PER_PARAMETER = 2
SMALL_FIT_CONSTANTS: tuple[str, ...] = ("stack_overhead",)


def free_parameter_count(baselines: RecordBaselines, base: Calibration,
                         constants: Sequence[str]) -> int:
    """Parameters of the fit that ``constants`` free for these runs (one per stack for a
    per-stack constant, one per routing regime for the imbalance factor)."""
    return sum(constant in constants
               for _, constant, _, _ in _parameter_table(base, *_fit_groups(baselines)))


def constants_to_fit(baselines: RecordBaselines, base: Calibration) -> tuple[str, ...]:
    """The base's fitted constants, or only the stack multiplier when the runs are too few
    for them (fewer than MIN_RUNS_PER_PARAMETER per free parameter): five runs of one's own
    cluster cannot pin seven constants, and a fit that tries moves shared constants such as
    the element-wise factor onto their bounds (a new-user trial: held-out MAPE 9.7% ->
    21.9%)."""
    full = base.fitted_constants
    if len(baselines.ids) >= MIN_RUNS_PER_PARAMETER * free_parameter_count(baselines, base,
                                                                            full):
        return full
    return SMALL_FIT_CONSTANTS


def chosen_constants(fit: str, baselines: RecordBaselines, base: Calibration
                     ) -> tuple[str, ...]:
    """``--fit``: auto (:func:`constants_to_fit`), all (the base's fitted constants) or
    comma-separated names of :data:`~mosaic.perf.calibration.FITTABLE_CONSTANTS`."""
    text = fit.strip()
    if text == "auto":
        return constants_to_fit(baselines, base)
    if text == "all":
        return base.fitted_constants
    names = parse_names("--fit", text)
    if any(name not in FITTABLE_CONSTANTS for name in names):
        raise MosaicInputError(f"--fit {fit!r}: allowed are auto, all, or names from "
                               f"{', '.join(FITTABLE_CONSTANTS)}")
    return names


def without_implausible_throughput(baselines: RecordBaselines
                                   ) -> tuple[RecordBaselines, tuple[str, ...]]:
    """(the runs a fit may use, the ids left out): all but those whose measured throughput
    is physically implausible against the uncalibrated prediction (above 100% MFU, or a
    unit slip's factor off: mosaic.evaluate.plausibility), which would drag every constant
    towards an impossible step time. A memory mis-entry does not touch the time fit."""
    ratios = baselines.analytic_step_time_s / baselines.measured_step_time_s
    keep = np.array([implausibility(float(ratio), float(mfu)) is None for ratio, mfu in
                     zip(ratios, baselines.analytic_lane_mfu_with_attention, strict=True)])
    if not keep.any():
        raise MosaicInputError("every run's measured throughput is implausible (see the "
                               "warnings): nothing to fit; check the units of tokens/s and "
                               "step time")
    left_out = tuple(run_id for run_id, kept in zip(baselines.ids, keep, strict=True)
                     if not kept)
    return baselines.subset(keep), left_out


def _step_time_s(baselines: RecordBaselines, attention: np.ndarray, routing: np.ndarray,
                 elementwise: float, chi_a2a: float, chi_pp: float, chi_ovl: float,
                 stack: np.ndarray) -> np.ndarray:
    """The module docstring's closed form, arrays over runs."""
    chi = (1.0 + chi_a2a * baselines.a2a_share + chi_pp * baselines.pp_extra_nodes
           + chi_ovl * baselines.deep_local_pipeline)
    delta = ((1 / attention - 1) * baselines.attention_core_s
             + (routing - 1) * baselines.routed_expert_s
             + (elementwise - 1) * baselines.elementwise_s)
    block = np.maximum(baselines.block_compute_s, baselines.block_dispatch_floor_s)
    rest = baselines.analytic_step_time_s - block
    analytic = rest + np.maximum(baselines.block_compute_s + delta,
                                 baselines.block_dispatch_floor_s)
    return analytic * np.maximum(chi, 1e-6) * stack


def calibrated_step_time_s(baselines: RecordBaselines, calibration: Calibration) -> np.ndarray:
    """Closed-form step time of each run under ``calibration``."""
    stack = np.array([calibration.stack_multiplier(s) for s in baselines.stacks])
    attention = np.array([calibration.attention_multiplier(s) for s in baselines.stacks])
    routing = np.array([calibration.routing_multiplier(r) for r in baselines.routings])
    return _step_time_s(baselines, attention, routing, calibration.elementwise_traffic_factor,
                        calibration.chi_a2a, calibration.chi_pp, calibration.chi_overlap, stack)


def fit_calibration(baselines: RecordBaselines, base: Calibration, name: str,
                    provenance: str, keep_unseen: bool = False) -> Calibration:
    """Fit c_A2A, c_PP, c_ovl, the stack multipliers, attention, routing and element-wise
    traffic factors. With ``keep_unseen``, the stacks and routing regimes the runs lack keep
    ``base``'s own entries rather than falling to the fit's 'default' (a trial: a profile
    fitted on megatron-core runs moved torchtitan predictions 13%, with nothing learnt about
    torchtitan). Cross-validation folds set it only where the base was fitted on none of the
    held-out runs (:func:`leave_one_group_out`): a base fitted on every run would carry a
    held-out stack's own value into its held-out prediction."""
    stacks, routings = _fit_groups(baselines)
    index = np.array([stacks.index(s) for s in baselines.stacks])
    routing_index = np.array([routings.index(r) if r in routings else -1
                              for r in baselines.routings])
    log_measured = np.log(baselines.measured_step_time_s)
    n = len(stacks)
    scalars = 5  # c_A2A, c_PP, c_ovl, shared log multiplier b, log element-wise factor

    def unpack(theta: np.ndarray) -> tuple[float, float, float, float, float, np.ndarray,
                                           np.ndarray, np.ndarray]:
        return (*(float(v) for v in theta[:scalars]), theta[scalars:scalars + n],
                theta[scalars + n:scalars + 2 * n], theta[scalars + 2 * n:])

    def residuals(theta: np.ndarray) -> np.ndarray:
        (chi_a2a, chi_pp, chi_ovl, shared, log_elementwise, deviations, log_attention,
         log_routing) = unpack(theta)
        routing = np.where(routing_index >= 0, np.exp(np.append(log_routing, 0.0)[
            routing_index]), 1.0)
        predicted = _step_time_s(baselines, np.exp(log_attention[index]), routing,
                                 float(np.exp(log_elementwise)), chi_a2a, chi_pp, chi_ovl,
                                 np.exp(shared + deviations[index]))
        return np.concatenate([np.log(predicted) - log_measured,
                               deviations / STACK_PRIOR_LOG_SD,
                               log_attention / ATTENTION_PRIOR_LOG_SD,
                               log_routing / ROUTING_PRIOR_LOG_SD])

    parameters = _parameter_table(base, stacks, routings)
    labels = [label for label, _, _, _ in parameters]
    lower = np.array([bounds[0] for _, _, bounds, _ in parameters])
    upper = np.array([bounds[1] for _, _, bounds, _ in parameters])
    free = np.array([constant in base.fitted_constants for _, constant, _, _ in parameters])
    # Fixed parameters keep the base calibration's values; free ones start at 0 moved just
    # inside their bounds (a deterministic start, so a rerun reproduces the same file).
    template = np.clip([value for _, _, _, value in parameters], lower, upper)
    start = np.clip(np.zeros_like(template), lower + 1e-3, upper - 1e-3)

    def full(theta_free: np.ndarray) -> np.ndarray:
        theta = template.copy()
        theta[free] = theta_free
        return theta

    from scipy.optimize import least_squares  # here: its import is 1.2 s of `validate`'s start-up

    fit = least_squares(lambda t: residuals(full(t)), start[free],
                        bounds=(lower[free], upper[free]), loss="soft_l1",
                        f_scale=ROBUST_SCALE_LOG)
    solution = full(fit.x)
    # A constant no run's step time depends on (chi_pp without a pipeline across nodes,
    # chi_a2a without an all-to-all across nodes) is not fitted: it keeps the base value
    # instead of wherever the optimiser left it, and is named.
    uninformed = _uninformed(lambda theta: residuals(theta)[:len(log_measured)], solution,
                             lower, upper, free)
    solution[uninformed] = template[uninformed]
    at_bound = _constants_at_bounds(solution, lower, upper, free & ~uninformed, labels)
    not_informed = tuple(label for label, flag in zip(labels, uninformed, strict=True)
                         if flag)
    rounded = np.array([float(f"{v:.6g}") for v in solution])  # readable files, same fit
    (chi_a2a, chi_pp, chi_ovl, shared, log_elementwise, deviations, log_attention,
     log_routing) = unpack(rounded)
    fitted_names = base.fitted_constants
    multipliers = {stack: float(np.exp(shared + deviations[i])) for i, stack in enumerate(stacks)}
    # 'default' is the shared multiplier, the one a stack the runs lack gets: runs of one
    # stack confound it with that stack's own, so such a fit keeps the base's (a trial: a
    # fit on megatron-core runs moved levanter's step by 16%)
    multipliers[DEFAULT_STACK_KEY] = (base.stack_multiplier(DEFAULT_STACK_KEY)
                                      if keep_unseen and len(stacks) == 1
                                      else float(np.exp(shared)))
    # No multiplier below the one at which the GEMMs would outrun the fastest measured GEMM.
    # The fit's vector holds the shared multiplier and each stack's ratio to it, so the floor
    # of their product is applied here, to the multipliers this fit set (a default kept from
    # the base profile is not one, a review), and reported as a bound in the fit's labels.
    floor = least_step_multiplier()
    fitted_keys = [*stacks, *([] if keep_unseen and len(stacks) == 1 else [DEFAULT_STACK_KEY])]
    raised = tuple(f"stack_overhead[{key}]" for key in fitted_keys if multipliers[key] < floor
                   and "stack_overhead" in base.fitted_constants)
    multipliers = {key: max(value, floor) if key in fitted_keys else value
                   for key, value in multipliers.items()}
    at_bound = (*at_bound, *(label for label in raised if label not in at_bound))
    attention = {stack: float(np.exp(log_attention[i])) for i, stack in enumerate(stacks)}
    attention[DEFAULT_STACK_KEY] = 1.0
    imbalance = {routing: float(np.exp(log_routing[i])) for i, routing in enumerate(routings)}
    imbalance[DEFAULT_STACK_KEY] = 1.0
    # what each constant is; its source adds how this fit set it
    unseen = f" (those of '{base.name}' kept for the ones the runs lack)" if keep_unseen else ""
    meanings = {
        "chi_a2a": "c_A2A of Eq. 15 (inter-node expert all-to-all straggler)",
        "chi_pp": "c_PP of Eq. 15 (per extra node a pipeline spans)",
        "chi_overlap": "c_ovl of Eq. 15 (deep pipeline inside one node)",
        "stack_overhead": "step-time multiplier per software stack; 'default' for any "
                          f"other stack{unseen}; none below {floor:.4g}, where the GEMMs would "
                          "outrun the best measured GEMM rate (perf.machine."
                          "least_step_multiplier)",
        "attention_efficiency": f"flash-attention efficiency factor per stack{unseen}",
        "routing_imbalance": f"routed-expert load-imbalance factor per routing regime{unseen}",
        "elementwise_traffic_factor": "1 + element-wise traffic beyond each implementation's "
                                      "sourced kernel count (perf/elementwise_traffic), in "
                                      "units of the analytical streaming count",
    }
    kept = f"kept from '{base.name}': no run of this fit depends on it"
    # a keyed constant (stack_overhead[...]) shares its dict's source: named fitted; one this
    # fit did not free says so before the base's own account of it
    sources = dict(base.sources) | {
        name: f"kept from '{base.name}' (not freed by this fit): {base.sources[name]}"
        for name in meanings if name not in fitted_names and name in base.sources
        and not base.sources[name].startswith("kept from")} | {
        name: f"{meaning}, {kept if name in not_informed else FITTED}"
        for name, meaning in meanings.items() if name in fitted_names}
    if "stack_overhead" not in fitted_names:
        multipliers = dict(base.stack_overhead)
    if "attention_efficiency" not in fitted_names:
        attention = dict(base.attention_efficiency)
    if "routing_imbalance" not in fitted_names:
        imbalance = dict(base.routing_imbalance)
    if keep_unseen:  # the fit's own keys (its 'default' included) win
        multipliers = {**base.stack_overhead, **multipliers}
        attention = {**base.attention_efficiency, **attention}
        imbalance = {**base.routing_imbalance, **imbalance}
    # the stack the profile describes, which plans naming none run on: the base's where the
    # runs hold it, else the runs' one stack (a trial's fit on megatron-core runs over
    # paper-p6b200 planned on paper-nemo, outside its own envelope), else none
    stack = (base.stack if base.stack in stacks
             else stacks[0] if len(stacks) == 1 else None)
    # the base's account of its stack and platform holds only for a fit on that stack
    description = base.description if stack == base.stack else ""
    return replace(base, name=name, provenance=provenance, stack=stack,
                   description=description, chi_a2a=chi_a2a,
                   chi_pp=chi_pp, chi_overlap=chi_ovl, stack_overhead=multipliers,
                   attention_efficiency=attention, routing_imbalance=imbalance,
                   elementwise_traffic_factor=float(f"{np.exp(log_elementwise):.6g}"),
                   sources=sources, at_bounds=at_bound, not_informed=not_informed,
                   coverage=None)  # the caller measures the new fit's coverage


def _fit_groups(baselines: RecordBaselines) -> tuple[list[str], list[str]]:
    """The stacks and MoE routing regimes of the runs, each with parameters of its own."""
    return sorted(set(baselines.stacks)), sorted(set(baselines.routings) - {"dense"})


def _parameter_table(base: Calibration, stacks: list[str], routings: list[str]
                     ) -> list[tuple[str, str, tuple[float, float], float]]:
    """The fit's parameters in the order of its vector: (label for reports, the
    ``fitted_constants`` name that frees it, bounds, the base calibration's value)."""
    shared = base.stack_multiplier(DEFAULT_STACK_KEY)
    return [
        ("chi_a2a", "chi_a2a", CHI_BOUNDS["chi_a2a"], base.chi_a2a),
        ("chi_pp", "chi_pp", CHI_BOUNDS["chi_pp"], base.chi_pp),
        ("chi_overlap", "chi_overlap", CHI_BOUNDS["chi_overlap"], base.chi_overlap),
        # labelled by its key in the calibration file (a trial read '[shared]' as a stack)
        (f"stack_overhead[{DEFAULT_STACK_KEY}]", "stack_overhead", STACK_LOG_BOUNDS,
         np.log(shared)),
        ("elementwise_traffic_factor", "elementwise_traffic_factor", ELEMENTWISE_LOG_BOUNDS,
         np.log(base.elementwise_traffic_factor)),
        *((f"stack_overhead[{st}]", "stack_overhead", STACK_LOG_BOUNDS,
           np.log(base.stack_multiplier(st) / shared)) for st in stacks),
        *((f"attention_efficiency[{st}]", "attention_efficiency", ATTENTION_LOG_BOUNDS,
           np.log(base.attention_multiplier(st))) for st in stacks),
        *((f"routing_imbalance[{r}]", "routing_imbalance", ROUTING_LOG_BOUNDS,
           np.log(base.routing_multiplier(r))) for r in routings),
    ]


def _uninformed(data_residuals: Callable[[np.ndarray], np.ndarray], solution: np.ndarray,
                lower: np.ndarray, upper: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Mask over all parameters: the free ones no run's predicted step time moves with
    (moving each alone by a tenth of its range, inward, leaves every run's residual as it
    was), i.e. whose driver no run has."""
    base = data_residuals(solution)
    mask = np.zeros(len(solution), dtype=bool)
    for index in np.flatnonzero(free):
        step = 0.1 * (upper[index] - lower[index])
        moved = solution.copy()
        moved[index] += step if solution[index] + step <= upper[index] else -step
        mask[index] = bool(np.all(data_residuals(moved) == base))
    return mask


def _constants_at_bounds(solution: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                         free: np.ndarray, labels: list[str]) -> tuple[str, ...]:
    """Labels of fitted constants that ended on a bound (reported, never silent)."""
    span = upper - lower
    near = (np.abs(solution - lower) <= 1e-4 * span) | (np.abs(upper - solution) <= 1e-4 * span)
    return tuple(label for label, hit, is_free in zip(labels, near, free, strict=True)
                 if hit and is_free)


@dataclass(frozen=True)
class CrossValidation:
    """Held-out predictions: each group's runs predicted by a fit without that group."""

    groups: tuple[str, ...]  # group of each run
    predicted_step_time_s: np.ndarray
    measured_step_time_s: np.ndarray
    # the groups whose fold kept the base's values for what its training runs lack, as the
    # written profile does (the base was fitted on none of their runs: leave_one_group_out)
    base_kept_groups: tuple[str, ...] = ()

    @property
    def errors(self) -> np.ndarray:
        """Relative tokens/s error predicted/measured − 1 (tokens/s ∝ 1/step time)."""
        return self.measured_step_time_s / self.predicted_step_time_s - 1.0

    def summary(self, moe: np.ndarray) -> dict[str, Any]:
        """Held-out MAPE overall, on the MoE runs (``moe``: bool per run) and the dense
        ones (None where there are none), median and max |error|, and MAPE per group."""
        absolute = np.abs(self.errors)
        groups = np.array(self.groups)

        def mape(selected: np.ndarray) -> float | None:
            return float(absolute[selected].mean()) if selected.any() else None

        return {
            "mape": float(absolute.mean()),
            "median_abs_error": float(np.median(absolute)),
            "max_abs_error": float(absolute.max()),
            "moe_mape": mape(moe),
            "dense_mape": mape(~moe),
            "per_group_mape": {g: float(absolute[groups == g].mean())
                               for g in sorted(set(self.groups))},
        }


def in_sample_errors(baselines: RecordBaselines, calibration: Calibration) -> CrossValidation:
    """Each run predicted by ``calibration`` (the closed form), as one group of its own: the
    errors of a fit on the runs it was fitted on, which :class:`CrossValidation` summarises
    as it does held-out ones."""
    return CrossValidation(groups=baselines.ids,
                           predicted_step_time_s=calibrated_step_time_s(baselines, calibration),
                           measured_step_time_s=baselines.measured_step_time_s)


def base_fitted_runs(base: Calibration) -> frozenset[str] | None:
    """The ids of the runs ``base`` was fitted on (its file's ``coverage.fitted_runs``), or
    None where its file does not record them (a profile written before it did, or written by
    hand): such a base may have been fitted on any run."""
    recorded = () if base.coverage is None else base.coverage.fitted_runs
    return frozenset(recorded) if recorded else None


def base_inherited_runs(base: Calibration) -> frozenset[str] | None:
    """The ids of the runs, beyond its own fitted runs, that the values ``base`` kept from
    the profile it was refitted over were fitted on (its file's ``coverage.inherited_runs``,
    possibly empty), or None where its file does not record them (a profile written before
    it did, or over a base that did not): those values may have been fitted on any run."""
    recorded = None if base.coverage is None else base.coverage.inherited_runs
    return None if recorded is None else frozenset(recorded)


def base_lineage_runs(base: Calibration) -> frozenset[str] | None:
    """Every run any value of ``base`` was fitted on, its own fit's and those its kept values
    were fitted on (a profile refitted over another keeps the other's values for what its
    runs lack), or None where either is not recorded. A profile `mosaic calibrate` writes
    over ``base`` records this, less its own fitted runs, as its ``coverage.inherited_runs``."""
    fitted_on, inherited = base_fitted_runs(base), base_inherited_runs(base)
    return None if fitted_on is None or inherited is None else fitted_on | inherited


def base_independent_of(base: Calibration, run_ids: Sequence[str]) -> bool:
    """Whether ``base`` is known to have been fitted on none of ``run_ids``, in its own fit
    or in any it kept values from (:func:`base_lineage_runs`): only then may a
    cross-validation fold holding them out keep the base's values. A profile P2 refitted
    over P1 on other runs keeps P1's values; a fold holding out P1's runs under P2 would
    score them in-sample."""
    lineage = base_lineage_runs(base)
    return lineage is not None and lineage.isdisjoint(run_ids)


def leave_one_group_out(baselines: RecordBaselines, groups: Sequence[str],
                        base: Calibration, progress: ProgressFn | None = None
                        ) -> CrossValidation:
    """Predict each group's runs with a calibration fitted on all other groups
    (``progress(done, total)`` after each refit).

    A fold whose held-out runs ``base`` was fitted on none of (:func:`base_independent_of`)
    is the fit `mosaic calibrate` writes (cli/validate_cmd.py), on the other groups: it
    keeps the base's values for the stacks, routing regimes and χ_sys constants its runs
    lack (``keep_unseen``), so a run of the only stack of its kind is scored as the written
    profile would predict a new run of it (a trial: 35.5% held out with the shared
    multiplier, 23.6% under the base's torchtitan value that the profile keeps).

    Any other fold (the base was, or may have been, fitted on a held-out run, itself or in
    a value it kept from the profile it was refitted over: the shipped profile refitted on
    the published runs) drops the base's values: its free χ_sys
    constants (c_A2A, c_PP, c_ovl) start at their neutral 0, so one no run of the fold
    informs stays 0, and a stack the fold lacks gets the fold's shared multiplier. Keeping
    the base's values there made the held-out error an in-sample one.
    """
    neutral = {name: 0.0 for name in ("chi_a2a", "chi_pp", "chi_overlap")
               if name in base.fitted_constants}
    strict_base = replace(base, **neutral)
    groups_array = np.array(groups)
    ids = np.array(baselines.ids)
    predicted = np.empty(len(groups_array))
    kept: list[str] = []
    for done, group in enumerate(sorted(set(groups)), start=1):
        held_out = groups_array == group
        if held_out.all():
            raise MosaicInputError(
                f"cross-validation needs at least two groups of runs, and every run is in "
                f"group {group!r} (--cv source groups runs by the id's prefix before the "
                "first '-', --cv group by model and GPU); name your runs by source "
                "(e.g. 'clusterA-...', 'clusterB-...'), use the other grouping, or fit "
                "without cross-validation with --cv none")
        independent = base_independent_of(base, ids[held_out].tolist())
        if independent:
            kept.append(group)
        fitted = fit_calibration(baselines.subset(~held_out),
                                 base if independent else strict_base, name="cv",
                                 provenance="cv", keep_unseen=independent)
        predicted[held_out] = calibrated_step_time_s(baselines.subset(held_out), fitted)
        if progress is not None:
            progress(done, len(set(groups)))
    return CrossValidation(groups=tuple(groups), predicted_step_time_s=predicted,
                           measured_step_time_s=baselines.measured_step_time_s,
                           base_kept_groups=tuple(kept))
