"""Measured kernel tables named in a job file replace the analytical times they cover."""

import itertools
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mosaic.config.job_schema import load_job
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import default_calibration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def job_with_gemm_table(tmp_path: Path, seconds_per_flop: float) -> Path:
    """The Appendix E job plus a GEMM table around its attention projection shapes."""
    rows = [
        {"m": m, "n": n, "k": k, "dtype": "bf16", "time_s": 2 * m * n * k * seconds_per_flop}
        for m, n, k in itertools.product((8192, 32768), (4096, 16384), (4096, 8192))
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "gemm.csv", index=False)
    document = yaml.safe_load((EXAMPLES / "appendix_e.yaml").read_text())
    document["hardware"]["gemm_table"] = "gemm.csv"  # relative to the job file
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(document))
    return job


def test_covered_gemms_use_the_table_and_are_labelled_measured(tmp_path):
    calibration = default_calibration()
    baseline = predict_job(load_job(EXAMPLES / "appendix_e.yaml"), calibration).prediction
    slow = 1 / 100e12  # a 100 TFLOP/s GEMM: far slower than the analytical B200 model
    result = predict_job(load_job(job_with_gemm_table(tmp_path, slow)), calibration)
    prediction = result.prediction
    assert prediction.labels["compute_attention_gemm"] == "measured"
    assert prediction.labels["vocab_stage"] == "analytical"  # LM head shape not covered
    assert prediction.labels["compute_attention_core"] == "analytical"
    # Q/K/V and output projections (m=16384 tokens, n,k within the grid) at 100 TFLOP/s:
    # 3x (forward + two backward GEMMs) of 2·m·(8192·6144 + 6144·6144)·3 blocks x 128 mbs.
    m, blocks, microbatches = 16384, 3, 128
    flops = 2 * m * (8192 * 6144 + 6144 * 6144) * 3 * blocks * microbatches
    assert prediction.analytic_breakdown_s["compute_attention_gemm"][0] == pytest.approx(
        flops * slow, rel=1e-6)
    assert prediction.step_time_s[0] > baseline.step_time_s[0]


def test_communication_moved_by_a_gemm_table_is_not_labelled_measured(tmp_path):
    # Slower measured GEMMs hide more of an overlapped collective; that collective was not
    # measured (no collective table), so it keeps its analytical label.
    calibration = default_calibration()
    job = load_job(job_with_gemm_table(tmp_path, 1 / 100e12))
    prediction = predict_job(job, calibration).prediction
    baseline = predict_job(load_job(EXAMPLES / "appendix_e.yaml"), calibration).prediction
    moved = [name for name, seconds in prediction.breakdown_s.items()
             if name.startswith(("ep_", "pp_", "dp_", "tp_", "fsdp_"))
             and seconds[0] != baseline.breakdown_s[name][0]]
    assert moved  # the data-parallel collectives hide behind the slower compute
    assert all(prediction.labels[name] == "analytical" for name in moved)
    assert prediction.labels["compute_attention_gemm"] == "measured"


def test_a_table_measured_on_another_device_is_noted(tmp_path):
    import json

    job = job_with_gemm_table(tmp_path, 1 / 100e12)  # Appendix E: B200
    note = "hardware.gemm_table was measured on cpu:x86_64, not on the job's B200"
    assert not any("measured on" in line for line in load_job(job).assumptions)
    metadata = {"runs": {"a1": {"device_name": "cpu:x86_64"}}}
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))  # beside gemm.csv
    assert any(line.startswith(note) for line in load_job(job).assumptions)
    metadata["runs"]["a1"]["device_name"] = "NVIDIA B200"  # torch's name for the same GPU
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    assert not any("measured on" in line for line in load_job(job).assumptions)
