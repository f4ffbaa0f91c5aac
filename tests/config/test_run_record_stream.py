"""Run records streamed from the file (RunRecordReader, mosaic.yaml_stream) equal the
whole-file reader: same records, skips, deprecations and file-level errors."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import yaml

from mosaic import yaml_stream
from mosaic.config.run_records import RunRecordReader, load_run_records
from mosaic.errors import MosaicInputError
from mosaic.yaml_stream import StreamError, iter_list_items, scan_mapping

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "runs_example.yaml"
EXTRA = REPO / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml"
PUBLISHED = REPO.parent / "shared" / "calibration" / "published_runs.yaml"


def _fields(record):
    """Everything a record holds, comparable (the plan's arrays as its one row)."""
    return (record.id, record.source, record.software, record.model_name, record.workload,
            record.plan.row(0), record.system, record.n_devices, record.precision_recipe,
            record.routing, record.confidence, record.measured_tokens_per_s_per_gpu,
            record.measured_step_time_s, record.measured_memory_bytes, record.oom,
            record.group_key, record.source_key, record.assumptions)


def _read(path: Path, stream: bool):
    reader = RunRecordReader(path, stream=stream)
    records = [_fields(r) for r in reader]
    return reader, records


def _assert_same_as_whole_file(path: Path) -> RunRecordReader:
    streamed, records = _read(path, True)
    whole, expected = _read(path, False)
    assert streamed.streamed and not whole.streamed
    assert records == expected
    assert streamed.skipped == whole.skipped
    assert streamed.deprecated == whole.deprecated
    assert streamed.n_entries == whole.n_entries == streamed.n_read
    return streamed


@pytest.mark.parametrize("path", [EXAMPLE, EXTRA], ids=["runs_example", "extra_runs"])
def test_shipped_files_stream_to_the_same_records(path):
    _assert_same_as_whole_file(path)


def test_published_runs_stream_to_the_same_records():
    if not PUBLISHED.exists():
        pytest.skip(f"{PUBLISHED} not found (shared data lives next to the repository)")
    reader = _assert_same_as_whole_file(PUBLISHED)
    assert reader.deprecated  # the shared file still uses older spellings
    assert reader.skipped  # and has records the model cannot use


def _generated(tmp_path: Path, n: int = 120) -> tuple[Path, list[dict]]:
    assert n > 101
    """``n`` runs from the example's four with new ids, some broken on purpose, some in an
    older spelling, written in a mix of block and flow style with anchors and aliases."""
    base = yaml.safe_load(EXAMPLE.read_text())["runs"]
    runs = []
    for index in range(n):
        run = copy.deepcopy(base[index % len(base)])
        run["id"] = f"{run['id']}-{index}"
        runs.append(run)
    runs[37]["num_gpus"] = "eight"  # a wrong type
    runs[58]["parallelism"]["tp"] = 3  # tp·pp·cp·dp no longer num_gpus
    runs[90]["id"] = runs[4]["id"]  # a duplicate id
    runs[101]["bogus"] = 1  # an unknown field
    runs[11]["seq_len"] = runs[11]["batch"].pop("seq_len")  # the deprecated spelling
    lines = ["# generated", "schema_version: 1", "runs:"]
    for index, run in enumerate(runs):
        if index == 2:  # an anchor another record uses
            model = yaml.safe_dump(run.pop("model"), default_flow_style=True, width=10**6)
            lines.append(yaml.safe_dump([run], sort_keys=False).rstrip()
                         + f"\n  model: &shared_model {model.strip()}")
        elif index == 6:
            run.pop("model")
            lines.append(yaml.safe_dump([run], sort_keys=False).rstrip()
                         + "\n  model: *shared_model")
            runs[6]["model"] = runs[2]["model"] = base[2]["model"]
        elif index % 5 == 0:
            lines.append("- " + yaml.safe_dump(run, default_flow_style=True, width=10**6))
        else:
            lines.append(yaml.safe_dump([run], sort_keys=False).rstrip())
    lines.append("description: written after the runs\n")
    path = tmp_path / "generated.yaml"
    path.write_text("\n".join(lines))
    return path, runs


def test_a_generated_file_streams_to_the_same_records_and_reasons(tmp_path):
    path, runs = _generated(tmp_path)
    reader = _assert_same_as_whole_file(path)
    assert reader.n_entries == len(runs)
    reasons = dict(reader.skipped)
    assert len(reasons) == 4
    # each reason names the record, its place in the file and the field
    assert reasons[runs[37]["id"]].startswith(f"run '{runs[37]['id']}' (entry 38): num_gpus")
    assert "(entry 59)" in reasons[runs[58]["id"]]
    assert "tp·pp·cp·dp" in reasons[runs[58]["id"]]
    assert reasons[runs[4]["id"]] == f"run '{runs[4]['id']}' (entry 91): id: duplicate of entry 5"
    assert reasons[runs[101]["id"]] == (f"run '{runs[101]['id']}' (entry 102): "
                                        "unknown field(s) bogus")
    assert reader.deprecated == {"seq_len -> batch.seq_len"}


def test_the_stream_equals_safe_load_item_by_item(tmp_path):
    path, _ = _generated(tmp_path)
    document = yaml.safe_load(path.read_text())
    scan = scan_mapping(path, "runs")
    assert scan is not None and scan.n_items == 120
    assert scan.head == {"schema_version": 1, "description": "written after the runs"}
    assert list(iter_list_items(path, "runs")) == document["runs"]
    crlf = tmp_path / "crlf.yaml"  # Windows line ends and a byte-order mark
    crlf.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    assert list(iter_list_items(crlf, "runs")) == document["runs"]


def test_the_pure_python_loader_streams_the_same(tmp_path, monkeypatch):
    """Without libyaml (PyYAML's own parser) the stream gives the same items."""
    path, _ = _generated(tmp_path)
    fast = list(iter_list_items(path, "runs"))
    monkeypatch.setattr(yaml_stream, "_EventLoader",
                        yaml_stream.event_loader_class(yaml.SafeLoader))
    assert scan_mapping(path, "runs").n_items == len(fast)
    assert list(iter_list_items(path, "runs")) == fast


def test_items_are_read_one_at_a_time(tmp_path):
    """The first item arrives before the rest of the file is parsed: a syntax error at the
    end shows only when the stream gets there."""
    text = EXAMPLE.read_text() + "  - {unclosed: [\n"
    path = tmp_path / "broken_at_the_end.yaml"
    path.write_text(text)
    items = iter_list_items(path, "runs")
    assert next(items)["id"] == "example-torchtitan-llama3.1-8b-h100-8-fsdp"
    with pytest.raises(StreamError, match="malformed YAML"):
        list(items)
    assert scan_mapping(path, "runs") is None  # so a reader never streams it


UNSTREAMABLE = {
    "a merge key at the top level": "<<: {schema_version: 1}\n{runs}",
    "runs given twice": "runs: []\n{runs}",
    "runs as an alias": "x: &r []\nruns: *r\n",
    "an anchored runs list": "{runs_anchored}",
    "two documents": "{runs}---\nruns: []\n",
    "runs not a list": "runs: {a: 1}\n",
    "no runs": "schema_version: 1\n",
    "a list at the top": "- 1\n",
    "an empty file": "",
}


@pytest.mark.parametrize("text", UNSTREAMABLE.values(), ids=UNSTREAMABLE.keys())
def test_unusual_shapes_are_read_whole(tmp_path, text):
    runs = EXAMPLE.read_text().split("runs:\n", 1)[1]
    path = tmp_path / "r.yaml"
    path.write_text(text.replace("{runs}", "runs:\n" + runs)
                    .replace("{runs_anchored}", "runs: &all\n" + runs))
    assert scan_mapping(path, "runs") is None
    try:
        whole = [_fields(r) for r in RunRecordReader(path, stream=False)]
    except MosaicInputError as exc:
        with pytest.raises(MosaicInputError) as streamed:
            list(RunRecordReader(path))
        assert str(streamed.value) == str(exc)
    else:
        reader = RunRecordReader(path)
        assert not reader.streamed and [_fields(r) for r in reader] == whole


def _with_in_run(text: str, index: int, line: str) -> str:
    """``text`` (block style, runs at column 0) with ``line`` added to run ``index``."""
    parts = text.split("\n- id: ")
    parts[index + 1] = parts[index + 1].replace("\n  gpu:", f"\n  {line}\n  gpu:", 1)
    return "\n- id: ".join(parts)


def _block_text() -> str:
    return yaml.safe_dump(yaml.safe_load(EXAMPLE.read_text()), sort_keys=False, width=10**6)


BAD_FILES = {
    "a syntax error after the runs": lambda t: t + "extra: {a: 1\n",
    "an unknown field after the runs": lambda t: t + "bogus: 1\n",
    "schema_version after the runs": lambda t: t.replace("schema_version: 1\n", "")
    + "schema_version: 2\n",
    "a non-string key in run 3": lambda t: _with_in_run(t, 2, "1: 2"),
    "non-string keys in runs 2 and 4": lambda t: _with_in_run(_with_in_run(t, 1, "5: x"), 3,
                                                              "7.5: y"),
    "an undefined alias in run 2": lambda t: _with_in_run(t, 1, "notes: *nowhere"),
    "a python tag in run 4": lambda t: _with_in_run(t, 3, "x: !!python/name:os.system"),
    "nesting too deep in run 2": lambda t: _with_in_run(t, 1, "n: " + "[" * 80 + "]" * 80),
    "a billion laughs in run 3": pytest.param(
        lambda t: _with_in_run(t, 2, "bomb:\n" + "".join(
            f"    {c}: &{c} [" + ",".join([f"*{chr(ord(c) - 1)}"] * 9) + "]\n"
            for c in "bcdefgh").replace("*a", "x")),
        marks=pytest.mark.slow),  # ~8 s: 2 million values walked three times
}


@pytest.mark.parametrize("make", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_file_errors_are_the_whole_file_readers(tmp_path, make):
    path = tmp_path / "bad.yaml"
    path.write_text(make(_block_text()))
    with pytest.raises(MosaicInputError) as whole:
        list(RunRecordReader(path, stream=False))
    with pytest.raises(MosaicInputError) as streamed:
        list(RunRecordReader(path))
    assert str(streamed.value) == str(whole.value)
    assert str(whole.value).startswith(str(path))


def test_non_utf8_late_in_the_file_is_the_same_error(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(EXAMPLE.read_bytes() + b"# caf\xe9\n")
    with pytest.raises(MosaicInputError, match=r"not UTF-8 text \(byte 0xe9 at offset"):
        RunRecordReader(path)


def test_load_run_records_warns_once_with_the_count(tmp_path):
    path, runs = _generated(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_run_records(path)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert f"{path}: skipped 4 of {len(runs)} run records" in " ".join(messages)
    assert any("seq_len -> batch.seq_len" in m for m in messages)
    assert [r.id for r in loaded.records] == [
        r["id"] for i, r in enumerate(runs) if i not in (37, 58, 90, 101)]
