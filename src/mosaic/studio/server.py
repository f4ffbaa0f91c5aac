"""Start the studio under uvicorn on localhost (or where asked, with a warning)."""

from __future__ import annotations

import ipaddress
import socket
import threading
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mosaic.errors import MosaicInputError, missing_extra

if TYPE_CHECKING:
    from mosaic.config.job_schema import JobSpec

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_warning(host: str) -> str | None:
    """The warning printed when the studio listens beyond this machine."""
    if is_loopback(host):
        return None
    return (f"warning: mosaic studio is listening on {host}, not only on this machine; "
            "anyone who can reach this address can run predictions and plans on it "
            "(there is no login). Use --host 127.0.0.1 to keep it local.")


def require_studio() -> None:
    """One-line error when the studio extra is missing."""
    try:
        import fastapi  # noqa: F401
        import plotly  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise missing_extra("studio") from None


def load_job_document(path: Path | None) -> dict[str, Any] | None:
    """The `--job` file, checked with the CLI's schema before the server starts; a run
    record (``RUNS.yaml#ID``, as `mosaic perf` reads one) becomes the job it measured, with
    the settings `mosaic perf` reads it with (a trial's record was refused with a message
    about the dp=1 the check below sets)."""
    if path is None:
        return None
    from mosaic.config.job_schema import job_document, load_job
    from mosaic.evaluate.job import load_job_spec
    from mosaic.schema_validation import load_yaml_mapping

    if is_run_record(path):
        return job_document(load_job_spec(path))
    load_job(path, ["parallelism.dp=1"])  # same checks as `mosaic layouts`; layout is edited
    return load_yaml_mapping(path)


def load_run_record(path: Path | None) -> JobSpec | None:
    """The run record `--job` names (``RUNS.yaml#ID``) as the job spec `mosaic perf` and
    `mosaic explain` read, its measured step included; None for a job file or no `--job`."""
    if not is_run_record(path):
        return None
    from mosaic.evaluate.job import load_job_spec

    return load_job_spec(path)


def is_run_record(path: Path | None) -> bool:
    """Whether `--job` names a run record (``RUNS.yaml#ID``), not a job file."""
    if path is None:
        return False
    from mosaic.config.run_records import is_run_record_document, split_record_reference
    from mosaic.schema_validation import load_yaml_mapping

    return is_run_record_document(load_yaml_mapping(split_record_reference(path)[0]))


def require_free_port(host: str, port: int) -> None:
    """A port another process listens on is a one-line error before anything starts
    (uvicorn would log its own error after the start banner and exit 3). The probe binds
    with SO_REUSEADDR, as uvicorn does, so a port in TIME_WAIT counts as free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except socket.gaierror as exc:  # the host name, not the port
            raise MosaicInputError(f"--host {host}: not an address of this machine "
                                   f"({exc.strerror}); e.g. 127.0.0.1 or 0.0.0.0") from None
        except OSError as exc:
            raise MosaicInputError(f"cannot listen on {host}:{port} ({exc.strerror}); pick "
                                   "another with --port") from None


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, job: Path | None = None,
          open_browser: bool = True, plan_time_limit_s: float | None = None,
          log: Any = print, calibration: Any = None) -> None:
    """Run the studio until interrupted, predicting with ``calibration`` (default: the
    built-in default profile)."""
    require_studio()
    import uvicorn

    from mosaic.studio.app import create_app

    if not 0 < port < 65536:
        raise MosaicInputError(f"--port must be in 1..65535, got {port}")
    require_free_port(host, port)
    app = create_app(load_job_document(job), calibration=calibration,
                     plan_time_limit_s=plan_time_limit_s, record=load_run_record(job))
    warning = bind_warning(host)
    if warning:
        log(warning)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else shown}:{port}/"
    log(f"mosaic studio on {url} (Ctrl-C to stop)"
        + ("" if calibration is None else f"; calibration {calibration.name!r}"))
    if open_browser:
        threading.Timer(1.0, lambda: webbrowser.open(url)).start()
    uvicorn.run(app, host=host, port=port, log_level="warning")
