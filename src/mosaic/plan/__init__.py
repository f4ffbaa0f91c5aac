"""MOSAIC co-design planner (paper Sec. 2, 6, 7.3-7.4, Appendix D).

Quick use::

    from mosaic.law import default_law
    from mosaic.perf.calibration import load_calibration
    from mosaic.plan import Envelope, SearchSpace, resolve_system, search

    envelope = Envelope(resolve_system("B200"), n_nodes=32, days=20)   # Table 3
    result = search(envelope, SearchSpace(), default_law(), load_calibration(None))
    result.candidate(result.optimum_index)      # geometry, tokens, MFU, loss, layout
"""

from mosaic.hardware.default_systems import resolve_system
from mosaic.hardware.system import with_gpus_per_node
from mosaic.plan.analysis import (
    AllocationExponents,
    FlopCostProfile,
    ModelFlopsComparison,
    SparsityFrontier,
    allocation_exponents,
    compare_model_flops,
    flop_cost_profile,
    local_mfu_slopes,
    model_flops_loss,
    sparsity_frontier,
)
from mosaic.plan.cost import (
    BudgetOption,
    CheapestPlan,
    RunCost,
    cheapest_plan,
    plan_cost,
    run_cost,
)
from mosaic.plan.envelope import (
    TABLE3_LAYOUT_LIMITS,
    Envelope,
    SearchSpace,
)
from mosaic.plan.goodput import ConstantGoodput, Goodput, YoungDalyGoodput
from mosaic.plan.search import (
    LayoutOutcome,
    PlanResult,
    ThroughputTable,
    best_feasible_layout,
    profile_geometries,
    score,
    search,
)
from mosaic.plan.sweep import SweepPoint, best_per_split, sweep_days, sweep_nodes
from mosaic.plan.uncertainty import (
    LawSamples,
    Uncertainty,
    load_samples,
    propagate,
    save_samples,
)

__all__ = [
    "TABLE3_LAYOUT_LIMITS",
    "AllocationExponents",
    "BudgetOption",
    "CheapestPlan",
    "ConstantGoodput",
    "Envelope",
    "FlopCostProfile",
    "Goodput",
    "LawSamples",
    "LayoutOutcome",
    "ModelFlopsComparison",
    "PlanResult",
    "RunCost",
    "SearchSpace",
    "SparsityFrontier",
    "SweepPoint",
    "ThroughputTable",
    "Uncertainty",
    "YoungDalyGoodput",
    "allocation_exponents",
    "best_feasible_layout",
    "best_per_split",
    "cheapest_plan",
    "compare_model_flops",
    "flop_cost_profile",
    "load_samples",
    "local_mfu_slopes",
    "model_flops_loss",
    "plan_cost",
    "profile_geometries",
    "propagate",
    "resolve_system",
    "run_cost",
    "save_samples",
    "score",
    "search",
    "sparsity_frontier",
    "sweep_days",
    "sweep_nodes",
    "with_gpus_per_node",
]
