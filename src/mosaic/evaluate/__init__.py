"""The performance model applied to concrete inputs: a job file's prediction, recorded runs'
accuracy report and calibration fit, and the diagnosis of one job. Sits above ``perf`` and
``config`` so that ``perf`` depends only on ``arch`` and ``hardware`` (GUIDE.md)."""
