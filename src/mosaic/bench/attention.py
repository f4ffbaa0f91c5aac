"""Causal attention forward and backward through torch SDPA, per backend.

Backends (torch.nn.attention.SDPBackend): cudnn (cuDNN fused attention), flash
(FlashAttention-2), efficient (memory-efficient xformers kernel), math (reference);
https://pytorch.org/docs/stable/generated/torch.nn.attention.sdpa_kernel.html. A backend
that cannot run a shape is recorded as skipped. Backward is timed alone: one forward
builds the graph, each timed call is ``torch.autograd.grad`` with ``retain_graph``.
FLOPs as the model counts them (``mosaic.perf.kernels.flash_attention_flops``).
"""

from __future__ import annotations

import re
from typing import Any

from mosaic.bench.cases import BenchOptions, Case, Unsupported, summary_columns
from mosaic.bench.device import check_memory, random
from mosaic.bench.shapes import BenchShapes
from mosaic.bench.timer import time_call

FAMILY = "attention"
BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION",
            "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


def build_cases(shapes: BenchShapes, options: BenchOptions) -> list[Case]:
    cases = []
    for s in shapes.attention:
        for backend in options.attention_backends:
            for name in ("fwd", "bwd"):
                key = (f"{backend}:{name}:b{s.batch}h{s.heads}kv{s.kv_heads}"
                       f"s{s.seq}d{s.head_dim}")
                cases.append(Case(FAMILY, key, {
                    "backend": backend, "pass": name, "batch": s.batch, "heads": s.heads,
                    "kv_heads": s.kv_heads, "seq": s.seq, "head_dim": s.head_dim,
                    "causal": True, "source": s.source}))
    return cases


# A skip reason is one CSV cell: a whole sentence, never cut mid-phrase.
MAX_REASON_CHARS = 240


def whole_sentences(message: str) -> str:
    """An error message on one line: as many whole sentences as fit in MAX_REASON_CHARS
    (at least the first, shortened at a word if it alone is longer)."""
    text = " ".join(message.split())
    kept = ""
    for sentence in re.split(r"(?<=\.)\s+", text):
        candidate = f"{kept} {sentence}".strip()
        if len(candidate) > MAX_REASON_CHARS:
            break
        kept = candidate
    return kept or text[:MAX_REASON_CHARS].rsplit(" ", 1)[0] + " ..."


def measure(case: Case, device: Any, options: BenchOptions) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from mosaic.perf.kernels import flash_attention_flops

    c = case.columns
    b, h, kv, s, d = c["batch"], c["heads"], c["kv_heads"], c["seq"], c["head_dim"]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    element = 2 if dtype is torch.bfloat16 else 4
    check_memory(3 * b * (h + 2 * kv) * s * d * element, options.max_tensor_bytes, device)
    backend = getattr(SDPBackend, BACKENDS[c["backend"]])
    backward = c["pass"] == "bwd"
    q = random((b, h, s, d), device, dtype, requires_grad=backward)
    k = random((b, kv, s, d), device, dtype, requires_grad=backward)
    v = random((b, kv, s, d), device, dtype, requires_grad=backward)
    gqa = {"enable_gqa": True} if kv != h else {}

    def forward() -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

    with sdpa_kernel([backend]):
        try:
            if backward:
                out = forward()
                grad = torch.ones_like(out)

                def call() -> Any:
                    return torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
            else:
                call = forward
            call()
            summary, calls = time_call(call, device, options.policy)
        except RuntimeError as exc:
            if "No viable backend" in str(exc):
                # torch's own words speak of kernels it turned off: here only this case's
                # backend was allowed, and it cannot run it (a trial on CPU)
                raise Unsupported(f"the {c['backend']} kernel ({BACKENDS[c['backend']]}) "
                                  f"does not run this case on {device.type} in "
                                  f"{str(dtype).removeprefix('torch.')}; torch offers no "
                                  "such kernel here") from None
            raise Unsupported(whole_sentences(str(exc))) from None
    flops = float(flash_attention_flops(b, h, s, s, d, True, backward=backward))
    return {**summary_columns(summary, calls), "dtype": str(dtype).removeprefix("torch."),
            "flops": flops, "tflops": flops / summary.time_s / 1e12}
