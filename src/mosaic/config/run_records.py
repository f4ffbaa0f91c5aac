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

import difflib
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mosaic.config.blocks import (
    QUANTISED_GEMMS_HELP,
    BatchBlock,
    CrossEntropyName,
    EagerKernelsName,
    ExpertGemmName,
    ModelBlock,
    MoePermuteName,
    OptimizerDtypeName,
    ParallelismBlock,
    QuantisedGemmsName,
    Routing,
)
from mosaic.config.convert import geometry_from_model
from mosaic.config.layout import (
    data_parallel,
    dispatcher_for,
    fp8_recipe_for,
    has_release_recipes,
    layout_parallelism,
    plan_from_blocks,
    recipe_defaults,
    resolve_pipeline_layouts,
    with_recipe_mtp_modules,
)
from mosaic.config.spelling import RECORD_RULES, canonical_document, warn_deprecated
from mosaic.errors import MosaicInputError, MosaicWarning, shown
from mosaic.hardware import Cluster, System, active_catalog, get_device, get_system
from mosaic.limits import LIMITS
from mosaic.perf.plan import Checkpointing, ParallelPlans
from mosaic.perf.routing_load import routing_assumptions
from mosaic.perf.workload import Precision, QuantisedGemms, Workload, precision_lane
from mosaic.schema_validation import (
    describe_validation_error,
    load_yaml_mapping,
    suggested_field,
)
from mosaic.stacks import get_stack, stack_for_software
from mosaic.stacks.registry import (
    OTHER_STACK,
    gdn_context_parallel,
    release_number_text,
    release_text,
)
from mosaic.units import GIB
from mosaic.yaml_stream import StreamError, iter_list_items, scan_mapping

# ---------------------------------------------------------------- file schema (pydantic)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# why a measured.trained record's throughput is not scored (RunRecord.throughput_not_scored)
TRAINED_WITHOUT_THROUGHPUT = ("no throughput measured: the record states only that the run "
                              "trained (measured.trained), a memory check")


class MeasuredEntry(_Strict):
    tokens_per_s_per_gpu: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    step_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    mfu_reported: float | None = Field(default=None, ge=0, le=1)
    tflops_per_gpu_reported: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_gib: float | None = Field(default=None, gt=0, le=LIMITS["memory_gib"].high,
                                     allow_inf_nan=False)
    memory_measure: Literal["allocator", "allocated", "device"] | None = Field(
        default=None, description="what memory_gib measures: allocator = the caching "
        "allocator's peak (torch.cuda.max_memory_reserved, as torchtitan and Megatron log "
        "it); allocated = the peak of live tensors (max_memory_allocated, 'peak active'); "
        "device = device memory in use as nvidia-smi / NVML reads it (the allocator's "
        "segments plus the CUDA context and NCCL buffers); null = allocator")
    consistent: bool = True
    oom: bool = False
    trained: bool = Field(
        default=False, description="the run trained (did not run out of memory) though no "
        "throughput is stated, e.g. a performance preset a stack ships: a memory-only record "
        "whose throughput is not scored")

    @field_validator("memory_measure", mode="before")
    @classmethod
    def _named_by_its_tool(cls, value: object) -> object:
        """The tool or PyTorch call a figure came from, named for the value that means it
        (a trial wrote 'nvidia-smi' and got the allowed values only)."""
        if isinstance(value, str):
            key = value.strip().lower().replace("_", "").replace("-", "").replace(" ", "")
            for words, meant in MEMORY_MEASURE_SOURCES.items():
                if key in words:
                    raise ValueError(f"{shown(value)} is measured as {shown(meant)}: write "
                                     f"memory_measure: {meant}")
        return value


# What the tools and calls a memory figure comes from measure (docs/memory.md, "What a
# memory figure measures"), spelled without separators.
MEMORY_MEASURE_SOURCES = {
    ("nvidiasmi", "nvml", "smi", "dcgm"): "device",
    ("maxmemoryreserved", "reserved", "torchcudamaxmemoryreserved"): "allocator",
    ("maxmemoryallocated", "peakactive", "active", "torchcudamaxmemoryallocated"): "allocated",
}


class RunRecordEntry(_Strict):
    """One entry of a run-record file's ``runs`` list in the canonical spelling.

    ``model``, ``parallelism`` and ``batch`` are the blocks every input shares
    (:mod:`mosaic.config.blocks`); older spellings are translated before validation.
    """

    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    software: str | None = None
    stack: str | None = Field(default=None, description="a mosaic.stacks name; overrides the "
                              "keyword match on `software`")
    stack_version: str | None = Field(default=None, description="container, release or commit")
    gpu: str = Field(min_length=1)
    system: str | None = Field(default=None, min_length=1,
                               description="catalog node type the run used (docs/hardware.md); "
                                           "None = the reference node type of its GPU")
    num_gpus: int = Field(gt=0, le=LIMITS["devices"].high)
    gpus_per_node: int = Field(gt=0, le=LIMITS["gpus_per_node"].high)
    scaleup_domain: int = Field(gt=0, le=LIMITS["devices"].high)
    model: ModelBlock
    precision: Literal["bf16", "fp16", "fp8", "fp8-cs", "fp8-blockwise", "mxfp8", "nvfp4"]
    parallelism: ParallelismBlock
    batch: BatchBlock
    recompute: Literal["none", "selective", "full", "unknown"]
    routing: Routing | None = None
    pad_to_capacity: bool | None = Field(
        default=None, description="token_drop pads each expert's input to its capacity "
        "(Megatron-Core --moe-pad-expert-input-to-capacity); null = false, its default")
    routing_imbalance: float | None = Field(
        default=None, ge=1, le=LIMITS["devices"].high, allow_inf_nan=False,
        description="busiest EP rank's routed tokens over the even share under a learned "
        "router, where the source states it; null = derived (mosaic.perf.routing_load)")
    cross_entropy: CrossEntropyName | None = Field(
        default=None, description="the LM loss as the source ran it (e.g. compiled when "
        "torch.compile covers the loss); null = the stack's cross_entropy trait")
    grad_reduce_in_fp32: bool | None = Field(
        default=None, description="gradient buffers and reduction in fp32; false = bf16 "
        "(--grad-reduce-in-bf16); null = fp32, Megatron-LM's default")
    offloaded_activation_layers: int | None = Field(
        default=None, ge=0, le=LIMITS["layers"].high, description="blocks whose activations "
        "are offloaded to host memory (Megatron-Core cpu_offloading_num_layers); null = 0")
    recompute_modules: list[str] | None = Field(
        default=None, description="Megatron-Core --recompute-modules under selective "
        "recompute (core_attn, mla_up_proj, layernorm, moe_act, mlp, moe, shared_experts); "
        "null = core_attn, its default")
    optimizer_dtype: OptimizerDtypeName | None = Field(
        default=None, description="the optimizer's parameter copy and moments: fp32 master "
        "weights and moments, bf16 (it steps the bf16 parameters in place with bf16 "
        "moments) or bf16_moments (fp32 master weights, bf16 moments); null = fp32")
    fsdp_keep_gathered: bool | None = Field(
        default=None, description="fully sharded units stay gathered through the step and "
        "gradients accumulate unsharded, also without PP; null = false")
    full_iteration_cuda_graph: bool | None = Field(
        default=None, description="the step replays one CUDA graph (Megatron-Core "
        "--cuda-graph-impl full_iteration; MoE with a static per-rank token budget); null = "
        "the stack release's default (docs/stacks.md), else false")
    layer_cuda_graphs: bool | None = Field(
        default=None, description="each transformer layer's forward and backward replay one "
        "CUDA graph (Megatron-Core enable_cuda_graph / --cuda-graph-impl local); null = the "
        "stack release's recipe (docs/stacks.md), else false")
    dp_comm_overlap: bool | None = Field(
        default=None, description="DDP/ZeRO collectives overlap the passes bucket by bucket "
        "(Megatron-LM --overlap-grad-reduce / --overlap-param-gather); false = all exposed; "
        "null = true")
    torch_compile: bool | None = Field(
        default=None, description="eager-torch model code ran under torch.compile; false = "
        "eager kernels; null = the stack's default (docs/evidence/elementwise_fusion.md)")
    moe_permute: MoePermuteName | None = Field(
        default=None, description="the MoE token-movement code the run used (e.g. a "
        "torchtitan era); null = the stack's (docs/evidence/moe_permute_traffic.md)")
    eager_kernels: EagerKernelsName | None = Field(
        default=None, description="the torch era of the run's eager RMSNorm model code: "
        "eager_fp32_norm (PyTorch before 2.9) or eager_fused_rmsnorm; null = the stack's "
        "(docs/evidence/elementwise_fusion.md)")
    max_nodes_per_token: int | None = Field(
        default=None, ge=1, le=LIMITS["devices"].high, description="node-limited routing: "
        "each token's experts on at most this many nodes (DeepSeek-V3's M = 4, arXiv:"
        "2412.19437 Sec. 3.2.2); null = unrestricted, or the stack's recipe")
    fp8_glu_inputs: bool | None = Field(
        default=None, description="the routed experts' SwiGLU inputs saved in FP8 (DeepSeek-V3 "
        "report Sec. 3.3.3); null = false, or the stack's recipe")
    fused_grouped_mlp: bool | None = Field(
        default=None, description="the routed experts ran as Transformer Engine's fused "
        "grouped MLP (Megatron-Core use_transformer_engine_op_fuser with "
        "moe_mlp_glu_interleave_size 32; needs MXFP8 and SwiGLU experts); null = false, or "
        "the stack's recipe")
    fp8_dot_product_attention: bool | None = Field(
        default=None, description="the attention core ran Transformer Engine's FP8 fused "
        "attention (Megatron-Core fp8_dot_product_attention, the recipes' fp8_dpa; needs FP8 "
        "and Megatron-Core); null = false, or the stack's recipe")
    quantised_gemms: QuantisedGemmsName | None = Field(
        default=None, description=QUANTISED_GEMMS_HELP + "; null = all")
    expert_gemm: ExpertGemmName | None = Field(
        default=None, description="how the routed-expert GEMMs ran: grouped, or xla_expanded "
        "(jax.lax.ragged_dot_general as XLA lowers it on NVIDIA GPUs: a dense dot over every "
        "local expert; docs/evidence/levanter_stack.md); null = grouped")
    loss_chunks: int | None = Field(
        default=None, ge=1, le=LIMITS["seq_len"].high, description="sequence chunks the LM "
        "head and loss run over one after another, each chunk's backward first (torchtitan "
        "ChunkedCELoss); null = 1")
    recompute_block_fraction: float | None = Field(
        default=None, ge=0, le=1, description="share of blocks checkpointed whole under "
        "selective recompute on a block-level stack (fms-fsdp selective_checkpointing p), "
        "or recomputed under full (Megatron-Core recompute_method block, k of L); null = 1")
    measured: MeasuredEntry
    flops_convention: str = Field(default="none_reported", min_length=1)
    confidence: Literal["high", "medium", "low"]
    notes: str = ""

    @field_validator("stack_version", mode="before")
    @classmethod
    def _release_number(cls, value: object) -> object:
        """An unquoted YAML release (26.06) arrives as a number: read it as YY.MM."""
        return release_number_text(value)

    @field_validator("model", mode="before")
    @classmethod
    def _inline_model(cls, value: object) -> object:
        """A model given as a path (a trial's HF config.json) is not read: say how to get
        the inline block, not pydantic's 'a valid dictionary or instance of ModelBlock'."""
        if isinstance(value, str):
            raise ValueError(
                "a name or path is not read here: a run record holds the model block inline "
                "(layers, d_model, heads, ... as in docs/schema.md). For a HuggingFace "
                "config.json, `mosaic export JOB.yaml --model CONFIG.json --to yaml` writes a "
                "job whose model block can be pasted here")
        return value


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

# recompute "unknown" -> the stack's ``unstated_recompute`` trait (mosaic.stacks): the
# framework's own default where a recipe does not say (Megatron-Core: none,
# TransformerConfig.recompute_granularity None; NeMo AutoModel: full; torchtitan:
# selective). Fused flash attention recomputes the attention scores inside its backward
# either way, so "none" stores no score matrix (Korthikanti et al. 2022, Sec. 4.2).

# tokens/s/GPU and step time agree within this fraction when ``measured.consistent`` is true
# (published_runs.yaml description: "consistent = the two agree within 2%").
CONSISTENCY_TOLERANCE = 0.02


def reference_system(gpu: str, gpus_per_node: int, scaleup_domain: int) -> System:
    """The catalog node type for a record's GPU: its reference host (``REFERENCE_SYSTEMS``),
    else the first catalog system holding the GPU (a user's too, ``--catalog``) whose host
    and NVLink sizes are the record's; those sizes must match."""
    try:
        device = get_device(gpu)
    except MosaicInputError as exc:
        raise MosaicInputError(f"gpu: {exc}") from None
    name = REFERENCE_SYSTEMS.get(device.name)
    if name is not None:
        return _matching_host(get_system(name), gpus_per_node, scaleup_domain)
    holding = [s for s in active_catalog().systems.values() if s.device.name == device.name]
    for system in holding:
        if (system.gpus_per_node, system.scale_up_domain_gpus) == (gpus_per_node,
                                                                   scaleup_domain):
            return system
    if not holding:
        raise MosaicInputError(f"gpu: no node type in the catalog holds {device.name}; add one "
                               "with --catalog (docs/hardware.md) and name it in system:")
    return _matching_host(holding[0], gpus_per_node, scaleup_domain)


def record_system(entry: RunRecordEntry) -> System:
    """The node type a record names (``system``), else its GPU's reference node type; its
    GPU and host sizes must match the record's."""
    if entry.system is None:
        return reference_system(entry.gpu, entry.gpus_per_node, entry.scaleup_domain)
    return matching_system(entry.system, entry.gpu, entry.gpus_per_node, entry.scaleup_domain)


def matching_system(name: str, gpu: str, gpus_per_node: int, scaleup_domain: int) -> System:
    """Catalog node type ``name``, which must hold ``gpu`` on hosts of the given sizes."""
    system = get_system(name)
    device = get_device(gpu)
    if system.device.name != device.name:
        raise MosaicInputError(f"system: {system.name} holds {system.device.name}, not the "
                               f"record's gpu {device.name}")
    return _matching_host(system, gpus_per_node, scaleup_domain)


def _matching_host(system: System, gpus_per_node: int, scaleup_domain: int) -> System:
    """``system`` if the record's host and NVLink-domain sizes are its own."""
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
        memory_measure: what that figure measures: "allocator" (the caching allocator's
            peak), "allocated" (the peak of live tensors) or "device" (nvidia-smi: plus the
            CUDA context and NCCL buffers, mosaic.perf.device_memory).
        oom: the run failed with out-of-memory.
        group_key: "<model name> @ <GPU>": runs that share a model and a GPU type, the
            groups within which layout rankings are compared (Spearman).
        source_key: id prefix before the first '-' (e.g. ``bridge2511``), the unit of
            leave-one-source-out cross-validation.
        assumptions: one line per default the loader filled in.
        stated_settings: the workload settings the record itself states (dispatcher,
            ep_overlap, dispatch_fp8, tp_comm_overlap, cross_entropy, grad_reduce_in_fp32,
            offloaded_activation_layers, recompute_modules, optimizer_dtype,
            fsdp_keep_gathered, full_iteration_cuda_graph, layer_cuda_graphs, pad_to_capacity,
            recompute_block_fraction, dp_comm_overlap, torch_compile, moe_permute,
            eager_kernels, loss_chunks,
            expert_gemm, recompute when not 'unknown'); documented record
            settings never override these.
        stack_version: the release the record's recipe settings were read for (YY.MM or
            YY.MM.0N, from ``stack_version`` or ``software``; None when neither names one):
            a job made from the record keeps it (:func:`mosaic.config.job_schema.
            job_from_run_record`).
        throughput_not_scored: why the measured throughput cannot be compared with the
            catalogued hardware (e.g. GPUs power-limited to an unstated cap) or cannot be
            known (the source contradicts itself about the tokens a step processed or the
            layout that processed them), with the
            evidence; such a run is predicted and listed but left out of throughput fits and
            accuracy figures (its memory still counts). None: scored.
        measurement_disagreement: the record states ``measured.consistent: false``: how
            its tokens/s and step time disagree (the tokens/s is scored, and the step time
            it implies is used); None when the record says they agree.
        software_unrecognised: the record names software in which no known stack is
            recognised and states no stack, so it is costed on the generic stack.
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
    stated_settings: frozenset[str] = frozenset()
    throughput_not_scored: str | None = None
    memory_measure: str = "allocator"
    stack_version: str | None = None
    measurement_disagreement: str | None = None
    software_unrecognised: bool = False

    @property
    def throughput_scored(self) -> bool:
        """Whether the measured throughput enters fits and accuracy figures."""
        return self.throughput_not_scored is None and not self.oom

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


def _plan(entry: RunRecordEntry, stack: str, notes: list[str],
          recipe_recompute: str | None) -> ParallelPlans:
    """The record's layout row; an unknown recompute policy is the recipe's
    (``recipe_recompute``, already noted) or else the stack's default."""
    if entry.recompute == "unknown" and recipe_recompute is not None:
        checkpointing = Checkpointing.parse(recipe_recompute)
        notes.append(f"recompute unknown: {recipe_recompute} ({stack}'s recipe for this run)")
    elif entry.recompute == "unknown":
        assumed = get_stack(stack).unstated_recompute
        checkpointing = Checkpointing.parse(assumed)
        notes.append(f"recompute unknown: {assumed} assumed ({stack}'s default)")
    else:
        checkpointing = Checkpointing.parse(entry.recompute)
    return plan_from_blocks(
        entry.parallelism, entry.batch,
        dp=data_parallel(entry.parallelism, entry.num_gpus, "parallelism"),
        layers=entry.model.layers, is_moe=entry.model.moe is not None, stack=stack,
        checkpointing=checkpointing, measured=True, notes=notes, where="parallelism")


def _check_layout(entry: RunRecordEntry, plan: Mapping[str, Any]) -> None:
    """Identities a record must satisfy to be self-consistent (Megatron-Core mesh, Eq. 24).

    Rules of mosaic's own layout search (e.g. pp·vpp dividing the layers) are not applied:
    the sources ran these layouts, uneven pipeline stages included.
    """
    tp, pp, cp, dp, ep, etp = (plan[k] for k in ("tp", "pp", "cp", "dp", "ep", "etp"))
    if tp * pp * cp * dp != entry.num_gpus:
        raise MosaicInputError(
            f"parallelism.dp: tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} = {tp * pp * cp * dp}, "
            f"not num_gpus={entry.num_gpus}"
        )
    if entry.batch.global_seqs % (dp * plan["micro_batch"]):
        raise MosaicInputError(
            f"batch.global_seqs: {entry.batch.global_seqs} is not a multiple of "
            f"dp·micro_seqs = {dp}·{plan['micro_batch']}"
        )
    local = entry.batch.local_seqs
    if local is not None and (local % plan["micro_batch"]
                              or entry.batch.global_seqs % (dp * local)):
        raise MosaicInputError(
            f"batch.local_seqs: {local} must be a multiple of micro_seqs={plan['micro_batch']} "
            f"and dp·local_seqs = {dp}·{local} must divide global_seqs="
            f"{entry.batch.global_seqs}")
    moe = entry.model.moe
    if moe is None and (ep, etp) != (1, 1):
        raise MosaicInputError(
            f"parallelism.ep: ep={ep}, etp={etp} must be 1 for a dense model")
    if moe is not None and moe.experts % ep:
        raise MosaicInputError(
            f"parallelism.ep: ep={ep} does not divide model.moe.experts={moe.experts}")
    if (tp * cp * dp) % (etp * ep):
        raise MosaicInputError(
            f"parallelism.ep: etp·ep = {etp}·{ep} does not divide tp·cp·dp = {tp}·{cp}·{dp} "
            "(the expert mesh repartitions the dense data-parallel ranks)"
        )


# what a YY.MM release with a typo looks like: two digits, a point, a short tail
_LIKE_A_RELEASE = re.compile(r"\d{2}\.\w{1,3}(\.\w{1,3})?")

# how the note on a record stating ``measured.consistent: false`` begins (commands find it)
MEASUREMENT_DISAGREEMENT_PREFIX = "measured tokens/s and step time disagree by"


def _unit_slip(ratio: float, entry: RunRecordEntry) -> str:
    """The unit slips a disagreement between tokens/s and step time matches (implied over
    stated tokens/s within 3% of a known factor), as a hint naming each one that matches
    (1/1024 GPUs and 1/1000 for milliseconds are 2.4% apart: both are named); empty when
    none matches."""
    slips = (
        (1 / entry.gpus_per_node, f"tokens_per_s_per_gpu looks like a per-node figure: divide "
                                  f"it by gpus_per_node ({entry.gpus_per_node})"),
        (1 / entry.num_gpus, "tokens_per_s_per_gpu looks like the whole cluster's: divide it "
                             f"by num_gpus ({entry.num_gpus})"),
        (float(entry.batch.seq_len), "batch.global_seqs counts sequences of batch.seq_len "
                                     "tokens, not tokens"),
        (1e-3, "step_time_s looks like milliseconds: write seconds"),
    )
    matching = list(dict.fromkeys(hint for factor, hint in slips
                                  if factor != 1 and abs(ratio / factor - 1) < 0.03))
    return f"; {', or '.join(matching)}" if matching else ""


def _measured(entry: RunRecordEntry, notes: list[str]
              ) -> tuple[float | None, float | None, str | None]:
    """(tokens/s/GPU, step time, disagreement): the first two None for an OOM run, both set
    otherwise; the third the assumption a ``consistent: false`` record is scored under."""
    measured = entry.measured
    tokens_per_s, step_time_s = measured.tokens_per_s_per_gpu, measured.step_time_s
    if measured.oom:
        if measured.trained:
            raise MosaicInputError("measured.trained and measured.oom are both true: a run "
                                   "either trained or ran out of memory")
        if tokens_per_s is not None or step_time_s is not None:
            raise MosaicInputError("measured.oom: true, but an OOM run has no throughput")
        return None, None, None
    tokens_per_step = entry.batch.global_seqs * entry.batch.seq_len
    if tokens_per_s is None and step_time_s is None:
        if measured.trained:  # a memory-only record (throughput_not_scored says so)
            return None, None, None
        raise MosaicInputError("measured: give tokens_per_s_per_gpu or step_time_s (the other "
                               "follows from the batch), unless measured.oom is true (or "
                               "measured.trained, for a run that trained with no throughput "
                               "stated)")
    if step_time_s is None or tokens_per_s is None:
        # one measurement states the other: tokens/s/GPU = global_seqs·seq_len/(step·GPUs)
        if step_time_s is None:
            step_time_s = tokens_per_step / (tokens_per_s * entry.num_gpus)
            notes.append(f"step_time_s not stated: {step_time_s:.6g} s from the tokens/s and "
                         "the batch")
        else:
            tokens_per_s = tokens_per_step / (step_time_s * entry.num_gpus)
            notes.append(f"tokens_per_s_per_gpu not stated: {tokens_per_s:.6g} from the step "
                         "time and the batch")
        return tokens_per_s, step_time_s, None
    implied = tokens_per_step / (step_time_s * entry.num_gpus)
    gap = implied / tokens_per_s - 1
    if measured.consistent and abs(gap) > CONSISTENCY_TOLERANCE:
        raise MosaicInputError(
            f"measured.consistent: true, but step_time_s={step_time_s} implies "
            f"{implied:.6g} tokens/s/GPU, not {tokens_per_s} ({gap:+.1%})"
            + _unit_slip(implied / tokens_per_s, entry))
    if not measured.consistent:
        # One measurement for every command: validate scores tokens/s, so calibrate, perf
        # and explain take the step it implies (a record with a step time in milliseconds
        # had calibrate fit it while validate scored the tokens/s; a trial).
        implied_step_s = tokens_per_step / (tokens_per_s * entry.num_gpus)
        disagreement = (f"{MEASUREMENT_DISAGREEMENT_PREFIX} {gap:+.1%}: the step "
                        f"time the tokens/s implies, {implied_step_s:.6g} s, is used (stated "
                        f"{step_time_s:g} s)")
        notes.append(disagreement)
        return tokens_per_s, implied_step_s, disagreement
    return tokens_per_s, step_time_s, None


def run_record_from_entry(entry: RunRecordEntry) -> RunRecord:
    """Convert one validated entry; MosaicInputError names the field when it is unusable."""
    notes: list[str] = []
    system = record_system(entry)
    if entry.num_gpus % entry.gpus_per_node:
        raise MosaicInputError(
            f"num_gpus: {entry.num_gpus} does not fill whole hosts of {entry.gpus_per_node}"
        )
    if entry.model.name is None:
        raise MosaicInputError("model.name: required in a run record (part of the group key)")
    geometry = geometry_from_model(entry.model, notes, measured=True)
    entry = entry.model_copy(update={
        "parallelism": layout_parallelism(entry.parallelism, notes)})
    stack = get_stack(entry.stack).name if entry.stack else stack_label(entry.software)
    if stack == OTHER_STACK and entry.stack is None:
        what = "not stated" if entry.software is None else f"{shown(entry.software)} not recognised"
        notes.append(f"software {what}: stack label {OTHER_STACK!r}")
    precision = Precision(precision_lane(entry.precision))
    if precision.value != entry.precision:  # an FP8 recipe; the record keeps its name
        notes.append(f"precision {entry.precision} modelled on the fp8 lane")
    fp8_recipe = fp8_recipe_for(entry.precision, stack, notes)
    stated = _stated_settings(entry)
    # the release the record names, read once: its recipes, its rules and its job's
    # stack_version all take this one
    release = release_text(entry.stack_version or entry.software)
    if (entry.stack_version and release is None and has_release_recipes(stack)
            and _LIKE_A_RELEASE.fullmatch(entry.stack_version.strip())):
        # a typo ('25.O9', '25.9') read as no release: the recipes' settings silently left
        # out moved a trial's prediction and memory with no line in validate (a commit or
        # a tag such as core_v0.6.0 is a version, not a mistyped release)
        warnings.warn(f"{entry.id}: stack_version {shown(entry.stack_version)} names no YY.MM "
                      f"release, so none of {stack}'s release recipes applies (e.g. '25.09')",
                      MosaicWarning, stacklevel=2)
    recipe = recipe_defaults(stack, release, entry.software,
                             geometry, system.device.name, entry.precision,
                             geometry.moe is not None, stated, notes,
                             stated_routing=entry.routing)
    geometry = with_recipe_mtp_modules(geometry, recipe, notes)
    recipe_dispatcher = recipe.pop("dispatcher", None)
    workload = Workload(
        geometry=geometry,
        global_batch=entry.batch.global_seqs,
        local_batch=entry.batch.local_seqs,
        seq_len=entry.batch.seq_len,
        precision=precision,
        fp8_recipe=fp8_recipe,
        stack=stack,
        # a stated routing keeps the recipe's out (_stated_settings)
        routing=recipe.pop("routing", entry.routing or "dropless"),
        dispatcher=dispatcher_for(entry.parallelism.dispatcher or recipe_dispatcher,
                                  stack, system.device.name, geometry.moe is not None, notes),
        dispatcher_stated=entry.parallelism.dispatcher is not None,
        ep_overlap=entry.parallelism.ep_overlap,
        dispatch_fp8=entry.parallelism.dispatch_fp8,
        tp_comm_overlap=entry.parallelism.tp_comm_overlap,
        vocab_in_pipeline_split=entry.parallelism.vocab_in_pipeline_split,
        cross_entropy=entry.cross_entropy,
        grad_reduce_in_fp32=entry.grad_reduce_in_fp32 is not False,
        offloaded_activation_layers=entry.offloaded_activation_layers or 0,
        recompute_modules=(None if entry.recompute_modules is None
                           else tuple(entry.recompute_modules)),
        optimizer_dtype=entry.optimizer_dtype or "fp32",
        fsdp_keep_gathered=entry.fsdp_keep_gathered is True,
        full_iteration_cuda_graph=entry.full_iteration_cuda_graph is True,
        layer_cuda_graphs=entry.layer_cuda_graphs is True,
        pad_to_capacity=entry.pad_to_capacity is True,
        routing_imbalance=entry.routing_imbalance,
        recompute_block_fraction=entry.recompute_block_fraction,
        dp_comm_overlap=entry.dp_comm_overlap is not False,
        torch_compile=entry.torch_compile,
        loss_chunks=entry.loss_chunks or 1,
        moe_permute=entry.moe_permute,
        eager_kernels=entry.eager_kernels,
        max_nodes_per_token=entry.max_nodes_per_token,
        fp8_glu_inputs=entry.fp8_glu_inputs is True,
        fused_grouped_mlp=entry.fused_grouped_mlp is True,
        fp8_dot_product_attention=entry.fp8_dot_product_attention is True,
        expert_gemm=entry.expert_gemm or "grouped",
        quantised_gemms=QuantisedGemms(entry.quantised_gemms or "all"),
        non_tn_fp8_gemms=system.device.runs_non_tn_fp8_gemms,
        gdn_context_parallel=gdn_context_parallel(stack, release),
    )
    recompute = recipe.pop("recompute", None)
    recipe_layouts = recipe.pop("pipeline_layouts", None)
    workload = replace(workload, **recipe)
    notes.append("optimizer not recorded: AdamW assumed")
    notes.extend(routing_assumptions(workload))
    plan = _plan(entry, stack, notes, recompute)
    workload = replace(workload, pipeline_layouts=resolve_pipeline_layouts(
        entry.parallelism, recipe_layouts, geometry, plan, notes))
    _check_layout(entry, plan.row(0))
    tokens_per_s, step_time_s, disagreement = _measured(entry, notes)
    memory_gib = entry.measured.memory_gib
    return RunRecord(
        id=entry.id,
        source=entry.source,
        software=entry.software,
        stack_version=release if has_release_recipes(stack) else None,
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
        memory_measure=entry.measured.memory_measure or "allocator",
        group_key=f"{entry.model.name} @ {system.device.name}",
        source_key=entry.id.split("-", 1)[0],
        assumptions=tuple(notes),
        stated_settings=stated,
        measurement_disagreement=disagreement,
        throughput_not_scored=(TRAINED_WITHOUT_THROUGHPUT
                               if tokens_per_s is None and not entry.measured.oom else None),
        software_unrecognised=(stack == OTHER_STACK and entry.stack is None
                               and entry.software is not None),
    )


def _stated_settings(entry: RunRecordEntry) -> frozenset[str]:
    """Names of the workload settings ``entry`` states (a default is not a statement)."""
    given = {
        "system": entry.system is not None,
        "dispatcher": entry.parallelism.dispatcher is not None,
        "ep_overlap": "ep_overlap" in entry.parallelism.model_fields_set,
        "dispatch_fp8": "dispatch_fp8" in entry.parallelism.model_fields_set,
        "tp_comm_overlap": "tp_comm_overlap" in entry.parallelism.model_fields_set,
        "cross_entropy": entry.cross_entropy is not None,
        "grad_reduce_in_fp32": entry.grad_reduce_in_fp32 is not None,
        "offloaded_activation_layers": entry.offloaded_activation_layers is not None,
        "recompute_modules": entry.recompute_modules is not None,
        "optimizer_dtype": entry.optimizer_dtype is not None,
        "fsdp_keep_gathered": entry.fsdp_keep_gathered is not None,
        "local_batch": entry.batch.local_seqs is not None,
        "micro_seqs": entry.batch.micro_seqs is not None,
        "full_iteration_cuda_graph": entry.full_iteration_cuda_graph is not None,
        "layer_cuda_graphs": entry.layer_cuda_graphs is not None,
        "recompute": entry.recompute != "unknown",
        "pad_to_capacity": entry.pad_to_capacity is not None,
        "recompute_block_fraction": entry.recompute_block_fraction is not None,
        "dp_comm_overlap": entry.dp_comm_overlap is not None,
        "torch_compile": entry.torch_compile is not None,
        "loss_chunks": entry.loss_chunks is not None,
        "moe_permute": entry.moe_permute is not None,
        "eager_kernels": entry.eager_kernels is not None,
        "routing": entry.routing not in (None, "unknown"),
        "max_nodes_per_token": entry.max_nodes_per_token is not None,
        "fp8_glu_inputs": entry.fp8_glu_inputs is not None,
        "fused_grouped_mlp": entry.fused_grouped_mlp is not None,
        "fp8_dot_product_attention": entry.fp8_dot_product_attention is not None,
        "expert_gemm": entry.expert_gemm is not None,
        "quantised_gemms": entry.quantised_gemms is not None,
        "pipeline_layouts": entry.parallelism.pipeline_layout is not None,
        "mtp_layers": entry.model.mtp_layers is not None,
    }
    return frozenset(name for name, stated in given.items() if stated)


# ---------------------------------------------------------------- loading


def _validate_entry(raw: Any, where: str, deprecated: set[str] | None = None
                    ) -> RunRecordEntry:
    """Validate one raw entry (older spellings translated; each deprecated one used is
    added to ``deprecated``); unknown fields are all listed, other problems as usual."""
    if not isinstance(raw, dict):
        raise MosaicInputError(f"{where}: expected a mapping, got {type(raw).__name__}")
    raw = canonical_document(raw, RECORD_RULES, where, set() if deprecated is None
                             else deprecated)
    try:
        return RunRecordEntry.model_validate(raw)
    except ValidationError as exc:
        unknown = sorted(
            ".".join(str(part) for part in error["loc"]) + _did_you_mean(error)
            for error in exc.errors()
            if error["type"] == "extra_forbidden"
        )
        if unknown:
            raise MosaicInputError(f"{where}: unknown field(s) {', '.join(unknown)}") from None
        raise MosaicInputError(describe_validation_error(exc, where)) from None


def _did_you_mean(error: Any) -> str:
    """' (did you mean parallelism?)' for a misspelt field of a run record, else ''."""
    close = suggested_field(RunRecordEntry, tuple(error["loc"]), error.get("input"))
    if not close:
        return ""
    typed, value = str(error["loc"][-1]), error.get("input")
    if typed.endswith("_gb") and close.endswith("_gib") and isinstance(value, int | float):
        # a GB figure renamed without converting reads 7% high (a trial)
        return (f" (did you mean {close}? GiB are 2^30 bytes: {value:g} GB = "
                f"{value * 1e9 / GIB:.4g} GiB)")
    return f" (did you mean {close}?)"


def _runs_list(document: dict[str, Any], path: Path) -> list[Any]:
    unknown = sorted(set(document) - {"schema_version", "description", "runs"})
    if "runs" not in document and {"model", "hardware"} <= set(document):
        raise MosaicInputError(
            f"{path}: a job file (model:, hardware:), not run records (runs:): "
            f"`mosaic perf {path}` predicts it; add measured: to a run record to validate one")
    if unknown:
        raise MosaicInputError(
            f"{path}: unknown top-level field(s) {', '.join(unknown)}; "
            "allowed: schema_version, description, runs"
        )
    version = document.get("schema_version", 1)
    if version != 1:
        raise MosaicInputError(f"{path}: schema_version {shown(version)} is not supported (only 1)")
    runs = document.get("runs")
    if not isinstance(runs, list):
        got = "nothing" if runs is None else type(runs).__name__
        raise MosaicInputError(f"{path}: expected a 'runs' list of run records, got {got}")
    return runs


class RunRecordReader:
    """The usable records of a run-record file, one at a time (bounded memory).

    Making the reader checks the file (YAML, top-level fields, a ``runs`` list) and raises
    MosaicInputError naming it, as :func:`load_run_records` does; iterating validates and
    converts one entry at a time and yields the usable records in file order, while
    ``skipped`` collects (id, reason) of the others and ``deprecated`` the older spellings
    used. The entries are streamed from the file (:mod:`mosaic.yaml_stream`), so memory
    does not grow with their number -- except for the ids seen (duplicates are refused).
    A file with an unusual top level (a merge key, an alias, ``runs`` given twice, ...) is
    read whole; the file-level checks and messages are those of the whole-file reader
    either way. ``stream=False`` reads the file whole regardless.

    Attributes:
        path: the file.
        n_entries: the entries of its ``runs`` list.
        n_read: the entries read so far.
        streamed: whether the entries are streamed (False: the file is read whole).
        skipped: (id, reason) of each entry skipped so far.
        deprecated: the deprecated spellings used so far (``old -> new``).
    """

    def __init__(self, path: str | Path, stream: bool = True) -> None:
        self.path = Path(path)
        self.skipped: list[tuple[str, str]] = []
        self.deprecated: set[str] = set()
        self.n_read = 0
        scan = scan_mapping(self.path, "runs") if stream else None
        if scan is None:
            self._runs: list[Any] | None = _runs_list(load_yaml_mapping(self.path), self.path)
            self.n_entries = len(self._runs)
            self.streamed = False
            return
        try:
            _runs_list({**scan.head, "runs": []}, self.path)
        except MosaicInputError as exc:
            _raise_whole_file_error(self.path, exc)
        self._runs = None
        self.n_entries = scan.n_items
        self.streamed = True

    def _entries(self) -> Iterator[Any]:
        if self._runs is not None:
            yield from self._runs
            return
        items = iter_list_items(self.path, "runs")
        while True:
            try:
                raw = next(items)
            except StopIteration:
                return
            except StreamError as exc:
                _raise_whole_file_error(self.path, MosaicInputError(str(exc)))
            yield raw

    def __iter__(self) -> Iterator[RunRecord]:
        first_entry: dict[str, int] = {}
        for index, raw in enumerate(self._entries(), start=1):
            self.n_read = index
            raw_id = raw.get("id") if isinstance(raw, dict) else None
            run_id = raw_id if isinstance(raw_id, str) and raw_id else f"<entry {index}>"
            where = f"run {shown(run_id)} (entry {index})"
            try:
                if run_id in first_entry:
                    raise MosaicInputError(
                        f"{where}: id: duplicate of entry {first_entry[run_id]}")
                first_entry[run_id] = index
                entry = _validate_entry(raw, where, self.deprecated)
                try:
                    record = run_record_from_entry(entry)
                except MosaicInputError as exc:
                    raise MosaicInputError(f"{where}: {exc}") from None
            except MosaicInputError as exc:
                self.skipped.append((run_id, str(exc)))
                continue
            yield record


def _raise_whole_file_error(path: Path, exc: MosaicInputError) -> NoReturn:
    """Raise the error the whole-file reader gives for ``path`` (the first it meets, with
    its wording), or ``exc`` if that reader finds none."""
    _runs_list(load_yaml_mapping(path), path)
    raise exc


def load_run_records(path: str | Path) -> RunRecordSet:
    """Load a run-record file: usable records plus (id, reason) for each skipped one.

    A malformed file (not YAML, no ``runs`` list) raises MosaicInputError naming the file;
    a bad record is skipped, and one :class:`RunRecordWarning` gives the count. Older
    spellings load with one :class:`MosaicDeprecationWarning` for the whole file. The
    records are all held; :class:`RunRecordReader` yields them one at a time.
    """
    reader = RunRecordReader(path)
    records = tuple(reader)
    warn_deprecated(reader.deprecated, str(reader.path))
    if reader.skipped:
        warnings.warn(
            f"{reader.path}: skipped {len(reader.skipped)} of {reader.n_entries} run records "
            "(reasons in RunRecordSet.skipped)",
            RunRecordWarning,
            stacklevel=2,
        )
    return RunRecordSet(path=reader.path, records=records, skipped=tuple(reader.skipped))


# ---------------------------------------------------------------- one record as a job


def split_record_reference(path: str | Path) -> tuple[Path, str | None]:
    """``RUNS.yaml#ID`` -> (file, id); a path that exists as written has no id."""
    text = str(path)
    if "#" not in text:
        return Path(text), None
    try:
        if Path(text).exists():
            return Path(text), None
    except OSError:  # e.g. a name too long to stat: read as FILE#ID, the reader says why
        pass
    file, _, run_id = text.rpartition("#")
    return Path(file), run_id or None


def is_run_record_document(document: dict[str, Any]) -> bool:
    """A run-record file (a ``runs`` list) rather than a job file."""
    return "runs" in document


def select_run_entry(document: dict[str, Any], path: Path, run_id: str | None,
                     deprecated: set[str]) -> dict[str, Any]:
    """The raw entry ``run_id`` of a run-record document, in the canonical spelling.

    Without an id the file must hold exactly one run.
    """
    runs = _runs_list(document, path)
    ids = [raw.get("id") for raw in runs if isinstance(raw, dict)]
    if run_id is None:
        if len(runs) != 1:
            listed = ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
            raise MosaicInputError(f"{path}: holds {len(runs)} runs; name one as {path}#ID "
                                   f"(ids: {listed})")
        index = 0
    elif run_id in ids:
        index = ids.index(run_id)
    else:
        close = difflib.get_close_matches(run_id, [str(i) for i in ids], n=3)
        hint = (f"; did you mean {' or '.join(close)}?" if close else
                "; ids: " + ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5
                                                                   else ""))
        raise MosaicInputError(f"{path}: no run with id {shown(run_id)} ({len(runs)} runs){hint}")
    raw = runs[index]
    where = f"{path}#{ids[index]}" if index < len(ids) else str(path)
    if not isinstance(raw, dict):
        raise MosaicInputError(f"{where}: expected a mapping, got {type(raw).__name__}")
    return canonical_document(raw, RECORD_RULES, where, deprecated)


def run_record_from_raw(raw: dict[str, Any], where: str) -> RunRecord:
    """Validate and convert one raw entry (canonical spelling), with ``validate``'s rules."""
    entry = _validate_entry(raw, where)
    try:
        return run_record_from_entry(entry)
    except MosaicInputError as exc:
        raise MosaicInputError(f"{where}: {exc}") from None
