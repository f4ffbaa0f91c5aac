"""Tokens/s of a resumed run leaves out the resumed process's first step, as it leaves out
step 0 (docs/train.md: "over the steps the last process trained, after its first (warm-up)
step"). Only global step 0 was left out: a trial's torchrun run stopped at step 18 of 20 and
resumed reported 5,491 tokens/s, the median of the resumed process's 0.265 s warm-up step and
a 0.108 s one, where its steps took 0.111 s before the stop (1.7x too low)."""

import pytest

torch = pytest.importorskip("torch")

from mosaic.train import trainer as trainer_module  # noqa: E402
from mosaic.train.config import train_config_from_mapping  # noqa: E402
from mosaic.train.metrics import read_metrics  # noqa: E402
from mosaic.train.trainer import train  # noqa: E402

from .conftest import tiny_job  # noqa: E402

WARM_UP_S, STEADY_S = 10.0, 1.0


@pytest.fixture
def timed_steps(monkeypatch):
    """Each process's first step takes WARM_UP_S, the others STEADY_S (as recorded)."""
    real = trainer_module.Trainer.train_step

    def train_step(self):
        record = real(self)
        first = not getattr(self, "_timed_once", False)
        self._timed_once = True
        record["step_time_s"] = WARM_UP_S if first else STEADY_S
        return record

    monkeypatch.setattr(trainer_module.Trainer, "train_step", train_step)


def test_a_resumed_process_s_warm_up_step_is_left_out(tmp_path, timed_steps):
    config = train_config_from_mapping(tiny_job(run={"tokens": 6 * 8 * 32}), "job")
    train(config, tmp_path, stop_after_steps=4)
    resumed = train(config, tmp_path)  # steps 4 (warm-up) and 5
    assert resumed.complete
    assert resumed.tokens_per_s == pytest.approx(config.tokens_per_step / STEADY_S)


def test_a_resume_of_one_step_reads_the_steps_logged_before_it(tmp_path, timed_steps):
    config = train_config_from_mapping(tiny_job(run={"tokens": 6 * 8 * 32}), "job")
    train(config, tmp_path, stop_after_steps=5)  # steps 1-4 logged at STEADY_S
    resumed = train(config, tmp_path)  # step 5 alone: the process's warm-up
    assert [r["step_time_s"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [
        WARM_UP_S, *[STEADY_S] * 4, WARM_UP_S]
    assert resumed.tokens_per_s == pytest.approx(config.tokens_per_step / STEADY_S)
