"""A ``mosaic train`` job as the performance-model job that predicts it (``mosaic train JOB
--perf-job FILE``), so the trainer's measured step can be set beside ``mosaic perf``'s
(docs/train.md, "Measuring on a GPU"; a trial had to write that file by hand).

How the trainer runs (``mosaic.train.distributed``, ``expert_parallel``): every process holds
a data-parallel share of the batch, parameters sharded with FSDP2 over all processes when
there are more than one, experts split over groups of ``run.expert_parallel`` ranks, no tensor,
pipeline or context parallelism, no activation recomputation, bf16 autocast with fp32
master weights on CUDA. The closest stack the model knows is torchtitan (FSDP2, eager
PyTorch modules: docs/stacks.md).
"""

from __future__ import annotations

from typing import Any

from mosaic.config.convert import model_document
from mosaic.errors import MosaicInputError
from mosaic.train.config import TrainConfig

TRAINER_STACK = "torchtitan"


def perf_job_document(config: TrainConfig, system: str, gpus: int) -> dict[str, Any]:
    """The job document ``mosaic perf`` reads for ``config`` run on ``gpus`` GPUs of the
    catalog node type ``system``."""
    if gpus < 1:
        raise MosaicInputError(f"--gpus {gpus}: give the number of GPUs the job runs on (>= 1)")
    run = config.run
    if gpus % run.expert_parallel:
        raise MosaicInputError(f"run.expert_parallel {run.expert_parallel} does not divide "
                               f"--gpus {gpus}: the trainer carves expert groups out of the "
                               "data-parallel ranks")
    return {
        "model": model_document(config.geometry()),
        "batch": {"global_seqs": run.global_batch_seqs, "micro_seqs": run.micro_batch_seqs,
                  "seq_len": run.seq_len},
        "hardware": {"system": system},
        "search": {"devices": gpus},
        "parallelism": {"tp": 1, "pp": 1, "cp": 1, "ep": run.expert_parallel, "dp": gpus,
                        "sharding": "fsdp" if gpus > 1 else "none"},
        "performance": {"stack": TRAINER_STACK, "checkpointing": "none",
                        "precision": "fp32" if run.precision == "fp32" else "bf16"},
    }
