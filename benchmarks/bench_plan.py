"""Benchmark: the full Table 3 MOSAIC search (paper Sec. 7.3).

Run: .venv/bin/python benchmarks/bench_plan.py [--workers N] [--reference]
(target: < 10 s on 2 cores; measured 2026-12-01 on the quiet machine: 7.4-7.7 s wall,
14.6-15.0 s CPU with 2 workers, the previous release 11.3 s / 22.3 s; README speed table)

32 p6-b200 nodes (256 B200), 20 days, q in 8..18, 13 expert counts, K in {1,2,4,6,8},
G in {1,2,4,8}, S >= 0.7; every layout of the layout search with B_micro in {1,2,4} and
every checkpointing mode. Prints wall time and the CPU time of this process and its
workers (on a machine other jobs share, wall time / CPU time per worker shows how much of
the machine the search got), geometries, plans evaluated and the optimum next to the
paper's Table 4. A plan is evaluated when its memory is checked; the plans that fit are
also timed (step time with its breakdown). Geometries that differ only in top_k or
granularity share one enumeration of their layouts and the per-key bookkeeping on it
(plan.search._shared_plans), and the terms that do not read top_k are computed once for
them (perf.memo_keys).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

from mosaic.law import default_law
from mosaic.perf.calibration import default_calibration
from mosaic.perf.factorise import every_plan
from mosaic.plan import Envelope, SearchSpace, resolve_system, search
from mosaic.plan.search import PlanResult

PAPER_TABLE4 = "q=12 L=48 E=96 K=2 G=4, N_act 14.5 B, S 0.956, D 1.42 T, MFU 12.38%, loss 1.3898"


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="default: all CPUs")
    parser.add_argument("--reference", action="store_true",
                        help="also run the search with every plan computed directly "
                             "(perf.factorise.every_plan) and compare every candidate")
    args = parser.parse_args()
    workers = args.workers
    envelope = Envelope(resolve_system("B200"))

    def run() -> tuple[PlanResult, float, float]:
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        found = search(envelope, SearchSpace(), default_law(), default_calibration(),
                       workers=workers)
        return found, time.perf_counter() - start, _cpu_seconds() - cpu_start

    result, seconds, cpu_seconds = run()
    table = result.throughput
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"Table 3 search: {seconds:.1f} s on {cpus} CPUs "
          f"(workers: {workers or 'all'}); CPU time {cpu_seconds:.1f} s in all")
    print(f"  geometries {len(result.grid)}, trainable {int(result.feasible.sum())}")
    print(f"  plans evaluated (memory) {table.plans_evaluated:,}, timed {table.plans_timed:,}")
    best = result.candidate(result.optimum_index)
    plan = best["plan"]
    print(f"  optimum: q={best['q']} L={best['layers']} E={best['experts']} "
          f"K={best['top_k']} G={best['split_factor']}, N_act {best['n_active'] / 1e9:.1f} B, "
          f"S {best['sparsity']:.3f}, D {best['tokens'] / 1e12:.2f} T, "
          f"MFU {best['mfu']:.2%}, loss {best['loss']:.4f}")
    print(f"  layout: pp={plan['pp']} vpp={plan['vpp']} ep={plan['ep']} tp={plan['tp']} "
          f"cp={plan['cp']} dp={plan['dp']} mb={plan['micro_batch']} "
          f"{plan['sharding']} ckpt={plan['checkpointing']}")
    print(f"  paper Table 4: {PAPER_TABLE4}")
    if args.reference:
        with every_plan():
            reference, ref_seconds, ref_cpu = run()
        same = (json.dumps(reference.candidates()) == json.dumps(result.candidates())
                and reference.reasons == result.reasons)
        print(f"  every plan directly: {ref_seconds:.1f} s, CPU time {ref_cpu:.1f} s; "
              f"candidates and reasons identical: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
