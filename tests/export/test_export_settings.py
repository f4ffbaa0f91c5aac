"""`mosaic export` carries every setting the prediction read: recipe settings (recompute
modules, bf16 gradient reduction, the TE loss), HAI-LLM's (DualPipe, bf16 moments, node-limited
routing, FP8 SwiGLU inputs), full recompute of a share of the blocks, the EP overlap and the
full-iteration CUDA graph, each written as the target's code spells it or listed as NOT
EXPRESSED; and a run record written as a yaml job predicts the same step.

Expected names are read from the targets' code, independently of the exporter:
Megatron-LM @ d98e8a6 megatron/training/arguments.py (--grad-reduce-in-bf16,
--overlap-grad-reduce, --overlap-param-gather, --use-precision-aware-optimizer,
--exp-avg-dtype/--exp-avg-sq-dtype; validate_args refuses --cross-entropy-loss-fusion with
--cross-entropy-fusion-impl te) and TransformerConfig fields (recompute_modules,
recompute_method 'block' with recompute_num_layers per pipeline stage, moe_router_num_groups
= 'number of nodes in EP group' for node-limited routing, moe_router_group_topk);
Megatron-Bridge @ 067f987 CommOverlapConfig (overlap_moe_expert_parallel_comm,
delay_wgrad_compute), cuda_graph_impl 'full_iteration' with
rerun_state_machine.check_for_nan_in_loss False, and bf16_mixed's grad_reduce_in_fp32 True.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from mosaic.cli.export_cmd import load_export_spec
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import load_job_spec, predict_job
from mosaic.export import TARGETS, export
from mosaic.perf.calibration import load_calibration

from .test_export import parse_megatron

ROOT = Path(__file__).resolve().parents[2]
APPENDIX_E = ROOT / "examples" / "appendix_e.yaml"

DEEPSEEK_V3 = {
    "name": "DeepSeek-V3", "layers": 61, "d_model": 7168, "heads": 128, "kv_heads": 128,
    "ffn": 18432, "activation": "swiglu", "vocab": 129280, "tied_embeddings": False,
    "attention": "mla", "norm": "rmsnorm", "mtp_layers": 0,
    "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128},
    "moe": {"experts": 256, "top_k": 8, "expert_ffn": 2048, "shared_experts": 1,
            "shared_expert_ffn": 2048, "dense_layers": 3}}


def _record(tmp_path: Path, name: str, **fields: object) -> Path:
    """A one-run record file; fields override a DeepSeek-V3 run on 2048 GPUs, pp 16 (61
    layers: an uneven split) and ep 64."""
    run = {"id": name, "source": "constructed for mosaic's export tests", "software": None,
           "gpu": "H800-SXM-80GB", "num_gpus": 2048, "gpus_per_node": 8, "scaleup_domain": 8,
           "model": DEEPSEEK_V3, "precision": "bf16",
           "parallelism": {"tp": 1, "pp": 16, "vpp": 1, "cp": 1, "ep": 64, "etp": 1,
                           "dp": 128, "sequence_parallel": False, "sharding": "zero1"},
           "batch": {"global_seqs": 15360, "micro_seqs": 1, "seq_len": 4096},
           "recompute": "unknown",
           "measured": {"step_time_s": 20.0, "tokens_per_s_per_gpu": 1536.0},
           "flops_convention": "bridge_causal", "confidence": "low"} | fields
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "description": "export tests",
                                    "runs": [run]}))
    return path


@pytest.fixture
def hai_record(tmp_path: Path) -> Path:
    """DeepSeek-V3 on a DualPipe trainer with every DeepSeek-style setting stated: FP8
    blockwise with FP8 dispatch and FP8 SwiGLU inputs, EP overlap over DeepEP, node-limited
    routing to 4 nodes, bf16 Adam moments, selective recompute of three modules."""
    return _record(tmp_path, "hai", software="DualPipe trainer", precision="fp8-blockwise",
                   parallelism={"tp": 1, "pp": 16, "vpp": 1, "cp": 1, "ep": 64, "etp": 1,
                                "dp": 128, "sequence_parallel": False, "sharding": "zero1",
                                "dispatcher": "deepep", "ep_overlap": True,
                                "dispatch_fp8": True},
                   recompute="selective",
                   recompute_modules=["layernorm", "mla_up_proj", "moe_act"],
                   optimizer_dtype="bf16_moments", fp8_glu_inputs=True,
                   max_nodes_per_token=4)


@pytest.fixture
def bridge_record(tmp_path: Path) -> Path:
    """DeepSeek-V3 on B200 with the NeMo 25.11 Megatron-Bridge perf scripts: the recipe sets
    selective recompute of mla_up_proj, bf16 gradient reduction and the TE loss."""
    return _record(tmp_path, "bridge",
                   software="NeMo 25.11 container / Megatron-Bridge + Megatron-Core", gpu="B200",
                   num_gpus=256, parallelism={"tp": 1, "pp": 16, "vpp": 1, "cp": 1, "ep": 16,
                                              "etp": 1, "dp": 16, "sequence_parallel": False,
                                              "sharding": "zero1"},
                   batch={"global_seqs": 4096, "micro_seqs": 1, "seq_len": 4096},
                   measured={"step_time_s": 20.0, "tokens_per_s_per_gpu": 3276.8})


def _spec(path: Path, *overrides: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_export_spec(path, list(overrides), None)


def _not_expressed(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("# NOT EXPRESSED: ")]


def test_recipe_recompute_modules_bf16_reduction_and_te_loss(bridge_record):
    spec = _spec(bridge_record)
    assert spec.stack == "megatron-bridge" and spec.recompute_modules == ("mla_up_proj",)
    assert (spec.grad_reduce_in_fp32, spec.cross_entropy) == (False, "te")
    megatron = export(spec, "megatron")
    a = parse_megatron(megatron.text)
    # not "selective" alone, which Megatron reads as its default ["core_attn"]
    assert a.recompute_granularity == "selective" and a.recompute_modules == ["mla_up_proj"]
    assert a.grad_reduce_in_bf16
    assert not a.cross_entropy_loss_fusion  # validate_args refuses the TE fusion: flagged
    assert any("cross_entropy te" in line and "validate_args" in line
               for line in megatron.unsupported)
    nemo = yaml.safe_load(export(spec, "nemo").text)
    assert nemo["model"]["recompute_granularity"] == "selective"
    assert nemo["model"]["recompute_modules"] == ["mla_up_proj"]
    assert (nemo["model"]["cross_entropy_loss_fusion"],
            nemo["model"]["cross_entropy_fusion_impl"]) == (True, "te")
    # the name bf16_mixed carries grad_reduce_in_fp32 True, which Bridge copies over ddp
    # (a trial's plan would not have fitted): its fields in full, with the job's false
    mixed = nemo["mixed_precision"]
    assert (mixed["bf16"], mixed["grad_reduce_in_fp32"]) == (True, False)
    assert mixed["pipeline_dtype"] == {"_target_": "torch.bfloat16", "_call_": False}
    assert not any("grad_reduce_in_fp32" in line
                   for line in _not_expressed(export(spec, "nemo").text))
    for target in ("torchtitan", "maxtext"):
        lines = _not_expressed(export(spec, target).text)
        for setting in ("recompute_modules mla_up_proj", "grad_reduce_in_fp32 False",
                        "cross_entropy te"):
            assert any(f"performance.{setting} " in line for line in lines), (target, setting)


def test_hai_llm_settings_written_or_flagged(hai_record):
    spec = _spec(hai_record)
    assert spec.stack == "dualpipe" and spec.pipeline_schedule == "dualpipe"
    assert (spec.optimizer_dtype, spec.max_nodes_per_token, spec.fp8_glu_inputs) == \
        ("bf16_moments", 4, True)
    megatron = export(spec, "megatron")
    a = parse_megatron(megatron.text)
    # ep 64 on 8-GPU nodes: 8 nodes in the EP group, one expert group (32 experts) each;
    # a token's 8 experts on at most 4 of them
    assert (a.moe_router_num_groups, a.moe_router_group_topk) == (8, 4)
    assert a.use_precision_aware_optimizer and (a.exp_avg_dtype, a.exp_avg_sq_dtype) == \
        ("bf16", "bf16")
    assert a.recompute_modules == ["layernorm", "mla_up_proj", "moe_act"]
    # DualPipe's overlap as Megatron's batch-level EP overlap needs virtual stages at pp > 1,
    # and MXFP8 dispatch the ncclep backend: neither is written, both are said
    assert not a.overlap_moe_expert_parallel_comm
    assert (a.moe_dispatch_fwd_dtype, a.moe_combine_bwd_dtype) == (None, None)
    flagged = " | ".join(megatron.unsupported)
    assert "DualPipe" in flagged and "fp8_glu_inputs" in flagged
    assert "ep_overlap with pp > 1 and no virtual stages" in flagged and "not written" in flagged
    assert "dispatch_fp8 (MXFP8 dispatch and combine), not written" in flagged
    nemo = export(spec, "nemo")
    doc = yaml.safe_load(nemo.text)
    assert (doc["model"]["moe_router_num_groups"], doc["model"]["moe_router_group_topk"]) == \
        (8, 4)
    flagged = " | ".join(nemo.unsupported)
    assert "DualPipe" in flagged and "bf16_moments" in flagged and "fp8_glu_inputs" in flagged
    text = " | ".join(export(spec, "torchtitan").unsupported)
    for setting in ("DualPipe", "optimizer_dtype bf16_moments", "max_nodes_per_token 4",
                    "fp8_glu_inputs True", "ep_overlap True"):
        assert setting in text, setting
    # its 120 micro-batches over 16 stages: MaxText's validation refuses them (types.py
    # "The number of microbatches must be divisible by the number of stages"; a trial)
    with pytest.raises(MosaicInputError, match=r"120 pipeline micro-batches over pp=16"):
        export(spec, "maxtext")


def test_nemo_writes_ep_overlap_and_the_full_iteration_graph():
    spec = _spec(APPENDIX_E, "parallelism.ep_overlap=true", "parallelism.vpp=3",
                 "performance.checkpointing=selective",
                 "performance.full_iteration_cuda_graph=true", "parallelism.dispatcher=hybridep")
    a = parse_megatron(export(spec, "megatron").text)
    assert a.overlap_moe_expert_parallel_comm and a.cuda_graph_impl == "full_iteration"
    doc = yaml.safe_load(export(spec, "nemo").text)
    assert doc["comm_overlap"]["overlap_moe_expert_parallel_comm"] is True
    assert doc["comm_overlap"]["delay_wgrad_compute"] is True
    assert doc["model"]["cuda_graph_impl"] == "full_iteration"
    assert doc["rerun_state_machine"] == {"check_for_nan_in_loss": False}
    # the file already sets the hybridep backend: the note does not ask for it again
    for target in ("megatron", "nemo"):
        note = next(line for line in export(spec, target).unsupported
                    if line.startswith("full-iteration CUDA graph"))
        assert "hybridep" not in note and "capacity" in note, target
    alltoall = _spec(APPENDIX_E, "performance.full_iteration_cuda_graph=true")
    note = next(line for line in export(alltoall, "megatron").unsupported
                if line.startswith("full-iteration CUDA graph"))
    assert "--moe-flex-dispatcher-backend hybridep" in note


def test_full_recompute_of_a_share_of_the_blocks():
    # Appendix E: 48 layers on pp 16 = 3 blocks a stage; 2/3 of them = 2 recomputed
    spec = _spec(APPENDIX_E, "performance.checkpointing=full",
                 f"performance.recompute_block_fraction={2 / 3!r}")
    a = parse_megatron(export(spec, "megatron").text)
    assert (a.recompute_granularity, a.recompute_method, a.recompute_num_layers) == \
        ("full", "block", 2)
    model = yaml.safe_load(export(spec, "nemo").text)["model"]
    assert (model["recompute_method"], model["recompute_num_layers"]) == ("block", 2)
    plain = parse_megatron(export(_spec(APPENDIX_E, "performance.checkpointing=full"),
                                  "megatron").text)
    assert (plain.recompute_method, plain.recompute_num_layers) == ("uniform", 1)
    odd = export(_spec(APPENDIX_E, "performance.checkpointing=full",
                       "performance.recompute_block_fraction=0.5"), "megatron")
    assert any("not a whole number of blocks" in line for line in odd.unsupported)


def test_torchtitan_writes_full_recompute_of_every_nth_block_as_layer_sac():
    """A share 1/n of the blocks is torchtitan's layer SAC, every n-th block checkpointed
    whole (activation_checkpoint.py _apply_layer_sac @ v0.2.2); it was written as full
    recompute of every block (a trial). Appendix E has 3 blocks a rank (48 on pp 16): a
    half is 1 of them, said; a third is exact."""
    import tomllib

    half = export(_spec(APPENDIX_E, "performance.checkpointing=full",
                        "performance.recompute_block_fraction=0.5"), "torchtitan")
    table = tomllib.loads(half.text)["activation_checkpoint"]
    assert table == {"mode": "selective", "selective_ac_option": "2"}
    assert any("one block in every 2, 1 of a rank's 3, not 1.5" in line
               for line in half.unsupported), half.unsupported
    third = export(_spec(APPENDIX_E, "performance.checkpointing=full",
                         f"performance.recompute_block_fraction={1 / 3!r}"), "torchtitan")
    assert tomllib.loads(third.text)["activation_checkpoint"]["selective_ac_option"] == "3"
    assert not any("recompute_block_fraction" in line for line in third.unsupported)
    two_thirds = export(_spec(APPENDIX_E, "performance.checkpointing=full",
                              f"performance.recompute_block_fraction={2 / 3!r}"), "torchtitan")
    assert tomllib.loads(two_thirds.text)["activation_checkpoint"] == {"mode": "full"}
    assert any(line.startswith("performance.recompute_block_fraction")
               for line in two_thirds.unsupported)


def test_torchtitan_layer_sac_note_counts_each_rank_of_the_split_it_writes():
    """torchtitan v0.2.2 splits the blocks with generate_llm_fqn_per_model_part
    ((layers + weights) // stages a part, the first remainder parts one more; its docstring's
    example: 3 layers in 2 stages, each end weighing 2, is [2, 1] blocks), puts stages r and
    r + pp on rank r, and _apply_layer_sac's counter is module-wide, so a rank checkpoints
    floor(its blocks / n) over all its stages. 30 blocks on pp 4 x vpp 2
    (pipeline_parallel_layers_per_stage 4: ceil(30 / 4) = 8 stages of 4,4,4,4,4,4,3,3) give
    ranks 8, 8, 7, 7 blocks: a half is 4, 4, 3, 3, not the "7" of 30 // 4 no rank has."""
    import tomllib

    from mosaic.export.torchtitan import stage_blocks

    assert stage_blocks(3, 2, 2, 2) == [2, 1]
    spec = _spec(APPENDIX_E, "model.layers=30", "parallelism.pp=4", "parallelism.vpp=2",
                 "performance.uneven_stages=true", "performance.checkpointing=full",
                 "performance.recompute_block_fraction=0.5", "performance.stack=torchtitan")
    result = export(spec, "torchtitan")
    parallelism = tomllib.loads(result.text)["parallelism"]
    assert parallelism["pipeline_parallel_layers_per_stage"] == 4
    note = next(line for line in result.unsupported
                if line.startswith("recompute_block_fraction"))
    assert "ranks 0-1: 4 of 8; ranks 2-3: 3 of 7 (not 3.5)" in note
    assert "rank's 7" not in note
    # 24 blocks on pp 4 x vpp 2: 3 a stage, 6 a rank; the counter runs over both stages, so
    # every 2nd block is 3 of 6, exactly a half (per stage it would be 1 of 3 twice)
    even = export(_spec(APPENDIX_E, "model.layers=24", "parallelism.pp=4",
                        "parallelism.vpp=2", "performance.checkpointing=full",
                        "performance.recompute_block_fraction=0.5"), "torchtitan")
    assert not any(line.startswith("recompute_block_fraction") for line in even.unsupported)


def test_torchtitan_file_splits_uneven_stages_as_costed():
    """torchtitan v0.2.2 cuts 30 blocks on 4 stages (end weights 0) into 8, 8, 7, 7
    (generate_llm_fqn_per_model_part: 30 // 4 a stage, the first 30 % 4 one more). A
    torchtitan job is costed so (stack trait uneven_stage_split), and the file leaves the
    split to torchtitan; a Megatron-Core job is costed with its remainder-last layout
    Et*8|t*8|t*8|t*6L, which the torchtitan file then lists as module_fqns_per_model_part,
    where torchtitan's own split would run other stages than the prediction's."""
    import tomllib

    def parallelism(stack: str, vpp: int) -> dict:
        spec = _spec(APPENDIX_E, "model.layers=30", "parallelism.pp=4",
                     f"parallelism.vpp={vpp}", "performance.uneven_stages=true",
                     f"performance.stack={stack}")
        return tomllib.loads(export(spec, "torchtitan").text)["parallelism"]

    def blocks(parts: list[list[str]]) -> list[int]:
        return [sum(name.startswith("layers.") for name in part) for part in parts]

    titan = parallelism("torchtitan", 1)
    assert "module_fqns_per_model_part" not in titan
    assert (titan["pipeline_parallel_first_stage_less_layers"],
            titan["pipeline_parallel_last_stage_less_layers"]) == (0, 0)
    # interleaved: ceil(30 / 4) = 8 stages of torchtitan's 4,4,4,4,4,4,3,3
    assert parallelism("torchtitan", 2)["pipeline_parallel_layers_per_stage"] == 4
    megatron = parallelism("megatron-core", 1)["module_fqns_per_model_part"]
    assert blocks(megatron) == [8, 8, 8, 6]
    assert megatron[0][0] == "tok_embeddings" and megatron[-1][-2:] == ["norm", "output"]
    assert [name for part in megatron for name in part if name.startswith("layers.")] == [
        f"layers.{i}" for i in range(30)]
    interleaved = parallelism("megatron-core", 2)
    assert blocks(interleaved["module_fqns_per_model_part"]) == [4] * 7 + [2]
    assert "pipeline_parallel_layers_per_stage" not in interleaved


def test_data_parallel_overlap_is_written_for_megatron_and_nemo():
    overlapped = parse_megatron(export(_spec(APPENDIX_E), "megatron").text)
    assert overlapped.overlap_grad_reduce and overlapped.overlap_param_gather
    exposed = _spec(APPENDIX_E, "performance.dp_comm_overlap=false")
    a = parse_megatron(export(exposed, "megatron").text)
    assert not a.overlap_grad_reduce and not a.overlap_param_gather  # Megatron's default
    ddp = yaml.safe_load(export(exposed, "nemo").text)["ddp"]
    assert (ddp["overlap_grad_reduce"], ddp["overlap_param_gather"]) == (False, False)


def test_a_setting_no_target_has_is_listed_by_every_target():
    spec = _spec(APPENDIX_E, "performance.loss_chunks=4")
    for target in TARGETS[:-1]:
        assert any(line.startswith("performance.loss_chunks 4 (the prediction used it")
                   for line in export(spec, target).unsupported), target


def _step_s(path: Path) -> tuple[float, dict[str, float], float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = load_job_spec(path)
        predicted = predict_job(job, load_calibration(None)).prediction
    breakdown = {name: float(value[0]) for name, value in predicted.breakdown_s.items()}
    return float(predicted.step_time_s[0]), breakdown, float(predicted.memory_bytes[0])


@pytest.mark.parametrize("fixture", ["hai_record", "bridge_record"])
def test_record_to_yaml_job_predicts_the_same_step(fixture, request, tmp_path):
    record = request.getfixturevalue(fixture)
    spec = _spec(record)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(export(spec, "yaml").text)
    document = yaml.safe_load(job_file.read_text())
    # 61 layers on pp 16 ran as recorded: the split is not stated, and the record is read
    # with full first and last stages; the job keeps that reading (not remainder-last)
    assert document["performance"]["uneven_stages"] == "unstated"
    assert document["hardware"]["usable_memory_fraction"] == 1.0
    if fixture == "bridge_record":
        assert document["performance"]["recompute_modules"] == ["mla_up_proj"]
    step, breakdown, memory = _step_s(record)
    again, breakdown_again, memory_again = _step_s(job_file)
    assert again == pytest.approx(step, rel=1e-12)
    assert breakdown_again == pytest.approx(breakdown, rel=1e-12)
    assert memory_again == pytest.approx(memory, rel=1e-12)
    # and the job file exports to the same job file
    assert yaml.safe_load(export(_spec(job_file), "yaml").text) == document


def _appendix_e(**settings: str):
    return _spec(APPENDIX_E, *(f"{key}={value}" for key, value in settings.items()))


def test_megatron_core_defaults_mosaic_does_not_cost_are_overridden():
    """TransformerConfig's 0.1 dropouts, and Megatron-LM's --moe-aux-loss-coeff 0.0 (aux_loss
    balancing off): the costed router is balanced at 1e-3 (perf/routing_load.py); top-1 with
    softmax scores needs --moe-router-pre-softmax, or TransformerConfig raises."""
    a = parse_megatron(export(_appendix_e(), "megatron").text)
    assert (a.hidden_dropout, a.attention_dropout) == (0.0, 0.0)
    assert (a.moe_router_load_balancing_type, a.moe_aux_loss_coeff) == ("aux_loss", 1e-3)
    assert not a.moe_router_pre_softmax and not a.moe_router_enable_expert_bias
    top1 = parse_megatron(export(_appendix_e(**{"model.moe.experts_per_token": "1"}),
                                 "megatron").text)
    assert top1.moe_router_pre_softmax
    # NeMo merges over a recipe that sets its model's own balancing (DeepSeek-V3's
    # seq_aux_loss at 1e-4): kept, and named
    nemo = export(_appendix_e(), "nemo")
    model = yaml.safe_load(nemo.text)["model"]
    assert model["hidden_dropout"] == 0.0 and "moe_aux_loss_coeff" not in model
    assert any(n.startswith("router balancing loss: the recipe's own is kept")
               for n in nemo.unsupported)


def test_a_loss_free_stack_exports_the_expert_bias_with_sigmoid_scores():
    """The paper's stack balances with LFLB (stacks.yaml router_balancing loss_free):
    Megatron-Core's expert bias, which it allows with sigmoid scores only."""
    a = parse_megatron(export(_appendix_e(**{"performance.stack": "paper-nemo"}),
                              "megatron").text)
    assert a.moe_router_enable_expert_bias and a.moe_router_score_function == "sigmoid"
    assert a.moe_router_load_balancing_type == "none"


@pytest.mark.parametrize("sharding", ["zero2", "fsdp"])
def test_megatron_fsdp_exports_the_checkpoint_format_it_requires(sharding):
    """validate_args: 'Megatron-FSDP requires the fsdp_dtensor checkpointing format'
    (arguments.py @ d98e8a6); Megatron-Bridge asserts it when a checkpoint is saved."""
    spec = _appendix_e(**{"parallelism.sharding": sharding, "optimizer.kind": "adamw"})
    a = parse_megatron(export(spec, "megatron").text)
    assert a.use_megatron_fsdp and a.ckpt_format == "fsdp_dtensor"
    assert yaml.safe_load(export(spec, "nemo").text)["checkpoint"] == {
        "ckpt_format": "fsdp_dtensor"}
    assert parse_megatron(export(_appendix_e(), "megatron").text).ckpt_format is None


def test_mla_exports_its_latent_norms(bridge_record):
    """Megatron builds MLA's q/kv latent RMSNorms (which mosaic counts) only with
    --qk-layernorm (gpt_layer_specs.py @ d98e8a6); NeMo's DeepSeek provider sets it true."""
    spec = _spec(bridge_record)
    assert spec.geometry.attention.value == "mla" and not spec.geometry.qk_norm
    assert parse_megatron(export(spec, "megatron").text).qk_layernorm
    assert yaml.safe_load(export(spec, "nemo").text)["model"]["qk_layernorm"] is True


def test_combinations_megatron_core_refuses_are_named():
    """TransformerConfig.__post_init__ (@ d98e8a6) asserts virtual stages and no full
    recompute with the EP overlap, and the ncclep backend for MXFP8 dispatch."""
    spec = _appendix_e(**{"parallelism.ep_overlap": "true", "parallelism.dispatch_fp8": "true",
                          "performance.precision": "mxfp8"})  # pp 16, vpp 1, full ckpt
    assert (spec.pp, spec.vpp, spec.checkpointing) == (16, 1, "full")
    for target in ("megatron", "nemo"):
        notes = " | ".join(export(spec, target).unsupported)
        assert "virtual_pipeline_model_parallel_size is set" in notes
        assert "recompute_granularity != 'full'" in notes
        assert "'ncclep' backend" in notes
    assert not _appendix_e().megatron_core_refusals()


def test_launch_requirements_and_unwritable_norms_are_named():
    """validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1 before Blackwell;
    MaxText and torchtitan have no LayerNorm to write (Appendix E is pre-LN)."""
    def notes(**settings: str) -> str:
        return " | ".join(export(_appendix_e(**settings), "megatron").unsupported)

    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in notes()  # tp 1
    # Appendix E runs on p6-b200 (Blackwell: validate_args does not ask for it)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in notes(**{"parallelism.tp": "2"})
    hopper = {"parallelism.tp": "2", "hardware.node_type": "p5.48xlarge"}
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in notes(**hopper)
    # with Megatron-FSDP validate_args only warns: the two want different settings
    fsdp = notes(**hopper, **{"parallelism.sharding": "fsdp", "optimizer.kind": "adamw"})
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 in the launch" not in fsdp
    assert "(1 for TP/CP, unset for Megatron-FSDP)" in fsdp
    for target in ("maxtext", "torchtitan"):
        assert any(n.startswith("LayerNorm: ") for n in export(_appendix_e(), target).unsupported)


DEEPSEEK_V3_JOB = ROOT / "examples" / "deepseek_v3_h100.yaml"


def test_the_models_router_is_written_as_trained():
    """DeepSeek-V3's router (examples/deepseek_v3_h100.yaml, its config.json): sigmoid scores,
    the loss-free expert bias, top-k scaling 2.5. Megatron-LM flags and NeMo fields are
    TransformerConfig's (moe_router_score_function, moe_router_enable_expert_bias,
    moe_router_topk_scaling_factor @ d98e8a6); MaxText's deepseek decoder reads
    routed_score_func and routed_scaling_factor (base.yml, configs/models/deepseek3-671b.yml
    @ e591f30)."""
    a = parse_megatron(export(_spec(DEEPSEEK_V3_JOB), "megatron").text)
    assert (a.moe_router_score_function, a.moe_router_topk_scaling_factor) == ("sigmoid", 2.5)
    assert a.moe_router_enable_expert_bias and a.moe_router_load_balancing_type == "none"
    model = yaml.safe_load(export(_spec(DEEPSEEK_V3_JOB), "nemo").text)["model"]
    assert (model["moe_router_score_function"], model["moe_router_topk_scaling_factor"],
            model["moe_router_enable_expert_bias"]) == ("sigmoid", 2.5, True)
    # MaxText's GateLogit keeps the pre-bias scores (select with the bias, weight without)
    # only for a model_name starting deepseek3/4 (layers/moe.py @ e591f30), which the file
    # does not set: the bias would enter the weights, so the auxiliary loss stands in, named
    result = export(_spec(DEEPSEEK_V3_JOB), "maxtext")
    maxtext = yaml.safe_load(result.text)
    assert (maxtext["routed_score_func"], maxtext["routed_scaling_factor"]) == ("sigmoid", 2.5)
    assert maxtext["load_balance_loss_weight"] == 1e-3 and not maxtext["routed_bias"]
    assert "routed_bias_update_rate" not in maxtext
    assert any("model_name: deepseek3-671b" in note for note in result.unsupported)
    titan = export(_spec(DEEPSEEK_V3_JOB), "torchtitan")
    assert any("score_func='sigmoid', route_norm=True, route_scale=2.5, "
               "num_expert_groups=8, num_limited_groups=4, load_balance_coeff=1e-3" in note
               for note in titan.unsupported)


def test_router_settings_a_target_cannot_express_are_named():
    """Megatron-Core: softmax weights not renormalised are the pre-softmax path; the K sigmoid
    scores are always renormalised; the expert bias needs sigmoid scores
    (moe_utils.topk_routing_with_score_function, TransformerConfig.__post_init__)."""
    plain = _appendix_e(**{"model.moe.router.normalize_top_k": "false"})
    assert parse_megatron(export(plain, "megatron").text).moe_router_pre_softmax
    sigmoid = export(_appendix_e(**{"model.moe.router.score": "sigmoid",
                                    "model.moe.router.normalize_top_k": "false"}), "megatron")
    assert any("always renormalises" in note for note in sigmoid.unsupported)
    softmax_bias = _appendix_e(**{"model.moe.router.balancing": "loss_free"})
    result = export(softmax_bias, "megatron")
    a = parse_megatron(result.text)
    assert a.moe_router_score_function == "softmax" and not a.moe_router_enable_expert_bias
    assert (a.moe_router_load_balancing_type, a.moe_aux_loss_coeff) == ("aux_loss", 1e-3)
    assert any("sigmoid scores only" in note for note in result.unsupported)
    # MaxText's mixtral decoder takes the softmax of the top-k logits: a scaled router is named
    scaled = export(_appendix_e(**{"model.moe.router.top_k_scaling": "2.5"}), "maxtext")
    assert any("softmax of the top-k logits" in note for note in scaled.unsupported)


def test_maxtext_turns_the_auxiliary_loss_on():
    """MaxText base.yml's load_balance_loss_weight is 0.0 (no balancing); an aux_loss job
    gets the 1e-3 its imbalance was costed at."""
    document = yaml.safe_load(export(_appendix_e(), "maxtext").text)
    assert document["load_balance_loss_weight"] == 1e-3
    assert "routed_bias_update_rate" not in document


def test_torchtitan_compiles_as_costed():
    """mosaic costs torchtitan jobs compiled (its stack default: Inductor kernels), and a
    compiled job's loss compiled with it unless cross_entropy names another (components/
    loss.py compiles it then); torchtitan v0.2.2's Compile.enable defaults to false and its
    components to ['model', 'loss'] (config/job_config.py), so the export states both; a job
    that states the eager loss compiles the model only (a hand audit: a compiled loss holds
    4 B per logit, the eager one 12)."""
    import tomllib

    def compile_table(*overrides: str) -> tuple[dict, list[str]]:
        result = export(_appendix_e(**{"performance.stack": "torchtitan",
                                       "parallelism.sharding": "fsdp", "parallelism.vpp": "1",
                                       **dict(o.split("=") for o in overrides)}), "torchtitan")
        return tomllib.loads(result.text)["compile"], result.unsupported

    table, notes = compile_table()
    assert table == {"enable": True, "components": ["model", "loss"]}
    assert not any("compiled loss" in n for n in notes)
    table, notes = compile_table("performance.cross_entropy=fp32_upcast")
    assert table == {"enable": True, "components": ["model"]}
    assert not any("cross_entropy" in n or "loss" in n for n in notes)  # written as costed
    # a loss compiled alone (the tt1789 records: compile components ['loss'])
    assert compile_table("performance.cross_entropy=compiled",
                         "performance.torch_compile=false")[0] == {
        "enable": True, "components": ["loss"]}
    assert compile_table("performance.torch_compile=false")[0] == {"enable": False}


def test_a_top1_router_that_renormalises_is_named_in_megatron():
    """Megatron-Core weights a top-1 expert by its score (softmax needs pre-softmax at top-1;
    one sigmoid score is not renormalised: moe_utils 'if topk > 1'), where a renormalised
    top-1 weight is 1 (a review)."""
    for score in ("softmax", "sigmoid"):
        result = export(_appendix_e(**{"model.moe.experts_per_token": "1",
                                       "model.moe.router.score": score}), "megatron")
        assert any("top-1 with normalize_top_k" in n for n in result.unsupported), score
    plain = export(_appendix_e(**{"model.moe.experts_per_token": "1",
                                  "model.moe.router.normalize_top_k": "false"}), "megatron")
    assert not any("top-1 with normalize_top_k" in n for n in plain.unsupported)


def test_a_group_limited_router_is_written_to_every_framework():
    """The model's router limits groups (DeepSeek-V3: top 4 of 8): Megatron-Core
    moe_router_num_groups / moe_router_group_topk (TransformerConfig @ d98e8a64dd), NeMo the
    same fields, MaxText's deepseek decoder n_routing_groups / topk_routing_group (base.yml,
    layers/moe.py deepseek_routing @ e591f30), torchtitan MoEArgs num_expert_groups /
    num_limited_groups (named); a stated max_nodes_per_token is not written over it."""
    grouped = {"model.moe.router.score": "sigmoid", "model.moe.router.groups": "8",
               "model.moe.router.top_groups": "4", "model.moe.experts_per_token": "8"}
    a = parse_megatron(export(_appendix_e(**grouped), "megatron").text)
    assert (a.moe_router_num_groups, a.moe_router_group_topk) == (8, 4)
    nemo = yaml.safe_load(export(_appendix_e(**grouped), "nemo").text)["model"]
    assert (nemo["moe_router_num_groups"], nemo["moe_router_group_topk"]) == (8, 4)
    titan = export(_appendix_e(**grouped, **{"performance.stack": "torchtitan",
                                             "parallelism.sharding": "fsdp",
                                             "parallelism.vpp": "1"}), "torchtitan")
    assert any("num_expert_groups=8, num_limited_groups=4" in n for n in titan.unsupported)
    stated = export(_appendix_e(**grouped, **{"performance.max_nodes_per_token": "2"}),
                    "megatron")
    assert parse_megatron(stated.text).moe_router_group_topk == 4
    assert any(n.startswith("max_nodes_per_token 2: the model's router is written instead")
               for n in stated.unsupported)
    plain = parse_megatron(export(_appendix_e(), "megatron").text)
    assert plain.moe_router_num_groups is None
    # Megatron-Core scores a group by its top K/top_groups scores: K = 3 below 4 groups would
    # score every group 0 (a review), so nothing is written and the reason is named
    top3 = export(_appendix_e(**(grouped | {"model.moe.experts_per_token": "3"})), "megatron")
    assert parse_megatron(top3.text).moe_router_num_groups is None
    assert any("needs K a multiple of top_groups" in n for n in top3.unsupported)
    maxtext = yaml.safe_load(export(_spec(APPENDIX_E.parent / "deepseek_v3_h100.yaml"),
                                    "maxtext").text)
    assert (maxtext["n_routing_groups"], maxtext["topk_routing_group"]) == (8, 4)
    mixtral = export(_appendix_e(**grouped), "maxtext")
    assert "n_routing_groups" not in yaml.safe_load(mixtral.text)
    assert any("top 4 of 8 groups" in n for n in mixtral.unsupported)
