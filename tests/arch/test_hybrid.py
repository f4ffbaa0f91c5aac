"""Hybrid Mamba-2 / gated DeltaNet / attention / MLP / MoE models (Nemotron-H, Nemotron 3
Nano, Qwen3-Next).

Parameter counts against the published totals and a term-by-term hand count of one Mamba-2
mixer (Megatron-Core MambaMixer's tensors); the pattern rules against Megatron-Core's
hybrid layer symbols.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mosaic.arch import count_parameters, layer_breakdown, ssd_scan_flops_per_token
from mosaic.arch.flops import (
    attention_flops_per_token,
    gdn_flops_per_token,
    mtp_block_flops_per_token,
)
from mosaic.arch.geometry import GatedDeltaNetConfig, Geometry, MambaConfig, MoEConfig
from mosaic.arch.hf_import import geometry_from_hf_config, load_hf_config
from mosaic.errors import MosaicInputError

HF = Path(__file__).resolve().parents[2] / "examples" / "hf"
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
# Megatron-Bridge v0.5.1 recipes/nemotronh/nemotronh.py nemotronh_56b_pretrain_config
H56_PATTERN = ("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
               "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")


def nano() -> Geometry:
    return load_hf_config(HF / "nemotron-3-nano-30b-a3b.json")


def test_mamba_mixer_hand_count():
    """Nemotron 3 Nano's mixer, tensor by tensor (d = 2688, 64 heads of 64, N = 128, G = 8):
    in_proj d x (z + x + B + C + dt), conv weights and bias over x, B, C, dt_bias, A_log, D,
    the gated norm's gain, out_proj."""
    d, inner, groups_state, heads = 2688, 64 * 64, 8 * 128, 64
    in_proj = d * (2 * inner + 2 * groups_state + heads)
    conv = (inner + 2 * groups_state) * (4 + 1)
    expected = in_proj + conv + 3 * heads + inner + inner * d
    assert count_parameters(nano()).mamba_per_layer == expected == 38_742_208


def test_nemotron_3_nano_published_totals():
    """Model card (huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): 31.6 B total,
    about 3.2 B active, 3.6 B active with embeddings; 23 Mamba-2, 23 MoE and 6 GQA layers."""
    geometry = nano()
    c = count_parameters(geometry)
    assert (geometry.mamba_layer_count, geometry.moe_layer_count,
            geometry.attention_layer_count, geometry.dense_layer_count) == (23, 23, 6, 0)
    assert round(c.n_total_with_embedding / 1e9, 1) == 31.6
    assert round(c.n_active_with_embedding / 1e9, 1) == 3.6
    # "about 3.2 B active": the active count with the LM head but not the input embedding
    assert round((c.n_active + c.lm_head) / 1e9, 1) == 3.2


def test_nemotron_h_56b_published_total():
    """Nemotron-H-56B (arXiv:2504.03624): 56 B parameters, 118 layers of which 54 Mamba-2,
    54 FFN and 10 attention."""
    geometry = Geometry(layers=118, d_model=8192, heads=64, kv_heads=8, head_dim=128,
                        ffn=32768, vocab=131072, glu=False, norm="rmsnorm",
                        hybrid_pattern=H56_PATTERN, mamba=MambaConfig(heads=256, state_dim=256))
    assert (geometry.mamba_layer_count, geometry.dense_layer_count,
            geometry.attention_layer_count) == (54, 54, 10)
    assert round(count_parameters(geometry).n_total_with_embedding / 1e9) == 56


def test_layer_breakdown_sums_to_total():
    geometry = nano()
    c = count_parameters(geometry)
    rows = layer_breakdown(geometry)
    assert [row.kind for row in rows[:6]] == ["mamba", "moe", "mamba", "moe", "mamba",
                                              "attention"]
    assert sum(row.total for row in rows) + c.final_norm == c.n_total
    assert sum(row.active for row in rows) + c.final_norm == c.n_active


def test_attention_and_scan_flops_count_their_own_layers():
    """Only the 6 attention layers carry attention-core FLOPs; the SSD scan per Mamba layer
    and token, forward: 2·(G·Q·N + H·(Q·P + 2·N·P)), training 3x, 23 layers."""
    geometry = nano()
    per_layer_forward = 2 * (8 * 128 * 128 + 64 * (128 * 64 + 2 * 128 * 64))
    assert ssd_scan_flops_per_token(geometry) == 3 * per_layer_forward * 23
    context = (4096 + 1) / 2
    assert attention_flops_per_token(geometry, 4096) == pytest.approx(
        3 * 2 * 32 * (128 + 128) * context * 6)


@pytest.mark.parametrize("change, message", [
    ({"hybrid_pattern": "MEMX" + NANO_PATTERN[4:]}, "unknown layer symbol"),
    ({"hybrid_pattern": NANO_PATTERN[:-1]}, "has 51 layers but model.layers is 52"),
    ({"mamba": None}, "model.mamba is required"),
    ({"moe": None}, "model.moe is required"),
    ({"moe": MoEConfig(experts=128, top_k=6, expert_ffn=1856, dense_layers=1)},
     "do not apply to a hybrid model"),
    ({"hybrid_pattern": None}, "model.mamba needs model.hybrid_pattern"),
])
def test_pattern_rules(change, message):
    fields = {name: getattr(nano(), name) for name in (
        "layers", "d_model", "heads", "kv_heads", "head_dim", "ffn", "vocab", "glu", "norm",
        "moe", "hybrid_pattern", "mamba")}
    with pytest.raises(MosaicInputError, match=message):
        Geometry(**(fields | change))


def test_hf_import_refuses_other_activations():
    config = {"model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 2,
              "hybrid_override_pattern": "M*", "num_attention_heads": 4, "mamba_num_heads": 8,
              "vocab_size": 100, "intermediate_size": 128, "mlp_hidden_act": "silu"}
    with pytest.raises(MosaicInputError, match="mlp_hidden_act 'silu' is not supported"):
        geometry_from_hf_config(config)



def qwen3_next() -> Geometry:
    return load_hf_config(HF / "qwen3-next-80b-a3b.json")


def test_gated_deltanet_mixer_hand_count():
    """Qwen3-Next's mixer, tensor by tensor (d = 2048, 16 key heads and 32 value heads of
    128): in_proj_qkvz d x (2·2048 + 2·4096) and in_proj_ba d x 2·32, conv weights over q, k,
    v (no bias), dt_bias and A_log per value head, the gated norm's gain over one head,
    out_proj 4096 x d (HF Qwen3NextGatedDeltaNet)."""
    d = 2048
    expected = (d * (2 * 2048 + 2 * 4096) + d * 2 * 32 + (2 * 2048 + 4096) * 4 + 2 * 32
                + 128 + 4096 * d)
    assert count_parameters(qwen3_next()).gdn_per_layer == expected == 33_718_464


def test_qwen3_next_80b_a3b_totals():
    """80 B total, 3 B activated (the model's name, Qwen's release): 36 gated DeltaNet and
    12 gated-attention mixers, 48 MoE layers of 512 experts (top-10) of width 512 and one
    gated shared expert. By hand: experts 48·512·3·2048·512, shared experts and gates
    48·(3·2048·512 + 2048), routers 48·512·2048, mixers 36·33,718,464 and 12·(2048·16·256·2
    (queries and their elementwise gate) + 2·2048·2·256 + 16·256·2048 + 2·256 (q/k norms)),
    two norms a layer and the final one, untied embeddings 2·151,936·2048."""
    geometry, d = qwen3_next(), 2048
    c = count_parameters(geometry)
    assert (geometry.gdn_layer_count, geometry.attention_layer_count,
            geometry.moe_layer_count) == (36, 12, 48)
    attention = d * 16 * 256 * 2 + 2 * d * 2 * 256 + 16 * 256 * d + 2 * 256
    by_hand = (48 * 512 * 3 * d * 512 + 48 * (3 * d * 512 + d) + 48 * 512 * d
               + 36 * 33_718_464 + 12 * attention + 97 * d + 2 * 151_936 * d)
    assert c.n_total_with_embedding == by_hand
    assert round(c.n_total_with_embedding / 1e9) == 80
    assert round(c.n_active / 1e9) == 3


def test_delta_rule_flops_count_their_own_layers():
    """Per value head and token: 3·d_k·d_v + 3·C·d_k + 2·C·d_v + C²/3 multiply-adds forward
    (d_k = d_v = 128, C = 64), times 32 heads, 2 FLOPs each, 3 for training, 36 layers."""
    per_head = 3 * 128 * 128 + 3 * 64 * 128 + 2 * 64 * 128 + 64 * 64 / 3
    assert gdn_flops_per_token(qwen3_next()) == pytest.approx(3 * 2 * 32 * per_head * 36)
    assert gdn_flops_per_token(nano()) == 0.0


@pytest.mark.parametrize("change, pattern", [
    ({}, ("GE" * 3 + "*E") * 12),
    ({"full_attention_interval": 2}, ("GE*E") * 24),
    ({"layer_types": ["full_attention"] + ["linear_attention"] * 47},
     "*E" + "GE" * 47),
    ({"mlp_only_layers": [0, 1]}, "G-G-GE*E" + ("GE" * 3 + "*E") * 11),
])
def test_qwen3_next_import_places_mixers_and_ffns(change, pattern):
    config = json.loads((HF / "qwen3-next-80b-a3b.json").read_text()) | change
    geometry = geometry_from_hf_config(config)
    assert geometry.hybrid_pattern == pattern and geometry.attention_output_gate
    assert geometry.qk_norm and geometry.moe.shared_expert_gate


def test_qwen3_next_import_refuses_bad_layer_types():
    config = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    with pytest.raises(MosaicInputError, match="layer_types must list 48 entries"):
        geometry_from_hf_config(config | {"layer_types": ["linear_attention"] * 3})


def test_gated_deltanet_rules():
    geometry = qwen3_next()
    fields = {name: getattr(geometry, name) for name in (
        "layers", "d_model", "heads", "kv_heads", "head_dim", "ffn", "vocab", "glu", "norm",
        "moe", "hybrid_pattern", "gdn", "attention_output_gate")}
    with pytest.raises(MosaicInputError, match=r"model\.gdn is required"):
        Geometry(**(fields | {"gdn": None}))
    with pytest.raises(MosaicInputError, match=r"must divide model\.gdn\.value_heads"):
        Geometry(**(fields | {"gdn": GatedDeltaNetConfig(key_heads=12, value_heads=32)}))
    with pytest.raises(MosaicInputError, match="two forms of one gate"):
        Geometry(**(fields | {"gated_attention": True}))


def test_qwen3_next_import_defaults_and_bad_fields():
    """HF Qwen3NextConfig's head_dim defaults to 256 (not d/heads); num_experts 0 is a dense
    model (MLP layers of intermediate_size); mlp_only_layers must list layer indices."""
    config = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    without_head_dim = {k: v for k, v in config.items() if k != "head_dim"}
    assert geometry_from_hf_config(without_head_dim).head_dim == 256
    dense = geometry_from_hf_config(config | {"num_experts": 0})
    assert dense.moe is None and dense.hybrid_pattern == ("G-" * 3 + "*-") * 12
    with pytest.raises(MosaicInputError, match="mlp_only_layers must be a list"):
        geometry_from_hf_config(config | {"mlp_only_layers": 3})


def test_a_qwen3_next_config_without_linear_attention_is_a_transformer():
    """full_attention_interval 1: every layer gated full attention with an MoE FFN, an
    ordinary transformer (the same parameters as the hybrid spelling of it)."""
    config = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    geometry = geometry_from_hf_config(config | {"full_attention_interval": 1})
    assert not geometry.is_hybrid and geometry.layers == 48 and geometry.attention_output_gate
    with pytest.raises(MosaicInputError, match=r"mlp_only_layers names layer\(s\) \[100\] "
                       r"past the last of num_hidden_layers=48"):
        geometry_from_hf_config(config | {"mlp_only_layers": [100]})


def test_rope_settings_are_read_flat_or_nested():
    """HF configs state rope_theta at the top level, or (transformers >= 5) inside
    rope_parameters; Qwen3-Next rotates a quarter of each head by default."""
    config = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    assert (qwen3_next().rope_base, qwen3_next().rope_fraction) == (1e7, 0.25)
    nested = {k: v for k, v in config.items() if k not in ("rope_theta",
                                                            "partial_rotary_factor")}
    nested["rope_parameters"] = {"rope_theta": 5e6, "partial_rotary_factor": 0.5}
    geometry = geometry_from_hf_config(nested)
    assert (geometry.rope_base, geometry.rope_fraction) == (5e6, 0.5)


def test_latent_moe_is_refused_not_miscounted():
    """NemotronHConfig.moe_latent_size (Nemotron 3 Super/Ultra) runs the experts at a latent
    width: counting them at d_model would overstate the total (about 2.3x for a Nano-sized
    config), so the import refuses it."""
    config = json.loads((HF / "nemotron-3-nano-30b-a3b.json").read_text())
    with pytest.raises(MosaicInputError, match=r"moe_latent_size=1024 \(LatentMoE\) is not"):
        geometry_from_hf_config(config | {"moe_latent_size": 1024})


def _nano_fields() -> dict:
    return {name: getattr(nano(), name) for name in (
        "layers", "d_model", "heads", "kv_heads", "head_dim", "ffn", "vocab", "glu", "norm",
        "moe", "hybrid_pattern", "mamba")}


def test_one_attention_and_moe_mtp_depth_by_hand():
    """Nemotron 3.5 Lightning's MTP depth '*E' (Megatron-Bridge recipes/nemotronh/h100/
    nemotron_3_nano.py: mtp_hybrid_override_pattern '*E'), tensor by tensor on the Nano
    geometry (d = 2688, 32 heads / 2 KV of 128, 128 experts of 1856 + a 3712 shared expert,
    squared ReLU, RMSNorm): the attention layer (QKV d x (32 + 2·2)·128, out 32·128 x d,
    its norm d), the MoE layer (router 128 x d, experts 128·2·d·1856, shared 2·d·3712, its
    norm d), eh_proj 2d x d, enorm, hnorm and final_layernorm d each; two depths twice."""
    d = 2688
    attention = d * (32 + 2 * 2) * 128 + 32 * 128 * d + d
    moe = 128 * d + 128 * 2 * d * 1856 + 2 * d * 3712 + d
    depth = attention + moe + 2 * d * d + 3 * d
    geometry = Geometry(**_nano_fields(), mtp_layers=2, mtp_pattern="*E")
    counts = count_parameters(geometry)
    assert counts.mtp == 2 * depth
    # the MTP depths stay out of the totals, as a transformer's MTP modules do
    assert counts.n_total == count_parameters(nano()).n_total


def test_hybrid_mtp_flops_are_its_layers_and_projection():
    """Per token and depth: 6 per active parameter (the MoE layer's 6 of 128 experts) plus
    one attention layer's causal core; zero without MTP."""
    geometry = Geometry(**_nano_fields(), mtp_layers=2, mtp_pattern="*E")
    counts = count_parameters(geometry)
    d, seq = 2688, 4096
    skipped = 2 * (128 - 6) * 2 * d * 1856
    core = 3 * 2 * 32 * (128 + 128) * (seq + 1) / 2
    assert mtp_block_flops_per_token(geometry, counts, seq) == pytest.approx(
        6 * (counts.mtp - skipped) + 2 * core)
    assert mtp_block_flops_per_token(nano(), count_parameters(nano()), seq) == 0.0


@pytest.mark.parametrize("change, message", [
    ({"mtp_layers": 2}, "needs model.mtp_pattern"),
    ({"mtp_pattern": "*E"}, "model.mtp_pattern needs model.mtp_layers > 0"),
    ({"mtp_layers": 1, "mtp_pattern": "*X"}, "model.mtp_pattern '\\*X': allowed"),
    ({"mtp_layers": 1, "mtp_pattern": "*G"}, "'G' layers but model.gdn is not given"),
    ({"mtp_layers": 1, "mtp_pattern": "*E", "hybrid_pattern": None, "mamba": None},
     "model.mtp_pattern needs model.hybrid_pattern"),
])
def test_mtp_pattern_rules(change, message):
    with pytest.raises(MosaicInputError, match=message):
        Geometry(**(_nano_fields() | change))
