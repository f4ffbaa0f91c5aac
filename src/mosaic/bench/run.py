"""Run (or list) a bench: families of cases, metadata, resume, budget, measured tables.

Kernel families run in one process. Collectives need one process per device started by
torchrun (``torchrun --nproc-per-node 8 -m mosaic.bench collectives ...``); they
initialise torch.distributed from torchrun's environment (NCCL on CUDA, gloo on CPU).
After a run, ``measured/`` holds the rows of the current metadata in the exact formats
job files accept (``hardware.gemm_table``, ``grouped_gemm_table``, ``collective_table``).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from mosaic.bench import attention, collectives, gemm, grouped, streams, te_grouped
from mosaic.bench.cases import BenchOptions, Case, RunReport, run_family
from mosaic.bench.families import KERNEL_FAMILY_NAMES
from mosaic.bench.metadata import busy_host_warning, collect
from mosaic.bench.shapes import BenchShapes
from mosaic.bench.store import FamilyTable, ok_rows, read_family, record_metadata
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.units import GIB

KERNEL_FAMILIES: dict[str, ModuleType] = dict(zip(
    KERNEL_FAMILY_NAMES, (gemm, grouped, attention, streams, te_grouped), strict=True))
MEASURED_DIR = "measured"


@dataclass(frozen=True)
class CollectiveOptions:
    """Message sizes and layouts of the collective sweep."""

    min_bytes: int = 1024
    max_bytes: int = 4 * GIB
    size_factor: int = 2
    ops: tuple[str, ...] = collectives.OPS
    group_sizes: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    domain_gpus: int | None = None
    placements: tuple[tuple[int, int], ...] | None = None  # a job's (group size, per domain)
    world_size: int = 8  # dry run outside torchrun only
    ranks_per_node: int | None = None  # dry run outside torchrun only (default: world size)

    def __post_init__(self) -> None:
        if not 1 <= self.min_bytes <= self.max_bytes:
            raise MosaicInputError(f"message sizes: need 1 <= min ({self.min_bytes}) <= max "
                                   f"({self.max_bytes})")
        if self.size_factor < 2:
            raise MosaicInputError(f"--size-factor {self.size_factor}: allowed: >= 2")
        unknown = set(self.ops) - set(collectives.OPS)
        if unknown:
            raise MosaicInputError(f"unknown collective(s) {sorted(unknown)}; allowed: "
                                   f"{', '.join(collectives.OPS)}")


def kernel_cases(families: Sequence[str], shapes: BenchShapes, options: BenchOptions
                 ) -> dict[str, list[Case]]:
    """The cases of each kernel family."""
    return {f: KERNEL_FAMILIES[f].build_cases(shapes, options) for f in families}


def listing(out_dir: Path, cases: dict[str, list[Case]], metadata_id: str | None,
            device: Any = None) -> list[dict[str, Any]]:
    """What a run would do: one entry per case with ``state`` "to measure", "done", or
    "skip: REASON" where ``device`` cannot run it (a family's ``skip_reason``)."""
    rows = []
    for family, family_cases in cases.items():
        done = FamilyTable(out_dir, family).done(metadata_id) if metadata_id else set()
        skip = getattr(KERNEL_FAMILIES.get(family), "skip_reason", None)
        for case in family_cases:
            reason = None if device is None or skip is None else skip(case, device)
            state = ("done" if case.key in done else "to measure" if reason is None
                     else f"skip: {reason}")
            rows.append({"family": family, "case": case.key, "state": state})
    return rows


def run_kernels(out_dir: Path, families: Sequence[str], shapes: BenchShapes,
                options: BenchOptions, device: Any, budget_s: float | None = None,
                progress: bool = True) -> list[RunReport]:
    """Measure the kernel families on ``device``; resumable; then export measured tables."""
    metadata = collect(device)
    record_metadata(out_dir, metadata)
    deadline = None if budget_s is None else time.monotonic() + budget_s
    reports = []
    for family, cases in kernel_cases(families, shapes, options).items():
        module = KERNEL_FAMILIES[family]
        reports.append(run_family(family, cases,
                                  lambda case, m=module: m.measure(case, device, options),
                                  out_dir, metadata, deadline, progress))
    export_measured_tables(out_dir, metadata["metadata_id"])
    busy = busy_host_warning(metadata)
    if busy is not None and any(report.measured for report in reports):
        # of timings this run took (a rerun that measured nothing has none to doubt)
        warnings.warn(busy, MosaicWarning, stacklevel=2)
    return reports


def in_torchrun() -> bool:
    """True under torchrun (or any launcher that sets the env:// variables)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def run_collectives(out_dir: Path, options: CollectiveOptions, policy: Any,
                    budget_s: float | None = None, progress: bool = True,
                    backend: str | None = None, dry_run: bool = False
                    ) -> RunReport | list[dict[str, Any]]:
    """Measure (or list) the collective cases on all ranks of a torchrun job."""
    import torch
    import torch.distributed as dist

    if not in_torchrun():
        if dry_run:  # plan a job without starting one: world and node size from the options
            cases = collectives.build_cases(
                options.world_size, options.ranks_per_node or options.world_size,
                options.min_bytes, options.max_bytes, options.size_factor, options.ops,
                options.group_sizes, options.strides, options.domain_gpus, options.placements)
            _warn_unformed_job_groups(cases, options, options.world_size)
            return listing(out_dir, {collectives.FAMILY: cases}, None)
        raise MosaicInputError(
            "collectives run one process per device under torchrun, e.g. `torchrun "
            "--nproc-per-node 8 -m mosaic.bench collectives --out DIR` (see docs/bench.md)")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = _check_backend(backend or _default_backend(device.type), device.type)
    if device.type == "cuda":  # bind the rank to its GPU (barriers and NCCL communicators)
        dist.init_process_group(backend=backend, device_id=device)
    else:
        dist.init_process_group(backend=backend)
    try:
        world, rank = dist.get_world_size(), dist.get_rank()
        cases = collectives.build_cases(
            world, collectives.local_size(), options.min_bytes, options.max_bytes,
            options.size_factor, options.ops, options.group_sizes, options.strides,
            options.domain_gpus, options.placements)
        if rank == 0:
            _warn_unformed_job_groups(cases, options, world)
        shared: list[Any] = [collect(device, world, backend) if rank == 0 else None]
        dist.broadcast_object_list(shared, src=0)
        metadata = shared[0]
        if dry_run:
            return listing(out_dir, {collectives.FAMILY: cases}, metadata["metadata_id"])
        if rank == 0:
            record_metadata(out_dir, metadata)
        deadline = None if budget_s is None else time.monotonic() + budget_s
        report = collectives.run(out_dir, cases, metadata, policy, device, deadline, progress)
        if rank == 0:
            export_measured_tables(out_dir, metadata["metadata_id"])
        dist.barrier()
        return report
    finally:
        dist.destroy_process_group()


def _warn_unformed_job_groups(cases: Sequence[Case], options: CollectiveOptions,
                              world: int) -> None:
    """Name the job's group placements this world cannot form (docs/bench.md: the job's
    layouts are measured "where the world can form them"), which the run leaves unmeasured,
    and the groups it measures instead. A trial read "so none is measured" as the whole run
    and then saw 138 cases of 2-rank groups run for minutes."""
    if options.group_sizes or not options.placements:
        return
    formed = {(int(c.columns["group_size"]), int(c.columns["ranks_per_domain"]))
              for c in cases}
    formed_sizes = {size for size, _ in formed}
    # the groups the ops measure at all: pairs alone under point-to-point ops, whose other
    # sizes --ops leaves out, not the world (a review: `--ops send_recv` blamed the world
    # for the job's 4-, 8- and 32-rank groups)
    wanted = {(int(size), int(per_domain)) for size, per_domain in options.placements
              if not collectives.pairs_only(options.ops) or int(size) == 2}
    unformed = sorted(wanted - formed)
    if not unformed:
        return
    whole = sorted({size for size, _ in unformed if size not in formed_sizes})
    parts = [f"groups of {', '.join(map(str, whole))} ranks"] if whole else []
    parts += [f"groups of {size} ranks with {per_domain} per domain"
              for size, per_domain in unformed if size in formed_sizes]
    runs = ", ".join(
        f"{size} ranks with {per_domain} per domain"
        + (" (as the job's)" if (size, per_domain) in wanted else " (not as the job's)")
        for size, per_domain in sorted(formed))
    sizes = [int(c.columns["message_bytes"]) for c in cases]
    warnings.warn(
        f"the job's {' and '.join(parts)} cannot be laid out on the {world} ranks of this "
        "run as the job places them (ranks per scale-up domain), so they are not measured; "
        f"the run measures only {len(cases)} cases on groups of {runs}, messages "
        f"{_bytes_text(min(sizes))} to {_bytes_text(max(sizes))}; launch as many processes, "
        "and per node, as the job's groups need to measure them, or narrow the run with "
        "--ops, --max-bytes or --time-budget", MosaicWarning, stacklevel=2)


def _bytes_text(size_bytes: int) -> str:
    """A message size in the largest binary unit that divides it: 1 KiB, 4 GiB, 1536 B."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale} {unit}"
    return f"{size_bytes} B"


def _default_backend(device_type: str) -> str:
    """The collectives' backend when --backend is not given: NCCL on CUDA, gloo on CPU."""
    return "nccl" if device_type == "cuda" else "gloo"


def _check_backend(backend: str, device_type: str) -> str:
    """The --backend as torch names it, or one line for one this torch build lacks or that
    cannot drive the device (torch.distributed.Backend.backend_capability: nccl is CUDA
    only); init_process_group would fail on every rank with a traceback. Read as torch's
    BackendConfig reads it (torch/distributed/distributed_c10d.py): a name in any case
    ('GLOO' is gloo) or device:backend pairs ('cpu:gloo,cuda:nccl')."""
    import torch
    import torch.distributed as dist

    names = [b for b in dist.Backend.backend_list if b not in ("undefined", "fake")]
    built = [b for b in names if dist.is_backend_available(b)]
    text = backend.strip().lower()
    if ":" in text:  # device:backend pairs, each device its backend
        pairs = [pair.split(":") for pair in text.split(",")]
        if any(len(pair) != 2 or not all(pair) for pair in pairs):
            raise MosaicInputError(f"--backend {backend!r}: expected a backend name or "
                                   "device:backend pairs, e.g. cpu:gloo,cuda:nccl")
        chosen = dict(pairs)
    else:
        chosen = dict.fromkeys(dist.Backend.backend_capability.get(text, [device_type]), text)
    for name in set(chosen.values()):
        if name not in built:
            what = ("unknown" if name not in names
                    else f"not built into torch {torch.__version__}")
            named = f"{name}: " if ":" in text else ""  # which of the pairs
            raise MosaicInputError(f"--backend {backend!r}: {named}{what}; this torch "
                                   f"offers {', '.join(built)}")
    name = chosen.get(device_type)
    if name is None:
        raise MosaicInputError(f"--backend {backend!r} names no backend for {device_type} "
                               f"tensors, this run's device; add {device_type}:"
                               f"{_default_backend(device_type)}")
    devices = dist.Backend.backend_capability.get(name, [])
    if device_type not in devices:
        raise MosaicInputError(f"--backend {backend!r}: {name} runs on {', '.join(devices)} "
                               f"tensors, and this run's device is {device_type}; use "
                               f"{_default_backend(device_type)} (the default)")
    return text


def export_measured_tables(out_dir: Path, metadata_id: str) -> list[Path]:
    """Write measured/{gemm,grouped_gemm,collectives}.csv from this metadata's OK rows:
    dense GEMMs (m, n, k, dtype, time_s), balanced forward grouped GEMMs (groups,
    m_per_group, n, k, dtype, time_s) and even collectives (BusBandwidthTable columns)."""
    target = out_dir / MEASURED_DIR
    written = []

    def mine(family: str) -> pd.DataFrame:
        frame = ok_rows(read_family(out_dir, family))
        if frame.empty:
            return frame
        return frame[frame["metadata_id"].astype(str) == metadata_id]

    frames = {}
    g = mine("gemm")
    if not g.empty:
        frames["gemm"] = g[["m", "n", "k", "dtype", "time_s"]]
    gg = mine("grouped")
    if not gg.empty:
        gg = gg[(gg["pass"] == "fwd") & (gg["distribution"] == "balanced")]
        frames["grouped_gemm"] = gg[["groups", "m_per_group", "n", "k", "dtype", "time_s"]]
    c = mine("collectives")
    if not c.empty:
        c = c[c["pattern"] == "even"]
        frames["collectives"] = c[["collective", "group_size", "stride", "message_bytes",
                                   "bus_bw_bytes_per_s", "scope", "ranks_per_domain",
                                   "time_s"]]
    for name, frame in frames.items():
        if frame.empty:
            continue
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"{name}.csv"
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        frame.to_csv(tmp, index=False)
        os.replace(tmp, path)
        written.append(path)
    return written
