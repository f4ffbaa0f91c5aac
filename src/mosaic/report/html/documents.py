"""Report blocks the CLI's JSON documents lack, computed once from the library's objects.

`mosaic plan --json` carries these blocks, so `mosaic report plan.json` draws the same
page as `mosaic plan --html`; `mosaic layouts --json` carries its best layouts' breakdowns
and adds its scatter only to the HTML (tens of thousands of points do not belong in a JSON
summary).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mosaic.config.convert import geometry_modelling_notes
from mosaic.config.job_schema import layout_document
from mosaic.config.layout import plan_row_document
from mosaic.law import ScalingLaw
from mosaic.perf.calibration import Calibration
from mosaic.perf.layouts import LayoutLimits, LayoutSearch, best_layout, take_prediction
from mosaic.perf.machine import machine_for
from mosaic.perf.step_time import StepPrediction
from mosaic.plan.analysis import ModelFlopsComparison, compare_model_flops, sparsity_frontier
from mosaic.plan.search import PlanResult, candidate_workload
from mosaic.plan.uncertainty import Uncertainty
from mosaic.report.plan_report import geometry_identity
from mosaic.units import GIB

TOP_BREAKDOWNS = 3  # layouts shown side by side
# Scatter points kept (SVG plotting stays responsive): the best SCATTER_TOP layouts, then an
# evenly spaced sample of the rest in ranking order.
SCATTER_POINTS = 4000
SCATTER_TOP = 500


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def step_document(prediction: StepPrediction, index: int = 0) -> dict[str, Any]:
    """Breakdown of one predicted step (seconds and bytes, plain values)."""
    return {
        "step_time_s": float(prediction.step_time_s[index]),
        "mfu": float(prediction.mfu[index]),
        "hfu": float(prediction.hfu[index]),
        "memory_bytes": float(prediction.memory_bytes[index]),
        "breakdown_s": {k: float(v[index]) for k, v in prediction.breakdown_s.items()},
        "labels": dict(prediction.labels),
        "memory_breakdown_bytes": {k: float(v[index])
                                   for k, v in prediction.memory_breakdown_bytes.items()},
    }


def optimum_step_document(result: PlanResult, calibration: Calibration
                          ) -> dict[str, Any] | None:
    """Step-time and memory breakdown of the optimum's layout.

    Re-runs the optimum geometry's layout search with the planner's limits (the same
    workload the search builds: geometry, batch, sequence, precision), so the breakdown
    belongs to exactly the plan the planner chose.
    """
    row = result.optimum_index
    if row is None:
        return None
    envelope = result.envelope
    limits = result.throughput.limits
    workload = candidate_workload(envelope, result.grid, row, limits)
    machine = machine_for(envelope.cluster, envelope.precision,
                          envelope.usable_memory_fraction, fp8_recipe=envelope.fp8_recipe)
    found = best_layout(workload, machine, calibration, limits)
    if found is None:
        return None
    plan, prediction = found
    plan = {**plan_row_document(plan), **layout_document(workload, plan)}  # (its layout string)
    return {"plan": plan, "capacity_bytes": float(machine.hbm_bytes), **step_document(prediction)}


def frontier_document(result: PlanResult, law: ScalingLaw,
                      comparison: ModelFlopsComparison) -> dict[str, Any]:
    """L*(S) under both views at the comparison's G (paper Fig. 1)."""
    assert comparison.split_factor is not None
    frontier = sparsity_frontier(result, law, comparison.c_model_flops, comparison.split_factor)
    return {
        "split_factor": frontier.split_factor,
        "c_model_flops": frontier.c_model_flops,
        "experts": frontier.experts.tolist(),
        "top_k": frontier.top_k.tolist(),
        "model_flops_sparsity": frontier.model_flops_sparsity.tolist(),
        "model_flops_loss": frontier.model_flops_loss.tolist(),
        "delivers_c_model": frontier.delivers_c_model.tolist(),
        "hardware_sparsity": [_finite(v) for v in frontier.hardware_sparsity],
        "hardware_loss": [_finite(v) for v in frontier.hardware_loss],
    }


def assumptions_document(law: ScalingLaw, calibration: Calibration, limits: LayoutLimits
                         ) -> dict[str, Any]:
    """Every model input the plan rests on, with its source; ``limits`` are the layouts
    its search allowed."""
    return {
        "law": {"form": law.form.name, "coefficients": dict(law.coefficients),
                "split_factor": law.split_factor, "provenance": dict(law.provenance)},
        "calibration": {"name": calibration.name, "provenance": calibration.provenance},
        "layout_limits": limits.to_dict(),
        "flop_convention": "C_model = 6·N_act·D with non-embedding N_act, no attention "
                           "term (paper Sec. 2.1, Eq. 1)",
        "token_budget": "D* = tokens/s · T_train · η_good, capped at tpp_max·N_act "
                        "(paper Eq. 25)",
        "mfu_peak": "dense bf16 datasheet peak of the device (catalog)",
    }


def uncertainty_rows(uncertainty: Uncertainty, result: PlanResult) -> list[dict[str, Any]]:
    """P(optimal), interval and regret of every trainable candidate (ranking order)."""
    return [{**geometry_identity(result, int(row)), **uncertainty.summary(int(row))}
            for row in uncertainty.rows]


def plan_report_blocks(result: PlanResult, law: ScalingLaw, calibration: Calibration,
                       uncertainty: Uncertainty | None = None,
                       comparison: ModelFlopsComparison | None = None) -> dict[str, Any]:
    """The blocks added to `mosaic plan --json` for the report."""
    blocks: dict[str, Any] = {"assumptions": assumptions_document(
        law, calibration, result.throughput.limits)}
    backbone = result.grid.backbone
    model_notes = [] if backbone is None else geometry_modelling_notes(backbone)
    if model_notes:  # what the performance model leaves out of the user's model
        blocks["assumptions"]["model"] = model_notes
    if result.optimum_index is not None:
        comparison = comparison or compare_model_flops(result, law)
        blocks["sparsity_frontier"] = frontier_document(result, law, comparison)
        blocks["optimum_step"] = optimum_step_document(result, calibration)
    if uncertainty is not None:
        blocks["uncertainty_candidates"] = uncertainty_rows(uncertainty, result)
    return blocks


def layout_breakdowns(search: LayoutSearch, top: int = TOP_BREAKDOWNS) -> dict[str, Any]:
    """Step-time and memory breakdowns of the best ``top`` layouts, and the device memory
    they are measured against (what the report draws side by side)."""
    breakdowns = []
    for rank, index in enumerate(search.ranking[:top], start=1):
        plan = plan_row_document(search.plans.row(int(index)))
        single = take_prediction(search.prediction, int(index))
        breakdowns.append({"rank": rank, "plan": plan, **step_document(single)})
    return {"top_breakdowns": breakdowns, "capacity_bytes": float(search.capacity_bytes)}


def layouts_scatter_block(search: LayoutSearch) -> dict[str, Any]:
    """The (MFU, memory) of every feasible layout (a sample above SCATTER_POINTS): what the
    page of `mosaic layouts --html` adds to its JSON document (:func:`layout_breakdowns`)."""
    from mosaic.report.html.breakdown import layout_label

    p = search.prediction
    ranking = search.ranking
    shown = scatter_sample(ranking.size)
    ranking = ranking[shown]
    plans = [plan_row_document(search.plans.row(int(i))) for i in ranking]
    return {
        "feasible_points": {
            "mfu": p.mfu[ranking].tolist(),
            "memory_gib": (p.memory_bytes[ranking] / GIB).tolist(),
            "step_time_s": p.step_time_s[ranking].tolist(),
            "labels": [layout_label(plan) for plan in plans],
            "checkpointing": [plan["checkpointing"] for plan in plans],
            "n_feasible": int(search.ranking.size),
        },
    }


def scatter_sample(n: int, points: int = SCATTER_POINTS, top: int = SCATTER_TOP) -> np.ndarray:
    """Indices 0..n-1 to plot: all when n <= points, else the first ``top`` and an evenly
    spaced sample of the rest (deterministic)."""
    if n <= points:
        return np.arange(n)
    rest = np.linspace(top, n - 1, points - top).round().astype(int)
    return np.unique(np.concatenate([np.arange(top), rest]))
