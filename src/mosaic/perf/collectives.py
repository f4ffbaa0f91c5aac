"""Alpha-beta costs of NCCL collectives on a two-level (scale-up / scale-out) topology.

Every cost function broadcasts over numpy arrays of message size, group size and stride.

Topology. GPUs form scale-up domains of ``scale_up_domain_gpus`` (an NVLink/NVSwitch island:
8 on HGX, 72 on NVL72); domains are joined by a scale-out network. A collective group is
given by its size ``n`` and rank ``stride`` in the global rank order (mesh axes
innermost-first, Megatron order tp, cp, ep/dp, pp: the caller passes the product of the
inner axis sizes). Group members are ``base + i*stride``, groups tile aligned blocks.

Bandwidth. ``scale_out_bw_bytes_per_s`` is the scale-out bandwidth *per GPU* (its own NIC on
p5/p6/DGX, or the node's NIC bandwidth divided by its GPUs). Sharing rule: every GPU belongs
to exactly one group of a given mesh axis and sends through its own NIC share, so concurrent
strided groups of the same axis do not contend; a group with ``k`` ranks per domain can use
``k`` NIC shares. Contention between different axes communicating at the same moment is not
modelled here.

Message-size conventions follow nccl-tests (doc/PERFORMANCE.md and src/*.cu ``GetBw``):
all-gather and reduce-scatter take the full (gathered / unreduced) buffer, all-reduce the
buffer, all-to-all the per-rank send buffer, send/recv the message. Bus bandwidth is
``algbw * factor`` with factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all, 1 for send/recv.

Protocols. Ring collectives take the cheapest of NCCL's Simple, LL128 and LL protocols
(NCCL tuning model, src/graph/tuning.cc): the fitted constants describe Simple, LL128 and LL
cut the per-step latency and the bandwidth by the ratios in ``nccl_protocols``. Systems
whose catalog entry sets ``nccl_low_latency_protocols: false`` run Simple only (AWS
p6-b200: the aws-ofi-nccl plugin sets NCCL_PROTO=simple where the fabric does not deliver
128-byte writes in order, aws/aws-ofi-nccl#850). All-to-all and send/recv run Simple. Not
modelled: NVLS in-switch reduction and tree all-reduce at small sizes. Measured
bus-bandwidth curves (``BusBandwidthTable``) replace the analytical estimate wherever they
cover a point.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from mosaic.errors import MosaicInputError, shown
from mosaic.perf.fitted_constants import fitted

if TYPE_CHECKING:  # pandas only types the measured tables; importing it costs 0.6 s of start-up
    import pandas as pd

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send_recv")
MEASURED = "measured"
ANALYTICAL = "analytical"


def _c(name: str) -> float:
    return float(fitted("collectives", name))


_PROTOCOLS = fitted("collectives", "nccl_protocols")
# Share of the NVLink peak (one direction) that DeepEP's normal dispatch kernels move inside
# a node: 153 GB/s dispatch (158 combine) on H800, whose NVLink is 200 GB/s per direction
# (deepseek-ai/DeepEP README, "Normal kernels with NVLink and RDMA forwarding", intranode
# rows). NCCL's pairwise all-to-all reaches ~0.55 of peak (p2p_scale_up_efficiency, fitted
# to measured B200 all-to-alls). HybridEP is NVIDIA's kernel of the same design and is
# taken at the same rate.
DEEPEP_NVLINK_EFFICIENCY = 153.0 / 200.0
# SMs DeepEP's normal (training) kernels occupy while a dispatch or combine runs: the
# Buffer's num_sms default (deepseek-ai/DeepEP @ dd758ca deep_ep/buffers/legacy.py
# `num_sms: int = 20`), Megatron-Core's moe_deepep_num_sms default (TransformerConfig), and
# the 20 of an H800's 132 SMs the DeepSeek-V3 report dedicates to communication
# (arXiv:2412.19437 Sec. 3.2.2: 'only 20 SMs are sufficient to fully utilize the bandwidths
# of IB and NVLink'). Compute that overlaps the all-to-all runs on the other SMs.
DEEPEP_COMMUNICATION_SMS = 20
# Compute that runs while a collective is in flight is slowed by the SMs and memory
# bandwidth the NCCL kernels take: 18.9% on average (40.0% at most) over GPT and LLaMA
# training on 4 A100, H100, MI250 and MI210, against the same compute with no
# communication beside it (Lee, Oh, Kim, Go, Park, Mahajan 2025, "Characterizing
# Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning",
# arXiv:2507.03114, abstract). The same share of an H100's SMs is what an overlapped NCCL
# all-gather holds: 24 CTAs of 132 SMs = 18.2% (NVIDIA developer forum, "Compute-
# Communication Overlap Causes Severe GEMM Performance Degradation because of Tail
# Effect", nsys trace of an FSDP-style prefetch). Compute of C seconds hiding A seconds of
# collective then takes C + slowdown·A. DeepEP's kernels are costed by their own SM count
# (DEEPEP_COMMUNICATION_SMS) instead.
OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN = 0.189


def hidden_collective_slowdown_s(collective_s: npt.ArrayLike, exposed_s: npt.ArrayLike = 0.0
                                 ) -> np.ndarray:
    """Compute time lost beside the part of ``collective_s`` seconds of collectives that is
    hidden (not ``exposed_s``): OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN of it."""
    return OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN * np.maximum(
        0.0, np.asarray(collective_s, dtype=float) - exposed_s)
_LL_CAP = _PROTOCOLS["ll_max_bus_bw_bytes_per_s"]


def ll_max_bus_bw_bytes_per_s(generation: str | None) -> float:
    """NCCL's LL bus-bandwidth cap inside one domain for a GPU generation (Hopper if None)."""
    caps = _LL_CAP["one_domain"]
    return float(caps.get(generation or "hopper", caps["hopper"]))


@dataclass(frozen=True)
class Interconnect:
    """Links of one cluster as the collective model sees them (SI units, per GPU)."""

    scale_up_domain_gpus: int
    """GPUs sharing one NVLink/NVSwitch domain (8 for HGX, 72 for NVL72)."""
    gpus_per_node: int
    """GPUs per host (used to count nodes a group spans, paper Eq. 15)."""
    scale_up_bw_bytes_per_s: float
    """NVLink bandwidth per GPU, one direction."""
    scale_out_bw_bytes_per_s: float
    """Scale-out (NIC) bandwidth per GPU, one direction."""
    scale_up_latency_s: float = _c("scale_up_latency_s")
    """Latency of one sequential step over NVLink."""
    scale_out_latency_s: float = _c("scale_out_latency_s")
    """Latency of one sequential step when the group spans domains."""
    launch_latency_s: float = _c("launch_latency_s")
    """Fixed cost of one collective call (launch, rank hand-shake)."""
    ring_scale_up_efficiency: float = _c("ring_scale_up_efficiency")
    """Achieved / peak NVLink bandwidth of ring collectives."""
    ring_scale_out_efficiency: float = _c("ring_scale_out_efficiency")
    """Achieved / peak NIC bandwidth of ring collectives."""
    p2p_scale_up_efficiency: float = _c("p2p_scale_up_efficiency")
    """Achieved / peak NVLink bandwidth of all-to-all and send/recv."""
    p2p_scale_out_efficiency: float = _c("p2p_scale_out_efficiency")
    """Achieved / peak NIC bandwidth of all-to-all and send/recv."""
    ll_max_bus_bw_bytes_per_s: float = ll_max_bus_bw_bytes_per_s(None)
    """Cap on the LL protocol's bus bandwidth inside one domain (NCCL llMaxBws)."""
    low_latency_protocols: bool = True
    """NCCL may pick LL/LL128 (the system's ``nccl_low_latency_protocols``)."""
    measured: BusBandwidthTable | None = None
    """Measured bus-bandwidth curves used where they cover a call (else the model)."""
    scale_up_link_bw_bytes_per_s: float | None = None
    """On a switchless mesh (AMD Infinity Fabric), the direct link to one peer, one
    direction; None = a switched fabric (NVSwitch): any group gets the full rate."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in ("measured", "low_latency_protocols") or getattr(self, f.name) is None:
                continue
            value = getattr(self, f.name)
            if f.type == "int":
                if int(value) != value or value < 1:
                    raise MosaicInputError(f"Interconnect.{f.name}={value!r}; allowed: "
                                           "integer >= 1")
            elif f.name.endswith("_efficiency"):
                if not 0.0 < value <= 1.0:
                    raise MosaicInputError(f"Interconnect.{f.name}={value!r}; allowed: (0, 1]")
            elif f.name.endswith("_latency_s"):
                if value < 0.0:
                    raise MosaicInputError(f"Interconnect.{f.name}={value!r}; allowed: >= 0")
            elif not value > 0:
                raise MosaicInputError(f"Interconnect.{f.name}={value!r}; allowed: > 0")


@dataclass(frozen=True)
class GroupPlacement:
    """Where the members of a collective group sit relative to domains (arrays)."""

    ranks_per_domain: np.ndarray
    """Members sharing a domain, in the group's worst-placed domain."""
    domains_spanned: np.ndarray
    """Domains a group touches: ceil(n / ranks_per_domain)."""

    @property
    def inside_domain(self) -> np.ndarray:
        return self.domains_spanned == 1


def _as_int(name: str, value: npt.ArrayLike) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "i":  # plan fields: already integers (no rounding to check)
        as_int = arr.astype(np.int64, copy=False)
        if (as_int < 1).any():
            raise MosaicInputError(f"{name} must be integers >= 1; got {arr.ravel()[:8]}")
        return as_int
    as_int = np.rint(arr).astype(np.int64)
    if (as_int < 1).any() or (as_int != arr).any():
        raise MosaicInputError(f"{name} must be integers >= 1; got {arr.ravel()[:8]}")
    return as_int


def group_placement(
    n: npt.ArrayLike, stride: npt.ArrayLike, domain_gpus: npt.ArrayLike
) -> GroupPlacement:
    """Ranks per domain and domains spanned for groups of size ``n`` and rank ``stride``.

    Aligned groups occupy ranks ``b + i*stride`` inside blocks of ``n*stride`` ranks, so a
    domain of ``d`` GPUs holds ``gcd(d, n*stride) / stride`` members of a group (clipped to
    [1, n]). This is exact when the sizes divide each other (power-of-two layouts) and the
    worst case otherwise (a group that straddles a domain edge is paced by its thinnest part).
    """
    n_i, s_i, d_i = (_as_int(k, v) for k, v in (("n", n), ("stride", stride),
                                                  ("domain_gpus", domain_gpus)))
    return _placement(n_i, s_i, d_i)


def _placement(n_i: np.ndarray, s_i: np.ndarray, d_i: npt.ArrayLike) -> GroupPlacement:
    """:func:`group_placement` of sizes, strides and domain sizes already checked to be
    integers >= 1."""
    per_domain = np.minimum(np.maximum(np.gcd(d_i, n_i * s_i) // s_i, 1), n_i)  # np.clip
    return GroupPlacement(per_domain, -(-n_i // per_domain))


def ep_and_pp_nodes_spanned(ep: npt.ArrayLike, etp: npt.ArrayLike, pp: npt.ArrayLike,
                            tp: npt.ArrayLike, cp: npt.ArrayLike, dp: npt.ArrayLike,
                            gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """Hosts (not NVLink domains) an EP group spans (stride etp) and hosts the pipeline spans
    (stride tp·cp·dp): N_node of paper Eq. 15, from the actual rank placement."""
    tp_cp_dp = np.asarray(tp) * np.asarray(cp) * np.asarray(dp)
    return (group_placement(ep, etp, gpus_per_node).domains_spanned,
            group_placement(pp, tp_cp_dp, gpus_per_node).domains_spanned)


def bus_factor(collective: str, n: npt.ArrayLike) -> np.ndarray:
    """busbw / algbw of nccl-tests (doc/PERFORMANCE.md; src/alltoall.cu AlltoAllGetBw)."""
    n_f = np.asarray(n, dtype=float)
    if collective == "all_reduce":
        return 2.0 * (n_f - 1.0) / n_f
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n_f - 1.0) / n_f
    if collective == "send_recv":
        return np.ones_like(n_f)
    raise MosaicInputError(f"unknown collective {shown(collective)}; allowed: "
                           f"{', '.join(COLLECTIVES)}")


def _step_latency_s(p: GroupPlacement, ic: Interconnect) -> np.ndarray:
    return np.where(p.inside_domain, ic.scale_up_latency_s, ic.scale_out_latency_s)


def scale_up_group_bw_bytes_per_s(ic: Interconnect, ranks_per_domain: npt.ArrayLike
                                  ) -> np.ndarray:
    """Scale-up bandwidth per GPU, one direction, towards the other members of its group
    in its domain (``ranks_per_domain`` k of them counting itself).

    On a switched fabric (NVSwitch) any group gets the GPU's whole NVLink rate. On a
    switchless full mesh each GPU has one direct link per peer (MI300X: seven xGMI links of
    64 GB/s each way; AMD ROCm blog 'Understanding RCCL Bandwidth and xGMI Performance on
    AMD Instinct MI300X', 2025), so traffic to k-1 peers moves over k-1 links at most:
    64 GB/s for a pair, 448 GB/s for all 8. A lone rank (k = 1, a group spanning domains
    one rank each) still reaches its next hop over one link.
    """
    k = np.asarray(ranks_per_domain, dtype=float)
    if ic.scale_up_link_bw_bytes_per_s is None:
        return np.full(k.shape, ic.scale_up_bw_bytes_per_s)
    return np.minimum(ic.scale_up_bw_bytes_per_s,
                      np.maximum(k - 1.0, 1.0) * ic.scale_up_link_bw_bytes_per_s)


def _ring_up_bw(ic: Interconnect, ranks_per_domain: npt.ArrayLike) -> np.ndarray:
    return scale_up_group_bw_bytes_per_s(ic, ranks_per_domain) * ic.ring_scale_up_efficiency


def _ring_out_bw(ic: Interconnect) -> float:
    return ic.scale_out_bw_bytes_per_s * ic.ring_scale_out_efficiency


def ring_bus_bw_bytes_per_s(p: GroupPlacement, ic: Interconnect) -> np.ndarray:
    """Bus bandwidth of a ring: NVLink inside a domain, else min(NVLink, k NIC shares).

    A ring that spans domains runs one channel per NIC; each inter-domain edge carries the
    full ring traffic, spread over the ``k = ranks_per_domain`` NICs of the group's GPUs.
    Checked against ScalePlan: 16/32-rank groups over 2/4 p6-b200 nodes saturate at
    360-366 GB/s bus bandwidth (8 x 50 GB/s NICs), stride-8 groups at 46-47 GB/s.
    """
    up = _ring_up_bw(ic, p.ranks_per_domain)
    spanning = np.minimum(up, p.ranks_per_domain * _ring_out_bw(ic))
    return np.where(p.inside_domain, up, spanning)


def _cheapest_protocol_s(steps: np.ndarray, simple_transfer_s: np.ndarray,
                         bus_bytes: np.ndarray, p: GroupPlacement, ic: Interconnect
                         ) -> np.ndarray:
    """L + min over Simple, LL128, LL of steps·alpha_proto + transfer_proto.

    ``simple_transfer_s`` is the Simple protocol's wire time; LL128 stretches it by
    1/0.92, LL by 1/0.5 or to ``bus_bytes`` over the LL cap, whichever is slower.
    """
    alpha = _step_latency_s(p, ic)
    ratio = _PROTOCOLS["step_latency_ratio"]
    fraction = _PROTOCOLS["bus_bw_fraction"]
    ll_cap = np.where(p.inside_domain, ic.ll_max_bus_bw_bytes_per_s,
                      np.where(p.domains_spanned == 2, _LL_CAP["two_domains"],
                               _LL_CAP["more_domains"]))

    def step_ratio(protocol: str) -> np.ndarray:
        return np.where(p.inside_domain, ratio[protocol]["scale_up"],
                        ratio[protocol]["scale_out"])

    simple = steps * alpha + simple_transfer_s
    ll128 = steps * alpha * step_ratio("ll128") + simple_transfer_s / fraction["ll128"]
    ll = (steps * alpha * step_ratio("ll")
          + np.maximum(simple_transfer_s / fraction["ll"], bus_bytes / ll_cap))
    if not ic.low_latency_protocols:
        return ic.launch_latency_s + simple
    return ic.launch_latency_s + np.minimum(simple, np.minimum(ll128, ll))


def _ring_time_s(full_bytes: np.ndarray, n: np.ndarray, p: GroupPlacement,
                 ic: Interconnect) -> np.ndarray:
    """Ring all-gather / reduce-scatter: L + (n-1)·alpha + (n-1)/n · bytes / busbw (Simple),
    or LL128/LL where cheaper."""
    bus_bytes = (n - 1) / n * full_bytes
    return _cheapest_protocol_s(n - 1, bus_bytes / ring_bus_bw_bytes_per_s(p, ic), bus_bytes,
                                p, ic)


def _all_reduce_analytical_s(size_bytes: np.ndarray, n: np.ndarray, p: GroupPlacement,
                             ic: Interconnect) -> np.ndarray:
    """Ring all-reduce inside a domain; hierarchical (NCCL tree / NVLS-tree) across domains.

    Inside a domain: L + 2(n-1)·alpha + 2(n-1)/n · bytes / busbw (= reduce-scatter +
    all-gather). Across D domains with k ranks each, the pipelined hierarchical algorithm is
    paced by its slower phase: the intra-domain reduce-scatter + all-gather,
    2(k-1)/k · bytes / NVLink, or the inter-domain all-reduce of a 1/k shard on k NICs,
    2(D-1)/D · bytes / (k · NIC). For k = 1 both forms equal the ring. ScalePlan: 16 ranks
    over 2 p6-b200 nodes reach 646 GB/s all-reduce bus bandwidth, far above the
    400 GB/s NIC limit a flat ring would allow. LL128/LL replace Simple where cheaper.
    """
    k, d = p.ranks_per_domain, p.domains_spanned
    intra_s = 2.0 * (k - 1) / k * size_bytes / _ring_up_bw(ic, k)
    inter_s = 2.0 * (d - 1) / d * size_bytes / (k * _ring_out_bw(ic))
    bus_bytes = 2.0 * (n - 1) / n * size_bytes
    return _cheapest_protocol_s(2 * (n - 1), np.maximum(intra_s, inter_s), bus_bytes, p, ic)


def _all_to_all_analytical_s(bytes_per_rank: np.ndarray, n: np.ndarray, p: GroupPlacement,
                             ic: Interconnect) -> np.ndarray:
    """Pairwise all-to-all: each rank sends (n-1)/n of its buffer.

    The (k-1)/n share to peers in the same domain goes over NVLink, the (n-k)/n share to
    other domains through the rank's own NIC; both run concurrently, so the slower one
    sets the time. Plus (n-1) step latencies (one per peer).
    """
    k = p.ranks_per_domain
    up_bw = scale_up_group_bw_bytes_per_s(ic, k) * ic.p2p_scale_up_efficiency
    out_bw = ic.scale_out_bw_bytes_per_s * ic.p2p_scale_out_efficiency
    intra_s = (k - 1) / n * bytes_per_rank / up_bw
    inter_s = (n - k) / n * bytes_per_rank / out_bw
    return (ic.launch_latency_s + (n - 1) * _step_latency_s(p, ic)
            + np.maximum(intra_s, inter_s))


_ANALYTICAL = {
    "all_gather": _ring_time_s,
    "reduce_scatter": _ring_time_s,
    "all_reduce": _all_reduce_analytical_s,
    "all_to_all": _all_to_all_analytical_s,
}


def _bytes(name: str, value: npt.ArrayLike) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if not (arr >= 0.0).all():  # (NaN too)
        raise MosaicInputError(f"{name} must be >= 0 bytes; got {arr.ravel()[:8]}")
    return arr


def _estimate(collective: str, message_bytes: npt.ArrayLike, n: npt.ArrayLike,
              stride: npt.ArrayLike, ic: Interconnect,
              table: BusBandwidthTable | None) -> tuple[np.ndarray, np.ndarray]:
    """(time_s, source) of a collective; zero time for single-rank groups."""
    table = table if table is not None else ic.measured
    size, n_i, s_i = np.broadcast_arrays(_bytes("message_bytes", message_bytes),
                                         _as_int("n", n), _as_int("stride", stride))
    p = _placement(n_i, s_i, _as_int("domain_gpus", ic.scale_up_domain_gpus))
    time_s = _ANALYTICAL[collective](size, n_i.astype(float), p, ic)
    measured = np.zeros(size.shape, dtype=bool)
    if table is not None:
        bw = table.bus_bw_bytes_per_s(collective, n_i, size, p.inside_domain,
                                      p.ranks_per_domain)
        measured = np.isfinite(bw)
        time_s = np.where(measured, bus_factor(collective, n_i) * size / np.where(
            measured, bw, 1.0), time_s)
    time_s = np.where(n_i == 1, 0.0, time_s)
    return time_s, np.where(measured & (n_i > 1), MEASURED, ANALYTICAL)


def all_gather_time_s(full_bytes: npt.ArrayLike, n: npt.ArrayLike, stride: npt.ArrayLike,
                      ic: Interconnect, table: BusBandwidthTable | None = None) -> np.ndarray:
    """All-gather of a buffer of ``full_bytes`` (the gathered size; each rank owns 1/n)."""
    return _estimate("all_gather", full_bytes, n, stride, ic, table)[0]


def reduce_scatter_time_s(full_bytes: npt.ArrayLike, n: npt.ArrayLike, stride: npt.ArrayLike,
                          ic: Interconnect,
                          table: BusBandwidthTable | None = None) -> np.ndarray:
    """Reduce-scatter of a ``full_bytes`` buffer (each rank keeps 1/n reduced)."""
    return _estimate("reduce_scatter", full_bytes, n, stride, ic, table)[0]


def all_reduce_time_s(size_bytes: npt.ArrayLike, n: npt.ArrayLike, stride: npt.ArrayLike,
                      ic: Interconnect, table: BusBandwidthTable | None = None) -> np.ndarray:
    """All-reduce of a ``size_bytes`` buffer held by every rank."""
    return _estimate("all_reduce", size_bytes, n, stride, ic, table)[0]


def all_to_all_time_s(bytes_per_rank: npt.ArrayLike, n: npt.ArrayLike, stride: npt.ArrayLike,
                      ic: Interconnect, table: BusBandwidthTable | None = None) -> np.ndarray:
    """All-to-all where each rank's send buffer is ``bytes_per_rank`` (1/n to each peer).

    This is one expert-parallel dispatch or combine (the buffer is tokens x top-k x hidden x
    bytes per element on one rank).
    """
    return _estimate("all_to_all", bytes_per_rank, n, stride, ic, table)[0]


def node_deduplicated_dispatch_time_s(token_bytes: npt.ArrayLike, top_k: int, experts: int,
                                      n: npt.ArrayLike, stride: npt.ArrayLike,
                                      ic: Interconnect,
                                      max_domains_per_token: npt.ArrayLike | None = None
                                      ) -> np.ndarray:
    """One hierarchical (DeepEP/HybridEP-style) MoE dispatch or combine of an EP group.

    Each of a rank's tokens (``token_bytes`` in all) crosses the scale-out network once per
    remote domain that holds any of its ``top_k`` experts, then is forwarded over NVLink to
    the expert's GPU (DeepEP internode kernels: RDMA to the same-index GPU of the target
    node, NVLink forwarding; deepseek-ai/DeepEP README). With uniform routing over
    ``experts`` spread evenly over the D domains the group spans, a remote domain is hit
    with probability 1 - C(E - E/D, K)/C(E, K), so (D-1) of those copies cross the network
    instead of the K·(D-1)/D of a pairwise all-to-all; every copy not for the sending GPU
    crosses NVLink once, K·(n-1)/n, at DeepEP's measured share of the NVLink peak
    (``DEEPEP_NVLINK_EFFICIENCY``); inside one domain nothing crosses the network. Latency
    as the pairwise all-to-all; a measured NCCL all-to-all table describes neither pattern,
    so this stays analytical.

    Node-limited routing (``max_domains_per_token`` = M; DeepSeek-V3 report arXiv:2412.19437
    Sec. 3.2.2 and Sec. 4.2: each token goes to at most M = 4 nodes, chosen by the sum of its
    highest expert affinities per node, then top-K among those nodes' experts): with the M
    domains uniform over the D and the K experts uniform over their M·E/D experts, a token
    touches M·(1 − C(E·M/D − E/D, K)/C(E·M/D, K)) domains, (D − 1)/D of them remote. For
    M ≥ D this is the unrestricted count above.
    """
    size, n_i, s_i = np.broadcast_arrays(_bytes("token_bytes", token_bytes), _as_int("n", n),
                                         _as_int("stride", stride))
    p = _placement(n_i, s_i, _as_int("domain_gpus", ic.scale_up_domain_gpus))
    domains = p.domains_spanned.astype(float)
    per_domain = experts / domains
    chosen = (domains if max_domains_per_token is None
              else np.minimum(np.asarray(max_domains_per_token, dtype=float), domains))
    eligible = per_domain * chosen  # the experts of the domains a token may use
    miss = np.ones_like(domains)
    for i in range(top_k):  # C(E_M - E/D, K) / C(E_M, K) as a product
        miss = miss * np.clip((eligible - per_domain - i) / np.maximum(eligible - i, 1.0),
                              0.0, 1.0)
    remote_copies = np.where(chosen < domains, chosen * (1 - miss) * (domains - 1) / domains,
                             (domains - 1) * (1 - miss))
    n_f = n_i.astype(float)
    up_bw = scale_up_group_bw_bytes_per_s(ic, p.ranks_per_domain) * DEEPEP_NVLINK_EFFICIENCY
    out_bw = ic.scale_out_bw_bytes_per_s * ic.p2p_scale_out_efficiency
    intra_s = top_k * (n_f - 1) / n_f * size / up_bw
    inter_s = np.where(p.inside_domain, 0.0, remote_copies * size / out_bw)
    time_s = (ic.launch_latency_s + (n_f - 1) * _step_latency_s(p, ic)
              + np.maximum(intra_s, inter_s))
    return np.where(n_i == 1, 0.0, time_s)


def send_recv_time_s(message_bytes: npt.ArrayLike, crosses_domain: npt.ArrayLike,
                     ic: Interconnect, table: BusBandwidthTable | None = None) -> np.ndarray:
    """Point-to-point transfer of ``message_bytes`` (pipeline-parallel activations).

    L + alpha + bytes / (link bw x p2p efficiency), over NVLink (on a mesh, the one link to
    the peer) or the sender's NIC.
    """
    return send_recv_estimate(message_bytes, crosses_domain, ic, table)[0]


def send_recv_estimate(message_bytes: npt.ArrayLike, crosses_domain: npt.ArrayLike,
                       ic: Interconnect,
                       table: BusBandwidthTable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(time_s, source) of :func:`send_recv_time_s`."""
    table = table if table is not None else ic.measured
    size, crosses = np.broadcast_arrays(_bytes("message_bytes", message_bytes),
                                        np.asarray(crosses_domain, dtype=bool))
    bw = np.where(crosses, ic.scale_out_bw_bytes_per_s * ic.p2p_scale_out_efficiency,
                  scale_up_group_bw_bytes_per_s(ic, 2) * ic.p2p_scale_up_efficiency)
    alpha = np.where(crosses, ic.scale_out_latency_s, ic.scale_up_latency_s)
    time_s = ic.launch_latency_s + alpha + size / bw
    measured = np.zeros(size.shape, dtype=bool)
    if table is not None:
        two = np.full(size.shape, 2, dtype=np.int64)
        bw_measured = table.bus_bw_bytes_per_s("send_recv", two, size, ~crosses,
                                               np.where(crosses, 1, 2))
        measured = np.isfinite(bw_measured)
        time_s = np.where(measured, size / np.where(measured, bw_measured, 1.0), time_s)
    return time_s, np.where(measured, MEASURED, ANALYTICAL)


def collective_estimate(collective: str, message_bytes: npt.ArrayLike, n: npt.ArrayLike,
                        stride: npt.ArrayLike, ic: Interconnect,
                        table: BusBandwidthTable | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(time_s, source) of a group collective; ``source`` is "measured" or "analytical".

    ``collective`` is one of all_gather, reduce_scatter, all_reduce, all_to_all, with the
    message-size convention of the matching ``*_time_s`` function.
    """
    if collective not in _ANALYTICAL:
        raise MosaicInputError(
            f"unknown group collective {shown(collective)}; allowed: {', '.join(_ANALYTICAL)}")
    return _estimate(collective, message_bytes, n, stride, ic, table)


# --------------------------------------------------------------------------------------
# Measured bus-bandwidth curves
# --------------------------------------------------------------------------------------

TABLE_COLUMNS = ("collective", "group_size", "message_bytes", "bus_bw_bytes_per_s", "scope")
SCOPES = ("intra", "inter")


@dataclass(frozen=True)
class _Curve:
    group_size: int
    log_bytes: np.ndarray
    log_bw: np.ndarray

    def at(self, log_bytes: np.ndarray) -> np.ndarray:
        """log bus bandwidth, linear in log-log inside the measured sizes, else NaN."""
        inside = (log_bytes >= self.log_bytes[0]) & (log_bytes <= self.log_bytes[-1])
        return np.where(inside, np.interp(log_bytes, self.log_bytes, self.log_bw), np.nan)


class BusBandwidthTable:
    """Measured NCCL bus-bandwidth curves: (collective, scope, group size, bytes) -> busbw.

    Columns: ``collective`` (all_gather, reduce_scatter, all_reduce, all_to_all, send_recv),
    ``group_size``, ``message_bytes`` (nccl-tests size convention, see module docstring),
    ``bus_bw_bytes_per_s``, ``scope`` ("intra": group inside one scale-up domain, "inter":
    spanning domains) and optionally ``ranks_per_domain`` (group members per domain, which
    separates contiguous from strided inter-domain layouts; without it inter rows match any
    layout). Inside a curve the bandwidth is interpolated linearly in log(bytes)-log(busbw);
    between two measured group sizes of the same (collective, scope, layout), linearly in
    log(n). Anything else is not covered and returns NaN: the caller falls back to the
    analytical model and labels the point.
    """

    def __init__(self, frame: pd.DataFrame) -> None:
        frame = _validate_table(frame)
        self._by_layout = "ranks_per_domain" in frame.columns
        layout = (np.where(frame["scope"] == "inter", frame["ranks_per_domain"], 0)
                  if self._by_layout else np.zeros(len(frame)))
        keyed = frame.assign(_layout=layout.astype(np.int64))
        self._curves: dict[tuple[str, str, int], list[_Curve]] = {
            (str(c), str(s), int(lay)): _curves_of(rows)
            for (c, s, lay), rows in keyed.groupby(["collective", "scope", "_layout"])
        }

    @classmethod
    def from_file(cls, path: str | Path) -> BusBandwidthTable:
        """Load a CSV or Parquet file of measured curves."""
        return cls(_read_table(Path(path)))

    def bus_bw_bytes_per_s(self, collective: str, n: npt.ArrayLike,
                           message_bytes: npt.ArrayLike, inside_domain: npt.ArrayLike,
                           ranks_per_domain: npt.ArrayLike) -> np.ndarray:
        """Interpolated bus bandwidth, NaN where the measurements do not cover the point."""
        n_a, size, inside, per_domain = np.broadcast_arrays(
            np.asarray(n, dtype=float), np.asarray(message_bytes, dtype=float),
            np.asarray(inside_domain, dtype=bool), np.asarray(ranks_per_domain))
        layouts = np.where(inside | (not self._by_layout), 0, per_domain)
        out = np.full(size.shape, np.nan)
        for scope, in_scope in (("intra", inside), ("inter", ~inside)):
            for layout in np.unique(layouts[in_scope]):
                curves = self._curves.get((collective, scope, int(layout)))
                mask = in_scope & (layouts == layout)
                if curves:
                    with np.errstate(divide="ignore"):
                        log_bw = _between_sizes(curves, n_a[mask], np.log(size[mask]))
                    out[mask] = np.exp(log_bw)
        return out

    def source(self, collective: str, n: npt.ArrayLike, message_bytes: npt.ArrayLike,
               inside_domain: npt.ArrayLike, ranks_per_domain: npt.ArrayLike) -> np.ndarray:
        """"measured" where the table covers a point, else "analytical"."""
        bw = self.bus_bw_bytes_per_s(collective, n, message_bytes, inside_domain,
                                     ranks_per_domain)
        return np.where(np.isfinite(bw), MEASURED, ANALYTICAL)


def _curves_of(rows: pd.DataFrame) -> list[_Curve]:
    """One curve per group size; repeated sizes are averaged in log space."""
    curves = []
    for n, g in rows.groupby("group_size"):
        sizes, inverse = np.unique(np.log(g["message_bytes"].to_numpy(float)),
                                   return_inverse=True)
        log_bw = np.log(g["bus_bw_bytes_per_s"].to_numpy(float))
        curves.append(_Curve(int(n), sizes, np.bincount(inverse, log_bw) / np.bincount(inverse)))
    return sorted(curves, key=lambda c: c.group_size)


def _between_sizes(curves: list[_Curve], n: np.ndarray, log_bytes: np.ndarray) -> np.ndarray:
    """log busbw interpolated in log(n) between the two measured group sizes around n."""
    sizes = np.array([c.group_size for c in curves], dtype=float)
    values = np.stack([c.at(log_bytes) for c in curves])  # (curves, points)
    if len(curves) == 1:
        return np.where(n == sizes[0], values[0], np.nan)
    hi = np.clip(np.searchsorted(sizes, n), 1, len(sizes) - 1)
    lo = hi - 1
    cols = np.arange(n.size)
    v_lo, v_hi = values[lo, cols], values[hi, cols]
    w = np.log(n / sizes[lo]) / np.log(sizes[hi] / sizes[lo])
    between = np.where(n == sizes[lo], v_lo,
                       np.where(n == sizes[hi], v_hi, (1 - w) * v_lo + w * v_hi))
    return np.where((n >= sizes[0]) & (n <= sizes[-1]), between, np.nan)


def _read_table(path: Path) -> pd.DataFrame:
    from mosaic.table_files import read_table

    return read_table(path, "measured collective table")


def _validate_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its number columns as floats, or MosaicInputError naming the first bad
    row (counted from 1, the first after the header) and value."""
    from mosaic.table_files import bad_row_error, numeric_columns

    missing = [c for c in TABLE_COLUMNS if c not in frame.columns]
    if missing:
        raise MosaicInputError(f"bus-bandwidth table lacks columns {missing}; "
                               f"required: {', '.join(TABLE_COLUMNS)}")
    what = "bus-bandwidth table"
    frame = numeric_columns(frame, ["group_size", "message_bytes", "bus_bw_bytes_per_s"], what)
    checks = (
        ("collective", ~frame["collective"].isin(COLLECTIVES), ", ".join(COLLECTIVES)),
        ("scope", ~frame["scope"].isin(SCOPES), ", ".join(SCOPES)),
        ("group_size", ~((frame["group_size"] >= 2) & (frame["group_size"] % 1 == 0)),
         "integers >= 2"),
        ("message_bytes", ~(frame["message_bytes"] > 0), "> 0"),
        ("bus_bw_bytes_per_s", ~(frame["bus_bw_bytes_per_s"] > 0), "> 0"),
    )
    for column, bad, allowed in checks:
        if bad.any():
            raise bad_row_error(what, frame, column, bad.to_numpy(), allowed)
    return frame
