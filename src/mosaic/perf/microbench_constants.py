"""Kernel and collective constants measured on the user's own hardware (paper Sec. 5.3).

``mosaic calibrate --microbench DIR`` fits the constants of ``data/microbench_fits.yaml``
(the GEMM plateau, K ramp and HBM efficiency, the kernel latency, the attention efficiency
triples, the element-wise HBM efficiency and the collective latencies and efficiencies)
to ``mosaic bench`` tables and writes them into a calibration file's ``microbench`` block.
``predict_step`` then applies them to the :class:`~mosaic.perf.machine.Machine` of every
job whose device the block ``applies_to`` ("any" for measurements on a device outside the
catalog, such as a CPU test run); other devices keep the built-in constants.

Block layout (every value optional; ``source`` strings say where each came from)::

    microbench:
      applies_to: [H200-SXM-141GB]
      provenance: "..."
      gemm: {max_fraction_of_peak, k_half, hbm_efficiency, kernel_latency_s}
      attention: {fwd: [max_fraction, seq_half_tokens, head_dim_half], bwd: [...]}
      elementwise_hbm_efficiency: 0.8
      collectives: {launch_latency_s: ..., ring_scale_up_efficiency: ..., ...}
      grouped_host_floor: {bf16: {fwd: [fixed_s, per_group_s], bwd: [...]}, fp8: ..., mxfp8: ...}

``grouped_host_floor`` (``mosaic bench te-grouped``) replaces the built-in host floor of
Transformer Engine's GroupedLinear (:func:`~mosaic.perf.kernels.te_grouped_linear_host_floor_s`)
for MoE jobs of that GEMM precision; other precisions keep the built-in BF16 floor.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from mosaic.errors import MosaicInputError
from mosaic.hardware import get_device
from mosaic.limits import is_number
from mosaic.perf.collectives import Interconnect
from mosaic.perf.fitted_constants import fitted
from mosaic.perf.kernels import AttentionEfficiency, GemmParams, device_fit_key
from mosaic.perf.machine import Machine

BUILT_IN_ELEMENTWISE_EFFICIENCY = float(fitted("kernels", "elementwise_hbm_efficiency"))
ANY_DEVICE = "any"
_GEMM_FIELDS = ("max_fraction_of_peak", "k_half", "hbm_efficiency", "kernel_latency_s")
_COLLECTIVE_FIELDS = tuple(f.name for f in fields(Interconnect)
                           if f.name.endswith(("_latency_s", "_efficiency")))
# the precisions `mosaic bench te-grouped` measures the GroupedLinear host floor in
FLOOR_PRECISIONS = ("bf16", "fp8", "mxfp8")
FloorLine = tuple[float, float]  # (fixed_s, per_group_s)


@dataclass(frozen=True)
class MicrobenchConstants:
    """The measured constants of one calibration file (None: keep the built-in one)."""

    applies_to: tuple[str, ...]
    gemm: dict[str, float] = field(default_factory=dict)
    attention_fwd: AttentionEfficiency | None = None
    attention_bwd: AttentionEfficiency | None = None
    elementwise_hbm_efficiency: float | None = None
    collectives: dict[str, float] = field(default_factory=dict)
    # per precision: the (fwd, bwd) host-floor lines of GroupedLinear
    grouped_host_floor: dict[str, tuple[FloorLine, FloorLine]] = field(default_factory=dict)

    def applies(self, device_name: str) -> bool:
        """True for "any", a device the block was measured on, or one that borrows that
        device's kernel fits (``kernel_fit``: an H800 takes an H100's constants). Not for
        the device whose fits the measured one borrows: a user's H20 (``kernel_fit: H100``)
        measured at a sixth of an H100's rate rewrote every H100 job's kernels (a trial)."""
        if ANY_DEVICE in self.applies_to:
            return True
        return any(_measured_or_borrowed(measured, device_name) for measured in self.applies_to)

    def borrowed_by(self, device_name: str) -> str | None:
        """The measured device whose constants ``device_name`` takes through its
        ``kernel_fit`` (not measured on it itself), or None."""
        if ANY_DEVICE in self.applies_to or any(
                _same_device(measured, device_name) for measured in self.applies_to):
            return None
        return next((measured for measured in self.applies_to
                     if _measured_or_borrowed(measured, device_name)), None)


def _catalog_name(name: str) -> str:
    """The canonical catalog name of ``name`` (itself when the catalog has no such device)."""
    try:
        return get_device(name).name
    except MosaicInputError:
        return name


def _same_device(first: str, second: str) -> bool:
    """Whether two device names are one catalog device (aliases and case aside)."""
    return _catalog_name(first).casefold() == _catalog_name(second).casefold()


def _measured_or_borrowed(measured: str, device_name: str) -> bool:
    """Whether constants measured on ``measured`` describe ``device_name``: the same device,
    or ``measured`` is the device whose kernel fits ``device_name`` uses (its fit key names
    ``measured`` itself, so ``measured`` borrows from nobody)."""
    if _same_device(measured, device_name):
        return True
    key = device_fit_key(measured)
    return device_fit_key(device_name) == key and _same_device(key, measured)


def _number(where: str, value: Any) -> float:
    if not is_number(value):
        raise MosaicInputError(f"{where}={value!r}; allowed: a number")
    return float(value)


def parse_block(block: dict[str, Any], where: str = "microbench") -> MicrobenchConstants:
    """Validate a calibration file's ``microbench`` block."""
    allowed = {"applies_to", "provenance", "reference", "gemm", "attention",
               "elementwise_hbm_efficiency", "collectives", "fit_error_percent",
               "grouped_host_floor"}
    unknown = set(block) - allowed
    if unknown:
        raise MosaicInputError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: "
                               f"{', '.join(sorted(allowed))}")
    applies_to = block.get("applies_to") or []
    if not isinstance(applies_to, list) or not applies_to:
        raise MosaicInputError(f"{where}.applies_to={applies_to!r}; allowed: a non-empty list "
                               "of device names or [any]")
    gemm = {}
    for name, value in (block.get("gemm") or {}).items():
        if name not in _GEMM_FIELDS:
            raise MosaicInputError(f"{where}.gemm.{name}: allowed: {', '.join(_GEMM_FIELDS)}")
        gemm[name] = _number(f"{where}.gemm.{name}", value)
    attention: dict[str, AttentionEfficiency] = {}
    for direction, triple in (block.get("attention") or {}).items():
        if direction not in ("fwd", "bwd") or not isinstance(triple, list) or len(triple) != 3:
            raise MosaicInputError(f"{where}.attention.{direction}={triple!r}; allowed: fwd/bwd "
                                   "= [max_fraction, seq_half_tokens, head_dim_half]")
        attention[direction] = AttentionEfficiency(
            *(_number(f"{where}.attention.{direction}", v) for v in triple))
    collectives = {}
    for name, value in (block.get("collectives") or {}).items():
        if name not in _COLLECTIVE_FIELDS:
            raise MosaicInputError(f"{where}.collectives.{name}: allowed: "
                                   f"{', '.join(_COLLECTIVE_FIELDS)}")
        collectives[name] = _number(f"{where}.collectives.{name}", value)
    elementwise = block.get("elementwise_hbm_efficiency")
    if elementwise is not None:
        elementwise = _number(f"{where}.elementwise_hbm_efficiency", elementwise)
        if not elementwise > 0:
            raise MosaicInputError(f"{where}.elementwise_hbm_efficiency={elementwise}; "
                                   "allowed: > 0")
    return MicrobenchConstants(
        applies_to=tuple(str(d) for d in applies_to), gemm=gemm,
        attention_fwd=attention.get("fwd"), attention_bwd=attention.get("bwd"),
        elementwise_hbm_efficiency=elementwise, collectives=collectives,
        grouped_host_floor=_parse_floors(block.get("grouped_host_floor") or {}, where))


def _parse_floors(floors: Any, where: str) -> dict[str, tuple[FloorLine, FloorLine]]:
    """Validate ``grouped_host_floor``: per precision, fwd and bwd [fixed_s, per_group_s],
    each >= 0."""
    allowed = "{precision: {fwd: [fixed_s, per_group_s], bwd: [fixed_s, per_group_s]}}"
    if not isinstance(floors, dict):
        raise MosaicInputError(f"{where}.grouped_host_floor={floors!r}; allowed: {allowed}")
    parsed = {}
    for precision, passes in floors.items():
        key = f"{where}.grouped_host_floor.{precision}"
        if precision not in FLOOR_PRECISIONS:
            raise MosaicInputError(f"{key}: allowed precisions: {', '.join(FLOOR_PRECISIONS)}")
        if not isinstance(passes, dict) or set(passes) != {"fwd", "bwd"}:
            raise MosaicInputError(f"{key}={passes!r}; allowed: {allowed}")
        lines = []
        for name in ("fwd", "bwd"):
            line = passes[name]
            if not isinstance(line, list) or len(line) != 2:
                raise MosaicInputError(f"{key}.{name}={line!r}; allowed: [fixed_s, per_group_s]")
            fixed_s, per_group_s = (_number(f"{key}.{name}", v) for v in line)
            if not (fixed_s >= 0 and per_group_s >= 0):
                raise MosaicInputError(f"{key}.{name}={line!r}; allowed: seconds >= 0")
            lines.append((fixed_s, per_group_s))
        parsed[precision] = (lines[0], lines[1])
    return parsed


def apply_microbench(machine: Machine, constants: MicrobenchConstants | None) -> Machine:
    """``machine`` with the measured constants where they apply to its device.

    The element-wise efficiency is applied through the HBM bandwidth the streaming kernels
    read (``hbm_bw · elementwise_efficiency``): the bandwidth is scaled by measured/built-in
    and the GEMM HBM efficiency by the inverse, so memory-bound GEMMs keep their own
    (measured or built-in) efficiency.
    """
    if constants is None or not constants.applies(machine.device_name):
        return machine
    gemm: GemmParams = replace(machine.gemm_params, **constants.gemm)
    hbm_bw = machine.hbm_bw_bytes_per_s
    if constants.elementwise_hbm_efficiency is not None:
        scale = constants.elementwise_hbm_efficiency / BUILT_IN_ELEMENTWISE_EFFICIENCY
        hbm_bw = hbm_bw * scale
        gemm = replace(gemm, hbm_efficiency=gemm.hbm_efficiency / scale)
    interconnect = (replace(machine.interconnect, **constants.collectives)
                    if constants.collectives else machine.interconnect)
    return replace(
        machine, gemm_params=gemm, hbm_bw_bytes_per_s=hbm_bw, interconnect=interconnect,
        attention_fwd=constants.attention_fwd or machine.attention_fwd,
        attention_bwd=constants.attention_bwd or machine.attention_bwd)

