"""Place one predicted plan against its calibration's coverage (perf.coverage)."""

from __future__ import annotations

from typing import Any

from mosaic.arch.counts import count_parameters
from mosaic.perf.calibration import Calibration
from mosaic.perf.coverage import (
    DEGREES,
    Assessment,
    CalibrationCoverage,
    OutsideDimension,
    assess,
    outside_dimensions,
    uninformed_notes,
)
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.step_time import StepPrediction
from mosaic.perf.workload import Workload
from mosaic.units import GIB


def envelope_position(workload: Workload, plans: ParallelPlans, index: int = 0
                      ) -> dict[str, Any]:
    """Where plan ``index`` of ``workload`` sits in an envelope's dimensions other than its
    GPU (the keywords of :func:`~mosaic.perf.coverage.outside_dimensions`)."""
    counts = count_parameters(workload.geometry)
    return {"stack": workload.stack, "is_moe": workload.geometry.is_moe,
            "n_total": float(counts.n_total), "n_active": float(counts.n_active),
            "degrees": {name: int(getattr(plans, name)[index]) for name in DEGREES},
            "is_hybrid": workload.geometry.is_hybrid}


def plan_outside_dimensions(coverage: CalibrationCoverage, workload: Workload,
                            plans: ParallelPlans, device_name: str, index: int = 0
                            ) -> list[OutsideDimension]:
    """The dimensions of plan ``index`` on ``device_name`` outside ``coverage``'s envelope
    (empty = inside), as :func:`assess_plan` judges them."""
    return outside_dimensions(coverage, device=device_name,
                              **envelope_position(workload, plans, index))


def assess_plan(calibration: Calibration, workload: Workload, plans: ParallelPlans,
                device_name: str, prediction: StepPrediction, index: int = 0,
                usable_memory_gib: float | None = None, system_name: str | None = None
                ) -> Assessment:
    """Envelope verdict and residual intervals of plan ``index`` of ``prediction`` (on node
    type ``system_name``, where given)."""
    return assess(
        calibration.coverage, calibration.name, device=device_name,
        **envelope_position(workload, plans, index),
        tokens_per_s=float(prediction.tokens_per_s[index]),
        tokens_per_s_per_gpu=float(prediction.tokens_per_s_per_gpu[index]),
        mfu=float(prediction.mfu[index]), step_time_s=float(prediction.step_time_s[index]),
        memory_gib=float(prediction.memory_bytes[index] / GIB),
        usable_memory_gib=usable_memory_gib, system=system_name,
        extra_notes=[*uninformed_notes(
            calibration.name, calibration.not_informed,
            ep_crosses_nodes=bool(prediction.chi_drivers.a2a_share[index] > 0),
            pp_crosses_nodes=bool(prediction.chi_drivers.pp_extra_nodes[index] > 0)),
            *calibration.microbench_notes(device_name)])
