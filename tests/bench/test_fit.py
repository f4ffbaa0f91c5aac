"""The microbenchmark fits recover known constants from synthetic tables, and reproduce
the built-in constants from the ScalePlan tables they were derived from."""

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mosaic.errors import MosaicInputError
from mosaic.evaluate.microbench_calibration import calibrate_from_microbench
from mosaic.evaluate.microbench_fit import (
    DeviceRates,
    fit_attention,
    fit_collectives,
    fit_gemm,
    fit_streaming,
)
from mosaic.perf.calibration import default_calibration
from mosaic.perf.collectives import Interconnect, collective_estimate
from mosaic.perf.fitted_constants import fitted
from mosaic.perf.kernels import (
    DEFAULT_GEMM,
    AttentionEfficiency,
    flash_attention_time_s,
    gemm_time_s,
)

H200 = DeviceRates(989.4e12, 4.8e12, 132)  # datasheet bf16 peak, HBM3e, SMs
TRUE_GEMM = replace(DEFAULT_GEMM, max_fraction_of_peak=0.62, k_half=240.0,
                    hbm_efficiency=0.81, kernel_latency_s=6e-6)
TRUE_FWD = AttentionEfficiency(0.71, 1400.0, 55.0)
TRUE_BWD = AttentionEfficiency(0.52, 900.0, 30.0)
SHARED = Path(__file__).resolve().parents[3] / "shared" / "reference" / "microbench"


def gemm_table(rates=H200, params=TRUE_GEMM):
    sizes = (256, 1024, 4096, 16384)  # m = 16, 64 rows are memory bound (HBM efficiency)
    m, n, k = (np.array(v, float) for v in zip(*itertools.product((16, 64, *sizes), sizes,
                                                                  sizes), strict=True))
    t = gemm_time_s(m, n, k, rates.peak_flops_per_s, rates.hbm_bw_bytes_per_s,
                    rates.sm_count, params=params)
    return pd.DataFrame({"device": "H200", "dtype": "bf16", "m": m, "n": n, "k": k,
                         "time_s": t})


def test_gemm_fit_recovers_known_constants():
    fit, latency = fit_gemm(gemm_table(), {"H200": H200})
    assert fit.values["gemm_max_fraction_of_peak"] == pytest.approx(0.62, rel=1e-3)
    assert fit.values["gemm_k_half"] == pytest.approx(240.0, rel=1e-2)
    assert fit.values["gemm_hbm_efficiency"] == pytest.approx(0.81, rel=1e-2)
    assert latency[0] == pytest.approx(6e-6, rel=2e-2)
    assert fit.mape_percent < 0.1


def test_collective_fit_recovers_known_constants():
    truth = Interconnect(scale_up_domain_gpus=8, gpus_per_node=8,
                         scale_up_bw_bytes_per_s=450e9, scale_out_bw_bytes_per_s=50e9,
                         low_latency_protocols=False, launch_latency_s=2e-5,
                         ring_scale_up_efficiency=0.8, p2p_scale_up_efficiency=0.6,
                         ring_scale_out_efficiency=0.9, p2p_scale_out_efficiency=0.7,
                         scale_out_latency_s=1e-5)
    rows = []
    for op, (n, stride), size in itertools.product(
            ("all_gather", "reduce_scatter", "all_reduce", "all_to_all"),
            ((2, 1), (8, 1), (16, 1), (4, 8)), 2.0 ** np.arange(12, 33, 2)):
        t, _ = collective_estimate(op, size, n, stride, truth)
        rows.append({"collective": op, "group_size": n, "stride": stride,
                     "message_bytes": size, "time_s": float(t)})
    start = replace(truth, launch_latency_s=4e-5, ring_scale_up_efficiency=0.5,
                    p2p_scale_up_efficiency=0.5, ring_scale_out_efficiency=0.5,
                    p2p_scale_out_efficiency=0.5, scale_out_latency_s=3e-6)
    fit = fit_collectives(pd.DataFrame(rows), start)
    for name in ("launch_latency_s", "ring_scale_up_efficiency", "p2p_scale_up_efficiency",
                 "ring_scale_out_efficiency", "p2p_scale_out_efficiency"):
        assert fit.values[name] == pytest.approx(getattr(truth, name), rel=1e-3), name
    assert fit.mape_percent < 0.1


def test_attention_and_streaming_fits_recover_known_constants():
    b, h, d = 1, 32, np.array([64, 128, 256] * 3)
    s = np.repeat([2048, 8192, 32768], 3)
    rows = pd.DataFrame({"device": "H200", "batch": b, "heads": h, "seq": s, "head_dim": d,
                         "fwd_time_s": flash_attention_time_s(b, h, s, s, d, True, 989.4e12,
                                                              efficiency=TRUE_FWD),
                         "bwd_time_s": flash_attention_time_s(b, h, s, s, d, True, 989.4e12,
                                                              backward=True,
                                                              efficiency=TRUE_BWD)})
    fits = fit_attention(rows, {"H200": 989.4e12})
    np.testing.assert_allclose(fits["fwd"][0], [0.71, 1400.0, 55.0], rtol=1e-3)
    np.testing.assert_allclose(fits["bwd"][0], [0.52, 900.0, 30.0], rtol=1e-3)
    size = 3.0 * 2 * 4.0 ** np.arange(8, 14)
    stream = pd.DataFrame({"moved_bytes": size, "time_s": 4e-6 + size / (4.8e12 * 0.77)})
    fit = fit_streaming(stream, 4.8e12)
    assert fit.values["elementwise_hbm_efficiency"] == pytest.approx(0.77, rel=1e-6)
    assert fit.values["elementwise_latency_s"] == pytest.approx(4e-6, rel=1e-6)


def write_bench_dir(directory: Path) -> None:
    """A bench directory as `mosaic bench` writes it, from the known constants on an H200."""
    directory.mkdir()
    meta = {"metadata_id": "synthetic01", "device_name": "NVIDIA H200", "sm_count": 132,
            "created_utc": "2026-01-01T00:00:00+00:00", "torch_version": "x"}
    (directory / "metadata.json").write_text(json.dumps({"runs": {"synthetic01": meta}}))
    common = {"metadata_id": "synthetic01", "status": "ok"}
    g = gemm_table().drop(columns="device").assign(**common, **{"pass": "fwd"})
    g["case"] = [f"bf16:{r.m}x{r.n}x{r.k}" for r in g.itertuples()]
    g.to_parquet(directory / "gemm.parquet")
    att = []
    for s_, d_ in itertools.product((2048, 8192, 32768), (64, 128, 256)):
        for name, eff, backward in (("fwd", TRUE_FWD, False), ("bwd", TRUE_BWD, True)):
            t = float(flash_attention_time_s(1, 32, s_, s_, d_, True, 989.4e12,
                                             backward=backward, efficiency=eff))
            att.append({"case": f"cudnn:{name}:{s_}:{d_}", "backend": "cudnn", "pass": name,
                        "batch": 1, "heads": 32, "kv_heads": 8, "seq": s_, "head_dim": d_,
                        "time_s": t, **common})
    pd.DataFrame(att).to_parquet(directory / "attention.parquet")
    size = 3.0 * 2 * 4.0 ** np.arange(8, 14)
    k = pd.DataFrame({"op": "add", "moved_bytes": size, "time_s": 4e-6 + size / (4.8e12 * 0.77),
                      **common})
    k["case"] = [f"add:{i}" for i in range(len(k))]
    k["bandwidth_bytes_per_s"] = k["moved_bytes"] / k["time_s"]
    launch = {"op": "launch", "moved_bytes": 0.0, "time_s": 9e-6, "case": "launch", **common}
    pd.concat([k, pd.DataFrame([launch])]).to_parquet(directory / "kernels.parquet")


def test_calibrate_from_a_bench_directory_recovers_the_constants(tmp_path):
    directory = tmp_path / "h200"
    write_bench_dir(directory)
    document, report = calibrate_from_microbench(directory, default_calibration())
    block = document["microbench"]
    assert block["applies_to"] == ["H200-SXM-141GB"]  # matched to the catalog
    assert block["gemm"]["max_fraction_of_peak"] == pytest.approx(0.62, rel=1e-3)
    assert block["gemm"]["kernel_latency_s"] == pytest.approx(6e-6, rel=2e-2)
    # cuDNN rows: the triple is stored as measured (relative throughput 1)
    np.testing.assert_allclose(block["attention"]["fwd"], [0.71, 1400.0, 55.0], rtol=1e-3)
    assert block["elementwise_hbm_efficiency"] == pytest.approx(0.77, rel=1e-6)
    assert document["constants"]["dispatch_gap_s"]["value"] == 9e-6
    assert set(report["fit_error_percent"]) == {"gemm", "attention_fwd", "attention_bwd",
                                                "elementwise"}
    assert max(report["fit_error_percent"].values()) < 0.5
    assert report["warnings"] == []
    yaml.safe_dump(document)  # plain data


def test_a_bench_started_on_a_busy_host_is_named(tmp_path):
    """A trial's CPU tables moved 100-1000x between runs on a loaded machine, and calibrate
    fitted them as given: the metadata records the load average as the run started, and a
    load at or above the core count is named by bench and calibrate."""
    from mosaic.bench.metadata import busy_host_warning

    directory = tmp_path / "h200"
    write_bench_dir(directory)
    document = json.loads((directory / "metadata.json").read_text())
    document["runs"]["synthetic01"] |= {"load_average_1m": 3.1, "cpu_count": 2}
    (directory / "metadata.json").write_text(json.dumps(document))
    _, report = calibrate_from_microbench(directory, default_calibration())
    assert report["warnings"] == [
        "the host was busy when the bench started (load average 3.1 on 2 cores): other "
        "processes share its CPUs, so timings may vary between runs"]
    assert busy_host_warning({"load_average_1m": 1.5, "cpu_count": 2}) is None
    assert busy_host_warning({"cpu_count": 2}) is None  # older metadata: not recorded


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/reference/microbench")
def test_scaleplan_collectives_reproduce_the_built_in_constants():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from _scaleplan import P6_B200, collective_rows

    fit = fit_collectives(collective_rows(), P6_B200)
    for name, value in fit.values.items():
        assert value == pytest.approx(fitted("collectives", name), rel=2e-3), name


def test_implausible_fitted_constants_are_named():
    from mosaic.evaluate.microbench_calibration import implausible_constants

    block = {"applies_to": ["any"], "reference": {"source": "measured"},
             "gemm": {"max_fraction_of_peak": 0.8, "kernel_latency_s": 3.7e-22},
             "attention": {"fwd": [6.39, 1.0, 1.0], "bwd": [0.7, 1.0, 1.0]},
             "collectives": {"scale_up_latency_s": 3e-6, "scale_out_latency_s": 2.5e-15}}
    warnings = implausible_constants(block, {"device_name": "cpu:x86_64"})
    assert len(warnings) == 5
    assert "measured on cpu:x86_64" in warnings[0]
    assert "gemm kernel_latency_s = 3.7e-22 s" in warnings[1]
    assert "collectives scale_out_latency_s" in warnings[2]
    # the GEMM constants are one joint fit: the plateau fitted beside a latency at the fit's
    # floor absorbed its error, so it is not written either (a trial's file mixed them)
    assert warnings[3] == ("gemm max_fraction_of_peak: fitted jointly with the dropped "
                           "constant, so not written either (the built-ins are kept)")
    assert "attention fwd max_fraction = 6.39 is above 1" in warnings[4]
    # and they are not written: the model keeps its built-ins for them (a CPU run's
    # attention max_fraction 452 made a B200 job's attention 300x faster; a trial)
    assert all("not written" in w and "(the built-in" in w for w in warnings[1:])
    assert "gemm" not in block
    assert block["attention"] == {"bwd": [0.7, 1.0, 1.0]}
    assert block["collectives"] == {"scale_up_latency_s": 3e-6}
    gpu = {**block, "applies_to": ["H200-SXM-141GB"],
           "gemm": {"max_fraction_of_peak": 0.8, "kernel_latency_s": 4e-6, "k_half": 40.0},
           "attention": {"fwd": [0.6, 1.0, 1.0]}, "collectives": {"scale_up_latency_s": 3e-6}}
    assert implausible_constants(gpu, {"device_name": "NVIDIA H200"}) == []
    # a streaming kernel faster than the HBM (CPU tables read against a GPU's bandwidth)
    fast = {**gpu, "elementwise_hbm_efficiency": 1.27, "gemm": {"k_half": 1.7e-14}}
    assert implausible_constants(fast, {"device_name": "NVIDIA H200"}) == [
        "elementwise_hbm_efficiency = 1.27 is above 1, faster than the reference peak: not a "
        "physical constant, not written (the built-in is kept)",
        "gemm k_half = 1.7e-14 is a reduction shorter than one element: not a physical "
        "constant, not written (the built-in is kept)"]
    assert "elementwise_hbm_efficiency" not in fast and "gemm" not in fast
    # an attention fit that collapsed onto its bounds (max_fraction 1, half-points ~1e-11:
    # times faster than the peak over many shapes; a review)
    collapsed = {"attention": {"fwd": [0.99999, 2.1e-11, 4.0e-13], "bwd": [0.6, 900.0, 40.0]}}
    (why,) = implausible_constants(collapsed, {"device_name": "NVIDIA H200"})
    assert why.startswith("attention fwd half-points 2.1e-11 tokens and 4e-13 head dims")
    assert collapsed["attention"] == {"bwd": [0.6, 900.0, 40.0]}


def test_constants_at_a_fit_ceiling_are_not_written():
    """A busy CPU host's 8 ms GEMMs pinned max_fraction_of_peak at 0.99999 and the kernel
    latency at the 1e-4 s ceiling, and both were written without a word (a trial)."""
    from mosaic.evaluate.microbench_calibration import implausible_constants

    block = {"applies_to": ["any"], "reference": {"source": "measured"},
             "gemm": {"max_fraction_of_peak": 0.99999, "kernel_latency_s": 9.99999e-05,
                      "k_half": 40.0}}
    warnings = implausible_constants(block, {"device_name": "NVIDIA H200"})
    assert len(warnings) == 3
    assert "max_fraction_of_peak = 0.99999 is at the fit's ceiling of 1" in warnings[0]
    assert "kernel_latency_s = 0.0001 s is at the fit's ceiling" in warnings[1]
    assert warnings[2].startswith("gemm k_half: fitted jointly with the dropped constant")
    assert "gemm" not in block


def test_a_family_fitted_far_worse_than_on_real_gpus_is_not_written():
    """A busy CPU's stalls gave a GEMM fit of 296% MAPE and collectives of 81%, and their
    constants made a B200 job 3.65x slower (a trial). Above about twice the error of the
    same fits on real GPU tables (GEMM 130%, collectives 40%) a family is left out, said."""
    from mosaic.evaluate.microbench_calibration import implausible_constants

    block = {"applies_to": ["H200-SXM-141GB"], "reference": {"source": "catalog"},
             "gemm": {"max_fraction_of_peak": 0.13, "k_half": 40.0},
             "collectives": {"scale_up_latency_s": 4.9e-4},
             "elementwise_hbm_efficiency": 0.8,
             "fit_error_percent": {"gemm": 296.1, "collectives": 81.2, "elementwise": 12.0}}
    warnings = implausible_constants(block, {"device_name": "NVIDIA H200"})
    assert "gemm" not in block and "collectives" not in block
    assert block["elementwise_hbm_efficiency"] == 0.8
    assert warnings[0].startswith("gemm fit error 296% MAPE is above 130%")
    assert warnings[1].startswith("collectives fit error 81% MAPE is above 40%")
    fine = {"applies_to": ["H200-SXM-141GB"], "gemm": {"max_fraction_of_peak": 0.7},
            "fit_error_percent": {"gemm": 64.0}}
    assert implausible_constants(fine, {"device_name": "NVIDIA H200"}) == []
    assert fine["gemm"] == {"max_fraction_of_peak": 0.7}


def test_the_comparison_table_says_which_fitted_constants_were_written():
    """The table listed a fitted elementwise efficiency of 1.127 while a warning said it
    was not written (a trial): each row now says whether the file holds it."""
    from mosaic.evaluate.microbench_calibration import is_written

    block = {"gemm": {"hbm_efficiency": 0.7}, "attention": {"bwd": [0.7, 1.0, 1.0]},
             "collectives": {}}
    assert is_written(block, "gemm", "hbm_efficiency")
    assert not is_written(block, "gemm", "k_half")
    assert is_written(block, "attention", "bwd.max_fraction")
    assert not is_written(block, "attention", "fwd.max_fraction")
    assert not is_written(block, "elementwise", "elementwise_hbm_efficiency")
    assert is_written({**block, "elementwise_hbm_efficiency": 0.8}, "elementwise",
                      "elementwise_hbm_efficiency")


def test_a_cpu_profile_keeps_the_base_envelope_and_lists_every_fitted_constant(tmp_path):
    """A trial's CPU calibration called every GPU plan 'outside' its envelope (gpu B200 not
    in {cpu:x86_64}) while changing none of its numbers: the CPU's constants apply to the
    CPU alone, so a GPU job keeps the base constants and the base envelope, and says so.
    Its comparison table dropped the constants it had refused (the report shared the
    block's dicts) and called the CPU's launch gap written."""
    import yaml as yaml_module

    from mosaic.evaluate.microbench_calibration import comparison_rows, is_written
    from mosaic.perf.calibration import load_calibration

    directory = tmp_path / "cpu"
    write_bench_dir(directory)
    document = json.loads((directory / "metadata.json").read_text())
    document["runs"]["synthetic01"] |= {"device_name": "cpu:x86_64", "sm_count": 1}
    (directory / "metadata.json").write_text(json.dumps(document))
    with pytest.raises(MosaicInputError, match=r"catalog: measure a gemm peak sweep \(`mosaic "
                       r"bench gemm`, fp32 on a CPU\) so"):
        calibrate_from_microbench(directory, default_calibration())
    gemm = pd.read_parquet(directory / "gemm.parquet")
    square = gemm[(gemm["m"] == gemm["n"]) & (gemm["n"] == gemm["k"])].assign(**{"pass": "peak"})
    pd.concat([gemm, square]).to_parquet(directory / "gemm.parquet")
    base = default_calibration()
    written, report = calibrate_from_microbench(directory, base)
    assert written["microbench"]["applies_to"] == ["cpu:x86_64"]
    assert written["coverage"]["devices"] == base.to_document()["coverage"]["devices"]
    assert "dispatch_gap_s" not in report or not is_written(
        written["microbench"], "host", "dispatch_gap_s", report)
    assert written["constants"]["dispatch_gap_s"] == base.to_document()["constants"][
        "dispatch_gap_s"]
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml_module.safe_dump(written))
    calibration = load_calibration(path)
    (note,) = calibration.microbench_notes("B200")
    assert "measured on cpu:x86_64, not B200" in note
    assert calibration.microbench_notes("cpu:x86_64") == []
    fitted = {(family, constant) for family, constant, _, _ in comparison_rows(report)}
    assert {("gemm", "max_fraction_of_peak"), ("gemm", "k_half")} <= fitted
