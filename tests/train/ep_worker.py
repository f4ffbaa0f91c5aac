"""Worker for test_distributed: expert parallelism when one rank receives no token.

Run under torchrun with 2 processes. The controller bias sends every token to experts 0
and 1, both on rank 0, so rank 1's experts get nothing; outputs and expert gradients must
still equal those of the unsplit model (and no rank may skip a backward collective).
"""

import copy
import sys

import torch
import torch.distributed as dist

from mosaic.train.config import LadderModel, RoutingConfig, ladder_rung_geometry
from mosaic.train.expert_parallel import build_expert_parallel, split_experts
from mosaic.train.model import MoETransformer


def main() -> int:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    geometry = ladder_rung_geometry(
        LadderModel(q=1, experts=8, top_k=2, split_factor=2, head_dim=8, kv_heads=2), 64)
    full = MoETransformer(geometry, RoutingConfig(tau=0.0))
    split = copy.deepcopy(full)
    ep = build_expert_parallel(2, rank, 2, 8)
    split_experts(split, ep)
    for model in (full, split):
        for layer in model.moe_layers:
            layer.bias[:2] = 10.0  # experts 0 and 1 (rank 0) win every token
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(rank))
    outputs = []
    for model in (full, split):
        logits, aux = model(tokens)
        logits.square().mean().backward()
        outputs.append(logits)
    torch.testing.assert_close(outputs[0], outputs[1])
    assert int(aux[0].counts[2:].sum()) == 0  # rank 1's experts received nothing
    lo, hi = ep.first_expert, ep.first_expert + ep.local_experts
    for a, b in zip(full.moe_layers, split.moe_layers, strict=True):
        for name in ("w1", "w3", "w2"):
            summed = getattr(a.routed, name).grad.clone()
            dist.all_reduce(summed)  # the unsplit model's gradient, summed over both ranks
            torch.testing.assert_close(getattr(b.routed, name).grad, summed[lo:hi])
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
