"""HBM bytes the MoE token-movement kernels move per layer: permute, unpermute, chunk sorts.

Each MoE implementation moves routed tokens between the token order and the expert order with
its own kernels (gathers, scatters, sorts, zero fills, fp32 combines). This module counts,
from the code, the bytes those kernels read and write per routed token copy (and per routed
token, for the tensors of token shape) per element of d_model, forward and backward. The
expert activation (SwiGLU/GELU, with the routing probability folded into it where the stack
does so) and the FP8 casts are counted elsewhere (layer_costs ``_ffn_streaming_bytes``,
``quantise_cast_s``); the network copies of the EP dispatch/combine (NCCL all-to-all, DeepEP,
HybridEP) are communication time. Derivations and sources: docs/evidence/moe_permute_traffic.md.

Units: bytes per element of d_model (bf16 activations = 2 B, fp32 = 4 B).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike

from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.workload import Dispatcher, Workload

_B = ACTIVATION_BYTES  # a bf16 element
_F = FP32_BYTES  # an fp32 element


class MoePermute(StrEnum):
    """How a stack's MoE layer moves routed tokens on the GPU (stack trait ``moe_permute``)."""

    TE_FUSED = "te_fused"  # Megatron-Core moe_permute_fusion: TE fused permute kernels
    TORCH_INDEX = "torch_index"  # Megatron-Core without it: index_select, split+cat, scatter_add
    TORCHTITAN = "torchtitan"  # torchtitan MoE.forward: eager index gathers/puts, fp32 bmm
    # torchtitan before the bmm combine (models/moe.py, Oct/Nov 2025): fp32 score multiply
    # and scatter_add
    TORCHTITAN_2510 = "torchtitan_2510"
    # torchtitan token dispatchers (models/common/token_dispatcher.py, from April 2026): fp32
    # score multiply and deterministic scatter_add; MoE compiled with the block from 5242bdf71
    TORCHTITAN_2604 = "torchtitan_2604"
    # levanter's MoE blocks (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock): argsort + take
    # into expert order, take back and a weighted sum over the top-k, all under XLA
    LEVANTER = "levanter"


@dataclass(frozen=True)
class PermuteTraffic:
    """Bytes per element of d_model, forward and backward, per routed copy (a token sent to
    one expert: T·K per rank) and per routed token (T; tensors of token shape such as the
    combined output and zero-filled gradient buffers)."""

    forward_per_copy: float
    forward_per_token: float
    backward_per_copy: float
    backward_per_token: float


# What layer_costs counted before this module: permute and unpermute each read and write
# every copy (8 B forward), backward twice the forward (BACKWARD_TO_FORWARD_STREAMING).
ANALYTICAL_PERMUTE = PermuteTraffic(4 * _B, 0.0, 8 * _B, 0.0)

# Megatron-Core alltoall dispatcher (megatron/core/transformer/moe/token_dispatcher.py
# MoEAlltoAllTokenDispatcher @ core_v0.16.0): permutation 1 (dispatch_preprocess: permute
# tokens to the all-to-all order), permutation 2 (dispatch_postprocess: sort_chunks_by_idxs
# into local-expert order, only when num_local_experts > 1), its inverse in
# combine_preprocess, and unpermutation 1 (combine_postprocess: unpermute without probs; the
# probabilities scale the expert activation, experts.py activation_func_with_probs).
# Unfused (moe_utils.py permute/unpermute, fused=False): index_select reads and writes each
# copy (2+2); unpermute zero-fills the output (2 per token) and scatter_add_ reads each copy
# and adds it into its token row (2+2); sort_chunks_by_idxs is torch.split + torch.cat (2+2).
# Backward: index_select's is a zero fill (2 per token) + index_add of every copy (2+2);
# scatter_add_'s is a gather of every copy (2+2); cat's backward is views and split's a cat
# (2+2).
_MEGATRON_TORCH = PermuteTraffic(forward_per_copy=4 * _B, forward_per_token=_B,
                                 backward_per_copy=4 * _B, backward_per_token=_B)
# Fused (moe_permute_fusion -> transformer_engine/pytorch/permutation.py moe_permute /
# moe_unpermute / moe_sort_chunks_by_index, TE >= 2.1): the permute kernel reads each source
# row per copy and writes the copy (2+2); the unpermute kernel reads the copies of a token,
# accumulates in registers and writes the token once (2 per copy + 2 per token); a chunk sort
# reads and writes each copy (2+2). Backward: the permute's is an unpermute kernel (2 per
# copy + 2 per token), the unpermute's a permute kernel (2+2), each sort's another sort.
_MEGATRON_FUSED = PermuteTraffic(forward_per_copy=3 * _B, forward_per_token=_B,
                                 backward_per_copy=3 * _B, backward_per_token=_B)
# The two chunk sorts (permutation 2 and its inverse) of the alltoall dispatcher with more
# than one local expert, fused or not: 2+2 each forward, the same backward.
_CHUNK_SORTS = PermuteTraffic(forward_per_copy=4 * _B, forward_per_token=0.0,
                              backward_per_copy=4 * _B, backward_per_token=0.0)
# Flex dispatcher with DeepEP (token_dispatcher.py _DeepepManager @ core_v0.16.0): DeepEP's
# dispatch kernel lands the tokens in rank order; get_permuted_hidden_states_by_experts
# permutes them into expert order and get_restored_hidden_states_by_experts unpermutes
# (permute/unpermute as above, fused with moe_permute_fusion), no chunk sorts. The received
# token buffer is counted at one token per K copies, as on the sending side.
# HybridEP (_HybridEPManager): hybrid_ep_dispatch writes the expert-ordered copies itself and
# hybrid_ep_combine reads them (get_permuted_hidden_states_by_experts returns its input): no
# local token-movement kernel.
_NO_MOVEMENT = PermuteTraffic(0.0, 0.0, 0.0, 0.0)
# torchtitan (torchtitan/models/moe/moe.py MoE.forward and moe/utils.py _permute/_unpermute
# @ v0.2.2; apply_compile compiles the MoE's children but not MoE.forward, so these run eager
# even with torch.compile; Qwen3 and DeepSeek-V3 set score_before_experts=False). Forward,
# per copy: x[token_indices // top_k] gather (2+2); indices_padding_wrapper/_permute's vstack
# of a zero row copies the routed input (2+2) and x[permuted_indices] gathers it (2+2);
# _unpermute's index_put (2+2); the unsort's zeros (2) and index_put (2+2);
# routed_output_unsorted.float() (2+4); the combine bmm reads the fp32 copies (4) = 32; per
# token: the bmm writes fp32 (4), .to(bf16) reads it and writes bf16 (4+2) = 10. Backward,
# per copy: the bmm's input gradient writes fp32 copies (4) and its score gradient reads the
# saved fp32 copies (4); float()'s backward casts (4+2); the unsort's index_put backward
# gathers (2+2); out_unpermuted[:-1] backward zero-fills and copies (2 + 2+2) and the
# index_put backward gathers (2+2); the padding gather's backward zero-fills (2) and
# index_put-accumulates (2+2); the first gather's backward index_put-accumulates (2+2) = 38;
# per token: .to()'s backward (2+4), the bmm reading the output gradient (4), the first
# gather's zero fill (2) = 12.
_TORCHTITAN = PermuteTraffic(forward_per_copy=32.0, forward_per_token=10.0,
                             backward_per_copy=38.0, backward_per_token=12.0)
# torchtitan before e1f7f318a (pull request #1974 'remove scatter_add in MoE implementation',
# 2025-11-21; torchtitan/models/moe.py MoE.forward and distributed/expert_parallel.py
# expert_parallel @ 82a9530f6, 2025-10-02), eager: DeepSeek-V3 runs that compile the loss only,
# and apply_compile (experiments/llama4/infra/parallelize.py @ 82a9530f6) compiles MoE blocks
# with fullgraph=False, graph breaks not counted. Forward, per copy: torch.gather of the routed
# input (2+2); the expert_parallel wrapper's vstack (2+2), padded gather (2+2) and index_put
# into new_empty (2+2); the score multiply .to(float32) (2+4), * scores (4+4), .to(bf16)
# (4+2); out.scatter_add reads each copy and adds it into its row (2+2) = 40; per token
# scatter_add's out-of-place copy of the shared-expert output (2+2) = 4. Backward, per copy:
# scatter_add's src gradient gathers (2+2); .to(bf16)'s backward (2+4); the multiply's input
# gradient (4+4) and its score gradient grad*x (4+4 read, 4 write) then the sum over d (4);
# .to(float32)'s backward (4+2); out_unpermuted[:-1] backward zero-fills and copies (2 + 2+2)
# and the index_put backward gathers (2+2); the padded gather's backward zero-fills (2) and
# accumulates (2+2); torch.gather's backward scatter-adds (2+2) = 60; per token its zero fill
# (2) = 2.
_TORCHTITAN_2510 = PermuteTraffic(forward_per_copy=40.0, forward_per_token=4.0,
                                  backward_per_copy=60.0, backward_per_token=2.0)
# torchtitan token dispatchers, eager (torchtitan/models/common/token_dispatcher.py
# LocalTokenDispatcher / AllToAllTokenDispatcher and torchtitan/ops/scatter_add.py @
# 6b9602339, 2026-06-12, and @ cc286a635, 2026-07-22; the combine went back from the bmm to a
# scatter_add in 8bc267dea, pull request #2775, 2026-04-06). deterministic_scatter_add runs
# out.scatter_add under torch.use_deterministic_algorithms: a copy of the zeros (2+2 per
# token) and, on CUDA, index_put_ with accumulate on the row index (pytorch
# aten/src/ATen/native/TensorAdvancedIndexing.cpp scatter_add -> _scatter_via_index_put,
# whose expanded-index path indexes rows), which reads each copy and adds it into its row
# (2+2); its backward is a gather (2+2). EP = 1 (local dispatch), forward per copy:
# x_TD[indices] (2+2), the score multiply .to(float32) (2+4), * scores (4+4), .to(bf16)
# (4+2), the scatter-add (2+2) = 28; per token zeros_like (2) and the copy (2+2) = 6.
# Backward per copy: the gather (2+2), .to(bf16)'s backward (2+4), the multiply's (8 + 16 as
# in _TORCHTITAN_2510), .to(float32)'s (4+2), x_TD[indices]'s index_put accumulate (2+2) =
# 44; per token its zero fill (2). EP > 1 (all-to-all) adds _permute's gather into expert
# order (2+2) and _unpermute's index_put into new_empty (2+2) forward, and backward the
# index_put's gather (2+2) and the gather's zero fill and accumulate (2 + 2+2): 36 / 54.
_TORCHTITAN_2604_LOCAL = PermuteTraffic(forward_per_copy=28.0, forward_per_token=6.0,
                                        backward_per_copy=44.0, backward_per_token=2.0)
_TORCHTITAN_2604_EP = PermuteTraffic(forward_per_copy=36.0, forward_per_token=6.0,
                                     backward_per_copy=54.0, backward_per_token=2.0)
# The same code compiled: from 5242bdf71 (pull request #2741, 2026-04-14) apply_compile
# (torchtitan/distributed/compile.py) compiles each TransformerBlock with fullgraph=True, MoE
# included. Inductor fuses the score multiply and its casts into one kernel (2+2 forward) and
# the custom op's backward gather into the multiply's backward (reads the gathered gradient 2
# and the saved expert output 2, writes the input gradient 2, the score gradient a
# reduction in the same kernel); tensors that feed the grouped GEMMs, the all-to-alls and the
# opaque custom op are still written once. EP = 1, forward per copy: the gather (2+2), the
# fused multiply (2+2), the scatter-add (2+2) = 12; per token zeros (2) and the copy (2+2) = 6;
# backward per copy: the fused gather-multiply backward (2+2+2), the gather's accumulate
# (2+2) = 10; per token its zero fill (2). EP > 1 adds the permute gather and the unpermute
# index_put forward (4+4) and their backwards (4 + 2 + 4): 20 / 20.
_TORCHTITAN_2604_LOCAL_COMPILED = PermuteTraffic(forward_per_copy=12.0, forward_per_token=6.0,
                                                 backward_per_copy=10.0,
                                                 backward_per_token=2.0)
_TORCHTITAN_2604_EP_COMPILED = PermuteTraffic(forward_per_copy=20.0, forward_per_token=6.0,
                                              backward_per_copy=20.0, backward_per_token=2.0)


# levanter (stanford-crfm/levanter @ 9263f81e src/levanter/models/mixtral.py
# MixtralSparseMoeBlock.__call__: argsort, take by sort_idx // K, bincount group sizes, take
# back by the inverse sort), jitted by XLA, each rank sorting its own tokens inside shard_map
# (no EP dispatcher). Forward, per copy: jnp.take(x_flat, sort_idx // K) gathers the expert-
# ordered copies (2+2); the unpermute's jnp.take(out, argsort(sort_idx)) is a gather XLA fuses
# into its only consumer, the weighted sum over TopExperts (out_repeat_unflat.dot(topk_weights)
# contracts K with no other dimension of the weights: the algebraic simplifier rewrites it as a
# multiply + reduce), which reads each copy (2) and writes each token (2 per token) = 6 per
# copy, 2 per token. Backward, per copy: the weighted sum's input gradient (dout x weight, fused
# into) the unpermute gather's transpose, a scatter-add into a zero-filled expert-ordered buffer
# (zero fill 2, read dout 2, read-modify-write 2+2) = 8; the weights' gradient, a reduction over
# d of dout x the saved copy (2+2) = 4; the permute gather's transpose, a scatter-add into the
# zero-filled token gradient (read 2, read-modify-write 2+2) = 6: 18 per copy; per token its
# zero fill (2).
_LEVANTER = PermuteTraffic(forward_per_copy=6.0, forward_per_token=2.0,
                           backward_per_copy=18.0, backward_per_token=2.0)


def _plus(a: PermuteTraffic, b: PermuteTraffic) -> PermuteTraffic:
    return PermuteTraffic(a.forward_per_copy + b.forward_per_copy,
                          a.forward_per_token + b.forward_per_token,
                          a.backward_per_copy + b.backward_per_copy,
                          a.backward_per_token + b.backward_per_token)


def permute_traffic(kind: MoePermute, dispatcher: Dispatcher,
                    several_local_experts: bool, expert_parallel: bool = True,
                    compiled: bool = False) -> PermuteTraffic:
    """Per-element bytes of one MoE layer's token movement for a stack's MoE code
    (``kind``), its EP dispatcher, whether a rank holds more than one expert, whether the
    experts are split over ranks (EP > 1) and whether the MoE forward is torch.compiled
    (read by ``torchtitan_2604`` only: the other torchtitan code runs its MoE forward eager;
    the torchtitan counts are for its all-to-all and local dispatchers)."""
    kind = MoePermute(kind)
    if kind is MoePermute.TORCHTITAN:
        return _TORCHTITAN
    if kind is MoePermute.TORCHTITAN_2510:
        return _TORCHTITAN_2510
    if kind is MoePermute.LEVANTER:
        return _LEVANTER
    if kind is MoePermute.TORCHTITAN_2604:
        if compiled:
            return _TORCHTITAN_2604_EP_COMPILED if expert_parallel else \
                _TORCHTITAN_2604_LOCAL_COMPILED
        return _TORCHTITAN_2604_EP if expert_parallel else _TORCHTITAN_2604_LOCAL
    dispatcher = Dispatcher(dispatcher)
    if dispatcher is Dispatcher.HYBRIDEP:
        return _NO_MOVEMENT
    base = _MEGATRON_FUSED if kind is MoePermute.TE_FUSED else _MEGATRON_TORCH
    if dispatcher is Dispatcher.ALLTOALL and several_local_experts:
        return _plus(base, _CHUNK_SORTS)
    return base


def workload_permute_traffic(workload: Workload, several_local_experts: bool = True,
                             expert_parallel: bool = True) -> PermuteTraffic:
    """The workload's MoE code (its ``moe_permute`` setting, else the stack trait), dispatcher
    and torch.compile setting (else the stack's) as :func:`permute_traffic`."""
    return permute_traffic(MoePermute(workload.moe_permute_code), workload.dispatcher,
                           several_local_experts, expert_parallel, workload.compiles_model)


def permute_bytes(workload: Workload, copies: ArrayLike, local_experts: ArrayLike
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) bytes of one MoE layer's token movement on one rank, for its
    routed ``copies`` (T·K·etp) and ``local_experts`` per rank (arrays over plans)."""
    moe = workload.geometry.moe
    assert moe is not None
    copies = np.asarray(copies, dtype=float)
    tokens = copies / moe.top_k
    local = np.broadcast_to(np.asarray(local_experts), copies.shape)
    several = local > 1
    split = local < moe.experts  # EP > 1: a rank holds part of the experts
    d = workload.geometry.d_model
    forward = np.zeros_like(copies)
    backward = np.zeros_like(copies)
    for flag in (False, True):
        for ep_flag in (False, True):
            here = (several == flag) & (split == ep_flag)
            if not here.any():  # no plan has this placement of experts
                continue
            t = workload_permute_traffic(workload, flag, ep_flag)
            f = d * (copies * t.forward_per_copy + tokens * t.forward_per_token)
            b = d * (copies * t.backward_per_copy + tokens * t.backward_per_token)
            forward = np.where(here, f, forward)
            backward = np.where(here, b, backward)
    return forward, backward

