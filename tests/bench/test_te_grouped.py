"""`mosaic bench te-grouped`: Transformer Engine GroupedLinear host floors measured per
precision, fitted by calibrate --microbench and read by the MoE host terms of the measured
device only."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mosaic.bench import te_grouped
from mosaic.bench.cases import BenchOptions, Unsupported
from mosaic.bench.shapes import BenchShapes
from mosaic.config.job_schema import load_job
from mosaic.errors import MosaicInputError
from mosaic.evaluate.microbench_calibration import calibrate_from_microbench, comparison_rows
from mosaic.evaluate.microbench_fit import fit_te_grouped_host_floor
from mosaic.perf.calibration import default_calibration, load_calibration
from mosaic.perf.host_time import expert_gemm_host_floor_s, floor_precision
from mosaic.perf.kernels import te_grouped_linear_host_floor_s
from mosaic.perf.shapes import local_experts
from mosaic.perf.workload import Fp8Recipe, Precision

JOB = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"  # 512 B200, MoE
# what a bench might measure: an FP8 call costing the host 2.5x the built-in BF16 floor
FP8_FWD, FP8_BWD = (150e-6, 40e-6), (780e-6, 127e-6)
BF16_FWD, BF16_BWD = (60e-6, 16e-6), (313e-6, 51e-6)


def te_rows(lines: dict[str, tuple[tuple[float, float], tuple[float, float]]]) -> pd.DataFrame:
    """Rows as `mosaic bench te-grouped` writes them, each time on its precision's lines."""
    rows = []
    for precision, (fwd, bwd) in lines.items():
        for groups in te_grouped.GROUP_COUNTS:
            forward = fwd[0] + fwd[1] * groups
            for name, time_s in (("fwd", forward),
                                 ("fwd_bwd", forward + bwd[0] + bwd[1] * groups)):
                rows.append({"case": f"{precision}:{name}:{groups}x32x1024x1024",
                             "dtype": precision, "pass": name, "groups": groups,
                             "m_per_group": 32, "n": 1024, "k": 1024, "time_s": time_s,
                             "impl": "te 2.9", "metadata_id": "te01", "status": "ok"})
    return pd.DataFrame(rows)


def test_cases_cover_every_precision_pass_and_group_count():
    cases = te_grouped.build_cases(BenchShapes("test"), BenchOptions())
    assert len(cases) == 3 * 2 * len(te_grouped.GROUP_COUNTS)
    only_bf16 = te_grouped.build_cases(BenchShapes("test"), BenchOptions(dtypes=("bf16",)))
    assert {c.columns["dtype"] for c in only_bf16} == {"bf16"}
    assert all(c.columns["m_per_group"] % 32 == 0 for c in cases)  # the MXFP8 block


def test_a_cpu_records_every_case_as_skipped():
    torch = pytest.importorskip("torch")
    case = te_grouped.build_cases(BenchShapes("test"), BenchOptions())[0]
    with pytest.raises(Unsupported, match="CUDA"):
        te_grouped.measure(case, torch.device("cpu"), BenchOptions())


def test_the_fit_recovers_the_lines_and_refuses_a_falling_one():
    rows = te_rows({"bf16": (BF16_FWD, BF16_BWD), "fp8": (FP8_FWD, FP8_BWD)})
    # a precision whose host time falls with the groups is not a launch floor
    falling = te_rows({"mxfp8": ((500e-6, -1e-6), BF16_BWD)})
    floors, report = fit_te_grouped_host_floor(pd.concat([rows, falling]))
    np.testing.assert_allclose(floors["bf16"]["fwd"], BF16_FWD, rtol=1e-9)
    np.testing.assert_allclose(floors["fp8"]["bwd"], FP8_BWD, rtol=1e-9)
    assert "mxfp8" not in floors
    assert "host time must grow" in report["mxfp8"]["not_fitted"]


def write_te_dir(directory: Path) -> None:
    directory.mkdir()
    meta = {"metadata_id": "te01", "device_name": "NVIDIA B200", "sm_count": 148,
            "created_utc": "2026-12-06T00:00:00+00:00", "torch_version": "2.13"}
    (directory / "metadata.json").write_text(json.dumps({"runs": {"te01": meta}}))
    te_rows({"fp8": (FP8_FWD, FP8_BWD)}).to_parquet(directory / "te_grouped.parquet")


def test_calibrate_writes_the_measured_floor_for_the_measured_device(tmp_path):
    directory = tmp_path / "b200"
    write_te_dir(directory)
    document, report = calibrate_from_microbench(directory, default_calibration())
    block = document["microbench"]
    assert block["applies_to"] == ["B200"]
    np.testing.assert_allclose(block["grouped_host_floor"]["fp8"]["fwd"], FP8_FWD, rtol=1e-9)
    built_in = report["families"]["te_grouped"]["built_in"]
    np.testing.assert_allclose([built_in["fp8.fwd.fixed_s"], built_in["fp8.fwd.per_group_s"]],
                               BF16_FWD, rtol=0.05)  # the ScalePlan B200 BF16 fit
    assert ("te_grouped", "fp8.bwd.per_group_s", pytest.approx(BF16_BWD[1], rel=0.05),
            pytest.approx(FP8_BWD[1])) in comparison_rows(report)
    path = tmp_path / "calib.yaml"
    path.write_text(yaml.safe_dump(document))
    np.testing.assert_allclose(load_calibration(path).microbench.grouped_host_floor["fp8"],
                               (FP8_FWD, FP8_BWD), rtol=1e-9)


def test_a_job_of_the_measured_precision_and_device_reads_the_measured_floor(tmp_path):
    spec = load_job(JOB, [])
    workload, plans = spec.workload, spec.plan
    directory = tmp_path / "b200"
    write_te_dir(directory)
    document, _ = calibrate_from_microbench(directory, default_calibration())
    path = tmp_path / "calib.yaml"
    path.write_text(yaml.safe_dump(document))
    calibration = load_calibration(path)
    moe_blocks = np.array([3.0])
    experts = local_experts(workload, plans)
    fp8 = replace(workload, precision=Precision.FP8, fp8_recipe=Fp8Recipe.CURRENT)
    assert floor_precision(fp8) == "fp8"
    measured = expert_gemm_host_floor_s(fp8, plans, moe_blocks, calibration, "B200")
    by_hand = (calibration.host_in_block_factor * 3 * 2
               * (FP8_FWD[0] + FP8_FWD[1] * experts + FP8_BWD[0] + FP8_BWD[1] * experts))
    np.testing.assert_allclose(measured, by_hand, rtol=1e-12)
    # another device, or a precision the bench did not measure: the built-in floor
    built_in = (calibration.host_in_block_factor * 3 * 2
                * (te_grouped_linear_host_floor_s(experts)
                   + te_grouped_linear_host_floor_s(experts, backward=True)))
    np.testing.assert_allclose(
        expert_gemm_host_floor_s(fp8, plans, moe_blocks, calibration, "H100-SXM-80GB"),
        built_in, rtol=1e-12)
    np.testing.assert_allclose(
        expert_gemm_host_floor_s(workload, plans, moe_blocks, calibration, "B200"),
        built_in, rtol=1e-12)  # appendix_e is bf16; the table holds fp8 only


@pytest.mark.parametrize("floors, message", [
    ({"fp4": {"fwd": [1e-5, 1e-6], "bwd": [1e-5, 1e-6]}}, "allowed precisions"),
    ({"bf16": {"fwd": [1e-5, 1e-6]}}, "grouped_host_floor.bf16"),
    ({"bf16": {"fwd": [1e-5], "bwd": [1e-5, 1e-6]}}, "fixed_s, per_group_s"),
    ({"bf16": {"fwd": [-1e-5, 1e-6], "bwd": [1e-5, 1e-6]}}, "seconds >= 0"),
])
def test_bad_floor_blocks_are_one_line_errors(tmp_path, floors, message):
    document = default_calibration().to_document()
    document["microbench"] = {"applies_to": ["B200"], "grouped_host_floor": floors}
    path = tmp_path / "calib.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(MosaicInputError, match=message):
        load_calibration(path)
