"""Throughput and MFU of a training run, and the JSON-lines metrics log.

MFU follows the project's named conventions (mosaic.arch.flops): the paper's 6·N_active
per token (non-embedding, no attention; Eq. 1) and the same plus the causal attention
core. Both are reported against the device's datasheet dense bf16 peak from the hardware
catalog and, where one is known (a `mosaic bench` measurement or the catalog's
achievable figure), against the achievable peak. CPU runs report no MFU.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mosaic.arch import (
    FlopConvention,
    Geometry,
    count_parameters,
    useful_flops_per_token,
)
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.hardware import Device, shipped_catalog
from mosaic.hardware.catalog import device_for_reported_name
from mosaic.hardware.device import MFU_PEAK_DTYPE
from mosaic.io_atomic import write_text_atomic


def achievable_from_bench(bench_dir: str | Path, dtype: str) -> float:
    """Best measured large-GEMM FLOP/s of ``dtype`` in a `mosaic bench gemm` output folder.

    Reads ``gemm.csv`` (docs/bench.md): rows with pass 'peak' (the square-GEMM sweep) and
    status 'ok'; tflops is 2·m·n·k / median time.
    """
    import csv

    path = Path(bench_dir) / "gemm.csv"
    if not path.is_file():
        raise MosaicInputError(f"run.bench_dir: {str(path)!r} not found; run `mosaic bench "
                               f"gemm --out DIR --dtypes {dtype}` on this device first")
    with path.open() as handle:
        rates = [float(row["tflops"]) * 1e12 for row in csv.DictReader(handle)
                 if row.get("pass") == "peak" and row.get("dtype") == dtype
                 and row.get("status", "ok") == "ok"]
    if not rates:
        raise MosaicInputError(f"run.bench_dir: {str(path)!r} has no measured {dtype} peak "
                               "sweep rows (pass 'peak', status 'ok'); the run computes in "
                               f"{dtype}: measure it with `mosaic bench gemm --out DIR "
                               f"--dtypes {dtype}`")
    return max(rates)


def resolve_device(reported_name: str) -> Device | None:
    """Catalog device of a driver-reported name, longest match (shipped catalog):
    "NVIDIA H100 80GB HBM3" -> H100-SXM-80GB; None when nothing matches."""
    return device_for_reported_name(reported_name, shipped_catalog())


@dataclass(frozen=True)
class FlopsAccounting:
    """Useful FLOPs per token and the peaks MFU is measured against (per device)."""

    paper_flops_per_token: float  # 6·N_active
    with_attention_flops_per_token: float  # 6·N_active + causal attention core (WITH_ATTENTION)
    peak_flops_per_s: float | None  # datasheet dense bf16 peak (the paper's MFU, Eq. 1)
    achievable_flops_per_s: float | None
    device: str | None

    @classmethod
    def build(cls, geometry: Geometry, seq_len: int, device: Device | None, dtype: str,
              achievable_flops_per_s: float | None) -> FlopsAccounting:
        counts = count_parameters(geometry)
        peak = achievable = None
        if device is not None:
            # MFU against the dense bf16 peak whatever the run computes in, as `mosaic perf`
            # reports it (an fp32 run read against the fp32 peak showed ~15x the MFU)
            peak = device.peak_flops_per_s.get(MFU_PEAK_DTYPE)
            achievable = achievable_flops_per_s or device.achievable_flops_per_s.get(dtype)
        return cls(
            useful_flops_per_token(geometry, counts, seq_len, FlopConvention.PAPER),
            useful_flops_per_token(geometry, counts, seq_len, FlopConvention.WITH_ATTENTION),
            peak, achievable_flops_per_s if device is None else achievable,
            None if device is None else device.name)

    def mfu(self, tokens_per_s: float, world_size: int) -> dict[str, float | None]:
        """MFU fields for a global throughput over ``world_size`` devices."""
        def ratio(flops: float, peak: float | None) -> float | None:
            return None if peak is None else tokens_per_s * flops / (world_size * peak)

        return {
            "mfu_paper": ratio(self.paper_flops_per_token, self.peak_flops_per_s),
            "mfu_with_attention": ratio(self.with_attention_flops_per_token,
                                        self.peak_flops_per_s),
            "mfu_paper_vs_achievable": ratio(self.paper_flops_per_token,
                                             self.achievable_flops_per_s),
        }


class SmoothedLoss:
    """Bias-corrected exponential moving average of the loss (Adam-style debiasing)."""

    def __init__(self, beta: float, value: float = 0.0, steps: int = 0) -> None:
        self.beta, self.value, self.steps = beta, value, steps

    def update(self, loss: float) -> float:
        self.value = self.beta * self.value + (1 - self.beta) * loss
        self.steps += 1
        return self.current

    @property
    def current(self) -> float:
        if self.steps == 0:
            return math.nan
        return self.value / (1 - self.beta**self.steps)

    def state(self) -> dict[str, float]:
        return {"value": self.value, "steps": self.steps}


class MetricsLog:
    """Append-only JSON-lines file; on resume, lines past the checkpoint step are dropped,
    and so are lines that are not JSON records (a write cut short by a crash), with a
    warning. ``records`` holds the kept ones."""

    def __init__(self, path: Path, resume_step: int | None, enabled: bool = True) -> None:
        self.path, self.enabled = path, enabled
        self.records: list[dict[str, Any]] = []
        if not enabled:
            return
        kept: list[str] = []
        damaged: list[int] = []
        if not resume_step and path.exists() and path.stat().st_size > 0:
            _set_aside(path)
        if resume_step and path.exists():  # a fresh start (0) keeps nothing
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                try:
                    record = json.loads(line)
                    step = int(record["step"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    if line.strip():
                        damaged.append(number)
                    continue
                if step < resume_step:
                    kept.append(line)
                    self.records.append(record)
        if damaged:
            warnings.warn(f"{path}: line(s) {', '.join(map(str, damaged[:5]))} are not metric "
                          "records (a write cut short?); dropped, the checkpoint is what the "
                          "run resumes from", MosaicWarning, stacklevel=2)
        # atomically: a crash while rewriting must not lose the metrics logged before it
        write_text_atomic(path, "".join(line + "\n" for line in kept))

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            with self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")


def _set_aside(path: Path) -> Path:
    """Rename the metrics of an earlier start to a free ``metrics.before-restart[.N].jsonl``
    and say so: a run whose checkpoint was lost starts again from step 0, and a trial's 73
    logged steps were replaced by the new run's 3 without a word."""
    number, backup = 0, path.with_name(f"{path.stem}.before-restart{path.suffix}")
    while backup.exists():
        number += 1
        backup = path.with_name(f"{path.stem}.before-restart.{number}{path.suffix}")
    path.rename(backup)
    warnings.warn(f"{path}: the run starts from step 0 (no checkpoint to resume from); the "
                  f"metrics of the earlier start are kept in {backup.name}", MosaicWarning,
                  stacklevel=3)
    return backup


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
