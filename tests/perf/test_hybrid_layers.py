"""Hybrid Mamba/attention models in the time and memory models (perf/hybrid_layers.py).

The strongest check is a decomposition identity: a hybrid pattern of attention layers each
followed by an MLP (or MoE) layer *is* a transformer, so it must get the transformer's step
time breakdown and memory exactly, on any layout. The Mamba-2 layer's own costs are checked
by hand from its tensors (Megatron-Core MambaMixer, mamba_ssm's fused training kernel).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mosaic.config.job_schema import job_from_document
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import cluster_for, load_job_spec, predict_job
from mosaic.export.spec import spec_from_job
from mosaic.export.targets import export
from mosaic.perf.calibration import load_calibration
from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.hybrid_layers import (
    GDN_FORWARD_KERNELS,
    SSD_FORWARD_KERNELS,
    gdn_delta_rule_s,
    gdn_layer_times,
    ssd_scan_s,
)
from mosaic.perf.kernels import memory_bound_time_s
from mosaic.perf.layer_costs import fwd_bwd_s, gemm_s
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import gdn_activation_bytes, mamba_activation_bytes
from mosaic.perf.schedule import stage_hybrid_counts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "nemotron_3_nano_b200.yaml"
MAMBA = {"heads": 64, "head_dim": 64, "state_dim": 128, "groups": 8}
GDN = {"key_heads": 16, "value_heads": 32, "key_head_dim": 128, "value_head_dim": 128}


def _job(model: dict[str, Any], parallelism: dict[str, Any], performance: dict[str, Any],
         nodes: int = 2):
    return job_from_document({
        "model": {"d_model": 2048, "heads": 16, "kv_heads": 4, "head_dim": 128, "ffn": 6144,
                  "vocab": 32000, "norm": "rmsnorm", **model},
        "batch": {"global_seqs": 64, "seq_len": 4096, "micro_seqs": 1},
        "parallelism": parallelism,
        "performance": {"precision": "bf16", "stack": "megatron-core", **performance},
        "hardware": {"system": "DGX-H100", "nodes": nodes}}, "test")


def _predict(spec):
    return predict_job(spec, load_calibration("default")).prediction


LAYOUTS = [
    ({"tp": 2, "pp": 2, "dp": 4, "sequence_parallel": True}, {"checkpointing": "full"}),
    ({"tp": 1, "pp": 4, "vpp": 2, "dp": 4}, {"checkpointing": "selective",
                                            "recompute_modules": ["core_attn", "mlp"]}),
    ({"tp": 4, "pp": 1, "dp": 4, "sequence_parallel": True, "sharding": "zero1"},
     {"checkpointing": "none"}),
]


@pytest.mark.parametrize("parallelism, performance", LAYOUTS)
def test_attention_then_mlp_layers_are_a_dense_transformer(parallelism, performance):
    transformer = _predict(_job({"layers": 8}, parallelism, performance))
    hybrid = _predict(_job({"layers": 16, "hybrid_pattern": "*-" * 8}, parallelism,
                           performance))
    assert set(hybrid.breakdown_s) == set(transformer.breakdown_s) | {
        "compute_ssm_gemm", "compute_ssm_scan"}
    for term, seconds in transformer.breakdown_s.items():
        assert hybrid.breakdown_s[term] == pytest.approx(seconds, rel=1e-9, abs=1e-12), term
    assert hybrid.step_time_s == pytest.approx(transformer.step_time_s, rel=1e-9)
    for component, transformer_bytes in transformer.memory_breakdown_bytes.items():
        hybrid_bytes = hybrid.memory_breakdown_bytes[component]
        if component == "activations" and performance["checkpointing"] == "full":
            # full recompute checkpoints each layer: two inputs per block, not one
            assert hybrid_bytes[0] > transformer_bytes[0]
            continue
        assert hybrid_bytes == pytest.approx(transformer_bytes, rel=1e-9), component


def test_attention_then_moe_layers_are_an_moe_transformer():
    moe = {"experts": 16, "top_k": 2, "expert_ffn": 1024, "shared_experts": 1}
    parallelism = {"tp": 1, "pp": 2, "dp": 8, "ep": 4}
    performance = {"checkpointing": "selective", "recompute_modules": ["moe_act"]}
    transformer = _predict(_job({"layers": 6, "moe": moe}, parallelism, performance))
    hybrid = _predict(_job({"layers": 12, "hybrid_pattern": "*E" * 6, "moe": moe},
                           parallelism, performance))
    for term, seconds in transformer.breakdown_s.items():
        assert hybrid.breakdown_s[term] == pytest.approx(seconds, rel=1e-9, abs=1e-12), term
    assert hybrid.memory_bytes == pytest.approx(transformer.memory_bytes, rel=1e-9)


@pytest.mark.parametrize("parallelism", [{"tp": 1, "pp": 2, "dp": 8, "ep": 4},
                                         {"tp": 2, "pp": 1, "dp": 8, "ep": 8,
                                          "sequence_parallel": True}])
def test_an_attention_then_moe_mtp_depth_is_a_transformer_mtp_module(parallelism):
    """Megatron-Core builds a hybrid model's MTP depth as MultiTokenPredictionLayer with a
    HybridStack of its pattern (multi_token_prediction.py @ d98e8a64dd): the same eh_proj,
    enorm/hnorm/final_layernorm, extra LM head and loss as a GPT MTP module, whose block is
    an attention + MoE block like the transformer's last. So '*E' x 6 with two '*E' depths
    must cost exactly what the MoE transformer with two MTP modules costs: every time term,
    the memory, the hardware FLOPs; and adding the depths adds time and memory."""
    moe = {"experts": 16, "top_k": 2, "expert_ffn": 1024, "shared_experts": 1}
    performance = {"checkpointing": "selective", "recompute_modules": ["moe_act"]}
    transformer = _predict(_job({"layers": 6, "moe": moe, "mtp_layers": 2}, parallelism,
                                performance))
    hybrid = _predict(_job({"layers": 12, "hybrid_pattern": "*E" * 6, "moe": moe,
                            "mtp_layers": 2, "mtp_pattern": "*E"}, parallelism, performance))
    for term, seconds in transformer.breakdown_s.items():
        assert hybrid.breakdown_s[term] == pytest.approx(seconds, rel=1e-9, abs=1e-12), term
    assert hybrid.step_time_s == pytest.approx(transformer.step_time_s, rel=1e-9)
    for component, transformer_bytes in transformer.memory_breakdown_bytes.items():
        assert hybrid.memory_breakdown_bytes[component] == pytest.approx(
            transformer_bytes, rel=1e-9), component
    assert hybrid.hfu == pytest.approx(transformer.hfu, rel=1e-9)
    without = _predict(_job({"layers": 12, "hybrid_pattern": "*E" * 6, "moe": moe},
                            parallelism, performance))
    assert hybrid.step_time_s > without.step_time_s
    assert hybrid.memory_bytes > without.memory_bytes


def test_mtp_depth_layers_sit_on_the_last_pipeline_rank():
    """Megatron-Core's hybrid model builds its MTP block on the last pipeline stage
    (hybrid_model.py mtp_process, mtp_on_this_rank): two 'M*' depths add 2 Mamba and 2
    attention layers to the last rank's counts and none to the first's."""
    geometry = {"layers": 16, "hybrid_pattern": "MM*-" * 4, "mamba": MAMBA}
    parallelism = {"tp": 1, "pp": 2, "vpp": 2, "dp": 8}
    plain = _job(geometry, parallelism, {})
    spec = _job(geometry | {"mtp_layers": 2, "mtp_pattern": "M*"}, parallelism, {})
    for stage, added in (("first", {}), ("last", {"M": 2, "*": 2})):
        before = stage_hybrid_counts(plain.workload.geometry, plain.plan, stage)
        after = stage_hybrid_counts(spec.workload.geometry, spec.plan, stage)
        assert {s.value: int(after[s][0] - before[s][0]) for s in after} == {
            "M": 0, "G": 0, "*": 0, "-": 0, "E": 0} | added


def test_stage_counts_cut_the_pattern_into_chunks():
    """pp = 2, vpp = 2 over 'MM*-' x 4 (16 layers): chunks of 4, rank 0 holds chunks 0 and
    2 (layers 0-3, 8-11), the last rank chunks 1 and 3."""
    spec = _job({"layers": 16, "hybrid_pattern": "MM*-" * 4, "mamba": MAMBA},
                {"tp": 1, "pp": 2, "vpp": 2, "dp": 8}, {})
    first = stage_hybrid_counts(spec.workload.geometry, spec.plan, "first")
    last = stage_hybrid_counts(spec.workload.geometry, spec.plan, "last")
    assert {symbol.value: int(count[0]) for symbol, count in first.items()} == {
        "M": 4, "G": 0, "*": 2, "-": 2, "E": 0}
    for symbol in first:
        assert first[symbol][0] + last[symbol][0] == "MM*-MM*-MM*-MM*-".count(symbol.value)


def test_mamba_layer_activations_by_hand():
    """tp 2 with sequence parallelism, micro-batch 1 of 4096 tokens, bf16: norm input and
    in_proj input 2·2·d / tp per token, then z, x, B, C, dt (2·d_inner + 2·G·N + H), the
    pre-gate scan output and the gated norm's input (d_inner each) in bf16, and the
    out_proj input (d_inner), all over tp."""
    spec = _job({"layers": 2, "hybrid_pattern": "M-", "mamba": MAMBA},
                {"tp": 2, "pp": 1, "dp": 8, "sequence_parallel": True}, {})
    tokens, d, inner = 4096, 2048, 64 * 64
    in_proj = 2 * inner + 2 * 8 * 128 + 64
    expected = (2 * 2 * tokens * d / 2
                + tokens * (ACTIVATION_BYTES * (in_proj + 2 * inner) + 2 * inner) / 2)
    assert mamba_activation_bytes(spec.workload, spec.plan)[0] == pytest.approx(expected)


def test_ssd_scan_is_its_memory_traffic():
    """The scan is memory-bound on H100 (about 30 FLOP/B against a balance near 300): its
    forward is five launches plus the bytes its kernels move over the HBM bandwidth."""
    spec = _job({"layers": 2, "hybrid_pattern": "M-", "mamba": MAMBA},
                {"tp": 1, "pp": 1, "dp": 16}, {})
    machine = machine_for(cluster_for(spec), spec.workload.precision)
    tokens, inner, channels, groups, heads = 4096, 64 * 64, 64 * 64 + 2 * 8 * 128, 8, 64
    forward_bytes = tokens * (2 * channels * ACTIVATION_BYTES
                              + 4 * heads * 64 * 128 / 128 * FP32_BYTES
                              + 2 * groups * 128 * FP32_BYTES
                              + 2 * inner * ACTIVATION_BYTES)
    forward, backward = ssd_scan_s(machine, spec.workload, spec.plan)
    latency = machine.gemm_params.kernel_latency_s
    # at the streaming kernels' HBM efficiency (kernels.memory_bound_time_s), one launch each
    streamed = memory_bound_time_s(forward_bytes, machine.hbm_bw_bytes_per_s,
                                   kernel_latency_s=0.0)
    assert forward[0] == pytest.approx(SSD_FORWARD_KERNELS * latency + streamed)
    assert streamed > 0.9 * forward_bytes / machine.hbm_bw_bytes_per_s  # near the bandwidth
    assert backward[0] > 2 * forward[0]


def test_nemotron_3_nano_example_predicts_with_mamba_terms():
    prediction = _predict(load_job_spec(EXAMPLE, []))
    breakdown = prediction.breakdown_s
    assert breakdown["compute_ssm_gemm"][0] > 0 and breakdown["compute_ssm_scan"][0] > 0
    assert breakdown["compute_experts"][0] > 0 and breakdown["compute_attention_core"][0] > 0
    assert bool(prediction.feasible[0])


def test_hybrid_models_need_a_stack_that_builds_them():
    with pytest.raises(MosaicInputError, match="does not build hybrid"):
        _job({"layers": 2, "hybrid_pattern": "M-", "mamba": MAMBA},
             {"tp": 1, "pp": 1, "dp": 16}, {"stack": "torchtitan"})


def test_tp_must_divide_the_mamba_heads_and_groups():
    spec = _job({"layers": 2, "hybrid_pattern": "M-", "mamba": MAMBA, "heads": 16,
                 "kv_heads": 16}, {"tp": 16, "pp": 1, "dp": 1}, {})
    with pytest.raises(MosaicInputError, match=r"mamba\.groups=8"):
        _predict(spec)


def test_megatron_export_writes_the_pattern_in_virtual_stage_segments():
    spec = _job({"layers": 16, "hybrid_pattern": "MM*-" * 4, "mamba": MAMBA},
                {"tp": 1, "pp": 2, "vpp": 2, "dp": 8}, {})
    text = export(spec_from_job(spec, "test"), "megatron").text
    assert "--hybrid-layer-pattern 'MM*-|MM*-|MM*-|MM*-'" in text
    assert "--mamba-num-heads 64" in text and "--moe-layer-freq" not in text
    assert "--num-virtual-stages-per-pipeline-rank" not in text
    with pytest.raises(MosaicInputError, match="no torchtitan model"):
        export(spec_from_job(spec, "test"), "torchtitan")


def test_exports_write_the_mtp_depths_of_a_hybrid_model():
    """Megatron-LM's unified pattern appends one '/'-separated copy of the MTP pattern per
    depth (hybrid_layer_allocation.py parse_hybrid_pattern @ d98e8a64dd); Megatron-Bridge's
    HybridModelProvider takes mtp_hybrid_override_pattern and appends it itself
    (models/hybrid/hybrid_provider.py @ 067f987df). Without them no MTP block is built."""
    spec = _job({"layers": 16, "hybrid_pattern": "MM*-" * 4, "mamba": MAMBA,
                 "mtp_layers": 2, "mtp_pattern": "*-"}, {"tp": 1, "pp": 2, "dp": 8}, {})
    megatron = export(spec_from_job(spec, "test"), "megatron").text
    assert "--hybrid-layer-pattern 'MM*-MM*-|MM*-MM*-/*-/*-'" in megatron
    assert "--mtp-num-layers 2" in megatron
    nemo = export(spec_from_job(spec, "test"), "nemo").text
    assert "mtp_hybrid_override_pattern" in nemo and "'*-'" in nemo


def test_a_hybrid_layer_split_sums_to_the_model():
    spec = _job({"layers": 16, "hybrid_pattern": "MM*-" * 4, "mamba": MAMBA},
                {"tp": 1, "pp": 1, "dp": 16}, {})
    counts = stage_hybrid_counts(spec.workload.geometry, spec.plan, "first")
    assert sum(int(np.asarray(c)[0]) for c in counts.values()) == 16


def test_the_heaviest_rank_of_a_hybrid_pipeline_is_found_wherever_it_is():
    """pp = 4 over 16 layers: the four MoE layers on rank 1 or on rank 2 pace the step the
    same (any rank is a candidate, not only the first, rank 1 and the last); rank 1 keeps
    one more micro-batch in flight (1F1B: pp - rank), so its memory peak is higher."""
    moe = {"experts": 64, "top_k": 8, "expert_ffn": 4096}
    layout = {"tp": 1, "pp": 4, "dp": 4, "ep": 4}
    on_rank_1 = _predict(_job({"layers": 16, "hybrid_pattern": "MMMMEEEEMMMMMMMM",
                               "mamba": MAMBA, "moe": moe}, layout, {}))
    on_rank_2 = _predict(_job({"layers": 16, "hybrid_pattern": "MMMMMMMMEEEEMMMM",
                               "mamba": MAMBA, "moe": moe}, layout, {}))
    assert on_rank_2.breakdown_s["compute_experts"][0] > 0
    assert on_rank_2.step_time_s[0] == pytest.approx(on_rank_1.step_time_s[0], rel=1e-9)
    assert on_rank_1.memory_bytes[0] > on_rank_2.memory_bytes[0]


def test_mamba_context_parallelism_costs_its_all_to_alls_and_its_rules():
    """MambaContextParallel moves z, x, B, C, dt to head-parallel and the output back, both
    ways in each pass; cp must split the TP rank's heads."""
    model = {"layers": 2, "hybrid_pattern": "M-", "mamba": MAMBA}
    one = _predict(_job(model, {"tp": 1, "pp": 1, "cp": 1, "dp": 16}, {}))
    two = _predict(_job(model, {"tp": 1, "pp": 1, "cp": 2, "dp": 8}, {}))
    assert "cp_send_recv" not in one.breakdown_s or one.breakdown_s["cp_send_recv"][0] == 0
    assert two.breakdown_s["cp_send_recv"][0] > 0
    narrow = {**model, "mamba": {**MAMBA, "heads": 24}}
    with pytest.raises(MosaicInputError, match=r"tp·cp=2·8 must divide mamba\.heads=24"):
        _predict(_job(narrow, {"tp": 2, "pp": 1, "cp": 8, "dp": 1}, {}))


def test_ep_overlap_is_refused_for_a_hybrid_model():
    with pytest.raises(MosaicInputError, match="combined 1F1B"):
        _job({"layers": 2, "hybrid_pattern": "*E",
              "moe": {"experts": 16, "top_k": 2, "expert_ffn": 1024}},
             {"tp": 1, "pp": 1, "dp": 16, "ep": 8, "ep_overlap": True}, {})


def test_gated_deltanet_layer_activations_by_hand():
    """tp 2 with sequence parallelism, 4096 tokens, bf16, Qwen3-Next's mixer: norm input and
    in_proj input 2·2·d / tp per token, then the projection's output (q, k, v, z: 2·2048 +
    2·4096, beta and alpha: 2·32), the convolution's output (q, k, v: 2·2048 + 4096), q and k
    repeated to the 32 value heads (2·4096), the C×C block (32·64), the rule's output (4096,
    the output norm's input) and the output norm's output (4096, which the gate multiply
    y * silu(z) keeps for z's gradient: Megatron-Core gated_delta_net.py _apply_gated_norm
    @ 0d8e0714) in bf16 and the out_proj input (4096), all over tp."""
    spec = _job({"layers": 2, "hybrid_pattern": "G-", "gdn": GDN},
                {"tp": 2, "pp": 1, "dp": 8, "sequence_parallel": True}, {})
    tokens, d = 4096, 2048
    saved = ((2 * 2048 + 2 * 4096 + 2 * 32) + (2 * 2048 + 4096) + 2 * 4096 + 32 * 64
             + 4096 + 4096)
    expected = 2 * 2 * tokens * d / 2 + tokens * (ACTIVATION_BYTES * saved + 2 * 4096) / 2
    assert gdn_activation_bytes(spec.workload, spec.plan)[0] == pytest.approx(expected)


def test_gated_deltanet_layer_is_its_projections_and_its_delta_rule():
    """The mixer's GEMM time is the in_proj (d -> 12352 columns: q, k, v, z, beta, alpha)
    and out_proj (4096 -> d) GEMMs, forward and backward; its delta rule is memory-bound on
    H100 (about 40 FLOP/B): eight launches plus the forward's bytes over the HBM bandwidth."""
    spec = _job({"layers": 2, "hybrid_pattern": "G-", "gdn": GDN},
                {"tp": 1, "pp": 1, "dp": 16}, {})
    machine = machine_for(cluster_for(spec), spec.workload.precision)
    tokens = np.full(1, 4096.0)
    times = gdn_layer_times(machine, spec.workload, spec.plan)
    gemms = (gemm_s(machine, spec.workload, tokens, np.full(1, 12352.0), 2048)
             + gemm_s(machine, spec.workload, tokens, 2048, np.full(1, 4096.0)))
    assert times.ssm_gemm[0] == pytest.approx(fwd_bwd_s(gemms)[0])
    # k read thrice, q once, w and u, corrected values written and read, v and the output:
    # 6 streams of 32 heads x 128 on each side; the C x C block: fp32 written and read,
    # bf16 written and read; the bf16 chunk states (32 x 128 x 128 per 64 tokens), twice
    forward_bytes = tokens[0] * (12 * 4096 * ACTIVATION_BYTES + 32 * 64 * (4 + 4 + 2 + 2)
                                 + 2 * 32 * 128 * 128 / 64 * ACTIVATION_BYTES)
    forward, backward = gdn_delta_rule_s(machine, spec.workload, spec.plan)
    latency = machine.gemm_params.kernel_latency_s
    streamed = memory_bound_time_s(forward_bytes, machine.hbm_bw_bytes_per_s,
                                   kernel_latency_s=0.0)
    assert forward[0] == pytest.approx(GDN_FORWARD_KERNELS * latency + streamed)
    assert times.ssm_scan[0] == pytest.approx(forward[0] + backward[0])
    assert backward[0] > 2 * forward[0]


def test_qwen3_next_example_predicts_with_its_mixer_terms():
    prediction = _predict(load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml", []))
    breakdown = prediction.breakdown_s
    assert breakdown["compute_ssm_gemm"][0] > 0 and breakdown["compute_ssm_scan"][0] > 0
    assert breakdown["compute_experts"][0] > 0 and breakdown["compute_attention_core"][0] > 0
    assert bool(prediction.feasible[0])


def test_gated_deltanet_heads_split_over_tp_and_cp():
    """GatedDeltaNet divides its key and value heads by tp·cp, and context parallelism costs
    its two all-to-alls each way."""
    model = {"layers": 2, "hybrid_pattern": "G-", "gdn": GDN}
    one = _predict(_job(model, {"tp": 1, "pp": 1, "cp": 1, "dp": 16}, {}))
    two = _predict(_job(model, {"tp": 1, "pp": 1, "cp": 2, "dp": 8}, {}))
    assert "cp_send_recv" not in one.breakdown_s or one.breakdown_s["cp_send_recv"][0] == 0
    assert two.breakdown_s["cp_send_recv"][0] > 0
    with pytest.raises(MosaicInputError, match=r"tp·cp=4·8 must divide gdn\.key_heads=16"):
        _predict(_job({**model, "heads": 32}, {"tp": 4, "pp": 1, "cp": 8, "dp": 1}, {},
                      nodes=4))


def test_qwen3_next_exports():
    """Megatron: the hybrid stack's 'G' layers with the linear_* flags and the output gate;
    Megatron-Bridge: its Qwen3-Next GPT form, gated DeltaNet on three of every four blocks."""
    spec = spec_from_job(load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml", []), "test")
    megatron = export(spec, "megatron").text
    for flag in ("--linear-num-key-heads 16", "--linear-num-value-heads 32",
                 "--linear-key-head-dim 128", "--linear-value-head-dim 128",
                 "--linear-conv-kernel-dim 4", "--attention-output-gate"):
        assert flag in megatron, flag
    nemo = export(spec, "nemo").text
    assert "experimental_attention_variant: gated_delta_net" in nemo
    assert "linear_attention_freq: [1, 1, 1, 0" in nemo.replace("\n", " ") or \
        "- 1\n    - 1\n    - 1\n    - 0" in nemo
    assert "num_layers: 48" in nemo and "hybrid_override_pattern" not in nemo


def test_nemo_export_writes_the_whole_pattern_and_flags_virtual_stages():
    """Megatron-Bridge's MambaModelProvider takes the pattern without '|' (Megatron-Core
    before core_v0.17 refuses the separators) and asserts no virtual pipeline; the Megatron
    export's '|' segments carry an uneven split, so it writes no by-hand advice."""
    model = {"layers": 16, "hybrid_pattern": "MM*-" * 4, "mamba": MAMBA}
    spec = spec_from_job(_job(model, {"tp": 1, "pp": 2, "vpp": 2, "dp": 8}, {}), "test")
    nemo = export(spec, "nemo")
    # the name the current releases read (no release stated: hybrid_layer_pattern, 26.04+)
    assert "hybrid_layer_pattern: MM*-MM*-MM*-MM*-" in nemo.text
    assert any("MambaModelProvider.provide asserts" in note for note in nemo.unsupported)
    uneven = _job({"layers": 14, "hybrid_pattern": "MM*-" * 3 + "MM", "mamba": MAMBA},
                  {"tp": 1, "pp": 4, "dp": 8}, {"uneven_stages": True}, nodes=4)
    assert _predict(uneven).step_time_s[0] > 0  # a layout the pipeline rules allow
    megatron = export(spec_from_job(uneven, "test"), "megatron")
    assert not any("uneven pipeline stages" in note for note in megatron.unsupported)
    assert "--hybrid-layer-pattern 'MM*-|MM*-|MM*-|MM'" in megatron.text


def test_data_parallel_traffic_follows_the_heaviest_rank_anywhere():
    """pp = 3 over 'MMMM*EEEM*MM': rank 1 holds the MoE layers, more parameters than either
    end, so the optimizer step and the gradient collectives move rank 1's."""
    from mosaic.perf.memory import heaviest_rank_parameters, rank_parameters
    moe = {"experts": 16, "top_k": 2, "expert_ffn": 4096}
    spec = _job({"layers": 12, "hybrid_pattern": "MMMM*EEEM*MM", "mamba": MAMBA, "moe": moe},
                {"tp": 1, "pp": 3, "dp": 8, "ep": 1}, {}, nodes=3)
    middle = rank_parameters(spec.workload, spec.plan, 1).total
    assert middle[0] > rank_parameters(spec.workload, spec.plan, "first").total[0]
    assert middle[0] > rank_parameters(spec.workload, spec.plan, "last").total[0]
    assert heaviest_rank_parameters(spec.workload, spec.plan).total[0] == middle[0]


def test_gated_deltanet_exports_name_what_they_leave_to_the_recipe():
    """Megatron-Bridge builds gated DeltaNet only from its Qwen3-Next recipe's layer spec and
    pipelines the GPT form's 48 blocks; Megatron-Core before NeMo 26.06 refuses CP for it."""
    job = load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml",
                        ["parallelism.pp=2", "parallelism.vpp=16", "parallelism.dp=32",
                         "parallelism.ep=32"])
    notes = export(spec_from_job(job, "test"), "nemo").unsupported
    assert any("Qwen3-Next recipe" in note for note in notes)
    assert any("does not divide the GPT form's 48 blocks" in note for note in notes)
    megatron = export(spec_from_job(job, "test"), "megatron")
    for flag in ("--rotary-base 10000000", "--rotary-percent 0.25", "--apply-layernorm-1p"):
        assert flag in megatron.text, flag
    assert any("one MTP module" in note for note in megatron.unsupported)
    with pytest.raises(MosaicInputError, match="refuses context parallelism"):
        _predict(load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml",
                               ["performance.stack_version=26.04", "parallelism.cp=2",
                                "parallelism.dp=32", "parallelism.ep=32"]))
    new = load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml",
                        ["parallelism.cp=2", "parallelism.dp=32", "parallelism.ep=32"])
    assert not any("refuses context parallelism" in note for note in new.assumptions)


def test_maxtext_builds_qwen3_next_and_nemo_names_the_release_field():
    """MaxText's qwen3_next decoder takes Qwen3-Next's cycle (full attention every fourth
    of 48 decoder layers, gdn_* dimensions); Megatron-Bridge 25.11 names the variant field
    linear_attention_type; a pattern MaxText has no decoder for is refused."""
    import yaml
    spec = spec_from_job(load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml", []), "test")
    maxtext = yaml.safe_load(export(spec, "maxtext").text)
    assert (maxtext["decoder_block"], maxtext["base_num_decoder_layers"],
            maxtext["inhomogeneous_layer_cycle_interval"], maxtext["gdn_num_value_heads"],
            maxtext["base_mlp_dim"]) == ("qwen3_next", 48, 4, 32, 512)
    old = spec_from_job(load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml", [
        "performance.stack_version=25.11", "hardware.system=GB200-NVL72",
        "hardware.nodes=16"]), "test")
    assert "linear_attention_type: gated_delta_net" in export(old, "nemo").text
    irregular = _job({"layers": 6, "hybrid_pattern": "GE*EGE", "heads": 16, "kv_heads": 2,
                      "gdn": GDN, "moe": {"experts": 16, "top_k": 2, "expert_ffn": 512}},
                     {"tp": 1, "pp": 1, "dp": 16, "ep": 8}, {})
    with pytest.raises(MosaicInputError, match="no maxtext model"):
        export(spec_from_job(irregular, "test"), "maxtext")
