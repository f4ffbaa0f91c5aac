"""Start-up time of the installed `mosaic` command (issue 11 target: < 0.5 s).

Runs each command line several times as a fresh process and prints the best and median
wall time. Usage: `python benchmarks/bench_startup.py [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND_LINES = [
    ["--help"],
    ["arch", "--q", "4"],
    ["arch", "--q", "12", "--experts", "96", "--top-k", "2", "--split-factor", "4", "--json"],
    ["law", "--help"],
    ["law", "predict", "--n-total", "327.2e9", "--sparsity", "0.9556", "--tokens", "1.42e12",
     "--split-factor", "4"],
    ["perf", "examples/appendix_e.yaml", "--json"],
]


def _mosaic_executable() -> str:
    local = Path(sys.executable).with_name("mosaic")
    found = str(local) if local.exists() else shutil.which("mosaic")
    if found is None:
        raise SystemExit("error: the `mosaic` command is not installed (pip install -e .)")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    exe = _mosaic_executable()
    repo = Path(__file__).resolve().parents[1]
    print(f"{'command':<60} {'best s':>8} {'median s':>9}")
    for argv in COMMAND_LINES:
        times_s = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            done = subprocess.run([exe, *argv], cwd=repo, capture_output=True, check=False)
            times_s.append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(f"mosaic {' '.join(argv)} failed: {done.stderr.decode()}")
        label = "mosaic " + " ".join(argv)
        print(f"{label[:60]:<60} {min(times_s):8.3f} {statistics.median(times_s):9.3f}")


if __name__ == "__main__":
    main()
