"""Communication buffers: FSDP gather/reduce buffers, ZeRO-2 buckets, EP and PP buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mosaic.perf.element_bytes import ACTIVATION_BYTES
from mosaic.perf.factorise import plan_key
from mosaic.perf.memory.activations import layer_input_bytes
from mosaic.perf.memory.parameter_states import (
    DEEPSPEED_ZERO_GRADIENT_BYTES_PER_PARAM,
    FULLY_SHARDED,
    WEIGHT_BYTES_PER_PARAM,
    StageParameters,
    gradient_bytes_per_param,
    shard_degrees,
    sharding_in,
)
from mosaic.perf.memory.plan_keys import BUFFER_KEY
from mosaic.perf.plan import ParallelPlans, Sharding
from mosaic.perf.schedule import (
    Stage,
    fsdp_gathered_through_step,
    n_microbatches,
    stage_layer_counts,
)
from mosaic.perf.shapes import routed_tokens
from mosaic.perf.workload import Workload

# ZeRO-3 keeps gathered parameters resident up to stage3_max_live_parameters, default 1e9
# (runtime/zero/config.py max_live_parameters; "the maximum number of parameters resident
# per GPU before releasing"), which parameters reused within stage3_max_reuse_distance
# (1e9) and the prefetch bucket fill; the model takes the cap.
DEEPSPEED_MAX_LIVE_PARAMETERS = 1e9


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
                                           workload.stage_split,
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
        fully_sharded=sharding_in(sharding, FULLY_SHARDED),
        experts_outside=experts_outside,
        accumulating=n_microbatches(workload, plans) > 1,
        gathered=fsdp_gathered_through_step(workload, plans),
        zero2=sharding == Sharding.ZERO2,
        pipeline=np.where(plans.pp > 1, 2 * layer_input_bytes(workload, plans), 0.0),
        ep_sends=plans.ep > 1,
        ep_send=send,
    )
