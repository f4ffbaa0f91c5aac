"""A table (.csv/.parquet) given where a YAML file is read is named as a table (a trial's
`bench gemm --shapes DIR/gemm.csv` and `perf runs.csv` said "top level must be a mapping,
got str")."""

import pytest

from mosaic.errors import MosaicInputError
from mosaic.schema_validation import load_yaml_mapping


@pytest.mark.parametrize("name", ["gemm.csv", "runs.CSV", "gemm.parquet"])
def test_a_table_is_named_as_one(tmp_path, name):
    path = tmp_path / name
    path.write_text("name,loss\na,3.2\n")
    with pytest.raises(MosaicInputError, match=rf"^{path}: a table file \(\.\w+\), not a YAML"):
        load_yaml_mapping(path)


def test_a_yaml_file_still_reads(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("model: {layers: 2}\n")
    assert load_yaml_mapping(path) == {"model": {"layers": 2}}
