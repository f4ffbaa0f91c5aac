"""Per-GPU memory of a training step on the heaviest pipeline stage, by component.

Every formula is written over the arrays of :class:`~mosaic.perf.plan.ParallelPlans`, so a
layout search scores all of its candidate plans in one call; a single plan is a length-1
set. Sizes are in bytes. The components (keys of :func:`memory_breakdown_bytes`):

* ``weights``: bf16 parameters (2 B/param; fp8 recipes keep bf16 weights too, except FP8
  primary weights on Blackwell, 1 B; none at rest for fully sharded plans on stacks whose
  shards are fp32, see :func:`weight_bytes`).
* ``gradients``: fp32 main-gradient buffers (4 B/param, the Megatron-Core default for bf16;
  2 B when the workload reduces gradients in bf16).
* ``optimizer_states``: fp32 moments (Adam/AdamW 8 B, Muon and SGD-momentum 4 B); half
  with a bf16 optimizer (``Workload.optimizer_dtype``).
* ``master_weights``: fp32 master parameters (4 B/param); none with a bf16 optimizer.
* ``activations``: tensors saved for the backward pass of every in-flight micro-batch.
* ``logits``: LM-head output and the cross-entropy working set (last stage only), by the
  stack's loss implementation (:func:`loss_bytes_per_logit`).
* ``communication_buffers``: FSDP gather/reduce buffers, ZeRO-2 buckets, EP and PP buffers.
* ``runtime_reserve``: CUDA context, library workspaces and NCCL buffers.

Sharding (ZeRO, Rajbhandari et al. 2020, Sec. 5; Megatron-Core distributed optimizer):
non-expert parameters are split over TP and, where the sharding mode says so, over the
dense data-parallel group dp·cp; routed experts are split over EP·ETP and over the
expert-data-parallel group edp (paper Appendix D.1, Eq. 24).

Activation accounting follows Korthikanti et al. 2022 ("Reducing Activation Recomputation
in Large Transformer Models", arXiv 2205.05198), re-derived tensor by tensor for GQA/MLA,
SwiGLU, flash attention and MoE layers; see ``docs/memory.md`` for the derivation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from mosaic.arch import AttentionKind, Geometry, HybridLayer, count_parameters
from mosaic.arch.counts import (
    MTP_MODULE_NORMS,
    hybrid_mixer_parameters,
    params_mtp_projection,
    params_per_norm,
)
from mosaic.errors import MosaicInputError
from mosaic.perf.attention_kernels import materialises_scores, stack_default_kernel
from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.elementwise_traffic import ElementwiseKernels, elementwise_kernels
from mosaic.perf.factorise import plan_key
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.pipeline_layout import Layouts
from mosaic.perf.plan import Checkpointing, ParallelPlans, Sharding
from mosaic.perf.routing_load import routed_load_factor
from mosaic.perf.schedule import (
    MIRROR_STAGE,
    Stage,
    candidate_stages,
    fsdp_gathered_through_step,
    in_flight_microbatches,
    lm_head_stage,
    middle_stage_can_be_heaviest,
    mirror_in_flight_microbatches,
    mtp_modules,
    n_microbatches,
    stage_hybrid_counts,
    stage_layer_counts,
    stage_rank,
    uses_dualpipe,
)
from mosaic.perf.shapes import (
    attention_widths,
    expert_copies,
    mla_input_projections,
    routed_tokens,
    sequence_shard_divisor,
    tokens_per_rank,
)
from mosaic.perf.workload import OptimizerDtype, OptimizerKind, Workload
from mosaic.stacks import CrossEntropy, FsdpShardStorage, SelectiveRecompute
from mosaic.units import GIB

# --- Constants (bytes) -------------------------------------------------------------------
# Model weights are held in bf16 (fp8 GEMM recipes keep bf16 weights and cast per GEMM;
# Micikevicius et al. 2022, "FP8 Formats for Deep Learning", Sec. 4).
WEIGHT_BYTES_PER_PARAM = 2
# Megatron-LM forces fp32 gradient accumulation and reduction for bf16 training
# (megatron/training/arguments.py: "bfloat16 requires gradient accumulation and all-reduce
# to be done in fp32"); --grad-reduce-in-bf16 makes the buffers bf16
# (``Workload.grad_reduce_in_fp32`` False: NeMo and Megatron-Bridge performance recipes set
# grad_reduce_in_fp32 = False, e.g. Megatron-Bridge scripts/performance/configs/*).
GRADIENT_BYTES_PER_PARAM = 4
BF16_GRADIENT_BYTES_PER_PARAM = 2
# fp32 main parameters for the optimizer step ("we always use fp32 main parameters",
# Megatron-Core distributed-optimizer docs: bf16 params + fp32 grads = 6 + 12/d bytes).
MASTER_WEIGHT_BYTES_PER_PARAM = 4
# fp32 optimizer state per parameter: Adam/AdamW keep exp_avg and exp_avg_sq (Kingma & Ba
# 2015; Loshchilov & Hutter 2019); Muon keeps one momentum buffer (Jordan et al. 2024;
# Liu et al. 2025, "Muon is Scalable for LLM Training"); SGD is taken with momentum.
OPTIMIZER_STATE_BYTES_PER_PARAM: dict[OptimizerKind, int] = {
    OptimizerKind.ADAM: 8,
    OptimizerKind.ADAMW: 8,
    OptimizerKind.MUON: 4,
    OptimizerKind.SGD: 4,
}
# An optimizer whose dtype is bf16 (``Workload.optimizer_dtype``) keeps its moments in the
# parameters' dtype: torch.optim.Adam creates exp_avg and exp_avg_sq as zeros_like(param)
# (torch/optim/adam.py _init_group), so on bf16 parameters each moment is 2 B (NeMo AutoModel
# docs/guides/mixed-precision-training.mdx: "When model.torch_dtype: bfloat16 is used with
# torch.optim.AdamW, the AdamW EMA buffers ... are also stored in bf16"); Apex
# DistributedFusedAdam allocates them in its ``dtype`` (apex/contrib/optimizers/
# distributed_fused_adam.py: "dtype: datatype for optimizer state").
BF16_MOMENT_FRACTION = BF16_GRADIENT_BYTES_PER_PARAM / MASTER_WEIGHT_BYTES_PER_PARAM  # 2 B of 4
# Muon orthogonalises hidden 2-D matrices only; embedding and LM head are trained with AdamW
# (Jordan et al. 2024; Liu et al. 2025, Sec. 2). Norm gains are negligible and count as Muon.
MUON_VOCAB_OPTIMIZER = OptimizerKind.ADAMW
INDEX_BYTES = 8  # int64 routing indices
# Cross-entropy working set per logit element, by the stack's loss (stack trait
# ``cross_entropy``). FUSED: Megatron-Core vocab-parallel cross entropy
# (tensor_parallel/cross_entropy.py) upcasts the bf16 logits to an fp32 copy, turns it into
# the softmax in place, saves it, and writes the gradient into it in place: peak 2 B (bf16
# logits) + 4 B (fp32 copy), in the forward and in the backward (fp32 grad + bf16 cast).
LOGITS_BYTES_PER_ELEMENT = ACTIVATION_BYTES + FP32_BYTES
# FUSED_OUT_OF_PLACE: Megatron-Core up to core_v0.7.0 (tensor_parallel/cross_entropy.py
# @ core_v0.6.0: "vocab_parallel_logits = vocab_parallel_logits - logits_max.unsqueeze(
# dim=-1)"; in place, "-=", from core_v0.8.0) shifts the fp32 copy
# (language_module.py: vocab_parallel_cross_entropy(logits.float(), labels)) into a second
# fp32 tensor while the copy and the bf16 logits are alive: 2 + 4 + 4 B at the forward
# peak; the backward needs the saved softmax and its bf16 cast only (6 B).
OUT_OF_PLACE_LOSS_BYTES_PER_ELEMENT = ACTIVATION_BYTES + 2 * FP32_BYTES
# FP32_UPCAST, no TP: eager F.cross_entropy(logits.float()) (torchtitan components/loss.py).
# Forward: bf16 logits 2 + fp32 copy 4 + saved log-softmax 4 = 10 B; backward: the saved
# log-softmax 4 + nll_loss_backward's dense fp32 gradient 4 + _log_softmax_backward_data's
# fp32 output 4 = 12 B (torchtitan deletes the bf16 logits before backward), the peak.
UPCAST_LOSS_BYTES_PER_ELEMENT = 3 * FP32_BYTES
# COMPILED: torch.compile of the same loss. Inductor fuses the upcast, log-softmax and NLL
# into row reductions that save only the bf16 logits (with per-row statistics) and writes
# the bf16 gradient directly: 2 B saved + 2 B gradient. Measured: torchtitan's Qwen3-32B on
# 8 H100s, local batch 2, full AC, peaks at 89.33 GiB eager and 81.85 GiB with the model
# and loss compiled (pytorch/torchtitan#1690), 7.5 GiB apart for 1.24e9 logit elements
# (6.5 B each; the model's 12 B -> 4 B gives 8 B).
COMPILED_LOSS_BYTES_PER_ELEMENT = 2 * ACTIVATION_BYTES
# BF16: eager F.cross_entropy on the bf16 logits (NeMo AutoModel's MaskedCrossEntropy with
# fp32_upcast false). Backward: the logits the training loop still holds, the saved
# log-softmax, nll_loss_backward's dense gradient and _log_softmax_backward_data's output,
# all bf16: 4 x 2 B.
BF16_LOSS_BYTES_PER_ELEMENT = 4 * ACTIVATION_BYTES
# FP32_UPCAST under TP: torch's loss_parallel (torch/distributed/tensor/parallel/loss.py)
# decomposes the vocab-sharded log-softmax (fp32 input 4, shifted 4, exp(shifted) 4 beside
# the bf16 logits 2 = 14 B) and its backward (saved result 4, zeros_like gradient 4,
# exp(x) 4 and their sum 4 = 16 B), the peak.
LOSS_PARALLEL_BYTES_PER_ELEMENT = 4 * FP32_BYTES
# TE: Transformer Engine's parallel_cross_entropy (transformer_engine/pytorch/cross_entropy.py
# and triton/cross_entropy.py, v2.7; Megatron-Core cross_entropy_fusion_impl "te"). An
# online-softmax Triton kernel reads the bf16 logits row by row (fp32 statistics per row
# only), writes the gradient into the logits tensor in place and saves that tensor for the
# backward, which scales it in place: the bf16 logits are the whole working set, 2 B.
TE_LOSS_BYTES_PER_ELEMENT = ACTIVATION_BYTES
# DeepSpeed ZeRO (stack trait ``zero_runtime`` deepspeed), deepspeed @ v0.11.1:
# runtime/engine.py get_data_types keeps gradients in the model dtype under any ZeRO stage
# (fp32 accumulation only for bf16 without ZeRO), and stage3.py allocates the gradient
# partitions (grad_partitions_flat_buffer) in that dtype: 2 B per parameter, sharded.
DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM = BF16_GRADIENT_BYTES_PER_PARAM
# ZeRO-3 keeps gathered parameters resident up to stage3_max_live_parameters, default 1e9
# (runtime/zero/config.py max_live_parameters; "the maximum number of parameters resident
# per GPU before releasing"), which parameters reused within stage3_max_reuse_distance
# (1e9) and the prefetch bucket fill; the model takes the cap.
DEEPSPEED_MAX_LIVE_PARAMETERS = 1e9
# Eager torch model code whose RMSNorm upcasts to fp32 (ElementwiseKernels.EAGER_FP32_NORM:
# HF transformers LlamaRMSNorm @ 4.34, torchtitan's RMSNorm run eagerly): x.to(float32) is
# saved by pow and by the normalising mul (4 B), the normalised bf16 tensor by the weight mul
# (2 B), the output by the next linear (counted as its GEMM input), and the bf16 input x by
# nothing (the cast's backward needs no input): 4 B per element more than the norm input the
# counts above keep. An eager SwiGLU, act_fn(gate) * up, saves the SiLU output for the mul
# beside gate, up and their product: one more bf16 tensor of the FFN width.
EAGER_NORM_EXTRA_BYTES_PER_ELEMENT = FP32_BYTES  # fp32 copy + normalised bf16 - bf16 input
EAGER_GLU_EXTRA_BYTES_PER_ELEMENT = ACTIVATION_BYTES
# CUDA context (~0.8 GB on first CUDA use, pytorch/pytorch#34323), cuBLAS/cuDNN workspaces
# and NCCL communicator buffers. Not seen by torch.cuda.max_memory_reserved(). Calibration
# candidate: measure nvidia-smi used minus allocator reserved on the target stack.
RUNTIME_RESERVE_BYTES = 2 * GIB

# The components of memory_breakdown_bytes, each with what it holds in a few words (the
# module docstring gives the byte counts) for tables and legends.
COMPONENT_MEANINGS: dict[str, str] = {
    "weights": "parameters this GPU holds",
    "gradients": "gradient buffers",
    "optimizer_states": "optimizer moments",
    "master_weights": "fp32 master copy of the parameters",
    "activations": "saved for the backward pass, every in-flight micro-batch",
    "logits": "LM-head output and cross-entropy working set",
    "communication_buffers": "FSDP/ZeRO, EP and PP buffers",
    "runtime_reserve": "CUDA context, library workspaces, NCCL",
}
COMPONENTS: tuple[str, ...] = tuple(COMPONENT_MEANINGS)

# Transformer blocks ("dense", "moe") and a hybrid model's layers (perf/hybrid_layers.py)
LayerKind = Literal["dense", "moe", "mamba", "gdn", "attention", "mlp", "moe_layer"]
HYBRID_LAYER_KINDS: dict[HybridLayer, LayerKind] = {
    HybridLayer.MAMBA: "mamba", HybridLayer.GDN: "gdn", HybridLayer.ATTENTION: "attention",
    HybridLayer.MLP: "mlp", HybridLayer.MOE: "moe_layer"}
# the FFN part each kind's recompute modules act on (None: no FFN)
_FFN_PART: dict[str, str | None] = {"dense": "dense", "moe": "moe", "mlp": "dense",
                                    "moe_layer": "moe", "mamba": None, "gdn": None,
                                    "attention": None}
# kinds with an attention core (whose softmax statistics core_attn recompute drops)
_ATTENTION_KINDS = frozenset({"dense", "moe", "attention"})

_FULLY_SHARDED = (Sharding.FSDP, Sharding.HSDP)
_GRADIENTS_SHARDED = (Sharding.ZERO2, Sharding.FSDP, Sharding.HSDP)
_STATES_SHARDED = (Sharding.ZERO1, Sharding.ZERO2, Sharding.FSDP, Sharding.HSDP)

# The plan fields each term reads (mosaic.perf.factorise): a layout search computes a term
# once per distinct value of its fields. Stage parameters follow the TP/EP splits and the
# blocks on the stage; activations the per-rank tokens, expert layout, checkpointing and
# in-flight micro-batches; parameter states add the (E)DP sharding.
STAGE_PARAMETER_KEY = ("tp", "pp", "vpp", "ep", "etp")
BLOCK_ACTIVATION_KEY = ("tp", "cp", "micro_batch", "sequence_parallel", "ep", "etp")
STAGE_ACTIVATION_KEY = (*BLOCK_ACTIVATION_KEY, "checkpointing", "pp", "vpp", "dp")
PARAMETER_STATE_KEY = (*STAGE_PARAMETER_KEY, "cp", "dp", "sharding", "hsdp_shard")
BUFFER_KEY = (*BLOCK_ACTIVATION_KEY, "pp", "vpp", "sharding", "dp", "hsdp_shard")


# --- Pipeline stages (shared with the time model: mosaic.perf.schedule) -----------


def _holds_embedding(plans: ParallelPlans, stage: Stage) -> np.ndarray:
    return np.full(len(plans), stage == "first") | (plans.pp == 1)


def _holds_lm_head(plans: ParallelPlans, stage: Stage) -> np.ndarray:
    return np.full(len(plans), stage == "last") | (plans.pp == 1)


# --- Parameters per GPU ------------------------------------------------------------------
@dataclass(frozen=True)
class StageParameters:
    """Parameters one GPU of a stage holds after TP/EP splitting, before (E)DP sharding.

    Attributes:
        dense: attention, dense-FFN and shared-expert matrices, split over TP.
        replicated: norm gains and routers, replicated across TP ranks (Megatron-Core).
        vocab: embedding (first stage) and LM head (last stage), vocab-parallel over TP.
        expert: routed experts, E/ep experts per rank, each split over etp.
        largest_block: the biggest transformer block on the stage (an FSDP unit).
        largest_unit: the biggest FSDP unit on the stage (a block, the embedding or the
            LM head), which FSDP gathers whole.
        largest_block_without_experts, largest_unit_without_experts: the same with the
            routed experts left out of the blocks (FSDP units when the experts are not
            FSDP-managed, stack trait ``fsdp_skips_unsharded_experts``).
    """

    dense: np.ndarray
    replicated: np.ndarray
    vocab: np.ndarray
    expert: np.ndarray
    largest_block: np.ndarray
    largest_unit: np.ndarray
    largest_block_without_experts: np.ndarray
    largest_unit_without_experts: np.ndarray

    @property
    def non_expert(self) -> np.ndarray:
        return self.dense + self.replicated + self.vocab

    @property
    def total(self) -> np.ndarray:
        return self.non_expert + self.expert


@plan_key(*STAGE_PARAMETER_KEY, remember=without_top_k)
def stage_parameters(geometry: Geometry, plans: ParallelPlans, stage: Stage,
                     remainder_last: bool = False, vocab_in_split: bool = False,
                     layouts: Layouts = ()) -> StageParameters:
    """Per-GPU parameter groups of the first or last stage (see :class:`StageParameters`)."""
    counts = count_parameters(geometry)
    blocks, moe_blocks = stage_layer_counts(geometry, plans, stage, remainder_last,
                                            vocab_in_split, layouts)
    dense_blocks = blocks - moe_blocks
    tp = plans.tp.astype(float)
    expert_split = (plans.ep * plans.etp).astype(float)
    lm_head = _holds_lm_head(plans, stage)
    # Tied embeddings still need a copy on the last stage when pp > 1 (Megatron-LM).
    lm_head_params = np.where(plans.pp > 1, geometry.vocab * geometry.d_model, counts.lm_head)
    embedding = np.where(_holds_embedding(plans, stage), counts.embedding / tp, 0.0)
    head = np.where(lm_head, lm_head_params / tp, 0.0)

    experts_per_block = counts.experts * counts.routed_expert / expert_split
    if geometry.is_hybrid:
        return _hybrid_stage_parameters(geometry, plans, stage, remainder_last,
                                        vocab_in_split, embedding, head, experts_per_block)
    # An MTP module's block is among the stage's blocks (schedule.mtp_modules); its
    # projection is column-parallel over TP (Megatron-Core MultiTokenPredictionLayer
    # eh_proj, gather_output=False), its norms replicated, and its rank builds an input
    # embedding of its own (GPTModel: "if self.pre_process or self.mtp_process: self.embedding
    # = LanguageModelEmbedding(...)", megatron/core/models/gpt/gpt_model.py @ d98e8a64dd).
    mtp = mtp_modules(geometry, plans, stage, layouts)
    embedding = np.where((mtp > 0) & (embedding == 0), counts.embedding / tp, embedding)
    mtp_split = mtp * params_mtp_projection(geometry.d_model) / tp
    mtp_replicated = mtp * MTP_MODULE_NORMS * params_per_norm(geometry.d_model, geometry.norm)
    dense_block = (counts.attention_per_layer + counts.dense_ffn_per_layer) / tp
    moe_block_tp = (counts.attention_per_layer + counts.shared_experts_per_layer) / tp
    dense_block_total = dense_block + counts.norms_per_layer
    moe_block_total = moe_block_tp + counts.norms_per_layer + counts.router_per_layer
    moe_block_total = moe_block_total + experts_per_block
    largest_block = np.maximum(
        np.where(dense_blocks > 0, dense_block_total, 0.0),
        np.where(moe_blocks > 0, moe_block_total, 0.0),
    )
    largest_block_without_experts = np.maximum(
        np.where(dense_blocks > 0, dense_block_total, 0.0),
        np.where(moe_blocks > 0, moe_block_total - experts_per_block, 0.0),
    )
    return _stage_parameters_with_units(
        dense=dense_blocks * dense_block + moe_blocks * moe_block_tp + mtp_split,
        replicated=blocks * counts.norms_per_layer
        + moe_blocks * counts.router_per_layer
        + np.where(lm_head, counts.final_norm, 0) + mtp_replicated,
        expert=moe_blocks * experts_per_block, embedding=embedding, head=head,
        largest_block=largest_block, largest_block_without_experts=largest_block_without_experts)


def _stage_parameters_with_units(dense: np.ndarray, replicated: np.ndarray, expert: np.ndarray,
                                 embedding: np.ndarray, head: np.ndarray,
                                 largest_block: np.ndarray,
                                 largest_block_without_experts: np.ndarray) -> StageParameters:
    """:class:`StageParameters` whose largest FSDP unit is the largest block, the embedding
    or the LM head (with and without the routed experts)."""
    return StageParameters(
        dense=dense, replicated=replicated, vocab=embedding + head, expert=expert,
        largest_block=largest_block,
        largest_unit=np.maximum.reduce([largest_block, embedding, head]),
        largest_block_without_experts=largest_block_without_experts,
        largest_unit_without_experts=np.maximum.reduce(
            [largest_block_without_experts, embedding, head]),
    )


def _hybrid_stage_parameters(geometry: Geometry, plans: ParallelPlans, stage: Stage,
                             remainder_last: bool, vocab_in_split: bool, embedding: np.ndarray,
                             head: np.ndarray, experts_per_layer: np.ndarray
                             ) -> StageParameters:
    """:func:`stage_parameters` of a hybrid model: each layer kind's TP-split matrices (a
    Mamba mixer splits its heads and groups, its convolution and per-head tensors too:
    megatron/core/ssm/mamba_mixer.py marks them tensor_model_parallel), one norm per
    layer, the MoE layers' routers and routed experts."""
    counts = count_parameters(geometry)
    held = stage_hybrid_counts(geometry, plans, stage, remainder_last, vocab_in_split)
    tp = plans.tp.astype(float)
    split = {symbol: hybrid_mixer_parameters(counts, symbol) / tp for symbol in HybridLayer}
    layers = sum(held.values(), start=np.zeros_like(plans.pp))
    moe_layers = held[HybridLayer.MOE]
    norm, router = counts.norms_per_layer, counts.router_per_layer
    whole = {symbol: split[symbol] + norm + (router if symbol is HybridLayer.MOE else 0.0)
             for symbol in HybridLayer}
    largest_without_experts = np.maximum.reduce(
        [np.where(held[symbol] > 0, whole[symbol], 0.0) for symbol in HybridLayer])
    largest = np.maximum(largest_without_experts,
                         np.where(moe_layers > 0, whole[HybridLayer.MOE] + experts_per_layer,
                                  0.0))
    lm_head = _holds_lm_head(plans, stage)
    return _stage_parameters_with_units(
        dense=sum((held[symbol] * split[symbol] for symbol in HybridLayer),
                  start=np.zeros(len(plans))),
        replicated=layers * norm + moe_layers * router + np.where(lm_head, counts.final_norm, 0),
        expert=moe_layers * experts_per_layer, embedding=embedding, head=head,
        largest_block=largest, largest_block_without_experts=largest_without_experts)


@plan_key(*STAGE_PARAMETER_KEY, remember=without_top_k)
def rank_parameters(workload: Workload, plans: ParallelPlans, stage: Stage
                    ) -> StageParameters:
    """Per-GPU parameter groups of the rank that runs ``stage``: the stage's own
    (:func:`stage_parameters`), plus, under DualPipe with pp > 1, its mirror stage's
    (:data:`~mosaic.perf.schedule.MIRROR_STAGE`: "two copies of the model parameters",
    DeepSeek-V3 report Table 2), the largest block or unit being the larger of the two."""
    geometry, uneven = workload.geometry, workload.uneven_pipeline_stages
    vocab_split = workload.vocab_in_pipeline_split
    layouts = workload.pipeline_layouts
    own = stage_parameters(geometry, plans, stage, uneven, vocab_split, layouts)
    if not uses_dualpipe(workload):
        return own
    mirror = stage_parameters(geometry, plans, MIRROR_STAGE[stage], uneven, vocab_split, layouts)
    pipelined = plans.pp > 1
    summed = ("dense", "replicated", "vocab", "expert")
    return StageParameters(**{
        name: np.where(pipelined, (getattr(own, name) + getattr(mirror, name)) if name in summed
                       else np.maximum(getattr(own, name), getattr(mirror, name)),
                       getattr(own, name))
        for name in StageParameters.__dataclass_fields__})


def shard_degrees(plans: ParallelPlans) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) data-parallel shard-group sizes.

    Megatron-Core's distributed optimizer shards dense state over the data-parallel group
    with CP (dp·cp) and expert state over the expert-data-parallel group edp. HSDP shards
    inside a group of hsdp_shard replicas; experts then shard over the same fraction of edp.
    """
    hsdp = plans.sharding == Sharding.HSDP
    dense = np.where(hsdp, plans.hsdp_shard, plans.dp) * plans.cp
    edp = np.maximum(plans.edp, 1)
    expert_hsdp = np.maximum(edp * plans.hsdp_shard // plans.dp, 1)
    return dense.astype(float), np.where(hsdp, expert_hsdp, edp).astype(float)


def _sharding_in(sharding: np.ndarray, modes: tuple[Sharding, ...]) -> np.ndarray:
    """Which plans' sharding is one of ``modes``: np.isin's answer, by one comparison per
    mode (np.isin scans the codes for their range first; measured ~3x slower here)."""
    found = sharding == modes[0]
    for mode in modes[1:]:
        found |= sharding == mode
    return found


# (remembered per plans and modes: each stage's weights, gradients and optimizer state read
# them, and the stages' parameter states are computed on one set of plans, one plan per
# value of PARAMETER_STATE_KEY, on which a function of that key runs directly)
@plan_key(*PARAMETER_STATE_KEY, remember=True)
def _shard_divisors(
    plans: ParallelPlans, modes: tuple[Sharding, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) divisors: the shard-group sizes where a plan's sharding is in
    ``modes``, else 1."""
    sharded = _sharding_in(plans.sharding, modes)
    dense_degree, expert_degree = shard_degrees(plans)
    return np.where(sharded, dense_degree, 1.0), np.where(sharded, expert_degree, 1.0)


def _sharded_params(
    params: StageParameters, plans: ParallelPlans, modes: tuple[Sharding, ...]
) -> np.ndarray:
    """Parameters per GPU when the plans whose sharding is in ``modes`` shard over (E)DP."""
    dense_divisor, expert_divisor = _shard_divisors(plans, modes)
    return params.non_expert / dense_divisor + params.expert / expert_divisor


def optimizer_state_bytes(
    workload: Workload, params: StageParameters, plans: ParallelPlans
) -> np.ndarray:
    """Optimizer moments, sharded over (E)DP for ZeRO-1/2, FSDP and HSDP."""
    per_param = OPTIMIZER_STATE_BYTES_PER_PARAM[workload.optimizer]
    state = per_param * _sharded_params(params, plans, _STATES_SHARDED)
    if workload.optimizer is OptimizerKind.MUON:
        vocab_divisor, _ = _shard_divisors(plans, _STATES_SHARDED)
        extra = OPTIMIZER_STATE_BYTES_PER_PARAM[MUON_VOCAB_OPTIMIZER] - per_param
        state = state + extra * params.vocab / vocab_divisor
    if workload.optimizer_dtype in (OptimizerDtype.BF16, OptimizerDtype.BF16_MOMENTS):
        state = BF16_MOMENT_FRACTION * state
    return state


def master_weight_bytes(workload: Workload, params: StageParameters, plans: ParallelPlans
                        ) -> np.ndarray:
    """fp32 main parameters, sharded with the optimizer state; none when the optimizer
    steps the bf16 parameters themselves (``optimizer_dtype`` bf16: torch.optim on bf16
    parameters; Apex DistributedFusedAdam with store_params off, which NeMo sets when the
    optimizer dtype equals the model dtype, nemo/collections/nlp/models/language_modeling/
    megatron_base_model.py setup_optimization)."""
    if workload.optimizer_dtype is OptimizerDtype.BF16:
        return np.zeros(len(plans))
    return MASTER_WEIGHT_BYTES_PER_PARAM * _sharded_params(params, plans, _STATES_SHARDED)


def optimizer_update_bytes(workload: Workload, params: StageParameters, plans: ParallelPlans
                           ) -> np.ndarray:
    """HBM bytes one optimizer step streams on a GPU, from the same states this module
    holds: the moments and fp32 main parameters read and written, the local gradient shard
    read at its stored width (:func:`stored_gradient_bytes`), and the bf16 parameters
    written where a bf16 copy is resident (:func:`holds_bf16_weight_copy`; read and
    written too where they are the optimizer's own copy, with no main parameters).
    fp32 Adam: 2·(8 + 4) + 4 + 2 = 30 B per local parameter; torch FSDP's fp32 shards
    (no bf16 copy at rest) 28 B; bf16 parameters stepped in place with bf16 gradients
    2·4 + 2 + 2·2 = 14 B. Megatron's distributed optimizer without the precision-aware
    path also copies bf16 gradients into an fp32 ``main_param.grad`` (optimizer.py
    ``_copy_model_grads_to_main_grads``); no stack trait records that path, so its
    extra read and write are not counted."""
    local = _sharded_params(params, plans, _STATES_SHARDED)
    master = master_weight_bytes(workload, params, plans)
    weight_passes = np.where(master > 0, 1.0, 2.0) * holds_bf16_weight_copy(workload, plans)
    return (2 * (optimizer_state_bytes(workload, params, plans) + master)
            + local * (stored_gradient_bytes(workload, plans)
                       + weight_passes * WEIGHT_BYTES_PER_PARAM))


def gradient_bytes_per_param(workload: Workload) -> int:
    """Bytes of one gradient-buffer element: fp32 unless the workload reduces in bf16."""
    if workload.grad_reduce_in_fp32:
        return GRADIENT_BYTES_PER_PARAM
    return BF16_GRADIENT_BYTES_PER_PARAM


def stored_gradient_bytes_per_param(workload: Workload) -> int:
    """Bytes of one element of the gradients kept between micro-batches (``gradients``).

    A stack whose fully sharded parameter is the optimizer's own copy (trait
    ``fsdp_shard_storage`` fp32: torch FSDP) keeps each gradient in its parameter's dtype:
    FSDP2 casts the reduce-scattered gradient to the sharded parameter's dtype
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce,
    ``_to_dtype_if_needed(reduce_output, orig_dtype)``) and parameters left outside FSDP get
    autograd gradients of their own dtype. With bf16 parameters (``optimizer_dtype`` bf16)
    that is 2 B; otherwise the gradient buffer's element (:func:`gradient_bytes_per_param`).
    """
    if (workload.optimizer_dtype is OptimizerDtype.BF16
            and workload.traits.fsdp_shard_storage is FsdpShardStorage.FP32):
        return BF16_GRADIENT_BYTES_PER_PARAM
    return gradient_bytes_per_param(workload)


def deepspeed_zero(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Which plans run DeepSpeed ZeRO (stack trait ``zero_runtime`` deepspeed, any ZeRO
    stage: sharding other than none)."""
    if workload.traits.zero_runtime != "deepspeed":
        return np.zeros(len(plans), dtype=bool)
    return plans.sharding != Sharding.NONE


def stored_gradient_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Bytes per element of the gradients kept between micro-batches, per plan:
    :func:`stored_gradient_bytes_per_param`, except under DeepSpeed ZeRO, whose gradient
    partitions are in the model dtype (DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM)."""
    return np.where(deepspeed_zero(workload, plans),
                    float(DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM),
                    float(stored_gradient_bytes_per_param(workload)))


def weight_bytes(workload: Workload, params: StageParameters, plans: ParallelPlans
                 ) -> np.ndarray:
    """Resident weights, sharded over (E)DP under FSDP/HSDP: bf16, the block GEMMs' at
    ``Workload.resident_gemm_weight_bytes`` (FP8 primary weights on Blackwell). A fully
    sharded plan on a stack whose shards are fp32 (trait ``fsdp_shard_storage``: torch FSDP
    mixed precision keeps the sharded parameter in its original dtype, which the optimizer
    updates) holds no bf16 copy at rest: its fp32 shard is ``master_weights`` and the bf16
    units exist only while gathered (``communication_buffers``) - unless the parameters
    themselves are bf16 (``optimizer_dtype`` bf16), when the shard is the bf16 weight."""
    dense_divisor, expert_divisor = _shard_divisors(plans, _FULLY_SHARDED)
    # the block GEMMs' weights (dense matrices, routed experts) at their resident bytes,
    # norms, routers, embedding and LM head in bf16
    # (FP8 gathers need the distributed optimizer, Megatron-LM arguments.py: unsharded
    # plans keep bf16)
    gemm_bytes = np.where(plans.sharding == Sharding.NONE, WEIGHT_BYTES_PER_PARAM,
                          workload.resident_gemm_weight_bytes)
    resident = (gemm_bytes * (params.dense / dense_divisor + params.expert / expert_divisor)
                + WEIGHT_BYTES_PER_PARAM * (params.replicated + params.vocab) / dense_divisor)
    return np.where(holds_bf16_weight_copy(workload, plans), resident, 0.0)


def holds_bf16_weight_copy(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Which plans keep the bf16 weights resident between steps: all but fully sharded
    plans on a stack with fp32 shards (trait ``fsdp_shard_storage``) and fp32 parameters,
    whose bf16 units exist only while gathered (see :func:`weight_bytes`)."""
    if (workload.traits.fsdp_shard_storage is FsdpShardStorage.FP32
            and workload.optimizer_dtype is OptimizerDtype.FP32):
        return ~_sharding_in(plans.sharding, _FULLY_SHARDED)
    return np.ones(len(plans), dtype=bool)


# --- Activations -------------------------------------------------------------------------
def softmax_statistics_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """What the attention core saves for its backward, and what core-attention recompute
    drops: flash attention keeps an fp32 log-sum-exp per query row and head (Dao 2023,
    FlashAttention-2, Alg. 1) and never stores the s×s matrix; materialised (reference)
    attention keeps the bf16 probabilities, b·h·s_q·s_k per GPU (Korthikanti et al. 2022's
    5as²b term without dropout: the softmax output is what the PV backward needs).
    Levanter's blockwise kernel (jax_flash) saves an fp32 log-sum-exp per row like flash
    attention (flash_attention.py ``ell``), and materialises on sequences under a block."""
    rows = tokens_per_rank(workload, plans) * workload.geometry.heads / plans.tp
    kernel = workload.attention_kernel or stack_default_kernel(workload.stack)
    if materialises_scores(kernel, workload.seq_len):
        return ACTIVATION_BYTES * rows * workload.seq_len
    return FP32_BYTES * rows


def attention_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Bytes one attention block saves per micro-batch with nothing recomputed.

    Korthikanti et al. 2022 Sec. 4.1 count 11sbh + 5as²b; with flash attention, no dropout
    and separate K/V widths this becomes: norm input and QKV-GEMM input (2·2sbh, sharded by
    SP, Sec. 4.2.2), rotated Q, K, V (2sb·(q + k + v)/tp), attention output (the output
    projection's input, 2sb·q/tp), softmax statistics, plus gate tensors for gated
    attention and MLA latents (replicated across TP). GEMM inputs (QKV and output
    projection) take ``Workload.gemm_element_bytes`` (FP8 recipes save the FP8 copy
    Transformer Engine cast for the forward GEMM).
    """
    geometry = workload.geometry
    widths = attention_widths(geometry)
    tokens, tp = tokens_per_rank(workload, plans), plans.tp
    gemm_in = workload.gemm_element_bytes
    sequence_region = (ACTIVATION_BYTES + gemm_in) * tokens * geometry.d_model / (
        sequence_shard_divisor(plans))
    qkv = tokens * (widths.query / tp + widths.key_value_per_rank(tp))
    latents = tokens * widths.latent
    # a gate's logits and the pre-gate output it multiplies: per head or per output channel
    gate_width = (geometry.heads if geometry.gated_attention else widths.output)
    gate = (tokens * (gate_width + widths.output) / tp
            if geometry.gated_attention or geometry.attention_output_gate else 0.0)
    stored = (sequence_region + ACTIVATION_BYTES * (qkv + latents + gate)
              + gemm_in * tokens * widths.output / tp)
    return stored + softmax_statistics_bytes(workload, plans)


def _ffn_bytes(tokens: np.ndarray, width_per_rank: np.ndarray, glu: bool,
               gemm_in: int, gemm1_out: int = ACTIVATION_BYTES) -> np.ndarray:
    """FFN intermediates per token: GEMM-1 output (2 tensors for a GLU: gate and up) at
    ``gemm1_out`` bytes and the activation output, which is GEMM-2's input at ``gemm_in``
    bytes. SwiGLU: 3 tensors of width w; GELU: 2 (Korthikanti's 8sbh + 8sbh for w = 4h in
    bf16)."""
    return tokens * width_per_rank * ((2 if glu else 1) * gemm1_out + gemm_in)


def dense_mlp_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Dense FFN block: norm input + GEMM-1 input (2sbh each, SP-sharded) and intermediates."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    gemm_in = workload.gemm_element_bytes
    sequence_region = ((ACTIVATION_BYTES + gemm_in) * tokens * geometry.d_model
                       / sequence_shard_divisor(plans))
    return sequence_region + _ffn_bytes(tokens, geometry.ffn / plans.tp, geometry.glu, gemm_in)


def moe_block_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """MoE FFN block of one layer per micro-batch, with nothing recomputed.

    T routed tokens per GPU, K experts per token, balanced routing. After the all-to-all
    (and the ETP all-gather) a GPU holds C = K·T·etp token copies for experts of width
    d_expert/etp. Saved: norm input and output (2·2Th; the router, dispatcher and shared
    expert read the same norm output), fp32 router logits and scores (2·4TE) with int64
    top-K indices and fp32 top-K probabilities (12TK), permuted expert inputs (2Ch), expert
    intermediates (SwiGLU: 3 tensors of d_expert/etp per copy), expert outputs kept for the
    probability-weighted combine (2KTh) unless the stack scales the expert activation by the
    probabilities instead (trait ``moe_probs_in_activation``: the unpermute is then a plain
    sum that saves nothing), and shared-expert intermediates (TP-split).
    Expert and shared-expert GEMM inputs take ``Workload.gemm_element_bytes`` (1 B under FP8);
    the routed experts' GLU inputs 1 B under ``Workload.fp8_glu_inputs``.
    """
    geometry, moe = workload.geometry, workload.geometry.moe
    if moe is None:
        raise MosaicInputError("activation kind 'moe' needs a geometry with an moe section")
    h = geometry.d_model
    gemm_in = workload.gemm_element_bytes
    routed = routed_tokens(workload, plans)
    copies = expert_copies(workload, plans)
    norm = 2 * ACTIVATION_BYTES * routed * h
    router = routed * (2 * FP32_BYTES * moe.experts + (INDEX_BYTES + FP32_BYTES) * moe.top_k)
    # the busiest EP rank's routed copies (perf/routing_load.py: a learned router's
    # imbalance, a padded capacity), whose saved expert tensors set the peak as its GEMMs
    # set the time
    busiest = copies * routed_load_factor(workload, plans)
    expert_inputs = gemm_in * busiest * h
    # SwiGLU inputs cached in FP8 (Workload.fp8_glu_inputs; DeepSeek-V3 report Sec. 3.3.3)
    glu_in = 1 if workload.fp8_glu_inputs else ACTIVATION_BYTES
    experts = _ffn_bytes(busiest, moe.expert_ffn / plans.etp, geometry.glu, gemm_in, glu_in)
    combine = 0.0 if workload.traits.moe_probs_in_activation else (
        ACTIVATION_BYTES * moe.top_k * routed * h)
    shared_width = moe.shared_total_width / plans.tp
    shared = _ffn_bytes(tokens_per_rank(workload, plans), shared_width, geometry.glu, gemm_in)
    return norm + router + expert_inputs + experts + combine + shared


def mamba_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Bytes one Mamba-2 layer saves per micro-batch (Megatron-Core MambaMixer in training
    runs mamba_ssm's mamba_split_conv1d_scan_combined, state-spaces/mamba @ e9594ce
    ssd_combined.py, which saves the input projection's output z, x, B, C, dt and the
    scan output before its gate, and recomputes the convolution in the backward): the norm
    input and the input projection's input (SP-sharded, as an attention layer's), those
    two, the gated RMSNorm's input and the output projection's input (at the GEMM input's
    precision)."""
    mamba = workload.geometry.mamba
    if mamba is None:
        raise MosaicInputError("activation kind 'mamba' needs a geometry with a mamba section")
    return _mixer_layer_bytes(workload, plans, ACTIVATION_BYTES * (
        mamba.in_proj_width + 2 * mamba.inner_width), mamba.inner_width)


def _mixer_layer_bytes(workload: Workload, plans: ParallelPlans, saved_bytes_per_token: float,
                       out_proj_width: int) -> np.ndarray:
    """A state-space mixer layer's saved bytes: its norm input and input projection's input
    (SP-sharded, as an attention layer's), then per token ``saved_bytes_per_token`` of its
    own tensors and the output projection's input at the GEMM input's precision, both over
    tp."""
    tokens, tp = tokens_per_rank(workload, plans), plans.tp
    gemm_in = workload.gemm_element_bytes
    sequence_region = (ACTIVATION_BYTES + gemm_in) * tokens * workload.geometry.d_model / (
        sequence_shard_divisor(plans))
    return sequence_region + tokens * (saved_bytes_per_token + gemm_in * out_proj_width) / tp


def gdn_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Bytes one gated DeltaNet layer saves per micro-batch (Megatron-Core GatedDeltaNet,
    megatron/core/ssm/gated_delta_net, over flash-linear-attention's chunk_gated_delta_rule,
    whose autograd function keeps q, k, v, the decay and beta, and the solved C×C block):
    the norm input and the input projection's input (SP-sharded), the projection's output
    (the convolution's input and z), the convolution's output (q, k, v), q and k repeated to
    the value heads when there are more of those, the C×C block per value head, the rule's
    output (the gated norm's input) and the output projection's input (at the GEMM input's
    precision)."""
    gdn = workload.geometry.gdn
    if gdn is None:
        raise MosaicInputError("activation kind 'gdn' needs a geometry with a gdn section")
    repeated = (2 * gdn.value_heads * gdn.key_head_dim
                if gdn.value_heads > gdn.key_heads else 0)
    return _mixer_layer_bytes(workload, plans, ACTIVATION_BYTES * (
        gdn.in_proj_width + gdn.conv_channels + repeated + gdn.value_heads * gdn.chunk_size
        + gdn.value_width), gdn.value_width)


def layer_input_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """A block's input, all full recomputation keeps: 2sbh, SP-sharded (Korthikanti Sec. 5)."""
    tokens = tokens_per_rank(workload, plans)
    return ACTIVATION_BYTES * tokens * workload.geometry.d_model / sequence_shard_divisor(plans)


@plan_key(*BLOCK_ACTIVATION_KEY, remember=True)  # (read by every stage)
def layer_working_set_bytes(
    workload: Workload, plans: ParallelPlans, kind: LayerKind
) -> np.ndarray:
    """Everything one block saves with no recomputation (also its recompute working set);
    a hybrid model's layer saves its own part of a block (a Mamba layer
    :func:`mamba_activation_bytes`)."""
    hybrid = {"mamba": mamba_activation_bytes, "gdn": gdn_activation_bytes,
              "attention": attention_activation_bytes,
              "mlp": dense_mlp_activation_bytes, "moe_layer": moe_block_activation_bytes}
    if kind in hybrid:
        return hybrid[kind](workload, plans)
    block = (
        moe_block_activation_bytes(workload, plans)
        if kind == "moe"
        else dense_mlp_activation_bytes(workload, plans)
    )
    return (attention_activation_bytes(workload, plans) + block
            + eager_elementwise_extra_bytes(workload, plans, kind))


def eager_elementwise_extra_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind
                                  ) -> np.ndarray:
    """What eager fp32-upcasting model code (ElementwiseKernels.EAGER_FP32_NORM, not under
    torch.compile) saves in a block beyond the fused-kernel counts: 4 B per element of each
    of the block's two norms (EAGER_NORM_EXTRA_BYTES_PER_ELEMENT, on the tokens each norm
    sees: SP-sharded before attention, the routed tokens before an MoE part) and, for a GLU,
    the SiLU output of each FFN (dense, shared experts, every routed copy's expert)."""
    if elementwise_kernels(workload) is not ElementwiseKernels.EAGER_FP32_NORM:
        return np.zeros(len(plans))
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    norm_tokens = tokens / sequence_shard_divisor(plans)
    moe = geometry.moe
    if kind == "moe" and moe is not None:
        second_norm_tokens = routed_tokens(workload, plans)
        glu_elements = (expert_copies(workload, plans) * moe.expert_ffn / plans.etp
                        + tokens * moe.shared_total_width / plans.tp)
    else:
        second_norm_tokens = norm_tokens
        glu_elements = tokens * geometry.ffn / plans.tp
    norms = EAGER_NORM_EXTRA_BYTES_PER_ELEMENT * (norm_tokens + second_norm_tokens) * (
        geometry.d_model)
    glu = EAGER_GLU_EXTRA_BYTES_PER_ELEMENT * glu_elements if geometry.glu else 0.0
    return norms + glu


def _attention_matmul_widths(workload: Workload, plans: ParallelPlans) -> list[np.ndarray]:
    """Per-token output widths (per TP rank) of a block's attention matmuls in forward order,
    the aten.mm calls torch's per-op SAC counts. GQA/MHA: Q, K, V, O (K/V split over
    min(tp, kv_heads)). MLA: its input projections (:func:`~mosaic.perf.shapes.
    mla_input_projections`), then wo. The output projection's partial sum is full width."""
    geometry, tp = workload.geometry, plans.tp
    full = np.full(len(plans), 1.0)
    if geometry.attention is AttentionKind.MLA and geometry.mla is not None:
        return [*(width for _, width in mla_input_projections(workload, plans)),
                geometry.d_model * full]
    widths = attention_widths(geometry)
    half_kv = widths.key_value_per_rank(tp) / 2
    return [widths.query / tp, half_kv, half_kv, geometry.d_model * full]


def _per_op_sac_attention_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """What per-op SAC keeps of a block up to its FFN or MoE part: the block input (2sbh,
    SP-sharded), the 1st, 3rd, ... attention matmul outputs (torchtitan's _op_sac policy
    saves every second aten.mm of a block: Q and V of Q, K, V, O; wq and wkv_b of MLA's
    wq, wkv_a, wkv_b, wo; bf16) and the attention kernel's output with its softmax
    statistics."""
    widths = attention_widths(workload.geometry)
    tokens = tokens_per_rank(workload, plans)
    saved_width = sum(_attention_matmul_widths(workload, plans)[0::2]) + widths.output / plans.tp
    return (layer_input_bytes(workload, plans) + ACTIVATION_BYTES * tokens * saved_width
            + softmax_statistics_bytes(workload, plans))


def _saved_after_attention(workload: Workload, plans: ParallelPlans,
                           matmuls: list[np.ndarray]) -> np.ndarray:
    """Bytes of the every-second matmul outputs after the attention part: ``matmuls`` are
    the (tokens × width) element counts in forward order; the count continues from the
    attention matmuls, so after an even number the first is saved, after an odd the
    second."""
    parity = len(_attention_matmul_widths(workload, plans)) % 2
    return ACTIVATION_BYTES * sum(matmuls[parity::2], np.zeros(len(plans)))


def per_op_sac_dense_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """A dense block under per-op SAC: the attention part, then every second matmul output
    continuing the count in forward order W1, W3, W2 (GLU) or W1, W2 (bf16, TP-split widths;
    the down projection's partial sum is full width): W1 and W2 after Q, K, V, O."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    ffn = tokens * geometry.ffn / plans.tp
    matmuls = [ffn, *([ffn] if geometry.glu else []), tokens * geometry.d_model]
    return (_per_op_sac_attention_bytes(workload, plans)
            + _saved_after_attention(workload, plans, matmuls))


def per_op_sac_moe_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """An MoE block under torchtitan's per-op SAC. Its save list holds aten.mm, the
    attention kernels and all_to_all_single, not the grouped expert GEMM
    (pytorch/torchtitan, models/*/infra/parallelize.py ``_op_sac_save_list``), so the routed
    experts are recomputed from the dispatched tokens. Saved: the attention part, every
    second of the router gate's logits and the shared experts' W1, W3, W2 outputs continuing
    the block's matmul count (after Q, K, V, O: the gate and W3), and with ep > 1 the
    dispatch and combine all-to-all outputs (K·T·etp token copies each)."""
    geometry, moe = workload.geometry, workload.geometry.moe
    if moe is None:
        raise MosaicInputError("per-op SAC of an MoE block needs a geometry with an moe section")
    tokens = tokens_per_rank(workload, plans)
    matmuls = [routed_tokens(workload, plans) * moe.experts]
    if moe.shared_experts:
        shared = tokens * moe.shared_total_width / plans.tp
        matmuls += [shared, *([shared] if geometry.glu else []), tokens * geometry.d_model]
    all_to_all = np.where(plans.ep > 1, 2 * ACTIVATION_BYTES * expert_copies(workload, plans)
                          * geometry.d_model, 0.0)
    return (_per_op_sac_attention_bytes(workload, plans)
            + _saved_after_attention(workload, plans, matmuls) + all_to_all)


def save_dots_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind) -> np.ndarray:
    """A block under a save-the-matmuls policy (SelectiveRecompute.SAVE_DOTS: JAX
    checkpoint_dots_with_no_batch_dims + the attention context, MaxText remat_policy
    minimal_flash): the block input (the remat boundary), every weight matmul's output in
    bf16 (the attention projections, then W1, W3, W2; an MoE block's router logits, each
    routed copy's expert outputs and the shared experts' outputs) and the attention context.
    Norms, activations, rotary embedding and the residual adds are recomputed, and so are
    the flash kernel's softmax statistics (not a matmul output, not named): its forward
    runs again in backward."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    attention = (sum(_attention_matmul_widths(workload, plans))
                 + attention_widths(geometry).output / plans.tp)
    moe = geometry.moe
    up_outputs = 2 if geometry.glu else 1  # W1 and W3 (GLU) or W1
    if kind == "dense" or moe is None:
        ffn_widths = up_outputs * geometry.ffn / plans.tp + geometry.d_model
        ffn = tokens * ffn_widths
    else:
        expert_widths = up_outputs * moe.expert_ffn / plans.etp + geometry.d_model
        ffn = (routed_tokens(workload, plans) * moe.experts
               + expert_copies(workload, plans) * expert_widths)
        if moe.shared_experts:
            shared = moe.shared_total_width / plans.tp
            ffn = ffn + tokens * (up_outputs * shared + geometry.d_model)
    return layer_input_bytes(workload, plans) + ACTIVATION_BYTES * (tokens * attention + ffn)


def _selective_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind,
                     working_set: np.ndarray) -> np.ndarray:
    """What SELECTIVE keeps: per-op SAC on the stacks that run it, else what Megatron's
    recompute_modules leave (core_attn, the default, drops only the softmax statistics), or
    with a block-level policy the input of the checkpointed share of blocks and the working
    set of the others."""
    if workload.traits.selective_recompute is SelectiveRecompute.BLOCKS:
        share = workload.checkpointed_block_fraction
        return share * layer_input_bytes(workload, plans) + (1 - share) * working_set
    if workload.traits.selective_recompute is SelectiveRecompute.SAVE_DOTS:
        return save_dots_bytes(workload, plans, kind)
    if workload.traits.selective_recompute is SelectiveRecompute.PER_OP:
        if kind == "dense":
            return per_op_sac_dense_bytes(workload, plans)
        return per_op_sac_moe_bytes(workload, plans)
    dropped = recompute_module_bytes(workload, plans, kind)
    if "core_attn" in workload.selective_recompute_modules and kind in _ATTENTION_KINDS:
        dropped = dropped + softmax_statistics_bytes(workload, plans)
    return working_set - dropped


def recompute_module_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind
                           ) -> np.ndarray:
    """Saved bytes of one block that Megatron-Core's fine-grained selective recompute drops
    beyond core_attn (its default; the caller drops the softmax statistics for it)
    (``Workload.recompute_modules``;
    megatron/core/transformer/transformer_config.py ``recompute_modules``):

    * mla_up_proj: the up-projected, rotated Q, K and V of MLA (recomputed from the kept
      latents before core attention's backward);
    * layernorm: outputs of the norms not fused into a Transformer Engine linear (the MoE
      block's pre-MLP norm; MLA's input norm and its q/kv latent norms);
    * moe_act: the routed experts' activation output (GEMM-2 input, recomputed from GEMM-1's);
    * mlp (dense blocks) / moe (MoE blocks): everything of the FFN part but its input;
    * shared_experts: the shared experts' intermediates.
    """
    modules = set(workload.recompute_modules or ())
    geometry = workload.geometry
    tokens, tp = tokens_per_rank(workload, plans), plans.tp
    dropped = np.zeros(len(plans))
    mla = geometry.attention is AttentionKind.MLA and geometry.mla is not None
    if "mla_up_proj" in modules and mla:
        widths = attention_widths(geometry)
        dropped += ACTIVATION_BYTES * tokens * (widths.query / tp
                                                + widths.key_value_per_rank(tp))
    if "layernorm" in modules and mla:
        assert geometry.mla is not None
        latents = (geometry.mla.q_lora_rank or 0) + geometry.mla.kv_lora_rank
        dropped += ACTIVATION_BYTES * (tokens * geometry.d_model / sequence_shard_divisor(plans)
                                       + tokens * latents)
    ffn_part = _FFN_PART[kind]
    if ffn_part is None:  # a hybrid model's mixer layer: its norm is fused into a TE linear
        return dropped
    if ffn_part == "dense":
        if "mlp" in modules:
            dropped += dense_mlp_activation_bytes(workload, plans) - layer_input_bytes(
                workload, plans)
        return dropped
    moe = geometry.moe
    if moe is None:
        return dropped
    routed = routed_tokens(workload, plans)
    if "moe" in modules:
        return dropped + moe_block_activation_bytes(workload, plans) - (
            ACTIVATION_BYTES * routed * geometry.d_model)
    if "layernorm" in modules:
        dropped += ACTIVATION_BYTES * routed * geometry.d_model
    if "moe_act" in modules:
        dropped += (workload.gemm_element_bytes * expert_copies(workload, plans)
                    * moe.expert_ffn / plans.etp)
    if "shared_experts" in modules:
        dropped += _ffn_bytes(tokens, moe.shared_total_width / tp, geometry.glu,
                              workload.gemm_element_bytes)
    return dropped


@plan_key(*BLOCK_ACTIVATION_KEY, "checkpointing", remember=True)  # (read by every stage)
def activation_bytes_per_layer(
    workload: Workload, plans: ParallelPlans, kind: LayerKind = "dense"
) -> np.ndarray:
    """Bytes one block keeps per micro-batch under each plan's checkpointing mode.

    NONE keeps the working set; SELECTIVE recomputes the attention core (Korthikanti Sec. 5),
    which under flash attention only drops the softmax statistics, or runs per-op SAC on
    the stacks that use it (stack trait ``selective_recompute``); FULL keeps the input of
    the recomputed share of blocks and the working set of the rest (on average per block,
    ``Workload.checkpointed_block_fraction``).
    """
    if kind not in _FFN_PART:
        raise MosaicInputError(f"activation kind must be one of {', '.join(_FFN_PART)}, got "
                               f"{kind!r}")
    working_set = layer_working_set_bytes(workload, plans, kind)
    selective = _selective_bytes(workload, plans, kind, working_set)
    mode = plans.checkpointing
    fraction = workload.checkpointed_block_fraction
    full = fraction * layer_input_bytes(workload, plans) + (1.0 - fraction) * working_set
    return np.select(
        [mode == Checkpointing.FULL, mode == Checkpointing.SELECTIVE],
        [full, selective],
        default=working_set,
    )


@plan_key(*STAGE_ACTIVATION_KEY)
def stage_activation_bytes(workload: Workload, plans: ParallelPlans, stage: Stage) -> np.ndarray:
    """Activations a stage holds at its peak.

    In-flight micro-batches × the stage's blocks; under FULL recomputation plus one block's
    working set while it is recomputed; on the last stage plus the final-norm and LM-head
    inputs of the micro-batch in its backward. Under DualPipe the rank also holds its
    mirror stage's in-flight chunks (:func:`~mosaic.perf.schedule.dualpipe_in_flight`) and,
    on the rank of both ends, the LM head's inputs (:func:`~mosaic.perf.schedule.lm_head_stage`).
    """
    per_microbatch, working_set, blocks = _stage_blocks_activations(workload, plans, stage)
    if uses_dualpipe(workload):
        mirror, mirror_working_set, _ = _stage_blocks_activations(
            workload, plans, MIRROR_STAGE[stage])
        per_microbatch_mirror = mirror
        working_set = np.where(plans.pp > 1, np.maximum(working_set, mirror_working_set),
                               working_set)
    else:
        per_microbatch_mirror = np.zeros(len(plans))
    recomputes_blocks = plans.checkpointing == Checkpointing.FULL
    if (workload.traits.selective_recompute is SelectiveRecompute.BLOCKS
            and workload.checkpointed_block_fraction > 0):
        # a checkpointed block's working set is rebuilt in backward, as under FULL
        recomputes_blocks = recomputes_blocks | (plans.checkpointing == Checkpointing.SELECTIVE)
    recompute = np.where(recomputes_blocks, working_set, 0.0)
    # On the stage with the LM head the loss working set (``logits``) is freed before any
    # block is recomputed: the loss and LM-head backward finish first, then the last block's
    # forward is rerun. The two peaks never coexist, so the recompute set counts only its
    # excess over the loss's.
    head_stage = lm_head_stage(workload, stage)
    lm_head = _holds_lm_head(plans, head_stage)
    recompute = np.where(lm_head, np.maximum(
        recompute - logits_bytes(workload, plans, head_stage), 0.0), recompute)
    layer_input = layer_input_bytes(workload, plans)
    head_inputs = np.where(lm_head, 2 * layer_input, 0)
    # an MTP module's projection input [norm(h); norm(embedding)] is two layer inputs wide
    # and saved for its backward with the module's block (counted among the blocks)
    layouts = workload.pipeline_layouts
    mtp_inputs = 2 * mtp_modules(workload.geometry, plans, stage, layouts) * layer_input
    mirror_mtp_inputs = (2 * mtp_modules(workload.geometry, plans, MIRROR_STAGE[stage], layouts)
                         * layer_input if uses_dualpipe(workload) else 0.0)
    in_flight = in_flight_microbatches(workload, plans, stage)
    resident = resident_block_fraction(workload, blocks)
    mirror_in_flight = mirror_in_flight_microbatches(workload, plans, stage)
    return ((in_flight * (per_microbatch + mtp_inputs)
             + mirror_in_flight * (per_microbatch_mirror + mirror_mtp_inputs)) * resident
            + recompute + head_inputs)


def _stage_blocks_activations(workload: Workload, plans: ParallelPlans, stage: Stage
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(saved bytes of one micro-batch through the stage's blocks, the largest block working
    set, the stage's blocks)."""
    geometry = workload.geometry
    if geometry.is_hybrid:
        return _stage_hybrid_activations(workload, plans, stage)
    blocks, moe_blocks = stage_layer_counts(geometry, plans, stage,
                                            workload.uneven_pipeline_stages,
                                            workload.vocab_in_pipeline_split,
                                            workload.pipeline_layouts)
    dense_blocks = blocks - moe_blocks
    # The working sets first: activation_bytes_per_layer's plan_key sets then gather these
    # per-key values instead of computing them again (factorise._parent_values).
    working_sets = {kind: layer_working_set_bytes(workload, plans, kind)
                    for kind in (("dense", "moe") if geometry.is_moe else ("dense",))}
    per_microbatch = dense_blocks * activation_bytes_per_layer(workload, plans, "dense")
    working_set = np.where(dense_blocks > 0, working_sets["dense"], 0)
    if geometry.is_moe:
        per_microbatch = per_microbatch + moe_blocks * activation_bytes_per_layer(
            workload, plans, "moe"
        )
        working_set = np.maximum(working_set, np.where(moe_blocks > 0, working_sets["moe"], 0))
    return per_microbatch, working_set, blocks


def _stage_hybrid_activations(workload: Workload, plans: ParallelPlans, stage: Stage
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_stage_blocks_activations` of a hybrid model: each kind's layers on the stage
    times its saved bytes, the largest working set of a kind the stage holds, its layers."""
    geometry = workload.geometry
    held = stage_hybrid_counts(geometry, plans, stage, workload.uneven_pipeline_stages,
                               workload.vocab_in_pipeline_split)
    per_microbatch = np.zeros(len(plans))
    working_set = np.zeros(len(plans))
    for symbol, kind in HYBRID_LAYER_KINDS.items():
        if not geometry.hybrid_count(symbol):
            continue
        per_microbatch = per_microbatch + held[symbol] * activation_bytes_per_layer(
            workload, plans, kind)
        working_set = np.maximum(working_set, np.where(
            held[symbol] > 0, layer_working_set_bytes(workload, plans, kind), 0.0))
    layers = sum(held.values(), start=np.zeros_like(plans.pp))
    return per_microbatch, working_set, layers


def offloaded_blocks(workload: Workload, blocks: np.ndarray) -> np.ndarray:
    """Blocks of a stage whose saved activations go to host memory
    (``Workload.offloaded_activation_layers``, Megatron-Core cpu_offloading_num_layers), at
    most all but the stage's last block: its activations are used at once by the backward."""
    return np.minimum(workload.offloaded_activation_layers, np.maximum(blocks - 1, 0))


def mean_block_activation_bytes(workload: Workload, plans: ParallelPlans, blocks: np.ndarray,
                                moe_blocks: np.ndarray) -> np.ndarray:
    """Saved bytes of one micro-batch through a stage's average block: its MoE and dense
    blocks' :func:`activation_bytes_per_layer`, weighted by their counts; a hybrid model's
    layer kinds by their shares of its pattern."""
    geometry = workload.geometry
    if geometry.is_hybrid:
        return sum((share * activation_bytes_per_layer(workload, plans, HYBRID_LAYER_KINDS[kind])
                    for kind, share in geometry.hybrid_shares.items() if share),
                   start=np.zeros(len(plans)))
    per_block = activation_bytes_per_layer(workload, plans, "dense")
    if geometry.is_moe:
        moe_share = moe_blocks / np.maximum(blocks, 1)
        per_block = ((1 - moe_share) * per_block
                     + moe_share * activation_bytes_per_layer(workload, plans, "moe"))
    return per_block


def resident_block_fraction(workload: Workload, blocks: np.ndarray) -> np.ndarray:
    """Share of a stage's saved block activations that stays on the GPU under activation
    CPU offloading (``Workload.offloaded_activation_layers``; Megatron-Core
    cpu_offloading_num_layers over Transformer Engine's get_cpu_offload_context). The copy
    of one offloaded block to the host overlaps the next block's compute and its reload the
    previous block's backward (TE cpu_offload.py, AsyncDoubleBufferGroupOffloadHandler),
    so one offloaded block's tensors are resident at a time: blocks − offloaded + 1 of
    ``blocks`` (all of them when nothing is offloaded)."""
    offloaded = offloaded_blocks(workload, blocks)
    resident = np.where(offloaded > 0, blocks - offloaded + 1, blocks)
    return np.where(blocks > 0, resident / np.maximum(blocks, 1), 1.0)


def loss_bytes_per_logit(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Peak bytes per logit element of the LM head output and the loss over it, by the
    workload's loss (:attr:`Workload.loss_implementation`; constants above: 6 B fused, 4 B
    compiled, 10 B fused out of place (Megatron-Core up to core_v0.7), 8 B eager bf16, 12 B
    eager fp32 upcast, 16 B eager under TP's loss_parallel,
    2 B Transformer Engine's in-place kernel)."""
    loss = workload.loss_implementation
    if loss is not CrossEntropy.FP32_UPCAST:
        fixed = {CrossEntropy.FUSED: LOGITS_BYTES_PER_ELEMENT,
                 CrossEntropy.FUSED_OUT_OF_PLACE: OUT_OF_PLACE_LOSS_BYTES_PER_ELEMENT,
                 CrossEntropy.COMPILED: COMPILED_LOSS_BYTES_PER_ELEMENT,
                 CrossEntropy.BF16: BF16_LOSS_BYTES_PER_ELEMENT,
                 CrossEntropy.TE: TE_LOSS_BYTES_PER_ELEMENT}[loss]
        return np.full(len(plans), float(fixed))
    return np.where(plans.tp > 1, float(LOSS_PARALLEL_BYTES_PER_ELEMENT),
                    float(UPCAST_LOSS_BYTES_PER_ELEMENT))


@plan_key("tp", "pp", "cp", "micro_batch")
def logits_bytes(workload: Workload, plans: ParallelPlans, stage: Stage) -> np.ndarray:
    """Vocab-parallel logits of one micro-batch, b·s/cp × V/tp elements, at
    :func:`loss_bytes_per_logit`, on the stage holding the LM head; with a chunked loss
    (``Workload.loss_chunks``) one chunk's: torchtitan's ChunkedCELoss runs the LM head and
    the loss chunk by chunk along the sequence, each chunk's backward before the next
    chunk's forward ("reduces peak memory from O(B*L*V) to O(B*L/N*V)", components/loss.py
    @ 786e26f8e)."""
    elements = (tokens_per_rank(workload, plans) * workload.geometry.vocab / plans.tp
                / workload.loss_chunks)
    per_element = loss_bytes_per_logit(workload, plans)
    # Each MTP module's logits and loss come from the same output layer on the same rank,
    # all computed in the forward pass and held to the backward (Megatron-Core
    # multi_token_prediction.py process_mtp_loss, called from GPTModel's post-processing).
    losses = 1 + workload.geometry.mtp_layers
    return np.where(_holds_lm_head(plans, stage), losses * per_element * elements, 0.0)


# --- Buffers -----------------------------------------------------------------------------
@plan_key(*BUFFER_KEY, carried=("params",))
def communication_buffer_bytes(
    workload: Workload, plans: ParallelPlans, params: StageParameters, stage: Stage
) -> np.ndarray:
    """Transient communication buffers at the stage's peak.

    * FSDP/HSDP: the current unit (at worst the largest) and the prefetched next block
      gathered in the stack's gather dtype, plus the current unit's unsharded fp32 gradient
      before its reduce-scatter (Zhao et al. 2023, PyTorch FSDP, Sec. 3.3-3.4: backward
      prefetching keeps two gathered units alive). With pp > 1 the whole stage stays
      gathered and its gradients accumulate unsharded until the last micro-batch: torchtitan
      does not reshard after forward under PP, and torch.distributed.pipelining turns
      gradient sync off for all but the last backward
      (set_requires_gradient_sync(last_backward)). ``Workload.fsdp_keep_gathered`` does the
      same without PP. Unsharded gradients accumulate only over several micro-batches: with
      one, each unit's is reduce-scattered in its backward (one unit's, as above).
    * ZeRO-2: one unit's unsharded fp32 gradient bucket before its reduce-scatter.
    * Plain DDP / ZeRO-1 in Megatron-Core: none extra; buckets are views into the contiguous
      gradient buffer already counted under ``gradients``.
    * EP > 1: the all-to-all send buffer of permuted tokens, K·T·h in bf16 (the receive
      side is the expert input, counted under ``activations``).
    * PP > 1: one received activation and one received gradient (2sbh each, SP-sharded).
    """
    layout = _buffer_layout(workload, plans)
    experts_outside = layout.experts_outside
    unit = np.where(experts_outside, params.largest_unit_without_experts, params.largest_unit)
    block = np.where(experts_outside, params.largest_block_without_experts,
                     params.largest_block)
    stage_params = np.where(experts_outside, params.non_expert, params.total)
    # Gathered units in the stack's gather dtype (bf16, or fp32 for weights at rest in fp32).
    per_unit = workload.traits.fsdp_gather_bytes_per_param * (unit + block)
    grad_bytes = gradient_bytes_per_param(workload)
    per_unit = per_unit + grad_bytes * unit
    if workload.traits.zero_runtime == "deepspeed":
        # DeepSpeed ZeRO-3: up to stage3_max_live_parameters gathered in bf16, and the
        # current unit's model-dtype gradients before they enter the reduce bucket.
        grad_bytes = DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM
        per_unit = (WEIGHT_BYTES_PER_PARAM
                    * np.minimum(DEEPSPEED_MAX_LIVE_PARAMETERS, stage_params)
                    + grad_bytes * unit)
    whole_stage = (WEIGHT_BYTES_PER_PARAM * stage_params
                   + grad_bytes * np.where(layout.accumulating, stage_params, unit))
    fsdp = np.where(layout.fully_sharded, np.where(layout.gathered, whole_stage, per_unit),
                    0.0)
    zero2 = np.where(layout.zero2, grad_bytes * unit, 0.0)
    buffers = fsdp + zero2 + layout.pipeline
    if workload.geometry.moe is not None:
        _, moe_blocks = stage_layer_counts(workload.geometry, plans, stage,
                                           workload.uneven_pipeline_stages,
                                           workload.vocab_in_pipeline_split,
                                           workload.pipeline_layouts)
        buffers = buffers + np.where(layout.ep_sends & (moe_blocks > 0), layout.ep_send, 0.0)
    return buffers


@dataclass(frozen=True)
class _BufferLayout:
    """What :func:`communication_buffer_bytes` reads of a plan whatever the stage."""

    fully_sharded: np.ndarray  # FSDP or HSDP
    experts_outside: np.ndarray  # routed experts resident, never gathered
    accumulating: np.ndarray  # more than one micro-batch
    gathered: np.ndarray  # FSDP units stay gathered through the step
    zero2: np.ndarray  # ZeRO-2
    pipeline: np.ndarray  # bytes of the received activation and gradient (pp > 1)
    ep_sends: np.ndarray  # ep > 1: an MoE block's all-to-all sends from a buffer
    ep_send: np.ndarray  # bytes of that send buffer (0 for a dense model)


@plan_key(*BUFFER_KEY, remember=True)  # (read by every stage)
def _buffer_layout(workload: Workload, plans: ParallelPlans) -> _BufferLayout:
    """The stage-independent part of :func:`communication_buffer_bytes`, computed once for
    the stages that read it."""
    sharding = plans.sharding
    # Routed experts outside FSDP (their expert-DP group is one rank on a stack that then
    # leaves them out) are never gathered: they are resident in ``weights``.
    experts_outside = np.zeros(len(plans), dtype=bool)
    if workload.traits.fsdp_skips_unsharded_experts:
        _, expert_degree = shard_degrees(plans)
        experts_outside = (plans.ep > 1) & (expert_degree == 1)
    moe = workload.geometry.moe
    send = np.zeros(len(plans))
    if moe is not None:
        send = ACTIVATION_BYTES * moe.top_k * routed_tokens(workload, plans)
        send = send * workload.geometry.d_model
    return _BufferLayout(
        fully_sharded=_sharding_in(sharding, _FULLY_SHARDED),
        experts_outside=experts_outside,
        accumulating=n_microbatches(workload, plans) > 1,
        gathered=fsdp_gathered_through_step(workload, plans),
        zero2=sharding == Sharding.ZERO2,
        pipeline=np.where(plans.pp > 1, 2 * layer_input_bytes(workload, plans), 0.0),
        ep_sends=plans.ep > 1,
        ep_send=send,
    )


# --- Breakdown ---------------------------------------------------------------------------
@plan_key(*PARAMETER_STATE_KEY, remember=without_top_k)
def parameter_state_bytes(workload: Workload, plans: ParallelPlans, stage: Stage
                          ) -> dict[str, np.ndarray]:
    """Weights, gradients, optimizer states and master weights per GPU of the first or last
    stage, after the plan's (E)DP sharding."""
    params = rank_parameters(workload, plans, stage)
    return {
        "weights": weight_bytes(workload, params, plans),
        "gradients": stored_gradient_bytes(workload, plans)
        * _sharded_params(params, plans, _GRADIENTS_SHARDED),
        "optimizer_states": optimizer_state_bytes(workload, params, plans),
        "master_weights": master_weight_bytes(workload, params, plans),
    }


def stage_memory_breakdown_bytes(
    workload: Workload, plans: ParallelPlans, stage: Stage
) -> dict[str, np.ndarray]:
    """Per-GPU bytes of the first or last pipeline stage, by component (see module doc)."""
    breakdown = {name: _rows(values, inverse)
                 for components, inverse in _stage_terms(workload, plans, stage)
                 for name, values in components.items()}
    breakdown["runtime_reserve"] = np.full(len(plans), float(RUNTIME_RESERVE_BYTES))
    return breakdown


def largest_components(breakdown: dict[str, np.ndarray], index: int, count: int = 2
                       ) -> list[tuple[str, float]]:
    """The ``count`` largest components of plan ``index`` as (name, bytes), largest first:
    what an out-of-memory plan should shrink first."""
    sizes = [(name, float(breakdown[name][index])) for name in COMPONENTS]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def total_memory_bytes(breakdown: dict[str, np.ndarray],
                       names: tuple[str, ...] = COMPONENTS) -> np.ndarray:
    """Sum of the components ``names`` (all by default) of a breakdown, added in that order
    (the values of np.sum over the stacked components, without building the stack)."""
    total = np.asarray(breakdown[names[0]], dtype=float)
    for name in names[1:]:
        total = total + breakdown[name]
    return total


def _stage_terms(workload: Workload, plans: ParallelPlans, stage: Stage
                 ) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """The components of a stage's breakdown but the runtime reserve, in COMPONENTS order,
    grouped by the term that computes them, per key: (components by name, inverse) per
    term (plan_key's ``per_key``: plan ``i`` takes row ``inverse[i]`` of each)."""
    params = rank_parameters(workload, plans, stage)
    states = parameter_state_bytes.per_key(workload, plans, stage)
    activations, activations_inverse = stage_activation_bytes.per_key(workload, plans, stage)
    logits, logits_inverse = logits_bytes.per_key(workload, plans, lm_head_stage(workload, stage))
    buffers, buffers_inverse = communication_buffer_bytes.per_key(workload, plans, params,
                                                                  stage)
    return [states, ({"activations": activations}, activations_inverse),
            ({"logits": logits}, logits_inverse),
            ({"communication_buffers": buffers}, buffers_inverse)]


def _stage_total(terms: list[tuple[dict[str, np.ndarray], np.ndarray]], reserve: np.ndarray
                 ) -> np.ndarray:
    """:func:`total_memory_bytes` of a stage from its terms per key (:func:`_stage_terms`):
    the components of one term are added per key, then gathered; the same additions in
    the same order."""
    total: np.ndarray | None = None
    for components, inverse in terms:
        rows = _rows(total_memory_bytes(components, tuple(components)), inverse)
        total = rows if total is None else np.add(total, rows, out=total)
    assert total is not None  # (a stage has terms)
    return np.add(total, reserve, out=total)


def _rows(per_key: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """Row ``inverse[i]`` of ``per_key`` for each plan ``i`` (a 0-d value for every plan)."""
    if per_key.ndim == 0:
        return np.full(inverse.shape, per_key)
    return per_key.take(inverse, mode="clip")


def _chosen(candidates: list[tuple[dict[str, np.ndarray], np.ndarray]], choice: np.ndarray
            ) -> dict[str, np.ndarray]:
    """Per plan ``i`` and component, row ``inverse[i]`` of the candidate ``choice[i]``, each
    candidate one stage's term (components per key, inverse). Candidates on one numbering
    of the keys (the same inverse) are gathered at once from their values side by side."""
    names, first = candidates[0]
    if all(inverse is first and all(np.ndim(values) == 1 for values in components.values())
           for components, inverse in candidates):
        keys = len(next(iter(names.values())))
        index = first + keys * choice  # candidate s's rows sit s·keys further on
        return {name: np.concatenate([components[name] for components, _ in candidates]
                                     ).take(index, mode="clip") for name in names}
    return {name: _choose(choice, [_rows(components[name], inverse)
                                   for components, inverse in candidates])
            for name in names}


def _choose(choice: np.ndarray, options: list[np.ndarray]) -> np.ndarray:
    """``np.choose`` for any number of options (numpy's takes at most 32)."""
    if len(options) <= 32:
        return np.choose(choice, options)
    return np.take_along_axis(np.stack(options), choice[None, :], axis=0)[0]


def _heaviest(workload: Workload, plans: ParallelPlans
              ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(breakdown of the heaviest stage, its pipeline rank) per plan.

    Candidates: the first stage (embedding, most in-flight micro-batches), the last (LM
    head, logits; it wins only when strictly heavier) and, when dense blocks sit among the
    MoE blocks (schedule.middle_stage_can_be_heaviest), a middle rank (rank 1), which can
    hold more MoE blocks than the first (it wins only when strictly heavier than both).
    Each stage's terms stay per key: their totals are gathered, and each component is
    gathered once, from the stage that wins.
    """
    # The blocks each stage holds, once per key over all plans (never gathered here): the
    # stage terms below (and the time model's) read them inside their own plan_key sets,
    # which gather these remembered per-key values instead of recomputing them
    # (factorise._parent_values).
    if workload.geometry.is_hybrid or workload.pipeline_layouts:
        return _heaviest_of(workload, plans, candidate_stages(
            workload.geometry, plans, workload.pipeline_layouts))
    middle = middle_stage_can_be_heaviest(workload.geometry)
    stages: tuple[Stage, ...] = ("first", "last", "middle") if middle else ("first", "last")
    for stage in stages:
        stage_layer_counts.per_key(workload.geometry, plans, stage,
                                   workload.uneven_pipeline_stages,
                                   workload.vocab_in_pipeline_split, workload.pipeline_layouts)
    reserve = np.full(len(plans), float(RUNTIME_RESERVE_BYTES))
    terms = {stage: _stage_terms(workload, plans, stage) for stage in stages}
    best = _stage_total(terms["first"], reserve)
    last_total = _stage_total(terms["last"], reserve)
    heavier = last_total > best
    choice = heavier.astype(np.intp)  # the position of the heaviest stage in ``stages``
    rank = np.where(heavier, plans.pp - 1, 0)
    if middle:
        chosen = np.flatnonzero(_stage_total(terms["middle"], reserve)
                                > np.maximum(best, last_total))
        choice[chosen] = 2
        rank[chosen] = stage_rank(plans, "middle")[chosen]
    breakdown = {name: values for term in range(len(terms["first"]))
                 for name, values in _chosen([terms[stage][term] for stage in stages],
                                             choice).items()}
    breakdown["runtime_reserve"] = reserve
    return breakdown, rank


def _heaviest_of(workload: Workload, plans: ParallelPlans, stages: tuple[Stage, ...]
                 ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(breakdown of the heaviest of ``stages``, its pipeline rank) per plan: a later stage
    wins only when strictly heavier (a hybrid model's candidates, every rank)."""
    reserve = np.full(len(plans), float(RUNTIME_RESERVE_BYTES))
    terms = [_stage_terms(workload, plans, stage) for stage in stages]
    best = _stage_total(terms[0], reserve)
    choice = np.zeros(len(plans), dtype=np.intp)
    rank = np.zeros_like(plans.pp)
    for position, stage in enumerate(stages[1:], start=1):
        total = _stage_total(terms[position], reserve)
        heavier = total > best
        best = np.where(heavier, total, best)
        choice[heavier] = position
        rank = np.where(heavier, stage_rank(plans, stage), rank)
    breakdown = {name: values for term in range(len(terms[0]))
                 for name, values in _chosen([stage_terms[term] for stage_terms in terms],
                                             choice).items()}
    breakdown["runtime_reserve"] = reserve
    return breakdown, rank


def memory_breakdown_bytes(workload: Workload, plans: ParallelPlans) -> dict[str, np.ndarray]:
    """Per-GPU bytes on the heaviest pipeline stage, by component, one entry per plan (the
    candidates of :func:`_candidate_stages`)."""
    return _heaviest(workload, plans)[0]


def heaviest_stage(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Pipeline rank of the heaviest stage per plan (0, 1 or pp−1; any rank for a hybrid
    model or a stated pipeline layout)."""
    return _heaviest(workload, plans)[1]


def feasibility(
    total_bytes: np.ndarray, capacity_bytes: float, usable_fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """(fits, overshoot_bytes): whether each total fits in usable_fraction of the device
    memory (the rest absorbs allocator fragmentation), and by how much it does not."""
    if not 0.0 < usable_fraction <= 1.0:
        raise MosaicInputError(f"usable_fraction must be in (0, 1], got {usable_fraction}")
    budget = capacity_bytes * usable_fraction
    total = np.asarray(total_bytes, dtype=float)
    return total <= budget, np.maximum(total - budget, 0.0)
