"""HBM bytes the MoE token-movement kernels move per layer: permute, unpermute, chunk sorts.

Each MoE implementation moves routed tokens between the token order and the expert order with
its own kernels (gathers, scatters, sorts, zero fills, fp32 combines). This module counts,
from the code, the bytes those kernels read and write per routed token copy (and per routed
token, for the tensors of token shape) per element of d_model, forward and backward. The
expert activation (SwiGLU/GELU, with the routing probability folded into it where the stack
does so) and the FP8 casts are counted elsewhere (layer_costs ``_ffn_streaming_bytes``,
``fp8_cast_s``); the network copies of the EP dispatch/combine (NCCL all-to-all, DeepEP,
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


def _plus(a: PermuteTraffic, b: PermuteTraffic) -> PermuteTraffic:
    return PermuteTraffic(a.forward_per_copy + b.forward_per_copy,
                          a.forward_per_token + b.forward_per_token,
                          a.backward_per_copy + b.backward_per_copy,
                          a.backward_per_token + b.backward_per_token)


def permute_traffic(kind: MoePermute, dispatcher: Dispatcher,
                    several_local_experts: bool) -> PermuteTraffic:
    """Per-element bytes of one MoE layer's token movement for a stack's MoE code
    (``kind``), its EP dispatcher, and whether a rank holds more than one expert."""
    kind = MoePermute(kind)
    if kind is MoePermute.TORCHTITAN:
        return _TORCHTITAN
    dispatcher = Dispatcher(dispatcher)
    if dispatcher is Dispatcher.HYBRIDEP:
        return _NO_MOVEMENT
    base = _MEGATRON_FUSED if kind is MoePermute.TE_FUSED else _MEGATRON_TORCH
    if dispatcher is Dispatcher.ALLTOALL and several_local_experts:
        return _plus(base, _CHUNK_SORTS)
    return base


def workload_permute_traffic(workload: Workload, several_local_experts: bool = True
                             ) -> PermuteTraffic:
    """The workload's stack trait ``moe_permute`` and dispatcher as :func:`permute_traffic`."""
    return permute_traffic(MoePermute(workload.traits.moe_permute), workload.dispatcher,
                           several_local_experts)


def permute_bytes(workload: Workload, copies: ArrayLike, local_experts: ArrayLike
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) bytes of one MoE layer's token movement on one rank, for its
    routed ``copies`` (T·K·etp) and ``local_experts`` per rank (arrays over plans)."""
    moe = workload.geometry.moe
    assert moe is not None
    copies = np.asarray(copies, dtype=float)
    tokens = copies / moe.top_k
    several = np.asarray(local_experts) > 1
    d = workload.geometry.d_model
    forward = np.zeros_like(copies)
    backward = np.zeros_like(copies)
    for flag in (False, True):
        t = workload_permute_traffic(workload, flag)
        f = d * (copies * t.forward_per_copy + tokens * t.forward_per_token)
        b = d * (copies * t.backward_per_copy + tokens * t.backward_per_token)
        forward = np.where(several == flag, f, forward)
        backward = np.where(several == flag, b, backward)
    return forward, backward

