"""Dense GEMMs: the model's forward shapes and both backward GEMMs, plus a sweep of large
square GEMMs for the achievable peak (GUIDE.md: report it next to the datasheet peak).

For C[m,n] = A[m,k]·B[k,n] the backward runs dA[m,k] = dC[m,n]·B^T (m, k, n) and
dB[k,n] = A^T·dC (k, n, m) (Kaplan et al. 2020, the 2x backward FLOPs). Rows use the
columns of ``mosaic.perf.kernels.GemmTable`` (m, n, k, dtype, time_s) plus ``pass``.
FP8 runs ``torch._scaled_mm`` with per-tensor scales (operands pre-quantised: the timing
is the GEMM's, the casts are element-wise kernels priced separately). MXFP8 (OCP
Microscaling: one E8M0 scale per 32 elements along K; "OCP Microscaling Formats (MX)
Specification v1.0", 2023) runs ``torch._scaled_mm`` with block scales on Blackwell
(capability >= 10.0); the scale tensors hold the swizzled layout's element count,
round_up(rows, 128) x round_up(K/32, 4) (cuBLAS block-scaling layout, PyTorch
``_scaled_mm`` block-wise checks), all set to 1.0 (values do not change the timing).
"""

from __future__ import annotations

from typing import Any

from mosaic.bench.cases import BenchOptions, Case, Unsupported, summary_columns
from mosaic.bench.device import ELEMENT_BYTES, check_memory, fp8_supported, random, torch_dtype
from mosaic.bench.shapes import BenchShapes
from mosaic.bench.timer import time_call

FAMILY = "gemm"
FP8_ALIGNMENT = 16  # cuBLASLt FP8 GEMMs need dimensions divisible by 16
MX_BLOCK = 32  # elements per E8M0 scale along K (OCP MX v1.0)
MX_ALIGNMENT = 128  # MXFP8 GEMM dimensions: multiples of 128 (tile of the scale layout)


def passes(m: int, n: int, k: int) -> tuple[tuple[str, int, int, int], ...]:
    """(pass, m, n, k) of the forward GEMM and its two backward GEMMs."""
    return (("fwd", m, n, k), ("dgrad", m, k, n), ("wgrad", k, n, m))


def build_cases(shapes: BenchShapes, options: BenchOptions) -> list[Case]:
    """One case per distinct (dtype, m, n, k); the first pass and source that need it."""
    cases: dict[str, Case] = {}
    for dtype in options.dtypes:
        for shape in shapes.gemm:
            for name, m, n, k in passes(shape.m, shape.n, shape.k):
                key = f"{dtype}:{m}x{n}x{k}"
                cases.setdefault(key, Case(FAMILY, key, {
                    "dtype": dtype, "m": m, "n": n, "k": k, "pass": name,
                    "source": shape.source}))
        for size in shapes.peak_sizes:
            key = f"{dtype}:{size}x{size}x{size}"
            cases.setdefault(key, Case(FAMILY, key, {
                "dtype": dtype, "m": size, "n": size, "k": size, "pass": "peak",
                "source": "peak_sweep"}))
    return list(cases.values())


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def skip_reason(case: Case, device: Any) -> str | None:
    """Why ``device`` cannot run ``case`` before anything is allocated (the dry run lists it
    as skipped, as the run skips it: a trial's CPU dry run listed FP8 cases "to measure"),
    or None."""
    import torch

    c = case.columns
    m, n, k, dtype = c["m"], c["n"], c["k"], c["dtype"]
    if dtype == "mxfp8":
        e8m0 = getattr(torch, "float8_e8m0fnu", None)
        if (device.type != "cuda" or e8m0 is None
                or torch.cuda.get_device_capability(device) < (10, 0)):
            return ("mxfp8 GEMMs need a Blackwell GPU (capability >= 10.0) and torch with "
                    "float8_e8m0fnu")
        if any(x % MX_ALIGNMENT for x in (m, n, k)):
            return f"mxfp8 GEMMs need m, n, k divisible by {MX_ALIGNMENT}"
    if dtype == "fp8":
        if not fp8_supported(device):
            return "fp8 GEMMs need a CUDA device of compute capability >= 8.9"
        if any(x % FP8_ALIGNMENT for x in (m, n, k)):
            return f"fp8 GEMMs need m, n, k divisible by {FP8_ALIGNMENT}"
    return None


def _mxfp8_call(m: int, n: int, k: int, device: Any) -> Any:
    """MXFP8 GEMM on Blackwell (its device and alignment checked by :func:`skip_reason`)."""
    import torch

    e8m0 = torch.float8_e8m0fnu
    a = random((m, k), device, torch.bfloat16).to(torch.float8_e4m3fn)
    b = random((n, k), device, torch.bfloat16).to(torch.float8_e4m3fn).t()

    def ones(rows: int) -> Any:  # E8M0 bits 127 = 2^0
        count = _round_up(rows, 128) * _round_up(k // MX_BLOCK, 4)
        return torch.full((count,), 127, dtype=torch.uint8, device=device).view(e8m0)

    scale_a, scale_b = ones(m), ones(n)
    return lambda: torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b,
                                    out_dtype=torch.bfloat16)


def measure(case: Case, device: Any, options: BenchOptions) -> dict[str, Any]:
    """Time one GEMM case."""
    import torch

    c = case.columns
    m, n, k, dtype = c["m"], c["n"], c["k"], c["dtype"]
    # FP8 GEMMs write bf16 (out_dtype below); the others write their own dtype
    out_dtype = "bf16" if dtype in ("fp8", "mxfp8") else dtype
    operand_bytes = (m * k + k * n) * ELEMENT_BYTES[dtype] + m * n * ELEMENT_BYTES[out_dtype]
    reason = skip_reason(case, device)
    if reason is not None:
        raise Unsupported(reason)
    check_memory(operand_bytes, options.max_tensor_bytes, device)
    if dtype == "mxfp8":
        call = _mxfp8_call(m, n, k, device)
    elif dtype == "fp8":
        a = random((m, k), device, torch.bfloat16).to(torch.float8_e4m3fn)
        b = random((n, k), device, torch.bfloat16).to(torch.float8_e4m3fn).t()  # col-major
        scale = torch.ones((), device=device, dtype=torch.float32)

        def call() -> Any:
            return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale,
                                    out_dtype=torch.bfloat16)
    else:
        a = random((m, k), device, torch_dtype(dtype))
        b = random((k, n), device, torch_dtype(dtype))
        out = torch.empty((m, n), device=device, dtype=torch_dtype(dtype))

        def call() -> Any:
            return torch.mm(a, b, out=out)

    try:
        summary, calls = time_call(call, device, options.policy)
    except RuntimeError as exc:  # a kernel this build lacks (e.g. bf16 on an old GPU)
        raise Unsupported(str(exc).splitlines()[0][:120]) from None
    flops = 2.0 * m * n * k
    return {**summary_columns(summary, calls), "flops": flops,
            "tflops": flops / summary.time_s / 1e12}
