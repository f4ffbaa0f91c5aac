"""The document of a finished co-design search, as `mosaic plan --json` and the studio's
plan report both build it: the optimum and ranking, the calibration used, where the law
extrapolates, the optimum's calibration coverage, the model-FLOPs comparison and allocation
exponents, the uncertainty (law samples and the calibration's throughput spread) and the
report's blocks."""

from __future__ import annotations

from typing import Any

from mosaic.hardware import active_catalog_paths
from mosaic.law import ScalingLaw
from mosaic.law.extrapolation import extrapolation_document, extrapolation_flags
from mosaic.perf.calibration import Calibration
from mosaic.perf.coverage import summary_lines
from mosaic.plan.analysis import JOINT_EXPONENTS, allocation_exponents, compare_model_flops
from mosaic.plan.cost import RunCost
from mosaic.plan.coverage import candidate_assessment, plan_uncertainty
from mosaic.plan.search import PlanResult
from mosaic.plan.uncertainty import LawSamples, Uncertainty
from mosaic.report import plan_report
from mosaic.report.html.documents import plan_report_blocks


def optimum_extrapolation(law: ScalingLaw, optimum: dict[str, Any], vocab: int | None = None
                          ) -> dict[str, Any]:
    """Which of the optimum's law inputs lie outside the law's fitted range, and how far;
    the tokens are those the law saw (the effective data D' under --unique-tokens), the
    vocabulary the grid's (a law fitted on byte-level runs predicts nats per byte)."""
    flags = extrapolation_flags(
        law, n_total=optimum["n_total"], n_active=optimum["n_active"],
        tokens=optimum.get("effective_tokens", optimum["tokens"]), sparsity=optimum["sparsity"],
        split_factor=optimum["split_factor"], vocab=vocab)
    return extrapolation_document(law, flags)


def calibration_document(calibration: Calibration) -> dict[str, Any]:
    """Which calibration a result used, for its JSON and report."""
    return {"name": calibration.name, "description": calibration.description,
            "provenance": calibration.provenance,
            # the file a profile came from, which the plan's export names for --calibration
            **({} if calibration.source_path is None else {"file": calibration.source_path}),
            **({} if calibration.memory_scale == 1.0
               else {"memory_scale": calibration.memory_scale})}


def _flags_only(law: ScalingLaw, candidate: dict[str, Any], vocab: int) -> dict[str, Any]:
    """A candidate's law flags without the fitted range (the optimum's block carries it)."""
    flags = optimum_extrapolation(law, candidate, vocab)
    return {k: v for k, v in flags.items() if k != "data_support"}


def plan_result_document(result: PlanResult, law: ScalingLaw, calibration: Calibration,
                         cost: RunCost, samples: LawSamples | None = None,
                         extra: dict[str, Any] | None = None
                         ) -> tuple[dict[str, Any], Uncertainty | None]:
    """The whole document of a trainable ``result`` (see the module docstring) and its
    uncertainty (None without law samples or calibration residuals); ``extra`` blocks (a
    caller's batch choice, versus-stack comparison, cheapest plan) go in before the report's
    blocks."""
    document = plan_report.plan_document(result, cost)
    document |= extra or {}
    document["calibration"] = calibration_document(calibration)
    if active_catalog_paths():  # the hardware files it planned on, for export's advice
        document["envelope"]["catalog"] = [str(path) for path in active_catalog_paths()]
    vocab = plan_report.grid_vocab(result.space.to_dict())
    for candidate in document["candidates"]:  # `export`/`compare` PLAN.json#N read them
        candidate["extrapolation"] = _flags_only(law, candidate, vocab)
    optimum = document["optimum"]
    optimum["extrapolation"] = optimum_extrapolation(law, optimum, vocab)
    coverage = candidate_assessment(result, calibration, int(result.optimum_index))
    optimum["coverage"] = coverage.to_document()
    optimum["coverage_summary"] = summary_lines(coverage)
    comparison = compare_model_flops(result, law)
    document["model_flops_comparison"] = plan_report.comparison_document(comparison, result)
    if all(name in law.coefficients for name in JOINT_EXPONENTS):
        document["allocation_exponents"] = plan_report.exponents_document(
            allocation_exponents(result, law))
    uncertainty = plan_uncertainty(result, law, samples, calibration)
    if uncertainty is not None:
        document["uncertainty"] = plan_report.uncertainty_document(uncertainty, result)
        # each choice's own law flags (a trial: a robust pick at G = 8 from a law fitted at
        # G = 1 was flagged only in the candidates' JSON)
        for choice, row in (("robust_choice", uncertainty.robust_row),
                            ("minimax_regret_choice", uncertainty.minimax_row),
                            ("optimum", int(result.ranking[0]))):
            document["uncertainty"][choice]["extrapolation"] = _flags_only(
                law, result.candidate(int(row)), vocab)
    document.update(plan_report_blocks(result, law, calibration, uncertainty,
                                       comparison=comparison))
    return document, uncertainty
