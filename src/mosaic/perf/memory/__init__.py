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

The package's modules, one job each: ``plan_keys`` (the plan fields each term reads),
``parameter_states`` (weights, gradients, optimizer state, master weights),
``activations`` (saved activations per layer kind, recompute policy and stage),
``logits`` (the LM head and the loss working set), ``buffers`` (communication buffers)
and ``peak`` (the breakdown per stage, the heaviest stage and the fit verdict).
"""

from mosaic.perf.memory.activations import (
    EAGER_GLU_EXTRA_BYTES_PER_ELEMENT,
    EAGER_NORM_EXTRA_BYTES_PER_ELEMENT,
    HYBRID_LAYER_KINDS,
    INDEX_BYTES,
    LayerKind,
    activation_bytes_per_layer,
    attention_activation_bytes,
    dense_mlp_activation_bytes,
    eager_elementwise_extra_bytes,
    gdn_activation_bytes,
    layer_input_bytes,
    layer_working_set_bytes,
    mamba_activation_bytes,
    mean_block_activation_bytes,
    moe_block_activation_bytes,
    offloaded_blocks,
    per_op_sac_dense_bytes,
    per_op_sac_moe_bytes,
    recompute_module_bytes,
    resident_block_fraction,
    save_dots_bytes,
    softmax_statistics_bytes,
    stage_activation_bytes,
)
from mosaic.perf.memory.buffers import (
    DEEPSPEED_MAX_LIVE_PARAMETERS,
    communication_buffer_bytes,
)
from mosaic.perf.memory.logits import (
    BF16_LOSS_BYTES_PER_ELEMENT,
    COMPILED_LOSS_BYTES_PER_ELEMENT,
    LOGITS_BYTES_PER_ELEMENT,
    LOSS_PARALLEL_BYTES_PER_ELEMENT,
    OUT_OF_PLACE_LOSS_BYTES_PER_ELEMENT,
    TE_LOSS_BYTES_PER_ELEMENT,
    UPCAST_LOSS_BYTES_PER_ELEMENT,
    logits_bytes,
    loss_bytes_per_logit,
)
from mosaic.perf.memory.parameter_states import (
    BF16_GRADIENT_BYTES_PER_PARAM,
    BF16_MOMENT_FRACTION,
    DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM,
    FULLY_SHARDED,
    GRADIENT_BYTES_PER_PARAM,
    GRADIENTS_SHARDED,
    MASTER_WEIGHT_BYTES_PER_PARAM,
    MUON_VOCAB_OPTIMIZER,
    OPTIMIZER_STATE_BYTES_PER_PARAM,
    STATES_SHARDED,
    WEIGHT_BYTES_PER_PARAM,
    StageParameters,
    deepspeed_zero,
    gradient_bytes_per_param,
    heaviest_rank_parameters,
    holds_bf16_weight_copy,
    holds_lm_head,
    master_weight_bytes,
    optimizer_state_bytes,
    optimizer_update_bytes,
    rank_parameters,
    shard_degrees,
    sharded_params,
    sharding_in,
    stage_parameters,
    stored_gradient_bytes,
    stored_gradient_bytes_per_param,
    weight_bytes,
)
from mosaic.perf.memory.peak import (
    COMPONENT_MEANINGS,
    COMPONENTS,
    RUNTIME_RESERVE_BYTES,
    feasibility,
    heaviest_stage,
    largest_components,
    memory_breakdown_bytes,
    parameter_state_bytes,
    stage_memory_breakdown_bytes,
    total_memory_bytes,
)
from mosaic.perf.memory.plan_keys import (
    BLOCK_ACTIVATION_KEY,
    BUFFER_KEY,
    PARAMETER_STATE_KEY,
    STAGE_ACTIVATION_KEY,
    STAGE_PARAMETER_KEY,
)

__all__ = [
    "BF16_GRADIENT_BYTES_PER_PARAM",
    "BF16_LOSS_BYTES_PER_ELEMENT",
    "BF16_MOMENT_FRACTION",
    "BLOCK_ACTIVATION_KEY",
    "BUFFER_KEY",
    "COMPILED_LOSS_BYTES_PER_ELEMENT",
    "COMPONENTS",
    "COMPONENT_MEANINGS",
    "DEEPSPEED_MAX_LIVE_PARAMETERS",
    "DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM",
    "EAGER_GLU_EXTRA_BYTES_PER_ELEMENT",
    "EAGER_NORM_EXTRA_BYTES_PER_ELEMENT",
    "FULLY_SHARDED",
    "GRADIENTS_SHARDED",
    "GRADIENT_BYTES_PER_PARAM",
    "HYBRID_LAYER_KINDS",
    "INDEX_BYTES",
    "LOGITS_BYTES_PER_ELEMENT",
    "LOSS_PARALLEL_BYTES_PER_ELEMENT",
    "MASTER_WEIGHT_BYTES_PER_PARAM",
    "MUON_VOCAB_OPTIMIZER",
    "OPTIMIZER_STATE_BYTES_PER_PARAM",
    "OUT_OF_PLACE_LOSS_BYTES_PER_ELEMENT",
    "PARAMETER_STATE_KEY",
    "RUNTIME_RESERVE_BYTES",
    "STAGE_ACTIVATION_KEY",
    "STAGE_PARAMETER_KEY",
    "STATES_SHARDED",
    "TE_LOSS_BYTES_PER_ELEMENT",
    "UPCAST_LOSS_BYTES_PER_ELEMENT",
    "WEIGHT_BYTES_PER_PARAM",
    "LayerKind",
    "StageParameters",
    "activation_bytes_per_layer",
    "attention_activation_bytes",
    "communication_buffer_bytes",
    "deepspeed_zero",
    "dense_mlp_activation_bytes",
    "eager_elementwise_extra_bytes",
    "feasibility",
    "gdn_activation_bytes",
    "gradient_bytes_per_param",
    "heaviest_rank_parameters",
    "heaviest_stage",
    "holds_bf16_weight_copy",
    "holds_lm_head",
    "largest_components",
    "layer_input_bytes",
    "layer_working_set_bytes",
    "logits_bytes",
    "loss_bytes_per_logit",
    "mamba_activation_bytes",
    "master_weight_bytes",
    "mean_block_activation_bytes",
    "memory_breakdown_bytes",
    "moe_block_activation_bytes",
    "offloaded_blocks",
    "optimizer_state_bytes",
    "optimizer_update_bytes",
    "parameter_state_bytes",
    "per_op_sac_dense_bytes",
    "per_op_sac_moe_bytes",
    "rank_parameters",
    "recompute_module_bytes",
    "resident_block_fraction",
    "save_dots_bytes",
    "shard_degrees",
    "sharded_params",
    "sharding_in",
    "softmax_statistics_bytes",
    "stage_activation_bytes",
    "stage_memory_breakdown_bytes",
    "stage_parameters",
    "stored_gradient_bytes",
    "stored_gradient_bytes_per_param",
    "total_memory_bytes",
    "weight_bytes",
]
