"""The ``model``, ``parallelism`` and ``batch`` blocks -> the library's own objects.

One set of rules for job files and run records. Where a block leaves a field unstated
(``None``), the rule fills it in and appends one line to ``notes``. ``measured=True`` (a run
record: someone else's run) refuses to guess what sets its cost: the key/value heads of an
MHA/GQA model and the expert-parallel degree of an MoE run; a job (your own plan) takes
the documented default instead.
"""

from __future__ import annotations

from mosaic.arch.geometry import AttentionKind, Geometry, MLAConfig, MoEConfig, NormKind
from mosaic.config.blocks import BatchBlock, ModelBlock, ParallelismBlock
from mosaic.errors import MosaicInputError
from mosaic.limits import check_pipeline
from mosaic.perf.plan import Checkpointing, ParallelPlans, Sharding, single_plan
from mosaic.perf.workload import Dispatcher
from mosaic.stacks import MicroBatchDefault, get_stack

# The paper's runs use the GPT-2 BPE vocabulary and SwiGLU FFNs (Appendix A.1).
PAPER_VOCAB = 50257
PAPER_ACTIVATION = "swiglu"
GATED_ACTIVATIONS = frozenset({"swiglu", "geglu"})


def _heads(model: ModelBlock, attention: AttentionKind, measured: bool, notes: list[str]
           ) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim); MLA ignores kv_heads and head_dim (its dims are in mla)."""
    if model.heads is None:
        raise MosaicInputError("model.heads: not stated (null)")
    kv_heads, head_dim = model.kv_heads, model.head_dim
    if kv_heads is None:
        if attention is not AttentionKind.MLA and (measured or attention is AttentionKind.GQA):
            raise MosaicInputError("model.kv_heads: not stated (null)")
        kv_heads = model.heads
        why = "unused by MLA" if attention is AttentionKind.MLA else "MHA"
        notes.append(f"model.kv_heads not stated: set to heads ({why})")
    if head_dim is None:
        if attention is AttentionKind.MLA:
            assert model.mla is not None
            head_dim = model.mla.v_head_dim
            notes.append("model.head_dim unused by MLA (its dims are in model.mla): "
                         "set to v_head_dim")
        elif model.d_model % model.heads:
            raise MosaicInputError(f"model.head_dim: not stated and heads={model.heads} does "
                                   f"not divide d_model={model.d_model}")
        else:
            head_dim = model.d_model // model.heads
            notes.append(f"model.head_dim not stated: d_model/heads = {head_dim} assumed")
    return model.heads, kv_heads, head_dim


def _attention(model: ModelBlock) -> AttentionKind:
    if model.attention is not None:
        kind = AttentionKind(model.attention)
    elif model.mla is not None:
        kind = AttentionKind.MLA
    elif model.kv_heads is None or model.kv_heads == model.heads:
        kind = AttentionKind.MHA
    else:
        kind = AttentionKind.GQA
    if kind is AttentionKind.MLA and model.mla is None:
        raise MosaicInputError("model.mla: null, but MLA attention needs its dimensions")
    return kind


def _moe(model: ModelBlock, notes: list[str]) -> MoEConfig | None:
    moe = model.moe
    if moe is None:
        return None
    if moe.shared_experts and moe.shared_expert_ffn is None:
        notes.append("model.moe.shared_expert_ffn not stated: expert_ffn assumed")
    return MoEConfig(
        experts=moe.experts, top_k=moe.top_k, expert_ffn=moe.expert_ffn,
        shared_experts=moe.shared_experts, shared_expert_ffn=moe.shared_expert_ffn,
        dense_layers=moe.dense_layers, moe_every=moe.moe_every, expert_bias=moe.expert_bias,
        router_bias=moe.router_bias, shared_expert_gate=moe.shared_expert_gate)


def _ffn(model: ModelBlock, moe: MoEConfig | None, notes: list[str]) -> int:
    if model.ffn is not None:
        return model.ffn
    if moe is None:
        raise MosaicInputError("model.ffn: not stated (null) for a dense model")
    if moe.dense_layers or moe.moe_every > 1:
        raise MosaicInputError("model.ffn: not stated (null), but the model has dense blocks "
                               f"(moe.dense_layers={moe.dense_layers}, "
                               f"moe.moe_every={moe.moe_every}) that need it")
    notes.append("model.ffn not stated (every block is MoE): moe.expert_ffn used as a "
                 "placeholder (no dense block uses it; the split factor reads 1)")
    return moe.expert_ffn


def _default(value: object, field: str, default: object, notes: list[str], why: str) -> object:
    if value is not None:
        return value
    notes.append(f"{field} not stated: {default} assumed ({why})")
    return default


def geometry_from_model(model: ModelBlock, notes: list[str], *, measured: bool) -> Geometry:
    """The :class:`Geometry` of a model block (rules: docs/schema.md)."""
    attention = _attention(model)
    heads, kv_heads, head_dim = _heads(model, attention, measured, notes)
    moe = _moe(model, notes)
    activation = _default(model.activation, "model.activation", PAPER_ACTIVATION, notes,
                          "the paper's FFN, A.1")
    vocab = _default(model.vocab, "model.vocab", PAPER_VOCAB, notes, "GPT-2 BPE, paper A.1")
    tied = _default(model.tied_embeddings, "model.tied_embeddings", False, notes, "untied")
    norm = _default(model.norm, "model.norm", "layernorm", notes, "the paper's pre-LN, A.1")
    mtp = _default(model.mtp_layers, "model.mtp_layers", 0, notes, "no MTP modules")
    mla = None if model.mla is None else MLAConfig(
        kv_lora_rank=model.mla.kv_lora_rank, qk_nope_head_dim=model.mla.qk_nope_head_dim,
        qk_rope_head_dim=model.mla.qk_rope_head_dim, v_head_dim=model.mla.v_head_dim,
        q_lora_rank=model.mla.q_lora_rank)
    return Geometry(
        layers=model.layers, d_model=model.d_model, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, ffn=_ffn(model, moe, notes), vocab=int(vocab),  # type: ignore[arg-type]
        glu=activation in GATED_ACTIVATIONS, tied_embeddings=bool(tied), attention=attention,
        mla=mla if attention is AttentionKind.MLA else None,
        gated_attention=model.gated_attention, norm=NormKind(norm), moe=moe,
        qk_norm=model.qk_norm, qkv_bias=model.qkv_bias, output_bias=model.output_bias,
        attention_sinks=model.attention_sinks, mtp_layers=int(mtp),  # type: ignore[arg-type]
    )


def dispatcher_from_name(name: str | None) -> Dispatcher:
    """``parallelism.dispatcher``: a name containing deepep/hybridep/alltoall; None = alltoall."""
    stated = (name or "").strip().casefold().replace("-", "").replace("_", "")
    if not stated:
        return Dispatcher.ALLTOALL
    for dispatcher in (Dispatcher.HYBRIDEP, Dispatcher.DEEPEP, Dispatcher.ALLTOALL):
        if dispatcher.value in stated:
            return dispatcher
    allowed = ", ".join(d.value for d in Dispatcher)
    raise MosaicInputError(f"parallelism.dispatcher: {name!r} is not a known dispatcher; "
                           f"allowed: {allowed} (or a name containing one)")


def _stated(value: int | None, field: str, notes: list[str], why: str = "") -> int:
    if value is not None:
        return value
    notes.append(f"{field} not stated: 1 assumed{why}")
    return 1


def _vpp_and_micro(parallelism: ParallelismBlock, batch: BatchBlock, dp: int, stack: str,
                   notes: list[str]) -> tuple[int | None, int | None]:
    """(vpp, micro_seqs) with the stack's defaults where the input is silent.

    torchtitan splits the local batch into as many micro-batches as pipeline ranks
    (``pipeline_parallel_microbatches or pipeline_parallel_degree``) and runs at least two
    stages per rank when interleaved; JAX/XLA trainers process the whole per-device batch
    in one step unless accumulation is stated; Megatron-LM's micro-batch defaults to 1
    (traits and sources in ``mosaic/stacks/data/stacks.yaml``).
    """
    traits = get_stack(stack)
    vpp, micro = parallelism.vpp, batch.micro_seqs
    if vpp is None and parallelism.pp > 1 and traits.interleaved_vpp_default > 1:
        vpp = traits.interleaved_vpp_default
        notes.append(f"parallelism.vpp not stated: {vpp} assumed ({stack} interleaved "
                     "schedule, fewest stages per rank)")
    if micro is None:
        local = batch.global_seqs // dp
        why = ""
        if traits.micro_batch_default is MicroBatchDefault.LOCAL_BATCH_OVER_PP:
            micro = max(local // parallelism.pp, 1) if parallelism.pp > 1 else None
            why = (f"{stack} splits the local batch of {local} into pp={parallelism.pp} "
                   "micro-batches")
        elif traits.micro_batch_default is MicroBatchDefault.WHOLE_LOCAL_BATCH:
            micro = max(local, 1)
            why = f"{stack} runs the whole local batch of {local} in one step, no accumulation"
        if micro is not None:
            notes.append(f"batch.micro_seqs not stated: {micro} assumed ({why})")
    return vpp, micro


def data_parallel(parallelism: ParallelismBlock, n_devices: int | None, where: str) -> int:
    """``parallelism.dp``, or devices / (tp·pp·cp) when it is not stated."""
    if parallelism.dp is not None:
        return parallelism.dp
    if n_devices is None:
        raise MosaicInputError(f"{where}: give parallelism.dp or the number of devices")
    model_ranks = parallelism.tp * parallelism.pp * parallelism.cp
    if n_devices % model_ranks:
        raise MosaicInputError(f"{where}: {n_devices} devices are not a multiple of "
                               f"tp·pp·cp={model_ranks}")
    return n_devices // model_ranks


def plan_from_blocks(parallelism: ParallelismBlock, batch: BatchBlock, *, dp: int,
                     layers: int, is_moe: bool, stack: str, checkpointing: Checkpointing,
                     measured: bool, notes: list[str], where: str) -> ParallelPlans:
    """The length-1 :class:`ParallelPlans` of a parallelism and a batch block."""
    vpp, micro = _vpp_and_micro(parallelism, batch, dp, stack, notes)
    if is_moe and parallelism.ep is None and measured:
        # Expert parallelism sets the MoE layer's cost; guessing it would be a silent error.
        raise MosaicInputError("parallelism.ep: not stated (null) for an MoE run")
    if "sharding" not in parallelism.model_fields_set:
        notes.append(f"parallelism.sharding not stated: {parallelism.sharding} assumed")
    if parallelism.sharding == "hsdp" and parallelism.hsdp_shard is None:
        notes.append("parallelism.hsdp_shard not stated: the whole dp group assumed")
    check_pipeline(parallelism.pp, vpp or 1, layers, f"{where}: parallelism")
    sequence_parallel = parallelism.sequence_parallel
    if sequence_parallel is None:
        sequence_parallel = parallelism.tp > 1
        notes.append(f"parallelism.sequence_parallel not stated: {sequence_parallel} "
                     "assumed (on with tp > 1)")
    return single_plan(
        tp=parallelism.tp, pp=parallelism.pp,
        vpp=_stated(vpp, "parallelism.vpp", notes, " (no interleaving)"),
        cp=parallelism.cp, dp=dp,
        ep=_stated(parallelism.ep, "parallelism.ep", notes),
        etp=_stated(parallelism.etp, "parallelism.etp", notes,
                    " (Megatron-Core would default to tp)"),
        micro_batch=_stated(micro, "batch.micro_seqs", notes),
        sharding=Sharding.parse(parallelism.sharding),
        checkpointing=checkpointing,
        hsdp_shard=parallelism.hsdp_shard,
        sequence_parallel=sequence_parallel,
    )
