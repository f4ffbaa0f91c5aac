"""Re-derive the fitted constants of src/mosaic/perf/data/microbench_fits.yaml.

    .venv/bin/python benchmarks/fit_microbench_constants.py

Fits the library's own analytical models (least squares on log time) to the ScalePlan
microbenchmark tables and prints the values to copy into the YAML file. Needs
../shared/reference/microbench.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from _scaleplan import (
    DEVICES,
    P6_B200,
    available,
    collective_rows,
    gemm_rows,
    grouped_rows,
    sdpa_rows,
)
from mosaic.perf.collectives import collective_estimate
from mosaic.perf.kernels import (
    DEFAULT_GEMM,
    AttentionEfficiency,
    flash_attention_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
)

TRAINING_SHAPES_MIN = 256  # GEMM fit uses M, N, K >= 256 (training-relevant shapes)
HOST_BOUND_SHARE = 0.3  # grouped rows whose GPU model time is < 30% of measured are host-bound
SDPA_MIN_TIME_S = 0.5e-3  # shorter attention calls are host-bound in the TE harness


def fit_collectives() -> None:
    rows = collective_rows()
    names = ("launch_latency_s", "scale_out_latency_s", "ring_scale_up_efficiency",
             "ring_scale_out_efficiency", "p2p_scale_up_efficiency", "p2p_scale_out_efficiency")

    def residuals(x: np.ndarray) -> np.ndarray:
        ic = replace(P6_B200, **dict(zip(names, x, strict=True)))
        out = []
        for op, g in rows.groupby("collective"):
            t, _ = collective_estimate(op, g["message_bytes"], g["group_size"], g["stride"], ic)
            out.append(np.log(t / g["time_s"].to_numpy()))
        return np.concatenate(out)

    x0 = [getattr(P6_B200, n) for n in names]
    bounds = ([0, 0, 0.05, 0.05, 0.05, 0.05], [1e-3, 1e-3, 1, 1, 1, 1])
    fit = least_squares(residuals, x0, bounds=bounds)
    print(f"collectives ({len(rows)} rows, scale_up_latency_s held at "
          f"{P6_B200.scale_up_latency_s:g}):")
    for name, value in zip(names, fit.x, strict=True):
        print(f"  {name}: {value:.4g}")


def fit_gemm() -> None:
    rows = gemm_rows()
    rows = rows[(rows["dtype"] == "bf16") & (rows[["m", "n", "k"]].min(axis=1)
                                             >= TRAINING_SHAPES_MIN)]
    devices = ("B200", "H100")

    def residuals(x: np.ndarray) -> np.ndarray:
        out = []
        for i, device in enumerate(devices):
            g, spec = rows[rows["device"] == device], DEVICES[device]
            params = replace(DEFAULT_GEMM, max_fraction_of_peak=x[0], k_half=x[1],
                             hbm_efficiency=x[2], kernel_latency_s=x[3 + i])
            t = gemm_time_s(g["m"], g["n"], g["k"], spec["peak"], spec["hbm"], spec["sm"],
                            params=params)
            out.append(np.log(t / g["time_s"].to_numpy()))
        return np.concatenate(out)

    fit = least_squares(residuals, [0.7, 200, 0.7, 1e-5, 1e-5],
                        bounds=([0.1, 0, 0.1, 0, 0], [1, 1e4, 1, 1e-4, 1e-4]))
    print(f"GEMM ({len(rows)} bf16 rows of B200 + H100, M,N,K >= {TRAINING_SHAPES_MIN}; "
          "per-device timing floor fitted as a nuisance):")
    print(f"  gemm_max_fraction_of_peak: {fit.x[0]:.4g}\n  gemm_k_half: {fit.x[1]:.4g}\n"
          f"  gemm_hbm_efficiency: {fit.x[2]:.4g}\n  (timing floors: B200 {fit.x[3]:.3g} s, "
          f"H100 {fit.x[4]:.3g} s)")


def fit_grouped_host_floor() -> None:
    rows, spec = grouped_rows(), DEVICES["B200"]
    fwd_gpu = grouped_gemm_time_s(rows["groups"], rows["m_per_group"], rows["n"], rows["k"],
                                  spec["peak"], spec["hbm"], spec["sm"])
    bwd_gpu = (grouped_gemm_time_s(rows["groups"], rows["m_per_group"], rows["k"], rows["n"],
                                   spec["peak"], spec["hbm"], spec["sm"])
               + grouped_gemm_time_s(rows["groups"], rows["k"], rows["n"], rows["m_per_group"],
                                     spec["peak"], spec["hbm"], spec["sm"]))
    for label, gpu, measured in (("fwd", fwd_gpu, rows["fwd_time_s"]),
                                 ("bwd", bwd_gpu, rows["bwd_time_s"])):
        host = gpu < HOST_BOUND_SHARE * measured.to_numpy()
        design = np.stack([np.ones(host.sum()), rows["groups"].to_numpy(float)[host]], axis=1)
        fixed_s, per_group_s = np.linalg.lstsq(design, measured.to_numpy()[host], rcond=None)[0]
        print(f"te_grouped_linear_host_floor_{label} ({host.sum()} host-bound rows): "
              f"fixed_s {fixed_s:.3g}, per_group_s {per_group_s:.3g}")


def _sdpa_residuals(x: np.ndarray, rows: pd.DataFrame, backward: bool) -> np.ndarray:
    column = "bwd_time_s" if backward else "fwd_time_s"
    peak = rows["device"].map(lambda d: DEVICES[d]["peak"]).to_numpy()
    t = flash_attention_time_s(rows["batch"], rows["heads"], rows["seq"], rows["seq"],
                               rows["head_dim"], True, peak, backward=backward,
                               efficiency=AttentionEfficiency(*x))
    return np.log(t / rows[column].to_numpy())


def fit_attention() -> None:
    rows = sdpa_rows()
    print(f"flash_attention_efficiency (TE causal rows with time >= {SDPA_MIN_TIME_S} s):")
    groups = [(d, rows[rows["device"] == d]) for d in ("B200", "H200", "A100")]
    for device, g in [*groups, ("generic", rows)]:
        triples = {}
        for backward, label in ((False, "fwd"), (True, "bwd")):
            slow = g[g["bwd_time_s" if backward else "fwd_time_s"] >= SDPA_MIN_TIME_S]
            fit = least_squares(_sdpa_residuals, [0.7, 1000.0, 30.0], args=(slow, backward),
                                bounds=([0.05, 0, 0], [1, 1e5, 1e4]))
            triples[label] = [round(float(v), 3) for v in fit.x]
        print(f"  {device}: {triples}")


def main() -> None:
    if not available():
        raise SystemExit("ScalePlan tables not found under ../shared/reference/microbench")
    fit_collectives()
    fit_gemm()
    fit_grouped_host_floor()
    fit_attention()


if __name__ == "__main__":
    main()
