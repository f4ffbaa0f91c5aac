"""Kernel-time models: hand-computed GEMM, grouped GEMM, attention, tables, vectorisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mosaic.errors import MosaicInputError
from mosaic.perf.kernels import (
    FLASH_ATTENTION_EFFICIENCY,
    SM_COUNT,
    AttentionEfficiency,
    GemmParams,
    GemmTable,
    GroupedGemmTable,
    flash_attention_flops,
    flash_attention_time_s,
    gemm_efficiency,
    gemm_source,
    gemm_time_s,
    grouped_gemm_source,
    grouped_gemm_time_s,
    memory_bound_time_s,
    te_grouped_linear_host_floor_s,
    wave_efficiency,
)

MICROBENCH = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "microbench"

# One tile shape, no latency, perfect HBM: every number below is computed by hand.
HAND = GemmParams(max_fraction_of_peak=0.8, k_half=256.0, hbm_efficiency=1.0,
                  kernel_latency_s=0.0, tile_shapes=((128, 128),))
PEAK, HBM, SMS = 1e15, 1e12, 100
B200 = {"peak_flops_per_s": 2.25e15, "hbm_bw_bytes_per_s": 8e12, "sm_count": 148}


def test_sm_counts_from_datasheets():
    assert SM_COUNT == {"A100": 108, "H100": 132, "H200": 132, "B200": 148}


def test_gemm_compute_bound_by_hand():
    # 1024^3: 8 x 8 = 64 tiles of 128x128 on 100 SMs -> one wave, 1024^2/(100*128^2) = 0.64
    # K ramp 1024/(1024+256) = 0.8 -> efficiency 0.8 * 0.64 * 0.8 = 0.4096
    assert float(gemm_efficiency(1024, 1024, 1024, SMS, HAND)) == pytest.approx(0.4096)
    compute_s = 2 * 1024**3 / (PEAK * 0.4096)
    # memory 3 * 1024^2 * 2 B / 10 TB/s = 0.63 us < compute 5.24 us
    t = gemm_time_s(1024, 1024, 1024, PEAK, 10e12, SMS, params=HAND)
    assert float(t) == pytest.approx(compute_s, rel=1e-12)


def test_gemm_memory_bound_by_hand():
    # m=64, n=k=8192: weights dominate, 2 B x (64*8192 + 8192^2 + 64*8192) over 1 TB/s
    moved = 2 * (64 * 8192 + 8192**2 + 64 * 8192)
    compute_s = 2 * 64 * 8192**2 / (PEAK * 0.8 * (64 * 8192 / (100 * 128**2)) * 8192 / 8448)
    assert compute_s < moved / HBM
    t = gemm_time_s(64, 8192, 8192, PEAK, HBM, SMS, params=HAND)
    assert float(t) == pytest.approx(moved / HBM, rel=1e-12)


def test_wave_quantisation_penalises_a_partial_last_wave():
    # 101 tiles on 100 SMs need two waves: 101/200 of the slots do useful work
    assert float(wave_efficiency(1, 101 * 128, 128, 100, ((128, 128),))) == pytest.approx(
        101 / 200)
    # the best of several tiles is used: 64x64 fills 100 SMs better for a 640x640 output
    assert float(wave_efficiency(1, 640, 640, 100, ((128, 128), (64, 64)))) == 1.0


def test_large_gemm_approaches_the_cap():
    eff = float(gemm_efficiency(16384, 16384, 16384, 148))
    assert 0.9 * GemmParams().max_fraction_of_peak < eff <= GemmParams().max_fraction_of_peak


def test_grouped_gemm_small_experts_slower_per_flop_than_one_big_gemm():
    # the same 2 * 2048 * 4096^2 FLOPs: 64 experts x 32 tokens vs one 2048-token GEMM
    grouped = float(grouped_gemm_time_s(64, 32, 4096, 4096, **B200))
    dense = float(gemm_time_s(2048, 4096, 4096, **B200))
    assert grouped > 4 * dense


def test_grouped_gemm_efficiency_follows_per_group_m():
    one = grouped_gemm_time_s(1, 512, 2048, 2048, **B200)
    assert float(one) == pytest.approx(float(gemm_time_s(512, 2048, 2048, **B200)), rel=1e-12)
    # splitting 512 tokens over 8 experts re-reads 8 weight matrices: not the aggregate GEMM
    assert float(grouped_gemm_time_s(8, 64, 2048, 2048, **B200)) > 2 * float(one)


def test_grouped_gemm_host_floor():
    floor = te_grouped_linear_host_floor_s(np.array([4, 128]))
    np.testing.assert_allclose(floor, [6.0e-5 + 4 * 1.59e-5, 6.0e-5 + 128 * 1.59e-5])
    t = grouped_gemm_time_s(128, 64, 1024, 1024, **B200, host_floor_s=floor[1])
    assert float(t) == pytest.approx(floor[1])


def test_memory_bound_by_hand():
    t = memory_bound_time_s(1e9, 2e12, hbm_efficiency=0.5, kernel_latency_s=1e-6)
    assert float(t) == pytest.approx(1e-6 + 1e-3, rel=1e-12)


def test_flash_attention_by_hand():
    fwd = 4 * 2 * 4 * 1024 * 1024 * 128
    assert float(flash_attention_flops(2, 4, 1024, 1024, 128, False)) == fwd
    assert float(flash_attention_flops(2, 4, 1024, 1024, 128, True)) == fwd / 2
    assert float(flash_attention_flops(2, 4, 1024, 1024, 128, True, backward=True)) == 2.5 * fwd / 2
    # efficiency 0.5 * 1024/(1024+1024) * 128/(128+128) = 0.125
    eff = AttentionEfficiency(0.5, 1024.0, 128.0)
    t = flash_attention_time_s(2, 4, 1024, 1024, 128, True, PEAK, efficiency=eff,
                               kernel_latency_s=0.0)
    assert float(t) == pytest.approx(fwd / 2 / (PEAK * 0.125), rel=1e-12)


def test_flash_attention_backward_uses_its_own_fit():
    b200 = FLASH_ATTENTION_EFFICIENCY["B200"]
    fwd = flash_attention_time_s(1, 32, 8192, 8192, 128, True, 2.25e15, efficiency=b200["fwd"])
    bwd = flash_attention_time_s(1, 32, 8192, 8192, 128, True, 2.25e15, backward=True,
                                 efficiency=b200["bwd"])
    ratio = (2.5 * b200["fwd"].at(8192, 128) / b200["bwd"].at(8192, 128))
    assert float(bwd - 3.5e-6) / float(fwd - 3.5e-6) == pytest.approx(float(ratio), rel=1e-9)


def test_vectorised_equals_scalar_calls():
    rng = np.random.default_rng(3)
    m, n, k = (2 ** rng.integers(1, 16, 30) for _ in range(3))
    g = rng.integers(1, 64, 30)
    vector = gemm_time_s(m, n, k, **B200)
    scalar = [float(gemm_time_s(a, b, c, **B200)) for a, b, c in zip(m, n, k, strict=True)]
    np.testing.assert_allclose(vector, scalar, rtol=1e-15)
    vector = grouped_gemm_time_s(g, m, n, k, **B200)
    scalar = [float(grouped_gemm_time_s(q, a, b, c, **B200)) for q, a, b, c in zip(
        g, m, n, k, strict=True)]
    np.testing.assert_allclose(vector, scalar, rtol=1e-15)
    vector = flash_attention_time_s(g, 8, k, k, 128, True, 2.25e15)
    scalar = [float(flash_attention_time_s(q, 8, c, c, 128, True, 2.25e15)) for q, c in zip(
        g, k, strict=True)]
    np.testing.assert_allclose(vector, scalar, rtol=1e-15)


def test_invalid_shapes_are_rejected():
    with pytest.raises(MosaicInputError, match="k must be > 0"):
        gemm_time_s(8, 8, 0, **B200)


# --- measured tables ----------------------------------------------------------------------

def _grid_table() -> GemmTable:
    # a 2 x 2 x 2 sweep with time = 1e-6 * m (so log-space interpolation is checkable)
    rows = [(m, n, k, "bf16", 1e-6 * m) for m in (1024, 4096) for n in (1024, 4096)
            for k in (1024, 4096)]
    return GemmTable(pd.DataFrame(rows, columns=["m", "n", "k", "dtype", "time_s"]))


def test_gemm_table_exact_at_measured_points_and_log_interpolated_inside():
    table = _grid_table()
    t = gemm_time_s([1024, 4096, 2048], [4096, 1024, 2048], [1024, 4096, 2048], **B200,
                    table=table)
    # at the log-midpoint m = 2048 the log-linear interpolant of 1e-6*m is exact
    np.testing.assert_allclose(t, [1.024e-3, 4.096e-3, 2.048e-3], rtol=1e-12)
    assert list(gemm_source([1024, 2048], [4096, 2048], [1024, 2048], table)) == [
        "measured", "measured"]


def test_gemm_table_outside_is_analytical_and_labelled():
    table = _grid_table()
    m, n, k = [512, 8192, 2048, 2048], [2048, 2048, 2048, 2048], [2048, 2048, 8192, 2048]
    t = gemm_time_s(m, n, k, **B200, table=table, dtype="bf16")
    analytical = gemm_time_s(m, n, k, **B200)
    np.testing.assert_array_equal(t[:3], analytical[:3])
    assert list(gemm_source(m, n, k, table)) == ["analytical"] * 3 + ["measured"]
    # another dtype is not covered
    assert str(gemm_source(2048, 2048, 2048, table, dtype="fp8")) == "analytical"


def test_gemm_table_cell_with_a_missing_corner_is_not_covered():
    rows = [(m, n, k, "bf16", 2 * m * n * k / 500e12)
            for m in (1024, 4096) for n in (1024, 4096) for k in (1024, 4096)]
    frame = pd.DataFrame(rows, columns=["m", "n", "k", "dtype", "time_s"]).iloc[:-1]
    table = GemmTable(frame.drop(columns="time_s").assign(tflops=500.0))
    assert str(gemm_source(2048, 2048, 2048, table)) == "analytical"  # (4096,4096,4096) missing
    assert float(table.time_s(1024, 4096, 4096)) == pytest.approx(2 * 1024 * 4096**2 / 500e12)


def test_grouped_table_and_file_round_trip(tmp_path):
    rows = [(g, m, 2048, 1024, "bf16", 1e-6 * g * m) for g in (8, 32) for m in (64, 256)]
    path = tmp_path / "grouped.parquet"
    pd.DataFrame(rows, columns=["groups", "m_per_group", "n", "k", "dtype", "time_s"]).to_parquet(
        path)
    table = GroupedGemmTable.from_file(path)
    t = grouped_gemm_time_s([16, 16], [128, 128], [2048, 4096], 1024, **B200, table=table)
    assert t[0] == pytest.approx(1e-6 * 16 * 128, rel=1e-12)  # log-linear in g and m
    assert t[1] == float(grouped_gemm_time_s(16, 128, 4096, 1024, **B200))  # n unmeasured
    assert list(grouped_gemm_source(16, 128, [2048, 4096], 1024, table)) == [
        "measured", "analytical"]


def test_table_validation_names_the_problem():
    with pytest.raises(MosaicInputError, match="time_s or tflops"):
        GemmTable(pd.DataFrame({"m": [1], "n": [1], "k": [1], "dtype": ["bf16"]}))
    with pytest.raises(MosaicInputError, match=r"GEMM table row 1: time_s=-1\.0; allowed: > 0"):
        GemmTable(pd.DataFrame({"m": [1], "n": [1], "k": [1], "dtype": ["bf16"],
                                "time_s": [-1.0]}))


# --- against the ScalePlan measurements ----------------------------------------------------

def _scaleplan_gemm() -> pd.DataFrame:
    if not MICROBENCH.is_dir():
        pytest.skip(f"ScalePlan microbenchmarks not found at {MICROBENCH} (../shared absent)")
    d = pd.read_parquet(MICROBENCH / "gemm_util.parquet").reset_index()
    d = d[(d["status"] == "OK") & (d["GPU_MODEL"] == "B200") & (d["dtype"] == "bf16")]
    return pd.DataFrame({"m": d["M"], "n": d["N"], "k": d["K"], "dtype": d["dtype"],
                         "time_s": d["time_ms_med"] * 1e-3})


def test_scaleplan_gemm_table_and_model_error():
    rows = _scaleplan_gemm()
    table = GemmTable(rows)
    np.testing.assert_allclose(table.time_s(rows["m"], rows["n"], rows["k"]), rows["time_s"],
                               rtol=1e-9)
    big = rows[(rows[["m", "n", "k"]].min(axis=1) >= 256) & (rows["time_s"] >= 1e-4)]
    t = gemm_time_s(big["m"], big["n"], big["k"], **B200)
    mape = np.mean(np.abs(t / big["time_s"].to_numpy() - 1))
    assert mape < 0.12, f"analytical GEMM MAPE {mape:.1%} on B200 training shapes"
