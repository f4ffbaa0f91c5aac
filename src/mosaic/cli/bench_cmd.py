"""`mosaic bench`: microbenchmarks of the user's devices and network (needs mosaic[bench]).

Thin: parse, resolve what to measure (a job's shapes through the performance model, a
preset or a shapes file), call ``mosaic.bench``, render. Collectives run under torchrun:
``torchrun --nproc-per-node 8 -m mosaic.bench collectives --out DIR``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.bench.families import KERNEL_FAMILY_NAMES
from mosaic.cli.common import (
    JsonFlag,
    SetOption,
    error_console,
    guarded,
    print_json,
    print_table,
)
from mosaic.cli.progress import is_quiet
from mosaic.errors import MosaicInputError, missing_extra, shown
from mosaic.io_atomic import prepare_output_dir
from mosaic.text_values import parse_ints, parse_names
from mosaic.torchrun_env import is_rank_zero
from mosaic.units import GIB, MIB, SECONDS_PER_HOUR

HELP = "Microbenchmarks of your GPUs and network: tables for calibrate --microbench."
bench_app = typer.Typer(help=HELP, no_args_is_help=True, pretty_exceptions_enable=False,
                        add_completion=False)

PRESETS = ("paper", "generic", "tiny")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 2**10, "M": 1e6, "MB": 1e6,
          "MIB": MIB, "G": 1e9, "GB": 1e9, "GIB": GIB, "T": 1e12, "TB": 1e12,
          "TIB": 2**40}


def parse_bytes(option: str, text: str) -> int:
    """'4GiB' -> 4294967296, '1KiB' -> 1024, '65536' -> 65536."""
    match = _SIZE.match(text)
    unit = (match.group(2) or "").upper() if match else ""
    if not match or unit not in _UNITS:
        raise MosaicInputError(f"{option} {shown(text)}: expected a size such as 1024, 64MiB, 4GiB")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < 1:  # 0 skipped every case and exited 0 (a fuzz trial)
        raise MosaicInputError(f"{option} {shown(text)}: a size of at least one byte")
    return size


def parse_duration_s(option: str, text: str) -> float:
    """'480' or '480s' -> 480, '8m' -> 480, '1.5h' -> 5400; a zero duration is refused (a
    trial's --time-budget 0 measured nothing and left every case for a rerun)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise MosaicInputError(f"{option} {shown(text)}: expected seconds or a duration like "
                               "8m, 1h")
    duration_s = float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": SECONDS_PER_HOUR}[
        match.group(2)]
    if duration_s <= 0:
        raise MosaicInputError(f"{option} {shown(text)}: a duration must be more than 0 s "
                               "(leave the option out for no limit)")
    return duration_s


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        error_console.print(f"error: {missing_extra('bench')}", markup=False)
        raise typer.Exit(code=2)


# Options shared by the measuring commands.
OutOption = Annotated[Path, typer.Option("--out", help="output directory (tables, metadata)")]
JobOption = Annotated[Path | None, typer.Option(
    "--job", help="job YAML: measure the shapes mosaic.perf prices for it")]
ShapesOption = Annotated[Path | None, typer.Option(
    "--shapes", help="shapes YAML (sections gemm, grouped, attention, streams)")]
PresetOption = Annotated[str | None, typer.Option(
    "--preset", help="paper (Appendix E job), generic or tiny (default: generic)")]
DryRunFlag = Annotated[bool, typer.Option("--dry-run", help="list what would be measured")]
BudgetOption = Annotated[str | None, typer.Option(
    "--time-budget", help="stop starting cases after this long (e.g. 480, 8m); a rerun "
                          "resumes")]
DeviceOption = Annotated[str | None, typer.Option(
    "--device", help="torch device (default: cuda if available, else cpu)")]
DtypesOption = Annotated[str | None, typer.Option(
    "--dtypes", help="GEMM precisions, comma-separated: bf16, fp16, fp32 (what a CPU "
                     "run computes in: the trainer's MFU peak there), fp8, mxfp8 where "
                     "supported (default: bf16,fp8,mxfp8 on a GPU, fp32 on a CPU)")]
MaxTensorOption = Annotated[str, typer.Option(
    "--max-tensor-bytes", help="skip cases whose operands exceed this (e.g. 8GiB)")]
BackendsOption = Annotated[str, typer.Option(
    "--attention-backends", help="SDPA backends: cudnn, flash, efficient, math")]
QuickFlag = Annotated[bool, typer.Option(
    "--quick", help="few repeats, no minimum time (smoke tests, CPU)")]
ProgressFlag = Annotated[bool, typer.Option("--progress/--no-progress",
                                            help="progress and ETA on stderr")]
ThreadsOption = Annotated[int | None, typer.Option(
    "--threads", min=1, max=1024,
    help="CPU threads torch computes with (torch.set_num_threads; default: torch's, one per "
         "core). On a shared host, 1 keeps other processes from stalling every sample")]


def _refuse_unread_sets(sets: list[str], job: Path | None, shapes_file: Path | None,
                        preset: str | None) -> None:
    """``--set`` edits a job file's fields: refused where the shapes come from no job (a
    shapes file, the tiny or generic preset), where it was dropped without a word (``bench
    gemm --preset tiny --set parallelism.tp=3`` measured the tiny shapes)."""
    if sets and job is None and preset != "paper":
        read = ("--shapes reads no job file" if shapes_file is not None else
                f"--preset {preset} reads no job file" if preset is not None else
                "no job file is read without --job")
        raise MosaicInputError(f"--set {shown(sets[0])}: {read}, so --set would change nothing; "
                               "allowed with --job FILE or --preset paper")


def _shapes(job: Path | None, shapes_file: Path | None, preset: str | None,
            sets: list[str]) -> Any:
    from mosaic.bench import shapes as bench_shapes

    given = [x for x in (job, shapes_file, preset) if x is not None]
    if len(given) > 1:
        raise MosaicInputError("give one of --job, --shapes, --preset")
    if preset is not None and preset not in PRESETS:
        raise MosaicInputError(f"--preset {shown(preset)}: allowed values are {', '.join(PRESETS)}")
    _refuse_unread_sets(sets, job, shapes_file, preset)
    if shapes_file is not None:
        return bench_shapes.shapes_from_file(shapes_file)
    if preset == "tiny":
        return bench_shapes.TINY
    if job is None and preset != "paper":
        return bench_shapes.GENERIC
    if job is None and not bench_shapes.PAPER_JOB.exists():
        raise MosaicInputError(f"--preset paper needs {bench_shapes.PAPER_JOB} (a source "
                               "checkout); pass --job examples/appendix_e.yaml instead")
    from mosaic.config.job_schema import load_job
    from mosaic.evaluate.job import cluster_for

    path = job or bench_shapes.PAPER_JOB
    spec = load_job(path, sets)
    name = "paper" if job is None else path.stem
    return bench_shapes.shapes_from_model(spec.workload, spec.plan, cluster_for(spec), name,
                                          spec.usable_memory_fraction)


def _options(dtypes: str, max_tensor_bytes: str, backends: str, quick: bool) -> Any:
    from mosaic.bench.attention import BACKENDS
    from mosaic.bench.cases import BenchOptions
    from mosaic.bench.timer import QUICK, TimingPolicy

    dtype_list = parse_names("--dtypes", dtypes, ("bf16", "fp16", "fp32", "fp8", "mxfp8"))
    backend_list = parse_names("--attention-backends", backends, BACKENDS)
    return BenchOptions(policy=QUICK if quick else TimingPolicy(), dtypes=dtype_list,
                        max_tensor_bytes=parse_bytes("--max-tensor-bytes", max_tensor_bytes),
                        attention_backends=backend_list)


def _render_listing(rows: list[dict[str, Any]], json_output: bool) -> None:
    if json_output:
        print_json({"dry_run": True, "cases": rows})
        return
    for row in rows:
        typer.echo(f"{row['family']:<12} {row['case']:<48} {row['state']}")
    families = sorted({r["family"] for r in rows})
    print_table("Dry run", ["family", "to measure", "already done", "skipped (device)"], [
        [f, *(str(sum(1 for r in rows if r["family"] == f and r["state"].startswith(state)))
              for state in ("to measure", "done", "skip"))]
        for f in families])


def _render_reports(reports: list[Any], out: Path, json_output: bool,
                    notes: tuple[str, ...] = ()) -> None:
    document = {"out": str(out), "families": [vars(r) for r in reports], "notes": list(notes)}
    if json_output:
        print_json(document)
        return
    print_table(f"mosaic bench -> {out}",
                ["family", "cases", "already done", "measured", "skipped", "left (budget)"],
                [[r.family, str(r.planned), str(r.already_done), str(r.measured),
                  str(r.skipped), str(r.left_for_budget)] for r in reports])
    for note in notes:
        typer.echo(f"note: {note}")
    left = sum(r.left_for_budget for r in reports)
    if left:  # nothing says so otherwise: the run ends 0 with cases unmeasured
        error_console.print(f"note: {left} case(s) left for the --time-budget; rerun the same "
                            "command to measure them (done cases are kept), or raise the "
                            "budget", markup=False, highlight=False)


def _kernels(families: tuple[str, ...], out: Path, job: Path | None, shapes_file: Path | None,
             preset: str | None, sets: list[str], dry_run: bool, time_budget: str | None,
             device: str | None, dtypes: str | None, max_tensor_bytes: str, backends: str,
             quick: bool, progress: bool, json_output: bool, threads: int | None = None
             ) -> None:
    if not is_rank_zero():
        # under torchrun the kernels are timed on rank 0 alone: every rank timing them at once
        # on shared cores, into one folder, measured the contention (a trial)
        return
    _require_torch()
    if threads is not None:  # recorded in the run's metadata (torch_threads)
        import torch

        torch.set_num_threads(threads)
    from mosaic.bench.device import default_dtypes, resolve_device
    from mosaic.bench.metadata import collect
    from mosaic.bench.run import kernel_cases, listing, run_kernels
    from mosaic.bench.shapes import sized_for_device

    shapes = _shapes(job, shapes_file, preset, sets)
    torch_device = resolve_device(device)
    options = _options(default_dtypes(torch_device.type) if dtypes is None else dtypes,
                       max_tensor_bytes, backends, quick)
    budget = None if time_budget is None else parse_duration_s("--time-budget", time_budget)
    shapes = sized_for_device(shapes, torch_device.type, families)
    if dry_run:
        metadata_id = collect(torch_device)["metadata_id"]
        _render_listing(listing(out, kernel_cases(families, shapes, options), metadata_id,
                                torch_device), json_output)
        return
    prepare_output_dir(out, "--out")  # a file or unwritable path: one line, before any work
    reports = run_kernels(out, families, shapes, options, torch_device, budget,
                          progress and not is_quiet())  # `mosaic --quiet bench ...` too
    _render_reports(reports, out, json_output, shapes.notes)


def _family_command(family: str, doc: str, command_name: str | None = None) -> None:
    def command(out: OutOption, job: JobOption = None, shapes_file: ShapesOption = None,
                preset: PresetOption = None, set_: SetOption = None,
                dry_run: DryRunFlag = False, time_budget: BudgetOption = None,
                device: DeviceOption = None, dtypes: DtypesOption = None,
                max_tensor_bytes: MaxTensorOption = "8GiB",
                attention_backends: BackendsOption = "cudnn,flash,efficient,math",
                quick: QuickFlag = False, progress: ProgressFlag = True,
                json_output: JsonFlag = False, threads: ThreadsOption = None) -> None:
        _kernels((family,), out, job, shapes_file, preset, set_ or [], dry_run, time_budget,
                 device, dtypes, max_tensor_bytes, attention_backends, quick, progress,
                 json_output, threads)

    command.__doc__ = doc
    bench_app.command(command_name or family)(guarded(command))


_family_command("gemm", "Dense GEMMs (forward + both backward shapes) and the achievable "
                        "peak sweep.")
_family_command("grouped", "Grouped expert GEMMs, balanced and skewed routing.")
_family_command("attention", "Causal attention forward and backward per SDPA backend.")
_family_command("kernels", "Element-wise, norm, cross-entropy, optimizer step, launch cost.")
_family_command("te_grouped", "Host time of Transformer Engine's GroupedLinear by local experts "
                "and precision (needs transformer_engine and a GPU).", "te-grouped")

MinBytesOption = Annotated[str, typer.Option("--min-bytes", help="smallest message")]
MaxBytesOption = Annotated[str, typer.Option(
    "--max-bytes", help="largest message (cap; 4GiB on a full run)")]
FactorOption = Annotated[int, typer.Option("--size-factor", help="message size step")]
OpsOption = Annotated[str | None, typer.Option(
    "--ops", help="all_gather,reduce_scatter,all_reduce,all_to_all,all_to_all_uneven,"
                  "send_recv")]
GroupSizesOption = Annotated[str | None, typer.Option(
    "--group-sizes", help="group sizes (default: powers of two, or the job's)")]
StridesOption = Annotated[str | None, typer.Option(
    "--strides", help="rank strides (default: 1 and ranks per node across nodes)")]
DomainOption = Annotated[int | None, typer.Option(
    "--domain-gpus", min=1, help="GPUs per NVLink domain (default: ranks per node)")]
BackendOption = Annotated[str | None, typer.Option(
    "--backend", help="torch.distributed backend (default: nccl on CUDA, gloo on CPU)")]


def _collective_options(job_shapes: Any, min_bytes: str, max_bytes: str, size_factor: int,
                        ops: str | None, group_sizes: str | None, strides: str | None,
                        domain_gpus: int | None, world_size: int = 8,
                        ranks_per_node: int | None = None) -> Any:
    from mosaic.bench.collectives import OPS
    from mosaic.bench.run import CollectiveOptions

    sizes = parse_ints("--group-sizes", group_sizes) if group_sizes else None
    cap = parse_bytes("--max-bytes", max_bytes)
    placements = None
    if job_shapes is not None and job_shapes.collective_uses:
        uses = job_shapes.collective_uses
        placements = tuple(sorted({(u.group_size, u.ranks_per_domain) for u in uses}))
        largest = max(u.message_bytes for u in uses)
        cap = min(cap, 1 << max(int(largest - 1).bit_length(), 10))
    return CollectiveOptions(
        min_bytes=parse_bytes("--min-bytes", min_bytes), max_bytes=cap,
        size_factor=size_factor,
        ops=parse_names("--ops", ops, OPS) if ops else OPS,
        group_sizes=sizes, strides=parse_ints("--strides", strides) if strides else None,
        domain_gpus=domain_gpus, placements=placements, world_size=world_size,
        ranks_per_node=ranks_per_node)


@bench_app.command("collectives")
@guarded
def collectives_command(
    out: OutOption, job: JobOption = None, preset: PresetOption = None,
    set_: SetOption = None, dry_run: DryRunFlag = False, time_budget: BudgetOption = None,
    min_bytes: MinBytesOption = "1KiB", max_bytes: MaxBytesOption = "4GiB",
    size_factor: FactorOption = 2, ops: OpsOption = None, group_sizes: GroupSizesOption = None,
    strides: StridesOption = None, domain_gpus: DomainOption = None,
    backend: BackendOption = None, quick: QuickFlag = False, progress: ProgressFlag = True,
    json_output: JsonFlag = False,
    world_size: Annotated[int, typer.Option(
        help="with --dry-run outside torchrun: ranks of the planned job")] = 8,
    ranks_per_node: Annotated[int | None, typer.Option(
        help="with --dry-run outside torchrun: ranks per node (default: all)")] = None,
) -> None:
    """Collectives over torch.distributed (run under torchrun): bus bandwidth and latency."""
    _require_torch()
    from mosaic.bench.run import run_collectives
    from mosaic.bench.timer import QUICK, TimingPolicy

    _refuse_unread_sets(set_ or [], job, None, preset)
    shapes = _shapes(job, None, preset, set_ or []) if (job or preset == "paper") else None
    options = _collective_options(shapes, min_bytes, max_bytes, size_factor, ops,
                                  group_sizes, strides, domain_gpus, world_size, ranks_per_node)
    budget = None if time_budget is None else parse_duration_s("--time-budget", time_budget)
    if not dry_run:
        prepare_output_dir(out, "--out")
    result = run_collectives(out, options, QUICK if quick else TimingPolicy(), budget,
                             progress and not is_quiet(), backend, dry_run)
    if not is_rank_zero():
        return
    if dry_run:
        _render_listing(result, json_output)
    else:
        _render_reports([result], out, json_output)


@bench_app.command("all")
@guarded
def all_command(
    out: OutOption, job: JobOption = None, shapes_file: ShapesOption = None,
    preset: PresetOption = None, set_: SetOption = None, dry_run: DryRunFlag = False,
    time_budget: BudgetOption = None, device: DeviceOption = None,
    dtypes: DtypesOption = None, max_tensor_bytes: MaxTensorOption = "8GiB",
    attention_backends: BackendsOption = "cudnn,flash,efficient,math",
    quick: QuickFlag = False, progress: ProgressFlag = True, json_output: JsonFlag = False,
    threads: ThreadsOption = None,
) -> None:
    """Every kernel family (under torchrun on rank 0 only; collectives: see `collectives`)."""
    _kernels(KERNEL_FAMILY_NAMES, out, job, shapes_file, preset, set_ or [], dry_run,
             time_budget, device, dtypes, max_tensor_bytes, attention_backends, quick,
             progress, json_output, threads)


@bench_app.command("compare")
@guarded
def compare_command(
    dir_a: Annotated[Path, typer.Argument(help="first bench directory")],
    dir_b: Annotated[Path, typer.Argument(help="second bench directory")],
    plot: Annotated[Path | None, typer.Option("--plot", help="write a PNG scatter here")] = None,
    top: Annotated[int, typer.Option(help="largest differences to list")] = 10,
    json_output: JsonFlag = False,
) -> None:
    """Compare two bench directories case by case (time B / time A)."""
    from mosaic.bench.compare import as_records, compare, plot_format
    from mosaic.bench.compare import plot as plot_cases

    if plot is not None:  # a path it cannot write refused before comparing, not after
        from mosaic.io_atomic import check_output_file

        check_output_file(plot, "--plot")  # as every other output file (a missing folder,
        plot_format(plot)  # an unexpanded '~', an unwritable one)
    cases, summary = compare(dir_a, dir_b)
    if plot is not None:
        plot_cases(cases, plot, dir_a.name, dir_b.name)
    if json_output:
        print_json({"summary": as_records(summary), "cases": as_records(cases),
                    "plot": str(plot) if plot else None})
        return
    print_table(f"time {dir_b.name} / time {dir_a.name} per family (geometric mean)",
                ["family", "cases", "geomean", "min", "max"],
                [[r.family, str(r.cases), f"{r.geomean_ratio:.3f}", f"{r.min_ratio:.3f}",
                  f"{r.max_ratio:.3f}"] for r in summary.itertuples()])
    import numpy as np

    spread = cases.assign(off=np.abs(np.log(cases["ratio"]))).nlargest(top, "off")
    print_table("Largest differences", ["family", "case", "A ms", "B ms", "B/A"],
                [[r.family, r.case, f"{r.time_a_s * 1e3:.4g}", f"{r.time_b_s * 1e3:.4g}",
                  f"{r.ratio:.3f}"] for r in spread.itertuples()])
    if plot is not None:
        typer.echo(f"plot written to {plot}")


def calibrate_microbench(directory: Path, out: Path, base: str | None, name: str | None,
                         device: str | None, system: str | None, json_output: bool) -> None:
    """`mosaic calibrate --microbench DIR --out FILE`: fit, write, re-load, report."""
    import yaml

    from mosaic.bench.store import atomic_write_bytes
    from mosaic.evaluate.microbench_calibration import (
        calibrate_from_microbench,
        comparison_rows,
        is_written,
    )
    from mosaic.perf.calibration import load_calibration

    document, report = calibrate_from_microbench(directory, load_calibration(base),
                                                 device=device, system=system, name=name)
    atomic_write_bytes(out, yaml.safe_dump(document, sort_keys=False).encode())
    load_calibration(out)  # what perf, layouts and plan will read must load
    for warning in report["warnings"]:
        error_console.print(f"warning: {warning}", markup=False, highlight=False,
                            soft_wrap=True)
    if json_output:
        print_json({"calibration": str(out), "report": report})
        return
    rows = [("device", str(report["device"])), ("reference", report["reference"])]
    for dtype, peak in report.get("peaks_flops_per_s", {}).items():
        datasheet = peak["datasheet"]
        share = f" of {datasheet / 1e12:.4g} datasheet ({peak['achievable'] / datasheet:.0%})" \
            if datasheet else ""
        rows.append((f"achievable {dtype} peak",
                     f"{peak['achievable'] / 1e12:.4g} TFLOP/s{share}"))
    for family, error in report["fit_error_percent"].items():
        rows.append((f"fit error {family}", "none measured: one shape, fitted exactly"
                     if error is None else f"{error:.1f}% MAPE"))
    from mosaic.cli.common import print_key_value_table

    print_key_value_table(f"Calibration written to {out}", rows)
    # a fitted value left out of the file says so (a trial read one as written)
    block = document["microbench"]
    print_table("Fitted vs built-in constants",
                ["family", "constant", "built-in", "fitted", "written"],
                [[f, c, f"{b:.4g}", f"{v:.4g}",
                  "yes" if is_written(block, f, c, report) else _kept_cell(report, c)]
                 for f, c, b, v in comparison_rows(report)])


def _kept_cell(report: dict[str, Any], constant: str) -> str:
    """'no (built-in kept)', with the reason where the report gives one (a trial saw the
    launch gap of a CPU run kept without a word of why)."""
    reason = (report.get(constant) or {}).get("kept_because") if isinstance(
        report.get(constant), dict) else None
    return f"no (built-in kept: {reason})" if reason else "no (built-in kept)"


def register(app: typer.Typer) -> None:
    """Attach the `bench` command group to the root command."""
    app.add_typer(bench_app, name="bench", help=HELP)
