"""Settings a measured run used that its record cannot carry, applied by run id.

The shared calibration file's schema has no field for the LM-loss implementation, bf16
gradient buffers, activation offloading, the MoE dispatcher or batch-level EP overlap (and
some records leave their recompute policy unknown), yet
the recipes behind some of its runs set them
(``data/record_settings.yaml`` holds each group of runs with its public evidence). Applying
them before prediction is the run's own configuration, not a fit: a record that states a
setting itself keeps its value, and every applied setting is listed in the record's
assumptions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from mosaic.config.blocks import EagerKernelsName
from mosaic.config.recipes import RecipeSettings
from mosaic.config.run_records import RunRecord, RunRecordSet, matching_system
from mosaic.errors import MosaicInputError
from mosaic.perf.plan import Checkpointing
from mosaic.perf.workload import Workload
from mosaic.schema_validation import validate_mapping


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Settings(RecipeSettings):
    """A recipe's settings plus what only a run's own evidence can say."""

    attention_kernel: Literal["cudnn", "fa2", "fa3", "triton", "fa1", "jax_flash"] | None = None
    eager_kernels: EagerKernelsName | None = None  # the model code's torch era
    # Not a setting of the run: False marks a run whose hardware is not the catalogued part,
    # or whose source contradicts itself about its tokens per step or its layout (the group's
    # evidence says why); it is predicted but not scored for throughput.
    throughput_scored: Literal[False] | None = None
    # The catalog node type the run ran on, where its record's schema could not name it
    # (the record's GPU and host sizes must match it).
    system: str | None = Field(default=None, min_length=1)
    # sequences per data-parallel rank per forward-backward pass (the record schema's
    # batch.local_seqs), where the shared file's schema has no field for it
    local_batch: int | None = Field(default=None, ge=1)
    # the micro-batch a run's own code chose where its record leaves it unstated (a plan
    # setting, as recompute: the record's micro-batch column)
    micro_seqs: int | None = Field(default=None, ge=1)


class _Group(_Strict):
    evidence: str = Field(min_length=1)
    settings: _Settings
    runs: list[str] = Field(min_length=1)


class _File(_Strict):
    schema_version: Literal[1]
    description: str = Field(min_length=1)
    groups: list[_Group]


@cache
def record_settings() -> dict[str, tuple[dict[str, Any], str]]:
    """Run id -> (settings, evidence) from the shipped ``record_settings.yaml``."""
    text = resources.files("mosaic.evaluate").joinpath("data", "record_settings.yaml")
    parsed = validate_mapping(_File, yaml.safe_load(text.read_text()), "record settings")
    by_run: dict[str, tuple[dict[str, Any], str]] = {}
    for group in parsed.groups:
        settings = group.settings.model_dump(exclude_none=True)
        if settings.pop("throughput_scored", True) is False:  # this group's evidence is why
            settings["throughput_not_scored"] = " ".join(group.evidence.split())
        for run_id in group.runs:
            known, evidence = by_run.get(run_id, ({}, ""))
            twice = sorted(set(known) & set(settings))
            if twice:
                raise MosaicInputError(f"record settings: run {run_id!r} is given "
                                       f"{', '.join(twice)} twice")
            by_run[run_id] = ({**known, **settings},
                              f"{evidence}; {group.evidence}" if evidence else group.evidence)
    return by_run


# The settings that are plan columns, not workload fields: (column, its integer value).
_PLAN_SETTINGS: dict[str, tuple[str, Callable[[Any], int]]] = {
    "recompute": ("checkpointing", lambda name: int(Checkpointing.parse(name))),
    "micro_seqs": ("micro_batch", int),
}


def _apply(record: RunRecord, settings: dict[str, Any], evidence: str) -> RunRecord:
    settings = dict(settings)
    not_scored = settings.pop("throughput_not_scored", None)
    if not_scored is not None:
        record = replace(record, throughput_not_scored=not_scored)
    changes = {name: tuple(value) if isinstance(value, list) else value
               for name, value in settings.items() if name not in record.stated_settings}
    if not changes:
        return record
    stated = ", ".join(f"{name}={value}" for name, value in changes.items())
    note = f"record settings: {stated} (evidence: {evidence.split(';')[0]})"
    system_name = changes.pop("system", None)
    if system_name is not None:  # the node type: the record's system, not a workload field
        record = replace(record, system=matching_system(
            system_name, record.system.device.name, record.system.gpus_per_node,
            record.system.scale_up_domain_gpus))
    for name, (column, as_int) in _PLAN_SETTINGS.items():
        value = changes.pop(name, None)
        if value is not None:  # a plan setting: the record's column of that name
            record = replace(record, plan=replace(record.plan, **{column: np.full_like(
                getattr(record.plan, column), as_int(value))}))
    workload: Workload = replace(record.workload, **changes)
    return replace(record, workload=workload, assumptions=(*record.assumptions, note))


def with_record_settings(record: RunRecord) -> RunRecord:
    """``record`` with its documented settings applied (unchanged when it has none)."""
    table = record_settings()
    return _apply(record, *table[record.id]) if record.id in table else record


def apply_record_settings(record_set: RunRecordSet) -> RunRecordSet:
    """``record_set`` with each listed run's documented settings applied."""
    return replace(record_set, records=tuple(map(with_record_settings, record_set.records)))
