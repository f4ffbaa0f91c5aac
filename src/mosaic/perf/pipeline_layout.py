"""A stated pipeline layout: which layers each pipeline chunk holds.

Megatron-Core's ``--pipeline-model-parallel-layout`` (TransformerConfig
``pipeline_model_parallel_layout``; megatron/core/transformer/pipeline_parallel_layer_layout.py,
NVIDIA/Megatron-LM @ d98e8a64dd) names the layers of every virtual pipeline chunk in a
string: ``E`` the embedding, ``t`` a transformer (decoder) block, ``m`` an MTP module, ``L``
the loss (LM head and cross-entropy); ``|`` ends a chunk, ``x*n`` repeats one symbol,
``(...)*n`` a group, and commas are cosmetic. Chunk ``c`` of the ``pp·vpp`` chunks runs on
pipeline rank ``c mod pp`` as its virtual stage ``c div pp``; decoder blocks are numbered
in chunk order. Megatron-Bridge's DeepSeek-V3 recipes state such layouts, e.g.
``Et|(tt|)*30mL`` for pp = 8, vpp = 4 (scripts/performance/configs/deepseek/
deepseek_llm_pretrain.py @ v0.2.0), so that the ranks holding the embedding, the MTP module
and the loss hold fewer blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal

import numpy as np

from mosaic.errors import MosaicInputError

EMBEDDING, BLOCK, MTP, LOSS = "E", "t", "m", "L"
SYMBOLS = (EMBEDDING, BLOCK, MTP, LOSS)
_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_REPEAT = re.compile(r"(.)\*(\d+)")


# The most symbols an unrolled layout may hold: every layer of the largest model mosaic
# accepts, one per chunk with separators, with room to spare (mosaic.limits).
MAX_UNROLLED_SYMBOLS = 1_000_000


def expand_layout(text: str) -> tuple[str, ...]:
    """The chunks of a layout string in order, repetitions unrolled (Megatron-Core
    PipelineParallelLayerLayout.parse_str_to_list's grammar; nested groups unroll from the
    inside)."""
    flat = text.replace(",", "").replace(" ", "")

    def unrolled(match: re.Match[str]) -> str:
        body, times = match.group(1), int(match.group(2))
        if len(flat) + len(body) * times > MAX_UNROLLED_SYMBOLS:
            raise MosaicInputError(
                f"parallelism.pipeline_layout {text!r}: unrolls to more than "
                f"{MAX_UNROLLED_SYMBOLS:,} symbols")
        return body * times

    while _GROUP.search(flat):
        flat = _GROUP.sub(unrolled, flat)
    flat = _REPEAT.sub(unrolled, flat)
    unknown = sorted(set(flat) - set(SYMBOLS) - {"|"})
    if unknown:
        raise MosaicInputError(
            f"parallelism.pipeline_layout {text!r}: unknown symbol(s) {', '.join(unknown)}; "
            f"allowed: E (embedding), t (transformer block), m (MTP module), L (loss), "
            f"'|' between chunks, x*n and (...)*n repeats")
    return tuple(flat.split("|"))


@dataclass(frozen=True)
class PipelineLayout:
    """The layers of every pipeline chunk (``chunks[c]``, chunk ``c`` on rank ``c mod pp``).

    ``derived``: not stated but the remainder-last split of ``uneven_stages: true``
    (:func:`with_remainder_last_layouts`), which that setting reproduces; a job file does not
    write it as a stated layout."""

    text: str
    pp: int
    chunks: tuple[str, ...]
    derived: bool = False

    @property
    def vpp(self) -> int:
        return len(self.chunks) // self.pp

    @cached_property
    def _first_block(self) -> tuple[int, ...]:
        """Index of the first decoder block of each chunk (blocks numbered in chunk order)."""
        starts, seen = [], 0
        for chunk in self.chunks:
            starts.append(seen)
            seen += chunk.count(BLOCK)
        return tuple(starts)

    def rank_chunks(self, rank: int) -> tuple[int, ...]:
        """The chunk indices pipeline rank ``rank`` runs, virtual stage by virtual stage."""
        return tuple(range(rank, len(self.chunks), self.pp))

    def block_ranges(self, rank: int) -> tuple[tuple[int, int], ...]:
        """(first block, end block) of each chunk of ``rank`` (end exclusive)."""
        return tuple((self._first_block[c], self._first_block[c] + self.chunks[c].count(BLOCK))
                     for c in self.rank_chunks(rank))

    def total(self, symbol: str) -> int:
        """How many ``symbol`` layers the whole layout places."""
        return sum(chunk.count(symbol) for chunk in self.chunks)

    def count(self, rank: int, symbol: str) -> int:
        """How many ``symbol`` layers rank ``rank`` holds."""
        return sum(self.chunks[c].count(symbol) for c in self.rank_chunks(rank))


# The stated layouts of one workload, at most one per pipeline shape (pp, vpp): a job's own,
# or every layout its stack recipe builds (mosaic.config.layout.resolve_pipeline_layouts).
Layouts = tuple[PipelineLayout, ...]


def layout_for(layouts: Layouts, pp: int, vpp: int) -> PipelineLayout | None:
    """The layout of ``layouts`` that splits a pipeline of ``pp`` ranks x ``vpp`` stages."""
    return next((layout for layout in layouts if (layout.pp, layout.vpp) == (pp, vpp)), None)


def layout_text(layouts: Layouts, row: Mapping[str, Any]) -> str | None:
    """The text of the layout that splits a plan row (:meth:`ParallelPlans.row`), if any."""
    layout = layout_for(layouts, int(row["pp"]), int(row["vpp"]))
    return None if layout is None else layout.text


def shape_key(key: str) -> tuple[int, int]:
    """(pp, vpp) of a pipeline shape written ``PPxVPP`` (e.g. ``16x1``), the key of a
    recipe's ``pipeline_layouts``."""
    if not re.fullmatch(r"[1-9]\d*x[1-9]\d*", key):
        raise MosaicInputError(f"pipeline_layouts key {key!r}: allowed: PPxVPP, e.g. 16x1")
    pp, vpp = key.split("x")
    return int(pp), int(vpp)


def layout_vpp(text: str, pp: int) -> int:
    """The virtual stages per rank a layout sets: its chunk count over pp, which must divide
    it (Megatron-Core PipelineParallelLayerLayout.__init__)."""
    return _virtual_stages(expand_layout(text), pp, text)


def _virtual_stages(chunks: tuple[str, ...], pp: int, text: str) -> int:
    if len(chunks) % pp:
        raise MosaicInputError(f"parallelism.pipeline_layout {text!r}: {len(chunks)} chunks is "
                               f"not a multiple of pp={pp} (each rank runs chunks/pp virtual "
                               "stages)")
    return len(chunks) // pp


def parse_pipeline_layout(text: str, pp: int, vpp: int | None, layers: int,
                          mtp_layers: int) -> PipelineLayout:
    """Validate a layout against the job's pipeline and model as Megatron-Core does
    (PipelineParallelLayerLayout.__init__ and validate_layer_layout): the chunk count a
    multiple of pp (it sets vpp), the embedding first and the loss last, each once, every
    block and MTP module placed, MTP modules after every block and in the last virtual
    stage of their rank."""
    where = f"parallelism.pipeline_layout {text!r}"
    chunks = expand_layout(text)
    _virtual_stages(chunks, pp, text)
    if vpp is not None and len(chunks) != pp * vpp:
        raise MosaicInputError(f"{where}: {len(chunks)} chunks, but pp·vpp = {pp}·{vpp} = "
                               f"{pp * vpp}; state vpp={len(chunks) // pp} or another layout")
    flat = "".join(chunks)
    if not flat.startswith(EMBEDDING) or not flat.endswith(LOSS):
        raise MosaicInputError(f"{where}: the layout must start with the embedding E and end "
                               "with the loss L")
    if flat.count(EMBEDDING) != 1 or flat.count(LOSS) != 1:
        raise MosaicInputError(f"{where}: E and L must appear exactly once each")
    if flat.count(BLOCK) != layers:
        raise MosaicInputError(f"{where}: places {flat.count(BLOCK)} transformer blocks (t); "
                               f"the model has layers={layers}")
    if flat.count(MTP) != mtp_layers:
        raise MosaicInputError(f"{where}: places {flat.count(MTP)} MTP modules (m); the model "
                               f"has mtp_layers={mtp_layers}")
    if MTP in flat and BLOCK in flat[flat.index(MTP):]:
        raise MosaicInputError(f"{where}: MTP modules (m) must come after every block (t)")
    layout = PipelineLayout(text=text, pp=pp, chunks=chunks)
    for rank in range(pp):
        held = layout.rank_chunks(rank)
        if any(MTP in chunks[c] for c in held[:-1]):
            raise MosaicInputError(f"{where}: pipeline rank {rank} holds MTP modules before "
                                   "its last virtual stage (Megatron-Core requires them in "
                                   "the last one)")
        last = chunks[held[-1]].count(MTP)
        if last and last != mtp_layers:
            raise MosaicInputError(f"{where}: all MTP modules must sit in one chunk "
                                   f"(Megatron-Core); rank {rank} holds {last} of {mtp_layers}")
    return layout


def balanced_layout(layers: int, mtp_layers: int, pp: int, vpp: int) -> str:
    """A layout that counts the embedding, the loss and each MTP module as one layer slot and
    spreads the L + 2 + mtp slots over the pp·vpp chunks as evenly as whole slots allow: the
    last chunk holds the MTP modules and the loss together (as Megatron-Core requires) topped
    up with blocks to the floor share, the other chunks split the embedding and the remaining
    blocks in floor and ceil shares, the first chunk taking a floor one (the embedding costs
    more than a slot): what Megatron-Bridge's DeepSeek-V3 layouts do by hand. Repeats are
    written as ``t*n``."""
    chunks = pp * vpp
    tail = MTP * mtp_layers + LOSS
    share = (layers + 2 + mtp_layers) // chunks
    last_blocks = min(max(share - len(tail), 0), layers)
    if chunks == 1:
        return _run_length(EMBEDDING + BLOCK * layers + tail)
    head = EMBEDDING + BLOCK * (layers - last_blocks)
    base, extra = divmod(len(head), chunks - 1)
    sizes = [base] * (chunks - 1)
    for index in [*range(1, chunks - 1), 0][:extra]:  # the first chunk takes an extra last
        sizes[index] += 1
    body, cut = [], 0
    for size in sizes:
        body.append(head[cut:cut + size])
        cut += size
    body.append(BLOCK * last_blocks + tail)
    return _join_chunks([_run_length(chunk) for chunk in body])


def parse_balanced_layout(layers: int, mtp_layers: int, pp: int, vpp: int) -> PipelineLayout:
    """:func:`balanced_layout` of a pipeline shape, parsed (it passes every check)."""
    return parse_pipeline_layout(balanced_layout(layers, mtp_layers, pp, vpp), pp, vpp, layers,
                                 mtp_layers)


def blocks_per_chunk(slots: Any, chunks: Any) -> Any:
    """ceil(slots / chunks): the blocks (or pipeline slots) of each of the pp·vpp chunks a
    pipeline cuts the layers into, the last chunk short (Megatron-Core's split with the
    remainder last, and the '|' segments of a hybrid layer pattern); ints or arrays."""
    return -(-slots // chunks)


# How a stack cuts L blocks into C = pp·vpp pipeline chunks that C does not divide (stack
# trait ``uneven_stage_split``, stacks.yaml):
# - remainder_last: chunks of ceil(L/C) blocks in order, the short one last (Megatron-Core's
#   decoder_first/last_pipeline_num_layers as mosaic states them, and the layout
#   :func:`remainder_last_layout` writes for them);
# - extra_first: floor(L/C) blocks each, the first L mod C chunks one more (torchtitan v0.2.2
#   ``generate_llm_fqn_per_model_part``, torchtitan/distributed/pipeline_parallel.py: 30
#   blocks on 4 stages are 8, 8, 7, 7).
StageSplit = Literal["remainder_last", "extra_first"]


def chunk_bounds(layers: int, chunks: Any, index: Any, split: StageSplit) -> tuple[Any, Any]:
    """(first block, end block) of chunk ``index`` (from 0) of ``chunks`` cut by ``split``
    (end exclusive; a chunk past the blocks is empty at ``layers``); ints or arrays."""
    if split == "extra_first":
        base, extra = layers // chunks, layers % chunks
        start = np.minimum(index * base + np.minimum(index, extra), layers)
        return start, np.minimum(start + base + (index < extra), layers)
    size = blocks_per_chunk(layers, chunks)
    start = np.minimum(index * size, layers)
    return start, np.minimum(start + size, layers)


def chunk_block_counts(layers: int, chunks: int, split: StageSplit) -> list[int]:
    """Blocks of each of ``chunks`` chunks in order, cut by ``split`` (:func:`chunk_bounds`)."""
    counts = []
    for index in range(chunks):
        start, stop = chunk_bounds(layers, chunks, index, split)
        counts.append(int(stop - start))
    return counts


def split_slots(layers: int, vocab_in_pipeline_split: bool) -> int:
    """What pp·vpp must divide for even pipeline stages: the blocks, plus the embedding and
    the loss where each takes a slot (Megatron-LM's --account-for-embedding-in-pipeline-split
    and --account-for-loss-in-pipeline-split: it asserts (layers + 1 + 1) % pp == 0)."""
    return layers + 2 if vocab_in_pipeline_split else layers


def stages_uneven(layers: int, chunks: Any, vocab_in_pipeline_split: bool) -> Any:
    """Whether ``chunks`` (pp·vpp; int or array) leave the pipeline stages uneven: they do
    not divide :func:`split_slots`, the slots the layout rules divide too (a review found an
    export ignoring the vocab slots)."""
    return split_slots(layers, vocab_in_pipeline_split) % chunks != 0


def leaves_empty_chunk(layers: Any, chunks: Any, split: StageSplit) -> Any:
    """Whether cutting ``layers`` blocks into ``chunks`` chunks by ``split`` leaves a chunk
    without a block: the remainder-last chunks of :func:`blocks_per_chunk` run out before
    the last chunk, or (extra_first) there are more chunks than blocks, which torchtitan
    refuses ("Number of stages ... cannot be greater than effective layers"); ints or
    arrays (``chunks`` >= 1)."""
    if split == "extra_first":
        return chunks > layers
    return (chunks - 1) * blocks_per_chunk(layers, chunks) >= layers


def chunk_layout(counts: list[int], mtp_layers: int) -> str:
    """The layout of chunks holding ``counts[c]`` blocks each, in order, the embedding in the
    first chunk and the MTP modules and the loss in the last (where Megatron-Core places
    them without a layout): the string Megatron's --pipeline-model-parallel-layout takes
    for that split."""
    body = [BLOCK * count for count in counts]
    body[0] = EMBEDDING + body[0]
    body[-1] += MTP * mtp_layers + LOSS
    return _join_chunks([_run_length(chunk) for chunk in body])


def remainder_last_layout(layers: int, mtp_layers: int, pp: int, vpp: int) -> str:
    """The split of a job's ``uneven_stages: true`` on a remainder-last stack as a layout
    (:func:`chunk_layout`): pp·vpp chunks of ceil(L/(pp·vpp)) blocks in order, the short one
    last."""
    return chunk_layout(chunk_block_counts(layers, pp * vpp, "remainder_last"), mtp_layers)


def first_last_stage_layers(counts: list[int], pp: int
                            ) -> tuple[int | None, int | None] | None:
    """The blocks Megatron-Core's ``num_layers_in_first_pipeline_stage`` /
    ``num_layers_in_last_pipeline_stage`` (--decoder-first/last-pipeline-num-layers) give
    the first and last pipeline ranks for the chunk block ``counts`` (chunk c on rank
    c mod pp), None for a rank that takes the middle ranks' share; None where they cannot
    give these counts, or the counts are even (nothing to set). Megatron-Core gives each
    middle rank an equal share of the blocks the first and last leave and splits every
    rank's blocks evenly over its virtual stages, each count above 0
    (TransformerConfig.__post_init__ 'Uneven PP' checks and transformer_block.
    get_num_layers_to_build, NVIDIA/Megatron-LM @ d98e8a64dd): so each rank's chunks must
    be equal, and the middle ranks' totals too. 61 blocks on pp 4 cut
    16, 15, 15, 15 are (16, None); an interleaved extra_first split never is (its longer
    chunks sit in the first virtual stages)."""
    if pp < 2 or len(counts) % pp or min(counts) <= 0:
        return None
    vpp = len(counts) // pp
    totals = []
    for rank in range(pp):
        chunks = {counts[stage * pp + rank] for stage in range(vpp)}
        if len(chunks) != 1:
            return None
        totals.append(vpp * chunks.pop())
    middle = totals[1:-1]
    if len(set(middle)) > 1:
        return None
    share = middle[0] if middle else totals[-1]  # pp 2: the last rank takes the rest
    first = totals[0] if totals[0] != share else None
    last = totals[-1] if middle and totals[-1] != share else None
    return None if first is None and last is None else (first, last)


def with_remainder_last_layouts(layouts: Layouts, layers: int, mtp_layers: int,
                                shapes: Iterable[tuple[int, int]]) -> Layouts:
    """``layouts`` plus, for each pipeline shape (pp, vpp) of ``shapes`` whose pp·vpp chunks
    do not divide the blocks, leave no chunk empty and have no layout yet, the layout of the
    remainder-last split (:func:`remainder_last_layout`)."""
    added = list(layouts)
    for pp, vpp in shapes:
        chunks = pp * vpp
        if (pp > 1 and layers % chunks
                and not leaves_empty_chunk(layers, chunks, "remainder_last")
                and layout_for(added, pp, vpp) is None):
            layout = parse_pipeline_layout(remainder_last_layout(layers, mtp_layers, pp, vpp),
                                           pp, vpp, layers, mtp_layers)
            added.append(replace(layout, derived=True))
    return tuple(added)


def _join_chunks(chunks: list[str]) -> str:
    """Chunks joined by '|', three or more equal neighbours as one group: 'Et|tt|tt|tt|tmL'
    as 'Et|(tt|)*3tmL' (Megatron-Core's grammar, :func:`expand_layout`), so that a 64-chunk
    layout is a few dozen characters, not 200 (a trial's explain table ran 420 columns)."""
    parts, index = [], 0
    while index < len(chunks):
        end = index
        while end < len(chunks) and chunks[end] == chunks[index]:
            end += 1
        run, last = end - index, end == len(chunks)
        grouped = run - 1 if last else run  # the final chunk takes no trailing '|'
        if grouped >= 3:
            parts.append(f"({chunks[index]}|)*{grouped}" + (chunks[index] if last else ""))
        else:
            parts.append("".join(f"{chunks[index]}|" for _ in range(grouped))
                         + (chunks[index] if last else ""))
        index = end
    return "".join(parts)


def _run_length(chunk: str) -> str:
    """``Etttt`` as ``Et*4``: runs of one symbol longer than two written as x*n."""
    return re.sub(r"(.)\1{2,}", lambda m: f"{m.group(1)}*{len(m.group(0))}", chunk)
