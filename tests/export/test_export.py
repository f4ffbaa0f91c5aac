"""`mosaic export`: each target parses under its own format rules and round-trips the numbers.

Option/key names below are written from the targets' own definitions (Megatron-LM
megatron/training/arguments.py and TransformerConfig; torchtitan v0.2.2
torchtitan/config/job_config.py; MaxText src/maxtext/configs/base.yml), independently of
the exporter, so a misspelt key fails here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.export_cmd import load_export_spec
from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.export import ExportSpec, export, spec_from_plan_document

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "appendix_e.yaml"
DEEPSEEK = ROOT / "examples" / "hf" / "deepseek-v3.json"
runner = CliRunner()


def deepseek_spec() -> ExportSpec:
    # DeepSeek-V3 geometry on the Appendix E layout, with DeepEP, fp8 and selective recompute
    # 61 layers on pp 4 x vpp 2: uneven stages, which the job must allow
    return load_export_spec(JOB, ["parallelism.dispatcher=deepep", "performance.precision=fp8",
                                  "performance.checkpointing=selective", "parallelism.pp=4",
                                  "parallelism.vpp=2", "parallelism.tp=2",
                                  "performance.uneven_stages=true"], DEEPSEEK)


# --- Megatron-Core ---------------------------------------------------------------------
def megatron_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    ints = ["num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads",
            "seq-length", "max-position-embeddings", "vocab-size", "kv-channels",
            "num-query-groups", "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
            "moe-shared-expert-intermediate-size", "mtp-num-layers", "q-lora-rank",
            "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim",
            "tensor-model-parallel-size", "pipeline-model-parallel-size",
            "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
            "context-parallel-size", "expert-model-parallel-size",
            "expert-tensor-parallel-size", "num-virtual-stages-per-pipeline-rank",
            "micro-batch-size", "global-batch-size", "recompute-num-layers",
            "num-distributed-optimizer-instances", "cpu-offloading-num-layers",
            "moe-router-num-groups", "moe-router-group-topk",
            "train-iters",  # megatron/training/arguments.py _add_training_args
            "fp8-amax-history-len"]  # TransformerConfig int
    for name in ints:
        p.add_argument(f"--{name}", type=int)
    p.add_argument("--moe-expert-capacity-factor", type=float)  # TransformerConfig float
    for name in ("moe-aux-loss-coeff", "hidden-dropout", "attention-dropout",
                 "glu-linear-offset", "activation-func-clamp-value", "rotary-base",
                 "rotary-percent", "moe-router-topk-scaling-factor"):
        p.add_argument(f"--{name}", type=float)  # TransformerConfig floats
    p.add_argument("--pipeline-model-parallel-layout", type=str)  # arguments.py: str
    choices = {"position-embedding-type": ["learned_absolute", "rope", "none"],
               "normalization": ["LayerNorm", "RMSNorm"],
               "moe-token-dispatcher-type": ["allgather", "alltoall", "flex"],
               "moe-flex-dispatcher-backend": ["deepep", "hybridep", "ncclep"],
               "data-parallel-sharding-strategy": ["no_shard", "optim", "optim_grads",
                                                   "optim_grads_params"],
               "outer-dp-sharding-strategy": ["no_shard", "optim"],
               "recompute-granularity": ["full", "selective"],
               "recompute-method": ["uniform", "block"],
               "fp8-format": ["e4m3", "hybrid"],
               "fp8-amax-compute-algo": ["most_recent", "max"],  # TransformerConfig Literal
               # TransformerConfig.fp8_recipe Literal
               "fp8-recipe": ["tensorwise", "delayed", "mxfp8", "blockwise", "custom"],
               "optimizer": ["adam", "sgd", "muon"],
               # TransformerConfig Literal fields (ArgumentGroupFactory flags)
               "moe-dispatch-fwd-dtype": ["bf16", "mxfp8"],
               "moe-combine-bwd-dtype": ["bf16", "mxfp8"],
               "cuda-graph-impl": ["none", "local", "transformer_engine", "full_iteration"],
               "cross-entropy-fusion-impl": ["native", "te"],
               "attention-backend": ["flash", "fused", "unfused", "local", "auto"],
               # arguments.py _add_distributed_args (precision-aware optimizer)
               "exp-avg-dtype": ["fp32", "fp16", "bf16", "fp8"],
               "exp-avg-sq-dtype": ["fp32", "fp16", "bf16", "fp8"],
               # training/config/training_config.py CheckpointConfig.ckpt_format Literal
               "ckpt-format": ["torch", "torch_dist", "torch_dcp", "fsdp_dtensor"],
               # arguments.py _add_moe_args choices; TransformerConfig Literal
               "moe-router-load-balancing-type": ["aux_loss", "seq_aux_loss",
                                                  "global_aux_loss", "sinkhorn",
                                                  "quantile_balancing", "none"],
               "moe-router-score-function": ["softmax", "sigmoid", "sqrtsoftplus"],
               "softmax-type": ["vanilla", "off-by-one", "learnable"],  # TransformerConfig
               "window-size": None, "window-attn-skip-freq": None,
               "cp-comm-type": None}
    for name, allowed in choices.items():
        p.add_argument(f"--{name}", choices=allowed)
    p.add_argument("--moe-layer-freq", type=lambda s: int(s) if s.isdigit() else eval(s))
    # TransformerConfig.recompute_modules: Optional[List[str]] -> nargs '+' (argument_utils.py)
    p.add_argument("--recompute-modules", nargs="+",
                   choices=["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                            "shared_experts"])
    for name in ["group-query-attention", "swiglu", "untie-embeddings-and-output-weights",
                 "disable-bias-linear", "add-qkv-bias", "qk-layernorm", "moe-grouped-gemm",
                 "moe-shared-expert-gate", "multi-latent-attention", "sequence-parallel",
                 "use-distributed-optimizer", "use-megatron-fsdp", "bf16", "fp16",
                 "overlap-moe-expert-parallel-comm", "delay-wgrad-compute", "tp-comm-overlap",
                 "fp8-param-gather", "moe-pad-expert-input-to-capacity",
                 "overlap-grad-reduce", "overlap-param-gather", "grad-reduce-in-bf16",
                 "cross-entropy-loss-fusion", "use-precision-aware-optimizer",
                 "account-for-embedding-in-pipeline-split",
                 "account-for-loss-in-pipeline-split", "moe-router-enable-expert-bias",
                 "moe-router-pre-softmax", "quick-geglu"]:
        p.add_argument(f"--{name}", action="store_true")
    p.add_argument("--no-check-for-nan-in-loss-and-grad", dest="check_for_nan_in_loss_and_grad",
                   action="store_false")
    return p


def parse_megatron(text: str) -> argparse.Namespace:
    words = shlex.split("\n".join(line for line in text.splitlines()
                                  if not line.startswith("#")))
    return megatron_parser().parse_args(words)  # unknown flags raise


def test_megatron_round_trip_appendix_e():
    spec = load_export_spec(JOB, [], None)
    a = parse_megatron(export(spec, "megatron").text)
    assert (a.num_layers, a.hidden_size, a.num_attention_heads, a.num_query_groups) == \
        (48, 6144, 48, 8)
    assert (a.num_experts, a.moe_router_topk, a.moe_ffn_hidden_size) == (128, 3, 3840)
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size,
            a.expert_model_parallel_size) == (1, 16, 8)
    assert (a.micro_batch_size, a.global_batch_size, a.seq_length) == (2, 8192, 8192)
    assert a.recompute_granularity == "full" and a.use_distributed_optimizer and a.bf16
    assert a.optimizer == "muon" and a.moe_token_dispatcher_type == "alltoall"
    # the listing states capacity_factor 1.0 but the job routes dropless (the default), as
    # predicted: no capacity factor (Megatron's None = dropless), and a note says so
    assert a.moe_expert_capacity_factor is None
    assert any(note.startswith("model.moe.capacity_factor 1 not written: routing is dropless")
               for note in export(spec, "megatron").unsupported)


def test_the_capacity_factor_reaches_every_target_or_is_flagged():
    dropless = load_export_spec(JOB, ["model.moe.capacity_factor=null"], None)
    assert parse_megatron(export(dropless, "megatron").text).moe_expert_capacity_factor is None
    assert yaml.safe_load(export(dropless, "maxtext").text)["capacity_factor"] == -1.0
    capped = load_export_spec(JOB, ["model.moe.capacity_factor=1.25",
                                    "performance.routing=token_drop"], None)
    assert yaml.safe_load(export(capped, "maxtext").text)["capacity_factor"] == 1.25
    nemo = yaml.safe_load(export(capped, "nemo").text)["model"]
    assert nemo["moe_expert_capacity_factor"] == 1.25
    assert "NOT EXPRESSED: token_drop routing (capacity factor 1.25): torchtitan's MoE routes " \
        "dropless" in export(capped, "torchtitan").text


def test_megatron_round_trip_deepseek_mla_mtp_deepep_fp8():
    a = parse_megatron(export(deepseek_spec(), "megatron").text)
    assert a.multi_latent_attention and (a.q_lora_rank, a.kv_lora_rank) == (1536, 512)
    assert (a.qk_head_dim, a.qk_pos_emb_head_dim, a.v_head_dim) == (128, 64, 128)
    assert a.moe_layer_freq == [0] * 3 + [1] * 58 and a.mtp_num_layers == 1
    assert a.moe_shared_expert_intermediate_size == 2048
    assert (a.moe_token_dispatcher_type, a.moe_flex_dispatcher_backend) == ("flex", "deepep")
    assert a.fp8_format == "hybrid" and a.bf16 and a.recompute_granularity == "selective"
    assert a.fp8_recipe == "delayed"  # megatron-core's default recipe (stack trait)
    # its scaling history as the NeMo file of the job writes it (a trial: the Megatron file
    # left TransformerConfig's 1 and most_recent)
    nemo = yaml.safe_load(export(deepseek_spec(), "nemo").text)["mixed_precision"]
    assert (a.fp8_amax_history_len, a.fp8_amax_compute_algo) == (
        nemo["fp8_amax_history_len"], nemo["fp8_amax_compute_algo"]) == (1024, "max")
    # 61 blocks on pp 4 x vpp 2 (uneven_stages true): chunks of 8, the 5-block remainder
    # last with the MTP module and the loss, written as the layout (which sets vpp itself)
    assert a.tensor_model_parallel_size == 2 and a.num_virtual_stages_per_pipeline_rank is None
    assert a.pipeline_model_parallel_layout == "Et*8|(t*8|)*6t*5mL"
    assert a.sequence_parallel  # tp > 1: the job default
    assert not any("uneven pipeline stages" in note
                   for note in export(deepseek_spec(), "megatron").unsupported)
    # dp = 512 / (tp 2 · pp 4) = 64; the global batch covers dp · micro-batch evenly
    assert a.global_batch_size % (64 * a.micro_batch_size) == 0


# --- NeMo / Megatron-Bridge --------------------------------------------------------------
def test_nemo_overrides_round_trip():
    spec = deepseek_spec()
    doc = yaml.safe_load(export(spec, "nemo").text)
    assert set(doc) == {"model", "train", "dataset", "ddp", "dist", "optimizer",
                        "mixed_precision", "comm_overlap"}
    m = doc["model"]
    assert (m["num_layers"], m["hidden_size"], m["num_moe_experts"], m["moe_router_topk"]) == \
        (61, 7168, 256, 8)
    assert m["multi_latent_attention"] and m["moe_layer_freq"] == [0] * 3 + [1] * 58
    assert (m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"],
            m["virtual_pipeline_model_parallel_size"], m["expert_model_parallel_size"]) == \
        (2, 4, 2, 8)
    assert m["moe_flex_dispatcher_backend"] == "deepep"
    assert doc["train"] == {"global_batch_size": 8192, "micro_batch_size": 2}
    assert doc["dataset"]["seq_length"] == 8192
    # plain fp8 on megatron-core: its default delayed recipe (docs/stacks.md), whose name
    # gathers parameters in FP8 (Bridge mixed_precision.py @ 067f987): the job's bf16 gathers
    # write the recipe's fields in full, instantiated by Bridge's override step
    mixed = doc["mixed_precision"]
    assert mixed["_target_"] == "megatron.bridge.training.mixed_precision.MixedPrecisionConfig"
    assert (mixed["fp8"], mixed["fp8_recipe"], mixed["fp8_amax_history_len"]) == \
        ("hybrid", "delayed", 1024)
    assert mixed["fp8_param_gather"] is False and mixed["bf16"] is True
    assert mixed["params_dtype"] == {"_target_": "torch.bfloat16", "_call_": False}


def test_nemo_states_every_overlap_it_costed_true_or_false():
    """Bridge's CommOverlapConfig setup turns the DP overlaps on whenever dp > 1 unless its
    own block states them (ddp.* alone is overwritten), and a recipe's tp_comm_overlap or EP
    overlap stays unless stated false (a trial merged exports over real recipes); the block
    names its class, so a recipe without one (comm_overlap None) gets one, not a dict."""
    from dataclasses import replace

    spec = deepseek_spec()
    doc = yaml.safe_load(export(spec, "nemo").text)
    block = doc["comm_overlap"]
    assert block["_target_"] == "megatron.bridge.training.comm_overlap.CommOverlapConfig"
    assert block["overlap_grad_reduce"] is True and block["overlap_param_gather"] is True
    assert block["tp_comm_overlap"] is False  # deepseek_spec: no TP overlap costed
    assert block["overlap_moe_expert_parallel_comm"] is False
    quiet = yaml.safe_load(export(replace(spec, dp_comm_overlap=False), "nemo").text)
    assert quiet["comm_overlap"]["overlap_grad_reduce"] is False
    assert quiet["ddp"]["overlap_grad_reduce"] is False


# --- torchtitan --------------------------------------------------------------------------
TORCHTITAN_KEYS = {  # torchtitan v0.2.2 JobConfig sections and fields used by the exporter
    "job": {"description"},
    "model": {"name", "flavor", "converters"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "fsdp_reshard_after_forward", "tensor_parallel_degree",
                    "pipeline_parallel_degree", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_schedule", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "module_fqns_per_model_part",
                    "context_parallel_degree", "expert_parallel_degree",
                    "expert_tensor_parallel_degree", "expert_parallel_comm_backend"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    # [quantize.linear.float8] etc. (Float8Linear, Float8GroupedMM, MXLinear, MXGroupedMM)
    "quantize": {"linear", "grouped_mm"},
    "compile": {"enable", "components"},  # Compile (enable defaults false)
}


@pytest.mark.parametrize("sharding", ["zero1", "fsdp", "hsdp", "none"])
def test_torchtitan_toml_round_trip(sharding):
    # the shard group only with hybrid sharding (elsewhere it is refused)
    shard = ["parallelism.hsdp_shard=8"] if sharding == "hsdp" else []
    spec = load_export_spec(JOB, [f"parallelism.sharding={sharding}", *shard], None)
    doc = tomllib.loads(export(spec, "torchtitan").text)
    for section, keys in doc.items():
        assert set(keys) <= TORCHTITAN_KEYS[section], section
    p, t = doc["parallelism"], doc["training"]
    dp = p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"]
    assert dp == 32
    assert dp * p["tensor_parallel_degree"] * p["pipeline_parallel_degree"] \
        * p["context_parallel_degree"] == 512
    # with PP, local_batch_size is one DP rank's whole batch split into micro-batches
    assert t["local_batch_size"] * dp == t["global_batch_size"] == 8192
    assert p["pipeline_parallel_microbatch_size"] == 2 and t["seq_len"] == 8192
    assert doc["activation_checkpoint"]["mode"] == "full"
    expected = {"zero1": (1, 32), "fsdp": (1, 32), "hsdp": (4, 8), "none": (32, 1)}[sharding]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == expected


def test_torchtitan_fp8_deepep_and_accumulation_without_pp():
    spec = load_export_spec(JOB, ["parallelism.pp=1", "parallelism.dispatcher=deepep",
                                  "performance.precision=fp8"], DEEPSEEK)
    # the Megatron-Core job is costed with its remainder-last layout, 8 blocks a stage and 5
    # in the last, not torchtitan's own 8,8,8,8,8,7,7,7: the file lists the costed parts
    costed = tomllib.loads(export(deepseek_spec(), "torchtitan").text)["parallelism"]
    assert [sum(m.startswith("layers.") for m in part)
            for part in costed["module_fqns_per_model_part"]] == [8] * 7 + [5]
    # a torchtitan job is costed with torchtitan's split: its stage count is written
    titan = tomllib.loads(export(load_export_spec(
        JOB, ["parallelism.dispatcher=deepep", "performance.precision=fp8",
              "performance.checkpointing=selective", "parallelism.pp=4", "parallelism.vpp=2",
              "parallelism.tp=2", "performance.uneven_stages=true",
              "performance.stack=torchtitan"], DEEPSEEK), "torchtitan").text)["parallelism"]
    ends = (titan["pipeline_parallel_first_stage_less_layers"]
            + titan["pipeline_parallel_last_stage_less_layers"])
    # torchtitan: ceil((L + first + last) / per_stage) stages
    assert -(-(61 + ends) // titan["pipeline_parallel_layers_per_stage"]) == 8
    doc = tomllib.loads(export(spec, "torchtitan").text)
    assert doc["model"]["name"] == "deepseek_v3"
    assert doc["model"]["converters"] == ["quantize.linear.float8",
                                          "quantize.grouped_mm.float8"]
    assert doc["parallelism"]["expert_parallel_comm_backend"] == "deepep"
    # no PP: local batch = the micro-batch; the rest is gradient accumulation
    assert doc["training"]["local_batch_size"] == 2
    assert doc["training"]["global_batch_size"] == 8192


# --- MaxText -----------------------------------------------------------------------------
MAXTEXT_KEYS = {  # keys of src/maxtext/configs/base.yml
    "hardware", "decoder_block", "base_emb_dim", "base_num_query_heads", "base_num_kv_heads",
    "base_mlp_dim", "base_num_decoder_layers", "head_dim", "vocab_size", "mlp_activations",
    "logits_via_embedding", "use_qk_norm", "attention_bias", "attention_sink",
    "attention_type", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "num_experts", "num_experts_per_tok", "base_moe_mlp_dim", "shared_experts",
    "first_num_dense_layers", "interleave_moe_layer_step", "mlp_bias", "routed_bias",
    "megablox", "sparse_matmul", "capacity_factor", "mtp_num_layers", "max_target_length",
    "per_device_batch_size", "gradient_accumulation_steps", "dtype", "quantization",
    "remat_policy", "opt_type", "ici_data_parallelism", "ici_fsdp_parallelism",
    "ici_tensor_parallelism",
    "ici_pipeline_parallelism", "ici_context_parallelism", "ici_expert_parallelism",
    "dcn_data_parallelism", "dcn_fsdp_parallelism", "dcn_pipeline_parallelism",
    "dcn_expert_parallelism", "dcn_context_parallelism", "num_pipeline_microbatches",
    "num_layers_per_pipeline_stage", "pipeline_parallel_layers", "rope_max_timescale",
    "partial_rotary_factor",
    "inhomogeneous_layer_cycle_interval", "gdn_conv_kernel_dim", "gdn_key_head_dim",
    "gdn_value_head_dim", "gdn_num_key_heads", "gdn_num_value_heads", "gdn_chunk_size",
    "load_balance_loss_weight", "routed_score_func", "routed_scaling_factor",
    "routed_bias_update_rate", "n_routing_groups", "topk_routing_group"}


def test_maxtext_puts_whole_nodes_on_the_outer_axes_or_says_one_slice():
    """tp 2, pp 4, ep 8, fsdp 8 on 512 GPUs. On one-GPU "nodes" the 512 slices cannot all sit
    on the data, fsdp, pipeline, expert and context axes (tp 2 would cross them), so the job
    is one slice, all ici_*, with a note; on 8-GPU nodes fsdp 8 and pipeline 4 cross the
    64 nodes, then 2 of the 8 experts (greedy, outermost first)."""
    spec = deepseek_spec()
    result = export(replace(spec, gpus_per_node=1), "maxtext")
    doc = yaml.safe_load(result.text)
    assert all(doc[f"dcn_{axis}_parallelism"] == 1
               for axis in ("data", "fsdp", "pipeline", "expert", "context"))
    assert doc["ici_tensor_parallelism"] == 2 and "one slice" in result.text
    result = export(spec, "maxtext")
    doc = yaml.safe_load(result.text)
    assert (doc["dcn_fsdp_parallelism"], doc["dcn_pipeline_parallelism"],
            doc["dcn_expert_parallelism"], doc["ici_expert_parallelism"]) == (8, 4, 2, 4)
    # Megatron's EP group of 8 (ep 8, etp 1) is 8 consecutive ranks, one node, as mosaic
    # costs it; here the expert axis beside tensor 2 crosses two nodes: said (a trial)
    assert any("expert axis crosses nodes here (dcn_expert_parallelism 2)" in item
               for item in result.unsupported)


def test_maxtext_group_limited_routing_is_said_to_need_a_deepseek_model_name():
    """n_routing_groups is read only by deepseek_routing, which MaxText calls for a
    model_name starting deepseek3/deepseek4 (layers/moe.py): the file says so (a trial)."""
    result = export(deepseek_spec(), "maxtext")
    doc = yaml.safe_load(result.text)
    assert (doc["n_routing_groups"], doc["topk_routing_group"]) == (8, 4)
    assert "model_name" not in doc
    assert any(note.startswith("group-limited routing (4 of 8 groups)")
               and "model_name: deepseek3-671b" in note for note in result.unsupported)


def test_maxtext_refuses_hsdp_replicas_its_mesh_cannot_hold():
    """HSDP replicas beyond dp/ep leave MaxText an fsdp axis of 0 (its mesh must cover the
    devices, max_utils.py): refused with the way out, before a file is written (a trial)."""
    spec = load_export_spec(JOB, ["performance.stack=jax-xla", "parallelism.sharding=hsdp",
                                  "parallelism.hsdp_shard=4",
                                  "parallelism.pp=1", "parallelism.vpp=1", "parallelism.tp=1",
                                  "parallelism.ep=16"], None)
    replicas, per_group = spec.hsdp_replicas, spec.dp // spec.ep
    assert per_group % replicas  # the case: more replicas than each expert group's ranks
    with pytest.raises(MosaicInputError, match=rf"{replicas} HSDP replicas over the "
                                               rf"{per_group} data ranks"):
        export(spec, "maxtext")


def test_maxtext_yaml_round_trip():
    spec = deepseek_spec()
    text = export(spec, "maxtext").text
    doc = yaml.safe_load(text)
    # over base.yml, which pyconfig loads from MaxText's configs folder, and launched by
    # the trainer module MaxText's docs name (a trial: `python -m maxtext.train` is none)
    assert doc.pop("base_config") == "base.yml"
    assert "# launch: python3 -m maxtext.trainers.pre_train.train FILE.yml" in text
    assert set(doc) <= MAXTEXT_KEYS
    # on GPUs (base.yml's default is tpu), with ragged_dot rather than megablox's Pallas
    # kernel, which runs interpreted off TPU (layers/moe.py; a trial)
    assert doc["hardware"] == "gpu" and doc["megablox"] is False and doc["sparse_matmul"]
    assert doc["decoder_block"] == "deepseek" and doc["attention_type"] == "mla"
    assert (doc["base_num_decoder_layers"], doc["first_num_dense_layers"],
            doc["num_experts"], doc["shared_experts"], doc["mtp_num_layers"]) == \
        (61, 3, 256, 1, 1)
    axes = ("data", "fsdp", "tensor", "pipeline", "context", "expert")
    ici = math.prod(doc[f"ici_{axis}_parallelism"] for axis in axes)
    dcn = math.prod(doc.get(f"dcn_{axis}_parallelism", 1) for axis in axes)
    # 512 B200 on 64 nodes of 8 (p6-b200.48xlarge): MaxText's ici product is the devices
    # per slice (a node on GPUs), its dcn product the slices (base.yml)
    assert (ici, dcn) == (8, 64)
    devices = ici * dcn
    global_batch = doc["per_device_batch_size"] * devices * doc["gradient_accumulation_steps"]
    assert global_batch == 8192 and doc["max_target_length"] == 8192
    assert doc["num_pipeline_microbatches"] == 8192 // (64 * 2)
    # plain fp8 on megatron-core: delayed scaling, MaxText's TE DelayedScaling recipe
    assert doc["quantization"] == "te_fp8_delayedscaling"
    assert doc["remat_policy"] == "minimal_with_context"


@pytest.mark.parametrize("activation, maxtext, bridge", [
    ("swiglu", ["silu", "linear"], "silu"), ("geglu", ["gelu", "linear"], "gelu"),
    ("relu", ["relu"], "relu"), ("squared_relu", ["relu"], "squared_relu")])
def test_the_stated_activation_reaches_maxtext_and_nemo(activation, maxtext, bridge):
    """MaxText names flax.linen functions (a gated FFN as [gate, 'linear']; squared ReLU
    has none). Megatron-Bridge names activation_func from NeMo 26.04 (utils/activation_map.py
    ACTIVATION_FUNC_MAP, with gated_linear_unit for SwiGLU and GeGLU): a job of that release
    or naming none gets it written; before, GPTModelProvider keeps TransformerConfig's gelu,
    so the file notes every other one, SwiGLU included."""
    glu = activation in ("swiglu", "geglu")
    spec = dataclasses.replace(deepseek_spec(), geometry=dataclasses.replace(
        deepseek_spec().geometry, glu=glu, activation=activation))
    assert yaml.safe_load(export(spec, "maxtext").text)["mlp_activations"] == maxtext
    for release, written in ((None, True), ("26.04", True), ("26.02", False)):
        result = export(dataclasses.replace(spec, stack_version=release), "nemo")
        model = yaml.safe_load(result.text)["model"]
        assert model.get("activation_func") == (bridge if written else None), release
        assert model["gated_linear_unit"] is glu
        noted = any(f"FFN activation {activation}" in note for note in result.unsupported)
        assert noted is not written, release


# --- plan JSON and the command -----------------------------------------------------------
@pytest.mark.parametrize("target", ["megatron", "nemo", "torchtitan", "maxtext"])
def test_plan_json_exports_its_optimum(plan_json, target):
    document = json.loads(plan_json.read_text())
    optimum, step = document["optimum"], document["optimum_step"]["plan"]
    result = runner.invoke(app, ["export", str(plan_json), "--to", target])
    assert result.exit_code == 0, result.output
    text = result.stdout
    # the plan's D as the target counts training: steps of the global batch, the last whole
    envelope = document["envelope"]
    steps = math.ceil(optimum["tokens"] / (envelope["global_batch"] * envelope["seq_len"]))
    assert f"# training: {optimum['tokens']:.4g} tokens = {steps} steps" in text
    if target == "megatron":
        a = parse_megatron(text)
        assert (a.num_experts, a.moe_router_topk) == (optimum["experts"], optimum["top_k"])
        assert a.moe_ffn_hidden_size == optimum["expert_ffn"]
        assert a.expert_model_parallel_size == step["ep"]
        assert a.global_batch_size == envelope["global_batch"]
        assert a.train_iters == steps
    elif target == "torchtitan":
        doc = tomllib.loads(text)
        assert doc["parallelism"]["expert_parallel_degree"] == step["ep"]
        assert doc["training"]["steps"] == steps
    else:
        doc = yaml.safe_load(text)
        layers = doc["model"]["num_layers"] if target == "nemo" \
            else doc["base_num_decoder_layers"]
        assert layers == optimum["layers"]
        assert (doc["train"]["train_iters"] if target == "nemo" else doc["steps"]) == steps


def test_plan_job_file_keeps_the_token_budget(plan_json, tmp_path):
    """export --to yaml writes the plan's D as training.tokens, so the job file's own
    exports keep the step count and perf times those steps (hand check: steps x step)."""
    document = json.loads(plan_json.read_text())
    tokens, envelope = document["optimum"]["tokens"], document["envelope"]
    steps = math.ceil(tokens / (envelope["global_batch"] * envelope["seq_len"]))
    job = tmp_path / "optimum.yaml"
    result = runner.invoke(app, ["export", str(plan_json), "--to", "yaml", "--out", str(job)])
    assert result.exit_code == 0, result.output
    # a whole token count (the plan's D* is throughput x window)
    assert yaml.safe_load(job.read_text())["training"] == {"tokens": round(tokens)}
    result = runner.invoke(app, ["export", str(job), "--to", "megatron"])
    assert result.exit_code == 0, result.output
    assert parse_megatron(result.stdout).train_iters == steps
    result = runner.invoke(app, ["perf", str(job), "--json"])
    assert result.exit_code == 0, result.output
    perf = json.loads(result.stdout)
    assert perf["training"]["steps"] == steps
    assert perf["training"]["compute_days"] == pytest.approx(
        steps * perf["step_time_s"] / 86_400)
    # a job without the block states no budget; a bad one is refused naming the field
    result = runner.invoke(app, ["export", str(JOB), "--to", "megatron"])
    assert "--train-iters" not in result.stdout
    result = runner.invoke(app, ["perf", str(job), "--set", "training.tokens=0"])
    assert result.exit_code == 2 and "training: tokens" in result.output
    # past the planner's token range (1e18, limits.py): a typo, not a run
    result = runner.invoke(app, ["perf", str(job), "--set", "training.tokens=1e30"])
    assert result.exit_code == 2 and "less than or equal to 1000000000000000000" in result.output


def test_cli_out_file_and_notes(tmp_path):
    out = tmp_path / "titan.toml"
    result = runner.invoke(app, ["export", str(JOB), "--to", "torchtitan", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert tomllib.loads(out.read_text())["training"]["seq_len"] == 8192
    assert "note: torchtitan cannot express: Muon optimizer" in result.output


def test_invalid_layout_is_refused_like_perf():
    # pp 16 x vpp 2 = 32 stages do not divide 48 layers: perf refuses it, so does export
    result = runner.invoke(app, ["export", str(JOB), "--to", "megatron", "--set",
                                 "parallelism.vpp=2"])
    assert result.exit_code == 2
    assert "invalid parallel layout" in result.output and "layers=48" in result.output


def test_cli_unknown_target_is_one_line():
    result = runner.invoke(app, ["export", str(JOB), "--to", "deepspeed"])
    assert result.exit_code == 2
    assert "--to 'deepspeed' is not a target; allowed: megatron, nemo, torchtitan, maxtext, " \
        "yaml" in result.output


@pytest.mark.parametrize(("target", "says"), [
    ("hf", "no target writes a launch config for hf-transformers"),
    ("accelerate", "no target writes a launch config for hf-transformers"),
    ("deepspeed", "no target writes a launch config for deepspeed"),
    ("jax", "jax-xla jobs export with --to maxtext"),
    ("torchtitan2", None),
])
def test_a_stack_typed_as_a_target_is_told_where_it_exports(target, says):
    """An hf-transformers user typed --to hf and read only the list of targets (a trial):
    a stack's name, first word or keyword says which target launches it, or that none does
    and what to do instead; other text keeps the plain line."""
    result = runner.invoke(app, ["export", str(JOB), "--to", target])
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert f"--to '{target}' is not a target; allowed: megatron, nemo, torchtitan, " in line
    if says is None:
        assert "(" not in line
    else:
        assert says in line
    assert ("--to yaml writes the job" in line) == (says is not None and "no target" in says)


def test_plan_optimum_carries_the_job_blocks(plan_json):
    """A plan candidate writes its layout and batch as job files do (docs/schema.md); the
    export reads them and gets what the older plan row and envelope gave."""
    from mosaic.config.blocks import BatchBlock, ParallelismBlock

    document = json.loads(plan_json.read_text())
    optimum = document["optimum"]
    layout = ParallelismBlock.model_validate(optimum["parallelism"])
    batch = BatchBlock.model_validate(optimum["batch"])
    row = optimum["plan"]
    assert (layout.tp, layout.pp, layout.ep, layout.dp) == (row["tp"], row["pp"], row["ep"],
                                                            row["dp"])
    assert (batch.global_seqs, batch.micro_seqs) == (optimum["global_batch"], row["micro_batch"])
    older = {**document, "optimum": {k: v for k, v in optimum.items()
                                     if k not in ("parallelism", "batch")}}
    new, old = spec_from_plan_document(document, "p"), spec_from_plan_document(older, "p")
    if new.sharding != "hsdp":  # the shard group only means something under HSDP
        old = dataclasses.replace(old, hsdp_shard=None)
    assert new == old
    # the GPU generation of the plan's node type, as a job file's system gives it (a trial's
    # B200 plan got the Hopper-only CUDA_DEVICE_MAX_CONNECTIONS note)
    from mosaic.hardware import get_system

    assert new.architecture == get_system(document["envelope"]["system"]).device.architecture
    assert new.architecture is not None


def test_megatron_carries_the_overlap_and_graph_settings_of_the_job():
    """EP overlap (with delayed wgrad, its requirement), FP8 dispatch, TP comm overlap and a
    full-iteration CUDA graph (without the NaN check, which syncs the host) reach the
    Megatron arguments; an MoE full-iteration graph notes what must be set by hand."""
    overrides = ["parallelism.ep_overlap=true", "parallelism.dispatch_fp8=true",
                 "performance.precision=fp8", "parallelism.tp=2",
                 "parallelism.tp_comm_overlap=true",
                 "performance.full_iteration_cuda_graph=true"]
    # pp 16 with virtual stages and selective recompute: an EP overlap Megatron accepts
    spec = load_export_spec(JOB, [*overrides, "parallelism.vpp=3",
                                  "performance.checkpointing=selective"], None)
    result = export(spec, "megatron")
    a = parse_megatron(result.text)
    assert a.overlap_moe_expert_parallel_comm and a.delay_wgrad_compute
    # MXFP8 dispatch needs the ncclep backend TransformerConfig checks: said, not written
    assert (a.moe_dispatch_fwd_dtype, a.moe_combine_bwd_dtype) == (None, None)
    assert any(note.startswith("dispatch_fp8 (MXFP8 dispatch and combine), not written")
               for note in result.unsupported)
    # without virtual stages (and under full recompute) the overlap would not launch: not
    # written, and said (a trial launched such a file)
    refused = export(load_export_spec(JOB, overrides, None), "megatron")
    assert not parse_megatron(refused.text).overlap_moe_expert_parallel_comm
    assert any("no virtual stages" in note and "not written" in note
               for note in refused.unsupported)
    # every overlap assert of TransformerConfig, each said (a review found 'moe' recomputed
    # and two MTP layers written through)
    for extra, reason in ((["performance.recompute_modules=[moe,core_attn]"], "'moe' in "),
                          (["model.mtp_layers=2"], "2 MTP layers"),
                          (["parallelism.ep=1"], "ep = 1")):
        spec = load_export_spec(JOB, [*overrides, "parallelism.vpp=3",
                                      "performance.checkpointing=selective", *extra], None)
        for target in ("megatron", "nemo"):
            written = export(spec, target)
            flag_lines = [line for line in written.text.splitlines()
                          if not line.lstrip().startswith("#")]  # notes may name the flag
            assert not any("overlap-moe-expert-parallel-comm" in line for line in flag_lines)
            assert "overlap_moe_expert_parallel_comm: true" not in written.text
            assert any(note.startswith(f"ep_overlap with {reason}") for note in
                       written.unsupported), (target, reason)
    assert a.sequence_parallel and a.tp_comm_overlap
    assert a.cuda_graph_impl == "full_iteration" and a.check_for_nan_in_loss_and_grad is False
    assert any("moe-expert-rank-capacity-factor" in note for note in result.unsupported)
    plain = parse_megatron(export(load_export_spec(JOB, [], None), "megatron").text)
    assert not (plain.overlap_moe_expert_parallel_comm or plain.tp_comm_overlap)
    assert plain.cuda_graph_impl is None and plain.check_for_nan_in_loss_and_grad is True


def test_a_sliding_window_is_written_where_the_target_has_it():
    """GPT-OSS's 128-key window on every other layer: Megatron --window-size 127,0 (left
    keys besides the query's own) and --window-attn-skip-freq 2, NeMo/Bridge's
    TransformerConfig fields alike; MaxText's gpt_oss decoder as its gpt-oss-20b.yml sets it
    (sliding_window_size 128 on every other layer, the clamped sigmoid-gated FFN: without
    the window it attends through a window of 0); torchtitan says it does not write it."""
    spec = load_export_spec(JOB, ["parallelism.ep=8", "parallelism.pp=8"],
                            ROOT / "examples" / "hf" / "gpt-oss-20b.json")
    megatron = export(spec, "megatron").text
    assert "--window-size 127,0" in megatron and "--window-attn-skip-freq 2" in megatron
    # the learned sink logit and the clamped gated FFN, as Megatron-LM's gpt-oss-20b.sh
    a = parse_megatron(megatron)
    assert a.softmax_type == "learnable" and a.quick_geglu and not a.swiglu
    assert (a.glu_linear_offset, a.activation_func_clamp_value) == (1.0, 7.0)
    nemo = export(spec, "nemo").text
    assert "window_size" in nemo and "window_attn_skip_freq" in nemo
    nemo_model = yaml.safe_load(nemo)["model"]
    assert (nemo_model["softmax_type"], nemo_model["glu_linear_offset"],
            nemo_model["activation_func_clamp_value"]) == ("learnable", 1.0, 7.0)
    assert "a sliding window of 128 keys, full attention on one layer in 2" in \
        export(spec, "torchtitan").text
    maxtext = yaml.safe_load(export(spec, "maxtext").text)
    assert maxtext["decoder_block"] == "gpt_oss"
    assert (maxtext["sliding_window_size"], maxtext["inhomogeneous_layer_cycle_interval"]) == (
        128, 2)
    assert (maxtext["mlp_activations"], maxtext["mlp_activations_limit"]) == (
        ["sigmoid", "linear"], 7.0)
    # Transformer Engine takes a window under context parallelism over a2a only
    with_cp = load_export_spec(JOB, ["parallelism.ep=8", "parallelism.pp=8",
                                     "parallelism.cp=2"],
                               ROOT / "examples" / "hf" / "gpt-oss-20b.json")
    assert "--cp-comm-type a2a" in export(with_cp, "megatron").text
    assert "--cp-comm-type" not in megatron


def test_torchtitan_leaves_out_the_float8_expert_converter_under_pipelining():
    """torchtitan v0.2.2's float8 grouped-GEMM prototype asserts pp = cp = 1: with pp 4 the
    export writes the linear converter only and says the experts run in bf16, instead of a
    config that stops at launch."""
    spec = deepseek_spec()
    assert spec.pp == 4
    titan = export(spec, "torchtitan")
    assert tomllib.loads(titan.text)["model"]["converters"] == ["quantize.linear.float8"]
    assert any("quantize.grouped_mm.float8 not written" in note for note in titan.unsupported)


def test_tp_beyond_the_query_groups_names_the_megatron_core_it_needs():
    """Appendix E has 8 KV heads: tp 16 replicates them, which Megatron-Core runs only from
    core_v0.16.0; tp 8 needs nothing."""
    wide = load_export_spec(JOB, ["parallelism.tp=16", "parallelism.pp=8"], None)
    for target in ("megatron", "nemo"):
        assert any("needs Megatron-Core core_v0.16.0" in note
                   for note in export(wide, target).unsupported)
    narrow = load_export_spec(JOB, ["parallelism.tp=8", "parallelism.pp=8"], None)
    assert not any("core_v0.16.0" in note for note in export(narrow, "megatron").unsupported)


def test_a_job_predicted_not_to_fit_is_exported_with_a_warning(tmp_path):
    """The launch config is still written (the user asked for it), but stderr and the
    file's header say mosaic predicts an out-of-memory run, with the same figures `mosaic
    perf` reports (the header keeps the warning with the file; a trial found it on stderr
    only)."""
    out = tmp_path / "job.args"
    squeezed = ["--set", "parallelism.pp=2"]  # 24 of the 48 layers per rank: over a B200
    result = runner.invoke(app, ["export", str(JOB), "--to", "megatron", "--out", str(out),
                                 *squeezed])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("#")
    perf = json.loads(runner.invoke(app, ["perf", str(JOB), *squeezed, "--json"]).stdout)
    assert not perf["feasible"]
    verdict = f"mosaic predicts this job does not fit: {perf['memory_gib']:.2f} GiB"
    assert f"warning: {verdict}" in result.output
    header = [line for line in out.read_text().splitlines() if line.startswith("#")]
    assert any(line.startswith(f"# WARNING: {verdict}") for line in header)
    job_file = runner.invoke(app, ["export", str(JOB), "--to", "yaml", *squeezed]).stdout
    assert f"# WARNING: {verdict}" in job_file
    fits = runner.invoke(app, ["export", str(JOB), "--to", "megatron",
                               "--out", str(tmp_path / "fits.args")])
    assert fits.exit_code == 0 and "does not fit" not in fits.output
    assert "WARNING" not in (tmp_path / "fits.args").read_text()


def test_export_checks_the_target_first_and_needs_no_costing(tmp_path, offload_job):
    """A bad --to is named before the job is read; a job the model cannot cost (activation
    offload on a B300, whose host link the catalog does not state) still exports, with a
    note that its memory was not checked (found by a new-user trial: both were refused
    for the wrong reason)."""
    bad = runner.invoke(app, ["export", str(tmp_path / "absent.yaml"), "--to", "deepspeed"])
    assert bad.exit_code == 2 and "--to 'deepspeed' is not a target" in bad.output
    job = offload_job("DGX-B300")
    result = runner.invoke(app, ["export", str(job), "--to", "megatron"])
    assert result.exit_code == 0, result.output
    assert "--cpu-offloading-num-layers 20" in result.stdout
    assert "memory not checked" in result.stderr and "host link" in result.stderr
    assert "# WARNING: memory not checked" in result.stdout


def test_a_plan_optimum_that_leaves_fields_out_gets_the_jobs_defaults(plan_json):
    """An optimum whose parallelism and batch blocks leave sequence parallelism, etp, vpp,
    sharding and the micro-batch unstated is resolved as a job file is (a review: the export
    read sequence parallelism off and etp 1 where the job path costs tp 2 with them on), and
    each defaulted field is said."""
    document = json.loads(plan_json.read_text())
    optimum = document["optimum"]
    optimum["parallelism"] = {**{k: v for k, v in optimum["parallelism"].items()
                                 if k not in ("sequence_parallel", "etp", "vpp", "sharding",
                                              "hsdp_shard")},
                              "tp": 2, "dp": optimum["parallelism"]["dp"] // 2}
    optimum["batch"] = {k: v for k, v in optimum["batch"].items() if k != "micro_seqs"}
    if optimum["parallelism"]["ep"] == 1 or document["envelope"].get("stack", "megatron-core") \
            != "megatron-core":
        pytest.skip("the fixture plan is not a megatron-core MoE plan")
    spec = spec_from_plan_document(document, "p")
    assert (spec.tp, spec.sequence_parallel, spec.etp, spec.vpp, spec.micro_seqs,
            spec.sharding) == (2, True, 2, 1, 1, "zero1")
    said = " ".join(spec.assumptions)
    for field in ("sequence_parallel", "etp", "vpp", "micro_seqs", "sharding"):
        assert f"{field} not stated" in said, field


def test_a_hand_edited_plan_is_refused_in_one_line(plan_json, tmp_path):
    """A plan's optimum goes through the job checks of `mosaic perf`; a field of the wrong
    shape is refused, where it raised an internal error (TypeError, AttributeError)."""
    good = json.loads(plan_json.read_text())
    cases = {
        "list": ({**good, "optimum": [1]}, "'optimum' is a list"),
        "layout": ({**good, "optimum": {**good["optimum"], "parallelism": {
            **good["optimum"]["parallelism"], "tp": 3}}}, "the optimum's job: "),
        "q": ({**good, "optimum": {**good["optimum"], "q": [1]}},
              "not a well-formed `mosaic plan --json` document (TypeError"),
    }
    for name, (document, fragment) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        result = runner.invoke(app, ["export", str(path), "--to", "megatron"])
        assert result.exit_code == 2, (name, result.output)
        assert fragment in result.output and "internal error" not in result.output, name


def test_a_plan_envelope_or_calibration_of_the_wrong_shape_is_one_line(plan_json, tmp_path):
    """The refusals of a plan document with a non-mapping envelope, a catalog that is no
    list of paths, or (under --calibration) a non-mapping calibration block are the refusal
    lines themselves; the catalog hint and the profile name each ended in an internal error
    (AttributeError, TypeError; found by hand after the fuzzer's plan cases)."""
    good = json.loads(plan_json.read_text())
    unknown = {**good["envelope"], "system": "no-such-node"}
    cases = {
        "envelope": ({**good, "envelope": "abc"}, [], "'envelope' is a str"),
        "catalog-int": ({**good, "envelope": {**unknown, "catalog": 5}}, [],
                        "unknown system 'no-such-node'"),
        "catalog-items": ({**good, "envelope": {**unknown, "catalog": [5, None]}}, [],
                          "unknown system 'no-such-node'"),
        "calibration": ({**good, "calibration": "abc"}, ["--calibration", "default"],
                        "was planned under profile '?'"),
    }
    for name, (document, extra, fragment) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        result = runner.invoke(app, ["export", str(path), "--to", "megatron", *extra])
        assert result.exit_code == 2, (name, result.output, result.exception)
        assert fragment in result.output, (name, result.output)
        assert "pass it again" not in result.output, name


def test_a_plans_gpus_per_node_is_a_whole_number_and_its_systems(plan_json, tmp_path):
    """The GPUs per node an export writes (torchrun's --nproc_per_node, MaxText's DCN split)
    came from the envelope unchecked: 'abc' ended in a TypeError in the MaxText export and
    was written as --nproc_per_node abc by the torchtitan one; a count other than the
    system's (the catalog's p6-b200.48xlarge: 8) is refused as an edited plan."""
    from mosaic.hardware import get_system

    good = json.loads(plan_json.read_text())
    node = get_system(good["envelope"]["system"]).gpus_per_node
    cases = {"abc": "envelope.gpus_per_node is 'abc'; a `mosaic plan --json` document holds "
                    "a whole number of GPUs there",
             1.5: "envelope.gpus_per_node is 1.5",
             node + 1: f"envelope.gpus_per_node {node + 1} is not system "
                       f"{good['envelope']['system']}'s {node} (an edited plan?)"}
    for value, fragment in cases.items():
        path = tmp_path / "edited.json"
        path.write_text(json.dumps({**good, "envelope": {**good["envelope"],
                                                         "gpus_per_node": value}}))
        for target in ("maxtext", "torchtitan"):
            result = runner.invoke(app, ["export", str(path), "--to", target])
            assert result.exit_code == 2, (value, target, result.output, result.exception)
            assert fragment in result.output, (value, target, result.output)
    # a plan from before the envelope recorded it: the system's own count
    older = {**good, "envelope": {k: v for k, v in good["envelope"].items()
                                  if k != "gpus_per_node"}}
    assert spec_from_plan_document(older, "p").gpus_per_node == node


def test_maxtext_names_what_its_decoder_drops_and_runs_nvfp4():
    """MaxText's mixtral decoder builds routed experts alone (shared_experts and
    first_num_dense_layers are read by its deepseek decoder); NVFP4 is its te_nvfp4
    quantization (configs/types.py @ e591f30)."""
    comm_bound = ROOT / "examples" / "fsdp_moe_comm_bound.yaml"  # 2 shared, 1 dense block
    result = export(load_export_spec(comm_bound, [], None), "maxtext")
    written = yaml.safe_load(result.text)
    assert written["decoder_block"] == "mixtral"
    assert any("MaxText's mixtral decoder builds routed experts alone" in line
               for line in result.unsupported)
    # nor does the config state what that decoder ignores (a trial read it as built)
    assert "shared_experts" not in written and "first_num_dense_layers" not in written
    # MaxText's qwen3_next decoder builds Qwen3-Next's gated shared expert itself
    qwen3_next = export(load_export_spec(ROOT / "examples" / "qwen3_next_80b_b200.yaml", [],
                                         None), "maxtext")
    assert not any("shared experts" in line for line in qwen3_next.unsupported)
    nvfp4 = export(load_export_spec(JOB, ["performance.precision=nvfp4"], None), "maxtext")
    assert yaml.safe_load(nvfp4.text)["quantization"] == "te_nvfp4"


def test_target_is_an_alias_of_to():
    # a new user's first guess (the trial of session 43): same output as --to
    by_to = runner.invoke(app, ["export", str(JOB), "--to", "megatron"])
    by_target = runner.invoke(app, ["export", str(JOB), "--target", "megatron"])
    assert by_target.exit_code == 0, by_target.output
    assert by_target.stdout == by_to.stdout


def test_a_plan_job_names_the_calibration_its_plan_was_predicted_with(plan_json, tmp_path):
    """A job file names no calibration, so `mosaic perf` of a plan's job used the default
    profile where the plan had used another (a trial: 4.68 s against the plan's 4.82 s);
    the header now gives the command that reproduces the plan's step time."""
    document = json.loads(plan_json.read_text())
    for name, expected in (("default", "run it with `mosaic perf FILE`;"),
                           ("paper-p6b200", "`mosaic perf FILE --calibration paper-p6b200`"),
                           ("acme", "CAL.yaml the file of the plan's calibration 'acme'")):
        document["calibration"]["name"] = name
        plan = tmp_path / f"{name}.json"
        plan.write_text(json.dumps(document))
        result = runner.invoke(app, ["export", str(plan), "--to", "yaml"])
        assert result.exit_code == 0, result.output
        assert expected in result.stdout.splitlines()[0] + ";"
        # the launch configs name the profile too (a trial: only the YAML did)
        for target in ("megatron", "nemo", "torchtitan", "maxtext"):
            launch = runner.invoke(app, ["export", str(plan), "--to", target])
            assert launch.exit_code == 0, launch.output
            assert f"predicted under mosaic calibration profile '{name}'" in launch.stdout


def _user_catalog(folder: Path) -> Path:
    """A hardware catalog file with one node type of its own, acme-h100-ib."""
    catalog = folder / "hw.yaml"
    catalog.write_text(yaml.safe_dump({"systems": [{
        "name": "acme-h100-ib", "device": "H100-SXM-80GB",
        "gpus_per_node": {"value": 8, "source": "our BOM"},
        "scale_up_domain_gpus": {"value": 8, "source": "our BOM"},
        "nics_per_node": {"value": 8, "source": "8x CX7"},
        "nic_bw_bytes_per_s": {"value": 5.0e10, "source": "400 Gb/s"},
        "scale_out_fabric": "InfiniBand NDR"}]}))
    return catalog


def _job_on_user_node_type(folder: Path) -> Path:
    """The example job on the user catalog's node type acme-h100-ib (:func:`_user_catalog`)."""
    document = yaml.safe_load(JOB.read_text())
    document["hardware"] = {"system": "acme-h100-ib"}
    job = folder / "job.yaml"
    job.write_text(yaml.safe_dump(document))
    return job


def test_a_job_on_a_user_node_type_names_the_catalog_it_needs(tmp_path):
    """A job on a node type from the user's catalog was exported with "run it with `mosaic
    perf FILE`", which then says "unknown system" (a trial): the header names the catalog;
    a shipped node type still needs none."""
    catalog = _user_catalog(tmp_path)
    result = runner.invoke(app, ["--catalog", str(catalog), "export",
                                 str(_job_on_user_node_type(tmp_path)), "--to", "yaml"])
    assert result.exit_code == 0, result.output
    assert f"run it with `mosaic --catalog {catalog} perf FILE`" in result.stdout
    shipped = runner.invoke(app, ["--catalog", str(catalog), "export", str(JOB), "--to", "yaml"])
    assert "run it with `mosaic perf FILE`" in shipped.stdout


def test_the_catalog_named_in_an_export_header_is_quoted_for_a_shell(tmp_path):
    """A catalog under a folder with a space was written unquoted into the header's command
    ('--catalog /x/my hw/hw.yaml'), which breaks when pasted into a shell."""
    folder = tmp_path / "my hw"
    folder.mkdir()
    catalog = _user_catalog(folder)
    result = runner.invoke(app, ["--catalog", str(catalog), "export",
                                 str(_job_on_user_node_type(tmp_path)), "--to", "yaml"])
    assert result.exit_code == 0, result.output
    assert f"run it with `mosaic --catalog {shlex.quote(str(catalog))} perf FILE`" in result.stdout


def test_a_plan_on_a_user_node_type_names_the_catalog_to_pass_again(tmp_path):
    """A plan made with --catalog records its files; exported without them, the one-line
    error says to pass them again (a trial got only "unknown system"), and with them the
    export works."""
    from mosaic.hardware import use_catalog

    catalog = _user_catalog(tmp_path)
    try:
        planned = runner.invoke(app, ["--catalog", str(catalog), "plan", "--system",
                                      "acme-h100-ib", "--nodes", "1", "--q", "4", "--experts",
                                      "8", "--top-k", "1", "--split-factor", "1", "--json"])
    finally:
        use_catalog()
    assert planned.exit_code == 0, planned.output
    plan = tmp_path / "plan.json"
    plan.write_text(planned.stdout)
    assert json.loads(planned.stdout)["envelope"]["catalog"] == [str(catalog)]
    bare = runner.invoke(app, ["export", str(plan), "--to", "yaml"])
    assert bare.exit_code == 2
    assert f"the plan was made with --catalog {catalog}: pass it again" in bare.output
    try:
        again = runner.invoke(app, ["--catalog", str(catalog), "export", str(plan), "--to",
                                    "yaml"])
    finally:
        use_catalog()
    assert again.exit_code == 0, again.output


def test_export_checks_memory_under_the_calibration_it_is_given(tmp_path, plan_json):
    """`export --calibration FILE` costs the job's memory under that profile and its yaml
    header says how to reproduce it; a bad profile is an error, not a note (a trial: exit 0);
    a plan's pick belongs to the plan's profile, so --calibration on a plan is refused."""
    import dataclasses

    from mosaic.perf.calibration import default_calibration

    scaled = dataclasses.replace(default_calibration(), name="acme", memory_scale=1.4)
    profile = tmp_path / "acme.yaml"
    profile.write_text(yaml.safe_dump(scaled.to_document()))
    job = ["--set", "parallelism.pp=4"]
    plain = runner.invoke(app, ["export", str(JOB), "--to", "yaml", *job])
    assert plain.exit_code == 0 and "does not fit" not in plain.output
    result = runner.invoke(app, ["export", str(JOB), "--to", "yaml", *job,
                                 "--calibration", str(profile)])
    assert result.exit_code == 0, result.output
    assert f"`mosaic perf FILE --calibration {profile}`" in result.stdout
    assert "WARNING: mosaic predicts this job does not fit" in result.stdout
    missing = runner.invoke(app, ["export", str(JOB), "--to", "megatron",
                                  "--calibration", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "none.yaml" in missing.output
    planned = runner.invoke(app, ["export", str(plan_json), "--to", "megatron",
                                  "--calibration", str(profile)])
    assert planned.exit_code == 2 and "--calibration applies to job files" in planned.output


def test_a_plan_under_a_profile_file_exports_the_path_to_pass_back(tmp_path):
    """A plan made with `--calibration FILE` records the file, so its exported job says
    `mosaic perf FILE --calibration <that file>` (a trial got "CAL.yaml, the file of the
    plan's calibration 'X'")."""
    import dataclasses

    from mosaic.perf.calibration import default_calibration

    profile = tmp_path / "acme.yaml"
    profile.write_text(yaml.safe_dump(dataclasses.replace(
        default_calibration(), name="acme", memory_scale=1.1).to_document()))
    planned = runner.invoke(app, ["plan", "--nodes", "8", "--days", "5", "--q", "8",
                                  "--experts", "8,16", "--top-k", "1", "--split-factor", "1",
                                  "--calibration", str(profile), "--json"])
    assert planned.exit_code == 0, planned.output
    document = json.loads(planned.stdout)
    assert document["calibration"]["file"] == str(profile)
    assert document["calibration"]["memory_scale"] == 1.1
    plan = tmp_path / "plan.json"
    plan.write_text(planned.stdout)
    job = runner.invoke(app, ["export", str(plan), "--to", "yaml"])
    assert job.exit_code == 0, job.output
    assert f"`mosaic perf FILE --calibration {profile}`" in job.stdout


def test_maxtexts_memory_note_costs_the_fsdp_its_file_writes():
    """A ZeRO-2 job exported to MaxText shards with its fsdp axis; the header's re-costed
    memory had been the ZeRO-2 figure (a trial: 62.07 GiB where FSDP gives less)."""
    from mosaic.export.targets import launched_job_document

    spec = load_export_spec(ROOT / "examples" / "fsdp_moe_comm_bound.yaml",
                            ["parallelism.sharding=zero2"], None)
    assert spec.sharding == "zero2"
    for target in ("maxtext", "torchtitan"):
        document = launched_job_document(spec, target)
        assert document is not None and document["parallelism"]["sharding"] == "fsdp"


@pytest.mark.parametrize("target", ["megatron", "nemo", "torchtitan", "maxtext"])
def test_every_target_says_it_leaves_out_an_lm_head_bias(target):
    """Phi-3.5-MoE's LM head has a bias (HF lm_head_bias) that no target's output layer
    builds: each export says so instead of dropping it silently."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its SparseMixer router, read as softmax top-2
        spec = load_export_spec(JOB, [], JOB.parents[1] / "examples/hf/phi-3.5-moe-instruct.json")
    notes = [note for note in export(spec, target).unsupported if "LM-head bias" in note]
    assert len(notes) == 1 and "32,064 parameters" in notes[0]


def test_a_yaml_export_names_the_node_type_as_the_catalog_does():
    """appendix_e.yaml says the paper's 'p6-b200.48 xlarge'; the exported job file writes the
    catalog's name (a trial found the alias in the canonical document)."""
    text = export(load_export_spec(JOB, [], None), "yaml").text
    assert yaml.safe_load(text)["hardware"]["system"] == "p6-b200.48xlarge"
    assert "p6-b200.48 xlarge" in JOB.read_text()


def test_a_plan_job_names_its_release_and_predicts_the_plans_step(plan_json, tmp_path):
    """A plan on a stack release writes that release into its job file, with every setting
    the release's recipes could fill stated as the plan ran it: the job predicts the same
    step and memory as without the release, while naming the release alone would let the
    recipe force-balance the routing (Megatron-Bridge MoE recipes from 25.11) and change it
    (a trial's exported job had lost '26.04')."""
    document = json.loads(plan_json.read_text())
    document["envelope"] |= {"stack": "megatron-bridge", "stack_version": "26.04"}
    released = tmp_path / "released.json"
    released.write_text(json.dumps(document))
    del document["envelope"]["stack_version"]
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(document))

    def job_and_perf(plan: Path, *overrides: str) -> tuple[dict, dict]:
        job = plan.with_suffix(".yaml")
        result = runner.invoke(app, ["export", str(plan), "--to", "yaml", "--out", str(job)])
        assert result.exit_code == 0, result.output
        sets = [arg for override in overrides for arg in ("--set", override)]
        result = runner.invoke(app, ["perf", str(job), "--json", *sets])
        assert result.exit_code == 0, result.output
        return yaml.safe_load(job.read_text()), json.loads(result.stdout)

    job, with_release = job_and_perf(released)
    assert job["performance"]["stack_version"] == "26.04"
    assert job["performance"]["routing"] == "dropless"
    plain_job, without = job_and_perf(plain)
    assert "stack_version" not in plain_job["performance"]
    assert with_release["step_time_s"] == pytest.approx(without["step_time_s"], rel=1e-12)
    assert with_release["memory_gib"] == pytest.approx(without["memory_gib"], rel=1e-12)
    _, release_alone = job_and_perf(plain, "performance.stack_version=26.04")
    assert release_alone["step_time_s"] != pytest.approx(without["step_time_s"], rel=1e-6)


def test_a_plan_job_keeps_the_layouts_its_plan_allowed(plan_json, tmp_path):
    """The plan's narrowed layout options and its micro-batch sizes (Table 3's 1, 2, 4) go
    to the job's search block, and a job document written from that job keeps them."""
    from mosaic.config.job_schema import job_document, load_job

    document = json.loads(plan_json.read_text())
    assert document["layout_limits"] == {"micro_batches": [1, 2, 4]}  # nothing narrowed
    plan = document["optimum"]["plan"]
    document["layout_limits"] |= {"pp": [plan["pp"]], "sharding": [plan["sharding"]]}
    narrowed = tmp_path / "narrowed.json"
    narrowed.write_text(json.dumps(document))
    job = tmp_path / "job.yaml"
    result = runner.invoke(app, ["export", str(narrowed), "--to", "yaml", "--out", str(job)])
    assert result.exit_code == 0, result.output
    search = yaml.safe_load(job.read_text())["search"]
    assert search == {"devices": document["envelope"]["n_devices"], "pp": [plan["pp"]],
                      "sharding": [plan["sharding"]], "micro_batches": [1, 2, 4]}
    assert job_document(load_job(job))["search"] == search


def test_a_release_whose_recipes_would_change_the_plans_step_is_not_written():
    """A DeepSeek-V3 shape at pp 1 with selective checkpointing: naming 26.04 would let the
    release's recipe add its recompute modules and pipeline layouts on reload (a review:
    30.106 s / 169.2 GiB became 29.973 s / 153.3 GiB), so the job keeps no release; a job
    whose prediction the release leaves as it is names it."""
    from mosaic.export.spec import _with_release

    deepseek = yaml.safe_load((ROOT / "examples" / "deepseek_v3_h100.yaml").read_text())
    del deepseek["performance"]["stack_version"]
    deepseek["parallelism"] |= {"pp": 1, "vpp": 1}
    deepseek["performance"]["checkpointing"] = "selective"
    assert "stack_version" not in _with_release(deepseek, "26.04", "t")["performance"]
    plain = yaml.safe_load(JOB.read_text())
    plain["performance"] = (plain.get("performance") or {}) | {
        "stack": "megatron-bridge", "cross_entropy": "te"}
    assert _with_release(plain, "26.04", "t")["performance"]["stack_version"] == "26.04"


def test_hybridep_on_a100_is_refused_as_perf_refuses_it():
    """HybridEP needs TMA (Hopper, Blackwell): export wrote a Megatron file of it for DGX
    A100 with only a note (a review), where perf refuses the job."""
    overrides = ["--set", "hardware.system=DGX-A100", "--set", "parallelism.dispatcher=hybridep"]
    for command in (["export", str(JOB), "--to", "megatron"], ["perf", str(JOB)]):
        result = runner.invoke(app, [*command, *overrides])
        assert result.exit_code == 2 and "Tensor Memory Accelerator" in result.output


def test_a_dispatcher_the_stack_has_no_path_to_is_refused_by_perf_export_and_plan():
    """torchtitan's expert_parallel_comm_backend is "standard" or "deepep" (config/
    job_config.py @ 1a36996b8) and the paper's stack runs the all-to-all only (Appendix
    F.3): a HybridEP or DeepEP job on them was costed as if they ran it (a review)."""
    from mosaic.perf.machine import stack_dispatcher_refusal
    from mosaic.perf.workload import Dispatcher

    assert "runs alltoall, deepep" in stack_dispatcher_refusal("torchtitan", Dispatcher.HYBRIDEP)
    assert stack_dispatcher_refusal("torchtitan", Dispatcher.DEEPEP) is None
    assert "runs alltoall" in stack_dispatcher_refusal("paper-nemo", Dispatcher.DEEPEP)
    assert stack_dispatcher_refusal("megatron-core", Dispatcher.HYBRIDEP) is None
    assert stack_dispatcher_refusal("other", Dispatcher.HYBRIDEP) is None  # unknown software
    overrides = ["--set", "performance.stack=torchtitan", "--set", "parallelism.vpp=1",
                 "--set", "parallelism.dispatcher=hybridep"]
    for command in (["export", str(JOB), "--to", "megatron"], ["perf", str(JOB)]):
        result = runner.invoke(app, [*command, *overrides])
        assert result.exit_code == 2 and "stack torchtitan: the stack has no hybridep" in (
            result.output), result.output
    plan = runner.invoke(app, ["plan", "--stack", "torchtitan", "--dispatcher", "hybridep",
                               "--q", "8", "--experts", "64", "--top-k", "8",
                               "--split-factor", "8", "--nodes", "4", "--workers", "1"])
    assert plan.exit_code == 2 and "--dispatcher hybridep on stack torchtitan" in plan.output


def test_the_stacks_default_deepep_on_one_expert_rank_is_written_as_alltoall():
    """Megatron-Core's flex dispatcher asserts "DeepEP dispatcher requires TPxEP > 1"
    (token_dispatcher.py @ d98e8a64dd): a megatron-bridge job at ep 1 on H100, whose
    unstated dispatcher is the stack's DeepEP, was exported with --moe-token-dispatcher-type
    flex and would not launch; Bridge's own EP-1 recipe runs alltoall (olmoe_7b.py)."""
    base = ["performance.stack=megatron-bridge", "hardware.node_type=p5.48xlarge"]
    one_rank = load_export_spec(JOB, [*base, "parallelism.ep=1"], None)
    assert one_rank.dispatcher == "deepep"  # what was costed
    for target, written in (("megatron", "--moe-token-dispatcher-type alltoall"),
                            ("nemo", "moe_token_dispatcher_type: alltoall")):
        result = export(one_rank, target)
        assert written in result.text and "flex" not in result.text.replace(
            "flex dispatcher asserts", ""), target
        assert any("at etp·ep = 1 written as alltoall" in note for note in result.unsupported)
    eight = export(load_export_spec(JOB, [*base, "parallelism.ep=8"], None), "megatron")
    assert parse_megatron(eight.text).moe_flex_dispatcher_backend == "deepep"


def test_the_stacks_default_deepep_on_one_expert_rank_is_written_back_unstated(tmp_path):
    """The layout rules refuse a stated DeepEP at etp·ep = 1, not the stack's default (docs/
    stacks.md): a megatron-bridge job at ep 1 on H100 written back with --to yaml stated
    deepep, and its own `mosaic perf` refused it; a plan whose optimum ran there could not
    be exported to any target (its job was refused). Both leave the default unstated, so the
    file loads again with the DeepEP it was costed with."""
    from mosaic.config.job_schema import load_job
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.calibration import default_calibration

    calibration = default_calibration()
    base = ["performance.stack=megatron-bridge", "hardware.node_type=p5.48xlarge"]
    for ep, stated in ((1, False), (8, True)):  # ep 8: the dispatcher is written as before
        out = tmp_path / f"ep{ep}.yaml"
        sets = [arg for name in [*base, f"parallelism.ep={ep}"] for arg in ("--set", name)]
        result = runner.invoke(app, ["export", str(JOB), "--to", "yaml", "--out", str(out),
                                     *sets])
        assert result.exit_code == 0, result.output
        assert ("dispatcher" in yaml.safe_load(out.read_text())["parallelism"]) is stated
        written, source = load_job(out), load_job(JOB, [*base, f"parallelism.ep={ep}"])
        assert written.workload.dispatcher is source.workload.dispatcher
        assert math.isclose(predict_job(written, calibration).prediction.step_time_s[0],
                            predict_job(source, calibration).prediction.step_time_s[0],
                            rel_tol=1e-9)
    plan = tmp_path / "plan.json"
    result = runner.invoke(app, ["plan", "--gpu", "H100", "--stack", "megatron-bridge",
                                 "--nodes", "1", "--days", "30", "--q", "4", "--experts", "16",
                                 "--top-k", "2", "--split-factor", "1", "--ep", "1", "--tp", "1",
                                 "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    plan.write_text(result.stdout)
    optimum = json.loads(result.stdout)["optimum"]["parallelism"]
    assert (optimum["ep"], optimum["etp"]) == (1, 1) and "dispatcher" not in optimum
    for target in ("megatron", "yaml"):
        out = tmp_path / f"plan.{target}"
        result = runner.invoke(app, ["export", str(plan), "--to", target, "--out", str(out)])
        assert result.exit_code == 0, (target, result.output)
    assert load_job(tmp_path / "plan.yaml").workload.dispatcher.value == "deepep"


@pytest.mark.parametrize("target", ["megatron", "nemo", "torchtitan", "maxtext"])
def test_a_launch_config_read_back_is_named_as_such(target, tmp_path):
    """`mosaic perf` on an exported torchtitan TOML said 'malformed YAML', on a MaxText file
    it listed 35 unknown blocks (a trial): one line names the file for what it is, and the
    job it came from."""
    out = tmp_path / f"job.{target}"
    assert runner.invoke(app, ["export", str(JOB), "--to", target, "--out", str(out)]
                         ).exit_code == 0
    for command in (["perf", str(out)], ["export", str(out), "--to", "megatron"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert (f"launch config written by `mosaic export` from {JOB}, not a mosaic input"
                in result.output), result.output


def test_an_empty_plan_file_says_it_is_empty(tmp_path):
    """A failed `mosaic plan --json > p.json` leaves p.json empty; exporting it said 'not
    valid JSON (Expecting value at line 1)' (a trial)."""
    empty = tmp_path / "p.json"
    empty.write_text("")
    result = runner.invoke(app, ["export", str(empty), "--to", "megatron"])
    assert result.exit_code == 2
    assert "p.json: empty, no JSON in it (did the command that wrote it fail?)" in " ".join(
        result.output.split())


def test_a_plan_on_repeated_data_says_its_job_cannot_hold_the_unique_tokens(plan_json,
                                                                           tmp_path):
    """A plan with --unique-tokens scored its optimum on D'; the exported job reads every
    token as new, and `compare` gave it a lower loss, unsaid (a trial)."""
    document = json.loads(plan_json.read_text())
    tokens = document["optimum"]["tokens"]
    document["search_space"]["unique_tokens"] = tokens / 8
    document["optimum"] |= {"epochs": 8.0, "effective_tokens": 0.8 * tokens}
    repeated = tmp_path / "repeated.json"
    repeated.write_text(json.dumps(document))
    out = tmp_path / "job.yaml"
    result = runner.invoke(app, ["export", str(repeated), "--to", "yaml", "--out", str(out)])
    assert result.exit_code == 0, result.output
    said = "the plan's loss counts repeated data"
    assert f"# NOT EXPRESSED: {said}" in out.read_text()
    assert said in result.output
    plain = tmp_path / "plain.yaml"
    runner.invoke(app, ["export", str(plan_json), "--to", "yaml", "--out", str(plain)])
    assert said not in plain.read_text()


def test_a_refused_runner_up_is_named_as_the_candidate_not_the_optimum(tmp_path, plan_json):
    """`export PLAN.json#2` whose job the checks refuse said "the optimum's job" (a trial:
    the runner-up on a node type of a catalog not passed again); it names the rank-2
    candidate, and a bare PLAN.json still the optimum."""
    document = json.loads(plan_json.read_text())
    assert len(document["candidates"]) >= 2
    document["envelope"]["system"] = "no-such-node"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(document))
    runner_up = runner.invoke(app, ["export", f"{plan}#2", "--to", "yaml"])
    assert runner_up.exit_code == 2
    assert f"{plan}#2: the rank-2 candidate's job: unknown system" in runner_up.output
    optimum = runner.invoke(app, ["export", str(plan), "--to", "yaml"])
    assert f"{plan}: the optimum's job: unknown system" in optimum.output


def test_a_target_loss_plan_says_its_export_is_not_the_cheapest_budget(tmp_path, plan_json):
    """`plan --target-loss` answers with its cheapest budget, but `export PLAN.json` wrote
    the planned envelope's optimum (more nodes or days, more tokens) without a word (a
    trial); every exported file and stderr now say so and how to export that budget."""
    planned = runner.invoke(app, ["plan", "--nodes", "1", "--days", "2", "--q", "4,6",
                                  "--experts", "8,16,32", "--top-k", "1,2", "--split-factor",
                                  "1,4", "--s-min", "0.5", "--workers", "1", "--target-loss",
                                  "1.8", "--cheapest-nodes", "1,2", "--cheapest-days", "1,2",
                                  "--json"])
    assert planned.exit_code == 0, planned.output
    document = json.loads(planned.stdout)
    choice = document["cheapest"]["choice"]
    assert (choice["nodes"], choice["days"]) != (1, 2.0)
    plan = tmp_path / "plan.json"
    plan.write_text(planned.stdout)
    advice = f"plan again with --nodes {choice['nodes']} --days {choice['days']:.6g}"
    for target in ("yaml", "megatron"):
        result = runner.invoke(app, ["export", str(plan), "--to", target])
        assert result.exit_code == 0, result.output
        header = [line for line in result.stdout.splitlines() if line.startswith("# WARNING")]
        assert any("not the cheapest budget reaching the target loss 1.8" in line
                   and advice in line for line in header), result.stdout[:2000]
        assert "warning: this is the planned envelope's pick" in result.stderr
    plain = runner.invoke(app, ["export", str(plan_json), "--to", "yaml"])
    assert "cheapest budget" not in plain.output


def test_uneven_split_of_another_stack_is_written_for_megatron_core(tmp_path):
    """A torchtitan job's uneven split (its stack trait extra_first: 61 blocks on pp 4 as
    16, 15, 15, 15, by hand 61 = 4·15 + 1) is stated to Megatron-Core instead of flagged:
    as the first rank's size where the middle ranks are even (Megatron-LM
    --decoder-first-pipeline-num-layers, TransformerConfig num_layers_in_first_pipeline_
    stage for NeMo), else as a layout (62 blocks: 16, 16, 15, 15; 61 on pp 4 x vpp 2:
    chunks 8, 8, 8, 8, 8, 7, 7, 7), the embedding in the first chunk and the loss in the
    last. A job that states no split (uneven_stages unstated) stays flagged."""
    def spec(layers: int, *overrides: str) -> ExportSpec:
        return load_export_spec(JOB, [f"model.layers={layers}", "parallelism.pp=4",
                                      "parallelism.dp=128", "parallelism.vpp=1",
                                      "performance.uneven_stages=true",
                                      "performance.stack=torchtitan", "optimizer.kind=adamw",
                                      "parallelism.sharding=fsdp", *overrides], None)

    def uneven_notes(result) -> list[str]:
        return [note for note in result.unsupported if "pipeline" in note]

    first = export(spec(61), "megatron")
    a = parse_megatron(first.text)
    assert a.decoder_first_pipeline_num_layers == 16
    assert a.decoder_last_pipeline_num_layers is None
    assert a.pipeline_model_parallel_layout is None and uneven_notes(first) == []
    model = yaml.safe_load(export(spec(61), "nemo").text)["model"]
    assert (model["num_layers_in_first_pipeline_stage"],
            model["num_layers_in_last_pipeline_stage"],
            model["pipeline_model_parallel_layout"]) == (16, None, None)

    layout = export(spec(62), "megatron")
    assert parse_megatron(layout.text).pipeline_model_parallel_layout == (
        "Et*16|t*16|t*15|t*15L")
    assert parse_megatron(layout.text).decoder_first_pipeline_num_layers is None
    assert uneven_notes(layout) == []
    interleaved = parse_megatron(export(spec(61, "parallelism.vpp=2"), "megatron").text)
    assert interleaved.pipeline_model_parallel_layout == "Et*8|(t*8|)*4t*7|t*7|t*7L"
    assert interleaved.num_virtual_stages_per_pipeline_rank is None  # the layout sets it

    unstated = export(spec(61, "performance.uneven_stages=unstated"), "megatron")
    assert parse_megatron(unstated.text).decoder_first_pipeline_num_layers is None
    assert any(note.startswith("uneven pipeline stages (61 layers on pp·vpp = 4): the job "
                               "does not state the split") for note in unstated.unsupported)


def test_uneven_split_for_a_release_before_the_layout_flag():
    """--pipeline-model-parallel-layout came with Megatron-Core core_v0.13.0 (Megatron-LM
    77732c3628) and first ships in a known NeMo release at 25.09 (Megatron Core 0.14.0),
    --decoder-first/last-pipeline-num-layers with core_v0.9.0 (NeMo 24.09). A Megatron-Core
    job naming 25.02 gets its remainder-last split (61 on pp 4: 16, 16, 16, 13) as the last
    rank's 13 instead of the layout it is costed as; a split only the layout gives (62 by
    torchtitan) is written and its release said."""
    base = ["model.layers=61", "parallelism.pp=4", "parallelism.dp=128", "parallelism.vpp=1",
            "performance.uneven_stages=true", "optimizer.kind=adamw",
            "performance.stack_version=25.02"]
    megatron = export(load_export_spec(JOB, [*base, "performance.stack=megatron-core"],
                                       None), "megatron")
    a = parse_megatron(megatron.text)
    assert (a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers,
            a.pipeline_model_parallel_layout) == (None, 13, None)
    current = export(load_export_spec(JOB, [*base[:-1], "performance.stack=megatron-core"],
                                      None), "megatron")
    assert parse_megatron(current.text).pipeline_model_parallel_layout == "Et*16|t*16|t*16|t*13L"
    titan = export(load_export_spec(JOB, [*base, "model.layers=62", "performance.stack="
                                          "torchtitan", "parallelism.sharding=fsdp"], None),
                   "megatron")
    assert parse_megatron(titan.text).pipeline_model_parallel_layout == "Et*16|t*16|t*15|t*15L"
    assert any("stack_version 25.02 predates NeMo 25.09" in note for note in titan.unsupported)


@pytest.mark.parametrize("target", ["megatron", "nemo", "torchtitan", "maxtext"])
def test_the_header_names_a_dispatcher_only_for_a_model_with_moe_layers(target, tmp_path):
    """The dispatcher moves tokens between MoE layers' experts: a dense job's header (a
    trial's Qwen3-8B) names none, an MoE job's names the costed one."""
    dense = tmp_path / "dense.yaml"
    dense.write_text(yaml.safe_dump({
        "model": {"layers": 4, "d_model": 1024, "heads": 8, "kv_heads": 8, "head_dim": 128,
                  "ffn": 4096, "vocab": 32000},
        "parallelism": {"tp": 1, "pp": 1, "dp": 8, "sharding": "fsdp"},
        "batch": {"global_seqs": 64, "seq_len": 4096},
        "hardware": {"system": "DGX-H100", "nodes": 1}}))

    def batch_line(path: Path) -> str:
        text = export(load_export_spec(path, [], None), target).text
        return next(line for line in text.splitlines() if "micro-batch" in line)

    assert "dispatcher" not in batch_line(dense)
    moe = load_export_spec(JOB, [], None)
    assert moe.geometry.moe is not None
    assert f"dispatcher {moe.dispatcher}" in batch_line(JOB)
