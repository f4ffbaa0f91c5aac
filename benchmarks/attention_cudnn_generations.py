"""Flash-attention fits against NVIDIA's published cuDNN SDPA benchmarks, per cuDNN version.

    PYTHONPATH=src .venv/bin/python benchmarks/attention_cudnn_generations.py GIT_DIR

GIT_DIR is a clone (or bare mirror) of https://github.com/NVIDIA/cudnn-frontend; the tables
are read with `git show COMMIT:PATH`, nothing is copied into this project. Prints, for every
published bf16 causal table (device, cuDNN version, timing path), the measured forward /
backward times next to the shipped attention fit (perf/data/microbench_fits.yaml
flash_attention_efficiency, ScalePlan/Transformer Engine 2.4 era), then a two-parameter refit
per cuDNN generation (docs/evidence/attention_kernel_generations.md explains the choices and
why the refits are not shipped).
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from mosaic.perf.attention_kernels import sfu_exp_time_ratio
from mosaic.perf.kernels import (
    FLASH_ATTENTION_EFFICIENCY,
    AttentionEfficiency,
    exp_rescaled_attention_efficiency,
    flash_attention_time_s,
)

# Dense bf16 datasheet peaks of the catalog devices (hardware/data/devices.yaml).
PEAK_FLOPS_PER_S = {"B200": 2.25e15, "GB200": 2.5e15, "GB300": 2.5e15, "H200": 989e12}
SDPA = "benchmark/sdpa_benchmark_training"


@dataclass(frozen=True)
class Table:
    """One published result file: device, cuDNN version, timing path, commit and path."""

    device: str
    cudnn: str
    timing: str  # "PyTorch SDPA, CUDA events" or "cuDNN FE graph, torch profiler"
    commit: str
    path: str


TABLES = (
    Table("B200", "9.10.2", "PyTorch SDPA, CUDA events", "f937055",
          "benchmark/sdpa_benchmark_bf16_training/artifacts/"
          "sdpa_benchmark_results_NVIDIA_B200.csv"),
    Table("B200", "9.10.2", "PyTorch SDPA, CUDA events", "9793df5",
          f"{SDPA}/artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv"),
    Table("B200", "9.13.1", "PyTorch SDPA, CUDA events", "0b1577c",
          f"{SDPA}/artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv"),
    Table("GB300", "9.13.1", "PyTorch SDPA, CUDA events", "0b1577c",
          f"{SDPA}/artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv"),
    Table("GB200", "9.17.0", "cuDNN FE graph, torch profiler", "b372d39",
          f"{SDPA}/artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB200.csv"),
    Table("GB300", "9.17.0", "cuDNN FE graph, torch profiler", "b372d39",
          f"{SDPA}/artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv"),
    Table("GB200", "9.18.1", "cuDNN FE graph, torch profiler", "b8c0656",
          f"{SDPA}/results/gb200_918_only_cudnn/llama3.1_20260126_110503.csv"),
    Table("GB300", "9.18.1", "cuDNN FE graph, torch profiler", "b8c0656",
          f"{SDPA}/results/gb300_918_only_cudnn/llama3.1_20260126_110426.csv"),
    Table("GB200", "9.19.1", "cuDNN FE graph, torch profiler", "fb682ce",
          f"{SDPA}/results/gb200_919_only_cudnn/llama3.1_20260226_174648.csv"),
    Table("GB300", "9.19.1", "cuDNN FE graph, torch profiler", "fb682ce",
          f"{SDPA}/results/gb300_919_only_cudnn/llama3.1_20260226_185510.csv"),
    Table("H200", "9.19.1", "cuDNN FE graph, torch profiler", "fb682ce",
          f"{SDPA}/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv"),
    Table("GB200", "9.22.0", "cuDNN FE graph, torch profiler", "fb682ce",
          f"{SDPA}/results/llama3.1/gb200/llama3.1_20260424_100750.csv"),
    Table("GB300", "9.22.0", "cuDNN FE graph, torch profiler", "fb682ce",
          f"{SDPA}/results/llama3.1/gb300/llama3.1_20260424_100757.csv"),
)

# Row: (batch, query heads, sequence, head dim, pass, seconds); causal bf16 only.
Row = tuple[int, int, int, int, str, float]


def read_rows(git_dir: str, table: Table) -> list[Row]:
    """Causal, bf16, non-deterministic cuDNN rows of one published table."""
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{table.commit}:{table.path}"],
                          check=True, capture_output=True, text=True).stdout
    rows: list[Row] = []
    for r in csv.DictReader(io.StringIO(text)):
        if r.get("backend") not in ("pyt_cudnn", "cudnn_fe", "cudnn"):
            continue
        if r.get("data_type", "bfloat16") != "bfloat16" or r.get("deterministic_bwd") == "True":
            continue
        if r.get("is_causal", "True") != "True" or r.get("attn_mask", "top_left") != "top_left":
            continue
        shape = (int(r["batch_size"]), int(r["num_q_heads"]), int(r["q_seqlen"]),
                 int(r.get("head_dim") or r["head_dim_qk"]))
        if r.get("profile_pass") in ("fwd", "bwd"):  # one pass per row (cuDNN 9.22 files)
            rows.append((*shape, r["profile_pass"], float(r["time_ms"]) * 1e-3))
            continue
        fwd = r.get("forward_time") or r["fwd_time_ms"]
        bwd = r.get("backward_time") or r["bwd_time_ms"]
        rows += [(*shape, "fwd", float(fwd) * 1e-3), (*shape, "bwd", float(bwd) * 1e-3)]
    return rows


def shipped_fit(device: str) -> dict[str, AttentionEfficiency]:
    """The shipped fit a device's prediction uses (B200 family; Blackwell Ultra rescaled)."""
    key = "H200" if device == "H200" else "B200"
    fwd, bwd = FLASH_ATTENTION_EFFICIENCY[key]["fwd"], FLASH_ATTENTION_EFFICIENCY[key]["bwd"]
    ratio = sfu_exp_time_ratio(device)
    if ratio != 1.0:
        fwd, bwd = exp_rescaled_attention_efficiency(fwd, bwd, ratio)
    return {"fwd": fwd, "bwd": bwd}


def model_s(device: str, row: Row, efficiency: AttentionEfficiency) -> float:
    b, h, s, d, which, _ = row
    return float(flash_attention_time_s(b, h, s, s, d, True, PEAK_FLOPS_PER_S[device],
                                        backward=which == "bwd", efficiency=efficiency))


def refit(rows: list[tuple[str, Row]], which: str) -> tuple[AttentionEfficiency, float]:
    """Two of the three parameters per pass (one head dim in the tables): forward
    max_fraction held at the shipped 1.0, backward head_dim_half at the shipped value."""
    shipped = FLASH_ATTENTION_EFFICIENCY["B200"][which]
    if which == "fwd":
        def make(x: np.ndarray) -> AttentionEfficiency:
            return AttentionEfficiency(shipped.max_fraction, x[0], x[1])
        start, bounds = [1000.0, 50.0], ([0.0, 0.0], [1e5, 1e4])
    else:
        def make(x: np.ndarray) -> AttentionEfficiency:
            return AttentionEfficiency(x[0], x[1], shipped.head_dim_half)
        start, bounds = [0.8, 1000.0], ([0.05, 0.0], [1.0, 1e5])

    def residuals(x: np.ndarray) -> list[float]:
        return [np.log(model_s(dev, row, make(x)) / row[5]) for dev, row in rows]

    fit = least_squares(residuals, start, bounds=bounds)
    return make(fit.x), float(np.mean(np.abs(np.exp(fit.fun) - 1.0)) * 100)


def main(git_dir: str) -> None:
    data = {table: read_rows(git_dir, table) for table in TABLES}
    print("model/measured time, shipped fit (s = 4k / 8k / 16k / 32k; bf16, causal, d=128)")
    for table, rows in data.items():
        fit = shipped_fit(table.device)
        for which in ("fwd", "bwd"):
            ratios = {row[2]: model_s(table.device, row, fit[which]) / row[5]
                      for row in rows if row[4] == which}
            cells = " ".join(f"{ratios[s]:5.2f}" if s in ratios else "    -"
                             for s in (4096, 8192, 16384, 32768))
            print(f"  {table.device:5s} cuDNN {table.cudnn} @ {table.commit} {which}: {cells}"
                  f"   ({table.timing})")
    generations = {
        "9.10 (B200, cuDNN 9.10.2 + 9.13.1, PyTorch SDPA)":
            [t for t in TABLES if t.device == "B200"],
        "9.17 (GB200, cuDNN 9.17.0-9.22.0, cuDNN FE)":
            [t for t in TABLES if t.device == "GB200"],
    }
    print("\nrefit per generation (4096 <= s <= 32768):")
    for label, tables in generations.items():
        for which in ("fwd", "bwd"):
            rows = [(t.device, row) for t in tables for row in data[t]
                    if row[4] == which and 4096 <= row[2] <= 32768]
            fit, error = refit(rows, which)
            shipped = shipped_fit(tables[0].device)[which]
            before = np.mean([abs(model_s(dev, row, shipped) / row[5] - 1) for dev, row in rows])
            print(f"  {label} {which}: [{fit.max_fraction:.3f}, {fit.seq_half_tokens:.1f}, "
                  f"{fit.head_dim_half:.1f}], {len(rows)} rows, error {error:.1f}% "
                  f"(shipped fit {before * 100:.1f}%)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: attention_cudnn_generations.py CUDNN_FRONTEND_GIT_DIR")
    main(sys.argv[1])
