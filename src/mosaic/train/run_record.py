"""A finished ``mosaic train`` run on GPUs as a run record (``mosaic ladder record``).

The measured loop's last step: the run's job as the performance model sees it
(:func:`mosaic.train.perf_job.perf_job_document`) with what the trainer measured, the
median step's tokens/s and the caching allocator's peak, so ``mosaic validate`` sets the
model's prediction beside the user's own GPUs and ``mosaic calibrate`` fits to them (a trial
found no way from ``result.json`` to either).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mosaic.config.job_schema import job_from_document
from mosaic.config.record_entry import run_record_entry
from mosaic.errors import MosaicInputError
from mosaic.hardware import get_system
from mosaic.limits import is_finite_number
from mosaic.train.config import train_config_from_mapping
from mosaic.train.perf_job import perf_job_document
from mosaic.train.result_files import RESULT_FILE, RUN_INFO_FILE, read_run_json


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise MosaicInputError(f"{path}: not found (a `mosaic train --out` folder holds "
                               f"{RESULT_FILE} and {RUN_INFO_FILE})")
    document = read_run_json(path, "mosaic train file")
    if not isinstance(document, dict):
        raise MosaicInputError(f"{path}: not a mosaic train file (a JSON object)")
    return document


def record_id(id_prefix: str, folder: Path) -> str:
    """``{id_prefix}-{folder name}`` (the prefix is its source key, which validate's
    leave-one-source-out holds out together); a '#' would break ``FILE#ID`` references."""
    run_id = f"{id_prefix}-{folder.name}"
    if "#" in run_id:
        raise MosaicInputError(f"run id {run_id!r}: '#' separates a file from a run id in "
                               "FILE#ID references; rename the folder or choose --id-prefix")
    return run_id


def record_for_run(folder: Path, system: str, run_id: str) -> dict[str, Any]:
    """The run-record entry, id ``run_id`` (:func:`record_id`), of the finished run in
    ``folder`` on the catalog node type ``system``."""
    from mosaic import __version__

    result = _read_json(folder / RESULT_FILE)
    info = _read_json(folder / RUN_INFO_FILE)
    if result.get("complete") is not True:
        raise MosaicInputError(f"{folder / RESULT_FILE}: the run stopped after "
                               f"{result.get('steps')} of {result.get('total_steps')} steps; "
                               "finish it first (its throughput is measured to the end)")
    device = str(info.get("device", ""))
    if not device.startswith("cuda"):
        raise MosaicInputError(f"{folder}: the run trained on {device or 'an unknown device'}; "
                               "a run record is a GPU run the performance model can predict")
    node = get_system(system)
    measured_on = (info.get("flops") or {}).get("device")
    if measured_on is not None and measured_on != node.device.name:
        raise MosaicInputError(f"{folder}: the run trained on {measured_on}, but --system "
                               f"{node.name} holds {node.device.name}")
    config = train_config_from_mapping(info.get("config"), f"{folder / RUN_INFO_FILE}: config")
    gpus = result.get("world_size")
    tokens_per_s = result.get("tokens_per_s")
    if (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1
            or not is_finite_number(tokens_per_s)):
        raise MosaicInputError(f"{folder / RESULT_FILE}: world_size and tokens_per_s must be "
                               "numbers (a `mosaic train` result)")
    if gpus % node.gpus_per_node:  # (docs/run_records.md: num_gpus fills whole hosts)
        raise MosaicInputError(
            f"{folder}: the run's {gpus} GPU(s) do not fill whole {node.name} nodes of "
            f"{node.gpus_per_node}: a run record, like the model's layouts, holds whole "
            f"nodes; for a run on part of a node, add a node type of {gpus} GPU(s) with "
            "that GPU to a catalog file (docs/hardware.md) and pass it: --catalog FILE "
            "--system NAME (and the same --catalog to validate)")
    document = perf_job_document(config, node.name, gpus)
    spec = job_from_document(document, f"{folder}: the run's perf job")
    return run_record_entry(
        spec, run_id=run_id, name=folder.name,
        source=f"mosaic train run {folder.resolve()} ({RESULT_FILE}: tokens/s at the median "
               "step time of the last process that trained it, its first step left out)",
        software=f"mosaic {__version__} reference trainer (FSDP2)",
        tokens_per_s_per_gpu=float(tokens_per_s) / gpus,
        memory_gib=result.get("peak_memory_gib"),
        notes="written by `mosaic ladder record`: the trainer's layout as "
              "mosaic/train/perf_job.py describes it (FSDP2 over every GPU, experts over "
              "run.expert_parallel ranks, no recompute, torchtitan's stack).")
