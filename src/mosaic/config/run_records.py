"""Measured training runs in the ``published_runs.yaml`` schema, validated once.

A run record is one measured training job: model, layout, hardware and what was measured.
Each entry of a file's ``runs`` list is validated with pydantic (unknown fields rejected)
and becomes a frozen :class:`RunRecord` holding the library's own objects
(:class:`Workload`, :class:`ParallelPlans`, :class:`System`). An entry whose essentials are
missing or invalid is skipped with a reason naming the record and the field; a malformed
file raises. Every default the loader fills in is stated in ``RunRecord.assumptions``.
Schema, units and rules: docs/run_records.md (the schema of the shared calibration set,
``calibration/published_runs.yaml``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mosaic.arch.geometry import AttentionKind, Geometry, MLAConfig, MoEConfig
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, System, get_device, get_system
from mosaic.limits import LIMITS, check_pipeline
from mosaic.perf.memory import GIB
from mosaic.perf.plan import Checkpointing, ParallelPlans, Sharding, single_plan
from mosaic.perf.workload import Dispatcher, Precision, Workload
from mosaic.schema_validation import describe_validation_error, load_yaml_mapping
from mosaic.stacks import MicroBatchDefault, get_stack, stack_for_software
from mosaic.stacks.registry import OTHER_STACK

# ---------------------------------------------------------------- file schema (pydantic)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MLAEntry(_Strict):
    """DeepSeek MLA dimensions in Megatron-Core names (``qk_head_dim`` = non-rotary part)."""

    kv_lora_rank: int = Field(gt=0, le=LIMITS["width"].high)
    q_lora_rank: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)
    qk_head_dim: int = Field(gt=0, le=LIMITS["width"].high)
    qk_rope_head_dim: int = Field(gt=0, le=LIMITS["width"].high)
    v_head_dim: int = Field(gt=0, le=LIMITS["width"].high)


class MoEEntry(_Strict):
    experts: int = Field(gt=0, le=LIMITS["experts"].high)
    top_k: int = Field(gt=0, le=LIMITS["experts"].high)
    expert_ffn: int = Field(gt=0, le=LIMITS["width"].high)
    shared_experts: int = Field(default=0, ge=0, le=LIMITS["experts"].high)
    shared_expert_ffn: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)
    dense_layers: int = Field(default=0, ge=0, le=LIMITS["layers"].high)


class ModelEntry(_Strict):
    name: str = Field(min_length=1)
    layers: int = Field(gt=0, le=LIMITS["layers"].high)
    d_model: int = Field(gt=0, le=LIMITS["width"].high)
    heads: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)
    kv_heads: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)
    head_dim: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)
    ffn: int | None = Field(default=None, gt=0, le=LIMITS["width"].high)
    activation: Literal["swiglu", "geglu", "gelu", "relu", "squared_relu"]
    vocab: int = Field(gt=0, le=LIMITS["vocab"].high)
    tied_embeddings: bool | None = None
    attention: Literal["mha", "gqa", "mla"]
    mla: MLAEntry | None = None
    mtp_layers: int | None = Field(default=None, ge=0, le=LIMITS["layers"].high)
    moe: MoEEntry | None = None


class ParallelEntry(_Strict):
    tp: int = Field(gt=0, le=LIMITS["parallel_degree"].high)
    pp: int = Field(gt=0, le=LIMITS["parallel_degree"].high)
    vpp: int | None = Field(default=None, gt=0, le=LIMITS["vpp"].high)
    cp: int = Field(gt=0, le=LIMITS["parallel_degree"].high)
    ep: int | None = Field(default=None, gt=0, le=LIMITS["parallel_degree"].high)
    etp: int | None = Field(default=None, gt=0, le=LIMITS["parallel_degree"].high)
    dp: int = Field(gt=0, le=LIMITS["parallel_degree"].high)
    sequence_parallel: bool
    sharding: Literal["none", "zero1", "zero2", "fsdp", "hsdp"]
    dispatcher: str | None = None


class BatchEntry(_Strict):
    global_seqs: int = Field(gt=0, le=LIMITS["global_batch"].high)
    micro_seqs: int | None = Field(default=None, gt=0, le=LIMITS["micro_batch"].high)


class MeasuredEntry(_Strict):
    tokens_per_s_per_gpu: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    step_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    mfu_reported: float | None = Field(default=None, ge=0, le=1)
    tflops_per_gpu_reported: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_gib: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    consistent: bool = True
    oom: bool = False


class RunRecordEntry(_Strict):
    """One entry of a run-record file's ``runs`` list, as written."""

    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    software: str | None = None
    stack: str | None = Field(default=None, description="a mosaic.stacks name; overrides the "
                              "keyword match on `software`")
    stack_version: str | None = Field(default=None, description="container, release or commit")
    gpu: str = Field(min_length=1)
    num_gpus: int = Field(gt=0, le=LIMITS["devices"].high)
    gpus_per_node: int = Field(gt=0, le=LIMITS["gpus_per_node"].high)
    scaleup_domain: int = Field(gt=0, le=LIMITS["devices"].high)
    model: ModelEntry
    seq_len: int = Field(gt=0, le=LIMITS["seq_len"].high)
    precision: Literal["bf16", "fp16", "fp8", "fp8-cs", "fp8-blockwise", "mxfp8"]
    parallel: ParallelEntry
    batch: BatchEntry
    recompute: Literal["none", "selective", "full", "unknown"]
    routing: Literal["balanced", "dropless", "token_drop", "unknown"] | None = None
    measured: MeasuredEntry
    flops_convention: str = Field(min_length=1)
    confidence: Literal["high", "medium", "low"]
    notes: str = ""


# ---------------------------------------------------------------- mapping rules

# Reference node type per GPU: the vendor reference host (DGX/HGX, NVL72 rack) the published
# runs were measured on; Grand Teton for Meta's 96GB/500W H100 (torchtitan benchmarks).
REFERENCE_SYSTEMS: Mapping[str, str] = MappingProxyType(
    {
        "A100-SXM-80GB": "DGX-A100",
        "H100-SXM-80GB": "DGX-H100",
        "H100-SXM-96GB-500W": "Grand-Teton-H100",
        "H200-SXM-141GB": "DGX-H200",
        "H800-SXM-80GB": "H800-node",
        "B200": "DGX-B200",
        "B300": "DGX-B300",
        "GB200": "GB200-NVL72",
        "GB300": "GB300-NVL72",
    }
)

# Every FP8 recipe runs its GEMMs on the device's FP8 lane; the recipe stays in the record.
_PRECISIONS: Mapping[str, Precision] = MappingProxyType(
    {
        "bf16": Precision.BF16,
        "fp16": Precision.FP16,
        "fp8": Precision.FP8,
        "fp8-cs": Precision.FP8,
        "fp8-blockwise": Precision.FP8,
        "mxfp8": Precision.FP8,
    }
)

_GLU = MappingProxyType(
    {"swiglu": True, "geglu": True, "gelu": False, "relu": False, "squared_relu": False}
)


# recompute "unknown" -> the stack's ``unstated_recompute`` trait (mosaic.stacks). The
# stacks that leave it unstated (Megatron-Core via NeMo / Megatron-Bridge, NeMo AutoModel)
# run fused flash attention by default, which recomputes the attention scores in backward
# instead of storing them: the footprint selective recompute models (Korthikanti et al.
# 2022, Sec. 4.2). Full recompute is a deliberate setting that sources state.

# tokens/s/GPU and step time agree within this fraction when ``measured.consistent`` is true
# (published_runs.yaml description: "consistent = the two agree within 2%").
CONSISTENCY_TOLERANCE = 0.02


def reference_system(gpu: str, gpus_per_node: int, scaleup_domain: int) -> System:
    """The catalog node type for a record's GPU; its host and NVLink sizes must match."""
    try:
        device = get_device(gpu)
    except MosaicInputError:
        known = ", ".join(REFERENCE_SYSTEMS)
        raise MosaicInputError(f"gpu: unknown GPU {gpu!r}; known: {known}") from None
    name = REFERENCE_SYSTEMS.get(device.name)
    if name is None:
        raise MosaicInputError(f"gpu: no reference node type for {device.name!r} in the catalog")
    system = get_system(name)
    if (system.gpus_per_node, system.scale_up_domain_gpus) != (gpus_per_node, scaleup_domain):
        raise MosaicInputError(
            f"gpus_per_node/scaleup_domain: {gpus_per_node}/{scaleup_domain} do not match "
            f"{system.name} ({system.gpus_per_node} GPUs per host, "
            f"{system.scale_up_domain_gpus}-GPU NVLink domain)"
        )
    return system


def stack_label(software: str | None) -> str:
    """Software stack of a record (:func:`mosaic.stacks.stack_for_software`)."""
    return stack_for_software(software).name


# ---------------------------------------------------------------- frozen records


@dataclass(frozen=True)
class RunRecord:
    """One measured run, ready for the performance model.

    Attributes:
        id: the record's unique id.
        source: one-line citation of where the numbers come from.
        software: framework/container as the source names it (None = not stated).
        model_name: the model's name as recorded.
        workload: model, global batch, sequence length, GEMM precision, stack label.
        plan: the parallel layout (length-1 :class:`ParallelPlans`).
        system: catalog node type (see :func:`reference_system`).
        n_devices: GPUs in the job.
        precision_recipe: the record's precision (e.g. ``mxfp8``); ``workload.precision``
            is the FP lane it runs on.
        routing: MoE routing regime (balanced, dropless, token_drop, unknown); None if dense
            or not stated.
        confidence: the collector's rating (high, medium, low).
        measured_tokens_per_s_per_gpu: measured throughput; None only for an OOM run.
        measured_step_time_s: measured seconds per optimizer step; None only for an OOM run.
        measured_memory_bytes: reported peak memory per GPU, bytes (None = not reported).
        oom: the run failed with out-of-memory.
        group_key: "<model name> @ <GPU>": runs that share a model and a GPU type, the
            groups within which layout rankings are compared (Spearman).
        source_key: id prefix before the first '-' (e.g. ``bridge2511``), the unit of
            leave-one-source-out cross-validation.
        assumptions: one line per default the loader filled in.
    """

    id: str
    source: str
    software: str | None
    model_name: str
    workload: Workload
    plan: ParallelPlans
    system: System
    n_devices: int
    precision_recipe: str
    routing: str | None
    confidence: str
    measured_tokens_per_s_per_gpu: float | None
    measured_step_time_s: float | None
    measured_memory_bytes: float | None
    oom: bool
    group_key: str
    source_key: str
    assumptions: tuple[str, ...]

    @property
    def cluster(self) -> Cluster:
        return Cluster.from_n_devices(self.system, self.n_devices)


@dataclass(frozen=True)
class RunRecordSet:
    """The usable records of one file and the skipped ones as (id, reason)."""

    path: Path
    records: tuple[RunRecord, ...]
    skipped: tuple[tuple[str, str], ...]


class RunRecordWarning(UserWarning):
    """Some records of a run-record file were skipped (the count is in the message)."""


# ---------------------------------------------------------------- conversion


def _mla(model: ModelEntry) -> MLAConfig | None:
    if model.attention != "mla":
        return None
    if model.mla is None:
        raise MosaicInputError("model.mla: null, but MLA attention needs its dimensions")
    return MLAConfig(
        kv_lora_rank=model.mla.kv_lora_rank,
        qk_nope_head_dim=model.mla.qk_head_dim,
        qk_rope_head_dim=model.mla.qk_rope_head_dim,
        v_head_dim=model.mla.v_head_dim,
        q_lora_rank=model.mla.q_lora_rank,
    )


def _heads(model: ModelEntry, mla: MLAConfig | None, notes: list[str]) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim).

    The published file leaves head_dim null where a source does not state it (its README:
    never guessed there). Every such MHA/GQA record in it is a model whose published config
    uses d_model/heads (GPT-3, Llama-2, Mixtral, Nemotron, MPT), so the loader derives it
    and records the assumption; models where that rule fails (e.g. Qwen3) state head_dim.
    """
    if model.heads is None:
        raise MosaicInputError("model.heads: not stated (null)")
    if mla is None:
        if model.kv_heads is None:
            raise MosaicInputError("model.kv_heads: not stated (null)")
        head_dim = model.head_dim
        if head_dim is None:
            if model.d_model % model.heads:
                raise MosaicInputError(
                    f"model.head_dim: not stated and heads={model.heads} does not divide "
                    f"d_model={model.d_model}"
                )
            head_dim = model.d_model // model.heads
            notes.append(f"model.head_dim null: assumed d_model/heads = {head_dim}")
        return model.heads, model.kv_heads, head_dim
    kv_heads, head_dim = model.kv_heads, model.head_dim
    if kv_heads is None:
        kv_heads = model.heads
        notes.append("model.kv_heads unused by MLA: set to heads")
    if head_dim is None:
        head_dim = mla.v_head_dim
        notes.append("model.head_dim unused by MLA (its dims are in model.mla): set to v_head_dim")
    return model.heads, kv_heads, head_dim


def _moe(moe: MoEEntry | None, notes: list[str]) -> MoEConfig | None:
    if moe is None:
        return None
    if moe.shared_experts and moe.shared_expert_ffn is None:
        notes.append("moe.shared_expert_ffn not stated: expert_ffn assumed")
    return MoEConfig(
        experts=moe.experts,
        top_k=moe.top_k,
        expert_ffn=moe.expert_ffn,
        shared_experts=moe.shared_experts,
        shared_expert_ffn=moe.shared_expert_ffn,
        dense_layers=moe.dense_layers,
    )


def _ffn(model: ModelEntry, moe: MoEConfig | None, notes: list[str]) -> int:
    if model.ffn is not None:
        return model.ffn
    if moe is None:
        raise MosaicInputError("model.ffn: not stated (null) for a dense model")
    if moe.dense_layers:
        raise MosaicInputError(
            f"model.ffn: not stated (null), but moe.dense_layers={moe.dense_layers} "
            "dense layers need it"
        )
    notes.append(
        "model.ffn null (every layer is MoE): set to moe.expert_ffn as a placeholder "
        "(no dense layer uses it; the split factor reads 1)"
    )
    return moe.expert_ffn


def _geometry(model: ModelEntry, notes: list[str]) -> Geometry:
    mla = _mla(model)
    heads, kv_heads, head_dim = _heads(model, mla, notes)
    moe = _moe(model.moe, notes)
    ffn = _ffn(model, moe, notes)
    if model.tied_embeddings is None:
        notes.append("model.tied_embeddings not stated: untied assumed")
    if model.mtp_layers is None:
        notes.append("model.mtp_layers not stated: no MTP modules assumed")
    elif model.mtp_layers:
        notes.append(f"model.mtp_layers={model.mtp_layers} ignored: MTP modules not modelled")
    notes.append("norm and attention gate not recorded: LayerNorm, no gate assumed")
    return Geometry(
        layers=model.layers,
        d_model=model.d_model,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=model.vocab,
        glu=_GLU[model.activation],
        tied_embeddings=bool(model.tied_embeddings),
        attention=AttentionKind(model.attention),
        mla=mla,
        moe=moe,
    )


def _stated(value: int | None, field: str, notes: list[str], why: str = "") -> int:
    """``value``, or 1 with a note when the source did not state it."""
    if value is not None:
        return value
    notes.append(f"{field} not stated: 1 assumed{why}")
    return 1


def _pipeline_defaults(entry: RunRecordEntry, stack: str, notes: list[str]
                       ) -> tuple[int | None, int | None]:
    """(vpp, micro_seqs) with the stack's defaults filled in where the source is silent.

    torchtitan splits the local batch into as many micro-batches as pipeline ranks
    (``pipeline_parallel_microbatches or pipeline_parallel_degree``) and runs at least two
    stages per rank when interleaved; JAX/XLA trainers process the whole per-device batch
    in one step unless accumulation is stated; Megatron-LM's micro-batch defaults to 1
    (traits and sources in ``mosaic/stacks/data/stacks.yaml``).
    """
    traits = get_stack(stack)
    parallel, micro = entry.parallel, entry.batch.micro_seqs
    vpp = parallel.vpp
    if vpp is None and parallel.pp > 1 and traits.interleaved_vpp_default > 1:
        vpp = traits.interleaved_vpp_default
        notes.append(f"parallel.vpp not stated: {vpp} assumed ({stack} interleaved schedule, "
                     "fewest stages per rank)")
    if micro is None:
        local = entry.batch.global_seqs // parallel.dp
        if traits.micro_batch_default is MicroBatchDefault.LOCAL_BATCH_OVER_PP:
            micro = max(local // parallel.pp, 1) if parallel.pp > 1 else None
            why = f"{stack} splits the local batch of {local} into pp={parallel.pp} micro-batches"
        elif traits.micro_batch_default is MicroBatchDefault.WHOLE_LOCAL_BATCH:
            micro = max(local, 1)
            why = f"{stack} runs the whole local batch of {local} in one step, no accumulation"
        if micro is not None:
            notes.append(f"batch.micro_seqs not stated: {micro} assumed ({why})")
    return vpp, micro


def _plan(entry: RunRecordEntry, stack: str, notes: list[str]) -> ParallelPlans:
    parallel = entry.parallel
    vpp, micro_seqs = _pipeline_defaults(entry, stack, notes)
    if entry.recompute == "unknown":
        assumed = get_stack(stack).unstated_recompute
        checkpointing = Checkpointing.parse(assumed)
        notes.append(f"recompute unknown: {assumed} assumed ({stack}'s default)")
    else:
        checkpointing = Checkpointing.parse(entry.recompute)
    if parallel.sharding == "hsdp":
        notes.append("hsdp shard group not recorded: the whole dp group assumed")
    if entry.model.moe is not None and parallel.ep is None:
        # Expert parallelism sets the MoE layer's cost; guessing it would be a silent error.
        raise MosaicInputError("parallel.ep: not stated (null) for an MoE run")
    # The bound every command applies (mosaic.limits): each virtual stage holds a layer.
    check_pipeline(parallel.pp, vpp or 1, entry.model.layers, "parallel")
    return single_plan(
        tp=parallel.tp,
        pp=parallel.pp,
        vpp=_stated(vpp, "parallel.vpp", notes, " (no interleaving)"),
        cp=parallel.cp,
        dp=parallel.dp,
        ep=_stated(parallel.ep, "parallel.ep", notes),
        etp=_stated(parallel.etp, "parallel.etp", notes, " (Megatron-Core would default to tp)"),
        micro_batch=_stated(micro_seqs, "batch.micro_seqs", notes),
        sharding=Sharding.parse(parallel.sharding),
        checkpointing=checkpointing,
        sequence_parallel=parallel.sequence_parallel,
    )


def _check_layout(entry: RunRecordEntry, plan: Mapping[str, Any]) -> None:
    """Identities a record must satisfy to be self-consistent (Megatron-Core mesh, Eq. 24).

    Rules of mosaic's own layout search (e.g. pp·vpp dividing the layers) are not applied:
    the sources ran these layouts, uneven pipeline stages included.
    """
    tp, pp, cp, dp, ep, etp = (plan[k] for k in ("tp", "pp", "cp", "dp", "ep", "etp"))
    if tp * pp * cp * dp != entry.num_gpus:
        raise MosaicInputError(
            f"parallel.dp: tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} = {tp * pp * cp * dp}, "
            f"not num_gpus={entry.num_gpus}"
        )
    if entry.batch.global_seqs % (dp * plan["micro_batch"]):
        raise MosaicInputError(
            f"batch.global_seqs: {entry.batch.global_seqs} is not a multiple of "
            f"dp·micro_seqs = {dp}·{plan['micro_batch']}"
        )
    moe = entry.model.moe
    if moe is None and (ep, etp) != (1, 1):
        raise MosaicInputError(f"parallel.ep: ep={ep}, etp={etp} must be 1 for a dense model")
    if moe is not None and moe.experts % ep:
        raise MosaicInputError(f"parallel.ep: ep={ep} does not divide moe.experts={moe.experts}")
    if (tp * cp * dp) % (etp * ep):
        raise MosaicInputError(
            f"parallel.ep: etp·ep = {etp}·{ep} does not divide tp·cp·dp = {tp}·{cp}·{dp} "
            "(the expert mesh repartitions the dense data-parallel ranks)"
        )


def _measured(entry: RunRecordEntry, notes: list[str]) -> tuple[float | None, float | None]:
    """(tokens/s/GPU, step time): both None for an OOM run, both set otherwise."""
    measured = entry.measured
    tokens_per_s, step_time_s = measured.tokens_per_s_per_gpu, measured.step_time_s
    if measured.oom:
        if tokens_per_s is not None or step_time_s is not None:
            raise MosaicInputError("measured.oom: true, but an OOM run has no throughput")
        return None, None
    if tokens_per_s is None or step_time_s is None:
        missing = "tokens_per_s_per_gpu" if tokens_per_s is None else "step_time_s"
        raise MosaicInputError(f"measured.{missing}: required unless measured.oom is true")
    implied = entry.batch.global_seqs * entry.seq_len / (step_time_s * entry.num_gpus)
    gap = implied / tokens_per_s - 1
    if measured.consistent and abs(gap) > CONSISTENCY_TOLERANCE:
        raise MosaicInputError(
            f"measured.consistent: true, but step_time_s={step_time_s} implies "
            f"{implied:.6g} tokens/s/GPU, not {tokens_per_s} ({gap:+.1%})"
        )
    if not measured.consistent:
        notes.append(f"measured tokens/s and step time disagree by {gap:+.1%}")
    return tokens_per_s, step_time_s


def _dispatcher(entry: RunRecordEntry, notes: list[str]) -> Dispatcher:
    """The record's EP dispatcher; unstated means Megatron-Core's default all-to-all."""
    stated = (entry.parallel.dispatcher or "").strip().casefold()
    if not stated:
        return Dispatcher.ALLTOALL
    for dispatcher in Dispatcher:
        if dispatcher.value in stated:
            return dispatcher
    notes.append(f"dispatcher {entry.parallel.dispatcher!r} not recognised: all-to-all assumed")
    return Dispatcher.ALLTOALL


def run_record_from_entry(entry: RunRecordEntry) -> RunRecord:
    """Convert one validated entry; MosaicInputError names the field when it is unusable."""
    notes: list[str] = []
    system = reference_system(entry.gpu, entry.gpus_per_node, entry.scaleup_domain)
    if entry.num_gpus % entry.gpus_per_node:
        raise MosaicInputError(
            f"num_gpus: {entry.num_gpus} does not fill whole hosts of {entry.gpus_per_node}"
        )
    geometry = _geometry(entry.model, notes)
    stack = get_stack(entry.stack).name if entry.stack else stack_label(entry.software)
    if stack == OTHER_STACK and entry.stack is None:
        what = "not stated" if entry.software is None else f"{entry.software!r} not recognised"
        notes.append(f"software {what}: stack label {OTHER_STACK!r}")
    if _PRECISIONS[entry.precision].value != entry.precision:
        notes.append(f"precision {entry.precision} modelled on the fp8 lane")
    workload = Workload(
        geometry=geometry,
        global_batch=entry.batch.global_seqs,
        seq_len=entry.seq_len,
        precision=_PRECISIONS[entry.precision],
        stack=stack,
        routing=entry.routing or "dropless",
        dispatcher=_dispatcher(entry, notes),
    )
    notes.append("optimizer not recorded: AdamW assumed")
    plan = _plan(entry, stack, notes)
    _check_layout(entry, plan.row(0))
    tokens_per_s, step_time_s = _measured(entry, notes)
    memory_gib = entry.measured.memory_gib
    return RunRecord(
        id=entry.id,
        source=entry.source,
        software=entry.software,
        model_name=entry.model.name,
        workload=workload,
        plan=plan,
        system=system,
        n_devices=entry.num_gpus,
        precision_recipe=entry.precision,
        routing=entry.routing,
        confidence=entry.confidence,
        measured_tokens_per_s_per_gpu=tokens_per_s,
        measured_step_time_s=step_time_s,
        measured_memory_bytes=None if memory_gib is None else memory_gib * GIB,
        oom=entry.measured.oom,
        group_key=f"{entry.model.name} @ {system.device.name}",
        source_key=entry.id.split("-", 1)[0],
        assumptions=tuple(notes),
    )


# ---------------------------------------------------------------- loading


def _validate_entry(raw: Any, where: str) -> RunRecordEntry:
    """Validate one raw entry; unknown fields are all listed, other problems as usual."""
    if not isinstance(raw, dict):
        raise MosaicInputError(f"{where}: expected a mapping, got {type(raw).__name__}")
    try:
        return RunRecordEntry.model_validate(raw)
    except ValidationError as exc:
        unknown = sorted(
            ".".join(str(part) for part in error["loc"])
            for error in exc.errors()
            if error["type"] == "extra_forbidden"
        )
        if unknown:
            raise MosaicInputError(f"{where}: unknown field(s) {', '.join(unknown)}") from None
        raise MosaicInputError(describe_validation_error(exc, where)) from None


def _runs_list(document: dict[str, Any], path: Path) -> list[Any]:
    unknown = sorted(set(document) - {"schema_version", "description", "runs"})
    if unknown:
        raise MosaicInputError(
            f"{path}: unknown top-level field(s) {', '.join(unknown)}; "
            "allowed: schema_version, description, runs"
        )
    version = document.get("schema_version", 1)
    if version != 1:
        raise MosaicInputError(f"{path}: schema_version {version!r} is not supported (only 1)")
    runs = document.get("runs")
    if not isinstance(runs, list):
        got = "nothing" if runs is None else type(runs).__name__
        raise MosaicInputError(f"{path}: expected a 'runs' list of run records, got {got}")
    return runs


def load_run_records(path: str | Path) -> RunRecordSet:
    """Load a run-record file: usable records plus (id, reason) for each skipped one.

    A malformed file (not YAML, no ``runs`` list) raises MosaicInputError naming the file;
    a bad record is skipped, and one :class:`RunRecordWarning` gives the count.
    """
    path = Path(path)
    runs = _runs_list(load_yaml_mapping(path), path)
    records: list[RunRecord] = []
    skipped: list[tuple[str, str]] = []
    first_entry: dict[str, int] = {}
    for index, raw in enumerate(runs, start=1):
        raw_id = raw.get("id") if isinstance(raw, dict) else None
        run_id = raw_id if isinstance(raw_id, str) and raw_id else f"<entry {index}>"
        where = f"run {run_id!r} (entry {index})"
        try:
            if run_id in first_entry:
                raise MosaicInputError(f"{where}: id: duplicate of entry {first_entry[run_id]}")
            first_entry[run_id] = index
            entry = _validate_entry(raw, where)
            try:
                records.append(run_record_from_entry(entry))
            except MosaicInputError as exc:
                raise MosaicInputError(f"{where}: {exc}") from None
        except MosaicInputError as exc:
            skipped.append((run_id, str(exc)))
    if skipped:
        warnings.warn(
            f"{path}: skipped {len(skipped)} of {len(runs)} run records "
            "(reasons in RunRecordSet.skipped)",
            RunRecordWarning,
            stacklevel=2,
        )
    return RunRecordSet(path=path, records=tuple(records), skipped=tuple(skipped))
