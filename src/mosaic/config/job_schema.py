"""Job files: one training job = model, layout, batch, execution, optimizer and hardware.

A job file holds the three blocks every mosaic input shares (:mod:`mosaic.config.blocks`:
``model``, ``parallelism``, ``batch``) plus ``performance`` (precision, recompute, stack),
``optimizer``, ``search`` and ``hardware``. The paper's Appendix E listing (``n_layers``,
``hidden_sz``, a top-level ``moe:``, ``data: {gbs, seqlen, microbatch_sz}``, ...) loads as
written, and mosaic's earlier spellings load with a deprecation warning
(:mod:`mosaic.config.spelling`); ``--set`` overrides take either spelling.
"""

from __future__ import annotations

import copy
import difflib
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field, field_validator

from mosaic.arch import AttentionKind, Geometry
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
    RecomputeName,
    Routing,
    StrictBlock,
    TrainingBlock,
)
from mosaic.config.blocks import Sharding as ShardingName
from mosaic.config.convert import geometry_from_model, model_document
from mosaic.config.layout import (
    batch_document,
    data_parallel,
    dispatcher_for,
    fp8_recipe_for,
    layout_parallelism,
    parallelism_document,
    plan_from_blocks,
    recipe_defaults,
    resolve_pipeline_layouts,
    with_recipe_mtp_modules,
)
from mosaic.config.recipes import RecipeSettings
from mosaic.config.spelling import (
    JOB_RULES,
    RECORD_RULES,
    Rename,
    canonical_document,
    canonical_path,
    warn_deprecated,
)
from mosaic.errors import SHOWN_CHARS, MosaicInputError, MosaicWarning, shown
from mosaic.hardware import get_device, get_system
from mosaic.hardware.catalog import device_for_reported_name
from mosaic.hardware.default_systems import resolve_system
from mosaic.limits import LIMITS
from mosaic.output_kinds import output_command
from mosaic.perf.collectives import BusBandwidthTable
from mosaic.perf.constraints import layout_rules
from mosaic.perf.headroom import memory_headroom
from mosaic.perf.kernels import GemmTable, GroupedGemmTable
from mosaic.perf.machine import MeasuredTables, check_measured_rates, device_model_notes
from mosaic.perf.pipeline_layout import layout_for
from mosaic.perf.plan import Checkpointing, ParallelPlans, Sharding
from mosaic.perf.routing_load import routing_assumptions
from mosaic.perf.workload import (
    FP8_RECIPES,
    Dispatcher,
    Fp8Recipe,
    OptimizerKind,
    Precision,
    QuantisedGemms,
    Workload,
    job_precision_name,
    measured_table_dtype,
    precision_lane,
    stated_fp8_recipe,
)
from mosaic.schema_validation import load_yaml_mapping, parse_yaml, validate_mapping
from mosaic.stacks.registry import (
    DEFAULT_STACK,
    STACK_VERSION_PATTERN,
    MicroBatchDefault,
    SelectiveRecompute,
    gdn_context_parallel,
    release_number_text,
)

if TYPE_CHECKING:
    from mosaic.config.run_records import RunRecord

KNOWN_BLOCKS = ("model", "parallelism", "batch", "performance", "optimizer", "search",
                "hardware", "training")


class PerformanceBlock(StrictBlock):
    """How the job executes: precision, recomputation and the software stack."""

    precision: Literal["bf16", "fp16", "fp8", "mxfp8", "fp4", "nvfp4"] = Field(
        default="bf16", description="GEMM precision (selects the device's peak lane); mxfp8 "
        "= FP8 with MXFP8 block scales (Blackwell), costed on the fp8 lane; nvfp4 = NVFP4 "
        "block-scaled FP4 GEMMs (Blackwell), costed on the fp4 lane (fp4 names it too)")
    fp8_recipe: Literal["delayed", "current", "blockwise", "mxfp8"] | None = Field(
        default=None, description="how FP8 GEMM operands are scaled (precision fp8); None = "
        "mxfp8 for precision mxfp8, else the stack's default recipe (docs/stacks.md)")
    fp8_param_gather: bool = Field(
        default=False, description="the data-parallel parameter all-gather moves the FP8 "
        "GEMMs' weights in 8 bits (Megatron --fp8-param-gather, torchtitan "
        "enable_fsdp_float8_all_gather); needs FP8")
    fp4_param_gather: bool = Field(
        default=False, description="the data-parallel parameter all-gather moves the NVFP4 "
        "GEMMs' weights in 4 bits plus block scales (Megatron --fp4-param-gather, "
        "Megatron-Bridge fp4_param_gather); needs nvfp4")
    checkpointing: RecomputeName = Field(
        default="none", description="activation recomputation")
    attention_kernel: Literal["auto", "cudnn", "fa2", "fa3", "triton", "fa1", "reference",
                              "jax_flash"] = Field(
        default="auto", description="flash-attention kernel; auto = the stack's default")
    stack: str = Field(default=DEFAULT_STACK, description="a mosaic.stacks name")
    stack_version: str | None = Field(
        default=None, description="the stack's release (YY.MM, e.g. "
        "the NeMo container 26.06): the stack's recipes for it fill what the job leaves "
        "unstated (docs/stacks.md); None = none")
    fsdp_gather: Literal["auto", "block", "tensor"] = Field(
        default="auto", description="FSDP gathers per block or per tensor; auto: by stack")
    uneven_stages: bool | Literal["unstated"] = Field(
        default=False, description="allow pp·vpp that does not divide the layers: true = "
        "split as the stack splits (trait uneven_stage_split): chunks of ceil(L/(pp·vpp)) "
        "blocks with the remainder on the last (on Megatron-Core stacks costed rank by rank "
        "as that split's Megatron layout, which exports write), or torchtitan's and NeMo "
        "AutoModel's floor(L/(pp·vpp)) a stage with the first L mod (pp·vpp) stages one more; "
        "unstated = the "
        "split is not known (any split Megatron's --pipeline-model-parallel-layout places, "
        "e.g. DeepSeek-V3's 61 layers in 32 chunks) and the first and last stages are costed "
        "with full chunks, as a run record's uneven layout is (what `mosaic export --to yaml` "
        "writes for one)")
    # The run-record fields of the same name (docs/run_records.md, docs/memory.md):
    routing: Routing = Field(
        default="dropless", description="MoE routing regime")
    pad_to_capacity: bool = Field(
        default=False, description="token_drop pads each expert's input to its capacity "
        "(Megatron-Core --moe-pad-expert-input-to-capacity)")
    routing_imbalance: float | None = Field(
        default=None, ge=1, le=LIMITS["devices"].high, allow_inf_nan=False,
        description="busiest EP rank's routed tokens over the even share under a learned "
        "router; None = derived (mosaic.perf.routing_load)")
    cross_entropy: CrossEntropyName | None = Field(
        default=None, description="the LM loss implementation; None = the stack's trait")
    grad_reduce_in_fp32: bool = Field(
        default=True, description="gradient buffers and reduction in fp32 (Megatron-LM's "
        "default); false = bf16")
    offloaded_activation_layers: int = Field(strict=True,
        default=0, ge=0, le=LIMITS["layers"].high,
        description="blocks whose activations go to host memory (cpu_offloading_num_layers)")
    recompute_modules: list[str] | None = Field(
        default=None, description="Megatron-Core --recompute-modules under selective "
        "recompute; None = core_attn")
    optimizer_dtype: OptimizerDtypeName = Field(
        default="fp32", description="fp32 master weights and moments; bf16 = the optimizer "
        "steps bf16 parameters in place with bf16 moments (torch.optim on bf16 parameters)")
    fsdp_keep_gathered: bool = Field(
        default=False, description="fully sharded units stay gathered through the step and "
        "gradients accumulate unsharded, also without PP")
    loss_chunks: int = Field(strict=True,
        default=1, ge=1, le=LIMITS["seq_len"].high, description="sequence chunks the LM head "
        "and loss run over one after another, each chunk's backward first (torchtitan "
        "ChunkedCELoss): one chunk's logits are live")
    dp_comm_overlap: bool = Field(
        default=True, description="DDP/ZeRO gradient reduction and parameter gathers "
        "overlap the backward and forward bucket by bucket (Megatron-LM --overlap-grad-reduce "
        "/ --overlap-param-gather); false = all exposed, Megatron-LM's default")
    torch_compile: bool | None = Field(
        default=None, description="eager-torch model code runs under torch.compile (Inductor "
        "fuses norms, RoPE and activations); false = eager kernels; unset = the stack's "
        "default (docs/evidence/elementwise_fusion.md)")
    moe_permute: MoePermuteName | None = Field(
        default=None, description="the MoE token-movement code (permute, unpermute, "
        "combine) the run uses, e.g. a torchtitan era; unset = the stack's "
        "(docs/evidence/moe_permute_traffic.md)")
    eager_kernels: EagerKernelsName | None = Field(
        default=None, description="the torch era of eager RMSNorm model code when not "
        "compiled: eager_fp32_norm (the fp32 composite before PyTorch 2.9) or "
        "eager_fused_rmsnorm (its fused kernel); read only by stacks whose eager code is "
        "RMSNorm torch; unset = the stack's (docs/evidence/elementwise_fusion.md)")
    quantised_gemms: QuantisedGemmsName = Field(default="all",
                                                description=QUANTISED_GEMMS_HELP)
    expert_gemm: ExpertGemmName = Field(
        default="grouped", description="how the routed-expert GEMMs run: grouped, or "
        "xla_expanded = jax.lax.ragged_dot_general as XLA lowers it on NVIDIA GPUs (a dense "
        "dot over every local expert, E_local times the FLOPs; docs/evidence/"
        "levanter_stack.md)")
    full_iteration_cuda_graph: bool = Field(
        default=False,
        description="the step's forward and backward replay one CUDA graph (Megatron-Core "
                    "--cuda-graph-impl full_iteration; MoE models with a static per-EP-rank "
                    "token budget, --moe-expert-rank-capacity-factor): no host launch cost and "
                    "no MoE host synchronisation; off by default, as in Megatron-Core")
    layer_cuda_graphs: bool = Field(
        default=False,
        description="each transformer layer's forward and backward replay one CUDA graph "
                    "(Megatron-Core enable_cuda_graph / --cuda-graph-impl local, whole "
                    "layer): no per-kernel host launches; a dropless MoE layer still waits on "
                    "the host (static shapes need drop-and-pad routing); not with full "
                    "recompute, full_iteration_cuda_graph or activation offload; off by "
                    "default")
    recompute_block_fraction: float | None = Field(
        default=None, ge=0, le=1, description="share of blocks checkpointed whole under "
        "selective recompute on a block-level stack (fms-fsdp selective_checkpointing), or "
        "recomputed under full (Megatron-Core recompute_method block, k of L); None = 1")
    max_nodes_per_token: int | None = Field(strict=True,
        default=None, ge=1, description="node-limited routing: each token's experts on at "
        "most this many nodes (DeepSeek-V3's M = 4, arXiv:2412.19437 Sec. 3.2.2); unset = "
        "unrestricted")
    fp8_glu_inputs: bool = Field(
        default=False, description="the routed experts' SwiGLU inputs are saved in FP8 "
        "(DeepSeek-V3 report Sec. 3.3.3; memory only; needs FP8)")
    fused_grouped_mlp: bool = Field(
        default=False, description="the routed experts run as Transformer Engine's fused "
        "grouped MLP (Megatron-Core use_transformer_engine_op_fuser with "
        "moe_mlp_glu_interleave_size 32 and NVTE_CUTEDSL_FUSED_GROUPED_MLP=1): no activation "
        "kernel and fewer MXFP8 casts; needs an MoE model with SwiGLU experts, mxfp8 and "
        "Megatron-Core; plans with etp > 1 run unfused")
    fp8_dot_product_attention: bool = Field(
        default=False, description="the attention core runs Transformer Engine's FP8 fused "
        "attention (Megatron-Core fp8_dot_product_attention): its score GEMMs on the FP8 "
        "tensor cores, the softmax work unchanged; needs fp8 or mxfp8, Megatron-Core and the "
        "cuDNN attention kernel")

    @field_validator("precision", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        """BF16 or FP8 as datasheets write them: the catalog's dtypes take either case
        (docs/hardware.md), so a job does too."""
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("precision")
    @classmethod
    def _fp4_is_nvfp4(cls, value: str) -> str:
        """Plain fp4 names NVFP4, the one FP4 training recipe (mosaic.perf.workload
        FP4_RECIPES): one spelling for recipe matching and job documents."""
        return job_precision_name(value)

    @field_validator("stack_version", mode="before")
    @classmethod
    def _release_number(cls, value: object) -> object:
        """An unquoted YAML or --set value (26.06) arrives as a number: read it as YY.MM;
        anything but a YY.MM release with a month 01-12, or one of its point releases
        YY.MM.0N, is refused with an example."""
        text = release_number_text(value)
        if text is not None and (not isinstance(text, str)
                                 or re.fullmatch(STACK_VERSION_PATTERN, text) is None):
            raise ValueError("expected a release YY.MM with a month 01-12, e.g. '26.04', or a "
                             "point release such as '26.04.01' (quote it: an unquoted 26.4 "
                             "reads as 26.40)")
        return text


class OptimizerBlock(StrictBlock):
    # the enum from its name (strict blocks take no other coercion)
    kind: OptimizerKind = Field(default=OptimizerKind.ADAMW, strict=False)


SEARCH_LIMIT_FIELDS = ("max_tp", "tp", "pp", "vpp", "cp", "ep", "etp", "micro_batches",
                       "sharding", "checkpointing")
_Sizes = list[Annotated[int, Field(gt=0)]]  # a layout axis's allowed degrees
_LIMIT_HELP = ("`mosaic layouts` searches only these (a plan's layout options, which `export "
               "--to yaml` of a plan writes here); the option of the same name overrides it")


class SearchBlock(StrictBlock):
    devices: int | None = Field(strict=True, default=None, gt=0, le=LIMITS["devices"].high,
                                description="GPUs in the job")
    # the layouts the team runs (perf.layouts.LayoutLimits): a plan's --pp 1,2,4 --sharding
    # zero1 kept with the job it exports (a trial's `layouts` ranked zero2 layouts first)
    max_tp: int | None = Field(default=None, gt=0, description=f"largest tp; {_LIMIT_HELP}")
    tp: _Sizes | None = Field(default=None, description=_LIMIT_HELP)
    pp: _Sizes | None = Field(default=None, description=_LIMIT_HELP)
    vpp: _Sizes | None = Field(default=None, description=_LIMIT_HELP)
    cp: _Sizes | None = Field(default=None, description=_LIMIT_HELP)
    ep: _Sizes | None = Field(default=None, description=_LIMIT_HELP)
    etp: _Sizes | None = Field(default=None, description=_LIMIT_HELP)
    micro_batches: _Sizes | None = Field(
        default=None, description=f"micro-batch sizes; {_LIMIT_HELP} (--mbs)")
    sharding: list[ShardingName] | None = Field(default=None, description=_LIMIT_HELP)
    checkpointing: list[RecomputeName] | None = Field(default=None, description=_LIMIT_HELP)

    def layout_limits(self) -> dict[str, Any]:
        """The layout limits the block states (LayoutLimits field names), none unstated."""
        return {name: getattr(self, name) for name in SEARCH_LIMIT_FIELDS
                if getattr(self, name) is not None}


class HardwareBlock(StrictBlock):
    system: str | None = Field(
        default=None, description="node or rack type from the catalog, e.g. p6-b200.48xlarge")
    gpu: str | None = Field(
        default=None, description="accelerator (catalog name or alias, e.g. H100): run on its "
        "usual node type when system is not given, as `mosaic plan --gpu` does")
    nodes: int | None = Field(strict=True, default=None, gt=0, le=LIMITS["nodes"].high,
                              description="nodes; else search.devices")
    usable_memory_fraction: float | None = Field(
        default=None, gt=0, le=1, description="share of device memory a plan may fill; "
        "default: the stack's documented share, else 0.9 (mosaic.perf.headroom)"
    )
    gemm_table: Path | None = Field(default=None, strict=False,
                                    description="measured GEMM times CSV/Parquet")
    grouped_gemm_table: Path | None = Field(
        default=None, strict=False, description="measured grouped expert GEMM times CSV/Parquet"
    )
    collective_table: Path | None = Field(
        default=None, strict=False, description="measured collective bus bandwidths CSV/Parquet"
    )


@dataclass(frozen=True)
class JobSpec:
    """A validated job: what is trained, how it is laid out, and on which hardware.

    ``assumptions`` lists, one line each, every default filled in for an unstated field.
    ``recorded_layout``: the layout of a measured run (a run record), which its source ran:
    mosaic's own layout rules (:mod:`mosaic.perf.constraints`) are not applied to it, as in
    ``mosaic validate``; after ``--set`` (``as_recorded``), the rules the change breaks are.
    """

    workload: Workload
    plan: ParallelPlans  # length 1
    system_name: str
    n_devices: int | None
    nodes: int | None
    usable_memory_fraction: float = 1.0
    tables: MeasuredTables = field(default_factory=MeasuredTables)
    assumptions: tuple[str, ...] = ()
    recorded_layout: bool = False
    # performance.uneven_stages 'unstated': pp·vpp need not divide the layers, split as a
    # run record's (the workload's uneven_pipeline_stages stays False)
    unstated_stage_split: bool = False
    # batch.micro_seqs not stated: the plan's micro-batch is the stack's default for its
    # global batch, dp and pp (config.layout.default_micro_batch), which a change to them
    # re-derives (explain's levers, whose `--set` lines leave it to the loader)
    unstated_micro_batch: bool = False
    measured_step_time_s: float | None = None  # a run record's measured step; None for a job
    measured_oom: bool = False  # a run record that ran out of memory (measured.oom)
    # a run record's measured peak memory per GPU, bytes, and what it measures
    # (measured.memory_gib, measured.memory_measure); None for a job
    measured_memory_bytes: float | None = None
    memory_measure: str = "allocator"
    # a run record changed by --set: its workload and layout as recorded, so that only the
    # layout rules the change breaks are applied (mosaic.evaluate.job.predict_job)
    as_recorded: tuple[Workload, ParallelPlans] | None = None
    stack_version: str | None = None  # performance.stack_version as stated (exports read it)
    model_name: str | None = None  # model.name as stated (the job document keeps it)
    train_tokens: float | None = None  # training.tokens as stated; None: no budget given
    train_goodput: float | None = None  # training.goodput as stated; None: 1
    # search block's layout limits as stated (SearchBlock.layout_limits): what `mosaic
    # layouts` searches unless an option says otherwise
    search_limits: dict[str, Any] = field(default_factory=dict)


def training_block(tokens: float | None, goodput: float | None) -> dict[str, Any]:
    """The job's ``training`` block: what it states of the token budget and the goodput
    (goodput only below 1); none when it states neither."""
    # a token count is whole (a plan's D* = throughput x window is not)
    block: dict[str, Any] = {} if tokens is None else {"tokens": round(tokens)}
    if goodput is not None and goodput < 1.0:
        block["goodput"] = goodput
    return {"training": block} if block else {}


# The largest pretraining batch a public configuration states: DeepSeek-V3's 15,360
# sequences of 4,096 tokens (its report's training configuration, arXiv:2412.19437 Sec. 4.2).
# A step 16x that is far outside practice: most likely tokens entered as global_seqs.
LARGEST_PUBLISHED_STEP_TOKENS = 15_360 * 4_096
SUSPICIOUS_STEP_TOKENS = 16 * LARGEST_PUBLISHED_STEP_TOKENS


def canonical_job_document(document: dict[str, Any], where: str,
                           deprecated: set[str] | None = None) -> dict[str, Any]:
    """``document`` in the canonical spelling; unknown blocks are refused.

    Deprecated spellings used are added to ``deprecated`` (warned about here when None).
    """
    used: set[str] = set() if deprecated is None else deprecated
    result = canonical_document(document, JOB_RULES, where, used)
    unknown = set(result) - set(KNOWN_BLOCKS)
    written_by = output_command(document)
    if unknown and written_by is not None:  # another command's output given as a job
        raise MosaicInputError(
            f"{where}: the file that `mosaic {written_by}` writes, not a job; give a job "
            "YAML or a run record (RUNS.yaml#ID)")
    if "model_type" in unknown and "hidden_size" in unknown:  # a HuggingFace config.json
        raise MosaicInputError(
            f"{where}: a HuggingFace config.json (model_type {shown(document['model_type'])}), not "
            "a job; give it with --model beside a job file (docs/schema.md), or look at the "
            "model alone with `mosaic arch --model`")
    if "run" in unknown:  # the reference trainer's job (run:, optim:, ladder:; docs/train.md)
        raise MosaicInputError(
            f"{where}: a `mosaic train` job file (blocks {sorted(unknown)}), not a job for "
            "the performance model, which reads model, parallelism, batch and hardware "
            "blocks (docs/schema.md); `mosaic train FILE --perf-job perf.yaml --system NAME` "
            "writes the job that predicts it")
    if {"recipe", "ladder"} <= unknown:  # a ladder grid (a trial's `bench gemm --job
        # examples/ladder_tiny.yaml` was told only of two unknown blocks)
        raise MosaicInputError(
            f"{where}: a ladder grid (blocks recipe and ladder: `mosaic ladder run`), not a "
            "job for the performance model, which reads model, parallelism, batch and "
            "hardware blocks (docs/schema.md); `mosaic train RUNG.yaml --perf-job perf.yaml "
            "--system NAME` writes the job that predicts one rung (docs/train.md)")
    if unknown:
        hints = [f"{shown(name)} -> did you mean {shown(close[0])}?" for name in sorted(unknown)
                 if (close := difflib.get_close_matches(str(name), KNOWN_BLOCKS, n=1))]
        hint = f" ({'; '.join(hints)})" if hints else ""
        raise MosaicInputError(
            f"{where}: unknown block(s) {sorted(unknown)}{hint}; allowed: "
            f"{sorted(KNOWN_BLOCKS)}"
        )
    if deprecated is None:
        warn_deprecated(used, where)
    return {block: result[block] for block in KNOWN_BLOCKS if block in result}


def field_value(field: str | tuple[str, ...], text: str, where: str) -> Any:
    """A field's value typed as text (``--set``, a studio form) as the YAML scalar it reads
    as, except a release, kept as typed: 25.10 would read as the number 25.1, and text
    starting with ``*`` or ``&``, which YAML reads as an alias or anchor, never a value of
    one field: a hybrid pattern such as ``*E*E`` (``*`` is attention) was refused as
    malformed YAML (a fuzz trial). ``field`` is the field's name or its path in the job
    document (``("hardware", "system")``); with a path, a number (or true, a date) typed
    into a text field is the text typed: the studio's node type ``0`` or ``1e3`` answered
    "Input should be a valid string (got 1000.0)", not "unknown system '1e3'" (a trial)."""
    path = (field,) if isinstance(field, str) else tuple(field)
    if path[-1] == "stack_version" and re.fullmatch(STACK_VERSION_PATTERN, text.strip()):
        return text.strip()
    if text.strip().startswith(("*", "&")):
        return text.strip()
    value = parse_yaml(text, where)
    if value is not None and not isinstance(value, str | dict | list) and _is_text_field(path):
        return text.strip()
    return value


def _is_text_field(path: tuple[str, ...]) -> bool:
    """Whether the job-document field at ``path`` (block, [sub-block, ...] field) holds text
    (a name, a path), by the block schema's annotation; False for a path it does not know."""
    schema: Any = _JOB_BLOCKS.get(path[0])
    for depth, name in enumerate(path[1:], start=2):
        fields = getattr(schema, "model_fields", {})
        if name not in fields:
            return False
        kinds = [kind for kind in (get_args(fields[name].annotation) or
                                   (fields[name].annotation,)) if kind is not type(None)]
        if depth == len(path):
            return bool(kinds) and all(kind in (str, Path) for kind in kinds)
        schema = next((kind for kind in kinds if isinstance(kind, type)
                       and issubclass(kind, BaseModel)), None)
    return False


def apply_overrides(document: dict[str, Any], overrides: list[str],
                    deprecated: set[str] | None = None, *, rules: Iterable[Rename] = JOB_RULES,
                    known: Iterable[str] = KNOWN_BLOCKS, min_depth: int = 2) -> dict[str, Any]:
    """Apply ``block.field=value`` (or ``model.moe.field=value``,
    ``model.moe.router.field=value``) overrides.

    Values are parsed as YAML scalars; field paths may use any accepted spelling. A run
    record takes its own ``rules`` and top-level ``known`` fields (``precision=fp8``).
    """
    result = copy.deepcopy(document)
    used: set[str] = set() if deprecated is None else deprecated
    known = tuple(known)
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = tuple(part.strip() for part in key.strip().split("."))
        if not sep or not min_depth <= len(parts) <= 4 or not all(parts):
            raise MosaicInputError(f"--set {shown(item)}: expected block.field=value")
        renamed: set[str] = set()
        path, value_rule = canonical_path(parts, rules, renamed)
        used.update(f"--set {label}" for label in renamed)
        if not path:
            continue  # a paper field that is not modelled
        if path[0] not in known:
            raise MosaicInputError(f"--set {shown(item)}: unknown block {shown(parts[0])}")
        value = field_value(path, raw, f"--set {shown(item)}")
        node = result
        for name in path[:-1]:
            child = node.get(name)
            if child is None:
                child = node[name] = {}
            if not isinstance(child, dict):
                raise MosaicInputError(f"--set {shown(item)}: {shown(name)} is not a mapping")
            node = child
        node[path[-1]] = value_rule(value) if value_rule else value
    if deprecated is None:
        warn_deprecated(used, "--set")
    return result


TABLE_FIELDS = ("gemm_table", "grouped_gemm_table", "collective_table")


def _table_paths(hardware: HardwareBlock, base: Path) -> dict[str, Path]:
    """The measured tables a hardware block names, by field (paths relative to the job)."""
    paths = {name: getattr(hardware, name) for name in TABLE_FIELDS}
    return {name: path if path.is_absolute() else base / path
            for name, path in paths.items() if path is not None}


def _measured_tables(hardware: HardwareBlock, base: Path) -> MeasuredTables:
    """Load the measured tables a hardware block names (paths relative to the job file)."""
    paths = _table_paths(hardware, base)
    gemm, grouped, collectives = (paths.get(name) for name in TABLE_FIELDS)
    return MeasuredTables(
        gemm=GemmTable.from_file(gemm) if gemm else None,
        grouped_gemm=GroupedGemmTable.from_file(grouped) if grouped else None,
        collectives=BusBandwidthTable.from_file(collectives) if collectives else None,
    )


def _foreign_devices(measured: list[str], device_name: str) -> list[str]:
    """The measured device names that are not the job's device: a CPU (the bench's
    'cpu:...'), or a GPU the catalog resolves to another device of another model
    (:func:`~mosaic.hardware.catalog.device_for_reported_name`: 'NVIDIA A100-SXM4-80GB' is
    the A100-SXM-80GB; an H100 table serves every H100 variant). A GPU the catalog does not
    know is not judged."""
    from mosaic.bench.metadata import is_cpu_device_name  # the bench's own naming

    job = get_device(device_name)
    foreign = []
    for name in measured:
        if is_cpu_device_name(name):
            foreign.append(name)
            continue
        device = device_for_reported_name(name)
        if device is not None and not _same_gpu_model(device.name, job.name):
            foreign.append(name)
    return foreign


def _same_gpu_model(first: str, second: str) -> bool:
    """Whether two catalog devices are one GPU model: their first name token ('H100' of
    H100-SXM-80GB and H100-SXM-96GB-500W) is the same."""
    return first.split("-")[0].upper() == second.split("-")[0].upper()


def refuse_foreign_tables(hardware: HardwareBlock, base: Path, device_name: str) -> None:
    """MosaicInputError for a measured table whose bench metadata (``mosaic bench`` writes
    metadata.json beside the tables or one folder up) names another device than the job's
    (:func:`_foreign_devices`): a CPU's GEMM times replaced an H100 job's and doubled its
    step, with one assumption line to say so (a trial). Tables without metadata are used as
    the job names them."""
    tables = _table_paths(hardware, base)
    if not tables:
        return  # most jobs: no need to import the bench store (pandas: 0.5 s of start-up)
    from mosaic.bench.store import METADATA_FILE, read_metadata  # the bench's own format

    for field_name, path in tables.items():
        found = [folder for folder in (path.parent, path.parent.parent)
                 if (folder / METADATA_FILE).is_file()]
        if not found:
            continue
        try:
            runs = read_metadata(found[0]).get("runs", {})
            measured = sorted({str(run.get("device_name")) for run in runs.values()})
        except (OSError, ValueError, AttributeError):
            continue
        foreign = _foreign_devices(measured, device_name)
        if foreign:
            raise MosaicInputError(
                f"hardware.{field_name}: {path} was measured on {', '.join(foreign)} "
                f"({found[0] / METADATA_FILE}), not on the job's {device_name}; measure on "
                f"the job's GPUs (`mosaic bench`) or leave hardware.{field_name} out")


def _block(schema: type[BaseModel], document: dict[str, Any], name: str, where: str) -> Any:
    data = document.get(name)
    if data is None:
        data = {}
    return validate_mapping(schema, data, f"{where}: {name}")


def _job_recipe(performance: PerformanceBlock, parallelism: ParallelismBlock,
                model: ModelBlock, geometry: Geometry, device_name: str, notes: list[str]
                ) -> dict[str, Any]:
    """The settings the stack's recipe for this job's release chose (none without a
    ``performance.stack_version``), less those the job states."""
    if performance.stack_version is None:
        return {}
    stated = {name for block in (performance, parallelism) for name in block.model_fields_set
              if name in RecipeSettings.model_fields}
    if model.mtp_layers is not None:
        stated.add("mtp_layers")
    if "checkpointing" in performance.model_fields_set:
        stated.add("recompute")
    if performance.routing == "unknown":  # as in a run record: unknown is not a statement
        stated.discard("routing")
    # The release is the job's software text too, so an entry that tells a release from its
    # point releases (software_pattern '26\.06(?!\.0[1-9])') reads it as a record's would.
    return recipe_defaults(performance.stack, performance.stack_version,
                           performance.stack_version, geometry, device_name,
                           _recipe_precision(performance), geometry.is_moe, frozenset(stated),
                           notes, attention_kernel=(None if performance.attention_kernel == "auto"
                                                    else performance.attention_kernel),
                           stated_routing=(performance.routing if "routing" in stated
                                           else None))


def _recipe_precision(performance: PerformanceBlock) -> str:
    """The precision as recipes and run records name it: fp8 with a stated current or
    blockwise recipe is fp8-cs or fp8-blockwise (Megatron-Bridge's FP8_CS / FP8_SC presets);
    plain fp8 stays fp8."""
    if performance.precision == "fp8" and performance.fp8_recipe not in (None, "delayed"):
        return {recipe.value: name for name, recipe in FP8_RECIPES.items()}[
            performance.fp8_recipe]
    return performance.precision



def _system_name(hardware: HardwareBlock, where: str, notes: list[str]) -> str:
    """The job's node type: ``hardware.system``, else the usual node type of
    ``hardware.gpu`` (:func:`mosaic.hardware.default_systems.resolve_system`, noted)."""
    if hardware.system is None and hardware.gpu is None:
        raise MosaicInputError(f"{where}: hardware: give system (a node type, `mosaic hardware "
                               "list`) or gpu (an accelerator, run on its usual node type)")
    if hardware.gpu is None:
        return hardware.system  # an unknown name is reported where the cluster is built
    try:
        system = resolve_system(hardware.gpu, hardware.system, "hardware.gpu", "hardware.system")
    except MosaicInputError as exc:
        raise MosaicInputError(f"{where}: {exc}") from None
    if hardware.system is None:
        notes.append(f"hardware.system unstated: {system.name}, the usual node type of "
                     f"{system.device.name} (hardware.gpu {hardware.gpu}; the --gpu mapping, "
                     "docs/plan.md)")
    return system.name


# Job fields an empty value (YAML null, `--set parallelism.ep=`) must not stand in for: the
# schema's default of 1 would be taken without a word (a trial's `ep=` predicted ep 1), and
# the studio refuses the same fields empty. vpp, etp and dp left empty mean the stack's or
# the derived value, as documented (docs/schema.md).
REQUIRED_WHEN_GIVEN = {"parallelism.tp": "the tensor-parallel degree (1 for none)",
                       "parallelism.pp": "the pipeline degree (1 for none)",
                       "parallelism.cp": "the context-parallel degree (1 for none)",
                       "parallelism.ep": "the expert-parallel degree (1 for none)",
                       "batch.micro_seqs": "the micro-batch in sequences"}


def _refuse_empty_degrees(document: dict[str, Any], where: str) -> None:
    """One line for a degree or micro-batch given with an empty value."""
    for key, meaning in REQUIRED_WHEN_GIVEN.items():
        block, _, name = key.partition(".")
        fields = document.get(block)
        if isinstance(fields, dict) and name in fields and fields[name] is None:
            raise MosaicInputError(f"{where}: {block}: {name} is empty: give {meaning}, or "
                                   "leave the key out for the default")


def job_from_document(document: dict[str, Any], where: str,
                      deprecated: set[str] | None = None) -> JobSpec:
    """Validate a parsed job document (any accepted spelling) into a :class:`JobSpec`."""
    document = canonical_job_document(document, where, deprecated)
    for required in ("model", "batch", "hardware"):
        if required not in document:
            hint = " (or the older data:)" if required == "batch" else ""
            raise MosaicInputError(f"{where}: missing required block {required!r}{hint}")
    _refuse_empty_degrees(document, where)
    model = _block(ModelBlock, document, "model", where)
    batch = _block(BatchBlock, document, "batch", where)
    parallelism = _block(ParallelismBlock, document, "parallelism", where)
    performance = _block(PerformanceBlock, document, "performance", where)
    optimizer = _block(OptimizerBlock, document, "optimizer", where)
    search = _block(SearchBlock, document, "search", where)
    hardware = _block(HardwareBlock, document, "hardware", where)
    training = _block(TrainingBlock, document, "training", where)
    notes: list[str] = []
    system_name = _system_name(hardware, where, notes)
    try:
        device = get_system(system_name).device
        device_name, non_tn_fp8 = device.name, device.runs_non_tn_fp8_gemms
        # the rates of the job's GEMM lane (mxfp8 -> fp8), as machine_for costs them
        notes.extend(device_model_notes(device, precision_lane(performance.precision)))
    except MosaicInputError:
        device_name, non_tn_fp8 = "", False  # an unknown system is reported later
    try:
        geometry: Geometry = geometry_from_model(model, notes, measured=False)
        parallelism = layout_parallelism(parallelism, notes)
        recipe = _job_recipe(performance, parallelism, model, geometry, device_name, notes)
        geometry = with_recipe_mtp_modules(geometry, recipe, notes)
        recipe_layouts = recipe.pop("pipeline_layouts", None)
        dispatcher = dispatcher_for(parallelism.dispatcher or recipe.pop("dispatcher", None),
                                    performance.stack, device_name, geometry.is_moe, notes)
        if parallelism.dispatcher is not None and not geometry.is_moe:
            # Megatron-Bridge's apply_flex_dispatcher_backend skips a model without experts
            # ('DeepEP and HybridEP are only applicable to MoE models', flex_dispatcher_
            # backend.py); perf reads the dispatcher in MoE layers only
            notes.append(f"parallelism.dispatcher {parallelism.dispatcher} not read: the model "
                         "has no MoE layers, so no token is dispatched to an expert")
        fp8_recipe = _job_fp8_recipe(performance, notes)
    except MosaicInputError as exc:
        raise MosaicInputError(f"{where}: {exc}") from None
    workload = Workload(
        geometry=geometry,
        global_batch=batch.global_seqs,
        local_batch=batch.local_seqs,
        seq_len=batch.seq_len,
        precision=Precision(precision_lane(performance.precision)),
        fp8_recipe=fp8_recipe,
        fp8_param_gather=performance.fp8_param_gather,
        fp4_param_gather=performance.fp4_param_gather,
        non_tn_fp8_gemms=non_tn_fp8,
        gdn_context_parallel=gdn_context_parallel(performance.stack, performance.stack_version),
        optimizer=optimizer.kind,
        stack=performance.stack,
        attention_kernel=(None if performance.attention_kernel == "auto"
                          else performance.attention_kernel),
        fsdp_gather=None if performance.fsdp_gather == "auto" else performance.fsdp_gather,
        routing=performance.routing,
        pad_to_capacity=performance.pad_to_capacity,
        routing_imbalance=performance.routing_imbalance,
        cross_entropy=performance.cross_entropy,
        grad_reduce_in_fp32=performance.grad_reduce_in_fp32,
        offloaded_activation_layers=performance.offloaded_activation_layers,
        recompute_modules=(None if performance.recompute_modules is None
                           else tuple(performance.recompute_modules)),
        optimizer_dtype=performance.optimizer_dtype,
        fsdp_keep_gathered=performance.fsdp_keep_gathered,
        loss_chunks=performance.loss_chunks,
        dp_comm_overlap=performance.dp_comm_overlap,
        torch_compile=performance.torch_compile,
        moe_permute=performance.moe_permute,
        eager_kernels=performance.eager_kernels,
        expert_gemm=performance.expert_gemm,
        quantised_gemms=QuantisedGemms(performance.quantised_gemms),
        full_iteration_cuda_graph=performance.full_iteration_cuda_graph,
        layer_cuda_graphs=performance.layer_cuda_graphs,
        recompute_block_fraction=performance.recompute_block_fraction,
        max_nodes_per_token=performance.max_nodes_per_token,
        fp8_glu_inputs=performance.fp8_glu_inputs,
        fused_grouped_mlp=performance.fused_grouped_mlp,
        fp8_dot_product_attention=performance.fp8_dot_product_attention,
        uneven_pipeline_stages=performance.uneven_stages is True,
        dispatcher=dispatcher,
        dispatcher_stated=parallelism.dispatcher is not None,
        ep_overlap=parallelism.ep_overlap,
        dispatch_fp8=parallelism.dispatch_fp8,
        tp_comm_overlap=parallelism.tp_comm_overlap,
        vocab_in_pipeline_split=parallelism.vocab_in_pipeline_split,
    )
    checkpointing = recipe.pop("recompute", performance.checkpointing)
    if checkpointing == "selective":  # Megatron-Core checks the modules under selective only
        try:
            refuse_modules_the_model_lacks(performance.recompute_modules, geometry)
        except MosaicInputError as exc:
            raise MosaicInputError(f"{where}: {exc}") from None
    workload = replace(workload, **recipe)
    notes.extend(routing_assumptions(workload))
    step_tokens = batch.global_seqs * batch.seq_len
    if step_tokens > SUSPICIOUS_STEP_TOKENS:
        # a warning line too, not only an assumption at the end of the table (a trial)
        suspicious = (
            f"batch: {step_tokens:.3g} tokens a step (global_seqs x seq_len), "
            f"{step_tokens / LARGEST_PUBLISHED_STEP_TOKENS:.0f}x DeepSeek-V3's 15,360 x 4,096: "
            "is batch.global_seqs a count of tokens rather than sequences?")
        notes.append(suspicious)
        warnings.warn(suspicious, MosaicWarning, stacklevel=2)
    devices = search.devices
    if hardware.nodes is not None:
        per_node = get_system(system_name).gpus_per_node
        node_devices = hardware.nodes * per_node
        part_of_host = hardware.nodes == 1 and devices is not None and devices < per_node
        # with dp unstated, the devices fill dp: a node count against them would be blamed on
        # the layout (a stated dp is checked against both later, naming the layout)
        if (parallelism.dp is None and devices is not None and devices != node_devices
                and not part_of_host):
            raise MosaicInputError(
                f"{where}: search.devices={devices} and hardware.nodes={hardware.nodes} "
                f"({node_devices} GPUs, {per_node} per node) disagree; state one of them, or "
                "make them equal")
        devices = node_devices if devices is None else devices
    if parallelism.dp is None and devices is None:
        raise MosaicInputError(f"{where}: give parallelism.dp, search.devices or hardware.nodes")
    dp = data_parallel(parallelism, devices, where)
    ranks = parallelism.tp * parallelism.pp * parallelism.cp * dp
    if ranks > LIMITS["devices"].high:
        raise MosaicInputError(f"{where}: tp·pp·cp·dp = {ranks} devices; allowed: "
                               f"{LIMITS['devices'].describe()} ({LIMITS['devices'].why})")
    try:
        plan = plan_from_blocks(
            parallelism, batch, dp=dp, layers=geometry.layers, is_moe=geometry.is_moe,
            stack=workload.stack, checkpointing=Checkpointing.parse(checkpointing),
            measured=False, notes=notes, where=where,
            layout_rules=layout_rules(workload))
        workload = replace(workload, pipeline_layouts=resolve_pipeline_layouts(
            parallelism, recipe_layouts, geometry, plan, notes))
        # uneven_stages true: its remainder-last split as a layout, costed rank by rank
        workload = workload.with_remainder_last_layouts([(int(plan.pp[0]), int(plan.vpp[0]))])
    except MosaicInputError as exc:
        message = str(exc)
        raise MosaicInputError(message if message.startswith(where) else f"{where}: {message}"
                               ) from None
    stated_imbalance, ep = workload.routing_imbalance, int(plan.ep[0])
    if stated_imbalance is not None and stated_imbalance > ep:
        # perf.routing_load.router_imbalance caps it so
        notes.append(f"performance.routing_imbalance {stated_imbalance:g} is above ep={ep}: "
                     f"one EP rank receives at most every routed token copy, ep times the even "
                     f"share, so {ep} is used")
    notes.extend(unread_layout_settings(workload, plan))
    if workload.layer_cuda_graphs and (plan.checkpointing == Checkpointing.FULL).any():
        raise MosaicInputError(
            f"{where}: performance.layer_cuda_graphs with checkpointing full: Megatron-Core "
            "captures full recompute only in a full-iteration graph (transformer_config.py "
            "@ d98e8a64dd: 'full recompute is only supported with full iteration CUDA "
            "graph'); use selective recompute or full_iteration_cuda_graph")
    if (workload.full_iteration_cuda_graph and workload.geometry.moe is not None
            and workload.routing != "token_drop"
            and workload.dispatcher is not Dispatcher.HYBRIDEP):
        # the only documented whole-step capture of a dropless MoE (Workload docstring)
        notes.append(f"performance.full_iteration_cuda_graph with a dropless MoE on the "
                     f"{workload.dispatcher} dispatcher: Megatron captures such a step whole "
                     "only with HybridEP and --moe-expert-rank-capacity-factor (Megatron-"
                     "Bridge perf_recipes qwen/common.py _enable_hybridep_full_iteration_"
                     "mxfp8); the prediction has no MoE host wait, as if they were set")
    if not workload.dp_comm_overlap and any(int(mode) >= Sharding.FSDP for mode in plan.sharding):
        notes.append("performance.dp_comm_overlap=false leaves fsdp/hsdp unchanged: fully "
                     "sharded units gather and reduce-scatter per unit beside the compute "
                     "(the setting is Megatron-LM's DDP/ZeRO --overlap-grad-reduce / "
                     "--overlap-param-gather)")
    domain = get_system(system_name).scale_up_domain_gpus
    if int(plan.tp[0]) > domain:
        # costed so (perf.collectives places the group), but rarely meant (a trial's tp 16)
        warnings.warn(f"parallelism.tp={int(plan.tp[0])} spans {int(plan.tp[0]) // domain} "
                      f"NVLink domains of {domain} GPUs: every tensor-parallel collective "
                      "crosses the network", MosaicWarning, stacklevel=2)
    n_devices = search.devices if search.devices is not None else int(plan.n_devices[0])
    tables = _measured_tables(hardware, Path(where).parent)
    if device_name:
        refuse_foreign_tables(hardware, Path(where).parent, device_name)
        fields = {name: f"hardware.{name} {path}"
                  for name, path in _table_paths(hardware, Path(where).parent).items()}
        read = {"bf16", measured_table_dtype(workload.precision, workload.fp8_recipe)}
        for line in check_measured_rates(tables, get_device(device_name), fields, read):
            notes.append(line)
            warnings.warn(line, MosaicWarning, stacklevel=2)
    headroom = memory_headroom(hardware.usable_memory_fraction, workload.stack)
    if hardware.usable_memory_fraction is None:
        notes.append(f"hardware.usable_memory_fraction unstated: {headroom.usable_fraction:g} "
                     f"({headroom.source})")
    return JobSpec(
        workload=workload,
        plan=plan,
        system_name=system_name,
        n_devices=n_devices,
        nodes=hardware.nodes,
        usable_memory_fraction=headroom.usable_fraction,
        tables=tables,
        assumptions=tuple(notes),
        unstated_stage_split=performance.uneven_stages == "unstated",
        unstated_micro_batch=batch.micro_seqs is None,
        stack_version=performance.stack_version,
        model_name=model.name,
        train_tokens=training.tokens,
        train_goodput=training.goodput,
        search_limits=search.layout_limits(),
    )


def refuse_modules_the_model_lacks(modules: Iterable[str] | None, geometry: Geometry) -> None:
    """Refuse a stated ``performance.recompute_modules`` of a selective-checkpointing job
    naming a part whose absence Megatron-Core's TransformerConfig rejects (its checks sit
    under ``recompute_granularity == "selective"``, transformer_config.py ``__post_init__``
    @ d98e8a64dd, a ValueError; under full or none the modules are unread, and said so):
    ``mla_up_proj`` without multi-latent attention, ``moe_act``
    without the routed experts' grouped GEMM, which a model without MoE layers has not.
    ``moe`` and ``shared_experts`` it accepts and reads nowhere (:func:`unread_layout_settings`
    names them)."""
    stated = set(modules or ())
    if "mla_up_proj" in stated and geometry.attention is not AttentionKind.MLA:
        raise MosaicInputError(
            f"performance.recompute_modules: mla_up_proj recomputes MLA's up-projections, and "
            f"the model's attention is {geometry.attention.value}; Megatron-Core refuses it "
            "('mla_up_proj in recompute_modules is only supported with "
            "multi_latent_attention', transformer_config.py)")
    if "moe_act" in stated and not geometry.is_moe:
        raise MosaicInputError(
            "performance.recompute_modules: moe_act recomputes the routed experts' "
            "activation, and the model has no MoE layers; Megatron-Core refuses it ('moe_act "
            "in recompute_modules is only supported with moe_grouped_gemm', "
            "transformer_config.py)")


# What each recompute module the model may lack recomputes (unread_layout_settings).
_PART_NAMES = {"moe": "MoE layers", "shared_experts": "shared experts"}


def unread_layout_settings(workload: Workload, plan: ParallelPlans) -> list[str]:
    """One line per setting the job states that its own layout (the length-1 ``plan``) does
    not read, so that a prediction equal to the one without it is not taken for its effect.
    `layouts` searches other layouts, where they may be read, so they are notes, not
    refusals (as parallelism.sequence_parallel at tp 1 is, config.layout)."""
    row = plan.row(0)
    notes = []
    if workload.tp_comm_overlap and not row["sequence_parallel"]:
        # perf.layer_costs.overlapped_tp_collectives_s; Megatron-LM refuses the flag
        # without --sequence-parallel, which it turns off at tp 1 (megatron/training/
        # arguments.py: 'Tensor parallel communication/GEMM overlap can happen only when
        # sequence parallelism is enabled')
        notes.append(f"parallelism.tp_comm_overlap not read: it overlaps the sequence-parallel "
                     f"collectives, and tp={row['tp']} runs without sequence parallelism "
                     "(Megatron-LM refuses --tp-comm-overlap without --sequence-parallel)")
    sharding = Sharding(int(plan.sharding[0]))
    if sharding < Sharding.FSDP:
        # perf.data_parallel_time and perf.schedule read them for fully sharded units only
        stated = [*([f"fsdp_gather {workload.fsdp_gather}"] if workload.fsdp_gather else []),
                  *(["fsdp_keep_gathered"] if workload.fsdp_keep_gathered else [])]
        if stated:
            notes.append(f"performance.{' and '.join(stated)} not read: sharding "
                         f"{sharding.name.lower()} gathers no parameters per unit (they "
                         "apply to fsdp and hsdp)")
    checkpointing = Checkpointing(int(plan.checkpointing[0]))
    if workload.recompute_modules is not None and checkpointing is not Checkpointing.SELECTIVE:
        # Megatron-Core reads recompute_modules under recompute_granularity 'selective'
        # only (transformer_config.py); perf.layer_costs.recompute_modules_forward_s
        notes.append(f"performance.recompute_modules not read: checkpointing is "
                     f"{checkpointing.name.lower()}; the modules are what selective "
                     "checkpointing recomputes")
    elif workload.recompute_modules is not None:
        # perf.layer_costs.recompute_modules_forward_s times a module the block has; Megatron-
        # Core accepts these two without the part (refuse_modules_the_model_lacks)
        moe = workload.geometry.moe
        absent = [*(["moe"] if "moe" in workload.recompute_modules and moe is None else []),
                  *(["shared_experts"] if "shared_experts" in workload.recompute_modules
                    and (moe is None or not moe.shared_experts) else [])]
        if absent:
            notes.append(f"performance.recompute_modules {', '.join(absent)} not read: the "
                         f"model has no {' and no '.join(_PART_NAMES[name] for name in absent)}")
    block_level = workload.traits.selective_recompute is SelectiveRecompute.BLOCKS
    if (workload.recompute_block_fraction is not None
            and (checkpointing is Checkpointing.NONE
                 or (checkpointing is Checkpointing.SELECTIVE and not block_level))):
        # Workload.checkpointed_block_fraction: read under full and block-level selective
        # (perf.step_time); Megatron-Core's selective recompute takes no layer count
        # (transformer_config.py: 'recompute_num_layers must be None' under selective)
        how = ("none" if checkpointing is Checkpointing.NONE else
               f"selective, which {workload.stack} runs per module, not per block")
        notes.append(f"performance.recompute_block_fraction not read: checkpointing is {how} "
                     "(it is the share of blocks full or block-level selective checkpointing "
                     "recomputes)")
    if workload.ep_overlap and workload.geometry.moe is not None and int(row["ep"]) == 1:
        # perf.layer_costs.charged_all_to_all_s overlaps the EP all-to-alls, which ep 1 has
        # none of; Megatron-Core asserts 'overlap_moe_expert_parallel_comm is only supported
        # with expert model parallelism' (transformer_config.py @ d98e8a64dd)
        notes.append("parallelism.ep_overlap not read: ep=1 runs no EP all-to-all to overlap "
                     "(Megatron-Core refuses --overlap-moe-expert-parallel-comm without "
                     "expert parallelism)")
    if (workload.max_nodes_per_token is not None and workload.geometry.moe is not None
            and not workload.dispatcher.deduplicates_per_node):
        # perf.routing_load.max_domains_per_token bounds a deduplicating dispatch only
        notes.append(f"performance.max_nodes_per_token {workload.max_nodes_per_token} not "
                     f"read: the {workload.dispatcher} dispatcher sends every routed copy "
                     "on its own, not once per node (deepep and hybridep do)")
    traits = workload.traits
    if (workload.local_batch is not None and not traits.pipeline_schedule_per_pass
            and traits.micro_batch_default is MicroBatchDefault.ONE):
        # perf.schedule.schedule_passes and config.layout.default_micro_batch read it on
        # other stacks only; Megatron-LM has no local batch: one schedule a step over
        # global / (dp·micro) micro-batches (get_num_microbatches, num_microbatches_calculator)
        notes.append(f"batch.local_seqs {workload.local_batch} not read: {workload.stack} runs "
                     "one pipeline schedule a step over all global_seqs / (dp·micro_seqs) "
                     "micro-batches and takes no local batch (it is torchtitan's and NeMo "
                     "AutoModel's local_batch_size); only dp·local_seqs dividing global_seqs "
                     "is checked")
    return notes


def _job_fp8_recipe(performance: PerformanceBlock, notes: list[str]) -> Fp8Recipe:
    """The job's FP8 recipe: ``performance.fp8_recipe`` where stated (it must agree with the
    precision), else what the precision names or the stack's default (a note says so)."""
    stated = performance.fp8_recipe
    if stated is None:
        return fp8_recipe_for(performance.precision, performance.stack, notes)
    implied = stated_fp8_recipe(performance.precision)
    if implied is Fp8Recipe.NONE or (implied is not None and implied != stated):
        raise MosaicInputError(
            f"performance.fp8_recipe {stated!r} does not fit performance.precision "
            f"{performance.precision!r}: give precision fp8 with any recipe, or mxfp8 alone")
    return Fp8Recipe(stated)


def _catalog_name(system: str) -> str:
    """The catalog's name of a node type (an alias resolved); the name as given where the
    active catalog lacks it (the loader reports that)."""
    try:
        return get_system(system).name
    except MosaicInputError:
        return system


def job_document(spec: JobSpec) -> dict[str, Any]:
    """The canonical job document of a validated job: loading it gives the same workload
    and layout (plan results and exports write it; docs/schema.md)."""
    workload, row = spec.workload, spec.plan.row(0)
    performance: dict[str, Any] = {
        "precision": job_precision_name(str(workload.precision)),
        "checkpointing": str(row["checkpointing"]),
        "stack": workload.stack}
    # With the release written, its recipe would fill every setting the document leaves
    # out on reload: write the ones a recipe can set even at their defaults, so a setting
    # the job turned off stays off.
    explicit = spec.stack_version is not None
    if explicit:
        performance["stack_version"] = spec.stack_version
    if workload.fp8_recipe not in (None, Fp8Recipe.NONE):
        performance["fp8_recipe"] = str(workload.fp8_recipe)
    if workload.fp8_param_gather or explicit:
        performance["fp8_param_gather"] = workload.fp8_param_gather
    if workload.fp4_param_gather or explicit:
        performance["fp4_param_gather"] = workload.fp4_param_gather
    if workload.attention_kernel is not None:
        performance["attention_kernel"] = str(workload.attention_kernel)
    if workload.fsdp_gather is not None:
        performance["fsdp_gather"] = str(workload.fsdp_gather)
    chunks = int(row["pp"]) * int(row["vpp"])
    if workload.uneven_pipeline_stages:
        performance["uneven_stages"] = True
    elif ((spec.recorded_layout or spec.unstated_stage_split)
          and workload.geometry.layers % chunks):
        performance["uneven_stages"] = "unstated"  # a recorded uneven split, read as recorded
    if workload.routing != "dropless" or explicit:
        performance["routing"] = workload.routing
    if workload.pad_to_capacity or explicit:
        performance["pad_to_capacity"] = workload.pad_to_capacity
    if workload.routing_imbalance is not None:
        performance["routing_imbalance"] = workload.routing_imbalance
    if workload.cross_entropy is not None:
        performance["cross_entropy"] = str(workload.cross_entropy)
    if not workload.grad_reduce_in_fp32 or explicit:
        performance["grad_reduce_in_fp32"] = workload.grad_reduce_in_fp32
    if workload.offloaded_activation_layers or explicit:
        performance["offloaded_activation_layers"] = workload.offloaded_activation_layers
    if workload.recompute_modules is not None:
        performance["recompute_modules"] = list(workload.recompute_modules)
    if workload.optimizer_dtype != "fp32" or explicit:
        performance["optimizer_dtype"] = str(workload.optimizer_dtype)
    if workload.fsdp_keep_gathered or explicit:
        performance["fsdp_keep_gathered"] = workload.fsdp_keep_gathered
    if workload.loss_chunks != 1:
        performance["loss_chunks"] = workload.loss_chunks
    if not workload.dp_comm_overlap or explicit:
        performance["dp_comm_overlap"] = workload.dp_comm_overlap
    if workload.torch_compile is not None:
        performance["torch_compile"] = workload.torch_compile
    if workload.moe_permute is not None:
        performance["moe_permute"] = workload.moe_permute
    if workload.eager_kernels is not None:
        performance["eager_kernels"] = workload.eager_kernels
    if workload.expert_gemm != "grouped":
        performance["expert_gemm"] = workload.expert_gemm
    if workload.quantised_gemms is not QuantisedGemms.ALL:
        performance["quantised_gemms"] = str(workload.quantised_gemms)
    if workload.full_iteration_cuda_graph or explicit:
        performance["full_iteration_cuda_graph"] = workload.full_iteration_cuda_graph
    if workload.layer_cuda_graphs or explicit:
        performance["layer_cuda_graphs"] = workload.layer_cuda_graphs
    if workload.recompute_block_fraction is not None:
        performance["recompute_block_fraction"] = workload.recompute_block_fraction
    if workload.max_nodes_per_token is not None:
        performance["max_nodes_per_token"] = workload.max_nodes_per_token
    if workload.fp8_glu_inputs or explicit:
        performance["fp8_glu_inputs"] = workload.fp8_glu_inputs
    if workload.fused_grouped_mlp or explicit:
        performance["fused_grouped_mlp"] = workload.fused_grouped_mlp
    if workload.fp8_dot_product_attention or explicit:
        performance["fp8_dot_product_attention"] = workload.fp8_dot_product_attention
    # the catalog's spelling of the node type, not an alias the job was written with
    # ('p6-b200.48 xlarge', the paper's; a trial found it in an exported job)
    hardware: dict[str, Any] = {"system": _catalog_name(spec.system_name)}
    if spec.nodes is not None:
        hardware["nodes"] = spec.nodes
    default_fraction = memory_headroom(None, workload.stack).usable_fraction
    if spec.usable_memory_fraction != 1.0 or default_fraction != 1.0:
        # also 1.0 where the loader's default differs (a run record is predicted against
        # the whole device)
        hardware["usable_memory_fraction"] = spec.usable_memory_fraction
    return {
        "model": model_document(workload.geometry, spec.model_name),
        "parallelism": parallelism_document(row, str(workload.dispatcher), workload.stack)
        | ({"ep_overlap": workload.ep_overlap} if workload.ep_overlap or explicit else {})
        | ({"dispatch_fp8": workload.dispatch_fp8}
           if workload.dispatch_fp8 or explicit else {})
        | ({"tp_comm_overlap": workload.tp_comm_overlap}
           if workload.tp_comm_overlap or explicit else {})
        | ({"vocab_in_pipeline_split": True} if workload.vocab_in_pipeline_split else {})
        | layout_document(workload, row, derived=False),
        "batch": batch_document(workload.global_batch, workload.seq_len,
                                int(row["micro_batch"]))
        | ({"local_seqs": workload.local_batch} if workload.local_batch is not None else {}),
        "performance": performance,
        "optimizer": {"kind": str(workload.optimizer)},
        "search": {"devices": spec.n_devices if spec.n_devices is not None
                   else int(spec.plan.n_devices[0]), **spec.search_limits},
        "hardware": hardware,
    } | training_block(spec.train_tokens, spec.train_goodput)


def layout_document(workload: Workload, row: dict[str, Any], derived: bool = True
                    ) -> dict[str, str]:
    """``{"pipeline_layout": text}`` when a layout splits this plan row (the layout of its
    pp and vpp), else nothing; ``derived`` False leaves out the split ``uneven_stages: true``
    reproduces (a job file writes the setting, which stays editable)."""
    layout = layout_for(workload.pipeline_layouts, int(row["pp"]), int(row["vpp"]))
    if layout is None or (layout.derived and not derived):
        return {}
    return {"pipeline_layout": layout.text}


_JOB_BLOCKS: dict[str, type[BaseModel]] = {
    "model": ModelBlock, "parallelism": ParallelismBlock, "batch": BatchBlock,
    "performance": PerformanceBlock, "optimizer": OptimizerBlock, "search": SearchBlock,
    "hardware": HardwareBlock}


def resolved_job_document(spec: JobSpec) -> dict[str, Any]:
    """:func:`job_document` with every block's unstated fields at the schema's defaults: each
    field of the job as it runs (`mosaic compare` reads a field one file leaves out here)."""
    document = job_document(spec)
    return {name: validate_mapping(schema, document.get(name) or {}, name).model_dump(
        mode="json") for name, schema in _JOB_BLOCKS.items()}


def job_from_run_record(record: RunRecord) -> JobSpec:
    """A measured run as a job: the same workload, layout and system ``validate`` uses, and
    the release its recipe settings came from (its job document keeps them on reload)."""
    return JobSpec(workload=record.workload, plan=record.plan, system_name=record.system.name,
                   n_devices=record.n_devices, nodes=None, assumptions=record.assumptions,
                   recorded_layout=True, measured_step_time_s=record.measured_step_time_s,
                   measured_oom=record.oom, stack_version=record.stack_version,
                   model_name=record.model_name,
                   measured_memory_bytes=None if record.oom else record.measured_memory_bytes,
                   memory_measure=record.memory_measure)


def _rederived_dp(recorded: dict[str, Any], changed: dict[str, Any]) -> str | None:
    """When ``--set`` changed a record's tp, pp or cp and stated no dp, dp becomes
    num_gpus/(tp·pp·cp) in ``changed`` (where that divides), so that the layout still fills
    the run's GPUs (a trial's ``--set parallelism.tp=2`` was refused as tp·pp·cp·dp = 128,
    not num_gpus = 64); returns the note, or None when nothing was re-derived."""
    before, after = recorded.get("parallelism"), changed.get("parallelism")
    gpus = changed.get("num_gpus")
    if not (isinstance(before, dict) and isinstance(after, dict) and isinstance(gpus, int)):
        return None
    degrees = [after.get(name, 1) for name in ("tp", "pp", "cp")]
    moved = any(after.get(name, 1) != before.get(name, 1) for name in ("tp", "pp", "cp"))
    if not moved or not all(isinstance(d, int) and d > 0 for d in degrees):
        return None
    model_parallel = degrees[0] * degrees[1] * degrees[2]
    if gpus % model_parallel:
        return None
    after["dp"] = gpus // model_parallel
    recorded_dp = before.get("dp")
    return (f"--set changed tp·pp·cp to {model_parallel}: dp re-derived as "
            f"num_gpus/(tp·pp·cp) = {gpus}/{model_parallel} = {after['dp']} "
            f"({'unstated' if recorded_dp is None else f'recorded {recorded_dp}'})")


def _load_run_record_job(document: dict[str, Any], path: Path, run_id: str | None,
                         overrides: list[str], deprecated: set[str],
                         adjust_record: Callable[[RunRecord], RunRecord] | None = None
                         ) -> JobSpec:
    from mosaic.config.run_records import RunRecordEntry, run_record_from_raw, select_run_entry

    raw = select_run_entry(document, path, run_id, deprecated)
    for override in overrides:
        block = override.split("=", 1)[0].split(".", 1)[0].strip()
        if block in KNOWN_BLOCKS and block not in RunRecordEntry.model_fields:
            raise MosaicInputError(
                f"--set {shown(override)}: a run record has no {block!r} block; its fields are "
                f"those of the run-record schema (e.g. precision=fp8, parallelism.tp=2, "
                f"batch.micro_seqs=2; docs/run_records.md)")
    def as_job(entry: dict[str, Any]) -> JobSpec:
        record = run_record_from_raw(entry, f"{path}#{entry.get('id')}")
        return job_from_run_record(adjust_record(record) if adjust_record else record)

    if not overrides:
        return as_job(raw)
    recorded = as_job(raw)
    changed = apply_overrides(raw, overrides, deprecated, rules=RECORD_RULES,
                              known=RunRecordEntry.model_fields, min_depth=1)
    states_dp = any(o.split("=", 1)[0].strip().rsplit(".", 1)[-1] == "dp" for o in overrides)
    rederived = None if states_dp else _rederived_dp(raw, changed)
    try:
        spec = as_job(changed)
    except MosaicInputError as exc:
        if rederived is None:
            raise
        raise MosaicInputError(f"{exc} ({rederived})") from None
    if rederived:
        spec = replace(spec, assumptions=(*spec.assumptions, rederived))
    # a what-if: the run as measured is no longer what is predicted
    return replace(spec, measured_step_time_s=None, measured_oom=False,
                   measured_memory_bytes=None,
                   as_recorded=(recorded.workload, recorded.plan), assumptions=(
                       *spec.assumptions, "--set changed the recorded run: its measured step "
                                          "is not compared"))


def is_plan_document(document: object) -> bool:
    """The output of ``mosaic plan --json`` (an ``optimum`` and its ``envelope``), whatever
    the file is called: the one test the job loader and ``mosaic export`` share."""
    return isinstance(document, dict) and "optimum" in document and "envelope" in document


def load_job(path: Path, overrides: list[str] | None = None,
             adjust_record: Callable[[RunRecord], RunRecord] | None = None,
             model: dict[str, Any] | None = None,
             default_stack: str | None = None) -> JobSpec:
    """Read a job YAML file (any accepted spelling), apply ``--set`` overrides, validate.

    ``RUNS.yaml#ID`` (or a run-record file holding one run) loads that measured run with
    the rules of ``mosaic validate``; ``adjust_record`` is applied to it first (the
    evaluate layer's record settings: :func:`mosaic.evaluate.job.load_job_spec`).
    ``model`` (a canonical model block, ``--model``) replaces a job file's own before the
    overrides; a run record keeps the model it measured.
    Deprecated spellings in the file and the overrides give one warning together.
    ``default_stack`` (a calibration profile's stack, as ``mosaic plan`` plans on it) is the
    stack of a job file that states none, said in its assumptions.
    """
    from mosaic.config.run_records import is_run_record_document, split_record_reference

    deprecated: set[str] = set()
    file, run_id = split_record_reference(path)
    raw_document = load_yaml_mapping(file)
    if is_plan_document(raw_document):
        # the candidate the reference names, not the optimum (a trial's plan.json#2 was sent
        # to an export of #1)
        chosen = f"candidate #{run_id}'s" if run_id else "its chosen"
        raise MosaicInputError(f"{file}: a plan (`mosaic plan --json` output), not a job file; "
                               f"write {chosen} job with `mosaic export {path} --to yaml "
                               "--out job.yaml`")
    if is_run_record_document(raw_document):
        if model is not None:
            raise MosaicInputError(f"{path}: --model replaces a job file's model; a run record "
                                   "keeps the model it measured (edit a copy as a job file)")
        spec = _load_run_record_job(raw_document, file, run_id, overrides or [], deprecated,
                                    adjust_record)
        warn_deprecated(deprecated, str(file))
        return spec
    if run_id is not None:
        raise MosaicInputError(f"{file}: #{run_id} names a run, but this is a job file "
                               "(no 'runs' list)")
    document = canonical_job_document(raw_document, str(path), deprecated)
    if model is not None:
        document["model"] = model
    document = apply_overrides(document, overrides or [], deprecated)
    document, note = on_default_stack(document, default_stack)
    try:
        spec = job_from_document(document, str(path), deprecated)
    except MosaicInputError as error:
        error = blame_override(error, overrides or [])
        if note is not None:  # the stack the user never named (a trial's torchtitan-fitted
            # profile refused a Megatron job for torchtitan's default vpp, without a word)
            error = type(error)(f"{error} ({note}; state performance.stack for another)")
        raise error from None
    if note is not None:
        spec = replace(spec, assumptions=(*spec.assumptions, note))
    warn_deprecated(deprecated, str(path))
    return spec


# how a job's assumptions begin where a calibration profile chose its stack (a refusal names it)
CALIBRATION_STACK_NOTE = "performance.stack not stated"


def on_default_stack(document: dict[str, Any], default_stack: str | None
                     ) -> tuple[dict[str, Any], str | None]:
    """A job document that states no ``performance.stack`` on ``default_stack`` (a
    calibration profile's), and the assumption that says so; as given, with None, where it
    states one or ``default_stack`` is None or the default stack (`load_job`, the studio's
    `--job` form)."""
    performance = document.get("performance") or {}
    if default_stack in (None, DEFAULT_STACK) or performance.get("stack") is not None:
        return document, None
    return ({**document, "performance": {**performance, "stack": default_stack}},
            f"{CALIBRATION_STACK_NOTE}: {default_stack} (the calibration profile's stack)")


def blame_override(error: MosaicInputError, overrides: list[str]) -> MosaicInputError:
    """``error`` with the ``--set`` that caused it named: the file is named first in every
    message, though the value came from the command line (a fuzz trial: '--set
    model.layrs=3' read as 'job.yaml: model: layrs: unknown field'). The override whose
    field path the message names most fully wins (a fuzz trial blamed '...groups=64' for
    'moe.router.top_groups (65) must lie in 1..groups (64)'); among those named as fully,
    the one named first, a rule's message naming the setting it refuses first (a review:
    the sequence_parallel refused 'with tp=2 and ep=4' was blamed on the earlier of
    '--set parallelism.ep=4' and '--set parallelism.sequence_parallel=true')."""
    message = str(error)
    scores = [(_override_rank(override.split("=", 1)[0].strip(), message), override)
              for override in overrides]
    (depth, _), override = max(scores, key=lambda pair: pair[0], default=((0, 0), ""))
    if len(override) > SHOWN_CHARS:  # a long value is not echoed whole (errors.shown)
        field, _, value = override.partition("=")
        override = f"{field}={shown(value)}"
    return type(error)(f"{message} (from --set {override})") if depth else error


def _override_rank(path: str, message: str) -> tuple[int, int]:
    """:func:`_named_depth` of a ``--set`` path as given or in its canonical spelling, which
    the schema's messages name (a fuzz trial: '--set data.global_batch=-1' is refused as
    'batch: global_seqs: ...', which named no override)."""
    canonical, _ = canonical_path(tuple(path.split(".")), JOB_RULES, set())
    ranks = [_named_depth(path, message), _named_depth(".".join(canonical), message)]
    if canonical and canonical[-1] in _LAYOUT_RULE_NAMES:  # the layout rules' own names
        ranks.append(_named_depth(_LAYOUT_RULE_NAMES[canonical[-1]], message))
    return max(ranks)


# The names the layout rules (perf/constraints.py) give batch fields: 'dp·micro_batch=32·3
# must divide global_batch=8192' named no --set batch.micro_seqs=3 (a trial)
_LAYOUT_RULE_NAMES = {"micro_seqs": "micro_batch", "global_seqs": "global_batch"}


def _named_depth(path: str, message: str) -> tuple[int, int]:
    """How many trailing parts of the dotted ``path`` the message names as a whole word
    (a field alone only followed by ':', '=', ' ', '(' or the '·' of a product such as
    'tp·pp·cp=24', as messages name a value), and
    minus the position of the first such name (an earlier name ranks higher); (0, 0) for
    none."""
    parts = [part for part in path.split(".") if part]
    for depth in range(len(parts), 0, -1):
        suffix = re.escape(".".join(parts[-depth:]))
        after = r"(?![\w.])" if depth > 1 else r"(?=[:= (·])"
        found = re.search(rf"(?<!\w){suffix}{after}", message)
        if found:
            return depth, -found.start()
    return 0, 0
