"""Speed of the co-design search: local backend (1 and N processes) vs Ray with N CPUs.

Usage: `python benchmarks/bench_ray.py [--cpus 2] [--full]` (default: a 51-geometry slice
of the Table 3 grid; --full: the whole grid). Needs `pip install mosaic[ray]`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mosaic.hardware.default_systems import resolve_system
from mosaic.law import default_law
from mosaic.perf.calibration import default_calibration
from mosaic.plan.envelope import Envelope, SearchSpace
from mosaic.plan.ray_backend import RayBackend, execution_backend
from mosaic.plan.search import search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    import ray

    envelope = Envelope(resolve_system("B200"))  # Table 3: 32 p6-b200 nodes, 20 days
    space = SearchSpace() if args.full else SearchSpace(q=(8, 10, 12), experts=(8, 16, 32, 64),
                                                        top_k=(1, 2, 4), split_factor=(1, 4))
    law, calibration = default_law(), default_calibration()
    n = len(space.enumerate())
    timings = {}
    start = time.perf_counter()
    serial = search(envelope, space, law, calibration, workers=1)
    timings["local, 1 process"] = time.perf_counter() - start
    start = time.perf_counter()
    search(envelope, space, law, calibration, workers=args.cpus)
    timings[f"local, {args.cpus} processes"] = time.perf_counter() - start
    start = time.perf_counter()
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    timings["ray.init"] = time.perf_counter() - start
    backend = RayBackend()
    with execution_backend(backend):
        start = time.perf_counter()
        first = search(envelope, space, law, calibration)
        timings[f"ray, {args.cpus} CPUs, first search (workers start)"] = (
            time.perf_counter() - start)
        start = time.perf_counter()
        second = search(envelope, space, law, calibration)
        timings[f"ray, {args.cpus} CPUs, warm workers"] = time.perf_counter() - start
    ray.shutdown()
    same = all(np.array_equal(r.throughput.tokens_per_s, serial.throughput.tokens_per_s,
                              equal_nan=True) for r in (first, second))
    print(f"{n} geometries on {envelope.n_devices} GPUs; results identical to local: {same}")
    base = timings["local, 1 process"]
    for label, seconds in timings.items():
        ratio = "" if label == "ray.init" else f"  speed-up {base / seconds:4.2f}x"
        print(f"{label:<48} {seconds:7.2f} s{ratio}")


if __name__ == "__main__":
    main()
