"""Node types (System) and clusters of them (Cluster).

A System is one host type: its device, GPUs per host, the NVLink (scale-up) domain and the
scale-out NICs. A GB200 NVL72 rack is a System whose host is a 4-GPU compute tray and whose
scale-up domain is 72 GPUs. A Cluster is `n_nodes` hosts of one System.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from mosaic.errors import MosaicInputError
from mosaic.hardware.device import Device
from mosaic.limits import check_range


def job_domain_gpus(domain_gpus: int, gpus_per_node: int, n_devices: int) -> int:
    """GPUs of the job that share one NVLink domain.

    A job is assumed to fill every domain it uses equally with whole hosts: the largest
    multiple of ``gpus_per_node`` that is at most the domain size and divides the job's
    device count (e.g. 256 GPUs on GB200 NVL72 racks run as 4 racks x 64 GPUs).
    """
    best = min(gpus_per_node, n_devices)
    for size in range(gpus_per_node, min(domain_gpus, n_devices) + 1, gpus_per_node):
        if n_devices % size == 0:
            best = size
    return best


@dataclass(frozen=True)
class System:
    """A node type (SI units; bandwidths per direction).

    Attributes:
        name: canonical catalog name, e.g. "p6-b200.48xlarge".
        aliases: other names that resolve to this system.
        description: one line for people.
        device: the accelerator in every slot.
        gpus_per_node: GPUs per host (OS image, NICs, failure unit).
        scale_up_domain_gpus: GPUs sharing one NVLink domain (8 for HGX, 72 for NVL72).
        nics_per_node: scale-out NICs per host.
        nic_bw_bytes_per_s: line rate of one NIC in one direction, bytes/s.
        scale_out_fabric: name of the scale-out network, for people.
        scale_up_latency_s: per-step latency (alpha) of one scale-up hop; None: the
            performance model's fitted default.
        scale_out_latency_s: per-step latency (alpha) of one scale-out hop; None: the
            performance model's fitted default.
        nccl_low_latency_protocols: NCCL may use its LL/LL128 protocols (False where the
            fabric's plugin forces Simple, e.g. AWS EFA).
        sources: provenance of every number, keyed by field name.
    """

    name: str
    aliases: tuple[str, ...]
    description: str
    device: Device
    gpus_per_node: int
    scale_up_domain_gpus: int
    nics_per_node: int
    nic_bw_bytes_per_s: float
    scale_out_fabric: str
    sources: Mapping[str, str]
    scale_up_latency_s: float | None = None
    scale_out_latency_s: float | None = None
    nccl_low_latency_protocols: bool = True

    def __hash__(self) -> int:
        # Mapping fields are not hashable; the catalog guarantees unique names.
        return hash(("System", self.name))

    def nodes_text(self, n_nodes: int) -> str:
        """``n_nodes`` of this system in words: '32 × DGX-B200'; a node inside a larger
        NVLink domain is a tray, and the domains are counted as the job fills them
        (:func:`job_domain_gpus`, what the step is costed on): '72 × GB200-NVL72 trays of 4
        GPUs (4 NVLink domains of 72)', '64 × ... (16 trays in each of 4 NVLink domains of
        72)' (a trial read '72 × GB200-NVL72' as 72 racks; a later one read '7 NVLink
        domains of 72 and 8 GPUs of one more' where 8 racks of 64 GPUs were costed)."""
        if self.scale_up_domain_gpus <= self.gpus_per_node:
            return f"{n_nodes} × {self.name}"
        gpus = n_nodes * self.gpus_per_node
        per_domain = job_domain_gpus(self.scale_up_domain_gpus, self.gpus_per_node, gpus)
        domains = gpus // per_domain
        if per_domain == self.scale_up_domain_gpus:
            where = f"{domains} NVLink domain{'s' if domains != 1 else ''} of {per_domain}"
        elif domains == 1:
            where = f"part of one NVLink domain of {self.scale_up_domain_gpus}"
        else:
            where = (f"{per_domain // self.gpus_per_node} trays in each of {domains} NVLink "
                     f"domains of {self.scale_up_domain_gpus}")
        return f"{n_nodes} × {self.name} trays of {self.gpus_per_node} GPUs ({where})"

    def network_text(self) -> str:
        """The links a prediction costs, in words: 'NVLink domain of 8 GPUs at 450 GB/s per
        GPU; RoCE 400 Gb/s: 8 NICs of 400 Gb/s per node, 400 Gb/s per GPU' (one direction;
        a trial's reports named the node type but not the network they assumed)."""
        link = self.device.scale_up_link_bw_bytes_per_s
        scale_up = (f"NVLink domain of {self.scale_up_domain_gpus} GPUs at "
                    f"{self.scale_up_bw_bytes_per_s / 1e9:g} GB/s per GPU"
                    if link is None else  # a switchless mesh: one link to each peer
                    f"scale-up mesh of {self.scale_up_domain_gpus} GPUs at "
                    f"{self.scale_up_bw_bytes_per_s / 1e9:g} GB/s per GPU, "
                    f"{link / 1e9:g} GB/s to each peer")
        return (f"{scale_up}; "
                f"{self.scale_out_fabric}: {self.nics_per_node} NICs of "
                f"{self.nic_bw_bytes_per_s * 8 / 1e9:g} Gb/s per node, "
                f"{self.scale_out_bw_bytes_per_s * 8 / 1e9:g} Gb/s per GPU (one direction)")

    @property
    def scale_up_bw_bytes_per_s(self) -> float:
        """NVLink bandwidth per GPU, one direction (a property of the device)."""
        return self.device.scale_up_bw_bytes_per_s

    @property
    def scale_out_bw_bytes_per_s(self) -> float:
        """Scale-out NIC bandwidth per GPU, one direction: NICs x rate / GPUs per host."""
        return self.nics_per_node * self.nic_bw_bytes_per_s / self.gpus_per_node

    def source(self, field: str) -> str:
        """Provenance of one number, e.g. source("nic_bw_bytes_per_s")."""
        if field not in self.sources:
            raise MosaicInputError(
                f"system {self.name!r} has no field {field!r}: known are "
                f"{', '.join(sorted(self.sources))}"
            )
        return self.sources[field]

    def cluster(self, n_nodes: int) -> Cluster:
        """A cluster of `n_nodes` hosts of this system."""
        return Cluster(system=self, n_nodes=n_nodes)


@dataclass(frozen=True)
class Cluster:
    """`n_nodes` hosts of one System; the hardware half of the paper's (F_peak, N_dev)."""

    system: System
    n_nodes: int
    # GPUs of the one host a job smaller than a host runs on (a single-GPU or half-node
    # baseline); None: every GPU of every host
    gpus_used: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.n_nodes, bool) or not isinstance(self.n_nodes, int) or self.n_nodes < 1:
            raise MosaicInputError(
                f"cluster of {self.system.name!r}: n_nodes must be an integer >= 1, "
                f"got {self.n_nodes!r}"
            )
        if self.gpus_used is not None and not (
                self.n_nodes == 1 and self.is_part_of_host(self.system, self.gpus_used)):
            raise MosaicInputError(
                f"cluster of {self.system.name!r}: part of a host means one node and a "
                f"divisor of its {self.system.gpus_per_node} GPUs, got {self.n_nodes} "
                f"node(s) and {self.gpus_used} GPUs")

    @staticmethod
    def is_part_of_host(system: System, n_devices: int) -> bool:
        """Whether ``n_devices`` GPUs are a job on part of one host of ``system``: fewer
        than it holds, and a divisor of them (1, 2 or 4 of 8)."""
        return 1 <= n_devices < system.gpus_per_node and system.gpus_per_node % n_devices == 0

    @classmethod
    def from_n_devices(cls, system: System, n_devices: int) -> Cluster:
        """The cluster with `n_devices` GPUs: part of one host, or whole hosts."""
        if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
            raise MosaicInputError(
                f"cluster of {system.name!r}: n_devices must be a positive integer, got "
                f"{n_devices!r}")
        if cls.is_part_of_host(system, n_devices):
            return cls(system=system, n_nodes=1, gpus_used=n_devices)
        if n_devices % system.gpus_per_node:
            divisors = [d for d in range(1, system.gpus_per_node)
                        if system.gpus_per_node % d == 0]
            raise MosaicInputError(
                f"cluster of {system.name!r}: n_devices must be a multiple of "
                f"{system.gpus_per_node} GPUs per node (whole hosts) or, on part of one "
                f"host, one of {', '.join(map(str, divisors))}; got {n_devices!r}"
            )
        return cls(system=system, n_nodes=n_devices // system.gpus_per_node)

    @property
    def device(self) -> Device:
        return self.system.device

    @property
    def n_devices(self) -> int:
        """N_dev: total GPUs."""
        if self.gpus_used is not None:
            return self.gpus_used
        return self.n_nodes * self.system.gpus_per_node

    @property
    def description(self) -> str:
        """The cluster in words: '256 GPUs: 32 × DGX-B200', '4 GPUs of one DGX-H100 (8)'."""
        if self.gpus_used is not None:
            return (f"{self.gpus_used} GPU{'s' if self.gpus_used > 1 else ''} of one "
                    f"{self.system.name} ({self.system.gpus_per_node})")
        return f"{self.n_devices} GPUs: {self.system.nodes_text(self.n_nodes)}"

    @property
    def scale_up_domain_gpus(self) -> int:
        """GPUs per NVLink domain in this cluster (a small cluster fills part of one domain)."""
        return min(self.system.scale_up_domain_gpus, self.n_devices)

    def peak_flops_per_s_for(self, dtype: str) -> float:
        """Whole-cluster dense datasheet peak, F_peak * N_dev (paper Sec. 2.1)."""
        return self.device.peak_flops_per_s_for(dtype) * self.n_devices


# The name of a host-size variant (`mosaic plan --gpus-per-node`): the catalog resolves it back
# to the variant, so a plan made on one exports and predicts as a job (a trial's plan could
# not be exported: "unknown system 'p6-b200.48xlarge (4 GPUs/node)'")
# Spelled as loosely as a catalog name (catalog.name_key: case-insensitive, spaces, '-' and
# '_' optional): 'dgx-h100 (4 gpus/node)' is 'DGX-H100 (4 GPUs/node)'
_WORD_GAP = r"[\s_-]*"
_HOST_SIZE_VARIANT = re.compile(
    rf"^(?P<base>.+?){_WORD_GAP}\({_WORD_GAP}(?P<gpus>\d+){_WORD_GAP}gpus{_WORD_GAP}/"
    rf"{_WORD_GAP}node{_WORD_GAP}\)$", re.IGNORECASE)


def host_size_variant_name(system_name: str, gpus_per_node: int) -> str:
    """'p6-b200.48xlarge (4 GPUs/node)': the name of a variant with another host size."""
    return f"{system_name} ({gpus_per_node} GPUs/node)"


def parse_host_size_variant(name: str) -> tuple[str, int] | None:
    """(catalog system name, GPUs per node) of a variant's name; None for any other name."""
    match = _HOST_SIZE_VARIANT.match(name.strip())
    return None if match is None else (match["base"], int(match["gpus"]))


def with_gpus_per_node(system: System, gpus_per_node: int) -> System:
    """A what-if variant of ``system`` with a different host size, same per-GPU links.

    The NIC rate is rescaled so per-GPU scale-out bandwidth is unchanged. HGX-style hosts
    (NVLink domain = host) keep domain = host; rack-scale domains must be a multiple.
    """
    if gpus_per_node == system.gpus_per_node:
        return system
    check_range("--gpus-per-node", gpus_per_node, "gpus_per_node", integer=True)
    domain = system.scale_up_domain_gpus
    if domain == system.gpus_per_node:
        domain = gpus_per_node
    elif domain % gpus_per_node:
        raise MosaicInputError(
            f"{system.name}: --gpus-per-node {gpus_per_node} must divide its "
            f"{domain}-GPU NVLink domain"
        )
    return replace(
        system,
        name=host_size_variant_name(system.name, gpus_per_node),
        gpus_per_node=gpus_per_node,
        scale_up_domain_gpus=domain,
        nic_bw_bytes_per_s=system.nic_bw_bytes_per_s * gpus_per_node / system.gpus_per_node,
    )


# The name of a scale-out what-if (`mosaic plan --scale-out-gbps`), resolved back by the
# catalog as a host-size variant is, so a plan made on one exports and predicts as a job
# (case-insensitive as a catalog name, but for the unit: 'GB/s' is gigabytes, refused)
_SCALE_OUT_VARIANT = re.compile(
    rf"^(?P<base>.+?){_WORD_GAP}\({_WORD_GAP}scale{_WORD_GAP}out\s*"
    rf"(?P<gbps>\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*(?P<unit>gb/s){_WORD_GAP}per{_WORD_GAP}"
    rf"gpu{_WORD_GAP}\)$", re.IGNORECASE)

BITS_PER_BYTE = 8


def gbps_text(gbps: float) -> str:
    """A rate in Gb/s as a variant's name spells it: '200', '312.5'; the shortest text that
    reads back as the same float (a name that rounded would resolve to another variant)."""
    short = f"{gbps:g}"
    return short if float(short) == gbps else repr(float(gbps))


def scale_out_variant_name(system_name: str, gbps: float) -> str:
    """'p5.48xlarge (scale-out 200 Gb/s per GPU)': a variant with another per-GPU scale-out
    rate."""
    return f"{system_name} (scale-out {gbps_text(gbps)} Gb/s per GPU)"


def parse_scale_out_variant(name: str) -> tuple[str, float] | None:
    """(base system name, Gb/s per GPU) of a scale-out variant's name; None for any other.
    A rate in GB/s (gigabytes) is an error: the name states gigabits."""
    match = _SCALE_OUT_VARIANT.match(name.strip())
    if match is None:
        return None
    if match["unit"][1] == "B":
        raise MosaicInputError(f"system {name.strip()!r}: a scale-out variant's rate is in "
                               f"Gb/s (gigabits) per GPU, not {match['unit']}: write "
                               f"{scale_out_variant_name(match['base'], float(match['gbps']))!r}")
    return match["base"], float(match["gbps"])


def with_scale_out_gbps(system: System, gbps: float,
                        option: str = "--scale-out-gbps") -> System:
    """A what-if variant of ``system`` whose scale-out NICs give ``gbps`` Gb/s per GPU per
    direction (decimal: gbps·1e9/8 bytes/s per GPU); NVLink, NIC count and host unchanged.

    The catalog stores one NIC's rate and the NICs per host; the per-GPU rate stays derived
    from them (:attr:`System.scale_out_bw_bytes_per_s`), so the NIC rate is set to
    per-GPU x GPUs per host / NICs per host. The system itself where the rate is its own.
    """
    check_range(option, gbps, "scale_out_gbps", above_low=True)
    per_gpu_bytes_per_s = gbps * 1e9 / BITS_PER_BYTE
    if math.isclose(per_gpu_bytes_per_s, system.scale_out_bw_bytes_per_s, rel_tol=1e-12):
        return system
    # the same text however the variant was made (a plan's option or a job's system name),
    # so a name resolved by the catalog gives an equal System
    what_if = (f"what-if: {gbps_text(gbps)} Gb/s per GPU x {system.gpus_per_node} GPUs / "
               f"{system.nics_per_node} NICs per host (the catalog's: "
               f"{system.sources.get('nic_bw_bytes_per_s', 'not stated')})")
    return replace(
        system,
        name=scale_out_variant_name(system.name, gbps),
        nic_bw_bytes_per_s=per_gpu_bytes_per_s * system.gpus_per_node / system.nics_per_node,
        # the fabric's own name may state its rate ('InfiniBand NDR 400 Gb/s')
        scale_out_fabric=f"{system.scale_out_fabric}, what-if rate",
        sources=MappingProxyType({**system.sources, "nic_bw_bytes_per_s": what_if}),
    )
