"""The JSON document of `mosaic explain --json`: the job's predicted step (as `mosaic perf
--json` gives it), what bounds it, a measured gap and the ranked levers."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from mosaic.config.layout import plan_row_document
from mosaic.evaluate.diagnosis import Diagnosis
from mosaic.perf.calibration import Calibration
from mosaic.perf.coverage import summary_lines
from mosaic.perf.machine import usable_gib
from mosaic.perf.prediction_coverage import assess_plan
from mosaic.report.prediction_document import prediction_document
from mosaic.units import GIB


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def explain_document(diagnosis: Diagnosis, calibration: Calibration) -> dict[str, Any]:
    """The JSON document of `mosaic explain --json`."""
    result = diagnosis.result
    p = result.prediction
    bound = diagnosis.bound
    gap = diagnosis.gap
    coverage = assess_plan(calibration, result.spec.workload, result.spec.plan,
                           result.machine.device_name, p,
                           usable_memory_gib=usable_gib(result.machine),
                           system_name=result.cluster.system.name)
    return {
        # the profile every figure came from, and its fitted memory scale (1: as derived)
        "calibration": calibration.name,
        # the job's step as `mosaic perf --json` gives it (the report draws its breakdowns)
        "prediction": prediction_document(result, calibration),
        "memory_scale": calibration.memory_scale,
        "current": {
            "plan": plan_row_document(result.spec.plan.row(0)),
            "global_batch": result.spec.workload.global_batch,
            "step_time_s": float(p.step_time_s[0]),
            "mfu": float(p.mfu[0]),
            # with causal attention, against the GEMM lane's peak: what a measurement is
            # checked against (over 1 is refused, mosaic.evaluate.plausibility)
            "mfu_with_attention_gemm_lane": float(p.mfu_with_attention_gemm_lane[0]),
            "tokens_per_s": float(p.tokens_per_s[0]),
        },
        "coverage": coverage.to_document(),
        "coverage_summary": summary_lines(coverage),
        "bound": {
            "limiter": bound.limiter,
            "class": bound.time_class,
            "share": bound.time_share,
            "part": bound.part,
            "part_share": bound.part_share,
            "summary": bound.summary,
            "classes_s": bound.classes_s,
            "parts_s": bound.parts_s,
            "memory": {
                "status": bound.memory.status,
                "memory_gib": bound.memory.memory_bytes / GIB,
                "capacity_gib": bound.memory.capacity_bytes / GIB,
                "usable_gib": bound.memory.usable_bytes / GIB,
                "overshoot_gib": bound.memory.overshoot_bytes / GIB,
            },
        },
        "breakdown": [asdict(term) for term in diagnosis.terms],
        "assumed_imbalance": (None if diagnosis.imbalance is None
                              else asdict(diagnosis.imbalance)),
        "gap": None if gap is None else {
            "measured_step_time_s": gap.measured_step_time_s,
            "predicted_step_time_s": gap.predicted_step_time_s,
            "gap_s": gap.gap_s,
            "ratio": gap.ratio,
            "compute_kernel_s": gap.compute_kernel_s,
            "communication_s": gap.communication_s,
            "compute_scale": gap.compute_scale,
            "communication_scale": gap.communication_scale,
            "host_s": gap.host_s,
            "host_scale": gap.host_scale,
            "imbalance_s": gap.imbalance_s,
            "imbalance_scale": gap.imbalance_scale,
            # the sources of the step the gap is attributed to (GapAttribution.weighs)
            "sources": list(gap.source_keys),
            "more_plausible": gap.more_plausible,
            "findings": gap.findings,
        },
        "levers": [
            {
                "name": lever.name,
                "description": lever.description,
                "plan": plan_row_document(lever.plan),
                "global_batch": lever.global_batch,
                "step_time_s": _finite(lever.step_time_s),
                "mfu": _finite(lever.mfu),
                "tokens_per_s": _finite(lever.tokens_per_s),
                "gain": _finite(lever.gain),
                "memory_gib": _finite(lever.memory_bytes / GIB),
                # the job file's --set overrides that give exactly this lever's step
                "overrides": None if lever.overrides is None else list(lever.overrides),
                "feasible": lever.feasible,
                "reason": lever.reason,
            }
            for lever in diagnosis.levers
        ],
    }


def levers_that_fit_text(document: dict[str, Any]) -> str | None:
    """For a job that does not fit, which levers (by rank) make it fit, or that none does
    alone; None for a job that fits (a trial looked through the table for them)."""
    if document["bound"]["memory"]["status"] in ("fits", "near capacity"):
        return None
    fitting = [str(rank) for rank, lever in enumerate(document["levers"], start=1)
               if lever["feasible"]]
    return "The job does not fit; " + (
        f"the levers that make it fit: {', '.join(fitting)} (combine one of them with the "
        "faster ones)" if fitting else
        "no single lever makes it fit: `mosaic layouts` searches every layout at once")


def measured_gap_rows(gap: dict[str, Any], assumptions: tuple[str, ...] | list[str] = ()
                      ) -> list[tuple[str, str]]:
    """:func:`gap_rows` and, for a record whose tokens/s and step time disagree, the note
    that it is explained at the step its tokens/s implies (from the job's ``assumptions``):
    the "Measured vs predicted" table of `mosaic explain` and of the studio."""
    from mosaic.config.run_records import MEASUREMENT_DISAGREEMENT_PREFIX

    return gap_rows(gap) + [("measurement", note) for note in assumptions
                            if note.startswith(MEASUREMENT_DISAGREEMENT_PREFIX)]


def gap_rows(gap: dict[str, Any]) -> list[tuple[str, str]]:
    """The measured-vs-predicted table of a gap document: the two steps, their ratio, and
    each source's share of the predicted step (host and imbalance only where they weigh),
    for the terminal and the report alike."""
    predicted = gap["predicted_step_time_s"]

    def share(seconds: float) -> str:
        return f"{seconds:.3f} s ({seconds / predicted:.0%})"

    rows = [("measured step time", f"{gap['measured_step_time_s']:.3f} s"),
            ("predicted step time", f"{predicted:.3f} s"),
            ("measured / predicted", f"{gap['ratio']:.2f}x"),
            ("compute kernels: block, LM head and loss, optimizer (with their "
             "bubble/overhead share)", share(gap["compute_kernel_s"])),
            ("communication (with its bubble/overhead share)", share(gap["communication_s"]))]
    sources = gap.get("sources", ["host", "imbalance"])  # a document saved before them
    return rows + [(label, share(gap[f"{key}_s"])) for label, key in (
        ("host-side work: launch floor, MoE host sync (with its share)", "host"),
        ("expert load imbalance (with its share)", "imbalance")) if key in sources]
