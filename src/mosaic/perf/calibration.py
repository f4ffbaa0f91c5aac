"""The performance model's few free constants, with provenance, loaded from YAML.

The shipped default lives in ``data/calibration_default.yaml``; ``mosaic calibrate``
writes files of the same shape and every command that predicts accepts
``--calibration FILE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mosaic.schema_validation import load_yaml_mapping, validate_mapping


class _Sourced(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    source: str = Field(min_length=1)


class _SourcedMapping(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: dict[str, float]
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
    stack_overhead: _SourcedMapping
    attention_efficiency: _SourcedMapping
    routing_imbalance: _SourcedMapping


class _CalibrationFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    provenance: str
    constants: _Constants


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
    stack_overhead: dict[str, float] = field(default_factory=dict)
    attention_efficiency: dict[str, float] = field(default_factory=dict)
    routing_imbalance: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict, compare=False)

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

    def to_document(self) -> dict[str, Any]:
        """The YAML document of this calibration, each constant with its source note."""
        constants = {
            name: {"value": getattr(self, name), "source": self.sources.get(name, "")}
            for name in _Constants.model_fields
        }
        return {"name": self.name, "provenance": self.provenance, "constants": constants}


def _from_document(document: dict[str, Any], where: str) -> Calibration:
    parsed = validate_mapping(_CalibrationFile, document, where)
    constants = parsed.constants
    values = {name: getattr(constants, name).value for name in _Constants.model_fields}
    sources = {name: getattr(constants, name).source for name in _Constants.model_fields}
    return Calibration(name=parsed.name, provenance=parsed.provenance, sources=sources, **values)


def default_calibration() -> Calibration:
    """The calibration shipped with mosaic."""
    text = resources.files("mosaic.perf").joinpath("data", "calibration_default.yaml").read_text()
    return _from_document(yaml.safe_load(text), "built-in calibration")


def load_calibration(path: Path | None) -> Calibration:
    """A calibration file, or the built-in default when ``path`` is None."""
    if path is None:
        return default_calibration()
    return _from_document(load_yaml_mapping(path), str(path))
