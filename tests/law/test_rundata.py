"""Run-data loading and validation: every bad input gets one clear message."""

import re

import numpy as np
import pandas as pd
import pytest

from mosaic.errors import MosaicInputError
from mosaic.law import JOINT, RunData, load_run_data
from mosaic.law.forms import get_form
from mosaic.law.rundata import check_columns

GOOD = {
    "n_total": [1e9, 4e9, 8e9],
    "n_active": [1e8, 2e8, 4e8],
    "tokens": [5e9, 6e9, 7e9],
    "split_factor": [1, 2, 4],
    "loss": [2.5, 2.3, 2.2],
    "experts": [16, 32, 64],
}


def write_csv(tmp_path, columns, name="runs.csv"):
    path = tmp_path / name
    pd.DataFrame(columns).to_csv(path, index=False)
    return path


def test_csv_and_parquet_load_the_same(tmp_path):
    from_csv = load_run_data(write_csv(tmp_path, GOOD))
    parquet = tmp_path / "runs.parquet"
    pd.DataFrame(GOOD).to_parquet(parquet)
    from_parquet = load_run_data(parquet)
    for data in (from_csv, from_parquet):
        np.testing.assert_array_equal(data.n_active, GOOD["n_active"])
        np.testing.assert_allclose(data.sparsity, [0.9, 0.95, 0.95])
        np.testing.assert_array_equal(data.extra["experts"], GOOD["experts"])
        assert data.log_features(JOINT).shape == (3, 4)


def test_sparsity_column_gives_active_params(tmp_path):
    columns = {k: v for k, v in GOOD.items() if k != "n_active"} | {"sparsity": [0.9, 0.95, 0.5]}
    data = load_run_data(write_csv(tmp_path, columns))
    np.testing.assert_allclose(data.n_active, [1e8, 2e8, 4e9])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"loss": None}, r"missing required column\(s\) \['loss'\]"),
        ({"loss": [2.5, np.nan, 2.2]}, r"row 2: column 'loss' is empty \(NaN\)"),
        ({"tokens": [5e9, 6e9, 0.0]}, "row 3: column 'tokens' is 0; it must be a positive"),
        ({"n_total": [1e9, "lots", 8e9]}, "row 2: column 'n_total' is 'lots', which is not a"),
        ({"n_active": [1e8, 5e9, 4e8]}, "row 2: n_active 5e[+]09 exceeds n_total 4e[+]09"),
        ({"sparsity": [0.9, 0.95, 1.0]}, "row 3: sparsity is 1; allowed: 0 <= S < 1"),
        ({"sparsity": [0.9, 0.5, 0.95]}, "row 2: sparsity 0.5 disagrees"),
    ],
)
def test_bad_columns_are_named_with_row(tmp_path, change, message):
    columns = dict(GOOD)
    for key, value in change.items():
        if value is None:
            columns.pop(key)
        else:
            columns[key] = value
    with pytest.raises(MosaicInputError, match=message):
        load_run_data(write_csv(tmp_path, columns))


def test_bad_files_are_reported(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(MosaicInputError, match="is empty"):
        load_run_data(empty)
    header_only = tmp_path / "header.csv"
    header_only.write_text("n_total,tokens,loss\n")
    with pytest.raises(MosaicInputError, match="no runs"):
        load_run_data(header_only)
    with pytest.raises(MosaicInputError, match=r"unknown extension '.xlsx'; allowed: .csv"):
        load_run_data(tmp_path / "runs.xlsx")
    with pytest.raises(MosaicInputError, match="does not exist"):
        load_run_data(tmp_path / "absent.csv")


def test_form_needs_its_columns():
    dense = RunData(n_total=[1e9], tokens=[1e10], loss=[2.0], source="dense.csv")
    with pytest.raises(MosaicInputError, match=r"dense.csv: form 'joint' needs column\(s\)"):
        dense.log_features(JOINT)


@pytest.mark.parametrize(("column", "value", "fragment"), [
    ("n_total", 1e300, "column 'n_total' is 1e+300; allowed"),
    ("split_factor", 0.5, "column 'split_factor' is 0.5; allowed 1..1024"),
    ("loss", 1e6, "column 'loss' is 1e+06; allowed at most 50"),
    # counts in billions (a trial): below any model's size, said as a unit slip
    ("n_total", 7.0, "column 'n_total' is 7; allowed 1000..1e+16 (parameters of a trainable "
                     "model; 1 bad row(s) in total); counts are plain numbers"),
    ("n_active", 0.5, "column 'n_active' is 0.5; allowed 1000..1e+16"),
    ("tokens", 317.8, "row 2: tokens 317.8 for n_total 2e+09 is 1.59e-07 tokens per "
                      "parameter, below any run's 0.0001: are tokens and parameters in the "
                      "same units"),
])
def test_a_row_outside_what_predict_takes_is_refused(column, value, fragment):
    """`law fit` took rows `law predict` refuses (it fitted a loss of 1e6 nats to R^2 -0.02)."""
    columns = {"n_total": [1e9, 2e9], "tokens": [1e10, 2e10], "loss": [2.5, 2.4],
               "n_active": [1e8, 2e8], "split_factor": [1.0, 2.0]}
    columns[column] = [columns[column][0], value]
    with pytest.raises(MosaicInputError, match=re.escape(fragment)):
        RunData(**{k: np.array(v) for k, v in columns.items()})
    tiny = RunData(n_total=np.array([2e3, 4e3]), tokens=np.array([512.0, 1024.0]),
                   loss=np.array([3.5, 3.4]))  # a test ladder's rungs: fitted as given
    assert tiny.n_runs == 2


def test_a_training_output_is_named_not_read_as_a_table(tmp_path):
    """`law fit` on a `mosaic train` output folder, or its result.json, said only "unknown
    extension" (a trial): it now says what the fitter reads and where a table comes from."""
    from mosaic.law.rundata import load_run_data

    (tmp_path / "result.json").write_text("{}")
    for given, what in ((tmp_path, "a folder"), (tmp_path / "result.json", "one training run")):
        with pytest.raises(MosaicInputError, match=f"{what}; the fitter reads a table of runs"):
            load_run_data(given)


def test_a_run_table_given_as_a_law_says_to_fit_it_first(tmp_path):
    """`--law runs.csv` said only "not valid JSON" (a trial)."""
    from mosaic.law import ScalingLaw

    table = tmp_path / "runs.csv"
    table.write_text("n_total,tokens,loss\n1e9,2e10,2.5\n")
    with pytest.raises(MosaicInputError, match="a run table, not a law; fit it first"):
        ScalingLaw.load(table)


def test_a_split_factor_on_data_without_the_column_says_so():
    """`--split-factor 4` on dense data said "present: [1.0]", a column it did not have."""
    runs = RunData(n_total=np.array([1e9, 2e9]), tokens=np.array([1e10, 2e10]),
                   loss=np.array([2.5, 2.4]), source="dense.csv")
    with pytest.raises(MosaicInputError, match=r"no split_factor column \(every run counts as G"):
        runs.with_split_factor(4)


def test_a_trailing_comma_is_no_column_a_row_too_long_is_refused(tmp_path):
    """Rows ending in ',' made pandas index by the first column, and every loss read as
    empty (a trial); a row with more values than names is said as such."""
    trailing = tmp_path / "trailing.csv"
    trailing.write_text("n_total,tokens,loss\n1e9,2e10,2.5,\n2e9,4e10,2.3,\n")
    runs = load_run_data(trailing)
    assert runs.loss.tolist() == [2.5, 2.3] and runs.n_total.tolist() == [1e9, 2e9]
    long = tmp_path / "long.csv"
    long.write_text("n_total,tokens,loss\n1e9,2e10,2.5,7\n")
    with pytest.raises(MosaicInputError, match=r"row 1 .* holds more values than the header"):
        load_run_data(long)


def test_a_row_too_long_is_named_by_its_number(tmp_path):
    """A header that lost a name (`cut -f1,2` on the header only, a trial) said only 'a row
    holds more values than the header' (docs/law.md promises the row): the row and both
    counts say which side lost a column. (pandas warns only when the first row is long;
    a later long row is its own 'Expected 3 fields in line L' error.)"""
    long = tmp_path / "long.csv"
    long.write_text("n_total,tokens\n1e9,2e10,2.5\n2e9,4e10,2.3\n")
    with pytest.raises(MosaicInputError, match=r"long.csv: row 1 \(3 values for 2 names\) holds "
                                               "more values than the header"):
        load_run_data(long)


def test_a_later_long_row_is_named_by_its_run_number_not_pandas_line(tmp_path):
    """A long row after the first, or a trailing comma on some rows only, reached the user as
    pandas' 'Expected 3 fields in line 3, saw 4', which counts the header as line 1 (a
    trial): the row is named as the run data's errors number it."""
    later = tmp_path / "later.csv"
    later.write_text("n_total,tokens,loss\n1e9,2e10,2.5\n2e9,4e10,2.3\n3e9,4e10,2.3,1,2\n")
    with pytest.raises(MosaicInputError, match=r"later.csv: row 3 \(5 values for 3 names\) "
                                               "holds more values than the header"):
        load_run_data(later)
    some = tmp_path / "some.csv"
    some.write_text("n_total,tokens,loss\n1e9,2e10,2.5\n2e9,4e10,2.3,\n")
    with pytest.raises(MosaicInputError, match=r"some.csv: row 2 \(4 values for 3 names\) "
                                               "ends in a comma the other rows lack"):
        load_run_data(some)


def test_a_column_named_twice_is_refused_not_read_from_its_first(tmp_path):
    """pandas renames a repeated header name ('n_total' -> 'n_total.1'), so a table with two
    differing n_total columns was fitted on the first, the other ignored; the header is
    refused naming the column and both positions. A BOM (stripped as pandas strips it) and
    a trailing comma's empty name are no repeat."""
    twice = tmp_path / "twice.csv"
    twice.write_text("n_total,tokens,loss,n_total\n1e9,2e10,2.5,5e9\n2e9,4e10,2.3,6e9\n")
    with pytest.raises(MosaicInputError, match=re.escape(
            "the header names column 'n_total' twice (columns 1 and 4)")):
        load_run_data(twice)
    fine = tmp_path / "fine.csv"
    fine.write_bytes("\ufeffn_total,tokens,loss,,\n1e9,2e10,2.5,,\n2e9,4e10,2.3,,\n"
                     .encode("utf-8"))
    assert load_run_data(fine).n_total.tolist() == [1e9, 2e9]


@pytest.mark.parametrize("form", ["joint", "per-g"])
def test_a_dense_table_is_pointed_to_the_dense_form(form):
    """Epoch's dense table given to the joint form was told "or fit --form per-g", which
    then refused it for the same missing sparsity: point to chinchilla instead."""
    with pytest.raises(MosaicInputError) as caught:
        check_columns(["n_total", "tokens", "loss"], get_form(form), "epoch.csv")
    message = str(caught.value)
    assert "--form per-g" not in message, message
    assert "dense runs fit --form chinchilla" in message, message


def test_a_long_row_after_a_blank_line_is_numbered_as_the_run_data_numbers_it(tmp_path):
    """pandas skips blank lines (read_csv skip_blank_lines), so the run data's errors number
    the rows without them; the long-row message counted a blank line as a row and named the
    run after it one too far."""
    gap = tmp_path / "gap.csv"
    gap.write_text("n_total,tokens,loss\n1e9,2e10,2.5\n\n2e9,4e10,2.3,7\n")
    with pytest.raises(MosaicInputError, match=r"gap.csv: row 2 \(4 values for 3 names\)"):
        load_run_data(gap)
    # the same table without its long row: the run after the blank line is the data's row 2
    fine = tmp_path / "fine.csv"
    fine.write_text("n_total,tokens,loss\n1e9,2e10,2.5\n\n2e9,4e10,2.3\n")
    assert load_run_data(fine).n_total.tolist() == [1e9, 2e9]
