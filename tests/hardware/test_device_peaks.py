"""The MFU denominator has one definition (Device.mfu_peak_flops_per_s) that the step-time
model, the planner's envelope and the trainer's metrics all read."""

from __future__ import annotations

import pytest

from mosaic.arch import Geometry
from mosaic.hardware import Cluster, get_system
from mosaic.hardware.catalog import get_device
from mosaic.perf.machine import machine_for
from mosaic.train.metrics import FlopsAccounting


def test_every_mfu_reads_the_dense_bf16_datasheet_peak() -> None:
    h100 = get_device("H100-SXM-80GB")
    # NVIDIA H100 SXM datasheet: 989 TFLOP/s dense bf16 (1,979 with sparsity)
    assert h100.mfu_peak_flops_per_s == pytest.approx(989e12, rel=0.001)
    # an FP8 machine still reports MFU against the bf16 peak, its GEMMs at the fp8 one
    fp8 = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "fp8")
    assert fp8.mfu_peak_flops_per_s == h100.mfu_peak_flops_per_s
    assert fp8.gemm_peak_flops_per_s == pytest.approx(2 * h100.mfu_peak_flops_per_s, rel=0.01)
    metrics = FlopsAccounting.build(
        Geometry(layers=2, d_model=256, heads=4, kv_heads=4, head_dim=64, ffn=1024, vocab=100),
        128, h100, "fp8", None)
    assert metrics.peak_flops_per_s == h100.mfu_peak_flops_per_s
