"""Process-group setup under ``torchrun`` and FSDP2 data parallelism.

``torchrun`` exports RANK, WORLD_SIZE and LOCAL_RANK; with WORLD_SIZE > 1 the trainer joins
a process group (NCCL on CUDA, gloo on CPU) and shards every block, then the whole model,
with FSDP2's ``fully_shard`` (torch.distributed.fsdp, PyTorch >= 2.6 public API; see
https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html). Without those
variables the same code runs as one plain process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from mosaic.errors import MosaicInputError


@dataclass(frozen=True)
class DistContext:
    """Where this process sits: rank, world size and its device."""

    rank: int
    world_size: int
    device: torch.device
    owns_group: bool  # this module created the process group and destroys it

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _pick_device(preference: str, local_rank: int) -> torch.device:
    if preference == "cpu" or (preference == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise MosaicInputError("run.device is 'cuda' but no CUDA device is available: set "
                               "run.device: cpu (or auto)")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_distributed(preference: str = "auto") -> DistContext:
    """Join the torchrun process group if WORLD_SIZE > 1; otherwise a single process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _pick_device(preference, local_rank)
    if world_size <= 1:
        return DistContext(0, 1, device, owns_group=False)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistContext(dist.get_rank(), dist.get_world_size(), device, owns_group=owns)


def shard_model(model: nn.Module, blocks: nn.ModuleList, context: DistContext,
                ignored: set[nn.Parameter] | None = None) -> nn.Module:
    """FSDP2: each transformer block is one all-gather unit, the root holds the rest.

    ``ignored`` parameters (expert-parallel experts) stay unsharded, plain tensors.
    """
    if not context.distributed:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(context.device.type, (context.world_size,))
    # ignored_params exists from torch 2.7 (huggingface/accelerate#3924): pass it only if used.
    extra = {"ignored_params": ignored} if ignored else {}
    for block in blocks:
        fully_shard(block, mesh=mesh, **extra)
    fully_shard(model, mesh=mesh, **extra)
    return model


def all_reduce_sum(tensor: torch.Tensor, context: DistContext) -> torch.Tensor:
    """Sum over ranks in place (no-op for a single process)."""
    if context.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: torch.Tensor, context: DistContext) -> torch.Tensor:
    """The largest over ranks, in place (no-op for a single process)."""
    if context.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def barrier(context: DistContext) -> None:
    if context.distributed:
        dist.barrier()


def shutdown(context: DistContext) -> None:
    if context.owns_group and dist.is_initialized():
        dist.destroy_process_group()
