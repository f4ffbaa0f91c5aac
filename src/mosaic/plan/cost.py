"""What a budget costs, and the cheapest budget whose optimum reaches a target loss.

GPU-hours = N_dev · T / 3600 (allocated time, whatever the goodput), where T is the days the
plan's run takes: the window T_train, or less when its D is held at tpp_max and the run
ends early (the window's GPU-hours are kept beside them); cost in USD =
GPU-hours · price in USD per GPU-hour (prices are taken to be USD, as cloud list prices are
quoted, and every output names the currency). The cheapest plan for a target loss L is the
budget (nodes × days) of the smallest GPU-hours (of the days its optimum trains, as `plan`
costs it), among a given set, whose MOSAIC optimum has predicted loss ≤ L; budgets of equal
GPU-hours go to the lower loss, then the shorter window, then fewer nodes (128 nodes x 30
days and 64 x 60 cost the same; the longer window trains more tokens per parameter on fewer
GPUs and can reach a lower loss). Stopping a run once its loss reaches L is not modelled:
the law gives the final loss of a run whose WSD schedule decays to zero over its last 20% of
D (paper App. A.2), not its loss part-way, so a shorter run is a shorter window, which the
search tries (:func:`refined_windows`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from mosaic.errors import MosaicInputError, MosaicNote
from mosaic.law import ScalingLaw
from mosaic.limits import check_range
from mosaic.perf.calibration import Calibration
from mosaic.perf.layouts import LayoutLimits
from mosaic.plan.envelope import Envelope, SearchSpace
from mosaic.plan.peak_bound import peak_bound
from mosaic.plan.search import PlanResult, ProgressFn, ThroughputTable, score
from mosaic.plan.sweep import sweep_days
from mosaic.units import HOURS_PER_DAY, counted


@dataclass(frozen=True)
class RunCost:
    """GPU-hours and, when priced, their cost in USD: of the days the run trains
    (``gpu_hours``, ``cost_usd``: the whole window unless the plan's D is held at tpp_max
    and the run ends early) and of the whole window (``window_*``); ``budget_usd`` the
    dollar budget (``--budget-usd``), if any, shown beside them."""

    gpu_hours: float
    price_usd_per_gpu_hour: float | None
    cost_usd: float | None
    train_days: float
    window_gpu_hours: float
    window_cost_usd: float | None
    budget_usd: float | None = None

    @property
    def ends_early(self) -> bool:
        """The run stops before the window ends (its D is held at tpp_max)."""
        return self.gpu_hours < self.window_gpu_hours


# Above this a price per GPU-hour is more likely a node's (8 GPUs) than one GPU's: AWS's
# on-demand p5.48xlarge (8 H100) listed at 98.32 USD an hour at launch, 12.29 per GPU-hour,
# and no single-GPU list price has come near 40 (a trial gave 98.32 per GPU-hour).
MAX_PLAUSIBLE_USD_PER_GPU_HOUR = 40.0


def check_price(price_per_gpu_hour: float | None,
                gpus_per_node: int | None = None, *, note: bool = True) -> float | None:
    """A positive, finite price per GPU-hour; one above any GPU's list price is noted as a
    likely per-node price (kept: a user may mean it), divided by ``gpus_per_node`` where the
    node type is known, else by the 8 GPUs of an HGX host and the 4 of an NVL72 tray (a trial's
    4-GPU GB300 tray was divided by 8); ``note=False``: the check alone, for a price the
    command has already checked (a sweep noted it once per point)."""
    if price_per_gpu_hour is None:
        return None
    if not (math.isfinite(price_per_gpu_hour) and price_per_gpu_hour > 0):
        raise MosaicInputError(
            f"price per GPU-hour must be a positive number, got {price_per_gpu_hour!r}")
    if note and price_per_gpu_hour > MAX_PLAUSIBLE_USD_PER_GPU_HOUR:
        per_gpu = (f"divided by its {gpus_per_node} GPUs it is "
                   f"{price_per_gpu_hour / gpus_per_node:.4g}" if gpus_per_node else
                   f"divided by the 8 GPUs of an HGX node it is {price_per_gpu_hour / 8:.4g}, "
                   f"by the 4 of an NVL72 tray {price_per_gpu_hour / 4:.4g}")
        warnings.warn(
            f"a price of {price_per_gpu_hour:g} USD per GPU-hour is above any GPU's list "
            f"price (under {MAX_PLAUSIBLE_USD_PER_GPU_HOUR:g}): a node's price? {per_gpu}",
            MosaicNote, stacklevel=2)
    return float(price_per_gpu_hour)


def run_cost(envelope: Envelope, price_per_gpu_hour: float | None = None,
             train_days: float | None = None) -> RunCost:
    """The cost of ``train_days`` of the envelope's window (None: all of it) on its GPUs,
    and of the whole window (:func:`days_cost`)."""
    # the command notes a likely per-node price once, where it reads it
    price = check_price(price_per_gpu_hour, envelope.system.gpus_per_node, note=False)
    budget = envelope.dollar_budget
    window_cost = None
    if (budget is not None and envelope.window_from_budget
            and price == budget.price_usd_per_gpu_hour):
        # the window is the budget's: its cost is the budget, not the round trip's
        # 999,999.9999 (a trial)
        window_cost = budget.usd
    return days_cost(envelope.n_devices, envelope.days, train_days, price,
                     window_gpu_hours=envelope.gpu_hours, window_cost_usd=window_cost,
                     budget_usd=None if budget is None else budget.usd)


def days_cost(n_devices: int, window_days: float, train_days: float | None,
              price_usd_per_gpu_hour: float | None, *,
              window_gpu_hours: float | None = None, window_cost_usd: float | None = None,
              budget_usd: float | None = None) -> RunCost:
    """The one place a plan's cost is derived, from its numbers (an envelope's, or a plan
    file's that `compare` reads): ``train_days`` of a ``window_days`` window (None: all of
    it) on ``n_devices`` GPUs, and the whole window beside it; ``window_gpu_hours`` and
    ``window_cost_usd``, where given, are the window's as the plan stated them (its
    dollar budget), else N_dev · T_train and that times the price."""
    window_hours = (n_devices * window_days * HOURS_PER_DAY if window_gpu_hours is None
                    else window_gpu_hours)
    days = window_days if train_days is None else min(float(train_days), window_days)
    hours = n_devices * days * HOURS_PER_DAY
    price = price_usd_per_gpu_hour
    window_cost = (None if price is None else
                   window_hours * price if window_cost_usd is None else window_cost_usd)
    cost = (window_cost if days == window_days or price is None else hours * price)
    return RunCost(hours if days < window_days else window_hours, price, cost, days,
                   window_hours, window_cost, budget_usd)


def plan_cost(result: PlanResult, price_per_gpu_hour: float | None = None) -> RunCost:
    """The cost of a plan: the days its optimum trains (``PlanResult.train_days``: a run
    whose D is held at tpp_max stops early and pays for those days only; a trial's budget
    plan printed its whole 1 M USD for a run that stopped after 5.6 of 65.1 days), and the
    window's beside it; the whole window where nothing is trainable."""
    row = result.optimum_index
    return run_cost(result.envelope, price_per_gpu_hour,
                    None if row is None else result.train_days(row))


@dataclass(frozen=True)
class BudgetOption:
    """One (nodes, days) budget: its cost and its MOSAIC optimum."""

    n_nodes: int
    days: float
    cost: RunCost
    result: PlanResult

    @property
    def loss(self) -> float | None:
        return _loss(self.result)


# Windows rescored between a node count's last missing and first reaching window: the
# doubling grid alone priced a trial's answer 1.7x above a window between two of its own
REFINED_WINDOWS = 8


def _loss(result: PlanResult) -> float | None:
    row = result.optimum_index
    return None if row is None else float(result.loss[row])


def refined_windows(losses: Sequence[tuple[float, float | None]], target_loss: float
                    ) -> list[float]:
    """Windows (geometrically spaced) between the longest window of ``(days, optimum
    loss)`` that misses ``target_loss`` and the shortest that reaches it, where both exist:
    the optimum loss never rises with the window on fixed layouts (each geometry's tokens
    grow with it), so the cheapest window at that node count lies between them."""
    reach = [d for d, loss in losses if loss is not None and loss <= target_loss]
    if not reach:
        return []
    first = min(reach)
    missed = [d for d, _ in losses if d < first]
    if not missed:
        return []
    return [float(d) for d in np.geomspace(max(missed), first, REFINED_WINDOWS + 2)[1:-1]]


# Halvings of a node count's shortest window tried when that window already reaches the
# target: without them its cheapest window was never looked for below it (a trial's 8 nodes
# reached the target at 2.5 days, cheaper than the answer, with 5 days the shortest tried)
MAX_WINDOW_HALVINGS = 8


def _windows_below_reach(results: Sequence[PlanResult], target_loss: float,
                         at: Callable[[float], PlanResult]) -> list[PlanResult]:
    """Where the shortest window of ``results`` reaches ``target_loss``, shorter ones (each
    half the last, scored by ``at``) down to the first that misses it, so that
    :func:`refined_windows` has a missing window below the reaching one to refine between."""
    losses = [(r.envelope.days, _loss(r)) for r in results]
    shortest, loss = min(losses, key=lambda pair: pair[0])
    below: list[PlanResult] = []
    days = shortest
    while loss is not None and loss <= target_loss and len(below) < MAX_WINDOW_HALVINGS:
        days /= 2
        below.append(at(days))
        loss = _loss(below[-1])
    return below


def same_cost_key(gpu_hours: float) -> float:
    """GPU-hours to 9 significant digits: budgets of equal cost but for float rounding (the
    same GPU-days split over other node counts and windows) compare equal."""
    return float(f"{gpu_hours:.9g}")


def budget_order_key(gpu_hours: float, loss: float | None, days: float,
                     n_nodes: int) -> tuple[float, float, float, int]:
    """The order budgets are chosen and listed in, cheapest first: equal GPU-hours (but for
    the last bit, :func:`same_cost_key`) cost the same, the lower loss first, then the
    shorter window (windows whose optimum stops early at the same tpp_max cap cost alike:
    the shortest is named), then fewer nodes; None (nothing trainable) last."""
    return (same_cost_key(gpu_hours), math.inf if loss is None else loss, days, n_nodes)


@dataclass(frozen=True)
class CheapestPlan:
    """Every budget evaluated (cheapest first) and the cheapest that reaches the target."""

    target_loss: float
    options: tuple[BudgetOption, ...]
    choice: BudgetOption | None
    # the plan's own window (--days), and the cheapest budget reaching the target within it
    # where the choice trains longer (a trial said --days 30 and was given 51 days, while
    # 64 nodes x 25.7 days cost the same): None where the choice fits or nothing within does
    window_days: float | None = None
    choice_within_window: BudgetOption | None = None


def check_target_reachable(
    envelope: Envelope, space: SearchSpace, law: ScalingLaw, target_loss: float,
    nodes: Iterable[int], days: Iterable[float],
) -> tuple[list[int], list[float]]:
    """The budgets to search, refused before any layout search when none of them could
    reach ``target_loss`` even with every GEMM at the device's full peak
    (:mod:`mosaic.plan.peak_bound`): no layout search would find one that does."""
    # a positive loss within a language model's range: above it every budget "reaches" it
    # (a fuzz trial's 1e308 was planned and echoed as the target); one check, whose range
    # leaves the refused 0 out (it said '0..50' to a loss of 51, and 'must be positive' to 0)
    check_range("target loss", target_loss, "loss", above_low=True)
    windows = [float(d) for d in days]
    node_counts = [int(n) for n in nodes]
    if not windows or not node_counts:
        raise MosaicInputError("the cheapest-plan search needs at least one node count and "
                               "one window")
    grid = space.enumerate()
    floors = {(n, d): peak_bound(envelope.with_budget(n_nodes=n, days=d), space, law,
                                 grid).best_loss
              for n in node_counts for d in windows}
    (n_best, d_best), floor = min(floors.items(), key=lambda item: item[1])
    if floor > target_loss:
        reach = ("no geometry of the grid is trainable at any of them" if math.isinf(floor)
                 else f"the best any budget could reach is loss {floor:.4f} "
                      f"({counted(n_best, 'node')} x {counted(d_best, 'day')})")
        idle = [n for n in node_counts  # goodput 0 there: no window trains anything
                if envelope.with_budget(n_nodes=n).goodput_fraction == 0.0]
        if idle:
            reach += (f" (on {', '.join(map(str, idle))} nodes the Young-Daly goodput is 0: "
                      "the job fails faster than it checkpoints)")
        raise MosaicInputError(
            f"target loss {target_loss:g} is out of reach of every budget searched "
            f"(nodes {', '.join(map(str, node_counts))}; days "
            f"{', '.join(f'{d:g}' for d in windows)}): even with every GEMM at the "
            f"{envelope.precision} peak, {reach} under this law; give larger "
            f"--cheapest-nodes / --cheapest-days or a higher --target-loss"
            + (f", or relax {' / '.join(flag for flag, _, _ in space.caps())}: the model "
               "caps bound the loss whatever the budget" if space.caps() else ""))
    return node_counts, windows


def cheapest_plan(
    envelope: Envelope,
    space: SearchSpace,
    law: ScalingLaw,
    calibration: Calibration,
    target_loss: float,
    nodes: Iterable[int],
    days: Iterable[float],
    price_per_gpu_hour: float | None = None,
    limits: LayoutLimits | None = None,
    progress: Callable[[int], ProgressFn | None] | None = None,
    workers: int | None = None,
) -> CheapestPlan:
    """Search every (nodes, days) budget; layouts are profiled once per node count. Where a
    node count's shorter window misses the target and a longer one reaches it, windows
    between the two are rescored on the same layouts (:func:`refined_windows`); where its
    shortest window already reaches it, shorter ones are tried first
    (:func:`_windows_below_reach`)."""
    node_counts, windows = check_target_reachable(envelope, space, law, target_loss, nodes,
                                                  days)
    options = []
    for n_nodes in node_counts:
        cluster = envelope.with_budget(n_nodes=int(n_nodes))
        callback = progress(cluster.n_nodes) if progress is not None else None
        points = sweep_days(cluster, space, law, calibration, windows, limits, callback,
                            workers)
        results = [point.result for point in points]
        table = points[0].result.throughput  # one layout search serves every window

        def at(days: float, cluster: Envelope = cluster,
               table: ThroughputTable = table) -> PlanResult:
            return score(table, cluster.with_budget(days=days), space, law)

        results += _windows_below_reach(results, target_loss, at)
        between = refined_windows([(r.envelope.days, _loss(r)) for r in results],
                                  target_loss)
        results += [at(d) for d in between]
        # each budget costs what `plan` costs it: the days its optimum trains (a window
        # whose optimum is held at tpp_max stops early, as it would under `plan --days`)
        options += [BudgetOption(cluster.n_nodes, r.envelope.days,
                                 plan_cost(r, price_per_gpu_hour), r)
                    for r in results]
    # (GPU-hours to 9 significant digits: n nodes x d days and 2n x d/2 differ in the last
    # bit, and a trial chose 2 nodes x 13.61 days at loss 1.6494 over 1 x 27.22 at 1.6492)
    options.sort(key=lambda o: budget_order_key(o.cost.gpu_hours, o.loss, o.days, o.n_nodes))
    reaching = [o for o in options if o.loss is not None and o.loss <= target_loss]
    choice = reaching[0] if reaching else None
    # within the window by the days a run trains: one whose D is held at tpp_max stops
    # before its window ends (a trial's 6.3-day window trained 5.86 days, and --days 6 was
    # told that no budget evaluated reached the target within them)
    within = [o for o in reaching if o.cost.train_days <= envelope.days]
    longer = choice is not None and choice.cost.train_days > envelope.days
    return CheapestPlan(float(target_loss), tuple(options), choice, envelope.days,
                        within[0] if longer and within else None)
