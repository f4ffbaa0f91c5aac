"""Element-wise, normalisation, cross-entropy and optimizer kernels, host launch cost and
the dropless-MoE host synchronisation (family ``kernels``).

Each row records ``moved_bytes``, the HBM traffic the kernel(s) must move, so that
bandwidth = moved_bytes / time_s:

* ``add`` (residual, bf16): read 2N, write N elements; also swept over sizes, the
  series the element-wise bandwidth and kernel latency are fitted to.
* ``swiglu`` (eager silu(g)·u, bf16): silu reads N and writes N, the product reads 2N
  and writes N: 5N elements.
* ``rmsnorm`` (bf16, torch.nn.functional.rms_norm): read N, write N.
* ``cross_entropy`` forward + backward over a vocabulary shard of logits: the model's
  18 B per logit (``mosaic.perf.step_time.CROSS_ENTROPY_BYTES_PER_LOGIT``).
* ``adamw`` one step on fp32 parameters: read p, g, m, v and write p, m, v = 28 B each
  (torch.optim.AdamW, fused on CUDA, foreach elsewhere).
* ``launch``: wall time per kernel of a chain of tiny eager kernels with no
  synchronisation: the host dispatch gap t_gap of paper Eq. 11.
* ``host_sync``: a tiny kernel followed by ``.item()``, the device-to-host round trip a
  dropless MoE layer pays to size its buffers (paper F.3).
"""

from __future__ import annotations

from typing import Any

from mosaic.bench.cases import BenchOptions, Case, Unsupported, summary_columns
from mosaic.bench.device import check_memory, random
from mosaic.bench.shapes import BenchShapes
from mosaic.bench.timer import time_call
from mosaic.perf.step_time import CROSS_ENTROPY_BYTES_PER_LOGIT
from mosaic.units import BF16_BYTES

FAMILY = "kernels"
LAUNCH_CHAIN = 64  # kernels per timed call of the launch case
ADAMW_BYTES_PER_PARAM = 28
CROSS_ENTROPY_MEMORY_BYTES_PER_LOGIT = 16  # bf16 logits + fp32 copy + fp32 grad + bf16 grad + fp32


def build_cases(shapes: BenchShapes, options: BenchOptions) -> list[Case]:
    cases: dict[str, Case] = {}

    def add(op: str, elements: int, moved_bytes: float, source: str, **extra: Any) -> None:
        key = f"{op}:{elements}" + "".join(f":{k}{v}" for k, v in extra.items())
        cases.setdefault(key, Case(FAMILY, key, {"op": op, "elements": elements,
                                                 "moved_bytes": moved_bytes,
                                                 "source": source, **extra}))

    for s in shapes.streams:
        n = s.residual_tokens * s.d_model
        add("add", n, 3 * n * BF16_BYTES, s.source)
        add("rmsnorm", n, 2 * n * BF16_BYTES, s.source, width=s.d_model)
        add("swiglu", s.tokens * s.width, 5 * s.tokens * s.width * BF16_BYTES, s.source,
            width=s.width)
        # Time is linear in tokens: large vocabularies are measured on as many tokens as
        # fit the memory cap (bf16 logits, fp32 copy, fp32 softmax, two gradients).
        tokens = max(1, min(s.tokens, int(options.max_tensor_bytes
                                          // (CROSS_ENTROPY_MEMORY_BYTES_PER_LOGIT * s.vocab))))
        add("cross_entropy", tokens * s.vocab, tokens * s.vocab
            * CROSS_ENTROPY_BYTES_PER_LOGIT, s.source, width=s.vocab)
    largest = max((s.tokens * max(s.d_model, s.width) for s in shapes.streams), default=1 << 20)
    size = 1 << 12
    while size <= max(largest, 1 << 16):
        add("add", size, 3 * size * BF16_BYTES, "size_sweep")
        size *= 4
    for params in shapes.optimizer_params:
        add("adamw", params, params * ADAMW_BYTES_PER_PARAM, "optimizer")
    add("launch", LAUNCH_CHAIN, 0.0, "host")
    add("host_sync", 1, 0.0, "host")
    return list(cases.values())


def _call(op: str, c: dict[str, Any], device: Any) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    bf16 = torch.bfloat16
    n = c["elements"]
    if op == "add":
        a, b = random((n,), device, bf16), random((n,), device, bf16)
        out = torch.empty_like(a)
        return lambda: torch.add(a, b, out=out)
    if op == "rmsnorm":
        width = c["width"]
        x = random((n // width, width), device, bf16)
        weight = torch.ones(width, device=device, dtype=bf16)
        return lambda: F.rms_norm(x, (width,), weight)
    if op == "swiglu":
        width = c["width"]
        g, u = (random((n // width, width), device, bf16) for _ in range(2))
        return lambda: F.silu(g) * u
    if op == "cross_entropy":
        vocab = c["width"]
        logits = random((n // vocab, vocab), device, bf16, requires_grad=True)
        target = torch.randint(0, vocab, (n // vocab,), device=device,
                               generator=torch.Generator(device=device).manual_seed(0))

        def cross_entropy() -> Any:
            loss = F.cross_entropy(logits.float(), target)
            return torch.autograd.grad(loss, logits)

        return cross_entropy
    if op == "adamw":
        p = random((n,), device, torch.float32, requires_grad=True)
        p.grad = random((n,), device, torch.float32)
        fused = {"fused": True} if device.type == "cuda" else {"foreach": True}
        optimizer = torch.optim.AdamW([p], lr=1e-4, **fused)
        return optimizer.step
    if op == "launch":
        x = torch.zeros(1, device=device)

        def chain() -> Any:
            for _ in range(LAUNCH_CHAIN):
                x.add_(1.0)

        return chain
    if op == "host_sync":
        x = torch.zeros(1, device=device)
        return lambda: (x + 1).item()
    raise Unsupported(f"unknown kernel op {op!r}")


def measure(case: Case, device: Any, options: BenchOptions) -> dict[str, Any]:
    c = case.columns
    resident = {"cross_entropy": CROSS_ENTROPY_MEMORY_BYTES_PER_LOGIT * c["elements"],
                "adamw": 16 * c["elements"]}.get(c["op"], c["moved_bytes"])
    check_memory(resident, options.max_tensor_bytes, device)
    try:
        call = _call(c["op"], c, device)
        call()
        summary, calls = time_call(call, device, options.policy)
    except RuntimeError as exc:
        raise Unsupported(str(exc).splitlines()[0][:120]) from None
    row = summary_columns(summary, calls)
    if c["op"] == "launch":  # the chain is timed end to end (no sync inside): per kernel
        for column in ("time_s", "p10_s", "p90_s", "min_s", "mean_s"):
            row[column] /= LAUNCH_CHAIN
    if c["moved_bytes"]:
        row["bandwidth_bytes_per_s"] = c["moved_bytes"] / row["time_s"]
    return row
