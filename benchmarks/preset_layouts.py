"""Ranking check against Megatron-Bridge's tuned layouts: NVIDIA tunes each performance
preset's layout for throughput, so mosaic's layout search should rank a preset's layout at
or near the top of the layouts it searches for the same job.

    python benchmarks/preset_layouts.py [RUNS.yaml] [--calibration NAME] [--limit N]

Cases: per (model, GPU, precision, GPU count, global batch, sequence length) the presets of
the newest release that ships one; where that release has several variants of one case the
launcher's default is kept (Megatron-Bridge ``scripts/performance/argument_parser.py``
@ v0.5.1, ``--config_variant``: "Defaults to 'v2' ('v1' if 'v2' doesn't exist)"). Per case
the search is ``mosaic layouts RUNS.yaml#ID`` with its default options (the record's stack,
release settings, cluster, batch and sequence; the planning headroom); the preset itself is
predicted as ``mosaic explain RUNS.yaml#ID`` predicts it (its stated recompute modules,
pipeline layout, CUDA graphs), and ranked by tokens/s among the search's layouts that fit.
No measured throughput is read: the records hold none. Records from
benchmarks/extract_bridge_presets.py; docs/evidence/bridge_presets_layouts.md.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mosaic.config.run_records import RunRecord, RunRecordWarning
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import (
    cluster_for,
    load_job_spec,
    predict_job,
    searched_under_planning_headroom,
)
from mosaic.perf.calibration import Calibration, load_calibration
from mosaic.perf.layouts import search_layouts, with_searched_remainder_last_layouts
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import Checkpointing, Sharding
from mosaic.plan.inputs import layout_limits
from preset_memory import PRESETS, load_presets

# Megatron-Bridge argument_parser.py @ v0.5.1: --config_variant defaults to v2, else v1
VARIANT_PREFERENCE = {"v2": 0, "v1": 1, None: 2}
DEGREES = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")


def release_key(record: RunRecord) -> tuple[int, ...]:
    """(26, 6, 1) for 'NeMo 26.06.01 container': releases in time order."""
    match = re.search(r"(\d\d)\.(\d\d)(?:\.(\d\d))?", record.stack_version or record.software
                      or "")
    if match is None:
        return (0,)
    return tuple(int(part or 0) for part in match.groups())


def variant_of(record: RunRecord) -> str | None:
    """'v1', 'v2', 'largescale', 'gbs15360' or None (an unnamed preset) from the id."""
    match = re.search(r"-(v\d|largescale|gbs\d+)$", record.id)
    return match.group(1) if match else None


def select_cases(records: tuple[RunRecord, ...]) -> list[RunRecord]:
    """One preset per (model, GPU, precision, GPUs, global batch, sequence length): the
    newest release's, the launcher's default variant among equals."""
    chosen: dict[tuple, RunRecord] = {}
    for record in records:
        w = record.workload
        key = (record.model_name, record.system.device.name, record.precision_recipe,
               record.n_devices, w.global_batch, w.seq_len)
        rank = (release_key(record), -VARIANT_PREFERENCE.get(variant_of(record), 3))
        best = chosen.get(key)
        if best is None or rank > (release_key(best),
                                   -VARIANT_PREFERENCE.get(variant_of(best), 3)):
            chosen[key] = record
    return sorted(chosen.values(), key=lambda r: r.id)


@dataclass(frozen=True)
class CaseResult:
    record: RunRecord
    preset_tokens_per_s_per_gpu: float
    preset_fits_headroom: bool
    rank: int               # 1 + feasible searched layouts strictly faster than the preset
    n_feasible: int
    in_grid: bool           # the preset's degrees, micro-batch, sharding, ckpt are searched
    best: dict
    best_tokens_per_s_per_gpu: float
    seconds: float
    # step seconds per breakdown term, the preset's minus the best layout's (same tokens)
    term_gaps_s: dict[str, float]
    preset_step_s: float

    @property
    def gain(self) -> float:
        """The search's best over the preset, tokens/s, minus 1 (<= 0: preset is best)."""
        return self.best_tokens_per_s_per_gpu / self.preset_tokens_per_s_per_gpu - 1


def layout_text(row: dict) -> str:
    degrees = " ".join(f"{axis}{row[axis]}" for axis in DEGREES)
    sharding = Sharding(int(row["sharding"])).name.lower() if not isinstance(
        row["sharding"], str) else row["sharding"]
    checkpointing = Checkpointing(int(row["checkpointing"])).name.lower() if not isinstance(
        row["checkpointing"], str) else row["checkpointing"]
    return f"{degrees} mbs{row['micro_batch']} {sharding} {checkpointing}"


def run_case(path: Path, record: RunRecord, calibration: Calibration,
             options: dict[str, str | None] | None = None) -> CaseResult:
    """The search `mosaic layouts PATH#ID` runs (default options, or ``options``: its --mbs,
    --sharding and --checkpointing), and the preset as `mosaic explain PATH#ID` predicts
    it."""
    start = time.perf_counter()
    reference = Path(f"{path}#{record.id}")
    spec = load_job_spec(reference, [], None, default_stack=calibration.stack)
    preset = predict_job(spec, calibration)
    preset_tps = float(preset.prediction.tokens_per_s_per_gpu[0])
    # as layouts_cmd.load_search_job reads a record: the planning headroom
    search_spec = searched_under_planning_headroom(spec)
    cluster = cluster_for(search_spec)
    limits = layout_limits(**{"max_tp": None, **dict.fromkeys(
        ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "sharding", "checkpointing")),
        **(options or {})})
    workload = with_searched_remainder_last_layouts(search_spec.workload, cluster.n_devices,
                                                    limits)
    machine = machine_for(cluster, workload.precision, search_spec.usable_memory_fraction,
                          fp8_recipe=workload.fp8_recipe)
    search = search_layouts(workload, machine, calibration, limits)
    feasible_tps = search.prediction.tokens_per_s_per_gpu[search.ranking]
    rank = int(np.sum(feasible_tps > preset_tps * (1 + 1e-9))) + 1
    preset_row = spec.plan.row(0)
    plans = search.plans
    same = np.ones(len(plans), dtype=bool)
    for axis in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "micro_batch"):
        same &= getattr(plans, axis) == int(preset_row[axis])
    same &= plans.sharding == int(spec.plan.sharding[0])
    same &= plans.checkpointing == int(spec.plan.checkpointing[0])
    preset_fits = bool(float(preset.prediction.memory_bytes[0])
                       <= machine.hbm_bytes * machine.usable_memory_fraction)
    gaps: dict[str, float] = {}
    if search.n_feasible:
        best_index = int(search.ranking[0])
        best_row, best_tps = plans.row(best_index), float(feasible_tps[0])
        best_terms = search.prediction.breakdown_s
        preset_terms = preset.prediction.breakdown_s
        for name in set(best_terms) | set(preset_terms):
            gaps[name] = (float(preset_terms[name][0]) if name in preset_terms else 0.0) - (
                float(best_terms[name][best_index]) if name in best_terms else 0.0)
    else:
        best_row, best_tps = {}, float("nan")
    return CaseResult(record=record, preset_tokens_per_s_per_gpu=preset_tps,
                      preset_fits_headroom=preset_fits, rank=rank,
                      n_feasible=search.n_feasible, in_grid=bool(same.any()), best=best_row,
                      best_tokens_per_s_per_gpu=best_tps,
                      seconds=time.perf_counter() - start, term_gaps_s=gaps,
                      preset_step_s=float(preset.prediction.step_time_s[0]))


def driver_text(result: CaseResult, top: int = 4) -> str:
    """The terms that make the preset slower than the best layout, largest first, as
    shares of the preset's step ('ep_all_to_all +38%, vocab_stage +12%, compute_recompute
    -11%'): what `mosaic explain` of the two layouts would show apart."""
    ranked = sorted(result.term_gaps_s.items(), key=lambda item: -abs(item[1]))[:top]
    return ", ".join(f"{name} {gap / result.preset_step_s:+.0%}" for name, gap in ranked
                     if abs(gap) >= 0.005 * result.preset_step_s)


def summary_lines(results: list[CaseResult]) -> list[str]:
    usable = [r for r in results if r.n_feasible and np.isfinite(r.gain)]
    if not usable:
        return ["no case has a feasible searched layout"]
    gains = [r.gain for r in usable]
    n = len(usable)

    def share(count: int) -> str:
        return f"{count}/{n} ({count / n:.0%})"

    top1 = sum(r.rank == 1 for r in usable)
    top5 = sum(r.rank <= 5 for r in usable)
    within5 = sum(r.gain <= 0.05 for r in usable)
    over20 = sum(r.gain > 0.20 for r in usable)
    return [
        f"cases {n}; median gain of the search's best over the preset "
        f"{statistics.median(gains):+.1%} (quartiles "
        f"{np.percentile(gains, 25):+.1%} .. {np.percentile(gains, 75):+.1%}, "
        f"max {max(gains):+.1%})",
        f"preset ranked 1st: {share(top1)}; in the top 5: {share(top5)}; within 5% of the "
        f"best: {share(within5)}; best >20% faster: {share(over20)}",
        f"preset's own layout in the searched grid: {share(sum(r.in_grid for r in usable))};"
        f" preset fits the planning headroom: "
        f"{share(sum(r.preset_fits_headroom for r in usable))}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=Path, default=PRESETS)
    parser.add_argument("--calibration", default=None, help="profile (default: the default)")
    parser.add_argument("--limit", type=int, default=None,
                        help="run only the first N cases (a quick look)")
    parser.add_argument("--match", default=None, help="only cases whose id contains this")
    for option in ("mbs", "sharding", "checkpointing"):  # `mosaic layouts`' options
        parser.add_argument(f"--{option}", default=None,
                            help=f"narrow the search as `mosaic layouts --{option}` does")
    parser.add_argument("--why", type=float, default=0.20,
                        help="list the step terms behind every gain above this (default 0.20)")
    args = parser.parse_args()
    calibration = load_calibration(args.calibration)
    options = {name: getattr(args, name) for name in ("mbs", "sharding", "checkpointing")
               if getattr(args, name) is not None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        record_set = load_presets(args.runs)
        cases = select_cases(record_set.records)
        if args.match:
            cases = [r for r in cases if args.match in r.id]
        if args.limit:
            cases = cases[:args.limit]
        narrowed = "".join(f", --{name} {value}" for name, value in options.items())
        print(f"calibration {calibration.name!r}; {args.runs.name}: "
              f"{len(record_set.records)} records, {len(cases)} cases; search: `mosaic "
              f"layouts` defaults{narrowed}")
        print(f"{'preset':52s} {'tok/s/GPU':>9s} {'rank':>9s} {'gain':>7s}  best layout "
              "(search)")
        results, failed = [], []
        for record in cases:
            try:
                result = run_case(args.runs, record, calibration, options)
            except MosaicInputError as exc:  # a case the model cannot predict
                failed.append((record.id, f"{type(exc).__name__}: {exc}"))
                continue
            results.append(result)
            fit = "" if result.preset_fits_headroom else "*"
            grid = "" if result.in_grid else "~"
            best = layout_text(result.best) if result.best else "none fits"
            print(f"{record.id.removeprefix('preset-'):52s} "
                  f"{result.preset_tokens_per_s_per_gpu:9,.0f} "
                  f"{f'{result.rank}/{result.n_feasible}':>9s}{grid}{fit} "
                  f"{result.gain:+7.1%}  {best}", flush=True)
    print("\n(~ the preset's layout is outside the searched grid; * the preset is over the "
          "planning headroom)")
    for line in summary_lines(results):
        print(line)
    flagged = sorted((r for r in results if r.n_feasible and r.gain > args.why),
                     key=lambda r: -r.gain)
    if flagged:
        print(f"\nbest layout >{args.why:.0%} faster than the preset ({len(flagged)}): the "
              "terms that differ, preset minus best, as shares of the preset's step")
        for result in flagged:
            print(f"  {result.record.id.removeprefix('preset-')} {result.gain:+.0%}: "
                  f"{layout_text(result.record.plan.row(0))} -> {layout_text(result.best)}; "
                  f"{driver_text(result)}")
    if failed:
        print(f"\nnot predicted ({len(failed)}):")
        for run_id, why in failed:
            print(f"  {run_id}: {why[:200]}")


if __name__ == "__main__":
    main()
