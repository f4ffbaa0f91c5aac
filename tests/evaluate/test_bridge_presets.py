"""Megatron-Bridge's shipped performance presets (NeMo 25.09-26.06.01) as memory checks: every
preset ran, so each should be predicted to fit. The records are src/mosaic/evaluate/data/
bridge_presets.yaml (benchmarks/extract_bridge_presets.py); the ones predicted not to fit are
listed here with the reason, so a change to the memory model or the records shows up
(docs/evidence/bridge_presets_memory.md)."""

import warnings
from pathlib import Path

from mosaic.config.run_records import RunRecordWarning, load_run_records
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.evaluate.validation_report import ValidationSummary, predict_runs
from mosaic.perf.calibration import load_calibration

PRESETS = (Path(__file__).resolve().parents[2]
           / "src/mosaic/evaluate/data/bridge_presets.yaml")

# Llama 3.1 405B on 128 B300, TP2 PP8 VPP8, global batch 64 (8 micro-batches per rank, all in
# flight under the interleaved schedule), 8k tokens, no recompute or offload in the preset or
# the recipe: ~1.9 GiB of activations per block and micro-batch, 8 x 16 slots on the first rank
_B300_405B = "405B B300 V1 TP2 PP8 VPP8: all 8 micro-batches' activations in flight"
NOT_FITTING = {
    # Qwen3-Next H100 at 8k tokens (v0.2.0 sets 8192 and no recompute), PP4 VPP12: 51 layer
    # passes in flight on the first rank; bf16 93.5 of 79.1 GiB (72 GiB activations), FP8-CS
    # 80.9 (60 GiB). The FP8-CS one joined when the gated DeltaNet's output-norm output and
    # the gated shared expert's output were counted (both saved by Megatron-Core @ 0d8e0714,
    # Bridge v0.2.0's pin): +4.8 GiB on either preset; per-layer counts match the code
    "preset-v0.2.0-qwen3-next-80b-a3b-h100-bf16": "Qwen3-Next H100 bf16 8k, no recompute",
    "preset-v0.2.0-qwen3-next-80b-a3b-h100-fp8cs": "Qwen3-Next H100 FP8-CS 8k, no recompute",
    **{f"preset-{tag}-llama3.1-405b-b300-{precision}-v1": _B300_405B
       for tag in ("v0.3.0", "v0.3.1", "v0.4.0", "v0.4.2")
       for precision in ("bf16", "fp8cs", "fp8mx")},
    **{f"preset-{tag}-llama3.1-405b-b300-{precision}-v1": _B300_405B
       for tag in ("v0.5.0", "v0.5.1") for precision in ("fp8cs", "fp8mx")},
}
# the catalog has no host-link bandwidth for B300, so activation offload cannot be costed
UNPREDICTABLE = {f"preset-{tag}-llama3.1-405b-b300-bf16-{variant}"
                 for tag in ("v0.5.0", "v0.5.1") for variant in ("v1", "v2")}


def test_every_preset_loads_and_the_ones_predicted_not_to_fit_are_known():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        record_set = apply_record_settings(load_run_records(PRESETS))
    assert record_set.skipped == ()
    assert len(record_set.records) == 1445
    assert all(not r.throughput_scored and not r.oom for r in record_set.records)
    unpredictable: list[str] = []
    predictions = predict_runs(record_set.records, load_calibration(None),
                               unpredictable=lambda r, why: unpredictable.append(r.id))
    assert set(unpredictable) == UNPREDICTABLE
    aggregate = ValidationSummary.of(predictions).aggregate()
    assert aggregate["oom_runs"] == 0
    assert set(aggregate["trained_runs_predicted_infeasible_ids"]) == set(NOT_FITTING)
    assert aggregate["trained_runs_predicted_infeasible"] == len(NOT_FITTING) == 18
