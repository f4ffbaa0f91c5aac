"""The source as a mosaic job file (``--to yaml``): the canonical job document
(docs/schema.md) that ``mosaic perf``, ``layouts`` and ``explain`` read. From a plan it is the
plan's chosen job (its optimum's model, layout and batch on the plan's hardware)."""

from __future__ import annotations

import yaml

from mosaic.errors import MosaicInputError
from mosaic.export.spec import ExportSpec
from mosaic.export.targets import ExportResult, training_lines, warning_lines


def render(spec: ExportSpec) -> ExportResult:
    """YAML text: one comment line naming the source, then the job document."""
    if spec.job is None:
        raise MosaicInputError(f"{spec.source or 'this source'}: --to yaml needs a job, a run "
                               "record or a plan document")
    header = [f"mosaic job written by `mosaic export --to yaml` from {spec.source or 'a job'}; "
              "run it with `mosaic perf FILE`", *training_lines(spec), *warning_lines(spec)]
    header += [f"ASSUMED (not stated in the source): {item}"
               for item in spec.architecture_assumptions]
    text = "".join(f"# {line}\n" for line in header)
    text += yaml.safe_dump(spec.job, sort_keys=False, default_flow_style=None, width=100)
    return ExportResult("yaml", text, ".yaml", [])
