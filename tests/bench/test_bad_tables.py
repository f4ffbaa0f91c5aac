"""Bench tables a fit would misread are refused with the file and row (a trial: a corrupt
Parquet file was an 'internal error', a negative time named a derived quantity, and a
truncated CSV line was dropped without a word); swapped input files say what they are."""

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from mosaic.bench.store import read_family
from mosaic.cli.main import app
from mosaic.errors import MosaicInputError

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = "family,case,metadata_id,m,n,k,dtype,pass,time_s,status\n"


def _write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)


def test_a_corrupt_parquet_table_names_its_file(tmp_path):
    (tmp_path / "gemm.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(MosaicInputError, match=r"gemm\.parquet: not a readable gemm table"):
        read_family(tmp_path, "gemm")


def test_a_measured_row_without_a_positive_time_is_refused(tmp_path):
    _write(tmp_path, "gemm.csv", COLUMNS + "gemm,a,x,64,64,64,bf16,peak,0.001,ok\n"
                                           "gemm,b,x,64,64,64,bf16,peak,-5,ok\n")
    with pytest.raises(MosaicInputError, match=r"gemm\.csv: row 2: time_s = -5(\.0)?; a measured "
                                               r"time must be a positive number"):
        read_family(tmp_path, "gemm")
    # a skipped case has no time, and that is fine
    _write(tmp_path, "gemm.csv", COLUMNS + "gemm,a,x,64,64,64,bf16,peak,,skipped: no fp8\n")
    assert len(read_family(tmp_path, "gemm")) == 1


@pytest.mark.parametrize(("row", "message"), [
    ("gemm,b,x,64,64,64,bf16,peak,inf,ok", r"row 2: time_s = inf; a measured time"),
    ("gemm,b,x,abc,64,64,bf16,peak,0.001,ok", r"row 2: m = abc; a measured shape's sizes"),
    ("gemm,b,x,64,64,-5,bf16,peak,0.001,ok", r"row 2: k = -5(\.0)?; a measured shape's"),
    ("gemm,b,x,64,64,64,,peak,0.001,ok", r"row 2 has no dtype"),
    # a 400-digit size: pd.to_numeric raised OverflowError, a traceback (a fuzz trial)
    ("gemm,b,x,64," + "1" + "0" * 400 + ",64,bf16,peak,0.001,ok", r"row 2: n = 10+; a measured"),
])
def test_a_measured_row_a_fit_cannot_read_is_named(tmp_path, row, message):
    """A fuzz trial: an infinite time, a size 'abc' and an empty dtype ended in tracebacks
    inside the fit, and a negative size was fitted."""
    _write(tmp_path, "gemm.csv", COLUMNS + "gemm,a,x,64,64,64,bf16,peak,0.001,ok\n" + row
           + "\n")
    with pytest.raises(MosaicInputError, match=r"gemm\.csv: " + message):
        read_family(tmp_path, "gemm")


def test_a_truncated_row_is_named_not_dropped(tmp_path):
    _write(tmp_path, "gemm.csv", COLUMNS + "gemm,a,x,64,64,64,bf16,peak,0.001,ok\ngemm,bf16\n")
    with pytest.raises(MosaicInputError, match=r"gemm\.csv: row 2 has no status"):
        read_family(tmp_path, "gemm")


def test_a_well_formed_table_reads_back(tmp_path):
    frame = pd.DataFrame({"case": ["a"], "metadata_id": ["x"], "dtype": ["bf16"], "m": [64],
                          "n": [64], "k": [64], "pass": ["peak"], "time_s": [1e-3],
                          "status": ["ok"]})
    frame.to_parquet(tmp_path / "gemm.parquet", index=False)
    assert read_family(tmp_path, "gemm")["time_s"].tolist() == [1e-3]


def test_a_table_without_the_bench_columns_is_named_not_a_key_error(tmp_path):
    # a trial pointed --microbench at measured/ (the job-format copies): KeyError 'metadata_id'
    _write(tmp_path / "measured", "gemm.csv", "m,n,k,dtype,time_s\n64,64,64,bf16,0.001\n")
    with pytest.raises(MosaicInputError, match=r"measured/gemm\.csv: not a `mosaic bench` gemm "
                       r"table: no column case, metadata_id, pass; .*point --microbench at"):
        read_family(tmp_path / "measured", "gemm", for_fit=True)
    _write(tmp_path, "gemm.csv",
           COLUMNS.replace(",k,", ",") + "gemm,a,x,64,64,bf16,peak,0.001,ok\n")
    with pytest.raises(MosaicInputError, match=r"no column k; tables written by `mosaic bench`"):
        read_family(tmp_path, "gemm", for_fit=True)


def test_bench_compare_of_a_table_without_times_names_the_column(tmp_path):
    """`bench compare` of a kernels table whose time_s column was deleted ended in a
    KeyError traceback (a fuzz trial)."""
    row = "kernels,add:4096,x,add,4096,24576.0,{time}ok\n"
    _write(tmp_path / "a", "kernels.csv",
           "family,case,metadata_id,op,elements,moved_bytes,time_s,status\n"
           + row.format(time="0.001,"))
    _write(tmp_path / "b", "kernels.csv",
           "family,case,metadata_id,op,elements,moved_bytes,status\n" + row.format(time=""))
    result = CliRunner().invoke(app, ["bench", "compare", str(tmp_path / "a"),
                                      str(tmp_path / "b")])
    assert result.exit_code == 2, result.output
    assert "b/kernels.csv: not a `mosaic bench` kernels table: no column time_s" in " ".join(
        result.output.split())


def test_bench_compare_of_a_path_that_is_no_directory_says_what_it_is(tmp_path):
    """`bench compare /dev/null DIR` said "/dev/null does not exist" (a trial): a path that
    exists and is no directory is named for what it is (a character device, a regular file);
    only a missing one "does not exist"."""
    (tmp_path / "table.csv").write_text(COLUMNS)
    for given, said in (("/dev/null", "bench directory /dev/null is a device, not a directory"),
                        (str(tmp_path / "table.csv"), "table.csv is a file, not a directory"),
                        (str(tmp_path / "missing"), "missing does not exist")):
        result = CliRunner().invoke(app, ["bench", "compare", given, str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert said in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("text", ["", '{"runs": {"a": 1', "[1, 2]", '{"runs": "x"}',
                                  "[" * 100_000 + "]" * 100_000])
def test_unreadable_bench_metadata_is_named(tmp_path, text):
    from mosaic.bench.store import read_metadata

    _write(tmp_path, "metadata.json", text)
    with pytest.raises(MosaicInputError, match=r"metadata\.json: not (readable as )?the bench's "
                       "metadata"):
        read_metadata(tmp_path)


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("load_average_1m", "abc", "a non-negative number"), ("cpu_count", "x", "a positive integer"),
    ("sm_count", "x", "a positive integer"), ("device_name", 5, "text"),
])
def test_a_metadata_field_of_the_wrong_type_is_named(tmp_path, field, value, allowed):
    """A text load average, core count or SM count ended in tracebacks in calibrate
    --microbench, and a numeric device name was echoed as the device (a fuzz trial)."""
    import json

    from mosaic.bench.store import read_metadata

    run = {"device_name": "H100", "cpu_count": 2, "load_average_1m": 0.5} | {field: value}
    _write(tmp_path, "metadata.json", json.dumps({"runs": {"abc123": run}}))
    with pytest.raises(MosaicInputError, match=rf"metadata\.json: run abc123: {field} is "
                                               rf"{value!r}; the bench writes {allowed} there"):
        read_metadata(tmp_path)


def test_a_csv_edited_after_its_parquet_file_is_named(tmp_path):
    import os

    from mosaic.errors import MosaicWarning

    frame = pd.read_csv(pd.io.common.StringIO(COLUMNS + "gemm,a,x,64,64,64,bf16,peak,0.001,ok\n"))
    frame.to_parquet(tmp_path / "gemm.parquet", index=False)
    frame.to_csv(tmp_path / "gemm.csv", index=False)
    read_family(tmp_path, "gemm")  # written together: nothing to say
    stamp = (tmp_path / "gemm.parquet").stat().st_mtime
    os.utime(tmp_path / "gemm.csv", (stamp + 60, stamp + 60))
    with pytest.warns(MosaicWarning, match=r"gemm\.csv was changed after gemm\.parquet, which "
                      "is the table read"):
        read_family(tmp_path, "gemm")


def test_a_folder_without_bench_tables_says_what_it_holds(tmp_path):
    from mosaic.evaluate.microbench_calibration import load_tables

    _write(tmp_path, "gemm_grouped_b200.csv", "a,b\n1,2\n")
    with pytest.raises(MosaicInputError, match=r"no `mosaic bench` table .*gemm_grouped_b200\.csv "
                       r"are not bench tables; the ScalePlan reference tables are fitted by "
                       r"benchmarks/fit_microbench_constants\.py"):
        load_tables(tmp_path)


def test_calibrate_takes_runs_or_tables_not_both(tmp_path):
    result = CliRunner().invoke(app, ["calibrate", str(ROOT / "examples" / "runs_example.yaml"),
                                      "--microbench", str(tmp_path), "--out",
                                      str(tmp_path / "c.yaml")])
    assert result.exit_code == 2
    assert "give RUNS or --microbench, not both" in result.output


def test_a_law_and_a_calibration_given_for_each_other_say_what_they_are(tmp_path):
    law = tmp_path / "law.json"
    law.write_text('{"format": "mosaic-law/1", "form": "joint", "coefficients": {"a": 1}}')
    runner = CliRunner()
    result = runner.invoke(app, ["perf", str(ROOT / "examples" / "appendix_e.yaml"),
                                 "--calibration", str(law)])
    assert result.exit_code == 2 and "a scaling-law file (coefficients:)" in result.output
    calibration = tmp_path / "cal.yaml"
    calibration.write_text("name: x\nconstants:\n  chi_a2a: {value: 1, source: s}\n")
    result = runner.invoke(app, ["law", "predict", "--law", str(calibration), "--n-total",
                                 "1e9", "--sparsity", "0.9", "--tokens", "1e10"])
    assert result.exit_code == 2 and "a calibration profile (constants:)" in result.output


def test_a_size_option_of_no_bytes_is_refused():
    """`bench gemm --max-tensor-bytes 0` skipped every case and exited 0 (a fuzz trial)."""
    from mosaic.cli.bench_cmd import parse_bytes

    assert parse_bytes("--max-tensor-bytes", "4GiB") == 4 * 2**30
    with pytest.raises(MosaicInputError, match="a size of at least one byte"):
        parse_bytes("--max-tensor-bytes", "0")
