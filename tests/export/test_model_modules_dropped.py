"""Model modules a target's decoder or model family builds otherwise are said, not dropped.

By hand from the targets' sources (h31 review, December 2026):

- MaxText @ e591f30: base.yml's ``attention_bias`` reaches ``use_bias_in_projections``
  (the Q, K, V and output projections together, ``layers/attentions.py``) only in the
  gpt_oss, olmo3 and qwen2 decoders (``models/gpt_oss.py`` l. 113, ``olmo3.py`` l. 123,
  ``qwen2.py`` l. 94); llama2, mixtral, qwen3, qwen3_moe and deepseek build their attention
  without it, i.e. bias-free.
- torchtitan v0.2.2: llama3, llama4, qwen3 and deepseek_v3 build every linear with
  ``bias=False`` and a SiLU-gated FFN (``w2(F.silu(w1(x)) * w3(x))``, e.g.
  ``models/qwen3/model/model.py`` l. 184-189, 326-331) and plain RMSNorm gains; gpt_oss
  biases q, k, v and o (``models/gpt_oss/model/model.py`` l. 177-192).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from mosaic.cli.export_cmd import load_export_spec
from mosaic.export import export

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DENSE_JOB = {
    "model": {
        "layers": 24,
        "d_model": 2048,
        "ffn": 8192,
        "heads": 16,
        "kv_heads": 4,
        "head_dim": 128,
        "vocab": 65536,
        "norm": "rmsnorm",
        "activation": "swiglu",
        "tied_embeddings": False,
        "mtp_layers": 0,
    },
    "parallelism": {"tp": 2, "pp": 2},
    "batch": {"global_seqs": 256, "micro_seqs": 1, "seq_len": 4096},
    "performance": {"stack": "megatron-core", "precision": "bf16"},
    "hardware": {"system": "DGX-H100", "nodes": 2},
}


def _dense(tmp_path: Path, *overrides: str):
    """A dense GQA model (the job above) with ``overrides``."""
    job = tmp_path / "dense.yaml"
    job.write_text(yaml.safe_dump(DENSE_JOB))
    return load_export_spec(job, list(overrides), None)


def _gpt_oss(*overrides: str):
    return load_export_spec(
        EXAMPLES / "appendix_e.yaml",
        ["parallelism.etp=1", "parallelism.pp=8", *overrides],
        EXAMPLES / "hf" / "gpt-oss-20b.json",
    )


def test_maxtext_says_attention_biases_its_decoder_does_not_build(tmp_path):
    """A Qwen2-style model (q/k/v biases, no QK-norm) goes to the llama2 decoder and a
    QK-normed one to qwen3: neither reads attention_bias, so the biases are said and the
    file does not claim them."""
    for overrides, block in (
        (["model.qkv_bias=true"], "llama2"),
        (["model.qkv_bias=true", "model.qk_norm=true"], "qwen3"),
        (["model.output_bias=true"], "llama2"),
    ):
        result = export(_dense(tmp_path, *overrides), "maxtext")
        document = yaml.safe_load(result.text)
        assert document["decoder_block"] == block
        assert document["attention_bias"] is False, overrides
        assert any(
            note.startswith("attention biases") and f"{block} decoder" in note
            for note in result.unsupported
        ), (overrides, result.unsupported)
    plain = export(_dense(tmp_path), "maxtext")
    assert not any(note.startswith("attention biases") for note in plain.unsupported)


def test_maxtext_gpt_oss_biases_all_four_attention_projections_together():
    """gpt-oss has q/k/v and output biases, which attention_bias builds (no note); a model
    with one of the two gets all four, said."""
    both = export(_gpt_oss(), "maxtext")
    assert yaml.safe_load(both.text)["decoder_block"] == "gpt_oss"
    assert yaml.safe_load(both.text)["attention_bias"] is True
    assert not any("attention bias" in note for note in both.unsupported)
    qkv_only = export(_gpt_oss("model.output_bias=false"), "maxtext")
    assert yaml.safe_load(qkv_only.text)["attention_bias"] is True
    assert any("attention_bias" in note and "output" in note for note in qkv_only.unsupported), (
        qkv_only.unsupported
    )


def test_torchtitan_says_biases_activations_and_norm_gains_its_families_lack(tmp_path):
    """torchtitan's llama3/qwen3 families are bias-free SwiGLU models with plain RMSNorm
    gains: a biased, GeGLU, ReLU or zero-centred model is said to need another flavor."""
    plain = export(_dense(tmp_path), "torchtitan").unsupported
    cases = {
        "model.qkv_bias=true": "biases on the Q, K and V projections",
        "model.activation=geglu": "FFN activation geglu",
        "model.activation=relu": "FFN activation relu",
        "model.zero_centered_norm=true": "zero-centred norm gains",
    }
    for override, start in cases.items():
        notes = export(_dense(tmp_path, override), "torchtitan").unsupported
        assert any(note.startswith(start) for note in notes), (override, notes)
        assert not any(note.startswith(start) for note in plain)
    # gpt-oss's family has its attention biases and (clamped) SwiGLU: not said
    oss = export(_gpt_oss(), "torchtitan").unsupported
    assert not any(
        note.startswith(("biases on", "FFN activation", "torchtitan's gpt_oss")) for note in oss
    ), oss
    # ... and builds them for a model without: said
    unbiased = export(_gpt_oss("model.qkv_bias=false"), "torchtitan").unsupported
    assert any(note.startswith("torchtitan's gpt_oss family biases") for note in unbiased), unbiased


def test_maxtext_partial_rotary_factor_only_where_its_decoder_reads_it(tmp_path):
    """base.yml's partial_rotary_factor reaches the rotary embedding only in the qwen3_next
    (and qwen3_5) decoders (``layers/attentions.py`` ``is_qwen3_hybrid`` @ e591f30); the
    llama2 decoder's attention rotates whole heads. A half-rotary dense model is said, and
    Qwen3-Next keeps its quarter share (HF ``partial_rotary_factor`` 0.25)."""
    half = export(_dense(tmp_path, "model.rope_fraction=0.5"), "maxtext")
    document = yaml.safe_load(half.text)
    assert document["decoder_block"] == "llama2"
    assert "partial_rotary_factor" not in document
    assert any(note.startswith("RoPE on 0.5 of each head") for note in half.unsupported), (
        half.unsupported
    )
    nxt = export(load_export_spec(EXAMPLES / "qwen3_next_80b_b200.yaml", [], None), "maxtext")
    document = yaml.safe_load(nxt.text)
    assert document["decoder_block"] == "qwen3_next"
    assert document["partial_rotary_factor"] == 0.25
    assert not any(note.startswith("RoPE on") for note in nxt.unsupported)


def test_maxtext_says_its_routed_experts_are_gated_whatever_the_activation(tmp_path):
    """MaxText's routed experts always hold wi_0, wi_1 and wo and compute
    act(x wi_0) * (x wi_1) (``layers/moe.py`` ``apply_ffn_activation`` @ e591f30), so a
    non-gated MoE model (GELU experts: two matrices) gets a third matrix: said; SwiGLU
    experts are not."""
    job = tmp_path / "moe.yaml"
    moe = {"experts": 8, "top_k": 2, "expert_ffn": 2048}
    job.write_text(yaml.safe_dump(DENSE_JOB | {"model": DENSE_JOB["model"] | {"moe": moe}}))
    gelu = export(load_export_spec(job, ["model.activation=gelu"], None), "maxtext")
    assert yaml.safe_load(gelu.text)["mlp_activations"] == ["gelu"]
    assert any(note.startswith("non-gated gelu experts") for note in gelu.unsupported), (
        gelu.unsupported
    )
    swiglu = export(load_export_spec(job, [], None), "maxtext")
    assert not any(note.startswith("non-gated") for note in swiglu.unsupported)


def test_qk_norms_the_gpt_oss_decoder_and_family_do_not_build_are_said():
    """MaxText passes use_qk_norm to the attention of its qwen3, qwen3_moe, qwen3_next,
    llama4, qwen2 and olmo3 decoders only (models/*.py @ e591f30), not gpt_oss; torchtitan
    v0.2.2's gpt_oss Attention has no q/k norms. An attention-sink model with QK-norm,
    exported to either, is said; gpt-oss itself (no QK-norm) is not."""
    for target in ("maxtext", "torchtitan"):
        normed = export(_gpt_oss("model.qk_norm=true"), target).unsupported
        assert any(note.startswith("QK-norm") for note in normed), (target, normed)
        assert not any(
            note.startswith("QK-norm") for note in export(_gpt_oss(), target).unsupported
        )
