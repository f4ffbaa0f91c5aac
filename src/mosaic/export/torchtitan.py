"""A torchtitan ``--job.config_file`` TOML (torchtitan v0.2.x ``JobConfig``).

Section and field names: pytorch/torchtitan ``torchtitan/config/job_config.py`` at tag
v0.2.2 (2026-02-20), the last release configured by TOML files (later releases take a
Python ``Trainer.Config``; ``torchtitan/config/README.md``). torchtitan defines model
dimensions in Python (a model ``name`` and a registered ``flavor``), so the geometry is
written as comments for the flavor you register.
"""

from __future__ import annotations

import math
from typing import Any

from mosaic.arch.geometry import AttentionKind, NormKind
from mosaic.export.spec import (
    ExportSpec,
    bias_free_notes,
    fsdp_for_zero,
    lm_head_bias_notes,
    projection_qk_norm_notes,
    unexpressed,
    window_note,
)
from mosaic.export.targets import ExportResult, header_lines
from mosaic.perf.pipeline_layout import chunk_block_counts
from mosaic.stacks import default_loss, get_stack


def model_name(spec: ExportSpec) -> str:
    """The torchtitan model family closest to the geometry."""
    g = spec.geometry
    if g.attention is AttentionKind.MLA:
        return "deepseek_v3"
    if g.attention_sinks:
        return "gpt_oss"
    if g.qk_norm:
        return "qwen3"
    return "llama4" if g.moe else "llama3"


def llama4_moe_step(spec: ExportSpec) -> int | None:
    """torchtitan llama4's ``interleave_moe_layer_step`` that builds the geometry's MoE
    blocks, None where none does. Block i (from 0) is MoE where (i + 1) % step == 0
    (``llama4/model/model.py`` @ v0.2.2), i.e. a dense prefix of step - 1 blocks and then
    every step-th: mosaic's dense_layers = step - 1 and moe_every = step (Llama 4 Maverick:
    step 2, the default; a trial's note asked for 1, which made every block MoE)."""
    moe = spec.geometry.moe
    if moe is None or moe.dense_layers != moe.moe_every - 1:
        return None
    return moe.moe_every


def end_stage_weight(spec: ExportSpec) -> int:
    """``pipeline_parallel_first/last_stage_less_layers``: the layers the embedding and the
    output each weigh in torchtitan's split (``generate_llm_fqn_per_model_part``, v0.2.2
    default 1: the end stages get a layer fewer). 1 where the costed split accounts for them
    (vocab_in_pipeline_split), else 0: the even split mosaic costed."""
    return 1 if spec.vocab_in_pipeline_split else 0


def layers_per_stage(layers: int, stages: int, end_weight: int = 1) -> int | None:
    """``pipeline_parallel_layers_per_stage`` giving ``stages`` virtual stages.

    torchtitan v0.2.2 (``torchtitan/distributed/pipeline_parallel.py``) makes
    ceil((layers + 2·end_weight) / layers_per_stage) stages, the embedding and the output
    each weighing ``end_weight`` layers (:func:`end_stage_weight`).
    """
    weighted = layers + 2 * end_weight
    per_stage = math.ceil(weighted / stages)
    return per_stage if math.ceil(weighted / per_stage) == stages else None


def module_notes(spec: ExportSpec) -> list[str]:
    """Modules the chosen family builds otherwise than the model (torchtitan v0.2.2): every
    family's FFN is SiLU-gated, ``w2(F.silu(w1(x)) * w3(x))`` (gpt_oss's a clamped SwiGLU,
    ``models/gpt_oss/model/moe.py``), with plain RMSNorm gains; llama3, llama4, qwen3 and
    deepseek_v3 build every linear with ``bias=False`` (e.g. ``models/qwen3/model/model.py``
    l. 184-189, 326-331), gpt_oss biases its attention and experts (``models/gpt_oss``)."""
    g, family = spec.geometry, model_name(spec)
    notes = [] if family == "gpt_oss" else bias_free_notes(
        g, f"torchtitan's {family} family", " (the flavor must change the modules)")
    if family == "gpt_oss" and not (g.qkv_bias and g.output_bias):
        # gpt_oss's Attention: wq, wk, wv and wo with bias=True (model.py l. 177-192)
        notes.append("torchtitan's gpt_oss family biases the Q, K, V and output projections, "
                     "which this model leaves "
                     + ("unbiased" if not (g.qkv_bias or g.output_bias) else "partly unbiased")
                     + ": the exported model has a few more parameters than the costed one")
    if g.qk_norm and family == "gpt_oss":  # its Attention (model.py) has no q/k norms
        notes.append("QK-norm: torchtitan's gpt_oss family has no q/k norms; the flavor "
                     "must add them")
    if g.activation_name != "swiglu":
        notes.append(f"FFN activation {g.activation_name}: torchtitan's {family} family's "
                     "FFNs are SiLU-gated (SwiGLU); the flavor must change the module")
    if g.zero_centered_norm:
        notes.append("zero-centred norm gains (1 + w): torchtitan's RMSNorm stores w; the "
                     "flavor must change the module")
    return notes


def job_config(spec: ExportSpec) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The TOML tables and what torchtitan cannot express."""
    g = spec.geometry
    step = llama4_moe_step(spec)
    every_block = (f", with interleave_moe_layer_step={step}" + (
        " (its default 2 makes every second block MoE)" if step == 1 else "")
        if model_name(spec) == "llama4" and step is not None else "")
    unsupported = [
        "model dimensions: torchtitan reads them from a registered flavor (Python), "
        f"not from TOML; register flavor 'mosaic' of '{model_name(spec)}' with the "
        f"dimensions in the header{every_block}"]
    unsupported += family_notes(spec) + sharding_notes(spec)
    if g.rope_base is not None or g.rope_fraction != 1.0:
        unsupported.append(f"RoPE base {g.rope_base or 'unstated'} and share "
                           f"{g.rope_fraction:g}: set rope_theta in the flavor (torchtitan's "
                           "default is 10000)")
    if g.gated_attention or g.attention_output_gate:
        unsupported.append("an attention output gate: no torchtitan v0.2.2 model family "
                           "has one (the flavor must add it)")
    if g.sliding_window is not None:
        unsupported.append(window_note(g) + ": set it in the flavor")
    unsupported += projection_qk_norm_notes(g, "the qwen3 family's per-head norms")
    unsupported += lm_head_bias_notes(g, "torchtitan")
    if g.norm is NormKind.LAYERNORM:
        unsupported.append("LayerNorm: torchtitan's model families normalise with RMSNorm "
                           "(the flavor must change the module)")
    unsupported += module_notes(spec)
    if spec.tp > 1 and not spec.sequence_parallel:
        unsupported.append("tensor parallelism without sequence parallelism (torchtitan's TP "
                           "always shards the sequence)")
    if g.moe and spec.etp not in (1, spec.tp):
        unsupported.append(f"etp={spec.etp}: torchtitan supports etp = 1 or etp = tp")
    if spec.dispatcher == "hybridep":
        unsupported.append("HybridEP dispatcher: torchtitan offers 'standard' or 'deepep'")
    deepep = spec.dispatcher == "deepep" and not (g.moe and spec.etp > 1)
    if spec.dispatcher == "deepep" and not deepep:
        # "DeepEP with Expert Tensor Parallelism (ETP) is not supported yet"
        # (NotImplementedError, torchtitan/models/llama4/infra/parallelize.py l. 121-125 and
        # deepseek_v3 l. 107-111 @ v0.2.2, 73a0e69): the file would stop at start-up
        unsupported.append(f"DeepEP dispatcher with etp {spec.etp}: torchtitan v0.2.2 runs "
                           "DeepEP with etp 1 only (NotImplementedError otherwise); written "
                           "as expert_parallel_comm_backend 'standard'")
    if spec.dispatcher == "deepep" and model_name(spec) == "gpt_oss":
        # models/gpt_oss/infra/parallelize.py @ v0.2.2 has no DeepEP path
        unsupported.append("DeepEP dispatcher: torchtitan's gpt_oss family dispatches with "
                           "its standard all-to-all whatever expert_parallel_comm_backend "
                           "says")
    if g.tied_embeddings and model_name(spec) != "qwen3":
        # only qwen3's model args carry enable_weight_tying in v0.2.2
        unsupported.append(f"tied input and output embeddings: torchtitan's "
                           f"{model_name(spec)} family unties them (only qwen3 has "
                           "enable_weight_tying); the flavor's model must tie them")
    unsupported += spec.routing_notes() + router_notes(spec)
    if spec.capacity_factor is not None:  # torchtitan v0.2.2 models/moe: no capacity
        unsupported.append(f"token_drop routing (capacity factor {spec.capacity_factor:g}"
                           + (", padded" if spec.pad_to_capacity else "")
                           + "): torchtitan's MoE routes dropless")
    if spec.optimizer == "muon":
        unsupported.append("Muon optimizer (torchtitan v0.2.2 optimizers: AdamW, Adam)")
    if spec.precision == "fp16":
        unsupported.append("fp16 mixed precision (torchtitan: bfloat16 or float32)")
    if spec.precision == "fp4":
        unsupported.append("precision nvfp4: torchtitan v0.2.2's quantize converters offer "
                           "float8 and MXFP8 (an experimental NVFP4 converter through TorchAO "
                           "came later, torchtitan/components/quantization/nvfp4.md on main); "
                           "exported in bf16")
    replicate, shard = spec.dp, 1
    if fsdp_for_zero(spec.sharding) == "fsdp":  # FSDP2 for zero1, zero2 and fsdp
        replicate, shard = 1, spec.dp
    elif spec.sharding == "hsdp":
        replicate, shard = spec.hsdp_replicas, spec.dp // spec.hsdp_replicas
    if shard == 1 and spec.cp == 1 and (spec.tp > 1 or spec.pp > 1) and (
            spec.precision != "fp32"):
        # maybe_enable_amp: mixed precision comes from fully_shard (FSDP on: a shard degree
        # above 1, or cp > 1; parallel_dims.fsdp_enabled), or from autocast for DDP alone;
        # with TP or PP and no FSDP it is disabled (torchtitan/distributed/utils.py @ v0.2.2;
        # a trial and a review: dp 1 under zero1 is the same case)
        unsupported.append("no FSDP shard degree with tp or pp > 1 (data_parallel_shard_degree "
                           "1, cp 1): torchtitan v0.2.2 then trains in fp32 ('Mixed precision "
                           f"training is disabled'), not the costed {spec.precision}; shard "
                           "with FSDP over 2 or more ranks to train in mixed precision")
    if replicate > 1 and shard == 1 and spec.cp == 1 and (spec.tp > 1 or spec.pp > 1):
        # DDP alone (no FSDP) beside tp or pp: "DDP has not supported > 1D parallelism"
        # (torchtitan/models/llama3/infra/parallelize.py l. 151, llama4 l. 219, qwen3,
        # deepseek_v3, gpt_oss @ v0.2.2, 73a0e69: world size != the replicate mesh)
        unsupported.append(f"sharding {spec.sharding} (DDP, data_parallel_replicate_degree "
                           f"{replicate}) with tp {spec.tp} x pp {spec.pp}: torchtitan v0.2.2 "
                           "runs DDP only as the sole parallelism ('DDP has not supported > "
                           "1D parallelism'), so this file does not start; shard with FSDP "
                           "(sharding fsdp, zero1/zero2 or hsdp)")
    # torchtitan v0.2.2 carves the expert groups out of the FSDP shard ranks
    # (distributed/parallel_dims.py: efsdp = dp_shard·cp·tp / (etp·ep) must be a whole >= 1)
    sharded = shard * spec.cp * spec.tp
    if spec.ep > 1 and sharded % (spec.etp * spec.ep):
        unsupported.append(
            f"ep={spec.ep} (etp {spec.etp}) over {sharded} FSDP-shard ranks "
            f"(data_parallel_shard_degree {shard} x cp {spec.cp} x tp {spec.tp}): torchtitan "
            "builds expert groups inside the shard dimension (parallel_dims.py efsdp), so "
            "this file does not start; shard over a multiple of ep·etp ranks (sharding fsdp, "
            "or an hsdp shard group of at least ep) or lower ep")
    # torchtitan: local_batch_size is one DP rank's batch per forward; with PP it is split
    # into pipeline micro-batches of pipeline_parallel_microbatch_size, without PP the
    # global batch beyond local·dp becomes gradient accumulation (job_config.py docs); a
    # stated batch.local_seqs is that per-pass batch under PP (one schedule per pass).
    local = ((spec.local_seqs or spec.global_seqs // spec.dp) if spec.pp > 1
             else spec.micro_seqs)
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": "never" if spec.sharding in ("zero1", "zero2")
        else "default",
        "tensor_parallel_degree": spec.tp,
        "pipeline_parallel_degree": spec.pp,
        "pipeline_parallel_microbatch_size": spec.micro_seqs,
        "context_parallel_degree": spec.cp,
        "expert_parallel_degree": spec.ep,
        "expert_tensor_parallel_degree": spec.etp,
        "expert_parallel_comm_backend": "deepep" if deepep else "standard",
    }
    written = set()
    if spec.pp > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B" if spec.vpp > 1 \
            else "1F1B"
        weight = end_stage_weight(spec)
        parallelism["pipeline_parallel_first_stage_less_layers"] = weight
        parallelism["pipeline_parallel_last_stage_less_layers"] = weight
        stages = spec.pp * spec.vpp
        costed = costed_stage_blocks(spec)
        compact = stage_count_settings(spec, weight)
        if compact is not None and file_stage_blocks(
                spec, parallelism | compact) == costed:
            parallelism |= compact  # torchtitan's own split is the costed one
        elif spec.pipeline_layout is not None or stages <= g.layers:
            parallelism["module_fqns_per_model_part"] = model_parts(costed)
        else:
            unsupported.append(f"pp {spec.pp} x vpp {spec.vpp} = {stages} virtual pipeline "
                               f"stages for {g.layers} transformer blocks: more stages "
                               "than blocks")
        if spec.pipeline_layout is not None:
            written.add("pipeline_layout")  # its blocks are the parts'; see family_notes

    if spec.tp_comm_overlap and spec.tp > 1:  # ParallelismConfig.enable_async_tensor_parallel
        written.add("tp_comm_overlap")
        if not compiles_model(spec):
            # maybe_enable_async_tp raises "Async TP requires 'model' in --compile.components
            # and --compile.enable" (torchtitan/distributed/tensor_parallel.py l. 20-23 @
            # v0.2.2, 73a0e69): the file would stop at start-up
            unsupported.append("tp_comm_overlap without torch.compile: torchtitan's async TP "
                               "needs the compiled model (it raises otherwise); "
                               "enable_async_tensor_parallel not written")
        else:
            parallelism["enable_async_tensor_parallel"] = True
    if spec.pipeline_schedule == "dualpipe" and spec.pp > 1:
        unsupported.append("DualPipe pipeline schedule (stack " + spec.stack + "; arXiv:"
                           "2412.19437 Sec. 3.2.1): torchtitan's pipeline_parallel_schedule "
                           "'DualPipeV' is the cut-in-half variant (2·pp stages, no duplicated "
                           "parameters), not written; exported as 1F1B")
        written.add("pipeline_schedule")
    converters, quantize = fp8_converters(spec, unsupported)
    written.add("quantised_gemms")  # (fp8_converters writes the expert converter alone)
    tables: dict[str, dict[str, Any]] = {
        "job": {"description": f"mosaic export of {spec.source}"},
        "model": {"name": model_name(spec), "flavor": "mosaic", "converters": converters},
        "training": {
            "local_batch_size": local,
            "global_batch_size": spec.global_seqs,
            "seq_len": spec.seq_len,
            "mixed_precision_param": "float32" if spec.precision == "fp32" else "bfloat16",
        } | ({} if spec.train_steps is None else {"steps": spec.train_steps}),
        "parallelism": parallelism,
        "activation_checkpoint": activation_checkpoint_table(spec, parallelism, written,
                                                             unsupported),
    } | quantize
    tables["compile"] = compile_table(spec)
    written.add("torch_compile")
    if spec.cross_entropy in (None, "compiled", "fp32_upcast"):  # [compile] says which
        written.add("cross_entropy")
    unsupported += unexpressed(spec, written, "torchtitan v0.2.2")
    return tables, unsupported


def stage_blocks(layers: int, stages: int, input_weight: int, output_weight: int
                 ) -> list[int] | None:
    """Transformer blocks in each of ``stages`` parts as torchtitan v0.2.2's
    ``generate_llm_fqn_per_model_part`` splits them (distributed/pipeline_parallel.py):
    (layers + weights) // stages effective layers a part, the first remainder parts one
    more, the embedding and the output taking ``input_weight`` / ``output_weight`` of the
    first and last: the perf model's extra_first split of the effective layers
    (:func:`~mosaic.perf.pipeline_layout.chunk_block_counts`) less the end weights. None
    where it refuses the split (an empty stage, or an end weight above a stage's layers)."""
    effective = layers + input_weight + output_weight
    if stages == 1:
        return [layers]
    if effective // stages == 0 or max(input_weight, output_weight) > effective // stages:
        return None  # its ValueErrors
    counts = chunk_block_counts(effective, stages, "extra_first")
    counts[0] -= input_weight
    counts[-1] -= output_weight
    return counts


def costed_stage_blocks(spec: ExportSpec) -> list[int]:
    """Transformer blocks of each of the pp·vpp virtual stages as mosaic costed the plan
    (:meth:`ExportSpec.costed_chunk_blocks`: a pipeline layout's chunks, else the split of
    the job's stack, torchtitan's own for a torchtitan job) or, without a layout and with
    the embedding and the loss in the split, torchtitan's with
    weights of 1, which is mosaic's equal slots where pp·vpp divides layers + 2 (the rule
    perf.constraints sets)."""
    if spec.pipeline_layout is None and spec.vocab_in_pipeline_split:
        weighted = stage_blocks(spec.geometry.layers, spec.pp * spec.vpp, 1, 1)
        if weighted is not None:
            return weighted
    return spec.costed_chunk_blocks()


def stage_count_settings(spec: ExportSpec, weight: int) -> dict[str, Any] | None:
    """The ``[parallelism]`` keys that make torchtitan build pp·vpp virtual stages itself:
    none for 1F1B (one stage a rank) or an interleaved schedule's default of two a rank,
    else the ``pipeline_parallel_layers_per_stage`` that yields them
    (:func:`layers_per_stage`); None where none does."""
    stages = spec.pp * spec.vpp
    if spec.vpp == 1:
        return {}
    per_stage = layers_per_stage(spec.geometry.layers, stages, weight)
    if per_stage is not None:
        return {"pipeline_parallel_layers_per_stage": per_stage}
    if spec.vpp == 2:  # torchtitan's default for a multi-stage schedule: 2 stages per rank
        return {}
    return None


def file_stage_blocks(spec: ExportSpec, parallelism: dict[str, Any]) -> list[int] | None:
    """Transformer blocks of each virtual stage under the file's ``[parallelism]``: its
    ``module_fqns_per_model_part``, else torchtitan's own split (:func:`stage_blocks`) into
    ceil((layers + first + last) / pipeline_parallel_layers_per_stage) stages, or pp
    stages for 1F1B and 2·pp for an interleaved schedule without it (pipeline_llm @ v0.2.2).
    None where torchtitan would refuse the split."""
    layers = spec.geometry.layers
    parts = parallelism.get("module_fqns_per_model_part")
    if parts is not None:
        return [sum(name.startswith("layers.") for name in part) for part in parts]
    first = parallelism["pipeline_parallel_first_stage_less_layers"]
    last = parallelism["pipeline_parallel_last_stage_less_layers"]
    per_stage = parallelism.get("pipeline_parallel_layers_per_stage")
    if per_stage is not None:
        stages = math.ceil((layers + first + last) / per_stage)
    else:
        stages = spec.pp * (1 if parallelism["pipeline_parallel_schedule"] == "1F1B" else 2)
    return stage_blocks(layers, stages, first, last)


def rank_blocks(spec: ExportSpec, parallelism: dict[str, Any]) -> list[int] | None:
    """Transformer blocks each pipeline rank holds under the file's ``[parallelism]``
    (:func:`file_stage_blocks`): a looped schedule puts stages r, r + pp, ... on rank r
    (pipeline_module_split ``_get_stage_indices`` @ v0.2.2). None where torchtitan would
    refuse the split."""
    layers, pp = spec.geometry.layers, spec.pp
    if pp == 1:
        return [layers]
    counts = file_stage_blocks(spec, parallelism)
    if counts is None or len(counts) % pp:
        return None
    return [sum(counts[rank::pp]) for rank in range(pp)]


def activation_checkpoint_table(spec: ExportSpec, parallelism: dict[str, Any],
                                written: set[str], unsupported: list[str]) -> dict[str, Any]:
    """``[activation_checkpoint]``: the job's mode ('op' selective: torch's per-op SAC), and
    full recompute of a share 1/n of the blocks as torchtitan's layer SAC, which wraps every
    n-th block of a rank in a whole-block checkpoint (``selective_ac_option = "n"``,
    torchtitan/distributed/activation_checkpoint.py ``_apply_layer_sac`` @ v0.2.2: a
    module-level block counter, ``count % n == 0``, which ``apply_ac`` advances over every
    model part of the process, so a rank checkpoints floor(its blocks / n) over all its
    virtual stages, counted on the split the file writes, :func:`rank_blocks`); a share that
    is no 1/n is left to the NOT EXPRESSED line (a trial: 0.5 was written as every block)."""
    fraction = spec.recompute_block_fraction
    if spec.checkpointing == "full" and fraction is not None and 0 < fraction < 1:
        every = round(1 / fraction)
        if every >= 2 and abs(1 / fraction - every) < 1e-6:
            written.add("recompute_block_fraction")
            note = layer_sac_note(spec, parallelism, fraction, every)
            if note:
                unsupported.append(note)
            return {"mode": "selective", "selective_ac_option": str(every)}
    return {"mode": spec.checkpointing} | (
        {"selective_ac_option": "op"} if spec.checkpointing == "selective" else {})


def layer_sac_note(spec: ExportSpec, parallelism: dict[str, Any], fraction: float,
                   every: int) -> str | None:
    """What layer SAC every ``every``-th block checkpoints on each rank where that is not
    ``fraction`` of its blocks, the ranks named where their block counts differ."""
    counts = rank_blocks(spec, parallelism)
    split = ""
    if counts is None:  # torchtitan refuses the split (said elsewhere): an even one
        counts, split = [spec.geometry.layers // spec.pp] * spec.pp, \
            " (counted on an even pipeline split)"
    if not any(blocks % every for blocks in counts):
        return None
    head = (f"recompute_block_fraction {fraction:g}: torchtitan checkpoints one block in "
            f"every {every}")
    if len(set(counts)) == 1:
        blocks = counts[0]
        return (f"{head}, {blocks // every} of a rank's {blocks}, not "
                f"{fraction * blocks:g}{split}")
    groups, start = [], 0
    for rank in range(1, len(counts) + 1):
        if rank == len(counts) or counts[rank] != counts[start]:
            ranks = f"rank {start}" if rank - start == 1 else f"ranks {start}-{rank - 1}"
            blocks = counts[start]
            exact = "" if blocks % every == 0 else f" (not {fraction * blocks:.3g})"
            groups.append(f"{ranks}: {blocks // every} of {blocks}{exact}")
            start = rank
    return (f"{head} of a rank's blocks, its counter running over all the rank's virtual "
            f"stages; the file's pipeline split gives " + "; ".join(groups))


def compiles_model(spec: ExportSpec) -> bool:
    """Whether the file's ``[compile]`` compiles the model (:func:`compile_table`), which
    torchtitan v0.2.2's async TP requires and its MX linear converter refuses beside TP."""
    return "model" in compile_table(spec).get("components", [])


def compile_table(spec: ExportSpec) -> dict[str, Any]:
    """``[compile]`` as costed: ``enable`` is the job's torch_compile, else the stack's
    default (torchtitan's is on: mosaic costs Inductor's kernels, while v0.2.2's
    Compile.enable defaults to false); ``components`` names the loss only where mosaic costed
    a compiled loss (Compile.components defaults to ['model', 'loss'], and
    components/loss.py compiles the loss then: 4 B per logit against the eager fp32 loss's
    12, docs/memory.md; a job that states none gets it, :func:`mosaic.stacks.default_loss`).
    The stack's default is torchtitan's whatever stack the job was costed for: the file runs
    torchtitan, and the export's note costs it so (a trial: a Megatron-Core plan was written
    with compile off and costed with it on)."""
    traits = get_stack("torchtitan")
    enable = traits.torch_compile if spec.torch_compile is None else spec.torch_compile
    if not enable:  # an eager model with a stated compiled loss compiles the loss alone
        if spec.cross_entropy == "compiled":
            return {"enable": True, "components": ["loss"]}
        return {"enable": False}
    loss = spec.cross_entropy or default_loss(traits, compiles_model=True)
    if loss == "compiled":
        return {"enable": True, "components": ["model", "loss"]}
    return {"enable": True, "components": ["model"]}  # the stated eager loss


def family_notes(spec: ExportSpec) -> list[str]:
    """Parts of the model no torchtitan v0.2.2 family builds, so no flavor can state them
    (a trial found them dropped without a word): MTP modules (no family has them;
    ``DeepSeekV3ModelArgs`` has no such field), a dense prefix outside deepseek_v3 (llama4
    interleaves MoE blocks every ``interleave_moe_layer_step``, ``llama4/model/model.py``;
    qwen3 and gpt_oss make every block MoE), and a shared expert narrower or wider than the
    routed ones (``models/moe/moe.py``: shared width = num_shared_experts x the routed width;
    llama4 also derives its dense width from the same ``ffn_dim_multiplier``)."""
    g, family = spec.geometry, model_name(spec)
    notes = []
    if g.mtp_layers:
        notes.append(f"{g.mtp_layers} multi-token-prediction module(s): no torchtitan v0.2.2 "
                     "model family has MTP; exported without them")
    if g.moe is None:
        return notes
    if family == "llama4" and llama4_moe_step(spec) is None:
        notes.append(f"MoE blocks after {g.moe.dense_layers} dense first block(s), then every "
                     f"{g.moe.moe_every}: torchtitan's llama4 makes block i MoE where (i + 1) "
                     "% interleave_moe_layer_step == 0, which cannot place them so; the "
                     "flavor's model must")
    elif g.moe.dense_layers and family not in ("deepseek_v3", "llama4"):
        notes.append(f"{g.moe.dense_layers} dense first block(s) (ffn {g.ffn}): torchtitan's "
                     f"{family} family has no dense prefix; the flavor's model must add it")
    shared = g.moe.shared_expert_ffn
    if g.moe.shared_experts and shared is not None and shared != g.moe.expert_ffn:
        notes.append(f"shared expert width {shared} beside routed experts of "
                     f"{g.moe.expert_ffn}: torchtitan sizes a shared expert as the routed "
                     "width (models/moe/moe.py)")
    return notes


def router_notes(spec: ExportSpec) -> list[str]:
    """The router's settings for the flavor (torchtitan v0.2.2 ``models/moe/moe.py``
    ``MoEArgs``: score_func, route_norm, route_scale, num_expert_groups and
    num_limited_groups (node-limited routing); ``load_balance_coeff`` set runs the
    loss-free expert bias, and no auxiliary balance loss exists)."""
    g = spec.geometry
    if g.moe is None:
        return []
    notes = []
    loss_free = spec.router_balancing == "loss_free"
    if not loss_free:
        notes.append("aux_loss balancing: torchtitan v0.2.2 has no auxiliary balance loss; "
                     "its MoE balances by the expert bias (MoEArgs.load_balance_coeff 1e-3)")
    router = g.moe.router
    if router is not None:
        groups = (f", num_expert_groups={router.groups}, num_limited_groups="
                  f"{router.top_groups}" if router.limits_groups else "")
        notes.append(f"router ({router.describe()}): set the flavor's MoEArgs "
                     f"score_func={router.score!r}, route_norm={router.normalize_top_k}, "
                     f"route_scale={router.top_k_scaling:g}{groups}, load_balance_coeff="
                     + ("1e-3" if loss_free else "None (or 1e-3 for the expert bias)"))
    # MoEArgs defaults num_shared_experts=1 and score_before_experts=True (Llama 4's own:
    # the score scales the expert input); qwen3's flavors set 0 and False (models/moe/
    # moe.py, qwen3/__init__.py @ v0.2.2): a flavor leaving them gains a shared expert and
    # scales inputs where mosaic costed weighted outputs (a trial)
    notes.append(f"MoEArgs num_shared_experts={g.moe.shared_experts} and "
                 "score_before_experts=False (weights on the expert outputs; the defaults "
                 "are 1 and True)")
    return notes


def model_parts(counts: list[int]) -> list[list[str]]:
    """``module_fqns_per_model_part`` holding ``counts[i]`` transformer blocks in part i, in
    order, the embedding with the first part and the final norm and head with the last
    (module names as torchtitan v0.2.2 ``generate_llm_fqn_per_model_part`` writes them):
    the split mosaic costed where torchtitan's own would differ."""
    parts, start = [], 0
    for count in counts:
        parts.append([f"layers.{i}" for i in range(start, start + count)])
        start += count
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def sharding_notes(spec: ExportSpec) -> list[str]:
    """How a sharding mode torchtitan lacks is exported (FSDP2 only: fully_shard with
    reshard_after_forward; job_config.py fsdp_reshard_after_forward)."""
    from mosaic.stacks import get_stack

    notes = []
    offered = get_stack(spec.stack).layout_sharding
    if offered is not None and spec.sharding not in offered:
        notes.append(f"sharding {spec.sharding} is not among stack {spec.stack}'s modes "
                     f"({', '.join(offered)})")
    if spec.sharding == "zero2":
        notes.append("zero2 is not a torchtitan mode (FSDP2 only): exported as FSDP with "
                     "fsdp_reshard_after_forward 'never' (parameters gathered once per step "
                     "and kept until backward ends: ZeRO-2's traffic, but parameters are "
                     "sharded between steps)")
    elif spec.sharding == "zero1":
        notes.append("zero1 is not a torchtitan mode (FSDP2 only): exported as FSDP with "
                     "fsdp_reshard_after_forward 'never', which also shards gradients and "
                     "parameters between steps: its memory is FSDP's (gathered parameters "
                     "held through the step, reduce-scatter buffers), not zero1's as modelled")
    return notes


def fp8_converters(spec: ExportSpec, unsupported: list[str]
                   ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """``model.converters`` and the ``[quantize.*]`` tables for the FP8 recipe.

    torchtitan v0.2.2 (components/quantization/float8.py, mx.py; config/job_config.py):
    ``quantize.linear.float8`` is torchao Float8Linear, dynamic tensorwise scaling unless
    ``recipe_name`` is rowwise/rowwise_with_gw_hp, with FP8 FSDP all-gathers
    (``enable_fsdp_float8_all_gather``, not allowed with a recipe_name);
    ``quantize.grouped_mm.float8`` quantises the expert GEMMs named in ``fqns`` rowwise
    (prototype: asserts pp = cp = 1); ``quantize.linear.mx`` / ``quantize.grouped_mm.mx`` are
    MXFP8 (recipe mxfp8_cublas / mxfp8), which offer no FP8 all-gather."""
    g = spec.geometry
    recipe = spec.fp8_recipe
    if recipe == "none":
        return [], {}
    if spec.quantised_gemms == "routed_experts":
        return _expert_converters(spec, unsupported)
    if recipe == "mxfp8":
        converters = ["quantize.linear.mx"] + (["quantize.grouped_mm.mx"] if g.moe else [])
        tables: dict[str, dict[str, Any]] = {"quantize.linear.mx": {"recipe_name":
                                                                     "mxfp8_cublas"}}
        if spec.tp > 1 and compiles_model(spec):
            # MXLinearConverter asserts "TP not yet supported with torch.compile for mxfp8"
            # (torchtitan/components/quantization/mx.py l. 47-53 @ v0.2.2, 73a0e69)
            converters.remove("quantize.linear.mx")
            del tables["quantize.linear.mx"]
            unsupported.append(f"MXFP8 linear layers with tp {spec.tp}: torchtitan v0.2.2's MX "
                               "linear converter refuses TP under torch.compile; the dense "
                               "linears run in bf16 (set [compile] enable = false to add "
                               "quantize.linear.mx)")
        if g.moe:
            tables["quantize.grouped_mm.mx"] = {"recipe_name": "mxfp8", "fqns": ["experts"]}
        if spec.fp8_param_gather:
            unsupported.append("FP8 parameter all-gathers with MXFP8: torchtitan's MX "
                               "converters gather bf16")
        return converters, tables
    linear: dict[str, Any] = {}
    if recipe == "blockwise":
        linear["recipe_name"] = "rowwise"
        unsupported.append("fp8 recipe blockwise (1x128 / 128x128 blocks): torchtitan's float8 "
                           "recipes are tensorwise, rowwise and rowwise_with_gw_hp; exported "
                           "as rowwise")
        if spec.fp8_param_gather:
            unsupported.append("FP8 parameter all-gathers with a rowwise recipe "
                               "(torchtitan allows them with tensorwise only)")
    else:
        if recipe == "delayed":
            unsupported.append("fp8 recipe delayed (amax history): torchtitan's float8 scales "
                               "dynamically; exported as tensorwise current scaling")
        gathers = spec.fp8_param_gather and spec.sharding != "none"
        linear |= {"enable_fsdp_float8_all_gather": gathers,
                   "precompute_float8_dynamic_scale_for_fsdp": gathers}
    # the head (and the router) stay bf16, as torchtitan's own configs filter them
    # (tests/integration_tests/base_config.toml, deepseek_v3_16b.toml @ v0.2.2)
    linear["filter_fqns"] = ["output", "router.gate"] if g.moe else ["output"]
    converters = ["quantize.linear.float8"]
    tables = {"quantize.linear.float8": linear}
    if g.moe and (spec.pp > 1 or spec.cp > 1):
        # left out rather than written: the run would stop at the prototype's assertion
        unsupported.append("float8 expert GEMMs with pp or cp > 1: the torchtitan v0.2.2 "
                           "prototype asserts pp = cp = 1, so the experts run in bf16 here "
                           "(quantize.grouped_mm.float8 not written), where the prediction "
                           "costed them in FP8")
    elif g.moe:
        converters.append("quantize.grouped_mm.float8")
        tables["quantize.grouped_mm.float8"] = {"fqns": ["experts"]}
        if recipe != "blockwise":
            unsupported.append("expert GEMMs: torchtitan's float8 grouped GEMM scales rowwise, "
                               f"not {recipe}")
    return converters, tables


def _expert_converters(spec: ExportSpec, unsupported: list[str]
                       ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The routed experts' converter alone (quantised_gemms routed_experts), as the
    nebius/ml-cookbook DeepSeek-V3 recipe launches it: --model.converters
    quantize.grouped_mm.mx with fqns experts and recipe mxfp8; float8 grouped GEMMs
    otherwise (the v0.2.2 prototype, pp = cp = 1)."""
    if spec.fp8_recipe == "mxfp8":
        return ["quantize.grouped_mm.mx"], {
            "quantize.grouped_mm.mx": {"recipe_name": "mxfp8", "fqns": ["experts"]}}
    if spec.pp > 1 or spec.cp > 1:
        unsupported.append("float8 expert GEMMs with pp or cp > 1: the torchtitan v0.2.2 "
                           "prototype asserts pp = cp = 1; no converter written, so every "
                           "GEMM runs in bf16 where the prediction costed the experts in FP8")
        return [], {}
    unsupported.append(f"expert GEMMs: torchtitan's float8 grouped GEMM scales rowwise, not "
                       f"{spec.fp8_recipe}")
    return ["quantize.grouped_mm.float8"], {"quantize.grouped_mm.float8": {"fqns": ["experts"]}}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def render(spec: ExportSpec) -> ExportResult:
    """TOML text: header comments, then one table per section."""
    tables, unsupported = job_config(spec)
    lines = [f"# {line}" for line in header_lines(spec, "torchtitan", unsupported)]
    # TOML job files end with v0.2.2: later releases select a Python config with --module /
    # --config (torchtitan/config/README.md on main), so the file names its release
    lines.append("# launch (torchtitan v0.2.2, the last release read from TOML): torchrun "
                 f"--nproc_per_node {spec.gpus_per_node or 'GPUS_PER_NODE'} ... -m "
                 "torchtitan.train --job.config_file FILE")
    for name, table in tables.items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return ExportResult("torchtitan", "\n".join(lines) + "\n", ".toml", unsupported)
