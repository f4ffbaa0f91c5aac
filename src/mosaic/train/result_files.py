"""Names of the files a ``mosaic train`` run writes in its output folder, importable without
torch (the ladder's collect and fit read them on machines without the train extra)."""

CHECKPOINT_FILE = "checkpoint.pt"
RESULT_FILE = "result.json"
# the key of result.json that holds the job it finished (trainer._fingerprint)
RESULT_FINGERPRINT = "job_fingerprint"
METRICS_FILE = "metrics.jsonl"
# the run's geometry, device, FLOP accounting and whole job as it trained (trainer)
RUN_INFO_FILE = "run.json"
