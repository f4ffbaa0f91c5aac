"""What is trained, independent of how it is laid out: model, batch, precision, optimizer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mosaic.arch import Geometry
from mosaic.errors import MosaicInputError
from mosaic.perf.attention_kernels import AttentionKernel
from mosaic.stacks import CrossEntropy, StackTraits, get_stack


class Precision(StrEnum):
    """Compute precision of GEMMs; selects the device's peak-FLOP/s lane."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


# FP8 recipes (current scaling, blockwise scaling, MXFP8 block scales) run their GEMMs on the
# device's FP8 lane; the recipe name stays with the input that states it.
FP8_RECIPES = frozenset({"fp8-cs", "fp8-blockwise", "mxfp8"})


def precision_lane(name: str) -> str:
    """The peak-FLOP/s lane a precision or FP8 recipe name runs on ('mxfp8' -> 'fp8'); any
    other name unchanged (validated where it is used)."""
    return Precision.FP8.value if name in FP8_RECIPES else name


# Megatron-Core TransformerConfig.recompute_modules values (transformer_config.py).
_RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe",
                      "shared_experts")


class OptimizerKind(StrEnum):
    """Optimizer families with different state sizes and update costs."""

    ADAM = "adam"
    ADAMW = "adamw"
    MUON = "muon"
    SGD = "sgd"


class OptimizerDtype(StrEnum):
    """The dtype the optimizer keeps its copy of the parameters and its moments in."""

    # fp32 master weights and fp32 moments beside bf16 model weights (Megatron-Core's
    # distributed optimizer; torch optimizers on the fp32 shards of torch FSDP)
    FP32 = "fp32"
    # no master copy: the optimizer updates the bf16 parameters in place and keeps its
    # moments in bf16 (torch.optim on bf16 parameters, whose state is zeros_like(param);
    # Apex DistributedFusedAdam with dtype bf16, store_params off)
    BF16 = "bf16"


class FsdpGather(StrEnum):
    """How an FSDP stack gathers a block's parameters."""

    BLOCK = "block"  # one bucketed collective per block (PyTorch FSDP1/FSDP2, Megatron FSDP)
    TENSOR = "tensor"  # one collective per parameter tensor (DeepSpeed ZeRO-3 style)


class Dispatcher(StrEnum):
    """How routed tokens reach their experts across an EP group."""

    ALLTOALL = "alltoall"  # pairwise NCCL all-to-all: every token copy travels on its own
    DEEPEP = "deepep"  # hierarchical: one network copy per remote node, NVLink forwarding
    HYBRIDEP = "hybridep"  # NVIDIA's hierarchical EP dispatcher, costed as DeepEP

    @property
    def deduplicates_per_node(self) -> bool:
        return self is not Dispatcher.ALLTOALL


def enum_member(kind: type[StrEnum], value: object, name: str) -> Any:
    """``value`` as a member of ``kind``, or a one-line error naming the allowed values."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise MosaicInputError(f"{name} {value!r}: allowed values are {allowed}") from None


@dataclass(frozen=True)
class Workload:
    """A training job minus its parallel layout and hardware.

    Attributes:
        geometry: the model.
        global_batch: sequences per optimizer step (B_global).
        seq_len: tokens per sequence (T_seq).
        precision: GEMM precision; weights/activations are stored in bf16 either way
            (fp8 recipes keep bf16 copies, Micikevicius et al., 2022).
        optimizer: optimizer family.
        stack: software stack (a name in :mod:`mosaic.stacks`); sets the traits the model
            honours and the label calibration attaches overheads to.
        routing: MoE routing regime (dropless, balanced, token_drop, unknown); calibration
            attaches a load-imbalance factor to it. The paper trains dropless (A.2).
            ``balanced`` is forced balance (Megatron-Core --moe-router-force-load-balancing);
            ``dropless`` and ``token_drop`` are a learned router without and with a capacity
            (``geometry.moe.capacity_factor``), whose busiest EP rank carries more than the
            even share of routed tokens (:mod:`mosaic.perf.routing_load`).
        pad_to_capacity: token_drop pads every expert's input to its capacity
            (Megatron-Core --moe-pad-expert-input-to-capacity; default off): experts compute
            exactly capacity tokens and the dispatch needs no host synchronisation. Only the
            all-to-all dispatcher supports it.
        routing_imbalance: the busiest EP rank's routed tokens over the even share under a
            learned router, when a source states it; None = derived from the stack's router
            balancing and the experts per rank (:func:`~mosaic.perf.routing_load.
            learned_router_imbalance`).
        attention_kernel: flash-attention kernel family (cudnn, fa2, fa3, triton, fa1); None = the
            stack's default on the job's GPU generation (see ``perf.attention_kernels``).
        fsdp_gather: FSDP gather granularity; None = the stack's (per tensor for DeepSpeed,
            per block for every other stack).
        dispatcher: EP token dispatch (alltoall, deepep, hybridep).
        cross_entropy: how the LM loss is computed (fused, fp32_upcast, compiled); None =
            the stack's ``cross_entropy`` trait (e.g. a torchtitan run with torch.compile
            on the loss states ``compiled``).
        grad_reduce_in_fp32: gradient buffers and their reduction in fp32 (Megatron-LM's
            default for bf16); False = bf16 (--grad-reduce-in-bf16, NeMo/Megatron-Bridge
            performance recipes).
        offloaded_activation_layers: blocks per stage whose saved activations go to host
            memory (Megatron-Core cpu_offloading_num_layers); 0 = none.
        recompute_modules: what Megatron-Core's selective recompute covers
            (--recompute-modules: core_attn, mla_up_proj, layernorm, moe_act, mlp, moe,
            shared_experts); None = core_attn only, its default. Read under selective
            checkpointing on stacks whose selective recompute is Megatron's.
        vocab_in_pipeline_split: the embedding and the loss each count as one layer when
            the blocks are split over pipeline stages (Megatron-LM
            --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split,
            Megatron-Bridge layouts such as "Et|(tt|)*30mL"), so the end stages hold fewer
            blocks and the step runs at the pace of the slowest stage, vocabulary included.
        ep_overlap: batch-level EP communication overlap (Megatron-Core
            --overlap-moe-expert-parallel-comm, DeepSeek DualPipe): one micro-batch's
            all-to-alls hide behind another's block compute. Off by default, as in
            Megatron-Core.
        dispatch_fp8: the EP dispatch's forward payload and the combine's backward
            gradient (the two all-to-alls that carry expert inputs) cross the wire as FP8
            with a block scale (Megatron-Core moe_dispatch_fwd_dtype / moe_combine_bwd_dtype
            'mxfp8'; DeepEP's FP8 dispatch, DeepSeek-V3's recipe); the other two stay bf16.
            Needs FP8 GEMMs: the grouped GEMM consumes the 8-bit payload.
        tp_comm_overlap: the sequence-parallel all-gathers and reduce-scatters run in
            chunks under the tensor-parallel GEMMs they feed or drain (Megatron-Core
            --tp-comm-overlap with Transformer Engine userbuffers; torchtitan's async tensor
            parallel, enable_async_tensor_parallel). Off by default, as in both.
        full_iteration_cuda_graph: the forward and backward of the whole step replay one
            CUDA graph (Megatron-Core --cuda-graph-impl full_iteration, FullCudaGraphWrapper;
            docs/user-guide/features/cuda_graph.md): no per-kernel host launches, and for a
            dropless MoE model a static per-EP-rank token budget
            (--moe-expert-rank-capacity-factor with HybridEP and paged stash, the only way
            MoE capture works) leaves no host synchronisation in the MoE layers.
        optimizer_dtype: fp32 (fp32 master weights and moments, the default) or bf16 (the
            optimizer steps the bf16 parameters in place with bf16 moments; NeMo AutoModel's
            benchmark recipes, NeMo 1.0's distributed_fused_adam with dtype bf16).
        fsdp_keep_gathered: fully sharded units stay gathered from their first forward to
            their last backward of the step and gradients accumulate unsharded until the last
            micro-batch, also without PP (NeMo AutoModel's MoE parallelizer with
            reshard_after_forward false and its enable_fsdp_optimizations). With PP this is
            every torch FSDP stack's behaviour already.
        recompute_block_fraction: share of blocks checkpointed whole under SELECTIVE
            checkpointing on a stack whose selective recompute is block-level (trait
            ``selective_recompute: blocks``; fms-fsdp's selective_checkpointing p,
            fms_fsdp/policies/ac_handler.py @ ed74fd5: p of the blocks, evenly spaced, are
            wrapped in checkpoint_wrapper); None = the stack's default 1 (every block).
        dp_comm_overlap: DDP / ZeRO gradient reduction and parameter gathers run bucket
            by bucket behind the backward and forward (Megatron-LM --overlap-grad-reduce /
            --overlap-param-gather, on in the NeMo and Megatron-Bridge recipes); False = they
            run after the backward and after the optimizer step, all exposed (both flags
            default to off in Megatron-LM, megatron/training/arguments.py @ core_v0.6.0).
            FSDP's per-unit overlap does not read it.
        torch_compile: the model's blocks run under torch.compile (Inductor fuses the
            element-wise kernels, mosaic.perf.elementwise_traffic) or eagerly (False);
            None = the stack's default (stacks.yaml torch_compile). Only stacks whose model
            code is eager torch read it.
        moe_permute: the MoE token-movement code the run used (mosaic.perf.moe_permute_traffic
            MoePermute, e.g. a torchtitan release era); None = the stack trait moe_permute.
        loss_chunks: the LM head and loss run over this many sequence chunks, each chunk's
            backward before the next chunk's forward (torchtitan ChunkedCELoss,
            components/loss.py @ 786e26f8e): one chunk's logits are live at a time (memory
            only); 1 = the whole micro-batch at once.
        uneven_pipeline_stages: pp·vpp need not divide the layers; chunks hold
            ceil(L/(pp·vpp)) blocks except the remainder (Megatron-Core's
            decoder_first/last_pipeline_num_layers), so the heaviest stage carries the ceiling.
    """

    geometry: Geometry
    global_batch: int
    seq_len: int
    precision: Precision = Precision.BF16
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    stack: str = "megatron-core"
    routing: str = "dropless"
    attention_kernel: AttentionKernel | None = None
    fsdp_gather: FsdpGather | None = None
    uneven_pipeline_stages: bool = False
    vocab_in_pipeline_split: bool = False
    dispatcher: Dispatcher = Dispatcher.ALLTOALL
    ep_overlap: bool = False
    dispatch_fp8: bool = False
    tp_comm_overlap: bool = False
    full_iteration_cuda_graph: bool = False
    cross_entropy: CrossEntropy | None = None
    grad_reduce_in_fp32: bool = True
    offloaded_activation_layers: int = 0
    recompute_modules: tuple[str, ...] | None = None
    optimizer_dtype: OptimizerDtype = OptimizerDtype.FP32
    fsdp_keep_gathered: bool = False
    pad_to_capacity: bool = False
    routing_imbalance: float | None = None
    recompute_block_fraction: float | None = None
    dp_comm_overlap: bool = True
    torch_compile: bool | None = None
    moe_permute: str | None = None
    loss_chunks: int = 1

    def __post_init__(self) -> None:
        # An unknown stack is an error naming the known ones; the name is stored as the
        # registry spells it, the key calibration profiles use.
        object.__setattr__(self, "stack", get_stack(self.stack).name)
        for name in ("global_batch", "seq_len"):
            value = getattr(self, name)
            if value <= 0:
                raise MosaicInputError(f"data.{name} must be a positive integer, got {value}")
        unknown = sorted(set(self.recompute_modules or ()) - set(_RECOMPUTE_MODULES))
        if unknown:
            raise MosaicInputError(f"recompute_modules {unknown}: allowed values are "
                                   f"{', '.join(_RECOMPUTE_MODULES)}")
        if self.recompute_modules is not None:
            object.__setattr__(self, "recompute_modules", tuple(self.recompute_modules))
        fraction = self.recompute_block_fraction
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise MosaicInputError(f"recompute_block_fraction {fraction!r}: allowed values "
                                   "are 0 to 1 (the share of blocks checkpointed)")
        if self.loss_chunks < 1:
            raise MosaicInputError(f"loss_chunks must be >= 1, got {self.loss_chunks}")
        if self.offloaded_activation_layers < 0:
            raise MosaicInputError("offloaded_activation_layers must be >= 0, got "
                                   f"{self.offloaded_activation_layers}")
        for name, kind in (("precision", Precision), ("optimizer", OptimizerKind),
                           ("dispatcher", Dispatcher), ("fsdp_gather", FsdpGather),
                           ("attention_kernel", AttentionKernel),
                           ("cross_entropy", CrossEntropy),
                           ("optimizer_dtype", OptimizerDtype)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, enum_member(kind, value, name))
        if self.routing_imbalance is not None and not self.routing_imbalance >= 1.0:
            raise MosaicInputError(
                f"routing_imbalance {self.routing_imbalance}: must be >= 1 (the busiest EP "
                "rank's routed tokens over the even share)")
        if self.pad_to_capacity and self.dispatcher is not Dispatcher.ALLTOALL:
            raise MosaicInputError(
                f"pad_to_capacity with dispatcher {self.dispatcher}: Megatron-Core pads expert "
                "inputs to capacity only with the alltoall dispatcher (its flex dispatcher "
                "rejects --moe-pad-expert-input-to-capacity)")
        if self.dispatch_fp8 and self.precision is not Precision.FP8:
            raise MosaicInputError(
                f"parallelism.dispatch_fp8 needs precision fp8 (got {self.precision}): the "
                "grouped expert GEMM consumes the 8-bit dispatch payload")

    @property
    def selective_recompute_modules(self) -> frozenset[str]:
        """What Megatron-Core's selective recompute repeats: ``recompute_modules``, or its
        default ``core_attn`` when unstated (megatron/core/transformer/transformer_config.py;
        core attention is checkpointed only when the list names it)."""
        return frozenset(("core_attn",) if self.recompute_modules is None
                         else self.recompute_modules)

    @property
    def gemm_element_bytes(self) -> int:
        """Bytes per GEMM operand element: 1 for FP8 GEMMs (also the copy Transformer Engine
        saves for the weight gradient), else 2 (bf16/fp16)."""
        return 1 if self.precision is Precision.FP8 else 2

    @property
    def fsdp_gathers_per_tensor(self) -> bool:
        """FSDP issues one all-gather (and reduce-scatter) per parameter tensor."""
        if self.fsdp_gather is not None:
            return self.fsdp_gather is FsdpGather.TENSOR
        return self.traits.fsdp_gather == FsdpGather.TENSOR

    @property
    def checkpointed_block_fraction(self) -> float:
        """Share of blocks a block-level selective policy checkpoints whole (1 unless the
        workload states it: fms-fsdp's default selective_checkpointing is 1)."""
        fraction = self.recompute_block_fraction
        return 1.0 if fraction is None else float(fraction)

    @property
    def loss_implementation(self) -> CrossEntropy:
        """The LM loss as run: the workload's own setting, else the stack's trait."""
        return self.cross_entropy or self.traits.cross_entropy

    @property
    def compiles_model(self) -> bool:
        """The model code runs under torch.compile: the workload's ``torch_compile``, else
        the stack's default."""
        return self.traits.torch_compile if self.torch_compile is None else self.torch_compile

    @property
    def moe_permute_code(self) -> str:
        """The MoE token-movement code: the workload's ``moe_permute``, else the stack's."""
        return self.moe_permute or self.traits.moe_permute

    @property
    def traits(self) -> StackTraits:
        """The software stack's modelled behaviour (:mod:`mosaic.stacks`)."""
        return get_stack(self.stack)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
