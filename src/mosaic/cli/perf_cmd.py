"""`mosaic perf`: step time, MFU and memory of one training job, with breakdowns."""

from __future__ import annotations

from typing import Any

import typer

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    CalibrationOption,
    JobArgument,
    JsonFlag,
    SetOption,
    console,
    guarded,
    print_json,
    print_key_value_table,
    print_table,
)
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.cli.report_cmd import HtmlOption, check_html, write_html
from mosaic.evaluate.job import load_job_spec, predict_job_file
from mosaic.perf.calibration import load_calibration
from mosaic.perf.memory import COMPONENT_MEANINGS
from mosaic.perf.terms import STEP_TERMS, term_meaning
from mosaic.report.prediction_document import memory_scale_note, prediction_document
from mosaic.report.prediction_summary import breakdown_scale_note, prediction_summary_rows
from mosaic.units import GIB


def _render(document: dict[str, Any]) -> None:
    print_key_value_table("Predicted step", prediction_summary_rows(document))
    step = document["step_time_s"]
    # in the order of the term records (perf/terms.py): compute, communication, the rest
    order = {name: index for index, name in enumerate(STEP_TERMS)}
    rows = [
        [name, f"{seconds:.4f}", f"{seconds / step:.1%}", document["labels"][name],
         term_meaning(name)]
        for name, seconds in sorted(document["breakdown_s"].items(),
                                    key=lambda item: order.get(item[0], len(order)))
        if abs(seconds) > 0
    ]
    print_key_value_table("Calibration coverage (intervals from held-out residuals)",
                          [tuple(row) for row in document["coverage_summary"]])
    print_table("Step-time breakdown" + breakdown_scale_note(document),
                ["term", "seconds", "share", "source", "what"], rows)
    memory = document["memory_breakdown_bytes"]
    pp = document["plan"]["pp"]
    scaled = memory_scale_note(document)
    notes = [*([f"heaviest stage: pipeline rank {document['memory_stage']} of {pp}"]
               if pp > 1 else []), *([scaled] if scaled else [])]
    print_table(
        "Memory breakdown" + (f" ({'; '.join(notes)})" if notes else ""),
        ["component", "GiB", "what"],
        [[name, f"{value / GIB:.2f}", COMPONENT_MEANINGS.get(name, "")]
         for name, value in memory.items()],
    )
    if document["assumptions"] or document["kernels"]:
        console.print("Assumed where the input is silent:", markup=False, highlight=False)
        for line in [*document["assumptions"], *document["kernels"]]:
            console.print(f"  - {line}", markup=False, highlight=False, soft_wrap=True)


def perf(
    job: JobArgument,
    set_: SetOption = None,
    calibration: CalibrationOption = None,
    json_output: JsonFlag = False,
    model: ModelOption = None,
    html: HtmlOption = None,
    catalog: CatalogFileOption = None,
) -> None:
    """Predict step time, tokens/s, MFU and per-GPU memory of one job, with breakdowns."""
    check_html(html, job, model, calibration, catalog)
    apply_catalog(catalog)
    constants = load_calibration(calibration)
    spec = load_job_spec(job, set_ or [], model_block(model), default_stack=constants.stack)
    result = predict_job_file(spec, constants, job, set_ or [])
    document = prediction_document(result, constants)
    warning = result.implausible_measurement  # validate's check, on a record's measurement
    if warning is not None:
        document["measurement_warning"] = warning
        typer.echo(f"warning: {warning}", err=True)
    write_html(document, html, "perf")
    if json_output:
        print_json(document)
    else:
        _render(document)


def register(app: typer.Typer) -> None:
    """Attach `mosaic perf` to the root command."""
    app.command("perf")(guarded(perf))
