"""Grouped expert GEMMs (the MoE expert MLP, paper Sec. 5.3) under balanced and skewed
routing, forward and both backward GEMMs.

``groups`` local experts receive ``groups·m_per_group`` routed token copies in all:
balanced, every expert ``m_per_group``; skewed, Zipf loads (expert i gets a share
proportional to 1/(i+1)^alpha, at least one token). Implementation: ``torch._grouped_mm``
(one kernel for all groups; PyTorch >= 2.8, the kernel torchtitan's MoE uses) where it
runs, else one ``torch.mm`` per group (column ``impl``). Columns follow
``mosaic.perf.kernels.GroupedGemmTable`` (groups, m_per_group, n, k, dtype, time_s) with
(n, k) the forward GEMM's (out, in) features for every pass, plus ``pass`` and
``distribution``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mosaic.bench.cases import BenchOptions, Case, Unsupported, summary_columns
from mosaic.bench.device import ELEMENT_BYTES, check_memory, random, torch_dtype
from mosaic.bench.shapes import BenchShapes
from mosaic.bench.timer import time_call

FAMILY = "grouped"
PASSES = ("fwd", "dgrad", "wgrad")
DISTRIBUTIONS = ("balanced", "skewed")


def expert_loads(groups: int, m_per_group: int, distribution: str, alpha: float
                 ) -> np.ndarray:
    """Tokens per expert summing to groups·m_per_group (largest-remainder rounding)."""
    total = groups * m_per_group
    if distribution == "balanced":
        return np.full(groups, m_per_group, dtype=np.int64)
    weights = 1.0 / np.arange(1, groups + 1, dtype=float) ** alpha
    spare = total - groups  # one token each first
    exact = spare * weights / weights.sum()
    loads = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - loads), kind="stable")
    loads[order[: spare - int(loads.sum())]] += 1
    return loads + 1


def build_cases(shapes: BenchShapes, options: BenchOptions) -> list[Case]:
    cases: dict[str, Case] = {}
    dtypes = [d for d in options.dtypes if d in ("bf16", "fp16", "fp32")] or ["bf16"]
    for dtype in dtypes:
        for s in shapes.grouped:
            for distribution in DISTRIBUTIONS:
                for name in PASSES:
                    key = f"{dtype}:{distribution}:{name}:{s.groups}x{s.m_per_group}x{s.n}x{s.k}"
                    cases.setdefault(key, Case(FAMILY, key, {
                        "dtype": dtype, "groups": s.groups, "m_per_group": s.m_per_group,
                        "n": s.n, "k": s.k, "pass": name, "distribution": distribution,
                        "source": s.source}))
    return list(cases.values())


def _loop(name: str, x: Any, w: Any, dy: Any, loads: np.ndarray) -> Any:
    import torch

    bounds = np.concatenate([[0], np.cumsum(loads)])

    def call() -> Any:
        outs = []
        for g in range(len(loads)):
            lo, hi = int(bounds[g]), int(bounds[g + 1])
            if name == "fwd":
                outs.append(torch.mm(x[lo:hi], w[g]))
            elif name == "dgrad":
                outs.append(torch.mm(dy[lo:hi], w[g].t()))
            else:
                outs.append(torch.mm(x[lo:hi].t(), dy[lo:hi]))
        return outs

    return call


def _grouped_mm(name: str, x: Any, w: Any, dy: Any, loads: np.ndarray) -> Any:
    """torch._grouped_mm calls: 2d x 3d with offsets along the tokens (fwd, dgrad), 2d x 2d
    with offsets along the reduction (wgrad), second operand column-major as the kernel
    expects (PyTorch test_matmul_cuda.py grouped-mm tests)."""
    import torch

    offs = torch.tensor(np.cumsum(loads), dtype=torch.int32, device=x.device)
    if name == "fwd":
        w_cm = w.transpose(-2, -1).contiguous().transpose(-2, -1)  # [g, k, n] column-major
        return lambda: torch._grouped_mm(x, w_cm, offs=offs)
    if name == "dgrad":
        wt = w.transpose(-2, -1)  # [g, n, k] view of the row-major [g, k, n]: column-major
        return lambda: torch._grouped_mm(dy, wt, offs=offs)
    xt, dyt = x.t().contiguous(), dy.t().contiguous()  # [k, T], [n, T]
    return lambda: torch._grouped_mm(xt, dyt.t(), offs=offs)


def measure(case: Case, device: Any, options: BenchOptions) -> dict[str, Any]:
    """Time one grouped GEMM case (grouped_mm, else a loop of mm)."""
    import torch

    c = case.columns
    groups, m, n, k, dtype = c["groups"], c["m_per_group"], c["n"], c["k"], c["dtype"]
    loads = expert_loads(groups, m, c["distribution"], options.skew_alpha)
    tokens = int(loads.sum())
    element = ELEMENT_BYTES[dtype]
    check_memory((tokens * (k + n) + groups * k * n * 2) * element, options.max_tensor_bytes,
                 device)
    t = torch_dtype(dtype)
    x, dy = random((tokens, k), device, t), random((tokens, n), device, t)
    w = random((groups, k, n), device, t)
    impl, call = "loop", _loop(c["pass"], x, w, dy, loads)
    if hasattr(torch, "_grouped_mm"):
        try:
            candidate = _grouped_mm(c["pass"], x, w, dy, loads)
            candidate()
            impl, call = "grouped_mm", candidate
        except (RuntimeError, TypeError, ValueError):
            pass
    try:
        summary, calls = time_call(call, device, options.policy)
    except RuntimeError as exc:
        raise Unsupported(str(exc).splitlines()[0][:120]) from None
    flops = 2.0 * tokens * n * k
    return {**summary_columns(summary, calls), "impl": impl, "flops": flops,
            "tflops": flops / summary.time_s / 1e12,
            "max_over_mean": float(loads.max() / loads.mean())}
