"""NeMo 2 / Megatron-Bridge recipe overrides (a YAML file for ``--config-file``).

Megatron-Bridge merges such a file over a recipe's ``ConfigContainer`` with OmegaConf
(``examples/**/conf/*_override_example.yaml``): sections ``model`` (the Megatron-Core
``TransformerConfig``/``GPTModelProvider`` field names), ``train``
(``global_batch_size``, ``micro_batch_size``), ``dataset`` (``seq_length``), ``ddp``
(``use_distributed_optimizer``, ``data_parallel_sharding_strategy``,
``use_megatron_fsdp``) and ``mixed_precision`` (a registered recipe name such as
``bf16_mixed``, or the recipe's fields in full where the job differs from them;
``src/megatron/bridge/training/mixed_precision.py``). Checked at
NVIDIA-NeMo/Megatron-Bridge commit 067f987 (2026-08-22).
"""

from __future__ import annotations

from typing import Any

import yaml

from mosaic.arch.geometry import AttentionKind, NormKind
from mosaic.export.megatron import (
    DELAYED_SCALING_HISTORY,
    FUSED_GROUPED_MLP_ENV,
    LAYER_GRAPH_DROPLESS_NOTE,
    MAMBA_CONV_BIAS_NOTE,
    MEGATRON_CORE_HANDLED,
    QWEN3_NEXT_RECIPE_NOTE,
    attention_backend,
    dualpipe_note,
    kv_head_replication_note,
)
from mosaic.export.spec import (
    WINDOW_CP_NOTE,
    ExportSpec,
    MegatronStageSplit,
    StageSplitSpelling,
    lm_head_bias_notes,
    megatron_bias_notes,
    megatron_stage_split,
    projection_qk_norm_notes,
    unexpressed,
)
from mosaic.export.targets import ExportResult, header_lines
from mosaic.perf.workload import DEFAULT_RECOMPUTE_MODULES
from mosaic.stacks.registry import parse_release

MIXED_PRECISION = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "fp32": None}
# FP8 recipe -> registered recipe: mixed_precision.py @ 067f987
# bf16_with_fp8_delayed_scaling_mixed (fp8_recipe 'delayed'), bf16_with_fp8_current_scaling_
# mixed ('tensorwise'; first and last block in bf16), bf16_with_fp8_subchannel_scaling_mixed
# ('blockwise', 128x128 / 1x128 blocks) and bf16_with_mxfp8_mixed ('mxfp8').
FP8_MIXED_PRECISION = {"delayed": "bf16_with_fp8_delayed_scaling_mixed",
                       "current": "bf16_with_fp8_current_scaling_mixed",
                       "blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
                       "mxfp8": "bf16_with_mxfp8_mixed"}


MIXED_PRECISION_TARGET = "megatron.bridge.training.mixed_precision.MixedPrecisionConfig"


# An uneven split's TransformerConfig fields (megatron/core/transformer/transformer_config.py
# @ d98e8a64dd), as Megatron-Bridge's recipes set them
STAGE_SPLIT_FIELDS = StageSplitSpelling(first="num_layers_in_first_pipeline_stage",
                                        last="num_layers_in_last_pipeline_stage",
                                        layout="pipeline_model_parallel_layout")


def pipeline_split_fields(spec: ExportSpec, unsupported: list[str]) -> dict[str, Any]:
    """TransformerConfig's pipeline-split fields, every one stated: the file is merged over a
    recipe, and a recipe's own split would stay (Megatron-Bridge recipes/qwen/h100/
    qwen3_moe.py l. 261 @ 067f987 sets account_for_*_in_pipeline_split, recipes/glm/gb200/
    glm5.py l. 54 num_layers_in_first_pipeline_stage, recipes/deepseek/h100/deepseek_v3.py
    a layout): another split than mosaic costed, or, beside the file's layout, a ValueError
    ("pipeline_model_parallel_layout cannot be set with other pipeline layout arguments",
    megatron/core/transformer/transformer_config.py l. 2242-2259 @ d98e8a64dd). An uneven
    split is the costed one (:func:`~mosaic.export.spec.megatron_stage_split`); what it
    cannot state goes to ``unsupported``."""
    split = megatron_stage_split(spec, STAGE_SPLIT_FIELDS)
    if split is None:
        split = MegatronStageSplit(layout=spec.pipeline_layout)
    unsupported.extend(split.notes)
    return {"account_for_embedding_in_pipeline_split": spec.vocab_in_pipeline_split,
            "account_for_loss_in_pipeline_split": spec.vocab_in_pipeline_split,
            STAGE_SPLIT_FIELDS.first: split.first_layers,
            STAGE_SPLIT_FIELDS.last: split.last_layers,
            STAGE_SPLIT_FIELDS.layout: split.layout}


def recipe_resets(spec: ExportSpec) -> dict[str, Any]:
    """TransformerConfig fields at what mosaic costed where the job leaves them off (the
    file writes them only when set otherwise), so that a recipe's own values do not stay
    under the merge: Bridge's Qwen3-MoE recipe captures CUDA graphs (recipes/qwen/h100/
    qwen3_moe.py l. 213 @ 067f987: cuda_graph_impl transformer_engine, which Megatron-Core
    refuses with full recompute), Nemotron 3 Super drops tokens (recipes/nemotronh/h100/
    nemotron_3_super.py l. 203: moe_expert_capacity_factor 1.10), DeepSeek-V3 trains an MTP
    module (recipes/deepseek/h100/deepseek_v3.py l. 137), some recipes offload activations
    (cpu_offloading); a selective recompute without modules is Megatron's default,
    core_attn (transformer_config.py recompute_modules @ d98e8a64dd), not the recipe's."""
    g = spec.geometry
    resets: dict[str, Any] = {"cuda_graph_impl": "none", "cpu_offloading": False,
                              "cpu_offloading_num_layers": 0}
    if spec.checkpointing == "selective":
        resets["recompute_modules"] = list(DEFAULT_RECOMPUTE_MODULES)
    if not g.is_hybrid:  # (a hybrid's MTP module is the recipe's, QWEN3_NEXT_RECIPE_NOTE)
        resets["mtp_num_layers"] = None
    if g.moe is not None:
        resets |= {"moe_expert_capacity_factor": None,
                   "moe_pad_expert_input_to_capacity": False}
    return resets


def torch_dtype(name: str) -> dict[str, Any]:
    """A torch dtype in a Bridge YAML: a ``_target_`` resolved, not called (``_call_: false``,
    Megatron-LM megatron/training/config/instantiate_utils.py @ d98e8a64dd)."""
    return {"_target_": f"torch.{name}", "_call_": False}


# MixedPrecisionConfig's fields at their defaults (mixed_precision.py @ 067f987): the block
# states every one, so a recipe holding its own config object (DeepSeek-V4's
# bf16_with_mxfp8_mixed()), which Bridge merges key by key, keeps none of its values.
MIXED_PRECISION_DEFAULTS: dict[str, Any] = {
    "fp32": False, "fp16": False, "bf16": False, "params_dtype": None, "pipeline_dtype": None,
    "autocast_dtype": None, "autocast_enabled": False, "grad_reduce_in_fp32": True,
    "fp8": None, "fp8_recipe": "tensorwise", "first_last_layers_bf16": False,
    "fp8_margin": 0, "fp8_amax_history_len": 1, "fp8_amax_compute_algo": "most_recent",
    "fp8_wgrad": True, "fp8_dot_product_attention": False,
    "fp8_multi_head_attention": False, "fp8_param": None, "fp8_param_gather": False,
    "fp4": None, "fp4_recipe": "nvfp4", "fp4_param": None, "fp4_param_gather": False,
    "loss_scale": None, "initial_loss_scale": 4294967296, "min_loss_scale": 1.0,
    "loss_scale_window": 1000, "hysteresis": 2, "num_layers_at_start_in_bf16": 0,
    "num_layers_at_end_in_bf16": 0, "reuse_grad_buf_for_mxfp8_param_ag": False}
# The fields each registered recipe sets beyond those defaults (mixed_precision.py @
# 067f987: bf16_mixed, fp16_mixed and the bf16 FP8/NVFP4 recipes built on bf16_mixed).
_BF16_MIXED = {"bf16": True, "params_dtype": torch_dtype("bfloat16"),
               "pipeline_dtype": torch_dtype("bfloat16"), "autocast_enabled": False,
               "grad_reduce_in_fp32": True}
RECIPE_FIELDS: dict[str, dict[str, Any]] = {
    "bf16_mixed": _BF16_MIXED,
    "fp16_mixed": {"fp16": True, "params_dtype": torch_dtype("float16"),
                   "pipeline_dtype": torch_dtype("float16"), "autocast_enabled": False,
                   "grad_reduce_in_fp32": False},
    "bf16_with_fp8_delayed_scaling_mixed": _BF16_MIXED | {
        "fp8": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0, **DELAYED_SCALING_HISTORY,
        "fp8_param_gather": True},
    "bf16_with_fp8_current_scaling_mixed": _BF16_MIXED | {
        "fp8": "hybrid", "fp8_recipe": "tensorwise", "first_last_layers_bf16": True,
        "num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 1,
        "fp8_param_gather": True},
    "bf16_with_fp8_subchannel_scaling_mixed": _BF16_MIXED | {
        "fp8": "hybrid", "fp8_recipe": "blockwise", "fp8_param_gather": False},
    "bf16_with_mxfp8_mixed": _BF16_MIXED | {
        "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
        "reuse_grad_buf_for_mxfp8_param_ag": True},
    "bf16_with_nvfp4_mixed": _BF16_MIXED | {
        "fp8": None, "fp4": "e2m1", "fp4_recipe": "nvfp4", "fp8_param_gather": False,
        "fp4_param_gather": True},
}


def mixed_precision(spec: ExportSpec) -> str | dict[str, Any] | None:
    """The registered mixed-precision recipe for the job's precision and FP8 recipe: its
    name where the name carries every setting mosaic costed, else every field of
    MixedPrecisionConfig, the recipe's with the job's own (a ``_target_`` block Bridge's
    override step instantiates, as its performance scripts set these fields on the
    recipe's object, perf_recipes/_common.py @ 067f987). A trial: the name alone put back
    fp32 gradient buffers, 143 GiB on a 139.8 GiB GPU."""
    if spec.precision == "fp4":
        name = "bf16_with_nvfp4_mixed"
    elif spec.precision == "fp8":
        name = FP8_MIXED_PRECISION[spec.fp8_recipe]
    else:
        name = MIXED_PRECISION.get(spec.precision, "bf16_mixed")
    if name is None:
        return None
    recipe = MIXED_PRECISION_DEFAULTS | RECIPE_FIELDS[name]
    job: dict[str, Any] = {"grad_reduce_in_fp32": spec.grad_reduce_in_fp32}
    if spec.precision == "fp4":
        job["fp4_param_gather"] = spec.fp4_param_gather
    if spec.precision == "fp8":
        job["fp8_param_gather"] = spec.fp8_param_gather
        job["fp8_dot_product_attention"] = spec.fp8_dot_product_attention
        if spec.fp8_recipe == "mxfp8":
            # Megatron-LM's DistributedDataParallelConfig asserts fp8_param_gather whenever
            # the gradient buffer is reused for the MXFP8 parameter all-gather (a review)
            job["reuse_grad_buf_for_mxfp8_param_ag"] = spec.fp8_param_gather
        if spec.fp8_recipe == "current":
            # mosaic costs every block in FP8, as the performance scripts run this recipe
            job |= {"first_last_layers_bf16": False, "num_layers_at_start_in_bf16": 0,
                    "num_layers_at_end_in_bf16": 0}
    differs = {key: value for key, value in job.items() if recipe[key] != value}
    if not differs:
        return name
    block = recipe | differs
    # fp8_param / fp4_param follow their gathers (MixedPrecisionConfig.__setattr__ keeps
    # them in sync): stated equal, whatever order the fields are set in
    block |= {"fp8_param": block["fp8_param_gather"], "fp4_param": block["fp4_param_gather"]}
    return {"_target_": MIXED_PRECISION_TARGET, **block}


# Megatron-Bridge names the layer pattern hybrid_layer_pattern from v0.4.0 (NeMo 26.04; the
# Nemotron recipes set it, models/hybrid/hybrid_provider.py), where hybrid_override_pattern
# is its deprecated alias and both set is an assertion (a trial merged an export over the
# Nemotron 3 Nano recipe @ 067f987); up to v0.3.0 (26.02) only hybrid_override_pattern exists
LAYER_PATTERN_SINCE = (26, 4)


def hybrid_pattern_fields(spec: ExportSpec) -> dict[str, Any]:
    """The pattern under the name the job's release reads (:data:`LAYER_PATTERN_SINCE`; a
    job naming no release: the current one), clearing the other spelling the recipe may
    set."""
    from mosaic.stacks.registry import parse_release

    release = parse_release(spec.stack_version)
    if release is not None and release < LAYER_PATTERN_SINCE:
        return {"hybrid_override_pattern": spec.geometry.hybrid_pattern}
    return {"hybrid_layer_pattern": spec.geometry.hybrid_pattern,
            "hybrid_override_pattern": None}


def hybrid_fields(spec: ExportSpec, unsupported: list[str]) -> dict[str, Any]:
    """A hybrid model's provider fields (Megatron-Bridge MambaModelProvider,
    src/megatron/bridge/models/mamba/mamba_provider.py; at 067f987 a subclass of
    models/hybrid/hybrid_provider.py's HybridModelProvider, which holds the fields and the
    vpp assert: hybrid_override_pattern, the only
    spelling at v0.3.0 (NeMo 26.02) and still accepted, deprecated, at v0.5.1 beside
    hybrid_layer_pattern; the Mamba mixer's dimensions, as its Nemotron-H and Nemotron 3
    recipes set them)."""
    g = spec.geometry
    if g.gdn is not None and g.mamba is None:
        gpt = gated_delta_net_fields(spec)
        if gpt is not None:
            unsupported.extend(gated_delta_net_notes(spec, gpt["num_layers"]))
            return gpt
        unsupported.append("gated DeltaNet ('G') layers outside Qwen3-Next's alternation of "
                           "mixer and FFN layers: Megatron-Bridge builds gated DeltaNet only "
                           "in GPT models (its Qwen3-Next provider); use the Megatron export")
    # the whole pattern: Megatron-Core before core_v0.17 (Megatron-Bridge v0.3, NeMo 26.02)
    # refuses '|' stage separators and splits the pattern into equal stages itself; later
    # releases accept the uncut form (deprecated) as well
    fields: dict[str, Any] = {"is_hybrid_model": True, **hybrid_pattern_fields(spec)}
    if spec.vpp > 1:
        unsupported.append(f"vpp={spec.vpp}: MambaModelProvider.provide asserts "
                           "virtual_pipeline_model_parallel_size is None (Megatron-Bridge "
                           "v0.3.0..v0.5.1): run vpp 1, or use the Megatron export, whose "
                           "'|' segments set the virtual stages")
    if g.mamba is not None and not g.mamba.conv_bias:
        unsupported.append(MAMBA_CONV_BIAS_NOTE)
    if g.mamba is not None:
        fields |= {"mamba_num_heads": g.mamba.heads, "mamba_head_dim": g.mamba.head_dim,
                   "mamba_state_dim": g.mamba.state_dim, "mamba_num_groups": g.mamba.groups}
    unsupported.append("a hybrid model needs Megatron-Bridge's MambaModelProvider (its "
                       "Nemotron-H / Nemotron 3 recipes), not the GPT provider; the FFN "
                       "activation (activation_func: squared_relu for Nemotron-H) is the "
                       f"recipe's ({ACTIVATION_BY_NAME})")
    return fields


def gated_delta_net_fields(spec: ExportSpec) -> dict[str, Any] | None:
    """A Qwen3-Next-shaped model (:meth:`ExportSpec.mixer_ffn_pairs`) as Megatron-Bridge
    builds it: a GPT model whose blocks' attention is gated DeltaNet where
    linear_attention_freq says 1 (Qwen3NextBridge.provider_bridge: experimental_attention_
    variant 'gated_delta_net', linear_* dimensions; moe_layer_freq 1 = MoE FFN), None for
    any other pattern."""
    g, pairs = spec.geometry, spec.mixer_ffn_pairs()
    if pairs is None:
        return None
    pattern = g.hybrid_pattern
    assert pattern is not None and g.gdn is not None
    gdn = g.gdn
    # Megatron-Bridge v0.2.0 (NeMo 25.11) names the field linear_attention_type
    release = parse_release(spec.stack_version)
    variant = ("linear_attention_type" if release is not None and release <= (25, 11)
               else "experimental_attention_variant")
    fields: dict[str, Any] = {
        "num_layers": len(pairs), variant: "gated_delta_net",
        "linear_attention_freq": [int(p[0] == "G") for p in pairs],
        "linear_num_key_heads": gdn.key_heads, "linear_num_value_heads": gdn.value_heads,
        "linear_key_head_dim": gdn.key_head_dim, "linear_value_head_dim": gdn.value_head_dim,
        "linear_conv_kernel_dim": gdn.conv_kernel}
    if g.moe is not None and "-" in pattern:
        fields["moe_layer_freq"] = [int(p[1] == "E") for p in pairs]
    return fields


def gated_delta_net_notes(spec: ExportSpec, blocks: int) -> list[str]:
    """What the GPT form of a gated DeltaNet model needs beyond its fields: the Qwen3-Next
    recipe's layer spec (a generic GPT recipe's default spec ignores the gated DeltaNet
    fields: Megatron-Bridge gpt_provider.py, qwen3_next_bridge.py @ v0.5.1), the older
    field name, and a pipeline cut at block boundaries."""
    notes = ["merge over Megatron-Bridge's Qwen3-Next recipe (qwen3_next_80b_a3b_pretrain_"
             "config): its transformer_layer_spec builds the gated DeltaNet layers, a generic GPT "
             "recipe's does not (Megatron-Bridge v0.2.0, NeMo 25.11, names the variant field "
             "linear_attention_type: written when the job states that release)",
             *([] if spec.geometry.mtp_layers else [QWEN3_NEXT_RECIPE_NOTE])]
    stages = spec.pp * spec.vpp
    if stages > 1 and blocks % stages:
        notes.append(f"pp·vpp = {stages} does not divide the GPT form's {blocks} blocks (a "
                     "gated DeltaNet or attention mixer with its FFN): Megatron-Core needs "
                     "an even split or a pipeline layout")
    return notes


def overrides(spec: ExportSpec) -> tuple[dict[str, Any], list[str]]:
    """The override mapping and what it cannot express."""
    g = spec.geometry
    unsupported: list[str] = spec.routing_notes() + spec.megatron_core_refusals()
    model: dict[str, Any] = {
        "num_layers": g.layers,
        "hidden_size": g.d_model,
        "ffn_hidden_size": g.ffn,
        "num_attention_heads": g.heads,
        "seq_length": spec.seq_len,
        "vocab_size": g.vocab,
        "normalization": "RMSNorm" if g.norm is NormKind.RMSNORM else "LayerNorm",
        "gated_linear_unit": g.glu,
        "share_embeddings_and_output_weights": g.tied_embeddings,
        "add_bias_linear": g.linear_biases,
        "add_qkv_bias": g.qkv_bias,
        # with MLA: the q/kv latent norms (as the Megatron export's --qk-layernorm)
        "qk_layernorm": g.qk_norm or g.attention is AttentionKind.MLA,
        # the rotary base and share and (1 + w) gains where stated (TransformerConfig /
        # GPTProvider rotary_base, rotary_percent, layernorm_zero_centered_gamma)
        **({"rotary_base": g.rope_base} if g.rope_base is not None else {}),
        **({"rotary_percent": g.rope_fraction} if g.rope_fraction != 1.0 else {}),
        **({"layernorm_zero_centered_gamma": True} if g.zero_centered_norm else {}),
    }
    if g.attention is AttentionKind.MLA:
        assert g.mla is not None
        model |= {"multi_latent_attention": True, "q_lora_rank": g.mla.q_lora_rank,
                  "kv_lora_rank": g.mla.kv_lora_rank, "qk_head_dim": g.mla.qk_nope_head_dim,
                  "qk_pos_emb_head_dim": g.mla.qk_rope_head_dim,
                  "v_head_dim": g.mla.v_head_dim}
    else:
        model |= {"num_query_groups": g.kv_heads, "kv_channels": g.head_dim}
        unsupported += kv_head_replication_note(spec)
    if g.gated_attention:
        unsupported.append("gated attention (per-head output gate)")
    # Megatron-Bridge's OlMoEModelProvider swaps in its OLMoESelfAttention for these
    # (src/megatron/bridge/models/olmoe/olmoe_provider.py)
    unsupported += projection_qk_norm_notes(
        g, "qk_layernorm's per-head norms", "; Megatron-Bridge's OlMoEModelProvider layer "
        "spec builds projection-wide ones")
    unsupported += (lm_head_bias_notes(g, "Megatron-Bridge (Megatron-Core's GPTModel)")
                    + megatron_bias_notes(g))
    if g.attention_output_gate:  # Megatron-Bridge Qwen3NextBridge: attention_output_gate
        model["attention_output_gate"] = True
    if g.sliding_window is not None:  # TransformerConfig fields, as Megatron's flags set them
        model["window_size"] = [g.sliding_window - 1, 0]
        if g.full_attention_every is not None:
            model["window_attn_skip_freq"] = g.full_attention_every
        if spec.cp > 1:  # as Bridge's Mistral recipe sets it
            model["cp_comm_type"] = "a2a"
            unsupported.append(WINDOW_CP_NOTE)
    if g.attention_sinks:  # TransformerConfig fields, as the Megatron export's flags
        model["softmax_type"] = "learnable"
        if g.glu:
            model |= {"glu_linear_offset": 1.0, "activation_func_clamp_value": 7.0}
            unsupported.append(
                "attention sinks with a gated FFN read as GPT-OSS: glu_linear_offset 1 and "
                "activation_func_clamp_value 7 written; its quick_gelu gate (activation_func) "
                f"comes from the gpt-oss provider ({ACTIVATION_BY_NAME}); for a plain SwiGLU "
                "set glu_linear_offset 0, no clamp, and activation_func silu")
    if g.mamba is None:
        # GPTModelProvider defaults to learned absolute positions (Megatron-Bridge
        # gpt_provider.py @ 067f987, a trial); a Mamba hybrid's provider keeps 'none'
        model["position_embedding_type"] = "rope"
    # GPTModelProvider keeps TransformerConfig's activation_func F.gelu: even SwiGLU needs
    # the recipe's provider (a trial found a plain GPT export training GeGLU)
    if not g.is_hybrid and not g.attention_sinks and g.activation_name != "gelu":
        named = BRIDGE_ACTIVATION_NAMES.get(g.activation_name)
        release = parse_release(spec.stack_version)
        if named is not None and (release is None or release >= ACTIVATION_NAME_SINCE):
            # a job naming no release: the current one, as the layer pattern (a trial found
            # the export saying it cannot write what its own note says the release reads)
            model["activation_func"] = named
        else:
            unsupported.append(f"the FFN activation {g.activation_name}: TransformerConfig "
                               "defaults activation_func to gelu (with gated_linear_unit: "
                               "GeGLU); merge over a recipe whose provider runs "
                               f"{g.activation_name} ({ACTIVATION_BY_NAME})")
    if g.is_hybrid:
        model |= hybrid_fields(spec, unsupported)
    if g.moe:
        m = g.moe
        dispatcher = spec.megatron_dispatcher(unsupported)
        model |= {"num_moe_experts": m.experts, "moe_router_topk": m.top_k,
                  "moe_ffn_hidden_size": m.expert_ffn,
                  **({} if g.is_hybrid else {"moe_layer_freq": spec.moe_layer_pattern()}),
                  "moe_grouped_gemm": True,
                  "moe_shared_expert_intermediate_size":
                      m.shared_total_width if m.shared_experts else None,
                  # TransformerConfig.moe_shared_expert_gate (Qwen3NextBridge sets it)
                  **({"moe_shared_expert_gate": True} if m.shared_expert_gate else {}),
                  "moe_token_dispatcher_type":
                      "alltoall" if dispatcher == "alltoall" else "flex"}
        if dispatcher != "alltoall":
            model["moe_flex_dispatcher_backend"] = dispatcher
        if (note := spec.stated_node_limit_note()) is not None:
            unsupported.append(note)
        elif spec.max_nodes_per_token is not None:  # node-limited routing, as for Megatron
            groups, reason = spec.node_limited_groups()
            if reason is None:
                model |= {"moe_router_num_groups": groups,
                          "moe_router_group_topk": spec.max_nodes_per_token}
            else:
                unsupported.append(f"max_nodes_per_token {spec.max_nodes_per_token} "
                                   f"(node-limited routing): {reason}; set "
                                   "moe_router_num_groups and moe_router_group_topk by hand")
        # dispatch_fp8: not written (ExportSpec.megatron_core_refusals says why)
        if spec.capacity_factor is not None:  # None (absent) = dropless
            model["moe_expert_capacity_factor"] = spec.capacity_factor
            if spec.pad_to_capacity:
                model["moe_pad_expert_input_to_capacity"] = True
    # dropout off; the router balancing stays the recipe's (its model's own), named
    model |= spec.megatron_core_fields(balancing=False)
    if g.moe is not None:
        written = (" (the model's stated router fields are written)"
                   if g.moe.router is not None else "")
        unsupported.append(f"router balancing loss: the recipe's own is kept (mosaic costed "
                           f"{spec.router_balancing} balancing){written}; set "
                           "moe_router_load_balancing_type / moe_aux_loss_coeff to change it")
    if g.mtp_layers:
        model["mtp_num_layers"] = g.mtp_layers
    if g.mtp_pattern is not None:
        # HybridModelProvider appends it to the main pattern once per depth
        # (src/megatron/bridge/models/hybrid/hybrid_provider.py @ 067f987df; the Nemotron 3.5
        # Lightning recipe sets it, recipes/nemotronh/h100/nemotron_3_nano.py)
        model["mtp_hybrid_override_pattern"] = g.mtp_pattern
    if spec.uneven_stages and spec.geometry.is_hybrid:  # (pipeline_split_fields: the rest)
        unsupported.append(
            f"uneven pipeline stages ({model['num_layers']} layers on pp·vpp = "
            f"{spec.pp * spec.vpp}): "
            + ("Megatron-Core splits a hybrid pattern without '|' into equal stages; use the "
               "Megatron export, whose '|' segments carry the split"
               if "is_hybrid_model" in model else
               "set num_layers_in_first/last_pipeline_stage by hand"))
    model |= {
        "tensor_model_parallel_size": spec.tp,
        "pipeline_model_parallel_size": spec.pp,
        "virtual_pipeline_model_parallel_size": spec.vpp if spec.vpp > 1 else None,
        "context_parallel_size": spec.cp,
        "expert_model_parallel_size": spec.ep,
        "expert_tensor_parallel_size": spec.etp,
        "sequence_parallel": bool(spec.sequence_parallel and spec.tp > 1),
        "recompute_granularity": None if spec.checkpointing == "none" else spec.checkpointing,
    }
    model |= recompute_fields(spec, unsupported)
    model |= pipeline_split_fields(spec, unsupported)
    if spec.pipeline_schedule == "dualpipe" and spec.pp > 1:
        unsupported.append(dualpipe_note(spec, "Megatron-Bridge"))
    if spec.offloaded_activation_layers:  # ModelParallelConfig cpu_offloading(_num_layers)
        model |= {"cpu_offloading": True,
                  "cpu_offloading_num_layers": spec.offloaded_activation_layers}
    if spec.cross_entropy in ("fused", "te"):  # ModelParallelConfig cross_entropy_* fields
        model |= {"cross_entropy_loss_fusion": True,
                  "cross_entropy_fusion_impl": "native" if spec.cross_entropy == "fused"
                  else "te"}
    elif spec.cross_entropy is not None:
        unsupported.append(f"cross_entropy {spec.cross_entropy}: Megatron-Core offers its "
                           "unfused loss or the fused native / te ones")
    backend = attention_backend(spec, unsupported, "attention_backend")
    if backend is not None:
        model["attention_backend"] = backend
    if spec.full_iteration_cuda_graph:
        # utils/cuda_graph.py is_full_iteration_cuda_graph; config.py asserts the NaN check
        # (rerun_state_machine.check_for_nan_in_loss) is off with it
        model["cuda_graph_impl"] = "full_iteration"
        if g.moe:
            unsupported.append("full-iteration CUDA graph of an MoE model: also set "
                               + ("" if spec.dispatcher == "hybridep" else
                                  "moe_token_dispatcher_type flex with "
                                  "moe_flex_dispatcher_backend hybridep, ")
                               + "moe_expert_rank_capacity_factor and paged stash by hand")
    if spec.fused_grouped_mlp:  # the 26.06 recipes' cutedsl_fused_grouped_mlp settings
        model["use_transformer_engine_op_fuser"] = True
        model["moe_mlp_glu_interleave_size"] = 32
        unsupported.append(FUSED_GROUPED_MLP_ENV)
    if spec.layer_cuda_graphs:  # the per-layer CudaGraphManager over the whole layer
        model["cuda_graph_impl"] = "local"
        if g.moe and not (spec.routing == "token_drop" and spec.pad_to_capacity):
            unsupported.append(LAYER_GRAPH_DROPLESS_NOTE)
    if spec.full_iteration_cuda_graph or spec.layer_cuda_graphs:
        # GPTModelProvider asserts use_te_rng_tracker with any cuda_graph_impl
        # (src/megatron/bridge/models/gpt_provider.py @ 067f987); the 25.09 scripts set both
        # trackers with their graphs (scripts/performance/utils/helpers.py @ v0.1.0rc4)
        model["use_te_rng_tracker"] = True
    model |= {name: value for name, value in recipe_resets(spec).items() if name not in model}
    comm_overlap = comm_overlap_block(spec)
    # DistributedDataParallelConfig; mosaic's default is overlapped (the same values as the
    # comm_overlap block, which Bridge copies onto this one)
    ddp: dict[str, Any] = {"use_distributed_optimizer": spec.sharding != "none",
                           **{key: comm_overlap[key]
                              for key in ("overlap_grad_reduce", "overlap_param_gather")}}
    # stated either way, with the HSDP replica count (1 without HSDP): Bridge runs
    # Megatron-FSDP when dist or ddp says so (training/config.py l. 1484 @ 067f987), and a
    # recipe's own would stay under the merge (recipes/nemotronh/gb200/nemotron_3_nano.py
    # l. 193-196 sets both)
    ddp |= {"use_megatron_fsdp": spec.megatron_fsdp,
            "num_distributed_optimizer_instances":
                spec.hsdp_replicas if spec.megatron_fsdp and spec.sharding == "hsdp" else 1}
    if spec.megatron_fsdp:
        ddp["data_parallel_sharding_strategy"] = ("optim_grads" if spec.sharding == "zero2"
                                                  else "optim_grads_params")
    document = {
        "model": model,
        "train": {"global_batch_size": spec.global_seqs, "micro_batch_size": spec.micro_seqs}
        | ({} if spec.train_steps is None else {"train_iters": spec.train_steps}),
        "dataset": {"seq_length": spec.seq_len},
        "ddp": ddp,
        "dist": {"use_megatron_fsdp": spec.megatron_fsdp},
        "optimizer": {"use_distributed_optimizer": spec.sharding != "none"},
        "mixed_precision": mixed_precision(spec),
    }
    if spec.megatron_fsdp:
        # ConfigContainer validation asserts the fsdp_dtensor format with Megatron-FSDP
        # whenever a checkpoint is saved or loaded (training/config.py @ 067f987)
        document["checkpoint"] = {"ckpt_format": "fsdp_dtensor"}
    if spec.full_iteration_cuda_graph:
        document["rerun_state_machine"] = {"check_for_nan_in_loss": False}
    if spec.full_iteration_cuda_graph or spec.layer_cuda_graphs:
        document["rng"] = {"te_rng_tracker": True}
    document["comm_overlap"] = comm_overlap
    if spec.optimizer == "muon":
        unsupported.append("Muon: pick a Megatron-Bridge optimizer config by hand")
    if spec.optimizer_dtype == "bf16_moments":
        # megatron.core.optimizer.OptimizerConfig use_precision_aware_optimizer and
        # exp_avg_dtype / exp_avg_sq_dtype (torch dtypes, not YAML scalars)
        unsupported.append("optimizer_dtype bf16_moments: set optimizer."
                           "use_precision_aware_optimizer true and exp_avg_dtype / "
                           "exp_avg_sq_dtype torch.bfloat16 in the recipe script (torch dtypes "
                           "do not merge from YAML)")
    elif spec.optimizer_dtype == "bf16":
        unsupported.append("optimizer_dtype bf16 (no fp32 master weights): Megatron-Core's "
                           "optimizer keeps fp32 or fp16 main parameters")
    if spec.fp8_glu_inputs:
        unsupported.append("fp8_glu_inputs (the routed experts' SwiGLU inputs saved in FP8, "
                           "arXiv:2412.19437 Sec. 3.3.3): no Megatron-Core field")
    handled = set(MEGATRON_CORE_HANDLED)
    if comm_overlap["tp_comm_overlap"]:
        handled.add("tp_comm_overlap")
    unsupported += unexpressed(spec, handled, "Megatron-Bridge")
    return document, unsupported


# activation_func is a Python callable; Megatron-Bridge names it in YAML from 0.4.0 (NeMo
# 26.04: training/utils/omegaconf_utils.py _SERIALIZABLE_CALLABLE_FIELDS, utils/
# activation_map.py ACTIVATION_FUNC_MAP; absent at v0.3.0), so the file leaves it to the
# recipe, which every release reads
ACTIVATION_BY_NAME = ("from Megatron-Bridge 0.4 / NeMo 26.04 on, model.activation_func can "
                      "also name it: silu, quick_gelu, squared_relu, gelu")
ACTIVATION_NAME_SINCE = (26, 4)
# mosaic's activation -> the ACTIVATION_FUNC_MAP name (utils/activation_map.py @ 067f987);
# gated_linear_unit, written beside it, makes silu SwiGLU and gelu GeGLU
BRIDGE_ACTIVATION_NAMES = {"swiglu": "silu", "geglu": "gelu", "squared_relu": "squared_relu",
                           "relu": "relu"}


COMM_OVERLAP_TARGET = "megatron.bridge.training.comm_overlap.CommOverlapConfig"


def comm_overlap_block(spec: ExportSpec) -> dict[str, Any]:
    """CommOverlapConfig (training/comm_overlap.py @ 067f987), which Bridge copies onto the
    model, DDP and optimizer configs: every overlap mosaic costed, true or false, stated, so
    the recipe's own value does not stay (a trial: a recipe's tp_comm_overlap True kept under
    a job without it) and its setup does not turn the DP overlaps back on (it sets
    overlap_grad_reduce and overlap_param_gather whenever dp > 1 unless this block states
    them; ddp.* alone is overwritten). ``_target_`` makes Bridge's override step instantiate
    the block (utils/omegaconf_utils.py _apply_overrides) where the recipe has none (its
    comm_overlap None: a plain dict failed validation)."""
    overlapped_dp = spec.dp_comm_overlap and spec.sharding != "none"
    block: dict[str, Any] = {
        "_target_": COMM_OVERLAP_TARGET,
        "tp_comm_overlap": bool(spec.tp_comm_overlap and spec.sequence_parallel
                                and spec.tp > 1),
        "overlap_grad_reduce": spec.dp_comm_overlap,
        "overlap_param_gather": overlapped_dp,
    }
    if spec.geometry.moe is not None:
        block |= {"overlap_moe_expert_parallel_comm": spec.megatron_ep_overlap,
                  "delay_wgrad_compute": spec.megatron_ep_overlap}
    return block


def recompute_fields(spec: ExportSpec, unsupported: list[str]) -> dict[str, Any]:
    """recompute_method / recompute_num_layers / recompute_modules, as Megatron's flags."""
    from mosaic.export.megatron import recompute_arguments

    fields: dict[str, Any] = {}
    for flag, value in recompute_arguments(spec, unsupported):
        name = flag.removeprefix("--").replace("-", "_")
        if name == "recompute_granularity":
            continue
        fields[name] = (value.split() if name == "recompute_modules" else
                        int(value) if name == "recompute_num_layers" else value)
    return fields


class _BlockModelDumper(yaml.SafeDumper):
    """Mappings one field per line, lists (e.g. moe_layer_freq) on one line."""


_BlockModelDumper.add_representer(
    list, lambda dumper, value: dumper.represent_sequence("tag:yaml.org,2002:seq", value,
                                                          flow_style=True))


def render(spec: ExportSpec) -> ExportResult:
    """A YAML override file (comments first)."""
    document, unsupported = overrides(spec)
    header = "".join(f"# {line}\n" for line in header_lines(spec, "Megatron-Bridge (NeMo)",
                                                              unsupported))
    # the recipe scripts that merge a --config-file over a recipe (e.g. Megatron-Bridge
    # examples/models/nemotron/nemotron_3/nano/pretrain_nemotron_3_nano.py @ 067f987);
    # scripts/training/run_recipe.py takes KEY=VALUE overrides instead
    header += ("# launch: a Megatron-Bridge pretrain script that merges --config-file FILE "
               "over the recipe of a model like this one (e.g. examples/models/nemotron/"
               "nemotron_3/nano/pretrain_nemotron_3_nano.py); scripts/training/run_recipe.py "
               "takes the same fields as KEY=VALUE overrides\n")
    # the model block one field per line (a list in it, moe_layer_freq, keeps it so for
    # transformers), the short sections on one line each
    model = yaml.dump({"model": document["model"]}, Dumper=_BlockModelDumper, sort_keys=False,
                      default_flow_style=False, width=100)
    rest = {name: value for name, value in document.items() if name != "model"}
    body = model + yaml.safe_dump(rest, sort_keys=False, default_flow_style=None, width=100)
    return ExportResult("nemo", header + body, ".yaml", unsupported)
