"""`mosaic train JOB --perf-job FILE`: the trainer run as the job `mosaic perf` predicts (a
trial had to write it by hand; docs/train.md gives the hand-written file for the q4 example,
and the written one must predict the same step)."""

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.evaluate.job import load_job_spec, predict_job
from mosaic.perf.calibration import default_calibration

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "train_q4_h200.yaml"
# docs/train.md, "Measuring on a GPU": the file written by hand for this example
HAND_WRITTEN = """
model: {layers: 16, d_model: 2048, ffn: 5120, heads: 16, kv_heads: 8, head_dim: 128, vocab: 50257,
        moe: {experts: 32, top_k: 4, expert_ffn: 1280, shared_experts: 1, dense_layers: 1}}
batch: {global_seqs: 128, seq_len: 2048, micro_seqs: 2}
hardware: {system: DGX-H200}
search: {devices: 8}
parallelism: {tp: 1, pp: 1, cp: 1, ep: 1, dp: 8, sharding: fsdp}
performance: {stack: torchtitan}
"""
runner = CliRunner()


def _step_s(path: Path) -> float:
    calibration = default_calibration()
    return float(predict_job(load_job_spec(path), calibration).prediction.step_time_s[0])


def test_the_written_job_predicts_what_the_hand_written_one_does(tmp_path):
    written = tmp_path / "q4_perf.yaml"
    result = runner.invoke(app, ["train", str(JOB), "--perf-job", str(written),
                                 "--system", "DGX-H200"])
    assert result.exit_code == 0, result.output
    document = yaml.safe_load(written.read_text())
    assert document["parallelism"] == {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 8,
                                       "sharding": "fsdp"}
    assert document["batch"] == {"global_seqs": 128, "micro_seqs": 2, "seq_len": 2048}
    hand = tmp_path / "hand.yaml"
    hand.write_text(HAND_WRITTEN)
    assert _step_s(written) == _step_s(hand)
    # --json keeps stdout JSON: the file written and the job it holds (a fuzz trial)
    again = tmp_path / "again.yaml"
    result = runner.invoke(app, ["train", str(JOB), "--perf-job", str(again), "--system",
                                 "DGX-H200", "--json"])
    assert result.exit_code == 0, result.output
    reply = json.loads(result.stdout)
    assert reply["written"] == str(again) and reply["job"] == yaml.safe_load(again.read_text())


def test_perf_job_needs_a_system_and_no_output_folder(tmp_path):
    result = runner.invoke(app, ["train", str(JOB), "--perf-job", str(tmp_path / "p.yaml")])
    assert result.exit_code == 2 and "--perf-job needs --system NAME" in result.output
    result = runner.invoke(app, ["train", str(JOB), "--perf-job", str(tmp_path / "p.yaml"),
                                 "--system", "DGX-H200", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "leave out --out" in result.output
    result = runner.invoke(app, ["train", str(JOB)])
    assert result.exit_code == 2 and "give --out FOLDER" in result.output


def test_a_run_perf_cannot_predict_is_refused_before_the_file_is_written(tmp_path):
    """Global batch 128 of micro-batch 2 over 128 GPUs leaves no whole micro-batch per
    rank (dp·micro_batch = 256 does not divide 128), and 3 GPUs are no whole node of a
    DGX-H200: both are `mosaic perf`'s own refusals, said by --perf-job (a trial got a file
    that perf rejected); 16 GPUs (two whole nodes, 128 = 16·2·4) are written."""
    written = tmp_path / "p.yaml"
    for gpus, reason in (("128", "dp·micro_batch=128·2 must divide global_batch=128"),
                         ("3", "n_devices must be a multiple of 8")):
        result = runner.invoke(app, ["train", str(JOB), "--perf-job", str(written),
                                     "--system", "DGX-H200", "--gpus", gpus])
        assert result.exit_code == 2, result.output
        assert reason in result.output and "choose --gpus" in result.output
        assert not written.exists()
    for gpus in ("0", "-2"):  # 0 was read as unstated, one node's 8 GPUs (a trial)
        result = runner.invoke(app, ["train", str(JOB), "--perf-job", str(written),
                                     "--system", "DGX-H200", "--gpus", gpus])
        assert result.exit_code == 2 and "give a positive number of GPUs" in result.output
        assert not written.exists()
    result = runner.invoke(app, ["train", str(JOB), "--perf-job", str(written),
                                 "--system", "DGX-H200", "--gpus", "16"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(written.read_text())["parallelism"]["dp"] == 16


def test_an_empty_data_path_list_is_refused_at_the_config(tmp_path):
    """data.path: [] passed the config, and each ladder rung then failed on its 0 tokens
    (a fuzz trial); the config refuses it, naming the field."""
    job = yaml.safe_load((ROOT / "examples/train_q4_h200.yaml").read_text())
    job["data"] = {"format": "bytes", "path": []}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    result = runner.invoke(app, ["train", str(path), "--perf-job", str(tmp_path / "p.yaml"),
                                 "--system", "DGX-H200", "--gpus", "8"])
    assert result.exit_code == 2, result.output
    assert "data.path is an empty list" in result.output
