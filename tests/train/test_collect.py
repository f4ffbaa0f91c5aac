"""`mosaic ladder collect`: separate `mosaic train` runs into the runs.csv the fitters read
(a trial hand-collected result.json files and nearly fitted final_loss, one noisy step,
instead of the smoothed loss the law is fitted to). Needs no torch: result files are
written here as the trainer writes them."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.law.rundata import load_run_data
from mosaic.train.ladder import collect_result_rows


def _result(folder: Path, *, q: int | None = 2, n_total: float = 2e6, complete: bool = True,
            smoothed: float = 4.2, job_id: str | None = None) -> Path:
    """A result as the trainer writes it; each folder's job is its own unless ``job_id``
    names one (the trainer's fingerprint is the job's canonical JSON)."""
    folder.mkdir(parents=True)
    job = {"ladder": None if q is None else {"q": q}, "job": job_id or str(folder)}
    (folder / "result.json").write_text(json.dumps({
        "steps": 20 if complete else 7, "total_steps": 20, "tokens": 20480.0,
        "final_loss": smoothed + 0.3, "smoothed_loss": smoothed, "peak_lr": 1e-3,
        "n_total": n_total, "n_active": n_total / 4, "sparsity": 0.75, "split_factor": 2.0,
        "experts": 8, "top_k": 2, "layers": 4, "d_model": 32, "wall_s": 1.0,
        "tokens_per_s": 2e4, "world_size": 1, "complete": complete, "starved_experts": 0.0,
        "vocab": 256,
        "job_fingerprint": json.dumps(job)}))
    return folder


def test_rows_carry_the_smoothed_loss_and_the_rung(tmp_path):
    _result(tmp_path / "runs" / "small", n_total=2e6, smoothed=4.2)
    _result(tmp_path / "runs" / "large", n_total=8e6, smoothed=3.9, q=None)
    rows = collect_result_rows([tmp_path / "runs"])  # a parent of run folders
    assert [(r["name"], r["loss"], r["final_loss"], r["q"]) for r in rows] == [
        ("large", 3.9, pytest.approx(4.2), 0), ("small", 4.2, pytest.approx(4.5), 2)]


def test_unfinished_missing_and_twice_named_runs_are_refused(tmp_path):
    _result(tmp_path / "stopped", complete=False)
    with pytest.raises(MosaicInputError, match="stopped after 7 of 20 steps"):
        collect_result_rows([tmp_path / "stopped"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(MosaicInputError, match=r"no result\.json in it or one level down"):
        collect_result_rows([tmp_path / "empty"])
    _result(tmp_path / "a" / "run")
    _result(tmp_path / "b" / "run")
    with pytest.raises(MosaicInputError, match=r"two runs share a folder name \(run\)"):
        collect_result_rows([tmp_path / "a" / "run", tmp_path / "b" / "run"])


def test_the_written_table_is_what_law_fit_reads(tmp_path):
    for name, n_total, loss in (("r1", 2e6, 4.2), ("r2", 4e6, 4.0), ("r3", 8e6, 3.85)):
        _result(tmp_path / name, n_total=n_total, smoothed=loss)
    out = tmp_path / "runs.csv"
    result = CliRunner().invoke(app, ["ladder", "collect", str(tmp_path / "r1"),
                                      str(tmp_path / "r2"), str(tmp_path / "r3"),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = load_run_data(out)
    assert list(data.loss) == [4.2, 4.0, 3.85]
    assert list(data.extra["vocab"]) == [256, 256, 256]  # the loss's unit travels
    assert list(data.n_total) == [2e6, 4e6, 8e6]


def test_two_results_of_one_job_are_refused(tmp_path):
    """A trial collected three runs of the identical job (one seed) as three rows: the law
    fit would weight one measurement three times."""
    for name in ("t1", "t2"):
        _result(tmp_path / name, job_id="the same job")
    with pytest.raises(MosaicInputError, match="hold results of the same job"):
        collect_result_rows([tmp_path / "t1", tmp_path / "t2"])


def test_a_parent_with_an_unfinished_run_is_refused_and_a_ladder_folder_is_read(tmp_path):
    """A parent of run folders whose one run has run.json but no result.json (stopped, or
    diverged) is refused naming it, not collected without a word (a trial got 2 of 4); a
    ladder's --out folder (its runs under runs/) is read as ladder fit reads it."""
    _result(tmp_path / "coll" / "done")
    stopped = tmp_path / "coll" / "stopped"
    stopped.mkdir()
    (stopped / "run.json").write_text("{}")
    with pytest.raises(MosaicInputError, match=r"stopped: a run without result\.json"):
        collect_result_rows([tmp_path / "coll"])
    with pytest.raises(MosaicInputError, match=r"stopped: a run without result\.json"):
        collect_result_rows([stopped])
    _result(tmp_path / "ladder" / "runs" / "q2_rung")
    (tmp_path / "ladder" / "runs.csv").write_text("")
    assert [r["name"] for r in collect_result_rows([tmp_path / "ladder"])] == ["q2_rung"]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("smoothed_loss", None, "smoothed_loss is None"),
    ("tokens", "many", "tokens is 'many'"),
    ("n_active", -1, "n_active is -1"),
    ("experts", "abc", "experts is 'abc'"),
    ("top_k", 16, "top_k 16 with experts 8"),
    ("top_k", 0, "top_k 0 with experts 8"),
    ("starved_experts", [1], "starved_experts is [1]"),
    ("vocab", 0.5, "vocab is 0.5"),
])
def test_a_damaged_result_is_named_not_collected(tmp_path, field, value, message):
    """A fuzz trial: a null loss ended in a traceback, n_active -1 and experts 'abc' were
    written into runs.csv."""
    path = _result(tmp_path / "run") / "result.json"
    result = json.loads(path.read_text())
    result[field] = value
    path.write_text(json.dumps(result))
    with pytest.raises(MosaicInputError, match=rf"result\.json: {re.escape(message)}"):
        collect_result_rows([tmp_path / "run"])


def test_a_dense_run_is_collected(tmp_path):
    """A dense model's result writes experts 0 and top_k 0 (trainer.py): collected, not
    refused as a damaged field (a review)."""
    path = _result(tmp_path / "dense") / "result.json"
    result = json.loads(path.read_text()) | {"experts": 0, "top_k": 0, "n_active": 2e6}
    path.write_text(json.dumps(result))
    assert [(r["experts"], r["top_k"]) for r in collect_result_rows([tmp_path / "dense"])] \
        == [(0, 0)]


@pytest.mark.parametrize(("text", "message"), [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"complete": ' + "9" * 5000 + "}", "unreadable number"),
    ('{"complete": true, "complete": false}', "'complete' appears twice"),
    ("", "empty, no JSON in it"),
])
def test_an_unreadable_result_file_is_one_line(tmp_path, text, message):
    """result.json is read as every mosaic JSON input (schema_validation.parse_json): a
    deeply nested one was an internal error (json's RecursionError), a 5,000-digit number
    another (a ValueError, not a JSONDecodeError), a repeated key read as its last value."""
    folder = _result(tmp_path / "run")
    (folder / "result.json").write_text(text)
    with pytest.raises(MosaicInputError, match=rf"result\.json.*{re.escape(message)}"):
        collect_result_rows([folder])


def test_an_oversized_result_file_is_refused_before_it_is_read(tmp_path):
    """A fuzz case's 254 MB result.json (an alias bomb written out) took 35 s and gigabytes
    to parse; a trainer writes a few hundred bytes."""
    from mosaic.train.result_files import MAX_RUN_FILE_BYTES

    path = _result(tmp_path / "run") / "result.json"
    with path.open("r+b") as handle:  # sparse: no 16 MiB written
        handle.truncate(MAX_RUN_FILE_BYTES + 1)
    with pytest.raises(MosaicInputError, match=f"{MAX_RUN_FILE_BYTES + 1:,} bytes; the limit"):
        collect_result_rows([tmp_path / "run"])


def test_a_fingerprint_nested_too_deeply_only_loses_the_rung(tmp_path):
    """The job fingerprint is JSON text inside result.json: one nested deeper than json reads
    raised RecursionError out of the row (the rung q only labels it: 0 when unreadable)."""
    path = _result(tmp_path / "run", q=3) / "result.json"
    result = json.loads(path.read_text())
    result["job_fingerprint"] = "[" * 100_000 + "]" * 100_000
    path.write_text(json.dumps(result))
    assert [row["q"] for row in collect_result_rows([tmp_path / "run"])] == [0]


def test_a_run_on_synthetic_tokens_is_named(tmp_path):
    """A run of data.format synthetic (examples/train_q4_h200.yaml: throughput only, its loss
    ln(vocab)) was collected beside real runs without a word (a trial)."""
    import warnings

    from mosaic.errors import MosaicWarning

    real = _result(tmp_path / "real")
    fake = _result(tmp_path / "fake", smoothed=10.8)
    result = json.loads((fake / "result.json").read_text())
    result["job_fingerprint"] = json.dumps({"ladder": {"q": 2}, "data": {"format": "synthetic"}})
    (fake / "result.json").write_text(json.dumps(result))
    with pytest.warns(MosaicWarning, match=r"^fake: trained on data.format synthetic"):
        rows = collect_result_rows([real, fake])
    assert [row["name"] for row in rows] == ["real", "fake"]  # still written, and named
    with warnings.catch_warnings():
        warnings.simplefilter("error", MosaicWarning)
        collect_result_rows([real])  # real data: no word


@pytest.mark.parametrize("name", ["result.json", "metrics.jsonl", "runs.parquet", "run.json"])
def test_an_out_that_is_no_csv_table_is_refused_before_a_run_file_is_replaced(tmp_path, name):
    """`ladder collect RUN --out RUN/result.json` wrote the table over the run's result (a
    trial); a suffix other than .csv is refused (`law fit` reads a table by its suffix)."""
    run = _result(tmp_path / "run")
    (run / "run.json").write_text("{}")
    (run / "metrics.jsonl").write_text("{}\n")
    before = {path.name: path.read_bytes() for path in run.iterdir()}
    result = CliRunner().invoke(app, ["ladder", "collect", str(run), "--out", str(run / name)])
    assert result.exit_code == 2
    assert "name a .csv file" in " ".join(result.output.split())
    assert {path.name: path.read_bytes() for path in run.iterdir()} == before



def test_record_refuses_an_out_that_is_a_file_of_the_run(tmp_path):
    """`ladder record RUN --out RUN/result.json` is refused as an input, before any record
    is made of it (its check named the folders, which are no files)."""
    run = _result(tmp_path / "run")
    before = (run / "result.json").read_bytes()
    result = CliRunner().invoke(app, ["ladder", "record", str(run), "--system", "DGX-H100",
                                      "--out", str(run / "result.json")])
    assert result.exit_code == 2
    assert "is the input file" in " ".join(result.output.split())
    assert (run / "result.json").read_bytes() == before


def test_ladder_fit_refuses_an_out_that_is_a_file_of_one_of_its_rungs(tmp_path):
    """`ladder fit DIR --out DIR/runs/RUNG/result.json` would write the law over a rung's
    result (left open by the measured-loop trial); it is refused as an input, before the fit."""
    rung = _result(tmp_path / "ladder" / "runs" / "rung")
    (tmp_path / "ladder" / "runs.csv").write_text("run_id\n")
    before = (rung / "result.json").read_bytes()
    result = CliRunner().invoke(app, ["ladder", "fit", str(tmp_path / "ladder"), "--out",
                                      str(rung / "result.json")])
    assert result.exit_code == 2
    assert "is the input file" in " ".join(result.output.split())
    assert (rung / "result.json").read_bytes() == before
