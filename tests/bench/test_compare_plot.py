"""`bench compare --plot PATH` writes PATH itself, or refuses it in one line (a trial:
`--plot compare` wrote compare.png and said "plot written to compare"; `--plot t1.yaml` was
an internal error after the whole comparison; `--plot DIR` wrote DIR.png beside it)."""

from pathlib import Path

import pandas as pd
import pytest

from mosaic.bench.compare import plot, plot_format
from mosaic.errors import MosaicInputError

pytest.importorskip("matplotlib")

CASES = pd.DataFrame({"family": ["gemm", "gemm", "kernels"], "case": ["a", "b", "c"],
                      "time_a_s": [1e-3, 2e-3, 1e-5], "time_b_s": [1.1e-3, 1.8e-3, 2e-5],
                      "ratio": [1.1, 0.9, 2.0]})


def test_a_name_without_suffix_is_written_as_png_under_that_name(tmp_path: Path):
    path = tmp_path / "compare"
    plot(CASES, path, "A", "B")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "compare.png").exists()


def test_the_suffix_picks_the_format(tmp_path: Path):
    path = tmp_path / "compare.svg"
    plot(CASES, path, "A", "B")
    assert b"<svg" in path.read_bytes()[:2000]
    assert plot_format(tmp_path / "x.PNG") == "png"


@pytest.mark.parametrize("name, message", [
    ("job.yaml", r"matplotlib writes no \.yaml image; name a file ending in \.png"),
    ("folder", r"is a directory; give the image file to write"),
])
def test_a_path_it_cannot_write_is_one_line(tmp_path: Path, name, message):
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    else:
        path.write_text("kept: true\n")
    with pytest.raises(MosaicInputError, match=message):
        plot(CASES, path, "A", "B")
    if name != "folder":
        assert path.read_text() == "kept: true\n"
    assert list(tmp_path.iterdir()) == [path]


def test_the_plot_path_is_checked_as_every_output_file_before_comparing(tmp_path: Path):
    """--plot skipped the checks of every other output (an unexpanded '~' would have made a
    folder named '~'); they run before the two folders are read."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    result = CliRunner().invoke(app, ["bench", "compare", str(tmp_path / "a"),
                                      str(tmp_path / "b"), "--plot", "~/compare.png"])
    assert result.exit_code == 2
    assert "'~' is not expanded here" in " ".join(result.output.split())
