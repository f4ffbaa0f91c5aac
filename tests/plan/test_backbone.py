"""Planning around the user's backbone (issue 10 §2): the grid keeps what the user runs,
and the search over it picks what evaluating every candidate by hand picks."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.arch import AttentionKind, count_parameters
from mosaic.arch.backbone import backbone_variant
from mosaic.arch.hf_import import geometry_from_hf_config, load_hf_config
from mosaic.cli.main import app
from mosaic.config.model_file import load_model_file
from mosaic.errors import MosaicInputError, MosaicNote
from mosaic.export.spec import spec_from_plan_document
from mosaic.perf.layouts import LayoutLimits
from mosaic.perf.workload import Dispatcher, Precision
from mosaic.plan import Envelope, SearchSpace, resolve_system, search

from .test_search import brute_force

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HF = EXAMPLES / "hf"

# A Qwen3-MoE-shaped toy (GQA, per-head q/k norms, no shared expert): d 256, 4 heads of
# 64, 2 KV heads, d_ff 768, 16 experts of width 96 (G = 8), top-2, 4 blocks.
TOY_QWEN = {"model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "intermediate_size": 768, "moe_intermediate_size": 96, "num_experts": 16,
            "num_experts_per_tok": 2, "vocab_size": 32000}


def test_variants_keep_mla_shared_experts_dense_prefix_and_vocab():
    v3 = load_hf_config(HF / "deepseek-v3.json")
    space = SearchSpace(backbone=v3, layers=(16, 61), d_model=(3584, 7168),
                        experts=(64, 256), top_k=(4, 8), split_factor=(9,), s_min=0.0)
    grid = space.enumerate()
    assert len(grid) == 16 and not grid.is_ladder
    for row in range(len(grid)):
        g = grid.geometry(row)
        assert g.attention is AttentionKind.MLA and g.mla == v3.mla
        assert g.vocab == 129280 and g.mtp_layers == 1 and g.norm == v3.norm
        assert g.moe.shared_experts == 1 and g.moe.dense_layers == 3
        assert g.head_dim == v3.head_dim and g.heads * 7168 == 128 * g.d_model
        c = count_parameters(g)
        assert grid.n_total[row] == float(c.n_total)
        assert grid.sparsity[row] == pytest.approx(float(c.sparsity), rel=1e-15)


def test_the_backbones_own_point_is_the_backbone():
    """L, d, E, K, G of DeepSeek-V3 itself give back the imported model (671 B total)."""
    v3 = load_hf_config(HF / "deepseek-v3.json")
    own = backbone_variant(v3, 61, 7168, 256, 8, 18432 // 2048)
    assert own == v3
    assert round(count_parameters(own).n_total_with_embedding / 1e9, 1) == 671.0


def test_width_and_split_scale_by_hand():
    """Qwen3-30B-A3B at d = 1024: heads 32·1024/2048 = 16 (KV 4 kept), d_ff 6144/2 = 3072,
    G = 4 -> d_expert 768; the per-head q/k norms stay."""
    qwen = load_hf_config(HF / "qwen3-30b-a3b.json")
    g = backbone_variant(qwen, 24, 1024, 64, 4, 4)
    assert (g.heads, g.kv_heads, g.head_dim, g.ffn) == (16, 4, 128, 3072)
    assert (g.moe.experts, g.moe.top_k, g.moe.expert_ffn) == (64, 4, 768)
    assert g.qk_norm and g.vocab == qwen.vocab and g.attention is AttentionKind.GQA
    with pytest.raises(MosaicInputError, match="does not divide d_ff"):
        backbone_variant(qwen, 24, 1024, 64, 4, 5)
    with pytest.raises(MosaicInputError, match="integers"):
        backbone_variant(qwen, 24, 1000, 64, 4, 4)


def test_backbone_search_picks_what_evaluating_each_candidate_picks(law, calibration):
    """A 12-variant grid around the toy on one node: every candidate is evaluated one plan
    at a time (predict_step per layout, Eq. 25 tokens, the law), and the search's ranking
    and optimum equal that hand evaluation; the chosen model keeps the backbone's traits."""
    toy = geometry_from_hf_config(TOY_QWEN)
    envelope = Envelope(resolve_system("B200"), n_nodes=1, days=0.05, global_batch=64,
                        precision=Precision.FP8, dispatcher=Dispatcher.DEEPEP)
    space = SearchSpace(backbone=toy, layers=(4, 8), d_model=(256, 512), experts=(8, 16),
                        top_k=(1, 2), split_factor=(8,), s_min=0.0, tpp_min=1.0,
                        tpp_max=1e6)
    limits = LayoutLimits(micro_batches=(1, 2), vpp=(1,), sharding=("zero1",),
                          checkpointing=("none",))
    result = search(envelope, space, law, calibration, limits=limits, workers=1)
    scored = brute_force(envelope, space, law, calibration, limits)
    assert len(result.grid) == 16 and len(scored) >= 8
    assert sorted(scored) == sorted(result.ranking.tolist())
    for row, (loss, _) in scored.items():
        assert result.loss[row] == pytest.approx(loss, rel=1e-12)
    best = min(scored, key=lambda r: scored[r][0])
    assert result.optimum_index == best
    chosen = result.grid.geometry(best)
    assert chosen.qk_norm and chosen.kv_heads == 2 and chosen.vocab == 32000


def test_cli_backbone_json_names_the_backbone_and_the_headroom(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TOY_QWEN))
    args = ["plan", "--backbone", str(config), "--layers", "4,8", "--experts", "8,16",
            "--nodes", "1", "--days", "0.05", "--global-batch", "64", "--tpp", "1:1000000",
            "--s-min", "0", "--workers", "1", "--html", str(tmp_path / "plan.html"), "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    backbone = document["search_space"]["backbone"]
    assert (backbone["attention"], backbone["vocab"], backbone["kv_heads"]) == ("gqa", 32000, 2)
    assert document["search_space"]["layers"] == [4, 8]
    assert document["optimum"]["layers"] in (4, 8)
    assert document["optimum"]["d_model"] == 256 and document["optimum"]["top_k"] == 2
    # The optimum carries its whole model: export rebuilds exactly the searched variant.
    toy = geometry_from_hf_config(TOY_QWEN)
    optimum = document["optimum"]
    expected = backbone_variant(toy, optimum["layers"], optimum["d_model"],
                                optimum["experts"], optimum["top_k"], optimum["split_factor"])
    assert spec_from_plan_document(document, "plan.json").geometry == expected
    assert (tmp_path / "plan.html").stat().st_size > 0
    headroom = document["envelope"]["memory_headroom"]
    assert headroom["usable_memory_fraction"] == 0.9 and headroom["origin"] == "default"
    assert headroom["usable_memory_bytes"] == pytest.approx(
        0.9 * document["envelope"]["hbm_bytes_per_device"])


def test_cli_backbone_errors_are_one_line(tmp_path):
    dense = tmp_path / "llama.json"
    dense.write_text((HF / "llama-3-8b.json").read_text())
    runner = CliRunner()
    out = runner.invoke(app, ["plan", "--backbone", str(dense)])
    assert out.exit_code == 2 and "needs --experts and --top-k" in out.output
    out = runner.invoke(app, ["plan", "--backbone", str(dense), "--q", "8"])
    assert out.exit_code == 2 and "--layers and --d-model" in out.output
    out = runner.invoke(app, ["plan", "--layers", "8"])
    assert out.exit_code == 2 and "vary a --backbone" in out.output


def test_the_ladder_rung_as_a_backbone_gives_the_ladders_grid():
    """examples/q12_moe.yaml is Table 4's q=12 rung: varying E, K and G around it gives
    exactly the ladder's q=12 rows (same counts, sparsity and geometries)."""
    rung = load_model_file(EXAMPLES / "q12_moe.yaml")
    axes = {"experts": (16, 96), "top_k": (1, 2), "split_factor": (1, 4)}
    ladder = SearchSpace(q=(12,), **axes, s_min=0.0).enumerate()
    backbone = SearchSpace(backbone=rung, **axes, s_min=0.0).enumerate()
    assert len(backbone) == len(ladder) == 8
    for name in ("layers", "d_model", "experts", "top_k", "split_factor", "expert_ffn",
                 "n_total", "n_active", "sparsity"):
        assert getattr(backbone, name).tolist() == getattr(ladder, name).tolist(), name
    assert all(backbone.geometry(r) == ladder.geometry(r) for r in range(len(ladder)))


def test_a_missing_backbone_file_names_the_flag():
    out = CliRunner().invoke(app, ["plan", "--backbone", "no/such/config.json"])
    assert out.exit_code == 2 and "--backbone no/such/config.json: no such file" in out.output


def test_a_backbone_plan_names_its_candidates_by_depth_and_width_and_keeps_its_notes(tmp_path):
    # A windowed backbone (GPT-OSS style: a 16-key window on alternate layers): the plan says
    # what the step time leaves out of it, and its candidates are L x d variants (no ladder q).
    config = tmp_path / "config.json"
    layer_types = ["sliding_attention", "full_attention"] * (TOY_QWEN["num_hidden_layers"] // 2)
    config.write_text(json.dumps(TOY_QWEN | {"sliding_window": 16, "use_sliding_window": True,
                                             "layer_types": layer_types}))
    args = ["plan", "--backbone", str(config), "--layers", "4,8", "--experts", "8,16",
            "--nodes", "1", "--days", "0.05", "--global-batch", "64", "--tpp", "1:1000000",
            "--s-min", "0", "--workers", "1"]
    document = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert any("sliding window of 16 keys" in line for line in document["assumptions"]["model"])
    optimum = document["uncertainty"]["optimum"]
    assert optimum["q"] == 0 and optimum["layers"] in (4, 8) and optimum["d_model"] == 256
    text = CliRunner().invoke(app, args).stdout
    assert "model: sliding window of 16 keys" in text
    assert f"L={optimum['layers']} d=256 E={optimum['experts']}" in text and "q=0" not in text


def test_variants_keep_the_backbones_expert_groups_only_where_they_still_fit():
    """DeepSeek-V3's router limits a token to 4 of 8 groups; a variant whose E the 8 groups
    do not divide (or whose K the 4 groups cannot hold) routes without groups instead of
    being refused (a review: E = 12, 20, 36 made every variant inadmissible)."""
    v3 = load_hf_config(EXAMPLES / "hf" / "deepseek-v3.json")
    d, layers = v3.d_model, v3.layers
    kept = backbone_variant(v3, layers, d, 64, 8, 4)
    assert (kept.moe.router.groups, kept.moe.router.top_groups) == (8, 4)
    dropped = backbone_variant(v3, layers, d, 12, 8, 4)
    assert (dropped.moe.router.groups, dropped.moe.router.top_groups) == (None, None)
    assert dropped.moe.router.score == "sigmoid"  # the rest of the router stays


def test_a_router_whose_groups_are_all_in_reach_is_no_group_limit():
    from mosaic.arch import RouterConfig

    assert RouterConfig(groups=2, top_groups=2) == RouterConfig()


def test_a_model_too_large_for_the_window_says_how_many_tokens_it_would_get(law,
                                                                           calibration):
    """DeepSeek-V3 as it is on 256 H100 for 21 days: its best layout gets D* tokens, well
    under 40·N_act. The refusal said only 'window too short'; it now gives D* and the need,
    the same figures the JSON's infeasible row carries."""
    args = ["plan", "--gpu", "H100", "--nodes", "32", "--days", "21",
            "--backbone", str(HF / "deepseek-v3.json")]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2
    message = out.stderr.strip()
    assert "\n" not in message
    assert "closest: L=61 d=7168 E=256 K=8 G=9, whose best layout gets " in message
    v3 = load_hf_config(HF / "deepseek-v3.json")
    needed = 40 * count_parameters(v3).n_active
    assert f"the {needed:.3g} (tpp_min·N_act) it needs" in message
    envelope = Envelope(resolve_system("H100"), n_nodes=32, days=21)
    space = SearchSpace(backbone=v3, layers=(61,), d_model=(7168,), experts=(256,),
                        top_k=(8,), split_factor=(9,))
    result = search(envelope, space, law, calibration)
    (row,) = result.infeasible()
    assert row["min_tokens"] == pytest.approx(needed)
    assert 0 < row["budget_tokens"] < needed
    assert f"gets {row['budget_tokens']:.3g} tokens in the window" in message


def test_a_job_file_as_backbone_says_which_of_its_blocks_the_plan_does_not_read(tmp_path):
    """A team passed its whole job file (batch 8192 x 4096, Megatron-Bridge, DGX-H100) as
    --backbone and got a plan at 1024 x 2048 on megatron-core with no word that those blocks
    were dropped. The note names them and the options that set them; a model-only file, the
    same model with nothing else, gets no note and the same plan."""
    import yaml

    job = yaml.safe_load((EXAMPLES / "deepseek_v3_h100.yaml").read_text())
    job_file, model_file = tmp_path / "job.yaml", tmp_path / "model.yaml"
    job_file.write_text(yaml.safe_dump(job))
    model_file.write_text(yaml.safe_dump({"model": job["model"]}))
    base = ["plan", "--gpu", "H100", "--nodes", "32", "--days", "21", "--layers", "24",
            "--d-model", "3584", "--workers", "1", "--json", "--backbone"]
    with pytest.warns(MosaicNote, match="is a job file") as notes:
        with_job = CliRunner().invoke(app, [*base, str(job_file)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", MosaicNote)  # no note at all for a model-only file
        model_only = CliRunner().invoke(app, [*base, str(model_file)])
    assert with_job.exit_code == 0 and model_only.exit_code == 0, with_job.output
    note = next(str(n.message) for n in notes if "is a job file" in str(n.message))
    assert note.startswith(
        f"--backbone {job_file} is a job file: the plan reads its model block alone; its "
        "parallelism, batch, performance and hardware blocks are not read")
    assert "--global-batch/--seq-len" in note and "--stack/--stack-version" in note
    assert json.loads(with_job.stdout)["optimum"] == json.loads(model_only.stdout)["optimum"]


def test_a_width_that_does_not_scale_the_backbone_lists_the_widths_that_do():
    """`--backbone deepseek-v3.json --d-model 2048` was refused without a width that works.
    Heads 128·d/7168 and d_ff 18432·d/7168 are integers when d is a multiple of
    7168/gcd(7168, 128) = 56 and of 7168/gcd(7168, 18432) = 7168/1024 = 7: of 56. Nearest
    2048: 36·56 = 2016 and 37·56 = 2072; d/4, 3d/8, d/2 = 1792, 2688, 3584."""
    v3 = load_hf_config(HF / "deepseek-v3.json")
    with pytest.raises(MosaicInputError) as error:
        backbone_variant(v3, 24, 2048, 256, 8, 9)
    assert ("the widths that do are the multiples of 56 (nearest: 2016 and 2072; 1792, 2688, "
            "3584 are d/4, 3d/8, d/2)") in str(error.value)
    for width in (2016, 2072, 1792, 2688, 3584):  # each one it lists is a variant
        assert backbone_variant(v3, 24, width, 256, 8, 9).d_model == width
    result = CliRunner().invoke(app, ["plan", "--gpu", "H100", "--backbone",
                                      str(HF / "deepseek-v3.json"), "--d-model", "2048"])
    assert result.exit_code == 2 and "multiples of 56 (nearest: 2016 and 2072" in result.stderr


def test_the_job_note_names_a_search_block_and_blocks_in_the_papers_spelling(tmp_path):
    """The note named parallelism, performance, hardware and optimizer for the paper's
    Appendix E job (examples/appendix_e.yaml) and left out its batch, written `data:` in the
    paper's spelling (gbs 8192, seqlen 8192: the batch a trial lost), and its `search:`
    block (devices and the layout limits `mosaic export` writes), which the plan does not
    read either."""
    from mosaic.plan.inputs import job_blocks_not_read

    note = job_blocks_not_read(EXAMPLES / "appendix_e.yaml")
    assert note is not None
    blocks = note.partition("; its ")[2].partition(" blocks are not read")[0]
    for block in ("parallelism", "batch", "performance", "hardware", "optimizer", "search"):
        assert block in blocks, note
    assert "--global-batch/--seq-len" in note and "--mbs" in note, note
    exported = tmp_path / "exported.yaml"  # a model and the search block alone
    exported.write_text("model:\n  layers: 4\nsearch:\n  pp: [1, 2]\n")
    assert "its search block is not read" in (job_blocks_not_read(exported) or ""), \
        job_blocks_not_read(exported)
