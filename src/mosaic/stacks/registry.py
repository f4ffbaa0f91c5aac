"""Load and validate the stack registry (``data/stacks.yaml``) once; look stacks up by name.

An unknown stack is an error that names the known ones, never a silent fallback. A run
record's free-text ``software`` field maps to a stack by keyword, found as a whole word; a
record whose software matches none gets the explicit ``other`` stack and a note saying so.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mosaic.errors import MosaicInputError, shown
from mosaic.schema_validation import validate_mapping

OTHER_STACK = "other"
# The stack a job, plan or export that names none runs: Megatron-Core, the paper's training
# stack (App. F, NeMo on Megatron-Core) and the one every shipped calibration was fitted on
DEFAULT_STACK = "megatron-core"


class MicroBatchDefault(StrEnum):
    """What a stack does when the micro-batch is not stated."""

    @property
    def local_batch_per_forward(self) -> bool:
        """Without PP the stack runs its stated local batch as one forward (torchtitan:
        micro-batches split the local batch only under PP, train.py @ v0.2.2)."""
        return self in (MicroBatchDefault.LOCAL_BATCH_OVER_PP, MicroBatchDefault.ONE_UNDER_PP)

    ONE = "one"  # Megatron-LM --micro-batch-size defaults to 1
    LOCAL_BATCH_OVER_PP = "local_batch_over_pp"  # torchtitan to 2025-04: local batch / pp
    # torchtitan since #1073 (2025-04): micro-batch 1 under PP, the local batch per forward
    # without PP
    ONE_UNDER_PP = "one_under_pp"
    WHOLE_LOCAL_BATCH = "whole_local_batch"  # JAX/XLA: no gradient accumulation unless stated


class SelectiveRecompute(StrEnum):
    """What a stack's "selective" activation checkpointing recomputes."""

    ATTENTION_CORE = "attention_core"  # Korthikanti et al. 2022
    PER_OP = "per_op"  # torch per-op SAC (torchtitan's 'op' policy)
    # A share of whole blocks checkpointed, the others keep everything (fms-fsdp's
    # selective_checkpointing p, fms_fsdp/policies/ac_handler.py); the share is the
    # workload's recompute_block_fraction.
    BLOCKS = "blocks"
    # Every weight matmul's output and the attention context are saved, everything else
    # recomputed: JAX's checkpoint_dots_with_no_batch_dims plus the name 'context' (MaxText
    # remat_policy minimal_flash, MaxText/layers/models.py @ efb6d9e4a).
    SAVE_DOTS = "save_dots"


class CrossEntropy(StrEnum):
    """How a stack computes the LM loss (sets the logits working set, mosaic.perf.memory)."""

    FUSED = "fused"  # one fp32 copy, softmax and gradient in place (Megatron-Core)
    # Megatron-Core up to core_v0.7: the max-shifted logits are a second fp32 tensor
    FUSED_OUT_OF_PLACE = "fused_out_of_place"
    FP32_UPCAST = "fp32_upcast"  # eager F.cross_entropy(logits.float()) (torchtitan)
    COMPILED = "compiled"  # the same loss under torch.compile (Inductor fuses it)
    BF16 = "bf16"  # eager F.cross_entropy on the bf16 logits, no upcast (NeMo AutoModel)
    TE = "te"  # Transformer Engine parallel_cross_entropy: gradient written into the logits


class FsdpShardStorage(StrEnum):
    """What a fully sharded stack keeps per parameter shard between steps."""

    FP32 = "fp32"  # the fp32 shard is the optimizer's master (torch FSDP mixed precision)
    BF16_FP32 = "bf16_fp32"  # a bf16 shard plus separate fp32 main params (Megatron FSDP)


# a stack release, YY.MM with a month 01-12 (e.g. the NeMo container 26.06)
RELEASE_PATTERN = r"^\d{2}\.(0[1-9]|1[0-2])$"
# what a job or plan may state as its stack version: a release or one of its point releases,
# YY.MM.0N (the NeMo container 26.04.01)
STACK_VERSION_PATTERN = r"^\d{2}\.(0[1-9]|1[0-2])(\.0[1-9])?$"
# what a release must look like, for the messages that refuse one
RELEASE_FORMAT = ("expected a release YY.MM with a month 01-12, e.g. 26.06, or a point "
                  "release YY.MM.0N, e.g. 26.06.01")


def degree_one_only(degrees: tuple[int, ...] | None) -> bool:
    """Whether a set of offered (or searched) parallel degrees is {1}: no layout splits
    that axis (a stack's ``layout_pp`` / ``layout_ep``, or a search pinned to 1); None is
    any degree."""
    return degrees is not None and set(degrees) == {1}


def check_release(text: str, option: str) -> None:
    """MosaicInputError naming ``option`` unless ``text`` is a release (YY.MM or YY.MM.0N)."""
    if re.fullmatch(STACK_VERSION_PATTERN, text) is None:
        raise MosaicInputError(f"{option} {shown(text)}: {RELEASE_FORMAT}")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str = Field(min_length=1)
    keywords: tuple[str, ...]
    micro_batch_default: MicroBatchDefault
    interleaved_vpp_default: int = Field(ge=1, le=64)
    fsdp_gather: Literal["block", "tensor"]
    fsdp_gather_bytes_per_param: Literal[2, 4]
    attention_kernel: dict[Literal["ampere", "hopper", "blackwell"],
                           Literal["cudnn", "fa2", "fa3", "triton", "jax_flash"]]
    dropless_host_sync: bool
    selective_recompute: SelectiveRecompute
    unstated_recompute: Literal["none", "selective", "full"]
    cross_entropy: CrossEntropy
    fsdp_shard_storage: FsdpShardStorage
    moe_probs_in_activation: bool
    fsdp_skips_unsharded_experts: bool = False
    fsdp_pipeline_keeps_gathered: bool = True
    pipeline_schedule_per_pass: bool = False
    zero_runtime: Literal["torch", "deepspeed"] = "torch"
    layout_sharding: tuple[Literal["none", "zero1", "zero2", "fsdp", "hsdp"], ...] | None = None
    sharding_without_pp_ep: tuple[Literal["none", "zero1", "zero2", "fsdp", "hsdp"], ...] = ()
    sharding_without_sequence_parallel: tuple[
        Literal["none", "zero1", "zero2", "fsdp", "hsdp"], ...] = ()
    layout_vpp: tuple[int, ...] | None = None
    layout_pp: tuple[int, ...] | None = None
    layout_ep: tuple[int, ...] | None = None
    layout_etp: tuple[int, ...] | None = None
    usable_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    memory_source: str | None = None
    pp_p2p_overlap: Literal["interleaved", "none"] = "none"
    gdn_context_parallel_since: str | None = Field(default=None, pattern=r"^\d{2}\.\d{2}$")
    pipeline_schedule: Literal["1f1b", "dualpipe"] = "1f1b"
    tp_overlap_passes: Literal["forward", "forward_backward"] = "forward_backward"
    moe_dispatcher: dict[Literal["ampere", "hopper", "blackwell"],
                         Literal["alltoall", "deepep", "hybridep"]] | None = None
    moe_flex_dispatchers: tuple[Literal["deepep", "hybridep"], ...] = ()
    pipeline_layout_flag: bool = False
    uneven_stage_split: Literal["remainder_last", "extra_first"] = "remainder_last"
    router_balancing: Literal["aux_loss", "loss_free"] = "aux_loss"
    ep_shared_expert_overlap: Literal["dispatch_combine", "forward_combine"] = (
        "dispatch_combine")
    context_parallel: Literal["ring_p2p", "torch_ring", "ulysses"] = "ring_p2p"
    dp_last_bucket: Literal["megatron", "unit", "none"] = "unit"
    unstated_etp: Literal["one", "tp"] = "one"
    unstated_sequence_parallel: Literal["tp", "off"] = "tp"
    ep_sequence_parallel: bool = True
    unstated_sharding: Literal["none", "zero1", "zero2", "fsdp", "hsdp"] = "zero1"
    elementwise_kernels: Literal["te_fused", "inductor", "xla", "eager_fp32_norm",
                                 "eager_native_norm", "eager_fused_rmsnorm"] = "te_fused"
    torch_compile: bool = False
    compiled_loss: bool = False
    moe_permute: Literal["te_fused", "torch_index", "torchtitan", "torchtitan_2510",
                         "torchtitan_2604", "levanter"] = "te_fused"
    fp8_recipe: Literal["delayed", "current", "blockwise", "mxfp8"] | None = None
    expert_gemm_launch: Literal["per_group", "one_op"] = "per_group"
    hybrid_models: bool = False
    fused_grouped_mlp: bool = False
    routed_expert_quantisation: bool = False
    expert_groups_in_fsdp_shard: bool = False
    megatron_moe_rules: bool = False
    deepep_group: Literal["etp_ep", "ep"] | None = None
    hybridep_group: Literal["etp_ep", "ep"] | None = None
    deepep_etp: bool = True
    bf16_grad_reduce: bool = True
    ep_comm_overlap: bool = False
    fp8_primary_weights: bool = False
    activation_offload: bool = False
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _unstated_sharding_offered(self) -> _Entry:
        if self.layout_sharding is not None and self.unstated_sharding not in self.layout_sharding:
            raise ValueError(f"unstated_sharding {self.unstated_sharding} is not among the "
                             f"stack's layout_sharding {list(self.layout_sharding)}")
        return self


class _Registry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    stacks: dict[str, _Entry]


@dataclass(frozen=True)
class StackTraits:
    """One software stack's modelled behaviour (fields as in ``data/stacks.yaml``)."""

    name: str
    description: str
    keywords: tuple[str, ...]
    micro_batch_default: MicroBatchDefault
    interleaved_vpp_default: int
    fsdp_gather: str
    fsdp_gather_bytes_per_param: int
    attention_kernel: dict[str, str]  # GPU generation -> kernel family run by default
    dropless_host_sync: bool
    selective_recompute: SelectiveRecompute
    unstated_recompute: str
    cross_entropy: CrossEntropy
    fsdp_shard_storage: FsdpShardStorage
    moe_probs_in_activation: bool  # routing probs scale the expert activation, not its output
    fsdp_skips_unsharded_experts: bool  # EP experts with no expert-DP group stay out of FSDP
    # under pp > 1 fully sharded units stay gathered through the step and gradients
    # accumulate unsharded (torch FSDP2 + torch.distributed.pipelining); false = every
    # micro-batch gathers and reduce-scatters each unit (Megatron-FSDP)
    fsdp_pipeline_keeps_gathered: bool
    # gradient accumulation runs one whole pipeline schedule (fill, steady state, drain) per
    # pass of the local batch (torch.distributed.pipelining's schedule.step called once per
    # accumulation step); false = one schedule over every micro-batch of the step (Megatron)
    pipeline_schedule_per_pass: bool
    # who allocates ZeRO's sharded gradients and gathered parameters (mosaic.perf.memory):
    # "torch" (FSDP/Megatron buckets in the gradient-reduce dtype, a unit and its prefetch
    # gathered) or "deepspeed" (gradient partitions in the model dtype, gathered parameters up
    # to stage3_max_live_parameters)
    zero_runtime: str
    layout_sharding: tuple[str, ...] | None  # sharding modes the stack offers; None = all
    # sharding modes it offers only without pipeline and expert parallelism (pp = ep = 1:
    # NeMo AutoModel runs them with Megatron-FSDP or DDP, which take neither)
    sharding_without_pp_ep: tuple[str, ...]
    # sharding modes it runs only without sequence parallelism (NeMo AutoModel's
    # Megatron-FSDP strategy has no such option)
    sharding_without_sequence_parallel: tuple[str, ...]
    layout_vpp: tuple[int, ...] | None  # virtual-stage counts it offers; None = any
    layout_pp: tuple[int, ...] | None  # pipeline degrees it offers; None = any
    layout_ep: tuple[int, ...] | None  # expert-parallel degrees it offers; None = any
    layout_etp: tuple[int, ...] | None  # expert tensor-parallel degrees it offers; None = any
    usable_memory_fraction: float | None  # share of HBM a plan may fill; None = the default
    memory_source: str | None  # why, where the stack sets its own
    pp_p2p_overlap: str  # "interleaved": stage sends overlap compute when vpp > 1; else "none"
    # the first release (YY.MM) that runs gated DeltaNet layers under context parallelism;
    # None: every release does
    gdn_context_parallel_since: str | None
    # the pipeline schedule (mosaic.perf.schedule): "1f1b" (Megatron's 1F1B, interleaved
    # when vpp > 1) or "dualpipe" (DeepSeek's bidirectional DualPipe, DeepSeek-V3 report
    # Sec. 3.2.1: each rank holds its stage and the mirror stage pp - 1 - rank)
    pipeline_schedule: str
    tp_overlap_passes: str  # passes whose TP collectives tp_comm_overlap hides
    moe_dispatcher: dict[str, str] | None  # GPU generation -> EP dispatcher when unstated
    # the deduplicating EP dispatchers the stack can run beside the pairwise all-to-all
    # (Megatron-Core's flex dispatcher backends); what `mosaic explain` offers as a lever
    moe_flex_dispatchers: tuple[str, ...]
    # whether the stack places layers by Megatron-Core's --pipeline-model-parallel-layout
    # (balanced layouts, and uneven stages costed as their remainder-last layout)
    pipeline_layout_flag: bool
    # how the blocks are cut into pp·vpp pipeline chunks that do not divide them
    # (mosaic.perf.pipeline_layout.StageSplit): "remainder_last" (ceil(L/(pp·vpp)) a chunk,
    # the short one last) or "extra_first" (floor shares, the first L mod (pp·vpp) chunks
    # one more: torchtitan)
    uneven_stage_split: str
    router_balancing: str  # a learned router's default load balancing: aux_loss or loss_free
    # which EP all-to-alls run behind the shared experts: "dispatch_combine" (both, forward
    # and backward) or "forward_combine" (only the forward combine; the rest are exposed)
    ep_shared_expert_overlap: str
    # how the stack runs context parallelism (mosaic.perf.ring_attention): ring_p2p, torch_ring
    # or ulysses
    context_parallel: str
    # the data-parallel gradient bucket reduced after the last backward compute (nothing left
    # to hide it; mosaic.perf.step_time): "megatron" (Megatron-Core DDP's default bucket of
    # max(4e7, 1e6·dp) parameters), "unit" (one block: FSDP units, SHARD_GRAD_OP) or "none"
    # (not modelled)
    dp_last_bucket: str
    # the expert tensor parallelism a job that states none runs: "one", or "tp" (Megatron-Core
    # sets expert_tensor_parallel_size to the TP size when it is None)
    unstated_etp: str
    # the sequence parallelism a job that states none runs: "tp" (on with tp > 1, as the
    # Megatron-Core recipes run it) or "off" (the stack's TP runs without it by default)
    unstated_sequence_parallel: str
    # False: the stack refuses sequence parallelism with tp > 1 for an expert-parallel MoE
    # model (NeMo AutoModel's MoE parallelizer)
    ep_sequence_parallel: bool
    # the data-parallel sharding a job that states none runs (zero1 by default, Megatron's
    # distributed optimizer; fsdp where the stack shards weights over the data ranks unless
    # told otherwise and offers no zero1)
    unstated_sharding: str
    # how the model code runs norms, RoPE, activation and residual adds
    # (mosaic.perf.elementwise_traffic): te_fused, inductor, xla, eager_fp32_norm,
    # eager_native_norm or eager_fused_rmsnorm; torch_compile: eager model code is compiled
    # by default
    elementwise_kernels: str
    torch_compile: bool
    # whether compiling the model compiles the LM loss too (torchtitan: Compile.components
    # defaults to ['model', 'loss']); the loss is then CrossEntropy.COMPILED unless stated
    compiled_loss: bool
    # how the MoE layer moves routed tokens on the GPU (mosaic.perf.moe_permute_traffic):
    # te_fused, torch_index, torchtitan (v0.2.2), torchtitan_2510, torchtitan_2604 or levanter
    moe_permute: str
    # the FP8 recipe a run gets when it says only "fp8" (mosaic.perf.workload.Fp8Recipe);
    # None = the stack documents none (the config layer assumes delayed and says so)
    fp8_recipe: str | None
    # how the host launches a grouped expert GEMM (mosaic.perf.step_time): per_group (TE
    # GroupedLinear, one GEMM launch per local expert, its measured host floor) or one_op
    # (one compiled op whatever the expert count: XLA's ragged dot, levanter)
    expert_gemm_launch: str
    # whether the stack builds hybrid SSM/attention models (Geometry.hybrid_pattern):
    # Megatron-Core's hybrid model (megatron/core/models/hybrid), which NeMo and
    # Megatron-Bridge train Nemotron-H and Nemotron 3 with
    hybrid_models: bool
    # whether the stack can run a MoE layer's routed experts as Transformer Engine's fused
    # grouped MLP (Workload.fused_grouped_mlp): Megatron-Core's TEGroupedMLP through the TE
    # operation fuser
    fused_grouped_mlp: bool
    # whether the stack can run the routed experts' grouped GEMMs alone at FP8/MXFP8/NVFP4,
    # the rest in bf16 (Workload.quantised_gemms routed_experts: torchtitan's grouped-experts
    # converters)
    routed_expert_quantisation: bool
    # whether the stack builds its expert groups inside the FSDP shard ranks, so that
    # etp·ep must divide dp_shard·cp·tp (torchtitan's parallel_dims efsdp)
    expert_groups_in_fsdp_shard: bool
    # whether Megatron-Core's MoE configuration checks apply: biased linears only with etp 1
    # (TransformerConfig), and a partial distributed optimizer (HSDP) whose instances divide
    # the expert data-parallel size (parallel_state)
    megatron_moe_rules: bool
    # the ranks a stated DeepEP dispatcher runs over, which must be more than one: "etp_ep"
    # (Megatron-Core's flex dispatcher asserts TPxEP > 1 over its expert-TP x EP group),
    # "ep" (torchtitan refuses DeepEP at expert_parallel_degree 1); None: no such check
    deepep_group: str | None
    # the same for a stated HybridEP dispatcher: "ep" (NeMo AutoModel builds its flex
    # dispatcher, HybridEP too, only over an EP mesh of more than one rank); None: no such
    # check (Megatron-Core's HybridEP backend has no TPxEP assert)
    hybridep_group: str | None
    # whether the stack runs a stated DeepEP dispatcher with expert tensor parallelism
    # (etp > 1); False: torchtitan raises NotImplementedError
    deepep_etp: bool
    # whether the stack can reduce gradients in bf16 (Megatron --grad-reduce-in-bf16, an
    # FSDP reduce dtype); `mosaic explain` offers it as a lever only there
    bf16_grad_reduce: bool
    # whether the stack can overlap a micro-batch's EP all-to-alls with another micro-batch's
    # compute (Workload.ep_overlap: Megatron-Core --overlap-moe-expert-parallel-comm)
    ep_comm_overlap: bool
    # whether the stack offloads activations of whole layers to host memory (Megatron-Core
    # cpu_offloading_num_layers over Transformer Engine's offload context;
    # Workload.offloaded_activation_layers)
    activation_offload: bool
    # whether FP8 parameter gathers mean FP8 primary weights (Megatron-Core --fp8-param-gather:
    # "keep the compute param in fp8"; Transformer Engine fp8_model_init), which the memory
    # model stores at one byte on Blackwell; torch FSDP's float8 all-gather casts on the way
    fp8_primary_weights: bool
    source: str


@cache
def _registry() -> dict[str, StackTraits]:
    text = resources.files("mosaic.stacks").joinpath("data", "stacks.yaml").read_text()
    document = yaml.safe_load(text)
    if isinstance(document, dict) and isinstance(document.get("stacks"), dict):
        document = {**document, "stacks": with_inherited_traits(document["stacks"])}
    parsed = validate_mapping(_Registry, document, "stack registry")
    return {name: StackTraits(name=name, **entry.model_dump())
            for name, entry in parsed.stacks.items()}


def default_loss(traits: StackTraits, compiles_model: bool) -> CrossEntropy:
    """The LM loss a job that states none runs: compiled where the stack compiles its loss
    with the model (trait ``compiled_loss``) and the model compiles, else the stack's
    ``cross_entropy``."""
    if compiles_model and traits.compiled_loss:
        return CrossEntropy.COMPILED
    return traits.cross_entropy


def release_number_text(value: object) -> object:
    """A release given as a number (an unquoted YAML or --set 26.06) as its YY.MM text, two
    digits of month; anything else unchanged. An unquoted YY.10 arrives as the number YY.1,
    which could as well mean YY.01: refused (ValueError) with both readings."""
    if isinstance(value, float) and 0 <= value < 100:
        text = f"{value:.2f}"
        if text.endswith(".10"):
            raise ValueError(f"an unquoted {value:g} could be '{text}' or '{text[:-2]}01': "
                             "quote the release")
        return text
    return value


_RELEASE = re.compile(r"(?<![\d.])(\d{2})\.(0[1-9]|1[0-2])(?![\d])")


def parse_release(text: str | None) -> tuple[int, int] | None:
    """(year, month) of a YY.MM release named in ``text`` (e.g. 'NeMo 26.06 container'),
    the first such number; None when there is none."""
    match = _RELEASE.search(text or "")
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def format_release(release: tuple[int, int]) -> str:
    """The YY.MM text of a (year, month) release, as :func:`parse_release` reads it."""
    return f"{release[0]:02d}.{release[1]:02d}"


_POINT_RELEASE = re.compile(r"(?<![\d.])\d{2}\.(0[1-9]|1[0-2])\.0[1-9](?![\d])")


def names_point_release(text: str | None) -> bool:
    """Whether ``text`` names a point release of a container, YY.MM.0N ('nvcr.io/nvidia/
    nemo:26.04.01'), rather than the release's first container."""
    return _POINT_RELEASE.search(text or "") is not None


def release_text(text: str | None) -> str | None:
    """The release ``text`` names, as a job's ``performance.stack_version`` spells it: the
    first YY.MM (:func:`parse_release`'s), with its point suffix .0N where it has one
    ('NeMo 25.11 container' -> '25.11', 'nemo:26.04.01' -> '26.04.01'); None without one."""
    match = _RELEASE.search(text or "")
    if match is None:
        return None
    point = re.match(r"\.0[1-9](?![\d])", (text or "")[match.end():])
    return match.group(0) + (point.group(0) if point else "")


def gdn_context_parallel(stack: str, release: str | None) -> bool:
    """Whether ``stack`` at the release ``release`` names runs gated DeltaNet layers under
    context parallelism: every release from the stack's ``gdn_context_parallel_since`` on,
    and any release of a stack without one or a job naming none
    (Workload.gdn_context_parallel)."""
    parsed = parse_release(release)
    since = parse_release(get_stack(stack).gdn_context_parallel_since)
    return parsed is None or since is None or parsed >= since


# What identifies and documents an entry is its own; every other trait may be inherited.
_OWN_FIELDS = ("description", "keywords", "source")


def with_inherited_traits(stacks: dict[str, Any]) -> dict[str, Any]:
    """Raw registry entries with ``inherits: NAME`` resolved: the traits an entry leaves out
    are the named stack's (one level; its description, keywords and source stay its own)."""
    resolved = {}
    for name, entry in stacks.items():
        if not isinstance(entry, dict) or "inherits" not in entry:
            resolved[name] = entry
            continue
        base_name = entry["inherits"]
        base = stacks.get(base_name)
        if not isinstance(base, dict) or "inherits" in base:
            raise MosaicInputError(f"stack registry: {name} inherits {base_name!r}, which is "
                                   "not a stack that states its own traits")
        inherited = {k: v for k, v in base.items() if k not in _OWN_FIELDS}
        resolved[name] = {**inherited, **{k: v for k, v in entry.items() if k != "inherits"}}
    return resolved


def known_stacks() -> tuple[str, ...]:
    """Names of every registered stack, in registry order."""
    return tuple(_registry())


def stacks_with(trait: str) -> tuple[str, ...]:
    """Names of the stacks whose boolean ``trait`` is true (for messages that say which stacks
    offer a feature), in registry order."""
    return tuple(name for name in known_stacks() if getattr(get_stack(name), trait))


def get_stack(name: str) -> StackTraits:
    """The traits of stack ``name`` (case-insensitive); an unknown name is an error that
    lists the known ones and suggests the closest."""
    stacks = _registry()
    key = str(name).strip().casefold()
    if key not in stacks:
        close = difflib.get_close_matches(key, list(stacks), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise MosaicInputError(f"stack {shown(name)}: unknown{hint}; known stacks: "
                               f"{', '.join(stacks)}")
    return stacks[key]


@cache
def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    """``keyword`` as a whole word or phrase: no letter or digit right before or after it
    (so 'accelerate' is not found in 'accelerated', nor 'trl' in 'ctrl'); punctuation,
    spaces and underscores end a word ('Megatron-LM', 'megatron_bridge')."""
    return re.compile(rf"(?<![^\W_]){re.escape(keyword)}(?![^\W_])")


def names_keyword(text: str, keyword: str) -> bool:
    """Whether the case-folded ``text`` holds the lower-case ``keyword`` as a whole word or
    phrase (:func:`_keyword_pattern`)."""
    return _keyword_pattern(keyword).search(text) is not None


def stack_for_software(software: str | None) -> StackTraits:
    """The stack a run record's free-text ``software`` names (first keyword found as a whole
    word, in registry order), else the explicit ``other`` stack."""
    text = (software or "").casefold()
    for traits in _registry().values():
        if any(names_keyword(text, keyword) for keyword in traits.keywords):
            return traits
    return _registry()[OTHER_STACK]
