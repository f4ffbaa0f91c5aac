"""`mosaic train` and `mosaic ladder`: the reference trainer and the scaling-law ladder.

Thin: parse, call mosaic.train, render. torch is imported only when a run starts, so
`mosaic ladder run --list` and `mosaic ladder fit` work without the train extra.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.cli import warning_lines
from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    JsonFlag,
    console,
    error_console,
    guarded,
    print_json,
    print_key_value_table,
    print_table,
    to_jsonable,
)
from mosaic.cli.law_cmd import (
    BootstrapMethodOption,
    BootstrapOption,
    SamplesOutOption,
    check_bootstrap_options,
)
from mosaic.cli.progress import is_quiet
from mosaic.errors import MosaicInputError, missing_extra, shown
from mosaic.io_atomic import check_output_file, prepare_output_dir, write_text_atomic
from mosaic.limits import check_range
from mosaic.torchrun_env import is_rank_zero

DEFAULT_STARTS = 4096  # mosaic.law.fit.DEFAULT_STARTS (not imported: keeps scipy lazy)
DEFAULT_POLISHED = 32  # mosaic.law.fit.DEFAULT_POLISHED

ladder_app = typer.Typer(
    name="ladder",
    help="Train a grid of MoE geometries with the paper's recipe and fit the loss law.",
    no_args_is_help=True,
)

OutOption = Annotated[Path, typer.Option("--out", help="output folder (resumable)")]


def register(app: typer.Typer) -> None:
    """Attach `mosaic ladder ...` and `mosaic train` to the top-level app."""
    app.add_typer(ladder_app, name="ladder")
    app.command("train")(train_command)


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise missing_extra("train") from None


@guarded
def train_command(
    job: Annotated[Path, typer.Argument(help="training job YAML (docs/train.md)")],
    out: Annotated[Path | None, typer.Option(
        "--out", help="output folder (resumable); not with --perf-job")] = None,
    stop_after: Annotated[
        int | None, typer.Option("--stop-after", help="stop after this many steps in total")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no per-step lines")] = False,
    perf_job: Annotated[Path | None, typer.Option(
        "--perf-job", help="write the `mosaic perf` job that predicts this run instead of "
        "training (with --system and --gpus)")] = None,
    system: Annotated[str | None, typer.Option(
        "--system", help="with --perf-job: catalog node type the run uses (e.g. DGX-H200)")
    ] = None,
    gpus: Annotated[int | None, typer.Option(
        "--gpus", help="with --perf-job: GPUs the run uses (default: one node's)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Train one job with the paper's MoE recipe (single process, or under torchrun)."""
    from mosaic.train.config import job_errors, load_train_config

    config = load_train_config(job)
    if perf_job is not None:
        if stop_after is not None or quiet:
            raise MosaicInputError("--perf-job writes a file and trains nothing: leave out "
                                   "--stop-after and --quiet")
        _write_perf_job(config, job, perf_job, system, gpus, out, as_json)
        return
    if system is not None or gpus is not None:
        raise MosaicInputError("--system and --gpus describe the cluster of --perf-job; the "
                               "trainer runs on the devices it is started on")
    if out is None:
        raise MosaicInputError("give --out FOLDER (where the run's checkpoints and results "
                               "go), or --perf-job FILE to write its `mosaic perf` job")
    _require_torch()
    created = not out.exists()
    prepare_output_dir(out, "--out")  # a file or unwritable path: one line, before training
    from mosaic.train.router_health import FINAL_WINDOW_FRACTION, is_unbalanced
    from mosaic.train.trainer import format_record, train

    # its own --quiet, or the root one (`mosaic --quiet train`, or typed after: hoisted)
    def log_line(record: dict[str, Any]) -> None:
        warning_lines.release()  # training has begun: warnings print when they happen
        console.print(format_record(record), highlight=False)

    log = None if quiet or is_quiet() or as_json else log_line
    try:
        with job_errors(str(job)):  # which of several jobs failed, once it runs
            result = train(config, out, stop_after_steps=stop_after, log=log,
                           started=warning_lines.release)
    except MosaicInputError:  # refused before its first step: no empty folder left behind
        if created and is_rank_zero():  # one process tidies up
            with contextlib.suppress(OSError):  # not empty (another rank's file): kept
                out.rmdir()
        raise
    if as_json:
        print_json(asdict(result))
        return
    print_key_value_table(
        f"Training run {out}",
        [("state", result.state),
         ("steps", f"{result.steps} / {result.total_steps}"),
         ("tokens", f"{result.tokens:,}"),
         ("smoothed final loss", f"{result.smoothed_loss:.4f}"),
         ("N_tot / N_act", f"{result.n_total:,} / {result.n_active:,}"),
         ("peak lr", f"{result.peak_lr:.3e}"),
         ("tokens/s (median step)", _tokens_per_s_cell(result)),
         *([] if result.mfu_paper is None else [
             ("MFU (6·N_act, dense bf16 datasheet peak)", _share(result.mfu_paper))]),
         *([] if result.mfu_paper_vs_achievable is None else [
             ("MFU against the measured GEMM peak",
              _share(result.mfu_paper_vs_achievable))]),
         *([] if result.starved_experts is None else [
             (f"starved experts / MoE layer (last {FINAL_WINDOW_FRACTION:.0%} of steps)",
              _starved_cell(result.starved_experts)
              + (" (unbalanced routers: docs/train.md)"
                 if is_unbalanced(result.starved_experts) else ""))]),
         ("metrics", str(Path(out) / "metrics.jsonl"))])


def _tokens_per_s_cell(result: Any) -> str:
    """The summary's throughput: unknown where no step after a process's first (warm-up)
    step was timed, i.e. this process trained one step (`--stop-after 1`, or a resume one
    step before the end), or a finished run's step metrics are gone (no last loss either)."""
    if math.isfinite(result.tokens_per_s):
        return f"{result.tokens_per_s:.4g}"
    if math.isfinite(result.final_loss):
        return ("unknown: no step after the process's first (warm-up) step, which tokens/s "
                "leaves out, was timed")
    return "unknown (the step metrics are gone)"


@ladder_app.command("run")
@guarded
def run(
    grid: Annotated[Path, typer.Argument(help="grid YAML (recipe + ladder axes)")],
    out: OutOption,
    scale: Annotated[
        float, typer.Option("--scale", help="multiply head width (kept >= 8) and token "
                                       "budgets (0, 1]")
    ] = 1.0,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="train only this rung (repeatable)")
    ] = None,
    list_only: Annotated[bool, typer.Option("--list", help="list the rungs, train none")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Train every rung of GRID (finished rungs are skipped) and write OUT/runs.csv."""
    from mosaic.arch import count_parameters
    from mosaic.train.ladder import load_grid, run_ladder

    jobs = load_grid(grid, scale)
    names = [j.name for j in jobs]
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise MosaicInputError(f"--only {shown(unknown[0])} is not a rung of {grid}; rungs: "
                               f"{', '.join(names)}")
    if list_only:
        rows = []
        for job in jobs:
            counts = count_parameters(job.config.geometry())
            rows.append({"name": job.name, "n_total": int(counts.n_total),
                         "n_active": int(counts.n_active), "sparsity": float(counts.sparsity),
                         "tokens": job.config.total_steps * job.config.tokens_per_step,
                         "steps": job.config.total_steps})
        if as_json:
            print_json({"rungs": rows})
            return
        print_table(f"Ladder {grid} ({len(rows)} rungs)", ["rung", "N_tot", "N_act", "S",
                                                          "tokens", "steps"],
                    [[r["name"], f"{r['n_total']:,}", f"{r['n_active']:,}",
                      f"{r['sparsity']:.3f}", f"{r['tokens']:,}", str(r["steps"])]
                     for r in rows])
        return
    _require_torch()
    from mosaic.cli.progress import line_reporter

    prepare_output_dir(out, "--out")
    from mosaic.train.config import job_errors

    with job_errors(str(grid)):  # which of several grids failed, once its rungs run
        path = run_ladder(jobs, out, progress=line_reporter(as_json), only=only)
    if not is_rank_zero():  # under torchrun, rank 0 reports
        return
    from mosaic.table_files import read_table
    from mosaic.train.ladder import finished_elsewhere
    from mosaic.train.router_health import starved_value, unbalanced_names, unbalanced_warning

    rows = read_table(path, "runs file", allow_no_rows=True).to_dict("records")  # typed
    unbalanced = unbalanced_names(rows)
    others = finished_elsewhere(jobs, out)
    if others:  # not a progress line: -q and --json keep it
        error_console.print(f"note: {len(others)} finished rung(s) under {out / 'runs'} are "
                            f"not in this grid and stay out of {path.name}: "
                            f"{', '.join(others[:5])}" + (" ..." if len(others) > 5 else "")
                            + f"; {path.name} now holds this grid's {len(rows)} rung(s), "
                            "which `mosaic ladder fit` fits; the other grid's own `ladder "
                            "run` command (without this --scale/--only) rewrites it with "
                            "its rungs", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        print_json({"runs_csv": str(path), "runs": rows, "unbalanced_rungs": unbalanced,
                    "other_grid_rungs": others})
    else:
        print_table(f"Ladder results ({path})",
                    ["rung", "N_tot", "N_act", "S", "D", "loss", "starved / layer"],
                    [[str(r["name"]), f"{r['n_total']:,}", f"{r['n_active']:,}",
                      f"{float(r['sparsity']):.3f}",
                      f"{float(r['tokens']):.3g}", f"{float(r['loss']):.4f}",
                      _starved_cell(starved_value(r))] for r in rows])
    if unbalanced:
        error_console.print(f"warning: {unbalanced_warning(unbalanced)}", markup=False,
                            highlight=False, soft_wrap=True)


def _write_perf_job(config: Any, job: Path, path: Path, system: str | None,
                   gpus: int | None, out: Path | None, as_json: bool = False) -> None:
    """`mosaic train JOB --perf-job FILE`: the perf job of the run, written, not trained."""
    import yaml

    from mosaic.hardware import get_system
    from mosaic.io_atomic import write_text_atomic
    from mosaic.train.perf_job import perf_job_document

    if out is not None:
        raise MosaicInputError("--perf-job writes a file and trains nothing: leave out --out")
    if system is None:
        raise MosaicInputError("--perf-job needs --system NAME, the catalog node type the run "
                               "uses (`mosaic hardware list`)")
    if gpus is not None and gpus < 1:  # 0 was read as "unstated", one node (a trial)
        raise MosaicInputError(f"--gpus: give a positive number of GPUs, got {gpus}")
    check_output_file(path, "--perf-job", inputs=[job])
    node = get_system(system)
    gpus = node.gpus_per_node if gpus is None else gpus
    document = perf_job_document(config, node.name, gpus)
    _check_perf_job(document, gpus)
    header = (f"# mosaic perf job for the trainer run {job} (written by `mosaic train "
              f"--perf-job`); predict it with `mosaic perf {path}`\n# the trainer as the "
              "model sees it: FSDP2 over every GPU, experts over run.expert_parallel ranks, no "
              "recompute, torchtitan's stack (mosaic/train/perf_job.py)\n")
    write_text_atomic(path, header + yaml.safe_dump(document, sort_keys=False,
                                                    default_flow_style=None, width=100))
    if as_json:  # stdout stays JSON (a fuzz trial: the text line broke --json)
        print_json({"written": str(path), "predict_with": f"mosaic perf {path}",
                    "job": document})
        return
    console.print(f"wrote {path}: `mosaic perf {path}` predicts the run", markup=False,
                  highlight=False)


def _check_perf_job(document: dict[str, Any], gpus: int) -> None:
    """Refuse a perf job that `mosaic perf` would refuse: the layout rules of the job it
    writes (a batch the GPUs cannot share, a GPU count that is not whole nodes), said
    before the file is written (a trial got a file that `mosaic perf` then rejected)."""
    import tempfile

    import yaml

    from mosaic.evaluate.job import check_job_layout, load_job_spec

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "perf_job.yaml"
        path.write_text(yaml.safe_dump(document))
        spec = load_job_spec(path)  # mosaic's own document: an error here is not the user's
        try:
            check_job_layout(spec)
        except MosaicInputError as error:
            raise MosaicInputError(f"--perf-job: the run on {gpus} GPUs is not one mosaic "
                                   f"perf can predict ({error}); choose --gpus, or the "
                                   "job's run.global_batch_seqs and run.micro_batch_seqs, "
                                   "so that it is") from None


def _share(value: float) -> str:
    """A percentage, in significant figures below 0.01% (a CPU run's 3.2e-6 of a GPU's
    peak read '0.00%' in a trial)."""
    return f"{value:.2%}" if value >= 1e-4 or value == 0 else f"{value * 100:.2g}%"


def _starved_cell(starved: float | None) -> str:
    return "-" if starved is None else f"{starved:.2f}"


def _smoothing_lag_note(fitted_rows: Any, fit_rmse: float) -> str | None:
    """A warning when the smoothed losses the law is fitted to (the bias-corrected EMA of
    paper Sec. 3.1) lag the rungs' last-step losses by more than the fit's own RMSE: on
    short rungs the EMA still carries earlier, higher losses, so the D term is fitted to a
    lag (a trial's 200-step rungs: +0.04 to +0.055 against an RMSE of 0.02). Judged per
    token budget (the rungs of one D), the median lag of each: the short rungs alone may pin
    the D term while the longer ones hold the median over all rows down (a later trial's
    three 200-step rungs lagged +0.04-0.056, its 100-step rungs +0.01: no warning). Over the
    rows the fit read (``fitted_rows``, from :func:`_healthy_runs`)."""
    if "final_loss" not in fitted_rows.columns:
        return None
    frame = fitted_rows.assign(
        lag=fitted_rows["loss"].astype(float) - fitted_rows["final_loss"].astype(float)
    ).dropna(subset=["lag"])
    if frame.empty:
        return None
    by_budget = frame.groupby(frame["tokens"].astype(float))["lag"].median()
    lagging = by_budget[by_budget > fit_rmse]
    if lagging.empty:
        return None
    worst_tokens = float(lagging.idxmax())
    budgets = ", ".join(f"{tokens:.3g}" for tokens in lagging.index)
    return (f"the smoothed losses the law is fitted to lag the rungs' last-step losses by "
            f"{float(lagging.max()):+.3f} nats (median of the rungs of {worst_tokens:.3g} "
            f"tokens; up to {float(frame['lag'].max()):+.3f}), more than the fit's RMSE "
            f"{fit_rmse:.3f}, at token budget(s) {budgets}: the rungs are short for the EMA "
            "(run.smoothing_beta, paper Sec. 3.1), so the tokens term is fitted partly to the "
            "lag; train more steps per rung before reading D from this law")


def _other_rungs_hint(csv_path: Path) -> str:
    """Where the folder holds finished rungs its runs.csv does not list: the last `ladder
    run` wrote only its own grid's (a trial's --scale run left 3 of 19, and the fit then
    refused with no word of why). Rungs listed but left out of the fit (unbalanced, another
    G) are not this."""
    from mosaic.table_files import read_table
    from mosaic.train.ladder import RUNS_CSV, finished_rungs

    if csv_path.name != RUNS_CSV:  # not a ladder's own table (a trial's collect output
        return ""                  # beside a runs/ folder of its own train runs)
    finished = finished_rungs(csv_path.parent)
    listed = read_table(csv_path, "runs file", allow_no_rows=True)
    names = set(listed["name"].astype(str)) if "name" in listed.columns else set()
    if not names <= set(finished):  # rows of runs trained elsewhere: a `ladder collect`
        return ""                   # table (docs/train.md names it runs.csv), not a ladder's
    missing = [name for name in finished if name not in names]
    if not missing:
        return ""
    return (f"; {csv_path.parent / 'runs'} holds {len(finished)} finished rungs, "
            f"{len(missing)} of them not in {csv_path.name}: the last `mosaic ladder run` "
            "into this folder wrote its own grid's (a --scale or --only run); re-run the "
            "full grid's command (finished rungs are kept, not retrained) to list them all")


def _run_files(run_folders: list[Path]) -> list[Path]:
    """The trainer's files in the run folders a command reads, which its --out must not
    replace (a trial's `ladder collect RUN --out RUN/result.json` wrote the table over the
    run's result)."""
    from mosaic.train.result_files import (
        CHECKPOINT_FILE,
        METRICS_FILE,
        RESULT_FILE,
        RUN_INFO_FILE,
    )

    return [folder / name for folder in run_folders
            for name in (RESULT_FILE, RUN_INFO_FILE, METRICS_FILE, CHECKPOINT_FILE)]


@ladder_app.command("collect")
@guarded
def collect(
    folders: Annotated[list[Path], typer.Argument(
        help="`mosaic train --out` folders (each holds result.json), or their parent")],
    out: Annotated[Path, typer.Option("--out", help="runs.csv to write")],
    as_json: JsonFlag = False,
) -> None:
    """Gather separate `mosaic train` runs into the runs.csv `law fit` and `ladder fit` read.

    One row per finished run, named by its folder, with the smoothed final loss as `loss`
    (the law's target; result.json's final_loss is one noisy step) and its router health
    (starved_experts), as `ladder run` writes them.
    """
    from mosaic.train.ladder import collect_result_rows, write_runs_csv

    check_output_file(out, "--out", inputs=[])
    if out.suffix and out.suffix.lower() != ".csv":  # a CSV table under another suffix:
        # `law fit` reads a table by its suffix (a trial's --out RUN/result.json replaced a
        # run's result with the table); a name without one (/dev/stdout) is written as given
        raise MosaicInputError(f"--out {out}: name a .csv file (the table is CSV, and `law "
                               "fit` reads a table by its suffix), e.g. runs.csv")
    rows = collect_result_rows(folders)
    write_runs_csv(rows, out)
    if as_json:
        print_json({"runs_csv": str(out), "runs": [row["name"] for row in rows]})
        return
    print_table(f"{len(rows)} run(s) written to {out}",
                ["run", "N_total", "tokens", "loss (smoothed)", "starved experts"],
                [[row["name"], f"{row['n_total']:.4g}", f"{row['tokens']:.4g}",
                  f"{row['loss']:.4f}", "-" if row["starved_experts"] is None
                  else f"{row['starved_experts']:g}"] for row in rows])
    console.print(f"next: mosaic law fit {out} --out law.json (or mosaic ladder fit {out} "
                  "--out law.json, which leaves out unbalanced runs)", markup=False,
                  highlight=False)


@ladder_app.command("record")
@guarded
def record(
    folders: Annotated[list[Path], typer.Argument(
        help="finished `mosaic train --out` folders of GPU runs, or their parent")],
    system: Annotated[str, typer.Option(
        "--system", help="catalog node type the runs trained on (`mosaic hardware list`)")],
    out: Annotated[Path, typer.Option(
        "--out", help="run-record YAML to write, or to append to (its text kept)")],
    id_prefix: Annotated[str, typer.Option(
        "--id-prefix", help="run ids are PREFIX-FOLDER; the prefix is the source key "
                            "validate holds out together")] = "train",
    catalog: CatalogFileOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Write finished trainer runs as run records, for `mosaic validate` and `calibrate`.

    Each record is the run's job as `mosaic train --perf-job` describes it, with what the
    trainer measured: the median step's tokens/s and the caching allocator's peak memory.
    """
    from mosaic.config.record_entry import add_to_record_file
    from mosaic.config.run_records import load_run_records
    from mosaic.train.ladder import result_folders
    from mosaic.train.run_record import record_for_run, record_id

    if not id_prefix or "-" in id_prefix or not id_prefix.isascii():
        raise MosaicInputError(f"--id-prefix {shown(id_prefix)}: a word without '-' (the part of "
                               "a run id before its first '-' is its source key)")
    apply_catalog(catalog)
    found = result_folders(folders)
    check_output_file(out, "--out", inputs=_run_files(found))  # before reading the runs
    ids = [record_id(id_prefix, folder) for folder in found]
    twice = sorted({run_id for run_id in ids if ids.count(run_id) > 1})
    if twice:
        raise MosaicInputError(f"two runs would share the id {twice[0]} (their folders share a "
                               "name): rename one, or record them with different --id-prefix")
    entries = [record_for_run(folder, system, run_id)
               for folder, run_id in zip(found, ids, strict=True)]
    new = {entry["id"] for entry in entries}
    # written beside the file and loaded as validate reads it first: a record validate would
    # skip leaves the file as it was
    with tempfile.TemporaryDirectory(dir=out.resolve().parent) as folder:
        staged = Path(folder) / out.name
        if out.exists():
            staged.write_text(out.read_text())
        try:
            total = add_to_record_file(entries, staged)
        except MosaicInputError as exc:  # name the user's file, not the staged copy (a trial)
            raise MosaicInputError(str(exc).replace(str(staged), str(out))) from None
        skipped = [reason for run_id, reason in load_run_records(staged).skipped
                   if run_id in new]
        if skipped:
            raise MosaicInputError(f"{out}: not written: validate would skip "
                                   f"{'; '.join(skipped)}")
        # written as every output is (io_atomic): through a symlink to its target, which
        # os.replace(staged, out) replaced by an ordinary file, leaving the target stale
        write_text_atomic(out, staged.read_text())
    if as_json:
        print_json({"runs_file": str(out), "runs": sorted(new), "runs_in_file": total})
        return
    print_table(f"{len(entries)} run record(s) added to {out} ({total} in the file)",
                ["id", "GPUs", "tokens/s per GPU", "step s", "peak memory GiB"],
                [[e["id"], str(e["num_gpus"]), f"{e['measured']['tokens_per_s_per_gpu']:,.0f}",
                  f"{e['measured']['step_time_s']:.4g}",
                  "-" if "memory_gib" not in e["measured"]
                  else f"{e['measured']['memory_gib']:.2f}"] for e in entries])
    console.print(f"next: mosaic validate {out}", markup=False, highlight=False)


@ladder_app.command("fit")
@guarded
def fit(
    folder: Annotated[Path, typer.Argument(help="ladder output folder (holds runs.csv)")],
    out: Annotated[Path, typer.Option("--out", help="law JSON to write (for --law)")],
    form: Annotated[str, typer.Option("--form", help="law form (joint, per-g, chinchilla)")]
    = "joint",
    holdout: Annotated[
        float | None, typer.Option("--holdout",
                                   help="fraction held out per G stratum (Sec. 4.2); default "
                                        "0.1, or none where holding out leaves too few runs")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="seed of the fit's starts")] = 0,
    starts: Annotated[
        int, typer.Option("--starts", help="initialisations screened (vectorised)")
    ] = DEFAULT_STARTS,
    refine: Annotated[
        int, typer.Option("--refine", help="best starts refined with L-BFGS-B")
    ] = DEFAULT_POLISHED,
    split_factor: Annotated[
        float | None, typer.Option("--split-factor",
                                   help="fit only the rungs with this G (forms without a "
                                        "split-factor term, per-g and chinchilla, fit one G)")
    ] = None,
    keep_unbalanced: Annotated[
        bool, typer.Option("--keep-unbalanced",
                           help="also fit rungs whose routers ended unbalanced (starved "
                                "experts, docs/train.md)")
    ] = False,
    n_bootstrap: BootstrapOption = 0,
    method: BootstrapMethodOption = "wild",
    samples_out: SamplesOutOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Fit a loss law to FOLDER/runs.csv and write the law file `mosaic plan --law` reads.

    Rungs whose routers ended unbalanced (a starved expert per MoE layer or more over their
    last steps, the runs.csv column starved_experts) are left out unless --keep-unbalanced.
    --bootstrap N with --samples-out writes coefficient samples of this fit, which
    `mosaic plan --bootstrap-samples` accepts with this law file only (and only for a
    form with a sparsity term, joint or per-g: the planner refuses dense laws).
    """
    from mosaic.law.fit import FitSettings
    from mosaic.law.forms import get_form
    from mosaic.law.rundata import RunData
    from mosaic.law.validation import check_fittable, fit_with_holdout, holdout_to_fit

    if holdout is not None:
        check_range("--holdout", holdout, "fraction", high=0.9)  # as `mosaic law fit` does
    check_bootstrap_options(n_bootstrap, method, samples_out)

    if not folder.exists():
        raise MosaicInputError(f"{folder}: does not exist (give a `mosaic ladder run` output "
                               "folder or its runs.csv)")
    csv_path = folder / "runs.csv" if folder.is_dir() else folder
    if folder.is_dir() and not csv_path.exists():  # a folder of `mosaic train` runs (a trial)
        trained = sorted(p.parent.name for p in folder.glob("*/result.json"))
        raise MosaicInputError(
            f"{folder}: no runs.csv" + (
                f"; it holds {len(trained)} `mosaic train` run(s) ({', '.join(trained[:3])}"
                f"{', ...' if len(trained) > 3 else ''}): gather them with `mosaic ladder "
                f"collect {folder} --out {csv_path}`, then fit" if trained else
                " (give a `mosaic ladder run` output folder or its runs.csv)"))
    # nor may they replace a rung's own files (a trial's --out DIR/runs/RUNG/result.json)
    rungs_dir = csv_path.parent / "runs"
    rungs = sorted(p for p in rungs_dir.iterdir() if p.is_dir()) if rungs_dir.is_dir() else []
    for option, path in (("--out", out), ("--samples-out", samples_out)):
        if path is not None:  # before the fit, not after it
            check_output_file(path, option, inputs=[csv_path, *_run_files(rungs)])
    fitted_rows, left_out, health_note = _healthy_runs(csv_path, keep_unbalanced,
                                                       split_factor)
    runs = RunData.from_frame(fitted_rows, source=str(csv_path))
    if split_factor is not None:
        runs = runs.with_split_factor(split_factor)
    law_form = get_form(form)
    try:
        check_fittable(runs, law_form)  # as `mosaic law fit` checks it
    except MosaicInputError as exc:
        unbalanced = (f" ({len(left_out)} rung(s) with unbalanced routers left out: "
                      f"{', '.join(left_out[:3])}{', ...' if len(left_out) > 3 else ''}; "
                      "--keep-unbalanced fits them)"
                      if _fittable_with_them(csv_path, split_factor, law_form, left_out)
                      else "")
        raise MosaicInputError(f"{exc}{unbalanced}{_other_rungs_hint(csv_path)}") from None
    if health_note:  # after the refusals: a refused fit gets its one line (contract)
        error_console.print(f"warning: {health_note}", markup=False, highlight=False,
                            soft_wrap=True)
    settings = FitSettings(seed=seed, starts=starts, n_polished=refine)
    holdout, holdout_note = holdout_to_fit(runs, law_form, holdout)
    if holdout_note:
        error_console.print(f"warning: {holdout_note}", markup=False, highlight=False,
                            soft_wrap=True)
    from mosaic.cli.progress import progress_reporter

    # the fit's progress, as `mosaic law fit` shows it (a trial's fit was silent 17-86 s)
    with progress_reporter(as_json) as bar:
        validated = fit_with_holdout(runs, law_form, settings, holdout_fraction=holdout,
                                     progress=bar("law fit (screened blocks, refined starts)"))
    metrics = asdict(validated.metrics)
    payload = {"law_file": str(out), "form": law_form.name, "data": str(csv_path),
               "coefficients": dict(validated.law.coefficients), "metrics": metrics,
               "unbalanced_rungs_left_out": left_out}
    from mosaic.cli.law_cmd import (
        bootstrap_into,
        print_fit,
        report_bounds,
        warn_if_unplannable,
    )
    from mosaic.law.law import ScalingLaw

    report_bounds(validated.law, payload)
    smoothing_note = _smoothing_lag_note(fitted_rows, metrics["rmse"])
    if smoothing_note:
        payload["smoothing_lag"] = smoothing_note
        error_console.print(f"warning: {smoothing_note}", markup=False, highlight=False,
                            soft_wrap=True)
    if n_bootstrap:
        bootstrap_into(payload, validated.fit, method=method, n_resamples=n_bootstrap,
                       seed=seed, samples_out=samples_out, as_json=as_json)
    # the file keeps what the fit reported, as `law fit --out` writes it: the intervals, the
    # samples file and the bound and identifiability verdicts too (a trial found them only
    # on the screen)
    provenance: dict[str, Any] = to_jsonable({
        **validated.law.provenance,  # the fitter's record, incl. data_support (extrapolation)
        "source": f"fitted to {csv_path} (mosaic ladder fit)", "form": law_form.name,
        "data": str(csv_path), "metrics": metrics,
        "settings": {"seed": seed, "holdout": holdout, "starts": starts, "refine": refine,
                     "keep_unbalanced": keep_unbalanced, "split_factor": split_factor},
        "unbalanced_rungs_left_out": left_out,
        **{key: payload[key] for key in ("intervals", "bootstrap", "samples_file")
           if key in payload}})
    written = replace(validated.law, provenance=provenance)
    written.save(out)
    try:  # the planner reads it back with the same checks
        ScalingLaw.load(out)
    except MosaicInputError as exc:
        payload["warning"] = (f"the fit is degenerate and `mosaic plan --law` will refuse "
                              f"the file ({exc}); the ladder needs more, longer or more "
                              f"varied runs")
        error_console.print(f"warning: {payload['warning']}", markup=False, highlight=False,
                            soft_wrap=True)
    else:  # and refuses a law that cannot trade size against tokens
        warn_if_unplannable(written, payload)
    if as_json:
        print_json(payload)
        return
    print_fit(payload)


def _fittable_with_them(csv_path: Path, split_factor: float | None, law_form: Any,
                        left_out: list[str]) -> bool:
    """Whether the rungs left out as unbalanced are why a fit was refused: with them kept,
    the same rows pass the checks the refused fit failed."""
    from mosaic.law.rundata import RunData
    from mosaic.law.validation import check_fittable

    if not left_out:
        return False
    runs = RunData.from_frame(_healthy_runs(csv_path, True, split_factor)[0],
                              source=str(csv_path))
    if split_factor is not None:
        runs = runs.with_split_factor(split_factor)
    try:
        check_fittable(runs, law_form)
    except MosaicInputError:
        return False
    return True


def _healthy_runs(csv_path: Path, keep_unbalanced: bool, split_factor: float | None
                  ) -> tuple[Any, list[str], str | None]:
    """The rows of a ladder's runs.csv a fit reads (its rows of ``split_factor`` where
    given), without the rungs whose routers ended unbalanced unless ``keep_unbalanced``; the
    names of those left out; and the warning that names the unbalanced rungs (printed by
    the caller once the fit is not refused). Older runs.csv files without the
    starved_experts column keep every row."""
    from mosaic.law.rundata import read_run_table
    from mosaic.train.router_health import (
        rows_of_split_factor,
        unbalanced_names,
        unbalanced_rows,
        unbalanced_warning,
    )

    frame = read_run_table(csv_path)
    frame = frame[rows_of_split_factor(frame.to_dict("records"), split_factor)]
    frame = frame.reset_index(drop=True)
    rows = frame.to_dict("records") if "starved_experts" in frame.columns else []
    unbalanced = unbalanced_names(rows)
    if not unbalanced:
        return frame, [], None
    if keep_unbalanced:
        return frame, [], unbalanced_warning(unbalanced,
                                             "this fit keeps them (--keep-unbalanced)")
    healthy = frame[[not bad for bad in unbalanced_rows(rows)]]
    if healthy.empty:
        raise MosaicInputError(f"{csv_path}: every rung ended with unbalanced routers "
                               f"({', '.join(unbalanced)}); train longer (docs/train.md "
                               "'Router collapse in short runs') or pass --keep-unbalanced")
    left_out = unbalanced_warning(unbalanced,
                                  "this fit leaves them out (--keep-unbalanced keeps them)")
    return healthy.reset_index(drop=True), unbalanced, left_out
