"""Torch device helpers shared by the kernel families (torch imported lazily)."""

from __future__ import annotations

from typing import Any

from mosaic.bench.cases import Unsupported
from mosaic.units import GIB

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "mxfp8": 1}
SEED = 1234


def resolve_device(name: str | None) -> Any:
    """``cuda`` when available (or the named device), else ``cpu``."""
    import torch

    from mosaic.errors import MosaicInputError

    if name:
        try:
            device = torch.device(name)
        except RuntimeError:
            raise MosaicInputError(f"--device {name!r}: not a torch device (cpu, cuda, "
                                   "cuda:N)") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise MosaicInputError(f"--device {name}: this torch build sees no CUDA device "
                                   f"(torch {torch.__version__}); use --device cpu or leave "
                                   "--device out")
        try:  # a device type torch knows but cannot use here (mps, xpu without the backend)
            torch.Generator(device=device)
            torch.zeros(1, device=device).cpu()
        except (RuntimeError, NotImplementedError, AssertionError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise MosaicInputError(f"--device {name}: torch cannot run on it here ({reason}); "
                                   "use cpu or cuda[:N]") from None
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def default_dtypes(device_type: str) -> str:
    """The GEMM precisions a kernel run measures unless told (``--dtypes``): the training
    lanes on a GPU; fp32 on a CPU, which is what a CPU run computes in (the trainer's MFU
    peak there), and where bf16 without native instructions (no AVX-512 BF16 / AMX) ran about
    50x slower than fp32 in a trial (0.33 vs 16.6 GFLOP/s at 512^3: one 2048^3 call 71 s,
    the CPU test run past 15 minutes)."""
    return "fp32" if device_type == "cpu" else "bf16,fp8,mxfp8"


def torch_dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def fp8_supported(device: Any) -> bool:
    """FP8 tensor-core GEMMs (torch._scaled_mm) need CUDA compute capability >= 8.9
    (Ada/Hopper/Blackwell; NVIDIA Transformer Engine FP8 documentation)."""
    import torch

    if device.type != "cuda" or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def random(shape: tuple[int, ...], device: Any, dtype: Any, requires_grad: bool = False
           ) -> Any:
    """A seeded normal tensor, generated on ``device`` (a 6144 x 257536 LM-head weight would
    take seconds on a host CPU); values do not change timings, the seed keeps runs equal."""
    import torch

    generator = torch.Generator(device=device).manual_seed(SEED)
    direct = dtype in (torch.float32, torch.float16, torch.bfloat16)
    tensor = torch.randn(shape, generator=generator, device=device,
                         dtype=dtype if direct else torch.float32)
    return tensor.to(dtype=dtype).requires_grad_(requires_grad)


def check_memory(needed_bytes: float, cap_bytes: float, device: Any) -> None:
    """Unsupported when a case needs more than the cap or (on CUDA) 90% of free memory."""
    import torch

    if needed_bytes > cap_bytes:
        raise Unsupported(f"needs {needed_bytes / GIB:.2f} GiB > cap "
                          f"{cap_bytes / GIB:.2f} GiB (--max-tensor-bytes)")
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if needed_bytes > 0.9 * free:
            raise Unsupported(f"needs {needed_bytes / GIB:.2f} GiB, "
                              f"{free / GIB:.2f} GiB free")
