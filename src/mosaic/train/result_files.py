"""Names of the files a ``mosaic train`` run writes in its output folder, importable without
torch (the ladder's collect and fit read them on machines without the train extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mosaic.schema_validation import parse_json, read_text

CHECKPOINT_FILE = "checkpoint.pt"
RESULT_FILE = "result.json"
# the key of result.json that holds the job it finished (trainer._fingerprint)
RESULT_FINGERPRINT = "job_fingerprint"
METRICS_FILE = "metrics.jsonl"
# the run's geometry, device, FLOP accounting and whole job as it trained (trainer)
RUN_INFO_FILE = "run.json"

# A trainer's result.json and run.json hold a few kilobytes (examples/data/
# train_result_q1.json: 584 bytes); 1,000x the largest is no run's file. A fuzz trial's
# 254 MB result.json (an alias bomb written out) took 35 s and gigabytes to parse.
MAX_RUN_FILE_BYTES = 16 * 2**20


def read_run_json(path: Path, what: str) -> Any:
    """The JSON document of a run folder's file ``path`` (``what``: its kind), read as every
    mosaic input is (:func:`mosaic.schema_validation.parse_json`): one MosaicInputError line
    for a file that is too large, not UTF-8, malformed, nested too deeply, holds an
    unreadable number or a key twice."""
    return parse_json(read_text(path, what, max_bytes=MAX_RUN_FILE_BYTES), str(path))
