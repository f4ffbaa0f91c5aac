"""The step-time breakdown's terms as typed records: what each one is, not a name to parse.

Every key of :attr:`~mosaic.perf.step_time.StepPrediction.breakdown_s` has one
:class:`StepTerm` here, giving its group (what kind of time it is), the parallel axis of a
communication term, whether the term is the exposed remainder of an overlapped operation,
and its source (modelled analytically, or set by a calibrated constant). The diagnosis and
reports read these records instead of parsing prefixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Group = Literal["compute", "communication", "pipeline_bubble", "vocab_stage", "dispatch",
                "optimizer", "imbalance", "overhead"]
Axis = Literal["tp", "ep", "cp", "pp", "dp/fsdp", "host"]
Source = Literal["modelled", "calibrated"]


@dataclass(frozen=True)
class StepTerm:
    """One term of the step-time breakdown.

    Attributes:
        name: the breakdown key.
        group: kind of time (compute, communication, bubble, ...).
        part: the compute op class or the communication axis, for reports by part.
        axis: the parallel axis of a communication term, else None.
        exposed_remainder: the term is what is left of an operation after overlap with
            other work (e.g. the EP all-to-all after the shared expert hides part of it).
        source: modelled analytically, or the product of a calibrated constant.
    """

    name: str
    group: Group
    part: str
    axis: Axis | None = None
    exposed_remainder: bool = False
    source: Source = "modelled"


def _compute(part: str, source: Source = "modelled") -> StepTerm:
    return StepTerm(f"compute_{part}", "compute", part, source=source)


def _comm(name: str, axis: Axis, exposed: bool = False) -> StepTerm:
    return StepTerm(name, "communication", axis, axis=axis, exposed_remainder=exposed)


STEP_TERMS: dict[str, StepTerm] = {term.name: term for term in (
    _compute("attention_gemm"), _compute("attention_core"), _compute("mlp"),
    _compute("experts"), _compute("shared_expert"), _compute("router"),
    _compute("elementwise"), _compute("quantise_cast"), _compute("recompute"),
    # a hybrid model's Mamba-2 and gated DeltaNet layers (perf/hybrid_layers.py): in/out
    # projections, and the chunked SSD scan or delta rule (their causal convolutions and
    # gated norms stream in compute_elementwise)
    _compute("ssm_gemm"), _compute("ssm_scan"),
    # the implementation's kernels beyond the fused minimum (perf/elementwise_traffic.py)
    _compute("elementwise_unfused"),
    # (elementwise_traffic_factor - 1) x the analytical streaming count: a fitted residual,
    # named as such so the diagnosis does not present it as a kernel class
    StepTerm("compute_elementwise_extra", "compute", "calibrated_elementwise_residual",
             source="calibrated"),
    _comm("tp_all_gather", "tp"), _comm("tp_reduce_scatter", "tp"),
    _comm("tp_all_reduce", "tp"),
    _comm("ep_all_to_all", "ep", exposed=True),  # after the shared-expert overlap
    _comm("cp_send_recv", "cp", exposed=True),  # after the attention-core overlap
    _comm("pp_send_recv", "pp"),
    # activation-offload copies over the host link beyond the block compute hiding them
    _comm("activation_offload", "host", exposed=True),
    _comm("dp_all_reduce", "dp/fsdp", exposed=True),  # after the backward overlap
    _comm("dp_reduce_scatter", "dp/fsdp", exposed=True),
    _comm("dp_all_gather", "dp/fsdp", exposed=True),
    _comm("fsdp_all_gather", "dp/fsdp", exposed=True),  # after one-block prefetch
    _comm("fsdp_reduce_scatter", "dp/fsdp", exposed=True),
    StepTerm("routing_imbalance", "imbalance", "routing_imbalance", source="calibrated"),
    # busiest EP rank's extra routed tokens (learned router, capacity): perf/routing_load.py
    StepTerm("expert_load_imbalance", "imbalance", "expert_load_imbalance"),
    StepTerm("moe_host_sync", "dispatch", "moe_host_sync"),
    StepTerm("dispatch_floor", "dispatch", "dispatch_floor", exposed_remainder=True,
             source="calibrated"),
    StepTerm("pipeline_bubble", "pipeline_bubble", "pipeline_bubble"),
    StepTerm("vocab_stage", "vocab_stage", "vocab_stage"),
    StepTerm("optimizer", "optimizer", "optimizer"),
    StepTerm("calibration", "overhead", "calibration", source="calibrated"),
)}


def step_term(name: str) -> StepTerm:
    """The record of breakdown term ``name`` (a KeyError names a term the model lacks)."""
    return STEP_TERMS[name]
