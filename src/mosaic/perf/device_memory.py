"""Device memory outside PyTorch's caching allocator: what ``nvidia-smi`` counts on a GPU
beyond the allocator's segments.

A memory figure read from ``nvidia-smi`` / NVML (FlagPerf's monitors) is the allocator's
reserved segments plus the CUDA context and NCCL's communicator buffers, which NCCL
allocates itself; ``torch.cuda.max_memory_reserved`` (torchtitan's, Megatron's logs) sees only
the segments. :func:`outside_allocator_bytes` models the difference from its sources, so that
a device figure is compared with the memory model's total plus this term, not with an
inflated allocator prediction (docs/memory.md, "What a memory figure measures").
"""

from __future__ import annotations

import numpy as np

from mosaic.perf.plan import ParallelPlans

# CUDA context with lazy module loading, PyTorch's default since 1.13 (it sets
# CUDA_MODULE_LOADING=LAZY): 287,047,680 B against 666,632,192 B when every module is loaded
# eagerly, pytorch/pytorch#86509.
CUDA_CONTEXT_BYTES = 287_047_680
# NCCL buffers of one connection (one peer on one channel), one per protocol
# (NVIDIA/nccl src/init.cc DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE with
# src/include/device.h): LL = 8 lines/thread x 512 threads x 8 steps x 16 B; LL128 = 120
# elements/thread x 640 threads x 8 steps x 8 B; Simple = NCCL_BUFFSIZE, 4 MiB.
NCCL_LL_BYTES = 8 * 512 * 8 * 16
NCCL_LL128_BYTES = 120 * 640 * 8 * 8
NCCL_SIMPLE_BYTES = 1 << 22
NCCL_CONNECTION_BYTES = NCCL_LL_BYTES + NCCL_LL128_BYTES + NCCL_SIMPLE_BYTES
# Channels of a communicator inside an 8-GPU NVLink node: "16 coll channels, 16 p2p channels,
# 16 p2p channels per peer" in NCCL's log on an H800 node (NVIDIA/nccl#892). NCCL derives the
# count from the NVLinks per GPU (NVIDIA/nccl#1429: Hopper's 18 links to the NVSwitch), so
# H100 nodes open more; 16 is the lower figure.
NCCL_CHANNELS = 16
# A collective communicator connects its ring (one receiving peer per channel) and its tree
# (parent and child) on every channel (src/graph/connect.cc connectRings / connectTrees).
NCCL_COLLECTIVE_CONNECTIONS_PER_CHANNEL = 3
# Point-to-point sends (pipeline stages, the EP all-to-all) use the Simple protocol, one
# buffer per peer and channel (src/transport/p2p.cc; p2p channels per peer as above).


def collective_communicator_bytes() -> int:
    """NCCL buffers of one collective communicator (ring and tree on every channel)."""
    return NCCL_CHANNELS * NCCL_COLLECTIVE_CONNECTIONS_PER_CHANNEL * NCCL_CONNECTION_BYTES


def outside_allocator_bytes(plans: ParallelPlans) -> np.ndarray:
    """Per-GPU bytes outside the caching allocator: the CUDA context, one collective
    communicator per parallel group of more than one rank a step runs collectives on
    (data-parallel, tensor-parallel, context-parallel; torch.distributed creates a group's
    NCCL communicator at its first collective, so unused groups cost nothing), and the
    point-to-point buffers of the pipeline neighbours (two peers) and of the EP all-to-all
    (ep - 1 peers)."""
    groups = ((plans.dp > 1).astype(float) + (plans.tp > 1) + (plans.cp > 1))
    p2p_peers = np.where(plans.pp > 1, 2.0, 0.0) + np.maximum(plans.ep - 1, 0)
    return (CUDA_CONTEXT_BYTES + groups * collective_communicator_bytes()
            + p2p_peers * NCCL_CHANNELS * NCCL_SIMPLE_BYTES)
