"""JSON documents of `mosaic plan` and `mosaic sweep` (plain values, SI units)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.arch.ladder import PAPER_DENSE_LAYERS, PAPER_SHARED_EXPERTS, PAPER_VOCAB
from mosaic.plan.analysis import MIN_SLOPE_POINTS, AllocationExponents, ModelFlopsComparison
from mosaic.plan.cost import CheapestPlan, RunCost, plan_cost, same_cost_key
from mosaic.plan.envelope import TABLE3_LAYOUT_LIMITS
from mosaic.plan.search import NO_DIVIDING_LAYOUT, PlanResult
from mosaic.plan.sweep import SweepPoint
from mosaic.plan.uncertainty import Uncertainty
from mosaic.units import counted

DIVISIBILITY_CATEGORY = NO_DIVIDING_LAYOUT
WINDOW_CATEGORY = "window too short for tpp_min·N_act tokens"
HEADROOM_CATEGORY = "no layout fits the planning headroom (the closest under device memory)"


def reason_category(reason: str) -> str:
    """A short label for an infeasibility reason."""
    if "out of memory" in reason:
        return "no layout fits device memory"
    if "planning headroom" in reason:  # under the device's memory, over the usable share
        return HEADROOM_CATEGORY
    if "divisibility" in reason or "no layout candidates" in reason:
        return DIVISIBILITY_CATEGORY
    if "window delivers" in reason:
        return WINDOW_CATEGORY
    return reason


def infeasible_summary(result: PlanResult) -> dict[str, int]:
    return dict(Counter(reason_category(r["reason"]) for r in result.infeasible()))


# the levers for each reason, merged into one list when several reasons apply (a trial read
# "add nodes or days, or lower --tpp; add nodes or allow more memory")
# A smaller grid is a lever of both reasons a cluster is too small: the default grid is the
# paper's 256-GPU envelope (a trial on 2 nodes found --q 4,6,8 by itself)
SMALLER_MODELS = "search smaller models (--q, --max-total-params)"
_LEVERS = {
    "no layout fits device memory": ("add nodes", SMALLER_MODELS,
                                      "allow more memory (--memory-fraction)"),
    HEADROOM_CATEGORY: ("allow more memory (--memory-fraction)", "add nodes", SMALLER_MODELS),
    DIVISIBILITY_CATEGORY: (
        "choose --nodes, --gpus-per-node and --global-batch that the layouts can divide",),
    WINDOW_CATEGORY: ("add nodes", "add days", "lower --tpp", SMALLER_MODELS),
}
_DEFAULT_LEVERS = ("add nodes", "add days")


def _budget_sets_window(envelope: Any) -> bool:
    """A dollar budget, not a shorter --days beside it, sets the window: its lever is the
    budget."""
    return envelope.dollar_budget is not None and envelope.window_from_budget


def _advice(categories: list[str], narrowed_layouts: str = "",
            dollar_budget: bool = False) -> str:
    """The levers of every reason, each once: 'add nodes, add days or lower --tpp'. Under a
    dollar budget the window grows with the budget; layout options that narrowed the
    search are a lever of a divisibility reason."""
    levers = [lever for category in categories
              for lever in _LEVERS.get(category, _DEFAULT_LEVERS)]
    if dollar_budget:
        levers = ["raise --budget-usd" if lever == "add days" else lever for lever in levers]
        if categories == [WINDOW_CATEGORY]:  # fixed GPU-hours: more nodes buy no tokens
            levers.remove("add nodes")
    if narrowed_layouts and DIVISIBILITY_CATEGORY in categories:
        levers.insert(0, f"loosen {narrowed_layouts}")
    levers = list(dict.fromkeys(levers))
    return levers[0] if len(levers) == 1 else ", ".join(levers[:-1]) + " or " + levers[-1]


def _example(reason: str) -> str | None:
    """The broken rule a reason names: its '(e.g. ...)', or the rule of a layout axis left
    without candidates ('no layout candidates: vpp > 1 needs pp > 1; ...')."""
    if "(e.g. " in reason:
        return reason[reason.index("(e.g. ") + 1:-1]
    if reason.startswith("no layout candidates: "):
        return reason.removeprefix("no layout candidates: ").split(";")[0]
    return None


def _closest_window_example(rows: list[dict[str, Any]]) -> str | None:
    """The geometry nearest to trainable among those the window is too short for (the most
    of its tpp_min·N_act the window gives it), with the tokens it would get: a fixed model
    read only 'window too short' and could not tell 10% short from 10x (a trial)."""
    short = [r for r in rows if "budget_tokens" in r and "min_tokens" in r]
    if not short:
        return None
    row = max(short, key=lambda r: r["budget_tokens"] / r["min_tokens"])
    return (f"closest: {geometry_label(row)}, whose best layout gets "
            f"{_share_of_needed(row['budget_tokens'], row['min_tokens'], 'in the window')}")


def _share_of_needed(tokens: float, needed: float, where: str = "") -> str:
    """'1.2e+12 tokens[ where], 0.24x the 5e+12 (tpp_min·N_act) it needs': the tokens a
    window gives a geometry against the fewest it must train on (one wording for the plan's
    and the peak bound's untrainable messages)."""
    return (f"{tokens:.3g} tokens{' ' + where if where else ''}, {tokens / needed:.2g}x the "
            f"{needed:.3g} (tpp_min·N_act) it needs")


# The most a global batch is advised to grow (x) to let the data-parallel group span the
# cluster; beyond it the advice is fewer nodes (a batch 4x larger already changes the run).
MAX_BATCH_GROWTH_ADVISED = 4


def untrainable_message(result: PlanResult) -> str:
    """Why no geometry of a search is trainable, each reason with its count, one example
    of a broken divisibility rule, and what to change for each reason; on a cluster whose
    goodput is 0, that alone (no layout was searched: none would train)."""
    envelope = result.envelope
    nodes, days = counted(envelope.n_nodes, "node"), counted(envelope.days, "day")
    no_progress = envelope.goodput.no_progress_reason(envelope.n_devices)
    if no_progress is not None:
        return f"nothing is trainable on {nodes} in {days}: {no_progress}"
    rows = result.infeasible()
    reasons = [r["reason"] for r in rows]
    counts = Counter(reason_category(r) for r in reasons)
    examples = {reason_category(r): example  # the first of each category
                for r in reversed(reasons) if (example := _example(r)) is not None}
    if (closest := _closest_window_example(rows)) is not None:
        examples[WINDOW_CATEGORY] = closest
    summary = "; ".join(
        f"{n} geometr{'y' if n == 1 else 'ies'}: {category}"
        + (f" ({examples[category]})" if category in examples else "")
        for category, n in counts.items())
    advice = _advice(list(counts), layout_limits_flags(result.throughput.limits.to_dict()),
                     _budget_sets_window(envelope))
    devices, batch = envelope.n_devices, envelope.global_batch
    if DIVISIBILITY_CATEGORY in counts and batch % devices:
        # dp = every GPU (tp = pp = cp = 1) needs dp·micro_batch | global_batch: the nearest
        # multiple of the device count lets the data-parallel group span the cluster
        nearest = max(devices, round(batch / devices) * devices)
        if nearest <= MAX_BATCH_GROWTH_ADVISED * batch:
            advice += (f" (e.g. --global-batch {nearest}, a multiple of the {devices} GPUs; "
                       f"{batch} shares only {math.gcd(batch, devices)} with it)")
        else:
            # a batch grown far past its own would change the run (a trial followed
            # --global-batch 800000 for 100,000 nodes: 1.6 B tokens a step, done in no time);
            # fewer nodes whose GPUs divide the batch keep it
            per_node = envelope.system.gpus_per_node
            fitting = max((n for n in range(1, envelope.n_nodes + 1)
                           if batch % (n * per_node) == 0), default=None)
            advice += (f" (the {batch}-sequence batch cannot spread data parallelism over "
                       f"{devices} GPUs"
                       + (f": e.g. --nodes {fitting}, whose {fitting * per_node} GPUs divide "
                          "it)" if fitting is not None else ")"))
    return f"no geometry of the grid is trainable on {nodes} in {days} ({summary}); {advice}"


def window_untrainable_message(envelope: Any, space: Any, grid: Any, bound: Any) -> str:
    """Why no geometry of ``grid`` can train even at 100% of the GEMM lane's peak
    (plan.peak_bound ``bound``): the most tokens the window gives the geometry that needs
    the fewest, against its tpp_min·N_act, and the levers."""
    needed = space.tpp_min * grid.n_active
    closest = int(np.argmax(bound.tokens / needed))
    nodes, days = counted(envelope.n_nodes, "node"), counted(envelope.days, "day")
    return (f"no geometry of the grid is trainable on {nodes} in {days}: even with every "
            f"GEMM at the GPUs' full peak the window gives the closest geometry "
            f"({geometry_label(grid_row_identity(grid, closest))}) "
            f"{_share_of_needed(bound.tokens[closest], needed[closest])}; "
            + _advice([WINDOW_CATEGORY], "", _budget_sets_window(envelope)))


# --- JSON documents -------------------------------------------------------------------
def cost_document(cost: RunCost) -> dict[str, Any]:
    """GPU-hours and, when priced, the cost in USD of the days the run trains, those of the
    whole window, and the dollar budget (plan.cost.RunCost)."""
    return {"gpu_hours": cost.gpu_hours, "price_usd_per_gpu_hour": cost.price_usd_per_gpu_hour,
            "cost_usd": cost.cost_usd, "train_days": cost.train_days,
            "window_gpu_hours": cost.window_gpu_hours,
            "window_cost_usd": cost.window_cost_usd,
            **({"budget_usd": cost.budget_usd} if cost.budget_usd is not None else {})}


def cost_text(document: dict[str, Any], window_days: float) -> tuple[str, str | None]:
    """The GPU-hours and cost rows' text from a cost document (:func:`cost_document`):
    '34,406 (the 5.6 days the run trains; the 65.1-day window: 400,000)', and the cost
    with its price, the window's (where the run ends early) and the budget beside it; None
    for the cost unpriced."""
    days = document.get("train_days", window_days)
    early = days < window_days and "window_gpu_hours" in document
    span = (f"the {days:.3g} days the run trains, D held at tpp_max; the {window_days:.3g}-day "
            "window: ")
    hours = f"{document['gpu_hours']:,.0f}" + (
        f" ({span}{document['window_gpu_hours']:,.0f})" if early else "")
    if document.get("cost_usd") is None:
        return hours, None
    beside = []
    budget, window = document.get("budget_usd"), document.get("window_cost_usd")
    if early and window is not None and window != budget:
        beside.append(f"the {days:.3g} days the run trains; the whole window: {window:,.0f}")
    elif early:
        beside.append(f"the {days:.3g} days the run trains")
    if budget is not None:
        beside.append(f"budget {budget:,.0f}")
    return hours, (f"{document['cost_usd']:,.0f} at {document['price_usd_per_gpu_hour']:g} "
                   "USD per GPU-hour" + (f" ({'; '.join(beside)})" if beside else ""))


def comparison_document(comparison: ModelFlopsComparison, result: PlanResult
                        ) -> dict[str, Any]:
    grid = result.grid
    row = comparison.model_flops_row
    continuous = comparison.continuous
    return {
        "c_model_flops": comparison.c_model_flops,
        "split_factor": comparison.split_factor,
        "continuous_optimum": {
            "sparsity": continuous.sparsity, "n_total": continuous.n_total,
            "n_active": continuous.n_active, "tokens": continuous.tokens,
            "loss": continuous.loss, "at_sparsity_boundary": continuous.at_boundary,
            "sparsity_range": list(continuous.sparsity_range),
            # Eq. 16 is unconstrained in N: it can lie above the search's model caps
            "outside_caps": result.space.broken_caps(
                n_total=continuous.n_total, n_active=continuous.n_active,
                sparsity=continuous.sparsity, tokens=continuous.tokens),
        },
        "model_flops_geometry": {
            "q": int(grid.q[row]), "layers": int(grid.layers[row]),
            "d_model": int(grid.d_model[row]), "experts": int(grid.experts[row]),
            "top_k": int(grid.top_k[row]), "split_factor": int(grid.split_factor[row]),
            "sparsity": float(grid.sparsity[row]), "n_active": float(grid.n_active[row]),
            "deliverable_flops": comparison.model_flops_deliverable_flops,
            "prescription_feasible": comparison.prescription_feasible,
            # the prescription's D/N_act = C_model / (6·N_act²), and the search's floor
            "tokens_per_active_param": comparison.c_model_flops
            / (FLOPS_PER_PARAM_TOKEN * float(grid.n_active[row]) ** 2),
            "tpp_min": result.space.tpp_min,
        },
        "s_feas_max": comparison.s_feas_max,
        "cluster_sparsity": (None if comparison.cluster_row is None
                             else float(grid.sparsity[comparison.cluster_row])),
        "loss_gap_nats": comparison.loss_gap_nats,
    }


def exponents_document(exponents: AllocationExponents) -> dict[str, Any]:
    return {
        "omega_n": exponents.omega_n, "omega_s": exponents.omega_s,
        "omega_g": exponents.omega_g, "points": exponents.points,
        "p": exponents.p, "rho": exponents.rho, "g": exponents.g, "nu": exponents.nu,
        "exponents_vs_c_peak": {
            "n_total": exponents.n_total_exponent,
            "active_fraction": exponents.active_fraction_exponent,
            "tokens": exponents.tokens_exponent,
            "split_factor": exponents.split_factor_exponent,
        },
        "interior_conditions": exponents.interior,
        **({"reason": f"local MFU slopes need at least {MIN_SLOPE_POINTS} feasible geometries "
                      f"around the optimum whose axis varies ({exponents.points} here); "
                      "unidentified slopes and the exponents built on them are null"}
           if any(math.isnan(v) for v in (exponents.omega_n, exponents.omega_s,
                                          exponents.omega_g, exponents.nu)) else {}),
    }


GEOMETRY_AXES = ("q", "layers", "d_model", "experts", "top_k", "split_factor")


def geometry_identity(result: PlanResult, row: int) -> dict[str, int]:
    """The axes that name a candidate geometry (GEOMETRY_AXES, grid field names): the
    ladder rung q (0 for a backbone grid), its depth and width, E, K and G."""
    return grid_row_identity(result.grid, row)


def grid_row_identity(grid: Any, row: int) -> dict[str, int]:
    """:func:`geometry_identity` of row ``row`` of a ladder grid."""
    return {axis: int(getattr(grid, axis)[row]) for axis in GEOMETRY_AXES}


def geometry_label(candidate: dict[str, Any]) -> str:
    """'q=12 E=96 K=2 G=4' for a ladder rung, 'L=32 d=3584 E=256 K=8 G=9' for a backbone
    variant (q = 0), from a candidate document."""
    shape = (f"q={candidate['q']}" if candidate.get("q") else
             f"L={candidate['layers']} d={candidate['d_model']}")
    return (f"{shape} E={candidate['experts']} K={candidate['top_k']} "
            f"G={candidate['split_factor']}")


def uncertainty_document(uncertainty: Uncertainty, result: PlanResult) -> dict[str, Any]:
    def short(row: int) -> dict[str, Any]:
        return {**geometry_identity(result, row), **uncertainty.summary(row)}

    return {
        "samples": uncertainty.samples,
        "level": uncertainty.level,
        "robust_choice_rule": "minimum expected loss over the samples",
        "sources": list(uncertainty.sources),
        "robust_choice": short(uncertainty.robust_row),
        "minimax_regret_choice": short(uncertainty.minimax_row),
        "optimum": short(int(result.ranking[0])),
    }


def cheapest_document(cheapest: CheapestPlan) -> dict[str, Any]:
    def option(o: Any) -> dict[str, Any]:
        row = o.result.optimum_index
        return {"nodes": o.n_nodes, "days": o.days, **cost_document(o.cost), "loss": o.loss,
                "optimum": None if row is None else o.result.candidate(row),
                **({"reason": "nothing trainable at this budget"} if row is None else {})}

    within = cheapest.choice_within_window
    return {
        "target_loss": cheapest.target_loss,
        "choice": None if cheapest.choice is None else option(cheapest.choice),
        "window_days": cheapest.window_days,
        **({} if within is None else {"choice_within_window": option(within)}),
        "options": [{k: v for k, v in option(o).items() if k != "optimum"}
                    for o in cheapest.options],
    }


def budget_train_days(option: Mapping[str, Any]) -> float:
    """The days a budget's run trains (a :func:`cheapest_document` option: its window
    unless it stops early at tpp_max), which the terminal, the HTML page and the
    within --days row read."""
    trained = option.get("train_days")
    return option["days"] if trained is None else min(trained, option["days"])


def cheapest_within_window_row(cheapest: Mapping[str, Any]) -> tuple[str, str] | None:
    """Where the cheapest budget (:func:`cheapest_document`) trains longer than the plan's
    --days: the cheapest within them, or that none evaluated reaches the target within
    them (the terminal's and the HTML page's row); None where the choice fits."""
    window, choice = cheapest.get("window_days"), cheapest.get("choice")
    if window is None or choice is None or budget_train_days(choice) <= window:
        return None
    label = f"within --days {window:g}"
    within = cheapest.get("choice_within_window")
    if within is None:
        if not any(budget_train_days(o) <= window for o in cheapest.get("options", [])):
            # a --cheapest-days list above --days: more nodes would not be evaluated there
            return label, (f"no budget evaluated trains within them (--cheapest-days with "
                           f"windows up to {window:g} days)")
        return label, "no budget evaluated reaches the target (more nodes: --cheapest-nodes)"
    spent = (f"{within['cost_usd']:,.0f} USD" if within.get("cost_usd") is not None
             else f"{within['gpu_hours']:,.0f} GPU-hours")
    same = (" (the same cost)" if same_cost_key(within["gpu_hours"])
            == same_cost_key(choice["gpu_hours"]) else "")
    trained = budget_train_days(within)
    stops = "" if trained >= within["days"] else f" ({trained:.3g} days trained)"
    return label, (f"{within['nodes']} nodes × {within['days']:.4g} days{stops}, loss "
                   f"{within['loss']:.4f}, {spent}{same}")


def plan_document(result: PlanResult, cost: RunCost) -> dict[str, Any]:
    """The core of `mosaic plan --json` (analysis blocks are added by the caller)."""
    envelope = result.envelope
    table = result.throughput
    row = result.optimum_index
    limits = table.limits.to_dict()
    return {
        "envelope": envelope.to_dict(),
        "search_space": result.space.to_dict(),
        # the layout options the plan narrowed (--pp, --sharding, ...) and its micro-batch
        # sizes (Table 3's 1, 2, 4, not `layouts`' default up to 8): its job file keeps them
        # (export --to yaml writes them to the search block `mosaic layouts` reads)
        "layout_limits": dict(_narrowed(limits)) | {"micro_batches": limits["micro_batches"]},
        "c_peak_flops": envelope.c_peak_flops,
        **cost_document(cost),
        "counts": {
            "geometries": len(result.grid),
            "trainable": int(result.feasible.sum()),
            "plans_evaluated": table.plans_evaluated,
            "plans_timed": table.plans_timed,
        },
        "optimum": None if row is None else result.candidate(row),
        "candidates": result.candidates(),
        "infeasible_summary": infeasible_summary(result),
        "infeasible": result.infeasible(),
    }


def sweep_document(points: list[SweepPoint], price_per_gpu_hour: float | None = None
                   ) -> dict[str, Any]:
    """The sweep's JSON: each point's optimum, and its cost in USD where a price per
    GPU-hour is given (plan.cost.plan_cost: the GPU-hours of the days its optimum trains x
    price; checked by the caller)."""
    def point(p: SweepPoint) -> dict[str, Any]:
        row = p.result.optimum_index
        # the days its optimum trains (plan.cost.plan_cost, as `plan`'s cost)
        cost = plan_cost(p.result, price_per_gpu_hour)
        envelope = p.result.envelope.to_dict()
        return ({} if cost.cost_usd is None else {"cost_usd": cost.cost_usd}) | {
            p.axis: int(p.value) if p.axis == "nodes" else p.value,
            "days": p.result.envelope.days,  # per node count under a dollar budget
            # which of --budget-usd and --days sets this point's window (binds)
            **({"dollar_budget": envelope["dollar_budget"]}
               if "dollar_budget" in envelope else {}),
            "c_peak_flops": p.result.envelope.c_peak_flops,
            "gpu_hours": cost.gpu_hours,
            **({"train_days": cost.train_days, "window_gpu_hours": cost.window_gpu_hours,
                **({} if cost.window_cost_usd is None
                   else {"window_cost_usd": cost.window_cost_usd})}
               if cost.ends_early else {}),
            # Young-Daly goodput changes with the node count (a trial found it only at the
            # first point's envelope)
            "goodput": envelope["goodput"]["goodput"],
            "optimum": None if row is None else p.result.candidate(row),
            "best_per_split": {str(g): p.result.candidate(r)
                               for g, r in p.best_per_split.items()},
        } | ({} if row is not None else {"untrainable": untrainable_message(p.result)})

    return {"axis": points[0].axis, "envelope": points[0].result.envelope.to_dict(),
            # the envelope is the first point's: each point states its own swept value,
            # days, GPU-hours and goodput
            "envelope_of_point": 0,
            **({} if price_per_gpu_hour is None
               else {"price_usd_per_gpu_hour": price_per_gpu_hour}),
            "search_space": points[0].result.space.to_dict(),
            "layout_limits": points[0].result.throughput.limits.to_dict(),
            "points": [point(p) for p in points]}


# The footnote mark of a sweep point whose GPU-hours and cost count the days its run trains,
# fewer than its window's (D held at tpp_max: plan.cost.plan_cost); a sweep table gave no
# sign of it (a review)
EARLY_STOP_MARK = "\u2020"


def sweep_point_stops_early(point: Mapping[str, Any]) -> bool:
    """A sweep point (:func:`sweep_document`) whose run stops before its window ends."""
    return "train_days" in point


def _axis_values_text(axis: str, points: list[Mapping[str, Any]]) -> str:
    return f"{axis} {', '.join(f'{p[axis]:g}' for p in points)}"


def _sweep_binds(document: Mapping[str, Any]) -> set[str]:
    """Which limits set the windows of a sweep under --budget-usd: 'budget', 'days' or both
    (each point's dollar_budget.binds; a point without its own, the envelope's)."""
    budget = document["envelope"]["dollar_budget"]
    return {(p.get("dollar_budget") or budget).get("binds", "budget")
            for p in document["points"]}


def sweep_budget_text(document: Mapping[str, Any]) -> str | None:
    """The fixed budget of a sweep over node counts under --budget-usd, naming the limit
    that binds: '960 USD (2 USD per GPU-hour)'; '2 days (--days binds: 960 USD at 2 USD
    per GPU-hour buys more)' where --days is the shorter window at every point; '960 USD
    (...) or 2 days, whichever is shorter' where each binds somewhere (a sweep's title said
    'at 960 USD' where --days bound); None without a dollar budget."""
    budget = document["envelope"].get("dollar_budget")
    if budget is None:
        return None
    usd = f"{budget['usd']:,.0f} USD ({budget['price_usd_per_gpu_hour']:g} USD per GPU-hour)"
    binds = _sweep_binds(document)
    if binds == {"budget"}:
        return usd
    days = f"{budget['max_days']:g} days"
    if binds == {"days"}:
        return (f"{days} (--days binds: {budget['usd']:,.0f} USD at "
                f"{budget['price_usd_per_gpu_hour']:g} USD per GPU-hour buys more)")
    return f"{usd} or {days}, whichever is shorter"


def sweep_fixed_text(document: Mapping[str, Any]) -> str:
    """What a sweep holds while its axis varies (paper Sec. 7.4, Fig. 11), for the
    terminal table's title and the HTML report's "Fixed" line alike: the cluster of a sweep
    over days ('32 × p6-b200.48xlarge'); the window and node type of one over node counts
    ('30 days on p6-b200.48xlarge'), or its dollar budget's limit that binds
    (:func:`sweep_budget_text`). The terminal title said neither (a review)."""
    e = document["envelope"]
    network = f" ({e['network']})" if "network" in e else ""
    if document["axis"] == "days":
        return f"{e['nodes']} × {e['system']}{network}"
    budget = e.get("dollar_budget")
    if budget is None:
        return f"{e['days']:g} days on {e['system']}{network}"
    # the limit that binds (a sweep said '960 USD' where --days bound)
    buys = "budget" in _sweep_binds(document)
    return (f"{sweep_budget_text(document)}, on {e['system']}{network}"
            + (" (each node count the window it buys)" if buys else ""))


def sweep_cost_notes(document: Mapping[str, Any]) -> list[str]:
    """The lines under a sweep table: which limit sets each point's window where both
    --days and --budget-usd are given (plan.envelope.DollarBudget.binds), and the points
    whose GPU-hours and cost count the days their run trains (marked
    :data:`EARLY_STOP_MARK`), with the window's beside them."""
    axis, points = document["axis"], document["points"]
    lines = []
    budget = document["envelope"].get("dollar_budget")
    if budget is not None and budget.get("max_days") is not None:
        by_days = [p for p in points if (p.get("dollar_budget") or {}).get("binds") == "days"]
        by_budget = [p for p in points if p not in by_days]
        parts = []
        if by_days:
            bought = ", ".join(f"{p['dollar_budget']['budget_days']:.3g}" for p in by_days)
            parts.append(f"--days {budget['max_days']:g} binds at "
                         f"{_axis_values_text(axis, by_days)} ({budget['usd']:,.0f} USD buys "
                         f"{bought} days there)")
        if by_budget:
            parts.append(f"--budget-usd {budget['usd']:,.0f} binds at "
                         f"{_axis_values_text(axis, by_budget)} (--days {budget['max_days']:g} "
                         "is longer)")
        lines.append("window: " + "; ".join(parts))
    early = [p for p in points if sweep_point_stops_early(p)]
    if early:
        each = "; ".join(
            f"{axis} {p[axis]:g}: {p['train_days']:.3g} of {p['days']:.3g} days (the window: "
            f"{p['window_gpu_hours']:,.0f} GPU-hours"
            + (f", {p['window_cost_usd']:,.0f} USD" if "window_cost_usd" in p else "") + ")"
            for p in early)
        lines.append(f"{EARLY_STOP_MARK}: GPU-hours and cost count the days the run trains, "
                     f"D held at the tokens-per-parameter cap (--tpp), not the whole window: "
                     f"{each}")
    return lines


def pick_deliverable_text(pick: dict[str, Any], c_model_flops: float) -> str:
    """Whether the model-FLOPs pick's C_model fits the window (Eq. 3: C_model ≤
    C_deliverable), both figures named: 'yes: the window delivers 9.24e+22 FLOP on this pick,
    at least the 8e+22 FLOP (C_model) it needs', or 'no: ... short of ...'; 'no: none of its
    layouts fits this cluster' where it delivers nothing. (It read 'no (0 FLOP)', a bare
    FLOP figure a trial could not place, then 'yes: the window delivers 1.26e+23 of its
    9.51e+22 FLOP', which read as a contradiction.)"""
    if not pick["prescription_feasible"] and not pick["deliverable_flops"]:
        return "no: none of its layouts fits this cluster"
    feasible = pick["prescription_feasible"]
    text = (f"{'yes' if feasible else 'no'}: the window delivers "
            f"{pick['deliverable_flops']:.3g} FLOP on this pick, "
            f"{'at least' if feasible else 'short of'} the {c_model_flops:.3g} FLOP (C_model) "
            "it needs")
    tpp, tpp_min = pick.get("tokens_per_active_param"), pick.get("tpp_min")
    if tpp is not None and tpp_min is not None and tpp < tpp_min:
        # Eq. 16 has no token floor, the search has (a trial read "yes" beside the same
        # geometry listed as untrainable for too few tokens)
        text += (f", at D/N_act = {tpp:.3g}, below the search's tpp_min {tpp_min:g} (so "
                 "the cluster search does not train it)")
    return text


def sampled_uncertainties(sources: list[str] | None) -> str:
    """'law', 'throughput' or 'law and throughput': what a plan's uncertainty samples drew,
    from its ``uncertainty.sources`` lines ('law: ...', 'performance: ...'); the law's alone
    in plan files that do not say."""
    kinds = [kind for kind, prefix in (("law", "law"), ("throughput", "performance"))
             if any(line.startswith(prefix) for line in sources or [])]
    return " and ".join(kinds) or "law"


def loss_gap_text(gap: float | None, pick: dict[str, Any]) -> str:
    """The model-FLOPs pick's loss gap to the optimum, or why there is none."""
    if gap is not None:
        return f"{gap:+.4f}"
    if not pick["deliverable_flops"]:
        return "- (the pick cannot train on this cluster)"
    return "-"


def sweep_extrapolation_rows(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(budget, message) per law input of a sweep point's optimum outside the law's fitted
    range (``optimum.extrapolation``, written by `mosaic sweep`)."""
    axis = document["axis"]
    return [(f"{axis} {point[axis]:g}", flag["message"])
            for point in document["points"]
            for flag in ((point.get("optimum") or {}).get("extrapolation") or {}).get(
                "flags", [])]


# what a precision covers when only the routed experts run at it (quantised_gemms)
ROUTED_EXPERTS_ONLY_TEXT = " on the routed experts, bf16 elsewhere"


def optimizer_text(envelope: Mapping[str, Any]) -> str:
    """'adamw, fp32 state': every candidate's optimizer and its state's dtype, of a plan's
    envelope (a plan written before it stated them costed AdamW in fp32)."""
    return (f"{envelope.get('optimizer', 'adamw')}, "
            f"{envelope.get('optimizer_dtype', 'fp32')} state")


def precision_text(document: Mapping[str, Any]) -> str:
    """'bf16', 'fp8 (mxfp8)', 'fp4 (nvfp4)' or 'fp8 (mxfp8) on the routed experts, bf16
    elsewhere': the lane, its recipe and the GEMMs it runs, of a plan's envelope or a
    prediction document."""
    lane = str(document["precision"])
    recipe = document.get("fp8_recipe")
    if recipe in (None, "none"):
        recipe = "nvfp4" if lane == "fp4" else None
    return (lane + (f" ({recipe})" if recipe else "")
            + (ROUTED_EXPERTS_ONLY_TEXT
               if document.get("quantised_gemms") == "routed_experts" else ""))


def sharding_text(plan: Mapping[str, Any]) -> str:
    """A layout's sharding mode, HSDP with its shard group ('hsdp/8'; a trial found the
    shard size only in `layouts`)."""
    if plan.get("sharding") == "hsdp" and plan.get("hsdp_shard"):
        return f"hsdp/{plan['hsdp_shard']}"
    return str(plan["sharding"])


# a layout's degrees and micro-batch in the order every layout line prints them
LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "micro_batch")
# the compact spelling's degrees: parallel axes first, data parallelism last
COMPACT_DEGREE_KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")


def layout_line(plan: Mapping[str, Any]) -> str:
    """'tp=1, pp=16, ..., micro_batch=2, hsdp/8, ckpt=full' (`perf`, `explain`, `compare`);
    keys the plan lacks are left out."""
    parts = [f"{key}={plan[key]}" for key in LAYOUT_KEYS if key in plan]
    if "sharding" in plan:
        parts.append(sharding_text(plan))
    if "checkpointing" in plan:
        parts.append(f"ckpt={plan['checkpointing']}")
    return ", ".join(parts)


def layout_text(plan: Mapping[str, Any] | None, compact: bool = False) -> str:
    """'tp1 pp4 ... dp8 mb4 zero1 ckpt=none' (`plan`, the HTML charts); compact drops degrees
    of 1 (never dp) and ckpt=none; keys the plan lacks are left out."""
    if plan is None:
        return "-"
    parts = [f"{key}{plan[key]}" for key in COMPACT_DEGREE_KEYS
             if key in plan and (not compact or plan[key] != 1 or key == "dp")]
    if "micro_batch" in plan:
        parts.append(f"mb{plan['micro_batch']}")
    if "sharding" in plan:
        parts.append(sharding_text(plan))
    if "checkpointing" in plan and (not compact or plan["checkpointing"] != "none"):
        parts.append(f"ckpt={plan['checkpointing']}")
    return " ".join(parts)


def is_ladder(space: dict[str, Any]) -> bool:
    """Whether a plan's grid (``SearchSpace.to_dict()``) is the paper's ladder, whose q names
    each geometry, rather than a --backbone's variants (q = 0 for all, named by depth and
    width: the terminal's tables show L×d there, cli/plan_render.print_ranking)."""
    return "backbone" not in space


def grid_vocab(space: dict[str, Any]) -> int:
    """The vocabulary every geometry of a plan's grid shares: the ladder's GPT-2 BPE, or the
    backbone's (``SearchSpace.to_dict()``)."""
    return int(space["backbone"]["vocab"]) if "backbone" in space else PAPER_VOCAB


def grid_template_text(space: dict[str, Any]) -> str:
    """What every geometry of the grid shares beyond the searched axes: the ladder's
    vocabulary, shared experts, dense blocks and router (Sec. 3.1, Appendix A.1), or the
    backbone's (a trial found the 50,257-token vocabulary only in an export header)."""
    if "backbone" not in space:
        return (f"the paper's ladder (Sec. 7.1): vocabulary {grid_vocab(space):,} (GPT-2 BPE), "
                f"{PAPER_SHARED_EXPERTS} shared expert, {PAPER_DENSE_LAYERS} dense first "
                "block, Alg. 1 router; --backbone MODEL plans variants of your own model")
    model = space["backbone"]
    moe = model.get("moe") or {}
    return (f"variants of the --backbone model: vocabulary {grid_vocab(space):,}, "
            f"{moe.get('shared_experts', 0)} shared expert(s), "
            f"{moe.get('dense_layers', 0)} dense block(s)")


def model_limits_text(space: dict[str, Any]) -> str:
    """'N_tot <= 300 B; N_act <= 12 B' from a search space's caps, and its unique data
    ('' when none is set)."""
    parts = [f"{label} <= {space[name] / 1e9:.4g} B" for name, label in
             (("max_total_params", "N_tot"), ("max_active_params", "N_act")) if name in space]
    if "s_max" in space:
        parts.append(f"S <= {space['s_max']:g}")
    if "unique_tokens" in space:
        parts.append(f"{space['unique_tokens'] / 1e12:.4g} T unique tokens (repeats count "
                     "as D', Muennighoff et al. 2023)")
    return "; ".join(parts)


def layout_limits_text(limits: dict[str, Any], *, only_narrowed: bool = True) -> str:
    """The layout pins and bounds a plan searched under ('pp 1; sharding zero1, fsdp'); with
    ``only_narrowed``, what Table 3's search allows anyway is left out ('' when nothing is
    narrowed)."""
    shown = _narrowed(limits) if only_narrowed else limits.items()
    return "; ".join(f"{name.replace('_', ' ')} {_values_text(value)}" for name, value in shown)


def layout_limits_flags(limits: dict[str, Any]) -> str:
    """The narrowed layout limits as the options that set them ('--pp 1 --vpp 2')."""
    flags = {"micro_batches": "mbs"}
    return " ".join(f"--{flags.get(name, name).replace('_', '-')} "
                    f"{_values_text(value).replace(', ', ',')}"
                    for name, value in _narrowed(limits))


def _narrowed(limits: dict[str, Any]) -> list[tuple[str, Any]]:
    """The (name, value) of the limits Table 3's layout search does not already hold."""
    default = TABLE3_LAYOUT_LIMITS.to_dict()
    return [(name, value) for name, value in limits.items() if default.get(name) != value]


def _values_text(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)
