"""Benchmark: the full layout search of the paper's Table 4 MoE on 512 B200 GPUs.

Run: .venv/bin/python benchmarks/bench_layouts.py
Targets: < 0.5 s for the whole search on a 2-core machine and >= 200,000 plan
evaluations per second per core (numpy runs the model in one thread).
Prints the plan counts, the best time of a few repeats for each phase, and the rates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.layouts import (
    LayoutLimits,
    best_layout,
    candidate_plans,
    check_rules,
    predict_in_chunks,
    search_layouts,
)
from mosaic.perf.machine import machine_for
from mosaic.perf.workload import Workload

REPEATS = 5


def best_seconds(call: Callable[[], object]) -> float:
    """Fastest of REPEATS calls (the least disturbed by the rest of the machine)."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    # Table 4 geometry (q=12, E=96, K=2, G=4), global batch 1024 x 2048 tokens, 64 p6 nodes.
    workload = Workload(geometry=ladder_geometry(12, 96, 2, 4), global_batch=1024,
                        seq_len=2048)
    machine = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=64), "bf16")
    calibration = default_calibration()
    limits = LayoutLimits()
    domain = machine.interconnect.scale_up_domain_gpus

    search = search_layouts(workload, machine, calibration, limits)
    candidates = candidate_plans(workload, machine.n_devices, domain, limits)
    plans = candidates.take(np.flatnonzero(
        check_rules(workload, candidates, machine.n_devices).valid))
    print(f"{machine.n_devices} x {machine.device_name}, q=12 E=96 K=2 G=4, "
          f"{os.cpu_count()} CPUs")
    print(f"  candidates {search.n_candidates:,}; pass the rules {search.n_plans:,}; "
          f"fit in memory {search.n_feasible:,}")

    enumerate_s = best_seconds(lambda: check_rules(
        workload, candidate_plans(workload, machine.n_devices, domain, limits),
        machine.n_devices))
    evaluate_s = best_seconds(lambda: predict_in_chunks(workload, plans, machine, calibration))
    search_s = best_seconds(lambda: search_layouts(workload, machine, calibration, limits))
    best_s = best_seconds(lambda: best_layout(workload, machine, calibration, limits))
    print(f"  enumerate + rules   {enumerate_s * 1e3:8.1f} ms")
    print(f"  evaluate (model)    {evaluate_s * 1e3:8.1f} ms  "
          f"{search.n_plans / evaluate_s:12,.0f} plan evaluations/s")
    print(f"  full search         {search_s * 1e3:8.1f} ms  "
          f"{search.n_plans / search_s:12,.0f} evaluated plans/s, "
          f"{search.n_candidates / search_s:12,.0f} candidates/s")
    print(f"  best_layout         {best_s * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
