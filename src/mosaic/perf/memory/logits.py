"""The LM head's logits and the cross-entropy working set on the last stage, by the stack's
loss implementation (stack trait ``cross_entropy``).
"""

from __future__ import annotations

import numpy as np

from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.factorise import plan_key
from mosaic.perf.memory.parameter_states import holds_lm_head
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.schedule import Stage
from mosaic.perf.shapes import tokens_per_rank, vocab_shard
from mosaic.perf.workload import Workload
from mosaic.stacks import CrossEntropy

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
    elements = (tokens_per_rank(workload, plans) * vocab_shard(workload, plans)
                / workload.loss_chunks)
    per_element = loss_bytes_per_logit(workload, plans)
    # Each MTP module's logits and loss come from the same output layer on the same rank,
    # all computed in the forward pass and held to the backward (Megatron-Core
    # multi_token_prediction.py process_mtp_loss, called from GPTModel's post-processing).
    losses = 1 + workload.geometry.mtp_layers
    return np.where(holds_lm_head(plans, stage), losses * per_element * elements, 0.0)
