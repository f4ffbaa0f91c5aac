"""The ``parallelism`` and ``batch`` blocks -> a :class:`ParallelPlans` row and a dispatcher.

One set of rules for job files and run records. Where a block leaves a field unstated
(``None``), the rule fills it in (the stack's documented default where it has one) and
appends one line to ``notes``. ``measured=True`` (a run record) refuses to guess the
expert-parallel degree of an MoE run, which sets its cost; a job takes ep = 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mosaic.config.blocks import BatchBlock, ParallelismBlock
from mosaic.config.convert import MTP_LAYERS_FIELD, drop_unstated_note
from mosaic.config.recipes import RecipeQuery, recipe_sources, recipes
from mosaic.errors import MosaicInputError, shown
from mosaic.limits import check_pipeline
from mosaic.perf.attention_kernels import AttentionKernel, gpu_generation
from mosaic.perf.constraints import stated_dispatcher_refused
from mosaic.perf.pipeline_layout import (
    LOSS,
    MTP,
    Layouts,
    layout_vpp,
    parse_pipeline_layout,
    shape_key,
)
from mosaic.perf.plan import (
    Checkpointing,
    ParallelPlans,
    Sharding,
    default_sequence_parallel,
    single_plan,
)
from mosaic.perf.schedule import (
    interleaved_rounds,
    microbatches_per_schedule_of,
    runs_schedule_per_pass,
)
from mosaic.perf.workload import (
    Dispatcher,
    Fp8Recipe,
    default_fp8_recipe,
    experts_fuse_grouped_mlp,
    stated_fp8_recipe,
)
from mosaic.stacks import MicroBatchDefault, get_stack
from mosaic.stacks.registry import format_release, names_point_release, parse_release

if TYPE_CHECKING:
    from mosaic.arch import Geometry

# How the note on settings a stack's performance recipe chose begins.
RECIPE_NOTE = "recipe settings"
# Settings the recipe data records as the stacks set them but the model does not apply, and
# why. tp_comm_overlap: the TP-overlap term hides more than measured runs show (applied to the
# 41 published NeMo/Bridge runs whose recipes enable it, the cross-validated error rose to
# 12.1%; applied through the Bridge recipes, leave-one-source-out dense MAPE 7.9% -> 8.6%);
# such runs are predicted with their TP collectives exposed (docs/stacks.md).
RECIPE_SETTINGS_NOT_APPLIED = {
    "tp_comm_overlap": "mosaic's TP-overlap term hides more than measured runs show",
}
# How the note on a vpp the stack chose begins (predict_job quotes it in a layout error).
VPP_DEFAULT_NOTE = "parallelism.vpp not stated"
# Recipe settings keyed by the pipeline shape (pp x vpp): applied once the plan is known
# (:func:`resolve_pipeline_layouts`), with a note of their own.
PER_PIPELINE_SETTINGS = frozenset({"pipeline_layouts"})


# Megatron-Core's own name for the DeepEP/HybridEP path (--moe-token-dispatcher-type flex),
# whose backend defaults to DeepEP: TransformerConfig.moe_flex_dispatcher_backend = "deepep"
# (megatron/core/transformer/transformer_config.py @ d98e8a64dd)
FLEX_DISPATCHER = "flex"


def _dispatcher_key(name: str | None) -> str:
    return (name or "").strip().casefold().replace("-", "").replace("_", "")


def dispatcher_from_name(name: str | None) -> Dispatcher:
    """``parallelism.dispatcher``: a name containing deepep/hybridep/alltoall, or Megatron's
    ``flex`` (its default backend, DeepEP); None = alltoall."""
    stated = _dispatcher_key(name)
    if not stated:
        return Dispatcher.ALLTOALL
    if stated == FLEX_DISPATCHER:
        return Dispatcher.DEEPEP
    for dispatcher in (Dispatcher.HYBRIDEP, Dispatcher.DEEPEP, Dispatcher.ALLTOALL):
        if dispatcher.value in stated:
            return dispatcher
    allowed = ", ".join(d.value for d in Dispatcher)
    raise MosaicInputError(f"parallelism.dispatcher: {shown(name)} is not a known dispatcher; "
                           f"allowed: {allowed} (or a name containing one), or flex")


# The assumption line an MoE record or job gets when it names no dispatcher.
DISPATCHER_NOT_STATED = "parallelism.dispatcher not stated"


def dispatcher_for(name: str | None, stack: str, device_name: str, moe: bool,
                   notes: list[str]) -> Dispatcher:
    """The stated dispatcher; unstated on an MoE job, the stack's default on the device's GPU
    generation (stack trait ``moe_dispatcher``), else the pairwise all-to-all."""
    if _dispatcher_key(name) == FLEX_DISPATCHER:
        notes.append("parallelism.dispatcher flex: Megatron-Core's flex dispatcher with its "
                     "default backend, deepep (moe_flex_dispatcher_backend); state hybridep "
                     "for the HybridEP backend")
    if name is not None or not moe:
        return dispatcher_from_name(name)
    generation = gpu_generation(device_name)
    default = (get_stack(stack).moe_dispatcher or {}).get(generation or "")
    if default is None:
        notes.append(f"{DISPATCHER_NOT_STATED}: alltoall (the pairwise all-to-all)")
        return Dispatcher.ALLTOALL
    notes.append(f"{DISPATCHER_NOT_STATED}: {default} ({stack}'s default on {generation} GPUs)")
    return Dispatcher(default)


# How the note on an FP8 recipe the input leaves to the stack begins.
FP8_RECIPE_NOTE = "fp8 recipe not stated"


def fp8_recipe_for(precision: str, stack: str, notes: list[str]) -> Fp8Recipe:
    """The FP8 recipe of an input's ``precision`` (fp8-cs -> current, mxfp8 -> mxfp8, ...,
    NONE without FP8); for plain 'fp8' the stack's documented default (trait ``fp8_recipe``)
    or, where the stack documents none, :data:`ASSUMED_FP8_RECIPE`, with a note."""
    stated = stated_fp8_recipe(precision)
    if stated is not None:
        return stated
    recipe = default_fp8_recipe(stack)
    why = (f"{stack}'s default, docs/stacks.md" if get_stack(stack).fp8_recipe is not None
           else f"{stack} documents none; Transformer Engine's DelayedScaling default "
           "before Blackwell")
    notes.append(f"{FP8_RECIPE_NOTE}: {recipe} scaling assumed ({why})")
    return recipe


def recipe_defaults(stack: str, release_text: str | None, software: str | None,
                    geometry: Geometry | None, device_name: str, precision: str, moe: bool,
                    stated: frozenset[str], notes: list[str], *,
                    attention_kernel: str | None = None,
                    stated_routing: str | None = None) -> dict[str, Any]:
    """Settings the stack's performance recipe for this run chose (:mod:`mosaic.config.recipes`:
    release from ``release_text``, e.g. 'NeMo 26.06 container'; model by ``geometry``, None
    for entries that hold for every model); settings in ``stated`` are left to the input.
    ``attention_kernel``: the kernel the input states (None = the stack's); a recipe's FP8
    attention is not applied beside a kernel other than cuDNN. ``stated_routing``: the
    routing the input states, if any; a recipe's padding to capacity belongs to its own
    token-drop routing and is not applied beside another.
    Values use the job schema's spelling (``recompute`` is the plan's checkpointing)."""
    experts = None if geometry is None else (0 if geometry.moe is None
                                             else geometry.moe.experts)
    query = RecipeQuery(
        stack=stack, software=software, release=parse_release(release_text),
        point_release=names_point_release(release_text),
        device_name=device_name, generation=gpu_generation(device_name), precision=precision,
        moe=moe, layers=None if geometry is None else geometry.layers,
        d_model=None if geometry is None else geometry.d_model, experts=experts)
    sources = recipe_sources(query)
    given = {name: value for name, (value, _) in sources.items() if name not in stated}
    if geometry is not None and geometry.is_hybrid and given.pop("ep_overlap", False):
        notes.append(f"{RECIPE_NOTE}: ep_overlap=True in the recipe, not applied (a hybrid "
                     "model: Megatron-Core's combined 1F1B EP overlap schedules GPT models "
                     "only; docs/perf.md)")
    if (geometry is not None and given.get("fused_grouped_mlp")
            and not experts_fuse_grouped_mlp(geometry)):
        given.pop("fused_grouped_mlp")
        notes.append(f"{RECIPE_NOTE}: fused_grouped_mlp=True in the recipe, not applied (the "
                     "fused kernel is the routed experts' FC1 + SwiGLU + FC2, and this "
                     f"model's experts use {geometry.activation_name})")
    if (attention_kernel not in (None, AttentionKernel.CUDNN)
            and given.pop("fp8_dot_product_attention", False)):
        notes.append(f"{RECIPE_NOTE}: fp8_dot_product_attention=True in the recipe, not applied "
                     "(FP8 attention is Transformer Engine's cuDNN fused attention, and the "
                     f"job states attention_kernel {attention_kernel})")
    if (stated_routing not in (None, "unknown", "token_drop")
            and "pad_to_capacity" not in stated and given.pop("pad_to_capacity", False)):
        notes.append(f"{RECIPE_NOTE}: pad_to_capacity=True in the recipe, not applied (it pads "
                     f"the recipe's token-drop routing, and the input states routing "
                     f"{stated_routing})")
    applied = [name for name in given
               if name not in RECIPE_SETTINGS_NOT_APPLIED and name not in PER_PIPELINE_SETTINGS]
    if applied:
        listed = ", ".join(f"{name}={given[name]}" for name in applied)
        labels = "; ".join(dict.fromkeys(sources[name][1].label for name in applied))
        notes.append(f"{RECIPE_NOTE}: {listed} ({stack}'s recipe: {labels}; docs/stacks.md)")
    for name, why in RECIPE_SETTINGS_NOT_APPLIED.items():
        if given.pop(name, None):
            notes.append(f"{RECIPE_NOTE}: {name}=True in the recipe, not applied ({why}; "
                         "docs/stacks.md)")
    outside = release_outside_recipes(stack, release_text)
    if outside is not None:
        notes.append(outside)
    if query.release is None and any(
            r.stack == stack and r.since is not None
            and (r.software_pattern is None or r.software_pattern.search(software or ""))
            for r in recipes()):
        notes.append(f"no release (YY.MM) named in stack_version or software: {stack}'s "
                     "release-specific recipes not applied (state e.g. stack_version: 26.04)")
    if "recompute_modules" in given:
        given["recompute_modules"] = tuple(given["recompute_modules"])
    return given


def has_release_recipes(stack: str) -> bool:
    """Whether ``stack`` has release-specific recipes (entries with a ``since``): only then
    does a release mean anything to a job's ``performance.stack_version``."""
    return any(r.stack == stack and r.since is not None for r in recipes())


def release_outside_recipes(stack: str, release_text: str | None) -> str | None:
    """A note when ``release_text`` names a release (YY.MM) outside every release-specific
    recipe of ``stack`` (its first ``since`` to its last ``until``), else None: such a
    release takes only the entries that hold for every release."""
    release = parse_release(release_text)
    dated = [r for r in recipes() if r.stack == stack and r.since is not None]
    if release is None:
        return None
    if not dated:
        return (f"release {format_release(release)}: {stack} has no release-specific "
                "recipes, so the release changes nothing (docs/stacks.md)")
    first = min(r.since for r in dated)
    ended = [r.until for r in dated if r.until is not None]
    last_end = max(ended) if ended else None
    open_ended = any(r.until is None for r in dated)  # holds for every later release
    if release < first:
        return (f"release {format_release(release)}: {stack}'s release-specific recipes "
                f"start at {format_release(first)}, so none applies (only those for every "
                "release)")
    if last_end is not None and release > last_end:
        rest = ("only the few without an end apply" if open_ended
                else "none applies (only those for every release)")
        return (f"release {format_release(release)}: {stack}'s release-specific recipes "
                f"are encoded up to {format_release(last_end)}, so {rest}; settings of "
                "later releases are the stack's defaults")
    return None


def grid_recipe_defaults(stack: str, release_text: str, device_name: str, precision: str,
                         names: tuple[str, ...]
                         ) -> tuple[str | None, dict[str, Any], tuple[str, ...]]:
    """(dispatcher or None, the settings among ``names``, the other settings' names) the
    stack's recipes of a release set for every MoE model on this GPU and precision: what a
    plan grid, which has no one geometry, takes (:func:`recipe_defaults` with no model), and
    what it leaves out."""
    settings = recipe_defaults(stack, release_text, None, None, device_name, precision, True,
                               frozenset(), [])
    dispatcher = settings.pop("dispatcher", None)
    traits = get_stack(stack)
    left_out = tuple(name for name, value in settings.items() if name not in names
                     and str(getattr(traits, name, None)) != str(value))  # not the trait's
    return dispatcher, {name: settings[name] for name in names if name in settings}, left_out


def _stated(value: int | None, field: str, notes: list[str], why: str = "") -> int:
    if value is not None:
        return value
    notes.append(f"{field} not stated: 1 assumed{why}")
    return 1


def default_micro_batch(stack: str, global_seqs: int, dp: int, pp: int,
                        local_seqs: int | None = None) -> tuple[int, str | None]:
    """(micro-batch, why) of a job that states no ``batch.micro_seqs``, by its stack's default
    (trait ``micro_batch_default``) for its global batch, dp and pp; ``why`` is None where
    that default is the schema's one sequence. The one place it is derived: the job loader
    and `mosaic explain`'s levers that move dp, pp or the global batch read it (a review: a
    tp lever on hf-transformers kept micro 8, its `--set` lines loaded the whole local
    batch of 16)."""
    traits = get_stack(stack)
    local = global_seqs // dp if local_seqs is None else local_seqs
    if traits.micro_batch_default is MicroBatchDefault.LOCAL_BATCH_OVER_PP and pp > 1:
        return (max(local // pp, 1),
                f"{stack} splits the local batch of {local} into pp={pp} micro-batches")
    if traits.micro_batch_default is MicroBatchDefault.ONE_UNDER_PP and pp > 1:
        # torchtitan since #1073 (2025-04): config/job_config.py @ v0.2.2 l. 412
        return 1, f"{stack}'s pipeline_parallel_microbatch_size defaults to 1"
    if traits.micro_batch_default.local_batch_per_forward and pp == 1 and local_seqs is not None:
        # without PP torchtitan runs each local_batch_size batch in one forward and
        # accumulates global / (local·dp) of them (train.py l. 196-213 @ v0.2.2)
        return (local, f"{stack} without pipeline parallelism runs the local batch of "
                       f"{local} in one forward-backward pass")
    if traits.micro_batch_default is MicroBatchDefault.WHOLE_LOCAL_BATCH:
        return (max(local, 1),
                f"{stack} runs the whole local batch of {local} in one step, no accumulation")
    return 1, None


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
    default_vpp = vpp is None and parallelism.pp > 1 and traits.interleaved_vpp_default > 1
    if micro is None:
        derived, why = default_micro_batch(stack, batch.global_seqs, dp, parallelism.pp,
                                           batch.local_seqs)
        if why is not None:  # else the schema's 1, said where it is filled in
            micro = derived
            notes.append(f"batch.micro_seqs not stated: {micro} assumed ({why})")
    if default_vpp:
        # an interleaved schedule needs at least pp micro-batches in each pipeline schedule
        # (perf.constraints: per step, or per pass on a stack that runs a schedule a pass)
        micro_batches = microbatches_per_schedule_of(stack, batch.global_seqs, dp, micro or 1,
                                                     batch.local_seqs, parallelism.pp)
        per_pass = runs_schedule_per_pass(batch.local_seqs, traits.pipeline_schedule_per_pass)
        # torch's interleaved schedules also need their rounds to divide the micro-batches
        rounds = int(interleaved_rounds(micro_batches, parallelism.pp))
        uneven = traits.pipeline_schedule_per_pass and micro_batches % rounds != 0
        if micro_batches >= parallelism.pp and not uneven:
            vpp = traits.interleaved_vpp_default
            notes.append(f"{VPP_DEFAULT_NOTE}: {vpp} assumed ({stack} interleaved "
                         "schedule, fewest stages per rank)")
        elif micro_batches >= parallelism.pp:
            vpp = 1
            notes.append(f"{VPP_DEFAULT_NOTE}: 1 assumed ({stack}'s interleaved default of "
                         f"{traits.interleaved_vpp_default} runs torch's interleaved schedule, "
                         f"which needs its max(1, n // pp)={rounds} rounds to divide the "
                         f"{micro_batches} micro-batches of a schedule)")
        else:
            vpp = 1
            notes.append(f"{VPP_DEFAULT_NOTE}: 1 assumed ({stack}'s interleaved default of "
                         f"{traits.interleaved_vpp_default} needs at least pp="
                         f"{parallelism.pp} micro-batches per "
                         + (f"pipeline schedule, and each local batch of {batch.local_seqs} "
                            f"gives {micro_batches})" if per_pass else
                            f"step, and the batch gives {micro_batches})"))
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


# The layout rules a length-1 plan breaks, template -> message (perf.constraints.broken_rules
# of the job's rules)
LayoutRules = Callable[[ParallelPlans], dict[str, str]]


def plan_from_blocks(parallelism: ParallelismBlock, batch: BatchBlock, *, dp: int,
                     layers: int, is_moe: bool, stack: str, checkpointing: Checkpointing,
                     measured: bool, notes: list[str], where: str,
                     layout_rules: LayoutRules | None = None) -> ParallelPlans:
    """The length-1 :class:`ParallelPlans` of a parallelism and a batch block
    (``layout_rules``: the job's layout rules, which an unstated etp must pass;
    :func:`_unstated_etp`)."""
    vpp, micro = _vpp_and_micro(parallelism, batch, dp, stack, notes)
    if measured:
        # a record's unstated degree is the schema's 1: said, as every filled default is (a
        # trial's pp=4 record without pp was scored as pp=1, unsaid)
        notes.extend(f"parallelism.{name} not stated: 1 assumed" for name in ("tp", "pp", "cp")
                     if name not in parallelism.model_fields_set)
        if parallelism.dp is None:
            notes.append(f"parallelism.dp not stated: {dp} (the GPUs over tp·pp·cp)")
    if is_moe and parallelism.ep is None and measured:
        # Expert parallelism sets the MoE layer's cost; guessing it would be a silent error.
        raise MosaicInputError("parallelism.ep: not stated (null) for an MoE run")
    sharding = parallelism.sharding
    if "sharding" not in parallelism.model_fields_set:
        # a shard group is stated only for hybrid sharding; else the stack's own default (a
        # torchtitan job without sharding was refused for the schema's zero1, which
        # torchtitan does not offer)
        traits = get_stack(stack)
        sharding = ("hsdp" if parallelism.hsdp_shard is not None
                    else traits.unstated_sharding)
        why = (" (hsdp_shard is given)" if parallelism.hsdp_shard is not None
               else "" if sharding == parallelism.sharding
               else f" ({stack}'s default: it shards weights over the data ranks)")
        notes.append(f"parallelism.sharding not stated: {sharding} assumed{why}")
    if sharding == "hsdp" and parallelism.hsdp_shard is None:
        notes.append("parallelism.hsdp_shard not stated: the whole dp group assumed")
    if sharding != "hsdp" and parallelism.hsdp_shard is not None:
        raise MosaicInputError(f"{where}: parallelism.hsdp_shard={parallelism.hsdp_shard} "
                               f"is the shard group of hybrid sharding; it means nothing with "
                               f"sharding {sharding!r}: set sharding: hsdp or drop "
                               "hsdp_shard")
    check_pipeline(parallelism.pp, vpp or 1, layers, f"{where}: parallelism")
    sequence_parallel = parallelism.sequence_parallel
    if sequence_parallel is None:
        unstated = get_stack(stack).unstated_sequence_parallel
        sequence_parallel = bool(default_sequence_parallel(parallelism.tp, unstated))
        notes.append(f"parallelism.sequence_parallel not stated: {sequence_parallel} "
                     "assumed " + ("(on with tp > 1)" if unstated == "tp"
                                   else f"({stack}'s default: off)"))
    elif sequence_parallel and parallelism.tp == 1:
        # Megatron-LM turns it off at tp = 1 with a warning (megatron/training/arguments.py,
        # "Disabling sequence parallelism because tensor model parallelism is disabled")
        sequence_parallel = False
        notes.append("parallelism.sequence_parallel with tp 1 has nothing to shard: off, as "
                     "Megatron-LM turns it off")
    fields = dict(
        tp=parallelism.tp, pp=parallelism.pp,
        vpp=_stated(vpp, "parallelism.vpp", notes, " (no interleaving)"),
        cp=parallelism.cp, dp=dp,
        ep=_stated(parallelism.ep, "parallelism.ep", notes),
        micro_batch=_stated(micro, "batch.micro_seqs", notes),
        sharding=Sharding.parse(sharding),
        checkpointing=checkpointing,
        hsdp_shard=parallelism.hsdp_shard,
        sequence_parallel=sequence_parallel,
    )
    return _unstated_etp(parallelism, fields, is_moe=is_moe, stack=stack, measured=measured,
                         layout_rules=layout_rules, notes=notes)


def _unstated_etp(parallelism: ParallelismBlock, fields: dict[str, Any], *, is_moe: bool,
                  stack: str, measured: bool, layout_rules: LayoutRules | None,
                  notes: list[str]) -> ParallelPlans:
    """The plan of ``fields`` with ``parallelism.etp``, or for a job that states none its
    stack's default (trait ``unstated_etp``): Megatron-Core's etp = tp, unless that breaks
    a layout rule of the job's (``layout_rules``: the expert mesh, tp dividing the experts'
    width, linear biases only with etp 1; perf.constraints, read rather than restated: a
    review found a copy without the bias rule refusing a job for an etp it never stated)
    that etp 1 does not, then 1. A run record's unstated etp stays 1
    (docs/run_records.md)."""
    if parallelism.etp is not None:
        return single_plan(**fields, etp=parallelism.etp)
    tp = parallelism.tp
    if (not is_moe or measured or tp == 1 or get_stack(stack).unstated_etp != "tp"):
        return single_plan(**fields, etp=_stated(
            None, "parallelism.etp", notes,
            " (Megatron-Core's default is tp; a run record keeps 1)"
            if measured and tp > 1 and is_moe else ""))
    at_tp = single_plan(**fields, etp=tp)
    if layout_rules is not None:
        # the rules etp = tp breaks that etp = 1 does not (any other is the job's own)
        at_one = single_plan(**fields, etp=1)
        kept = layout_rules(at_one)
        broken = [message for rule, message in layout_rules(at_tp).items() if rule not in kept]
        if broken:
            notes.append(f"parallelism.etp not stated: 1 assumed ({stack} defaults to "
                         f"tp={tp}, but {broken[0]})")
            return at_one
    notes.append(f"parallelism.etp not stated: {tp} assumed ({stack} sets expert tensor "
                 "parallelism to tp when it is not given)")
    return at_tp


def layout_parallelism(parallelism: ParallelismBlock, notes: list[str]) -> ParallelismBlock:
    """``parallelism`` with an unstated vpp set by its pipeline layout's chunk count
    (Megatron-Core derives vpp from the layout: PipelineParallelLayerLayout.__init__);
    a layout places the embedding and the loss itself, so vocab_in_pipeline_split beside it
    is refused."""
    text = parallelism.pipeline_layout
    if text is None:
        return parallelism
    if parallelism.vocab_in_pipeline_split:
        raise MosaicInputError("parallelism.pipeline_layout places the embedding and the loss "
                               "itself; drop vocab_in_pipeline_split")
    if parallelism.vpp is not None:
        return parallelism
    vpp = layout_vpp(text, parallelism.pp)
    notes.append(f"{VPP_DEFAULT_NOTE}: {vpp} from the pipeline layout's {vpp * parallelism.pp} "
                 f"chunks over pp={parallelism.pp}")
    return parallelism.model_copy(update={"vpp": vpp})


def resolve_pipeline_layouts(parallelism: ParallelismBlock,
                             recipe_layouts: dict[str, str] | None, geometry: Geometry,
                             plan: ParallelPlans, notes: list[str]) -> Layouts:
    """The stated pipeline layout, and the stack recipe's for every other pipeline shape
    (keys ``PPxVPP``; a layout search takes each for its shape), validated against the
    model; empty for the even split. The plan's own layout is noted."""
    pp, vpp = int(plan.pp[0]), int(plan.vpp[0])
    stated = parallelism.pipeline_layout
    texts = {shape_key(shape): _with_mtp_modules(text, geometry.mtp_layers)
             for shape, text in (recipe_layouts or {}).items()}
    if stated is not None:
        texts[(pp, vpp)] = stated
    elif (pp, vpp) in texts:
        notes.append(f"{RECIPE_NOTE}: pipeline_layout={texts[(pp, vpp)]} (the stack's recipe "
                     f"for pp={pp}, vpp={vpp}; docs/stacks.md)")
    if len(texts) > 1:
        shapes = ", ".join(f"{p}x{v}" for p, v in sorted(texts) if (p, v) != (pp, vpp))
        notes.append(f"{RECIPE_NOTE}: pipeline layouts for the other pipeline shapes "
                     f"{shapes} (pp x vpp; a layout search splits those plans by them)")
    return tuple(parse_pipeline_layout(text, shape_pp, shape_vpp, geometry.layers,
                                       geometry.mtp_layers)
                 for (shape_pp, shape_vpp), text in sorted(texts.items()))


def with_recipe_mtp_modules(geometry: Geometry, recipe: dict[str, Any], notes: list[str]
                            ) -> Geometry:
    """``geometry`` with the MTP modules the recipe trains (``recipe['mtp_layers']``, popped;
    present only where the model block leaves mtp_layers unstated), the "not stated" note
    it replaces dropped (the recipe note lists the setting)."""
    mtp = recipe.pop("mtp_layers", None)
    if mtp is None or mtp == geometry.mtp_layers:
        return geometry
    drop_unstated_note(notes, MTP_LAYERS_FIELD)
    return replace(geometry, mtp_layers=mtp)


def _with_mtp_modules(text: str, mtp_layers: int) -> str:
    """A recipe's layout with the model's MTP modules just before the loss: the recipes
    build the last chunk as blocks + ['mtp'] * mtp_num_layers + ['loss']
    (Megatron-Bridge src/megatron/bridge/recipes/deepseek/deepseek_v3.py @ v0.2.0)."""
    ending = re.search(f"{MTP}*{LOSS}$", text)
    return text if ending is None else text[:ending.start()] + MTP * mtp_layers + LOSS


def parallelism_document(row: dict[str, int | str | bool], dispatcher: str,
                         stack: str) -> dict[str, object]:
    """The canonical ``parallelism`` block of one plan row (:meth:`ParallelPlans.row`) on
    ``stack``: the dispatcher it was costed with, unless the layout rules refuse that one
    stated there (:func:`~mosaic.perf.constraints.stated_dispatcher_refused`: the stack's
    default DeepEP on one expert rank), which is left to the stack's default again."""
    document: dict[str, object] = {key: row[key] for key in ("tp", "pp", "vpp", "cp", "dp",
                                                             "ep", "etp")}
    # A row without it comes from the layout search, which sets it with tp > 1.
    document["sequence_parallel"] = bool(row.get("sequence_parallel",
                                                 default_sequence_parallel(int(row["tp"]))))
    document["sharding"] = str(row["sharding"])
    if row["sharding"] == "hsdp" and row.get("hsdp_shard") is not None:
        document["hsdp_shard"] = row["hsdp_shard"]
    if not stated_dispatcher_refused(stack, str(dispatcher), int(row["ep"]), int(row["etp"])):
        document["dispatcher"] = str(dispatcher)
    if row.get("pipeline_layout"):  # a planned pipeline split (Megatron's layout string)
        document["pipeline_layout"] = str(row["pipeline_layout"])
    return document


def plan_row_document(row: Mapping[str, Any]) -> dict[str, Any]:
    """A plan row (:meth:`ParallelPlans.row`) as the JSON outputs write it: the HSDP shard
    group only under hsdp, where it means something (a job file refuses it elsewhere), so a
    row pastes back into a job's parallelism block."""
    return {key: value for key, value in row.items()
            if key != "hsdp_shard" or row["sharding"] == "hsdp"}


def batch_document(global_seqs: int, seq_len: int, micro_seqs: int) -> dict[str, int]:
    """The canonical ``batch`` block."""
    return {"global_seqs": int(global_seqs), "micro_seqs": int(micro_seqs),
            "seq_len": int(seq_len)}
