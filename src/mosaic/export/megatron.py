"""Megatron-Core (Megatron-LM ``pretrain_gpt.py``; a hybrid model ``pretrain_hybrid.py``)
command-line arguments.

Option names and choices: NVIDIA/Megatron-LM ``megatron/training/arguments.py`` and the
``TransformerConfig``/``ModelParallelConfig`` fields it exposes
(``megatron/core/transformer/transformer_config.py``: ``moe_token_dispatcher_type`` in
allgather/alltoall/flex, ``moe_flex_dispatcher_backend`` in deepep/hybridep,
``recompute_granularity`` in full/selective, ``fp8`` in e4m3/hybrid), checked at commit
d98e8a6 (2026-08-22).
"""

from __future__ import annotations

from mosaic.arch.geometry import AttentionKind, Geometry, NormKind
from mosaic.errors import MosaicInputError
from mosaic.export.spec import (
    WINDOW_CP_NOTE,
    ExportSpec,
    StageSplitSpelling,
    lm_head_bias_notes,
    megatron_bias_notes,
    megatron_stage_split,
    projection_qk_norm_notes,
    unexpressed,
)
from mosaic.export.targets import ExportResult, header_lines

# mosaic FP8 recipe -> (--fp8-recipe, --fp8-format). Recipe names: TransformerConfig.fp8_recipe
# Literal['tensorwise', 'delayed', 'mxfp8', 'blockwise', 'custom'], default 'delayed'
# (megatron/core/transformer/transformer_config.py @ d98e8a6; fp8_utils.get_fp8_recipe maps
# them to TE DelayedScaling / Float8CurrentScaling / Float8BlockScaling / MXFP8BlockScaling).
# Format: 'hybrid' (E4M3 forward, E5M2 gradients) as Megatron-Bridge's recipes set it, and
# 'e4m3' for MXFP8 as its bf16_with_mxfp8_mixed does (src/megatron/bridge/training/
# mixed_precision.py @ 067f987; TE MXFP8BlockScaling's default format is E4M3).
# mosaic attention_kernel -> --attention-backend (AttnBackend flash/fused/unfused/local/auto,
# megatron/core/transformer/enums.py @ d98e8a6): fused = Transformer Engine's cuDNN fused
# attention, flash = FlashAttention, unfused = the materialised softmax(QK^T)V path.
ATTENTION_BACKEND = {"cudnn": "fused", "fa2": "flash", "fa3": "flash", "reference": "unfused"}

# The amax history delayed scaling keeps, as Megatron-LM's FP8 examples
# (examples/llama/train_llama3_8b_h100_fp8.sh @ d98e8a6) and Bridge's delayed recipe
# (mixed_precision.py @ 067f987) set it, not TransformerConfig's defaults (1, 'most_recent')
DELAYED_SCALING_HISTORY = {"fp8_amax_history_len": 1024, "fp8_amax_compute_algo": "max"}

FP8_RECIPE_ARGS = {"delayed": ("delayed", "hybrid"), "current": ("tensorwise", "hybrid"),
                   "blockwise": ("blockwise", "hybrid"), "mxfp8": ("mxfp8", "e4m3")}


# Per-layer graphs capture an MoE layer only with static shapes (drop-and-pad routing); the
# prediction keeps a dropless layer's host wait (perf/workload.py layer_cuda_graphs).
LAYER_GRAPH_DROPLESS_NOTE = ("per-layer CUDA graphs of a dropless MoE model: its MoE layers "
                             "have dynamic shapes and run outside the graphs unless routing "
                             "drops and pads to a capacity")


# Workload settings both Megatron-Core targets (Megatron-LM flags, Megatron-Bridge keys) write
# or flag themselves (export.spec.unexpressed lists the rest as NOT EXPRESSED).
MEGATRON_CORE_HANDLED = frozenset({
    "recompute_modules", "recompute_block_fraction", "cross_entropy", "grad_reduce_in_fp32",
    "offloaded_activation_layers", "optimizer_dtype", "dp_comm_overlap", "max_nodes_per_token",
    "fp8_glu_inputs", "vocab_in_pipeline_split", "pipeline_layout", "ep_overlap", "dispatch_fp8",
    "full_iteration_cuda_graph", "layer_cuda_graphs", "pipeline_schedule", "attention_kernel",
    "fused_grouped_mlp", "fp8_dot_product_attention"})
# validate_args on a GPU before Blackwell with tp or cp > 1 (and neither FSDP nor the EP
# overlap, which only warn): "Using tensor model parallelism or context parallelism require
# setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1" (arguments.py @ d98e8a64dd)
CUDA_CONNECTIONS_ENV = ("tp or cp > 1 on Hopper or an earlier GPU: set "
                        "CUDA_DEVICE_MAX_CONNECTIONS=1 in the launch environment "
                        "(validate_args asserts it; not needed from Blackwell on)")
# ... and with Megatron-FSDP (or the EP overlap) it only warns: TP/CP want
# CUDA_DEVICE_MAX_CONNECTIONS=1, FSDP and the EP overlap more connections, so one of them
# loses its overlap (validate_args warn_rank_0, arguments.py @ d98e8a64dd); mosaic costs both
# overlapping (a planner trial)
CUDA_CONNECTIONS_CONFLICT = ("tp or cp > 1 with {what} on Hopper or an earlier GPU: "
                             "Megatron-LM warns that they want different "
                             "CUDA_DEVICE_MAX_CONNECTIONS (1 for TP/CP, unset for {what}), so "
                             "one of them overlaps less than mosaic costs; from Blackwell on "
                             "the setting is not needed")
# Transformer Engine reads this at import time to register its fused grouped MLP; without it
# Megatron-Core's experts run unfused (megatron/core/transformer/moe/experts.py @ d98e8a64dd)
FUSED_GROUPED_MLP_ENV = ("the fused grouped MLP also needs NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 in "
                         "the launch environment (Transformer Engine registers the fusion at "
                         "import; Megatron-Core runs the experts unfused without it)")


# An uneven split's arguments (megatron/training/arguments.py _add_distributed_args
# @ d98e8a64dd: --decoder-first/last-pipeline-num-layers set TransformerConfig
# num_layers_in_first/last_pipeline_stage; --pipeline-model-parallel-layout)
STAGE_SPLIT_FLAGS = StageSplitSpelling(first="--decoder-first-pipeline-num-layers",
                                       last="--decoder-last-pipeline-num-layers",
                                       layout="--pipeline-model-parallel-layout")


def moe_layer_freq(spec: ExportSpec) -> str:
    """``--moe-layer-freq``: an int when every block is MoE, else the pattern expression
    (arguments.py accepts a Python list expression such as ``([0]*3+[1]*58)``)."""
    pattern = spec.moe_layer_pattern()
    if all(pattern):
        return "1"
    runs: list[tuple[int, int]] = []
    for value in pattern:
        if runs and runs[-1][0] == value:
            runs[-1] = (value, runs[-1][1] + 1)
        else:
            runs.append((value, 1))
    return "(" + "+".join(f"[{v}]*{n}" for v, n in runs) + ")"


def arguments(spec: ExportSpec) -> tuple[list[tuple[str, str | None]], list[str]]:
    """(flag, value or None for a switch) pairs, and what Megatron cannot express."""
    g = spec.geometry
    unsupported: list[str] = spec.routing_notes() + spec.megatron_core_refusals()
    args: list[tuple[str, str | None]] = [
        ("--num-layers", str(g.layers)),
        ("--hidden-size", str(g.d_model)),
        ("--ffn-hidden-size", str(g.ffn)),
        ("--num-attention-heads", str(g.heads)),
        ("--seq-length", str(spec.seq_len)),
        ("--max-position-embeddings", str(spec.seq_len)),
        ("--vocab-size", str(g.vocab)),
        # a Mamba hybrid has no position embedding (Megatron-Core HybridModel and
        # Megatron-Bridge's MambaModelProvider default to 'none'; its Mamba layers carry the
        # order), a transformer and a gated DeltaNet hybrid (Qwen3-Next) RoPE
        ("--position-embedding-type", "none" if g.mamba is not None else "rope"),
        ("--normalization", "RMSNorm" if g.norm is NormKind.RMSNORM else "LayerNorm"),
    ]
    if g.attention is AttentionKind.MLA:
        assert g.mla is not None
        args += [("--multi-latent-attention", None),
                 ("--kv-lora-rank", str(g.mla.kv_lora_rank)),
                 ("--qk-head-dim", str(g.mla.qk_nope_head_dim)),
                 ("--qk-pos-emb-head-dim", str(g.mla.qk_rope_head_dim)),
                 ("--v-head-dim", str(g.mla.v_head_dim))]
        if g.mla.q_lora_rank is not None:
            args.append(("--q-lora-rank", str(g.mla.q_lora_rank)))
    else:
        args.append(("--kv-channels", str(g.head_dim)))
        if g.kv_heads != g.heads:
            args += [("--group-query-attention", None), ("--num-query-groups", str(g.kv_heads))]
        unsupported += kv_head_replication_note(spec)
    args += activation_arguments(g, unsupported)
    if not g.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not g.linear_biases:
        args.append(("--disable-bias-linear", None))
        if g.qkv_bias:
            args.append(("--add-qkv-bias", None))
    # with MLA the flag builds the q/kv latent RMSNorms mosaic counts (q_a / kv_a norms,
    # gpt_layer_specs.py @ d98e8a64dd: the up-projections become layer-norm linears)
    if g.qk_norm or g.attention is AttentionKind.MLA:
        args.append(("--qk-layernorm", None))
    # TransformerConfig.qk_layernorm builds norms of hidden_size_per_attention_head
    # (megatron/core/transformer/attention.py @ d98e8a64dd)
    unsupported += projection_qk_norm_notes(g, "--qk-layernorm's per-head norms")
    # GPTModel.output_layer is built with bias=False (megatron/core/models/gpt/
    # gpt_model.py @ d98e8a64dd)
    unsupported += lm_head_bias_notes(g, "Megatron-LM") + megatron_bias_notes(g)
    args += rope_and_norm_arguments(g)
    if g.gated_attention:
        unsupported.append("gated attention (per-head output gate) has no Megatron-LM flag")
    if g.attention_output_gate:  # TransformerConfig.attention_output_gate @ d98e8a64dd
        args.append(("--attention-output-gate", None))
    if g.sliding_window is not None:
        # TransformerConfig.window_size (left, right): left keys besides the query's own;
        # window_attn_skip_freq N: every N-th layer full (megatron/training/arguments.py
        # --window-size / --window-attn-skip-freq @ d98e8a64dd)
        args.append(("--window-size", f"{g.sliding_window - 1},0"))
        if g.full_attention_every is not None:
            args.append(("--window-attn-skip-freq", str(g.full_attention_every)))
        if spec.cp > 1:
            args.append(("--cp-comm-type", "a2a"))
            unsupported.append(WINDOW_CP_NOTE)
    if g.attention_sinks:
        # TransformerConfig.softmax_type 'learnable': a learned sink logit per head
        # (Megatron-LM examples/post_training/modelopt/conf/openai/gpt-oss-20b.sh @ d98e8a64dd)
        args.append(("--softmax-type", "learnable"))
    if g.is_hybrid:
        args += hybrid_arguments(spec, unsupported)
    if g.moe:
        m = g.moe
        args += [("--num-experts", str(m.experts)),
                 ("--moe-router-topk", str(m.top_k)),
                 ("--moe-ffn-hidden-size", str(m.expert_ffn)),
                 *([] if g.is_hybrid else [("--moe-layer-freq", moe_layer_freq(spec))]),
                 ("--moe-grouped-gemm", None)]
        if m.shared_experts:
            args.append(("--moe-shared-expert-intermediate-size",
                         str(m.shared_total_width)))
            if m.shared_expert_gate:
                args.append(("--moe-shared-expert-gate", None))
        # TransformerConfig.moe_expert_capacity_factor: None (no flag) = dropless; a factor
        # drops tokens beyond capacity; moe_pad_expert_input_to_capacity pads to it.
        if spec.capacity_factor is not None:
            args.append(("--moe-expert-capacity-factor", f"{spec.capacity_factor:g}"))
            if spec.pad_to_capacity:
                args.append(("--moe-pad-expert-input-to-capacity", None))
        dispatcher = spec.megatron_dispatcher(unsupported)
        if dispatcher == "alltoall":
            args.append(("--moe-token-dispatcher-type", "alltoall"))
        else:  # DeepEP / HybridEP run through the flex dispatcher
            args += [("--moe-token-dispatcher-type", "flex"),
                     ("--moe-flex-dispatcher-backend", dispatcher)]
        if (note := spec.stated_node_limit_note()) is not None:
            unsupported.append(note)
        elif spec.max_nodes_per_token is not None:
            # TransformerConfig.moe_router_num_groups / moe_router_group_topk: node-limited
            # routing with one group per node of the EP group (DeepSeek-V3's M)
            groups, reason = spec.node_limited_groups()
            if reason is None:
                args += [("--moe-router-num-groups", str(groups)),
                         ("--moe-router-group-topk", str(spec.max_nodes_per_token))]
            else:
                unsupported.append(f"max_nodes_per_token {spec.max_nodes_per_token} "
                                   f"(node-limited routing): {reason}; set "
                                   "--moe-router-num-groups (nodes in the EP group) and "
                                   "--moe-router-group-topk by hand")
        if spec.megatron_ep_overlap:  # batch-level EP overlap needs the delayed wgrads
            args += [("--overlap-moe-expert-parallel-comm", None),
                     ("--delay-wgrad-compute", None)]
        # dispatch_fp8: not written (megatron_core_refusals says why)
    # dropout off and the costed router balancing (ExportSpec.megatron_core_fields), each
    # field as its flag (arguments.py exposes TransformerConfig fields as --field-name);
    # a hybrid too: the file is not merged over a recipe, and Megatron-LM's default
    # --moe-aux-loss-coeff 0.0 would train its router unbalanced (a trial: Qwen3-Next)
    for field, value in spec.megatron_core_fields().items():
        flag = "--" + field.replace("_", "-")
        args.append((flag, None) if value is True else (flag, f"{value:g}"
                                                          if isinstance(value, float)
                                                          else str(value)))
    if g.mtp_layers:
        args.append(("--mtp-num-layers", str(g.mtp_layers)))
    args += [("--tensor-model-parallel-size", str(spec.tp)),
             ("--pipeline-model-parallel-size", str(spec.pp)),
             ("--context-parallel-size", str(spec.cp)),
             ("--expert-model-parallel-size", str(spec.ep)),
             ("--expert-tensor-parallel-size", str(spec.etp))]
    split = megatron_stage_split(spec, STAGE_SPLIT_FLAGS)
    layout = spec.pipeline_layout if split is None else split.layout
    if layout is not None:  # it sets vpp: arguments.py allows one of the two
        args.append(("--pipeline-model-parallel-layout", layout))
    elif spec.vpp > 1 and not g.is_hybrid:  # a hybrid pattern's '|' segments set it
        args.append(("--num-virtual-stages-per-pipeline-rank", str(spec.vpp)))
    if split is not None:  # (the first and last ranks' blocks, with vpp: split over it)
        if split.first_layers is not None:
            args.append((STAGE_SPLIT_FLAGS.first, str(split.first_layers)))
        if split.last_layers is not None:
            args.append((STAGE_SPLIT_FLAGS.last, str(split.last_layers)))
        unsupported += split.notes
    if spec.vocab_in_pipeline_split:  # TransformerConfig account_for_*_in_pipeline_split
        args += [("--account-for-embedding-in-pipeline-split", None),
                 ("--account-for-loss-in-pipeline-split", None)]
    if spec.pipeline_schedule == "dualpipe" and spec.pp > 1:
        unsupported.append(dualpipe_note(spec, "Megatron-LM"))
    if ((spec.tp > 1 or spec.cp > 1) and not spec.megatron_fsdp and not spec.megatron_ep_overlap
            and spec.architecture != "blackwell"):  # unknown (a plan): said, conditionally
        unsupported.append(CUDA_CONNECTIONS_ENV)
    elif (spec.tp > 1 or spec.cp > 1) and spec.architecture != "blackwell":
        unsupported.append(CUDA_CONNECTIONS_CONFLICT.format(
            what="Megatron-FSDP" if spec.megatron_fsdp else "the EP communication overlap"))
    if spec.fused_grouped_mlp:
        # TransformerConfig use_transformer_engine_op_fuser and moe_mlp_glu_interleave_size,
        # exposed as flags by megatron/training/argument_utils.py ArgumentGroupFactory
        args += [("--use-transformer-engine-op-fuser", None),
                 ("--moe-mlp-glu-interleave-size", "32")]
        unsupported.append(FUSED_GROUPED_MLP_ENV)
    if spec.fp8_dot_product_attention:
        unsupported.append("fp8_dot_product_attention: Megatron-LM has no flag for "
                           "TransformerConfig.fp8_dot_product_attention (arguments.py lists it "
                           "among the fields with no CLI argument); set it in the model config")
    if spec.sequence_parallel and spec.tp > 1:
        args.append(("--sequence-parallel", None))
        if spec.tp_comm_overlap:  # Transformer Engine userbuffers; needs sequence parallelism
            args.append(("--tp-comm-overlap", None))
    if spec.full_iteration_cuda_graph:
        # docs/user-guide/features/cuda_graph.md: the NaN check syncs the host, so it goes.
        args += [("--cuda-graph-impl", "full_iteration"),
                 ("--no-check-for-nan-in-loss-and-grad", None)]
        if g.moe:
            unsupported.append("full-iteration CUDA graph of an MoE model: also set "
                               + ("" if spec.dispatcher == "hybridep" else
                                  "--moe-token-dispatcher-type flex "
                                  "--moe-flex-dispatcher-backend hybridep, ")
                               + "--moe-expert-rank-capacity-factor and paged stash by hand")
    if spec.layer_cuda_graphs:
        # per-layer capture of the whole layer: --cuda-graph-impl local with no modules
        # (arguments.py @ d98e8a64dd: "Use empty cuda_graph_modules to capture the whole
        # layer"; core_v0.14's --enable-cuda-graph; it turns the TE RNG tracker on itself)
        args.append(("--cuda-graph-impl", "local"))
        if g.moe and not (spec.routing == "token_drop" and spec.pad_to_capacity):
            unsupported.append(LAYER_GRAPH_DROPLESS_NOTE)
    if spec.sharding == "zero1":
        args.append(("--use-distributed-optimizer", None))
    elif spec.megatron_fsdp:
        _check_fsdp_optimizer(spec)
        strategy = "optim_grads" if spec.sharding == "zero2" else "optim_grads_params"
        # validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format"
        # (arguments.py @ d98e8a64dd; the default torch_dist is refused)
        args += [("--use-megatron-fsdp", None), ("--use-distributed-optimizer", None),
                 ("--data-parallel-sharding-strategy", strategy),
                 ("--ckpt-format", "fsdp_dtensor")]
        if spec.sharding == "hsdp":
            args += [("--num-distributed-optimizer-instances", str(spec.hsdp_replicas)),
                     ("--outer-dp-sharding-strategy", "no_shard")]
    if spec.dp_comm_overlap:  # mosaic's default; both flags default off in Megatron-LM
        args.append(("--overlap-grad-reduce", None))
        if spec.sharding != "none":  # validate_args: needs the distributed optimizer
            args.append(("--overlap-param-gather", None))
    if not spec.grad_reduce_in_fp32:  # arguments.py _add_mixed_precision_args
        args.append(("--grad-reduce-in-bf16", None))
    args += [("--micro-batch-size", str(spec.micro_seqs)),
             ("--global-batch-size", str(spec.global_seqs))]
    if spec.train_steps is not None:  # a plan's D (arguments.py --train-iters)
        args.append(("--train-iters", str(spec.train_steps)))
    args += recompute_arguments(spec, unsupported)
    if spec.offloaded_activation_layers:  # ModelParallelConfig.cpu_offloading_num_layers
        args.append(("--cpu-offloading-num-layers", str(spec.offloaded_activation_layers)))
    if spec.cross_entropy == "fused":  # ModelParallelConfig.cross_entropy_loss_fusion, native
        args += [("--cross-entropy-loss-fusion", None),
                 ("--cross-entropy-fusion-impl", "native")]
    elif spec.cross_entropy == "te":
        unsupported.append("cross_entropy te (Transformer Engine's parallel cross entropy): "
                           "Megatron-LM's validate_args refuses --cross-entropy-loss-fusion "
                           "with --cross-entropy-fusion-impl te ('disabled due to stability "
                           "issues', arguments.py @ d98e8a6); Megatron-Bridge still sets it")
    elif spec.cross_entropy is not None:
        unsupported.append(f"cross_entropy {spec.cross_entropy}: Megatron-LM offers its "
                           "unfused vocab-parallel loss or --cross-entropy-loss-fusion")
    backend = attention_backend(spec, unsupported, "--attention-backend")
    if backend is not None:
        args.append(("--attention-backend", backend))
    if spec.precision in ("bf16", "fp8", "fp4"):
        args.append(("--bf16", None))
    elif spec.precision == "fp16":
        args.append(("--fp16", None))
    if spec.precision == "fp8":
        recipe, fp8_format = FP8_RECIPE_ARGS[spec.fp8_recipe]
        args += [("--fp8-format", fp8_format), ("--fp8-recipe", recipe)]
        if spec.fp8_recipe == "delayed":  # (a trial: the NeMo file wrote them, this not)
            args += [("--" + name.replace("_", "-"), str(value))
                     for name, value in DELAYED_SCALING_HISTORY.items()]
        if spec.fp8_param_gather:
            args.append(("--fp8-param-gather", None))
            if spec.sharding == "none":  # arguments.py validate_args asserts it
                unsupported.append("--fp8-param-gather needs --use-distributed-optimizer or "
                                   "Megatron FSDP; sharding none has neither")
    if spec.precision == "fp4":
        # TransformerConfig fp4 (--fp4-format e2m1), fp4_recipe nvfp4 and fp4_param
        # (--fp4-param-gather), megatron/core/transformer/transformer_config.py @ d98e8a64dd
        args += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
        if spec.fp4_param_gather:
            args.append(("--fp4-param-gather", None))
    optimizer = {"adam": "adam", "adamw": "adam", "muon": "muon", "sgd": "sgd"}
    args.append(("--optimizer", optimizer.get(spec.optimizer, "adam")))
    if spec.optimizer_dtype == "bf16_moments":
        # fp32 master weights and gradients, bf16 moments: the precision-aware optimizer's
        # --exp-avg-dtype / --exp-avg-sq-dtype (arguments.py _add_distributed_args)
        args += [("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", "bf16"),
                 ("--exp-avg-sq-dtype", "bf16")]
    elif spec.optimizer_dtype == "bf16":
        unsupported.append("optimizer_dtype bf16 (no fp32 master weights, bf16 moments): "
                           "Megatron-LM's --main-params-dtype takes fp32 or fp16 only")
    if spec.fp8_glu_inputs:
        unsupported.append("fp8_glu_inputs (the routed experts' SwiGLU inputs saved in FP8, "
                           "arXiv:2412.19437 Sec. 3.3.3): no Megatron-LM option")
    unsupported += unexpressed(spec, MEGATRON_CORE_HANDLED | {"tp_comm_overlap"},
                               "Megatron-LM")
    return args, unsupported


def attention_backend(spec: ExportSpec, unsupported: list[str], option: str) -> str | None:
    """Megatron-Core's attention backend for the job's stated kernel (:data:`ATTENTION_BACKEND`);
    None where the job states none, or where no backend runs it (then flagged, naming
    ``option``, the target's spelling of the setting)."""
    if spec.attention_kernel is None:
        return None
    backend = ATTENTION_BACKEND.get(spec.attention_kernel)
    if backend is None:
        unsupported.append(f"attention_kernel {spec.attention_kernel}: no {option} runs it "
                           "(flash, fused, unfused, local)")
    return backend


def _check_fsdp_optimizer(spec: ExportSpec) -> None:
    """Megatron-FSDP takes only SGD and Adam(W) (megatron/training/arguments.py l. 1150 @
    d98e8a64dd: "Megatron-FSDP does not support the {optimizer} optimizer yet"; the
    emerging optimizers, Muon among them, assert the same at l. 1739): a Muon job sharded
    as ZeRO-2/FSDP/HSDP is refused with the way out (a trial's file stopped at start-up)."""
    if spec.optimizer not in ("adamw", "adam", "sgd"):
        raise MosaicInputError(
            f"{spec.source}: --to megatron: sharding {spec.sharding} runs as Megatron-FSDP, "
            f"which does not support the {spec.optimizer} optimizer (Megatron-LM "
            "arguments.py); use sharding zero1 or none, or optimizer adamw")


def kv_head_replication_note(spec: ExportSpec) -> list[str]:
    """A note where tp exceeds the query groups: each TP rank then holds one KV head of
    several ranks' queries, which Megatron-Core runs from core_v0.16.0 ("When num_kv_heads <
    tp_size, each TP rank (post AG) initially produces activations for 1 kv_head",
    megatron/core/transformer/attention.py; NeMo 26.02 ships it, Megatron-Bridge
    docs/releases/software-versions.md); before it, attention divides the query groups by
    tp and refuses the job."""
    kv_heads = spec.geometry.kv_heads
    if spec.geometry.attention is AttentionKind.MLA or spec.tp <= kv_heads:
        return []
    return [f"tp {spec.tp} > {kv_heads} query groups: needs Megatron-Core core_v0.16.0 or "
            "later (NeMo / Megatron-Bridge 26.02+), where a TP rank replicates its KV head; "
            "earlier releases refuse it"]


def dualpipe_note(spec: ExportSpec, target: str) -> str:
    """The NOT EXPRESSED line for DeepSeek's DualPipe schedule (a stack trait)."""
    return ("DualPipe pipeline schedule (stack " + spec.stack + "; deepseek-ai/DualPipe, "
            f"bubble (pp/2-1) slots): {target} runs 1F1B (interleaved with vpp > 1), a larger "
            "bubble" + ("; the EP all-to-all overlap is written as batch-level EP overlap"
                        if spec.megatron_ep_overlap else ""))


def recompute_arguments(spec: ExportSpec, unsupported: list[str]
                        ) -> list[tuple[str, str | None]]:
    """--recompute-granularity and its method, layers and modules (TransformerConfig
    recompute_granularity / recompute_method / recompute_num_layers / recompute_modules)."""
    if spec.checkpointing == "full":
        share = spec.recompute_blocks_per_chunk
        if share is None:
            return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                    ("--recompute-num-layers", "1")]
        blocks, exact = share
        if not exact:
            unsupported.append(f"recompute_block_fraction {spec.recompute_block_fraction:g} "
                               "is not a whole number of blocks per pipeline chunk: "
                               f"--recompute-num-layers {blocks} written")
        return [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                ("--recompute-num-layers", str(blocks))]
    if spec.checkpointing != "selective":
        return []
    args: list[tuple[str, str | None]] = [("--recompute-granularity", "selective")]
    if spec.recompute_modules is not None:  # None = Megatron's default, core_attn
        args.append(("--recompute-modules", " ".join(spec.recompute_modules)))
    if spec.recompute_block_fraction is not None:
        unsupported.append(f"recompute_block_fraction {spec.recompute_block_fraction:g} under "
                           "selective recompute (fms-fsdp's block-level checkpointing): "
                           "Megatron's selective recompute is per module")
    return args


# attention sinks with a gated FFN are read as GPT-OSS, whose FFN the model card calls SwiGLU
# but runs clamped and offset (a trial's sink model with a plain SwiGLU got it unsaid)
GPT_OSS_FFN_NOTE = ("attention sinks with a gated FFN read as GPT-OSS: its clamped, offset "
                    "gated FFN is written (quick-GELU gate, +1 on the linear half, clamp 7); "
                    "for a plain SwiGLU write {plain} instead")


def activation_arguments(g: Geometry, unsupported: list[str]) -> list[tuple[str, str | None]]:
    """The FFN activation's flag (Megatron-LM arguments.py: --swiglu, --squared-relu; GELU
    is the default, other activations have no flag)."""
    activation = g.activation_name
    if g.attention_sinks and g.glu:
        # GPT-OSS's clamped gated FFN, (up + 1) · x·sigmoid(1.702 x) clamped at 7, as
        # Megatron-LM's gpt-oss-20b.sh spells it (TransformerConfig glu_linear_offset,
        # activation_func_clamp_value; --quick-geglu)
        unsupported.append(GPT_OSS_FFN_NOTE.format(plain="--swiglu"))
        return [("--quick-geglu", None), ("--glu-linear-offset", "1.0"),
                ("--activation-func-clamp-value", "7.0")]
    if activation == "geglu":
        unsupported.append("GeGLU has no Megatron-LM flag (--swiglu written: the same three "
                           "matrices, SiLU gate)")
    if g.glu:
        return [("--swiglu", None)]
    if activation == "squared_relu":
        return [("--squared-relu", None)]
    if activation == "relu":
        unsupported.append("ReLU has no Megatron-LM flag (GELU, the default, is written)")
    return []


def hybrid_arguments(spec: ExportSpec, unsupported: list[str]
                     ) -> list[tuple[str, str | None]]:
    """A hybrid model's flags: its layer pattern (--hybrid-layer-pattern, "the sole
    indicator that a hybrid model is being run", Megatron-LM arguments.py @ d98e8a64dd)
    and its Mamba mixer (TransformerConfig mamba_num_heads, mamba_head_dim,
    mamba_state_dim, mamba_num_groups)."""
    g = spec.geometry
    # hybrid_builders.py (the builder pretrain_hybrid.py calls) refuses to build without --spec
    args: list[tuple[str, str | None]] = [
        ("--spec", "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec"),
        ("--hybrid-layer-pattern", spec.hybrid_layer_pattern())]
    if g.mamba is not None:
        args += [("--mamba-num-heads", str(g.mamba.heads)),
                 ("--mamba-head-dim", str(g.mamba.head_dim)),
                 ("--mamba-state-dim", str(g.mamba.state_dim)),
                 ("--mamba-num-groups", str(g.mamba.groups))]
        if g.moe is not None and g.moe.router is None:
            unsupported.append("the router's score function, expert-bias balancing and top-k "
                               "scaling (Nemotron 3: sigmoid, expert bias, 2.5) are not stated "
                               "(model.moe.router): add --moe-router-score-function, "
                               "--moe-router-enable-expert-bias and "
                               "--moe-router-topk-scaling-factor by hand")
        if not g.mamba.conv_bias:
            unsupported.append(MAMBA_CONV_BIAS_NOTE)
        if (g.mamba.conv_kernel, g.mamba.chunk_size) != (4, 128):
            unsupported.append(f"mamba conv_kernel {g.mamba.conv_kernel} / chunk_size "
                               f"{g.mamba.chunk_size}: MambaMixer's d_conv and chunk_size "
                               "(4, 128) have no flag")
    if g.gdn is not None:  # TransformerConfig linear_* fields; the hybrid stack's 'G' layers
        args += gdn_arguments(g, unsupported)
        if not g.mtp_layers:  # a stated MTP depth is written with the pattern
            unsupported.append(QWEN3_NEXT_HYBRID_MTP_NOTE)
    return args


def rope_and_norm_arguments(g: Geometry) -> list[tuple[str, str | None]]:
    """The rotary base and share and zero-centred norm gains where the model states them
    (Megatron-LM --rotary-base, --rotary-percent, --apply-layernorm-1p; unstated, Megatron's
    defaults: base 10000, the whole head, plain gains)."""
    args: list[tuple[str, str | None]] = []
    if g.rope_base is not None:  # an integer flag (arguments.py: type=int)
        args.append(("--rotary-base", str(round(g.rope_base))))
    if g.rope_fraction != 1.0:
        args.append(("--rotary-percent", f"{g.rope_fraction:g}"))
    if g.zero_centered_norm:
        args.append(("--apply-layernorm-1p", None))
    return args


# What Qwen3-Next's model carries that mosaic's model block does not (Megatron-Bridge
# Qwen3NextBridge.provider_bridge and recipes/qwen/qwen3_next.py @ v0.5.1)
# With Megatron-LM's unified hybrid pattern, MTP layers follow the main pattern after '/'
# separators, one segment per MTP depth (arguments.py @ d98e8a64dd: "Use unified
# --hybrid-layer-pattern with '/' separator (e.g., 'M*M*/MM/MM')").
QWEN3_NEXT_RECIPE_NOTE = ("Qwen3-Next's recipe trains one MTP module, which this job does not "
                          "state: state model.mtp_layers with model.mtp_pattern, or set "
                          "mtp_num_layers by hand")
QWEN3_NEXT_HYBRID_MTP_NOTE = ("Qwen3-Next's recipe trains one MTP module, which this job "
                          "does not state (model.mtp_layers with model.mtp_pattern): add it "
                          "as a '/'-separated segment after "
                          "--hybrid-layer-pattern's main pattern (Megatron-LM's unified "
                          "hybrid pattern, e.g. 'M*M*/MM') with --mtp-num-layers 1")
# megatron/core/ssm/mamba_mixer.py @ d98e8a64dd: MambaMixer asserts conv_bias
MAMBA_CONV_BIAS_NOTE = ("mamba conv_bias false: Megatron-Core's MambaMixer always builds its "
                        "convolution with a bias (it asserts conv_bias)")


def gdn_arguments(g: Geometry, unsupported: list[str]) -> list[tuple[str, str | None]]:
    """The gated DeltaNet mixer's flags (TransformerConfig linear_num_key_heads,
    linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
    linear_conv_kernel_dim @ d98e8a64dd; GatedDeltaNet fixes its chunk at 64)."""
    gdn = g.gdn
    assert gdn is not None
    if gdn.chunk_size != 64:
        unsupported.append(f"gdn chunk_size {gdn.chunk_size}: GatedDeltaNet's chunk (64) has "
                           "no flag")
    return [("--linear-num-key-heads", str(gdn.key_heads)),
            ("--linear-num-value-heads", str(gdn.value_heads)),
            ("--linear-key-head-dim", str(gdn.key_head_dim)),
            ("--linear-value-head-dim", str(gdn.value_head_dim)),
            ("--linear-conv-kernel-dim", str(gdn.conv_kernel))]


def render(spec: ExportSpec) -> ExportResult:
    """One ``--flag value`` per line, comments first, values with shell characters in single
    quotes: launch as ``grep -v '^#' FILE | xargs torchrun pretrain_gpt.py`` (xargs removes
    the quotes; an unquoted ``$(...)`` would pass them on)."""
    args, unsupported = arguments(spec)
    lines = [f"# {line}" for line in header_lines(spec, "Megatron-Core", unsupported)]
    script = "pretrain_hybrid.py" if spec.geometry.is_hybrid else "pretrain_gpt.py"
    if spec.geometry.is_hybrid:
        lines.append("# a hybrid model: launch Megatron-LM's pretrain_hybrid.py (not "
                     "pretrain_gpt.py) with these arguments")
    lines.append(f"# launch: grep -v '^#' FILE | xargs torchrun ... {script} (xargs removes "
                 "the single quotes)")
    lines.append("# Megatron derives dp from the world size: launch on exactly "
                 f"{spec.n_devices} GPUs")
    for flag, value in args:
        if flag in ("--recompute-modules", "--spec"):  # nargs: one word per value
            lines.append(f"{flag} {value}")
        else:
            lines.append(flag if value is None else f"{flag} {_quote(value)}")
    return ExportResult("megatron", "\n".join(lines) + "\n", ".args", unsupported)


def _quote(value: str) -> str:
    return f"'{value}'" if any(c in value for c in "()[]*+ |") else value
