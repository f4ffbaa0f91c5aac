"""Fit a team's memory scale: how much its own runs allocate against the memory model.

The memory model is derived tensor by tensor (docs/memory.md) and the shipped profiles keep
it unscaled. A team whose own stack allocates more or less (a custom kernel's workspace,
its allocator settings, tensors the model does not know of) can fit one factor on its runs'
memory figures with ``mosaic calibrate --fit-memory``: every component the caching allocator
holds is multiplied by it (``Calibration.memory_scale``, applied in
:func:`mosaic.perf.memory.scaled_memory_breakdown`); the runtime reserve outside the
model's tensors stays as derived.

The fit compares like with like: a record's figure is read as the record says it was
measured (:func:`~mosaic.evaluate.validation_report.measured_like`), so a device figure
(nvidia-smi) first loses the CUDA context and NCCL buffers the model adds outside the
allocator. The factor is the median of the runs' measured/modelled allocator ratios, taken
in logs (robust to one odd record, the geometric middle of the rest), bounded to
``MEMORY_SCALE_BOUNDS``; the held-out error refits it without each run in turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from mosaic.config.run_records import RunRecord
from mosaic.evaluate.plausibility import implausible_memory_reason
from mosaic.evaluate.validation_report import RunPrediction, measured_like, predict_runs
from mosaic.perf.calibration import Calibration
from mosaic.perf.headroom import memory_headroom
from mosaic.perf.memory import RUNTIME_RESERVE_BYTES
from mosaic.units import GIB

# The scale a fit may reach: a stack allocating half or twice what the model derives points
# at a record read wrongly (a device figure entered as allocated, a per-node total) rather
# than at a missing tensor, so the fit stops there and says it ended on a bound.
MEMORY_SCALE_BOUNDS = (0.5, 2.0)
# Below this many runs a scale has no held-out check worth the name (leave-one-run-out of
# two runs tests each on the other alone); calibrate warns.
MIN_MEMORY_SCALE_RUNS = 3


@dataclass(frozen=True)
class MemoryScaleFit:
    """A fitted memory scale and what it does on the runs it was fitted to."""

    scale: float
    at_bound: bool
    run_ids: tuple[str, ...]
    start_scale: float  # the starting calibration's (1: the memory model as derived)
    mape_before: float  # with the starting calibration's scale
    mape_after: float  # in sample, with the fitted scale
    mape_held_out: float | None  # refitted without each run in turn; None below 3 runs
    trained_over_device_before: int  # runs that trained, predicted above device memory
    trained_over_device_after: int
    ooms_predicted_to_fit_before: int  # recorded OOMs predicted to fit the device
    ooms_predicted_to_fit_after: int
    # figures the plausibility check refuses (above the device: per node, MiB as GiB)
    left_out_implausible: tuple[str, ...] = ()
    # runs that trained but are predicted, at the fitted scale, above the planning headroom
    # `layouts` and `plan` keep (perf.headroom), and the least usable fraction admitting all
    trained_over_headroom: tuple[str, ...] = ()
    fraction_admitting_trained: float | None = None
    trained_over_headroom_before: int = 0  # the same count at the starting scale

    def to_dict(self) -> dict[str, object]:
        """The fit as a JSON-ready mapping (calibrate --json's ``memory_scale``)."""
        return {"scale": self.scale, "at_bound": self.at_bound, "n_runs": len(self.run_ids),
                "start_scale": self.start_scale, "mape_before": self.mape_before,
                "mape_after": self.mape_after,
                "mape_held_out": self.mape_held_out,
                "trained_over_device_before": self.trained_over_device_before,
                "trained_over_device_after": self.trained_over_device_after,
                "ooms_predicted_to_fit_before": self.ooms_predicted_to_fit_before,
                "ooms_predicted_to_fit_after": self.ooms_predicted_to_fit_after,
                "left_out_implausible": list(self.left_out_implausible),
                "trained_over_headroom": list(self.trained_over_headroom),
                "trained_over_headroom_before": self.trained_over_headroom_before,
                "fraction_admitting_trained": self.fraction_admitting_trained}


def _allocator_and_offset_bytes(prediction: RunPrediction, start_scale: float
                                ) -> tuple[float, float]:
    """(the model's allocator bytes at scale 1, the bytes the record's figure adds to them):
    the predicted figure is ``start_scale · allocator + offset``, measured_like being a
    shift of the model's total (its runtime reserve included)."""
    offset = measured_like(prediction.record, float(RUNTIME_RESERVE_BYTES))
    allocator = (prediction.predicted_memory_gib * GIB - offset) / start_scale
    return allocator, offset


def _bounded(scale: float) -> float:
    low, high = MEMORY_SCALE_BOUNDS
    return min(max(scale, low), high)


def _median_scale(log_ratios: np.ndarray) -> float:
    return _bounded(float(np.exp(np.median(log_ratios))))


def _implausible(prediction: RunPrediction) -> bool:
    record = prediction.record
    return implausible_memory_reason(record.measured_memory_bytes or 0.0,
                                     record.system.device.hbm_bytes) is not None


def fit_memory_scale(predictions: Sequence[RunPrediction], start_scale: float
                     ) -> MemoryScaleFit | None:
    """The memory scale of the runs among ``predictions`` (made with a calibration whose
    scale is ``start_scale``) that trained and report a plausible memory figure; None when
    none does."""
    reporting = [p for p in predictions if p.record.measured_memory_bytes and not p.record.oom]
    implausible = tuple(p.record.id for p in reporting if _implausible(p))
    usable = [p for p in reporting if p.record.id not in implausible]
    parts = [_allocator_and_offset_bytes(p, start_scale) for p in usable]
    kept = [(p, allocator, offset) for p, (allocator, offset) in zip(usable, parts, strict=True)
            if allocator > 0 and (p.record.measured_memory_bytes or 0) > offset]
    if not kept:
        return None
    measured = np.array([p.record.measured_memory_bytes for p, _, _ in kept], dtype=float)
    allocator = np.array([a for _, a, _ in kept])
    offset = np.array([o for _, _, o in kept])
    log_ratios = np.log((measured - offset) / allocator)
    raw = float(np.exp(np.median(log_ratios)))
    scale = _bounded(raw)

    def mape(scales: np.ndarray | float) -> float:
        return float(np.mean(np.abs((scales * allocator + offset) / measured - 1)))

    held_out = None  # below MIN_MEMORY_SCALE_RUNS none, as calibrate's warning says
    if len(kept) >= MIN_MEMORY_SCALE_RUNS:
        loo = np.array([_median_scale(np.delete(log_ratios, i)) for i in range(len(kept))])
        held_out = mape(loo)
    # each run's model total over its device memory, at the starting and the fitted scale
    trained = [p for p in predictions if not p.record.oom]
    ooms = [p for p in predictions if p.record.oom]
    trained_before, trained_after = _shares_of_device(trained, start_scale, scale)
    ooms_before, ooms_after = _shares_of_device(ooms, start_scale, scale)
    usable = np.array([memory_headroom(None, p.record.workload.stack).usable_fraction
                       for p in trained])
    over_headroom = tuple(p.record.id for p, over in zip(trained, trained_after > usable,
                                                         strict=True) if over)
    return MemoryScaleFit(
        scale=scale, at_bound=not math.isclose(raw, scale),
        run_ids=tuple(p.record.id for p, _, _ in kept), start_scale=start_scale,
        mape_before=mape(start_scale), mape_after=mape(scale), mape_held_out=held_out,
        trained_over_device_before=int(np.sum(trained_before > 1)),
        trained_over_device_after=int(np.sum(trained_after > 1)),
        ooms_predicted_to_fit_before=int(np.sum(ooms_before <= 1)),
        ooms_predicted_to_fit_after=int(np.sum(ooms_after <= 1)),
        left_out_implausible=implausible, trained_over_headroom=over_headroom,
        trained_over_headroom_before=int(np.sum(trained_before > usable)),
        fraction_admitting_trained=(math.ceil(trained_after.max() * 100) / 100
                                    if over_headroom and trained_after.max() <= 1 else None))


def _shares_of_device(predictions: Sequence[RunPrediction], start_scale: float, scale: float
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Each run's model total (allocator part at the scale, plus the runtime reserve) over
    its device memory, at ``start_scale`` and at ``scale``."""
    allocator = np.array([_allocator_and_offset_bytes(p, start_scale)[0] for p in predictions])
    hbm = np.array([p.record.system.device.hbm_bytes for p in predictions], dtype=float)
    return ((start_scale * allocator + RUNTIME_RESERVE_BYTES) / hbm,
            (scale * allocator + RUNTIME_RESERVE_BYTES) / hbm)


def with_memory_scale(calibration: Calibration, records: Sequence[RunRecord], apply: bool,
                      predictions: Sequence[RunPrediction] | None = None
                      ) -> tuple[Calibration, MemoryScaleFit | None]:
    """(``calibration`` with the memory scale its records' memory figures give when
    ``apply``, else unchanged; the fit, or None when no record reports memory). Records the
    model cannot predict are left out, as in the time fit. ``predictions``: the records'
    own, made at ``calibration``'s memory scale (the memory model reads no other constant),
    when the caller has them (`calibrate`'s one prediction of each run); else made here."""
    # every record: the scale may move a run without a memory figure across the device
    if not any(r.measured_memory_bytes for r in records):
        return calibration, None
    if predictions is None:
        predictions = predict_runs(records, calibration,
                                   unpredictable=lambda _record, _reason: None)
    fit = fit_memory_scale(predictions, calibration.memory_scale)
    if fit is None or not apply:
        return calibration, fit
    held_out = ("" if fit.mape_held_out is None
                else f", {fit.mape_held_out:.1%} held out leave-one-run-out")
    source = (f"measured over modelled allocator memory: the median ratio of "
              f"{len(fit.run_ids)} run(s) (mosaic calibrate --fit-memory); memory MAPE "
              f"{fit.mape_before:.1%} at the starting scale {fit.start_scale:.4g}, "
              f"{fit.mape_after:.1%} fitted{held_out}")
    at_bounds = (*calibration.at_bounds, "memory_scale") if fit.at_bound else calibration.at_bounds
    return replace(calibration, memory_scale=float(f"{fit.scale:.4g}"),
                   sources={**calibration.sources, "memory_scale": source},
                   at_bounds=at_bounds), fit
