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


def _h20_catalog(folder: Path) -> Path:
    """A user catalog with an H20 that borrows the H100's kernel fits (docs/hardware.md:
    kernel_fit H100, sm_count 78); figures from NVIDIA's HGX H20 specifications."""
    def number(value: float) -> dict:
        return {"value": value, "source": "HGX H20 specifications"}
    catalog = folder / "h20.yaml"
    catalog.write_text(yaml.safe_dump({"devices": [{
        "name": "H20-96GB", "vendor": "NVIDIA", "architecture": "hopper",
        "kernel_fit": "H100", "peak_flops_per_s": {"bf16": number(148e12)},
        "hbm_bytes": number(1.0205e11), "hbm_bw_bytes_per_s": number(4.0e12),
        "scale_up_bw_bytes_per_s": number(450e9), "sm_count": number(78)}],
        "systems": [{"name": "h20-node", "device": "H20-96GB",
                     "gpus_per_node": number(8), "scale_up_domain_gpus": number(8),
                     "nics_per_node": number(8), "nic_bw_bytes_per_s": number(50e9),
                     "scale_out_fabric": "InfiniBand NDR"}]}))
    return catalog


def test_constants_measured_on_a_borrowing_device_stay_with_it(tmp_path):
    """A user's H20 borrows the H100's kernel fits; its measured constants (GEMMs at a
    tenth of peak here) were applied to every H100 and H800 job too, with no line saying
    so (a trial: an H100 job's step 86 s -> 142 s). They now apply to the H20 alone, while
    constants measured on the H100 still reach the devices that borrow its fits, named."""
    from mosaic.hardware import use_catalog

    use_catalog(_h20_catalog(tmp_path))
    try:
        def step_s(system: str, calibration: object) -> float:
            job = load_job(JOB, [f"hardware.system={system}"])
            return float(predict_job(job, calibration).prediction.step_time_s[0])

        slow = {"max_fraction_of_peak": 0.1}  # a seventh of the built-in 0.695 plateau
        on_h20 = calibration_with(tmp_path, {"applies_to": ["H20-96GB"], "gemm": slow})
        default = default_calibration()
        for system in ("DGX-H100", "H800-node"):
            assert step_s(system, on_h20) == step_s(system, default), system
            assert "measured on H20-96GB, not" in on_h20.microbench_notes(
                "H100-SXM-80GB" if system == "DGX-H100" else "H800-SXM-80GB")[0]
        assert step_s("h20-node", on_h20) > 1.5 * step_s("h20-node", default)
        assert on_h20.microbench_notes("H20-96GB") == []

        on_h100 = calibration_with(tmp_path, {"applies_to": ["H100-SXM-80GB"], "gemm": slow})
        for system in ("DGX-H100", "H800-node", "h20-node"):
            assert step_s(system, on_h100) > 1.5 * step_s(system, default), system
        assert on_h100.microbench_notes("H100-SXM-80GB") == []
        note, = on_h100.microbench_notes("H20-96GB")
        assert "measured on H100-SXM-80GB, whose kernel fits H20-96GB uses" in note
    finally:
        use_catalog()
