"""The `--set` overrides that turn a job file into one of its levers: the fields where the
lever's canonical job document (config.job_schema.job_document) differs from the job's, so
that `mosaic perf JOB --set ...` predicts exactly the lever's step (a trial applied a tp
lever by hand and got another expert tp, which an unstated etp follows)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from typing import Any

from mosaic.config.job_schema import JobSpec, job_document
from mosaic.config.recipes import RecipeSettings
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.workload import Workload

# Blocks a lever never changes (the model) or that only describe the job (the search scope).
UNCHANGED_BLOCKS = ("model", "search")
# Fields a job file may leave to the loader, which derives them from a field a lever changes:
# an unstated expert tp and sequence parallelism follow tp (stack trait unstated_etp), an
# unstated vpp and micro-batch follow pp (interleaved_vpp_default, torchtitan's local batch
# over pp). A lever that changes the first states the others as it ran them; the expert tp
# only for a model with MoE layers (a dense model's unstated etp is 1 at any tp,
# config.layout._unstated_etp, and no layer reads it).
DEPENDENT_FIELDS = {
    "parallelism.tp": ("parallelism.etp", "parallelism.sequence_parallel"),
    "parallelism.pp": ("parallelism.vpp", "batch.micro_seqs"),
}
# A job that names its stack's release takes the release's recipe for its precision
# (config.recipes); a lever that changes the precision keeps the job's settings, so it
# states every setting a recipe may set (RecipeSettings, recompute as checkpointing).
RECIPE_KEYS = ("performance.precision", "performance.fp8_recipe")
RECIPE_FIELDS = frozenset({*RecipeSettings.model_fields, "checkpointing"})


def _leaves(document: dict[str, Any]) -> dict[str, Any]:
    """'block.field' -> value of every block's fields but the model's."""
    return {f"{block}.{name}": value for block, fields in document.items()
            if block not in UNCHANGED_BLOCKS and isinstance(fields, dict)
            for name, value in fields.items()}


def _text(value: Any) -> str:
    """A value as `--set` reads it (YAML): true/false, null, an enum's name, a list as
    [a, b]."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_text(item) for item in value) + "]"
    return str(value)


def lever_overrides(spec: JobSpec
                    ) -> Callable[[Workload, ParallelPlans], tuple[str, ...] | None]:
    """The overrides of each lever of ``spec`` (the job's document is read once): for a
    lever's workload and plan, ``block.field=value`` for each field it changes, in document
    order; None for a run record (its `--set` takes the record's own field names)."""
    before = None if spec.recorded_layout else _leaves(job_document(spec))

    def overrides(workload: Workload, plan: ParallelPlans) -> tuple[str, ...] | None:
        return None if before is None else _changed(spec, before, workload, plan)
    return overrides


def _changed(spec: JobSpec, before: dict[str, Any], workload: Workload, plan: ParallelPlans
             ) -> tuple[str, ...]:
    """The overrides that turn the job of ``before`` (its leaves) into ``workload`` on
    ``plan``."""
    changed_spec = replace(spec, workload=workload, plan=plan, as_recorded=None)
    after = _leaves(job_document(changed_spec))
    changed = [key for key, value in after.items() if before.get(key) != value]
    changed += [dependent for key in list(changed) for dependent in DEPENDENT_FIELDS.get(key, ())
                if dependent in after and dependent not in changed
                and (dependent != "parallelism.etp" or workload.geometry.moe is not None)]
    if spec.stack_version is not None and any(key in changed for key in RECIPE_KEYS):
        changed += [key for key in after if key not in changed
                    and key.partition(".")[2] in RECIPE_FIELDS]
    overrides = [f"{key}={_text(after[key])}" for key in changed]
    for key in sorted(before.keys() - after.keys()):  # at its default, which the document omits
        field = key.partition(".")[2]
        # a workload setting states its value; a layout field (an HSDP shard group the
        # lever's sharding has none of) is cleared to what the loader derives
        overrides.append(f"{key}={_text(getattr(workload, field))}" if hasattr(workload, field)
                         else f"{key}=null")
    return tuple(overrides)
