"""The source as a mosaic job file (``--to yaml``): the canonical job document
(docs/schema.md) that ``mosaic perf``, ``layouts`` and ``explain`` read. From a plan it is the
plan's chosen job (its optimum's model, layout and batch on the plan's hardware)."""

from __future__ import annotations

from pathlib import Path

import yaml

from mosaic.errors import MosaicInputError
from mosaic.export.spec import ExportSpec
from mosaic.export.targets import ExportResult, training_lines, warning_lines
from mosaic.perf.calibration import BUILT_IN_PROFILES, DEFAULT_PROFILE


def render(spec: ExportSpec) -> ExportResult:
    """YAML text: one comment line naming the source, then the job document."""
    if spec.job is None:
        raise MosaicInputError(f"{spec.source or 'this source'}: --to yaml needs a job, a run "
                               "record or a plan document")
    command = perf_command(spec.calibration, catalog_option(spec.job))
    header = [f"mosaic job written by `mosaic export --to yaml` from {spec.source or 'a job'}; "
              f"run it with {command}", *training_lines(spec),
              *warning_lines(spec)]
    header += [f"ASSUMED (not stated in the source): {item}"
               for item in spec.architecture_assumptions]
    unexpressed = [spec.repeated_data_note] if spec.repeated_data_note else []
    header += [f"NOT EXPRESSED: {item}" for item in unexpressed]
    text = "".join(f"# {line}\n" for line in header)
    text += yaml.safe_dump(spec.job, sort_keys=False, default_flow_style=None, width=100)
    return ExportResult("yaml", text, ".yaml", unexpressed)


def catalog_option(job: dict) -> str:
    """``--catalog FILE `` when the job's node type is not the shipped one of its name (a
    user's catalog entry: `mosaic perf` without it says "unknown system", a trial), quoted
    for a shell (a catalog under "my hw/" broke the pasted command)."""
    import shlex

    from mosaic.hardware import active_catalog, active_catalog_paths, shipped_catalog

    name = (job.get("hardware") or {}).get("system")
    paths = active_catalog_paths()
    if name is None or not paths:
        return ""
    try:
        if shipped_catalog().system(name) == active_catalog().system(name):
            return ""
    except MosaicInputError:  # not a shipped node type (or not one at all: perf says so)
        pass
    return "".join(f"--catalog {shlex.quote(str(path))} " for path in paths)


def perf_command(calibration: str | None, catalog: str = "") -> str:
    """How to predict the job as its plan did: under the plan's calibration profile (a job
    file names none, so `mosaic perf` would use the default one) and the user catalog that
    holds its node type."""
    perf = f"mosaic {catalog}perf FILE"
    if calibration is None or calibration == DEFAULT_PROFILE:
        return f"`{perf}`"
    if calibration in BUILT_IN_PROFILES or Path(calibration).is_file():
        # a profile file named on the command line (export --calibration) is its path
        return f"`{perf} --calibration {calibration}` (the calibration it was predicted with)"
    return (f"`{perf} --calibration CAL.yaml`, CAL.yaml the file of the plan's "
            f"calibration '{calibration}'")
