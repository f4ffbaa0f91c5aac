"""`mosaic ladder record`: a finished trainer run on GPUs as a run record that `mosaic
validate` reads (a trial found no way from result.json to validate or calibrate). The run
folders are written here as the trainer writes them, for the example job on 8 H200s, so no
GPU is needed."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.config.run_records import load_run_records
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import load_job_spec, predict_job
from mosaic.perf.calibration import default_calibration
from mosaic.train.config import load_train_config
from mosaic.train.run_record import record_for_run

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "train_q4_h200.yaml"
runner = CliRunner()


def _run_folder(folder: Path, *, tokens_per_s: float = 250_000.0, device: str = "cuda:0",
                complete: bool = True, world_size: int = 8) -> Path:
    """result.json and run.json of a finished run of the example job (fields the record
    reads, as the trainer writes them)."""
    config = load_train_config(JOB)
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({
        "device": device, "world_size": world_size,
        "flops": {"device": "H200-SXM-141GB"},
        "config": json.loads(config.model_dump_json())}))
    (folder / "result.json").write_text(json.dumps({
        "steps": 100 if complete else 40, "total_steps": 100, "complete": complete,
        "tokens_per_s": tokens_per_s, "world_size": world_size, "peak_memory_gib": 41.5}))
    return folder


def test_a_finished_gpu_run_becomes_a_record_validate_reads(tmp_path):
    run = _run_folder(tmp_path / "runs" / "q4")
    out = tmp_path / "mine.yaml"
    result = runner.invoke(app, ["ladder", "record", str(tmp_path / "runs"), "--system",
                                 "DGX-H200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (record,) = load_run_records(out).records
    assert record.id == "train-q4" and record.measured_memory_bytes == 41.5 * 2**30
    # tokens/s per GPU of the 8 GPUs, and the step time it implies: 128 x 2048 tokens a step
    assert record.measured_tokens_per_s_per_gpu == pytest.approx(250_000 / 8)
    assert record.measured_step_time_s == pytest.approx(128 * 2048 / 250_000)
    # the record's job is the one `mosaic train --perf-job` writes: the same prediction
    perf = tmp_path / "perf.yaml"
    assert runner.invoke(app, ["train", str(JOB), "--perf-job", str(perf), "--system",
                               "DGX-H200"]).exit_code == 0
    calibration = default_calibration()
    expected = predict_job(load_job_spec(perf), calibration).prediction.step_time_s[0]
    from_record = predict_job(load_job_spec(Path(f"{out}#train-q4")), calibration)
    assert from_record.prediction.step_time_s[0] == pytest.approx(expected, rel=1e-12)
    validated = runner.invoke(app, ["validate", str(out), "--json"])
    assert validated.exit_code == 0, validated.output
    # a second run appends, the file's text kept; the same run again is refused
    text = out.read_text()
    _run_folder(tmp_path / "more" / "q4b", tokens_per_s=240_000.0)
    again = runner.invoke(app, ["ladder", "record", str(tmp_path / "more"), "--system",
                                "DGX-H200", "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert out.read_text().startswith(text)
    assert [r.id for r in load_run_records(out).records] == ["train-q4", "train-q4b"]
    twice = runner.invoke(app, ["ladder", "record", str(run), "--system", "DGX-H200",
                                "--out", str(out)])
    assert twice.exit_code == 2 and "already holds run(s) train-q4" in twice.output


@pytest.mark.parametrize("change, message", [
    ({"device": "cpu"}, "trained on cpu"),
    ({"complete": False}, "stopped after 40 of 100 steps"),
    ({"world_size": 4}, "do not fill whole DGX-H200 nodes of 8"),
])
def test_what_no_record_can_describe_is_refused(tmp_path, change, message):
    _run_folder(tmp_path / "run", **change)
    out = tmp_path / "mine.yaml"
    result = runner.invoke(app, ["ladder", "record", str(tmp_path / "run"), "--system",
                                 "DGX-H200", "--out", str(out)])
    assert result.exit_code == 2 and message in result.output
    assert not out.exists()


@pytest.mark.parametrize("name", ["run.json", "result.json"])
def test_an_unreadable_run_file_is_one_line(tmp_path, name):
    """run.json and result.json are read as every mosaic JSON input: one nested deeper than
    json follows was an internal error (RecursionError), not a one-line input error."""
    folder = _run_folder(tmp_path / "run")
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MosaicInputError, match=rf"{name}: JSON nested too deeply"):
        record_for_run(folder, "DGX-H200", "train-run")
    result = runner.invoke(app, ["ladder", "record", str(folder), "--system", "DGX-H200",
                                 "--out", str(tmp_path / "r.yaml")])
    assert result.exit_code == 2 and "nested too deeply" in result.output


def test_a_symlinked_out_file_is_written_through_the_link(tmp_path):
    """ladder record replaced a symlinked --out by an ordinary file (os.replace of its staged
    copy) and left the link's target as it was; it writes as every output does (io_atomic):
    the target gets the records and the link stays a link."""
    _run_folder(tmp_path / "runs" / "q4")
    target = tmp_path / "records.yaml"  # not there yet: the first record creates it
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    result = runner.invoke(app, ["ladder", "record", str(tmp_path / "runs"), "--system",
                                 "DGX-H200", "--out", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert [r.id for r in load_run_records(target).records] == ["train-q4"]


def test_a_system_of_another_gpu_is_refused(tmp_path):
    _run_folder(tmp_path / "run")
    result = runner.invoke(app, ["ladder", "record", str(tmp_path / "run"), "--system",
                                 "DGX-H100", "--out", str(tmp_path / "r.yaml")])
    assert result.exit_code == 2 and "trained on H200-SXM-141GB" in result.output


def test_records_append_to_a_hand_written_file_or_refuse_to(tmp_path):
    from mosaic.config.record_entry import add_to_record_file

    entry = yaml.safe_load((ROOT / "examples" / "runs_example.yaml").read_text())["runs"][0]
    path = tmp_path / "hand.yaml"
    path.write_text("# my runs\nruns:\n  # the first\n  - " + yaml.safe_dump(
        {**entry, "id": "mine-1"}, sort_keys=False).replace("\n", "\n    ").rstrip() + "\n")
    assert add_to_record_file([{**entry, "id": "mine-2"}], path) == 2
    assert path.read_text().startswith("# my runs\nruns:\n  # the first\n")
    assert [r.id for r in load_run_records(path).records] == ["mine-1", "mine-2"]
    flow = tmp_path / "flow.yaml"
    flow.write_text("runs: []\ndescription: x\n")
    with pytest.raises(MosaicInputError, match="cannot be appended"):
        add_to_record_file([{**entry, "id": "mine-3"}], flow)


def test_two_folders_of_one_name_are_refused_before_anything_is_written(tmp_path):
    _run_folder(tmp_path / "a" / "q4")
    _run_folder(tmp_path / "b" / "q4")
    out = tmp_path / "mine.yaml"
    result = runner.invoke(app, ["ladder", "record", str(tmp_path / "a" / "q4"),
                                 str(tmp_path / "b" / "q4"), "--system", "DGX-H200",
                                 "--out", str(out)])
    assert result.exit_code == 2 and "share the id train-q4" in result.output
    assert not out.exists()
    hashed = _run_folder(tmp_path / "q#4")
    result = runner.invoke(app, ["ladder", "record", str(hashed), "--system", "DGX-H200",
                                 "--out", str(out)])
    assert result.exit_code == 2 and "FILE#ID" in result.output
