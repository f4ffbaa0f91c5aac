"""`mosaic validate` and `mosaic calibrate`: accuracy against measured runs."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
import yaml

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    CalibrationOption,
    JsonFlag,
    console,
    guarded,
    print_json,
    print_key_value_table,
    to_jsonable,
)
from mosaic.cli.progress import progress_reporter
from mosaic.cli.report_cmd import HtmlOption, check_html, write_html
from mosaic.cli.stream_table import print_table_streamed
from mosaic.config.run_records import (
    RunRecord,
    RunRecordReader,
    RunRecordSet,
    RunRecordWarning,
    load_run_records,
)
from mosaic.config.spelling import warn_deprecated
from mosaic.errors import MosaicInputError, shown
from mosaic.evaluate.calibrate import (
    MIN_RUNS_PER_PARAMETER,
    base_fitted_runs,
    base_inherited_runs,
    chosen_constants,
    fit_calibration,
    fit_predictions,
    implausible_measurements,
    in_sample_errors,
    leave_one_group_out,
    without_implausible_throughput,
)
from mosaic.evaluate.coverage_fit import (
    build_coverage,
    with_borrowed_residuals,
    with_inherited_runs,
)
from mosaic.evaluate.envelope_tally import EnvelopeTally
from mosaic.evaluate.memory_scale import MIN_MEMORY_SCALE_RUNS, with_memory_scale
from mosaic.evaluate.record_settings import apply_record_settings, with_record_settings
from mosaic.evaluate.validation_report import (
    ValidationSummary,
    predict_in_batches,
)
from mosaic.hardware import active_catalog_paths
from mosaic.io_atomic import check_output_file, write_text_atomic
from mosaic.perf.calibration import FITTABLE_CONSTANTS, Calibration, load_calibration
from mosaic.perf.coverage import MIN_SCOPE_RUNS, SPREAD_ONLY_TEXT, parse_coverage
from mosaic.report.validation_summary import accuracy_rows, assumption_counts, percent
from mosaic.text_values import parse_names

CV_GROUPINGS = ("source", "group", "run", "none")

ExcludeOption = Annotated[  # calibrate: left out of the fit and the report
    str | None,
    typer.Option("--exclude", help="comma-separated run ids to leave out (fit and report)"),
]
ValidateExcludeOption = Annotated[  # validate fits nothing
    str | None,
    typer.Option("--exclude", help="comma-separated run ids to leave out (report)"),
]


def _excluded_ids(exclude: str | None) -> tuple[str, ...]:
    if exclude is None or not exclude.strip():  # --exclude "$EMPTY": nothing left out
        return ()
    return tuple(sorted(parse_names("--exclude", exclude)))


SKIPPED_SHOWN = 10  # skipped records whose reason the table output prints


def _load(runs: Path, exclude: str | None = None) -> RunRecordSet:
    """The usable records of ``runs`` minus the ids in ``exclude`` (each must exist)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        record_set = apply_record_settings(load_run_records(runs))
    excluded = set(_excluded_ids(exclude))
    records = tuple(r for r in record_set.records if r.id not in excluded)
    _require_usable(runs, excluded, {r.id for r in record_set.records}, len(records),
                    record_set.skipped)
    return replace(record_set, records=records)


def _unpredictable_reason(record: RunRecord, why: str) -> str:
    """A skipped record's reason where the model cannot predict it, naming the run as the
    reader's reasons do ('run ID (entry N): ...'), for validate and calibrate alike."""
    return f"run {record.id!r}: cannot be predicted: {why}"


def _without_unpredictable(runs: Path, record_set: RunRecordSet,
                           unpredictable: Sequence[tuple[str, str]],
                           excluded: Sequence[str] = ()) -> RunRecordSet:
    """``record_set`` less the records the model cannot predict (e.g. a precision their GPU
    lacks; ``unpredictable``: their ids and :func:`_unpredictable_reason`), each added to
    its skipped records with the reason, as `validate` lists them (a trial: one such record
    stopped `calibrate` with an error naming no record). ``excluded``: the --exclude ids,
    counted where no usable record is left."""
    if not unpredictable:
        return record_set
    left_out = {run_id for run_id, _ in unpredictable}
    records = tuple(r for r in record_set.records if r.id not in left_out)
    skipped = (*record_set.skipped, *unpredictable)
    _require_usable(runs, frozenset(excluded), set(excluded), len(records), skipped)
    return replace(record_set, records=records, skipped=skipped)


MAX_SKIPPED_IN_ERROR = 3  # skipped records whose reasons a 'no usable run record' error gives


def _require_usable(runs: Path, excluded: set[str] | frozenset[str], found: set[str],
                    n_usable: int, skipped: Sequence[tuple[str, str]]) -> None:
    """Each --exclude id names a usable run (``found``) and some run is left to predict."""
    unknown = excluded - found
    if unknown:
        raise MosaicInputError(f"--exclude: no usable run with id {', '.join(sorted(unknown))} "
                               f"in {runs}")
    if not n_usable:  # each skipped record's reason, the first few (a trial fixed five
        # broken records one run at a time, seeing one reason a run)
        shown = "; ".join(reason for _, reason in skipped[:MAX_SKIPPED_IN_ERROR])
        more = len(skipped) - MAX_SKIPPED_IN_ERROR
        why = (f"; skipped: {shown}" + (f"; and {more} more" if more > 0 else "")
               if skipped else "")
        raise MosaicInputError(f"{runs}: no usable run record ({len(skipped)} "
                               f"skipped, {len(excluded)} excluded){why}")


StrictOption = Annotated[bool, typer.Option(
    "--strict", help="fail (exit 2) when any record is skipped or looks mis-entered (an MFU "
    "no GPU reaches, a unit slip), rather than using the rest (for CI over your own run "
    "files)")]


def _check_strict(runs: Path, flagged: Sequence[dict[str, str]], strict: bool,
                  what: str = "record(s) skipped") -> None:
    """--strict over the ``flagged`` entries (id, reason): skipped records, or runs scored
    as given though they look mis-entered (``what``; a trial's 1195% MFU and a 700x step
    time passed --strict when it failed only on skipped records)."""
    if strict and flagged:
        raise MosaicInputError(f"{runs}: --strict: {len(flagged)} {what}, the first "
                               f"{flagged[0]['id']}: {flagged[0]['reason']}")


def _echo_skipped(skipped: Sequence[dict[str, str]], heading: str, err: bool = False) -> None:
    """The skipped records and why, the first SKIPPED_SHOWN of them."""
    if not skipped:
        return
    typer.echo(f"{heading}:", err=err)
    for entry in skipped[:SKIPPED_SHOWN]:
        typer.echo(f"  {entry['id']}: {entry['reason']}", err=err)
    if len(skipped) > SKIPPED_SHOWN:
        typer.echo(f"  ... and {len(skipped) - SKIPPED_SHOWN} more (--json lists each with its "
                   "reason)", err=err)


def _print_aggregate(title: str, stats: dict[str, Any], n_skipped: int) -> None:
    print_key_value_table(title, accuracy_rows(stats, n_skipped))


# Calibration constants below this print as ~0: the chi terms are fractions of a step
# (0.01 and up when they matter) and the host times are tens of microseconds (dispatch gap
# 15-27 us), so a smaller value is the optimiser's residue at a bound of zero.
NEGLIGIBLE_CONSTANT = 1e-6


def constant_rows(name: str, value: Any) -> list[tuple[str, str]]:
    """One row per value: a dict-valued constant (per stack, per GPU, ...) gives a row per
    key, ``stack_overhead[torchtitan]``, so the table stays as narrow as its longest value."""
    if isinstance(value, dict):
        return [row for key, item in value.items() for row in constant_rows(f"{name}[{key}]", item)]
    if isinstance(value, float) and 0 < abs(value) < NEGLIGIBLE_CONSTANT:
        # an optimiser's residue at a bound of zero: 1.3e-12 -> 2.6e-11 read as a 20x move
        return [(name, "~0")]
    return [(name, f"{value:.6g}" if isinstance(value, float) else str(value))]


def validate(
    runs: Annotated[Path, typer.Argument(help="run records (published_runs.yaml schema)")],
    calibration: CalibrationOption = None,
    exclude: ValidateExcludeOption = None,
    json_output: JsonFlag = False,
    html: HtmlOption = None,
    catalog: CatalogFileOption = None,
    strict: StrictOption = False,
) -> None:
    """Predict each recorded run and compare with its measured tokens/s (and memory)."""
    check_html(html, runs, calibration, catalog)
    apply_catalog(catalog)
    reader = RunRecordReader(runs)  # the file's own problems first, as before any run
    exclusions = _Exclusions(frozenset(_excluded_ids(exclude)))
    try:
        model_calibration = load_calibration(calibration)
    except MosaicInputError:
        _check_usable(reader, exclusions, runs, sum(map(exclusions.keep, reader)))
        raise  # the runs were fine
    envelope = EnvelopeTally(model_calibration)
    summary = _predict_streamed(reader, exclusions, model_calibration, json_output, envelope)
    _check_usable(reader, exclusions, runs, len(summary))
    skipped = [{"id": run_id, "reason": reason} for run_id, reason in reader.skipped]
    _check_strict(runs, skipped, strict)
    excluded = sorted(exclusions.ids)
    # runs the profile was fitted on, or that values it kept from its base were fitted on,
    # score its fit, not the model (a trial quoted 10.4% for a profile fitted on the same runs)
    coverage = model_calibration.coverage
    fitted_ids = frozenset(() if coverage is None else coverage.fitted_runs)
    # coverage.inherited_runs: fitted on by the profile it kept values from, not by it
    inherited_ids = frozenset(() if coverage is None else coverage.inherited_runs or ()
                              ) - fitted_ids
    aggregate = summary.aggregate(fitted_ids | inherited_ids)
    _check_strict(runs, aggregate["implausible_measurements"], strict,
                  "run(s) look mis-entered")
    # which profile and hardware catalog scored the runs (a trial could not tell from the
    # JSON or the page)
    inputs = {"calibration": model_calibration.name,
              "outside_calibration_envelope": envelope.to_document(),
              **({"catalog": [str(path) for path in active_catalog_paths()]}
                 if active_catalog_paths() else {})}
    if html is not None:  # the page holds every run: built from the rows in one piece
        write_html({"runs": list(summary.rows()), "aggregate": aggregate,
                    "skipped": skipped, "excluded": excluded, **inputs}, html, "validate")
    if json_output:
        _print_json_streamed(summary, {"aggregate": aggregate, "skipped": skipped,
                                       "excluded": excluded, **inputs})
        return
    print_table_streamed(
        console,
        "Predicted vs measured tokens/s per GPU",
        ["run", "predicted", "measured", "error", "mem GiB", "measured GiB"],
        lambda: map(_table_row, summary.rows()),
    )
    _print_aggregate("Accuracy", aggregate, len(skipped))
    # a warning on stderr, as calibrate's: one row fewer moves the MAPE (a trial)
    _echo_skipped(skipped, f"warning: {len(skipped)} record(s) skipped, not scored "
                           "(--strict fails on them)", err=True)
    if excluded:
        typer.echo(f"{len(excluded)} run(s) excluded on request: {', '.join(excluded)}")
    _echo_not_scored(aggregate["throughput_not_scored"])
    envelope_note = envelope.note()
    if envelope_note is not None:
        typer.echo(envelope_note, err=True)
    _echo_implausible(aggregate["implausible_measurements"],
                      "scored as given, and --strict fails on them")
    _echo_stated_inconsistent(aggregate["stated_inconsistent"])
    _echo_unrecognised_software(aggregate["unrecognised_software"])
    _echo_assumptions(assumption_counts(summary.rows()))
    if aggregate["in_sample_runs"]:
        fitted_by = (f"that calibration {model_calibration.name!r}, or the profile it kept "
                     "values from," if inherited_ids.intersection(summary.ids)
                     else f"calibration {model_calibration.name!r}")
        typer.echo(f"note: {aggregate['in_sample_runs']} of these runs are runs "
                   f"{fitted_by} was fitted on: their errors are in-sample, "
                   "not a test of the model (calibrate's cross-validation gives held-out "
                   "ones)", err=True)


def _echo_assumptions(counts: list[dict[str, Any]]) -> None:
    """What the model assumed or approximated for the runs, the most common first."""
    if not counts:
        return
    typer.echo(f"Assumptions made for the runs ({len(counts)} distinct; --json lists "
               "each run's):")
    for entry in counts[:SKIPPED_SHOWN]:
        runs = entry["ids"][0] if entry["runs"] == 1 else f"{entry['runs']} runs"
        typer.echo(f"  [{runs}] {entry['assumption']}")
    if len(counts) > SKIPPED_SHOWN:
        typer.echo(f"  ... and {len(counts) - SKIPPED_SHOWN} more")


def _echo_unrecognised_software(unrecognised: list[dict[str, str]]) -> None:
    """One note naming the records whose ``software`` names no known stack: they are costed
    on the generic stack's defaults, which a typo ('Megatorn-LM') should not do silently."""
    if unrecognised:
        shown = _first_shown([f"{row['id']} ({row['software']!r})" for row in unrecognised])
        typer.echo(f"note: {len(unrecognised)} record(s) name software no known stack is "
                   f"recognised in, so they are costed on the generic 'other' stack; state "
                   f"`stack:` (`mosaic stacks list`) where one applies: {shown}", err=True)


def _first_shown(items: list[str]) -> str:
    """'a, b, c and 4 more': the first SKIPPED_SHOWN items of a note's list."""
    more = len(items) - SKIPPED_SHOWN
    return ", ".join(items[:SKIPPED_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _echo_stated_inconsistent(disagreeing: list[dict[str, str]]) -> None:
    """One note naming the records that declare their tokens/s and step time disagree
    (``measured.consistent: false``): scored on the tokens/s, which a reader should know."""
    if disagreeing:
        shown = _first_shown([row["id"] for row in disagreeing])
        typer.echo(f"note: {len(disagreeing)} record(s) state measured.consistent: false; "
                   f"each is scored on its tokens/s, with the step time that implies "
                   f"(`mosaic perf RUNS#ID` shows the gap): {shown}", err=True)


def _echo_implausible(implausible: list[dict[str, str]], treatment: str = "scored as given"
                      ) -> None:
    """A warning per run whose measurement looks mis-entered (the first ten; --json has all):
    `validate` scores them as given, so one unit slip can dominate the MAPE above;
    `calibrate` leaves those with an implausible throughput out of the fit."""
    if not implausible:
        return
    typer.echo(f"warning: {len(implausible)} run(s) look mis-entered, {treatment} (fix "
               "the record or --exclude it):", err=True)
    for entry in implausible[:SKIPPED_SHOWN]:
        typer.echo(f"  {entry['id']}: {entry['reason']}", err=True)
    if len(implausible) > SKIPPED_SHOWN:
        typer.echo(f"  ... and {len(implausible) - SKIPPED_SHOWN} more (--json lists each)",
                   err=True)


def _echo_not_scored(not_scored: list[dict[str, str]]) -> None:
    """One line naming the runs left out of throughput figures (--json has each reason)."""
    if not_scored:
        typer.echo(f"{len(not_scored)} run(s) predicted but not scored for tokens/s (hardware "
                   f"not as catalogued, or a source that contradicts itself about the tokens "
                   f"or the layout of a step; their errors are in parentheses, --json gives "
                   f"each reason): {', '.join(row['id'] for row in not_scored)}")


@dataclass
class _Exclusions:
    """The --exclude ids and those of them that named a usable run."""

    ids: frozenset[str]
    found: set[str] = field(default_factory=set)

    def keep(self, record: RunRecord) -> bool:
        if record.id in self.ids:
            self.found.add(record.id)
            return False
        return True


def _predict_streamed(reader: RunRecordReader, exclusions: _Exclusions,
                      calibration: Calibration, json_output: bool,
                      envelope: EnvelopeTally) -> ValidationSummary:
    """Stream the file's usable, not excluded records (with their documented settings)
    through the model in batches, keeping only each run's summary numbers and ``envelope``'s
    count of runs outside the calibration's envelope."""
    summary = ValidationSummary()
    records = map(with_record_settings, filter(exclusions.keep, reader))
    with progress_reporter(json_output) as bar:
        progress = bar("run records read")
        reported = 0
        def unpredictable(record: RunRecord, why: str) -> None:  # listed with the skipped
            reader.skipped.append((record.id, _unpredictable_reason(record, why)))

        for predictions in predict_in_batches(records, calibration,
                                              unpredictable=unpredictable):
            summary.extend(predictions)
            for prediction in predictions:
                envelope.add(prediction.record)
            reported = reader.n_read
            progress(reported, reader.n_entries)
        if reported < reader.n_entries:  # entries after the last batch were all left out
            progress(reader.n_entries, reader.n_entries)
    warn_deprecated(reader.deprecated, str(reader.path))
    return summary


def _check_usable(reader: RunRecordReader, exclusions: _Exclusions, runs: Path,
                  n_usable: int) -> None:
    """:func:`_require_usable` once the streamed records are read."""
    _require_usable(runs, exclusions.ids, exclusions.found, n_usable, reader.skipped)


def _error_cell(r: dict[str, Any]) -> str:
    """The tokens/s error, in parentheses for a run whose throughput is not scored."""
    if r["error"] is None:
        return "n/a"
    return f"{r['error']:+.1%}" if r["throughput_scored"] else f"({r['error']:+.1%})"


def _table_row(r: dict[str, Any]) -> list[str]:
    return [
        r["id"],
        f"{r['predicted_tokens_per_s_per_gpu']:,.0f}",
        ("OOM" if r["oom"] else "trained" if r["measured_tokens_per_s_per_gpu"] is None
         else f"{r['measured_tokens_per_s_per_gpu']:,.0f}"),  # trained: measured.trained
        _error_cell(r),
        f"{r['predicted_memory_gib']:.1f}",
        "-" if r["measured_memory_gib"] is None else f"{r['measured_memory_gib']:.1f}",
    ]


_ROWS_MARK = "\x00runs\x00"


def _print_json_streamed(summary: ValidationSummary, rest: dict[str, Any],
                         chunk_rows: int = 1000) -> None:
    """What ``print_json({"runs": rows, **rest})`` prints, byte for byte, writing the rows a
    chunk at a time instead of building the whole text (each row's JSON indented as
    json.dumps nests it: no string holds a raw newline)."""
    document = json.dumps(to_jsonable({"runs": [_ROWS_MARK], **rest}), indent=2)
    head, tail = document.split(f"    {json.dumps(_ROWS_MARK)}")
    typer.echo(head, nl=False)
    lines: list[str] = []
    for index, row in enumerate(summary.rows()):
        text = json.dumps(to_jsonable(row), indent=2).replace("\n", "\n    ")
        lines.append(("    " if index == 0 else ",\n    ") + text)
        if len(lines) == chunk_rows:
            typer.echo("".join(lines), nl=False)
            lines = []
    typer.echo("".join(lines) + tail)


def calibrate(
    out: Annotated[Path, typer.Option(help="where to write the calibration YAML")],
    runs: Annotated[Path | None, typer.Argument(
        help="run records (published_runs.yaml schema); omit with --microbench")] = None,
    cv: Annotated[str, typer.Option(
        help="cross-validation: source (the id's prefix), group (model and GPU), run (leave "
             "one run out; also used when the grouping puts every run in one group) or "
             "none")] = "source",
    base: Annotated[str | None, typer.Option(
        help="calibration (profile name or file) to start from; its fitted_constants "
             "are refitted")] = None,
    exclude: ExcludeOption = None,
    name: Annotated[str | None, typer.Option(
        help="name written into the calibration, which outputs show (default: the --out "
             "file's stem; with --microbench, microbench-DEVICE)")] = None,
    json_output: JsonFlag = False,
    microbench: Annotated[Path | None, typer.Option(
        help="fit the kernel/collective constants to a `mosaic bench` directory instead")
    ] = None,
    device: Annotated[str | None, typer.Option(
        help="with --microbench: catalog device measured (default: from the metadata)")] = None,
    system: Annotated[str | None, typer.Option(
        help="with --microbench: catalog system whose links the collectives ran on")] = None,
    catalog: CatalogFileOption = None,
    fit: Annotated[str, typer.Option(
        "--fit", help="constants to fit: auto (the base's fitted_constants when there are at "
        f"least {MIN_RUNS_PER_PARAMETER} runs per free parameter, else the stack multiplier "
        "only), all (the base's), or comma-separated names from "
        f"{', '.join(FITTABLE_CONSTANTS)}")] = "auto",
    strict: StrictOption = False,
    fit_memory: Annotated[bool, typer.Option(
        "--fit-memory", help="also fit a memory scale to the runs' memory figures (your "
        "stack's measured over modelled allocator memory; docs/memory.md, \"Your own "
        "runs\"); without it the memory model stays as derived")] = False,
) -> None:
    """Fit the model's free constants (χ_sys terms, stack and kernel factors) to runs."""
    apply_catalog(catalog)
    if microbench is not None and runs is not None:  # one fit per command (a trial: RUNS
        # was ignored without a word)
        raise MosaicInputError(f"give RUNS or --microbench, not both: fit the kernel tables "
                               f"first (`mosaic calibrate --microbench {microbench} --out "
                               f"kernels.yaml`), then the runs over them (`mosaic calibrate "
                               f"{runs} --base kernels.yaml --out FILE`)")
    if microbench is not None and fit_memory:
        raise MosaicInputError("--fit-memory fits run records' memory figures; kernel tables "
                               "(--microbench) have none: fit the tables, then `mosaic "
                               "calibrate RUNS --base kernels.yaml --fit-memory`")
    if microbench is not None:  # measured kernel tables instead of run records
        # before the fit, not after it; a --base file is read too (a profile name is not),
        # and so is every file of the bench folder (a trial's --out DIR/metadata.json
        # replaced the bench's metadata with the calibration, and the folder was unreadable)
        from mosaic.bench.families import FAMILIES
        from mosaic.bench.store import METADATA_FILE
        from mosaic.cli.bench_cmd import calibrate_microbench

        tables = [microbench / METADATA_FILE, *(microbench / "measured").glob("*"),
                  *(microbench / f"{family}.{suffix}" for family in FAMILIES
                    for suffix in ("parquet", "csv"))]
        check_output_file(out, "--out", inputs=[*tables, *([] if base is None else [base])])
        calibrate_microbench(microbench, out, base, name, device, system, json_output)
        return
    if runs is None:
        raise MosaicInputError("give RUNS (run records) or --microbench DIR")
    if cv not in CV_GROUPINGS:
        raise MosaicInputError(f"--cv {shown(cv)}: allowed values are {', '.join(CV_GROUPINGS)}")
    check_output_file(out, "--out", inputs=[runs, *([] if base is None else [base])])
    record_set = _load(runs, exclude)
    start = load_calibration(base)
    # each run predicted once: the fit's inputs, which runs cannot be predicted at all, and
    # the memory the memory-scale fit and the coverage read (evaluate.calibrate)
    unpredictable: list[tuple[str, str]] = []
    with progress_reporter(json_output) as bar:
        baselines, predictions = fit_predictions(
            record_set.records, start, bar("runs predicted"),
            unpredictable=lambda record, why: unpredictable.append(
                (record.id, _unpredictable_reason(record, why))))
    record_set = _without_unpredictable(runs, record_set, unpredictable,
                                        _excluded_ids(exclude))
    # records the file holds that cannot be read are not fitted, and said so (a trial: a
    # record with a misspelt field left the fit without a word, where validate named it)
    skipped = [{"id": run_id, "reason": reason} for run_id, reason in record_set.skipped]
    _check_strict(runs, skipped, strict)
    excluded = list(_excluded_ids(exclude))
    if not baselines.ids:
        raise MosaicInputError("no run with a measured step time to calibrate on")
    implausible = implausible_measurements(baselines, record_set.records)
    baselines, implausible_left_out = without_implausible_throughput(baselines)
    constants = chosen_constants(fit, baselines, start)
    left_out = ", ".join([*(f"excluding {run_id}" for run_id in excluded),
                          *(f"leaving out {run_id} (implausible)"
                            for run_id in implausible_left_out),
                          *([f"{len(skipped)} unreadable record(s) skipped"] if skipped
                            else [])])
    provenance = (
        f"fitted by mosaic calibrate on {len(baselines.ids)} runs of {runs.name}"
        f"{', ' + left_out if left_out else ''} (robust least squares on log step time"
        f"{'' if constants == start.fitted_constants else '; only ' + ', '.join(constants)})"
    )
    fitted = replace(fit_calibration(baselines, replace(start, fitted_constants=constants),
                                     name=name or out.stem, provenance=provenance,
                                     keep_unseen=True),
                     fitted_constants=start.fitted_constants)  # a later refit may fit all
    fitted, memory_fit = with_memory_scale(fitted, record_set.records, fit_memory,
                                           predictions)
    records = {r.id: r for r in record_set.records}
    not_scored = [{"id": r.id, "reason": r.throughput_not_scored}
                  for r in record_set.records if r.throughput_not_scored]
    report: dict[str, Any] = {"calibration": fitted.to_document(), "n_runs": len(baselines.ids),
                              # the free constants some run depends on
                              "n_fitted_constants": len(constants) - sum(
                                  name in constants for name in fitted.not_informed),
                              "at_bounds": list(fitted.at_bounds),
                              "memory_scale": None if memory_fit is None else {
                                  **memory_fit.to_dict(), "applied": fit_memory},
                              "not_informed": list(fitted.not_informed),
                              "fitted": list(constants),
                              "auto_reduced": fit == "auto" and constants != start.fitted_constants,
                              "left_out_implausible": list(implausible_left_out),
                              "excluded": excluded, "skipped": skipped,
                              "throughput_not_scored": not_scored,
                              "implausible_measurements": [
                                  {"id": run_id, "reason": reason}
                                  for run_id, reason in implausible.items()]}
    # the fitted runs under the refit and under the start as it was, in-sample: a refit that
    # predicts its own runs worse than its start did is said (a trial's 5 runs: 11.3% ->
    # 12.6%, its one torchtitan run +23.6% -> +27.6%; tests/evaluate/test_calibrate.py)
    moe = np.array([records[i].workload.geometry.is_moe for i in baselines.ids])
    in_sample = {"fitted": in_sample_errors(baselines, fitted),
                 "starting": in_sample_errors(baselines, start)}
    report["in_sample"] = {
        side: {"name": calibration.name, **in_sample[side].summary(moe)}
        for side, calibration in (("fitted", fitted), ("starting", start))}
    cv_result = None
    if cv != "none" and len(baselines.ids) < 2:
        # one run leaves nothing to hold out: fit it and say so (a trial was told to rename
        # its runs by source, which cannot help one run)
        typer.echo(f"note: one run cannot be cross-validated (nothing is left to fit when "
                   f"it is held out): fitted without --cv {cv}, as --cv none does", err=True)
        cv = "none"
    if cv != "none":
        cv, groups = _cv_groups(cv, [records[i] for i in baselines.ids])
        with progress_reporter(json_output) as bar:
            cv_result = leave_one_group_out(baselines, groups,
                                            replace(start, fitted_constants=constants),
                                            bar(f"leave-one-{cv}-out refits"))
        report["cross_validation"] = {
            "grouping": cv, **cv_result.summary(moe),
            # which folds kept the base's values for what their runs lack, as the written
            # profile does: those holding out none of the base's fitted runs (evaluate.calibrate)
            "base_fitted_runs_recorded": base_fitted_runs(start) is not None,
            # and the runs of the values it kept from its own base (coverage.inherited_runs)
            "base_inherited_runs_recorded": base_inherited_runs(start) is not None,
            "base_values_kept_for": list(cv_result.base_kept_groups)}
        # the same runs under the starting calibration as it is: whether refitting helped
        as_started = replace(in_sample["starting"], groups=tuple(groups))
        report["starting_calibration"] = {"name": start.name, **as_started.summary(moe)}
    coverage = build_coverage(
        record_set.records, baselines.ids, cv_result, fitted,
        f"{len(baselines.ids)} runs of {runs.name}"
        + ("" if cv_result is None else f", tokens/s ratios held out leave-one-{cv}-out"),
        # the runs' memory as predicted, unless a fitted memory scale moved it
        predictions=predictions if fitted.memory_scale == start.memory_scale else None)
    # the runs of the values kept from the start (keep_unseen): a later cross-validation
    # over this profile must not call a fold holding out those runs independent of it
    coverage = with_inherited_runs(coverage, start)
    fitted = replace(fitted, coverage=with_borrowed_residuals(coverage, start,
                                                              fitted.memory_scale))
    report["tokens_per_s_residuals_borrowed_from"] = fitted.coverage.tokens_per_s_ratio_from
    report["memory_residuals_borrowed_from"] = fitted.coverage.memory_ratio_from
    report["memory_residuals_spread_only"] = fitted.coverage.memory_ratio_spread_only
    report["cross_validated"] = cv_result is not None
    report["calibration"] = fitted.to_document()
    if cv_result is not None:
        fitted_doc = fitted.to_document()
        held_out = report["cross_validation"]
        # the MoE figure only where MoE runs were held out (a fit on dense runs alone
        # stopped here with an internal error)
        moe_part = ("" if held_out["moe_mape"] is None
                    else f" (MoE {held_out['moe_mape']:.1%})")
        fitted_doc["provenance"] += (
            f"; leave-one-{cv}-out cross-validated tokens/s MAPE {held_out['mape']:.1%}"
            f"{moe_part}")
        report["calibration"] = fitted_doc
    if report["calibration"].get("coverage") is not None:  # what the next command will load
        parse_coverage(report["calibration"]["coverage"], f"{out} (as fitted)")
    write_text_atomic(out, yaml.safe_dump(report["calibration"], sort_keys=False))
    if json_output:
        print_json(report)
        _echo_memory_scale_notes(report["memory_scale"], fit_memory)
        _echo_skipped(skipped, _SKIPPED_HEADING.format(len(skipped)), err=True)
        _echo_fit_size(report)
        _echo_cv_base(report, start.name)
        _echo_implausible(report["implausible_measurements"], _CALIBRATE_TREATMENT)
        return
    constants = report["calibration"]["constants"]
    started = dict(
        row for name, entry in start.to_document()["constants"].items()
        for row in constant_rows(name, entry["value"]))
    print_key_value_table(
        f"Calibration written to {out} (starting values from '{start.name}')",
        [(key, value if started.get(key, value) == value  # tables print plain text
          else f"{started[key]} -> {value}")
         for name, entry in constants.items()
         for key, value in constant_rows(name, entry["value"])],
    )
    fitted_in, started_in = report["in_sample"]["fitted"], report["in_sample"]["starting"]
    in_sample_rows = [
        ("MAPE all / MoE of the refit on these runs (in-sample)",
         f"{percent(fitted_in['mape'])} / {percent(fitted_in['moe_mape'])}"),
        (f"MAPE all / MoE under '{started_in['name']}' as it was (not refitted)",
         f"{percent(started_in['mape'])} / {percent(started_in['moe_mape'])}")]
    if "cross_validation" in report:
        c = report["cross_validation"]
        print_key_value_table(
            f"Leave-one-{cv}-out cross-validation (tokens/s)",
            [
                ("MAPE all", percent(c["mape"])),
                ("MAPE MoE", percent(c["moe_mape"])),
                ("MAPE dense", percent(c["dense_mape"])),
                (
                    "median / max |error|",
                    f"{percent(c['median_abs_error'])} / {percent(c['max_abs_error'])}",
                ),
                *in_sample_rows,
            ],
        )
    else:
        print_key_value_table("Tokens/s error on the fitted runs", in_sample_rows)
    _print_memory_scale(report["memory_scale"])
    _echo_memory_scale_notes(report["memory_scale"], fit_memory)
    _echo_skipped(skipped, _SKIPPED_HEADING.format(len(skipped)), err=True)
    _echo_fit_size(report)
    _echo_cv_base(report, start.name)
    if excluded:
        typer.echo(f"{len(excluded)} run(s) excluded on request: {', '.join(excluded)}")
    _echo_not_scored(not_scored)
    _echo_implausible(report["implausible_measurements"], _CALIBRATE_TREATMENT)


def _print_memory_scale(fit: dict[str, Any] | None) -> None:
    """The memory scale the runs' memory figures give, and what it does to them; without
    --fit-memory, the same figures and how to apply it."""
    if fit is None:
        return
    held_out = fit["mape_held_out"]
    start = fit["start_scale"]
    over = fit["trained_over_headroom"]
    rows = [("scale (measured / modelled allocator)",
             f"{fit['scale']:.4g}" + (" (on its bound)" if fit["at_bound"] else "")),
            ("runs reporting memory", str(fit["n_runs"])),
            *([("left out: memory above the device",
                ", ".join(fit["left_out_implausible"]))] if fit["left_out_implausible"] else []),
            (f"memory MAPE at the starting scale {start:.4g} / fitted",
             f"{percent(fit['mape_before'])} / {percent(fit['mape_after'])}"
             + ("" if held_out is None else f" ({percent(held_out)} held out)")),
            ("trained runs predicted above device memory",
             f"{fit['trained_over_device_before']} -> {fit['trained_over_device_after']}"),
            ("trained runs over the planning headroom",
             f"{fit['trained_over_headroom_before']} -> {len(over)}"
             + (f": {', '.join(over)}" if over else "")),
            ("recorded OOMs predicted to fit",
             f"{fit['ooms_predicted_to_fit_before']} -> {fit['ooms_predicted_to_fit_after']}")]
    title = "Memory scale"
    if not fit["applied"]:
        title += (f" (not refitted: the starting profile's scale {start:.4g} is kept; "
                  "--fit-memory refits it)" if start != 1.0 else
                  " (not applied: add --fit-memory to write it)")
    print_key_value_table(title, rows)


def _echo_memory_scale_notes(fit: dict[str, Any] | None, requested: bool) -> None:
    """What a memory scale fitted on few runs, on a bound, on none, or refusing layouts the
    runs trained deserves (stderr)."""
    if fit is None:
        if requested:
            typer.echo("note: no run reports a usable memory figure (measured.memory_gib, "
                       "within the device's memory): --fit-memory fitted nothing, the memory "
                       "model stays as derived", err=True)
        return
    if not fit["applied"]:
        return
    if fit["left_out_implausible"]:
        typer.echo(f"warning: {len(fit['left_out_implausible'])} memory figure(s) above the "
                   "device left out of the memory scale (`mosaic validate` names them)",
                   err=True)
    if fit["n_runs"] < MIN_MEMORY_SCALE_RUNS:
        typer.echo(f"warning: the memory scale rests on {fit['n_runs']} run(s) (no held-out "
                   f"check below {MIN_MEMORY_SCALE_RUNS}): a layout unlike them may allocate "
                   "differently; add runs or leave out --fit-memory", err=True)
    held_out = fit.get("mape_held_out")
    in_sample_worse = fit["mape_after"] > fit["mape_before"]
    held_out_worse = held_out is not None and held_out > fit["mape_before"]
    verdicts_worse = fit["trained_over_device_after"] > fit["trained_over_device_before"]
    if in_sample_worse or held_out_worse or verdicts_worse:
        # as the tokens/s refit warns when it predicts worse (a trial's scale took the
        # in-sample memory error 24.1% -> 25.3%, held-out 38.5%, and was written unsaid);
        # what got worse is said first (a trial read "worse" beside an error 27.9% -> 0.0%,
        # where a trained run had moved above its device; another beside 13.6% -> 9.0%,
        # where only the held-out error, 18.5%, was worse)
        what = ("predicts these runs' memory worse than the model as derived"
                if in_sample_worse
                else "predicts held-out runs' memory worse than the model as derived"
                if held_out_worse
                else "puts more trained runs above their device than the model as derived")
        typer.echo(f"warning: the memory scale {fit['scale']:.3g} {what} (MAPE "
                   f"{fit['mape_before']:.1%} -> {fit['mape_after']:.1%}"
                   + (f", held out {held_out:.1%}" if held_out is not None else "")
                   + f"; trained runs predicted above their device "
                   f"{fit['trained_over_device_before']} -> {fit['trained_over_device_after']}"
                   "): leave out --fit-memory", err=True)
    if fit["at_bound"]:
        typer.echo("warning: the memory scale ended on its bound (0.5 or 2): check what the "
                   "records' memory_gib measures (measured.memory_measure) before trusting it",
                   err=True)
    if fit["trained_over_headroom"]:
        fraction = fit["fraction_admitting_trained"]
        typer.echo(f"warning: at this scale {len(fit['trained_over_headroom'])} run(s) that "
                   "trained are predicted above the planning headroom, so `layouts` and "
                   "`plan` would refuse their layouts: a scale fitted to reserved-memory "
                   "figures already holds the allocator's cache the headroom is kept for"
                   + (f"; plan with --memory-fraction {fraction:g} (layouts and perf: --set "
                      f"hardware.usable_memory_fraction={fraction:g}), the least that admits "
                      "them" if fraction is not None else ""), err=True)


_CALIBRATE_TREATMENT = ("those with an implausible throughput left out of the fit, those with "
                        "an implausible memory figure out of the memory scale")
_SKIPPED_HEADING = ("warning: {} record(s) skipped, not in the fit (`mosaic validate` names "
                    "the same; --strict fails on them)")


def _cv_groups(cv: str, records: Sequence[Any]) -> tuple[str, list[str]]:
    """(grouping used, one group label per run): the id's source prefix, the model and GPU,
    or the run itself; a grouping that leaves every run in one group (a team's own runs,
    all named ``acme-...`` or all on one model) falls back to leaving one run out, and
    says so on stderr."""
    if cv != "run":
        groups = [r.source_key if cv == "source" else r.group_key for r in records]
        if len(set(groups)) > 1 or len(records) < 2:
            _note_lopsided_groups(cv, groups)
            return cv, groups
        typer.echo(f"note: --cv {cv} puts every run in one group ({groups[0]!r}): "
                   "cross-validated leave-one-run-out instead", err=True)
    return "run", [r.id for r in records]


def _note_lopsided_groups(cv: str, groups: list[str]) -> None:
    """A group holding more than half of the runs leaves fewer than half to fit when it is
    held out: its held-out error measures a fit on the few others (a trial's 7 'acme' runs
    beside one 'bad' run were scored on a fit to that one, unsaid)."""
    counts = Counter(groups)
    largest, size = counts.most_common(1)[0]
    if 2 * size > len(groups):
        typer.echo(f"note: --cv {cv}: holding out {largest!r} ({size} of {len(groups)} runs) "
                   f"leaves {len(groups) - size} run(s) to fit, so its held-out error says "
                   "more about that small fit than the model; --cv run leaves one run out",
                   err=True)


def _echo_cv_base(report: dict[str, Any], base: str) -> None:
    """Where cross-validation folds did not keep the starting profile's values for what
    their training runs lack (the written profile keeps them), why (evaluate.calibrate.
    leave_one_group_out)."""
    cv = report.get("cross_validation")
    if cv is None:
        return
    dropped = len(cv["per_group_mape"]) - len(cv["base_values_kept_for"])
    if not cv["base_fitted_runs_recorded"]:
        typer.echo(f"note: '{base}' does not record the runs it was fitted on "
                   "(coverage.fitted_runs; profiles written by older versions): the "
                   "cross-validation treats it as possibly fitted on the held-out runs, so a "
                   "stack or routing regime a fold's runs lack gets the fold's own fit, not "
                   f"the value of '{base}' that the written profile keeps; the held-out error "
                   "may overstate the profile's", err=True)
    elif not cv["base_inherited_runs_recorded"]:
        typer.echo(f"note: '{base}' does not record the runs that the values it kept from "
                   "the profile it was refitted over were fitted on (coverage.inherited_runs; "
                   "profiles written by older versions): the cross-validation treats them as "
                   "possibly the held-out runs, so a stack or routing regime a fold's runs "
                   f"lack gets the fold's own fit, not the value of '{base}' that the written "
                   "profile keeps; the held-out error may overstate the profile's", err=True)
    elif dropped:
        typer.echo(f"note: '{base}' was fitted on runs of {dropped} held-out group(s) "
                   "(itself, or the profile it kept values from; coverage.fitted_runs, "
                   f"coverage.inherited_runs): those folds do not keep the values of "
                   f"'{base}' (that would score the runs in-sample), so a stack or routing "
                   "regime their runs lack gets the fold's own fit", err=True)


def _echo_fit_size(report: dict[str, Any]) -> None:
    """Warnings a small fit deserves: constants on their bounds, as many constants as runs,
    and held-out error above that of the calibration it started from."""
    if report["at_bounds"]:
        routing = any(label.startswith("routing_imbalance") for label in report["at_bounds"])
        typer.echo(f"warning: {len(report['at_bounds'])} fitted constant(s) ended on a bound: "
                   f"{', '.join(report['at_bounds'])} (the runs push them past their physical "
                   "range, docs/perf.md"
                   + ("; a routing factor on 1: the imbalance assumed for those runs' routers "
                      "is already more than they show, so state routing_imbalance in the "
                      "records" if routing else "") + ")", err=True)
    if report["not_informed"]:
        typer.echo(f"warning: no run depends on {', '.join(report['not_informed'])} (e.g. "
                   "chi_pp needs a pipeline across nodes, chi_a2a an all-to-all across "
                   "nodes): kept at the starting calibration's values, not fitted", err=True)
    if report["auto_reduced"]:
        typer.echo(f"note: {report['n_runs']} run(s) are too few for every constant (at least "
                   f"{MIN_RUNS_PER_PARAMETER} per free parameter): fitted "
                   f"{', '.join(report['fitted'])} only, the rest kept from the starting "
                   "calibration; --fit all fits every constant regardless", err=True)
    for what, borrowed, why in (
            ("tokens/s", report["tokens_per_s_residuals_borrowed_from"],
             f"too few held-out runs (at least {MIN_SCOPE_RUNS})"
             if report["cross_validated"] else "no held-out runs (--cv none)"),
            ("memory", report["memory_residuals_borrowed_from"],
             f"too few runs reporting memory (at least {MIN_SCOPE_RUNS})")):
        if borrowed is not None:
            spread = (f", {SPREAD_ONLY_TEXT}" if what == "memory"
                      and report["memory_residuals_spread_only"] else "")
            typer.echo(f"note: {why} for {what} intervals of this profile's own: it keeps "
                       f"the {what} residuals of profile {borrowed}{spread} (measured on "
                       "other runs), and every interval that uses them says so", err=True)
    runs, constants = report["n_runs"], report["n_fitted_constants"]
    if runs < 2 * constants:
        fewer = ("" if list(report["fitted"]) == ["stack_overhead"]
                 else ", or fit fewer (--fit stack_overhead)")
        typer.echo(f"warning: {constants} constant{'s' if constants != 1 else ''} fitted to "
                   f"{runs} run{'s' if runs != 1 else ''}: too few runs to "
                   f"pin them down; add runs{fewer}", err=True)
    fitted_in, started_in = report["in_sample"]["fitted"], report["in_sample"]["starting"]
    if f"{fitted_in['mape']:.1%}" != f"{started_in['mape']:.1%}" \
            and fitted_in["mape"] > started_in["mape"]:
        # a least-squares refit from a start can only do worse on its own runs where its
        # priors (each stack near the shared multiplier, STACK_PRIOR_LOG_SD) or its robust
        # loss outweigh them (evaluate.calibrate)
        typer.echo(f"warning: the refit predicts the runs it was fitted on worse "
                   f"({fitted_in['mape']:.1%} MAPE, in-sample) than '{started_in['name']}' "
                   f"as it was ({started_in['mape']:.1%}): its priors (each stack's "
                   "multiplier near the shared one) outweigh these runs; keep "
                   f"'{started_in['name']}', or add runs", err=True)
    held_out, started = (report.get("cross_validation") or {}).get("mape"), (
        report.get("starting_calibration") or {}).get("mape")
    # worse as printed (8.6% against 8.6% is no difference to warn of)
    if held_out is not None and started is not None and f"{held_out:.1%}" != f"{started:.1%}" \
            and held_out > started:
        typer.echo(f"warning: the refit predicts held-out runs worse ({held_out:.1%} MAPE) "
                   f"than '{report['starting_calibration']['name']}' as it was "
                   f"({started:.1%}, an in-sample figure if that profile was fitted on these "
                   "runs): keep that one, or add runs", err=True)


def register(app: typer.Typer) -> None:
    """Attach `mosaic validate` and `mosaic calibrate` to the root command."""
    app.command("validate")(guarded(validate))
    app.command("calibrate")(guarded(calibrate))
