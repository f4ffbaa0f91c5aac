"""Layout search: every parallel plan of a job, scored at once by the performance model.

The candidate grid is the product of per-axis candidate lists. As in the paper's tool
(Sec. 5.2, Appendix E) the search enumerates the execution plans that tile the device
budget, drops those that breach the memory cap and ranks the rest (by tokens/s, which for
one workload on one cluster orders plans exactly as MFU does). The grid is built with
numpy index arithmetic, not a Python loop per plan:

* tp: divisors of the device count up to ``max_tp`` (default: the job's NVLink domain,
  and never more than the head count);
* pp: common divisors of the device count and the layer count; vpp from ``(1, 2, 4)``,
  vpp > 1 only with pp > 1 (interleaved 1F1B needs a pipeline);
* cp: common divisors of the device count and the sequence length up to ``max_cp``;
* dp = N_dev / (tp·pp·cp) (Appendix D.1): only meshes whose tp·pp·cp divides N_dev;
* ep: common divisors of the expert count and N_dev (1 for a dense model); etp: divisors
  of tp (Megatron-Core keeps expert TP at most TP);
* micro-batch, sharding and checkpointing from their option lists;
* hsdp_shard (HSDP only): gcd(dp, max(1, domain // (tp·cp))), the data-parallel ranks
  that share one NVLink domain with their TP and CP peers, so every shard group stays in
  one domain and replicas all-reduce across domains (PyTorch FSDP HYBRID_SHARD: shard
  within a node, replicate across nodes; Zhao et al. 2023, Sec. 3.2); other modes carry
  hsdp_shard = dp;
* sequence_parallel = tp > 1 (Korthikanti et al. 2022), or off on a stack whose TP runs
  without it (trait ``unstated_sequence_parallel``).

Pinning an axis replaces its default candidates by the pinned values as given, so a
pin that breaks a rule is reported with that rule. The remaining cross-axis divisibility
(pp·vpp | L, dp·B_micro | B_global, etp·ep | tp·cp·dp of Eq. 24, tp | heads, ...) is left to
:func:`~mosaic.perf.constraints.plan_violations`, so every rejected candidate keeps the
first rule it breaks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from math import gcd
from typing import Any

import numpy as np

from mosaic.allocator import keep_freed_memory
from mosaic.errors import MosaicInputError, shown
from mosaic.perf.calibration import Calibration
from mosaic.perf.constraints import Violation, plan_violations
from mosaic.perf.headroom import (
    OUT_OF_MEMORY,
    above_device,
    headroom_overshoot_text,
    memory_verdict,
    overshoot_text,
)
from mosaic.perf.machine import Machine
from mosaic.perf.memory import (
    feasibility,
    largest_components,
    memory_breakdown_bytes,
    total_memory_bytes,
)
from mosaic.perf.pipeline_layout import layout_for, parse_balanced_layout
from mosaic.perf.plan import (
    Checkpointing,
    ParallelPlans,
    Sharding,
    default_sequence_parallel,
    single_plan,
)
from mosaic.perf.schedule import dualpipe_pairs_stages, uses_dualpipe
from mosaic.perf.step_time import StepPrediction, predict_step
from mosaic.perf.workload import Workload
from mosaic.stacks import SelectiveRecompute, StackTraits, get_stack
from mosaic.units import GIB

# Search-space defaults (a job or --micro-batches/--vpp widens them): the micro-batch and
# virtual-stage counts the published recipes use (Megatron-Bridge and NeMo performance
# recipes: micro-batch 1-8, VP 1-4 apart from a few deep interleavings such as Qwen3's VP 12-24
# and Mixtral 8x22B's 14), in powers of two.
DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)
DEFAULT_VPP = (1, 2, 4)
# Context parallelism only pays off on long sequences: the paper's sweeps (2k-8k tokens)
# keep cp = 1 (Sec. 7.2), and Llama 3 used cp > 1 only in its 128k-token stage (Dubey et
# al. 2024, Sec. 3.3.2, Table 4). From 16k tokens on, the search tries cp up to 8 (one
# HGX node).
LONG_SEQUENCE_TOKENS = 16384
LONG_SEQUENCE_MAX_CP = 8
# Plans per predict_step call: bounds its intermediate arrays (measured ~1.2 kB per plan,
# ~60 MB per chunk, on the benchmark's MoE).
CHUNK_PLANS = 50_000

Pin = int | Sequence[int] | None
ProgressCallback = Callable[[int, int], None]
PINNED_AXES = ("tp", "pp", "vpp", "cp", "ep", "etp")


def _positive_ints(name: str, values: Sequence[Any]) -> tuple[int, ...]:
    """Sorted unique positive integers, or a MosaicInputError naming ``name``."""
    if len(values) == 0:
        raise MosaicInputError(f"layout {name}: give at least one value")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise MosaicInputError(
                f"layout {name}={shown(value)}: allowed values are positive integers")
    return tuple(sorted({int(v) for v in values}))


def _pin(name: str, value: Pin) -> tuple[int, ...] | None:
    if value is None:
        return None
    return _positive_ints(name, [value] if isinstance(value, int | np.integer) else value)


def _modes(kind: type[Sharding] | type[Checkpointing], name: str,
           values: Sequence[Any] | None) -> tuple[Any, ...]:
    """Sorted unique modes; None means all of them."""
    if values is None:
        return tuple(kind)
    if isinstance(values, str | int):
        values = [values]
    if len(values) == 0:
        raise MosaicInputError(f"layout {name}: give at least one mode")
    return tuple(sorted({_mode(kind, value) for value in values}))


def _mode(kind: type[Sharding] | type[Checkpointing], value: Any) -> Any:
    if isinstance(value, str):
        return kind.parse(value)
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.name.lower() for m in kind)
        raise MosaicInputError(f"unknown {kind.__name__.lower()} {shown(value)}; "
                               f"allowed: {allowed}") from None


@dataclass(frozen=True)
class LayoutLimits:
    """Bounds and pins of a layout search; None means the default described per field.

    Attributes:
        max_tp: largest tensor-parallel degree (default: the job's NVLink domain size).
        max_cp: largest context-parallel degree (default: 1, or 8 from 16k-token
            sequences on).
        tp, pp, vpp, cp, ep, etp: pinned values of one axis (an int or a sequence of
            allowed values); they replace the axis's default candidates as given, so
            max_tp and max_cp do not cap them. vpp defaults to (1, 2, 4).
        micro_batches: micro-batch sizes to try (default 1, 2, 4, 8).
        sharding: sharding modes to try (names or :class:`Sharding`; default all five).
        checkpointing: checkpointing modes to try (default all three).
    """

    max_tp: int | None = None
    max_cp: int | None = None
    tp: Pin = None
    pp: Pin = None
    vpp: Pin = None
    cp: Pin = None
    ep: Pin = None
    etp: Pin = None
    micro_batches: Sequence[int] | None = None
    sharding: Sequence[Sharding | str] | None = None
    checkpointing: Sequence[Checkpointing | str] | None = None

    def __post_init__(self) -> None:
        for name in ("max_tp", "max_cp"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _positive_ints(name, [value])[0])
        for name in PINNED_AXES:
            object.__setattr__(self, name, _pin(name, getattr(self, name)))
        for axis, cap in (("tp", self.max_tp), ("cp", self.max_cp)):
            pinned = getattr(self, axis)
            if cap is not None and pinned is not None and max(pinned) > cap:
                # a pin beats a cap: say so rather than ignore the cap (a fuzz trial)
                raise MosaicInputError(f"{axis} {max(pinned)} exceeds max_{axis} {cap}: pin "
                                       f"{axis} values within the cap, or drop one of the two")
        micro_batches = DEFAULT_MICRO_BATCHES if self.micro_batches is None else self.micro_batches
        object.__setattr__(self, "micro_batches", _positive_ints("micro_batches",
                                                                 list(micro_batches)))
        object.__setattr__(self, "sharding", _modes(Sharding, "sharding", self.sharding))
        object.__setattr__(self, "checkpointing",
                           _modes(Checkpointing, "checkpointing", self.checkpointing))

    def to_dict(self) -> dict[str, Any]:
        """The bounds and pins as plain values (a plan's record of the layouts it allowed);
        an axis left to its default is left out."""
        document: dict[str, Any] = {}
        for name in ("max_tp", "max_cp", *PINNED_AXES):
            value = getattr(self, name)
            if value is not None:
                document[name] = list(value) if isinstance(value, tuple) else value
        document["micro_batches"] = list(self.micro_batches or ())
        for name in ("sharding", "checkpointing"):
            document[name] = [mode.name.lower() for mode in getattr(self, name)]
        return document


# --- Enumeration -------------------------------------------------------------------------
def divisors(n: int) -> np.ndarray:
    """Positive divisors of ``n`` in increasing order."""
    candidates = np.arange(1, n + 1)
    return candidates[n % candidates == 0]


def _axis(pinned: tuple[int, ...] | None, default: np.ndarray) -> np.ndarray:
    return np.asarray(pinned, dtype=np.int64) if pinned is not None else default.astype(np.int64)


def _default_max_cp(workload: Workload) -> int:
    return LONG_SEQUENCE_MAX_CP if workload.seq_len >= LONG_SEQUENCE_TOKENS else 1


def _pairs(names: tuple[str, str], outer: np.ndarray, inner: np.ndarray,
           keep: Callable[[np.ndarray, np.ndarray], np.ndarray],
           rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(outer, inner) value pairs of the product that satisfy ``keep``."""
    o, i = (a.ravel() for a in np.meshgrid(outer, inner, indexing="ij"))
    mask = keep(o, i)
    if not mask.any():
        raise MosaicInputError(f"no layout candidates: {rule}; {names[0]} candidates "
                               f"{outer.tolist()}, {names[1]} candidates {inner.tolist()}")
    return o[mask], i[mask]


def _tp_etp_pairs(workload: Workload, n_devices: int, domain_gpus: int,
                  limits: LayoutLimits) -> tuple[np.ndarray, np.ndarray]:
    max_tp = min(limits.max_tp or domain_gpus, workload.geometry.heads)
    all_tp = divisors(n_devices)
    tp = _axis(limits.tp, all_tp[all_tp <= max_tp])
    etp_default = divisors(int(tp.max())) if workload.geometry.moe else np.ones(1)
    etp = _axis(limits.etp, etp_default)
    return _pairs(("tp", "etp"), tp, etp, lambda t, e: t % e == 0,
                  "etp must divide tp (Megatron-Core expert TP is at most TP)")


def _pp_vpp_pairs(workload: Workload, n_devices: int,
                  limits: LayoutLimits) -> tuple[np.ndarray, np.ndarray]:
    layers = workload.geometry.layers
    pp = _axis(limits.pp, divisors(n_devices if workload.uneven_pipeline_stages
                                   else gcd(n_devices, layers)))
    vpp = _axis(limits.vpp, np.asarray(DEFAULT_VPP))
    if uses_dualpipe(workload):
        return _pairs(("pp", "vpp"), pp, vpp, lambda p, v: (v == 1) & dualpipe_pairs_stages(p),
                      "DualPipe needs an even pp (or none) and no virtual stages")
    return _pairs(("pp", "vpp"), pp, vpp, lambda p, v: (v == 1) | (p > 1),
                  "vpp > 1 needs pp > 1 (interleaving splits a pipeline)")


def _model_meshes(tp: np.ndarray, pp: np.ndarray, cp: np.ndarray, n_devices: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices into the (tp, etp), (pp, vpp) and cp candidates of the meshes whose
    tp·pp·cp divides the device count (dp = N_dev / (tp·pp·cp), Appendix D.1)."""
    i_tp, i_pp, i_cp = np.unravel_index(np.arange(tp.size * pp.size * cp.size),
                                        (tp.size, pp.size, cp.size))
    keep = n_devices % (tp[i_tp] * pp[i_pp] * cp[i_cp]) == 0
    if not keep.any():
        raise MosaicInputError(
            f"no layout candidates: tp·pp·cp must divide the device count {n_devices}; tp "
            f"candidates {np.unique(tp).tolist()}, pp candidates {np.unique(pp).tolist()}, "
            f"cp candidates {cp.tolist()}")
    return i_tp[keep], i_pp[keep], i_cp[keep]


def _offers_only(traits: StackTraits, axis: str) -> str:
    """'layout sharding: stack 'torchtitan' offers only none, fsdp, hsdp': the one wording of
    a layout the stack does not offer (stack traits layout_sharding, layout_vpp, layout_pp,
    layout_ep, layout_etp); degrees as a list ('etp 1', not Python's 'etp in (1,)')."""
    def degrees(values: tuple[int, ...] | None) -> str:
        return f"{axis} {', '.join(str(value) for value in values or ())}"

    offered = {"sharding": ", ".join(traits.layout_sharding or ()),
               "vpp": degrees(traits.layout_vpp), "pp": degrees(traits.layout_pp),
               "ep": degrees(traits.layout_ep), "etp": degrees(traits.layout_etp)}[axis]
    return f"layout {axis}: stack {traits.name!r} offers only {offered}"


def stack_limits(limits: LayoutLimits, workload: Workload) -> LayoutLimits:
    """``limits`` narrowed to the layouts the workload's stack offers (stack traits
    ``layout_sharding``, ``layout_vpp``, ``layout_pp``, ``layout_ep`` and ``layout_etp``); an
    empty intersection is an error."""
    traits = workload.traits
    changes: dict[str, Any] = {}
    if traits.layout_sharding is not None:
        offered = {Sharding.parse(name) for name in traits.layout_sharding}
        kept = [mode for mode in limits.sharding if mode in offered]
        if not kept:
            raise MosaicInputError(_offers_only(traits, "sharding"))
        changes["sharding"] = kept
    if traits.layout_vpp is not None:
        wanted = DEFAULT_VPP if limits.vpp is None else limits.vpp
        kept_vpp = [v for v in wanted if v in traits.layout_vpp]
        if not kept_vpp:
            raise MosaicInputError(_offers_only(traits, "vpp"))
        changes["vpp"] = tuple(kept_vpp)
    for axis, offered_degrees in (("pp", traits.layout_pp), ("ep", traits.layout_ep),
                                  ("etp", traits.layout_etp)):
        if offered_degrees is not None:
            changes[axis] = _offered_pins(traits, axis, getattr(limits, axis),
                                          offered_degrees)
    return replace(limits, **changes) if changes else limits


def _offered_pins(traits: StackTraits, axis: str, pinned: Any,
                  offered: tuple[int, ...]) -> tuple[int, ...]:
    """The degrees of ``axis`` a search may try: the stack's ``offered`` ones, narrowed to
    the user's pins (an int or a sequence; None = unpinned); none left is an error."""
    wanted = (offered if pinned is None else
              [value for value in np.atleast_1d(pinned).tolist() if value in offered])
    if not wanted:
        raise MosaicInputError(_offers_only(traits, axis))
    return tuple(wanted)


def unoffered_layout(workload: Workload, plans: ParallelPlans, index: int = 0) -> str | None:
    """Why plan ``index`` uses a sharding mode, vpp, pp, ep or etp its stack does not offer
    (stack traits ``layout_sharding``, ``layout_vpp``, ``layout_pp``, ``layout_ep``,
    ``layout_etp``: what `layouts` and `plan` search), in the words of
    :func:`stack_limits`; None when it offers them all."""
    traits = workload.traits
    sharding = Sharding(int(plans.sharding[index])).name.lower()
    if traits.layout_sharding is not None and sharding not in traits.layout_sharding:
        return f"{_offers_only(traits, 'sharding')} (not {sharding})"
    if traits.layout_vpp is not None and int(plans.vpp[index]) not in traits.layout_vpp:
        return _offers_only(traits, "vpp")
    if traits.layout_pp is not None and int(plans.pp[index]) not in traits.layout_pp:
        return _offers_only(traits, "pp")
    if traits.layout_ep is not None and int(plans.ep[index]) not in traits.layout_ep:
        return _offers_only(traits, "ep")
    if traits.layout_etp is not None and int(plans.etp[index]) not in traits.layout_etp:
        return _offers_only(traits, "etp")
    return None


def _pipeline_shapes(workload: Workload, n_devices: int, limits: LayoutLimits
                     ) -> list[tuple[int, int]]:
    """The (pp, vpp) shapes a search of ``workload`` tries, pp not dividing the layers too."""
    searched = replace(workload, uneven_pipeline_stages=True)
    pp, vpp = _pp_vpp_pairs(searched, n_devices, stack_limits(limits, workload))
    return sorted(set(zip(pp.tolist(), vpp.tolist(), strict=True)))


def require_pipeline_layout_flag(stack: str) -> None:
    """Balanced layouts are Megatron-Core's --pipeline-model-parallel-layout: a stack
    without that flag (trait ``pipeline_layout_flag``) is a one-line error."""
    if not get_stack(stack).pipeline_layout_flag:
        raise MosaicInputError(f"balanced pipeline layouts are Megatron-Core's "
                               f"--pipeline-model-parallel-layout, which stack {stack} "
                               "does not take (docs/stacks.md)")


def with_balanced_layouts(workload: Workload, n_devices: int, limits: LayoutLimits
                          ) -> Workload:
    """``workload`` searched with a balanced layout for every pipeline shape (pp > 1) it
    states none for (:func:`~mosaic.perf.pipeline_layout.balanced_layout`: the embedding,
    the loss and the MTP modules as layer slots, as Megatron-Core's
    --pipeline-model-parallel-layout places them), so pp need not divide the layers: every
    divisor of the device count is tried, up to one slot per chunk. Limits that pin pp to
    1 are refused: no layout would read the flag."""
    if limits.pp is not None and max(np.atleast_1d(limits.pp).tolist()) == 1:
        # every layout searched runs without a pipeline: the flag would change nothing
        raise MosaicInputError("--balanced-pipeline splits a pipeline, and pp is pinned to 1 "
                               "(no layout searched has one): allow pp > 1, or drop "
                               "--balanced-pipeline")
    geometry = workload.geometry
    if geometry.is_hybrid or uses_dualpipe(workload):
        raise MosaicInputError("balanced pipeline layouts are Megatron-Core layouts of a "
                               "transformer: not for a hybrid pattern or DualPipe")
    require_pipeline_layout_flag(workload.stack)
    slots = geometry.layers + 2 + geometry.mtp_layers
    layouts = list(workload.pipeline_layouts)
    for shape_pp, shape_vpp in _pipeline_shapes(workload, n_devices, limits):
        if shape_pp > 1 and shape_pp * shape_vpp <= slots and layout_for(
                layouts, shape_pp, shape_vpp) is None:
            layouts.append(parse_balanced_layout(geometry.layers, geometry.mtp_layers,
                                                 shape_pp, shape_vpp))
    return replace(workload, uneven_pipeline_stages=True, pipeline_layouts=tuple(layouts))


def with_searched_remainder_last_layouts(workload: Workload, n_devices: int,
                                         limits: LayoutLimits) -> Workload:
    """:meth:`Workload.with_remainder_last_layouts` for every pipeline shape a search tries."""
    if not workload.uneven_pipeline_stages:
        return workload
    return workload.with_remainder_last_layouts(_pipeline_shapes(workload, n_devices, limits))


def candidate_plans(workload: Workload, n_devices: int, domain_gpus: int,
                    limits: LayoutLimits) -> ParallelPlans:
    """Every candidate plan of the grid (see module doc), before the divisibility rules."""
    if n_devices < 1 or domain_gpus < 1:
        raise MosaicInputError(f"layout search needs n_devices >= 1 and domain_gpus >= 1, "
                               f"got {n_devices} and {domain_gpus}")
    limits = stack_limits(limits, workload)
    moe = workload.geometry.moe
    tp, etp = _tp_etp_pairs(workload, n_devices, domain_gpus, limits)
    pp, vpp = _pp_vpp_pairs(workload, n_devices, limits)
    all_cp = divisors(gcd(n_devices, workload.seq_len))
    cp = _axis(limits.cp, all_cp[all_cp <= (limits.max_cp or _default_max_cp(workload))])
    # ep·etp divides tp·cp·dp, a divisor of N_dev, so ep must divide N_dev too (Eq. 24).
    ep = _axis(limits.ep, divisors(gcd(moe.experts, n_devices)) if moe else np.ones(1))
    micro_batch = np.asarray(limits.micro_batches, dtype=np.int64)
    sharding = np.asarray(limits.sharding, dtype=np.int64)
    checkpointing = np.asarray(limits.checkpointing, dtype=np.int64)
    mesh_tp, mesh_pp, mesh_cp = _model_meshes(tp, pp, cp, n_devices)
    axes = (mesh_tp.size, ep.size, micro_batch.size, sharding.size, checkpointing.size)
    i_mesh, i_ep, i_mb, i_sh, i_ck = np.unravel_index(np.arange(int(np.prod(axes))), axes)
    i_tp, i_pp, i_cp = mesh_tp[i_mesh], mesh_pp[i_mesh], mesh_cp[i_mesh]
    tp_, cp_ = tp[i_tp], cp[i_cp]
    dp = n_devices // (tp_ * pp[i_pp] * cp_)
    shard = sharding[i_sh]
    domain_dp = np.maximum(domain_gpus // (tp_ * cp_), 1)
    plans = ParallelPlans(
        tp=tp_, pp=pp[i_pp], vpp=vpp[i_pp], cp=cp_, dp=dp, ep=ep[i_ep], etp=etp[i_tp],
        micro_batch=micro_batch[i_mb], sharding=shard, checkpointing=checkpointing[i_ck],
        hsdp_shard=np.where(shard == Sharding.HSDP, np.gcd(dp, domain_dp), dp),
        sequence_parallel=default_sequence_parallel(
            tp_, workload.traits.unstated_sequence_parallel),
    )
    duplicate = np.zeros(len(plans), dtype=bool)
    if Sharding.FSDP in limits.sharding:
        # HSDP whose shard group is the whole data-parallel group has one replica: it is the
        # FSDP candidate beside it, so it is not listed twice.
        duplicate |= (plans.sharding == Sharding.HSDP) & (plans.hsdp_shard == plans.dp)
    if (Checkpointing.FULL in limits.checkpointing
            and workload.traits.selective_recompute is SelectiveRecompute.BLOCKS):
        # a block-level stack's selective checkpointing recomputes whole blocks, the same
        # share full does (Workload.checkpointed_block_fraction): it is the FULL candidate
        # beside it (hf-transformers has no other: gradient_checkpointing wraps every layer)
        duplicate |= plans.checkpointing == Checkpointing.SELECTIVE
    return plans.take(np.flatnonzero(~duplicate)) if duplicate.any() else plans


@dataclass(frozen=True)
class RuleCheck:
    """The divisibility rules over a candidate set: which rule each candidate breaks first.

    Attributes:
        rules: rule templates in the order of :func:`plan_violations`.
        first_broken: per candidate, the index into ``rules`` of its first broken rule,
            or -1 when it breaks none.
        violations: the rules with their per-candidate values, whose messages can name
            values a candidate's own fields do not hold (micro-batches per schedule).
    """

    rules: tuple[str, ...]
    first_broken: np.ndarray
    violations: tuple[Violation, ...] = ()

    @property
    def valid(self) -> np.ndarray:
        return self.first_broken < 0

    def message(self, candidates: ParallelPlans, index: int) -> str:
        """The first broken rule of candidate ``index`` with its values."""
        return self.violations[int(self.first_broken[index])].message(candidates, index)


def check_rules(workload: Workload, plans: ParallelPlans, n_devices: int) -> RuleCheck:
    """Evaluate :func:`plan_violations` and keep each plan's first broken rule."""
    violations = plan_violations(workload, plans, n_devices)
    first = np.full(len(plans), -1, dtype=np.int64)
    for index, violation in enumerate(violations):
        first = np.where((first < 0) & violation.violated, index, first)
    return RuleCheck(rules=tuple(v.rule for v in violations), first_broken=first,
                     violations=tuple(violations))


def enumerate_plans(workload: Workload, n_devices: int, domain_gpus: int,
                    limits: LayoutLimits) -> ParallelPlans:
    """The candidate plans that break no divisibility rule."""
    candidates = candidate_plans(workload, n_devices, domain_gpus, limits)
    return candidates.take(np.flatnonzero(check_rules(workload, candidates, n_devices).valid))


# --- Evaluation ----------------------------------------------------------------------------
def _concatenate(values: Sequence[Any]) -> Any:
    """Join per-chunk results: arrays end to end, dicts and dataclasses field by field;
    anything else (labels) is taken from the first chunk."""
    first = values[0]
    if isinstance(first, np.ndarray):
        return np.concatenate(values)
    if isinstance(first, dict):
        return {key: _concatenate([v[key] for v in values]) for key in first}
    if is_dataclass(first):
        return type(first)(**{f.name: _concatenate([getattr(v, f.name) for v in values])
                              for f in fields(first)})
    return first


def _take(value: Any, index: np.ndarray) -> Any:
    """The rows ``index`` of every array inside ``value`` (dicts and dataclasses too)."""
    if isinstance(value, np.ndarray):
        return value[index]
    if isinstance(value, dict):
        return {key: _take(v, index) for key, v in value.items()}
    if is_dataclass(value):
        return type(value)(**{f.name: _take(getattr(value, f.name), index)
                              for f in fields(value)})
    return value


def take_prediction(prediction: StepPrediction, index: np.ndarray | int) -> StepPrediction:
    """The prediction of the plans at ``index`` (an int keeps a length-1 prediction)."""
    taken: StepPrediction = _take(prediction, np.atleast_1d(index))
    return taken


def predict_in_chunks(workload: Workload, plans: ParallelPlans, machine: Machine,
                      calibration: Calibration, *, chunk_plans: int = CHUNK_PLANS,
                      progress: ProgressCallback | None = None,
                      memory_breakdown: dict[str, np.ndarray] | None = None
                      ) -> StepPrediction:
    """:func:`predict_step` over ``plans``, ``chunk_plans`` at a time (with the plans'
    :func:`memory_breakdown_bytes` when the caller already has it)."""
    if chunk_plans < 1:
        raise MosaicInputError(f"chunk_plans must be >= 1, got {chunk_plans}")
    keep_freed_memory()  # reuse the memory of one evaluation for the next (mosaic.allocator)
    if len(plans) == 0:  # the shape of a prediction, with no rows
        template = predict_step(workload, single_plan(dp=machine.n_devices), machine,
                                calibration)
        return take_prediction(template, np.empty(0, dtype=np.int64))
    if len(plans) <= chunk_plans:  # one chunk: no copy, no join
        prediction = predict_step(workload, plans, machine, calibration,
                                  memory_breakdown=memory_breakdown)
        if progress is not None:
            progress(len(plans), len(plans))
        return prediction
    parts = []
    for index in _chunks(len(plans), chunk_plans):
        memory = (None if memory_breakdown is None
                  else {name: value[index] for name, value in memory_breakdown.items()})
        parts.append(predict_step(workload, plans.take(index), machine, calibration,
                                  memory_breakdown=memory))
        if progress is not None:
            progress(int(index[-1]) + 1, len(plans))
    prediction: StepPrediction = _concatenate(parts)
    return prediction


def _chunks(n: int, size: int) -> Iterator[np.ndarray]:
    """Consecutive index ranges of at most ``size`` covering range(n)."""
    for start in range(0, n, size):
        yield np.arange(start, min(start + size, n))


def fits_in_memory(workload: Workload, plans: ParallelPlans, machine: Machine,
                   calibration: Calibration) -> np.ndarray:
    """Which plans fit in HBM: the memory half of :func:`predict_step` alone (same
    functions, memory scale and usable fraction, so it agrees with
    ``StepPrediction.feasible``)."""
    return _memory_check(workload, plans, machine, calibration.memory_scale)[0]


def _memory_check(workload: Workload, plans: ParallelPlans, machine: Machine,
                  memory_scale: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(fits, memory breakdown at the calibration's ``memory_scale``) of every plan,
    ``CHUNK_PLANS`` at a time."""
    fits: list[np.ndarray] = [np.zeros(0, dtype=bool)]
    parts: list[dict[str, np.ndarray]] = []
    for index in _chunks(len(plans), CHUNK_PLANS):
        part = plans if index.size == len(plans) else plans.take(index)
        breakdown = memory_breakdown_bytes(workload, part, memory_scale)
        parts.append(breakdown)
        fits.append(feasibility(total_memory_bytes(breakdown), machine.hbm_bytes,
                                machine.usable_memory_fraction)[0])
    joined = parts[0] if len(parts) == 1 else _concatenate(parts) if parts else {}
    return np.concatenate(fits), joined


def rank_feasible(prediction: StepPrediction) -> np.ndarray:
    """Indices of the plans that fit in memory, highest tokens/s first; ties go to the
    smaller memory footprint, then to the earlier plan."""
    feasible = np.flatnonzero(prediction.feasible)
    order = np.lexsort((feasible, prediction.memory_bytes[feasible],
                        -prediction.tokens_per_s[feasible]))
    return feasible[order]


def best_feasible(prediction: StepPrediction) -> int | None:
    """``rank_feasible(prediction)[0]`` without sorting every plan: the plan that fits
    with the highest tokens/s, ties to the smaller memory, then to the earlier plan; None
    when no plan fits."""
    feasible = np.flatnonzero(prediction.feasible)
    tokens_per_s = prediction.tokens_per_s[feasible]
    if feasible.size == 0 or np.isnan(tokens_per_s).any():  # NaN: let the sort decide
        ranked = rank_feasible(prediction)
        return int(ranked[0]) if ranked.size else None
    fastest = feasible[tokens_per_s == tokens_per_s.max()]
    memory = prediction.memory_bytes[fastest]
    if np.isnan(memory).any():
        return int(rank_feasible(prediction)[0])
    return int(fastest[np.argmin(memory)])  # argmin: the first of equal minima


@dataclass(frozen=True)
class LayoutSearch:
    """Result of a layout search.

    Attributes:
        candidates: every enumerated plan.
        rule_check: the first divisibility rule each candidate breaks.
        plans: the candidates that break no rule (all of them were evaluated).
        prediction: the performance model's arrays over ``plans``.
        ranking: indices into ``plans`` of the plans that fit in memory, best first.
        capacity_bytes: HBM per GPU the memory was checked against.
        usable_fraction: the share of it a plan may fill (perf.headroom).
    """

    candidates: ParallelPlans
    rule_check: RuleCheck
    plans: ParallelPlans
    prediction: StepPrediction
    ranking: np.ndarray
    capacity_bytes: float
    usable_fraction: float

    @property
    def n_candidates(self) -> int:
        return len(self.candidates)

    @property
    def n_plans(self) -> int:
        return len(self.plans)

    @property
    def n_feasible(self) -> int:
        return int(self.ranking.size)

    def out_of_memory(self) -> np.ndarray:
        """Indices into ``plans`` of the plans that do not fit, closest to fitting first."""
        oom = np.flatnonzero(~self.prediction.feasible)
        return oom[np.argsort(self.prediction.overshoot_bytes[oom], kind="stable")]

    def oom_reason(self, index: int) -> str:
        """Why plan ``index`` does not fit, in GiB."""
        p = self.prediction
        largest = ", ".join(f"{name} {size / GIB:.1f} GiB"
                            for name, size in largest_components(p.memory_breakdown_bytes, index))
        needed = p.memory_bytes[index]
        over = p.overshoot_bytes[index]
        fraction = self.usable_fraction
        usable = fraction * self.capacity_bytes
        if memory_verdict(needed, self.capacity_bytes, over) == OUT_OF_MEMORY:
            # the device's shortfall first, as perf says it (headroom.overshoot_text)
            verdict = f"{OUT_OF_MEMORY} by " + overshoot_text(
                needed / GIB, self.capacity_bytes / GIB, fraction, over / GIB)
            under = ""
        else:  # below the device's memory only the planning headroom refuses it
            verdict = headroom_overshoot_text(fraction, over / GIB)
            under = f", {(self.capacity_bytes - needed) / GIB:.2f} GiB under device memory"
        return (f"{verdict} ({needed / GIB:.2f} GiB needed, {usable / GIB:.2f} usable of "
                f"{self.capacity_bytes / GIB:.2f} GiB per GPU{under}; largest: {largest})")

    def over_headroom(self) -> np.ndarray:
        """Indices of :meth:`out_of_memory`'s plans that only the planning headroom refuses
        (under the device's memory), closest to fitting first."""
        oom = self.out_of_memory()
        return oom[~above_device(self.prediction.memory_bytes[oom], self.capacity_bytes)]

    def rejected_counts(self) -> dict[str, int]:
        """Candidates rejected per rule (first broken rule only), in rule order."""
        counts = np.bincount(self.rule_check.first_broken[~self.rule_check.valid],
                             minlength=len(self.rule_check.rules))
        return {rule: int(c) for rule, c in zip(self.rule_check.rules, counts, strict=True)
                if c}

    def rejected_examples(self, limit: int | None = None
                          ) -> list[tuple[dict[str, int | str | bool], str]]:
        """(plan, first broken rule) of rejected candidates, in enumeration order."""
        examples = []
        for index in np.flatnonzero(~self.rule_check.valid)[:limit]:
            plan = self.candidates.row(int(index))
            examples.append((plan, self.rule_check.message(self.candidates, int(index))))
        return examples

    def rule_example(self, rule: str) -> str:
        """The message of the first candidate rejected by ``rule``."""
        index = self.rule_check.rules.index(rule)
        first = int(np.flatnonzero(self.rule_check.first_broken == index)[0])
        return self.rule_check.message(self.candidates, first)

    def no_valid_layout_message(self, n_devices: int) -> str:
        """Why no candidate passed: the rule most of them break, with an example (`layouts`
        and the studio; a trial found the studio's message naming no rule)."""
        counts = self.rejected_counts()
        rule = max(counts, key=counts.__getitem__)
        return (f"no layout of {n_devices} GPUs passes the divisibility rules "
                f"({self.n_candidates} candidates); most fail {self.rule_example(rule)!r} "
                f"({counts[rule]} layouts)")

    def metrics(self, index: int) -> dict[str, float]:
        """Throughput, utilisation, step time and memory of plan ``index``."""
        p = self.prediction
        return {
            "tokens_per_s_per_gpu": float(p.tokens_per_s_per_gpu[index]),
            "mfu": float(p.mfu[index]),
            "mfu_gemm_lane": float(p.mfu_gemm_lane[index]),
            "step_time_s": float(p.step_time_s[index]),
            "memory_gib": float(p.memory_bytes[index] / GIB),
        }


def search_layouts(workload: Workload, machine: Machine, calibration: Calibration,
                   limits: LayoutLimits, *, progress: ProgressCallback | None = None,
                   chunk_plans: int = CHUNK_PLANS) -> LayoutSearch:
    """Enumerate, check and evaluate every plan of ``workload`` on ``machine``.

    ``progress(done, total)`` is called after each chunk of evaluated plans.
    """
    n_devices = machine.n_devices
    candidates = candidate_plans(workload, n_devices, machine.interconnect.scale_up_domain_gpus,
                                 limits)
    rule_check = check_rules(workload, candidates, n_devices)
    plans = candidates.take(np.flatnonzero(rule_check.valid))
    prediction = predict_in_chunks(workload, plans, machine, calibration,
                                   chunk_plans=chunk_plans, progress=progress)
    return LayoutSearch(candidates=candidates, rule_check=rule_check, plans=plans,
                        prediction=prediction, ranking=rank_feasible(prediction),
                        capacity_bytes=machine.hbm_bytes,
                        usable_fraction=machine.usable_memory_fraction)


def best_layout(workload: Workload, machine: Machine, calibration: Calibration,
                limits: LayoutLimits | None = None
                ) -> tuple[dict[str, int | str | bool], StepPrediction] | None:
    """The plan with the highest predicted tokens/s that fits in memory, with its
    length-1 prediction; None when no plan fits (the inner max of paper Eq. C-FLOPs).

    Same plan as rank 1 of :func:`search_layouts`, found faster: memory is checked first
    and only the plans that fit are timed.
    """
    limits = limits or LayoutLimits()
    plans = enumerate_plans(workload, machine.n_devices,
                            machine.interconnect.scale_up_domain_gpus, limits)
    fits, memory = _memory_check(workload, plans, machine, calibration.memory_scale)
    keep = np.flatnonzero(fits)
    if keep.size == 0:
        return None
    plans = plans.take(keep)
    prediction = predict_in_chunks(workload, plans, machine, calibration,
                                   memory_breakdown={name: value[keep]
                                                     for name, value in memory.items()})
    best = best_feasible(prediction)
    if best is None:
        return None
    return plans.row(best), take_prediction(prediction, best)
