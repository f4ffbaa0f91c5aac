"""What an exported file means once launched, checked against each framework's defaults.

An export review ran every Megatron file through Megatron-LM's own parser and loaded every
torchtitan TOML in v0.2.2: the keys were right, but six files trained something other than
the job (or could not start), each from a framework default the file left in place. Each
case below names the default (from the framework's source) the file must override.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.arch.hf_import import load_hf_config
from mosaic.cli.export_cmd import load_export_spec
from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.export import export

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
runner = CliRunner()


def _spec(name: str, overrides: list[str] | None = None):
    return load_export_spec(EXAMPLES / name, overrides or [], None)


def _megatron_flags(text: str) -> list[str]:
    return shlex.split("\n".join(line for line in text.splitlines()
                                 if not line.startswith("#")))


def test_a_precision_the_gpus_cannot_run_is_refused_not_exported():
    """MXFP8 needs Blackwell (Transformer Engine check_mxfp8_support): `mosaic perf` refuses
    it on H100, and so must export, with exit 2 and one line, not a memory note."""
    result = runner.invoke(app, ["export", str(EXAMPLES / "fsdp_moe_comm_bound.yaml"),
                                 "--to", "megatron", "--set", "performance.precision=mxfp8"])
    assert result.exit_code == 2
    assert "precision mxfp8 needs a Blackwell GPU" in result.output
    assert "--fp8-recipe" not in result.output


def test_torchtitan_names_model_parts_no_flavor_can_build():
    """torchtitan v0.2.2's families have no MTP (DeepSeekV3ModelArgs has no such field),
    llama4 makes block i MoE where (i + 1) % interleave_moe_layer_step == 0 (default 2),
    so a dense prefix it builds only as step - 1 blocks, and the file says which release
    reads TOML."""
    deepseek = export(_spec("deepseek_v3_h100.yaml"), "torchtitan")
    assert any("1 multi-token-prediction module(s)" in note for note in deepseek.unsupported)
    assert not any("dense first block" in note for note in deepseek.unsupported)  # it has one
    assert "--job.config_file" in deepseek.text and "v0.2.2" in deepseek.text
    tomllib.loads(deepseek.text)  # the launch line is a comment
    # a ladder geometry (the paper's: a dense first block, then every block MoE): llama4
    # cannot place it (step 1 makes block 0 MoE, step 2 every second block)
    ladder = export(_spec("appendix_e.yaml", ["model.moe.dense_layers=1"]), "torchtitan")
    assert not any("interleave_moe_layer_step=" in note for note in ladder.unsupported)
    assert any("after 1 dense first block(s), then every 1" in note and "llama4" in note
               for note in ladder.unsupported)
    # every block MoE: step 1; Llama 4's own alternation (a dense block, then every second
    # block MoE): step 2, its default, with no dense-prefix note (a trial's note asked for
    # 1, which made every block MoE)
    every = export(_spec("appendix_e.yaml", ["model.moe.dense_layers=0"]), "torchtitan")
    assert any("interleave_moe_layer_step=1 (its default 2" in n for n in every.unsupported)
    alternating = export(_spec("appendix_e.yaml", ["model.moe.dense_layers=1",
                                                   "model.moe.moe_every=2"]), "torchtitan")
    assert any("interleave_moe_layer_step=2" in note for note in alternating.unsupported)
    assert not any("dense first block" in note for note in alternating.unsupported)
    assert any("num_shared_experts=0 and score_before_experts=False" in note
               for note in alternating.unsupported)


def test_a_hybrid_megatron_file_trains_its_router_balanced():
    """Megatron-LM's --moe-aux-loss-coeff defaults to 0.0 (arguments.py): a hybrid MoE file
    without the costed balancing trained its router unbalanced (Qwen3-Next); the MTP module
    goes into the unified --hybrid-layer-pattern after a '/'."""
    result = export(_spec("qwen3_next_80b_b200.yaml"), "megatron")
    flags = _megatron_flags(result.text)
    assert flags[flags.index("--moe-router-load-balancing-type") + 1] == "aux_loss"
    assert float(flags[flags.index("--moe-aux-loss-coeff") + 1]) == 1e-3
    assert any("'/'-separated segment after --hybrid-layer-pattern" in note
               for note in result.unsupported)



def test_a_hybrid_job_that_states_its_mtp_depth_is_not_told_to_add_one():
    """A hybrid job may state its MTP depths (model.mtp_layers with model.mtp_pattern): the
    Megatron file then carries them after a '/' in --hybrid-layer-pattern, and neither
    export says the recipe's MTP module is missing."""
    stated = _spec("qwen3_next_80b_b200.yaml", ["model.mtp_layers=1", "model.mtp_pattern=*E"])
    megatron = export(stated, "megatron")
    flags = _megatron_flags(megatron.text)
    assert "/" in flags[flags.index("--hybrid-layer-pattern") + 1]
    assert not any("trains one MTP module" in note for note in megatron.unsupported)
    assert not any("trains one MTP module" in note
                   for note in export(stated, "nemo").unsupported)

def test_maxtext_runs_the_jobs_optimizer():
    """base.yml's opt_type defaults to adamw: a Muon job must say muon, on a decoder MaxText
    runs Muon for (a qk-norm model: qwen3_moe is not one, so a dense qwen3 here); on the
    others (mixtral: the paper's model) types.py refuses it, so adamw is written and said."""
    dense_qwen3 = _spec("appendix_e.yaml", ["model.qk_norm=true", "model.moe=null",
                                            "parallelism.ep=1"])
    document = yaml.safe_load(export(dense_qwen3, "maxtext").text)
    assert (document["decoder_block"], document["opt_type"]) == ("qwen3", "muon")
    mixtral = export(_spec("appendix_e.yaml"), "maxtext")
    assert yaml.safe_load(mixtral.text)["opt_type"] == "adamw"
    assert any(note.startswith("optimizer muon: MaxText runs Muon on the deepseek")
               for note in mixtral.unsupported)
    adam = export(_spec("appendix_e.yaml", ["optimizer.optimizer_type=adamw"]), "maxtext")
    assert yaml.safe_load(adam.text)["opt_type"] == "adamw"


def test_maxtext_files_pass_its_moe_checks():
    """MaxText's config checks (src/maxtext/configs/types.py @ e591f30), which a trial's
    exports failed: a fully MoE model's base_mlp_dim equals base_moe_mlp_dim; GPT-OSS is
    dropless only (token drop exported dropless, said); the deepseek decoder pipelines its
    MoE layers only, so 64 layers with 3 dense ones on pp 8 is an uneven split, said."""
    fully = yaml.safe_load(export(_spec("appendix_e.yaml"), "maxtext").text)
    assert fully["base_mlp_dim"] == fully["base_moe_mlp_dim"] == 3840
    oss = export(_spec("appendix_e.yaml", ["model.attention_sinks=true",
                                           "performance.routing=token_drop"]), "maxtext")
    document = yaml.safe_load(oss.text)
    assert document["decoder_block"] == "gpt_oss" and document["capacity_factor"] == -1.0
    assert any("gpt_oss decoder is dropless only" in note for note in oss.unsupported)
    deepseek = export(_spec("deepseek_v3_h100.yaml", [
        "model.layers=64", "parallelism.pp=8", "parallelism.vpp=1", "model.mtp_layers=0",
        "performance.stack=megatron-core", "performance.stack_version=null",
        "parallelism.ep=32"]), "maxtext")
    document = yaml.safe_load(deepseek.text)
    assert document["num_layers_per_pipeline_stage"] == 61 // 8
    assert any(note.startswith("uneven pipeline stages (61 pipelined layers (the deepseek")
               for note in deepseek.unsupported)
    # types.py l. 3576-3582 @ e591f30 asserts stages x layers per stage divides the
    # pipelined layers: 56 of the 61 are pipelined, the other 5 run outside (a review's
    # files stopped at start-up without pipeline_parallel_layers)
    assert document["pipeline_parallel_layers"] == 56
    assert any("the other 5 run outside the pipeline" in note for note in deepseek.unsupported)
    # 61 layers on pp 2 are uneven as costed, but MaxText's 58 MoE layers split evenly: the
    # file is launchable, and says it runs equal stages (a review found it called unlaunchable)
    even = export(_spec("deepseek_v3_h100.yaml", ["parallelism.pp=2", "parallelism.vpp=1",
                                                  "performance.uneven_stages=true"]), "maxtext")
    assert yaml.safe_load(even.text)["num_layers_per_pipeline_stage"] == 29
    assert "pipeline_parallel_layers" not in yaml.safe_load(even.text)
    notes = " | ".join(even.unsupported)
    assert "MaxText needs equal stages" not in notes
    assert "MaxText runs 2 equal stages of its 58 pipelined layers" in notes


def _maxtext_repeats(document: dict) -> int:
    """MaxText's num_pipeline_repeats for a file leaving it at -1 (types.py l. 3565-3603
    @ e591f30): pipeline_parallel_layers (default: the deepseek decoder's MoE layers) over
    stages x num_layers_per_pipeline_stage, which must divide it."""
    stages = document["ici_pipeline_parallelism"] * document["dcn_pipeline_parallelism"]
    piped = document.get("pipeline_parallel_layers",
                         document["base_num_decoder_layers"] - document["first_num_dense_layers"])
    repeats, remainder = divmod(piped, stages * document["num_layers_per_pipeline_stage"])
    assert remainder == 0
    return repeats


def test_maxtext_says_when_its_virtual_stages_per_rank_differ_from_the_costed_vpp():
    """MaxText's circular pipeline runs num_pipeline_repeats virtual stages per rank
    (layers/pipeline.py; base.yml's bubble (stages - 1) / (repeats · microbatches + stages -
    1)). DeepSeek-V3's 58 MoE layers on pp 8 x vpp 4 are written as 56 stages of 1 layer:
    56 / (8 x 1) = 7 repeats, not the 4 costed, which the note says in numbers; on vpp 2,
    16 stages of 3 layers keep 2 repeats, as costed."""
    four = export(_spec("deepseek_v3_h100.yaml"), "maxtext")
    document = yaml.safe_load(four.text)
    assert _maxtext_repeats(document) == 7
    note = next(n for n in four.unsupported if n.startswith("uneven pipeline stages"))
    assert "56 stages of 1 layer written: 7 virtual stages per rank" in note
    assert "not the costed vpp 4" in note and "1 layers" not in note
    # the vpp-keeping split: 8 x 4 x 1 = 32 pipelined, 58 - 32 = 26 outside
    assert "num_pipeline_repeats 4 would pipeline 32 and leave 26 outside" in note
    two = export(_spec("deepseek_v3_h100.yaml", ["parallelism.vpp=2"]), "maxtext")
    assert _maxtext_repeats(yaml.safe_load(two.text)) == 2
    note = next(n for n in two.unsupported if n.startswith("uneven pipeline stages"))
    assert "16 stages of 3 layers written (pp 8 x vpp 2, as costed)" in note
    assert "virtual stages per rank" not in note


def test_bridge_overrides_set_rope_and_name_the_activation_the_recipe_must_give():
    """GPTModelProvider defaults to position_embedding_type 'learned_absolute' and keeps
    TransformerConfig's gelu (Megatron-Bridge gpt_provider.py): the file writes RoPE and
    SwiGLU by name (activation_func silu, read from NeMo 26.04), and names how it is
    launched."""
    result = export(_spec("appendix_e.yaml"), "nemo")
    model = yaml.safe_load(result.text)["model"]
    assert model["position_embedding_type"] == "rope"
    assert model["activation_func"] == "silu" and model["gated_linear_unit"] is True
    assert not any("FFN activation swiglu" in note for note in result.unsupported)
    assert "# launch: a Megatron-Bridge pretrain script that merges --config-file" in \
        result.text
    # a Mamba hybrid keeps its provider's 'none'
    nano = yaml.safe_load(export(_spec("nemotron_3_nano_b200.yaml"), "nemo").text)
    assert "position_embedding_type" not in nano["model"]


def test_bridge_names_the_hybrid_pattern_as_the_jobs_release_reads_it():
    """Megatron-Bridge 26.04+ recipes set hybrid_layer_pattern and assert it is not set with
    the deprecated hybrid_override_pattern (a trial merged an export over the Nemotron 3 Nano
    recipe); up to 26.02 only hybrid_override_pattern exists."""
    old = yaml.safe_load(export(_spec("nemotron_3_nano_b200.yaml"), "nemo").text)["model"]
    assert "hybrid_layer_pattern" not in old and old["hybrid_override_pattern"].startswith("MEM")
    new = yaml.safe_load(export(_spec("nemotron_3_nano_b200.yaml",
                                      ["performance.stack_version=26.06"]), "nemo").text)
    model = new["model"]
    assert model["hybrid_layer_pattern"] == old["hybrid_override_pattern"]
    assert "hybrid_override_pattern" in model and model["hybrid_override_pattern"] is None


def test_torchtitan_says_what_its_families_do_not_build():
    """torchtitan v0.2.2 carves expert groups out of the FSDP shard ranks (parallel_dims.py:
    efsdp = dp_shard·cp·tp/(etp·ep)), unties embeddings outside qwen3 and has no DeepEP path
    for gpt_oss: each is said where a trial found the file silently different or unlaunchable."""
    # the same divisibility Megatron-Core asks of HSDP's optimizer instances (ep·etp must
    # divide hsdp_shard·tp·cp either way): the Megatron job is refused before any export
    with pytest.raises(MosaicInputError, match="optimizer instances must divide"):
        _spec("appendix_e.yaml", ["parallelism.sharding=hsdp", "parallelism.hsdp_shard=2"])
    hsdp = export(_spec("appendix_e.yaml", ["performance.stack=deepspeed",
                                            "parallelism.sharding=hsdp",
                                            "parallelism.hsdp_shard=2"]), "torchtitan")
    assert any("over 2 FSDP-shard ranks" in note and "does not start" in note
               for note in hsdp.unsupported)
    fsdp = export(_spec("appendix_e.yaml", ["parallelism.sharding=fsdp"]), "torchtitan")
    assert not any("FSDP-shard ranks" in note for note in fsdp.unsupported)
    oss = export(_spec("appendix_e.yaml", ["model.attention_sinks=true",
                                           "parallelism.dispatcher=deepep"]), "torchtitan")
    assert 'expert_parallel_comm_backend = "deepep"' in oss.text
    assert any(note.startswith("DeepEP dispatcher: torchtitan's gpt_oss family")
               for note in oss.unsupported)
    tied = export(_spec("appendix_e.yaml", ["model.tied_embeddings=true"]), "torchtitan")
    assert any(note.startswith("tied input and output embeddings: torchtitan's llama4")
               for note in tied.unsupported)


def test_torchtitan_without_fsdp_under_tp_says_it_trains_in_fp32():
    """torchtitan v0.2.2's maybe_enable_amp disables mixed precision with TP or PP and
    neither FSDP nor CP (distributed/utils.py): the file would train in fp32 where mosaic
    costed bf16, which the notes say (a trial); with FSDP they do not."""
    note = "no FSDP shard degree with tp or pp > 1"
    plain = export(_spec("appendix_e.yaml", ["parallelism.sharding=none"]), "torchtitan")
    assert any(n.startswith(note) for n in plain.unsupported)
    sharded = export(_spec("appendix_e.yaml", ["parallelism.sharding=fsdp"]), "torchtitan")
    assert not any(n.startswith(note) for n in sharded.unsupported)
    # zero1 over one data-parallel rank: a shard degree of 1 too (a review)
    alone = export(_spec("appendix_e.yaml", ["search.devices=64", "parallelism.tp=8",
                                             "parallelism.pp=8", "parallelism.dp=1",
                                             "parallelism.ep=1", "batch.micro_seqs=1"]),
                   "torchtitan")
    assert any(n.startswith(note) for n in alone.unsupported)


def test_a_muon_job_is_not_exported_as_megatron_fsdp():
    """Megatron-LM's validate_args: Megatron-FSDP takes SGD and Adam only ("Megatron-FSDP
    does not support the muon optimizer yet"): the Appendix E job (Muon) sharded as FSDP is
    refused for megatron with the way out, and exports as zero1 (a trial's file stopped at
    start-up). Megatron-Bridge does not run that check, and its file names no Muon config
    (a review), so nemo still writes one."""
    spec = _spec("appendix_e.yaml", ["parallelism.sharding=fsdp"])
    assert spec.optimizer == "muon"
    with pytest.raises(MosaicInputError, match="does not support the muon optimizer"):
        export(spec, "megatron")
    assert export(spec, "nemo").text
    zero1 = export(_spec("appendix_e.yaml"), "megatron").text.splitlines()
    assert "--optimizer muon" in zero1 and "--use-distributed-optimizer" in zero1
    assert "--use-megatron-fsdp" not in zero1


def test_a_phi_moe_export_says_add_bias_linear_biases_its_experts_too():
    """Phi-3.5-MoE has attention-output biases and bias-free experts; Megatron's one
    add_bias_linear biases the experts and the router as well (router.py, experts.py): the
    megatron and nemo files say so; gpt-oss, whose experts have biases, needs no note."""
    phi = load_export_spec(EXAMPLES / "appendix_e.yaml", ["parallelism.etp=1"],
                           EXAMPLES / "hf" / "phi-3.5-moe-instruct.json")
    note = ("add_bias_linear (for the attention output biases) also biases the experts and "
            "the router, which this model does not: the exported model has a few more "
            "parameters than the costed one")
    for target in ("megatron", "nemo"):
        assert note in export(phi, target).unsupported, target


def test_add_bias_linear_notes_name_each_part_megatron_biases_that_the_model_lacks():
    """By hand from Megatron-Core @ d98e8a64dd: add_bias_linear biases linear_qkv,
    linear_proj, dense and shared-expert MLPs (mlp.py), the grouped experts (experts.py)
    and the router (router.py); MLA's projections never. gpt-oss has every bias (no note);
    experts-only biases bring QKV, output and router biases with them; a dense model's
    output bias biases its MLPs; a router bias alone is dropped with the switch off."""
    from dataclasses import replace

    from mosaic.arch import AttentionKind
    from mosaic.export.spec import megatron_bias_notes

    gpt_oss = load_hf_config(EXAMPLES / "hf" / "gpt-oss-20b.json")
    assert megatron_bias_notes(gpt_oss) == []
    experts_only = replace(gpt_oss, qkv_bias=False, output_bias=False,
                           moe=replace(gpt_oss.moe, router_bias=False))
    assert megatron_bias_notes(experts_only)[0].startswith(
        "add_bias_linear (for the expert biases) also biases the Q, K and V projections, "
        "the attention output and the router, which this model does not")
    router_only = replace(experts_only, moe=replace(experts_only.moe, expert_bias=False,
                                                    router_bias=True))
    assert megatron_bias_notes(router_only) == [
        "the router bias has no Megatron-Core switch but add_bias_linear, which this model's "
        "bias-free attention output and experts leave off: the exported router has no bias"]
    dense = replace(load_hf_config(EXAMPLES / "hf" / "llama-3-8b.json"), output_bias=True,
                    qkv_bias=True)
    assert megatron_bias_notes(dense)[0].startswith(
        "add_bias_linear (for the attention output biases) also biases the dense blocks' "
        "MLPs, which")
    deepseek = load_hf_config(EXAMPLES / "hf" / "deepseek-v3.json")
    assert deepseek.attention is AttentionKind.MLA and deepseek.moe.dense_layers == 3
    biased = replace(deepseek, output_bias=True, moe=replace(deepseek.moe, expert_bias=True,
                                                             router_bias=True))
    # MLA: no QKV projections to bias; its three dense blocks' MLPs are
    assert megatron_bias_notes(biased)[0].startswith(
        "add_bias_linear (for the attention output and expert biases) also biases the dense "
        "blocks' MLPs, which")


def test_stages_even_with_the_embedding_and_loss_in_the_split_are_not_called_uneven(tmp_path):
    """30 blocks on pp 4 with both of Megatron-LM's account-for flags: 30 + 2 = 32 slots
    split evenly into 4 stages of 8 (its assert (layers + 1 + 1) % pp == 0), so the export
    writes the flags and no uneven-stages note (a review found both in one file); without
    the flags 30 % 4 leaves them uneven, by hand, as the layout rule says."""
    from mosaic.perf.pipeline_layout import split_slots, stages_uneven

    assert split_slots(30, True) == 32 and not stages_uneven(30, 4, True)
    assert stages_uneven(30, 4, False) and not stages_uneven(32, 4, False)
    job = {"model": {"layers": 30, "d_model": 2048, "ffn": 8192, "heads": 16, "kv_heads": 4,
                     "head_dim": 128, "vocab": 32000,
                     "moe": {"experts": 16, "top_k": 2, "expert_ffn": 1024}},
           "parallelism": {"tp": 1, "pp": 4, "cp": 1, "dp": 8, "ep": 8,
                           "vocab_in_pipeline_split": True},
           "batch": {"global_seqs": 256, "micro_seqs": 1, "seq_len": 4096},
           "performance": {"precision": "bf16", "checkpointing": "none"},
           "hardware": {"system": "p6-b200.48xlarge", "nodes": 4}}
    path = tmp_path / "vocab_split.yaml"
    path.write_text(yaml.safe_dump(job))
    spec = load_export_spec(path, [], None)
    assert not spec.uneven_stages
    for target in ("megatron", "nemo"):
        result = export(spec, target)
        assert "account_for_embedding_in_pipeline_split" in result.text.replace("-", "_")
        assert not any("uneven pipeline stages" in note for note in result.unsupported), target


def test_a_hybrid_models_header_says_its_pattern_counts_mixers_and_ffns_apart():
    """Qwen3-Next's 48 decoder layers are 96 pattern layers (a gated DeltaNet or attention
    mixer, then an MoE block): the nemo file's num_layers is 48, and its header's 96 now says
    what it counts (a trial read the two as a contradiction); a uniform model's does not."""
    hybrid = export(_spec("qwen3_next_80b_b200.yaml"), "nemo").text
    assert "# model: 96 layers of the hybrid pattern (mixers and FFN/MoE blocks counted apart)" \
        in hybrid and "num_layers: 48" in hybrid
    assert "# model: 48 layers, d_model 6144" in export(_spec("appendix_e.yaml"), "megatron").text


def test_bridge_overrides_state_the_whole_pipeline_split():
    """The NeMo file is merged over a recipe, whose own split fields would stay: Bridge's
    Qwen3-235B recipe sets account_for_*_in_pipeline_split (recipes/qwen/h100/qwen3_moe.py
    l. 261 @ 067f987), GLM-5's num_layers_in_first_pipeline_stage (recipes/glm/gb200/
    glm5.py l. 54), DeepSeek-V3's a layout. Beside the file's layout TransformerConfig
    raises "pipeline_model_parallel_layout cannot be set with other pipeline layout
    arguments" (transformer_config.py l. 2242-2259 @ d98e8a64dd); without one the recipe's
    split replaced the even one mosaic costed."""
    recipe = {"account_for_embedding_in_pipeline_split": True,
              "account_for_loss_in_pipeline_split": True,
              "num_layers_in_first_pipeline_stage": 14,
              "num_layers_in_last_pipeline_stage": 12,
              "pipeline_model_parallel_layout": "Et|(tt|)*30mL"}
    for job, layout in (("appendix_e.yaml", None), ("deepseek_v3_h100.yaml", "Et|(tt|)*30mL")):
        model = recipe | yaml.safe_load(export(_spec(job), "nemo").text)["model"]
        assert model["pipeline_model_parallel_layout"] == layout, job
        assert not any(model[key] for key in recipe if key != "pipeline_model_parallel_layout")


def test_bridge_overrides_reset_what_a_recipe_would_leave_on():
    """Fields the file wrote only when set kept a recipe's values under the merge: Qwen3-MoE's
    CUDA graphs (recipes/qwen/h100/qwen3_moe.py l. 213 @ 067f987, refused by Megatron-Core
    with full recompute), Nemotron 3 Super's capacity factor 1.10, DeepSeek-V3's MTP module,
    a recipe's activation offload and its recompute modules."""
    recipe = {"cuda_graph_impl": "transformer_engine", "moe_expert_capacity_factor": 1.1,
              "moe_pad_expert_input_to_capacity": True, "mtp_num_layers": 1,
              "cpu_offloading": True, "cpu_offloading_num_layers": 4,
              "recompute_modules": ["mla_up_proj", "mlp"]}
    spec = _spec("appendix_e.yaml", ["performance.checkpointing=selective"])
    model = recipe | yaml.safe_load(export(spec, "nemo").text)["model"]
    assert model["cuda_graph_impl"] == "none" and model["cpu_offloading"] is False
    assert model["moe_expert_capacity_factor"] is None and model["mtp_num_layers"] is None
    assert not model["moe_pad_expert_input_to_capacity"]
    assert model["recompute_modules"] == ["core_attn"]
    # what the job states is written, not reset
    graphs = _spec("appendix_e.yaml", ["performance.checkpointing=selective",
                                       "performance.full_iteration_cuda_graph=true"])
    assert yaml.safe_load(export(graphs, "nemo").text)["model"]["cuda_graph_impl"] == \
        "full_iteration"


def test_torchtitan_async_tp_is_written_only_with_the_compiled_model():
    """torchtitan v0.2.2 raises "Async TP requires 'model' in --compile.components and
    --compile.enable" (torchtitan/distributed/tensor_parallel.py l. 20-23 @ 73a0e69): an
    eager job's tp_comm_overlap is said, not written (the file stopped at start-up)."""
    base = ["parallelism.tp=2", "parallelism.tp_comm_overlap=true"]
    compiled = tomllib.loads(export(_spec("appendix_e.yaml", base), "torchtitan").text)
    assert compiled["parallelism"]["enable_async_tensor_parallel"] is True
    assert compiled["compile"]["enable"] and "model" in compiled["compile"]["components"]
    eager = export(_spec("appendix_e.yaml", [*base, "performance.torch_compile=false"]),
                   "torchtitan")
    table = tomllib.loads(eager.text)
    assert "enable_async_tensor_parallel" not in table["parallelism"]
    assert table["compile"] == {"enable": False}
    assert any("enable_async_tensor_parallel not written" in note for note in eager.unsupported)


def test_torchtitan_ddp_beside_tp_or_pp_is_said_not_to_start():
    """torchtitan v0.2.2 raises "DDP has not supported > 1D parallelism" when the replicate
    mesh is not the world (models/llama3/infra/parallelize.py l. 151 @ 73a0e69): sharding
    none with dp > 1 and tp or pp > 1 was written with only the fp32 note."""
    ddp = export(_spec("appendix_e.yaml", ["parallelism.sharding=none"]), "torchtitan")
    table = tomllib.loads(ddp.text)["parallelism"]
    assert table["data_parallel_replicate_degree"] > 1 == table["data_parallel_shard_degree"]
    assert any("DDP has not supported > 1D parallelism" in note for note in ddp.unsupported)
    fsdp = export(_spec("appendix_e.yaml", ["parallelism.sharding=fsdp"]), "torchtitan")
    assert not any("DDP has not supported" in note for note in fsdp.unsupported)


def test_torchtitan_deepep_is_written_with_etp_1_only():
    """torchtitan v0.2.2 raises NotImplementedError "DeepEP with Expert Tensor Parallelism
    (ETP) is not supported yet" (models/llama4/infra/parallelize.py l. 121-125 @ 73a0e69):
    a DeepEP job with etp = tp > 1 is written with the standard all-to-all, said."""
    base = ["parallelism.dispatcher=deepep", "parallelism.tp=2"]
    etp = export(_spec("appendix_e.yaml", [*base, "parallelism.etp=2"]), "torchtitan")
    table = tomllib.loads(etp.text)["parallelism"]
    assert (table["expert_tensor_parallel_degree"], table["expert_parallel_comm_backend"]) \
        == (2, "standard")
    assert any(note.startswith("DeepEP dispatcher with etp 2") for note in etp.unsupported)
    one = export(_spec("appendix_e.yaml", [*base, "parallelism.etp=1"]), "torchtitan")
    assert tomllib.loads(one.text)["parallelism"]["expert_parallel_comm_backend"] == "deepep"


def test_torchtitan_mxfp8_linears_are_left_out_under_tp_and_compile():
    """torchtitan v0.2.2's MX linear converter asserts "TP not yet supported with
    torch.compile for mxfp8" (components/quantization/mx.py l. 47-53 @ 73a0e69): with tp > 1
    and the compiled model the file leaves quantize.linear.mx out, said."""
    base = ["performance.precision=fp8", "performance.fp8_recipe=mxfp8",
            "hardware.system=p6-b200.48xlarge"]
    tp = export(_spec("appendix_e.yaml", [*base, "parallelism.tp=2"]), "torchtitan")
    document = tomllib.loads(tp.text)
    assert document["model"]["converters"] == ["quantize.grouped_mm.mx"]
    assert "linear" not in document.get("quantize", {})
    assert any(note.startswith("MXFP8 linear layers with tp 2") for note in tp.unsupported)
    one = tomllib.loads(export(_spec("appendix_e.yaml", base), "torchtitan").text)
    assert "quantize.linear.mx" in one["model"]["converters"]


def test_bridge_overrides_state_megatron_fsdp_either_way():
    """Bridge runs Megatron-FSDP when dist or ddp says so (training/config.py l. 1484 @
    067f987) and its Nemotron 3 FSDP recipe sets both (recipes/nemotronh/gb200/
    nemotron_3_nano.py l. 193-196): a zero1 file over it ran FSDP. Both are stated, with
    the HSDP replica count."""
    recipe = {"dist": {"use_megatron_fsdp": True},
              "ddp": {"use_megatron_fsdp": True, "num_distributed_optimizer_instances": 4}}
    zero1 = yaml.safe_load(export(_spec("nemotron_3_nano_b200.yaml"), "nemo").text)
    for section in recipe:
        merged = recipe[section] | zero1[section]
        assert merged["use_megatron_fsdp"] is False, section
    assert zero1["ddp"]["num_distributed_optimizer_instances"] == 1
    fsdp = yaml.safe_load(export(_spec("nemotron_3_nano_b200.yaml",
                                       ["parallelism.sharding=fsdp"]), "nemo").text)
    assert fsdp["dist"]["use_megatron_fsdp"] and fsdp["ddp"]["use_megatron_fsdp"]
