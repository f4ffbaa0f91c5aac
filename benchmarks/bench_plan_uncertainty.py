"""Benchmark: what the planner's uncertainty and coverage add to a Table 3 plan.

Run: .venv/bin/python benchmarks/bench_plan_uncertainty.py [--samples FILE]

Searches the Table 3 envelope once (not timed here; bench_plan.py times it), then times
plan.coverage.plan_uncertainty (2,000 seeded throughput draws over every trainable
candidate, plus law samples when a samples file is given) and candidate_assessment of the
optimum, and prints P(optimal) of the point optimum and the robust pick.
"""

from __future__ import annotations

import argparse
import time

from mosaic.law import default_law
from mosaic.perf.calibration import default_calibration
from mosaic.plan import Envelope, SearchSpace, resolve_system, search
from mosaic.plan.coverage import candidate_assessment, plan_uncertainty
from mosaic.plan.uncertainty import load_samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default=None, help="law samples file (optional)")
    args = parser.parse_args()
    law, calibration = default_law(), default_calibration()
    result = search(Envelope(resolve_system("B200")), SearchSpace(), law, calibration)
    samples = None if args.samples is None else load_samples(args.samples)
    start = time.perf_counter()
    uncertainty = plan_uncertainty(result, law, samples, calibration)
    uncertainty_s = time.perf_counter() - start
    start = time.perf_counter()
    assessment = candidate_assessment(result, calibration, result.optimum_index)
    coverage_s = time.perf_counter() - start
    grid = result.grid
    robust = uncertainty.robust_row

    def label(row: int) -> str:
        return (f"q={grid.q[row]} E={grid.experts[row]} K={grid.top_k[row]} "
                f"G={grid.split_factor[row]}")

    print(f"trainable candidates: {result.ranking.size}, samples: {uncertainty.samples}")
    print(f"plan_uncertainty: {uncertainty_s:.3f} s; candidate_assessment: {coverage_s:.4f} s")
    print(f"point optimum {label(result.optimum_index)}: P(optimal) "
          f"{uncertainty.p_optimal[0]:.3f}; robust pick {label(robust)}")
    print(f"optimum inside the calibrated envelope: {assessment.inside}; "
          f"tokens/s 90% interval {assessment.tokens_per_s.low:,.0f} .. "
          f"{assessment.tokens_per_s.high:,.0f} ({assessment.tokens_per_s.scope})")


if __name__ == "__main__":
    main()
