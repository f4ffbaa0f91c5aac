"""The metrics log's rewrite on resume keeps the earlier records if it is cut short."""

import json
from pathlib import Path

import pytest

from mosaic.train.metrics import MetricsLog, read_metrics


def test_a_crash_while_resuming_leaves_the_earlier_metrics_intact(tmp_path, monkeypatch):
    """On resume the log is rewritten without the steps past the checkpoint; a crash in
    that write lost every earlier record (it truncated the file in place)."""
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": step, "loss": 5.0 - step}) for step in range(6)]
    path.write_text("".join(line + "\n" for line in lines))
    before = path.read_text()

    def crash_midway(self, data, *args, **kwargs):  # writes half, then the process dies
        with open(self, "wb" if isinstance(data, bytes) else "w") as handle:
            handle.write(data[: len(data) // 2])
        raise OSError("No space left on device")

    monkeypatch.setattr(Path, "write_text", crash_midway)
    monkeypatch.setattr(Path, "write_bytes", crash_midway)
    with pytest.raises(OSError, match="No space left"):
        MetricsLog(path, resume_step=4)
    monkeypatch.undo()
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temporary left


def test_resume_keeps_the_steps_before_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": step}) + "\n" for step in range(6)))
    log = MetricsLog(path, resume_step=4)
    assert [r["step"] for r in log.records] == [0, 1, 2, 3]
    assert [r["step"] for r in read_metrics(path)] == [0, 1, 2, 3]
