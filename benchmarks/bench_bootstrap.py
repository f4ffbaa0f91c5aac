"""Benchmark: 1,000-resample bootstraps of the Epoch Chinchilla fit (with BCa jackknife).

Run: .venv/bin/python benchmarks/bench_bootstrap.py   (target: < 60 s on 2 cores each)
"""

from __future__ import annotations

import sys
import time

from bench_law_fit import EPOCH_CSV
from mosaic.law import CHINCHILLA, FitSettings, bootstrap_fit, fit_law, load_epoch_chinchilla

RESAMPLES = 1000


def main() -> int:
    if not EPOCH_CSV.is_file():
        print(f"skipped: Epoch data not found at {EPOCH_CSV} (needs ../shared)")
        return 0
    runs = load_epoch_chinchilla(EPOCH_CSV)
    fit = fit_law(runs, CHINCHILLA, FitSettings(huber_delta=1e-3))
    for method in ("wild", "case"):
        start = time.perf_counter()
        result = bootstrap_fit(fit, method=method, n_resamples=RESAMPLES, seed=0)
        seconds = time.perf_counter() - start
        print(f"\n{method} bootstrap, {RESAMPLES} resamples + {runs.n_runs} jackknife refits: "
              f"{seconds:.1f} s")  # fmt: skip
        print(f"  {'coef':>6} {'estimate':>10} {'95% percentile':>24} {'95% BCa':>24}")
        for name, iv in result.intervals.items():
            percentile = f"[{iv.percentile[0]:.4g}, {iv.percentile[1]:.4g}]"
            bca = f"[{iv.bca[0]:.4g}, {iv.bca[1]:.4g}]"
            print(f"  {name:>6} {iv.estimate:10.4g} {percentile:>24} {bca:>24}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
