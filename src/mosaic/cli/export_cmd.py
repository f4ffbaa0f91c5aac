"""`mosaic export`: a plan or a job as a Megatron, NeMo, torchtitan or MaxText launch config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mosaic.cli.common import SetOption, error_console, guarded
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.errors import MosaicInputError
from mosaic.export import TARGETS, ExportSpec, export, spec_from_job, spec_from_plan_document


def load_export_spec(path: Path, overrides: list[str], model: Path | None) -> ExportSpec:
    """A job YAML (with ``--set`` overrides) or a ``mosaic plan --json`` document."""
    if path.suffix.lower() == ".json":
        if overrides or model:
            raise MosaicInputError("--set and --model apply to job files, not plan JSON")
        try:
            document = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise MosaicInputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})"
                                   ) from None
        return spec_from_plan_document(document, str(path))
    from mosaic.evaluate.job import load_job_spec, predict_job
    from mosaic.perf.calibration import load_calibration

    job = load_job_spec(path, overrides, model_block(model))
    predict_job(job, load_calibration(None))  # the layout checks of `mosaic perf`, same errors
    return spec_from_job(job, str(path))


def export_command(
    source: Annotated[Path, typer.Argument(
        help="job YAML, a run record as RUNS.yaml#ID, or the JSON of `mosaic plan "
             "--json` (its optimum is exported)")],
    to: Annotated[str, typer.Option("--to", help=f"target: {', '.join(TARGETS)}")],
    out: Annotated[Path | None, typer.Option("--out", help="write here instead of stdout")
                   ] = None,
    set_: SetOption = None,
    model: ModelOption = None,
) -> None:
    """Write a Megatron, NeMo, torchtitan or MaxText launch config for a job or a plan.

    The architecture, parallel layout, batch and micro-batch, precision, recompute and MoE
    dispatcher are spelled as the target spells them; settings it cannot express are
    listed in the file header and on stderr (docs/export.md).
    """
    spec = load_export_spec(source, set_ or [], model)
    result = export(spec, to)
    if out is None:
        typer.echo(result.text, nl=False)
    else:
        out.write_text(result.text)
        error_console.print(f"wrote {out}", markup=False, highlight=False)
    for item in result.unsupported:
        error_console.print(f"note: {to} cannot express: {item}", markup=False,
                            highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Attach `mosaic export` to the root command."""
    app.command("export")(guarded(export_command))
