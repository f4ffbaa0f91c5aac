"""Re-derive the fitted constants of src/mosaic/perf/data/microbench_fits.yaml.

    .venv/bin/python benchmarks/fit_microbench_constants.py

Fits the library's own analytical models (least squares on log time; the fit functions
are mosaic.evaluate.microbench_fit, shared with `mosaic calibrate --microbench`) to the
ScalePlan microbenchmark tables and prints the values to copy into the YAML file. Needs
../shared/reference/microbench.
"""

from __future__ import annotations

from _scaleplan import (
    DEVICES,
    P6_B200,
    available,
    collective_rows,
    gemm_rows,
    grouped_rows,
    sdpa_rows,
)
from mosaic.evaluate.microbench_fit import (
    DeviceRates,
    fit_attention,
    fit_collectives,
    fit_gemm,
    fit_grouped_host_floor,
    training_gemm_rows,
)

SDPA_MIN_TIME_S = 0.5e-3  # shorter attention calls are host-bound in the TE harness


def _rates(device: str) -> DeviceRates:
    spec = DEVICES[device]
    return DeviceRates(spec["peak"], spec["hbm"], spec["sm"])


def report_collectives() -> None:
    rows = collective_rows()
    fit = fit_collectives(rows, P6_B200)
    print(f"collectives ({len(rows)} rows, scale_up_latency_s held at "
          f"{P6_B200.scale_up_latency_s:g}):")
    for name, value in fit.values.items():
        print(f"  {name}: {value:.4g}")


def report_gemm() -> None:
    rows = training_gemm_rows(gemm_rows())
    fit, floors = fit_gemm(rows, {d: _rates(d) for d in ("B200", "H100")})
    print(f"GEMM ({len(rows)} bf16 rows of B200 + H100, M,N,K >= 256; "
          "per-device timing floor fitted as a nuisance):")
    v = fit.values
    print(f"  gemm_max_fraction_of_peak: {v['gemm_max_fraction_of_peak']:.4g}\n"
          f"  gemm_k_half: {v['gemm_k_half']:.4g}\n"
          f"  gemm_hbm_efficiency: {v['gemm_hbm_efficiency']:.4g}\n  (timing floors: B200 "
          f"{floors[0]:.3g} s, H100 {floors[1]:.3g} s)")


def report_grouped_host_floor() -> None:
    floors = fit_grouped_host_floor(grouped_rows(), _rates("B200"))
    for label, (fixed_s, per_group_s, n) in floors.items():
        print(f"te_grouped_linear_host_floor_{label} ({n} host-bound rows): "
              f"fixed_s {fixed_s:.3g}, per_group_s {per_group_s:.3g}")


def report_attention() -> None:
    rows = sdpa_rows()
    peaks = {d: DEVICES[d]["peak"] for d in DEVICES}
    print(f"flash_attention_efficiency (TE causal rows with time >= {SDPA_MIN_TIME_S} s):")
    groups = [(d, rows[rows["device"] == d]) for d in ("B200", "H200", "A100")]
    for device, g in [*groups, ("generic", rows)]:
        fits = fit_attention(g, peaks, SDPA_MIN_TIME_S)
        triples = {label: [round(v, 3) for v in fits[label][0]] for label in ("fwd", "bwd")}
        print(f"  {device}: {triples}")


def main() -> None:
    if not available():
        raise SystemExit("ScalePlan tables not found under ../shared/reference/microbench")
    report_collectives()
    report_gemm()
    report_grouped_host_floor()
    report_attention()


if __name__ == "__main__":
    main()
