"""A calibration's microbench block reaches the performance model, for the devices it
applies to only."""

from pathlib import Path

import pytest
import yaml

from mosaic.config.job_schema import load_job
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import default_calibration, load_calibration
from mosaic.perf.kernels import DEFAULT_GEMM

JOB = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"  # 512 B200


def calibration_with(tmp_path: Path, block: dict) -> object:
    document = default_calibration().to_document()
    document["microbench"] = block
    path = tmp_path / "calib.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_calibration(path)


@pytest.fixture(scope="module")
def baseline():
    return predict_job(load_job(JOB, []), default_calibration()).prediction


def test_half_the_gemm_plateau_doubles_compute_bound_gemm_time(tmp_path, baseline):
    # The Appendix E projections (16384 x 8192 x 6144, ...) are compute bound on a B200;
    # their 3.5 us kernel latency is < 1e-3 of the time, so halving the plateau doubles them.
    half = {"max_fraction_of_peak": DEFAULT_GEMM.max_fraction_of_peak / 2}
    calibration = calibration_with(tmp_path, {"applies_to": ["B200"], "gemm": half})
    result = predict_job(load_job(JOB, []), calibration).prediction
    ratio = (result.breakdown_s["compute_attention_gemm"][0]
             / baseline.breakdown_s["compute_attention_gemm"][0])
    assert ratio == pytest.approx(2.0, rel=2e-3)
    assert result.step_time_s[0] > baseline.step_time_s[0]


def test_a_block_for_another_device_changes_nothing(tmp_path, baseline):
    calibration = calibration_with(tmp_path, {"applies_to": ["H200"],
                                              "gemm": {"max_fraction_of_peak": 0.1}})
    result = predict_job(load_job(JOB, []), calibration).prediction
    assert result.step_time_s[0] == baseline.step_time_s[0]


def test_collective_latency_and_elementwise_efficiency_apply(tmp_path, baseline):
    calibration = calibration_with(tmp_path, {
        "applies_to": ["any"], "collectives": {"launch_latency_s": 1e-3},
        "elementwise_hbm_efficiency": 0.4})  # half the built-in 0.8
    result = predict_job(load_job(JOB, []), calibration).prediction
    assert result.breakdown_s["ep_all_to_all"][0] > baseline.breakdown_s["ep_all_to_all"][0]
    # streaming time = latency + bytes / (bw * eff): halving eff nearly doubles it
    ratio = (result.breakdown_s["compute_elementwise"][0]
             / baseline.breakdown_s["compute_elementwise"][0])
    assert 1.9 < ratio <= 2.0
    # memory-bound GEMMs keep their own efficiency: the compute-bound projections unchanged
    assert result.breakdown_s["compute_attention_gemm"][0] == pytest.approx(
        baseline.breakdown_s["compute_attention_gemm"][0], rel=1e-9)


@pytest.mark.parametrize("block, message", [
    ({"applies_to": []}, "applies_to"),
    ({"applies_to": ["any"], "gemm": {"plateau": 1.0}}, "gemm.plateau"),
    ({"applies_to": ["any"], "collectives": {"ring_scale_up_efficiency": "high"}}, "number"),
    ({"applies_to": ["any"], "attention": {"fwd": [1.0, 2.0]}}, "attention.fwd"),
])
def test_bad_blocks_are_one_line_errors(tmp_path, block, message):
    with pytest.raises(MosaicInputError, match=message):
        calibration_with(tmp_path, block)


def test_the_block_survives_a_round_trip(tmp_path):
    block = {"applies_to": ["B200"], "gemm": {"k_half": 100.0}}
    calibration = calibration_with(tmp_path, block)
    assert calibration.to_document()["microbench"] == block
