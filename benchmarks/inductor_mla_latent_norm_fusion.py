"""What torch.compile makes of MLA's latent RMSNorms (q_norm, kv_norm), on the CPU.

    PYTHONPATH=src .venv/bin/python benchmarks/inductor_mla_latent_norm_fusion.py

Compiles the latent paths of torchtitan's DeepSeek-V3 attention (models/deepseek_v3/model/
model.py Attention.forward): the query ``wq_b(q_norm(wq_a(x)))`` and the key/value
``kv, k_pe = split(wkv_a(x), [kv_lora_rank, rope])``, RoPE on ``k_pe`` (rotate_half here),
``wkv_b(kv_norm(kv))``; with and without the norms, runs a forward and a backward, and prints
each graph's kernel calls (GEMMs are extern calls). Inductor's scheduler decides the fusions
for every backend; the CPU backend is what runs here without a GPU.

With torch 2.13: the query norm adds one forward kernel (reads the latent, writes the normed
latent the GEMM reads) and one backward kernel (reads dy and the latent, writes dx), 4 + 6 B
per element. The kv norm adds the same forward kernel, but its backward kernel writes dx
straight into the gradient of wkv_a's output, where the graph without it has a kernel copying
dkv there (the split's backward): 4 + 2 B per element (perf/elementwise_traffic.py, INDUCTOR
q_latent_norm_per_element and kv_latent_norm_per_element). The CPU kernel sums the weight
gradient in a second loop over dy and x; on a GPU that sum is folded into the same pass by
Inductor's mix-order reduction (as for QK-norm), which this script cannot show.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from torch._inductor.utils import run_and_get_code

BATCH, SEQ, DIM, HEADS = 2, 64, 256, 4
Q_LORA, KV_LORA, NOPE, ROPE, V = 384, 512, 128, 64, 128


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LatentPaths(nn.Module):
    def __init__(self, norms: bool) -> None:
        super().__init__()
        self.wq_a = nn.Linear(DIM, Q_LORA, bias=False)
        self.wq_b = nn.Linear(Q_LORA, HEADS * (NOPE + ROPE), bias=False)
        self.wkv_a = nn.Linear(DIM, KV_LORA + ROPE, bias=False)
        self.wkv_b = nn.Linear(KV_LORA, HEADS * (NOPE + V), bias=False)
        self.q_norm = nn.RMSNorm(Q_LORA, eps=1e-6) if norms else nn.Identity()
        self.kv_norm = nn.RMSNorm(KV_LORA, eps=1e-6) if norms else nn.Identity()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        q = self.wq_b(self.q_norm(self.wq_a(x)))
        kv, k_pe = torch.split(self.wkv_a(x), [KV_LORA, ROPE], dim=-1)
        k_pe = k_pe * cos + _rotate_half(k_pe) * sin
        return q, self.wkv_b(self.kv_norm(kv)), k_pe


def kernel_calls(norms: bool) -> list[list[str]]:
    """The kernel calls of each compiled graph (forward, then backward)."""
    torch._dynamo.reset()
    module = torch.compile(LatentPaths(norms))
    x = torch.randn(BATCH, SEQ, DIM, requires_grad=True)
    cos, sin = torch.randn(SEQ, ROPE), torch.randn(SEQ, ROPE)

    def step() -> None:
        sum(out.sum() for out in module(x, cos, sin)).backward()

    _, sources = run_and_get_code(step)
    pattern = re.compile(r"^\s*((?:\w*fused\w*|extern_kernels\.\w+)\(.*\))\s*$", re.MULTILINE)
    return [pattern.findall(code) for code in sources]


def main() -> None:
    print(f"torch {torch.__version__}")
    for norms in (False, True):
        print(f"latent norms {'on' if norms else 'off'}:")
        for name, calls in zip(("forward", "backward"), kernel_calls(norms), strict=False):
            fused = sum("fused" in call for call in calls)
            print(f"  {name}: {fused} fused kernel(s), {len(calls) - fused} GEMM(s)")
            for call in calls:
                print(f"    {call}")


if __name__ == "__main__":
    main()
