"""Parameters each GPU holds and their states: weights, gradients, optimizer moments and
fp32 master weights, by sharding mode and dtype (ZeRO, Rajbhandari et al. 2020, Sec. 5;
Megatron-Core distributed optimizer; paper Appendix D.1, Eq. 24).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from mosaic.arch import Geometry, HybridLayer, count_parameters
from mosaic.arch.counts import (
    MTP_MODULE_NORMS,
    hybrid_mixer_parameters,
    params_mtp_projection,
    params_per_norm,
)
from mosaic.perf.factorise import plan_key
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.memory.plan_keys import PARAMETER_STATE_KEY, STAGE_PARAMETER_KEY
from mosaic.perf.pipeline_layout import Layouts, StageSplit
from mosaic.perf.plan import ParallelPlans, Sharding
from mosaic.perf.schedule import (
    MIRROR_STAGE,
    Stage,
    candidate_stages,
    mtp_modules,
    stage_hybrid_counts,
    stage_layer_counts,
    uses_dualpipe,
)
from mosaic.perf.workload import OptimizerDtype, OptimizerKind, Workload
from mosaic.stacks import FsdpShardStorage

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
# DeepSpeed ZeRO (stack trait ``zero_runtime`` deepspeed), deepspeed @ v0.11.1:
# runtime/engine.py get_data_types keeps gradients in the model dtype under any ZeRO stage
# (fp32 accumulation only for bf16 without ZeRO), and stage3.py allocates the gradient
# partitions (grad_partitions_flat_buffer) in that dtype: 2 B per parameter, sharded.
DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM = BF16_GRADIENT_BYTES_PER_PARAM
FULLY_SHARDED = (Sharding.FSDP, Sharding.HSDP)
GRADIENTS_SHARDED = (Sharding.ZERO2, Sharding.FSDP, Sharding.HSDP)
STATES_SHARDED = (Sharding.ZERO1, Sharding.ZERO2, Sharding.FSDP, Sharding.HSDP)


def _holds_embedding(plans: ParallelPlans, stage: Stage) -> np.ndarray:
    return np.full(len(plans), stage == "first") | (plans.pp == 1)


def holds_lm_head(plans: ParallelPlans, stage: Stage) -> np.ndarray:
    return np.full(len(plans), stage == "last") | (plans.pp == 1)


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
                     split: StageSplit | None = None, vocab_in_split: bool = False,
                     layouts: Layouts = ()) -> StageParameters:
    """Per-GPU parameter groups of the first or last stage (see :class:`StageParameters`)."""
    counts = count_parameters(geometry)
    blocks, moe_blocks = stage_layer_counts(geometry, plans, stage, split,
                                            vocab_in_split, layouts)
    dense_blocks = blocks - moe_blocks
    tp = plans.tp.astype(float)
    expert_split = (plans.ep * plans.etp).astype(float)
    lm_head = holds_lm_head(plans, stage)
    # Tied embeddings still need a copy on the last stage when pp > 1 (Megatron-LM): the
    # weight matrix, plus the head's bias where it has one (counts.lm_head holds the bias)
    tied_copy = geometry.vocab * geometry.d_model if geometry.tied_embeddings else 0
    lm_head_params = np.where(plans.pp > 1, counts.lm_head + tied_copy, counts.lm_head)
    embedding = np.where(_holds_embedding(plans, stage), counts.embedding / tp, 0.0)
    head = np.where(lm_head, lm_head_params / tp, 0.0)

    experts_per_block = counts.experts * counts.routed_expert / expert_split
    # An MTP module's block is among the stage's blocks (schedule.mtp_modules; a hybrid
    # model's depth layers among its layers, schedule.stage_hybrid_counts); its
    # projection is column-parallel over TP (Megatron-Core MultiTokenPredictionLayer
    # eh_proj, gather_output=False), its norms replicated, and its rank builds an input
    # embedding of its own (GPTModel: "if self.pre_process or self.mtp_process: self.embedding
    # = LanguageModelEmbedding(...)", megatron/core/models/gpt/gpt_model.py @ d98e8a64dd;
    # the same in megatron/core/models/hybrid/hybrid_model.py).
    mtp = mtp_modules(geometry, plans, stage, layouts)
    embedding = np.where((mtp > 0) & (embedding == 0), counts.embedding / tp, embedding)
    mtp_split = mtp * params_mtp_projection(geometry.d_model) / tp
    mtp_replicated = mtp * MTP_MODULE_NORMS * params_per_norm(geometry.d_model, geometry.norm)
    if geometry.is_hybrid:
        hybrid = _hybrid_stage_parameters(geometry, plans, stage, split,
                                          vocab_in_split, embedding, head, experts_per_block)
        return replace(hybrid, dense=hybrid.dense + mtp_split,
                       replicated=hybrid.replicated + mtp_replicated)
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
                             stage_split: StageSplit | None, vocab_in_split: bool,
                             embedding: np.ndarray,
                             head: np.ndarray, experts_per_layer: np.ndarray
                             ) -> StageParameters:
    """:func:`stage_parameters` of a hybrid model: each layer kind's TP-split matrices (a
    Mamba mixer splits its heads and groups, its convolution and per-head tensors too:
    megatron/core/ssm/mamba_mixer.py marks them tensor_model_parallel), one norm per
    layer, the MoE layers' routers and routed experts."""
    counts = count_parameters(geometry)
    held = stage_hybrid_counts(geometry, plans, stage, stage_split, vocab_in_split)
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
    lm_head = holds_lm_head(plans, stage)
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
    geometry, split = workload.geometry, workload.stage_split
    vocab_split = workload.vocab_in_pipeline_split
    layouts = workload.pipeline_layouts
    own = stage_parameters(geometry, plans, stage, split, vocab_split, layouts)
    if not uses_dualpipe(workload):
        return own
    mirror = stage_parameters(geometry, plans, MIRROR_STAGE[stage], split, vocab_split, layouts)
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


def sharding_in(sharding: np.ndarray, modes: tuple[Sharding, ...]) -> np.ndarray:
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
    sharded = sharding_in(plans.sharding, modes)
    dense_degree, expert_degree = shard_degrees(plans)
    return np.where(sharded, dense_degree, 1.0), np.where(sharded, expert_degree, 1.0)


def sharded_params(
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
    state = per_param * sharded_params(params, plans, STATES_SHARDED)
    if workload.optimizer is OptimizerKind.MUON:
        vocab_divisor, _ = _shard_divisors(plans, STATES_SHARDED)
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
    return MASTER_WEIGHT_BYTES_PER_PARAM * sharded_params(params, plans, STATES_SHARDED)


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
    local = sharded_params(params, plans, STATES_SHARDED)
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
    dense_divisor, expert_divisor = _shard_divisors(plans, FULLY_SHARDED)
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
        return ~sharding_in(plans.sharding, FULLY_SHARDED)
    return np.ones(len(plans), dtype=bool)


@plan_key(*STAGE_PARAMETER_KEY, remember=without_top_k)
def heaviest_rank_parameters(workload: Workload, plans: ParallelPlans) -> StageParameters:
    """The parameters of the pipeline rank that holds the most (of
    :func:`~mosaic.perf.schedule.candidate_stages`; the later rank on a tie): what the
    data-parallel collectives and the optimizer step move."""
    stages = candidate_stages(workload.geometry, plans, workload.pipeline_layouts)
    params = rank_parameters(workload, plans, stages[-1])
    for stage in reversed(stages[:-1]):
        other = rank_parameters(workload, plans, stage)
        heavier = other.total > params.total
        params = StageParameters(**{
            name: np.where(heavier, getattr(other, name), getattr(params, name))
            for name in StageParameters.__dataclass_fields__})
    return params
