"""Stack performance recipes: what a stack's published benchmark scripts switch on.

A run measured with a stack's performance scripts (Megatron-Bridge's
``scripts/performance``, NeMo 2.0's ``scripts/performance/llm``) used the settings its
recipe for that model, GPU, precision and release chose: the MoE dispatcher, EP all-to-all
overlap, recompute modules, CUDA graphs, activation offload, bf16 gradient reduction. A run
record or job states its layout but rarely these; the recipe fills them in where the input
is silent (a stated value always wins). The data lives in ``mosaic/stacks/data/recipes/*.yaml``
(one file per stack family, each entry with the tag, path and symbol it was read from).

Matching (:meth:`Recipe.matches`): same stack (and ``software_pattern`` found in the
record's software text, where given: it tells products apart); release within ``[since,
until]`` (no ``since``: every release, named or not), and with ``point_release`` only the
release's first container (false) or its point containers YY.MM.0N (true); the model's
geometry signature (layers, d_model, routed
experts) where given; the GPU (catalog name or generation) and precision where given.
Entries for one model override entries for every model; two matching entries of the same
kind never disagree (:func:`check_recipes`, run on the shipped data by the tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mosaic.config.blocks import (
    CrossEntropyName,
    MoePermuteName,
    OptimizerDtypeName,
    RecomputeName,
    Routing,
)
from mosaic.errors import MosaicInputError, shown
from mosaic.hardware import list_devices
from mosaic.perf.attention_kernels import gpu_generation
from mosaic.perf.pipeline_layout import expand_layout, shape_key
from mosaic.schema_validation import SafeLoader, validate_mapping
from mosaic.stacks import known_stacks
from mosaic.stacks.registry import RELEASE_PATTERN

Generation = Literal["ampere", "hopper", "blackwell"]
PrecisionName = Literal["bf16", "fp16", "fp8", "fp8-cs", "fp8-blockwise", "mxfp8", "nvfp4"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RecipeSettings(_Strict):
    """Settings a recipe (or a run's documented configuration) may set; None = not set.
    Names and values are the job schema's (docs/schema.md)."""

    recompute: RecomputeName | None = None
    recompute_modules: list[str] | None = None
    recompute_block_fraction: float | None = Field(default=None, ge=0, le=1)
    cross_entropy: CrossEntropyName | None = None
    grad_reduce_in_fp32: bool | None = None
    offloaded_activation_layers: int | None = Field(default=None, ge=0)
    dispatcher: Literal["alltoall", "deepep", "hybridep"] | None = None
    ep_overlap: bool | None = None
    dispatch_fp8: bool | None = None
    tp_comm_overlap: bool | None = None
    optimizer_dtype: OptimizerDtypeName | None = None
    fsdp_keep_gathered: bool | None = None
    full_iteration_cuda_graph: bool | None = None
    layer_cuda_graphs: bool | None = None
    pad_to_capacity: bool | None = None
    # the MoE routing regime (token_drop: a capacity factor, default 1.0); applied where a
    # record's routing is unknown or unstated
    routing: Routing | None = None
    dp_comm_overlap: bool | None = None
    torch_compile: bool | None = None
    moe_permute: MoePermuteName | None = None
    fp8_param_gather: bool | None = None
    fp4_param_gather: bool | None = None
    max_nodes_per_token: int | None = Field(default=None, ge=1)
    fp8_glu_inputs: bool | None = None
    fused_grouped_mlp: bool | None = None
    fp8_dot_product_attention: bool | None = None
    # MTP modules the recipe trains (DeepSeek-V3 recipes: mtp_num_layers 1), where the model
    # block leaves mtp_layers unstated
    mtp_layers: int | None = Field(default=None, ge=0)
    # the pipeline layout the recipe states for each pipeline shape, keyed PPxVPP (e.g.
    # 16x1); MTP modules sit before the loss as the model has them (config.layout.
    # resolve_pipeline_layouts)
    pipeline_layouts: dict[str, str] | None = None

    @field_validator("pipeline_layouts")
    @classmethod
    def _layouts(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for shape, text in (value or {}).items():
            try:
                pp, vpp = shape_key(shape)
            except MosaicInputError as exc:
                raise ValueError(str(exc)) from None
            chunks = len(expand_layout(text))
            if chunks != pp * vpp:
                raise ValueError(f"pipeline_layouts[{shape}] {shown(text)}: {chunks} chunks, not "
                                 f"pp·vpp = {pp * vpp}")
        return value


class _ModelSignature(_Strict):
    layers: int = Field(ge=1)
    d_model: int = Field(ge=1)
    experts: int = Field(ge=0, description="routed experts; 0 for a dense model")


class _Entry(_Strict):
    label: str = Field(min_length=1)
    stack: str
    software_pattern: str | None = None
    # true: only the release's point containers (YY.MM.0N); false: only its first
    # container; None: both (one release, since == until)
    point_release: bool | None = None
    since: str | None = Field(default=None, pattern=RELEASE_PATTERN)
    until: str | None = Field(default=None, pattern=RELEASE_PATTERN)
    model: _ModelSignature | None = None
    moe: bool | None = None
    gpus: list[str] | None = Field(default=None, min_length=1)
    generations: list[Generation] | None = Field(default=None, min_length=1)
    precisions: list[PrecisionName] | None = Field(default=None, min_length=1)
    settings: RecipeSettings
    source: str = Field(min_length=1)

    @field_validator("stack")
    @classmethod
    def _known_stack(cls, value: str) -> str:
        if value not in known_stacks():
            raise ValueError(f"unknown stack {shown(value)}; known: {', '.join(known_stacks())}")
        return value

    @field_validator("software_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"software_pattern {shown(value)}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> _Entry:
        if self.until is not None and self.since is None:
            raise ValueError("until needs since (an entry without since holds for every "
                             "release, named or not)")
        if self.until is not None and _release(self.until) < _release(self.since):
            raise ValueError(f"until {self.until} is before since {self.since}")
        if self.point_release is not None and (self.since is None or self.until != self.since):
            raise ValueError("point_release narrows one release: set since and until to it")
        if self.model is not None and self.moe is not None:
            raise ValueError("moe narrows an entry without a model; the model says it")
        if self.gpus is not None and self.generations is not None:
            raise ValueError("give gpus or generations, not both")
        if not self.settings.model_dump(exclude_none=True):
            raise ValueError("settings: an entry sets at least one setting")
        return self


class _File(_Strict):
    schema_version: Literal[1]
    description: str = Field(min_length=1)
    recipes: list[_Entry]


def _release(text: str) -> tuple[int, int]:
    year, month = text.split(".")
    return int(year), int(month)


@dataclass(frozen=True)
class RecipeQuery:
    """What a recipe is matched on: one run record or job.

    ``layers``/``d_model``/``experts`` are None where the geometry is not fixed (a plan
    search over a grid): then only entries for every model match.
    """

    stack: str
    software: str | None
    release: tuple[int, int] | None
    device_name: str
    generation: str | None
    precision: str
    moe: bool
    point_release: bool = False  # the software names a point container (YY.MM.0N)
    layers: int | None = None
    d_model: int | None = None
    experts: int | None = None


@dataclass(frozen=True)
class Recipe:
    """One entry of ``data/recipes/*.yaml`` (fields as there)."""

    label: str
    stack: str
    software_pattern: re.Pattern[str] | None
    point_release: bool | None
    since: tuple[int, int] | None
    until: tuple[int, int] | None
    model: tuple[int, int, int] | None
    moe: bool | None
    gpus: frozenset[str] | None
    generations: frozenset[str] | None
    precisions: frozenset[str] | None
    settings: dict[str, Any]
    source: str

    def matches(self, query: RecipeQuery) -> bool:
        """Whether this recipe applies to ``query``."""
        if query.stack != self.stack:
            return False
        if self.software_pattern is not None and not self.software_pattern.search(
                query.software or ""):
            return False
        if self.point_release is not None and self.point_release != query.point_release:
            return False
        if self.since is not None and (query.release is None or query.release < self.since
                                       or (self.until is not None
                                           and query.release > self.until)):
            return False
        if self.model is not None and self.model != (query.layers, query.d_model,
                                                     query.experts):
            return False
        return ((self.moe is None or self.moe == query.moe)
                and (self.gpus is None or query.device_name in self.gpus)
                and (self.generations is None or query.generation in self.generations)
                and (self.precisions is None or query.precision in self.precisions))

    def may_match(self, release: tuple[int, int] | None, device_name: str | None,
                  precision: str | None, point_release: bool | None = None) -> bool:
        """Whether some run of this release (a point container of it with
        ``point_release``), catalog device and precision can match (None: any value); the
        model and software are left open (``mosaic stacks show`` filters)."""
        if (point_release is not None and self.point_release is not None
                and point_release != self.point_release):
            return False
        in_release = release is None or self.since is None or (
            self.since <= release and (self.until is None or release <= self.until))
        on_device = device_name is None or (
            (self.gpus is None or device_name in self.gpus)
            and (self.generations is None or gpu_generation(device_name) in self.generations))
        return (in_release and on_device
                and (precision is None or self.precisions is None
                     or precision in self.precisions))


def _recipe(entry: _Entry) -> Recipe:
    model = entry.model
    return Recipe(
        label=entry.label, stack=entry.stack,
        software_pattern=(None if entry.software_pattern is None
                          else re.compile(entry.software_pattern, re.IGNORECASE)),
        point_release=entry.point_release,
        since=None if entry.since is None else _release(entry.since),
        until=None if entry.until is None else _release(entry.until),
        model=None if model is None else (model.layers, model.d_model, model.experts),
        moe=entry.moe,
        gpus=None if entry.gpus is None else frozenset(entry.gpus),
        generations=None if entry.generations is None else frozenset(entry.generations),
        precisions=None if entry.precisions is None else frozenset(entry.precisions),
        settings=entry.settings.model_dump(exclude_none=True),
        source=" ".join(entry.source.split()),
    )


@cache
def recipes() -> tuple[Recipe, ...]:
    """Every shipped recipe, file by file (``mosaic/stacks/data/recipes/*.yaml``)."""
    folder = resources.files("mosaic.stacks").joinpath("data", "recipes")
    loaded: list[Recipe] = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".yaml"):
            continue
        document = yaml.load(path.read_text(), Loader=SafeLoader)
        loaded.extend(parse_recipes(document, f"recipes {path.name}"))
    # check_recipes is run on the shipped data by the tests (tests/config/test_recipes.py),
    # not at every start; two matching entries that disagree still fail in recipe_sources.
    return tuple(loaded)


def parse_recipes(document: object, where: str) -> tuple[Recipe, ...]:
    """The recipes of one parsed recipe file (errors name ``where`` and the field)."""
    return tuple(map(_recipe, validate_mapping(_File, document, where).recipes))


@lru_cache(maxsize=4096)
def _shipped_matching(query: RecipeQuery) -> tuple[Recipe, ...]:
    """The shipped recipes that match ``query``, once per distinct query (a validate of
    5,000 copies of four runs matched every recipe 5,000 times)."""
    return tuple(r for r in recipes() if r.matches(query))


def recipe_sources(query: RecipeQuery, table: tuple[Recipe, ...] | None = None
                   ) -> dict[str, tuple[Any, Recipe]]:
    """Setting name -> (value, the recipe it comes from) for ``query``: entries for every
    model first, then entries for this model over them. Two matching entries of one kind
    that disagree are a data error."""
    matching = (_shipped_matching(query) if table is None
                else [r for r in table if r.matches(query)])
    chosen: dict[str, tuple[Any, Recipe]] = {}
    for specific in (False, True):
        level: dict[str, tuple[Any, Recipe]] = {}
        for recipe in (r for r in matching if (r.model is not None) == specific):
            for name, value in recipe.settings.items():
                if name in level and level[name][0] != value:
                    raise MosaicInputError(
                        f"recipes: {recipe.label!r} and {level[name][1].label!r} both match "
                        f"and set {name} to {value!r} and {level[name][0]!r}")
                level[name] = (value, recipe)
        chosen.update(level)
    return chosen


def recipe_settings(query: RecipeQuery, table: tuple[Recipe, ...] | None = None
                    ) -> tuple[dict[str, Any], tuple[Recipe, ...]]:
    """(settings, the recipes that gave them, in data order) for ``query``
    (:func:`recipe_sources`)."""
    sources = recipe_sources(query, table)
    given_by = {id(recipe) for _, recipe in sources.values()}
    ordered = tuple(r for r in (recipes() if table is None else table) if id(r) in given_by)
    return {name: value for name, (value, _) in sources.items()}, ordered


def check_recipes(table: tuple[Recipe, ...] | None = None) -> None:
    """Raise where two entries of one kind (both for one model, or both for every model)
    can match the same run and disagree on a setting. Entries overlap when their stacks,
    release ranges, models, GPUs (generations read through the catalog) and precisions
    overlap and their software patterns are the same or one has none (two different
    patterns name different products, e.g. NeMo 2 and the Megatron-MoE model zoo)."""
    table = recipes() if table is None else table
    generation_of = {name: gpu_generation(name) for name in list_devices()}
    gpus = [recipe.gpus if recipe.generations is None else frozenset(
        name for name, generation in generation_of.items()
        if generation in recipe.generations) for recipe in table]
    for index, first in enumerate(table):
        for offset, second in enumerate(table[index + 1:], start=index + 1):
            if not _overlap(first, second, gpus[index], gpus[offset]):
                continue
            for name in sorted(set(first.settings) & set(second.settings)):
                if first.settings[name] != second.settings[name]:
                    raise MosaicInputError(
                        f"recipes: {first.label!r} and {second.label!r} can match the same "
                        f"run and set {name} to {first.settings[name]!r} and "
                        f"{second.settings[name]!r}")


def _overlap(first: Recipe, second: Recipe, first_gpus: frozenset[str] | None,
             second_gpus: frozenset[str] | None) -> bool:
    """Whether one run can match both recipes, of the same kind (``*_gpus``: the catalog
    devices each names, generations read through the catalog; None = every device)."""
    def meet(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
        return a is None or b is None or bool(a & b)

    late_start = max((r.since for r in (first, second) if r.since is not None),
                     default=(0, 0))
    early_end = min((r.until for r in (first, second) if r.until is not None),
                    default=late_start)
    patterns = {r.software_pattern.pattern for r in (first, second) if r.software_pattern}
    points = {r.point_release for r in (first, second) if r.point_release is not None}
    return (first.stack == second.stack and len(patterns) < 2 and len(points) < 2
            and first.model == second.model and late_start <= early_end
            and (first.moe is None or second.moe is None or first.moe == second.moe)
            and meet(first_gpus, second_gpus)
            and meet(first.precisions, second.precisions))
