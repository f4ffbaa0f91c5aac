"""`mosaic studio`: the local web app for what-if exploration (needs mosaic[studio])."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import CalibrationOption, error_console, guarded


def studio(
    host: Annotated[str, typer.Option(
        "--host", help="address to listen on (default: this machine only)")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port")] = 8765,
    job: Annotated[Path | None, typer.Option(
        "--job", help="job YAML or a run record as RUNS.yaml#ID to start from (its model "
                      "becomes a choice)")] = None,
    no_browser: Annotated[bool, typer.Option(
        "--no-browser", help="do not open a browser window")] = False,
    plan_time_limit_s: Annotated[float, typer.Option(
        "--plan-time-limit-s", help="stop a plan request after this many seconds")] = 300.0,
    calibration: CalibrationOption = None,
    catalog: CatalogFileOption = None,
) -> None:
    """Start the local web studio: edit a job and see its step, layouts and plans live.

    Every prediction, layout search and plan uses --calibration (your own profile from
    `mosaic calibrate`, its memory scale included) and the hardware of --catalog."""
    from mosaic.errors import MosaicInputError
    from mosaic.perf.calibration import load_calibration
    from mosaic.studio.server import serve

    if not plan_time_limit_s > 0:
        raise MosaicInputError(f"--plan-time-limit-s must be > 0, got {plan_time_limit_s}")
    apply_catalog(catalog)
    profile = load_calibration(calibration)  # a bad file is one line, before the server

    def log(message: str) -> None:
        error_console.print(message, markup=False, highlight=False, soft_wrap=True)

    serve(host=host, port=port, job=job, open_browser=not no_browser,
          plan_time_limit_s=plan_time_limit_s, log=log, calibration=profile)


def register(app: typer.Typer) -> None:
    """Attach `mosaic studio` to the root command."""
    app.command("studio")(guarded(studio))
