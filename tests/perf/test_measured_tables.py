"""Measured kernel tables named in a job file replace the analytical times they cover."""

import itertools
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mosaic.config.job_schema import load_job
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import default_calibration
from mosaic.perf.workload import Fp8Recipe, Precision, measured_table_dtype

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


def test_a_table_measured_on_another_device_is_refused(tmp_path):
    # A CPU's GEMM times replaced a B200 job's with one assumption line to say so (a trial).
    import json

    job = job_with_gemm_table(tmp_path, 1 / 100e12)  # Appendix E: B200
    load_job(job)  # no metadata: the table is used as the job names it
    metadata = {"runs": {"a1": {"device_name": "cpu:x86_64"}}}
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))  # beside gemm.csv
    with pytest.raises(MosaicInputError, match=r"hardware\.gemm_table: .* was measured on "
                       r"cpu:x86_64 .*not on the job's B200"):
        load_job(job)
    metadata["runs"]["a1"]["device_name"] = "NVIDIA B200"  # torch's name for the same GPU
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    assert load_job(job).tables.gemm is not None


def test_a_table_faster_than_the_datasheet_peak_is_refused(tmp_path):
    # A trial's table with times divided by 1e6 (600 PFLOP/s on an H100) was used as measured.
    # The B200's dense bf16 datasheet peak is 2.25 PFLOP/s (catalog); 10 PFLOP/s is not a time.
    job = job_with_gemm_table(tmp_path, 1 / 10e15)
    with pytest.raises(MosaicInputError, match=r"hardware\.gemm_table .*gemm\.csv row \d+: "
                       r"bf16 at 1e\+16 FLOP/s, 4\.44x the B200's dense bf16 datasheet peak"):
        load_job(job)


def test_a_table_of_large_gemms_at_a_hundredth_of_peak_is_questioned(tmp_path):
    # 1 TFLOP/s for 8192x4096x4096 GEMMs on a B200 (0.04% of 2.25 PFLOP/s): milliseconds?
    job = job_with_gemm_table(tmp_path, 1 / 1e12)
    with pytest.warns(MosaicWarning, match=r"fastest large bf16 GEMM .* runs at 0\.04% of the "
                      r"B200's datasheet peak: are its times in seconds\?"):
        load_job(job)


def test_a_table_that_covers_no_shape_of_the_job_says_so(tmp_path):
    job = job_with_gemm_table(tmp_path, 1 / 100e12)
    table = pd.read_csv(tmp_path / "gemm.csv").assign(dtype="fp16")  # the job runs bf16
    table.to_csv(tmp_path / "gemm.csv", index=False)
    spec = load_job(job)
    with pytest.warns(MosaicWarning, match=r"hardware\.gemm_table covers none of this job's "
                      "shapes"):
        prediction = predict_job(spec, default_calibration()).prediction
    assert "measured" not in prediction.labels.values()


@pytest.mark.parametrize(("column", "value", "message"), [
    ("dtype", "float77", r"row 2: dtype='float77'; allowed: bf16, fp16, fp32, fp8, mxfp8"),
    ("time_s", "abc", r"row 2: time_s='abc'; allowed: a finite number"),
    ("time_s", "-0.0001", r"row 2: time_s=-0\.0001; allowed: > 0"),
])
def test_a_bad_row_is_named_by_its_file_row_and_value(tmp_path, column, value, message):
    job = job_with_gemm_table(tmp_path, 1 / 100e12)
    table = pd.read_csv(tmp_path / "gemm.csv").astype({column: object})
    table.loc[1, column] = value  # the second row after the header
    table.to_csv(tmp_path / "gemm.csv", index=False)
    with pytest.raises(MosaicInputError, match=r"gemm\.csv: GEMM table " + message):
        load_job(job)


def test_mxfp8_gemms_read_the_tables_mxfp8_rows():
    # mosaic bench times MXFP8 and per-tensor FP8 GEMMs as separate dtypes (bench.device)
    assert measured_table_dtype(Precision.FP8, Fp8Recipe.MXFP8) == "mxfp8"
    assert measured_table_dtype(Precision.FP8, Fp8Recipe.DELAYED) == "fp8"
    assert measured_table_dtype(Precision.BF16, None) == "bf16"
