"""How much of a GPU's memory a plan may fill: the memory headroom policy, defined once.

The memory model (:mod:`mosaic.perf.memory`) predicts the caching allocator's peak: the
tensors a step holds plus a fixed 2 GiB ``runtime_reserve`` for what the allocator keeps
beyond them (library workspaces, cached blocks) at the scale of the published runs it was
compared with. It does not model fragmentation that grows past that (memory the caching
allocator holds in cached segments it cannot split to serve a request, "reserved but
unallocated"; PyTorch CUDA semantics docs, "Optimizing memory usage with
PYTORCH_CUDA_ALLOC_CONF"; pytorch/devlogs 2026-06-01 "When does fragmentation occur in the
CUDA caching allocator?"), transient peaks, or what lives outside the allocator (the CUDA
context and NCCL buffers: 0.7 GiB for plain data parallelism, 1.3 to 1.6 GiB with tp or pp
and ep 8, 4.8 GiB at ep 64; :mod:`mosaic.perf.device_memory`). That is
the headroom: a plan may fill ``usable_fraction · HBM`` and the rest absorbs them.

The default, 0.9, is the fraction frameworks that size their own memory pools choose by
default: vLLM's ``gpu_memory_utilization`` defaults to 0.9 of device memory (vLLM engine
arguments), and the vLLM-Omni guide "GPU Memory Calculation and Configuration"
(docs.vllm.ai/projects/vllm-omni) calls 1.0 "not recommended, leaves no buffer". A stack
whose documented setup differs carries its own value in the stack registry
(``usable_memory_fraction``): the paper's planner caps memory at the whole device (Table 3:
M_dev = 179 GB, a B200's memory), so ``paper-nemo`` carries 1.0 and the paper reproduction
is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mosaic.errors import MosaicInputError
from mosaic.stacks import get_stack

DEFAULT_USABLE_MEMORY_FRACTION = 0.9
DEFAULT_SOURCE = ("default headroom: 10% of device memory left to allocator fragmentation "
                  "(vLLM gpu_memory_utilization default 0.9; docs/memory.md)")


@dataclass(frozen=True)
class MemoryHeadroom:
    """The share of device memory a plan may fill, and where that number comes from."""

    usable_fraction: float
    source: str
    origin: str = "default"  # user, stack <name> or default

    def __post_init__(self) -> None:
        fraction = self.usable_fraction
        if not (isinstance(fraction, (int, float)) and math.isfinite(fraction)
                and 0.0 < fraction <= 1.0):
            raise MosaicInputError(
                f"memory fraction must be a number in (0, 1], got {fraction!r}")

    def usable_bytes(self, hbm_bytes: float) -> float:
        """Bytes of a device of ``hbm_bytes`` a layout may fill."""
        return hbm_bytes * self.usable_fraction

    def to_dict(self, hbm_bytes: float) -> dict[str, Any]:
        """The policy on one device: usable bytes and the headroom kept free."""
        return {
            "usable_memory_fraction": self.usable_fraction,
            "usable_memory_bytes": self.usable_bytes(hbm_bytes),
            "headroom_bytes": hbm_bytes * (1.0 - self.usable_fraction),
            "origin": self.origin,
            "source": self.source,
        }


def memory_headroom(user_fraction: float | None, stack: str) -> MemoryHeadroom:
    """The user's fraction, else the stack's documented one, else the default (0.9)."""
    if user_fraction is not None:
        return MemoryHeadroom(float(user_fraction), "--memory-fraction", "user")
    traits = get_stack(stack)
    if traits.usable_memory_fraction is not None:
        return MemoryHeadroom(traits.usable_memory_fraction,
                              f"stack {stack}: {traits.memory_source}", f"stack {stack}")
    return MemoryHeadroom(DEFAULT_USABLE_MEMORY_FRACTION, DEFAULT_SOURCE)


def gib_or_mib_text(gib: float, decimals: int = 2) -> str:
    """'1.25 GiB', in MiB where the figure would read as zero GiB at ``decimals`` (a trial
    read 'over by 0.0' and 'misses by 0.00 GiB' for misses of a few MiB)."""
    text = f"{gib:.{decimals}f}"
    return f"{text} GiB" if float(text) > 0 else f"{gib * 1024:.2g} MiB"


# The three verdicts on a plan's memory against the usable budget, decided by
# :func:`memory_verdict` alone (a review found them decided in four modules, worded apart).
FITS = "fits"
OVER_HEADROOM = "over the planning headroom"
OUT_OF_MEMORY = "out of memory"


def above_device(memory_bytes: Any, capacity_bytes: float) -> Any:
    """Whether a plan needs more than the device has (numbers or arrays): out of memory,
    not only over the planning headroom."""
    return np.asarray(memory_bytes) > capacity_bytes


def memory_verdict(memory_bytes: float, capacity_bytes: float, overshoot_bytes: float) -> str:
    """:data:`FITS` within the usable budget (no overshoot); :data:`OUT_OF_MEMORY` above
    the device's memory; :data:`OVER_HEADROOM` between the two, where only the planning
    headroom refuses the plan (a trial read "out of memory" for a job 2 GiB under its
    GPUs' memory). Any unit, as long as all three share it."""
    if overshoot_bytes <= 0:
        return FITS
    return OUT_OF_MEMORY if above_device(memory_bytes, capacity_bytes) else OVER_HEADROOM


def memory_fit_text(memory_gib: float, capacity_gib: float, usable_fraction: float,
                    overshoot_gib: float) -> str:
    """'M GiB of U usable (F% of C GiB), fits'; '..., OUT OF MEMORY by O GiB over the device
    (H GiB over the usable F%)' above the device; or '..., over
    the F% planning headroom by O GiB (R GiB under device memory)' between the usable budget
    and the device: one wording for every command that reports a plan's memory against the
    usable budget."""
    kind = memory_verdict(memory_gib, capacity_gib, overshoot_gib)
    if kind == FITS:
        verdict = FITS
    elif kind == OVER_HEADROOM:
        verdict = (headroom_overshoot_text(usable_fraction, overshoot_gib)
                   + f" ({capacity_gib - memory_gib:.2f} GiB under device memory)")
    else:
        verdict = "OUT OF MEMORY by " + overshoot_text(memory_gib, capacity_gib,
                                                       usable_fraction, overshoot_gib)
    return (f"{memory_gib:.2f} GiB of {usable_fraction * capacity_gib:.1f} usable "
            f"({usable_fraction:.0%} of {capacity_gib:.1f} GiB), {verdict}")


def headroom_overshoot_text(usable_fraction: float, overshoot_gib: float) -> str:
    """'over the F% planning headroom by O GiB': a plan under the device's memory that only
    the headroom refuses."""
    return f"over the {usable_fraction:.0%} planning headroom by {overshoot_gib:.2f} GiB"


def overshoot_text(memory_gib: float, capacity_gib: float, usable_fraction: float,
                   overshoot_gib: float) -> str:
    """How far a plan above the device's memory misses: 'X GiB over the device (Y GiB over
    the usable F%)', the device's own shortfall first (a trial read the headroom overshoot,
    9.09 GiB, for a job 1.18 GiB over its GPUs), both named (a trial read two bare figures
    as a contradiction); 'X GiB' alone when the whole device is usable."""
    if usable_fraction >= 1.0:
        return f"{overshoot_gib:.2f} GiB"
    return (f"{memory_gib - capacity_gib:.2f} GiB over the device ({overshoot_gib:.2f} GiB "
            f"over the usable {usable_fraction:.0%})")
