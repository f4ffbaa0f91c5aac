"""A job naming a `mosaic bench` folder as its table is told which file to name (a trial's
`hardware.gemm_table: bj` read "unknown extension ''")."""

from pathlib import Path

import pytest

from mosaic.errors import MosaicInputError
from mosaic.table_files import read_table


def bench_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "bench"
    (folder / "measured").mkdir(parents=True)
    (folder / "metadata.json").write_text('{"runs": {}}')
    for name in ("gemm.csv", "grouped_gemm.csv", "collectives.csv"):
        (folder / "measured" / name).write_text("m,n,k\n1,1,1\n")
    return folder


@pytest.mark.parametrize("what, table", [("GEMM table", "gemm.csv"),
                                         ("grouped GEMM table", "grouped_gemm.csv"),
                                         ("measured collective table", "collectives.csv")])
def test_a_bench_folder_names_the_table_to_give(tmp_path, what, table):
    folder = bench_folder(tmp_path)
    with pytest.raises(MosaicInputError) as caught:
        read_table(folder, what)
    assert str(caught.value) == (
        f"{what} {folder}: a folder, not a table file (.csv/.parquet); a `mosaic bench` "
        f"folder: name one of its tables, e.g. {folder / 'measured' / table} (measured/ "
        "holds collectives.csv, gemm.csv, grouped_gemm.csv)")


def test_another_folder_is_a_folder(tmp_path):
    with pytest.raises(MosaicInputError, match=r"a folder, not a table file \(\.csv/\.parquet\)$"):
        read_table(tmp_path, "GEMM table")
