"""Benchmark: the global batch as a decision variable (plan --global-batch MIN:MAX).

Run: .venv/bin/python benchmarks/bench_plan_batch.py [--workers N] [--rule deepseek|kaplan]

Table 3's cluster and window (32 p6-b200 nodes, 20 days) on a reduced grid (q 8, 10, 12;
E 16, 64, 128, 256; K 2, 4; G 4), first at the fixed B_global = 1024, then with the batch
searched over 256 ... 8192 sequences under the rule. Prints wall times, the layouts
evaluated, the batches pruned by the rule's ceiling, and both optima (batch, bound, tokens,
loss), so the cost and the effect of the batch search are measured, not assumed.
"""

from __future__ import annotations

import argparse
import time

from mosaic.law import default_law
from mosaic.perf.calibration import default_calibration
from mosaic.plan import Envelope, SearchSpace, resolve_system, search
from mosaic.plan.batch import RULES, search_batch

SPACE = SearchSpace(q=(8, 10, 12), experts=(16, 64, 128, 256), top_k=(2, 4), split_factor=(4,))
BATCHES = (256, 512, 1024, 2048, 4096, 8192)


def describe(candidate: dict) -> str:
    bound = candidate.get("batch_bound_tokens")
    return (f"q={candidate['q']} E={candidate['experts']} K={candidate['top_k']}, "
            f"B={candidate['global_batch']}"
            + ("" if bound is None else f" (bound {bound / 2048:.0f} seqs)")
            + f", MFU {candidate['mfu']:.2%}, D {candidate['tokens'] / 1e12:.3f} T, "
            f"loss {candidate['loss']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="default: all CPUs")
    parser.add_argument("--rule", default="deepseek", choices=sorted(RULES))
    args = parser.parse_args()
    envelope = Envelope(resolve_system("B200"))
    law, calibration = default_law(), default_calibration()
    start = time.perf_counter()
    fixed = search(envelope, SPACE, law, calibration, workers=args.workers)
    fixed_s = time.perf_counter() - start
    start = time.perf_counter()
    searched, _ = search_batch(envelope, SPACE, law, calibration, BATCHES, RULES[args.rule],
                               workers=args.workers)
    searched_s = time.perf_counter() - start
    grid = len(fixed.grid)
    print(f"grid {grid} geometries; batches {BATCHES}; rule {args.rule}")
    print(f"  fixed B=1024: {fixed_s:.1f} s, {fixed.throughput.plans_evaluated:,} layouts")
    print(f"  batch search: {searched_s:.1f} s, {searched.throughput.plans_evaluated:,} "
          f"layouts ({searched.throughput.plans_evaluated / fixed.throughput.plans_evaluated:.2f}"
          f"x the fixed search; {len(BATCHES)} batches)")
    print(f"  fixed optimum:    {describe(fixed.candidate(fixed.optimum_index))}")
    print(f"  searched optimum: {describe(searched.candidate(searched.optimum_index))}")


if __name__ == "__main__":
    main()
