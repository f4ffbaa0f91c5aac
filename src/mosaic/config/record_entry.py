"""A measured job as a run-record entry (docs/run_records.md).

The job's own ``model``, ``parallelism`` and ``batch`` blocks with the fields a record adds
(id, source, GPU and node, what was measured), so a run the user measured, such as one of
the reference trainer's (``mosaic ladder record``), is read by ``mosaic validate`` and
``mosaic calibrate`` as the published runs are.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mosaic.config.job_schema import job_document
from mosaic.errors import MosaicInputError, shown
from mosaic.hardware import get_system

if TYPE_CHECKING:
    from mosaic.config.job_schema import JobSpec

# a job's FP8 recipe as a record's precision (docs/run_records.md, `precision`)
FP8_RECIPE_PRECISION = {"current": "fp8-cs", "blockwise": "fp8-blockwise", "mxfp8": "mxfp8",
                        "delayed": "fp8"}
# what a run record's precision may say: an fp32 run has no record
RECORD_PRECISIONS = ("bf16", "fp16", "fp8", "fp8-cs", "fp8-blockwise", "mxfp8", "nvfp4")
# the job's performance fields a record spells otherwise (precision, recompute)
_MAPPED = ("precision", "checkpointing", "stack", "fp8_recipe")


def run_record_entry(spec: JobSpec, *, run_id: str, source: str, name: str,
                     tokens_per_s_per_gpu: float, memory_gib: float | None = None,
                     software: str | None = None, confidence: str = "high",
                     notes: str = "") -> dict[str, Any]:
    """The run-record entry of ``spec`` measured at ``tokens_per_s_per_gpu``; its step time
    is the one that throughput implies (global_seqs·seq_len / (tokens/s per GPU · GPUs)),
    ``memory_gib`` the caching allocator's peak where measured. The job's performance
    settings a record holds travel with it; others are named in its notes."""
    from mosaic.config.run_records import RunRecordEntry

    document = job_document(spec)
    performance = document["performance"]
    precision = performance["precision"]
    if precision == "fp8":
        precision = FP8_RECIPE_PRECISION.get(performance.get("fp8_recipe", "delayed"), "fp8")
    if precision not in RECORD_PRECISIONS:
        raise MosaicInputError(f"run {shown(run_id)}: precision {precision} has no run record "
                               f"(allowed: {', '.join(RECORD_PRECISIONS)}): the model prices "
                               "training in a tensor-core precision")
    if not tokens_per_s_per_gpu > 0:
        raise MosaicInputError(f"run {shown(run_id)}: tokens/s per GPU "
                               f"{shown(tokens_per_s_per_gpu)}; a record needs a measured, "
                               "positive throughput")
    settings = {k: v for k, v in performance.items()
                if k in RunRecordEntry.model_fields and k not in _MAPPED}
    left = sorted(k for k, v in performance.items()
                  if k not in settings and k not in _MAPPED and v)
    system = get_system(spec.system_name)
    batch, n_devices = document["batch"], document["search"]["devices"]
    measured: dict[str, Any] = {
        "tokens_per_s_per_gpu": tokens_per_s_per_gpu,
        "step_time_s": batch["global_seqs"] * batch["seq_len"] / (tokens_per_s_per_gpu
                                                                  * n_devices),
        "consistent": True}
    if memory_gib is not None:
        measured |= {"memory_gib": memory_gib, "memory_measure": "allocator"}
    return {
        "id": run_id, "source": source, "software": software,
        "stack": performance["stack"], "gpu": system.device.name,
        "system": system.name, "num_gpus": n_devices, "gpus_per_node": system.gpus_per_node,
        "scaleup_domain": system.scale_up_domain_gpus,
        "model": {"name": name, **document["model"]},
        "precision": precision, "parallelism": document["parallelism"], "batch": batch,
        "recompute": performance["checkpointing"], "routing": "dropless", **settings,
        "measured": measured, "flops_convention": "none_reported",
        "confidence": confidence,
        "notes": " ".join(filter(None, [notes, f"Job settings a record cannot hold, not "
                                               f"carried: {', '.join(left)}." if left else ""])),
    }


RECORD_FILE_HEADER = ("# Run records written by `mosaic ladder record` (docs/run_records.md): "
                      "`mosaic validate FILE`\n# compares the model with them, `mosaic "
                      "calibrate FILE --out CAL` fits to them.\nschema_version: 1\nruns:\n")


def add_to_record_file(entries: list[dict[str, Any]], path: Path) -> int:
    """Write ``entries`` to the run-record file ``path``: a new file, or appended to the
    ``runs`` list of an existing one with its text (comments included) kept. An id the file
    already holds, or a file whose list cannot be appended to, is refused. Returns the
    file's run count."""
    import textwrap

    import yaml

    from mosaic.io_atomic import write_text_atomic
    from mosaic.schema_validation import load_yaml_mapping, parse_yaml

    block = yaml.safe_dump(entries, sort_keys=False, default_flow_style=None, width=100)
    if not path.exists():
        write_text_atomic(path, RECORD_FILE_HEADER + textwrap.indent(block, "  "))
        return len(entries)
    old_text = path.read_text()
    runs = load_yaml_mapping(path).get("runs")
    if not isinstance(runs, list):
        raise MosaicInputError(f"{path}: not a run-record file (no runs: list); write to a "
                               "new file")
    held = {run.get("id") for run in runs if isinstance(run, dict)}
    repeated = [entry["id"] for entry in entries if entry["id"] in held]
    if repeated:
        raise MosaicInputError(f"{path} already holds run(s) {', '.join(repeated)}: remove them "
                               "there first, or give another --id-prefix")
    items = re.search(r"^runs:[ \t]*\n(?:[ \t]*(?:#.*)?\n)*([ \t]*)- ", old_text, re.MULTILINE)
    text = old_text.rstrip("\n") + "\n" + textwrap.indent(block, items.group(1) if items
                                                          else "  ")
    try:
        appended = parse_yaml(text, str(path))
    except MosaicInputError:  # the list was not the file's last block: text after it
        appended = None
    if not isinstance(appended, dict) or appended.get("runs") != [*runs, *entries]:
        raise MosaicInputError(f"{path}: its runs list is not the file's last block, so the "
                               "records cannot be appended to its text; write to a new file")
    write_text_atomic(path, text)
    return len(runs) + len(entries)
