"""`mosaic export`: a plan or a job as a Megatron, NeMo, torchtitan or MaxText launch config."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import CalibrationOption, SetOption, error_console, guarded
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.errors import MosaicInputError
from mosaic.export import (
    TARGETS,
    ExportSpec,
    check_target,
    export,
    launched_job_document,
    spec_from_job,
    spec_from_plan_document,
)
from mosaic.io_atomic import check_output_file, write_text_atomic
from mosaic.schema_validation import parse_json, read_text

DOES_NOT_FIT = "mosaic predicts this job does not fit"


def _plan_document(path: Path) -> dict[str, Any] | None:
    """The plan document in ``path`` when it holds one (told by content, any file name;
    ``is_plan_document``), else None. A ``.json`` file that is not JSON is an error."""
    from mosaic.export.spec import plan_candidate, split_plan_reference

    file, rank = split_plan_reference(path)  # PLAN.json#N: the rank-N candidate
    try:
        if not file.is_file():  # e.g. RUNS.yaml#ID
            return None
    except OSError:  # e.g. a name too long: the job loader says so in one line
        return None
    text = read_text(file)
    try:
        document = parse_json(text, str(file))
    except MosaicInputError:
        if file.suffix.lower() == ".json":
            raise
        return None  # a YAML job file or run record
    from mosaic.config.job_schema import is_plan_document

    if not is_plan_document(document):
        return None
    return document if rank is None else plan_candidate(document, rank, str(path))


def check_plan_layout(spec: ExportSpec, source: str) -> None:
    """A plan's pick (the optimum, or the candidate of ``PLAN.json#N``) through the job
    checks of `mosaic perf` (schema, divisibility, the cluster): a hand-edited plan with tp=3
    for 32 heads is refused as that job would be."""
    from mosaic.config.job_schema import job_from_document
    from mosaic.evaluate.job import check_job_layout
    from mosaic.export.spec import plan_pick_name

    pick = plan_pick_name(source)
    try:
        check_job_layout(job_from_document(dict(spec.job), f"{source}: {pick}"))
    except MosaicInputError as exc:
        text = str(exc)
        raise MosaicInputError(text if text.startswith(source) else
                               f"{source}: {pick}'s job: {text}") from None


def _catalog_hint(document: dict[str, Any]) -> str:
    """'; the plan was made with --catalog F: pass it again' where the plan's hardware
    catalog files are not the active ones (a trial's export failed on its own node type).
    Nothing where the envelope or its catalog list is not as ``mosaic plan`` writes them:
    the error it is appended to already says what is wrong (a hand-edited plan's envelope
    'abc' ended in an AttributeError here)."""
    from mosaic.hardware import active_catalog_paths

    envelope = document.get("envelope")
    listed = envelope.get("catalog") if isinstance(envelope, dict) else None
    planned = [p for p in listed if isinstance(p, str)] if isinstance(listed, list) else []
    active = {Path(p).resolve() for p in active_catalog_paths()}  # ./hw.yaml is hw.yaml
    missing = [str(p) for p in planned if Path(p).resolve() not in active]
    return (f"; the plan was made with --catalog {' --catalog '.join(missing)}: pass it again"
            if missing else "")


def load_export_spec(path: Path, overrides: list[str], model: Path | None) -> ExportSpec:
    """A job YAML or run record (with ``--set`` overrides) or a ``mosaic plan --json``
    document, told apart by content."""
    return load_export_spec_and_fit(path, overrides, model)[0]


def load_export_spec_and_fit(path: Path, overrides: list[str], model: Path | None,
                             calibration: str | None = None
                             ) -> tuple[ExportSpec, str | None]:
    """:func:`load_export_spec`, and for a job predicted not to fit its GPUs' usable memory
    the verdict to warn with (None otherwise; a plan's optimum fits by construction). The
    spec carries the verdict, or why memory was not checked, as a header warning."""
    document = _plan_document(path)
    if document is not None:
        if overrides or model:
            raise MosaicInputError("--set and --model apply to job files, not plan JSON "
                                   f"(write its job with `mosaic export {path} --to yaml`)")
        if calibration is not None:  # the pick is the plan's, under the plan's profile
            stated = document.get("calibration")
            planned = stated.get("name", "?") if isinstance(stated, dict) else "?"
            raise MosaicInputError(
                f"--calibration applies to job files: {path} was planned under profile "
                f"{planned!r}, and its pick is that plan's (plan again with --calibration "
                f"{calibration}, or export the pick's job with --to yaml and check it with "
                f"`mosaic perf JOB --calibration {calibration}`)")
        try:
            spec = spec_from_plan_document(document, str(path))
            check_plan_layout(spec, str(path))
        except MosaicInputError as exc:  # a node type of the planner's own catalog files
            raise MosaicInputError(f"{exc}{_catalog_hint(document)}") from None
        return spec, None
    from mosaic.evaluate.job import check_job_layout, load_job_spec, predict_job
    from mosaic.perf.calibration import load_calibration
    from mosaic.perf.machine import check_dispatcher_runs, check_precision_on_device

    # a profile asked for by name is loaded before anything is costed: a bad one is an
    # error, as in every other command (a trial got a note and exit 0)
    profile = load_calibration(calibration)
    job = load_job_spec(path, overrides, model_block(model))
    cluster = check_job_layout(job)  # the layout checks of `mosaic perf`, same errors
    # a precision or dispatcher the GPUs cannot run is refused as perf refuses it, not
    # exported with a note (a trial: MXFP8 on H100 was written out; TE's
    # check_mxfp8_support fails there; a review: HybridEP on A100)
    check_precision_on_device(cluster.system.device, job.workload.precision,
                              job.workload.fp8_recipe)
    check_dispatcher_runs(cluster.system.device.name, job.workload.stack,
                          job.workload.dispatcher, job.workload.geometry.moe is not None)
    try:  # and its memory verdict, where the model can cost the job
        # (under the calibration the user plans with: a fitted memory scale moves the
        # verdict, a review)
        result = predict_job(job, profile, cluster)
    except MosaicInputError as exc:  # e.g. offload on a GPU whose host link is not stated
        error_console.print(f"note: memory not checked: {exc}", markup=False, highlight=False,
                            soft_wrap=True)
        return replace(spec_from_job(job, str(path)),
                       warnings=(f"memory not checked: {exc}",)), None
    # the header's `mosaic perf` line names the profile the verdict came from
    spec = replace(spec_from_job(job, str(path)), calibration=calibration)
    if result.prediction.feasible[0]:
        return spec, None
    verdict = result.memory_fit
    return replace(spec, warnings=(f"{DOES_NOT_FIT}: {verdict} per GPU",)), verdict


def launched_stack_note(spec: ExportSpec, target: str) -> tuple[str | None, bool]:
    """(A header note for a ``target`` file that runs another stack than the job was costed
    for: the job costed again under that stack, or why it cannot be; whether it is then
    predicted not to fit). A trial exported a Megatron-Core plan to torchtitan, which mosaic
    predicts 21% slower and over the usable memory there, without a word."""
    document = launched_job_document(spec, target)
    if document is None:
        return None, False
    from mosaic.config.job_schema import job_from_document
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.calibration import load_calibration

    stack = document["performance"]["stack"]
    sharding = document.get("parallelism", {}).get("sharding", spec.sharding)
    written = f" (sharding {sharding}, as the file writes it)" if sharding != spec.sharding else ""
    head = (f"mosaic costed this job for stack {spec.stack}; a {target} file runs "
            f"{stack}{written}")
    how = (f"`mosaic perf JOB --set performance.stack={stack}`, or `mosaic plan --stack "
           f"{stack}` for the layout {stack} runs best")
    try:
        job = job_from_document(document, f"{spec.source or 'the job'} as {stack}")
        result = predict_job(job, load_calibration(spec.calibration))
    except MosaicInputError as exc:
        return f"{head}, under which mosaic cannot cost it ({exc}); {how}", False
    p = result.prediction
    return (f"{head}: under it mosaic predicts {p.step_time_s[0]:.4g} s per step, "
            f"{p.mfu[0]:.1%} MFU; per GPU {result.memory_fit} ({how})"), not bool(p.feasible[0])


def export_command(
    source: Annotated[Path, typer.Argument(
        help="job YAML, a run record as RUNS.yaml#ID, or the JSON of `mosaic plan "
             "--json` under any file name (its optimum is exported)")],
    to: Annotated[str, typer.Option("--to", "--target", help=f"target: {', '.join(TARGETS)}")],
    out: Annotated[Path | None, typer.Option("--out", help="write here instead of stdout")
                   ] = None,
    set_: SetOption = None,
    model: ModelOption = None,
    catalog: CatalogFileOption = None,
    calibration: CalibrationOption = None,
) -> None:
    """Write a Megatron, NeMo, torchtitan or MaxText launch config for a job or a plan.

    With --to yaml, the mosaic job file instead (a plan's chosen job, for `mosaic perf`).

    The architecture, parallel layout, batch and micro-batch, precision, recompute and MoE
    dispatcher are spelled as the target spells them; settings it cannot express are
    listed in the file header and on stderr (docs/export.md).
    """
    check_target(to)  # before the job is read: the first thing wrong is named first
    if out is not None:
        check_output_file(out, "--out", inputs=[source])
    apply_catalog(catalog)
    spec, memory_verdict = load_export_spec_and_fit(source, set_ or [], model, calibration)
    note, note_infeasible = launched_stack_note(spec, to)
    if note is not None:
        spec = replace(spec, notes=(note,))
    result = export(spec, to)
    if out is None:
        typer.echo(result.text, nl=False)
    else:
        write_text_atomic(out, result.text)
        error_console.print(f"wrote {out}", markup=False, highlight=False)
    for item in result.assumed:
        error_console.print(f"warning: ASSUMED (not stated in {source}): {item}",
                            markup=False, highlight=False, soft_wrap=True)
    for item in result.unsupported:
        error_console.print(f"note: {to} cannot express: {item}", markup=False,
                            highlight=False, soft_wrap=True)
    if note is not None:
        error_console.print(f"{'warning' if note_infeasible else 'note'}: {note}",
                            markup=False, highlight=False, soft_wrap=True)
    if _plan_document(source) is not None:  # a job's verdicts are the memory one below
        for item in spec.warnings:
            error_console.print(f"warning: {item}", markup=False, highlight=False,
                                soft_wrap=True)
    if memory_verdict is not None:
        error_console.print(f"warning: {DOES_NOT_FIT}: {memory_verdict} per GPU "
                            f"(`mosaic explain {source}`, with the "
                            "same --set, --model and --calibration, lists what would make it "
                            "fit)",
                            markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Attach `mosaic export` to the root command."""
    app.command("export")(guarded(export_command))
