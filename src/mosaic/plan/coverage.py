"""The planner's answer against the calibration: the optimum's envelope verdict and
intervals, and the throughput spread that enters P(optimal) (perf.coverage)."""

from __future__ import annotations

import numpy as np

from mosaic.law import ScalingLaw
from mosaic.perf.calibration import Calibration
from mosaic.perf.collectives import ep_and_pp_nodes_spanned
from mosaic.perf.coverage import DEGREES, Assessment, assess, uninformed_notes
from mosaic.plan.search import PlanResult
from mosaic.plan.throughput_spread import spread_for
from mosaic.plan.uncertainty import LawSamples, Uncertainty, propagate
from mosaic.units import GIB


def candidate_assessment(result: PlanResult, calibration: Calibration, row: int
                         ) -> Assessment:
    """Envelope verdict and residual intervals of grid ``row`` on its best layout, and
    (as `mosaic perf` says it) whether its memory interval reaches past usable memory."""
    grid, table, envelope = result.grid, result.throughput, result.envelope
    plan = table.plans[row] or {}
    tokens_per_s = float(table.tokens_per_s[row])
    return assess(
        calibration.coverage, calibration.name, device=envelope.system.device.name,
        stack=envelope.stack, is_moe=grid.geometry(row).is_moe,
        n_total=float(grid.n_total[row]), n_active=float(grid.n_active[row]),
        degrees={name: int(plan[name]) for name in DEGREES if name in plan},
        tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=tokens_per_s / table.n_devices,
        mfu=float(table.mfu[row]), step_time_s=float(table.step_time_s[row]),
        memory_gib=float(table.memory_bytes[row] / GIB),
        usable_memory_gib=envelope.usable_memory_bytes / GIB,
        extra_notes=[*_uninformed(calibration, plan, envelope.system.gpus_per_node),
                     *calibration.microbench_notes(envelope.system.device.name)],
        system=envelope.system.name)


def _uninformed(calibration: Calibration, plan: dict, gpus_per_node: int) -> list[str]:
    """perf.coverage.uninformed_notes for a grid row's layout, placed on the nodes as the
    time model places it (perf.collectives.ep_and_pp_nodes_spanned)."""
    if not plan:
        return []
    ep_nodes, pp_nodes = ep_and_pp_nodes_spanned(
        *(int(plan.get(name, 1)) for name in ("ep", "etp", "pp", "tp", "cp", "dp")),
        gpus_per_node)
    return uninformed_notes(calibration.name, calibration.not_informed,
                            ep_crosses_nodes=bool(ep_nodes > 1),
                            pp_crosses_nodes=bool(pp_nodes > 1))


def plan_uncertainty(result: PlanResult, law: ScalingLaw, samples: LawSamples | None,
                     calibration: Calibration, seed: int = 0) -> Uncertainty | None:
    """P(optimal) and the robust pick under the law ``samples`` (if any) and the
    calibration's throughput spread (if it records residuals); None when neither is
    available or nothing is trainable."""
    rows = result.ranking
    if rows.size == 0:
        return None
    is_moe = np.array([result.grid.geometry(int(r)).is_moe for r in rows])
    spread = spread_for(calibration, result.envelope.stack, is_moe)
    if samples is None and spread is None:
        return None
    return propagate(result, law, samples, spread=spread, seed=seed)
