"""FP8 primary weights (``fp8_param_gather`` with a per-tensor recipe): Transformer Engine
keeps one FP8 copy per block-GEMM weight on Blackwell, which runs FP8 GEMMs in any operand
layout, and a transposed copy besides on Hopper (docs/memory.md, "Parameters")."""

from __future__ import annotations

import pytest

from mosaic.arch import count_parameters
from mosaic.config.job_schema import job_from_document
from mosaic.perf.memory import parameter_state_bytes


def _weights_bytes(system: str, precision: str, fp8_recipe: str | None, gather: bool,
                   stack: str = "megatron-core", sharding: str = "zero1") -> float:
    performance = {"precision": precision, "stack": stack, "fp8_param_gather": gather}
    if fp8_recipe is not None:
        performance["fp8_recipe"] = fp8_recipe
    spec = job_from_document({
        "model": {"layers": 4, "d_model": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336,
                  "vocab": 128256, "norm": "rmsnorm"},
        "batch": {"global_seqs": 8, "seq_len": 4096, "micro_seqs": 1},
        "parallelism": {"tp": 1, "pp": 1, "dp": 8, "sharding": sharding},
        "performance": performance,
        "hardware": {"system": system, "nodes": 1}}, "test")
    return float(parameter_state_bytes(spec.workload, spec.plan, "first")["weights"][0])


def test_fp8_primary_weights_take_one_byte_on_blackwell_only():
    """Block matrices (attention and FFN, 4 layers) at 1 B on B200 with current or delayed
    scaling and FP8 gathers; norms and the untied embedding and head stay at 2 B. On H100,
    without the gathers, or with MXFP8, every weight is 2 B."""
    c = count_parameters(job_from_document({
        "model": {"layers": 4, "d_model": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336,
                  "vocab": 128256, "norm": "rmsnorm"},
        "batch": {"global_seqs": 8, "seq_len": 4096},
        "hardware": {"system": "DGX-B200", "nodes": 1}},
        "t").workload.geometry)
    matrices = 4 * (c.attention_per_layer + c.dense_ffn_per_layer)
    rest = 4 * c.norms_per_layer + c.final_norm + c.embedding + c.lm_head
    for recipe in ("current", "delayed"):
        assert _weights_bytes("DGX-B200", "fp8", recipe, True) == pytest.approx(
            matrices + 2 * rest)
    all_bf16 = 2 * (matrices + rest)
    assert _weights_bytes("DGX-H100", "fp8", "current", True) == pytest.approx(all_bf16)
    assert _weights_bytes("DGX-B200", "fp8", "current", False) == pytest.approx(all_bf16)
    assert _weights_bytes("DGX-B200", "mxfp8", None, True) == pytest.approx(all_bf16)
    # FP8 gathers need Megatron's distributed optimizer (no sharding: bf16 weights), and
    # only Megatron's gathers keep FP8 weights (trait fp8_primary_weights)
    assert _weights_bytes("DGX-B200", "fp8", "current", True, sharding="none") == (
        pytest.approx(all_bf16))
    assert _weights_bytes("DGX-B200", "fp8", "current", True, stack="deepspeed") == (
        pytest.approx(all_bf16))


def test_the_nemotron_h_56b_fp8_preset_fits_on_b200():
    """Megatron-Bridge's NEMOTRONH_56B B200 FP8-CS preset (TP2, 64 GPUs) runs; with bf16
    weights its 28 B parameters per GPU would take 52 GiB and the rank would not fit in
    the 90% planning headroom of 178.4 GiB, with one-byte FP8 primary weights it does."""
    from pathlib import Path

    from mosaic.evaluate.job import load_job_spec, predict_job
    from mosaic.perf.calibration import load_calibration

    example = Path(__file__).resolve().parents[2] / "examples" / "nemotron_h_56b_b200.yaml"
    spec = load_job_spec(example, [])
    assert spec.workload.fp8_param_gather and spec.workload.non_tn_fp8_gemms
    prediction = predict_job(spec, load_calibration("default")).prediction
    assert bool(prediction.feasible[0])
    weights = parameter_state_bytes(spec.workload, spec.plan, "first")["weights"][0]
    assert weights / 2**30 < 28  # about half of the 52 GiB of bf16 weights
