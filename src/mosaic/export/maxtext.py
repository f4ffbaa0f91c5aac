"""A MaxText config YAML (overrides of ``src/maxtext/configs/base.yml``).

Key names: AI-Hypercomputer/maxtext ``src/maxtext/configs/base.yml`` and
``src/maxtext/common/common_types.py`` (``DecoderBlockType``) at commit e591f30
(2026-08-22). MaxText shards the batch over every mesh axis except tensor/pipeline/context
(per_device_batch_size counts all devices), and names recompute by what it *saves*
(``remat_policy``).
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from mosaic.arch.geometry import AttentionKind, Geometry, NormKind
from mosaic.errors import MosaicInputError
from mosaic.export.spec import (
    AUX_LOSS_COEFF,
    BIAS_UPDATE_RATE,
    ExportSpec,
    lm_head_bias_notes,
    projection_qk_norm_notes,
    unexpressed,
    window_note,
)
from mosaic.export.targets import ExportResult, header_lines

# mosaic checkpointing -> MaxText remat_policy (base.yml lists them fastest to slowest).
# Selective is the policy the jax-xla stack's selective models (SelectiveRecompute.SAVE_DOTS):
# every weight-matmul output and the attention context, 'minimal_with_context' (formerly
# 'minimal_flash', src/maxtext/layers/decoders.py @ e591f30cb).
REMAT_POLICY = {"none": "minimal_with_context", "selective": "minimal_with_context",
                "full": "full"}

# FP8 recipe -> MaxText quantization: the Transformer Engine recipes it names
# (src/maxtext/configs/types.py QuantizationType te_fp8_delayedscaling / te_fp8_currentscaling
# / te_mxfp8; layers/quantizations.py TransformerEngineQuantization._get_recipe @ e591f30).
# It has no TE blockwise (Float8BlockScaling) recipe.
QUANTIZATION = {"delayed": "te_fp8_delayedscaling", "current": "te_fp8_currentscaling",
                "mxfp8": "te_mxfp8"}


# MaxText's mlp_activations: flax.linen function names, a gated FFN as [gate, "linear"]
# (src/maxtext/configs/base.yml and layers/linears.py _convert_to_activation_function)
MAXTEXT_ACTIVATIONS = {"swiglu": ["silu", "linear"], "geglu": ["gelu", "linear"],
                       "gelu": ["gelu"], "relu": ["relu"]}


def mlp_activations(activation: str, unsupported: list[str]) -> list[str]:
    """MaxText's names for the FFN activation (squared ReLU has none: ReLU written)."""
    if activation not in MAXTEXT_ACTIVATIONS:
        unsupported.append(f"FFN activation {activation}: no flax.linen function of that name "
                           "(relu written)")
        return ["relu"]
    return MAXTEXT_ACTIVATIONS[activation]


def qwen3_next_keys(spec: ExportSpec, cycle: int, unsupported: list[str]) -> dict[str, Any]:
    """MaxText's qwen3_next decoder (src/maxtext/configs/models/qwen3-next-80b-a3b.yml,
    base.yml gdn_*): one decoder layer per mixer-and-MoE block, full attention every
    ``cycle``-th, the gated DeltaNet dimensions (its base_mlp_dim, the expert width:
    :func:`_base_mlp_dim`)."""
    g, gdn = spec.geometry, spec.geometry.gdn
    assert gdn is not None and g.moe is not None
    return {"base_num_decoder_layers": g.layers // 2,
            "inhomogeneous_layer_cycle_interval": cycle,
            "gdn_conv_kernel_dim": gdn.conv_kernel, "gdn_key_head_dim": gdn.key_head_dim,
            "gdn_value_head_dim": gdn.value_head_dim, "gdn_num_key_heads": gdn.key_heads,
            "gdn_num_value_heads": gdn.value_heads, "gdn_chunk_size": gdn.chunk_size}


def router_keys(spec: ExportSpec, block: str, unsupported: list[str]) -> dict[str, Any]:
    """The router as costed and as the model states it (layers/moe.py ``get_topk`` @ e591f30).

    - Balancing: base.yml's ``load_balance_loss_weight`` is 0.0, so an ``aux_loss`` router
      gets :data:`AUX_LOSS_COEFF`. The expert bias of ``loss_free`` balancing would be the
      gate's ``routed_bias`` at ``routed_bias_update_rate``, but GateLogit keeps the scores
      before the bias (selection with it, weights without) only for a ``model_name``
      starting deepseek3 or deepseek4; otherwise the bias enters the weights. The export
      names no model config, so the auxiliary loss stands in, named.
    - Scores: the deepseek decoder applies ``routed_score_func``, renormalises sigmoid
      weights, scales by ``routed_scaling_factor`` (``deepseek_scale_weights``) and limits
      groups by ``n_routing_groups``/``topk_routing_group`` (``deepseek_routing``); the
      other decoders take the softmax of the top-k logits (renormalised, unscaled).
    """
    g = spec.geometry
    if g.moe is None:
        return {}
    router, keys = g.moe.router, {}
    deepseek = block == "deepseek"
    if spec.router_balancing == "loss_free":
        unsupported.append(
            "loss-free (expert-bias) balancing: MaxText selects with the bias and weights "
            "without it only under a model_name starting deepseek3/deepseek4 (layers/moe.py "
            "GateLogit), which this file does not set; written as load_balance_loss_weight "
            f"{AUX_LOSS_COEFF:g} (to train the bias: model_name: deepseek3-671b, "
            f"override_model_config: true, routed_bias: true, routed_bias_update_rate "
            f"{BIAS_UPDATE_RATE:g})")
    keys["load_balance_loss_weight"] = AUX_LOSS_COEFF
    if router is None:
        return keys
    if deepseek:
        keys |= {"routed_score_func": router.score,
                 "routed_scaling_factor": router.top_k_scaling}
        if router.limits_groups:  # moe.py expert_group_mask: a group's top-2 scores summed
            keys |= {"n_routing_groups": router.groups,
                     "topk_routing_group": router.top_groups}
            # read only by deepseek_routing, which GateLogit calls for a model_name starting
            # deepseek3/deepseek4 (layers/moe.py @ e591f30; a trial)
            unsupported.append(
                f"group-limited routing ({router.top_groups} of {router.groups} groups): "
                "MaxText limits groups only under a model_name starting deepseek3/deepseek4, "
                "which this file does not set; without it routing is a plain top-k (add "
                "model_name: deepseek3-671b with override_model_config: true)")
        if router.normalize_top_k != (router.score == "sigmoid"):
            unsupported.append(f"router weights {'' if router.normalize_top_k else 'not '}"
                               f"renormalised with {router.score} scores: MaxText's deepseek "
                               "decoder renormalises sigmoid weights only")
    elif ((router.score, router.normalize_top_k, router.top_k_scaling)
          != ("softmax", True, 1.0) or router.limits_groups):
        unsupported.append(f"router ({router.describe()}): MaxText's {block} decoder takes "
                           "the softmax of the top-k logits over all experts, renormalised "
                           "and unscaled")
    return keys


def gpt_oss_keys(g: Geometry, unsupported: list[str]) -> dict[str, Any]:
    """MaxText's gpt_oss decoder as its gpt-oss configs set it
    (src/maxtext/configs/models/gpt-oss-20b.yml @ e591f30): the window, alternating with
    full attention (models/gpt_oss.py GPT_OSS_ATTENTION_PATTERN: sliding, global), and the
    clamped sigmoid-gated FFN. Without the window the block attends through a window of 0."""
    keys: dict[str, Any] = {"inhomogeneous_layer_cycle_interval": 2,
                            "mlp_activations": ["sigmoid", "linear"],
                            "mlp_activations_limit": 7.0}
    if g.sliding_window is not None:
        keys["sliding_window_size"] = g.sliding_window
        if g.full_attention_every != 2:
            unsupported.append(window_note(g) + ": MaxText's gpt_oss decoder alternates "
                               "sliding and full attention (every 2nd layer full)")
    else:
        unsupported.append("no sliding window stated: MaxText's gpt_oss decoder slides "
                           "every other layer (sliding_window_size unset is a window of 0)")
    return keys


# Decoder blocks whose attention reads base.yml attention_bias as use_bias_in_projections,
# which biases the Q, K, V and output projections together (layers/attentions.py):
# models/gpt_oss.py l. 113 @ e591f30 (also olmo3 and qwen2, which mosaic does not write).
# llama2, mixtral, qwen3, qwen3_moe, qwen3_next and deepseek build their attention bias-free.
ATTENTION_BIAS_DECODERS = ("gpt_oss",)


def attention_bias(g: Geometry, block: str, unsupported: list[str]) -> bool:
    """base.yml ``attention_bias`` for ``block``; what it cannot build goes to
    ``unsupported`` (a trial's Qwen2-style model kept ``attention_bias: true`` in a llama2
    decoder, which never reads it)."""
    qkv = g.qkv_bias and g.attention is not AttentionKind.MLA
    parts = [part for part, has in (("the Q, K and V projections", qkv),
                                    ("the attention output", g.output_bias)) if has]
    if block not in ATTENTION_BIAS_DECODERS:
        if parts:
            unsupported.append(f"attention biases on {' and '.join(parts)}: MaxText's "
                               f"{block} decoder builds its attention without biases "
                               "(attention_bias is read by the gpt_oss, olmo3 and qwen2 "
                               "decoders only); the exported model lacks them")
        return False
    if len(parts) == 1:
        unsupported.append(f"attention_bias biases the Q, K, V and output projections "
                           f"together; this model biases only {parts[0]}: written true, the "
                           "exported model has a few more parameters than the costed one")
    return bool(parts)


# Decoder blocks whose rotary embedding reads base.yml partial_rotary_factor: the
# is_qwen3_hybrid branch of layers/attentions.py @ e591f30 (qwen3_next, qwen3_5); the
# other decoders' Attention is built without a partial_rotary_factor and rotates whole heads.
PARTIAL_ROTARY_DECODERS = ("qwen3_next",)


def rotary_share(g: Geometry, block: str, unsupported: list[str]) -> dict[str, float]:
    """``partial_rotary_factor`` where ``block`` reads it; elsewhere a partial share is
    said (a half-rotary model in a llama2 file would rotate every head dimension)."""
    if g.rope_fraction == 1.0:
        return {}
    if block in PARTIAL_ROTARY_DECODERS:
        return {"partial_rotary_factor": g.rope_fraction}
    unsupported.append(f"RoPE on {g.rope_fraction:g} of each head: MaxText's {block} decoder "
                       "rotates whole heads (partial_rotary_factor is read by its qwen3_next "
                       "decoder only); not written")
    return {}


def qk_norm(g: Geometry, block: str, unsupported: list[str]) -> bool:
    """base.yml ``use_qk_norm``: mosaic's blocks pass it to their attention except gpt_oss
    (qwen3.py AttentionWithNorm and Qwen3NextFullAttention read it, gpt_oss.py does not,
    @ e591f30); there a QK-normed model is said and the key written false."""
    if g.qk_norm and block == "gpt_oss":
        unsupported.append("QK-norm: MaxText's gpt_oss decoder builds its attention without "
                           "q/k norms (use_qk_norm is not read there); the exported model "
                           "lacks them")
        return False
    return g.qk_norm


def decoder_block(spec: ExportSpec, cycle: int | None) -> str:
    """The MaxText decoder block type closest to the geometry (``cycle``: its
    :meth:`~mosaic.export.spec.ExportSpec.full_attention_cycle`)."""
    g = spec.geometry
    if cycle is not None:
        return "qwen3_next"  # src/maxtext/configs/models/qwen3-next-80b-a3b.yml
    if g.attention is AttentionKind.MLA:
        return "deepseek"
    if g.attention_sinks:
        return "gpt_oss"
    if g.qk_norm:
        return "qwen3_moe" if g.moe else "qwen3"
    return "mixtral" if g.moe else "llama2"


def config(spec: ExportSpec) -> tuple[dict[str, Any], list[str]]:
    """The override mapping and what MaxText cannot express."""
    g = spec.geometry
    unsupported = spec.routing_notes()
    quantization = ""
    if spec.precision == "fp4":
        # QuantizationType te_nvfp4: Transformer Engine's NVFP4BlockScaling recipe
        # (src/maxtext/configs/types.py, layers/quantizations.py @ e591f30)
        quantization = "te_nvfp4"
        if spec.fp4_param_gather:
            unsupported.append("FP4 parameter all-gathers (MaxText gathers the weights in "
                               "weight_dtype)")
    if spec.precision == "fp8":
        quantization = QUANTIZATION.get(spec.fp8_recipe, QUANTIZATION["current"])
        if spec.fp8_recipe == "blockwise":
            unsupported.append("fp8 recipe blockwise: MaxText names no TE blockwise recipe; "
                               "exported as te_fp8_currentscaling (per-tensor)")
        if spec.fp8_param_gather:
            unsupported.append("FP8 parameter all-gathers (MaxText gathers the weights in "
                               "weight_dtype)")
        if g.moe:
            unsupported.append("expert GEMMs: MaxText's megablox grouped GEMM is quantised "
                               "only under quantization 'fp8_full' (layers/moe.py)")
    # MaxText drops tokens only in its dense (einsum) MoE path, whose expert buffers are
    # capacity-sized, i.e. padded (layers/moe.py dense_matmul 'EBCM'); the megablox
    # sparse_matmul path ignores capacity_factor (dropless).
    dropping = spec.capacity_factor is not None
    cycle = spec.full_attention_cycle()
    if dropping and decoder_block(spec, cycle) == "gpt_oss":
        # types.py @ e591f30: "GPT-OSS MoE only supports dropless (capacity_factor=-1)"
        unsupported.append(f"token_drop (capacity factor {spec.capacity_factor:g}): MaxText's "
                           "gpt_oss decoder is dropless only; exported dropless")
        dropping = False
    elif dropping and not spec.pad_to_capacity:
        unsupported.append("token_drop without padding: MaxText's dropping path computes "
                           "capacity-sized (padded) expert buffers")
    if dropping and spec.micro_seqs > 1:
        # layers/moe.py generate_masks @ e591f30: expert_capacity_per_batch = ceil(seq_len
        # · top_k / experts) · capacity_factor for each sequence of the batch, where
        # Megatron-Core caps a rank's whole micro-batch (a trial)
        unsupported.append(f"token_drop capacity: MaxText caps each sequence's tokens per "
                           f"expert, not the {spec.micro_seqs}-sequence micro-batch's: the "
                           "padded compute is the same, more tokens may be dropped")
    if spec.checkpointing == "none":
        unsupported.append("no recompute: MaxText has no 'none' remat policy; exported as "
                           "'minimal_with_context' (saves the most)")
    if spec.checkpointing == "selective":
        unsupported.append("selective recompute exported as remat_policy "
                           "'minimal_with_context' (saves the matmul outputs and the attention "
                           "context), not Megatron's attention-core recompute")
    if spec.sharding in ("zero1", "zero2"):
        unsupported.append(f"{spec.sharding}: MaxText shards with its fsdp axis; exported "
                           "as FSDP")
    if spec.dispatcher != "alltoall":
        unsupported.append(f"{spec.dispatcher} dispatcher (MaxText uses its own ragged "
                           "all-to-all)")
    if g.moe and spec.etp != 1:
        unsupported.append(f"etp={spec.etp}: MaxText has no separate expert-tensor degree")
    if spec.ep > 1 and spec.dp % spec.ep:
        unsupported.append(f"ep={spec.ep} does not divide dp={spec.dp}: MaxText's expert axis "
                           "is a factor of the batch axes")
    if g.moe and g.moe.moe_every > 1:
        unsupported.append("MoE every n-th block after the dense prefix "
                           "(interleave_moe_layer_step is honoured by llama4 blocks only)")
    if g.gated_attention:
        unsupported.append("gated attention (per-head output gate)")
    unsupported += projection_qk_norm_notes(g, "use_qk_norm's per-head norms")
    # the decoder's logits_dense has a kernel and no bias (its checkpoint converters
    # map lm_head.weight to logits_dense.kernel alone)
    unsupported += lm_head_bias_notes(g, "MaxText")
    if g.norm is NormKind.LAYERNORM:
        unsupported.append(f"LayerNorm: MaxText's {decoder_block(spec, cycle)} decoder "
                           "normalises with RMSNorm (no base.yml key picks LayerNorm)")
    decoder_layers = g.layers // 2 if cycle is not None else g.layers
    if g.attention_output_gate and cycle is None:  # the qwen3_next decoder has its own
        unsupported.append("attention output gate (elementwise, Qwen3-Next)")
    if g.zero_centered_norm and cycle is None:
        unsupported.append("zero-centred norm gains (1 + w): no base.yml key")
    fsdp = _data_ranks_per_expert_group(spec)
    data = 1
    if spec.sharding == "none":
        data, fsdp = fsdp, 1
    elif spec.sharding == "hsdp":
        data, fsdp = spec.hsdp_replicas, fsdp // spec.hsdp_replicas
    accumulation = spec.micro_batches_per_step if spec.pp == 1 else 1
    block = decoder_block(spec, cycle)
    piped = pipelined_layers(spec, block, decoder_layers)
    if spec.pp > 1:
        unsupported += stage_notes(spec, block, piped)
    if g.sliding_window is not None and block != "gpt_oss":
        unsupported.append(window_note(g) + ": not written (MaxText's windows belong to its "
                           "gemma and gpt_oss decoder blocks)")
    if g.moe and not g.glu:
        # the routed experts always hold wi_0, wi_1 and wo and compute act(x wi_0) * (x wi_1)
        # (layers/moe.py RoutedMoE, apply_ffn_activation @ e591f30), whatever mlp_activations
        unsupported.append(f"non-gated {g.activation_name} experts: MaxText's routed experts "
                           "are always gated (act(x wi_0) * x wi_1, a third matrix); the "
                           "exported experts have 1.5x the costed parameters")
    if g.moe and block not in ("deepseek", "qwen3_next"):
        # shared_experts and first_num_dense_layers are read by the deepseek decoder path
        # (layers/decoders.py, RoutedAndSharedMoE; qwen3_next builds its own gated shared
        # expert, models/qwen3.py Qwen3NextSparseMoeBlock); mixtral and qwen3_moe build
        # routed experts alone in every layer (models/mixtral.py, qwen3.py @ e591f30)
        dropped = [f"{what} ({count})" for what, count in (
            ("shared experts", g.moe.shared_experts), ("dense first blocks", g.moe.dense_layers))
            if count]
        if dropped:
            unsupported.append(f"{' and '.join(dropped)}: MaxText's {block} decoder builds "
                               "routed experts alone in every block; its deepseek decoder "
                               "reads shared_experts and first_num_dense_layers")
    refused = _refused_by_maxtext(spec, quantization, accumulation)
    if refused:  # files MaxText's config validation would stop at start-up (a trial)
        raise MosaicInputError(f"{spec.source or 'this job'}: --to maxtext: "
                               + "; ".join(refused))
    document: dict[str, Any] = {
        # base.yml's default hardware is tpu; its GPU configs set gpu, which the GPU
        # distributed init and gradient accumulation read (configs/gpu/models/*.yml,
        # utils/max_utils.py @ e591f30)
        "hardware": "gpu",
        "decoder_block": block,
        "base_emb_dim": g.d_model,
        "base_num_query_heads": g.heads,
        "base_num_kv_heads": g.kv_heads,
        "base_mlp_dim": _base_mlp_dim(spec, block),
        "base_num_decoder_layers": g.layers,
        "head_dim": g.head_dim,
        "vocab_size": g.vocab,
        "mlp_activations": mlp_activations(g.activation_name, unsupported),
        "logits_via_embedding": g.tied_embeddings,
        "use_qk_norm": qk_norm(g, block, unsupported),
        "attention_bias": attention_bias(g, block, unsupported),
        "attention_sink": g.attention_sinks,
        # base.yml rope_max_timescale (the base θ) and partial_rotary_factor, where stated
        **({"rope_max_timescale": g.rope_base} if g.rope_base is not None else {}),
        **rotary_share(g, block, unsupported),
    }
    if g.attention is AttentionKind.MLA:
        assert g.mla is not None
        document |= {"attention_type": "mla", "q_lora_rank": g.mla.q_lora_rank or 0,
                     "kv_lora_rank": g.mla.kv_lora_rank,
                     "qk_nope_head_dim": g.mla.qk_nope_head_dim,
                     "qk_rope_head_dim": g.mla.qk_rope_head_dim,
                     "v_head_dim": g.mla.v_head_dim}
    if g.moe:
        m = g.moe
        # only where the decoder reads them: a mixtral config stating 2 shared experts it
        # does not build read as if it did (a trial; the drop is named above)
        reads_shared = block in ("deepseek", "qwen3_next")
        document |= {"num_experts": m.experts, "num_experts_per_tok": m.top_k,
                     "base_moe_mlp_dim": m.expert_ffn,
                     **({"shared_experts": m.shared_experts,
                         "first_num_dense_layers": m.dense_layers} if reads_shared else {}),
                     "interleave_moe_layer_step": m.moe_every,
                     "mlp_bias": m.expert_bias, "routed_bias": m.router_bias,
                     # megablox's Pallas kernel runs interpreted off TPU (layers/moe.py:
                     # interpret = platform != "tpu"); MaxText's GPU configs set it false,
                     # which takes jax.lax.ragged_dot (configs/gpu/models/mixtral_8x7b.yml)
                     "megablox": False, "sparse_matmul": not dropping,
                     # MaxText's capacity_factor: -1 = dropless, else token dropping.
                     "capacity_factor": (spec.capacity_factor if dropping else -1.0)}
    document |= router_keys(spec, block, unsupported)
    if block == "gpt_oss":
        document |= gpt_oss_keys(g, unsupported)
    if g.mtp_layers:
        document["mtp_num_layers"] = g.mtp_layers
    if cycle is not None:
        document |= qwen3_next_keys(spec, cycle, unsupported)
    document |= {
        "max_target_length": spec.seq_len,
        "per_device_batch_size": spec.global_seqs / (accumulation * spec.n_devices),
        "gradient_accumulation_steps": accumulation,
        **({} if spec.train_steps is None else {"steps": spec.train_steps}),
        "dtype": "bfloat16" if spec.precision != "fp32" else "float32",
        "quantization": quantization,
        "remat_policy": REMAT_POLICY[spec.checkpointing],
        "opt_type": optimizer_type(spec, block, unsupported),
        **mesh_keys({"data": data, "fsdp": fsdp, "tensor": spec.tp, "pipeline": spec.pp,
                     "context": spec.cp, "expert": spec.ep}, spec, unsupported),
    }
    crossing = document.get("dcn_expert_parallelism", 1)
    if crossing > 1 and spec.gpus_per_node and spec.ep * spec.etp <= spec.gpus_per_node:
        # Megatron folds EP into the tp·cp·dp ranks (Eq. 24): its ep·etp consecutive expert
        # ranks share a node, which is what mosaic costed; MaxText's expert axis is a mesh
        # axis of its own beside tensor, so tp·ep GPUs hold one expert group (a trial)
        unsupported.append(
            f"the expert axis crosses nodes here (dcn_expert_parallelism {crossing}): "
            f"MaxText's expert mesh axis sits beside tensor ({spec.tp} x {spec.ep} GPUs), "
            f"while mosaic costed Megatron's EP group of {spec.ep * spec.etp} ranks inside "
            "one node; expect a slower all-to-all than predicted")
    if spec.pp > 1:
        per_stage = layers_per_stage(spec, piped)
        document |= {"num_pipeline_microbatches": spec.micro_batches_per_step,
                     "num_layers_per_pipeline_stage": per_stage}
        if piped % (spec.pp * per_stage):  # else types.py's default pipelines them all
            document["pipeline_parallel_layers"] = pipelined_in_stages(spec, piped)
    unsupported += unexpressed(spec, set(), "MaxText")
    return document, unsupported


def _data_ranks_per_expert_group(spec: ExportSpec) -> int:
    """dp/ep, MaxText's data and fsdp axes beside its expert axis (dp where ep does not
    divide it)."""
    return spec.dp // spec.ep if spec.dp % spec.ep == 0 else spec.dp


def _refused_by_maxtext(spec: ExportSpec, quantization: str, accumulation: int
                        ) -> list[str]:
    """What MaxText's config validation refuses in this job (src/maxtext/configs/types.py
    and utils/max_utils.py @ e591f30), each with the way out."""
    refused = []
    if quantization == "te_fp8_delayedscaling" and accumulation > 1:
        refused.append(f"FP8 delayed scaling with {accumulation} gradient-accumulation steps "
                       "('FP8 quantization is not compatible with gradient accumulation'): use "
                       "performance.fp8_recipe current, or one micro-batch per step")
    if spec.pp > 1 and spec.micro_batches_per_step % spec.pp:
        refused.append(f"{spec.micro_batches_per_step} pipeline micro-batches over pp={spec.pp}"
                       " ('The number of microbatches must be divisible by the number of "
                       "stages'): choose a global batch or micro-batch that gives a multiple")
    fsdp = _data_ranks_per_expert_group(spec)
    if spec.sharding == "hsdp" and fsdp % spec.hsdp_replicas:
        refused.append(f"{spec.hsdp_replicas} HSDP replicas over the {fsdp} data ranks of "
                       f"each expert group (dp/ep = {spec.dp}/{spec.ep}): MaxText's fsdp axis "
                       f"would be {fsdp // spec.hsdp_replicas} and its mesh would not cover the "
                       "devices; choose "
                       "parallelism.hsdp_shard so the replicas divide dp/ep")
    return refused


def pipelined_layers(spec: ExportSpec, block: str, decoder_layers: int) -> int:
    """The decoder layers MaxText splits into pipeline stages: all of them, except that the
    deepseek decoder runs its dense first layers before the pipeline (types.py @ e591f30:
    pipeline_parallel_layers = num_decoder_layers - first_num_dense_layers)."""
    moe = spec.geometry.moe
    return decoder_layers - (moe.dense_layers if block == "deepseek" and moe else 0)


def layers_per_stage(spec: ExportSpec, piped: int) -> int:
    """``num_layers_per_pipeline_stage``: ``piped`` layers over pp·vpp stages, at least 1."""
    return max(1, piped // (spec.pp * spec.vpp))


def pipelined_in_stages(spec: ExportSpec, piped: int) -> int:
    """``pipeline_parallel_layers``: the most of ``piped`` layers that whole repeats of pp
    stages of :func:`layers_per_stage` hold. MaxText asserts stages x layers per stage
    divides them (src/maxtext/configs/types.py l. 3576-3582 @ e591f30: a review's
    DeepSeek-V3 file, 58 MoE layers on pp 8, stopped at start-up) and runs the rest outside
    the pipeline, the stage axis acting as data parallelism (base.yml
    pipeline_parallel_layers, layers/decoders.py)."""
    stage_layers = spec.pp * layers_per_stage(spec, piped)
    return piped // stage_layers * stage_layers


def pipeline_repeats(spec: ExportSpec, piped: int) -> int:
    """MaxText's ``num_pipeline_repeats`` for the written split: the virtual stages each
    pipeline rank runs (its circular pipeline, layers/pipeline.py), derived as
    pipeline_parallel_layers / (stages x num_layers_per_pipeline_stage) (src/maxtext/configs/
    types.py l. 3575-3585 @ e591f30)."""
    return pipelined_in_stages(spec, piped) // (spec.pp * layers_per_stage(spec, piped))


def stage_notes(spec: ExportSpec, block: str, piped: int) -> list[str]:
    """What MaxText's equal pipeline stages of ``piped`` layers do to the costed split,
    naming the virtual stages per rank MaxText runs where they differ from the costed vpp."""
    stages = spec.pp * spec.vpp
    which = " (the deepseek decoder pipelines its MoE layers only)" if block == "deepseek" \
        else ""
    if piped % stages:
        inside = pipelined_in_stages(spec, piped)
        per_stage, repeats = layers_per_stage(spec, piped), pipeline_repeats(spec, piped)
        layers = f"{per_stage} layer{'s' if per_stage != 1 else ''}"
        if repeats == spec.vpp:
            written = f"{inside // per_stage} stages of {layers} written (pp {spec.pp} x vpp " \
                      f"{spec.vpp}, as costed)"
        else:
            written = (f"{inside // per_stage} stages of {layers} written: {repeats} virtual "
                       f"stages per rank (MaxText's num_pipeline_repeats, pipeline_parallel_"
                       f"layers / (pp {spec.pp} x {per_stage})), not the costed vpp "
                       f"{spec.vpp}, so the pipeline schedule (bubble, stage transfers) "
                       "differs from the prediction")
            if stages <= piped:  # num_pipeline_repeats = vpp pipelines fewer layers
                kept = piped // stages * stages
                written += (f" (num_pipeline_repeats {spec.vpp} would pipeline {kept} and "
                            f"leave {piped - kept} outside)")
        outside = (f"; pipeline_parallel_layers {inside}: the other {piped - inside} run "
                   "outside the pipeline, its stage axis acting as data parallelism"
                   if inside < piped else "")
        return [f"uneven pipeline stages ({piped} pipelined layers{which} on pp·vpp = "
                f"{stages}): MaxText needs equal stages; {written}{outside}; choose "
                "pp and vpp dividing them for the split mosaic costed"]
    if spec.uneven_stages:
        return [f"the uneven split mosaic costed: MaxText runs {stages} equal stages of its "
                f"{piped} pipelined layers{which}"]
    return []


def _base_mlp_dim(spec: ExportSpec, block: str) -> int:
    """base_mlp_dim: the dense FFN width, or the expert width for a model whose every block
    is MoE with no dense first blocks written, whose dense width no block uses: types.py @
    e591f30 requires it equal to base_moe_mlp_dim for such a model (a trial's mixtral file
    with 15360 against 3840 failed to start), as the qwen3-next-80b-a3b.yml config sets it."""
    g = spec.geometry
    if g.moe is None:
        return g.ffn
    dense_written = g.moe.dense_layers if block in ("deepseek", "qwen3_next") else 0
    return g.moe.expert_ffn if g.moe.moe_every == 1 and dense_written == 0 else g.ffn


# Decoder blocks MaxText runs Muon on (types.py @ e591f30 raises "Muon dimension numbers
# haven't been tested for this model" for the others)
MUON_DECODERS = ("deepseek", "deepseek4", "qwen3", "gemma3", "llama2")


def optimizer_type(spec: ExportSpec, block: str, unsupported: list[str]) -> str:
    """``opt_type``: base.yml offers "adamw", "adam_pax", "sgd" and "muon" and defaults to
    adamw, so a Muon job left without it trained with AdamW (a trial); Muon only on the
    decoders MaxText accepts it for (MUON_DECODERS; a later trial's mixtral file failed to
    start), else adamw, said. Adam is written as adamw (the same state;
    ``adam_weight_decay`` sets the decay)."""
    if spec.optimizer == "muon" and block not in MUON_DECODERS:
        unsupported.append(f"optimizer muon: MaxText runs Muon on the {', '.join(MUON_DECODERS)}"
                           f" decoders only, not {block}; written as adamw")
        return "adamw"
    if spec.optimizer in ("muon", "sgd"):
        return spec.optimizer
    if spec.optimizer == "adam":
        unsupported.append("optimizer adam: written as MaxText's adamw (the same moments); set "
                           "adam_weight_decay: 0 for Adam without decoupled weight decay")
    return "adamw"


# Axes a slice boundary (a node, on GPUs) may cut, outermost first: MaxText recommends the
# data axis across DCN and never tensor (base.yml: "dcn_tensor_parallelism: 1 # never
# recommended").
DCN_AXES = ("data", "fsdp", "pipeline", "expert", "context")


def mesh_keys(degrees: dict[str, int], spec: ExportSpec, unsupported: list[str]
              ) -> dict[str, int]:
    """The ici_* and dcn_* degrees of each mesh axis. MaxText wants the product of the dcn_*
    axes to equal the slices and that of the ici_* axes the devices per slice
    (src/maxtext/configs/base.yml @ e591f30); on GPUs a slice is a node, as its multi-node
    GPU recipes show (configs/gpu/a3/llama_2_7b/16vm.sh: dcn_data_parallelism=16 with
    ici_fsdp_parallelism=8 on 16 nodes of 8). The nodes are taken from the outer axes in
    :data:`DCN_AXES` order; a layout no such split fits (tensor parallelism across nodes) is
    written as one slice, with a note."""
    node = spec.gpus_per_node
    nodes = spec.n_devices // node if node and spec.n_devices % node == 0 else 1
    ici, dcn, left = dict(degrees), dict.fromkeys(degrees, 1), nodes
    for axis in DCN_AXES:
        share = math.gcd(ici[axis], left)
        ici[axis], dcn[axis], left = ici[axis] // share, share, left // share
    if left != 1:
        unsupported.append(f"one slice: no split of this layout puts whole {node}-GPU nodes "
                           "on its data, fsdp, pipeline, expert and context axes, so every "
                           "degree is ici_* (set MaxText's num_slices and the dcn_* keys "
                           "by hand)")
        ici, dcn = dict(degrees), dict.fromkeys(degrees, 1)
    keys = {f"ici_{axis}_parallelism": ici[axis] for axis in degrees}
    keys |= {f"dcn_{axis}_parallelism": dcn[axis] for axis in DCN_AXES}
    return keys


# MaxText's trainer module at e591f30 (src/maxtext/trainers/pre_train/train.py; its docs
# launch `python3 -m maxtext.trainers.pre_train.train`); a config file's base_config is looked
# up beside it, then in MaxText's configs folder (configs/pyconfig.py _load_config)
TRAINER_MODULE = "maxtext.trainers.pre_train.train"


def render(spec: ExportSpec) -> ExportResult:
    """A MaxText config file over ``base.yml`` (its ``base_config``), launched as
    ``python3 -m maxtext.trainers.pre_train.train FILE.yml run_name=... ``."""
    document, unsupported = config(spec)
    header = "".join(f"# {line}\n" for line in header_lines(spec, "MaxText", unsupported))
    header += (f"# launch: python3 -m {TRAINER_MODULE} FILE.yml run_name=NAME "
               "base_output_directory=DIR (keys on the command line override the file's)\n")
    body = yaml.safe_dump({"base_config": "base.yml", **document}, sort_keys=False,
                          default_flow_style=None, width=100)
    return ExportResult("maxtext", header + body, ".yml", unsupported)
