"""HuggingFace config.json import against published parameter totals.

The example configs in examples/hf/ are the architecture fields of the published
config.json files (sources in docs/export.md, "Model configs"). Each test checks the
published total and an independent hand calculation written out term by term.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from mosaic.arch import count_parameters
from mosaic.arch.geometry import AttentionKind
from mosaic.arch.hf_import import (
    ModelTypeReadAsWarning,
    SlidingWindowIgnoredWarning,
    UnmodelledFieldWarning,
    geometry_from_hf_config,
    load_hf_config,
)
from mosaic.errors import MosaicInputError

HF = Path(__file__).resolve().parents[2] / "examples" / "hf"


def counts(name: str):
    return count_parameters(load_hf_config(HF / name))


def _strict_counts(config: dict):
    """The geometry and counts of ``config``, every field read or without a shape (any
    import warning fails the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        geometry = geometry_from_hf_config(config)
    return geometry, count_parameters(geometry)


def test_llama3_8b_exact():
    """Meta-Llama-3-8B: 8,030,261,248 parameters (the checkpoint's safetensors total)."""
    c = counts("llama-3-8b.json")
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024
    block = attention + 3 * 4096 * 14336 + 2 * 4096
    assert int(c.n_total_with_embedding) == 32 * block + 4096 + 2 * 128256 * 4096
    assert int(c.n_total_with_embedding) == 8_030_261_248


def test_mixtral_8x7b_exact():
    """Mixtral 8x7B (Jiang et al., 2024): 46.7 B total, 12.9 B active."""
    c = counts("mixtral-8x7b.json")
    assert int(c.n_total_with_embedding) == 46_702_792_704  # HF checkpoint total
    assert round(c.n_total_with_embedding / 1e9, 1) == 46.7
    assert round(c.n_active_with_embedding / 1e9, 1) == 12.9


def test_qwen3_30b_a3b():
    """Qwen3-30B-A3B model card: 30.5 B total, 29.9 B non-embedding, 3.3 B activated."""
    c = counts("qwen3-30b-a3b.json")
    attention = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2 * 128  # + per-head q/k RMSNorm
    moe = 128 * 3 * 2048 * 768 + 128 * 2048  # experts + router
    block = attention + moe + 2 * 2048
    assert int(c.n_total) == 48 * block + 2048
    assert int(c.n_total_with_embedding) == 30_532_122_624
    assert round(c.n_total_with_embedding / 1e9, 1) == 30.5
    assert round(c.n_total / 1e9, 1) == 29.9
    # 3.35 B with embedding and head: the card's "3.3B" truncates.
    assert int(c.n_active_with_embedding / 1e8) == 33


def test_deepseek_v3_mla_and_mtp():
    """DeepSeek-V3 (arXiv:2412.19437; README_WEIGHTS.md): 671 B main model, 36.6 B activated
    counting the 0.9 B output head; one MTP module outside the 671 B."""
    geometry = load_hf_config(HF / "deepseek-v3.json")
    assert geometry.attention is AttentionKind.MLA and geometry.mtp_layers == 1
    assert geometry.dense_layer_count == 3 and geometry.moe_layer_count == 58
    c = count_parameters(geometry)
    assert round(c.n_total_with_embedding / 1e9, 1) == 671.0
    assert round((c.n_active + c.lm_head) / 1e9, 1) == 36.6
    assert round(c.lm_head / 1e9, 1) == 0.9
    # MTP module (Sec. 2.2): a MoE block + M (d x 2d) + three RMSNorms, by hand.
    mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 \
        + 128 * 128 * 7168
    moe_block = mla + 2 * 7168 + 257 * 3 * 7168 * 2048 + 256 * 7168
    assert int(c.mtp) == moe_block + 2 * 7168 * 7168 + 3 * 7168
    # DeepSeek's README quotes 11.5 B for the module, i.e. the block without M (2·d² = 0.1 B).
    assert round(moe_block / 1e9, 1) == 11.5


def test_gpt_oss_20b():
    """gpt-oss model card (arXiv:2508.10925, Table 1): 20.91 B total, 3.61 B active
    (unembedding counted, embedding not), MLP 19.12 B, attention 0.64 B, embed+unembed
    1.16 B."""
    c = counts("gpt-oss-20b.json")
    assert round(c.n_total_with_embedding / 1e9, 2) == 20.91
    assert round((c.n_active + c.lm_head) / 1e9, 2) == 3.61
    assert round(24 * (c.experts * c.routed_expert + c.router_per_layer) / 1e9, 2) == 19.12
    assert round(24 * c.attention_per_layer / 1e9, 2) == 0.64
    assert round(c.n_embedding / 1e9, 2) == 1.16
    # biases: q,k,v,o (4096 + 2·512 + 2880) and 64 sinks per block
    assert c.attention_per_layer == 2 * 2880 * 4096 + 2 * 2880 * 512 + 4096 + 1024 + 2880 + 64


def test_gpt_oss_top_k_stated_twice_must_agree():
    """gpt-oss's config.json gives top-k as num_experts_per_tok and experts_per_token (4,
    4); an edited file where they differ was read from the first without a word."""
    config = json.loads((HF / "gpt-oss-20b.json").read_text())
    assert geometry_from_hf_config(config).moe.top_k == 4
    with pytest.raises(MosaicInputError, match=r"num_experts_per_tok \(4\) and "
                       r"experts_per_token \(2\) disagree"):
        geometry_from_hf_config({**config, "experts_per_token": 2})
    del config["num_experts_per_tok"]
    assert geometry_from_hf_config({**config, "experts_per_token": 2}).moe.top_k == 2


def test_qwen2_moe_shared_expert_gate():
    """Qwen1.5-MoE-A2.7B (Qwen blog, 2024): 14.3 B total, 2.7 B activated; q/k/v biases,
    one shared expert of width 5632 with a sigmoid gate."""
    config = {
        "model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24,
        "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
        "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": False,
    }
    c = count_parameters(geometry_from_hf_config(config))
    assert round(c.n_total_with_embedding / 1e9, 1) == 14.3
    assert round(c.n_active_with_embedding / 1e9, 1) == 2.7
    assert c.shared_experts_per_layer == 3 * 2048 * 5632 + 2048


def test_qwen_moe_dense_prefix_and_step():
    base = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 8,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 4,
            "num_experts_per_tok": 2, "vocab_size": 100}
    g = geometry_from_hf_config(base | {"mlp_only_layers": [0, 1]})
    assert (g.moe.dense_layers, g.moe.moe_every, g.moe_layer_count) == (2, 1, 6)
    g = geometry_from_hf_config(base | {"decoder_sparse_step": 2})  # blocks 1, 3, 5, 7
    assert (g.moe.dense_layers, g.moe.moe_every, g.moe_layer_count) == (1, 2, 4)
    with pytest.raises(MosaicInputError, match="cannot express"):
        geometry_from_hf_config(base | {"mlp_only_layers": [3]})
    # one MoE block (4 blocks, step 3: block 2 alone) is a dense prefix of 2
    g = geometry_from_hf_config(base | {"num_hidden_layers": 4, "decoder_sparse_step": 3})
    assert (g.moe.dense_layers, g.moe_layer_count) == (2, 1)


def test_qwen3_moe_has_no_shared_expert_and_qwen2_moe_reads_qkv_bias():
    """transformers' Qwen3MoeSparseMoeBlock has no shared expert, so the field is ignored
    (with a warning); Qwen2MoeConfig.qkv_bias=false drops the q/k/v biases: per block
    heads·head_dim + 2·kv_heads·head_dim = 4·16 + 2·2·16 = 128, 512 over 4 blocks."""
    base = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 4,
            "num_experts_per_tok": 2, "vocab_size": 100}
    with pytest.warns(UserWarning, match="Qwen3-MoE has no shared expert"):
        shared = geometry_from_hf_config(base | {"shared_expert_intermediate_size": 512})
    assert count_parameters(shared) == count_parameters(geometry_from_hf_config(base))
    qwen2 = base | {"model_type": "qwen2_moe"}
    with_bias = count_parameters(geometry_from_hf_config(qwen2)).n_total
    without = count_parameters(geometry_from_hf_config(qwen2 | {"qkv_bias": False})).n_total
    assert with_bias - without == 512


@pytest.mark.parametrize(("change", "message"), [
    ({"model_type": "bert", "architectures": ["BertForMaskedLM"]},
     "model_type 'bert' is not supported"),
    ({"hidden_size": -1}, "hidden_size must be a positive integer, got -1"),
    ({"hidden_size": None}, "missing required field 'hidden_size'"),
    ({"hidden_act": "relu"}, "hidden_act 'relu' is not supported"),
    ({"mlp_bias": True}, "mlp_bias"),
])
def test_errors_name_the_field(change, message):
    config = json.loads((HF / "llama-3-8b.json").read_text()) | change
    with pytest.raises(MosaicInputError, match=message):
        geometry_from_hf_config(config, "cfg.json")


def test_invalid_json_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(MosaicInputError, match="not valid JSON"):
        load_hf_config(path)


def test_a_config_json_of_many_megabytes_is_refused_before_it_is_read(tmp_path):
    # a fuzz case: 242 MiB of nested lists beside a valid config parsed for 20 s first
    path = tmp_path / "config.json"
    with path.open("w") as handle:
        handle.write('{"model_type": "llama", "padding": "')
        handle.truncate(17 * 2**20)
    with pytest.raises(MosaicInputError, match=r"config\.json is 17,825,792 bytes; the limit"):
        load_hf_config(path)
    # the same file under another name, read as a model file of any kind (a trial)
    from mosaic.config.model_file import load_model_file

    other = path.rename(tmp_path / "config_without_suffix")
    with pytest.raises(MosaicInputError, match=r"is 17,825,792 bytes; the limit is 16,777,216"):
        load_model_file(other)


def test_a_repeated_key_and_a_layer_index_past_the_model_are_refused(tmp_path):
    # a trial: two hidden_size values read as the last; mlp_only_layers [99] on 48 layers and
    # Llama-4 moe_layers [..., 100] dropped without a word
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096, "hidden_size": 2048}')
    with pytest.raises(MosaicInputError, match="key 'hidden_size' appears twice"):
        load_hf_config(path)
    qwen = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    with pytest.raises(MosaicInputError, match=r"mlp_only_layers names layer\(s\) \[99\] past "
                       r"the last of num_hidden_layers=48"):
        geometry_from_hf_config(qwen | {"mlp_only_layers": [99]}, "cfg.json")


def test_a_config_of_any_file_name_and_a_snapshot_folder_are_read(tmp_path):
    # a trial's config saved as .cfg or without a suffix read as a mosaic YAML ('missing
    # required block model'); a snapshot folder was 'a directory; expected a YAML file'
    from mosaic.config.model_file import load_model_file

    reference = count_parameters(load_model_file(HF / "qwen3-30b-a3b.json"))
    for name in ("config", "qwen.cfg", "QWEN.JSON"):
        copy = tmp_path / name
        copy.write_text((HF / "qwen3-30b-a3b.json").read_text())
        assert count_parameters(load_model_file(copy)) == reference
    snapshot = tmp_path / "Qwen3-30B-A3B"
    snapshot.mkdir()
    with pytest.raises(MosaicInputError, match=r"a folder without a config\.json"):
        load_model_file(snapshot)
    (snapshot / "config.json").write_text((HF / "qwen3-30b-a3b.json").read_text())
    assert count_parameters(load_model_file(snapshot)) == reference


# --- `--model config.json` on arch, perf and layouts ---------------------------------------
def _cli_json(*args: str) -> dict:
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_arch_model_option_reads_hf_config():
    doc = _cli_json("arch", "--model", str(HF / "mixtral-8x7b.json"))
    assert doc["n_total_with_embedding"] == 46_702_792_704
    assert doc["experts"] == 8 and doc["top_k"] == 2 and doc["attention"] == "gqa"


def test_perf_and_layouts_model_option_replace_the_job_model():
    job = str(HF.parent / "appendix_e.yaml")
    base = _cli_json("perf", job)
    swapped = _cli_json("perf", job, "--model", str(HF / "qwen3-30b-a3b.json"))
    # Qwen3-30B-A3B (2.7 B active) is far smaller than the Appendix E model (~20 B active):
    # each step takes less time, on the same layout.
    assert swapped["plan"] == base["plan"]
    assert swapped["step_time_s"] < 0.5 * base["step_time_s"]
    layouts = _cli_json("layouts", job, "--model", str(HF / "qwen3-30b-a3b.json"),
                        "--tp", "1", "--pp", "1,2", "--vpp", "1", "--cp", "1", "--ep", "8",
                        "--mbs", "1", "--sharding", "zero1", "--checkpointing", "full",
                        "--top", "1")
    assert layouts["rows"][0]["tokens_per_s_per_gpu"] > base["tokens_per_s_per_gpu"]
    explained = _cli_json("explain", job, "--model", str(HF / "qwen3-30b-a3b.json"))
    assert explained["current"]["step_time_s"] == swapped["step_time_s"]


def test_set_edits_the_model_given_by_model_option_and_a_job_may_omit_its_own(tmp_path):
    """--model replaces the job's model before --set: `--set model.moe.top_k=2` halves the
    routed copies of Qwen3-30B-A3B's top-8 (faster step, same layout); a job file without a
    model block runs with --model alone (new-user review)."""
    import yaml

    job = HF.parent / "appendix_e.yaml"
    qwen = str(HF / "qwen3-30b-a3b.json")
    top8 = _cli_json("perf", str(job), "--model", qwen)
    top2 = _cli_json("perf", str(job), "--model", qwen, "--set", "model.moe.top_k=2")
    assert top2["step_time_s"] < top8["step_time_s"]
    document = yaml.safe_load(job.read_text())
    document.pop("model")
    document.pop("moe", None)
    bare = tmp_path / "no_model.yaml"
    bare.write_text(yaml.safe_dump(document))
    assert _cli_json("perf", str(bare), "--model", qwen)["step_time_s"] == top8["step_time_s"]


def test_law_predict_reads_a_hf_config_and_flags_extrapolation():
    """DeepSeek-V3 (669 B non-embedding, 14.8 T tokens) lies far outside Table 2's runs."""
    doc = _cli_json("law", "predict", "--model", str(HF / "deepseek-v3.json"),
                    "--tokens", "14.8e12")
    c = counts("deepseek-v3.json")
    assert doc["n_total"] == float(c.n_total) and doc["split_factor"] == 18432 / 2048
    flags = {f["quantity"]: f["ratio"] for f in doc["extrapolation"]["flags"]}
    assert flags["n_total"] == pytest.approx(float(c.n_total) / 79.24e9)
    assert flags["tokens"] == pytest.approx(14.8e12 / 56.38e9)
    assert flags["split_factor"] == pytest.approx(9 / 8)


DEEPSEEK_V2_COMMON = {"model_type": "deepseek_v2", "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                      "qk_rope_head_dim": 64, "v_head_dim": 128, "n_shared_experts": 2,
                      "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                      "vocab_size": 102400, "tie_word_embeddings": False}


def test_deepseek_v2_lite_published_totals():
    """DeepSeek-V2-Lite (arXiv:2405.04434): 15.7 B total, 2.4 B activated; no low-rank query
    path (q_lora_rank null). Activated counts the output head, not the embedding (DeepSeek-V3
    README convention): 2.45 B, which the paper's "2.4B" truncates."""
    c = count_parameters(geometry_from_hf_config(DEEPSEEK_V2_COMMON | {
        "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
        "q_lora_rank": None, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "n_routed_experts": 64}))
    assert round(c.n_total_with_embedding / 1e9, 1) == 15.7
    assert int((c.n_active + c.lm_head) / 1e8) == 24


def test_deepseek_v2_published_totals():
    """DeepSeek-V2 (arXiv:2405.04434): 236 B total, 21 B activated."""
    c = count_parameters(geometry_from_hf_config(DEEPSEEK_V2_COMMON | {
        "hidden_size": 5120, "num_hidden_layers": 60, "num_attention_heads": 128,
        "q_lora_rank": 1536, "intermediate_size": 12288, "moe_intermediate_size": 1536,
        "n_routed_experts": 160}))
    assert round(c.n_total_with_embedding / 1e9) == 236
    assert round((c.n_active + c.lm_head) / 1e9) == 21


@pytest.mark.parametrize(("name", "field"), [
    ("gpt-oss-20b.json", "head_dim"),  # GptOssConfig: 64, not 2880 / 64 = 45
    ("gpt-oss-20b.json", "num_key_value_heads"),  # GptOssConfig: 8, not MHA
    ("qwen3-30b-a3b.json", "num_key_value_heads"),  # Qwen3MoeConfig: 4, not MHA
])
def test_a_field_transformers_fills_with_a_class_constant_must_be_stated(name, field):
    config = json.loads((HF / name).read_text())
    del config[field]
    with pytest.raises(MosaicInputError, match=f"{field} not given"):
        geometry_from_hf_config(config, name)
    # Llama's num_key_value_heads defaults to the heads in transformers too: derived, accepted
    llama = json.loads((HF / "llama-3-8b.json").read_text())
    del llama["num_key_value_heads"]
    assert geometry_from_hf_config(llama).kv_heads == llama["num_attention_heads"]


def test_sliding_windows_import_as_window_fields_or_are_said():
    """GPT-OSS windows every other layer with 128 keys (config.json layer_types): that is
    sliding_window 128 with full attention every 2nd layer, and the attention FLOPs count
    the window (mean keys W - W(W-1)/2T at T = 4096: 126.02 against 2048.5 causal). A Qwen
    window from max_window_layers on has no N-th-layer rule: warned of, not imported; one on
    every layer (max_window_layers 0) is; a layer_types list of the wrong length is refused."""
    from mosaic.arch.flops import attention_flops_per_token

    gpt = load_hf_config(HF / "gpt-oss-20b.json")
    assert (gpt.sliding_window, gpt.full_attention_every, gpt.window_layer_count) == (128, 2, 12)
    per_key = 3 * 2 * gpt.heads * 2 * gpt.head_dim  # train x (QK + AV) multiply-adds
    expected = per_key * (12 * (4096 + 1) / 2 + 12 * (128 - 128 * 127 / (2 * 4096)))
    assert attention_flops_per_token(gpt, 4096) == pytest.approx(expected, rel=1e-12)
    qwen = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlidingWindowIgnoredWarning)
        assert geometry_from_hf_config(qwen).sliding_window is None  # window unused
    qwen.update(use_sliding_window=True, sliding_window=4096, max_window_layers=28)
    with pytest.warns(SlidingWindowIgnoredWarning, match="no N-th-layer rule"):
        assert geometry_from_hf_config(qwen).sliding_window is None
    qwen.update(max_window_layers=0)
    assert geometry_from_hf_config(qwen).sliding_window == 4096
    config = json.loads((HF / "gpt-oss-20b.json").read_text())
    config["layer_types"] = ["sliding_attention", "full_attention", "sliding_attention"]
    with pytest.raises(MosaicInputError, match="one kind per layer"):
        geometry_from_hf_config(config)


@pytest.mark.parametrize(("field", "value"), [("num_hidden_layers", 10**30),
                                              ("num_nextn_predict_layers", 10**12)])
def test_a_huge_layer_count_is_refused_before_any_per_layer_list(tmp_path, field, value):
    """A DeepSeek config with 1e30 layers never returned (per-layer lists were built before
    the 16,384-block limit was checked) and 1e12 MTP modules printed 11.6 trillion B of MTP
    parameters (a trial): counts are bounded when they are read."""
    import json

    config = json.loads((HF / "deepseek-v3.json").read_text()) | {field: value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(MosaicInputError, match=f"{field} is .*; allowed at most 16384"):
        load_hf_config(path)


def test_mlp_only_layers_must_be_a_list(tmp_path):
    """'mlp_only_layers: 0' (a scalar) read as an empty list (a trial)."""
    import json

    config = json.loads((HF / "qwen3-30b-a3b.json").read_text()) | {"mlp_only_layers": 0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(MosaicInputError, match="mlp_only_layers must be a list of layer"):
        load_hf_config(path)


def test_geometry_errors_name_the_file_and_widths_their_own_range():
    """A geometry rule broken by a config names the file (it said only 'moe.top_k (9) must
    not exceed moe.experts (8)'); a huge width is refused as a width, not a vocabulary."""
    mixtral = json.loads((HF / "mixtral-8x7b.json").read_text())
    with pytest.raises(MosaicInputError, match=r"^mixtral\.json: moe\.top_k \(9\) must not "
                                               r"exceed moe\.experts \(8\) \(in mosaic"):
        geometry_from_hf_config(mixtral | {"num_experts_per_tok": 9}, "mixtral.json")
    with pytest.raises(MosaicInputError, match=r"hidden_size is 1000000000000; allowed at "
                                               r"most .* \(model widths"):
        geometry_from_hf_config(mixtral | {"hidden_size": 10**12}, "mixtral.json")


def test_qwen2_moe_without_a_shared_width_takes_transformers_default():
    """Qwen2MoeConfig defaults shared_expert_intermediate_size to 5632 and always builds
    the gated shared expert: per block 3·64·5632 + 64 (its gate) parameters."""
    base = {"model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
            "vocab_size": 100}
    c = count_parameters(geometry_from_hf_config(base))
    assert c.shared_experts_per_layer == 3 * 64 * 5632 + 64


def test_each_family_imports_its_router():
    """The router as each transformers modeling file runs it (hf_routers._ROUTERS): DeepSeek-V3
    sigmoid scores with the loss-free correction bias, renormalised, scaled 2.5 (the released
    config.json); Mixtral softmax renormalised over the top-2 with an auxiliary loss;
    Qwen3-30B-A3B's config states norm_topk_prob true; gpt-oss softmax over its top-k logits."""
    v3 = load_hf_config(HF / "deepseek-v3.json").moe.router
    assert (v3.score, v3.balancing, v3.normalize_top_k, v3.top_k_scaling) == (
        "sigmoid", "loss_free", True, 2.5)
    mixtral = load_hf_config(HF / "mixtral-8x7b.json").moe.router
    assert (mixtral.score, mixtral.balancing, mixtral.normalize_top_k) == (
        "softmax", "aux_loss", True)
    assert load_hf_config(HF / "qwen3-30b-a3b.json").moe.router.normalize_top_k
    assert load_hf_config(HF / "gpt-oss-20b.json").moe.router.score == "softmax"
    nano = load_hf_config(HF / "nemotron-3-nano-30b-a3b.json").moe.router
    assert (nano.score, nano.balancing, nano.top_k_scaling) == ("sigmoid", "loss_free", 2.5)
    assert load_hf_config(HF / "llama-3-8b.json").moe is None


def test_class_defaults_fill_unstated_router_fields():
    """DeepseekV2Moe never renormalises and scales by routed_scaling_factor (default 1.0);
    Qwen3MoeConfig.norm_topk_prob defaults to false; DeepseekV3Config scales by 2.5."""
    v2 = geometry_from_hf_config(DEEPSEEK_V2_COMMON | {
        "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
        "q_lora_rank": None, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "n_routed_experts": 64, "routed_scaling_factor": 16.0, "norm_topk_prob": True}
    ).moe.router
    assert (v2.score, v2.balancing, v2.normalize_top_k, v2.top_k_scaling) == (
        "softmax", "aux_loss", False, 16.0)
    qwen = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    qwen.pop("norm_topk_prob")
    assert not geometry_from_hf_config(qwen).moe.router.normalize_top_k
    v3 = json.loads((HF / "deepseek-v3.json").read_text())
    v3.pop("routed_scaling_factor")
    assert geometry_from_hf_config(v3).moe.router.top_k_scaling == 2.5


@pytest.mark.parametrize("value", [0, -1.0, "2.5", 1e6, pytest.param(10**400, id="huge-int"),
                                   float("inf"), float("nan")])
def test_a_bad_routed_scaling_factor_is_refused_by_name(value):
    config = json.loads((HF / "deepseek-v3.json").read_text()) | {"routed_scaling_factor": value}
    with pytest.raises(MosaicInputError, match="routed_scaling_factor"):
        geometry_from_hf_config(config, "v3.json")


def test_a_huge_integer_partial_rotary_factor_is_refused_in_one_line():
    """float() of a 400-digit integer raised OverflowError, a traceback (a fuzz trial)."""
    config = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    config["partial_rotary_factor"] = 10**400
    with pytest.raises(MosaicInputError, match=r"partial_rotary_factor .*a huge integer"):
        geometry_from_hf_config(config, "next.json")


def test_an_unknown_topk_method_is_refused_not_read_as_greedy():
    """A fuzz trial's DeepSeek config with topk_method 'banana' was accepted without a word
    (DeepSeek-V2 read it as greedy)."""
    config = json.loads((HF / "deepseek-v3.json").read_text()) | {"topk_method": "banana"}
    with pytest.raises(MosaicInputError, match="topk_method 'banana' is not supported; "
                                               "allowed: greedy, group_limited_greedy, noaux_tc"):
        geometry_from_hf_config(config, "v3.json")


def test_group_limited_routing_is_read_with_each_class_default():
    """DeepSeek-V3's config.json: n_group 8, topk_group 4 (its router always limits groups;
    DeepseekV3Config defaults 8 and 4); NemotronHConfig's 1 and 1 limit nothing; DeepSeek-V2
    limits groups only under topk_method 'group_limited_greedy' (DeepSeek-V2 236B: 8 groups,
    top 3)."""
    v3 = load_hf_config(HF / "deepseek-v3.json").moe.router
    assert (v3.groups, v3.top_groups, v3.limits_groups) == (8, 4, True)
    unstated = json.loads((HF / "deepseek-v3.json").read_text())
    unstated.pop("n_group"), unstated.pop("topk_group")
    assert geometry_from_hf_config(unstated).moe.router.groups == 8
    nano = load_hf_config(HF / "nemotron-3-nano-30b-a3b.json").moe.router
    assert (nano.groups, nano.top_groups) == (None, None)
    v2_lite = DEEPSEEK_V2_COMMON | {
        "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
        "q_lora_rank": None, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "n_routed_experts": 64, "n_group": 1, "topk_group": 1, "topk_method": "greedy"}
    assert geometry_from_hf_config(v2_lite).moe.router.groups is None
    v2 = v2_lite | {"n_routed_experts": 160, "n_group": 8, "topk_group": 3,
                    "topk_method": "group_limited_greedy"}
    router = geometry_from_hf_config(v2).moe.router
    assert (router.groups, router.top_groups) == (8, 3)
    with pytest.raises(MosaicInputError, match=r"groups \(8\) must divide moe\.experts \(100\)"):
        geometry_from_hf_config(v2 | {"n_routed_experts": 100}, "v2.json")


def test_deepseeks_stated_scoring_func_is_read():
    """DeepSeek's configs state scoring_func (Megatron-Bridge maps it to the router's score
    function); a 'relu' was ignored and exported as sigmoid (a fuzz trial)."""
    config = json.loads((HF / "deepseek-v3.json").read_text())
    assert geometry_from_hf_config(config | {"scoring_func": "softmax"}).moe.router.score == \
        "softmax"
    with pytest.raises(MosaicInputError, match="scoring_func 'relu' is not supported"):
        geometry_from_hf_config(config | {"scoring_func": "relu"}, "v3.json")


# --- families added from a trial on recent MoE configs -------------------------------------
# GLM-4.5-Air's shape: the Glm4MoeConfig defaults (transformers models/glm4_moe, the
# "GLM-4-100B-A10B" size) with GLM-4.5-Air's stated fields (46 blocks, 1 dense, 128 experts
# of 1408, 1 shared, top-8, q/k/v biases, one MTP layer; Z.ai model card: 106 B total, 12 B
# active).
GLM_45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
    "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
    "num_hidden_layers": 46, "first_k_dense_replace": 1, "num_attention_heads": 96,
    "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 128,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "vocab_size": 151552,
    "attention_bias": True, "use_qk_norm": False, "partial_rotary_factor": 0.5,
    "num_nextn_predict_layers": 1, "routed_scaling_factor": 1.0, "norm_topk_prob": True,
    "n_group": 1, "topk_group": 1, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
    "rope_theta": 1000000, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
}


def test_glm45_air_by_hand():
    """Glm4MoeAttention: q, k, v with biases, o_proj without; the first block dense, the
    others 128 routed + 1 shared expert and a sigmoid router (weight only; the correction
    bias is a buffer); two RMSNorms a block and a final one."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every field is read or has no shape
        geometry = geometry_from_hf_config(GLM_45_AIR)
    c = count_parameters(geometry)
    d, heads, kv, hd = 4096, 96, 8, 128
    attention = d * heads * hd + 2 * d * kv * hd + (heads + 2 * kv) * hd + heads * hd * d
    dense = attention + 3 * d * 10944 + 2 * d
    moe = attention + 129 * 3 * d * 1408 + 128 * d + 2 * d
    assert int(c.n_total) == dense + 45 * moe + d
    assert int(c.n_total_with_embedding) == int(c.n_total) + 2 * 151552 * d
    assert int(c.n_total_with_embedding / 1e9) == 106  # card: "106B" (106.85 B)
    active = dense + 45 * (attention + 9 * 3 * d * 1408 + 128 * d + 2 * d) + d
    assert int(c.n_active) == active
    assert round(active / 1e9) == 12  # card: "12B active" (non-embedding)
    assert geometry.mtp_layers == 1 and geometry.rope_fraction == 0.5
    router = geometry.moe.router
    assert (router.score, router.balancing, router.top_k_scaling) == ("sigmoid", "loss_free", 1)


def test_glm45_qk_norm_adds_two_head_norms_per_block():
    base = count_parameters(geometry_from_hf_config(GLM_45_AIR)).n_total
    normed = count_parameters(geometry_from_hf_config(GLM_45_AIR | {"use_qk_norm": True}))
    assert normed.n_total - base == 46 * 2 * 128


# Llama 4 Maverick's text model (meta-llama/Llama-4-Maverick-17B-128E-Instruct config.json
# text_config; Meta: 17 B active, 400 B total).
MAVERICK_TEXT = {
    "model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_local_experts": 128,
    "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
    "attention_bias": False, "use_qk_norm": False, "no_rope_layers": [],
    "tie_word_embeddings": False, "rope_theta": 500000.0, "router_aux_loss_coef": 0.001,
}


def test_llama4_maverick_by_hand():
    """Llama4TextMoe on odd blocks (interleave step 2): 128 routed experts and one shared
    expert of intermediate_size, a bias-free router; dense blocks of intermediate_size_mlp;
    the L2 q/k norm has no weights."""
    geometry, c = _strict_counts(MAVERICK_TEXT)
    d = 5120
    attention = 2 * d * 40 * 128 + 2 * d * 8 * 128
    expert = 3 * d * 8192
    dense = attention + 3 * d * 16384 + 2 * d
    moe = attention + 129 * expert + 128 * d + 2 * d
    assert int(c.n_total) == 24 * dense + 24 * moe + d
    assert round(c.n_total_with_embedding / 1e9) == 401  # Meta: "400B total"
    assert round(c.n_active_with_embedding / 1e9) == 17  # Meta: "17B active"
    assert (geometry.moe.dense_layers, geometry.moe.moe_every) == (1, 2)


def test_llama4_multimodal_config_reads_its_text_model():
    config = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
              "text_config": MAVERICK_TEXT | {"attention_chunk_size": 8192},
              "vision_config": {"hidden_size": 1408}}
    with pytest.warns(UnmodelledFieldWarning) as caught:
        geometry = geometry_from_hf_config(config, "cfg.json")
    said = " ".join(str(w.message) for w in caught)
    assert "vision_config is left out" in said and "attention_chunk_size 8192" in said
    assert geometry == geometry_from_hf_config(MAVERICK_TEXT)


def test_a_llama4_text_config_that_is_no_object_is_named_not_called_missing():
    """A text_config of [1] was refused as 'missing'; the error says what it is."""
    with pytest.raises(MosaicInputError, match=r"text_config \(a JSON object\); here it is "
                                               r"a list: \[1\]"):
        geometry_from_hf_config({"model_type": "llama4", "text_config": [1]}, "cfg.json")
    with pytest.raises(MosaicInputError, match="here it is missing"):
        geometry_from_hf_config({"model_type": "llama4"}, "cfg.json")


def test_unknown_model_type_is_read_as_its_architecture_class():
    """Kimi K2's config says model_type kimi_k2 and names DeepseekV3ForCausalLM."""
    config = json.loads((HF / "deepseek-v3.json").read_text()) | {
        "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]}
    with pytest.warns(ModelTypeReadAsWarning, match="'kimi_k2' is read as deepseek_v3"):
        geometry = geometry_from_hf_config(config, "cfg.json")
    assert geometry == load_hf_config(HF / "deepseek-v3.json")


def test_fields_never_read_are_named():
    config = json.loads((HF / "qwen3-30b-a3b.json").read_text()) | {
        "num_mtp_modules": 3, "index_topk": 2048, "initializer_range": 0.02}
    with pytest.warns(UnmodelledFieldWarning,
                      match="fields mosaic does not read: num_mtp_modules, index_topk;"):
        geometry_from_hf_config(config, "cfg.json")


def test_deepseek_v32_indexer_is_said_left_out():
    config = json.loads((HF / "deepseek-v3.json").read_text()) | {
        "model_type": "deepseek_v32", "index_n_heads": 64, "index_head_dim": 128,
        "index_topk": 2048}
    with pytest.warns(UnmodelledFieldWarning, match="lightning indexer .*index_topk 2048"):
        geometry = geometry_from_hf_config(config, "cfg.json")
    assert geometry == load_hf_config(HF / "deepseek-v3.json")


@pytest.mark.parametrize("name", sorted(p.name for p in HF.glob("*.json")))
def test_shipped_configs_leave_no_field_unread(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Phi-3.5-MoE's router is read as another (test_phi35_moe_by_hand), not left unread
        warnings.filterwarnings("ignore", message=".*SparseMixer routing")
        load_hf_config(HF / name)


def test_llama4_follows_its_config_class():
    """Llama4TextConfig (a review): a stated moe_layers is taken as given (empty: no MoE
    block), an absent intermediate_size_mlp is the class's 16384, and head_dim and
    num_key_value_heads are class constants a config must state."""
    with pytest.raises(MosaicInputError, match="no MoE block left by moe_layers"):
        geometry_from_hf_config(MAVERICK_TEXT | {"moe_layers": []}, "cfg.json")
    unordered = MAVERICK_TEXT | {"moe_layers": list(range(47, 0, -2))}
    assert geometry_from_hf_config(unordered) == geometry_from_hf_config(MAVERICK_TEXT)
    no_mlp_width = {k: v for k, v in MAVERICK_TEXT.items() if k != "intermediate_size_mlp"}
    assert geometry_from_hf_config(no_mlp_width).ffn == 16384
    for name in ("head_dim", "num_key_value_heads"):
        with pytest.raises(MosaicInputError, match=f"{name} not given"):
            geometry_from_hf_config({k: v for k, v in MAVERICK_TEXT.items() if k != name})
    with pytest.raises(MosaicInputError, match="num_key_value_heads not given"):
        geometry_from_hf_config({k: v for k, v in GLM_45_AIR.items()
                                 if k != "num_key_value_heads"})


def test_fields_without_a_shape_in_published_configs_are_not_named():
    """Published configs carry Mamba initialisation and inference fields (Nemotron 3 Nano:
    time_step_*, rescale_prenorm_residual, expand, n_shared_experts, rope_theta; Llama 4:
    cache_implementation), which a review saw named as unread."""
    config = json.loads((HF / "nemotron-3-nano-30b-a3b.json").read_text()) | {
        "expand": 2, "n_shared_experts": 1, "rope_theta": 10000, "time_step_floor": 1e-4,
        "time_step_min": 1e-3, "time_step_max": 0.1, "rescale_prenorm_residual": True,
        "mamba_hidden_act": "silu"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        geometry_from_hf_config(config)
        geometry_from_hf_config(MAVERICK_TEXT | {"cache_implementation": "hybrid"})
        geometry_from_hf_config(json.loads((HF / "llama-3-8b.json").read_text())
                                | {"layer_types": ["full_attention"] * 32})


def test_the_read_tracker_does_not_count_a_look_at_all_items_as_reads():
    from mosaic.arch.hf_fields import ReadTracker, unread_fields

    tracker = ReadTracker({"a": 1, "b": 2, "_comment": "x", "rms_norm_eps": 1e-5})
    assert list(tracker.items()) == [("a", 1), ("b", 2), ("_comment", "x"), ("rms_norm_eps", 1e-5)]
    assert tracker == {"a": 1, "b": 2, "_comment": "x", "rms_norm_eps": 1e-5}
    tracker.get("a")
    assert unread_fields(tracker) == ["b"]


# --- q/k norms across the whole projection (OLMoE, MiniMax-M2), Granite MoE -----------------
def test_olmoe_by_hand():
    """OlmoeAttention: bias-free q, k, v, o and RMSNorms across the whole projections (q_norm
    of hidden_size, k_norm of head_dim x kv heads); 64 experts of 1024 and a bias-free router
    in every block. OLMoE paper (arXiv:2409.02060): 6.9 B total, 1.3 B active."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every field is read or has no shape
        geometry = load_hf_config(HF / "olmoe-1b-7b-0924.json")
    c = count_parameters(geometry)
    d, vocab = 2048, 50304
    attention = 4 * d * d + d + d  # Q, K, V, O; q_norm and k_norm, each d wide
    block = attention + 64 * 3 * d * 1024 + 64 * d + 2 * d
    assert int(c.n_total) == 16 * block + d
    assert int(c.n_total_with_embedding) == 16 * block + d + 2 * vocab * d == 6_919_161_856
    active = 16 * (attention + 8 * 3 * d * 1024 + 64 * d + 2 * d) + d
    assert int(c.n_active) == active
    assert round(c.n_active_with_embedding / 1e8) == 13  # "1.3B active"
    assert str(geometry.qk_norm_span) == "projection"
    assert not geometry.moe.router.normalize_top_k  # norm_topk_prob false


def test_projection_wide_norms_count_heads_times_head_dim():
    """The same attention with per-head norms (Qwen3's): 2 x head_dim gains a block, not
    (heads + kv heads) x head_dim."""
    geometry = load_hf_config(HF / "olmoe-1b-7b-0924.json")
    per_head = replace(geometry, qk_norm_span="head")
    difference = count_parameters(geometry).n_total - count_parameters(per_head).n_total
    assert difference == 16 * ((16 + 16) * 128 - 2 * 128)
    with pytest.raises(MosaicInputError, match="qk_norm_span projection needs"):
        replace(geometry, qk_norm=False)


# MiniMax-M2 (huggingface.co/MiniMaxAI/MiniMax-M2 config.json; MiniMax: 230 B total, 10 B
# active): 62 blocks of GQA 48/8 x 128 and 256 experts of 1536, top-8.
MINIMAX_M2 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
    "attn_type_list": [1] * 62, "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072,
    "intermediate_size": 1536, "num_attention_heads": 48, "num_experts_per_tok": 8,
    "num_hidden_layers": 62, "num_key_value_heads": 8, "num_local_experts": 256,
    "qk_norm_type": "per_layer", "rotary_dim": 64, "rope_theta": 5000000,
    "scoring_func": "sigmoid", "shared_intermediate_size": 0, "tie_word_embeddings": False,
    "use_qk_norm": True, "use_routing_bias": True, "vocab_size": 200064,
    "mlp_intermediate_size": 8192, "rms_norm_eps": 1e-06,
}


def test_minimax_m2_by_hand():
    geometry, c = _strict_counts(MINIMAX_M2)
    d, heads, kv, hd = 3072, 48, 8, 128
    attention = 2 * d * heads * hd + 2 * d * kv * hd + (heads + kv) * hd  # + q/k norms
    expert = 3 * d * 1536
    block = attention + 256 * expert + 256 * d + 2 * d
    assert int(c.n_total) == 62 * block + d
    assert round(c.n_total_with_embedding / 1e10) == 23  # "230B total"
    active = 62 * (attention + 8 * expert + 256 * d + 2 * d) + d
    assert int(c.n_active) == active and round(active / 1e9) == 10  # "10B active"
    assert geometry.rope_fraction == 0.5
    router = geometry.moe.router
    assert (router.score, router.balancing, router.normalize_top_k) == (
        "sigmoid", "loss_free", True)


@pytest.mark.parametrize("change, message", [
    ({"attn_type_list": [0] + [1] * 61}, "lightning attention"),
    ({"scoring_func": "softmax"}, "allowed: sigmoid"),
    ({"qk_norm_type": "per_token"}, "qk_norm_type 'per_token'"),
    ({"rotary_dim": 256}, "rotary_dim 256 exceeds head_dim 128"),
    ({"partial_rotary_factor": 0.25}, "partial_rotary_factor says 0.25"),
    ({"attn_type_list": [1] * 61}, "attn_type_list has 61 entries for 62 layers"),
])
def test_minimax_m2_refuses_what_it_cannot_hold(change, message):
    with pytest.raises(MosaicInputError, match=message):
        geometry_from_hf_config(MINIMAX_M2 | change, "m2.json")


def test_minimax_m2_mtp_modules_are_said_left_out():
    config = MINIMAX_M2 | {"use_mtp": True, "num_mtp_modules": 3, "mtp_transformer_layers": 1}
    with pytest.warns(UnmodelledFieldWarning, match="num_mtp_modules 3"):
        geometry = geometry_from_hf_config(config, "m2.json")
    assert geometry == geometry_from_hf_config(MINIMAX_M2)


# Granite-3.1-3B-A800M (huggingface.co/ibm-granite/granite-3.1-3b-a800m-base config.json;
# IBM: 3.3 B total, 800 M active): 32 blocks of GQA 24/8, 40 experts of 512, top-8, tied.
GRANITE_3B = {
    "architectures": ["GraniteMoeForCausalLM"], "model_type": "granitemoe",
    "attention_bias": False, "embedding_multiplier": 12.0, "hidden_act": "silu",
    "hidden_size": 1536, "intermediate_size": 512, "logits_scaling": 6.0,
    "num_attention_heads": 24, "num_experts_per_tok": 8, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 40, "residual_multiplier": 0.22,
    "attention_multiplier": 0.015625, "rope_theta": 10000000.0, "tie_word_embeddings": True,
    "vocab_size": 49155,
}


def test_granite_moe_by_hand():
    geometry, c = _strict_counts(GRANITE_3B)  # the multipliers carry no weights
    d = 1536
    attention = 2 * d * d + 2 * d * 8 * 64
    block = attention + 40 * 3 * d * 512 + 40 * d + 2 * d
    assert int(c.n_total) == 32 * block + d
    assert int(c.n_total_with_embedding) == int(c.n_total) + 49155 * d  # tied
    assert round(c.n_total_with_embedding / 1e8) == 33  # "3.3B"
    assert round(c.n_active / 1e8) == 8  # "800M active"
    assert not geometry.qk_norm and geometry.moe.router.normalize_top_k


def test_projection_wide_norms_are_said_by_per_head_exports():
    from mosaic.export.spec import projection_qk_norm_notes

    geometry = load_hf_config(HF / "olmoe-1b-7b-0924.json")
    (note,) = projection_qk_norm_notes(geometry, "per-head norms")
    assert "4,096 gains per layer" in note and "256 gains" in note
    assert projection_qk_norm_notes(replace(geometry, qk_norm_span="head"), "x") == []


# ERNIE-4.5-21B-A3B (huggingface.co/baidu/ERNIE-4.5-21B-A3B-PT config.json; Baidu: 21 B
# total, 3 B activated): 28 blocks, the first dense, 64 experts of 1536 + 2 shared, top-6.
ERNIE_21B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
    "hidden_act": "silu", "hidden_size": 2560, "intermediate_size": 12288, "head_dim": 128,
    "moe_intermediate_size": 1536, "moe_k": 6, "moe_layer_end_index": 27,
    "moe_layer_interval": 1, "moe_layer_start_index": 1, "moe_num_experts": 64,
    "moe_num_shared_experts": 2, "num_attention_heads": 20, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rope_theta": 500000, "use_bias": False, "vocab_size": 103424,
}


def test_ernie45_moe_by_hand():
    """Ernie4_5_MoeDecoderLayer: bias-free GQA, block 0 a dense MLP of 12288, blocks 1..27
    64 routed + 2 shared experts behind a bias-free router; embeddings tied by the class
    default."""
    _, c = _strict_counts(ERNIE_21B)
    d = 2560
    attention = 2 * d * 20 * 128 + 2 * d * 4 * 128
    dense = attention + 3 * d * 12288 + 2 * d
    moe = attention + 66 * 3 * d * 1536 + 64 * d + 2 * d
    assert int(c.n_total) == dense + 27 * moe + d
    assert int(c.n_total_with_embedding) == int(c.n_total) + 103424 * d  # tied
    assert round(c.n_total_with_embedding / 1e9) == 22  # "21B" (21.8 B)
    active = dense + 27 * (attention + 8 * 3 * d * 1536 + 64 * d + 2 * d) + d
    assert int(c.n_active) == active and round(active / 1e9) == 3  # "3B activated"


def test_ernie45_moe_placement_and_refusals():
    every_other = geometry_from_hf_config(ERNIE_21B | {"moe_layer_interval": 2})
    assert (every_other.moe.dense_layers, every_other.moe.moe_every) == (1, 2)
    assert [every_other.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    with pytest.raises(MosaicInputError, match="not a dense prefix followed by every"):
        geometry_from_hf_config(ERNIE_21B | {"moe_layer_end_index": 20}, "e.json")
    with pytest.raises(MosaicInputError, match="use_bias=true is not supported"):
        geometry_from_hf_config(ERNIE_21B | {"use_bias": True}, "e.json")
    assert geometry_from_hf_config(ERNIE_21B | {"moe_use_aux_free": False}
                                   ).moe.router.balancing == "aux_loss"
    with pytest.warns(UnmodelledFieldWarning, match="num_nextn_predict_layers 1"):
        geometry_from_hf_config(ERNIE_21B | {"num_nextn_predict_layers": 1}, "e.json")


def test_arch_says_an_all_moe_models_dense_width_only_sets_g():
    """Qwen3-30B-A3B has no dense block; its intermediate_size (6144) is only the reference
    of G = 6144 / 768 = 8 (a trial read it as a dense block's width)."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    text = CliRunner().invoke(app, ["arch", "--model", str(HF / "qwen3-30b-a3b.json")],
                              env={"COLUMNS": "300"}).output
    assert "6144 (no dense block: the reference width of G = d_ff / expert width" in text
    assert "768 / 8" in text  # expert width / split factor G
    dense = CliRunner().invoke(app, ["arch", "--model", str(HF / "llama-3-8b.json")],
                               env={"COLUMNS": "300"}).output
    assert "no dense block" not in dense


def test_minimax_m2_rotary_dim_and_factor_may_both_be_stated_when_they_agree():
    agreed = geometry_from_hf_config(MINIMAX_M2 | {"partial_rotary_factor": 0.5})
    assert agreed == geometry_from_hf_config(MINIMAX_M2)


def test_a_sliding_window_of_a_family_whose_attention_takes_none_is_named_unread():
    """GLM-4.5's attention takes no window (transformers' Glm4MoeConfig has none): a stated
    one is named among the fields mosaic does not read, not read as a window."""
    with pytest.warns(UnmodelledFieldWarning, match="fields mosaic does not read: "
                                                    "sliding_window"):
        geometry = geometry_from_hf_config(GLM_45_AIR | {"sliding_window": 4096}, "glm.json")
    assert geometry.sliding_window is None


def test_a_projection_wide_qk_norm_travels_through_a_job_file(tmp_path):
    """model.qk_norm_span in a job file: counted as the HF import counts it, and refused
    without model.qk_norm."""
    from mosaic.config.blocks import ModelBlock
    from mosaic.config.convert import geometry_from_model, model_document

    geometry = load_hf_config(HF / "olmoe-1b-7b-0924.json")
    document = model_document(geometry)
    assert document["qk_norm_span"] == "projection"
    assert geometry_from_model(ModelBlock.model_validate(document), [], measured=False) == geometry
    with pytest.raises(MosaicInputError, match="qk_norm_span projection needs"):
        geometry_from_model(ModelBlock.model_validate(document | {"qk_norm": False}), [],
                            measured=False)


# --- Phi-3.5-MoE (phimoe) --------------------------------------------------------------------
def test_phi35_moe_by_hand():
    """PhimoeForCausalLM: Mixtral's block with LayerNorms (weight and bias) everywhere, q/k/v/o
    biases (attention_bias), 16 experts of 6400 behind a bias-free router and an LM head with
    a bias (lm_head_bias). Model card: 41.9 B parameters, 6.6 B active."""
    from mosaic.arch.hf_import import UnmodelledFieldWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        geometry = load_hf_config(HF / "phi-3.5-moe-instruct.json")
    # SparseMixer is named; every other field is read or has no shape
    assert [str(w.message).split(": ", 1)[1][:20] for w in caught] == ["SparseMixer routing "]
    assert all(w.category is UnmodelledFieldWarning for w in caught)
    c = count_parameters(geometry)
    d, kv, vocab = 4096, 8 * 128, 32064
    attention = 2 * d * d + 2 * d * kv + (d + 2 * kv) + d  # Q, O, K, V; q/k/v and o biases
    norms = 2 * 2 * d  # two LayerNorms, gain and bias
    block = attention + norms + 16 * d + 16 * 3 * d * 6400
    assert int(c.n_total) == 32 * block + 2 * d == 41_610_452_992
    head = vocab * d + vocab  # untied, with its bias
    assert int(c.n_total_with_embedding) == int(c.n_total) + vocab * d + head
    assert round(c.n_total_with_embedding / 1e8) == 419  # "41.9B"
    active = 32 * (attention + norms + 16 * d + 2 * 3 * d * 6400) + 2 * d
    assert int(c.n_active) == active
    assert round(c.n_active_with_embedding / 1e8) == 66  # "6.6B active"
    router = geometry.moe.router
    assert (router.score, router.normalize_top_k, geometry.norm) == ("softmax", False,
                                                                     "layernorm")


def test_phi35_moe_lm_head_bias_counts_with_a_tied_head_too():
    """The bias is the head's own: a tied head shares its weight matrix, not the bias."""
    config = json.loads((HF / "phi-3.5-moe-instruct.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tied = load_hf_config_from(config | {"tie_word_embeddings": True})
        plain = load_hf_config_from(config | {"lm_head_bias": False})
    assert count_parameters(tied).n_embedding == 32064 * 4096 + 32064
    assert count_parameters(plain).n_embedding == 2 * 32064 * 4096


def test_phi35_moe_other_than_two_experts_is_refused():
    config = json.loads((HF / "phi-3.5-moe-instruct.json").read_text())
    with pytest.raises(MosaicInputError, match="always picks 2 experts"):
        load_hf_config_from(config | {"num_experts_per_tok": 4})


def test_an_lm_head_bias_travels_through_a_job_file_and_is_said_by_every_export():
    """model.lm_head_bias in a job file gives the imported geometry back; no export target
    builds the bias (Megatron-Core GPTModel output_layer bias=False), and each says so."""
    from mosaic.config.blocks import ModelBlock
    from mosaic.config.convert import geometry_from_model, model_document
    from mosaic.export.spec import lm_head_bias_notes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        geometry = load_hf_config(HF / "phi-3.5-moe-instruct.json")
    document = model_document(geometry)
    assert document["lm_head_bias"] is True
    assert geometry_from_model(ModelBlock.model_validate(document), [], measured=False) == geometry
    (note,) = lm_head_bias_notes(geometry, "Megatron-LM")
    assert "32,064 parameters" in note and "without one" in note
    assert lm_head_bias_notes(replace(geometry, lm_head_bias=False), "x") == []


def load_hf_config_from(config: dict) -> object:
    return geometry_from_hf_config(config)


def test_arch_says_the_features_it_imported():
    """A trial could check an import's sinks, biases, QK norm and shared-expert width only
    through `export --to yaml`; arch prints them (gpt-oss model card Sec. 2.1: attention
    sinks and biases; Qwen3: per-head QK norm, tied embeddings off)."""
    gpt_oss = _cli_json("arch", "--model", str(HF / "gpt-oss-20b.json"))
    assert {"attention sinks", "q/k/v biases", "attention output bias"} <= set(
        gpt_oss["features"])
    qwen = _cli_json("arch", "--model", str(HF / "qwen3-30b-a3b.json"))
    assert "QK norm per head" in qwen["features"] and "tied embeddings" not in qwen["features"]
    deepseek = _cli_json("arch", "--model", str(HF / "deepseek-v3.json"))
    assert "MLA" in deepseek["features"] and deepseek["shared_expert_ffn"] == 2048
    assert deepseek["mtp_layers"] == 1


MISTRAL_7B_V03 = {  # Mistral-7B-Instruct-v0.3's config.json: head_dim and window stated null
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None,
    "vocab_size": 32768, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-05}


def test_a_field_stated_null_takes_its_default():
    """transformers reads a null head_dim as hidden_size / heads and a null
    num_key_value_heads as the heads: Mistral-7B-Instruct-v0.3's config was refused as
    "missing required field 'head_dim'" (a trial). Its 7,248,023,552 parameters (the
    checkpoint's total; 7,241,732,096 of v0.1 plus 768 more tokens in embedding and head),
    with no warning for the null window."""
    geometry, c = _strict_counts(MISTRAL_7B_V03)
    assert geometry.head_dim == 128
    assert int(c.n_total_with_embedding) == 7_241_732_096 + 2 * 768 * 4096 == 7_248_023_552
    geometry, _ = _strict_counts({**MISTRAL_7B_V03, "num_key_value_heads": None})
    assert geometry.kv_heads == geometry.heads == 32
    with pytest.raises(MosaicInputError, match="missing required field 'hidden_size'"):
        geometry_from_hf_config({**MISTRAL_7B_V03, "hidden_size": None})


def test_nemotron_h_reads_its_remote_code_attention_head_dim(tmp_path):
    """Nemotron-H 8B/47B/56B configs name the head width attention_head_dim (the
    remote-code NemotronHConfig): read where head_dim is not stated, not only warned of."""
    config = json.loads((HF / "nemotron-3-nano-30b-a3b.json").read_text())
    heads, d_model = config["num_attention_heads"], config["hidden_size"]
    config.pop("head_dim", None)
    config["attention_head_dim"] = 2 * d_model // heads  # not hidden / heads: it must be read
    geometry, _ = _strict_counts(config)
    assert geometry.head_dim == 2 * d_model // heads
    for bad in (0, False, -64):  # refused, not skipped for hidden / heads (a review)
        with pytest.raises(MosaicInputError, match="attention_head_dim must be a positive"):
            geometry_from_hf_config({**config, "attention_head_dim": bad})


def test_a_qwen3_next_interval_beside_its_layer_types_is_not_warned_of():
    """The released Qwen3-Next config states layer_types and the full_attention_interval
    they were built from; transformers reads the list, so the interval is no unread field
    (a trial)."""
    config = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    layers = config["num_hidden_layers"]
    config["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                             for i in range(layers)]
    config["full_attention_interval"] = 4
    _strict_counts(config)


# --- dots.llm1 (dots1) ------------------------------------------------------------------------
def test_dots_llm1_by_hand():
    """Dots1DecoderLayer (transformers models/dots1: DeepSeek-V3's block with Qwen 3's
    attention): bias-free MHA with per-head q/k RMSNorms; block 0 a dense MLP of 10944, blocks
    1..61 128 routed experts of 1408 + 2 shared (one MLP of 2 x 1408) behind a bias-free
    sigmoid router (its correction bias is a buffer). Model card
    (huggingface.co/rednote-hilab/dots.llm1.base): "14B activated and 142B total"; by hand
    142.77 B total and 14.02 B active with embeddings (141.53 B / 12.77 B without)."""
    geometry, c = _strict_counts(json.loads((HF / "dots-llm1-base.json").read_text()))
    d, vocab = 4096, 152064
    attention = 4 * d * d + 2 * 128  # Q, K, V, O (32 heads of 128) + q/k norms
    dense = attention + 3 * d * 10944 + 2 * d
    moe = attention + (128 + 2) * 3 * d * 1408 + 128 * d + 2 * d
    assert int(c.n_total) == dense + 61 * moe + d == 141_528_665_600
    assert int(c.n_total_with_embedding) == int(c.n_total) + 2 * vocab * d
    assert int(c.n_total_with_embedding / 1e9) == 142  # "142B total" (142.77 B)
    active = dense + 61 * (attention + (6 + 2) * 3 * d * 1408 + 128 * d + 2 * d) + d
    assert int(c.n_active) == active
    assert round(c.n_active_with_embedding / 1e9) == 14  # "14B activated" (14.02 B)
    router = geometry.moe.router
    assert (router.score, router.balancing, router.normalize_top_k, router.top_k_scaling,
            router.groups) == ("sigmoid", "loss_free", True, 2.5, None)
    assert geometry.qk_norm and str(geometry.qk_norm_span) == "head"


def test_dots_llm1_follows_its_config_class():
    """Dots1Config: num_key_value_heads is the class's 32 when left out (must be stated);
    norm_topk_prob defaults False; a window covers the layers from max_window_layers on;
    another score function is refused."""
    config = json.loads((HF / "dots-llm1-base.json").read_text())
    with pytest.raises(MosaicInputError, match="num_key_value_heads not given"):
        geometry_from_hf_config({k: v for k, v in config.items()
                                 if k != "num_key_value_heads"})
    unstated = {k: v for k, v in config.items() if k != "norm_topk_prob"}
    assert not geometry_from_hf_config(unstated).moe.router.normalize_top_k
    windowed = geometry_from_hf_config(config | {"sliding_window": 4096,
                                                 "max_window_layers": 0})
    assert windowed.sliding_window == 4096 and windowed.full_attention_every is None
    assert geometry_from_hf_config(config | {"sliding_window": 4096}).sliding_window is None
    with pytest.raises(MosaicInputError, match="allowed: sigmoid"):
        geometry_from_hf_config(config | {"scoring_func": "softmax"}, "dots.json")


# --- Hunyuan-A13B (hunyuan_v1_moe) -----------------------------------------------------------
def test_hunyuan_a13b_by_hand():
    """HunYuanMoEV1DecoderLayer (transformers models/hunyuan_v1_moe): bias-free GQA 32/8 of
    128 with per-head q/k RMSNorms; every block 64 routed experts + 1 shared MLP, all of
    3072, behind a bias-free softmax router (top-8, renormalised); embeddings tied. Model card
    (huggingface.co/tencent/Hunyuan-A13B-Instruct): "80 billion total parameters and 13
    billion active"; by hand 80.39 B total and 12.75 B active with the tied embedding
    (12.22 B without)."""
    geometry, c = _strict_counts(json.loads((HF / "hunyuan-a13b-instruct.json").read_text()))
    d, vocab, expert = 4096, 128167, 3 * 4096 * 3072
    attention = 2 * d * 32 * 128 + 2 * d * 8 * 128 + 2 * 128  # + q/k norms
    block = attention + (64 + 1) * expert + 64 * d + 2 * d
    assert int(c.n_total) == 32 * block + d == 79_868_211_200
    assert int(c.n_total_with_embedding) == int(c.n_total) + vocab * d  # tied
    assert round(c.n_total_with_embedding / 1e9) == 80  # "80B total" (80.39 B)
    active = 32 * (attention + (8 + 1) * expert + 64 * d + 2 * d) + d
    assert int(c.n_active) == active
    assert round(c.n_active_with_embedding / 1e9) == 13  # "13B active" (12.75 B)
    router = geometry.moe.router
    assert (router.score, router.normalize_top_k, geometry.tied_embeddings) == (
        "softmax", True, True)


def test_hunyuan_refuses_what_transformers_would_not_build():
    """transformers' HunYuanMoEV1 builds one shared MLP and experts of intermediate_size:
    a per-layer moe_intermediate_size or num_shared_expert saying otherwise, per-layer counts
    that differ, and cross-layer attention (use_cla) are refused rather than miscounted; the
    remote code's model_type 'hunyuan' is read through its architectures class."""
    config = json.loads((HF / "hunyuan-a13b-instruct.json").read_text())
    for change, message in (({"moe_intermediate_size": [1536] * 32}, "builds one shared MLP"),
                            ({"num_shared_expert": [2] * 32}, "builds one shared MLP"),
                            ({"moe_topk": [8] * 31 + [4]}, "one equal value per layer"),
                            ({"moe_topk": [8] * 30}, "one equal value per layer"),
                            ({"use_cla": True}, "cross-layer attention")):
        with pytest.raises(MosaicInputError, match=message):
            geometry_from_hf_config(config | change, "a13b.json")
    assert geometry_from_hf_config(config | {"moe_topk": 8}) == geometry_from_hf_config(config)
    with pytest.warns(ModelTypeReadAsWarning, match="'hunyuan' is read as hunyuan_v1_moe"):
        relabelled = geometry_from_hf_config(config | {"model_type": "hunyuan"}, "a13b.json")
    assert relabelled == geometry_from_hf_config(config)


# --- Ling 2.0 / Ring 2.0 (bailing_moe with BailingMoeV2ForCausalLM) -------------------------
def test_ling_mini_2_by_hand():
    """BailingMoeV2 (the checkpoints' remote code, copied in Megatron-Bridge
    models/bailing/modeling_bailing_moe_v2.py): a fused q/k/v projection, per-head q/k
    RMSNorms, block 0 a dense MLP of 5120, blocks 1..19 256 routed experts of 512 + one shared
    MLP of 512 behind a bias-free sigmoid router (its expert_bias is a buffer); the MTP layer
    sits after the 20 decoder layers and is counted apart. Model card
    (huggingface.co/inclusionAI/Ling-mini-2.0): "16B total parameters ... 1.4B activated
    (non-embedding 789M)"; Ling-V2 README: 16.26 B total, 1.43 B activated."""
    geometry, c = _strict_counts(json.loads((HF / "ling-mini-2.0.json").read_text()))
    d, vocab, expert = 2048, 157184, 3 * 2048 * 512
    attention = d * (16 + 2 * 4) * 128 + 16 * 128 * d + 2 * 128  # QKV, dense, q/k norms
    dense = attention + 3 * d * 5120 + 2 * d
    moe = attention + (256 + 1) * expert + 256 * d + 2 * d
    assert int(c.n_total) == dense + 19 * moe + d
    assert int(c.n_total_with_embedding) == int(c.n_total) + 2 * vocab * d == 16_255_638_528
    assert round(c.n_total_with_embedding / 1e9, 2) == 16.26  # "16.26B"
    active = dense + 19 * (attention + (8 + 1) * expert + 256 * d + 2 * d) + d
    assert int(c.n_active) == active == 789_142_528  # "non-embedding 789M"
    assert round(c.n_active_with_embedding / 1e9, 2) == 1.43  # "1.43B activated"
    # the MTP layer (BailingMoeV2MTPLayer): an MoE block, eh_proj 2d -> d, enorm, hnorm and
    # final_layernorm: DeepSeek-V3's module
    assert geometry.mtp_layers == 1 and int(c.mtp) == moe + 2 * d * d + 3 * d
    router = geometry.moe.router
    assert (router.score, router.balancing, router.normalize_top_k, router.top_k_scaling,
            router.groups, router.top_groups) == ("sigmoid", "loss_free", True, 2.5, 8, 4)
    assert geometry.rope_fraction == 0.5 and geometry.qk_norm


def test_ling_flash_2_matches_its_checkpoint_total():
    """Ling-flash-2.0: its checkpoint holds 102,889,697,280 bf16 parameters (HF API
    ``safetensors.parameters.BF16``; the 7,936 fp32 ones are the 31 MoE layers' expert_bias
    buffers, not parameters); model card: 100 B total, 6.1 B activated (4.8 B non-embedding)."""
    config = json.loads((HF / "ling-mini-2.0.json").read_text()) | {
        "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 9216,
        "moe_intermediate_size": 1024, "num_attention_heads": 32,
        "moe_shared_expert_intermediate_size": 1024}
    _, c = _strict_counts(config)
    assert int(c.n_total_with_embedding) == 102_889_697_280
    # 6.15 B and 4.86 B: the card truncates, as Ling-mini-2.0's "1.4B" (1.43 B) does
    assert int(c.n_active_with_embedding / 1e8) == 61
    assert int(c.n_active / 1e8) == 48


def test_bailing_moe_v2_follows_its_modeling_code():
    """The shared MLP is moe_intermediate_size x num_shared_experts wide (a stated
    moe_shared_expert_intermediate_size saying otherwise is refused), another score function
    is refused, a null num_shared_experts builds none, and the Ling 1.x class
    (BailingMoeForCausalLM, another layout) is refused rather than read as Ling 2.0."""
    config = json.loads((HF / "ling-mini-2.0.json").read_text())
    with pytest.raises(MosaicInputError, match="moe_shared_expert_intermediate_size 1024"):
        geometry_from_hf_config(config | {"moe_shared_expert_intermediate_size": 1024})
    with pytest.raises(MosaicInputError, match="allowed: sigmoid"):
        geometry_from_hf_config(config | {"score_function": "softmax"})
    unshared = geometry_from_hf_config(config | {"num_shared_experts": None,
                                                 "moe_shared_expert_intermediate_size": None})
    assert unshared.moe.shared_experts == 0
    with pytest.raises(MosaicInputError, match=r"BailingMoeForCausalLM.*not supported"):
        geometry_from_hf_config(config | {"architectures": ["BailingMoeForCausalLM"]})
    assert geometry_from_hf_config(config | {"model_type": "bailing_moe_v2"}) == \
        geometry_from_hf_config(config)
    with pytest.raises(MosaicInputError, match="head_dim not given"):
        geometry_from_hf_config({k: v for k, v in config.items() if k != "head_dim"})
    # defaults two published copies of the config class disagree on (Megatron-Bridge's
    # reading of the checkpoints' code: qk norm, no bias, 1 shared, 1 dense, scale 1.0;
    # inclusionAI/Ming's: none, bias, 0, 0, 2.5) are refused, not guessed
    for name in ("use_qk_norm", "use_bias", "num_shared_experts", "first_k_dense_replace",
                 "routed_scaling_factor"):
        with pytest.raises(MosaicInputError, match=f"{name} not given: the published copies"):
            geometry_from_hf_config({k: v for k, v in config.items() if k != name})


# --- Granite 4.0 hybrid (granitemoehybrid) ---------------------------------------------------
def test_granite_4_h_small_by_hand():
    """GraniteMoeHybridDecoderLayer (transformers models/granitemoehybrid): a Mamba-2 mixer
    (BambaMixer) or GQA attention, then the MoE (72 experts of 768, top-10, a bias-free
    softmax router) plus a shared MLP of 1536, each half behind its own RMSNorm; embeddings
    tied. The checkpoint holds 32,207,337,984 parameters (its GGUF's n-params); model card
    (huggingface.co/ibm-granite/granite-4.0-h-small): 32 B total, 9 B active."""
    geometry, c = _strict_counts(json.loads((HF / "granite-4.0-h-small.json").read_text()))
    d, vocab, inner, heads, state = 4096, 100352, 8192, 128, 128
    conv = inner + 2 * 1 * state  # x, B, C (one group)
    mamba = d * (inner + conv + heads) + conv * (4 + 1) + 3 * heads + inner + inner * d
    attention = 2 * d * 32 * 128 + 2 * d * 8 * 128
    ffn = 72 * 3 * d * 768 + 72 * d + 3 * d * 1536
    assert int(c.n_total) == 36 * mamba + 4 * attention + 40 * (ffn + 2 * d) + d
    assert int(c.n_total_with_embedding) == int(c.n_total) + vocab * d == 32_207_337_984
    active = 36 * mamba + 4 * attention + 40 * (ffn - 62 * 3 * d * 768 + 2 * d) + d
    assert int(c.n_active) == active
    assert round(c.n_active_with_embedding / 1e9) == 9  # "9B active" (8.80 B)
    assert geometry.hybrid_pattern.count("M") == 36 and geometry.hybrid_pattern[10:12] == "*E"
    router = geometry.moe.router
    assert (router.score, router.normalize_top_k, geometry.tied_embeddings) == (
        "softmax", True, True)


def test_granite_4_h_tiny_and_micro_from_the_model_card():
    """The model card's architecture table (huggingface.co/ibm-granite/granite-4.0-h-tiny):
    H Tiny 1536 wide, 12 heads (4 KV) of 128, 48 Mamba-2 heads, 64 experts of 512 (6
    active), a shared MLP of 1024: 7 B / 1 B. H Micro (granite-4.0-h-micro) has no experts:
    num_local_experts 0 makes each FFN the dense shared MLP (8192 wide), 3 B."""
    small = json.loads((HF / "granite-4.0-h-small.json").read_text())
    tiny = small | {"hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 4,
                    "mamba_n_heads": 48, "num_local_experts": 64, "num_experts_per_tok": 6,
                    "intermediate_size": 512, "shared_intermediate_size": 1024}
    _, c = _strict_counts(tiny)
    assert round(c.n_total_with_embedding / 1e9) == 7 and int(c.n_active / 1e9) == 1
    micro = small | {"hidden_size": 2048, "num_attention_heads": 32, "mamba_n_heads": 64,
                     "mamba_d_head": 64, "num_local_experts": 0,
                     "shared_intermediate_size": 8192}
    geometry, c = _strict_counts(micro)
    assert geometry.moe is None and "E" not in geometry.hybrid_pattern
    assert geometry.ffn == 8192 and round(c.n_total_with_embedding / 1e9) == 3
    assert c.n_total == c.n_active


def test_granite_hybrid_refuses_what_mosaic_cannot_count():
    """Biased Mamba projections (mamba_proj_bias) have no place in mosaic's Mamba mixer, and
    a layer kind other than mamba or attention is not Granite's: both refused in one line."""
    config = json.loads((HF / "granite-4.0-h-small.json").read_text())
    with pytest.raises(MosaicInputError, match="mamba_proj_bias=true is not supported"):
        geometry_from_hf_config(config | {"mamba_proj_bias": True})
    with pytest.raises(MosaicInputError, match="layer_types must list 40 entries"):
        geometry_from_hf_config(config | {"layer_types": ["mamba"] * 39 + ["mlp"]})
    with pytest.raises(MosaicInputError, match="mamba_d_head 32 x mamba_n_heads 128"):
        geometry_from_hf_config(config | {"mamba_d_head": 32})


# DeepSeek-V2-Lite's config.json as transformers 5.7 writes it back (print of
# AutoConfig.from_pretrained("deepseek-ai/DeepSeek-V2-Lite"), a stored public dump): the
# class's derived head_dim (= qk_rope_head_dim), mlp_bias and rope_parameters are serialised.
DEEPSEEK_V2_LITE_TRANSFORMERS_5 = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 100000,
    "dtype": "bfloat16", "eos_token_id": 100001, "first_k_dense_replace": 1, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "mlp_bias": False, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
    "num_hidden_layers": 27, "num_key_value_heads": 16, "pad_token_id": None,
    "pretraining_tp": 1, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                        "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                        "rope_theta": 10000, "rope_type": "yarn", "type": "yarn"},
    "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy",
    "transformers_version": "5.7.0", "use_cache": True, "v_head_dim": 128,
    "vocab_size": 102400,
}


def test_an_mla_configs_derived_head_dim_is_not_warned_of_as_unread():
    """DeepseekV2Config and DeepseekV3Config set head_dim = qk_rope_head_dim (the rotary
    width; transformers models/deepseek_v3/configuration_deepseek_v3.py), so configs saved by
    transformers >= 5 state it. It has no shape of its own: the count is the paper's 15.7 B
    total (arXiv:2405.04434), with no warning that the counts may leave something out."""
    _, c = _strict_counts(DEEPSEEK_V2_LITE_TRANSFORMERS_5)
    assert round(c.n_total_with_embedding / 1e9, 1) == 15.7
    assert int((c.n_active + c.lm_head) / 1e8) == 24
    # a head_dim that is not the rotary width is no derived value: said, not read silently
    with pytest.warns(UnmodelledFieldWarning, match="head_dim 128 is not qk_rope_head_dim"):
        geometry_from_hf_config(DEEPSEEK_V2_LITE_TRANSFORMERS_5 | {"head_dim": 128})


# Qwen/Qwen2-57B-A14B config.json (huggingface.co/Qwen/Qwen2-57B-A14B), as copied whole in
# NVIDIA TensorRT-LLM's Qwen-MoE unit test (QWEN2_57B_A14B_CONFIG)
QWEN2_57B_A14B = {
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072,
    "max_window_layers": 28, "model_type": "qwen2_moe", "moe_intermediate_size": 2560,
    "norm_topk_prob": False, "num_attention_heads": 28, "num_experts": 64,
    "num_experts_per_tok": 8, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 20480,
    "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_qwen2_57b_a14b_published_totals():
    """Qwen2 technical report (arXiv:2407.10671, Table 1): Qwen2-57B-A14B, 57 B total, 14 B
    activated. By hand: q/k/v with biases, 64 routed experts, one gated shared expert."""
    _, c = _strict_counts(QWEN2_57B_A14B)
    d, kv = 3584, 4 * 128
    attention = 2 * d * d + 2 * d * kv + d + 2 * kv
    shared = 3 * d * 20480 + d  # the shared expert and its sigmoid gate
    block = attention + 64 * 3 * d * 2560 + shared + 64 * d + 2 * d
    assert int(c.n_total) == 28 * block + d
    assert round(c.n_total_with_embedding / 1e9) == 57
    assert round(c.n_active_with_embedding / 1e9) == 14


# Qwen/Qwen3-235B-A22B config.json (huggingface.co/Qwen/Qwen3-235B-A22B), as copied whole in a
# public litellm_config.py (HARD_CODED_CONFIGS); fields without a shape left out
QWEN3_235B_A22B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
    "max_window_layers": 94, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 1536, "norm_topk_prob": True, "num_attention_heads": 64,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 94,
    "num_key_value_heads": 4, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}


def test_qwen3_235b_a22b_published_totals():
    """Qwen3-235B-A22B model card: 235 B total, 234 B non-embedding, 22 B activated."""
    _, c = _strict_counts(QWEN3_235B_A22B)
    assert round(c.n_total_with_embedding / 1e9) == 235
    assert round(c.n_total / 1e9) == 234
    assert round(c.n_active_with_embedding / 1e9) == 22


# --- DBRX (dbrx) ------------------------------------------------------------------------------
# mlx-community/dbrx-instruct-4bit config.json (huggingface.co; as quoted whole in mlxcel's DBRX
# tests, which reproduce its attn_config/ffn_config with PretrainedConfig's fields in them)
DBRX_INSTRUCT = {
    "architectures": ["DbrxForCausalLM"],
    "attn_config": {
        "return_dict": True, "output_hidden_states": False, "torch_dtype": None,
        "tie_word_embeddings": True, "max_length": 20, "temperature": 1.0, "top_k": 50,
        "top_p": 1.0, "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "model_type": "",
        "attn_pdrop": 0, "clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000,
    },
    "d_model": 6144, "emb_pdrop": 0.0,
    "ffn_config": {
        "return_dict": True, "tie_word_embeddings": True, "temperature": 1.0, "model_type": "",
        "ffn_act_fn": {"name": "silu"}, "ffn_hidden_size": 10752, "moe_num_experts": 16,
        "moe_top_k": 4, "moe_jitter_eps": 0, "moe_loss_weight": 0.05,
        "moe_normalize_expert_weights": 1, "uniform_expert_assignment": False,
    },
    "initializer_range": 0.02, "max_seq_len": 32768, "model_type": "dbrx", "n_heads": 48,
    "n_layers": 40, "output_router_logits": False, "quantization": {"group_size": 64, "bits": 4},
    "resid_pdrop": 0.0, "router_aux_loss_coef": 0.05, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.39.2", "use_cache": True,
    "vocab_size": 100352,
}


def _dbrx(config: dict) -> tuple[object, list[str]]:
    """The geometry of a DBRX config and the warnings its import gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        geometry = geometry_from_hf_config(config, "dbrx.json")
    return geometry, [str(w.message) for w in caught]


def test_dbrx_instruct_by_hand():
    """DBRX (Databricks, 2024-03 announcement: 132 B total, 36 B active) as transformers
    models/dbrx/modeling_dbrx.py builds it, d = 6144, head_dim 6144 / 48 = 128, 8 KV heads:

    - attention: Wqkv d x (d + 2 x 8 x 128) = 6144 x 8192 and out_proj d x d, no biases:
      50,331,648 + 37,748,736 = 88,080,384
    - experts: 16 x 3 x d x 10752 (w1, v1, w2) = 3,170,893,824; router 16 x d = 98,304
    - norms: norm_1 and norm_2, LayerNorm(bias=False), 2 x d = 12,288
    - block 3,259,084,800; 40 blocks + norm_f (d) = 130,363,398,144
    - embedding + untied LM head 2 x 100352 x d = 1,233,125,376: 131,596,523,520 in all
    - active: 40 x (88,080,384 + 98,304 + 12,288 + 4 x 3 x d x 10752) + d + 1,233,125,376
      = 36,469,708,800

    mosaic's LayerNorm counts a bias too: 81 norms x d = 497,664 more, said in a warning."""
    geometry, said = _dbrx(DBRX_INSTRUCT)
    assert len(said) == 1 and "497,664 parameters more than the checkpoint" in said[0]
    c = count_parameters(geometry)
    d, vocab, width = 6144, 100352, 10752
    attention = d * (d + 2 * 8 * 128) + d * d
    assert attention == 88_080_384
    block = attention + 16 * 3 * d * width + 16 * d + 2 * d
    checkpoint_total = 40 * block + d + 2 * vocab * d
    assert checkpoint_total == 131_596_523_520
    bias_excess = (2 * 40 + 1) * d
    assert int(c.n_total_with_embedding) == checkpoint_total + bias_excess
    active = 40 * (attention + 16 * d + 2 * d + 4 * 3 * d * width) + d + 2 * vocab * d
    assert active == 36_469_708_800
    assert int(c.n_active_with_embedding) == active + bias_excess
    assert round(c.n_total_with_embedding / 1e9) == 132  # "132B total parameters"
    assert round(c.n_active_with_embedding / 1e9) == 36  # "36B ... active"
    assert (geometry.norm, geometry.activation_name, geometry.rope_base) == ("layernorm", "swiglu",
                                                                         500000.0)
    assert (geometry.moe.router.score, geometry.moe.router.normalize_top_k) == ("softmax", True)
    assert not (geometry.tied_embeddings or geometry.qkv_bias or geometry.output_bias)


def test_dbrx_reads_its_nested_blocks_field_by_field():
    """A field of attn_config/ffn_config no DBRX module reads is named as block.field; the
    PretrainedConfig clutter and the training-only fields are not; a null p-norm leaves the
    top-k weights unnormalised (DbrxRouter); refusals name the field."""
    attn = DBRX_INSTRUCT["attn_config"] | {"sliding_window": 4096}
    _, said = _dbrx(DBRX_INSTRUCT | {"attn_config": attn})
    assert any("fields mosaic does not read: attn_config.sliding_window" in s for s in said)
    ffn = DBRX_INSTRUCT["ffn_config"] | {"moe_normalize_expert_weights": None}
    geometry, _ = _dbrx(DBRX_INSTRUCT | {"ffn_config": ffn})
    assert not geometry.moe.router.normalize_top_k
    no_kv = {k: v for k, v in DBRX_INSTRUCT["attn_config"].items() if k != "kv_n_heads"}
    for change, message in (({"attn_config": no_kv}, "attn_config: missing required field "
                             "'kv_n_heads'"),
                            ({"tie_word_embeddings": True}, "tie_word_embeddings=true"),
                            ({"ffn_config": [1]}, "ffn_config must be a JSON object")):
        with pytest.raises(MosaicInputError, match=message):
            _dbrx(DBRX_INSTRUCT | change)
