"""Expert parallelism: each rank of an expert-parallel group holds E/ep routed experts.

Tokens go to the rank that owns their expert with an all-to-all and come back with a
second one (the GShard/DeepSpeed-MoE dispatch-combine; Lepikhin et al., 2020, Sec. 3.2),
both differentiable (``torch.distributed.nn.functional.all_to_all_single``). Groups are
consecutive ranks: with world size W and degree ep, ranks k·ep … k·ep + ep − 1 form expert
group k, and the W/ep ranks with the same position in their group hold the same experts
(their "expert data-parallel" group, over which expert gradients are summed). Expert
weights are left out of FSDP (``ignored_params``); everything else is sharded as before.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from mosaic.errors import MosaicInputError

# The autograd all-to-all lives on in torch.distributed.nn.functional (deprecated in favour
# of a private module); silence its per-call FutureWarning only.
warnings.filterwarnings("ignore", message=r".*all_to_all_single is deprecated.*",
                        category=FutureWarning)


@dataclass(frozen=True)
class ExpertParallel:
    """This rank's place in the expert-parallel layout."""

    size: int  # ep degree
    rank: int  # position inside the expert group
    group: Any  # the expert group (ep ranks that exchange tokens)
    replica_group: Any  # ranks holding the same experts (None when W == ep)
    experts: int  # E, all experts

    @property
    def local_experts(self) -> int:
        return self.experts // self.size

    @property
    def first_expert(self) -> int:
        return self.rank * self.local_experts


def build_expert_parallel(world_size: int, rank: int, degree: int,
                          experts: int) -> ExpertParallel:
    """Create the process groups (every rank calls this, in the same order)."""
    if world_size % degree:
        raise MosaicInputError(f"run.expert_parallel {degree} must divide the number of "
                               f"processes {world_size}")
    if experts % degree:
        raise MosaicInputError(f"run.expert_parallel {degree} must divide the experts E = "
                               f"{experts}")
    group = replica = None
    for k in range(world_size // degree):  # new_group is collective: all ranks, same order
        members = list(range(k * degree, (k + 1) * degree))
        created = dist.new_group(members)
        if rank in members:
            group = created
    if world_size > degree:
        for position in range(degree):
            members = list(range(position, world_size, degree))
            created = dist.new_group(members)
            if rank in members:
                replica = created
    return ExpertParallel(degree, rank % degree, group, replica, experts)


def split_experts(model: nn.Module, ep: ExpertParallel) -> list[nn.Parameter]:
    """Keep only this rank's slice of every routed-expert tensor; returns those parameters."""
    local: list[nn.Parameter] = []
    lo, hi = ep.first_expert, ep.first_expert + ep.local_experts
    for layer in model.moe_layers:
        routed = layer.routed
        for name in ("w1", "w3", "w2"):
            full = getattr(routed, name)
            param = nn.Parameter(full.detach()[lo:hi].clone())
            setattr(routed, name, param)
            local.append(param)
        routed.ep = ep
    return local


def dispatch_and_compute(routed: nn.Module, x: torch.Tensor,
                         counts: torch.Tensor) -> torch.Tensor:
    """Send tokens (sorted by global expert) to their experts' ranks, compute, send back."""
    from torch.distributed.nn.functional import all_to_all_single

    ep: ExpertParallel = routed.ep
    per_rank = counts.view(ep.size, ep.local_experts)  # [destination, local expert]
    send_splits = per_rank.sum(dim=1)
    received_counts = torch.empty_like(per_rank)  # [source, local expert]
    dist.all_to_all_single(received_counts, per_rank.contiguous(), group=ep.group)
    recv_splits = received_counts.sum(dim=1)
    send_list, recv_list = send_splits.tolist(), recv_splits.tolist()
    received = all_to_all_single(x.new_empty(int(sum(recv_list)), x.shape[1]), x.contiguous(),
                                 recv_list, send_list, group=ep.group)
    # Arrived in (source, expert) blocks; the local experts want (expert, source) blocks.
    block = torch.arange(ep.size * ep.local_experts, device=x.device)
    source, expert = block // ep.local_experts, block % ep.local_experts
    key = torch.repeat_interleave(expert * ep.size + source, received_counts.reshape(-1))
    order = torch.argsort(key, stable=True)
    out = routed.compute_local(received[order], received_counts.sum(dim=0))
    back = out[torch.argsort(order)]
    return all_to_all_single(x.new_empty(x.shape[0], out.shape[1]).to(back.dtype), back,
                             send_list, recv_list, group=ep.group)


def reduce_expert_gradients(params: list[nn.Parameter], ep: ExpertParallel,
                            world_size: int) -> None:
    """Sum expert gradients over replicas and divide by W: the gradient of the mean loss.

    Each rank's loss is its own mean; the combine all-to-all already brings every token's
    gradient home to its expert, so a replica's gradient is the sum over its group's ranks.
    """
    for param in params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        if ep.replica_group is not None:
            dist.all_reduce(param.grad, group=ep.replica_group)
        param.grad.div_(world_size)


def expert_grad_sq_norm(params: list[nn.Parameter], ep: ExpertParallel) -> torch.Tensor:
    """Squared norm of all experts' gradients (each expert counted once)."""
    local = sum((p.grad.float().pow(2).sum() for p in params if p.grad is not None),
                torch.zeros((), device=params[0].device))
    dist.all_reduce(local, group=ep.group)
    return local


def gather_full(tensor: torch.Tensor, ep: ExpertParallel) -> torch.Tensor:
    """The (E, ...) tensor from every rank's (E/ep, ...) slice, on every rank (CPU)."""
    parts = [torch.empty_like(tensor) for _ in range(ep.size)]
    dist.all_gather(parts, tensor.contiguous(), group=ep.group)
    return torch.cat(parts).cpu()


def local_slice(tensor: torch.Tensor, ep: ExpertParallel) -> torch.Tensor:
    return tensor[ep.first_expert:ep.first_expert + ep.local_experts].clone()
