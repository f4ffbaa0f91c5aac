"""Context-parallel attention as the stacks run it: the flash kernels of the ring's steps, the
eager merge traffic of torch's ring, and the K/V exchange it exposes.

Ring attention with the causal load balance (Transformer Engine AttnFuncWithCPAndKVP2P;
torch ``_templated_ring_attention``, whose note "Context parallelism load balance algorithm
for causal masking" describes it): a CP rank holds two sequence chunks of s/(2·cp) tokens
(chunk r and chunk 2·cp−1−r). Step 0 runs one causal kernel over its own queries and keys
(s/cp each); each of the cp−1 later steps runs one non-causal kernel over half a block:
all local queries against the first chunk of the visiting K/V (s/cp × s/(2·cp)), or the
second query chunk against all of it (s/(2·cp) × s/cp). The last rank takes the first form
at every step, the shorter key length, so it is the slowest rank and sets the ring's pace.
The FLOPs are those of one causal kernel over s/cp queries and s keys; the time is not,
because every kernel sees at most s/cp keys (``kernels.flash_attention_time_s``'s
efficiency ramps with the key length) and there are cp launches instead of one.

DeepSpeed-Ulysses (stack trait ``context_parallel: ulysses``) instead all-to-alls the heads
and runs one kernel per rank over the whole sequence for heads/cp heads (Jacobs et al. 2023,
arXiv:2309.14509); its kernel is the single causal one.

torch's ring (``torch_ring``: torch/distributed/tensor/experimental/_attention.py, PyTorch
2.5-2.6, as torchtitan ran it in Dec 2024) adds, between the kernels, eager element-wise
work in fp32 (``_cp_options.convert_to_f32 = True``): the LSE merge of every step's output
(``_SDPAMerger``), the concatenation of K and V into one send buffer, and in backward the
accumulation of dQ, dK, dV in fp32 with ``_partial_update`` rebuilding whole tensors by
``torch.cat``. Its K/V are all-gathered once (``_AllGatherRotater``, torchtitan's default
rotate method), waited before step 1, so only step 0's kernel hides the gather; the dK/dV
travel rank to rank in fp32 (``permute_tensor``), each send waited after the next step's
kernel. torchtitan repeats the KV heads before SDPA (models/llama/model.py ``repeat_kv``
@ 9dec370), so K/V carry as many heads as Q.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from mosaic.perf.collectives import Interconnect, all_gather_time_s, send_recv_time_s
from mosaic.perf.element_bytes import BF16_BYTES, FP32_BYTES
from mosaic.perf.kernels import AttentionEfficiency, flash_attention_time_s
from mosaic.perf.kernels import memory_bound_time_s as streaming_time_s

RING_P2P = "ring_p2p"
TORCH_RING = "torch_ring"
ULYSSES = "ulysses"
CONTEXT_PARALLEL_MODES = (RING_P2P, TORCH_RING, ULYSSES)

# torch ring, forward, bytes of HBM traffic per element of one step's attention output
# (b·h·s_q·d): the block output cast to fp32 (read 2, write 4), then
# out − sigmoid(lse_b − lse)·(out − out_b) as three eager kernels: out − out_b (read 4 + 4,
# write 4), the product (read 4, write 4), the difference (read 4 + 4, write 4); the LSE
# terms have d times fewer elements and are left out.
TORCH_MERGE_BYTES_PER_OUTPUT = 6 + 12 + 8 + 12
# Step 0's output cast to fp32 and the merged result cast back to bf16 (read 4, write 2).
TORCH_FORWARD_CASTS_BYTES_PER_OUTPUT = 6 + 6
# torch.cat([key.flatten(), value.flatten()]) before each of the cp−1 sends: K and V read and
# written in bf16, per element of one of them.
TORCH_KV_CAT_BYTES_PER_KV = 2 * 2 * BF16_BYTES
# Backward, per element of Q (the slowest rank): dQ zero-initialised in fp32 (write 4), one
# fp32 += of the step's bf16 dQ per step (read 4 + 2, write 4), the final cast (read 4,
# write 2).
TORCH_BWD_DQ_INIT_AND_CAST_BYTES = 4 + 6
TORCH_BWD_DQ_ACCUMULATE_BYTES = 10
# Backward, per element of one of K/V: dK and dV zero-initialised (write 4 each) and cast
# back to bf16 at the end (read 4, write 2 each); step 0 adds its dK, dV in place (10 each);
# every later step adds into one chunk (10 each on half the elements) and torch.cat rebuilds
# the whole tensor (read 4, write 4 each): 13 each; every step concatenates dK and dV into
# the fp32 send buffer (read 4, write 4 each).
TORCH_BWD_DKV_FIXED_BYTES = 2 * 4 + 2 * 6 + 2 * 10
TORCH_BWD_DKV_PER_LATER_STEP_BYTES = 2 * (10 / 2 + 8)
TORCH_BWD_DKV_SEND_CAT_BYTES = 2 * 8


@dataclass(frozen=True)
class RingKernels:
    """Seconds of the flash kernels one CP rank runs per micro-batch (arrays over plans):
    the step-0 kernel and one later step's kernel, forward and backward."""

    first_forward: np.ndarray
    step_forward: np.ndarray
    first_backward: np.ndarray
    step_backward: np.ndarray
    cp: np.ndarray

    @property
    def forward(self) -> np.ndarray:
        return self.first_forward + (self.cp - 1) * self.step_forward

    @property
    def backward(self) -> np.ndarray:
        return self.first_backward + (self.cp - 1) * self.step_backward


def ring_kernels(batch: ArrayLike, heads: ArrayLike, seq_len: float, cp: ArrayLike,
                 head_dim: float, peak_flops_per_s: float, fwd: AttentionEfficiency,
                 bwd: AttentionEfficiency) -> RingKernels:
    """The slowest rank's kernels: one causal (s/cp × s/cp), then cp−1 non-causal
    (s/cp queries × s/(2·cp) keys). With cp = 1 this is the one causal kernel over s."""
    cp_ = np.asarray(cp, dtype=float)
    local = seq_len / cp_

    def kernel(seq_kv: np.ndarray, causal: bool, backward: bool) -> np.ndarray:
        return flash_attention_time_s(batch, heads, local, seq_kv, head_dim, causal,
                                      peak_flops_per_s, backward=backward,
                                      efficiency=bwd if backward else fwd)

    return RingKernels(first_forward=kernel(local, True, False),
                       step_forward=kernel(local / 2, False, False),
                       first_backward=kernel(local, True, True),
                       step_backward=kernel(local / 2, False, True), cp=cp_)


def torch_ring_forward_bytes(output_elements: ArrayLike, kv_elements: ArrayLike,
                             cp: ArrayLike) -> np.ndarray:
    """HBM bytes of torch's eager forward ring work on the slowest rank: cp−1 merges and K/V
    concatenations plus the two casts (zero without CP)."""
    cp_ = np.asarray(cp, dtype=float)
    out, kv = np.asarray(output_elements, float), np.asarray(kv_elements, float)
    total = (out * (TORCH_FORWARD_CASTS_BYTES_PER_OUTPUT
                    + TORCH_MERGE_BYTES_PER_OUTPUT * (cp_ - 1))
             + kv * TORCH_KV_CAT_BYTES_PER_KV * (cp_ - 1))
    return np.where(cp_ > 1, total, 0.0)


def torch_ring_backward_bytes(query_elements: ArrayLike, kv_elements: ArrayLike,
                              cp: ArrayLike) -> np.ndarray:
    """HBM bytes of torch's eager backward ring work on the slowest rank (zero without CP)."""
    cp_ = np.asarray(cp, dtype=float)
    q, kv = np.asarray(query_elements, float), np.asarray(kv_elements, float)
    total = (q * (TORCH_BWD_DQ_INIT_AND_CAST_BYTES + TORCH_BWD_DQ_ACCUMULATE_BYTES * cp_)
             + kv * (TORCH_BWD_DKV_FIXED_BYTES
                     + (TORCH_BWD_DKV_PER_LATER_STEP_BYTES + TORCH_KV_CAT_BYTES_PER_KV)
                     * (cp_ - 1)
                     + TORCH_BWD_DKV_SEND_CAT_BYTES * cp_))
    return np.where(cp_ > 1, total, 0.0)


def torch_ring_streaming_s(query_elements: ArrayLike, kv_elements: ArrayLike, cp: ArrayLike,
                           hbm_bw_bytes_per_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of torch's eager ring work (streaming kernels at the
    element-wise HBM efficiency; zero without CP)."""
    cp_ = np.asarray(cp, dtype=float)
    forward = streaming_time_s(torch_ring_forward_bytes(query_elements, kv_elements, cp_),
                               hbm_bw_bytes_per_s)
    backward = streaming_time_s(torch_ring_backward_bytes(query_elements, kv_elements, cp_),
                                hbm_bw_bytes_per_s)
    return np.where(cp_ > 1, forward, 0.0), np.where(cp_ > 1, backward, 0.0)


def torch_ring_exposed_s(kernels: RingKernels, kv_bytes: ArrayLike, cp: ArrayLike,
                         stride: ArrayLike, crosses_domain: ArrayLike,
                         ic: Interconnect) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed seconds of torch's K/V exchange per micro-batch.

    ``kv_bytes`` is one rank's K plus V in bf16. Forward: the all-gather of every rank's
    K/V runs behind step 0's kernel only. Backward: the all-gather again behind step 0's
    backward kernel, and cp sends of the fp32 dK/dV (twice ``kv_bytes``) to the next rank,
    each waited after the next step's kernel; the last is waited with no kernel behind it.
    """
    cp_ = np.asarray(cp, dtype=float)
    gather = all_gather_time_s(np.asarray(kv_bytes, float) * cp_, cp, stride, ic)
    send = send_recv_time_s(np.asarray(kv_bytes, float) * FP32_BYTES / BF16_BYTES,
                            crosses_domain, ic)
    forward = np.maximum(0.0, gather - kernels.first_forward)
    backward = (np.maximum(0.0, gather - kernels.first_backward)
                + (cp_ - 1) * np.maximum(0.0, send - kernels.step_backward) + send)
    return np.where(cp_ > 1, forward, 0.0), np.where(cp_ > 1, backward, 0.0)
