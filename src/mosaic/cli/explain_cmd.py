"""`mosaic explain`: what bounds a job's step, why a measurement differs, what to try."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    CalibrationOption,
    JobArgument,
    JsonFlag,
    SetOption,
    console,
    error_console,
    guarded,
    print_json,
    print_key_value_table,
    print_table,
    prose_table_width,
)
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.cli.report_cmd import HtmlOption, check_html, write_html
from mosaic.errors import MosaicInputError
from mosaic.evaluate.diagnosis import (
    GIB,
    PARTED_CLASSES,
    Bound,
    Diagnosis,
    diagnose,
    measured_step_time,
)
from mosaic.evaluate.job import JobPrediction, load_job_spec, predict_job_file
from mosaic.evaluate.plausibility import implausibility
from mosaic.limits import check_range
from mosaic.perf.calibration import load_calibration
from mosaic.perf.headroom import memory_fit_text
from mosaic.report.explain_document import (
    explain_document,
    levers_that_fit_text,
    measured_gap_rows,
)
from mosaic.report.plan_report import layout_line, precision_text
from mosaic.report.prediction_document import memory_scale_note


def _render_current(diagnosis: Diagnosis, document: dict[str, Any]) -> None:
    result = diagnosis.result
    p = result.prediction
    memory = diagnosis.bound.memory
    scaled = memory_scale_note(document)
    print_key_value_table("Job", [
        ("calibration", document["calibration"] + (f" (memory: {scaled})" if scaled else "")),
        ("hardware", result.cluster.description),
        ("layout", layout_line(result.spec.plan.row(0))),
        ("precision / EP dispatcher", precision_text(document["prediction"])
         + (f" / {document['prediction']['dispatcher']}"
            if int(result.spec.plan.ep[0]) > 1 else "")),
        ("global batch", f"{result.spec.workload.global_batch} x "
                         f"{result.spec.workload.seq_len} tokens"),
        ("step time", f"{p.step_time_s[0]:.3f} s"),
        ("tokens/s", f"{p.tokens_per_s[0]:,.0f}"),
        ("MFU (6·N_act, dense bf16 datasheet peak)", f"{p.mfu[0]:.2%}"),
        ("memory per GPU", memory_fit_text(
            memory.memory_bytes / GIB, memory.capacity_bytes / GIB,
            result.machine.usable_memory_fraction, memory.overshoot_bytes / GIB)
         + ("; near capacity" if memory.status == "near capacity" else "")),
    ])


def _largest_parts(bound: Bound, group: str, step_s: float) -> str:
    """The three largest parts of a class with parts (compute op classes, comm axes)."""
    if group not in PARTED_CLASSES:
        return ""
    parts = list(bound.parts_s[group].items())[:3]
    return ", ".join(f"{part} {seconds / step_s:.0%}" for part, seconds in parts)


def _render_bound(diagnosis: Diagnosis) -> None:
    rows = [[term.name, term.group, f"{term.seconds:.4f}", f"{term.share:.1%}", term.label]
            for term in diagnosis.terms]
    print_table("Step-time breakdown, largest first",
                ["term", "class", "seconds", "share", "source"], rows)
    bound = diagnosis.bound
    step = float(diagnosis.result.prediction.step_time_s[0])
    class_rows = [
        [group, f"{seconds:.4f}", f"{seconds / step:.1%}", _largest_parts(bound, group, step)]
        for group, seconds in bound.classes_s.items()
    ]
    print_table("What bounds this step", ["class", "seconds", "share", "largest parts"],
                class_rows)
    console.print(f"Bound: {bound.summary}", markup=False, highlight=False)
    imbalance = diagnosis.imbalance
    if imbalance is not None:
        console.print(
            f"Assumed: the busiest EP rank's extra tokens (expert_load_imbalance) are "
            f"{imbalance.share:.0%} of the step, from an imbalance the job does not state (the "
            f"stack's router, `mosaic perf` names it); an evenly loaded router would take "
            f"{imbalance.balanced_step_time_s:.3f} s "
            f"({imbalance.balanced_step_time_s / step - 1:+.0%})"
            "; state performance.routing_imbalance (a run record's routing_imbalance) if you "
            "know it", markup=False, highlight=False)


def _render_gap(diagnosis: Diagnosis, document: dict[str, Any]) -> None:
    gap = diagnosis.gap
    if gap is None:
        return
    # a record whose tokens/s and step time disagree is explained at the step its tokens/s
    # implies; said where the measured step is shown (a trial saw no word of it)
    print_key_value_table("Measured vs predicted",
                          measured_gap_rows(document["gap"], diagnosis.result.spec.assumptions))
    for finding in gap.findings:
        console.print(f"- {finding}", markup=False, highlight=False)


def _render_levers(diagnosis: Diagnosis) -> None:
    table = Table(title="Levers, best feasible first (gain = tokens/s over current)",
                  title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("what changes (--set that gives it)", ratio=3, overflow="fold")
    for column in ("MFU", "step s", "gain", "GiB"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("feasible?", ratio=2, overflow="fold")
    for rank, lever in enumerate(diagnosis.levers, start=1):
        predicted = math.isfinite(lever.step_time_s)
        # plain Text, not markup: a list override ('recompute_modules=[mla_up_proj, mlp]')
        # read as a rich style tag printed as 'recompute_modules=' (a trial's FP8 lever)
        table.add_row(
            str(rank), Text(lever.description + (f"\n  set {' '.join(lever.overrides)}"
                                                 if lever.overrides else "")),
            f"{lever.mfu:.2%}" if predicted else "-",
            f"{lever.step_time_s:.3f}" if predicted else "-",
            f"{lever.gain:.2f}x" if predicted else "-",
            f"{lever.memory_bytes / GIB:.1f}" if predicted else "-",
            "yes" if lever.feasible else Text(f"no: {lever.reason}"),
        )
    console.print(table, width=prose_table_width(lever.description for lever in diagnosis.levers))


def _hint_if_per_gpu(measured_tokens_per_s: float, result: JobPrediction) -> None:
    """A note on stderr when a --measured-tokens-per-s value looks like a per-GPU figure:
    within 2x of the predicted per-GPU rate and nearer to it than to the cluster total."""
    per_gpu = float(result.prediction.tokens_per_s_per_gpu[0])
    total = float(result.prediction.tokens_per_s[0])
    near_per_gpu = abs(math.log(measured_tokens_per_s / per_gpu))
    if near_per_gpu <= math.log(2.0) and near_per_gpu < abs(math.log(measured_tokens_per_s
                                                                     / total)):
        error_console.print(
            f"note: --measured-tokens-per-s takes the cluster total ({total:,.0f} predicted on "
            f"{result.cluster.n_devices} GPUs); {measured_tokens_per_s:,.0f} is near the "
            f"predicted per-GPU {per_gpu:,.0f}: for a per-GPU figure use "
            f"--measured-tokens-per-s-per-gpu", markup=False, highlight=False, soft_wrap=True)


def explain(
    job: JobArgument,
    measured_tokens_per_s: Annotated[
        float | None, typer.Option(help="measured cluster-total tokens/s, for the gap analysis")
    ] = None,
    measured_tokens_per_s_per_gpu: Annotated[
        float | None, typer.Option(help="measured tokens/s per GPU, for the gap analysis")
    ] = None,
    measured_step_time_s: Annotated[
        float | None, typer.Option(help="measured seconds per step, for the gap analysis")
    ] = None,
    set_: SetOption = None,
    calibration: CalibrationOption = None,
    json_output: JsonFlag = False,
    html: HtmlOption = None,
    catalog: CatalogFileOption = None,
    model: ModelOption = None,
) -> None:
    """Explain a job's predicted step: what bounds it, a measured gap, and levers to try."""
    apply_catalog(catalog)
    check_html(html, job, model, calibration, catalog)
    constants = load_calibration(calibration)
    spec = load_job_spec(job, set_ or [], model_block(model), default_stack=constants.stack)
    if measured_tokens_per_s is not None:  # physical ranges before work (mosaic.limits)
        check_range("--measured-tokens-per-s", measured_tokens_per_s, "seconds", low=1e-3,
                    high=1e15)
    if measured_tokens_per_s_per_gpu is not None:
        check_range("--measured-tokens-per-s-per-gpu", measured_tokens_per_s_per_gpu,
                    "seconds", low=1e-6, high=1e12)
        if measured_tokens_per_s is not None:
            raise MosaicInputError("give --measured-tokens-per-s (cluster total) or "
                                   "--measured-tokens-per-s-per-gpu, not both")
    if measured_step_time_s is not None:
        check_range("--measured-step-time-s", measured_step_time_s, "seconds", low=1e-6,
                    high=1e6)
    result = predict_job_file(spec, constants, job, set_ or [])
    if measured_tokens_per_s_per_gpu is not None:
        measured_tokens_per_s = measured_tokens_per_s_per_gpu * result.cluster.n_devices
    elif measured_tokens_per_s is not None:
        _hint_if_per_gpu(measured_tokens_per_s, result)
    from_record = (measured_tokens_per_s is None and measured_step_time_s is None
                   and spec.measured_step_time_s is not None)
    if from_record:
        measured_step_time_s = spec.measured_step_time_s  # a run record's own measurement
    measured = measured_step_time(spec.workload.tokens_per_step, measured_tokens_per_s,
                                  measured_step_time_s)
    if (spec.measured_step_time_s is not None and measured is not None
            and not math.isclose(measured, spec.measured_step_time_s, rel_tol=1e-3)):
        typer.echo(f"note: the measurement given replaces the record's measured step "
                   f"({spec.measured_step_time_s:.4g} s)", err=True)
    given = next((f"{flag} {value:g}" for flag, value in (
        ("--measured-tokens-per-s-per-gpu", measured_tokens_per_s_per_gpu),
        ("--measured-tokens-per-s", measured_tokens_per_s),
        ("--measured-step-time-s", measured_step_time_s)) if value is not None), "")
    warning = None if measured is None else _measurement_warning(
        measured, result, given, str(job) if from_record else None)
    diagnosis = diagnose(result, constants, measured)
    document = explain_document(diagnosis, constants)
    if warning is not None:
        document["measurement_warning"] = warning
        typer.echo(f"warning: {warning}", err=True)
    write_html(document, html, "explain")
    if json_output:
        print_json(document)
        return
    _render_current(diagnosis, document)
    print_key_value_table("Calibration coverage (intervals from held-out residuals)",
                          [tuple(row) for row in document["coverage_summary"]])
    _render_bound(diagnosis)
    _render_gap(diagnosis, document)
    _render_levers(diagnosis)
    fit = levers_that_fit_text(document)
    if fit is not None:
        console.print(fit, markup=False, highlight=False, soft_wrap=True)
    stated = any(lever.overrides for lever in diagnosis.levers)
    console.print("These change one thing at a time"
                  + (" ('set': the `--set` overrides of `mosaic perf` that give exactly that "
                     "step, on top of any --set of yours)" if stated else "")
                  + f"; every layout of this job at once: mosaic layouts {job} (with the same "
                  "--set, --model and --calibration)",
                  markup=False, highlight=False, soft_wrap=True)


def _measurement_warning(measured_step_time_s: float, result: JobPrediction,
                         given: str, record: str | None = None) -> str | None:
    """A measured step that beats the device's peak (MFU with attention above 100% of the
    GEMM lane's datasheet peak) is a unit or scale slip, refused; one more than 3.5x off the
    prediction is explained but warned about (:mod:`mosaic.evaluate.plausibility`).
    ``given``: the option as given (a tokens/s figure is said with the step it means);
    ``record``: the run record (RUNS.yaml#ID) whose own measurement it is, said in
    `validate`'s words about the record's fields rather than the options (a trial was told
    to check options it had not given)."""
    prediction = result.prediction
    found = implausibility(float(prediction.step_time_s[0]) / measured_step_time_s,
                           float(prediction.mfu_with_attention_gemm_lane[0]))
    if found is None:
        return None
    if record is not None:
        reason = f"the record's measurement: {result.implausible_measurement}"
        if found.above_peak:
            raise MosaicInputError(f"{record}: {reason} Fix its measured block, or give "
                                   "the measurement to explain with --measured-step-time-s")
        return reason
    step = f"{measured_step_time_s:.4g} s"
    if given and not given.startswith("--measured-step-time-s"):
        step += f" ({given})"
    if found.above_peak:
        raise MosaicInputError(
            f"the measured step of {step} implies an MFU of "
            f"{found.measured_mfu:.0%} (with causal attention, over the GEMM precision's "
            "dense peak), which no run reaches: check the units (seconds per step; "
            "--measured-tokens-per-s is the cluster total, --measured-tokens-per-s-per-gpu "
            "per GPU)")
    slower = "slower" if found.throughput_ratio < 1 else "faster"
    return (f"the measured step of {step} is {found.times_off_text}x "
            f"{slower} than predicted: check the units (seconds per step, not milliseconds; "
            "tokens/s as the option names it)")


def register(app: typer.Typer) -> None:
    """Attach `mosaic explain` to the root command."""
    app.command("explain")(guarded(explain))
