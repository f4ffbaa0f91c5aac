"""Performance predictions say whether the job lies in the calibrated envelope, with
intervals from the calibration's held-out residuals."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.perf.calibration import built_in_calibration
from mosaic.perf.coverage import pick_scope

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def perf_json(*args: str) -> dict:
    result = runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_appendix_e_job_is_inside_and_its_interval_comes_from_its_scope_residuals():
    doc = perf_json()
    coverage = doc["coverage"]
    assert coverage["inside_calibrated_envelope"] is True and coverage["outside"] == []
    scope = pick_scope(built_in_calibration("default").coverage.tokens_per_s_ratio,
                       "megatron-core", "moe")
    tokens = coverage["intervals"]["tokens_per_s"]
    # megatron-core MoE runs where the calibration has 10 of them, else all MoE runs
    assert tokens["residual_scope"] == scope.scope in {"megatron-core/moe", "moe"}
    assert tokens["low"] == pytest.approx(doc["tokens_per_s"] * scope.low)
    assert tokens["high"] == pytest.approx(doc["tokens_per_s"] * scope.high)
    mfu = coverage["intervals"]["mfu"]
    assert (mfu["low"], mfu["high"]) == (pytest.approx(doc["mfu"] * scope.low),
                                         pytest.approx(doc["mfu"] * scope.high))
    step = coverage["intervals"]["step_time_s"]
    assert step["low"] == pytest.approx(doc["step_time_s"] / scope.high)
    assert coverage["intervals"]["memory_gib"]["n_runs"] >= 10


def test_a_node_type_none_of_the_calibration_runs_used_is_named():
    """The Appendix E job runs on p6-b200.48xlarge (EFA); the default profile's runs ran on
    DGX/HGX, NVL72 and Grand Teton nodes (its coverage.systems), so its network is costed from
    the catalog, not fitted: said in a note (a trial planned H100s on p5 with DGX-H100 runs
    and got no word). On DGX-B200, or under the paper's profile fitted on p6 runs: no note."""
    systems = built_in_calibration("default").coverage.systems
    assert "p6-b200.48xlarge" not in systems and "DGX-B200" in systems
    note = perf_json()["coverage"]["note"] or ""
    assert "node type p6-b200.48xlarge is not one the calibration's runs ran on" in note
    for args in (("--set", "hardware.node_type=DGX-B200"), ("--calibration", "paper-p6b200")):
        assert "node type" not in (perf_json(*args)["coverage"]["note"] or ""), args


def test_a_catalog_gpu_without_calibration_runs_and_a_huge_model_are_flagged():
    doc = perf_json("--set", "hardware.node_type=H800-node", "--set", "model.n_layers=480")
    outside = {o["dimension"]: o for o in doc["coverage"]["outside"]}
    assert doc["coverage"]["inside_calibrated_envelope"] is False
    assert outside["gpu"]["value"] == "H800-SXM-80GB" and outside["gpu"]["ratio"] is None
    n_max = built_in_calibration("default").coverage.n_total[1]
    # 480 layers: 10x the Appendix E model's 439e9 non-embedding parameters
    assert outside["n_total"]["ratio"] == pytest.approx(outside["n_total"]["value"] / n_max)
    assert outside["n_total"]["value"] == pytest.approx(10 * 439_132_237_824, rel=1e-3)


def test_text_output_names_the_dimensions_outside():
    result = runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"),
                                 "--calibration", "paper-p6b200"])
    assert result.exit_code == 0, result.output
    assert "OUTSIDE envelope: pp" in result.output and "16 not in 1..8 (2x)" in result.output
    assert "no residuals for memory" in result.output


def test_layouts_and_explain_carry_the_coverage_of_their_plans():
    # The paper profile's runs reach pp=8: pp=16 lies outside, pp=4 inside.
    pp_max = built_in_calibration("paper-p6b200").coverage.degrees["pp"][1]
    for pp in (4, 16):
        layouts = runner.invoke(app, ["layouts", str(EXAMPLES / "appendix_e.yaml"), "--top",
                                      "3", "--pp", str(pp), "--calibration", "paper-p6b200",
                                      "--json"])
        assert layouts.exit_code == 0, layouts.output
        for row in json.loads(layouts.output)["rows"]:
            flagged = {o["dimension"] for o in row["coverage"]["outside"]}
            assert ("pp" in flagged) == (pp > pp_max)
            tokens = row["coverage"]["intervals"]["tokens_per_s_per_gpu"]
            assert tokens["low"] < row["tokens_per_s_per_gpu"] < tokens["high"]
    explain = runner.invoke(app, ["explain", str(EXAMPLES / "appendix_e.yaml"), "--json"])
    assert explain.exit_code == 0, explain.output
    assert json.loads(explain.output)["coverage"]["inside_calibrated_envelope"] is True


def test_the_perf_html_report_shows_the_envelope_and_intervals(tmp_path):
    page = tmp_path / "perf.html"
    result = runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"), "--calibration",
                                 "paper-p6b200", "--html", str(page)])
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert "OUTSIDE envelope: pp" in html and "90% interval, tokens/s per GPU" in html


@pytest.mark.parametrize(("node_type", "calibrated", "what_if"), [
    ("DGX-B200 (scale-out 200 Gb/s per GPU)", "device and host are calibrated",
     "network is a what-if"),
    ("DGX-B200 (4 GPUs/node)", "device is calibrated", "host size and network are a what-if"),
])
def test_a_what_if_of_a_calibrated_node_type_says_which_parts_are_calibrated(
        node_type, calibrated, what_if):
    """A what-if variant of DGX-B200 (a system the default profile's runs ran on) has the
    calibrated device, and unless its host size changed the calibrated host: the note says
    so rather than calling the node type one no run ran on (a trial)."""
    assert "DGX-B200" in built_in_calibration("default").coverage.systems
    note = perf_json("--set", f"hardware.node_type={node_type}")["coverage"]["note"] or ""
    assert f"node type {node_type} is a what-if of DGX-B200" in note
    assert f"its {calibrated}" in note and f"its {what_if}" in note
    assert "not one the calibration's runs ran on" not in note
