"""The pipeline schedule of a plan, derived once for the time and memory models.

Micro-batches per step, the blocks and MoE blocks each end stage holds, the micro-batches
whose activations a stage keeps in flight, and the bubble (paper Eqs. 11-12; Narayanan et
al. 2021). Every function is written over the arrays of
:class:`~mosaic.perf.plan.ParallelPlans`; :func:`derive_schedule` bundles them.

Two schedules (stack trait ``pipeline_schedule``): Megatron's 1F1B (interleaved when
vpp > 1) and DeepSeek's DualPipe (DeepSeek-V3 report, arXiv:2412.19437, Sec. 3.2.1 and
Table 2; deepseek-ai/DualPipe @ 3da1bbe README and examples/example_dualpipe.py): the model
is cut into pp stages as for 1F1B, but rank r holds stage r *and* the mirror stage
pp − 1 − r, and micro-batches enter from both ends, half in each direction. A micro-batch
still passes one stage (one chunk) per rank, so the per-micro-batch block work is the
stage's as under 1F1B; what changes is the bubble, the in-flight activations, the
parameters a rank holds (two stages: :data:`MIRROR_STAGE`), the vocabulary work (rank 0
runs the embedding for one direction and the LM head for the other,
:func:`vocab_ends_share_a_rank`) and the pipeline transfers, which DualPipe runs behind
the paired chunk's compute (:func:`pp_transfers_overlap_compute`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

from mosaic.arch import Geometry, HybridLayer
from mosaic.perf.factorise import plan_key
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.pipeline_layout import (
    MTP,
    Layouts,
    PipelineLayout,
    StageSplit,
    blocks_per_chunk,
    chunk_bounds,
)
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.workload import Workload
from mosaic.stacks import get_stack

# A pipeline rank by name, or (a hybrid model's ranks: any can be the heaviest) by index
Stage = Literal["first", "last", "middle"] | int

# The stage a DualPipe rank holds besides its own: rank r holds stages r and pp − 1 − r
# (deepseek-ai/DualPipe examples/example_dualpipe.py: local modules full_modules[rank] and
# full_modules[pp_size - 1 - rank]; report Sec. 3.2.3: the embedding and the output head on
# one PP rank). The first rank's mirror is the last stage and vice versa; a middle rank
# (rank 1) mirrors rank pp − 2, taken as a middle stage (both hold full chunks past a dense
# prefix that fits the first chunk).
MIRROR_STAGE: dict[str, Stage] = {"first": "last", "last": "first", "middle": "middle"}
# DualPipe's bubble (PP/2 − 1)(F&B + B − 3W) (report Table 2) in units of one chunk's
# F + B, the unit of 1F1B's (PP − 1)(F + B): the two overlapped chunks of F&B share the SMs
# (the overlap hides communication, not compute: Sec. 3.2.1), so F&B = F + B; a full
# backward is two forwards, B = 2F, and half of it is the weight gradient, W = F (dgrad and
# wgrad of a GEMM have equal FLOPs). (3F + 2F − 3F)/(F + 2F) = 2/3.
DUALPIPE_BUBBLE_PER_SLOT = 2.0 / 3.0


def uses_dualpipe(workload: Workload) -> bool:
    """Whether the workload's stack runs DeepSeek's DualPipe (trait ``pipeline_schedule``)."""
    return workload.traits.pipeline_schedule == "dualpipe"


def dualpipe_pairs_stages(pp: np.ndarray) -> np.ndarray:
    """Whether DualPipe can run ``pp`` pipeline stages: it pairs stage r with stage
    pp − 1 − r, so pp is even ("PP denotes the number of pp stages (even)",
    deepseek-ai/DualPipe README @ 3da1bbe), or 1 (no pipeline)."""
    pp = np.asarray(pp)
    return (pp == 1) | (pp % 2 == 0)


def vocab_ends_share_a_rank(workload: Workload) -> bool:
    """Whether the embedding and the LM head sit on one rank, each run for half of the
    micro-batches (DualPipe: rank 0 holds the first and the last stage, and micro-batches
    enter from both ends; report Sec. 3.2.3), instead of on two ranks, each for all."""
    return uses_dualpipe(workload)


def lm_head_stage(workload: Workload, stage: Stage) -> Stage:
    """The stage whose LM head (and logits) the rank of ``stage`` holds: under DualPipe the
    first rank also runs the last stage (report Sec. 3.2.3: the embedding and the output
    head on one PP rank), so ``first`` reads as ``last``; else the stage itself."""
    return "last" if uses_dualpipe(workload) and stage == "first" else stage


def pp_transfers_overlap_compute(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Per plan, whether each pipeline transfer runs behind compute, only its excess over
    one chunk's forward exposed: Megatron-Core's overlap_p2p_comm with the interleaved
    schedule (stack trait ``pp_p2p_overlap`` interleaved, vpp > 1), or DualPipe, whose
    paired forward and backward chunks hide "both all-to-all and PP communication"
    (report Sec. 3.2.1)."""
    interleaved = (plans.vpp > 1) & (workload.traits.pp_p2p_overlap == "interleaved")
    return interleaved | uses_dualpipe(workload)


def stage_rank(plans: ParallelPlans, stage: Stage) -> np.ndarray:
    """Pipeline rank of a named stage in each plan (:func:`rank_of_stage`)."""
    return rank_of_stage(plans.pp, stage)


def rank_of_stage(pp: np.ndarray, stage: Stage) -> np.ndarray:
    """Pipeline rank of a named stage among ``pp`` ranks: 0, pp − 1, or for ``middle`` rank
    1, the first rank that holds only blocks (rank 0 when pp < 3); a rank index r where it
    holds only blocks (0 < r < pp − 1), else rank 0."""
    if isinstance(stage, int):
        return np.where((stage > 0) & (stage < pp - 1), stage, 0)
    if stage == "first":
        return np.zeros_like(pp)
    if stage == "last":
        return pp - 1
    return np.where(pp > 2, 1, 0)


def candidate_stages(geometry: Geometry, plans: ParallelPlans,
                     layouts: Layouts = ()) -> tuple[Stage, ...]:
    """The pipeline ranks that can pace the step or hold the most memory: the first and the
    last, a middle one (rank 1) where dense and MoE blocks mix
    (:func:`middle_stage_can_be_heaviest`), and every rank for a hybrid model, since its
    pattern can put any mix of layers anywhere, or under stated ``layouts``, which can."""
    if geometry.is_hybrid:
        return ("first", *range(1, int(plans.pp.max()) - 1), "last")
    # every rank up to the deepest stated layout's; rank 1 among them is the ``middle`` rank
    # of the other plans too (stage_rank), so it is not listed twice
    ranks = range(1, max(layout.pp for layout in layouts) - 1) if layouts else range(0)
    middle: tuple[Stage, ...] = (("middle",) if middle_stage_can_be_heaviest(geometry)
                                 and not ranks else ())
    return ("first", *middle, *ranks, "last")


def middle_stage_can_be_heaviest(geometry: Geometry) -> bool:
    """Whether a middle rank can hold more MoE blocks than the first: only when dense blocks
    precede or interleave the MoE blocks (a dense prefix such as DeepSeek-V3's three, or
    MoE every k-th block). Otherwise it holds the first rank's block mix with fewer
    micro-batches in flight and no embedding, so it is never the heaviest. A hybrid model's
    pattern can put any mix of layers on any rank."""
    moe = geometry.moe
    return geometry.is_hybrid or (moe is not None and (moe.dense_layers > 0
                                                       or moe.moe_every > 1))


def n_microbatches(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Micro-batches per optimizer step n_mb = B_global / (dp·B_micro) (paper Eq. 11)."""
    return _n_microbatches(workload.global_batch, plans.dp, plans.micro_batch)


def _n_microbatches(global_batch: int, dp: np.ndarray | int, micro_batch: np.ndarray | int
                    ) -> np.ndarray:
    """n_mb = B_global / (dp·B_micro), at least 1 (Eq. 11): :func:`n_microbatches`'s count,
    from the numbers alone."""
    return np.maximum(global_batch // (dp * micro_batch), 1)


_ONE_SCHEDULE = np.ones(1, dtype=np.int64)
_ONE_SCHEDULE.flags.writeable = False


def runs_schedule_per_pass(local_batch: int | None, per_pass_stack: bool) -> bool:
    """Whether a pipeline schedule is built from each gradient-accumulation pass's local
    batch (a stack with trait ``pipeline_schedule_per_pass`` and a stated local batch), not
    from the step's micro-batches: where :func:`schedule_passes` can exceed one."""
    return local_batch is not None and per_pass_stack


def schedule_passes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Pipeline schedules per optimizer step: one, except on a stack that runs a whole
    schedule per gradient-accumulation pass (trait ``pipeline_schedule_per_pass``:
    torchtitan, NeMo AutoModel) with a stated local batch and pp > 1, where the step takes
    B_global / (dp · B_local) passes (torchtitan trainer.py gradient_accumulation_steps,
    AutoModel step_scheduler.py grad_acc_steps), never more than its micro-batches. Without
    a pipeline there is no schedule to repeat: its passes accumulate as micro-batches do."""
    if not runs_schedule_per_pass(workload.local_batch,
                                  workload.traits.pipeline_schedule_per_pass):
        return _ONE_SCHEDULE  # (broadcasts over the plans; the hot path allocates nothing)
    return _passes(workload.global_batch, plans.dp, workload.local_batch, plans.pp,
                   n_microbatches(workload, plans))


def _passes(global_batch: int, dp: np.ndarray | int, local_batch: int, pp: np.ndarray | int,
            n_mb: np.ndarray) -> np.ndarray:
    """B_global / (dp · B_local) schedules a step at pp > 1, within [1, n_mb]; one at pp 1."""
    return np.where(pp > 1, np.clip(global_batch // (dp * local_batch), 1, n_mb), 1)


def _per_schedule(global_batch: int, dp: np.ndarray | int, micro_batch: np.ndarray | int,
                  local_batch: int | None, pp: np.ndarray | int, per_pass_stack: bool
                  ) -> np.ndarray:
    """Micro-batches one pipeline schedule runs, from the numbers alone: n_mb (Eq. 11) over
    the step's passes where the stack runs one schedule a pass. The one derivation that
    :func:`microbatches_per_schedule` (the model and the layout rules) and
    :func:`microbatches_per_schedule_of` (a job's unstated vpp) read."""
    n_mb = _n_microbatches(global_batch, dp, micro_batch)
    if not runs_schedule_per_pass(local_batch, per_pass_stack):
        return n_mb
    return np.maximum(n_mb // _passes(global_batch, dp, local_batch, pp, n_mb), 1)


def microbatches_per_schedule(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Micro-batches one pipeline schedule runs: n_mb over :func:`schedule_passes`; each
    schedule fills and drains on its own, so its bubble is that of this count (Eq. 12)."""
    return _per_schedule(workload.global_batch, plans.dp, plans.micro_batch,
                         workload.local_batch, plans.pp,
                         workload.traits.pipeline_schedule_per_pass)


def microbatches_per_schedule_of(stack: str, global_batch: int, dp: int, micro_batch: int,
                                 local_batch: int | None, pp: int) -> int:
    """:func:`microbatches_per_schedule` of one layout before a workload exists (a job's
    unstated vpp is chosen from it: config.layout)."""
    return int(_per_schedule(global_batch, dp, micro_batch, local_batch, pp,
                             get_stack(stack).pipeline_schedule_per_pass))


def interleaved_rounds(per_schedule: np.ndarray | int, pp: np.ndarray | int) -> np.ndarray:
    """Rounds torch.distributed.pipelining's interleaved schedules cut a schedule's
    micro-batches into, max(1, n // pp); they raise ValueError unless the rounds divide n
    (ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble __init__,
    distributed/pipelining/schedules.py, torch 2.13.0)."""
    return np.maximum(np.asarray(per_schedule) // np.maximum(pp, 1), 1)


def fsdp_gathered_through_step(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Whether fully sharded units stay gathered from their first forward to their last
    backward of each pipeline schedule (:func:`schedule_passes`; one per step unless the
    stack runs one per pass), gradients accumulated unsharded and reduce-scattered once:
    with pp > 1 on a stack that does so (the ``fsdp_pipeline_keeps_gathered`` trait:
    torchtitan does not reshard after forward under PP, and torch.distributed.pipelining
    syncs gradients only in the last backward; Megatron-FSDP does neither), and without PP
    where the workload says so (``Workload.fsdp_keep_gathered``: NeMo AutoModel's
    reshard_after_forward false with enable_fsdp_optimizations). Else every micro-batch
    gathers and reduce-scatters each unit again."""
    pipelined = (plans.pp > 1) & workload.traits.fsdp_pipeline_keeps_gathered
    return pipelined | workload.fsdp_keep_gathered


@plan_key("pp", "vpp", "dp", "micro_batch", remember=without_top_k)
def in_flight_microbatches(workload: Workload, plans: ParallelPlans, stage: Stage) -> np.ndarray:
    """Micro-batches whose activations a stage holds at its peak, in whole-stage units.

    1F1B (Narayanan et al. 2021, Sec. 2.2.1): rank r runs pp−r−1 warm-up forwards plus one
    before its first backward, so the first stage holds pp micro-batches and the last one.
    Interleaved 1F1B with vpp chunks per rank (Sec. 2.2.2): Megatron-Core's warm-up is
    2(pp−r−1) + (vpp−1)·pp chunk-forwards (pipeline_parallel/schedules.py), so with the
    extra steady-state forward the first stage holds pp·(1 + (pp−1)/(pp·vpp)) stage-units,
    the factor of Korthikanti et al. 2022 (Sec. 4.2.3). Never more than n_mb.
    DualPipe: the micro-batches of the rank's own stage (:func:`dualpipe_in_flight`; the
    mirror stage's are :func:`mirror_in_flight_microbatches`).
    """
    if uses_dualpipe(workload):
        return dualpipe_in_flight(workload, plans, stage)[0]
    pp, vpp = plans.pp, plans.vpp
    rank = stage_rank(plans, stage)
    plain = pp - rank
    interleaved = (2 * (pp - rank - 1) + (vpp - 1) * pp + 1) / vpp
    in_flight = np.where(vpp > 1, interleaved, plain).astype(float)
    return np.minimum(in_flight, microbatches_per_schedule(workload, plans))


def dualpipe_in_flight(workload: Workload, plans: ParallelPlans, stage: Stage
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(own-stage, mirror-stage) chunks whose activations a DualPipe rank holds at its peak.

    deepseek-ai/DualPipe @ 3da1bbe dualpipe/dualpipe.py DualPipe.step: with h = pp/2 and
    the rank's half-rank k = min(r, pp − 1 − r), phase 0 runs 2(h − k − 1) forwards (step
    1), then k + 1 forward pairs of both phases (step 2), a phase-1 backward-forward (step
    3), and the main step opens with another phase-0 forward before the first phase-0
    backward: pp − k chunks of phase 0 and k + 1 of phase 1, pp + 1 in all (report Table
    2, "Activation Per Device"). Phase 0 is the rank's own stage on the first half of the
    ranks (forward direction) and the mirror stage on the second half. Each direction
    carries n_mb/2 micro-batches, so neither count exceeds that; pp = 1: one, no mirror.
    """
    pp = plans.pp
    rank = stage_rank(plans, stage)
    half_rank = np.minimum(rank, pp - 1 - rank)
    phase0, phase1 = (pp - half_rank).astype(float), (half_rank + 1).astype(float)
    first_half = rank < pp / 2
    own = np.where(first_half, phase0, phase1)
    mirror = np.where(first_half, phase1, phase0)
    per_direction = np.maximum(n_microbatches(workload, plans) // 2, 1)
    pipelined = pp > 1
    return (np.where(pipelined, np.minimum(own, per_direction), 1.0),
            np.where(pipelined, np.minimum(mirror, per_direction), 0.0))


def mirror_in_flight_microbatches(workload: Workload, plans: ParallelPlans, stage: Stage
                                  ) -> np.ndarray:
    """Chunks of the mirror stage (:data:`MIRROR_STAGE`) whose activations the rank of
    ``stage`` holds: DualPipe's :func:`dualpipe_in_flight`; zero for 1F1B."""
    if not uses_dualpipe(workload):
        return np.zeros(len(plans))
    return dualpipe_in_flight(workload, plans, stage)[1]


@cache
def _pattern_prefix_counts(pattern: str, symbol: str) -> np.ndarray:
    """Layers of one hybrid kind among layer indices [0, i), for i = 0..L."""
    return np.concatenate([[0], np.cumsum([c == symbol for c in pattern])]).astype(np.int64)


def _kind_below(index: np.ndarray, geometry: Geometry, symbol: HybridLayer) -> np.ndarray:
    """Layers of a hybrid kind among layer indices [0, index) (the pattern's prefix counts)."""
    assert geometry.hybrid_pattern is not None
    return _pattern_prefix_counts(geometry.hybrid_pattern, symbol.value)[index]


def _moe_blocks_below(index: np.ndarray, geometry: Geometry) -> np.ndarray:
    """MoE blocks among block indices [0, index) (Geometry.is_moe_layer, vectorised)."""
    moe = geometry.moe
    if moe is None:
        return np.zeros_like(index)
    if geometry.hybrid_pattern is not None:
        return _kind_below(index, geometry, HybridLayer.MOE)
    past_prefix = np.maximum(index - moe.dense_layers, 0)
    return -(-past_prefix // moe.moe_every)


def _vocab_split_chunks(geometry: Geometry, plans: ParallelPlans, stage: Stage
                        ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(first block, end block, held) of each chunk a pipeline rank holds when the embedding
    and the loss each count as one layer of the split (Megatron-LM
    --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split:
    L + 2 slots cut into pp·vpp chunks, the embedding in slot 0 on the first rank, the loss
    in the last slot on the last rank; Megatron-Bridge pipeline layouts such as
    "Et|(tt|)*30mL" do the same). ``middle`` is rank 1, the rank that holds only blocks (the
    first rank when pp < 3)."""
    layers = geometry.layers
    slots = layers + 2
    chunk = blocks_per_chunk(slots, plans.pp * plans.vpp)
    rank = stage_rank(plans, stage)
    for c in range(int(plans.vpp.max())):
        start = (rank + c * plans.pp) * chunk
        stop = np.minimum(start + chunk, slots)
        # Slot p holds block p - 1 for 1 <= p <= L.
        first_block = np.minimum(np.maximum(start, 1), layers + 1) - 1
        end_block = np.minimum(np.maximum(stop, 1), layers + 1) - 1
        yield first_block, end_block, c < plans.vpp


def _block_chunks(geometry: Geometry, plans: ParallelPlans, stage: Stage,
                  split: StageSplit | None
                  ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(start, stop, held) of each chunk a pipeline rank holds (:func:`stage_layer_counts`):
    chunk r + c·pp of rank r cut by ``split`` (:func:`~mosaic.perf.pipeline_layout.
    chunk_bounds`), or, the split not stated (None), chunks of ceil(L/(pp·vpp)) blocks
    from the first block for the first and middle ranks and from the last block for the
    last rank, so both ends hold full chunks."""
    layers = geometry.layers
    chunks = plans.pp * plans.vpp
    chunk = blocks_per_chunk(layers, chunks)
    for c in range(int(plans.vpp.max())):
        if split is not None:
            start, stop = chunk_bounds(layers, chunks, stage_rank(plans, stage) + c * plans.pp,
                                       split)
            yield start, stop, c < plans.vpp
            continue
        if stage == "last":
            start = layers - c * plans.pp * chunk - chunk
        else:
            start = (stage_rank(plans, stage) + c * plans.pp) * chunk
        start = np.minimum(np.maximum(start, 0), layers)  # np.clip, without its overhead
        stop = np.minimum(start + chunk, layers)
        yield start, stop, c < plans.vpp


def _stage_chunks(geometry: Geometry, plans: ParallelPlans, stage: Stage,
                  split: StageSplit | None, vocab_in_split: bool
                  ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    if vocab_in_split:
        return _vocab_split_chunks(geometry, plans, stage)
    return _block_chunks(geometry, plans, stage, split)


@plan_key("pp", "vpp", remember=without_top_k)
def stage_layer_counts(
    geometry: Geometry, plans: ParallelPlans, stage: Stage, split: StageSplit | None = None,
    vocab_in_split: bool = False, layouts: Layouts = (),
) -> tuple[np.ndarray, np.ndarray]:
    """(blocks, MoE blocks) on the first or last pipeline rank (or a ``middle`` one).

    Blocks are cut into pp·vpp chunks; pipeline rank r holds chunks r, r + pp, r + 2pp, ...
    When pp·vpp does not divide L, ``split`` (:attr:`Workload.stage_split`: the stack's
    split under a job's ``uneven_pipeline_stages``) cuts them as the stack does: chunks of
    ceil(L/(pp·vpp)) in order with the short one at the end (remainder_last), or
    floor(L/(pp·vpp)) with the first L mod (pp·vpp) chunks one more (extra_first,
    torchtitan); without it (a split that is not stated) the first and last ranks both get
    full chunks of ceil(L/(pp·vpp)), the conservative reading. Real block indices decide
    which blocks are MoE, so the dense prefix (paper Sec. 3.1: block 1 dense) sits on the
    first stage. With ``vocab_in_split`` the embedding and the loss take one slot each
    (:func:`_vocab_split_chunks`); without it a ``middle`` rank (rank 1) holds full
    chunks, whose real indices lie past a dense prefix the first rank holds. A hybrid
    model's blocks are its pattern's layers, its MoE blocks the 'E' layers. A stated layout
    (:mod:`mosaic.perf.pipeline_layout`) sets the blocks of the plans with its pp and vpp.
    MTP modules (:func:`mtp_modules`) count as blocks of their rank.
    """
    blocks = np.zeros_like(plans.pp)
    moe_blocks = np.zeros_like(plans.pp)
    for start, stop, held in _stage_chunks(geometry, plans, stage, split, vocab_in_split):
        blocks = blocks + np.where(held, stop - start, 0)
        moe_in_chunk = _moe_blocks_below(stop, geometry)
        moe_in_chunk = moe_in_chunk - _moe_blocks_below(start, geometry)
        moe_blocks = moe_blocks + np.where(held, moe_in_chunk, 0)
    for layout in layouts:
        stated = _splits(plans, layout)
        ranges = layout.block_ranges(layout_rank(layout, stage))
        blocks = np.where(stated, sum(stop - start for start, stop in ranges), blocks)
        moe_blocks = np.where(stated, sum(
            int(_moe_blocks_below(np.array(stop), geometry))
            - int(_moe_blocks_below(np.array(start), geometry)) for start, stop in ranges),
            moe_blocks)
    if geometry.mtp_layers:
        mtp = mtp_modules(geometry, plans, stage, layouts)
        if geometry.is_hybrid:  # each module holds the layers of one depth's pattern
            depth = geometry.mtp_depth_layer_counts
            blocks = blocks + mtp * sum(depth.values())
            moe_blocks = moe_blocks + mtp * depth[HybridLayer.MOE]
        else:
            blocks = blocks + mtp
            moe_blocks = moe_blocks + (mtp if mtp_block_is_moe(geometry) else 0)
    return blocks, moe_blocks


def _splits(plans: ParallelPlans, layout: PipelineLayout) -> np.ndarray:
    """Per plan, whether ``layout`` sets its split (its pp and vpp match)."""
    return (plans.pp == layout.pp) & (plans.vpp == layout.vpp)


def laid_out(plans: ParallelPlans, layouts: Layouts) -> np.ndarray:
    """Per plan, whether one of the stated ``layouts`` sets its split."""
    stated = np.zeros(len(plans), dtype=bool)
    for layout in layouts:
        stated |= _splits(plans, layout)
    return stated


def layout_rank(layout: PipelineLayout, stage: Stage) -> int:
    """The rank of ``stage`` in the pipeline of ``layout`` (:func:`rank_of_stage`)."""
    return int(rank_of_stage(np.asarray(layout.pp), stage))


def mtp_modules(geometry: Geometry, plans: ParallelPlans, stage: Stage,
                layouts: Layouts = ()) -> np.ndarray:
    """Multi-token-prediction modules on the rank of ``stage`` (DeepSeek-V3 report Sec. 2.2):
    where a stated layout puts its ``m`` symbols, else every one on the last pipeline
    rank, Megatron-Core's placement without a custom layout
    (megatron/core/transformer/multi_token_prediction.py ``mtp_on_this_rank``: "assumes all
    MTP layers (if any) are placed on the last pipeline stage"; NVIDIA/Megatron-LM @
    d98e8a64dd). Each holds a transformer block, which :func:`stage_layer_counts` counts
    with the rank's blocks (:func:`mtp_block_is_moe` says of which kind); a hybrid model's
    holds the layers of its ``mtp_pattern``, which :func:`stage_hybrid_counts` counts with
    the rank's layers."""
    held = np.where(stage_rank(plans, stage) == plans.pp - 1, geometry.mtp_layers, 0)
    if not geometry.mtp_layers:
        return held
    for layout in layouts:
        held = np.where(_splits(plans, layout), layout.count(layout_rank(layout, stage), MTP),
                        held)
    return held


def mtp_block_is_moe(geometry: Geometry) -> bool:
    """Whether an MTP module's transformer block is an MoE block: it is built like the
    main model's last block (Megatron-Core models/gpt/gpt_layer_specs.py
    get_gpt_mtp_block_spec_for_backend: "the spec for the last layer of decoder block";
    DeepSeek-V3's MTP modules are MoE blocks)."""
    return geometry.is_moe_layer(geometry.layers - 1)


@plan_key("pp", "vpp", remember=without_top_k)
def stage_hybrid_counts(
    geometry: Geometry, plans: ParallelPlans, stage: Stage, split: StageSplit | None = None,
    vocab_in_split: bool = False,
) -> dict[HybridLayer, np.ndarray]:
    """A hybrid model's layers of each kind on a pipeline rank, cut as
    :func:`stage_layer_counts` cuts blocks (Megatron-Core's hybrid model splits its pattern
    into pipeline chunks of layers the same way)."""
    counts = {symbol: np.zeros_like(plans.pp) for symbol in HybridLayer}
    for start, stop, held in _stage_chunks(geometry, plans, stage, split, vocab_in_split):
        for symbol in HybridLayer:
            in_chunk = _kind_below(stop, geometry, symbol) - _kind_below(start, geometry, symbol)
            counts[symbol] = counts[symbol] + np.where(held, in_chunk, 0)
    if geometry.mtp_layers:
        # the MTP depths' layers (Geometry.mtp_pattern), on the rank that holds the modules
        # (:func:`mtp_modules`: Megatron-Core's hybrid model builds its MTP block where
        # mtp_on_this_rank says, megatron/core/models/hybrid/hybrid_model.py @ d98e8a64dd)
        modules = mtp_modules(geometry, plans, stage)
        for symbol, count in geometry.mtp_depth_layer_counts.items():
            counts[symbol] = counts[symbol] + modules * count
    return counts


def bubble_fraction(pp: np.ndarray, vpp: np.ndarray, n_mb: np.ndarray,
                    dualpipe: bool = False) -> np.ndarray:
    """Eq. 12: f_bubble = (pp − 1)/(vpp · n_mb), the bubble over the steady-state work
    n_mb·(F + B). DualPipe (``dualpipe``; report Table 2): (pp/2 − 1)·(2/3)/n_mb
    (:data:`DUALPIPE_BUBBLE_PER_SLOT`; no virtual stages; none for pp ≤ 2)."""
    if dualpipe:
        return np.maximum(pp / 2 - 1, 0) * DUALPIPE_BUBBLE_PER_SLOT / n_mb
    return (pp - 1) / (vpp * n_mb)


@dataclass(frozen=True)
class StageBlocks:
    """Blocks and MoE blocks one pipeline rank holds (arrays over plans)."""

    blocks: np.ndarray
    moe_blocks: np.ndarray


@dataclass(frozen=True)
class Schedule:
    """The schedule quantities both models read (arrays over plans)."""

    n_microbatches: np.ndarray
    passes: np.ndarray
    first: StageBlocks
    last: StageBlocks
    in_flight_first: np.ndarray
    in_flight_last: np.ndarray
    bubble_fraction: np.ndarray


def derive_schedule(workload: Workload, plans: ParallelPlans) -> Schedule:
    """Every schedule quantity of ``plans``, computed once."""
    split = workload.stage_split
    n_mb = n_microbatches(workload, plans)
    stages = {stage: StageBlocks(*stage_layer_counts(workload.geometry, plans, stage, split,
                                                     workload.vocab_in_pipeline_split,
                                                     workload.pipeline_layouts))
              for stage in ("first", "last")}
    return Schedule(
        n_microbatches=n_mb, passes=np.broadcast_to(schedule_passes(workload, plans), n_mb.shape),
        first=stages["first"], last=stages["last"],
        in_flight_first=in_flight_microbatches(workload, plans, "first"),
        in_flight_last=in_flight_microbatches(workload, plans, "last"),
        bubble_fraction=bubble_fraction(
            plans.pp, plans.vpp, microbatches_per_schedule(workload, plans).astype(float),
            uses_dualpipe(workload)),
    )
