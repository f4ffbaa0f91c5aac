"""Read the ScalePlan microbenchmark tables (../shared/reference/microbench) into the
column conventions of mosaic.perf.kernels / mosaic.perf.collectives.

Source: dmlc/ScalePlan benchmarks/results, commit 7ef065f (AWS p6-b200 nodes; H100 GEMM,
H200/A100 SDPA). The files are read in place, never copied into the project.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from mosaic.perf.collectives import Interconnect, group_placement

MICROBENCH = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "microbench"

P6_B200 = Interconnect(
    scale_up_domain_gpus=8,  # AWS p6-b200.48xlarge: 8 B200 on one NVSwitch domain
    gpus_per_node=8,
    scale_up_bw_bytes_per_s=900e9,  # NVLink5 1.8 TB/s bidirectional per GPU -> 900 GB/s
    scale_out_bw_bytes_per_s=50e9,  # EFA 3.2 Tbps per node / 8 GPUs = 400 Gb/s = 50 GB/s
    low_latency_protocols=False,  # EFA: the aws-ofi-nccl plugin runs NCCL_PROTO=simple
)

DEVICES = {
    # dense bf16 peak FLOP/s (datasheets), HBM bytes/s (datasheets), SMs (whitepapers)
    "B200": {"peak": 2.25e15, "hbm": 8.0e12, "sm": 148},
    "H100": {"peak": 989.4e12, "hbm": 3.35e12, "sm": 132},
    "H200": {"peak": 989.4e12, "hbm": 4.8e12, "sm": 132},
    "A100": {"peak": 312.0e12, "hbm": 1.555e12, "sm": 108},  # ScalePlan used A100-SXM4-40GB
}


def available() -> bool:
    return MICROBENCH.is_dir()


def collective_rows() -> pd.DataFrame:
    """Measured collectives: collective, group_size, stride, message_bytes, time_s,
    bus_bw_bytes_per_s, scope, ranks_per_domain (contiguous and stride-8 groups, a2a)."""
    frames = []
    for name, stride in (("dp_collectives_b200_4node", 1), ("dp_collectives_b200_stride8", 8)):
        d = pd.read_parquet(MICROBENCH / f"{name}.parquet")
        frames.append(d.assign(stride=stride, message_bytes=d["payload_bytes"]))
    a2a = pd.read_parquet(MICROBENCH / "a2a_b200_4node.parquet")
    frames.append(a2a.assign(stride=1, collective="all_to_all", message_bytes=a2a["buffer_bytes"]))
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[rows["status"] == "OK"].reset_index(drop=True)
    rows["time_s"] = rows["time_ms_p50"] * 1e-3
    factor = np.where(rows["collective"] == "all_reduce", 2.0, 1.0) * (
        rows["group_size"] - 1) / rows["group_size"]
    rows["bus_bw_bytes_per_s"] = factor * rows["message_bytes"] / rows["time_s"]
    placement = group_placement(rows["group_size"], rows["stride"], 8)
    rows["scope"] = np.where(placement.inside_domain, "intra", "inter")
    rows["ranks_per_domain"] = placement.ranks_per_domain
    return rows[["collective", "group_size", "stride", "message_bytes", "time_s",
                 "bus_bw_bytes_per_s", "scope", "ranks_per_domain"]]


def gemm_rows() -> pd.DataFrame:
    """Dense GEMMs: device, dtype, m, n, k, time_s (OK rows of gemm_util)."""
    d = pd.read_parquet(MICROBENCH / "gemm_util.parquet").reset_index()
    d = d[d["status"] == "OK"]
    return pd.DataFrame({"device": d["GPU_MODEL"], "dtype": d["dtype"], "m": d["M"],
                         "n": d["N"], "k": d["K"], "time_s": d["time_ms_med"] * 1e-3})


def grouped_rows() -> pd.DataFrame:
    """B200 grouped expert GEMMs (balanced routing): groups, m_per_group, n, k (forward
    GEMM: k = in_features, n = out_features), dtype, fwd_time_s, bwd_time_s."""
    d = pd.concat([pd.read_parquet(MICROBENCH / f) for f in
                   ("gemm_grouped_b200.parquet", "gemm_grouped_b200_missing_shapes.parquet")])
    d = d[(d["status"] == "OK") & (d["distribution"] == "balanced")]
    return pd.DataFrame({"groups": d["num_gemms"], "m_per_group": d["tokens_per_expert"],
                         "n": d["out_features"], "k": d["in_features"], "dtype": d["dtype"],
                         "fwd_time_s": d["fwd_ms"] * 1e-3, "bwd_time_s": d["bwd_ms"] * 1e-3})


def sdpa_rows() -> pd.DataFrame:
    """Causal Transformer Engine attention: device, batch, heads, seq, head_dim,
    fwd_time_s, bwd_time_s."""
    frames = []
    for device in ("B200", "H200", "A100"):
        d = pd.read_parquet(MICROBENCH / f"sdpa_{device.lower()}.parquet")
        d = d[(d["status"] == "OK") & (d["backend"] == "te")]
        frames.append(pd.DataFrame({
            "device": device, "batch": d["micro_bs"], "heads": d["n_q_heads"],
            "seq": d["seq_len"], "head_dim": d["head_dim"],
            "fwd_time_s": d["fwd_time_ms_med"] * 1e-3, "bwd_time_s": d["bwd_time_ms_med"] * 1e-3}))
    return pd.concat(frames, ignore_index=True)


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(np.mean(np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)) * 100)
