"""`mosaic validate` on a large generated run-record file (issue 11 target: 5,000 records
in < 20 s), split into YAML parsing (C vs pure-Python loader), record loading and the full
command. Usage: `python benchmarks/bench_validate.py [--records 5000]`.

The records are copies of examples/runs_example.yaml's 4 runs with new ids, so validate
predicts them in 4 vectorised groups (records sharing a workload and cluster); with
distinct workloads each record costs one single-plan prediction (~3.6 ms CPU measured).
Peak RSS is the largest of the child processes (compare --records 1000 and 5000).
"""

from __future__ import annotations

import argparse
import copy
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import yaml

from mosaic.config.run_records import load_run_records

REPO = Path(__file__).resolve().parents[1]


def generate(path: Path, records: int) -> None:
    """``records`` copies of examples/runs_example.yaml's runs, each with its own id."""
    document = yaml.safe_load((REPO / "examples/runs_example.yaml").read_text())
    base = document["runs"]
    runs = []
    for index in range(records):
        run = copy.deepcopy(base[index % len(base)])
        run["id"] = f"{run['id']}-{index}"
        runs.append(run)
    document["runs"] = runs
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.yaml"
        generate(path, args.records)
        text = path.read_text()
        print(f"{args.records} records, {len(text) / 1e6:.1f} MB of YAML")
        for loader in (getattr(yaml, "CSafeLoader", None), yaml.SafeLoader):
            if loader is None:
                continue
            start = time.perf_counter()
            yaml.load(text, Loader=loader)  # safe loaders only
            print(f"  parse with {loader.__name__:<12} {time.perf_counter() - start:7.2f} s")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            load_run_records(path)
        print(f"  load_run_records (parse + validate) {time.perf_counter() - start:7.2f} s")
        exe = str(Path(sys.executable).with_name("mosaic"))
        start = time.perf_counter()
        subprocess.run([exe, "validate", str(path), "--json"], check=True,
                       stdout=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"  mosaic validate --json             {elapsed:7.2f} s, peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
