"""Goodput η_good(N_dev): the share of the window spent training (paper Sec. 2.1, Eq. 2).

Two models:

* :class:`ConstantGoodput` — a fixed fraction (the paper's Table 3 uses 1.0).
* :class:`YoungDalyGoodput` — checkpoint/restart overhead under independent GPU failures.
  With per-GPU mean time between failures ``MTBF_gpu``, a job on N_dev GPUs fails every
  M = MTBF_gpu / N_dev seconds. Checkpointing every τ seconds at cost δ loses

      f_lost ≈ δ/τ + τ/(2M) + R/M

  (checkpoint writes, half an interval of recomputed work per failure, restart time R per
  failure). The interval minimising it is Young's τ* = sqrt(2·δ·M) (Young 1974, "A first
  order approximation to the optimum checkpoint interval", CACM 17(9)); Daly 2006 ("A
  higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22)
  refines it to sqrt(2δM) − δ for δ ≪ M, a difference we neglect. At τ* the first two
  terms add to sqrt(2δ/M), so η_good = 1 − sqrt(2δ/M) − R/M, floored at 0. A team that
  checkpoints on a fixed schedule ("every hour") states τ (``interval_s``,
  ``--checkpoint-interval-s``): the same first-order f_lost at that τ, no longer the
  optimum's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from mosaic.errors import MosaicInputError
from mosaic.units import SECONDS_PER_HOUR


class Goodput(Protocol):
    """A goodput model: the training fraction of the wall-clock for a device count."""

    def fraction(self, n_devices: int) -> float: ...

    def describe(self, n_devices: int) -> dict[str, Any]: ...

    def no_progress_reason(self, n_devices: int) -> str | None:
        """Why no time trains at all on ``n_devices`` GPUs (goodput 0), else None."""

    def require_progress(self, n_devices: int) -> None:
        """MosaicInputError when no time trains at all on ``n_devices`` GPUs."""


def _finite_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    number = float(value)
    ok = math.isfinite(number) and (number >= 0 if allow_zero else number > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise MosaicInputError(f"{name} must be a finite number {bound}, got {value!r}")
    return number


@dataclass(frozen=True)
class ConstantGoodput:
    """η_good fixed whatever the device count (0 < value ≤ 1)."""

    value: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.value) and 0 < self.value <= 1):
            raise MosaicInputError(f"goodput must be in (0, 1], got {self.value!r}")

    def fraction(self, n_devices: int) -> float:
        return float(self.value)

    def describe(self, n_devices: int) -> dict[str, Any]:
        return {"model": "constant", "goodput": float(self.value)}

    def no_progress_reason(self, n_devices: int) -> str | None:
        """None: the value is above 0 by construction."""
        return None

    def require_progress(self, n_devices: int) -> None:
        """Nothing to refuse: the value is above 0 by construction."""


@dataclass(frozen=True)
class YoungDalyGoodput:
    """Checkpoint/restart goodput, at Young's optimal interval or a stated one (module
    docstring).

    Attributes:
        mtbf_gpu_s: mean time between failures of one GPU (with its share of host), seconds.
        checkpoint_s: wall-clock to write one checkpoint (δ), seconds.
        restart_s: wall-clock to detect a failure, restart and reload (R), seconds.
        interval_s: the interval τ between checkpoints the job runs with, seconds; None =
            Young's optimum τ* for the device count.
    """

    mtbf_gpu_s: float
    checkpoint_s: float
    restart_s: float = 0.0
    interval_s: float | None = None

    def __post_init__(self) -> None:
        _finite_positive("MTBF per GPU", self.mtbf_gpu_s)
        _finite_positive("checkpoint time", self.checkpoint_s)
        _finite_positive("restart time", self.restart_s, allow_zero=True)
        if self.interval_s is not None:
            _finite_positive("checkpoint interval", self.interval_s)

    def system_mtbf_s(self, n_devices: int) -> float:
        """M = MTBF_gpu / N_dev: mean time between failures of the whole job."""
        return self.mtbf_gpu_s / n_devices

    def checkpoint_interval_s(self, n_devices: int) -> float:
        """The stated τ (``interval_s``), else Young's τ* = sqrt(2·δ·M)."""
        if self.interval_s is not None:
            return self.interval_s
        return math.sqrt(2.0 * self.checkpoint_s * self.system_mtbf_s(n_devices))

    def lost_fraction(self, n_devices: int) -> float:
        """δ/τ + τ/(2M) + R/M (Young 1974's first-order model) at τ of
        :meth:`checkpoint_interval_s`."""
        mtbf = self.system_mtbf_s(n_devices)
        tau = self.checkpoint_interval_s(n_devices)
        return self.checkpoint_s / tau + tau / (2.0 * mtbf) + self.restart_s / mtbf

    def fraction(self, n_devices: int) -> float:
        return max(0.0, 1.0 - self.lost_fraction(n_devices))

    def no_progress_reason(self, n_devices: int) -> str | None:
        """Why the job on ``n_devices`` GPUs loses its whole window to failures (goodput
        0), else None: a search would otherwise report every geometry as 'window too
        short' (a fuzz trial)."""
        if self.fraction(n_devices) > 0.0:
            return None
        mtbf = self.system_mtbf_s(n_devices)
        every = ("" if self.interval_s is None
                 else f" every {self.interval_s:g} s (--checkpoint-interval-s)")
        return (f"Young-Daly goodput is 0 on {n_devices} GPUs: the job fails every "
                f"{mtbf:.3g} s (MTBF per GPU {self.mtbf_gpu_s / SECONDS_PER_HOUR:.3g} h / "
                f"{n_devices}), and checkpoints of {self.checkpoint_s:g} s{every} plus "
                f"restarts of {self.restart_s:g} s take all of it; check --mtbf-gpu-hours "
                "(hours per GPU), --checkpoint-s"
                + (", --checkpoint-interval-s" if self.interval_s is not None else "")
                + " and --restart-s")

    def require_progress(self, n_devices: int) -> None:
        """MosaicInputError with :meth:`no_progress_reason` when goodput is 0."""
        reason = self.no_progress_reason(n_devices)
        if reason is not None:
            raise MosaicInputError(reason)

    def describe(self, n_devices: int) -> dict[str, Any]:
        return {
            "model": "young-daly",
            "goodput": self.fraction(n_devices),
            "mtbf_gpu_hours": self.mtbf_gpu_s / SECONDS_PER_HOUR,
            "checkpoint_s": self.checkpoint_s,
            "restart_s": self.restart_s,
            "job_mtbf_hours": self.system_mtbf_s(n_devices) / SECONDS_PER_HOUR,
            "checkpoint_interval_s": self.checkpoint_interval_s(n_devices),
            # stated (--checkpoint-interval-s) or Young's optimum for this device count
            "checkpoint_interval": "stated" if self.interval_s is not None else "optimal",
            "lost_fraction": self.lost_fraction(n_devices),
        }
