"""Fit the kernel and collective constants of the performance model to microbenchmark
tables (paper Sec. 5.3): the built-in fits (``perf/data/microbench_fits.yaml``, from the
ScalePlan tables via ``benchmarks/fit_microbench_constants.py``) and a user's own
``mosaic bench`` tables run through the same functions.

Every fit is least squares on log time (relative error, scipy ``least_squares``) of the
library's own analytical model (``mosaic.perf.kernels``, ``mosaic.perf.collectives``), so a
fitted constant means exactly what the model reads. Input columns (the vocabulary of
``benchmarks/_scaleplan.py`` and of ``mosaic bench``):

* collectives: collective, group_size, stride, message_bytes, time_s
* gemm: device, dtype, m, n, k, time_s
* grouped: groups, m_per_group, n, k (forward GEMM), fwd_time_s, bwd_time_s
* attention: device, batch, heads, seq, head_dim, fwd_time_s, bwd_time_s (causal)
* streaming: moved_bytes, time_s
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from mosaic.errors import MosaicInputError
from mosaic.perf.collectives import Interconnect, collective_estimate
from mosaic.perf.kernels import (
    DEFAULT_GEMM,
    AttentionEfficiency,
    flash_attention_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
)

COLLECTIVE_CONSTANTS = ("launch_latency_s", "scale_out_latency_s", "ring_scale_up_efficiency",
                        "ring_scale_out_efficiency", "p2p_scale_up_efficiency",
                        "p2p_scale_out_efficiency")
_COLLECTIVE_BOUNDS = {"launch_latency_s": (0.0, 1e-3), "scale_up_latency_s": (0.0, 1e-3),
                      "scale_out_latency_s": (0.0, 1e-3)}  # efficiencies: (0.05, 1)
TRAINING_SHAPES_MIN = 256  # GEMM fit on M, N, K >= 256 (training-relevant shapes)
HOST_BOUND_SHARE = 0.3  # grouped rows whose model GPU time < 30% of measured are host-bound


@dataclass(frozen=True)
class DeviceRates:
    """The reference rates a device's fractions are measured against."""

    peak_flops_per_s: float
    hbm_bw_bytes_per_s: float
    sm_count: int


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(np.mean(np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)) * 100)



# The GEMM fit's upper bound on the per-kernel latency: a fit that ends on it did not
# measure a latency (a busy CPU host's 8 ms GEMMs pinned it there; a trial).
GEMM_LATENCY_CEILING_S = 1e-4

@dataclass(frozen=True)
class Fit:
    """Fitted values and the in-sample error of the model with them."""

    values: dict[str, float]
    rows: int
    mape_percent: float


# --------------------------------------------------------------------------------------
# Collectives
# --------------------------------------------------------------------------------------


def collective_predictions(rows: pd.DataFrame, ic: Interconnect) -> np.ndarray:
    """Model time of every row (index order)."""
    rows = rows.reset_index(drop=True)
    out = np.empty(len(rows))
    for op, g in rows.groupby("collective"):
        out[g.index] = collective_estimate(op, g["message_bytes"], g["group_size"],
                                           g["stride"], ic)[0]
    return out


def fit_collectives(rows: pd.DataFrame, ic: Interconnect,
                    names: Sequence[str] = COLLECTIVE_CONSTANTS) -> Fit:
    """Fit ``names`` of ``ic`` (the others held) to measured group collectives."""
    rows = rows[rows["collective"] != "send_recv"].reset_index(drop=True)
    if rows.empty:
        raise MosaicInputError("no all-gather/reduce-scatter/all-reduce/all-to-all rows to fit")

    def residuals(x: np.ndarray) -> np.ndarray:
        fitted_ic = replace(ic, **dict(zip(names, x, strict=True)))
        out = []
        for op, g in rows.groupby("collective"):
            t, _ = collective_estimate(op, g["message_bytes"], g["group_size"], g["stride"],
                                       fitted_ic)
            out.append(np.log(t / g["time_s"].to_numpy()))
        return np.concatenate(out)

    x0 = [getattr(ic, n) for n in names]
    bounds = ([_COLLECTIVE_BOUNDS.get(n, (0.05, 1.0))[0] for n in names],
              [_COLLECTIVE_BOUNDS.get(n, (0.05, 1.0))[1] for n in names])
    x0 = list(np.clip(x0, bounds[0], bounds[1]))
    fit = least_squares(residuals, x0, bounds=bounds)
    values = {n: float(v) for n, v in zip(names, fit.x, strict=True)}
    predicted = collective_predictions(rows, replace(ic, **values))
    return Fit(values, len(rows), mape(predicted, rows["time_s"].to_numpy()))


# --------------------------------------------------------------------------------------
# Dense GEMMs
# --------------------------------------------------------------------------------------


def training_gemm_rows(rows: pd.DataFrame, dtype: str = "bf16",
                       min_dim: int = TRAINING_SHAPES_MIN) -> pd.DataFrame:
    """Rows of ``dtype`` with M, N, K >= ``min_dim``."""
    return rows[(rows["dtype"] == dtype) & (rows[["m", "n", "k"]].min(axis=1) >= min_dim)]


def fit_gemm(rows: pd.DataFrame, devices: Mapping[str, DeviceRates]) -> tuple[Fit, np.ndarray]:
    """Joint fit of max_fraction_of_peak, k_half and hbm_efficiency over ``devices`` (rows
    keyed by the ``device`` column), each device with its own kernel latency (a nuisance
    when the harness adds a floor). Returns the fit and the per-device latencies."""
    names = list(devices)

    def predict(x: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for i, device in enumerate(names):
            g, spec = rows[rows["device"] == device], devices[device]
            params = replace(DEFAULT_GEMM, max_fraction_of_peak=x[0], k_half=x[1],
                             hbm_efficiency=x[2], kernel_latency_s=x[3 + i])
            t = gemm_time_s(g["m"], g["n"], g["k"], spec.peak_flops_per_s,
                            spec.hbm_bw_bytes_per_s, spec.sm_count, params=params)
            out.append((t, g["time_s"].to_numpy()))
        return out

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.concatenate([np.log(t / m) for t, m in predict(x)])

    n = len(names)
    fit = least_squares(residuals, [0.7, 200, 0.7] + [1e-5] * n,
                        bounds=([0.1, 0, 0.1] + [0] * n,
                                [1, 1e4, 1] + [GEMM_LATENCY_CEILING_S] * n))
    pairs = predict(fit.x)
    error = mape(np.concatenate([t for t, _ in pairs]), np.concatenate([m for _, m in pairs]))
    values = {"gemm_max_fraction_of_peak": float(fit.x[0]), "gemm_k_half": float(fit.x[1]),
              "gemm_hbm_efficiency": float(fit.x[2])}
    return Fit(values, len(rows), error), fit.x[3:]


# --------------------------------------------------------------------------------------
# Grouped expert GEMMs
# --------------------------------------------------------------------------------------


def grouped_gpu_times(rows: pd.DataFrame, rates: DeviceRates,
                      params: object = DEFAULT_GEMM) -> tuple[np.ndarray, np.ndarray]:
    """Model GPU time of the forward and of the backward (dgrad [m,n]x[n,k] + wgrad
    [k,m]x[m,n]) grouped GEMMs of every row."""
    args = (rates.peak_flops_per_s, rates.hbm_bw_bytes_per_s, rates.sm_count)
    groups, m, n, k = rows["groups"], rows["m_per_group"], rows["n"], rows["k"]
    fwd = grouped_gemm_time_s(groups, m, n, k, *args, params=params)
    bwd = (grouped_gemm_time_s(groups, m, k, n, *args, params=params)
           + grouped_gemm_time_s(groups, k, n, m, *args, params=params))
    return fwd, bwd


def fit_grouped_host_floor(rows: pd.DataFrame, rates: DeviceRates,
                           params: object = DEFAULT_GEMM) -> dict[str, tuple[float, float, int]]:
    """Per pass ("fwd", "bwd"): (fixed_s, per_group_s, rows) of the line through the rows
    whose model GPU time is below ``HOST_BOUND_SHARE`` of the measured time (host-bound
    launchers: one launch per group)."""
    fwd_gpu, bwd_gpu = grouped_gpu_times(rows, rates, params)
    out = {}
    for label, gpu, measured in (("fwd", fwd_gpu, rows["fwd_time_s"]),
                                 ("bwd", bwd_gpu, rows["bwd_time_s"])):
        host = gpu < HOST_BOUND_SHARE * measured.to_numpy()
        if host.sum() < 2:
            out[label] = (float("nan"), float("nan"), int(host.sum()))
            continue
        design = np.stack([np.ones(host.sum()), rows["groups"].to_numpy(float)[host]], axis=1)
        fixed_s, per_group_s = np.linalg.lstsq(design, measured.to_numpy()[host], rcond=None)[0]
        out[label] = (float(fixed_s), float(per_group_s), int(host.sum()))
    return out


def fit_te_grouped_host_floor(rows: pd.DataFrame
                              ) -> tuple[dict[str, dict[str, list[float]]], dict[str, Any]]:
    """Per precision of ``mosaic bench te-grouped`` rows: the line fixed_s + per_group_s ·
    groups through the median forward time per group count ("fwd") and through forward and
    backward less forward ("bwd"), least squares over at least two group counts; (the lines
    of the precisions whose fits are physical, per precision a report of each fit or of why
    it was left out). The rows are host-bound by construction (bench/te_grouped.py), so the
    wall time per call is the host's."""
    floors: dict[str, dict[str, list[float]]] = {}
    report: dict[str, Any] = {}
    for precision, group in rows.groupby("dtype"):
        medians = group.groupby(["pass", "groups"])["time_s"].median()
        if "fwd" not in medians or "fwd_bwd" not in medians:
            report[str(precision)] = {"not_fitted": "needs both fwd and fwd_bwd rows"}
            continue
        forward = medians["fwd"]
        backward = (medians["fwd_bwd"] - forward).dropna()
        lines, notes = {}, []
        for label, times in (("fwd", forward), ("bwd", backward)):
            if len(times) < 2:
                notes.append(f"{label}: fewer than two group counts")
                continue
            per_group_s, fixed_s = np.polyfit(times.index.to_numpy(float), times.to_numpy(), 1)
            if per_group_s <= 0 or fixed_s < 0:
                notes.append(f"{label}: fixed {fixed_s:.3g} s, per group {per_group_s:.3g} s "
                             "is not a launch floor (host time must grow with the groups)")
                continue
            lines[label] = [float(fixed_s), float(per_group_s)]
        if notes:
            report[str(precision)] = {"not_fitted": "; ".join(notes)}
            continue
        floors[str(precision)] = lines
        report[str(precision)] = {"fitted": lines, "group_counts": len(forward)}
    return floors, report


# --------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------


def _sdpa_residuals(x: np.ndarray, rows: pd.DataFrame, peak: np.ndarray, backward: bool
                    ) -> np.ndarray:
    column = "bwd_time_s" if backward else "fwd_time_s"
    t = flash_attention_time_s(rows["batch"], rows["heads"], rows["seq"], rows["seq"],
                               rows["head_dim"], True, peak, backward=backward,
                               efficiency=AttentionEfficiency(*x))
    return np.log(t / rows[column].to_numpy())


def fit_attention(rows: pd.DataFrame, peaks: Mapping[str, float], min_time_s: float = 0.0
                  ) -> dict[str, tuple[list[float], int, float]]:
    """Per pass: ([max_fraction, seq_half_tokens, head_dim_half], rows, MAPE %) of causal
    attention rows with time >= ``min_time_s``, each device against its own peak."""
    out = {}
    for backward, label in ((False, "fwd"), (True, "bwd")):
        column = "bwd_time_s" if backward else "fwd_time_s"
        slow = rows[rows[column] >= min_time_s]
        slow = slow[np.isfinite(slow[column])]
        if slow.empty:
            continue
        peak = slow["device"].map(peaks).to_numpy(float)
        fit = least_squares(_sdpa_residuals, [0.7, 1000.0, 30.0], args=(slow, peak, backward),
                            bounds=([0.05, 0, 0], [1, 1e5, 1e4]))
        error = float(np.mean(np.abs(np.exp(fit.fun) - 1.0)) * 100)
        out[label] = ([float(v) for v in fit.x], len(slow), error)
    return out


# --------------------------------------------------------------------------------------
# Streaming kernels
# --------------------------------------------------------------------------------------


def fit_streaming(rows: pd.DataFrame, hbm_bw_bytes_per_s: float) -> Fit:
    """time = latency + moved_bytes / (hbm_bw · efficiency), linear least squares on
    relative error (rows weighted by 1/time)."""
    size = rows["moved_bytes"].to_numpy(float)
    time_s = rows["time_s"].to_numpy(float)
    if len(rows) < 2 or np.ptp(size) == 0:
        raise MosaicInputError("the streaming fit needs element-wise rows of >= 2 sizes")
    weight = 1.0 / time_s
    design = np.stack([np.ones_like(size), size], axis=1) * weight[:, None]
    (latency_s, seconds_per_byte), *_ = np.linalg.lstsq(design, time_s * weight, rcond=None)
    if not seconds_per_byte > 0:
        raise MosaicInputError("streaming times do not grow with the bytes moved (timer "
                               "noise?); measure larger sizes")
    latency_s = max(latency_s, 0.0)
    efficiency = 1.0 / (seconds_per_byte * hbm_bw_bytes_per_s)
    predicted = latency_s + size * seconds_per_byte
    return Fit({"elementwise_hbm_efficiency": float(efficiency),
                "elementwise_latency_s": float(latency_s)}, len(rows), mape(predicted, time_s))
