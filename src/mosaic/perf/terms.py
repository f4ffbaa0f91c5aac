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
        meaning: what the time is, in a few words, for tables and legends.
    """

    name: str
    group: Group
    part: str
    axis: Axis | None = None
    exposed_remainder: bool = False
    source: Source = "modelled"
    meaning: str = ""


def _compute(part: str, meaning: str, source: Source = "modelled") -> StepTerm:
    return StepTerm(f"compute_{part}", "compute", part, source=source, meaning=meaning)


def _comm(name: str, axis: Axis, meaning: str, exposed: bool = False) -> StepTerm:
    return StepTerm(name, "communication", axis, axis=axis, exposed_remainder=exposed,
                    meaning=meaning)


STEP_TERMS: dict[str, StepTerm] = {term.name: term for term in (
    _compute("attention_gemm", "QKV and output projections"),
    _compute("attention_core", "the attention kernel (softmax(QK^T)V)"),
    _compute("mlp", "dense MLP GEMMs"),
    _compute("experts", "routed experts' grouped GEMMs"),
    _compute("shared_expert", "shared experts' GEMMs"),
    _compute("router", "router GEMM and top-k"),
    _compute("elementwise", "norms, activations, residuals, rotary: the fused minimum"),
    _compute("quantise_cast", "FP8 quantise and cast kernels"),
    _compute("recompute", "forward work repeated by activation recompute"),
    # a hybrid model's Mamba-2 and gated DeltaNet layers (perf/hybrid_layers.py): in/out
    # projections, and the chunked SSD scan or delta rule (their causal convolutions and
    # gated norms stream in compute_elementwise)
    _compute("ssm_gemm", "Mamba-2 / DeltaNet in and out projections"),
    _compute("ssm_scan", "Mamba-2 SSD scan / DeltaNet delta rule"),
    # the implementation's kernels beyond the fused minimum (perf/elementwise_traffic.py)
    _compute("elementwise_unfused", "the stack's element-wise kernels beyond the minimum"),
    # (elementwise_traffic_factor - 1) x the analytical streaming count: a fitted residual,
    # named as such so the diagnosis does not present it as a kernel class
    StepTerm("compute_elementwise_extra", "compute", "calibrated_elementwise_residual",
             source="calibrated", meaning="fitted element-wise traffic beyond the model"),
    _comm("tp_all_gather", "tp", "sequence-parallel all-gathers"),
    _comm("tp_reduce_scatter", "tp", "sequence-parallel reduce-scatters"),
    _comm("tp_all_reduce", "tp", "tensor-parallel all-reduces"),
    # after the shared-expert overlap
    _comm("ep_all_to_all", "ep", "token dispatch and combine, not hidden", exposed=True),
    # after the attention-core overlap
    _comm("cp_send_recv", "cp", "context-parallel K/V ring, not hidden", exposed=True),
    _comm("pp_send_recv", "pp", "activations between pipeline stages"),
    # activation-offload copies over the host link beyond the block compute hiding them
    _comm("activation_offload", "host", "activation copies to and from the host, not hidden",
          exposed=True),
    # after the backward overlap
    _comm("dp_all_reduce", "dp/fsdp", "gradient all-reduce, not hidden", exposed=True),
    _comm("dp_reduce_scatter", "dp/fsdp", "gradient reduce-scatter, not hidden",
          exposed=True),
    _comm("dp_all_gather", "dp/fsdp", "updated-parameter all-gather, not hidden",
          exposed=True),
    # after one-block prefetch
    _comm("fsdp_all_gather", "dp/fsdp", "FSDP parameter gathers, not hidden", exposed=True),
    _comm("fsdp_reduce_scatter", "dp/fsdp", "FSDP gradient reduce-scatters, not hidden",
          exposed=True),
    # the compute the hidden DP/FSDP collectives slow (perf/data_parallel_time.py)
    StepTerm("dp_overlap_contention", "communication", "dp/fsdp", axis="dp/fsdp",
             meaning="compute slowed by the DP collectives it hides"),
    StepTerm("routing_imbalance", "imbalance", "routing_imbalance", source="calibrated",
             meaning="fitted wait for unevenly routed experts"),
    # busiest EP rank's extra routed tokens (learned router, capacity): perf/routing_load.py
    StepTerm("expert_load_imbalance", "imbalance", "expert_load_imbalance",
             meaning="wait for the busiest EP rank's extra tokens"),
    StepTerm("moe_host_sync", "dispatch", "moe_host_sync",
             meaning="host work a dropless MoE's device-to-host sync exposes"),
    StepTerm("dispatch_floor", "dispatch", "dispatch_floor", exposed_remainder=True,
             source="calibrated", meaning="CPU kernel launches the GPU waits for"),
    StepTerm("pipeline_bubble", "pipeline_bubble", "pipeline_bubble",
             meaning="pipeline fill and drain"),
    StepTerm("vocab_stage", "vocab_stage", "vocab_stage",
             meaning="embedding, LM head and loss (Eq. 13)"),
    StepTerm("optimizer", "optimizer", "optimizer", meaning="the optimizer update"),
    StepTerm("calibration", "overhead", "calibration", source="calibrated",
             meaning="fitted system overhead (chi_sys, stack)"),
)}


# the parts that are fitted residuals, time the model attributes to no mechanism (unlike
# the dispatch floor or the routing imbalance, whose calibrated constants scale a named one)
RESIDUAL_PARTS = frozenset({"calibrated_elementwise_residual", "calibration"})


def step_term(name: str) -> StepTerm:
    """The record of breakdown term ``name`` (a KeyError names a term the model lacks)."""
    return STEP_TERMS[name]


def term_meaning(name: str) -> str:
    """What breakdown term ``name`` is, in a few words ("" for a term without a record)."""
    term = STEP_TERMS.get(name)
    return "" if term is None else term.meaning
