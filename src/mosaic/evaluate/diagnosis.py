"""Why a predicted step takes as long as it does, how a measurement departs from it, and
which layout or batch changes would help most (`mosaic explain`).

Three parts, each built on :func:`mosaic.perf.step_time.predict_step`:

* **Bound**: the breakdown grouped into classes (compute by op class, exposed communication
  by parallel axis, pipeline bubble, vocabulary stage, CPU dispatch floor, optimizer,
  calibrated overhead) plus the memory status; the largest class bounds the step.
* **Gap**: a measured step time against the prediction, attributed to compute kernels or
  communication by the uniform slowdown of each that would alone explain it.
* **Levers**: concrete what-ifs (EP inside the NVLink domain, sharding, checkpointing,
  pipeline, micro-batch, TP, global batch, and the software settings a job leaves off:
  cuDNN attention, bf16 gradient reduction, TP/EP/DP communication overlap, one CUDA graph
  per step, torch.compile for eager torch code), each re-predicted and checked against the
  plan rules and device memory, ranked by throughput gain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from mosaic.config.layout import default_micro_batch
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import JobPrediction
from mosaic.evaluate.lever_overrides import lever_overrides
from mosaic.perf.attention_kernels import (
    GEMM_COSTED_KERNELS,
    AttentionKernel,
    resolve_attention_kernel,
    runs_nvidia_kernels,
)
from mosaic.perf.calibration import Calibration
from mosaic.perf.collectives import group_placement
from mosaic.perf.constraints import first_reason, plan_violations
from mosaic.perf.elementwise_traffic import EAGER_TORCH_KERNELS, elementwise_kernels
from mosaic.perf.headroom import FITS, gib_or_mib_text, memory_verdict
from mosaic.perf.layouts import unoffered_layout
from mosaic.perf.machine import Machine, dispatcher_refusal, machine_for
from mosaic.perf.memory import shard_degrees
from mosaic.perf.pipeline_layout import layout_for, parse_balanced_layout
from mosaic.perf.plan import (
    Checkpointing,
    ParallelPlans,
    Sharding,
    default_sequence_parallel,
    plans_from_columns,
)
from mosaic.perf.step_time import StepPrediction, predict_step
from mosaic.perf.terms import RESIDUAL_PARTS, step_term
from mosaic.perf.workload import (
    Dispatcher,
    Fp8Recipe,
    Precision,
    QuantisedGemms,
    Workload,
    default_fp8_recipe,
    experts_fuse_grouped_mlp,
    precision_lane,
)
from mosaic.stacks import MicroBatchDefault, SelectiveRecompute
from mosaic.units import GIB

# Memory use above this fraction of the usable budget (perf.headroom) is reported as "near
# capacity": transient buffers the model does not itemise live in what is left.
NEAR_CAPACITY_FRACTION = 0.9
# A measurement within this relative distance of the prediction needs no attribution.
AGREEMENT_TOLERANCE = 0.05
# A part of the predicted step below this share is not named as a gap's source.
NEGLIGIBLE_STEP_SHARE = 1e-3

CLASS_DESCRIPTIONS = {
    "compute": "compute kernels",
    "communication": "exposed communication",
    "pipeline_bubble": "the pipeline bubble",
    "vocab_stage": "the vocabulary stage (embedding, LM head, loss)",
    "dispatch": "the CPU kernel-launch floor (and host work a dropless MoE sync exposes)",
    "optimizer": "the optimizer update",
    "imbalance": "routed-expert load imbalance (calibrated)",
    "overhead": "calibrated system overhead (chi_sys, stack)",
}
PLAUSIBLE_SOURCES = {"compute": "compute kernels", "communication": "communication",
                     "host": "host-side work (kernel launches, the dropless MoE's host sync)",
                     "imbalance": "expert load imbalance"}
# Classes made of several terms, reported by part (op class, parallel axis).
PARTED_CLASSES = ("compute", "communication")
# Terms the schedule repeats per micro-batch inside t_block (Eq. 11): these classes and the
# communication of these axes (data-parallel communication is outside the block). The
# bubble is a fraction of t_block (Eq. 12), so it grows in proportion with exactly these.
BLOCK_CLASSES = ("compute", "dispatch", "imbalance")
BLOCK_AXES = ("tp", "ep", "cp", "pp", "host")
# Device-kernel time a compute-efficiency error would stretch: block compute, the vocabulary
# stage (LM-head GEMMs, cross-entropy) and the optimizer's streaming update.
KERNEL_CLASSES = ("compute", "vocab_stage", "optimizer")


def classify_term(name: str) -> tuple[str, str]:
    """(class, part) of a breakdown term, e.g. ('compute', 'experts'), ('communication', 'ep'),
    from its typed record (:mod:`mosaic.perf.terms`)."""
    term = step_term(name)
    return term.group, term.part


@dataclass(frozen=True)
class TermShare:
    """One breakdown term of the step."""

    name: str
    seconds: float
    share: float
    label: str
    group: str
    part: str


@dataclass(frozen=True)
class MemoryStatus:
    """Per-GPU memory of the heaviest stage against the usable share of device memory."""

    memory_bytes: float
    capacity_bytes: float
    overshoot_bytes: float
    usable_fraction: float = 1.0  # perf.headroom: the share a plan may fill

    @property
    def usable_bytes(self) -> float:
        return self.capacity_bytes * self.usable_fraction

    @property
    def fraction(self) -> float:
        """Memory as a share of the usable budget."""
        return self.memory_bytes / self.usable_bytes

    @property
    def fits(self) -> bool:
        """Within the usable budget (the planning headroom's share of the device)."""
        return self.overshoot_bytes <= 0

    @property
    def status(self) -> str:
        """perf.headroom.memory_verdict's 'out of memory' or 'over the planning headroom'
        when it does not fit; else 'near capacity' or 'fits'."""
        verdict = memory_verdict(self.memory_bytes, self.capacity_bytes, self.overshoot_bytes)
        if verdict != FITS:
            return verdict
        return "near capacity" if self.fraction >= NEAR_CAPACITY_FRACTION else FITS


@dataclass(frozen=True)
class Bound:
    """What bounds the step.

    Attributes:
        limiter: "memory" when the plan does not fit, else ``time_class``.
        time_class: the class with the most step time (compute, communication, ...).
        time_share: its share of the step.
        part: the largest part inside that class (an op class or a parallel axis).
        part_share: that part's share of the step.
        classes_s: seconds per class, largest first.
        parts_s: seconds per part of each class, largest first.
    """

    limiter: str
    time_class: str
    time_share: float
    part: str
    part_share: float
    classes_s: dict[str, float]
    parts_s: dict[str, dict[str, float]]
    memory: MemoryStatus

    @property
    def summary(self) -> str:
        what = CLASS_DESCRIPTIONS.get(self.time_class, self.time_class)
        text = f"{self.time_class}-bound: {what} is {self.time_share:.0%} of the step"
        if self.time_class in PARTED_CLASSES:
            # "most of it" only where the part is more than half of its class (a trial read
            # "most of it experts (14% of the step)" of a 49% compute share)
            lead = ("most of it" if self.part_share > self.time_share / 2
                    else "its largest part")
            text += f", {lead} {self.part} ({self.part_share:.0%} of the step)"
            if self.part in RESIDUAL_PARTS:
                # a trial looked for the lever of a fitted residual
                text += (": a fitted residual, time the model attributes to no mechanism, "
                         "so no lever acts on it (docs/perf.md, Calibration)")
        text += self._larger_part_elsewhere()
        if not self.memory.fits:
            return ("does not fit: " + memory_overshoot_text(
                self.memory.memory_bytes, self.memory.overshoot_bytes,
                self.memory.capacity_bytes) + " per GPU; if it fit it would be " + text)
        if self.memory.status == "near capacity":
            return (text + f"; memory is near capacity ({self.memory.fraction:.0%} of "
                    f"{self.memory.usable_bytes / GIB:.1f} GiB usable)")
        return text

    def _larger_part_elsewhere(self) -> str:
        """'; the largest single part is moe_host_sync (35% of the step, dispatch)' where a
        part of another class outweighs the part named (a trial read 'compute-bound, its
        largest part a fitted residual' while the host sync it could remove was larger)."""
        class_s = self.classes_s.get(self.time_class, 0.0)
        step_s = class_s / self.time_share if self.time_share else 0.0
        # a class without parts (the dispatch floor, the vocabulary stage) is its own part
        named_s = self.part_share * step_s if self.time_class in PARTED_CLASSES else class_s
        group, part, seconds = max(((group, part, seconds)
                                    for group, parts in self.parts_s.items()
                                    if group != self.time_class
                                    for part, seconds in parts.items()),
                                   key=lambda item: item[2], default=(None, None, 0.0))
        if part is None or seconds <= named_s or step_s <= 0:
            return ""
        # a class that is its own part (the vocabulary stage) is not named twice
        where = "" if part == group else f", {group}"
        return f"; the largest single part is {part} ({seconds / step_s:.0%} of the step{where})"


def _sorted(values: dict[str, float]) -> dict[str, float]:
    return dict(sorted(values.items(), key=lambda item: -item[1]))


def breakdown_terms(prediction: StepPrediction, index: int = 0) -> list[TermShare]:
    """The breakdown of plan ``index`` as classified terms, largest first (zeros dropped)."""
    step = float(prediction.step_time_s[index])
    terms = [
        TermShare(name, float(value[index]), float(value[index]) / step,
                  prediction.labels[name], *classify_term(name))
        for name, value in prediction.breakdown_s.items()
        if value[index] != 0
    ]
    return sorted(terms, key=lambda term: -term.seconds)


def classify_bound(prediction: StepPrediction, capacity_bytes: float, index: int = 0,
                   usable_fraction: float = 1.0) -> Bound:
    """Group plan ``index``'s breakdown into classes and parts and name the dominant ones."""
    step = float(prediction.step_time_s[index])
    classes: dict[str, float] = {}
    parts: dict[str, dict[str, float]] = {}
    for term in breakdown_terms(prediction, index):
        classes[term.group] = classes.get(term.group, 0.0) + term.seconds
        group_parts = parts.setdefault(term.group, {})
        group_parts[term.part] = group_parts.get(term.part, 0.0) + term.seconds
    classes = _sorted(classes)
    parts = {group: _sorted(group_parts) for group, group_parts in parts.items()}
    time_class = next(iter(classes))
    part, part_s = next(iter(parts[time_class].items()))
    memory = MemoryStatus(float(prediction.memory_bytes[index]), capacity_bytes,
                          float(prediction.overshoot_bytes[index]), usable_fraction)
    return Bound(
        limiter="memory" if not memory.fits else time_class,
        time_class=time_class,
        time_share=classes[time_class] / step,
        part=part,
        part_share=part_s / step,
        classes_s=classes,
        parts_s=parts,
        memory=memory,
    )


# --------------------------------------------------------------------------- gap analysis


def measured_step_time(tokens_per_step: int, measured_tokens_per_s: float | None = None,
                       measured_step_time_s: float | None = None) -> float | None:
    """The measured step time from either cluster-total tokens/s or step seconds (or None)."""
    if measured_tokens_per_s is not None and measured_step_time_s is not None:
        raise MosaicInputError(
            "give --measured-tokens-per-s or --measured-step-time-s, not both"
        )
    for flag, value in (("--measured-tokens-per-s", measured_tokens_per_s),
                        ("--measured-step-time-s", measured_step_time_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise MosaicInputError(f"{flag} must be a positive number, got {value}")
    if measured_tokens_per_s is not None:
        return tokens_per_step / measured_tokens_per_s
    return measured_step_time_s


def _in_block(name: str) -> bool:
    """Whether a breakdown term is part of t_block (Eq. 11)."""
    group, part = classify_term(name)
    return group in BLOCK_CLASSES or (group == "communication" and part in BLOCK_AXES)


def effective_term_times_s(prediction: StepPrediction, index: int = 0) -> dict[str, float]:
    """Step seconds per breakdown term with the bubble and calibrated overhead shared out.

    The bubble is f_bubble·t_block (Eq. 12), so it is split over the terms of t_block in
    proportion to their time; the calibration term is (χ_sys·stack − 1) times the analytic
    total (Eq. 15), so it is split over every term in proportion. The result sums to the
    step time and says how much of it scales with each term, to first order.
    """
    terms = {name: float(value[index]) for name, value in prediction.breakdown_s.items()}
    bubble = terms.pop("pipeline_bubble", 0.0)
    overhead = terms.pop("calibration", 0.0)
    block_s = sum(seconds for name, seconds in terms.items() if _in_block(name))
    bubble_factor = 1 + bubble / block_s if block_s > 0 else 1.0
    overhead_factor = 1 + overhead / (sum(terms.values()) + bubble)
    return {name: seconds * (bubble_factor if _in_block(name) else 1.0) * overhead_factor
            for name, seconds in terms.items()}


def effective_class_times_s(prediction: StepPrediction, index: int = 0) -> dict[str, float]:
    """Step seconds per class (:func:`effective_term_times_s` summed by class)."""
    effective: dict[str, float] = {}
    for name, seconds in effective_term_times_s(prediction, index).items():
        group = classify_term(name)[0]
        effective[group] = effective.get(group, 0.0) + seconds
    return effective


@dataclass(frozen=True)
class GapAttribution:
    """A measured step against the prediction, attributed to first order.

    ``*_scale`` is the factor by which that class's effective time (see
    :func:`effective_class_times_s`) would have to grow, everything else as predicted, to
    give the measured step: ``1 + gap / class_time``; None where no factor can (the class
    takes no time, or would need negative time). First order: the max() floors of the
    schedule are held fixed, so where the CPU launch floor or overlap hides part of a
    slowdown the true factor is larger (``launch_floor_s`` says how much the floor hides).
    """

    measured_step_time_s: float
    predicted_step_time_s: float
    compute_kernel_s: float
    communication_s: float
    launch_floor_s: float
    compute_scale: float | None
    communication_scale: float | None
    # host-side time (the dispatch class: launch floor, MoE host sync) and expert load
    # imbalance, the other two things a cluster's runs differ in (a trial: a step a third
    # host sync was only ever blamed on compute or communication)
    host_s: float = 0.0
    host_scale: float | None = None
    imbalance_s: float = 0.0
    imbalance_scale: float | None = None

    @property
    def gap_s(self) -> float:
        return self.measured_step_time_s - self.predicted_step_time_s

    @property
    def ratio(self) -> float:
        """Measured over predicted step time (= predicted over measured tokens/s)."""
        return self.measured_step_time_s / self.predicted_step_time_s

    def weighs(self, seconds: float) -> bool:
        """Whether a source's predicted time is a part of the step worth naming: at least
        :data:`NEGLIGIBLE_STEP_SHARE` of it (a balanced router's 1e-9 s of imbalance would
        otherwise 'have to take 8e7x the predicted')."""
        return seconds >= NEGLIGIBLE_STEP_SHARE * self.predicted_step_time_s

    def _sources(self) -> tuple[tuple[str, str, float | None, float], ...]:
        """(key, label, scale, effective seconds) of every source with time in the step."""
        return tuple(source for source in (
            ("compute", "compute kernels", self.compute_scale, self.compute_kernel_s),
            ("communication", "communication", self.communication_scale,
             self.communication_s),
            ("host", "host-side work", self.host_scale, self.host_s),
            ("imbalance", "expert load imbalance", self.imbalance_scale, self.imbalance_s),
        ) if self.weighs(source[3]))

    @property
    def source_keys(self) -> tuple[str, ...]:
        """The sources the gap is attributed to (compute, communication, host, imbalance),
        each with time worth naming in the step (:meth:`weighs`)."""
        return tuple(key for key, *_ in self._sources())

    @property
    def more_plausible(self) -> str | None:
        """The source (PLAUSIBLE_SOURCES) needing the smallest departure from the model
        (closest to 1 on a log scale); None when measured and predicted agree or no source
        alone can explain the gap."""
        if abs(self.ratio - 1) <= AGREEMENT_TOLERANCE:
            return None
        candidates = {key: abs(math.log(scale)) for key, _, scale, _ in self._sources()
                      if scale is not None}
        return min(candidates, key=candidates.__getitem__) if candidates else None

    @property
    def findings(self) -> list[str]:
        """What the numbers say, one sentence each; the last, when present, is the inference."""
        if abs(self.ratio - 1) <= AGREEMENT_TOLERANCE:
            return [f"measured is within {AGREEMENT_TOLERANCE:.0%} of predicted "
                    f"({self.ratio:.2f}x): the model accounts for the step"]
        direction = "slower" if self.gap_s > 0 else "faster"
        findings = [f"measured step is {self.ratio:.2f}x the predicted one ({direction} by "
                    f"{abs(self.gap_s):.3f} s)"]
        for _, name, scale, seconds in self._sources():
            if scale is None:
                findings.append(f"{name} ({seconds:.3f} s predicted) cannot explain it alone")
                continue
            finding = (f"{name} alone would have to take {scale:.2f}x the predicted "
                       f"{seconds:.3f} s")
            if scale > 2:
                finding += f": the gap is larger than all predicted {name} time"
            findings.append(finding)
        if self.launch_floor_s > 0 and self.gap_s > 0:
            findings.append(f"the CPU launch floor hides {self.launch_floor_s:.3f} s: block "
                            "compute or communication can slow by that much unseen, so these "
                            "factors are lower bounds")
        choice = self.more_plausible
        if choice is not None:
            change = "slower" if self.gap_s > 0 else "faster"
            findings.append(f"inference: {change} {PLAUSIBLE_SOURCES[choice]} is the more "
                            "plausible main source (it needs the smallest departure from the "
                            "model); a mix is likely")
        return findings


def _scale_to_explain(gap_s: float, class_s: float) -> float | None:
    if class_s <= 0:
        return None
    scale = 1 + gap_s / class_s
    return scale if scale > 0 else None


def attribute_gap(prediction: StepPrediction, measured_step_time_s: float,
                  index: int = 0) -> GapAttribution:
    """Attribute a measured step time of plan ``index`` to compute kernels vs communication."""
    effective = effective_class_times_s(prediction, index)
    # only the CPU launch floor hides GPU slowdowns: a dropless MoE's host sync
    # (moe_host_sync, also of the dispatch class) adds to the GPU time instead
    launch_floor_s = effective_term_times_s(prediction, index).get("dispatch_floor", 0.0)
    kernels = sum(effective.get(group, 0.0) for group in KERNEL_CLASSES)
    communication = effective.get("communication", 0.0)
    host = effective.get("dispatch", 0.0)
    imbalance = effective.get("imbalance", 0.0)
    predicted = float(prediction.step_time_s[index])
    gap = measured_step_time_s - predicted
    return GapAttribution(
        measured_step_time_s=measured_step_time_s,
        predicted_step_time_s=predicted,
        compute_kernel_s=kernels,
        communication_s=communication,
        launch_floor_s=launch_floor_s,
        compute_scale=_scale_to_explain(gap, kernels),
        communication_scale=_scale_to_explain(gap, communication),
        host_s=host, host_scale=_scale_to_explain(gap, host),
        imbalance_s=imbalance, imbalance_scale=_scale_to_explain(gap, imbalance),
    )


# --------------------------------------------------------------------------------- levers

PlanRow = dict[str, int | str | bool]


@dataclass(frozen=True)
class Lever:
    """One what-if, re-predicted. ``gain`` is its tokens/s over the current plan's (NaN,
    like the times, when the plan breaks a rule); ``reason`` says why it is not feasible."""

    name: str
    description: str
    plan: PlanRow
    global_batch: int
    step_time_s: float
    mfu: float
    tokens_per_s: float
    gain: float
    memory_bytes: float
    feasible: bool
    reason: str | None
    # the workload the lever is predicted with (the job's, or the one it changes), and the
    # job file's `--set` overrides that reproduce it (lever_overrides; None: not stated)
    workload: Workload | None = field(default=None, repr=False, compare=False)
    overrides: tuple[str, ...] | None = None


@dataclass(frozen=True)
class _Candidate:
    name: str
    description: str
    plan: PlanRow


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _with(row: PlanRow, unstated_sp: str = "tp", **changes: int | str | bool) -> PlanRow:
    """``row`` with ``changes``; non-HSDP plans keep hsdp_shard = dp, as single_plan does; a
    changed tp takes the stack's unstated sequence parallelism (``unstated_sp``, trait
    ``unstated_sequence_parallel``), as a job stating the new tp would."""
    new = {**row, **changes}
    if new["sharding"] != "hsdp":
        new["hsdp_shard"] = new["dp"]
    if "tp" in changes:
        new["sequence_parallel"] = bool(default_sequence_parallel(int(new["tp"]),
                                                                  unstated_sp))
    return new


def _ep_in_domain(workload: Workload, machine: Machine, row: PlanRow) -> Iterator[_Candidate]:
    """Largest ep that divides the experts and the expert mesh with its group in one domain
    (Appendix F.2: expert parallelism helps up to the node boundary, hurts past it)."""
    moe = workload.geometry.moe
    if moe is None:
        return
    domain = machine.interconnect.scale_up_domain_gpus
    etp = int(row["etp"])
    mesh = int(row["tp"]) * int(row["cp"]) * int(row["dp"])
    eps = np.array([ep for ep in _divisors(moe.experts) if mesh % (ep * etp) == 0])
    inside = eps[group_placement(eps, etp, domain).inside_domain]
    best = int(inside.max()) if inside.size else None
    if best is not None and best != row["ep"]:
        yield _Candidate("ep_in_domain", f"expert parallelism inside the {domain}-GPU NVLink "
                         f"domain: ep {row['ep']} -> {best}", _with(row, ep=best))


def _expert_parallel(workload: Workload, row: PlanRow) -> Iterator[_Candidate]:
    """Half and twice the expert parallelism, where the experts and the expert mesh
    (tp·cp·dp ranks, Eq. 24) divide by it: fewer ranks cross fewer links and hold more
    experts each, more ranks the reverse (an all-to-all-bound step moves either way)."""
    moe = workload.geometry.moe
    if moe is None:
        return
    ep, etp = int(row["ep"]), int(row["etp"])
    mesh = int(row["tp"]) * int(row["cp"]) * int(row["dp"])
    for new in (ep // 2, 2 * ep):
        if (new >= 1 and new != ep and moe.experts % new == 0 and mesh % (new * etp) == 0
                and (ep % 2 == 0 or new > ep)):
            yield _Candidate(f"ep_{'halve' if new < ep else 'double'}",
                             f"expert parallelism ep {ep} -> {new}", _with(row, ep=new))


def _hsdp_shard_in_domain(machine: Machine, row: PlanRow) -> int:
    """Largest HSDP shard group (a divisor of dp) whose ranks share one NVLink domain."""
    domain = machine.interconnect.scale_up_domain_gpus
    stride = int(row["tp"]) * int(row["cp"])
    return max((d for d in _divisors(int(row["dp"])) if d * stride <= domain), default=1)


def _unsharded_experts_note(workload: Workload, row: PlanRow) -> str:
    """Why HSDP can need more memory than ZeRO-1 on an MoE job: the routed experts shard
    over the same fraction of their edp group as the dense parameters of dp (the expert
    degree of memory.parameter_states.shard_degrees), which is 1 when ep fills the shard
    group: their states then stay whole on every rank (a trial met a lever needing 92 GiB
    against zero1's 66 GiB, unexplained)."""
    if workload.geometry.moe is None:
        return ""
    _, expert_shard = shard_degrees(plans_from_rows([row]))
    if expert_shard[0] > 1:
        return ""
    return (f"; the routed experts, split over ep {row['ep']}, get no HSDP shard "
            "(their states stay whole on every rank)")


def _sharding(workload: Workload, machine: Machine, row: PlanRow) -> Iterator[_Candidate]:
    """Every other sharding mode the stack offers (trait ``layout_sharding``; ZeRO-2 shards
    gradients as well as optimizer state: often the cheapest memory lever)."""
    offered = workload.traits.layout_sharding
    for mode in (Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2, Sharding.FSDP, Sharding.HSDP):
        name = mode.name.lower()
        if name == row["sharding"] or (offered is not None and name not in offered):
            continue
        if mode is Sharding.HSDP:
            shard = _hsdp_shard_in_domain(machine, row)
            if shard in (1, row["dp"]):
                continue
            hsdp = _with(row, sharding=name, hsdp_shard=shard)
            yield _Candidate("sharding_hsdp", f"HSDP: shard over {shard} ranks inside the "
                             f"NVLink domain, replicate x{int(row['dp']) // shard}"
                             + _unsharded_experts_note(workload, hsdp), hsdp)
        else:
            yield _Candidate(f"sharding_{name}", f"sharding {row['sharding']} -> {name}",
                             _with(row, sharding=name))


def _checkpointing(workload: Workload, row: PlanRow) -> Iterator[_Candidate]:
    """The other checkpointing modes; on a block-level stack selective and full recompute
    the same whole blocks (perf.layouts.candidate_plans lists them once), so only full is
    offered beside none, and neither is offered for the other."""
    block_level = workload.traits.selective_recompute is SelectiveRecompute.BLOCKS
    current = row["checkpointing"]
    for mode in Checkpointing:
        name = mode.name.lower()
        if block_level and (name == "selective" or (name, current) == ("full", "selective")):
            continue
        if name != current:
            yield _Candidate(f"checkpointing_{name}",
                             f"activation checkpointing {row['checkpointing']} -> {name}",
                             _with(row, checkpointing=name))


def _pipeline(row: PlanRow, vpp_default: int = 1) -> Iterator[_Candidate]:
    """Interleaving and pipeline depth (Eq. 12: bubble (pp-1)/(vpp·n_mb)); a job without a
    pipeline is also offered one with the virtual stages its stack runs by default (trait
    ``interleaved_vpp_default``: torchtitan's 2, which a trial's `--set parallelism.pp=2`
    got and found faster than the plain pp lever)."""
    pp, vpp, dp = int(row["pp"]), int(row["vpp"]), int(row["dp"])
    if pp == 1 and vpp_default > 1 and dp % 2 == 0:
        yield _Candidate("pp_double_interleaved",
                         f"pipeline pp {pp} -> {2 * pp} with the stack's default vpp "
                         f"{vpp_default} (dp {dp} -> {dp // 2})",
                         _with(row, pp=2 * pp, dp=dp // 2, vpp=vpp_default))
    if pp > 1 and vpp == 1:
        yield _Candidate("vpp_2", "interleaved pipeline: vpp 1 -> 2", _with(row, vpp=2))
    if pp > 1 and pp % 2 == 0:
        yield _Candidate("pp_halve", f"pipeline pp {pp} -> {pp // 2} (dp {dp} -> {2 * dp})",
                         _with(row, pp=pp // 2, dp=2 * dp, vpp=vpp if pp > 2 else 1))
    if dp % 2 == 0:
        # an even vpp halves: as many chunks as before, two ranks sharing each rank's virtual
        # stages, so a job on a layout of pp·vpp chunks keeps a split of that many (a
        # review: DeepSeek-V3's 8x4 lever to 16x4 asked for 64 chunks of 61 blocks and was
        # refused)
        after = vpp // 2 if vpp % 2 == 0 else vpp
        moved = f", vpp {vpp} -> {after}" if after != vpp else ""
        yield _Candidate("pp_double", f"pipeline pp {pp} -> {2 * pp}{moved} "
                         f"(dp {dp} -> {dp // 2})", _with(row, pp=2 * pp, dp=dp // 2, vpp=after))


def _micro_batch(row: PlanRow) -> Iterator[_Candidate]:
    mb = int(row["micro_batch"])
    yield _Candidate("micro_batch_double", f"micro-batch {mb} -> {2 * mb} sequences",
                     _with(row, micro_batch=2 * mb))
    if mb % 2 == 0:
        yield _Candidate("micro_batch_halve", f"micro-batch {mb} -> {mb // 2} sequences",
                         _with(row, micro_batch=mb // 2))


def _tensor_parallel(row: PlanRow, unstated_sp: str) -> Iterator[_Candidate]:
    """tp doubled or halved against dp; an expert tp equal to tp moves with it, as an
    unstated etp follows tp (a trial's tp 2 -> 1 lever kept etp 2, a layout the search
    never lists and `--set parallelism.tp=1` does not give)."""
    tp, dp, etp = int(row["tp"]), int(row["dp"]), int(row.get("etp", 1))
    follows = etp == tp > 1
    note = "; expert tp with it" if follows else ""
    if dp % 2 == 0:
        moved = {"etp": 2 * etp} if follows else {}
        yield _Candidate("tp_double", f"tensor parallel tp {tp} -> {2 * tp} (dp {dp} -> "
                         f"{dp // 2}{note})",
                         _with(row, unstated_sp, tp=2 * tp, dp=dp // 2, **moved))
    if tp % 2 == 0:
        moved = {"etp": etp // 2} if follows else {}
        yield _Candidate("tp_halve", f"tensor parallel tp {tp} -> {tp // 2} (dp {dp} -> "
                         f"{2 * dp}{note})",
                         _with(row, unstated_sp, tp=tp // 2, dp=2 * dp, **moved))


def _loader_micro_batch(workload: Workload, plan: PlanRow, row: PlanRow,
                        unstated_micro_batch: bool) -> PlanRow:
    """``plan`` with the micro-batch the job loader gives its dp, pp and global batch
    (config.layout.default_micro_batch) when the job states none and the what-if sets
    none of its own, as loading the job with the what-if's `--set` lines does (a review: a
    tp lever on hf-transformers kept micro 8 where its overrides loaded the whole local
    batch of 16, 0.743 s against 0.734 s)."""
    if not unstated_micro_batch or plan["micro_batch"] != row["micro_batch"]:
        return plan
    micro, _ = default_micro_batch(workload.stack, workload.global_batch, int(plan["dp"]),
                                   int(plan["pp"]), workload.local_batch)
    return {**plan, "micro_batch": micro}


def plan_candidates(workload: Workload, machine: Machine, row: PlanRow,
                    unstated_micro_batch: bool = False) -> list[_Candidate]:
    """Every plan-only what-if of the current plan, without duplicates or no-ops;
    ``unstated_micro_batch``: the job states no micro-batch, so one that moves dp or pp
    takes the stack's default for them (:func:`_loader_micro_batch`)."""
    seen = {tuple(row.items())}
    unique = []
    for candidate in (*_ep_in_domain(workload, machine, row), *_expert_parallel(workload, row),
                      *_sharding(workload, machine, row),
                      *_checkpointing(workload, row),
                      *_pipeline(row, workload.traits.interleaved_vpp_default),
                      *_micro_batch(row),
                      *_tensor_parallel(row, workload.traits.unstated_sequence_parallel)):
        candidate = replace(candidate, plan=_loader_micro_batch(
            workload, candidate.plan, row, unstated_micro_batch))
        key = tuple(candidate.plan.items())
        if key not in seen:
            seen.add(key)
            unique.append(candidate)
    return unique


def plans_from_rows(rows: list[PlanRow]) -> ParallelPlans:
    """Plans from rows in the form of :meth:`ParallelPlans.row` (the inverse of it)."""
    columns: dict[str, list[int]] = {name: [] for name in rows[0]}
    for row in rows:
        for name, value in row.items():
            if name == "sharding":
                value = int(Sharding.parse(str(value)))
            elif name == "checkpointing":
                value = int(Checkpointing.parse(str(value)))
            columns[name].append(int(value))
    return plans_from_columns(**columns)


def memory_overshoot_text(memory_bytes: float, overshoot_bytes: float,
                          capacity_bytes: float) -> str:
    """'needs M GiB of U usable (F% of C GiB), over by O GiB': the usable budget is what the
    overshoot is measured against (memory - overshoot), a share of the device's capacity."""
    usable = memory_bytes - overshoot_bytes
    # as many decimals (1 to 3) as it takes for the need and the budget to read apart and
    # the overshoot to read above zero ('needs 71.2 GiB of 71.2 usable' and 'over by 0.0'
    # read as no overshoot; a trial and a review); below a thousandth of a GiB, in MiB
    need, budget, over = memory_bytes / GIB, usable / GIB, overshoot_bytes / GIB
    decimals = next((d for d in (1, 2, 3) if f"{need:.{d}f}" != f"{budget:.{d}f}"
                     and float(f"{over:.{d}f}") > 0), 3)
    over_text = gib_or_mib_text(over, decimals)
    return (f"needs {need:.{decimals}f} GiB of {budget:.{decimals}f} usable "
            f"({usable / capacity_bytes:.0%} of {capacity_bytes / GIB:.1f} GiB), over by "
            f"{over_text}")


def _memory_reason(memory_bytes: float, overshoot_bytes: float, capacity_bytes: float) -> str:
    """Why a lever's plan does not fit, in perf.headroom.memory_verdict's words (out of
    memory, or over the planning headroom) with its figures."""
    verdict = memory_verdict(memory_bytes, capacity_bytes, overshoot_bytes)
    return f"{verdict}: " + memory_overshoot_text(memory_bytes, overshoot_bytes, capacity_bytes)


def _moves_layout(plan: PlanRow, current: PlanRow | None) -> bool:
    """Whether ``plan`` changes the sharding, pp, vpp, ep or etp of ``current`` (None:
    unknown): every degree a stack may restrict (perf.layouts.unoffered_layout; a tp lever
    moved a recorded etp 2 to 4 on NeMo AutoModel, which offers etp 1, ranked feasible)."""
    return current is None or any(plan[key] != current[key]
                                  for key in ("sharding", "pp", "vpp", "ep", "etp"))


def _evaluate(candidates: list[_Candidate], workload: Workload, machine: Machine,
              calibration: Calibration, current_tokens_per_s: float,
              split_stated: bool = True, current: PlanRow | None = None) -> list[Lever]:
    """Predict every candidate plan in one vectorised call; rule breakers get NaN times.
    ``split_stated`` False: the job's layer split is a run's, unstated, and so is each
    candidate's (no split rule applies, as for the job: perf.constraints.plan_violations)."""
    plans = plans_from_rows([candidate.plan for candidate in candidates])
    given = workload
    # an uneven_stages job's other pipeline shapes are split as its own is (remainder last)
    workload = workload.with_remainder_last_layouts(
        set(zip(plans.pp.tolist(), plans.vpp.tolist(), strict=True)))
    violations = plan_violations(workload, plans, machine.n_devices,
                                 split_stated=split_stated)
    # a rule, or a sharding, pp, vpp or ep the stack does not offer that the lever moves to (a
    # review: levanter's pp lever was ranked feasible and its `--set` refused; a run
    # record's own recorded sharding stays as recorded)
    reasons = [first_reason(violations, plans, i)
               or (unoffered_layout(workload, plans, i)
                   if _moves_layout(candidate.plan, current) else None)
               for i, candidate in enumerate(candidates)]
    valid = np.flatnonzero([reason is None for reason in reasons])
    prediction = (predict_step(workload, plans.take(valid), machine, calibration)
                  if valid.size else None)
    position = {int(index): k for k, index in enumerate(valid)}
    levers = []
    for i, candidate in enumerate(candidates):
        if reasons[i] is not None:
            levers.append(Lever(candidate.name, candidate.description, candidate.plan,
                                workload.global_batch, math.nan, math.nan, math.nan, math.nan,
                                math.nan, False, f"breaks a rule: {reasons[i]}", given))
            continue
        assert prediction is not None
        k = position[i]
        fits = bool(prediction.feasible[k])
        memory = float(prediction.memory_bytes[k])
        tokens_per_s = float(prediction.tokens_per_s[k])
        levers.append(Lever(
            candidate.name, candidate.description, candidate.plan, workload.global_batch,
            float(prediction.step_time_s[k]), float(prediction.mfu[k]), tokens_per_s,
            tokens_per_s / current_tokens_per_s, memory, fits,
            None if fits else _memory_reason(memory, float(prediction.overshoot_bytes[k]),
                                             machine.hbm_bytes),
            given))
    return levers


def _rank(lever: Lever) -> tuple[int, float]:
    """Feasible first, then out-of-memory, then rule breakers; larger gain first."""
    tier = 0 if lever.feasible else (2 if math.isnan(lever.gain) else 1)
    return tier, -(0.0 if math.isnan(lever.gain) else lever.gain)


def rank_levers(workload: Workload, plan: ParallelPlans, machine: Machine,
                calibration: Calibration, split_stated: bool = True,
                machine_at: Callable[[Workload], Machine] | None = None,
                unstated_micro_batch: bool = False) -> list[Lever]:
    """Every what-if of a one-plan job, predicted and ranked (best feasible gain first).

    Plan-only changes are predicted together in one call; doubling the global batch (more
    micro-batches: a smaller bubble, data-parallel communication amortised) changes the
    workload and needs its own call. Its gain is in throughput only: a larger batch also
    changes the optimisation, which the performance model does not judge. A job whose stack
    runs an attention kernel slower than cuDNN on its GPU (FlashAttention-2 on Hopper) also
    gets the cuDNN what-if (torch SDPA's cuDNN backend, Transformer Engine fused attention).

    Software settings the job leaves off are offered the same way, each predicted with the
    workload changed: bf16 gradient reduction, TP communication overlap, batch-level EP
    overlap and one CUDA graph per step (:func:`_workload_what_ifs` lists every
    workload change). ``machine_at`` gives the machine of a workload at another GEMM
    precision (the same cluster, tables and usable memory); with it, a bf16 job also gets
    its FP8 what-ifs (:func:`_precision_what_ifs`). ``unstated_micro_batch``: the job
    states no micro-batch, so a what-if that moves dp, pp or the global batch runs the
    stack's default micro-batch for them, as the job loaded with its `--set` lines does.
    """
    current = predict_step(workload, plan, machine, calibration)
    current_tokens_per_s = float(current.tokens_per_s[0])
    row = plan.row(0)
    levers = _evaluate(plan_candidates(workload, machine, row, unstated_micro_batch),
                       workload, machine, calibration, current_tokens_per_s, split_stated, row)
    for name, description, changed in _workload_what_ifs(workload, machine, row, current):
        changed_row = _loader_micro_batch(changed, _row_for(name, workload, row), row,
                                          unstated_micro_batch)
        levers += _evaluate([_Candidate(name, description, changed_row)], changed, machine,
                            calibration, current_tokens_per_s, split_stated, row)
    if machine_at is not None:
        for name, description, changed, other in _precision_what_ifs(workload, machine_at):
            levers += _evaluate([_Candidate(name, description, row)], changed, other,
                                calibration, current_tokens_per_s, split_stated, row)
    return sorted(levers, key=_rank)


# Levers that change the workload rather than the plan (predicted with it changed).
WORKLOAD_LEVERS = frozenset({"global_batch_double", "attention_cudnn", "grad_reduce_bf16",
                             "tp_comm_overlap", "ep_overlap", "full_iteration_cuda_graph",
                             "torch_compile", "dp_comm_overlap", "drop_and_pad",
                             "balanced_pipeline_layout", "dispatcher_deepep",
                             "dispatcher_hybridep", "fused_grouped_mlp",
                             "fp8_dot_product_attention", "offload_none", "offload_halve",
                             *(f"precision_{r}" for r in Fp8Recipe if r != Fp8Recipe.NONE),
                             "routed_experts_mxfp8", "local_batch_whole"})


def _whole_local_batch(workload: Workload, row: PlanRow) -> bool:
    """The job runs its whole per-device batch in one step: its stack does unless told to
    accumulate (JAX/XLA trainers, hf-transformers: stack trait ``micro_batch_default:
    whole_local_batch``) and its micro-batch is its local batch. A job stating a smaller
    micro-batch accumulates gradients on such a stack too (hf-transformers
    gradient_accumulation_steps; a review: its doubled batch was described as the whole
    local batch in one step at micro 4 of a local batch of 8)."""
    return (workload.traits.micro_batch_default is MicroBatchDefault.WHOLE_LOCAL_BATCH
            and int(row["micro_batch"]) * int(row["dp"]) >= workload.global_batch)


def _row_for(name: str, workload: Workload, row: PlanRow) -> PlanRow:
    """The plan row a workload what-if of ``workload`` (the job's, before the change) runs
    on: a doubled global batch of a job that runs its whole local batch in one step doubles
    the micro-batch, not the micro-batch count; one that accumulates keeps its micro-batch
    and runs twice the micro-batches."""
    if name == "global_batch_double" and _whole_local_batch(workload, row):
        return _with(row, micro_batch=2 * int(row["micro_batch"]))
    return row


def _workload_what_ifs(workload: Workload, machine: Machine, row: PlanRow,
                       current: StepPrediction) -> Iterator[tuple[str, str, Workload]]:
    """(name, description, changed workload) of each what-if that changes the workload, not
    the plan (the names of :data:`WORKLOAD_LEVERS`): a doubled global batch, the cuDNN
    attention kernel where the stack's is slower, and each software setting the job leaves
    off that would change its step (each a flag of the stacks named, docs/stacks.md)."""
    doubled = replace(workload, global_batch=2 * workload.global_batch)
    how = ("the whole local batch in one step: micro-batch doubled"
           if _whole_local_batch(workload, row) else "more micro-batches per step")
    yield ("global_batch_double", f"global batch {workload.global_batch} -> "
           f"{doubled.global_batch} sequences ({how})", doubled)
    kernel = resolve_attention_kernel(workload.attention_kernel, workload.stack,
                                      machine.device_name)
    if runs_nvidia_kernels(machine.device_name) and (
            min(kernel.fwd_multiplier, kernel.bwd_multiplier) < 1.0
            or kernel.kernel in GEMM_COSTED_KERNELS):
        # how the stack reaches cuDNN: levanter's blockwise XLA attention (jax_flash)
        # through Transformer Engine's nvte backend, the others through torch SDPA or
        # Transformer Engine
        how = ("Transformer Engine installed for levanter's nvte backend"
               if kernel.kernel == AttentionKernel.JAX_FLASH else
               "torch SDPA's cuDNN backend or Transformer Engine")
        yield ("attention_cudnn", f"attention kernel {kernel.kernel} -> cudnn ({how})",
               replace(workload, attention_kernel=AttentionKernel.CUDNN))
    if elementwise_kernels(workload) in EAGER_TORCH_KERNELS:
        yield ("torch_compile", "model code compiled with torch.compile (Inductor fuses "
               "the element-wise kernels; docs/evidence/elementwise_fusion.md)",
               replace(workload, torch_compile=True))
    if not workload.dp_comm_overlap:
        yield ("dp_comm_overlap", "DDP/ZeRO collectives overlapped with the passes "
               "(Megatron --overlap-grad-reduce --overlap-param-gather)",
               replace(workload, dp_comm_overlap=True))
    if workload.grad_reduce_in_fp32 and workload.traits.bf16_grad_reduce:
        # Megatron-LM's flag where the stack reduces through Megatron-Core DDP
        how = ("Megatron-LM --grad-reduce-in-bf16; the Bridge recipes' grad_reduce_in_fp32 "
               "false" if workload.traits.dp_last_bucket == "megatron"
               else "a bf16 reduce dtype")
        yield ("grad_reduce_bf16", f"gradients reduced in bf16 ({how})",
               replace(workload, grad_reduce_in_fp32=False))
    if int(row["tp"]) > 1 and bool(row["sequence_parallel"]) and not workload.tp_comm_overlap:
        yield ("tp_comm_overlap", "TP communication overlapped with the TP GEMMs "
               "(Megatron --tp-comm-overlap, torchtitan async TP; for Megatron an upper "
               "bound, docs/stacks.md)", replace(workload, tp_comm_overlap=True))
    if (workload.geometry.moe is not None and int(row["ep"]) > 1 and not workload.ep_overlap
            and workload.traits.ep_comm_overlap  # a stack that has the feature
            and not workload.geometry.is_hybrid):  # (GPT models only: Workload)
        yield ("ep_overlap", "EP all-to-alls overlapped with the other micro-batch "
               "(Megatron --overlap-moe-expert-parallel-comm --delay-wgrad-compute)",
               replace(workload, ep_overlap=True))
    yield from _dispatcher_what_ifs(workload, machine, row)
    per_rank = workload.global_batch // int(row["dp"])
    if (workload.traits.pipeline_schedule_per_pass and int(row["pp"]) > 1
            and workload.local_batch is not None and workload.local_batch < per_rank):
        # each pass of the local batch is a whole pipeline schedule with its own fill and
        # drain (perf/schedule.schedule_passes); the whole per-rank batch in one pass pays
        # the bubble once
        yield ("local_batch_whole", f"local batch {workload.local_batch} -> {per_rank} "
               "sequences per rank: one pipeline schedule per step (torchtitan "
               "training.local_batch_size, NeMo AutoModel step_scheduler.local_batch_size)",
               replace(workload, local_batch=per_rank))
    geometry = workload.geometry
    if (not workload.fused_grouped_mlp and workload.traits.fused_grouped_mlp
            and experts_fuse_grouped_mlp(geometry)
            and workload.fp8_recipe is Fp8Recipe.MXFP8 and int(row["etp"]) == 1):
        yield ("fused_grouped_mlp", "routed experts as Transformer Engine's fused grouped MLP "
               "(Megatron-Core use_transformer_engine_op_fuser, moe_mlp_glu_interleave_size "
               "32, NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; docs/evidence/fused_grouped_mlp.md)",
               replace(workload, fused_grouped_mlp=True))
    if (not workload.fp8_dot_product_attention and workload.traits.fused_grouped_mlp
            and workload.precision is Precision.FP8 and kernel.kernel == AttentionKernel.CUDNN):
        yield ("fp8_dot_product_attention", "attention in FP8 (Transformer Engine FP8 fused "
               "attention: Megatron-Core fp8_dot_product_attention, Megatron-Bridge "
               "mixed_precision.fp8_dot_product_attention; docs/evidence/fp8_attention.md)",
               replace(workload, fp8_dot_product_attention=True))
    offloaded = workload.offloaded_activation_layers
    for fewer in sorted({0, offloaded // 2} - {offloaded}):
        # activation offload trades host-link copies for memory: fewer layers, if they fit
        yield (f"offload_{'none' if fewer == 0 else 'halve'}",
               f"activation offload {offloaded} -> {fewer} layers (Megatron "
               "--cpu-offloading-num-layers)",
               replace(workload, offloaded_activation_layers=fewer))
    host = current.breakdown_s["moe_host_sync"][0] + current.breakdown_s["dispatch_floor"][0]
    graphed = _full_iteration_graph(workload, machine.device_name)
    if host > 0 and graphed is not None:
        yield graphed
    pp, vpp = int(row["pp"]), int(row["vpp"])
    current_layout = layout_for(workload.pipeline_layouts, pp, vpp)
    if (pp > 1 and workload.traits.pipeline_schedule == "1f1b" and not geometry.is_hybrid
            and workload.traits.pipeline_layout_flag and not workload.vocab_in_pipeline_split
            and (current_layout is None or current_layout.derived)):
        # the end ranks' embedding, LM head (and MTP modules) pace every micro-batch (Eq.
        # 13); a layout that counts them as layer slots gives those ranks fewer blocks
        layout = parse_balanced_layout(geometry.layers, geometry.mtp_layers, pp, vpp)
        others = tuple(other for other in workload.pipeline_layouts if other is not current_layout)
        modules = "embedding, loss and MTP modules" if geometry.mtp_layers else "embedding and loss"
        yield ("balanced_pipeline_layout", f"{modules} counted as layer slots (Megatron "
               f"--pipeline-model-parallel-layout '{layout.text}')",
               replace(workload, pipeline_layouts=(*others, layout)))
    if current.breakdown_s["moe_host_sync"][0] > 0:
        # the only routing Megatron-Core's all-to-all dispatcher runs without the host wait
        # (perf/routing_load.expert_counts_reach_host); it drops tokens, so training changes
        yield ("drop_and_pad", "MoE tokens dropped and padded to capacity 1 (Megatron "
               "--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity, all-to-all "
               "dispatcher): no host wait per MoE layer, but overflow tokens skip their experts",
               replace(workload, routing="token_drop", pad_to_capacity=True,
                       dispatcher=Dispatcher.ALLTOALL))


# The FP8 recipes' switches as the stacks spell them: Megatron-Core --fp8 with --fp8-recipe
# (TransformerConfig.fp8_recipe: tensorwise, delayed, mxfp8, blockwise;
# megatron/core/transformer/transformer_config.py @ d98e8a64dd), torchtitan's converters
# (components/quantization/float8.py and mx.py @ b5bcd76c6: float8 tensorwise or rowwise,
# MXFP8 on Blackwell).
_FP8_SWITCHES = {  # recipe -> (Megatron-Core, torchtitan's converter family)
    Fp8Recipe.DELAYED: ("--fp8-recipe delayed", None),
    Fp8Recipe.CURRENT: ("--fp8-recipe tensorwise", "float8"),
    Fp8Recipe.BLOCKWISE: ("--fp8-recipe blockwise", None),
    Fp8Recipe.MXFP8: ("--fp8-recipe mxfp8", "mx"),
}


def _fp8_switch(workload: Workload, recipe: Fp8Recipe) -> str | None:
    """The job's stack's switch for ``recipe``: Megatron-Core's flag on the stacks built on
    it (its DDP), torchtitan's converters (the grouped experts' too for an MoE, as the
    export writes them); None for a stack whose switch the project has no source for."""
    megatron, family = _FP8_SWITCHES[recipe]
    if workload.traits.dp_last_bucket == "megatron":
        return f"Megatron {megatron}"
    if workload.stack == "torchtitan" and family is not None:
        grouped = (f" and quantize.grouped_mm.{family}"
                   if workload.geometry.moe is not None else "")
        return f"torchtitan converters quantize.linear.{family}{grouped}"
    return None


def _precision_what_ifs(workload: Workload, machine_at: Callable[[Workload], Machine]
                        ) -> Iterator[tuple[str, str, Workload, Machine]]:
    """(name, description, changed workload, its machine) of each FP8 what-if of a bf16 or
    fp16 job the GPU can run: every GEMM in FP8 with the stack's default recipe (one lever:
    the model costs the FP8 recipes alike, docs/evidence/fp8_recipes.md, so a second recipe
    would repeat its number; a trial found two) and, on a stack that quantises the routed
    experts alone (trait ``routed_expert_quantisation``), an MoE's experts in MXFP8 with
    the rest in bf16 (Blackwell; the nebius/ml-cookbook DeepSeek-V3 recipe, which keeps
    the linears in bf16 because "torch.compile does not yet support MXFP8 linear layers
    when combined with tensor parallelism", its README). The numerics change, which the
    model does not judge: each description says so."""
    if precision_lane(workload.precision) not in (Precision.BF16, Precision.FP16):
        return
    caveat = "; numerics change"
    recipe = default_fp8_recipe(workload.stack)
    switch = _fp8_switch(workload, recipe)
    options = [(f"precision_{recipe}", f"GEMMs in FP8, {recipe} scaling"
                + (f" ({switch})" if switch else "") + caveat,
                {"precision": Precision.FP8, "fp8_recipe": recipe})]
    if workload.geometry.moe is not None and workload.traits.routed_expert_quantisation:
        options.append(("routed_experts_mxfp8", "routed experts in MXFP8, the rest in bf16 "
                        f"(torchtitan quantize.grouped_mm.mx, fqns experts){caveat}",
                        {"precision": Precision.FP8, "fp8_recipe": Fp8Recipe.MXFP8,
                         "quantised_gemms": QuantisedGemms.ROUTED_EXPERTS}))
    for name, description, settings in options:
        try:  # a recipe the GPU or the job's other settings cannot run is no lever
            changed = replace(workload, **settings)
            yield name, description, changed, machine_at(changed)
        except MosaicInputError:
            continue


def _full_iteration_graph(workload: Workload, device_name: str
                          ) -> tuple[str, str, Workload] | None:
    """One CUDA graph per step, as the job would have to run it: a dropless MoE step is
    captured whole only with static per-rank token budgets, i.e. HybridEP with
    --moe-expert-rank-capacity-factor (Megatron-Bridge perf_recipes qwen/common.py
    _enable_hybridep_full_iteration_mxfp8), so the lever moves its tokens to HybridEP and
    is not offered on a stack or GPU without it; drop-and-pad routing keeps its all-to-all."""
    if workload.full_iteration_cuda_graph:
        return None
    graphed = replace(workload, full_iteration_cuda_graph=True, layer_cuda_graphs=False)
    how = "one CUDA graph per step (Megatron --cuda-graph-impl full_iteration"
    if (workload.geometry.moe is None or workload.pad_to_capacity
            or workload.dispatcher is Dispatcher.HYBRIDEP):
        return ("full_iteration_cuda_graph", how + ")", graphed)
    if (Dispatcher.HYBRIDEP not in workload.traits.moe_flex_dispatchers
            or dispatcher_refusal(device_name, Dispatcher.HYBRIDEP) is not None):
        return None
    return ("full_iteration_cuda_graph", how + "; the MoE tokens through HybridEP with "
            "--moe-expert-rank-capacity-factor, static per-rank buffers a graph can hold)",
            replace(graphed, dispatcher=Dispatcher.HYBRIDEP, dispatcher_stated=True))


def _dispatcher_what_ifs(workload: Workload, machine: Machine, row: PlanRow
                         ) -> Iterator[tuple[str, str, Workload]]:
    """A deduplicating EP dispatcher for an MoE job on the pairwise all-to-all, each the
    stack runs (trait ``moe_flex_dispatchers``): one network copy per remote node instead of
    one per token copy. DeepEP is left out where the EP group spans an NVLink domain larger
    than a node (multi-node NVLink): Megatron-Core's HybridEP is "the only backend that
    supports the MNNVL case" (transformer_config.py moe_flex_dispatcher_backend). A job that
    pads expert inputs to capacity keeps the all-to-all (Megatron-Core pads only there)."""
    if (workload.geometry.moe is None or int(row["ep"]) == 1
            or workload.dispatcher is not Dispatcher.ALLTOALL or workload.pad_to_capacity):
        return
    interconnect = machine.interconnect
    multi_node_nvlink = interconnect.scale_up_domain_gpus > interconnect.gpus_per_node
    megatron = workload.traits.dp_last_bucket == "megatron"  # Megatron-Core's DDP: its flags
    for name in workload.traits.moe_flex_dispatchers:
        if ((name == Dispatcher.DEEPEP and multi_node_nvlink)
                or dispatcher_refusal(machine.device_name, Dispatcher(name)) is not None):
            continue
        how = (f"Megatron --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend {name}"
               if megatron else
               f"torchtitan --parallelism.expert_parallel_comm_backend {name}"
               if workload.stack == "torchtitan" else f"{workload.stack}'s {name} dispatcher")
        # the expert ranks of one EP group are etp·ep consecutive ranks (Megatron-Core's
        # expert rank order tp-ep-dp-pp): inside one NVLink domain nothing crosses the network
        in_domain = int(row["ep"]) * int(row.get("etp", 1)) <= interconnect.scale_up_domain_gpus
        why = ("its NVLink kernels' bandwidth instead of the all-to-all's (the EP group stays "
               "in one NVLink domain)" if in_domain else
               "one network copy per remote node, not one per routed token copy")
        # the lever states the dispatcher (its `set parallelism.dispatcher=`), so the stack's
        # rules for a stated one apply (perf.constraints: torchtitan's DeepEP at etp > 1)
        yield (f"dispatcher_{name}", f"EP tokens through {name} ({how}): {why}",
               replace(workload, dispatcher=Dispatcher(name), dispatcher_stated=True))


# ------------------------------------------------------------------------------ diagnosis


@dataclass(frozen=True)
class AssumedImbalance:
    """The busiest EP rank's extra tokens when the job states no routing imbalance: its
    share of the step and the step with an evenly loaded router (imbalance 1), so that an
    assumption this large is shown as one (a trial read it as slow compute)."""

    share: float
    balanced_step_time_s: float


# below this share of the step the assumed imbalance is not singled out
ASSUMED_IMBALANCE_SHOWN_SHARE = 0.05


def assumed_imbalance(result: JobPrediction, calibration: Calibration
                      ) -> AssumedImbalance | None:
    """:class:`AssumedImbalance` of a job whose routing imbalance is derived, not stated,
    when its term is at least ASSUMED_IMBALANCE_SHOWN_SHARE of the step; else None."""
    workload, prediction = result.spec.workload, result.prediction
    term = prediction.breakdown_s.get("expert_load_imbalance")
    if workload.routing_imbalance is not None or term is None:
        return None
    share = float(term[0] / prediction.step_time_s[0])
    if share < ASSUMED_IMBALANCE_SHOWN_SHARE:
        return None
    balanced = predict_step(replace(workload, routing_imbalance=1.0), result.spec.plan,
                            result.machine, calibration)
    return AssumedImbalance(share, float(balanced.step_time_s[0]))


@dataclass(frozen=True)
class Diagnosis:
    """Everything `mosaic explain` reports about one job."""

    result: JobPrediction
    terms: list[TermShare]
    bound: Bound
    gap: GapAttribution | None
    levers: list[Lever]
    imbalance: AssumedImbalance | None = None


def diagnose(result: JobPrediction, calibration: Calibration,
             measured_step_time_s: float | None = None) -> Diagnosis:
    """Bound, gap (when a measured step time is given) and ranked levers of one job."""
    prediction = result.prediction
    workload = result.spec.workload
    levers = rank_levers(workload, result.spec.plan, result.machine, calibration,
                         split_stated=not (result.spec.recorded_layout
                                           or result.spec.unstated_stage_split),
                         machine_at=lambda changed: machine_for(
                             result.cluster, changed.precision,
                             result.spec.usable_memory_fraction, result.spec.tables,
                             fp8_recipe=changed.fp8_recipe),
                         unstated_micro_batch=result.spec.unstated_micro_batch)
    overrides_of = lever_overrides(result.spec)
    return Diagnosis(
        result=result,
        terms=breakdown_terms(prediction),
        bound=classify_bound(prediction, result.machine.hbm_bytes,
                             usable_fraction=result.machine.usable_memory_fraction),
        gap=(attribute_gap(prediction, measured_step_time_s)
             if measured_step_time_s is not None else None),
        # a rule breaker has no step to reproduce
        levers=[replace(lever, overrides=overrides_of(lever.workload,
                                                      plans_from_rows([lever.plan])))
                if lever.workload is not None and math.isfinite(lever.step_time_s)
                else lever for lever in levers],
        imbalance=assumed_imbalance(result, calibration),
    )
