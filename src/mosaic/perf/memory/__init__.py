"""Per-GPU memory of a training step on the heaviest pipeline stage, by component.

Every formula is written over the arrays of :class:`~mosaic.perf.plan.ParallelPlans`, so a
layout search scores all of its candidate plans in one call; a single plan is a length-1
set. Sizes are in bytes. The components (keys of :func:`memory_breakdown_bytes`):

* ``weights``: bf16 parameters (2 B/param; fp8 recipes keep bf16 weights too, except FP8
  primary weights on Blackwell, 1 B; none at rest for fully sharded plans on stacks whose
  shards are fp32, see :func:`.parameter_states.weight_bytes`).
* ``gradients``: fp32 main-gradient buffers (4 B/param, the Megatron-Core default for bf16;
  2 B when the workload reduces gradients in bf16).
* ``optimizer_states``: fp32 moments (Adam/AdamW 8 B, Muon and SGD-momentum 4 B); half
  with a bf16 optimizer (``Workload.optimizer_dtype``).
* ``master_weights``: fp32 master parameters (4 B/param); none with a bf16 optimizer.
* ``activations``: tensors saved for the backward pass of every in-flight micro-batch.
* ``logits``: LM-head output and the cross-entropy working set (last stage only), by the
  stack's loss implementation (:func:`.logits.loss_bytes_per_logit`).
* ``communication_buffers``: FSDP gather/reduce buffers, ZeRO-2 buckets, EP and PP buffers.
* ``runtime_reserve``: what the caching allocator holds beyond the live tensors (library
  workspaces, cached blocks); the CUDA context and NCCL buffers outside the allocator are
  ``mosaic.perf.device_memory``'s.

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
and ``peak`` (the breakdown per stage, the heaviest stage and the fit verdict). The
package re-exports what the time model, the evaluation and the reports read; the rest
is imported from its module.
"""

from mosaic.perf.memory.activations import (
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
    per_op_sac_moe_bytes,
    softmax_statistics_bytes,
    stage_activation_bytes,
)
from mosaic.perf.memory.buffers import (
    communication_buffer_bytes,
)
from mosaic.perf.memory.logits import (
    logits_bytes,
)
from mosaic.perf.memory.parameter_states import (
    StageParameters,
    gradient_bytes_per_param,
    heaviest_rank_parameters,
    master_weight_bytes,
    optimizer_state_bytes,
    optimizer_update_bytes,
    rank_parameters,
    shard_degrees,
    stage_parameters,
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
    scaled_memory_breakdown,
    stage_memory_breakdown_bytes,
    total_memory_bytes,
)
from mosaic.perf.memory.plan_keys import (
    PARAMETER_STATE_KEY,
    STAGE_PARAMETER_KEY,
)

__all__ = [
    "COMPONENTS",
    "COMPONENT_MEANINGS",
    "PARAMETER_STATE_KEY",
    "RUNTIME_RESERVE_BYTES",
    "STAGE_PARAMETER_KEY",
    "StageParameters",
    "activation_bytes_per_layer",
    "attention_activation_bytes",
    "communication_buffer_bytes",
    "dense_mlp_activation_bytes",
    "eager_elementwise_extra_bytes",
    "feasibility",
    "gdn_activation_bytes",
    "gradient_bytes_per_param",
    "heaviest_rank_parameters",
    "heaviest_stage",
    "largest_components",
    "layer_input_bytes",
    "layer_working_set_bytes",
    "logits_bytes",
    "mamba_activation_bytes",
    "master_weight_bytes",
    "mean_block_activation_bytes",
    "memory_breakdown_bytes",
    "moe_block_activation_bytes",
    "offloaded_blocks",
    "optimizer_state_bytes",
    "optimizer_update_bytes",
    "parameter_state_bytes",
    "per_op_sac_moe_bytes",
    "rank_parameters",
    "scaled_memory_breakdown",
    "shard_degrees",
    "softmax_statistics_bytes",
    "stage_activation_bytes",
    "stage_memory_breakdown_bytes",
    "stage_parameters",
    "total_memory_bytes",
]
