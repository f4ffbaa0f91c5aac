"""FP8 dot-product attention (Transformer Engine's FP8 fused attention, cuDNN FP8 SDPA;
Megatron-Core fp8_dot_product_attention; docs/evidence/fp8_attention.md): the score GEMMs run
on the FP8 lane, the per-score softmax work does not speed up. Expected values by hand from the
fitted bf16 efficiency eff = f·s/(s + s_half)·d/(d + d_half): per score the time is
W·(d + d_half)/(peak·f·ramp), of which W·d is the GEMMs."""

from dataclasses import replace

import pytest
import yaml

from mosaic.arch import ladder_geometry
from mosaic.config.job_schema import job_from_document
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import load_calibration
from mosaic.perf.kernels import (
    FLASH_ATTENTION_EFFICIENCY,
    AttentionEfficiency,
    flash_attention_time_s,
    fp8_attention_efficiency,
)
from mosaic.perf.machine import machine_for, with_fp8_attention
from mosaic.perf.plan import single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Fp8Recipe, Workload

B200 = Cluster(system=get_system("DGX-B200"), n_nodes=1)


def test_only_the_gemm_share_of_a_score_runs_twice_as_fast():
    # d = 128, d_half = 128, f = 1: per score (128 + 128) units in bf16, (64 + 128) in FP8
    bf16 = AttentionEfficiency(max_fraction=1.0, seq_half_tokens=0.0, head_dim_half=128.0)
    fp8 = fp8_attention_efficiency(bf16, 2.0)
    args = (1, 16, 8192, 8192, 128, True, 1.0e15)
    t_bf16 = flash_attention_time_s(*args, efficiency=bf16, kernel_latency_s=0.0)
    t_fp8 = flash_attention_time_s(*args, efficiency=fp8, kernel_latency_s=0.0)
    assert t_bf16 / t_fp8 == pytest.approx(256 / 192, rel=1e-12)
    with pytest.raises(MosaicInputError, match="lane_speedup"):
        fp8_attention_efficiency(bf16, 0.5)


def test_the_h200_fit_reproduces_flashattention_3s_fp8_gain():
    """FlashAttention-3 (arXiv:2407.08608, abstract): 740 TFLOP/s FP16, close to 1.2 PFLOP/s
    FP8 on H100, a 1.62x gain; the H200 forward fit (Hopper, d_half 66.8) at head dim 256
    gives (256 + 66.8) / (128 + 66.8) = 1.66x."""
    fwd = FLASH_ATTENTION_EFFICIENCY["H200"]["fwd"]
    gain = (fp8_attention_efficiency(fwd, 2.0).at(16384, 256) / fwd.at(16384, 256))[()]
    assert gain == pytest.approx((256 + 66.8) / (128 + 66.8), rel=1e-9)
    assert gain == pytest.approx(1.2e15 / 740e12, rel=0.05)


def _workload(**settings) -> Workload:
    base = {"geometry": ladder_geometry(8), "global_batch": 64, "seq_len": 8192,
            "precision": "fp8", "fp8_recipe": Fp8Recipe.MXFP8, "stack": "megatron-bridge"}
    return Workload(**{**base, **settings})


def test_a_step_with_fp8_attention_changes_the_attention_core_only():
    machine = machine_for(B200, "fp8", fp8_recipe=Fp8Recipe.MXFP8)
    plan, calibration = single_plan(dp=8), load_calibration("default")
    off = predict_step(_workload(), plan, machine, calibration)
    on = predict_step(_workload(fp8_dot_product_attention=True), plan, machine, calibration)
    assert on.breakdown_s["compute_attention_core"][0] < off.breakdown_s[
        "compute_attention_core"][0]
    for term in ("compute_mlp", "compute_attention_gemm", "compute_elementwise"):
        assert on.breakdown_s[term][0] == off.breakdown_s[term][0]
    # B200: FP8 lane 4.5 PFLOP/s over bf16 2.25: the score GEMMs twice as fast
    fast = with_fp8_attention(machine)
    assert fast.attention_fwd == replace(machine.attention_fwd,
                                         max_fraction=2 * machine.attention_fwd.max_fraction,
                                         head_dim_half=2 * machine.attention_fwd.head_dim_half)


@pytest.mark.parametrize(("settings", "message"), [
    ({"precision": "bf16", "fp8_recipe": None}, "needs precision fp8 or mxfp8"),
    ({"stack": "torchtitan"}, "stacks: megatron-bridge, megatron-core"),
    ({"attention_kernel": "fa2"}, "attention_kernel cudnn"),
])
def test_fp8_attention_is_refused_where_it_cannot_run(settings, message):
    with pytest.raises(MosaicInputError, match=message):
        _workload(fp8_dot_product_attention=True, **settings)


def test_the_2606_mxfp8_recipes_turn_on_fp8_attention_where_their_presets_do():
    """Megatron-Bridge v0.5.x presets: fp8_dpa with the full-iteration bundle for Qwen3 and
    DeepSeek-V3 on GB300, not for DeepSeek-V3 on GB200 (docs/evidence/
    megatron_bridge_recipes_by_release.md)."""
    def job(model: dict, system: str) -> Workload:
        return job_from_document({
            "model": model, "batch": {"global_seqs": 256, "seq_len": 4096},
            "parallelism": {"ep": 8, "dp": 8},
            "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                            "stack_version": "26.06"},
            "hardware": {"system": system, "nodes": 2}}, "test").workload

    qwen3 = {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
             "ffn": 6144, "vocab": 151936,
             "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}}
    assert job(qwen3, "GB300-NVL72").fp8_dot_product_attention is True
    dsv3 = {"layers": 61, "d_model": 7168, "heads": 128, "vocab": 129280, "ffn": 18432,
            "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128},
            "moe": {"experts": 256, "top_k": 8, "expert_ffn": 2048, "shared_experts": 1,
                    "dense_layers": 3}}
    assert job(dsv3, "GB300-NVL72").fp8_dot_product_attention is True
    assert job(dsv3, "GB200-NVL72").fp8_dot_product_attention is False


def test_explain_offers_fp8_attention_on_an_fp8_megatron_job():
    from mosaic.evaluate.diagnosis import rank_levers

    machine = machine_for(B200, "fp8", fp8_recipe=Fp8Recipe.MXFP8)
    plan, calibration = single_plan(dp=8), load_calibration("default")
    levers = {lever.name: lever for lever in rank_levers(_workload(), plan, machine,
                                                         calibration)}
    alone = predict_step(_workload(fp8_dot_product_attention=True), plan, machine, calibration)
    lever = levers["fp8_dot_product_attention"]
    assert lever.step_time_s == pytest.approx(float(alone.step_time_s[0]), rel=1e-12)
    assert lever.gain > 1.0
    stated = rank_levers(_workload(fp8_dot_product_attention=True), plan, machine, calibration)
    assert "fp8_dot_product_attention" not in {lever.name for lever in stated}


def test_an_amd_gpu_refuses_fp8_attention_at_prediction():
    """megatron-core's default kernel is cuDNN, but an AMD GPU runs FlashAttention-2
    (resolve_attention_kernel): Transformer Engine's FP8 attention is not there to run."""
    mi300x = Cluster(system=get_system("ND-MI300X-v5"), n_nodes=1)
    machine = machine_for(mi300x, "fp8", fp8_recipe=Fp8Recipe.DELAYED)
    workload = _workload(fp8_recipe=Fp8Recipe.DELAYED, stack="megatron-core",
                         fp8_dot_product_attention=True)
    with pytest.raises(MosaicInputError, match=r"MI300X.*runs fa2"):
        predict_step(workload, single_plan(dp=8), machine, load_calibration("default"))


def test_a_recipes_fp8_attention_gives_way_to_a_stated_kernel():
    """The Qwen3-30B GB300 26.06 cell sets fp8_dpa; a job that states another attention
    kernel keeps its kernel and runs attention in bf16, with a note."""
    job = job_from_document({
        "model": {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                  "ffn": 6144, "vocab": 151936,
                  "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
        "batch": {"global_seqs": 256, "seq_len": 4096}, "parallelism": {"ep": 8, "dp": 8},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                        "stack_version": "26.06", "attention_kernel": "fa2"},
        "hardware": {"system": "GB300-NVL72", "nodes": 2}}, "test")
    assert job.workload.fp8_dot_product_attention is False
    assert any("fp8_dot_product_attention=True in the recipe, not applied" in line
               and "attention_kernel fa2" in line for line in job.assumptions)


def _qwen3_job_document(**performance) -> dict:
    return {"model": {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4,
                      "head_dim": 128, "ffn": 6144, "vocab": 151936,
                      "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
            "batch": {"global_seqs": 64, "seq_len": 4096}, "parallelism": {"ep": 8, "dp": 8},
            "performance": {"precision": "mxfp8", "stack": "megatron-bridge", **performance},
            "hardware": {"system": "DGX-B200", "nodes": 1}}


def test_the_exports_say_where_fp8_attention_is_set():
    """Megatron-LM's arguments.py lists fp8_dot_product_attention among the TransformerConfig
    fields with no flag; a Megatron-Bridge recipe name carries no field overrides, so the
    NeMo file writes the recipe's fields with it set."""
    from mosaic.export.megatron import arguments
    from mosaic.export.nemo import render as render_nemo
    from mosaic.export.spec import spec_from_job

    spec = spec_from_job(job_from_document(
        _qwen3_job_document(fp8_dot_product_attention=True), "test"), "test")
    assert spec.fp8_dot_product_attention is True
    _, unsupported = arguments(spec)
    assert any(line.startswith("fp8_dot_product_attention: Megatron-LM has no flag")
               for line in unsupported)
    mixed = yaml.safe_load(render_nemo(spec).text)["mixed_precision"]
    assert (mixed["fp8_recipe"], mixed["fp8_dot_product_attention"]) == ("mxfp8", True)
    plain = spec_from_job(job_from_document(_qwen3_job_document(), "test"), "test")
    assert not any("fp8_dot_product_attention" in line for line in arguments(plain)[1])


def test_mosaic_perf_reports_both_settings(tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_qwen3_job_document(
        fp8_dot_product_attention=True, fused_grouped_mlp=True)))
    runner = CliRunner()
    result = runner.invoke(app, ["perf", str(path), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["fp8_dot_product_attention"] is True
    assert document["fused_grouped_mlp"] is True
    text = runner.invoke(app, ["perf", str(path)])
    assert text.exit_code == 0
    assert "fused grouped MLP" in text.stdout and "FP8 attention" in text.stdout
