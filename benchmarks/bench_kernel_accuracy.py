"""Accuracy of the analytical kernel and collective models against measured tables.

    .venv/bin/python benchmarks/bench_kernel_accuracy.py

Prints the mean absolute percentage error (MAPE) of mosaic.perf.kernels (dense GEMM,
grouped expert GEMM, flash attention) and mosaic.perf.collectives (all-gather,
reduce-scatter, all-reduce, all-to-all) against the ScalePlan microbenchmarks
(dmlc/ScalePlan benchmarks/results, commit 7ef065f) in ../shared/reference/microbench.
The constants were fitted to these same tables (benchmarks/fit_microbench_constants.py),
so this is an in-sample error: how well the model's form explains the measurements.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from _scaleplan import (
    DEVICES,
    P6_B200,
    available,
    collective_rows,
    gemm_rows,
    grouped_rows,
    mape,
    sdpa_rows,
)
from mosaic.perf.collectives import BusBandwidthTable, collective_estimate
from mosaic.perf.kernels import (
    DEFAULT_GEMM,
    FLASH_ATTENTION_EFFICIENCY,
    GemmTable,
    flash_attention_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
    te_grouped_linear_host_floor_s,
)


def _row(label: str, predicted: np.ndarray, measured: np.ndarray) -> None:
    print(f"  {label:<58} {mape(predicted, measured):6.1f}%   (n={len(measured)})")


def report_gemm() -> None:
    rows = gemm_rows()
    print("Dense GEMM, bf16, analytical vs ScalePlan gemm_util")
    for device in ("B200", "H100"):
        g = rows[(rows["device"] == device) & (rows["dtype"] == "bf16")]
        spec, measured = DEVICES[device], g["time_s"].to_numpy()
        train = (g[["m", "n", "k"]].min(axis=1) >= 256).to_numpy()
        for floor_label, latency in (("GPU kernel latency", DEFAULT_GEMM.kernel_latency_s),
                                     ("harness floor = min measured", measured.min())):
            params = replace(DEFAULT_GEMM, kernel_latency_s=latency)
            t = gemm_time_s(g["m"], g["n"], g["k"], spec["peak"], spec["hbm"], spec["sm"],
                            params=params)
            print(f" {device}, {floor_label} ({latency * 1e6:.1f} us):")
            _row("all shapes (2..262144 per dim)", t, measured)
            _row("M, N, K >= 256", t[train], measured[train])
            slow = train & (measured >= 1e-4)
            _row("M, N, K >= 256 and measured >= 100 us", t[slow], measured[slow])
        table = GemmTable(g[["m", "n", "k", "dtype", "time_s"]])
        self_err = np.max(np.abs(table.time_s(g["m"], g["n"], g["k"]) / measured - 1))
        print(f"  GemmTable reproduces its measured points to {self_err:.1e} relative")


def report_grouped() -> None:
    rows, spec = grouped_rows(), DEVICES["B200"]
    groups, m, n, k = (rows[c].to_numpy(float) for c in ("groups", "m_per_group", "n", "k"))

    def gemm(mm: np.ndarray, nn: np.ndarray, kk: np.ndarray) -> np.ndarray:
        return grouped_gemm_time_s(groups, mm, nn, kk, spec["peak"], spec["hbm"], spec["sm"])

    fwd_gpu = gemm(m, n, k)
    bwd_gpu = gemm(m, k, n) + gemm(k, n, m)  # dgrad [m,n]x[n,k] + wgrad [k,m]x[m,n]
    print("Grouped expert GEMM (TE GroupedLinear), B200 bf16, vs ScalePlan gemm_grouped_b200")
    for label, gpu, column, backward in (("fwd", fwd_gpu, "fwd_time_s", False),
                                         ("bwd = dgrad + wgrad", bwd_gpu, "bwd_time_s", True)):
        measured = rows[column].to_numpy()
        floor = te_grouped_linear_host_floor_s(groups, backward=backward)
        gpu_bound = gpu > 1.5 * floor
        print(f" {label}:")
        _row("GPU-bound rows (model GPU time > 1.5x host floor)", gpu[gpu_bound],
             measured[gpu_bound])
        _row("all rows, max(GPU time, TE host floor)", np.maximum(gpu, floor), measured)
        _row("all rows, GPU time only", gpu, measured)


def report_attention() -> None:
    rows = sdpa_rows()
    print("Flash attention (TE/cuDNN, causal), vs ScalePlan sdpa_{b200,h200,a100}")
    for device in ("B200", "H200", "A100"):
        g = rows[rows["device"] == device]
        for backward, column in ((False, "fwd_time_s"), (True, "bwd_time_s")):
            direction = "bwd" if backward else "fwd"
            measured = g[column].to_numpy()
            slow = measured >= 0.5e-3
            for fit in (device, "generic"):
                t = flash_attention_time_s(g["batch"], g["heads"], g["seq"], g["seq"],
                                           g["head_dim"], True, DEVICES[device]["peak"],
                                           backward=backward,
                                           efficiency=FLASH_ATTENTION_EFFICIENCY[fit][direction])
                _row(f"{device} {direction}, {fit} fit, measured >= 0.5 ms", t[slow],
                     measured[slow])


def report_collectives() -> None:
    rows = collective_rows()
    print("Collectives on p6-b200 (NVLink5 900 GB/s, EFA 50 GB/s per GPU), vs ScalePlan "
          "dp_collectives + a2a")
    predicted = np.empty(len(rows))
    for op, g in rows.groupby("collective"):
        predicted[g.index] = collective_estimate(op, g["message_bytes"], g["group_size"],
                                                 g["stride"], P6_B200)[0]
    measured = rows["time_s"].to_numpy()
    for (op, n, stride), g in rows.groupby(["collective", "group_size", "stride"]):
        layout = "inside node" if g["scope"].iat[0] == "intra" else (
            f"{g['ranks_per_domain'].iat[0]} ranks/node")
        _row(f"{op:<15} n={n:<3} stride={stride} ({layout})", predicted[g.index],
             measured[g.index])
    _row("all collectives, all sizes", predicted, measured)
    large = rows["message_bytes"].to_numpy() >= 256e6
    _row("all collectives, messages >= 256 MB", predicted[large], measured[large])
    table = BusBandwidthTable(rows)
    from_table = np.empty(len(rows))
    for op, g in rows.groupby("collective"):
        from_table[g.index] = collective_estimate(op, g["message_bytes"], g["group_size"],
                                                  g["stride"], P6_B200, table)[0]
    print(f"  BusBandwidthTable reproduces its measured points to "
          f"{np.max(np.abs(from_table / measured - 1)):.1e} relative")


def main() -> None:
    if not available():
        raise SystemExit("ScalePlan tables not found under ../shared/reference/microbench")
    for report in (report_gemm, report_grouped, report_attention, report_collectives):
        report()
        print()


if __name__ == "__main__":
    main()
