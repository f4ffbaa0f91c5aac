"""Times of the compute kernels of a transformer step: GEMMs, grouped expert GEMMs,
flash attention and memory-bound element-wise kernels.

Every function broadcasts over numpy arrays of shapes. The analytical models return
GPU-side time (one kernel, no host launch cost: that is the dispatch term of paper
Eq. 11). Measured tables (``GemmTable``, ``GroupedGemmTable``; paper Sec. 5.3) replace the
analytical time wherever their measurements surround a point, interpolating in log space;
elsewhere the analytical model is used and ``*_source`` labels the point.

GEMM model (constants in data/microbench_fits.yaml, fitted to ScalePlan gemm_util):

    t = t_kernel + max(2·m·n·k / (peak · eff), bytes / (hbm_bw · hbm_eff))
    eff = max_fraction_of_peak · wave_efficiency(m, n) · k / (k + k_half)

``wave_efficiency`` is the tile/wave quantisation of the output: the useful share of the
``ceil(m/tm)·ceil(n/tn)`` output tiles run in ``ceil(tiles / SMs)`` full waves, for the best
of a few cuBLAS tile shapes. ``k / (k + k_half)`` is the per-tile prologue/epilogue cost
amortised over the reduction length. ``bytes`` counts A, B and C once each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from mosaic.errors import MosaicInputError
from mosaic.hardware import get_device
from mosaic.perf.fitted_constants import fitted

if TYPE_CHECKING:  # pandas only types the measured tables; importing it costs 0.6 s of start-up
    import pandas as pd

MEASURED = "measured"
ANALYTICAL = "analytical"

SM_COUNT: dict[str, int] = {k: int(v) for k, v in fitted("kernels", "sm_count").items()}
"""Streaming multiprocessors per device (sources in data/microbench_fits.yaml)."""


def device_fit_key(name: str) -> str:
    """Key of the kernel-fit tables (B200, H200, H100, A100) a device uses: the catalog
    device's ``kernel_fit`` (a GB200 uses the B200's fits, an H800 the H100's); the
    upper-cased name for a device without one or outside the catalog."""
    try:
        device = get_device(name)
    except MosaicInputError:
        return name.upper()
    return device.kernel_fit or device.name.upper()


def _k(name: str) -> float:
    return float(fitted("kernels", name))


@dataclass(frozen=True)
class GemmParams:
    """Constants of the analytical (grouped) GEMM model."""

    max_fraction_of_peak: float = _k("gemm_max_fraction_of_peak")
    """Plateau fraction of the dense datasheet peak for large, well-shaped GEMMs."""
    k_half: float = _k("gemm_k_half")
    """Reduction length at which the K ramp reaches half the plateau."""
    hbm_efficiency: float = _k("gemm_hbm_efficiency")
    """Achieved / peak HBM bandwidth when the GEMM is memory bound."""
    kernel_latency_s: float = _k("kernel_latency_s")
    """Fixed GPU time of one kernel."""
    tile_shapes: tuple[tuple[int, int], ...] = tuple(
        (int(m), int(n)) for m, n in fitted("kernels", "gemm_tile_shapes"))
    """Candidate output tiles (M x N); the best one is used per shape."""


DEFAULT_GEMM = GemmParams()


def _positive(name: str, value: npt.ArrayLike) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if not (arr > 0).all():  # (NaN too)
        raise MosaicInputError(f"{name} must be > 0; got {arr.ravel()[:8]}")
    return arr


def wave_efficiency(groups: npt.ArrayLike, m: npt.ArrayLike, n: npt.ArrayLike,
                    sm_count: npt.ArrayLike,
                    tile_shapes: tuple[tuple[int, int], ...] = DEFAULT_GEMM.tile_shapes
                    ) -> np.ndarray:
    """Useful share of the tile slots a (grouped) GEMM occupies, best tile shape.

    ``groups`` GEMMs each produce an ``m x n`` output cut into ``tm x tn`` tiles (padding
    partial tiles); tiles run in waves of one tile per SM, the last wave partly idle.
    """
    g, m_, n_, sms = (np.asarray(x, dtype=float) for x in (groups, m, n, sm_count))
    best = np.zeros(np.broadcast_shapes(g.shape, m_.shape, n_.shape, sms.shape))
    for tm, tn in tile_shapes:
        tiles = g * np.ceil(m_ / tm) * np.ceil(n_ / tn)
        slots = np.ceil(tiles / sms) * sms * tm * tn
        best = np.maximum(best, g * m_ * n_ / slots)
    return best


def gemm_efficiency(m: npt.ArrayLike, n: npt.ArrayLike, k: npt.ArrayLike,
                    sm_count: npt.ArrayLike, params: GemmParams = DEFAULT_GEMM,
                    groups: npt.ArrayLike = 1) -> np.ndarray:
    """Fraction of peak FLOP/s the compute part of a (grouped) GEMM reaches."""
    k_ = _positive("k", k)
    ramp = k_ / (k_ + params.k_half)
    return (params.max_fraction_of_peak * ramp
            * wave_efficiency(groups, m, n, sm_count, params.tile_shapes))


def _gemm_analytical_s(groups: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray,
                       peak_flops_per_s: npt.ArrayLike, hbm_bw_bytes_per_s: npt.ArrayLike,
                       sm_count: npt.ArrayLike, bytes_per_element: npt.ArrayLike,
                       params: GemmParams) -> np.ndarray:
    flops = 2.0 * groups * m * n * k
    compute_s = flops / (_positive("peak_flops_per_s", peak_flops_per_s)
                         * gemm_efficiency(m, n, k, sm_count, params, groups))
    moved_bytes = groups * (m * k + k * n + m * n) * np.asarray(bytes_per_element, float)
    memory_s = moved_bytes / (_positive("hbm_bw_bytes_per_s", hbm_bw_bytes_per_s)
                              * params.hbm_efficiency)
    return params.kernel_latency_s + np.maximum(compute_s, memory_s)


def gemm_time_s(m: npt.ArrayLike, n: npt.ArrayLike, k: npt.ArrayLike,
                peak_flops_per_s: npt.ArrayLike, hbm_bw_bytes_per_s: npt.ArrayLike,
                sm_count: npt.ArrayLike, *, bytes_per_element: npt.ArrayLike = 2,
                params: GemmParams = DEFAULT_GEMM, table: GemmTable | None = None,
                dtype: str = "bf16") -> np.ndarray:
    """Time of one dense GEMM C[m,n] = A[m,k] · B[k,n] (2·m·n·k FLOPs).

    ``peak_flops_per_s`` is the dense datasheet peak of the GEMM's precision; ``dtype``
    selects the rows of ``table`` (when given) that may replace the analytical time.
    """
    m_, n_, k_ = (_positive(name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    time_s = _gemm_analytical_s(np.asarray(1.0), m_, n_, k_, peak_flops_per_s,
                                hbm_bw_bytes_per_s, sm_count, bytes_per_element, params)
    if table is None:
        return time_s
    measured = table.time_s(m_, n_, k_, dtype)
    return np.where(np.isfinite(measured), measured, time_s)


def gemm_source(m: npt.ArrayLike, n: npt.ArrayLike, k: npt.ArrayLike,
                table: GemmTable | None, dtype: str = "bf16") -> np.ndarray:
    """"measured" where ``table`` covers a dense GEMM shape, else "analytical"."""
    if table is None:
        return np.full(np.broadcast_shapes(*(np.shape(x) for x in (m, n, k))), ANALYTICAL)
    return np.where(np.isfinite(table.time_s(m, n, k, dtype)), MEASURED, ANALYTICAL)


def grouped_gemm_time_s(groups: npt.ArrayLike, m_per_group: npt.ArrayLike,
                        n: npt.ArrayLike, k: npt.ArrayLike,
                        peak_flops_per_s: npt.ArrayLike, hbm_bw_bytes_per_s: npt.ArrayLike,
                        sm_count: npt.ArrayLike, *, bytes_per_element: npt.ArrayLike = 2,
                        params: GemmParams = DEFAULT_GEMM, host_floor_s: npt.ArrayLike = 0.0,
                        table: GroupedGemmTable | None = None,
                        dtype: str = "bf16") -> np.ndarray:
    """Time of a grouped GEMM: ``groups`` independent [m_per_group, k] x [k, n] products.

    This is the MoE expert MLP (one group per local expert). Its efficiency is set by the
    per-group tile M (paper Sec. 5.3: M_expert = ceil(T_seq·B_micro·K/E), which the caller
    passes as ``m_per_group``), not by the aggregate token count: small groups pad output
    tiles and re-read a whole weight matrix per group, so they turn memory bound.
    ``host_floor_s`` is an optional lower bound for host-bound launchers (see
    :func:`te_grouped_linear_host_floor_s`); the default 0 returns GPU time.
    """
    g, m_, n_, k_ = (_positive(name, v) for name, v in
                     (("groups", groups), ("m_per_group", m_per_group), ("n", n), ("k", k)))
    time_s = _gemm_analytical_s(g, m_, n_, k_, peak_flops_per_s, hbm_bw_bytes_per_s,
                                sm_count, bytes_per_element, params)
    if table is not None:
        measured = table.time_s(g, m_, n_, k_, dtype)
        time_s = np.where(np.isfinite(measured), measured, time_s)
    return np.maximum(time_s, host_floor_s)


def grouped_gemm_source(groups: npt.ArrayLike, m_per_group: npt.ArrayLike, n: npt.ArrayLike,
                        k: npt.ArrayLike, table: GroupedGemmTable | None,
                        dtype: str = "bf16") -> np.ndarray:
    """"measured" where ``table`` covers a grouped GEMM shape, else "analytical"."""
    if table is None:
        shapes = (np.shape(x) for x in (groups, m_per_group, n, k))
        return np.full(np.broadcast_shapes(*shapes), ANALYTICAL)
    covered = np.isfinite(table.time_s(groups, m_per_group, n, k, dtype))
    return np.where(covered, MEASURED, ANALYTICAL)


def te_grouped_linear_host_floor_s(groups: npt.ArrayLike, backward: bool = False) -> np.ndarray:
    """Host-bound floor of Transformer Engine 2.4 GroupedLinear on B200 (fixed + per GEMM).

    Fitted to ScalePlan gemm_grouped_b200 (see data/microbench_fits.yaml): below the GPU
    time, a call costs ~60 us + ~16 us per group (fwd) or ~313 us + ~51 us per group
    (dgrad + wgrad) whatever the group size, consistent with one launch per group.
    """
    name = "te_grouped_linear_host_floor_bwd" if backward else "te_grouped_linear_host_floor_fwd"
    floor = fitted("kernels", name)
    return floor["fixed_s"] + floor["per_group_s"] * np.asarray(groups, dtype=float)


def memory_bound_time_s(moved_bytes: npt.ArrayLike, hbm_bw_bytes_per_s: npt.ArrayLike, *,
                        hbm_efficiency: float = _k("elementwise_hbm_efficiency"),
                        kernel_latency_s: float = _k("kernel_latency_s")) -> np.ndarray:
    """Streaming kernel (norm, activation, residual add, permute) moving ``moved_bytes``
    (reads + writes) through HBM."""
    size = np.asarray(moved_bytes, dtype=float)
    if not (size >= 0).all():  # (NaN too)
        raise MosaicInputError(f"moved_bytes must be >= 0; got {size.ravel()[:8]}")
    bw = _positive("hbm_bw_bytes_per_s", hbm_bw_bytes_per_s) * hbm_efficiency
    return kernel_latency_s + size / bw


# --------------------------------------------------------------------------------------
# Flash attention
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionEfficiency:
    """eff = max_fraction · s_kv/(s_kv + seq_half_tokens) · d/(d + head_dim_half)."""

    max_fraction: float
    seq_half_tokens: float
    head_dim_half: float

    def at(self, seq_kv: npt.ArrayLike, head_dim: npt.ArrayLike) -> np.ndarray:
        s, d = np.asarray(seq_kv, dtype=float), np.asarray(head_dim, dtype=float)
        return (self.max_fraction * s / (s + self.seq_half_tokens)
                * d / (d + self.head_dim_half))


FLASH_ATTENTION_EFFICIENCY: dict[str, dict[str, AttentionEfficiency]] = {
    device: {direction: AttentionEfficiency(*map(float, triple))
             for direction, triple in passes.items()}
    for device, passes in fitted("kernels", "flash_attention_efficiency").items()
}
"""Fitted attention efficiency per device ("generic" pools all) and pass ("fwd", "bwd")."""


# FlashAttention-2's backward does 2.5x its forward's FLOPs: five matmuls against two, the
# recompute of QK^T included (Dao 2023, Sec. 4.1 FLOP count)
FLASH_BACKWARD_TO_FORWARD_FLOPS = 2.5
# forward: QK^T and PV, 2 FLOPs per multiply-add each; a causal mask halves the pairs
FLASH_FORWARD_FLOPS_PER_PAIR_DIM = 4.0
CAUSAL_PAIR_FRACTION = 0.5
# the same per score element and unit head dim: 4·d forward, 10·d backward
_FWD_FLOPS_PER_SCORE_PER_D = FLASH_FORWARD_FLOPS_PER_PAIR_DIM
_BWD_FLOPS_PER_SCORE_PER_D = FLASH_FORWARD_FLOPS_PER_PAIR_DIM * FLASH_BACKWARD_TO_FORWARD_FLOPS


def exp_rescaled_attention_efficiency(fwd: AttentionEfficiency, bwd: AttentionEfficiency,
                                      exp_time_ratio: float
                                      ) -> tuple[AttentionEfficiency, AttentionEfficiency]:
    """The fitted efficiencies of a device whose softmax exponentials run ``exp_time_ratio``
    times as long, per bf16 FLOP, as on the device they were fitted on.

    ``d/(d + head_dim_half)`` makes the time per score element ``(W·d + W·head_dim_half) /
    (peak·max_fraction)`` (W = 4 forward, 10 backward): an MMA part and a part that does not
    grow with d. The forward part is the one exponential per score (the per-score work
    that bounds the forward on B200: FlashAttention-4, arXiv:2603.05451, Sec. 2; the fitted
    forward head_dim_half, 101.7 on B200, is close to peak/(4 · exp rate) = 2.25e15 / (4 ·
    16/8192 · 2.25e15) = 128). The backward recomputes P, one exponential per score
    (FlashAttention-2, Alg. 2), so its exponential time equals the forward's; the rest of
    its per-score term (dS = P∘(dP − D) and the like on the FMA units) keeps its fit. Only
    the exponential parts are scaled; the MMA parts, max_fraction and the sequence ramp
    are unchanged.
    """
    if not exp_time_ratio > 0:
        raise MosaicInputError(f"exp_time_ratio must be > 0; got {exp_time_ratio}")
    # Exponential time per score in head-dim units of each pass: the forward's whole term;
    # for the backward the same seconds re-expressed at its own FLOPs and max_fraction.
    exp_fwd = fwd.head_dim_half
    exp_bwd = (exp_fwd / fwd.max_fraction * _FWD_FLOPS_PER_SCORE_PER_D
               / _BWD_FLOPS_PER_SCORE_PER_D * bwd.max_fraction)
    if exp_bwd > bwd.head_dim_half:
        raise MosaicInputError(
            f"backward attention fit head_dim_half={bwd.head_dim_half} is smaller than its "
            f"exponential share {exp_bwd:.4g}; the fit cannot be split")
    scaled = (exp_time_ratio - 1.0)
    return (replace(fwd, head_dim_half=fwd.head_dim_half + scaled * exp_fwd),
            replace(bwd, head_dim_half=bwd.head_dim_half + scaled * exp_bwd))


def fp8_attention_efficiency(efficiency: AttentionEfficiency, lane_speedup: float
                             ) -> AttentionEfficiency:
    """``efficiency`` (fitted to bf16 flash attention) for FP8 attention whose score GEMMs run
    ``lane_speedup`` times as fast (the device's FP8 over bf16 tensor peak), against the same
    bf16 peak.

    As in :func:`exp_rescaled_attention_efficiency` the time per score element is
    ``W·(d + head_dim_half) / (peak·max_fraction)``: the ``W·d`` part is the GEMMs, the
    ``W·head_dim_half`` part the per-score softmax work, which FP8 does not speed up. Only
    the GEMM part is divided by ``lane_speedup``: ``W·(d/r + head_dim_half)`` equals ``W·(d +
    r·head_dim_half)/r``, i.e. max_fraction and head_dim_half both times r. Check against
    FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608, abstract): on H100 up to 740
    TFLOP/s in FP16 and close to 1.2 PFLOP/s in FP8, 1.62x; the H200 fit here gives 1.66x at
    head dim 256 (docs/evidence/fp8_attention.md).
    """
    if not lane_speedup >= 1.0:
        raise MosaicInputError(f"lane_speedup must be >= 1; got {lane_speedup}")
    return replace(efficiency, max_fraction=efficiency.max_fraction * lane_speedup,
                   head_dim_half=efficiency.head_dim_half * lane_speedup)


def flash_attention_flops(batch: npt.ArrayLike, heads: npt.ArrayLike, seq_q: npt.ArrayLike,
                          seq_kv: npt.ArrayLike, head_dim: npt.ArrayLike,
                          causal: npt.ArrayLike, backward: bool = False) -> np.ndarray:
    """FLOPs of attention: 4·b·h·s_q·s_kv·d forward (QK^T and PV), halved when causal;
    backward 2.5x forward (FlashAttention-2, Dao 2023, Sec. 4.1 FLOP count: five matmuls
    vs two, the recompute of QK^T included). ``heads`` are the query heads on this GPU
    (GQA does not change the FLOPs)."""
    fwd = FLASH_FORWARD_FLOPS_PER_PAIR_DIM * np.asarray(batch, float) * np.asarray(
        heads, float) * np.asarray(seq_q, float) * np.asarray(seq_kv, float) * np.asarray(
        head_dim, float)
    fwd = fwd * np.where(np.asarray(causal, dtype=bool), CAUSAL_PAIR_FRACTION, 1.0)
    return fwd * (FLASH_BACKWARD_TO_FORWARD_FLOPS if backward else 1.0)


def flash_attention_time_s(batch: npt.ArrayLike, heads: npt.ArrayLike, seq_q: npt.ArrayLike,
                           seq_kv: npt.ArrayLike, head_dim: npt.ArrayLike,
                           causal: npt.ArrayLike, peak_flops_per_s: npt.ArrayLike, *,
                           backward: bool = False, efficiency: AttentionEfficiency | None = None,
                           kernel_latency_s: float = _k("kernel_latency_s")) -> np.ndarray:
    """Time of a flash-attention forward (or backward) kernel.

    ``efficiency`` defaults to the fit pooled over B200/H200/A100, which is coarse (11-20%
    error forward, up to 41% backward on B200); pass ``FLASH_ATTENTION_EFFICIENCY[device]
    [pass]`` for the device fit (4-11%, benchmarks/bench_kernel_accuracy.py).
    """
    if efficiency is None:
        efficiency = FLASH_ATTENTION_EFFICIENCY["generic"]["bwd" if backward else "fwd"]
    flops = flash_attention_flops(batch, heads, seq_q, seq_kv, head_dim, causal, backward)
    rate = _positive("peak_flops_per_s", peak_flops_per_s) * efficiency.at(seq_kv, head_dim)
    return kernel_latency_s + flops / rate


# --------------------------------------------------------------------------------------
# Measured kernel tables
# --------------------------------------------------------------------------------------


class _LogGridInterpolator:
    """Multilinear interpolation of log(value) on the grid of measured log(coordinates).

    The axes are the distinct measured values of each coordinate. A query is covered when
    it lies inside the axes' range and every corner of its grid cell with non-zero weight
    was measured (a full sweep is then interpolated everywhere inside its hull; a sparse one
    only in fully measured cells). Exact at measured points; repeats are averaged in log
    space; anything not covered is NaN.
    """

    def __init__(self, points: np.ndarray, values: np.ndarray) -> None:
        logs = np.log(points)
        self._axes = [np.unique(logs[:, j]) for j in range(logs.shape[1])]
        cell = tuple(np.searchsorted(ax, logs[:, j]) for j, ax in enumerate(self._axes))
        sums = np.zeros([len(ax) for ax in self._axes])
        counts = np.zeros_like(sums)
        np.add.at(sums, cell, np.log(values))
        np.add.at(counts, cell, 1.0)
        self._grid = np.where(counts > 0, sums / np.maximum(counts, 1.0), np.nan)

    def __call__(self, points: np.ndarray) -> np.ndarray:
        logs = np.log(points)
        lower, weight, covered = [], [], np.ones(len(points), dtype=bool)
        for j, ax in enumerate(self._axes):
            x = logs[:, j]
            i = np.clip(np.searchsorted(ax, x, side="right") - 1, 0, max(len(ax) - 2, 0))
            upper = np.minimum(i + 1, len(ax) - 1)
            span = np.where(upper > i, ax[upper] - ax[i], 1.0)
            w = np.clip(np.where(upper > i, (x - ax[i]) / span, 0.0), 0.0, 1.0)
            covered &= (x >= ax[0] - 1e-9) & (x <= ax[-1] + 1e-9)
            lower.append(i)
            weight.append(np.where(np.isclose(w, 0.0, atol=1e-12), 0.0, w))
        total = np.zeros(len(points))
        for corner in np.ndindex(*(2,) * len(self._axes)):
            w_c = np.ones(len(points))
            index = []
            for j, up in enumerate(corner):
                w_c = w_c * (weight[j] if up else 1.0 - weight[j])
                index.append(np.minimum(lower[j] + up, len(self._axes[j]) - 1))
            value = self._grid[tuple(index)]
            used = w_c > 0
            covered &= ~(used & np.isnan(value))
            total += np.where(used, w_c * np.nan_to_num(value), 0.0)
        return np.where(covered, np.exp(total), np.nan)


# The dtype keys of measured kernel tables: those `mosaic bench` measures (bench.device
# ELEMENT_BYTES) and NVFP4's fp4; a model lookup uses Workload precision's table key.
TABLE_DTYPES = ("bf16", "fp16", "fp32", "fp8", "mxfp8", "fp4")


class _KernelTable:
    """Measured kernel times per dtype over shape columns ``_DIMS`` (log-space grid)."""

    _DIMS: tuple[str, ...] = ()
    _NAME = ""

    def __init__(self, frame: pd.DataFrame) -> None:
        frame = self._with_time(frame)
        self._frame = frame
        self._by_dtype = {
            str(dtype): _LogGridInterpolator(rows[list(self._DIMS)].to_numpy(float),
                                              rows["time_s"].to_numpy(float))
            for dtype, rows in frame.groupby("dtype")
        }

    @classmethod
    def from_file(cls, path: str | Path) -> _KernelTable:
        """Load a CSV or Parquet file of measurements; errors name the file."""
        from mosaic.table_files import read_table

        try:
            return cls(read_table(path, f"{cls._NAME} table"))
        except MosaicInputError as exc:
            text = str(exc)
            raise (exc if str(path) in text else MosaicInputError(f"{path}: {text}")) from None

    def _flops(self, frame: pd.DataFrame) -> np.ndarray:
        return 2.0 * np.prod(frame[list(self._DIMS)].to_numpy(float), axis=1)

    def _with_time(self, frame: pd.DataFrame) -> pd.DataFrame:
        from mosaic.table_files import bad_row_error, numeric_columns

        required = (*self._DIMS, "dtype")
        missing = [c for c in required if c not in frame.columns]
        if missing or not ({"time_s", "tflops"} & set(frame.columns)):
            raise MosaicInputError(
                f"{self._NAME} table lacks columns {missing or ['time_s or tflops']}; "
                f"required: {', '.join(required)} and time_s or tflops")
        what = f"{self._NAME} table"
        unknown = ~frame["dtype"].astype(str).isin(TABLE_DTYPES)
        if unknown.any():  # a trial's 'float77' was accepted and read as no dtype
            raise bad_row_error(what, frame, "dtype", unknown, ", ".join(TABLE_DTYPES))
        frame = numeric_columns(frame, [c for c in (*self._DIMS, "time_s", "tflops")
                                        if c in frame.columns], what)
        if "time_s" not in frame.columns:
            frame = frame.assign(time_s=self._flops(frame) / (frame["tflops"] * 1e12))
        for column in (*self._DIMS, "time_s"):
            bad = ~(frame[column].to_numpy(float) > 0)
            if bad.any():
                raise bad_row_error(what, frame, column, bad, "> 0")
        return frame.assign(dtype=frame["dtype"].astype(str))

    def fastest_flops_per_s(self) -> dict[str, tuple[float, int, float]]:
        """Per dtype: the highest FLOP/s a measured row implies, its row (from 1, the first
        after the header) and its FLOPs."""
        frame = self._frame
        flops = self._flops(frame)
        rates = flops / frame["time_s"].to_numpy(float)
        dtypes = frame["dtype"].to_numpy()
        best: dict[str, tuple[float, int, float]] = {}
        for dtype in np.unique(dtypes):
            rows = np.flatnonzero(dtypes == dtype)
            top = rows[int(np.argmax(rates[rows]))]
            best[str(dtype)] = (float(rates[top]), int(top) + 1, float(flops[top]))
        return best

    def _lookup(self, dtype: str, *coords: npt.ArrayLike) -> np.ndarray:
        arrays = np.broadcast_arrays(*(np.asarray(c, dtype=float) for c in coords))
        interp = self._by_dtype.get(dtype)
        if interp is None:
            return np.full(arrays[0].shape, np.nan)
        points = np.stack([a.ravel() for a in arrays], axis=1)
        return interp(points).reshape(arrays[0].shape)


class GemmTable(_KernelTable):
    """Measured dense GEMM times: columns m, n, k, dtype and time_s (or tflops)."""

    _DIMS = ("m", "n", "k")
    _NAME = "GEMM"

    def time_s(self, m: npt.ArrayLike, n: npt.ArrayLike, k: npt.ArrayLike,
               dtype: str = "bf16") -> np.ndarray:
        """Interpolated time, NaN where the ``dtype`` measurements do not cover a shape."""
        return self._lookup(dtype, m, n, k)


class GroupedGemmTable(_KernelTable):
    """Measured grouped GEMM times: columns groups, m_per_group, n, k, dtype and time_s
    (or tflops, counted as 2·groups·m_per_group·n·k)."""

    _DIMS = ("groups", "m_per_group", "n", "k")
    _NAME = "grouped GEMM"

    def time_s(self, groups: npt.ArrayLike, m_per_group: npt.ArrayLike, n: npt.ArrayLike,
               k: npt.ArrayLike, dtype: str = "bf16") -> np.ndarray:
        """Interpolated time, NaN where the ``dtype`` measurements do not cover a shape."""
        return self._lookup(dtype, groups, m_per_group, n, k)
