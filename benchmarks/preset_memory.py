"""Memory check of Megatron-Bridge's shipped performance presets: every preset ran, so each
should be predicted to fit. Prints, per release and overall, how many presets there are, how
many are predicted to fit, and for each predicted not to fit the predicted GiB against the
usable GiB and the largest memory components.

    python benchmarks/preset_memory.py [RUNS.yaml] [--calibration NAME]

The records are predicted as ``mosaic validate`` predicts them (documented record settings
applied, the default calibration profile, records the model cannot predict listed apart).
The records come from benchmarks/extract_bridge_presets.py.
"""

from __future__ import annotations

import argparse
import warnings
from collections import defaultdict
from pathlib import Path

from mosaic.config.run_records import RunRecord, RunRecordSet, RunRecordWarning, load_run_records
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.evaluate.validation_report import RunPrediction, predict_runs
from mosaic.perf.calibration import Calibration, load_calibration
from mosaic.perf.machine import machine_for
from mosaic.perf.step_time import predict_step
from mosaic.units import GIB

PRESETS = Path(__file__).resolve().parents[1] / "src/mosaic/evaluate/data/bridge_presets.yaml"


def release_of(record: RunRecord) -> str:
    """The NeMo container of a preset record ('26.02.01'), as the record loader reads it
    from the record's ``stack_version`` or ``software`` (``RunRecord.stack_version``)."""
    return record.stack_version or "?"


def components(record: RunRecord, calibration: Calibration, top: int = 4
               ) -> list[tuple[str, float]]:
    """The ``top`` largest memory components of ``record``'s prediction, GiB."""
    machine = machine_for(record.cluster, record.workload.precision)
    step = predict_step(record.workload, record.plan, machine, calibration)
    parts = {name: float(values[0]) / GIB
             for name, values in step.memory_breakdown_bytes.items()}
    return sorted(parts.items(), key=lambda item: -item[1])[:top]


def usable_gib(record: RunRecord) -> float:
    machine = machine_for(record.cluster, record.workload.precision)
    return machine.hbm_bytes * machine.usable_memory_fraction / GIB


def load_presets(path: Path = PRESETS) -> RunRecordSet:
    """The preset records with the documented record settings applied, as ``mosaic
    validate`` reads them (the loader's per-record warnings silenced: the presets leave
    measurements out by design)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        return apply_record_settings(load_run_records(path))


def check(path: Path, calibration: Calibration) -> tuple[list[RunPrediction],
                                                         list[tuple[str, str]]]:
    """Predictions of every usable record and (id, reason) for those left out."""
    record_set = load_presets(path)
    left_out = list(record_set.skipped)
    predictions = predict_runs(record_set.records, calibration,
                               unpredictable=lambda r, why: left_out.append((r.id, why)))
    return predictions, left_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=Path, default=PRESETS)
    parser.add_argument("--calibration", default=None, help="profile (default: the default)")
    args = parser.parse_args()
    calibration = load_calibration(args.calibration)
    predictions, left_out = check(args.runs, calibration)
    by_release: dict[str, list[RunPrediction]] = defaultdict(list)
    for p in predictions:
        by_release[release_of(p.record)].append(p)
    print(f"calibration {calibration.name!r}; {args.runs.name}")
    print(f"{'release':10s} {'presets':>7s} {'fit':>5s} {'not':>4s}")
    for release in sorted(by_release):
        group = by_release[release]
        fit = sum(p.feasible for p in group)
        print(f"{release:10s} {len(group):7d} {fit:5d} {len(group) - fit:4d}")
    fit = sum(p.feasible for p in predictions)
    print(f"{'all':10s} {len(predictions):7d} {fit:5d} {len(predictions) - fit:4d}")
    if left_out:
        print(f"\nnot predicted ({len(left_out)}):")
        for run_id, why in left_out:
            print(f"  {run_id}: {why}")
    misses = [p for p in predictions if not p.feasible]
    if misses:
        print(f"\npredicted not to fit ({len(misses)}): predicted / usable GiB, largest parts")
    for p in sorted(misses, key=lambda p: p.record.id):
        parts = ", ".join(f"{name} {gib:.1f}" for name, gib in components(p.record, calibration))
        print(f"  {p.record.id}: {p.model_memory_gib:.1f} / {usable_gib(p.record):.1f} "
              f"({parts})")


if __name__ == "__main__":
    main()
