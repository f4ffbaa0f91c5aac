"""What torch.compile makes of a per-head q RMSNorm before RoPE (QK-norm), on the CPU.

    PYTHONPATH=src .venv/bin/python benchmarks/inductor_qk_norm_fusion.py

Compiles torchtitan's Qwen3 attention prologue, ``wq(x).view(b, s, heads, head_dim)``, then
``nn.RMSNorm(head_dim)`` (``q_norm``), then rotate_half RoPE, with and without the norm, runs
a forward and a backward, and prints the fused kernels Inductor generated for each graph (the
projection's GEMMs are extern calls, not listed). Inductor's scheduler decides the fusions
for every backend; the CPU backend is what runs here without a GPU. With torch 2.13 each
graph has one element-wise kernel with the norm as without it: the norm's reduction fuses
with the RoPE that reads its output, and its backward (the weight gradient's sum included)
with the RoPE backward, which then also reads the saved projection
(perf/elementwise_traffic.py, INDUCTOR qk_norm_per_element).
"""

from __future__ import annotations

import re

import torch
from torch import nn
from torch._inductor.utils import run_and_get_code

BATCH, SEQ, HEADS, HEAD_DIM = 2, 64, 4, 128


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class QueryPrologue(nn.Module):
    def __init__(self, qk_norm: bool) -> None:
        super().__init__()
        self.wq = nn.Linear(HEADS * HEAD_DIM, HEADS * HEAD_DIM, bias=False)
        self.q_norm = nn.RMSNorm(HEAD_DIM, eps=1e-6) if qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q = self.wq(x).view(BATCH, SEQ, HEADS, HEAD_DIM)
        if self.q_norm is not None:
            q = self.q_norm(q)
        return q * cos + _rotate_half(q) * sin


def fused_kernels(qk_norm: bool) -> list[list[str]]:
    """Names of the fused kernels of each compiled graph (forward, then backward)."""
    torch._dynamo.reset()
    module = torch.compile(QueryPrologue(qk_norm))
    x = torch.randn(BATCH, SEQ, HEADS * HEAD_DIM, requires_grad=True)
    cos = torch.randn(1, SEQ, 1, HEAD_DIM)
    sin = torch.randn(1, SEQ, 1, HEAD_DIM)

    def step() -> None:
        module(x, cos, sin).sum().backward()

    _, sources = run_and_get_code(step)
    return [sorted(set(re.findall(r"^(\w*fused\w*) = async_compile", code, re.MULTILINE)))
            for code in sources]


def main() -> None:
    print(f"torch {torch.__version__}")
    for qk_norm in (False, True):
        graphs = fused_kernels(qk_norm)
        print(f"q_norm {'on' if qk_norm else 'off'}:")
        for name, kernels in zip(("forward", "backward"), graphs, strict=False):
            print(f"  {name}: {len(kernels)} fused kernel(s) {kernels}")


if __name__ == "__main__":
    main()
