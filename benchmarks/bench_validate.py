"""`mosaic validate` on large generated run-record files (issue 11: 5,000 records in < 20 s,
with memory that does not grow per record): wall time and peak RSS of the command (JSON and
table output) at several sizes, the RSS growth per 1,000 records between the smallest and
the largest, and a check of that growth against a limit (exit status 1 when over).

Usage: `python benchmarks/bench_validate.py [--records 1000,5000,20000] [--parsers]
[--max-growth-mb 1.0]`; `--parsers` also times whole-file YAML parsing with the C and the
pure-Python loader and `load_run_records` in this process.

The records are copies of examples/runs_example.yaml's 4 runs with new ids, so validate
predicts them in vectorised groups (records sharing a workload and cluster, batches of
``BATCH_RECORDS``); with distinct workloads each record costs one single-plan prediction.
Peak RSS is each child's own (``os.wait4``). Linux counts in a child's peak the memory it
had before ``exec`` (copied from this process), so this process stays small: it imports
no mosaic, writes the files a run at a time and times the parsers in a child of its own.
Most of the peak is the imports (numpy, scipy, pandas, pydantic, rich), the same at every
size.
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def generate(path: Path, records: int) -> None:
    """``records`` copies of examples/runs_example.yaml's runs, each with its own id
    (written one run at a time)."""
    document = yaml.safe_load((REPO / "examples/runs_example.yaml").read_text())
    base = document.pop("runs")
    with path.open("w", encoding="utf-8") as out:
        out.write(yaml.safe_dump(document, sort_keys=False) + "runs:\n")
        for index in range(records):
            run = copy.deepcopy(base[index % len(base)])
            run["id"] = f"{run['id']}-{index}"
            out.write(yaml.safe_dump([run], sort_keys=False))


def run_child(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one command; it must succeed."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}")
    return elapsed, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def time_parsers(path: Path) -> None:
    """Whole-file YAML parsing (C and pure-Python loader) and load_run_records, timed in
    this process (run as a child: ``--parse-only FILE``)."""
    from mosaic.config.run_records import load_run_records

    text = path.read_text()
    for loader in (getattr(yaml, "CSafeLoader", None), yaml.SafeLoader):
        if loader is None:
            continue
        start = time.perf_counter()
        yaml.load(text, Loader=loader)  # safe loaders only
        print(f"    whole-file parse, {loader.__name__:<12} {time.perf_counter() - start:7.2f} s")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        load_run_records(path)
    print(f"    load_run_records (parse + validate) {time.perf_counter() - start:7.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="1000,5000,20000",
                        help="comma-separated file sizes in records")
    parser.add_argument("--parsers", action="store_true",
                        help="also time whole-file YAML parsing and load_run_records")
    parser.add_argument("--max-growth-mb", type=float, default=1.0,
                        help="RSS growth per 1,000 records allowed (MB)")
    parser.add_argument("--parse-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parse_only is not None:
        time_parsers(args.parse_only)
        return
    sizes = sorted({int(n) for n in args.records.split(",")})
    exe = str(Path(sys.executable).with_name("mosaic"))
    peaks: dict[str, dict[int, float]] = {"--json": {}, "table": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for records in sizes:
            path = Path(tmp) / f"runs{records}.yaml"
            generate(path, records)
            print(f"{records} records, {path.stat().st_size / 1e6:.1f} MB of YAML")
            if args.parsers:
                subprocess.run([sys.executable, __file__, "--parse-only", str(path)],
                               check=True)
            for mode, extra in (("--json", ["--json"]), ("table", [])):
                elapsed, peak = run_child([exe, "--quiet", "validate", str(path), *extra])
                peaks[mode][records] = peak
                print(f"    mosaic validate {mode:<7} {elapsed:7.2f} s, peak RSS {peak:6.0f} MB")
            path.unlink()
    if len(sizes) < 2:
        return
    low, high = sizes[0], sizes[-1]
    over = False
    for mode, peak in peaks.items():
        growth = (peak[high] - peak[low]) / ((high - low) / 1000)
        over |= growth > args.max_growth_mb
        print(f"RSS growth, {mode:<6}: {growth:+.2f} MB per 1,000 records "
              f"({low} -> {high} records; limit {args.max_growth_mb} MB)")
    if over:
        print("FAIL: peak memory grows with the number of records")
        raise SystemExit(1)
    print("OK: peak memory flat in the number of records")


if __name__ == "__main__":
    main()
