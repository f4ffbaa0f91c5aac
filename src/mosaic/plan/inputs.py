"""The planner's inputs as typed text (`mosaic plan`'s and `mosaic sweep`'s options, the
studio's plan form): validated into an :class:`~mosaic.plan.envelope.Envelope`, a
:class:`~mosaic.plan.envelope.SearchSpace` and the layout search's limits, each bad value
refused in one line that names the option. One definition for both front ends, so a form
and a command line mean the same plan."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mosaic.arch import Geometry
from mosaic.arch.backbone import backbone_split_factor
from mosaic.config.layout import dispatcher_for, grid_recipe_defaults, release_outside_recipes
from mosaic.errors import MosaicInputError, MosaicNote, shown
from mosaic.hardware.default_systems import resolve_system
from mosaic.hardware.system import with_gpus_per_node, with_scale_out_gbps
from mosaic.limits import check_range
from mosaic.perf.headroom import memory_headroom
from mosaic.perf.layouts import LayoutLimits
from mosaic.perf.workload import (
    FP4_RECIPES,
    FP8_RECIPES,
    Precision,
    job_precision_name,
    precision_lane,
    stated_fp8_recipe,
)
from mosaic.plan.envelope import (
    ENVELOPE_RECIPE_SETTINGS,
    TABLE3_EXPERTS,
    TABLE3_LAYOUT_LIMITS,
    TABLE3_Q,
    TABLE3_SPLIT,
    TABLE3_TOP_K,
    TABLE3_TPP,
    DollarBudget,
    Envelope,
    SearchSpace,
)
from mosaic.plan.goodput import ConstantGoodput, Goodput, YoungDalyGoodput
from mosaic.plan.search import check_layout_limits
from mosaic.stacks import DEFAULT_STACK
from mosaic.stacks.registry import check_release
from mosaic.text_values import parse_count, parse_ints, parse_names
from mosaic.units import SECONDS_PER_HOUR

# the grid's Table 3 defaults as the options spell them (the values: plan.envelope)
TABLE3_Q_TEXT = ",".join(map(str, TABLE3_Q))
TABLE3_EXPERTS_TEXT = ",".join(map(str, TABLE3_EXPERTS))
TABLE3_TOP_K_TEXT = ",".join(map(str, TABLE3_TOP_K))
TABLE3_SPLIT_TEXT = ",".join(map(str, TABLE3_SPLIT))
TABLE3_TPP_TEXT = f"{TABLE3_TPP[0]:g}:{TABLE3_TPP[1]:g}"


# --precision names: the GEMM lanes and the FP8 recipes that name one (fp8-cs -> current, ...)
PRECISION_NAMES = (*(p.value for p in Precision), *FP8_RECIPES, *FP4_RECIPES)


# --- Option parsing ------------------------------------------------------------------------
def parse_tpp(text: str) -> tuple[float, float]:
    """'40:150' -> (40.0, 150.0)."""
    parts = text.split(":")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise MosaicInputError(f"--tpp must be MIN:MAX tokens per active parameter, e.g. "
                               f"40:150, got {shown(text)}") from None
    return low, high


def build_goodput(goodput: float | None, mtbf_gpu_hours: float | None,
                  checkpoint_s: float | None, restart_s: float,
                  checkpoint_interval_s: float | None = None) -> Goodput:
    """--goodput X, or --mtbf-gpu-hours H with --checkpoint-s S (Young-Daly; at the optimal
    interval, or every --checkpoint-interval-s)."""
    if mtbf_gpu_hours is None and checkpoint_s is None:
        # they enter only the Young-Daly model: say so, rather than drop them
        for flag, value in (("--restart-s", restart_s),
                            ("--checkpoint-interval-s", checkpoint_interval_s)):
            if value:
                raise MosaicInputError(f"{flag} enters the Young-Daly goodput: give it with "
                                       "--mtbf-gpu-hours and --checkpoint-s")
        return ConstantGoodput(1.0 if goodput is None else goodput)
    if goodput is not None:
        raise MosaicInputError("give either --goodput or --mtbf-gpu-hours/--checkpoint-s, "
                               "not both")
    if mtbf_gpu_hours is None or checkpoint_s is None:
        raise MosaicInputError("the Young-Daly goodput needs both --mtbf-gpu-hours and "
                               "--checkpoint-s")
    check_range("--mtbf-gpu-hours", mtbf_gpu_hours, "hours")  # as typed, before conversion
    # each named by its option (the model's own check says 'checkpoint time', which the
    # studio showed above its form, beside no field: a trial); a checkpoint takes time, so
    # 0 is out and the range says so ('0..1e9' named the 0 it refused: a trial)
    check_range("--checkpoint-s", checkpoint_s, "seconds", above_low=True)
    check_range("--restart-s", restart_s, "seconds")
    if checkpoint_interval_s is not None:
        check_range("--checkpoint-interval-s", checkpoint_interval_s, "seconds",
                    above_low=True)
    return YoungDalyGoodput(mtbf_gpu_hours * SECONDS_PER_HOUR, checkpoint_s, restart_s,
                            checkpoint_interval_s)


def dollar_budget_for(budget_usd: float | None, price_per_gpu_hour: float | None,
                      days: float | None) -> DollarBudget | None:
    """--budget-usd with its price: the window it buys, or ``days`` where that is shorter
    (both given: "21 days, and at most $1M"); None without a budget."""
    if budget_usd is None:
        return None
    if price_per_gpu_hour is None:
        raise MosaicInputError("--budget-usd needs --price-per-gpu-hour (the price of one "
                               "GPU-hour turns dollars into a training window)")
    if days is not None:  # as typed, before it caps the budget's window
        check_range("--days", days, "days")
    return DollarBudget(budget_usd, price_per_gpu_hour, days)


def build_inputs(
    *, gpu: str | None, system: str | None, nodes: int, gpus_per_node: int | None,
    days: float, goodput: float | None, mtbf_gpu_hours: float | None,
    checkpoint_s: float | None, restart_s: float, global_batch: int, seq_len: int,
    memory_fraction: float | None, q: str | None, experts: str | None, top_k: str | None,
    split_factor: str | None, tpp: str, s_min: float, stack: str = DEFAULT_STACK,
    precision: str = "bf16", dispatcher: str | None = None, quantised_gemms: str = "all",
    backbone: Path | Geometry | None = None,
    layers: str | None = None, d_model: str | None = None, stack_version: str | None = None,
    balanced_pipeline: bool = False, max_total_params: str | None = None,
    max_active_params: str | None = None, s_max: float | None = None,
    unique_tokens: str | None = None, optimizer: str = "adamw", optimizer_dtype: str = "fp32",
    checkpoint_interval_s: float | None = None, scale_out_gbps: float | None = None,
) -> tuple[Envelope, SearchSpace]:
    """Validate the shared options into an envelope and a search space.

    ``gpus_per_node`` and ``scale_out_gbps`` (per GPU, one direction) are what-ifs on the
    node type: a variant named for them (:mod:`mosaic.hardware.system`)."""
    if precision not in PRECISION_NAMES:
        raise MosaicInputError(f"--precision {shown(precision)}: allowed values are "
                               f"{', '.join(PRECISION_NAMES)}")
    precision = job_precision_name(precision)  # plain fp4 names NVFP4, as recipes spell it
    node_type = resolve_system(gpu, system)
    if gpus_per_node is not None:
        node_type = with_gpus_per_node(node_type, gpus_per_node)
    if scale_out_gbps is not None:  # after the host size: the rate is per GPU either way
        node_type = with_scale_out_gbps(node_type, scale_out_gbps)
    recipe_dispatcher: str | None = None
    settings: dict[str, Any] = {}
    if stack_version is not None:
        check_release(stack_version, "--stack-version")
        recipe_dispatcher, settings, left_out = grid_recipe_defaults(
            stack, stack_version, node_type.device.name, precision, ENVELOPE_RECIPE_SETTINGS)
        outside = release_outside_recipes(stack, stack_version)
        if outside is not None:
            warnings.warn(outside, MosaicNote, stacklevel=2)
        if left_out:
            warnings.warn(
                f"{stack} {stack_version}'s recipes also set {', '.join(left_out)} for "
                "every MoE model; the plan's candidates run without them (a plan carries "
                f"the dispatcher, {', '.join(ENVELOPE_RECIPE_SETTINGS)})",
                MosaicNote, stacklevel=2)
    dispatcher_stated = dispatcher is not None
    if dispatcher is None:
        dispatcher = dispatcher_for(recipe_dispatcher, stack, node_type.device.name, True, [])
    envelope = Envelope(
        system=node_type, n_nodes=nodes, days=days,
        goodput=build_goodput(goodput, mtbf_gpu_hours, checkpoint_s, restart_s,
                              checkpoint_interval_s),
        global_batch=global_batch, seq_len=seq_len, stack=stack,
        precision=precision_lane(precision), fp8_recipe=stated_fp8_recipe(precision),
        dispatcher=dispatcher, dispatcher_stated=dispatcher_stated,
        quantised_gemms=quantised_gemms,
        headroom=None if memory_fraction is None else memory_headroom(memory_fraction, stack),
        stack_version=stack_version, balanced_pipeline=balanced_pipeline,
        optimizer=optimizer, optimizer_dtype=optimizer_dtype, **settings,
    )
    tpp_min, tpp_max = parse_tpp(tpp)
    axes = grid_axes(backbone, q=q, experts=experts, top_k=top_k, split_factor=split_factor,
                     layers=layers, d_model=d_model)
    space = SearchSpace(
        **axes, s_min=s_min, tpp_min=tpp_min, tpp_max=tpp_max, s_max=s_max,
        max_total_params=(None if max_total_params is None
                          else parse_count("--max-total-params", max_total_params)),
        max_active_params=(None if max_active_params is None
                           else parse_count("--max-active-params", max_active_params)),
        unique_tokens=(None if unique_tokens is None
                       else parse_count("--unique-tokens", unique_tokens)))
    space.enumerate()  # an empty grid fails here, before any hardware work
    return envelope, space


# The options that set what a job file's other blocks state, for a plan (docs/plan.md)
_JOB_BLOCK_OPTIONS = {
    "parallelism": "--tp/--pp/--ep/--sharding",
    "batch": "--global-batch/--seq-len",
    "performance": "--stack/--stack-version/--precision",
    "hardware": "--gpu/--system/--nodes",
    "optimizer": "--optimizer",
    "training": "--days/--goodput",
    # the layout limits `mosaic export` writes with a plan's job (config.job_schema.SearchBlock)
    "search": "--max-tp/--tp/--pp/--ep/--mbs/--sharding/--checkpointing",
}


def job_blocks_not_read(path: Path) -> str | None:
    """The note for a --backbone that is a whole job file: its model block is the backbone,
    and the blocks that set the run (batch, stack, cluster, layout) are not read; the plan
    runs on its own options. A trial passed DeepSeek-V3's 1,024-GPU Megatron-Bridge job
    and got a plan at 1024 x 2048 on megatron-core with no word that the job's 8192 x 4096
    and its stack were dropped. None for a HuggingFace config or a model-only YAML."""
    from mosaic.arch.hf_import import is_hf_config_file
    from mosaic.config.spelling import JOB_RULES, canonical_document
    from mosaic.schema_validation import load_yaml_mapping

    path = Path(path)
    if path.is_dir() or is_hf_config_file(path):
        return None
    document = load_yaml_mapping(path)
    # blocks by the names the job loader reads them as (the paper's `data:` is batch); a
    # field given twice in two spellings is the job loader's error, not the note's
    with contextlib.suppress(MosaicInputError):
        document = canonical_document(document, JOB_RULES, str(path), set())
    if "model" not in document:
        return None
    blocks = [block for block in _JOB_BLOCK_OPTIONS if block in document]
    if not blocks:
        return None
    named = ", ".join(blocks[:-1]) + " and " + blocks[-1] if len(blocks) > 1 else blocks[0]
    listed: set[str] = set()  # each option once (parallelism and search share --tp, ...)
    groups = []
    for block in blocks:
        flags = [flag for flag in _JOB_BLOCK_OPTIONS[block].split("/") if flag not in listed]
        listed.update(flags)
        groups += ["/".join(flags)] if flags else []
    options = ", ".join(groups)
    return (f"--backbone {path} is a job file: the plan reads its model block alone; its "
            f"{named} {'blocks are' if len(blocks) > 1 else 'block is'} not read (the "
            f"envelope shows what the plan runs; set it with {options})")


def grid_axes(backbone: Path | Geometry | None, *, q: str | None, experts: str | None,
              top_k: str | None, split_factor: str | None, layers: str | None,
              d_model: str | None) -> dict[str, Any]:
    """The grid's axes: the ladder's (Table 3 defaults), or a backbone's (its own values):
    a model file, or a geometry in hand (the studio's edited model)."""
    if backbone is None:
        if layers is not None or d_model is not None:
            raise MosaicInputError("--layers and --d-model vary a --backbone; the ladder's "
                                   "depth and width come from --q")
        def axis(flag: str, text: str | None, table3: str) -> tuple[int, ...]:
            return parse_ints(flag, table3 if text is None else text)

        return {"q": axis("--q", q, TABLE3_Q_TEXT),
                "experts": axis("--experts", experts, TABLE3_EXPERTS_TEXT),
                "top_k": axis("--top-k", top_k, TABLE3_TOP_K_TEXT),
                "split_factor": axis("--split-factor", split_factor, TABLE3_SPLIT_TEXT)}
    if q is not None:
        raise MosaicInputError("--q picks ladder rungs; with --backbone vary depth and width "
                               "with --layers and --d-model")
    if isinstance(backbone, Geometry):
        geometry, where = backbone, "the backbone"
    else:
        from mosaic.config.model_file import load_model_file  # parsing only when used

        if not backbone.is_file():
            raise MosaicInputError(f"--backbone {backbone}: no such file (give a HuggingFace "
                                   f"config.json or a mosaic model YAML)")
        geometry, where = load_model_file(backbone), str(backbone)
        unread = job_blocks_not_read(backbone)
        if unread is not None:
            warnings.warn(unread, MosaicNote, stacklevel=2)
    if geometry.is_hybrid:
        raise MosaicInputError(f"{where}: a hybrid SSM/attention backbone "
                               "(model.hybrid_pattern) cannot be planned: the scaling law and "
                               "the geometry grid are the paper's transformers")
    own = geometry.moe
    if own is None and (experts is None or top_k is None):
        raise MosaicInputError(f"{where}: a dense backbone needs --experts and --top-k "
                               f"(the MoE axes to search)")

    def values(flag: str, text: str | None, default: int) -> tuple[int, ...]:
        return parse_ints(flag, text) if text is not None else (default,)

    return {
        "backbone": geometry,
        "experts": values("--experts", experts, own.experts if own else 0),
        "top_k": values("--top-k", top_k, own.top_k if own else 0),
        "split_factor": (parse_ints("--split-factor", split_factor)
                         if split_factor is not None else (backbone_split_factor(geometry),)),
        "layers": values("--layers", layers, geometry.layers),
        "d_model": values("--d-model", d_model, geometry.d_model),
    }

def plan_limits(envelope: Envelope, space: SearchSpace, **options: Any) -> LayoutLimits:
    """The layout options as the search's limits (micro-batches default to Table 3's),
    refused before any search when the envelope's stack cannot run them."""
    limits = layout_limits(default_micro_batches=TABLE3_LAYOUT_LIMITS.micro_batches, **options)
    check_layout_limits(envelope, space, limits)
    return limits

def int_list(option: str, text: str | None) -> tuple[int, ...] | None:
    """Parse "1,2,4" into (1, 2, 4) parallel degrees; None when the option is not given."""
    if text is None:
        return None
    values = parse_ints(option, text)
    for value in values:
        check_range(option, value, "parallel_degree", integer=True)
    return values


def name_list(option: str, text: str | None) -> tuple[str, ...] | None:
    """Parse "zero1,fsdp" into names; None when the option is not given."""
    return None if text is None else parse_names(option, text)


def layout_limits(*, max_tp: int | None = None, tp: str | None = None, pp: str | None = None,
                  vpp: str | None = None, cp: str | None = None, ep: str | None = None,
                  etp: str | None = None, mbs: str | None = None,
                  default_micro_batches: Sequence[int] | None = None,
                  sharding: str | None = None, checkpointing: str | None = None
                  ) -> LayoutLimits:
    """The options' limits; ``default_micro_batches`` when --mbs is not given (None: the
    layout search's own default)."""
    micro_batches = int_list("--mbs", mbs)
    pinned_tp = int_list("--tp", tp)
    if max_tp is not None:  # a 400-digit cap was echoed into the JSON (a fuzz trial)
        check_range("--max-tp", max_tp, "parallel_degree", integer=True)
    if max_tp is not None and pinned_tp is not None and max(pinned_tp) > max_tp:
        # LayoutLimits refuses it too, in its field names; say it in the options' names
        raise MosaicInputError(f"--tp {max(pinned_tp)} exceeds --max-tp {max_tp}: pin tp "
                               "values within the cap, or drop one of the two options")
    return LayoutLimits(
        max_tp=max_tp, tp=pinned_tp, pp=int_list("--pp", pp),
        vpp=int_list("--vpp", vpp), cp=int_list("--cp", cp), ep=int_list("--ep", ep),
        etp=int_list("--etp", etp),
        micro_batches=default_micro_batches if micro_batches is None else micro_batches,
        sharding=name_list("--sharding", sharding),
        checkpointing=name_list("--checkpointing", checkpointing),
    )
