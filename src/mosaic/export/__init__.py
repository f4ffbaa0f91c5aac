"""Launch configurations for training frameworks from a mosaic job or plan.

``build_export_spec`` turns a job file or a ``mosaic plan --json`` document into one
framework-neutral :class:`ExportSpec`; one module per target spells it the way that
framework does (``megatron``, ``nemo``, ``torchtitan``, ``maxtext``). Every renderer also
returns the settings it could not express, so nothing is dropped silently.
"""

from mosaic.export.spec import ExportSpec, spec_from_job, spec_from_plan_document
from mosaic.export.targets import (
    TARGETS,
    ExportResult,
    check_target,
    export,
    launched_job_document,
)

__all__ = ["TARGETS", "ExportResult", "ExportSpec", "check_target", "export",
           "launched_job_document", "spec_from_job", "spec_from_plan_document"]
