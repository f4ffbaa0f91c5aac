"""Accuracy of the MoE expert-parallel dispatch/combine cost against DeepEP/HybridEP tables.

    PYTHONPATH=src .venv/bin/python benchmarks/ep_dispatch_accuracy.py

Every row of the published DeepEP / HybridEP microbenchmark tables is turned into the
model's inputs (tokens per rank, hidden, top-k, experts, EP ranks, catalog system) and the
model's seconds for one dispatch or combine (mosaic.perf.collectives, the functions
layer_costs.dispatch_all_to_all_s calls) are compared with the measured seconds. The tables
give a "bandwidth"; the measured seconds are the bytes the benchmark script counts divided
by it. How each script counts bytes (read from the scripts named in SOURCES):

- ``nvl`` (DeepEP tests/test_intranode.py, HybridEP tests/test_hybrid_ep.py): bytes a rank
  *receives*, one copy per (token, destination rank) however many of that rank's experts
  the token picked (per-rank deduplication), the rank's own tokens included:
  ``recv_x.numel() * 2`` (x fp8_factor for FP8).
- ``rdma`` (DeepEP tests/test_internode.py ``num_rdma_token_sent``, HybridEP
  tests/utils.py ``count_rdma_send_from_routing_map``): bytes a rank *sends*, one copy per
  (token, destination node), its own node included ("logical bandwidth ... contains local
  rank traffic", DeepEP README).
- FP8 payload: ``fp8_factor = (1 + 4/128) / 2`` of bf16 (one byte per element plus a
  4-byte fp32 scale per 128 elements).

Expected counts use the scripts' routers: uniform top-k over all experts
(``randperm`` / ``topk(randn.abs())``), or DeepEP's internode test's group-limited router
(the token picks ``min(nodes, 4)`` nodes, then top-k inside them). The model has no
node-limited routing, so it sees the uniform router (its own assumption) on every row.
Measured timing: "torch" = the Python API call (what a training step pays); "kernel" =
kernel time only (kineto). DeepEP rows take the SM count Megatron-Core gives DeepEP by
default (20: mean of the 16- and 24-SM rows), HybridEP rows 16 SMs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mosaic.hardware.catalog import get_system
from mosaic.perf.collectives import (
    all_to_all_time_s,
    node_deduplicated_dispatch_time_s,
)
from mosaic.perf.machine import machine_for
from mosaic.perf.workload import Precision

SOURCES = {
    "deepep-v1": "deepseek-ai/DeepEP README.md @ 94a9f8f6 (branch hybrid-ep), "
                 "'Normal kernels with NVLink and RDMA forwarding' (H800, CX7 400 Gb/s)",
    "deepep-v2": "deepseek-ai/DeepEP README.md @ dd758caf (main), V3 configuration table",
    "hybridep": "deepseek-ai/DeepEP docs/README_Hybrid-EP.md @ 94a9f8f6 (branch hybrid-ep)",
}
FP8_FACTOR = (1 + 4 / 128) / 2  # DeepEP/HybridEP tests: fp8 bytes over bf16 bytes
GPUS_PER_HOST = {"H800-node": 8, "DGX-H100": 8, "DGX-B200": 8, "GB200-NVL72": 4}


@dataclass(frozen=True)
class Row:
    source: str
    dispatcher: str  # deepep | hybridep
    system: str  # catalog system
    ranks: int
    ranks_per_node: int  # ranks sharing one NVLink domain in the test
    tokens: int
    experts: int
    op: str  # dispatch | combine
    dtype: str  # fp8 | bf16 payload
    metric: str  # nvl | rdma
    timing: str  # torch | kernel
    gbps: float
    topk_groups: int | None = None  # DeepEP internode test: min(nodes, 4); None = uniform
    hidden: int = 7168
    top_k: int = 8


def _hit(pool: int, per_target: int, top_k: int) -> float:
    """P(a token's top_k of ``pool`` experts, uniform without replacement, include at least
    one of ``per_target`` given experts) = 1 - C(pool - per_target, K) / C(pool, K)."""
    return 1.0 - math.comb(pool - per_target, top_k) / math.comb(pool, top_k)


def metric_bytes(row: Row) -> float:
    """Expected bytes the benchmark script divides by its time (see module docstring)."""
    element = 2.0 * (FP8_FACTOR if row.dtype == "fp8" else 1.0)
    token = row.hidden * element
    if row.metric == "nvl":
        # tokens received from every rank of the domain (own included), once per rank
        per_rank = row.experts // row.ranks
        return row.ranks_per_node * row.tokens * _hit(row.experts, per_rank, row.top_k) * token
    nodes = row.ranks // row.ranks_per_node
    per_node = row.experts // nodes
    groups = row.topk_groups or nodes
    pool = groups * per_node  # group-limited: top-k among the chosen nodes' experts
    return row.tokens * groups * _hit(pool, per_node, row.top_k) * token


def measured_s(row: Row) -> float:
    return metric_bytes(row) / (row.gbps * 1e9)


def predicted_s(row: Row, dispatcher: str | None = None) -> float:
    """The model's seconds for the row's dispatch/combine with ``dispatcher``'s cost (the
    row's own by default; ``alltoall`` = NCCL pairwise all-to-all)."""
    system = get_system(row.system)
    hosts = max(1, row.ranks // GPUS_PER_HOST[row.system])
    ic = machine_for(system.cluster(hosts), Precision.BF16).interconnect
    element = 2.0 * (FP8_FACTOR if row.dtype == "fp8" else 1.0)
    token_bytes = row.tokens * row.hidden * element
    if (dispatcher or row.dispatcher) == "alltoall":
        return float(all_to_all_time_s(token_bytes * row.top_k, row.ranks, 1, ic))
    return float(node_deduplicated_dispatch_time_s(token_bytes, row.top_k, row.experts,
                                                   row.ranks, 1, ic))


def _deepep_v1() -> list[Row]:
    rows = []
    for ranks, d_gbps, c_gbps in ((8, 153, 158), (16, 43, 43), (32, 58, 57), (64, 51, 50)):
        metric = "nvl" if ranks == 8 else "rdma"
        groups = None if ranks == 8 else min(ranks // 8, 4)
        for op, dtype, gbps in (("dispatch", "fp8", d_gbps), ("combine", "bf16", c_gbps)):
            rows.append(Row("deepep-v1", "deepep", "H800-node", ranks, 8, 4096, 256, op,
                            dtype, metric, "torch", gbps, groups))
    return rows


def _deepep_v2() -> list[Row]:
    # 8K tokens, top-8, FP8 dispatch / BF16 combine, kernel time; the 24-SM B200 EP8 row
    # ("Min #SM", closest to training SM budgets); 256 experts (tests/elastic/test_ep.py).
    rows = []
    for system, ranks, metric, d_gbps, c_gbps in (
            ("H800-node", 16, "rdma", 90, 81), ("H800-node", 32, "rdma", 61, 61),
            ("DGX-B200", 16, "rdma", 90, 91), ("DGX-B200", 8, "nvl", 643, 675)):
        for op, dtype, gbps in (("dispatch", "fp8", d_gbps), ("combine", "bf16", c_gbps)):
            rows.append(Row("deepep-v2", "deepep", system, ranks, 8, 8192, 256, op, dtype,
                            metric, "kernel", gbps))
    return rows


# HybridEP README: (ranks, dispatch fp8, dispatch bf16, combine) at 16 SMs, torch / kernel.
_HYBRIDEP_H100 = {16: ((48.26, 54.47, 53.35), (68.48, 71.71, 62.95)),
                  32: ((42.10, 47.36, 52.53), (55.35, 57.69, 57.46)),
                  64: ((35.01, 41.24, 46.57), (46.52, 49.97, 49.77))}
_HYBRIDEP_GB200 = {8: ((421.67, 550.10, 538.44), (620.98, 750.15, 684.27)),
                   16: ((397.33, 472.84, 474.48), (577.17, 661.93, 600.75)),
                   24: ((281.73, 441.89, 444.40), (360.12, 637.80, 565.53)),
                   32: ((236.33, 485.50, 423.19), (286.93, 629.79, 547.25)),
                   36: ((215.36, 469.96, 418.27), (260.53, 612.85, 543.27))}
_HYBRIDEP_B200 = {8: ((409.71, 535.94, 530.86), (599.27, 734.95, 673.84))}
# DeepEP torch API, mean of the 16- and 24-SM rows (Megatron-Core's default 20 SMs).
_DEEPEP_B200 = {8: (((246 + 349) / 2, (348 + 494) / 2, (302 + 420) / 2), None)}
_DEEPEP_GB200 = {8: (((248.86 + 350.97) / 2, (362.01 + 512.72) / 2, (310.21 + 425.95) / 2),
                     None),
                 16: (((242.51 + 338.87) / 2, (328.80 + 442.47) / 2, (278.34 + 378.32) / 2),
                      None),
                 24: (((258.33 + 351.05) / 2, (324.64 + 450.22) / 2, (126.53 + 163.62) / 2),
                      None)}


def _hybridep_doc() -> list[Row]:
    rows = []
    tables = (("hybridep", "DGX-H100", "rdma", 8, _HYBRIDEP_H100),
              ("hybridep", "DGX-B200", "nvl", None, _HYBRIDEP_B200),
              ("hybridep", "GB200-NVL72", "nvl", None, _HYBRIDEP_GB200),
              ("deepep", "DGX-B200", "nvl", None, _DEEPEP_B200),
              ("deepep", "GB200-NVL72", "nvl", None, _DEEPEP_GB200))
    for dispatcher, system, metric, per_node, table in tables:
        for ranks, timings in table.items():
            for timing, values in zip(("torch", "kernel"), timings, strict=True):
                if values is None:
                    continue
                for op, dtype, gbps in zip(("dispatch", "dispatch", "combine"),
                                           ("fp8", "bf16", "bf16"), values, strict=True):
                    rows.append(Row("hybridep", dispatcher, system, ranks, per_node or ranks,
                                    4096, 8 * ranks, op, dtype, metric, timing, gbps))
    return rows


def all_rows() -> list[Row]:
    return _deepep_v1() + _deepep_v2() + _hybridep_doc()


def _mape(predicted: list[float], measured: list[float]) -> float:
    return float(np.mean(np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)) * 100)


def main() -> None:
    rows = all_rows()
    print(f"{'source':<10}{'disp':<9}{'system':<12}{'rk':>3} {'op':<9}{'dt':<5}{'metric':<5}"
          f"{'time':<7}{'GB/s':>7}{'meas us':>9}{'model us':>9}{'err':>7}{'a2a us':>8}")
    groups: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {}
    for row in rows:
        meas, model, a2a = measured_s(row), predicted_s(row), predicted_s(row, "alltoall")
        fabric = "NVLink" if row.metric == "nvl" else "RDMA"
        groups.setdefault((row.dispatcher, fabric, row.timing), []).append((model, meas, a2a))
        print(f"{row.source:<10}{row.dispatcher:<9}{row.system:<12}{row.ranks:>3} "
              f"{row.op:<9}{row.dtype:<5}{row.metric:<5}  {row.timing:<7}{row.gbps:>6.0f}"
              f"{meas * 1e6:>9.0f}{model * 1e6:>9.0f}{model / meas - 1:>+7.0%}{a2a * 1e6:>8.0f}")
    print("\nMAPE of the model's time (signed mean: + = model slower) by dispatcher, fabric, "
          "timing")
    for key, values in sorted(groups.items()):
        model, meas, _ = zip(*values, strict=True)
        bias = float(np.mean(np.asarray(model) / np.asarray(meas) - 1) * 100)
        print(f"  {' / '.join(key):<28} MAPE {_mape(list(model), list(meas)):5.1f}%  "
              f"mean {bias:+6.1f}%  (n={len(values)})")
    everything = [v for values in groups.values() for v in values]
    torch_api = [v for (_, _, timing), values in groups.items() if timing == "torch"
                 for v in values]
    for label, values in (("all rows", everything), ("torch-API rows", torch_api)):
        model, meas, _ = zip(*values, strict=True)
        print(f"  {label:<28} MAPE {_mape(list(model), list(meas)):5.1f}%  (n={len(values)})")


if __name__ == "__main__":
    main()
