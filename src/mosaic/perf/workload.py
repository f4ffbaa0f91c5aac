"""What is trained, independent of how it is laid out: model, batch, precision, optimizer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from mosaic.arch import Geometry
from mosaic.errors import MosaicInputError
from mosaic.perf.attention_kernels import (
    JAX_FLASH_BLOCK_TOKENS,
    AttentionKernel,
    stack_default_kernel,
)
from mosaic.perf.element_bytes import BF16_BYTES
from mosaic.perf.pipeline_layout import (
    BLOCK,
    MTP,
    Layouts,
    StageSplit,
    with_remainder_last_layouts,
)
from mosaic.stacks import (
    DEFAULT_STACK,
    CrossEntropy,
    StackTraits,
    default_loss,
    get_stack,
    stacks_with,
)


class Precision(StrEnum):
    """Compute precision of GEMMs; selects the device's peak-FLOP/s lane."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"  # NVFP4 block-scaled GEMMs (Blackwell); the only FP4 training recipe


class QuantisedGemms(StrEnum):
    """Which GEMMs a low-precision recipe quantises."""

    ALL = "all"  # every block GEMM (Transformer Engine's autocast; torchao on every linear)
    # the routed experts' grouped GEMMs alone, the rest in bf16: torchtitan's
    # quantize.grouped_mm converters with fqns ["experts"] (torchtitan
    # components/quantization/mx.py and float8.py), e.g. the nebius/ml-cookbook DeepSeek-V3
    # recipe: "applies MXFP8 only to grouped GEMMs, not to attention or shared-expert
    # linear layers"
    ROUTED_EXPERTS = "routed_experts"


class Fp8Recipe(StrEnum):
    """How FP8 GEMM operands are scaled (Transformer Engine recipes, transformer_engine/common/
    recipe/__init__.py @ v2.9; Megatron-Core TransformerConfig.fp8_recipe). Every recipe runs
    its GEMMs on the device's FP8 lane; the model reads the recipe where FP8 parameter
    gathers move the weights (:meth:`Workload.gemm_weight_gather_bytes`); per-recipe
    quantisation traffic is not modelled (docs/evidence/fp8_recipes.md)."""

    NONE = "none"  # no FP8 GEMMs (bf16/fp16)
    DELAYED = "delayed"  # per-tensor scale from the amax history (DelayedScaling)
    CURRENT = "current"  # per-tensor scale from this tensor's amax (Float8CurrentScaling,
    #                      Megatron 'tensorwise', torchao dynamic tensorwise)
    BLOCKWISE = "blockwise"  # fp32 scale per 1x128 (activations) / 128x128 (weights) block
    MXFP8 = "mxfp8"  # E8M0 scale per 32 elements (MXFP8BlockScaling, Blackwell)


# FP8 recipe names of run records and job files -> the recipe they state; plain "fp8" states
# none (the stack's default recipe, stack trait fp8_recipe).
FP8_RECIPES = {"fp8-cs": Fp8Recipe.CURRENT, "fp8-blockwise": Fp8Recipe.BLOCKWISE,
               "mxfp8": Fp8Recipe.MXFP8}


# FP4 recipe names of run records and job files -> the lane they run on. NVFP4 is Transformer
# Engine's FP4 training recipe (NVFP4BlockScaling: E2M1 values, one E4M3 scale per 16
# elements and an fp32 scale per tensor; transformer_engine/common/recipe/__init__.py) and
# the one Megatron-Core runs (--fp4-format e2m1 --fp4-recipe nvfp4); plain "fp4" names it.
FP4_RECIPES = ("nvfp4",)


def job_precision_name(lane: str) -> str:
    """How a job file spells a precision lane: 'nvfp4' for the fp4 lane (its one recipe),
    any other lane unchanged."""
    return FP4_RECIPES[0] if lane == Precision.FP4.value else lane


def check_quantised_gemms(quantised_gemms: QuantisedGemms, precision: Precision,
                          precision_label: str, settings_on: dict[str, bool],
                          stack: StackTraits) -> None:
    """Quantising the routed experts alone needs a stack that can (its
    ``routed_expert_quantisation`` trait) and low-precision GEMMs; the settings that quantise
    other GEMMs or gather FP8/FP4 weights (``settings_on``: name -> set) contradict it. One
    rule for a job's workload and a plan's envelope."""
    if quantised_gemms is QuantisedGemms.ALL:
        return
    if not stack.routed_expert_quantisation:
        raise MosaicInputError(
            f"quantised_gemms routed_experts with stack {stack.name}: it quantises every "
            f"GEMM of its precision; stacks that quantise the routed experts alone: "
            f"{', '.join(stacks_with('routed_expert_quantisation'))} (docs/stacks.md)")
    if precision_lane(precision) is not Precision.FP8:
        # torchtitan's grouped-experts converters are float8 and MXFP8 (float8.py, mx.py);
        # its NVFP4 converter quantises linears only (nvfp4.py @ b5bcd76c6)
        raise MosaicInputError(
            f"quantised_gemms routed_experts needs precision fp8 or mxfp8 (got "
            f"{precision_label}): the routed experts' grouped-GEMM converters are float8 "
            "and MXFP8")
    for name, on in settings_on.items():
        if on:
            raise MosaicInputError(
                f"{name} with quantised_gemms routed_experts: the attention and the "
                "weights it covers stay in bf16 when only the experts are quantised")


def precision_lane(name: str) -> str:
    """The peak-FLOP/s lane a precision or recipe name runs on ('mxfp8' -> 'fp8', 'nvfp4' ->
    'fp4'); any other name unchanged (validated where it is used)."""
    if name in FP4_RECIPES:
        return Precision.FP4.value
    return Precision.FP8.value if name in FP8_RECIPES else name


def measured_table_dtype(precision: Precision, fp8_recipe: Fp8Recipe | None) -> str:
    """The dtype key of measured kernel tables (`mosaic bench`'s names: bench.device
    ELEMENT_BYTES) for GEMMs in ``precision``: mxfp8 for the FP8 lane under the MXFP8
    recipe (the bench times MXFP8 and per-tensor FP8 GEMMs as separate dtypes), else the
    precision's own name."""
    if precision is Precision.FP8 and fp8_recipe is Fp8Recipe.MXFP8:
        return "mxfp8"
    return str(precision)


# An NVFP4 tensor: a 4-bit E2M1 value per element plus one 1-byte E4M3 scale per 16-element
# block (the per-tensor fp32 scale is negligible): 0.5 + 1/16 bytes per element
# (transformer_engine/common/recipe/__init__.py NVFP4BlockScaling; NVIDIA, "Pretraining Large
# Language Models with NVFP4", arXiv:2509.25149, Sec. 2).
NVFP4_ELEMENT_BYTES = 0.5 + 1.0 / 16
# What an NVFP4 parameter all-gather moves per weight: the packed E2M1 values only
# (Megatron-Core's param buffer holds "packed bytes (half the logical numel)", two FP4 values
# per uint8, distributed/param_and_grad_buffer.py @ d98e8a64dd; the block scales are made
# again from the gathered weights).
NVFP4_PACKED_BYTES = 0.5


# Transformer Engine's default recipe before Blackwell (get_default_fp8_recipe,
# transformer_engine/pytorch/quantization.py @ v2.9: DelayedScaling unless MXFP8 is supported):
# the recipe assumed for a stack that documents none.
ASSUMED_FP8_RECIPE = Fp8Recipe.DELAYED


def default_fp8_recipe(stack: str) -> Fp8Recipe:
    """The recipe a plain 'fp8' run of ``stack`` gets: its ``fp8_recipe`` trait, else
    :data:`ASSUMED_FP8_RECIPE`."""
    trait = get_stack(stack).fp8_recipe
    return ASSUMED_FP8_RECIPE if trait is None else Fp8Recipe(trait)


def stated_fp8_recipe(name: str) -> Fp8Recipe | None:
    """The FP8 recipe a precision name states ('fp8-cs' -> current), NONE for a non-FP8
    precision, None for plain 'fp8' (the recipe is the stack's default)."""
    if name in FP8_RECIPES:
        return FP8_RECIPES[name]
    return None if name == Precision.FP8.value else Fp8Recipe.NONE


# Megatron-Core TransformerConfig.recompute_modules values (transformer_config.py).
# what Megatron-Core's selective recompute repeats when recompute_modules is unstated
# (megatron/core/transformer/transformer_config.py @ d98e8a64dd)
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
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
    # fp32 master weights and fp32 gradients, the two AdamW moments in bf16 (DeepSeek-V3
    # report arXiv:2412.19437 Sec. 3.3.3 "Low-Precision Optimizer States")
    BF16_MOMENTS = "bf16_moments"


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


# How routed-expert GEMMs run (Workload.expert_gemm): a grouped GEMM, or XLA's dense
# expansion of a ragged dot (openxla/xla xla/hlo/transforms/expanders/ragged_dot_rewriter.cc
# RaggedToDense: the operand broadcast over the groups and masked, contracted over
# (group, k) in forward and input gradient; both operands expanded for the weight gradient).
EXPERT_GEMMS = ("grouped", "xla_expanded")


def experts_fuse_grouped_mlp(geometry: Geometry) -> bool:
    """Whether Transformer Engine's fused grouped MLP can run this model's routed experts:
    MoE with a SwiGLU activation. Megatron-Core's op fuser also takes quick-GELU GLU and
    weighted squared ReLU (experts.py ``_is_fused_impl_supported`` @ d98e8a64dd), but the
    fused MXFP8 kernel is ``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8`` (GEMM + SwiGLU), and a
    GELU-gated (geglu) expert is neither (docs/evidence/fused_grouped_mlp.md)."""
    return geometry.moe is not None and geometry.activation_name == "swiglu"


# The MoE routing regimes a workload may run (config.blocks.Routing spells the same ones):
# calibration profiles key their imbalance factors by them.
ROUTING_REGIMES = ("balanced", "dropless", "token_drop", "unknown")


@dataclass(frozen=True)
class Workload:
    """A training job minus its parallel layout and hardware.

    Attributes:
        geometry: the model.
        global_batch: sequences per optimizer step (B_global).
        local_batch: sequences one data-parallel rank runs per forward-backward pass
            (torchtitan's and NeMo AutoModel's local_batch_size); the step accumulates
            global_batch / (dp · local_batch) passes. None = the whole per-rank batch in one
            pass. Read on stacks that run one pipeline schedule per pass (trait
            ``pipeline_schedule_per_pass``).
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
        dispatcher_stated: the input named the dispatcher (False: the stack's default for
            the GPU or a release recipe's, which a layout rule does not hold it to).
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
        layer_cuda_graphs: each transformer layer's forward and backward replay one CUDA
            graph (Megatron-Core TransformerConfig.enable_cuda_graph, the per-layer
            CudaGraphManager; --cuda-graph-impl local capturing the whole layer): the host
            launches one graph per layer and pass instead of its kernels. A dropless MoE
            layer still waits on the host for its token counts (static shapes come only with
            drop-and-pad routing), so that wait stays. Not with full recompute or
            activation offloading (Megatron-Core refuses both with per-layer graphs).
            Megatron-Bridge's 25.09 performance scripts set it per model and GPU
            (scripts/performance/utils/helpers.py @ v0.1.0rc4, cuda_graphs ->
            recipe.model.enable_cuda_graph).
        optimizer_dtype: fp32 (fp32 master weights and moments, the default), bf16 (the
            optimizer steps the bf16 parameters in place with bf16 moments; NeMo AutoModel's
            benchmark recipes, NeMo 1.0's distributed_fused_adam with dtype bf16) or
            bf16_moments (fp32 master weights and gradients, the moments in bf16; DeepSeek-V3
            report Sec. 3.3.3).
        fsdp_keep_gathered: fully sharded units stay gathered from their first forward to
            their last backward of the step and gradients accumulate unsharded until the last
            micro-batch, also without PP (NeMo AutoModel's MoE parallelizer with
            reshard_after_forward false and its enable_fsdp_optimizations). With PP this is
            every torch FSDP stack's behaviour already.
        recompute_block_fraction: share of blocks checkpointed whole under SELECTIVE
            checkpointing on a stack whose selective recompute is block-level (trait
            ``selective_recompute: blocks``; fms-fsdp's selective_checkpointing p,
            fms_fsdp/policies/ac_handler.py @ ed74fd5: p of the blocks, evenly spaced, are
            wrapped in checkpoint_wrapper), and under FULL checkpointing the share of a
            stage's blocks recomputed (Megatron-Core's recompute_method block with
            recompute_num_layers k of L: k/L; the rest keep their activations); None = 1
            (every block).
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
        eager_kernels: the torch era of eager RMSNorm model code when not compiled (a
            RMSNORM_ERAS value of mosaic.perf.elementwise_traffic: the fp32 composite of
            PyTorch before 2.9, or its fused kernel); None = the stack trait. Read only
            where the stack's eager code is RMSNorm torch.
        expert_gemm: how the routed-expert GEMMs run: "grouped" (a grouped GEMM over the
            local experts, the default) or "xla_expanded" (jax.lax.ragged_dot_general as
            XLA's GPU RaggedDotRewriter lowers it: one dense dot over an expert-broadcast,
            expert-masked operand, so E_local times the FLOPs; levanter's MoELinear before
            haliax's Pallas-Triton dispatcher, docs/evidence/levanter_stack.md).
        fp8_recipe: how FP8 GEMM operands are scaled (:class:`Fp8Recipe`), resolved once
            here: NONE without FP8 GEMMs; with them the stated recipe, else the stack's
            default (stack trait ``fp8_recipe``, :func:`default_fp8_recipe`). Sets the bytes
            of FP8 parameter gathers (``gemm_weight_gather_bytes``).
        fp4_param_gather: the data-parallel parameter all-gather moves the block GEMMs'
            weights as packed NVFP4 values (``NVFP4_PACKED_BYTES`` each): Megatron-Core
            --fp4-param-gather ("keep the compute param in fp4 ... and perform the param
            all-gather in fp4", megatron/training/arguments.py @ d98e8a64dd),
            Megatron-Bridge MixedPrecisionConfig.fp4_param_gather. Needs FP4 GEMMs.
        gdn_context_parallel: the stack's release runs gated DeltaNet layers under context
            parallelism (Megatron-Core from NeMo 26.06; before, TransformerConfig asserts
            "Gated delta net does not support context parallel for now"); a plan rule.
        non_tn_fp8_gemms: the GPU runs FP8 GEMMs in any operand layout
            (``Device.runs_non_tn_fp8_gemms``: Blackwell), so FP8 primary weights keep one
            byte per parameter; elsewhere Transformer Engine adds a transposed copy.
        fp8_param_gather: the data-parallel parameter all-gather (ZeRO/FSDP) moves the
            block GEMMs' weights as FP8, one byte each (MXFP8 weights in bf16;
            :meth:`gemm_weight_gather_bytes`): Megatron-Core --fp8-param-gather (FP8
            primary weights, NeMo fp8_params, Megatron-Bridge
            MixedPrecisionConfig.fp8_param_gather) or torchtitan
            enable_fsdp_float8_all_gather. Needs FP8 GEMMs.
        loss_chunks: the LM head and loss run over this many sequence chunks, each chunk's
            backward before the next chunk's forward (torchtitan ChunkedCELoss,
            components/loss.py @ 786e26f8e): one chunk's logits are live at a time (memory
            only); 1 = the whole micro-batch at once.
        max_nodes_per_token: node-limited routing: each token's experts lie on at most
            this many scale-up domains (nodes), so a hierarchical dispatch sends it over the
            network at most that many times (DeepSeek-V3's M = 4, report arXiv:2412.19437
            Sec. 3.2.2 and 4.2; :func:`~mosaic.perf.collectives.
            node_deduplicated_dispatch_time_s`); None = unrestricted.
        fp8_glu_inputs: the routed experts' SwiGLU inputs (the gate and up GEMM outputs)
            are saved for the backward in FP8 with a block scale, 1 B per element instead of
            2 (DeepSeek-V3 report Sec. 3.3.3 "Low-Precision Activation" (2); memory only).
            Needs FP8 GEMMs.
        fused_grouped_mlp: the routed experts run as Transformer Engine's CuTe DSL fused
            grouped MLP (te.ops ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8 and its backward;
            Megatron-Core use_transformer_engine_op_fuser with moe_mlp_glu_interleave_size
            32 and NVTE_CUTEDSL_FUSED_GROUPED_MLP=1): the GLU activation, the routing
            probabilities and the MXFP8 quantisation of FC2's input run in FC1's GEMM
            epilogue, the activation's backward and the quantisation of FC1's output
            gradient in FC2's dgrad epilogue, so those element-wise kernels are gone
            (docs/evidence/fused_grouped_mlp.md). Needs an MoE model with SwiGLU experts,
            MXFP8 GEMMs (hence Blackwell) and a stack that has it (trait
            fused_grouped_mlp); Megatron-Core falls back to the unfused ops with expert
            tensor parallelism, so plans with etp > 1 run unfused.
        quantised_gemms: which GEMMs the low-precision recipe runs (:class:`QuantisedGemms`):
            all (the default), or the routed experts' grouped GEMMs alone, the attention,
            dense and shared-expert GEMMs then in bf16 with bf16 operands and no casts.
            Needs FP8 or FP4 GEMMs and an MoE model.
        fp8_dot_product_attention: the attention core runs Transformer Engine's FP8
            fused attention (cuDNN FP8 SDPA; Megatron-Core TransformerConfig
            fp8_dot_product_attention, the recipes' fp8_dpa): its two score GEMMs forward and
            the backward's on the FP8 tensor cores, the per-score softmax work unchanged
            (perf/kernels.fp8_attention_efficiency). Needs FP8 GEMMs, a stack that runs
            Transformer Engine's attention (trait fused_grouped_mlp's Megatron-Core family)
            and the cuDNN kernel.
        uneven_pipeline_stages: pp·vpp need not divide the layers; the chunks are cut as
            the stack cuts them (:attr:`stage_split`, trait ``uneven_stage_split``):
            ceil(L/(pp·vpp)) blocks except the remainder, last (Megatron-Core's
            decoder_first/last_pipeline_num_layers), or torchtitan's floor shares with the
            first L mod (pp·vpp) chunks one more.
        pipeline_layouts: the stated layers of every pipeline chunk (Megatron-Core
            --pipeline-model-parallel-layout; :mod:`mosaic.perf.pipeline_layout`), at most
            one per pipeline shape: each applies to the plans with its pp and vpp, others
            split the default way.
    """

    geometry: Geometry
    global_batch: int
    seq_len: int
    precision: Precision = Precision.BF16
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    stack: str = DEFAULT_STACK
    routing: str = "dropless"
    attention_kernel: AttentionKernel | None = None
    fsdp_gather: FsdpGather | None = None
    uneven_pipeline_stages: bool = False
    vocab_in_pipeline_split: bool = False
    pipeline_layouts: Layouts = ()
    dispatcher: Dispatcher = Dispatcher.ALLTOALL
    # provenance, not behaviour: no cost reads it, so two workloads differing only here are
    # equal (a job written back states the dispatcher it was costed with)
    dispatcher_stated: bool = field(default=True, compare=False)
    ep_overlap: bool = False
    dispatch_fp8: bool = False
    tp_comm_overlap: bool = False
    full_iteration_cuda_graph: bool = False
    layer_cuda_graphs: bool = False
    cross_entropy: CrossEntropy | None = None
    grad_reduce_in_fp32: bool = True
    offloaded_activation_layers: int = 0
    recompute_modules: tuple[str, ...] | None = None
    optimizer_dtype: OptimizerDtype = OptimizerDtype.FP32
    fsdp_keep_gathered: bool = False
    local_batch: int | None = None
    pad_to_capacity: bool = False
    routing_imbalance: float | None = None
    recompute_block_fraction: float | None = None
    dp_comm_overlap: bool = True
    torch_compile: bool | None = None
    moe_permute: str | None = None
    eager_kernels: str | None = None
    expert_gemm: str = "grouped"
    fp8_recipe: Fp8Recipe | None = None
    fp8_param_gather: bool = False
    fp4_param_gather: bool = False
    non_tn_fp8_gemms: bool = False
    gdn_context_parallel: bool = True
    loss_chunks: int = 1
    max_nodes_per_token: int | None = None
    fp8_glu_inputs: bool = False
    fused_grouped_mlp: bool = False
    fp8_dot_product_attention: bool = False
    quantised_gemms: QuantisedGemms = QuantisedGemms.ALL

    def __post_init__(self) -> None:
        # An unknown stack is an error naming the known ones; the name is stored as the
        # registry spells it, the key calibration profiles use.
        object.__setattr__(self, "stack", get_stack(self.stack).name)
        for name in ("global_batch", "seq_len"):
            value = getattr(self, name)
            if value <= 0:
                raise MosaicInputError(f"data.{name} must be a positive integer, got {value}")
        if self.local_batch is not None and self.local_batch <= 0:
            raise MosaicInputError(f"batch.local_seqs must be a positive integer, got "
                                   f"{self.local_batch}")
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
        if self.max_nodes_per_token is not None and self.max_nodes_per_token < 1:
            raise MosaicInputError(f"max_nodes_per_token must be >= 1 or unset, got "
                                   f"{self.max_nodes_per_token}")
        if self.expert_gemm not in EXPERT_GEMMS:
            raise MosaicInputError(f"expert_gemm {self.expert_gemm!r}: allowed values are "
                                   f"{', '.join(EXPERT_GEMMS)}")
        if not 1 <= self.loss_chunks <= self.seq_len:  # a chunk holds a token at least
            raise MosaicInputError(f"loss_chunks must lie in 1..seq_len ({self.seq_len}): the "
                                   "loss runs over chunks of the sequence, got "
                                   f"{self.loss_chunks}")
        object.__setattr__(self, "pipeline_layouts", tuple(self.pipeline_layouts))
        shapes = [(layout.pp, layout.vpp) for layout in self.pipeline_layouts]
        if len(set(shapes)) != len(shapes):
            raise MosaicInputError(f"pipeline layouts: more than one for a pipeline shape "
                                   f"(pp, vpp) in {shapes}")
        for layout in self.pipeline_layouts:
            if (layout.total(BLOCK), layout.total(MTP)) != (self.geometry.layers,
                                                            self.geometry.mtp_layers):
                raise MosaicInputError(
                    f"parallelism.pipeline_layout {layout.text!r} places a different number "
                    f"of blocks or MTP modules than the model has (layers="
                    f"{self.geometry.layers}, mtp_layers={self.geometry.mtp_layers}): state "
                    "a layout for this model")
        if self.offloaded_activation_layers < 0:
            raise MosaicInputError("offloaded_activation_layers must be >= 0, got "
                                   f"{self.offloaded_activation_layers}")
        if not self.grad_reduce_in_fp32 and not self.traits.bf16_grad_reduce:
            raise MosaicInputError(
                f"grad_reduce_in_fp32 false: stack {self.stack!r} reduces gradients in "
                "float32 only (stack trait bf16_grad_reduce; docs/stacks.md)")
        if self.offloaded_activation_layers and not self.traits.activation_offload:
            raise MosaicInputError(
                f"offloaded_activation_layers: stack {self.stack!r} has no activation CPU "
                "offload (Megatron-Core's cpu_offloading_num_layers; stacks with it: "
                f"{', '.join(stacks_with('activation_offload'))})")
        # Megatron-Core refuses cpu_offloading_num_layers >= num_layers
        # (transformer_config.py @ core_v0.16.0 l. 1138)
        if self.offloaded_activation_layers >= self.geometry.layers:
            raise MosaicInputError(
                f"offloaded_activation_layers must be below the model's {self.geometry.layers} "
                f"layers, got {self.offloaded_activation_layers} (Megatron-Core refuses "
                "cpu_offloading_num_layers >= num_layers)")
        for name, kind in (("precision", Precision), ("optimizer", OptimizerKind),
                           ("dispatcher", Dispatcher), ("fsdp_gather", FsdpGather),
                           ("attention_kernel", AttentionKernel),
                           ("cross_entropy", CrossEntropy),
                           ("optimizer_dtype", OptimizerDtype),
                           ("fp8_recipe", Fp8Recipe)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, enum_member(kind, value, name))
        if self.routing_imbalance is not None and not self.routing_imbalance >= 1.0:
            raise MosaicInputError(
                f"routing_imbalance {self.routing_imbalance}: must be >= 1 (the busiest EP "
                "rank's routed tokens over the even share)")
        moe = self.geometry.moe
        if (self.routing_imbalance is not None and moe is not None
                and self.routing_imbalance > moe.experts / moe.top_k):
            raise MosaicInputError(
                f"routing_imbalance {self.routing_imbalance}: at most experts/top_k = "
                f"{moe.experts / moe.top_k:g} (a token's top_k copies go to distinct experts, "
                "so one EP rank receives at most all of them: min(ep, E/K) times the even share)")
        if self.pad_to_capacity and self.routing != "token_drop":
            raise MosaicInputError(
                f"pad_to_capacity with routing {self.routing}: padding fills each expert to "
                "its token-drop capacity, which only routing: token_drop has; set routing: "
                "token_drop (with model.moe.capacity_factor) or drop pad_to_capacity")
        if self.pad_to_capacity and self.dispatcher is not Dispatcher.ALLTOALL:
            raise MosaicInputError(
                f"pad_to_capacity with dispatcher {self.dispatcher}: Megatron-Core pads expert "
                "inputs to capacity only with the alltoall dispatcher (its flex dispatcher "
                "rejects --moe-pad-expert-input-to-capacity)")
        self._check_hybrid_stack()
        self._resolve_fp8_recipe()
        self._check_blockwise_attention()
        self._check_cuda_graphs()
        self._check_fused_grouped_mlp()
        self._check_fp8_attention()
        self._check_quantised_gemms()
        if self.fp8_glu_inputs and self.precision is not Precision.FP8:
            raise MosaicInputError(
                f"fp8_glu_inputs needs precision fp8 (got {self.precision}): the SwiGLU "
                "inputs are kept with the FP8 recipe's block scales")
        if self.dispatch_fp8 and self.precision is not Precision.FP8:
            raise MosaicInputError(
                f"parallelism.dispatch_fp8 needs precision fp8 (got {self.precision}): the "
                "grouped expert GEMM consumes the 8-bit dispatch payload")

    def _check_hybrid_stack(self) -> None:
        """A hybrid SSM/attention model needs a stack that builds one (trait
        ``hybrid_models``)."""
        if not self.geometry.is_hybrid:
            return
        if self.pipeline_layouts:
            raise MosaicInputError(
                "parallelism.pipeline_layout with model.hybrid_pattern: a hybrid model's "
                "pipeline split is its pattern's '|' segments")
        if self.vocab_in_pipeline_split:
            raise MosaicInputError(
                "vocab_in_pipeline_split with model.hybrid_pattern: Megatron-LM refuses "
                "--account-for-embedding-in-pipeline-split with --hybrid-layer-pattern (the "
                "pattern's '|' segments set the split; arguments.py @ d98e8a64dd)")
        if self.ep_overlap:
            raise MosaicInputError(
                "parallelism.ep_overlap with model.hybrid_pattern: Megatron-Core's batch-level "
                "EP overlap (combined 1F1B) schedules GPT models only (build_schedule_plan is "
                "GPTModel's, megatron/core/models/gpt/gpt_model.py @ d98e8a64dd)")
        if self.traits.hybrid_models:
            return
        raise MosaicInputError(
            f"model.hybrid_pattern: stack {self.stack} does not build hybrid SSM/attention "
            "models (Mamba or gated DeltaNet layers); stacks that do: "
            f"{', '.join(stacks_with('hybrid_models'))}")

    def _check_cuda_graphs(self) -> None:
        """Per-layer graphs exclude a whole-step graph (one capture per step or per layer,
        --cuda-graph-impl takes one value) and activation offloading (Megatron-Core
        transformer_config.py @ d98e8a64dd: "CUDA graphs not supported with CPU
        offloading")."""
        if not self.layer_cuda_graphs:
            return
        if self.full_iteration_cuda_graph:
            raise MosaicInputError("layer_cuda_graphs and full_iteration_cuda_graph: choose "
                                   "one (a step is captured whole or layer by layer)")
        if self.offloaded_activation_layers:
            raise MosaicInputError(
                f"layer_cuda_graphs with offloaded_activation_layers "
                f"{self.offloaded_activation_layers}: Megatron-Core does not capture CUDA "
                "graphs with activation offloading")

    def _check_fused_grouped_mlp(self) -> None:
        """Transformer Engine fuses the grouped MLP only for routed experts with a SwiGLU
        activation (:func:`experts_fuse_grouped_mlp`) and only under the MXFP8 recipe
        (te.ops ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8)."""
        if not self.fused_grouped_mlp:
            return
        if not self.traits.fused_grouped_mlp:
            raise MosaicInputError(
                f"fused_grouped_mlp with stack {self.stack}: the fused grouped MLP is "
                f"Megatron-Core's Transformer Engine op-fuser path; stacks that have it: "
                f"{', '.join(stacks_with('fused_grouped_mlp'))}")
        if not experts_fuse_grouped_mlp(self.geometry):
            raise MosaicInputError(
                "fused_grouped_mlp needs an MoE model with a SwiGLU activation (got "
                f"{'a dense model' if self.geometry.moe is None else self.geometry.activation_name}"
                "): the fused kernel is the routed experts' FC1 + SwiGLU + FC2")
        if self.fp8_recipe is not Fp8Recipe.MXFP8:
            raise MosaicInputError(
                f"fused_grouped_mlp needs precision mxfp8 (got {self._precision_label()}): "
                "Transformer Engine fuses the grouped MLP only under MXFP8 block scaling, "
                "on Blackwell")

    def _check_quantised_gemms(self) -> None:
        """Quantising the routed experts alone needs low-precision GEMMs and experts; the
        settings that quantise other GEMMs or gather FP8/FP4 weights contradict it."""
        object.__setattr__(self, "quantised_gemms", QuantisedGemms(self.quantised_gemms))
        check_quantised_gemms(self.quantised_gemms, self.precision, self._precision_label(),
                              {name: getattr(self, name) for name in
                               ("fp8_dot_product_attention", "fp8_param_gather",
                                "fp4_param_gather")}, self.traits)
        if self.quantised_gemms is not QuantisedGemms.ALL and self.geometry.moe is None:
            raise MosaicInputError("quantised_gemms routed_experts needs an MoE model (a dense "
                                   "model has no routed experts)")

    @property
    def dense_gemms_quantised(self) -> bool:
        """The GEMMs other than the routed experts' run at the workload's precision (not
        with ``quantised_gemms`` routed_experts, where they run in bf16)."""
        return self.quantised_gemms is QuantisedGemms.ALL

    @property
    def dense_gemm_element_bytes(self) -> float:
        """Bytes per operand element of the attention, dense and shared-expert GEMMs:
        :attr:`gemm_element_bytes`, or bf16's 2 when only the routed experts are
        quantised."""
        return self.gemm_element_bytes if self.dense_gemms_quantised else float(BF16_BYTES)

    def _precision_label(self) -> str:
        """The precision as a job file spells it, with the FP8 recipe (e.g. 'fp8, recipe
        delayed'; 'nvfp4')."""
        name = job_precision_name(str(self.precision))
        if self.precision is Precision.FP8 and self.fp8_recipe is not Fp8Recipe.NONE:
            return f"{name}, recipe {self.fp8_recipe}"
        return name

    def _check_fp8_attention(self) -> None:
        """Transformer Engine runs FP8 attention only in FP8 autocast, and only through its
        cuDNN fused attention (DotProductAttention's FP8 path is FusedAttention)."""
        if not self.fp8_dot_product_attention:
            return
        if self.precision is not Precision.FP8:
            raise MosaicInputError(
                f"fp8_dot_product_attention needs precision fp8 or mxfp8 (got "
                f"{self._precision_label()}): Transformer Engine runs FP8 attention inside "
                "its FP8 recipe")
        if not self.traits.fused_grouped_mlp:
            raise MosaicInputError(
                f"fp8_dot_product_attention with stack {self.stack}: mosaic models Transformer "
                "Engine's FP8 attention as Megatron-Core runs it; stacks: "
                f"{', '.join(stacks_with('fused_grouped_mlp'))}")
        kernel = self.attention_kernel or stack_default_kernel(self.stack)
        if kernel != AttentionKernel.CUDNN:
            raise MosaicInputError(
                f"fp8_dot_product_attention with attention kernel {kernel}: FP8 attention is "
                "Transformer Engine's cuDNN fused attention (attention_kernel cudnn)")

    def _check_blockwise_attention(self) -> None:
        """Levanter's blockwise attention refuses a sequence of a block or more that is not a
        multiple of its block (flash_attention.py _flash_attention_forward raises "q axis
        size ... is not a multiple of"; blocks are 1024 tokens, 2048 for Mixtral configs), so
        such a run cannot exist (JAX_FLASH_BLOCK_TOKENS). A multiple of 1024 is necessary
        for every block size levanter ships, not sufficient for 2048-token blocks."""
        kernel = self.attention_kernel or stack_default_kernel(self.stack)
        block = JAX_FLASH_BLOCK_TOKENS
        if kernel == AttentionKernel.JAX_FLASH and self.seq_len >= block and self.seq_len % block:
            raise MosaicInputError(
                f"seq_len {self.seq_len} with attention kernel jax_flash: levanter's blockwise "
                f"attention needs a multiple of its {block}-token block at or above one block "
                f"(e.g. {self.seq_len // block * block} or {-(-self.seq_len // block) * block})")

    def _resolve_fp8_recipe(self) -> None:
        """One recipe per workload: NONE without FP8 GEMMs (a recipe means nothing there, so
        ``replace(w, precision='bf16')`` drops it); with them the stated recipe, else (None
        or NONE, e.g. ``replace(w, precision='fp8')``) the stack's default, which the config
        layer notes as an assumption (mosaic.config.layout.fp8_recipe_for)."""
        fp8 = self.precision is Precision.FP8
        recipe = self.fp8_recipe
        if not fp8:
            recipe = Fp8Recipe.NONE
        elif recipe in (None, Fp8Recipe.NONE):
            recipe = default_fp8_recipe(self.stack)
        object.__setattr__(self, "fp8_recipe", recipe)
        if self.fp4_param_gather and self.precision is not Precision.FP4:
            raise MosaicInputError(f"fp4_param_gather needs precision nvfp4 (got "
                                   f"{self.precision}): the gathered weights are the NVFP4 "
                                   "GEMMs' copies")
        if self.fp8_param_gather and not fp8:
            hint = ("; with nvfp4 that is fp4_param_gather" if self.precision is Precision.FP4
                    else "")
            raise MosaicInputError(f"fp8_param_gather needs precision fp8 (got "
                                   f"{self.precision}): the gathered weights are the FP8 "
                                   f"GEMMs' copies{hint}")

    @property
    def stage_split(self) -> StageSplit | None:
        """How the perf model cuts the blocks into pipeline chunks
        (:func:`~mosaic.perf.schedule.stage_layer_counts`): the stack's split (trait
        ``uneven_stage_split``) under ``uneven_pipeline_stages``, else None: the split is
        even or, uneven, not stated (a recorded one), and the first and last ranks are both
        costed with full chunks."""
        return self.traits.uneven_stage_split if self.uneven_pipeline_stages else None

    def with_remainder_last_layouts(self, shapes: Iterable[tuple[int, int]]) -> Workload:
        """This workload with ``uneven_pipeline_stages`` split as the Megatron layout of its
        remainder-last chunks for each pipeline shape of ``shapes`` that needs one
        (:func:`~mosaic.perf.pipeline_layout.with_remainder_last_layouts`): the same
        placement, costed rank by rank, so a short last stage holds the LM head in its
        slack, and a layout an export writes. Stacks without Megatron-Core's layout flag,
        hybrid patterns, DualPipe and splits that count the vocabulary as slots keep the
        chunk rule of
        :func:`~mosaic.perf.schedule.stage_layer_counts`."""
        geometry = self.geometry
        if (self.stage_split != "remainder_last" or geometry.is_hybrid
                or not self.traits.pipeline_layout_flag
                or self.traits.pipeline_schedule != "1f1b" or self.vocab_in_pipeline_split):
            return self
        layouts = with_remainder_last_layouts(self.pipeline_layouts, geometry.layers,
                                              geometry.mtp_layers, shapes)
        return self if layouts == self.pipeline_layouts else replace(
            self, pipeline_layouts=layouts)

    @property
    def selective_recompute_modules(self) -> frozenset[str]:
        """What Megatron-Core's selective recompute repeats: ``recompute_modules``, or its
        default ``core_attn`` when unstated (megatron/core/transformer/transformer_config.py;
        core attention is checkpointed only when the list names it)."""
        return frozenset(DEFAULT_RECOMPUTE_MODULES if self.recompute_modules is None
                         else self.recompute_modules)

    @property
    def gemm_element_bytes(self) -> float:
        """Bytes per GEMM operand element: 1 for FP8 GEMMs (also the copy Transformer Engine
        saves for the weight gradient), NVFP4_ELEMENT_BYTES for FP4 GEMMs, else 2
        (bf16/fp16)."""
        return {Precision.FP8: 1.0, Precision.FP4: NVFP4_ELEMENT_BYTES}.get(self.precision, 2.0)

    def gemm_weight_gather_bytes(self, default_bytes: float) -> float:
        """Bytes per parameter a data-parallel all-gather moves for the block GEMMs' weights
        (``default_bytes`` for everything else, and for these without ``fp8_param_gather``
        or ``fp4_param_gather``). With ``fp4_param_gather``: NVFP4_PACKED_BYTES.
        With it: 1 for per-tensor FP8 weights (Float8Tensor primary weights gathered as
        uint8, Megatron-Core param_and_grad_buffer.py; torchao WeightWithDynamicFloat8CastTensor
        fsdp_pre_all_gather, torchao/float8/fsdp_utils.py) and for blockwise weights (one
        fp32 scale per 128x128 tile); 2 under MXFP8, whose parameters Megatron-Core gathers in
        bf16 into the gradient buffer and re-quantises (param_and_grad_buffer.py
        shared_buffer, reuse_grad_buf_for_mxfp8_param_ag @ d98e8a64dd)."""
        if self.fp4_param_gather:
            return NVFP4_PACKED_BYTES
        if not self.fp8_param_gather:
            return default_bytes
        return 2.0 if self.fp8_recipe is Fp8Recipe.MXFP8 else 1.0

    @property
    def resident_gemm_weight_bytes(self) -> float:
        """Bytes per block-GEMM weight held between steps: 1 for FP8 primary weights of a
        per-tensor recipe (``fp8_param_gather``, delayed or current scaling: Megatron-Core
        keeps the compute parameter in FP8, Transformer Engine Float8Tensor) on a GPU that
        needs no transposed copy (``non_tn_fp8_gemms``), else the bf16 weight's 2 (with a
        transposed FP8 copy, as on Hopper, the two bytes are the same; MXFP8 and blockwise
        tensors keep row- and column-wise data). Only on stacks whose FP8 gathers mean FP8
        primary weights (trait ``fp8_primary_weights``: Megatron-Core's family): torch FSDP's
        float8 all-gather casts fp32 shards on the way (torchao WeightWithDynamicFloat8-
        CastTensor) and keeps no FP8 weight. (Megatron asserts FP8 gathers need the
        distributed optimizer: plans without sharding keep bf16,
        memory.parameter_states.weight_bytes.)"""
        per_tensor = self.fp8_recipe in (Fp8Recipe.DELAYED, Fp8Recipe.CURRENT)
        return 1.0 if (self.fp8_param_gather and per_tensor and self.non_tn_fp8_gemms
                       and self.traits.fp8_primary_weights) else 2.0

    @property
    def fsdp_gathers_per_tensor(self) -> bool:
        """FSDP issues one all-gather (and reduce-scatter) per parameter tensor."""
        if self.fsdp_gather is not None:
            return self.fsdp_gather is FsdpGather.TENSOR
        return self.traits.fsdp_gather == FsdpGather.TENSOR

    @property
    def checkpointed_block_fraction(self) -> float:
        """Share of blocks checkpointed whole: the workload's ``recompute_block_fraction``,
        else 1 (every block). Read under SELECTIVE on a block-level stack (fms-fsdp's
        selective_checkpointing p) and under FULL on every stack (Megatron-Core's
        ``--recompute-method block --recompute-num-layers k`` recomputes the first k blocks of
        each pipeline stage whole and keeps the rest's activations, megatron/core/
        transformer/transformer_block.py ``_checkpointed_forward``; NeMo 2's performance
        scripts set it per layout, docs/evidence/nemo2_recipes_by_release.md)."""
        fraction = self.recompute_block_fraction
        return 1.0 if fraction is None else float(fraction)

    @property
    def loss_implementation(self) -> CrossEntropy:
        """The LM loss as run: the workload's own setting, else the stack's default for
        whether the model compiles (:func:`mosaic.stacks.default_loss`)."""
        return self.cross_entropy or default_loss(self.traits, self.compiles_model)

    @property
    def overlaps_ep_communication(self) -> bool:
        """The EP all-to-alls run behind another micro-batch's compute: the workload's
        ``ep_overlap`` (Megatron-Core batch-level overlap), or DualPipe's schedule, which
        pairs a forward and a backward chunk so that each one's all-to-all hides behind the
        other's compute ("full overlap of forward and backward computation-communication
        phases", deepseek-ai/DualPipe README @ 3da1bbe)."""
        return self.ep_overlap or self.traits.pipeline_schedule == "dualpipe"

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
