"""Collectives through torch.distributed, under torchrun (NCCL on GPUs, gloo on CPU).

Measured: all-gather (``all_gather_single``, formerly ``all_gather_into_tensor``),
reduce-scatter (``reduce_scatter_single``), all-reduce, all-to-all
(``all_to_all_single``, even splits and uneven ones) and send/recv (a ring of
``batch_isend_irecv`` inside the group), over group layouts (size n, rank stride s:
members ``base + i·s``, as ``mosaic.perf.collectives`` describes TP/EP/DP groups),
message sizes from ``min_bytes`` to ``max_bytes``.

Sizes and bus bandwidth follow nccl-tests (doc/PERFORMANCE.md): all-gather and
reduce-scatter take the full buffer, all-reduce the buffer, all-to-all the per-rank send
buffer, send/recv the message; busbw = algbw · ``perf.collectives.bus_factor``. Every group
of a layout runs at once (as every DP group of a job does); a case's time is the slowest
rank's median. All ranks run the same number of calls: calls per sample and repeats are
set from a probe reduced with MAX, and rank 0 decides what to measure and broadcasts it.
Columns match ``mosaic.perf.collectives.BusBandwidthTable`` (collective, group_size,
message_bytes, bus_bw_bytes_per_s, scope, ranks_per_domain) plus stride, pattern, time_s.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mosaic.bench.cases import Case, Progress, RunReport
from mosaic.bench.stats import summarize
from mosaic.bench.store import OK, FamilyTable
from mosaic.bench.timer import TimingPolicy, synchronize
from mosaic.errors import MosaicInputError

FAMILY = "collectives"
OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "all_to_all_uneven",
       "send_recv")
PAIR_OPS = frozenset({"send_recv"})  # point-to-point: measured on groups of 2 ranks only


def pairs_only(ops: Sequence[str]) -> bool:
    """True where every op of ``ops`` is point-to-point (:data:`PAIR_OPS`): the sweep then
    measures groups of 2 ranks and no other size."""
    return set(ops) <= PAIR_OPS
KIB = 1024


@dataclass(frozen=True)
class Layout:
    group_size: int
    stride: int


def layouts(world_size: int, local_size: int, group_sizes: Sequence[int] | None = None,
            strides: Sequence[int] | None = None) -> list[Layout]:
    """Power-of-two group sizes >= 2 with stride 1 and, across nodes, stride = ranks per
    node (a DP/EP group that takes one rank per node); both filtered to what tiles the
    world."""
    sizes = list(group_sizes) if group_sizes else [
        2**i for i in range(1, int(math.log2(world_size)) + 1)]
    stride_set = list(strides) if strides else sorted({1, local_size} if world_size > local_size
                                                       else {1})
    out = []
    for n in sizes:
        for s in stride_set:
            if n >= 2 and s >= 1 and world_size % (n * s) == 0:
                out.append(Layout(n, s))
    return out


def _refuse_unformable(option: str, stated: Sequence[int] | None, formed: set[int],
                       world_size: int) -> None:
    """One line for a stated group size or stride that no layout of the world uses (a
    group of n ranks at stride s needs n >= 2 and n·s dividing the world): the run
    measured nothing for it and said nothing."""
    missing = [v for v in stated or () if v not in formed]
    if missing:
        raise MosaicInputError(
            f"{option} {','.join(map(str, missing))}: no group layout of the {world_size} "
            "ranks uses it (a group holds at least 2 ranks, and group size x stride must "
            f"divide the ranks); launch more processes or leave {option} out")


def job_group_sizes(placements: Sequence[tuple[int, int]]) -> list[int]:
    """The distinct group sizes of a job's (group size, ranks per domain) placements."""
    return sorted({int(group_size) for group_size, _ in placements})


def group_ranks(layout: Layout, world_size: int) -> list[list[int]]:
    """All groups of a layout: blocks of n·s ranks, members base + i·s."""
    n, s = layout.group_size, layout.stride
    return [[block + offset + i * s for i in range(n)]
            for block in range(0, world_size, n * s) for offset in range(s)]


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """min_bytes, min_bytes·factor, ... up to max_bytes."""
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def build_cases(world_size: int, local_size: int, min_bytes: int, max_bytes: int,
                factor: int = 2, ops: Sequence[str] = OPS,
                group_sizes: Sequence[int] | None = None,
                strides: Sequence[int] | None = None, domain_gpus: int | None = None,
                placements: Sequence[tuple[int, int]] | None = None) -> list[Case]:
    """Every (op, layout, size); scope and ranks per domain from the rank placement.

    ``placements`` ((group size, ranks per domain) pairs a job's model uses) keeps the
    layouts, of any power-of-two stride, placed like them; none left: the default layouts.
    """
    from mosaic.perf.collectives import group_placement

    domain = domain_gpus or local_size
    job_sizes = job_group_sizes(placements) if placements else None
    candidates = layouts(world_size, local_size, group_sizes or job_sizes, strides)
    _refuse_unformable("--group-sizes", group_sizes, {lay.group_size for lay in candidates},
                       world_size)
    _refuse_unformable("--strides", strides, {lay.stride for lay in candidates}, world_size)
    if placements and strides is None:
        all_strides = [2**i for i in range(int(math.log2(world_size)) + 1)]
        wanted = {(int(g), int(k)) for g, k in placements}
        matching: dict[tuple[int, int], Layout] = {}  # smallest stride per placement
        for lay in layouts(world_size, local_size, group_sizes or job_sizes, all_strides):
            per_domain = int(group_placement(lay.group_size, lay.stride,
                                             domain).ranks_per_domain)
            if (lay.group_size, per_domain) in wanted:
                matching.setdefault((lay.group_size, per_domain), lay)
        candidates = list(matching.values()) or candidates
    if not candidates:  # one rank, or a job's groups all larger than the world
        needs = (f"the job's groups hold {','.join(map(str, job_sizes))} ranks" if job_sizes
                 else "a group holds at least 2 ranks")
        raise MosaicInputError(
            f"no collective group fits the {world_size} rank(s) of this run ({needs}), so "
            "nothing would be measured: launch more processes")
    cases = []
    for layout in candidates:
        placement = group_placement(layout.group_size, layout.stride, domain)
        scope = "intra" if bool(placement.inside_domain) else "inter"
        for op in ops:
            if op in PAIR_OPS and layout.group_size != 2:
                continue  # point-to-point: pairs only
            for size in message_sizes(min_bytes, max_bytes, factor):
                key = f"{op}:n{layout.group_size}s{layout.stride}:{size}"
                cases.append(Case(FAMILY, key, {
                    "collective": "all_to_all" if op == "all_to_all_uneven" else op,
                    "pattern": "uneven" if op == "all_to_all_uneven" else "even",
                    "group_size": layout.group_size, "stride": layout.stride,
                    "message_bytes": size, "scope": scope,
                    "ranks_per_domain": int(placement.ranks_per_domain),
                    "world_size": world_size}))
    if not cases:  # pairs-only ops and no pair among the layouts (the unformed-groups
        # warning then stopped on 'min() arg is an empty sequence', a review)
        sizes = ", ".join(str(size) for size in sorted({lay.group_size for lay in candidates}))
        raise MosaicInputError(
            f"--ops {','.join(ops)} measures groups of 2 ranks only, and this run's layouts "
            f"are groups of {sizes} ranks, so nothing would be measured: add another op to "
            "--ops, or give --group-sizes 2")
    return cases


def uneven_splits(n: int, elements: int) -> np.ndarray:
    """Elements rank r sends to group member j (row r): weights 1 + ((r + j) mod n), each
    row scaled to ``elements``; column j is what member j receives."""
    weights = 1.0 + (np.arange(n)[:, None] + np.arange(n)[None, :]) % n
    counts = np.floor(weights / weights.sum(axis=1, keepdims=True) * elements).astype(np.int64)
    counts[:, 0] += elements - counts.sum(axis=1)
    return counts


class _Groups:
    """Process groups of every layout, created in the same order on every rank."""

    def __init__(self, world_size: int, rank: int, needed: Sequence[Layout]) -> None:
        import torch.distributed as dist

        self.mine: dict[Layout, tuple[Any, list[int]]] = {}
        for layout in needed:
            for ranks in group_ranks(layout, world_size):
                group = dist.new_group(ranks)
                if rank in ranks:
                    self.mine[layout] = (group, ranks)


def _buffers(op: str, size_bytes: int, n: int, position: int, device: Any, dtype: Any
             ) -> tuple[Any, dict[str, Any]]:
    import torch

    element = torch.tensor([], dtype=dtype).element_size()
    elements = max(size_bytes // element, n)
    elements -= elements % n
    if op == "all_gather":
        return torch.ones(elements // n, device=device, dtype=dtype), {
            "out": torch.empty(elements, device=device, dtype=dtype)}
    if op == "reduce_scatter":
        return torch.ones(elements, device=device, dtype=dtype), {
            "out": torch.empty(elements // n, device=device, dtype=dtype)}
    if op == "all_to_all_uneven":
        splits = uneven_splits(n, elements)
        send, recv = splits[position].tolist(), splits[:, position].tolist()
        return torch.ones(elements, device=device, dtype=dtype), {
            "out": torch.empty(sum(recv), device=device, dtype=dtype),
            "send": send, "recv": recv}
    if op in ("all_to_all", "send_recv"):
        return torch.ones(elements, device=device, dtype=dtype), {
            "out": torch.empty(elements, device=device, dtype=dtype)}
    return torch.ones(elements, device=device, dtype=dtype), {}


def _collective_call(op: str, tensor: Any, extra: dict[str, Any], group: Any,
                     ranks: list[int], rank: int) -> Any:
    import torch.distributed as dist

    # torch >= 2.13 renames the flat-buffer forms (*_single); older releases have *_tensor.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_gather":
        return lambda: gather(extra["out"], tensor, group=group)
    if op == "reduce_scatter":
        return lambda: scatter(extra["out"], tensor, group=group)
    if op == "all_reduce":
        return lambda: dist.all_reduce(tensor, group=group)
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(extra["out"], tensor, group=group)
    if op == "all_to_all_uneven":
        return lambda: dist.all_to_all_single(extra["out"], tensor, extra["recv"],
                                              extra["send"], group=group)
    position = ranks.index(rank)
    peer_next, peer_prev = (ranks[(position + 1) % len(ranks)],
                            ranks[(position - 1) % len(ranks)])

    def send_recv() -> None:
        ops = [dist.P2POp(dist.isend, tensor, peer_next, group),
               dist.P2POp(dist.irecv, extra["out"], peer_prev, group)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

    return send_recv


def _max_over_ranks(value: float, device: Any) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


PROBE_CALLS = 3  # single calls whose fastest sets the calls per sample (timer.time_call)


def _time_collective(call: Any, device: Any, policy: TimingPolicy) -> tuple[Any, int]:
    """Same calls on every rank: warm-up, a probe reduced with MAX, then fixed repeats."""
    import torch.distributed as dist

    for _ in range(policy.warmup):
        call()
    synchronize(device)
    probes = []
    for _ in range(PROBE_CALLS):  # the fastest of a few: one preempted call is no guide
        dist.barrier()
        t0 = time.perf_counter()
        call()
        synchronize(device)
        probes.append(time.perf_counter() - t0)
    probe = _max_over_ranks(min(probes), device)
    calls = 1 if probe >= policy.target_sample_s else min(
        100, math.ceil(policy.target_sample_s / max(probe, 1e-9)))
    repeats = int(np.clip(math.ceil(policy.min_time_s / max(probe * calls, 1e-9)),
                          policy.min_repeats, policy.max_repeats))
    samples = []
    for _ in range(repeats):
        dist.barrier()
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize(device)
        samples.append((time.perf_counter() - t0) / calls)
    summary = summarize(np.array(samples))
    return summary, calls


def run(out_dir: Path, cases: Sequence[Case], metadata: dict[str, Any], policy: TimingPolicy,
        device: Any, budget_deadline: float | None = None, progress: bool = True
        ) -> RunReport:
    """Measure the cases on every rank; rank 0 owns the table (call after init)."""
    import torch
    import torch.distributed as dist

    from mosaic.perf.collectives import bus_factor

    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    plan: list[Any] = [None]
    if rank == 0:
        table = FamilyTable(out_dir, FAMILY)
        done = table.done(metadata["metadata_id"])
        plan = [[c.key for c in cases if c.key not in done]]
    dist.broadcast_object_list(plan, src=0)
    wanted = set(plan[0])
    pending = [c for c in cases if c.key in wanted]
    report = RunReport(FAMILY, planned=len(cases), already_done=len(cases) - len(pending))
    needed = sorted({Layout(c.columns["group_size"], c.columns["stride"]) for c in pending},
                    key=lambda lay: (lay.group_size, lay.stride))
    groups = _Groups(world, rank, needed)
    bar = Progress(len(pending), f"bench collectives x{world}", enabled=progress and rank == 0)
    try:
        for i, case in enumerate(pending):
            stop = [budget_deadline is not None
                    and time.monotonic() + bar.mean_case_s() > budget_deadline]
            dist.broadcast_object_list(stop, src=0)
            if stop[0]:
                report.left_for_budget = len(pending) - i
                bar.note(f"time budget reached: {report.left_for_budget} cases left for a "
                         "rerun")
                break
            c = case.columns
            layout = Layout(c["group_size"], c["stride"])
            group, ranks = groups.mine[layout]
            op = "all_to_all_uneven" if c["pattern"] == "uneven" else c["collective"]
            row: dict[str, Any] = {"family": FAMILY, "case": case.key,
                                   "metadata_id": metadata["metadata_id"],
                                   "device": metadata.get("device_name"), **c}
            try:
                tensor, extra = _buffers(op, c["message_bytes"], layout.group_size,
                                         ranks.index(rank), device, dtype)
                failed = 0.0
            except (RuntimeError, MemoryError):  # out of memory on this rank
                failed = 1.0
            if _max_over_ranks(failed, device) > 0:
                row["status"] = "skipped: out of memory"
                report.skipped += 1
            else:
                summary, calls = _time_collective(
                    _collective_call(op, tensor, extra, group, ranks, rank), device, policy)
                slowest = _max_over_ranks(summary.time_s, device)
                row.update({"status": OK, "time_s": slowest, "p10_s": summary.p10_s,
                            "p90_s": summary.p90_s, "min_s": summary.min_s,
                            "mean_s": summary.mean_s, "repeats": summary.repeats,
                            "outliers": summary.outliers, "calls_per_sample": calls,
                            "bus_bw_bytes_per_s": float(bus_factor(c["collective"],
                                                                   layout.group_size))
                            * c["message_bytes"] / slowest})
                report.measured += 1
                del tensor, extra
            if rank == 0:
                from datetime import UTC, datetime

                row["measured_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
                table.add(row)
                bar.step(f"{case.key}  {row.get('time_s', 0) * 1e3:.4g} ms")
    finally:
        if rank == 0:
            table.flush()
    return report


def local_size() -> int:
    """Ranks per node (torchrun's LOCAL_WORLD_SIZE; 1 outside torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
