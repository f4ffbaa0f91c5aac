"""`python -m mosaic.train` interrupted names the command to rerun: python alone, torchrun
under torchrun (a plain `python -m mosaic.train` was told "torchrun ... -m mosaic.train":
a trial)."""

import pytest
import yaml

pytest.importorskip("torch")

from mosaic.train import __main__ as train_main
from mosaic.train import trainer

from .conftest import tiny_job


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("torchrun, launcher", [(False, "python"), (True, "torchrun ...")])
def test_the_rerun_names_the_launcher(tmp_path, monkeypatch, capsys, torchrun, launcher):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job()))
    monkeypatch.delenv("RANK", raising=False)
    if torchrun:
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    else:
        monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setattr(trainer, "train", interrupt)
    argv = [str(job), "--out", str(tmp_path / "run")]
    assert train_main.main(argv) == 130
    assert capsys.readouterr().err.startswith(
        f"error: interrupted; rerun the same command ({launcher} -m mosaic.train {job} "
        f"--out {tmp_path / 'run'}) to go on from the last checkpoint")
