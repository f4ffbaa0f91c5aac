"""One accelerator: dense peak and measured achievable FLOP/s per dtype, HBM, scale-up link.

Conventions (docs/hardware.md): SI units; peak rates are dense (no 2:4 sparsity); the
scale-up bandwidth is per GPU and per direction. Every number keeps its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mosaic.errors import MosaicInputError, shown

#: Compute precisions a device may list, in the spelling used everywhere in mosaic.
DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")
# the paper's MFU is against the dense bf16 datasheet peak (Sec. 2.1), whatever the GEMMs run in
MFU_PEAK_DTYPE = "bf16"

_DTYPE_ALIASES: Mapping[str, str] = {
    "float32": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "float4": "fp4",
}


def normalize_dtype(dtype: str) -> str:
    """Canonical dtype name ('BF16', 'bfloat16' -> 'bf16'); MosaicInputError if unknown."""
    key = dtype.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise MosaicInputError(
            f"unknown dtype {shown(dtype)}: allowed are {', '.join(DTYPES)} "
            f"(or {', '.join(sorted(_DTYPE_ALIASES))})"
        )
    return key


@dataclass(frozen=True)
class Device:
    """An accelerator as the performance model sees it (per GPU, SI units).

    Attributes:
        name: canonical catalog name, e.g. "H100-SXM-80GB".
        aliases: other names that resolve to this device.
        vendor: "NVIDIA", "AMD", ...
        description: one line for people.
        peak_flops_per_s: datasheet dense peak FLOP/s by dtype (tensor cores; fp32 is the
            vector rate). Sparse datasheet figures are halved before they get here.
        achievable_flops_per_s: measured best large-GEMM FLOP/s by dtype; a subset of the
            peak dtypes, possibly empty.
        hbm_bytes: device memory capacity in bytes, as CUDA reports it (docs/hardware.md).
        hbm_bw_bytes_per_s: device memory bandwidth in bytes/s.
        scale_up_bw_bytes_per_s: NVLink (or equivalent) bandwidth per GPU, one direction.
        scale_up_link_bw_bytes_per_s: on a switchless mesh (AMD Infinity Fabric), the one
            direct link to each peer, one direction: a GPU reaches k-1 peers of its domain
            at most over k-1 such links; None = a switched fabric (NVSwitch), where any
            group of the domain gets ``scale_up_bw_bytes_per_s``.
        sources: provenance of every number, keyed by field path ("hbm_bytes",
            "peak_flops_per_s.bf16", ...).
        architecture: GPU generation ("ampere", "hopper", "blackwell", ...); it selects
            generation-specific software defaults (attention kernels, NCCL protocols, MoE
            dispatchers). None = not stated (generation-specific defaults do not apply).
        kernel_fit: the device whose measured kernel fits (GEMM, attention, collectives)
            this one uses, e.g. "B200" for a GB200; None = no fitted kernels of its own.
        default_system: the node type a bare GPU name stands for (``plan --gpu``, a job's
            ``hardware.gpu``); None = the first catalog node type holding it.
        sfu_exp2_per_s: special-function-unit exponentials (MUFU.EX2) per second at the
            clock of the dense bf16 peak (SMs x ex2 per clock per SM x that clock), the
            rate that bounds flash-attention softmax; None = not stated.
        host_link_bw_bytes_per_s: GPU-to-host link bandwidth, one direction (PCIe, or
            NVLink-C2C to a Grace CPU), the rate of activation offload copies; None = not
            stated.
        sm_count: streaming multiprocessors, which set how many waves a GEMM's tiles take;
            None = not stated (the fitted device's count, perf.kernels.SM_COUNT).
    """

    name: str
    aliases: tuple[str, ...]
    vendor: str
    description: str
    peak_flops_per_s: Mapping[str, float]
    achievable_flops_per_s: Mapping[str, float]
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    scale_up_bw_bytes_per_s: float
    sources: Mapping[str, str]
    architecture: str | None = None
    kernel_fit: str | None = None
    default_system: str | None = None
    sfu_exp2_per_s: float | None = None
    host_link_bw_bytes_per_s: float | None = None
    sm_count: int | None = None
    scale_up_link_bw_bytes_per_s: float | None = None

    def __hash__(self) -> int:
        # Mapping fields are not hashable; the catalog guarantees unique names.
        return hash(("Device", self.name))

    @property
    def runs_non_tn_fp8_gemms(self) -> bool:
        """FP8 GEMMs in any operand layout, so an FP8 tensor keeps one copy for both (no
        transposed copy): data-centre Blackwell, compute capability 10.x
        (Transformer Engine utils.py is_non_tn_fp8_gemm_supported; float8_tensor.py
        allocates no ``_transpose`` there) @ d0067d0da."""
        return self.architecture == "blackwell"

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Dtypes with a datasheet peak on this device, in DTYPES order."""
        return tuple(d for d in DTYPES if d in self.peak_flops_per_s)

    @property
    def mfu_peak_flops_per_s(self) -> float:
        """The MFU denominator: the dense bf16 datasheet peak, whatever a run computes in
        (the paper's MFU, Sec. 2.1 and Eq. 1; GUIDE.md "Peak FLOP/s")."""
        return self.peak_flops_per_s_for(MFU_PEAK_DTYPE)

    def peak_flops_per_s_for(self, dtype: str) -> float:
        """Dense datasheet peak FLOP/s for `dtype`; MosaicInputError if the device lacks it."""
        key = normalize_dtype(dtype)
        if key not in self.peak_flops_per_s:
            raise MosaicInputError(
                f"device {shown(self.name)} has no {key} peak: it lists {', '.join(self.dtypes)}"
            )
        return self.peak_flops_per_s[key]

    def achievable_flops_per_s_for(self, dtype: str) -> float | None:
        """Measured large-GEMM FLOP/s for `dtype`, or None when no measurement is recorded."""
        return self.achievable_flops_per_s.get(normalize_dtype(dtype))

    def source(self, field: str) -> str:
        """Provenance of one number, e.g. source("peak_flops_per_s.bf16")."""
        if field not in self.sources:
            raise MosaicInputError(
                f"device {shown(self.name)} has no field {shown(field)}: known are "
                f"{', '.join(sorted(self.sources))}"
            )
        return self.sources[field]
