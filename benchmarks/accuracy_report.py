"""Accuracy of the performance model in one command: refit, cross-validate, and score both
run sets, with the subsets a model change moves.

Usage: `python benchmarks/accuracy_report.py [--calibration refit|default|FILE]
[--worst 10] [--json OUT] [--compare BASE.json]`

With `--calibration refit` (the default) the free constants are refitted to the published
runs exactly as the built-in `default` profile is made (`mosaic calibrate
../shared/calibration/published_runs.yaml --base default --cv source`), so a change to the
model is scored with the constants it would ship with:

- published runs: leave-one-source-out tokens/s MAPE (each source predicted by a fit
  without it) and the in-sample figures of the full fit;
- the project's extra runs (`src/mosaic/evaluate/data/extra_runs.yaml`), never fitted to,
  predicted with that fit;
- per set: MAPE overall, MoE and dense, Spearman within model+GPU groups, memory MAPE,
  recorded OOMs predicted infeasible, trained runs predicted not to fit; mean signed and
  absolute error of the MoE and dense runs per GPU and per software stack; the worst runs.

`--json OUT` writes every figure (and each run's error); `--compare BASE.json` prints each
headline figure beside the one in a report written before, so a model variant is judged
against the baseline by one command. The published runs live in `../shared` (not in the
project); without them only the extra set is scored, with the shipped `default` profile.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO.parent / "shared" / "calibration" / "published_runs.yaml"
EXTRA = REPO / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml"

# (label, path in the report's JSON) of the figures --compare lines up
HEADLINES = (
    ("published LOSO MAPE", ("published", "loso", "mape")),
    ("published LOSO MoE", ("published", "loso", "moe_mape")),
    ("published LOSO dense", ("published", "loso", "dense_mape")),
    ("published in-sample MAPE", ("published", "aggregate", "mape")),
    ("published in-sample MoE", ("published", "aggregate", "moe", "mape")),
    ("published Spearman", ("published", "aggregate", "spearman")),
    ("published memory MAPE", ("published", "aggregate", "memory", "mape")),
    ("extra MAPE", ("extra", "aggregate", "mape")),
    ("extra MoE", ("extra", "aggregate", "moe", "mape")),
    ("extra dense", ("extra", "aggregate", "dense", "mape")),
    ("extra Spearman", ("extra", "aggregate", "spearman")),
    ("extra memory MAPE", ("extra", "aggregate", "memory", "mape")),
    ("extra OOMs predicted infeasible", ("extra", "aggregate", "oom_correct")),
    ("extra trained runs infeasible", ("extra", "aggregate", "trained_runs_predicted_infeasible")),
)


def _records(path: Path) -> Sequence[Any]:
    """The usable records of ``path`` with the documented record settings applied, as
    `mosaic validate` and `mosaic calibrate` read them."""
    from mosaic.config.run_records import load_run_records
    from mosaic.evaluate.record_settings import apply_record_settings

    with warnings.catch_warnings():  # deprecated spellings of the shared file
        warnings.simplefilter("ignore")
        return apply_record_settings(load_run_records(path)).records


def refit(records: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
    """The default profile's fit on ``records`` and its leave-one-source-out errors."""
    from mosaic.evaluate.calibrate import fit_calibration, leave_one_group_out, record_baselines
    from mosaic.perf.calibration import load_calibration

    start = load_calibration("default")
    baselines = record_baselines(records, start)
    fitted = fit_calibration(baselines, start, name="refit", provenance="accuracy_report")
    by_id = {r.id: r for r in records}
    sources = [by_id[i].source_key for i in baselines.ids]
    held_out = leave_one_group_out(baselines, sources, start)
    moe = np.array([by_id[i].workload.geometry.is_moe for i in baselines.ids])
    loso = {**held_out.summary(moe),
            "errors": dict(zip(baselines.ids, map(float, held_out.errors), strict=True))}
    return fitted, loso


def breakdown(records: Sequence[Any], errors: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Mean signed and absolute tokens/s error of MoE and dense runs per GPU and per stack."""
    cells: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record.id not in errors:
            continue
        kind = "MoE" if record.workload.geometry.is_moe else "dense"
        gpu = record.group_key.rsplit(" @ ", 1)[-1]
        cells[f"{kind} on {gpu}"].append(errors[record.id])
        cells[f"{kind} with {record.workload.stack}"].append(errors[record.id])
    return {name: {"n": len(values), "mean": float(np.mean(values)),
                   "mape": float(np.mean(np.abs(values)))}
            for name, values in sorted(cells.items())}


def score(records: Sequence[Any], calibration: Any) -> dict[str, Any]:
    """Every run predicted with ``calibration``: the validation aggregate, per-run errors
    of the scored runs, and the per-GPU / per-stack breakdown."""
    from mosaic.evaluate.validation_report import ValidationSummary, predict_runs

    summary = ValidationSummary.of(predict_runs(records, calibration))
    aggregate = summary.aggregate()
    errors = {row["id"]: row["error"] for row in summary.rows()
              if row["error"] is not None and row["throughput_scored"]}
    return {"aggregate": aggregate, "errors": errors, "breakdown": breakdown(records, errors)}


def _dig(report: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = report
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return None if value is None else float(value)


def _figure(value: float | None, path: tuple[str, ...]) -> str:
    if value is None:
        return "-"
    counted = path[-1] in ("oom_correct", "trained_runs_predicted_infeasible")
    return f"{value:.0f}" if counted else (f"{value:.3f}" if path[-1] == "spearman"
                                          else f"{100 * value:.2f}%")


def print_report(report: dict[str, Any], worst: int, base: dict[str, Any] | None) -> None:
    print(f"calibration: {report['calibration']}")
    width = max(len(label) for label, _ in HEADLINES)
    for label, path in HEADLINES:
        value = _dig(report, path)
        if value is None and path[0] not in report:
            continue
        line = f"  {label:<{width}}  {_figure(value, path):>8}"
        if base is not None:
            line += f"   (base {_figure(_dig(base, path), path):>8})"
        print(line)
    for name, section in (("published", report.get("published")), ("extra", report["extra"])):
        if section is None:
            continue
        print(f"\n{name}: mean signed / absolute tokens/s error (predicted / measured - 1)")
        for cell, stats in section["breakdown"].items():
            print(f"  {cell:<40} n={stats['n']:<4d} {100 * stats['mean']:+7.1f}%"
                  f" {100 * stats['mape']:6.1f}%")
        errors = section.get("loso_errors") or section["errors"]
        label = "held out leave-one-source-out" if section.get("loso_errors") else "as fitted"
        print(f"  worst {worst} ({label}):")
        for run_id, error in sorted(errors.items(), key=lambda kv: -abs(kv[1]))[:worst]:
            print(f"    {100 * error:+7.1f}%  {run_id}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calibration", default="refit",
                        help="refit (the default profile's fit, redone), or a profile name "
                             "or calibration YAML to score as it is")
    parser.add_argument("--worst", type=int, default=10, help="worst runs listed per set")
    parser.add_argument("--json", type=Path, help="write the whole report here")
    parser.add_argument("--compare", type=Path, help="a report written before (--json)")
    args = parser.parse_args(argv)
    from mosaic.perf.calibration import load_calibration

    if args.compare is not None and not args.compare.is_file():
        parser.error(f"--compare {args.compare}: no such report (write one with --json)")
    base = json.loads(args.compare.read_text()) if args.compare else None
    report: dict[str, Any] = {"calibration": args.calibration}
    published = _records(PUBLISHED) if PUBLISHED.exists() else None
    if published is None:
        print(f"{PUBLISHED} not found: scoring the extra set with the shipped default "
              "profile only", file=sys.stderr)
    if args.calibration == "refit" and published is not None:
        calibration, loso = refit(published)
        report["calibration"] = "refit on the published runs (leave-one-source-out held out)"
    else:
        calibration = load_calibration("default" if args.calibration == "refit"
                                       else args.calibration)
        loso = None
    if published is not None:
        report["published"] = score(published, calibration)
        if loso is not None:
            report["published"]["loso"] = {k: v for k, v in loso.items() if k != "errors"}
            report["published"]["loso_errors"] = loso["errors"]
    report["extra"] = score(_records(EXTRA), calibration)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=float))
    print_report(report, args.worst, base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
