"""Model-FLOPs view against the cluster view, and the local allocation law.

* :func:`compare_model_flops` — Sec. 6 and Fig. 1: at a fixed C_model the model-FLOPs
  optimum is boundary-seeking in S (Eq. 16); the cluster optimum under C_deliverable is
  not; S_feas_max is the largest S whose best layout still delivers C_model in the window
  (Eq. 3); the loss gap compares both geometries trained for the tokens the cluster
  actually gives them (Eq. 25).
* :func:`sparsity_frontier` — L*(S) under both views, one point per (E, K) at fixed G.
* :func:`flop_cost_profile` — Fig. 8 right: wall-clock per delivered model FLOP of the
  configurations the model-FLOPs view picks, against S (fixed G) or G (S near a target).
* :func:`allocation_exponents` — Appendix D.3: local MFU log-slopes ω_N, ω_S, ω_G
  (Eq. 28) and the regime-local allocation exponents of Eqs. 29-30.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.errors import MosaicInputError
from mosaic.law import ComputeOptimum, ScalingLaw, compute_optimum
from mosaic.law.optimum import DEFAULT_SPARSITY_RANGE
from mosaic.plan.search import PlanResult

DEFAULT_SPARSITY_TOLERANCE = 0.01  # |S − target| for the "fixed S" row of Fig. 8
# Sec. 6.1 claims boundary-seeking only inside the law's data support (S <= 0.981, App. C).
LAW_SPARSITY_SUPPORT_MAX = DEFAULT_SPARSITY_RANGE[1]


def model_flops_loss(result: PlanResult, law: ScalingLaw, c_model_flops: float) -> np.ndarray:
    """L(N_tot, S, D = C_model/(6·N_act), G) of every grid row: the model-FLOPs view."""
    grid = result.grid
    tokens = c_model_flops / (FLOPS_PER_PARAM_TOKEN * grid.n_active)
    return law.predict(grid.n_total, result.space.law_tokens(tokens), grid.sparsity,
                       grid.split_factor)


def comparable_series(held: np.ndarray, x: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Which points a figure may connect: one series per value of the key held fixed
    (e.g. top-k K at one G, along which only E moves S), each as indices sorted by x
    (NaN x left out). Lines between points of different keys would cross unrelated
    geometries."""
    held = np.asarray(held)
    x = np.asarray(x, dtype=float)
    series = []
    for key in np.unique(held):
        members = np.flatnonzero((held == key) & np.isfinite(x))
        if members.size:
            series.append((int(key), members[np.argsort(x[members], kind="stable")]))
    return series


def _rows_with_split(result: PlanResult, split_factor: int | None) -> np.ndarray:
    grid = result.grid
    rows = np.arange(len(grid)) if split_factor is None else np.flatnonzero(
        grid.split_factor == split_factor)
    if rows.size == 0:
        raise MosaicInputError(f"the grid has no geometry with split factor G = {split_factor}")
    return rows


@dataclass(frozen=True)
class ModelFlopsComparison:
    """Model-FLOPs optimum vs cluster optimum at one C_model (Sec. 6, Fig. 1).

    Attributes:
        c_model_flops: the model-FLOPs budget compared at.
        split_factor: G the comparison is restricted to (None: all G).
        continuous: Eq. 16 optimum over S in [s_min, min(largest grid S, 0.981)] at that
            G (0.981: the law's data support, App. C).
        model_flops_row: grid row minimising the loss at D = C_model/(6·N_act).
        model_flops_deliverable_flops: C_deliverable of that row (0 without a layout).
        prescription_feasible: C_model ≤ C_deliverable for that row (Eq. 3).
        s_feas_max: largest S (at G) whose C_deliverable ≥ C_model; None if none.
        cluster_row: the cluster optimum among the rows considered.
        loss_gap_nats: L(model-FLOPs row at min(C_model/(6·N_act), D*)) − L(cluster row):
            the prescription trained for as many of its tokens as the window delivers,
            against the cluster optimum; None when the model-FLOPs row has no layout.
    """

    c_model_flops: float
    split_factor: int | None
    continuous: ComputeOptimum
    model_flops_row: int
    model_flops_deliverable_flops: float
    prescription_feasible: bool
    s_feas_max: float | None
    cluster_row: int | None
    loss_gap_nats: float | None


def compare_model_flops(
    result: PlanResult,
    law: ScalingLaw,
    c_model_flops: float | None = None,
    split_factor: int | None = None,
) -> ModelFlopsComparison:
    """Compare the views at ``c_model_flops`` (default: what the cluster optimum realises)
    and ``split_factor`` (default: the cluster optimum's G)."""
    best = result.optimum_index
    if best is None and (c_model_flops is None or split_factor is None):
        raise MosaicInputError("no trainable geometry: give C_model and G to compare at")
    if c_model_flops is None:
        c_model_flops = float(result.c_model_flops[best])
    if split_factor is None:
        split_factor = int(result.grid.split_factor[best])
    rows = _rows_with_split(result, split_factor)
    grid = result.grid
    loss = model_flops_loss(result, law, c_model_flops)
    flops_row = int(rows[np.argmin(loss[rows])])
    deliverable = result.c_deliverable_flops
    delivers = rows[deliverable[rows] >= c_model_flops]
    trainable = rows[result.feasible[rows]]
    cluster_row = int(trainable[np.argmin(result.loss[trainable])]) if trainable.size else None
    gap = None
    if cluster_row is not None and result.throughput.has_layout[flops_row]:
        # The pick trains its prescribed tokens as far as the window delivers them, under the
        # same tpp_max cap as every row of the search (search.py: D = min(D*, tpp_max·N_act)),
        # so it is compared on the table's terms (its loss is the table's when the
        # prescription is out of reach).
        prescribed = c_model_flops / (FLOPS_PER_PARAM_TOKEN * grid.n_active[flops_row])
        delivered = min(prescribed, float(result.budget_tokens[flops_row]),
                        result.space.tpp_max * float(grid.n_active[flops_row]))
        if result.feasible[flops_row] and delivered == float(result.tokens[flops_row]):
            # the table's own D: its loss, not the law again in another order of operations
            # (a pick that is the optimum was drawn a few ulp off the optimum's star)
            hw_loss = float(result.loss[flops_row])
        else:
            hw_loss = law.predict(grid.n_total[flops_row],
                                  result.space.law_tokens(delivered),
                                  grid.sparsity[flops_row], grid.split_factor[flops_row])
        gap = float(hw_loss - result.loss[cluster_row])
    s_max = min(float(grid.sparsity[rows].max()), LAW_SPARSITY_SUPPORT_MAX)
    s_range = (min(result.space.s_min, s_max), s_max)
    return ModelFlopsComparison(
        c_model_flops=float(c_model_flops),
        split_factor=split_factor,
        continuous=compute_optimum(law, c_model_flops, split_factor, sparsity_range=s_range),
        model_flops_row=flops_row,
        model_flops_deliverable_flops=float(deliverable[flops_row]),
        prescription_feasible=bool(deliverable[flops_row] >= c_model_flops),
        s_feas_max=float(grid.sparsity[delivers].max()) if delivers.size else None,
        cluster_row=cluster_row,
        loss_gap_nats=gap,
    )


@dataclass(frozen=True)
class SparsityFrontier:
    """L*(S) under both views at one G, one point per (E, K), sorted by S (Fig. 1).

    ``model_flops_*``: the q minimising the loss at fixed C_model; ``hardware_*``: the q
    minimising the loss at the tokens the window gives (NaN where none is trainable).
    """

    split_factor: int
    c_model_flops: float
    experts: np.ndarray
    top_k: np.ndarray
    model_flops_sparsity: np.ndarray
    model_flops_loss: np.ndarray
    delivers_c_model: np.ndarray
    hardware_sparsity: np.ndarray
    hardware_loss: np.ndarray

    def series(self, view: Literal["model_flops", "hardware"]) -> list[tuple[int, np.ndarray]]:
        """:func:`frontier_series` of one view."""
        return frontier_series(view, self.top_k, getattr(self, f"{view}_sparsity"))


def frontier_series(view: str, top_k: np.ndarray, sparsity: np.ndarray
                    ) -> list[tuple[int, np.ndarray]]:
    """The points of a sparsity frontier's ``view`` a figure connects: (K, indices sorted by
    S) per top-k in the cluster view, along which only E changes S; the model-FLOPs view is
    one series (K = 0): at fixed C_model its loss is L*(S) of Eq. 16, a function of S alone
    but for the q grid, so every (E, K) point lies on one curve (drawn per K, five lines
    lay on top of one another: a trial)."""
    top_k = np.asarray(top_k)
    held = top_k if view == "hardware" else np.zeros_like(top_k)
    return comparable_series(held, sparsity)


def sparsity_frontier(
    result: PlanResult, law: ScalingLaw, c_model_flops: float, split_factor: int
) -> SparsityFrontier:
    """Per (E, K) at G = ``split_factor``: the best q under each view."""
    rows = _rows_with_split(result, split_factor)
    grid = result.grid
    flops_loss = model_flops_loss(result, law, c_model_flops)
    pairs = np.unique(np.column_stack([grid.experts[rows], grid.top_k[rows]]), axis=0)
    columns: dict[str, list[float]] = {k: [] for k in (
        "model_flops_sparsity", "model_flops_loss", "delivers_c_model", "hardware_sparsity",
        "hardware_loss")}
    for experts, top_k in pairs:
        group = rows[(grid.experts[rows] == experts) & (grid.top_k[rows] == top_k)]
        pick = int(group[np.argmin(flops_loss[group])])
        columns["model_flops_sparsity"].append(float(grid.sparsity[pick]))
        columns["model_flops_loss"].append(float(flops_loss[pick]))
        columns["delivers_c_model"].append(
            float(result.c_deliverable_flops[pick] >= c_model_flops))
        trainable = group[result.feasible[group]]
        hw = int(trainable[np.argmin(result.loss[trainable])]) if trainable.size else None
        columns["hardware_sparsity"].append(np.nan if hw is None else float(grid.sparsity[hw]))
        columns["hardware_loss"].append(np.nan if hw is None else float(result.loss[hw]))
    order = np.argsort(columns["model_flops_sparsity"], kind="stable")
    arrays = {k: np.asarray(v)[order] for k, v in columns.items()}
    arrays["delivers_c_model"] = arrays["delivers_c_model"].astype(bool)
    return SparsityFrontier(
        split_factor=split_factor,
        c_model_flops=float(c_model_flops),
        experts=pairs[order, 0],
        top_k=pairs[order, 1],
        **arrays,
    )


@dataclass(frozen=True)
class FlopCostProfile:
    """Wall-clock per delivered model FLOP along one knob (Fig. 8 right).

    ``seconds_per_flop`` = 1 / (6·N_act·tokens/s) = 1 / (MFU·F_peak·N_dev);
    ``relative`` divides by the first point (lowest S or lowest G). ``top_k`` is K of each
    point: along S, only points of one K are comparable (:meth:`series`).
    """

    knob: Literal["sparsity", "split_factor"]
    rows: np.ndarray
    knob_values: np.ndarray
    model_flops_loss: np.ndarray
    seconds_per_flop: np.ndarray
    relative: np.ndarray
    top_k: np.ndarray
    # along G: the sparsity every point is held near, and each point's geometry ('q12 E96
    # K2'), which changes from G to G (a trial could not tell what the panel held fixed)
    target_sparsity: float | None = None
    geometry_labels: tuple[str, ...] = ()

    def series(self) -> list[tuple[int, np.ndarray]]:
        """Points to connect: per K along S; one series along G (S held near a target)."""
        held = self.top_k if self.knob == "sparsity" else np.zeros_like(self.top_k)
        return comparable_series(held, self.knob_values)


def flop_cost_profile(
    result: PlanResult,
    law: ScalingLaw,
    c_model_flops: float,
    knob: Literal["sparsity", "split_factor"],
    split_factor: int = 4,
    target_sparsity: float | None = None,
    tolerance: float = DEFAULT_SPARSITY_TOLERANCE,
) -> FlopCostProfile:
    """Cost per model FLOP of the geometries the model-FLOPs view picks (with a layout).

    ``knob="sparsity"``: per (E, K) at G = ``split_factor``, the q with the lowest loss at
    ``c_model_flops``. ``knob="split_factor"``: per G, the lowest-loss geometry with
    |S − target_sparsity| ≤ tolerance (target default: the cluster optimum's S).
    """
    grid = result.grid
    flops_loss = model_flops_loss(result, law, c_model_flops)
    laid_out = result.throughput.has_layout
    picks: list[int] = []
    if knob == "sparsity":
        rows = _rows_with_split(result, split_factor)
        rows = rows[laid_out[rows]]
        for experts, top_k in np.unique(
                np.column_stack([grid.experts[rows], grid.top_k[rows]]), axis=0):
            group = rows[(grid.experts[rows] == experts) & (grid.top_k[rows] == top_k)]
            picks.append(int(group[np.argmin(flops_loss[group])]))
        values = grid.sparsity
    elif knob == "split_factor":
        if target_sparsity is None:
            if result.optimum_index is None:
                raise MosaicInputError("no trainable geometry: give the target sparsity")
            target_sparsity = float(grid.sparsity[result.optimum_index])
        near = laid_out & (np.abs(grid.sparsity - target_sparsity) <= tolerance)
        for g in np.unique(grid.split_factor[near]):
            group = np.flatnonzero(near & (grid.split_factor == g))
            picks.append(int(group[np.argmin(flops_loss[group])]))
        values = grid.split_factor
    else:
        raise MosaicInputError(f"knob must be 'sparsity' or 'split_factor', got {knob!r}")
    if not picks:
        raise MosaicInputError("no geometry with a feasible layout along this profile")
    chosen = np.asarray(picks)
    chosen = chosen[np.argsort(values[chosen], kind="stable")]
    seconds = 1.0 / (FLOPS_PER_PARAM_TOKEN * grid.n_active[chosen]
                     * result.throughput.tokens_per_s[chosen])
    return FlopCostProfile(
        knob=knob,
        rows=chosen,
        knob_values=values[chosen].astype(float),
        model_flops_loss=flops_loss[chosen],
        seconds_per_flop=seconds,
        relative=seconds / seconds[0],
        top_k=grid.top_k[chosen].astype(int),
        target_sparsity=target_sparsity,
        geometry_labels=tuple(
            (f"q{grid.q[row]}" if grid.q[row] else f"L{grid.layers[row]}")
            + f" E{grid.experts[row]} K{grid.top_k[row]}" for row in chosen.tolist()),
    )


@dataclass(frozen=True)
class AllocationExponents:
    """Appendix D.3 at the cluster optimum.

    ω_N = ∂log MFU*/∂log N_tot, ω_S = ∂log MFU*/∂log(1−S), ω_G = −∂log MFU*/∂log G, fitted
    by least squares over laid-out geometries near the optimum; p = α/λ, ϱ = α/β,
    g = (α − γ − αδ/λ)/η, ν = 1/[(1−ω_N) + (1−ω_S)p + ϱ + ω_G g] (Eq. 30):
    N* ∝ C_peak^ν, 1−S* ∝ C_peak^{pν}, D* ∝ C_peak^{ϱν}, G* ∝ C_peak^{gν}.
    ``interior`` holds the sign conditions of Eq. 28 for an interior optimum.
    A slope the neighbourhood cannot identify (its axis does not vary) is NaN, and so are
    the exponents that need it.
    """

    omega_n: float
    omega_s: float
    omega_g: float
    points: int
    p: float
    rho: float
    g: float
    nu: float
    n_total_exponent: float
    active_fraction_exponent: float
    tokens_exponent: float
    split_factor_exponent: float
    interior: dict[str, bool]


JOINT_EXPONENTS = ("alpha", "beta", "lambda", "delta", "gamma", "eta")
MIN_SLOPE_POINTS = 5
NEIGHBOURHOOD_LOG_RADIUS = {"n_total": np.log(4.0), "active_fraction": np.log(2.0),
                            "split_factor": np.log(2.0)}


def local_mfu_slopes(result: PlanResult, row: int) -> tuple[np.ndarray, int]:
    """(ω_N, ω_S, ω_G) and the number of points, from geometries around ``row``.

    Neighbourhood: geometries with a feasible layout within a factor 4 in N_tot and 2 in (1−S) and G
    of ``row``; log MFU* = c + ω_N log N + ω_S log(1−S) − ω_G log G by least squares.
    """
    grid = result.grid
    logs = np.column_stack([np.log(grid.n_total), np.log1p(-grid.sparsity),
                            np.log(grid.split_factor.astype(float))])
    radius = np.array(list(NEIGHBOURHOOD_LOG_RADIUS.values()))
    near = result.throughput.has_layout & np.all(
        np.abs(logs - logs[row]) <= radius + 1e-12, axis=1)
    x = logs[near] - logs[row]
    y = np.log(result.throughput.mfu[near])
    slopes = np.full(3, np.nan)
    varies = np.ptp(x, axis=0) > 0 if x.size else np.zeros(3, dtype=bool)
    if near.sum() >= MIN_SLOPE_POINTS and varies.any():
        design = np.column_stack([np.ones(len(x)), x[:, varies]])
        coefficients = np.linalg.lstsq(design, y, rcond=None)[0]
        slopes[varies] = coefficients[1:]
    slopes[2] = -slopes[2]
    return slopes, int(near.sum())


def allocation_exponents(result: PlanResult, law: ScalingLaw) -> AllocationExponents:
    """Eqs. 28-30 at the cluster optimum of ``result`` (needs the joint law, Eq. 10)."""
    missing = [name for name in JOINT_EXPONENTS if name not in law.coefficients]
    if missing:
        raise MosaicInputError(
            f"allocation exponents need the joint law (Eq. 10); form '{law.form.name}' "
            f"lacks {', '.join(missing)}")
    if result.optimum_index is None:
        raise MosaicInputError("no trainable geometry: no optimum to expand around")
    (omega_n, omega_s, omega_g), points = local_mfu_slopes(result, result.optimum_index)
    c = law.coefficients
    alpha, beta, lam, delta, gamma, eta = (c[name] for name in JOINT_EXPONENTS)
    p = alpha / lam
    rho = alpha / beta
    g = (alpha - gamma - alpha * delta / lam) / eta
    nu = 1.0 / ((1 - omega_n) + (1 - omega_s) * p + rho + omega_g * g)
    return AllocationExponents(
        omega_n=float(omega_n),
        omega_s=float(omega_s),
        omega_g=float(omega_g),
        points=points,
        p=p,
        rho=rho,
        g=g,
        nu=float(nu),
        n_total_exponent=float(nu),
        active_fraction_exponent=float(p * nu),
        tokens_exponent=float(rho * nu),
        split_factor_exponent=float(g * nu),
        interior={
            "omega_g_positive": bool(omega_g > 0),
            "n_total_condition": bool(1 - omega_n - gamma * omega_g / eta > 0),
            "sparsity_condition": bool(1 - omega_s - delta * omega_g / eta > 0),
        },
    )
