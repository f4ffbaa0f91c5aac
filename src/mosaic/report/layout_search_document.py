"""The JSON document of a layout search (`mosaic layouts --json`), shared by the CLI and
the studio."""

from __future__ import annotations

from typing import Any

import numpy as np

from mosaic.config.job_schema import layout_document
from mosaic.config.layout import plan_row_document
from mosaic.hardware import Cluster
from mosaic.perf.calibration import Calibration
from mosaic.perf.coverage import DEGREES, Assessment, degrees_inside, summary_lines
from mosaic.perf.layouts import LayoutSearch
from mosaic.perf.machine import Machine, mfu_peak_text, usable_gib
from mosaic.perf.prediction_coverage import assess_plan
from mosaic.perf.workload import Workload
from mosaic.units import GIB

LAYOUT_ROW_FIELDS = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "sharding", "hsdp_shard",
               "micro_batch", "checkpointing", "sequence_parallel")


def _plan_fields(search: LayoutSearch, index: int) -> dict[str, Any]:
    row = plan_row_document(search.plans.row(index))
    return {name: row[name] for name in LAYOUT_ROW_FIELDS if name in row}


def ranked_rows(search: LayoutSearch, top: int, calibration: Calibration,
                workload: Workload, machine: Machine, system_name: str | None = None
                ) -> list[dict[str, Any]]:
    """The best ``top`` plans with their metrics and calibration coverage (assessed as the
    document's summary assesses the best one: usable memory, node type)."""
    return [{"rank": rank, **_plan_fields(search, int(i)), **search.metrics(int(i)),
             **layout_document(workload, search.plans.row(int(i))),
             "coverage": assess_plan(calibration, workload, search.plans, machine.device_name,
                                     search.prediction, int(i),
                                     usable_memory_gib=usable_gib(machine),
                                     system_name=system_name).to_document()}
            for rank, i in enumerate(search.ranking[:top], start=1)]



def out_of_memory_rows(search: LayoutSearch, top: int) -> list[dict[str, Any]]:
    """The ``top`` plans closest to fitting, with how far over they are."""
    return [{**_plan_fields(search, int(i)), **search.metrics(int(i)),
             "overshoot_gib": float(search.prediction.overshoot_bytes[i] / GIB),
             "reason": search.oom_reason(int(i))}
            for i in search.out_of_memory()[:top]]


def infeasible_document(search: LayoutSearch, top: int, details: bool) -> dict[str, Any]:
    """Counts of plans out of memory and rejected per rule (and examples with ``details``)."""
    oom = search.out_of_memory()
    document: dict[str, Any] = {
        # every plan over the usable memory; of them, those under the device's memory
        # (perf.headroom.memory_verdict: only the planning headroom refuses them)
        "out_of_memory": int(oom.size),
        "over_planning_headroom": int(search.over_headroom().size),
        "min_overshoot_gib": (float(search.prediction.overshoot_bytes[oom[0]] / GIB)
                              if oom.size else None),
        "rejected": [{"rule": rule, "plans": count, "example": search.rule_example(rule)}
                     for rule, count in search.rejected_counts().items()],
    }
    if details:
        document["out_of_memory_plans"] = out_of_memory_rows(search, top)
        document["rejected_plans"] = [{**plan, "reason": reason}
                                      for plan, reason in search.rejected_examples(top)]
    return document


def search_document(search: LayoutSearch, cluster: Cluster, machine: Machine, top: int,
                    show_infeasible: bool, calibration: Calibration,
                    workload: Workload) -> dict[str, Any]:
    """The JSON document of `mosaic layouts --json`."""
    best = (assess_plan(calibration, workload, search.plans, machine.device_name,
                        search.prediction, int(search.ranking[0]),
                        usable_memory_gib=usable_gib(machine), system_name=cluster.system.name)
            if search.ranking.size else None)
    return {
        "hardware": {"system": cluster.system.name, "nodes": cluster.n_nodes,
                     "devices": cluster.n_devices, "description": cluster.description,
                     "usable_memory_fraction": machine.usable_memory_fraction},
        "mfu_peak": mfu_peak_text(machine),
        "n_candidates": search.n_candidates,
        "n_plans": search.n_plans,
        "n_feasible": search.n_feasible,
        "rows": ranked_rows(search, top, calibration, workload, machine, cluster.system.name),
        "infeasible": infeasible_document(search, top, show_infeasible),
        "calibration": calibration.name,
        "memory_scale": calibration.memory_scale,  # a team's fitted scale (1: as derived)
        "coverage_summary": [] if best is None else summary_lines(best),
        "best_inside_envelope": (None if best is None else
                                 best_inside_envelope(search, calibration, best,
                                                      workload.geometry.is_moe)),
    }


def best_inside_envelope(search: LayoutSearch, calibration: Calibration, best: Assessment,
                         is_moe: bool) -> dict[str, Any] | None:
    """The best-ranked layout whose parallel degrees lie in the calibrated ranges, with its
    rank, where the best layout's (``best``: its assessment) do not and the job itself
    (GPU, stack, class, size) is inside the envelope; else None. A trial took a layout 4x
    beyond the calibrated dp for "the best" over the recipe's, which the model predicts
    within 2% of its measurement."""
    if calibration.coverage is None:
        return None
    ranked = search.ranking
    degrees = {name: getattr(search.plans, name)[ranked] for name in DEGREES}
    inside = degrees_inside(calibration.coverage, degrees, is_moe)
    job_outside = [o for o in best.outside if o.dimension not in DEGREES]
    if inside[0] or job_outside or not inside.any():
        return None
    position = int(np.argmax(inside))
    index = int(ranked[position])
    return {"rank": position + 1, **_plan_fields(search, index), **search.metrics(index)}


def job_limit_notes(document: dict[str, Any]) -> list[str]:
    """What the search did with the job's own layout: its degrees searched over rather than
    kept, and its search block's limits (`mosaic layouts` prints them, its page shows them)."""
    notes = []
    searched = document.get("job_degrees_searched")
    if searched:
        stated = ", ".join(f"{axis}={value}" for axis, value in searched.items())
        pins = " ".join(f"--{axis} {value}" for axis, value in searched.items())
        notes.append(f"The job's {stated} are searched over, not kept (pin them: {pins}).")
    from_job = document.get("limits_from_job")
    if from_job:
        shown = "; ".join(
            f"{name} {','.join(map(str, value)) if isinstance(value, list) else value}"
            for name, value in from_job.items())
        notes.append(f"Searched within the job's search block: {shown} (an option of the "
                     "same name overrides it).")
    return notes
