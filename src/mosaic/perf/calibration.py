"""The performance model's few free constants, with provenance, loaded from YAML.

Built-in profiles live in ``data/calibration_<name>.yaml``: ``default`` (modern Megatron-
Core/NeMo, torchtitan and FSDP stacks, fitted on published runs) and ``paper-p6b200`` (the
paper's own NeMo + Megatron-Core stack on AWS p6-b200, Appendix F.3 / Sec. 7.2).
``mosaic calibrate`` writes files of the same shape and every command that predicts accepts
``--calibration NAME|FILE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mosaic.errors import MosaicInputError
from mosaic.perf.coverage import CalibrationCoverage, parse_coverage
from mosaic.perf.microbench_constants import MicrobenchConstants, parse_block
from mosaic.perf.workload import ROUTING_REGIMES
from mosaic.schema_validation import load_yaml_mapping, path_exists, validate_mapping
from mosaic.stacks import known_stacks

# A calibrated constant is finite and of bounded size (the fitted ones span 1e-21..1e2);
# NaN or 1e308 would turn every prediction into NaN or inf (issue 11).
CONSTANT_BOUND = 1e6
# What a profile without a fitted memory scale says of it (written only when fitted).
UNSCALED_MEMORY_SOURCE = "not in this file: the memory model as derived (docs/memory.md)"


class _Sourced(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float = Field(allow_inf_nan=False, ge=-CONSTANT_BOUND, le=CONSTANT_BOUND)
    source: str = Field(min_length=1)


class _SourcedMapping(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: dict[str, Annotated[float, Field(allow_inf_nan=False, gt=0, le=CONSTANT_BOUND)]]
    source: str = Field(min_length=1)


class _Constants(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    chi_a2a: _Sourced
    chi_pp: _Sourced
    chi_overlap: _Sourced
    dispatch_gap_s: _Sourced
    kernels_per_layer_base: _Sourced
    host_overhead_per_microbatch_s: _Sourced
    dp_overlap_fraction: _Sourced
    elementwise_traffic_factor: _Sourced = _Sourced(
        value=1.0, source="not in this file: element-wise kernels at the fused minimum traffic")
    kernels_per_local_expert: _Sourced = _Sourced(
        value=0.0, source="not in this file: local-expert launches costed by the measured "
                          "grouped-GEMM host floor instead")
    ep_dispatch_host_s_per_moe_layer: _Sourced = _Sourced(
        value=0.0, source="not in this file: no extra host cost of the EP dispatch path")
    host_in_block_factor: _Sourced = _Sourced(
        value=1.0, source="not in this file: isolated-call host floors taken as benchmarked")
    memory_scale: _Sourced = _Sourced(value=1.0, source=UNSCALED_MEMORY_SOURCE)
    stack_overhead: _SourcedMapping
    attention_efficiency: _SourcedMapping
    routing_imbalance: _SourcedMapping


class _CalibrationFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    stack: str | None = None
    provenance: str
    fitted_constants: tuple[str, ...] | None = None
    at_bounds: tuple[str, ...] = ()
    not_informed: tuple[str, ...] = ()
    constants: _Constants
    microbench: dict[str, Any] | None = None  # calibrate --microbench (microbench_constants)
    coverage: dict[str, Any] | None = None  # envelope and CV residuals (perf.coverage)


# Constants ``mosaic calibrate`` may fit; a file's ``fitted_constants`` names the subset it
# refits (the others keep their measured or assumed values).
FITTABLE_CONSTANTS: tuple[str, ...] = (
    "chi_a2a", "chi_pp", "chi_overlap", "stack_overhead", "elementwise_traffic_factor",
    "attention_efficiency", "routing_imbalance")


@dataclass(frozen=True)
class Calibration:
    """Calibrated constants of the time model (see the YAML for each one's meaning)."""

    name: str
    provenance: str
    chi_a2a: float
    chi_pp: float
    chi_overlap: float
    dispatch_gap_s: float
    kernels_per_layer_base: float
    host_overhead_per_microbatch_s: float
    dp_overlap_fraction: float
    elementwise_traffic_factor: float = 1.0
    kernels_per_local_expert: float = 0.0
    ep_dispatch_host_s_per_moe_layer: float = 0.0
    host_in_block_factor: float = 1.0
    # a team's runs' measured over modelled allocator memory (calibrate --fit-memory); the
    # shipped profiles keep 1 (evaluate/memory_scale.py)
    memory_scale: float = 1.0
    stack_overhead: dict[str, float] = field(default_factory=dict)
    attention_efficiency: dict[str, float] = field(default_factory=dict)
    routing_imbalance: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    fitted_constants: tuple[str, ...] = FITTABLE_CONSTANTS
    at_bounds: tuple[str, ...] = ()
    # free constants no run of the fit depended on: they keep the base profile's values
    not_informed: tuple[str, ...] = ()
    description: str = ""  # what stack and platform the profile describes (kept by refits)
    microbench: MicrobenchConstants | None = None  # measured kernel/collective constants
    microbench_document: dict[str, Any] | None = field(default=None, compare=False)
    stack: str | None = None  # the stack it describes: plans that name none use it
    coverage: CalibrationCoverage | None = field(default=None, compare=False)  # perf.coverage
    # the file it was read from (None: a built-in profile, or built in memory): what a plan's
    # export tells the user to pass back with --calibration
    source_path: str | None = field(default=None, compare=False)

    def stack_multiplier(self, stack: str) -> float:
        """Multiplier for a software stack; the ``default`` entry (else 1.0) for a stack the
        calibration has not seen."""
        return self.stack_overhead.get(stack, self.stack_overhead.get("default", 1.0))

    def routing_multiplier(self, routing: str) -> float:
        """Load-imbalance factor on routed-expert time for a routing regime."""
        return self.routing_imbalance.get(routing, self.routing_imbalance.get("default", 1.0))

    def attention_multiplier(self, stack: str) -> float:
        """Flash-attention efficiency relative to the microbenchmark fit, for a stack."""
        return self.attention_efficiency.get(stack,
                                             self.attention_efficiency.get("default", 1.0))

    def microbench_notes(self, device_name: str) -> list[str]:
        """Where this profile's measured kernel constants do not apply to ``device_name``
        (measured on another device), the line that says the built-in ones are used; where
        they apply through its ``kernel_fit`` (measured on the device whose fits it
        borrows), the line that says so."""
        if self.microbench is None:
            return []
        source = self.microbench.borrowed_by(device_name)
        if source is not None:  # used, but measured on the device whose fits it borrows
            return [f"calibration {self.name}'s microbenchmark constants were measured on "
                    f"{source}, whose kernel fits {device_name} uses (kernel_fit): they "
                    f"stand in for {device_name}'s own"]
        if self.microbench.applies(device_name):
            return []
        return [f"calibration {self.name}'s microbenchmark constants were measured on "
                f"{', '.join(self.microbench.applies_to)}, not {device_name}: its built-in "
                "kernel constants are used"]

    def to_document(self) -> dict[str, Any]:
        """The YAML document of this calibration, each constant with its source note."""
        constants = {
            name: {"value": getattr(self, name), "source": self.sources.get(name, "")}
            for name in _Constants.model_fields
            # an unscaled memory model is the absence of the constant (the shipped files)
            if name != "memory_scale" or self.memory_scale != 1.0
        }
        document: dict[str, Any] = {"name": self.name}
        if self.description:
            document["description"] = self.description
        if self.stack:
            document["stack"] = self.stack
        document["provenance"] = self.provenance
        if self.fitted_constants != FITTABLE_CONSTANTS:
            document["fitted_constants"] = list(self.fitted_constants)
        if self.at_bounds:
            document["at_bounds"] = list(self.at_bounds)
        if self.not_informed:
            document["not_informed"] = list(self.not_informed)
        document["constants"] = constants
        if self.microbench_document is not None:
            document["microbench"] = self.microbench_document
        if self.coverage is not None:
            document["coverage"] = self.coverage.to_document()
        return document


# The physical range of each scalar constant a profile may hold, checked when one is read
# (mosaic calibrate fits inside narrower bounds, evaluate/calibrate.py): outside it a
# breakdown term turns negative (a fuzz trial: chi_pp -1 gave a -770 s step).
PHYSICAL_RANGES: dict[str, tuple[float, float, str]] = {
    "chi_a2a": (0.0, CONSTANT_BOUND, "a cost per cross-node all-to-all byte share"),
    "chi_pp": (0.0, 1.0, "the exposed share of pipeline stage transfers"),
    "chi_overlap": (-1.0, 0.0, "an intra-node overlap credit, a share of the step"),
    "dispatch_gap_s": (0.0, 1.0, "seconds per kernel launch"),
    "kernels_per_layer_base": (0.0, CONSTANT_BOUND, "kernel launches per layer"),
    "host_overhead_per_microbatch_s": (0.0, CONSTANT_BOUND, "host seconds per micro-batch"),
    "dp_overlap_fraction": (0.0, 1.0, "the share of data-parallel traffic hidden"),
    "elementwise_traffic_factor": (1.0, CONSTANT_BOUND,
                                   "element-wise traffic over the fused minimum"),
    "kernels_per_local_expert": (0.0, CONSTANT_BOUND, "kernel launches per local expert"),
    "ep_dispatch_host_s_per_moe_layer": (0.0, CONSTANT_BOUND, "host seconds per MoE layer"),
    "host_in_block_factor": (1.0, CONSTANT_BOUND,
                             "host time in a real block over the isolated call's"),
    "memory_scale": (0.1, 10.0, "measured over modelled allocator memory"),
}
# The least a routing regime's imbalance factor can be: imbalance only slows the busiest rank.
MIN_ROUTING_IMBALANCE = 1.0


def _check_physical(constants: _Constants, where: str) -> None:
    """MosaicInputError naming the first constant outside its physical range, or a per-stack
    or per-routing key that names no stack or routing regime."""
    for name, (low, high, meaning) in PHYSICAL_RANGES.items():
        value = getattr(constants, name).value
        if not low <= value <= high:
            raise MosaicInputError(f"{where}: constants.{name}.value {value:g} is outside "
                                   f"{low:g} .. {high:g} ({meaning})")
    stacks = (*known_stacks(), "default")
    for name in ("stack_overhead", "attention_efficiency"):
        unknown = sorted(set(getattr(constants, name).value) - set(stacks))
        if unknown:
            raise MosaicInputError(f"{where}: constants.{name}: unknown stack(s) "
                                   f"{', '.join(unknown)}; known: {', '.join(stacks)}")
    regimes = (*ROUTING_REGIMES, "default")
    imbalance = constants.routing_imbalance.value
    unknown = sorted(set(imbalance) - set(regimes))
    if unknown:
        raise MosaicInputError(f"{where}: constants.routing_imbalance: unknown routing "
                               f"regime(s) {', '.join(unknown)}; known: {', '.join(regimes)}")
    for key, value in imbalance.items():
        if value < MIN_ROUTING_IMBALANCE:
            raise MosaicInputError(f"{where}: constants.routing_imbalance.value.{key} {value:g} "
                                   f"is below {MIN_ROUTING_IMBALANCE:g} (imbalance only slows "
                                   "the busiest EP rank)")


# Files a user may give as a calibration by mistake, by a block only they have, and what
# to do with each instead.
_NOT_A_CALIBRATION = {
    "runs": "a run-record file (runs:), not a calibration; fit one from it with `mosaic "
            "calibrate FILE --out cal.yaml`, then pass cal.yaml",
    "systems": "a hardware catalog (systems:), not a calibration; give it with --catalog",
    "devices": "a hardware catalog (devices:), not a calibration; give it with --catalog",
    "parallelism": "a job file (parallelism:), not a calibration",
    # `mosaic law fit --out` files carry format: mosaic-law/1 (law/law.py)
    "coefficients": "a scaling-law file (coefficients:), not a calibration; give it with "
                    "--law, and a profile from `mosaic calibrate --out cal.yaml` with "
                    "--calibration",
}


def _from_document(document: dict[str, Any], where: str) -> Calibration:
    if "constants" not in document:
        for block, what in _NOT_A_CALIBRATION.items():
            if block in document:
                raise MosaicInputError(f"{where}: {what}")
    parsed = validate_mapping(_CalibrationFile, document, where)
    constants = parsed.constants
    _check_physical(constants, where)
    values = {name: getattr(constants, name).value for name in _Constants.model_fields}
    sources = {name: getattr(constants, name).source for name in _Constants.model_fields}
    fitted = parsed.fitted_constants if parsed.fitted_constants is not None else FITTABLE_CONSTANTS
    unknown = sorted(set(fitted) - set(FITTABLE_CONSTANTS))
    if unknown:
        raise MosaicInputError(f"{where}: fitted_constants {unknown} not fittable; allowed: "
                               f"{', '.join(FITTABLE_CONSTANTS)}")
    return Calibration(name=parsed.name, provenance=parsed.provenance, sources=sources,
                       fitted_constants=tuple(fitted), at_bounds=parsed.at_bounds,
                       not_informed=parsed.not_informed,
                       description=parsed.description, stack=parsed.stack,
                       microbench=None if parsed.microbench is None else parse_block(
                           parsed.microbench, f"{where}: microbench"),
                       microbench_document=parsed.microbench,
                       coverage=None if parsed.coverage is None else parse_coverage(
                           parsed.coverage, where), **values)


# Built-in calibration profiles: name -> (data file, what it describes).
BUILT_IN_PROFILES: dict[str, str] = {
    "default": "modern stacks (Megatron-Core/NeMo, torchtitan, FSDP), fitted on published runs",
    "paper-p6b200": "the paper's NeMo + Megatron-Core stack on AWS p6-b200 (Appendix F.3)",
}
DEFAULT_PROFILE = "default"


def built_in_calibration(name: str) -> Calibration:
    """A calibration profile shipped with mosaic, by name (see :data:`BUILT_IN_PROFILES`)."""
    if name not in BUILT_IN_PROFILES:
        known = ", ".join(BUILT_IN_PROFILES)
        raise MosaicInputError(f"calibration {name!r}: not a file and not a built-in profile "
                               f"(built-in: {known})")
    text = resources.files("mosaic.perf").joinpath("data", f"calibration_{name}.yaml").read_text()
    return _from_document(yaml.safe_load(text), f"built-in calibration {name!r}")


def default_calibration() -> Calibration:
    """The default calibration shipped with mosaic (modern stacks)."""
    return built_in_calibration(DEFAULT_PROFILE)


def load_calibration(source: str | Path | None) -> Calibration:
    """A calibration by built-in profile name or file path; the default when None."""
    if source is None:
        return default_calibration()
    if not str(source).strip():
        raise MosaicInputError("calibration: the name is empty; give a built-in profile ("
                               f"{', '.join(BUILT_IN_PROFILES)}) or a calibration YAML file")
    if str(source) in BUILT_IN_PROFILES and not path_exists(source):
        return built_in_calibration(str(source))
    path = Path(source)
    if not path_exists(path) and path.suffix not in (".yaml", ".yml", ".json"):
        built_in_calibration(str(source))  # raises: neither a file nor a profile name
    return replace(_from_document(load_yaml_mapping(path), str(path)), source_path=str(path))
