"""Iteration time of a training step (paper Sec. 5.4-5.5) and the metrics derived from it.

    t_iter = χ_sys · stack · (t_block + t_bubble + t_vocab + t_dp + t_optimizer)

* t_block = n_mb · max(t_cmp, t_disp) (Eq. 11): per-micro-batch compute of the heaviest
  stage's blocks, with TP, exposed EP all-to-all, exposed CP and PP send/recv on the
  critical path, against the CPU-dispatch floor t_disp = L_stage·κ(E_loc)·t_gap + t_host.
* t_bubble = (pp − 1)/(vpp · n_mb) · t_block (Eq. 12).
* t_vocab: embedding on the first stage and LM head + fp32 cross-entropy on the last
  (Eq. 13; for pp = 1 both run on the one stage every micro-batch).
* t_dp: data-parallel gradient reduction and parameter gathers not hidden behind compute
  (ZeRO-1/2 once per step; FSDP per block per micro-batch with one-block prefetch); the
  collectives that end a pass (FSDP's first gather and last reduce-scatter, DDP/ZeRO's last
  bucket) have nothing to hide behind.
* t_optimizer: a streaming update over the local optimizer shard, plus Muon's
  Newton-Schulz FLOPs.
* χ_sys (Eq. 15): inter-node EP straggler, multi-node pipeline and intra-node deep-pipeline
  terms, with constants from the calibration file.

Every term is an array over plans; the breakdown sums exactly to the step time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import numpy as np

from mosaic.arch import Geometry, HybridLayer, count_parameters, lm_head_flops_per_token
from mosaic.arch.flops import (
    TRAIN_TO_FORWARD_FLOPS,
    model_flops_per_token,
    mtp_block_flops_per_token,
    sequence_mixing_flops_per_token,
)
from mosaic.errors import MosaicInputError
from mosaic.perf.attention_kernels import AttentionKernel, resolve_attention_kernel
from mosaic.perf.calibration import Calibration
from mosaic.perf.chi_sys import ChiDrivers, chi_drivers, chi_sys
from mosaic.perf.collectives import group_placement, send_recv_time_s
from mosaic.perf.data_parallel_time import data_parallel_times
from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.elementwise_traffic import elementwise_traffic_multiplier
from mosaic.perf.factorise import plan_key
from mosaic.perf.host_time import dispatch_floor_s, expert_gemm_host_floor_s, moe_host_sync_s
from mosaic.perf.hybrid_layers import HybridLayerTimes, hybrid_layer_times
from mosaic.perf.kernels import gemm_time_s
from mosaic.perf.kernels import memory_bound_time_s as streaming_time_s
from mosaic.perf.layer_costs import (
    BACKWARD_TO_FORWARD_STREAMING,
    MOE_BLOCK_KEY,
    BlockTimes,
    dense_block_times,
    expert_all_to_all_s,
    gemm_s,
    moe_block_times,
    repeated_block_forward_s,
    weighted_block_times,
)
from mosaic.perf.machine import (
    Machine,
    check_dispatcher_runs,
    with_attention_efficiency,
    with_fp8_attention,
)
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.memory import (
    feasibility,
    mean_block_activation_bytes,
    memory_breakdown_bytes,
    offloaded_blocks,
    total_memory_bytes,
)
from mosaic.perf.microbench_constants import apply_microbench
from mosaic.perf.optimizer_time import optimizer_s
from mosaic.perf.plan import Checkpointing, ParallelPlans
from mosaic.perf.recompute_flops import selective_recompute_flops_per_token
from mosaic.perf.routing_load import routed_load_factor
from mosaic.perf.schedule import (
    Stage,
    bubble_fraction,
    candidate_stages,
    laid_out,
    microbatches_per_schedule,
    middle_stage_can_be_heaviest,
    mtp_modules,
    n_microbatches,
    pp_transfers_overlap_compute,
    schedule_passes,
    stage_hybrid_counts,
    stage_layer_counts,
    stage_rank,
    uses_dualpipe,
    vocab_ends_share_a_rank,
)
from mosaic.perf.shapes import sequence_shard_tokens, tokens_per_rank, vocab_shard
from mosaic.perf.terms import step_term
from mosaic.perf.workload import Workload
from mosaic.stacks import SelectiveRecompute

# Fused cross-entropy over fp32-upcast logits streams ~18 B per logit forward + backward
# (read bf16 logits 2, write fp32 4, softmax read/write 8, gradient write 4): Megatron-Core
# tensor_parallel/cross_entropy.py.
CROSS_ENTROPY_BYTES_PER_LOGIT = 18
# Embedding: gather d bf16 values per token forward, scatter-add fp32 gradients backward.
EMBEDDING_BYTES_PER_TOKEN_PER_D = ACTIVATION_BYTES + 2 * FP32_BYTES
# The plan fields a term reads (mosaic.perf.factorise; a layout search computes each term
# once per distinct value of its fields): the heaviest stage's blocks follow the block
# costs, the pipeline split and checkpointing; the pipeline transfers also dp (the stage
# stride); the data-parallel collectives the stage's parameters and the (E)DP groups.
# The stage terms declare dp too (on a fixed device count it follows tp·pp·cp): their key
# is then memory's STAGE_ACTIVATION_KEY, whose distinct rows a search has already found.
STAGE_BLOCKS_KEY = (*MOE_BLOCK_KEY, "pp", "vpp", "checkpointing", "dp")


@dataclass(frozen=True)
class StepPrediction:
    """Predicted step of every plan (arrays over plans)."""

    step_time_s: np.ndarray
    analytic_breakdown_s: dict[str, np.ndarray]  # the terms before calibration
    step_multiplier: np.ndarray  # χ_sys · stack: step_time_s = analytic_step_time_s · this
    labels: dict[str, str]
    tokens_per_s: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    mfu: np.ndarray
    mfu_with_attention: np.ndarray
    hfu: np.ndarray
    memory_bytes: np.ndarray
    memory_breakdown_bytes: dict[str, np.ndarray]
    feasible: np.ndarray
    overshoot_bytes: np.ndarray
    chi_sys: np.ndarray
    analytic_step_time_s: np.ndarray  # before χ_sys and the stack multiplier
    attention_core_s: np.ndarray  # flash-attention time on the critical path (incl. bubble)
    elementwise_s: np.ndarray  # element-wise kernels at the fused minimum traffic, same basis
    block_compute_s: np.ndarray  # n_mb·t_cmp·(1 + f_bubble): the block work of Eq. 11
    block_dispatch_floor_s: np.ndarray  # n_mb·t_disp·(1 + f_bubble): its launch floor
    routed_expert_s: np.ndarray  # routed-expert GEMMs + exposed EP all-to-all, same basis
    chi_drivers: ChiDrivers
    attention_kernel: str  # flash-attention kernel family the prediction assumes
    gemm_lane_peak_ratio: float  # Machine.gemm_lane_peak_ratio: MFU can reach this, not 1

    @property
    def mfu_gemm_lane(self) -> np.ndarray:
        """MFU against the dense datasheet peak of the precision the GEMMs run at (at most 1;
        ``mfu`` itself is against the bf16 peak, so an FP8 or NVFP4 step can pass 100%)."""
        return self.mfu / self.gemm_lane_peak_ratio

    @property
    def mfu_with_attention_gemm_lane(self) -> np.ndarray:
        """MFU with causal attention against the GEMM lane's dense datasheet peak: no real
        step can pass 1 (the bound mosaic.evaluate.plausibility checks measurements with)."""
        return self.mfu_with_attention / self.gemm_lane_peak_ratio

    @cached_property
    def breakdown_s(self) -> dict[str, np.ndarray]:
        """Calibrated terms, non-negative, summing to ``step_time_s``: a multiplier above 1
        shows as a term of its own ("calibration"); one below 1 (a stack faster than the
        analytical model) scales every term. Built on first use: a search reads only the
        step time."""
        shrink = np.minimum(self.step_multiplier, 1.0)
        breakdown = {name: value * shrink for name, value in self.analytic_breakdown_s.items()}
        breakdown["calibration"] = (self.analytic_step_time_s
                                    * np.maximum(self.step_multiplier - 1.0, 0.0))
        return breakdown


@plan_key(*STAGE_BLOCKS_KEY, carried=("dense", "moe"))
def _heaviest_stage_blocks(workload: Workload, plans: ParallelPlans,
                           dense: BlockTimes | HybridLayerTimes, moe: BlockTimes
                           ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Per-micro-batch times of the heaviest stage's blocks by component, and its block
    and MoE-block counts (``moe`` is ``dense`` for a dense model)."""
    no_vocab = np.zeros(len(plans))
    # A middle rank past a dense prefix holds the last rank's blocks without the LM head, so
    # it can pace the step only where the last rank holds fewer (its short remainder chunk
    # under uneven stages, or MoE every k-th block).
    geometry = workload.geometry
    names: tuple[Stage, ...]
    if geometry.is_hybrid or workload.pipeline_layouts:
        # any rank can hold the heaviest mix of layers
        names = candidate_stages(geometry, plans, workload.pipeline_layouts)
    else:
        middle = middle_stage_can_be_heaviest(geometry) and (
            workload.uneven_pipeline_stages or geometry.moe.moe_every > 1)
        names = ("first", "middle", "last") if middle else ("first", "last")
    stages = [(*_stage(workload, plans, dense, moe, stage, False), no_vocab)
              for stage in names]
    terms, blocks, moe_blocks, _ = _slowest(stages)
    return terms, blocks, moe_blocks


StageCandidate = tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]


def _sum(values: Iterable[Any]) -> Any:
    """``sum(values)``: the same additions in the same order, accumulated in place in the
    one new array the first addition makes (no temporary per term)."""
    total: Any = 0
    for value in values:
        if (isinstance(total, np.ndarray) and total.shape == np.shape(value)
                and np.result_type(total, value) == total.dtype):
            np.add(total, value, out=total)
        else:
            total = total + value
    return total


def _stage(workload: Workload, plans: ParallelPlans, dense: BlockTimes | HybridLayerTimes,
           moe: BlockTimes, stage: Stage, vocab_in_split: bool
           ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(block terms per micro-batch, blocks, MoE blocks) of one pipeline rank; a hybrid
    model's (``dense`` holds its :class:`HybridLayerTimes`) counts its layers of each kind
    on the rank, its blocks being its layers."""
    geometry = workload.geometry
    split = workload.stage_split
    if isinstance(dense, HybridLayerTimes):
        counts = stage_hybrid_counts(geometry, plans, stage, split, vocab_in_split)
        kinds = ((dense.mamba, counts[HybridLayer.MAMBA], "compute_mlp"),
                 (dense.gdn, counts[HybridLayer.GDN], "compute_mlp"),
                 (dense.attention, counts[HybridLayer.ATTENTION], "compute_mlp"),
                 (dense.mlp, counts[HybridLayer.MLP], "compute_mlp"),
                 (dense.moe, counts[HybridLayer.MOE], "compute_experts"))
        blocks = _sum(counts.values())
        return (_stage_terms(kinds, plans, workload.checkpointed_block_fraction, True),
                blocks, counts[HybridLayer.MOE])
    blocks, moe_blocks = stage_layer_counts(geometry, plans, stage, split, vocab_in_split,
                                            workload.pipeline_layouts)
    kinds = ((dense, blocks - moe_blocks, "compute_mlp"), (moe, moe_blocks, "compute_experts"))
    return (_stage_terms(kinds, plans, workload.checkpointed_block_fraction, False), blocks,
            moe_blocks)


def _slowest(stages: list[StageCandidate]) -> StageCandidate:
    """Per plan, the candidate whose block terms plus vocabulary seconds are largest (the
    earlier one on a tie): (terms, blocks, MoE blocks, vocabulary seconds)."""
    best_terms, best_blocks, best_moe, best_vocab = stages[0]
    best_total = _sum(best_terms.values()) + best_vocab
    for terms, blocks, moe_blocks, vocab in stages[1:]:
        total = _sum(terms.values()) + vocab
        slower = total > best_total
        best_terms = {k: np.where(slower, v, best_terms[k]) for k, v in terms.items()}
        best_total = np.where(slower, total, best_total)
        best_blocks = np.where(slower, blocks, best_blocks)
        best_moe = np.where(slower, moe_blocks, best_moe)
        best_vocab = np.where(slower, vocab, best_vocab)
    return best_terms, best_blocks, best_moe, best_vocab


def _recomputed_elementwise_s(workload: Workload, plans: ParallelPlans,
                              elementwise_s: np.ndarray) -> np.ndarray:
    """Analytical seconds of the element-wise forward kernels that checkpointing repeats:
    the forward share of ``compute_elementwise`` (backward = BACKWARD_TO_FORWARD_STREAMING x
    forward, layer_costs) under full checkpointing and under selective policies that
    recompute every element-wise kernel (torch per-op SAC, JAX save-dots), the checkpointed
    share of blocks under block-level selective (fms-fsdp); Megatron-Core's selective
    recompute (attention core, named modules) is left at the analytical count."""
    forward = elementwise_s / (1 + BACKWARD_TO_FORWARD_STREAMING)
    policy = workload.traits.selective_recompute
    share = {SelectiveRecompute.PER_OP: 1.0, SelectiveRecompute.SAVE_DOTS: 1.0,
             SelectiveRecompute.BLOCKS: workload.checkpointed_block_fraction}.get(policy, 0.0)
    # recomputed share of the forward by checkpointing mode (NONE, SELECTIVE, FULL); FULL
    # recomputes its share of blocks (Workload.checkpointed_block_fraction)
    recomputed_share = np.array([0.0, share, workload.checkpointed_block_fraction])
    return recomputed_share[plans.checkpointing] * forward


# One kind of layer on a stage: its times, how many the stage holds, and the breakdown term
# its FFN GEMMs (``mlp_gemm``) belong to (a dense FFN's or the routed experts').
StageKind = tuple[BlockTimes, np.ndarray, str]


def _recomputed_attention_core(kinds: tuple[StageKind, ...], plans: ParallelPlans,
                               full_fraction: float) -> np.ndarray:
    """Attention-core forward time that checkpointing recomputes (that of the recomputed
    share of blocks under full; under selective, what the stack's selective policy
    recomputes)."""
    full = full_fraction * _sum(count * times.attention_core_forward
                                for times, count, _ in kinds)
    selective = _sum(count * times.selective_core_recompute for times, count, _ in kinds)
    return np.select([plans.checkpointing == Checkpointing.FULL,
                      plans.checkpointing == Checkpointing.SELECTIVE], [full, selective], 0.0)


def _stage_terms(kinds: tuple[StageKind, ...], plans: ParallelPlans, full_fraction: float,
                 hybrid: bool) -> dict[str, np.ndarray]:
    """Per-stage terms of each plan; ``full_fraction``: the share of blocks full
    checkpointing recomputes (Workload.checkpointed_block_fraction); ``hybrid``: add the
    state-space (Mamba, gated DeltaNet) layers' terms."""
    def total(attribute: str) -> np.ndarray:
        return _sum(count * getattr(times, attribute) for times, count, _ in kinds)

    def ffn(term: str) -> np.ndarray:
        return _sum(count * times.mlp_gemm for times, count, kind_term in kinds
                    if kind_term == term)

    full = plans.checkpointing == Checkpointing.FULL
    selective = plans.checkpointing == Checkpointing.SELECTIVE
    recompute = np.where(full, full_fraction * repeated_block_forward_s(
                             total("forward"), total("tp_communication")),
                         np.where(selective, total("selective_recompute"), 0.0))
    terms = {
        "moe_permute_excess": total("moe_permute"),
        "attention_core_recompute": _recomputed_attention_core(kinds, plans, full_fraction),
        "compute_attention_gemm": total("attention_gemm"),
        "compute_attention_core": total("attention_core"),
        "compute_mlp": ffn("compute_mlp"),
        "compute_experts": ffn("compute_experts"),
        "compute_shared_expert": total("shared_expert"),
        "compute_router": total("router"),
        "compute_elementwise": total("streaming"),
        "compute_quantise_cast": total("quantise_cast"),
        "compute_recompute": recompute,
        "tp_all_gather": total("tp_all_gather"),
        "tp_reduce_scatter": total("tp_reduce_scatter"),
        "tp_all_reduce": total("tp_all_reduce"),
        "ep_all_to_all": total("ep_all_to_all"),
        "cp_send_recv": total("cp_send_recv"),
    }
    if hybrid:
        terms["compute_ssm_gemm"] = total("ssm_gemm")
        terms["compute_ssm_scan"] = total("ssm_scan")
    return terms


@plan_key(*STAGE_BLOCKS_KEY, carried=("chunk_forward_s",))
def _pipeline_send_recv(machine: Machine, workload: Workload, plans: ParallelPlans,
                        chunk_forward_s: np.ndarray) -> np.ndarray:
    """Exposed seconds of the activations and gradients crossing each stage boundary, per
    micro-batch: one send per virtual chunk in each direction.

    With a stack whose ``pp_p2p_overlap`` is ``interleaved`` and vpp > 1, each transfer is
    posted asynchronously and waited only by the chunk that consumes it (Megatron-Core's
    overlap_p2p_comm, on by default with the interleaved schedule), so only the part
    longer than one chunk's forward compute (``chunk_forward_s``, the shorter of the two
    directions' windows) is exposed; DualPipe hides its transfers the same way behind the
    paired chunk (:func:`~mosaic.perf.schedule.pp_transfers_overlap_compute`). Otherwise
    every transfer blocks.
    """
    ic = machine.interconnect
    message_bytes = (sequence_shard_tokens(workload, plans) * workload.geometry.d_model
                     * ACTIVATION_BYTES)
    stage_stride = plans.stage_ranks
    crosses = ~group_placement(plans.pp, stage_stride, ic.scale_up_domain_gpus).inside_domain
    per_boundary = send_recv_time_s(message_bytes, crosses, ic)
    overlapped = pp_transfers_overlap_compute(workload, plans)
    hidden = np.where(overlapped, np.minimum(per_boundary, chunk_forward_s), 0.0)
    per_boundary = per_boundary - hidden
    return np.where(plans.pp > 1, 2 * plans.vpp * per_boundary, 0.0)


@plan_key("tp", "cp", "micro_batch", remember=without_top_k)
def _vocab_stage_times(machine: Machine, workload: Workload, plans: ParallelPlans
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_first, t_last, t_mtp) per micro-batch: the embedding; the LM head GEMMs and the
    cross-entropy of the main loss and of every MTP module's loss, all through the one
    output layer on the loss's rank (Megatron-Core multi_token_prediction.py
    process_mtp_loss, from GPTModel's post-processing); one MTP module's own work besides
    its transformer block (:func:`_mtp_module_extra_s`), on the module's rank."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    vocab = vocab_shard(workload, plans)
    head = gemm_time_s(tokens, vocab, geometry.d_model, machine.bf16_gemm_rate_flops_per_s,
                       machine.hbm_bw_bytes_per_s, machine.sm_count, params=machine.gemm_params)
    cross_entropy = streaming_time_s(tokens * vocab * CROSS_ENTROPY_BYTES_PER_LOGIT,
                                     machine.hbm_bw_bytes_per_s)
    # the LM head's forward GEMM and its two backward ones
    t_last = (1 + geometry.mtp_layers) * (TRAIN_TO_FORWARD_FLOPS * head + cross_entropy)
    t_first = streaming_time_s(tokens * geometry.d_model * EMBEDDING_BYTES_PER_TOKEN_PER_D,
                               machine.hbm_bw_bytes_per_s)
    t_mtp = (_mtp_module_extra_s(machine, workload, plans, tokens, t_first)
             if geometry.mtp_layers else np.zeros(len(plans)))
    return t_first, t_last, t_mtp


def _mtp_module_extra_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                        tokens: np.ndarray, embedding_s: np.ndarray) -> np.ndarray:
    """Per micro-batch, one MTP module's work besides its transformer block and its loss
    (DeepSeek-V3 report Sec. 2.2; Megatron-Core MultiTokenPredictionLayer): the embedding
    of the shifted tokens (``embedding_s``, the first rank's lookup) and the projection of
    [norm(h); norm(embedding)] from 2d to d (eh_proj, column-parallel over TP, at the GEMM
    precision; forward and two backward GEMMs)."""
    d_model = workload.geometry.d_model
    projection = gemm_s(machine, workload, tokens, d_model / plans.tp, 2 * d_model)
    return embedding_s + TRAIN_TO_FORWARD_FLOPS * projection


def vocab_stage_s(t_first: np.ndarray, t_last: np.ndarray, n_mb: np.ndarray,
                  bubble_fraction: np.ndarray, pp: np.ndarray,
                  passes: np.ndarray | float = 1.0) -> np.ndarray:
    """Eq. 13: (n_mb − 1)·max(t_first, t_last) + t_first + t_last + t_last·n_mb·f_bubble,
    with the fill and drain once per pipeline schedule (``passes`` schedules a step:
    :func:`~mosaic.perf.schedule.schedule_passes`); with one stage both ends run every
    micro-batch: n_mb·(t_first + t_last)."""
    pipelined = ((n_mb - passes) * np.maximum(t_first, t_last) + passes * (t_first + t_last)
                 + t_last * n_mb * bubble_fraction)
    return np.where(pp > 1, pipelined, n_mb * (t_first + t_last))


def shared_rank_vocab_stage_s(t_first: np.ndarray, t_last: np.ndarray, n_mb: np.ndarray,
                              bubble_fraction: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Vocabulary time when one rank holds the embedding and the LM head and runs each for
    half of the micro-batches (DualPipe, :func:`~mosaic.perf.schedule.
    vocab_ends_share_a_rank`): n_mb/2·(t_first + t_last) on that rank, stretched by the
    bubble as its blocks are; with one stage both run every micro-batch."""
    return np.where(pp > 1, n_mb / 2 * (t_first + t_last) * (1 + bubble_fraction),
                    n_mb * (t_first + t_last))


def balanced_vocab_stage_s(vocab_per_mb: np.ndarray, t_first: np.ndarray, t_last: np.ndarray,
                           n_mb: np.ndarray, bubble_fraction: np.ndarray, pp: np.ndarray,
                           passes: np.ndarray | float = 1.0) -> np.ndarray:
    """Vocabulary time of a pipeline whose ends hold fewer blocks (embedding and loss in the
    split): the slowest stage's vocabulary share ``vocab_per_mb`` on every micro-batch (and
    in the bubble), plus each end's once in each schedule's fill and drain; one stage runs
    both ends on every micro-batch, as in Eq. 13."""
    pipelined = (n_mb * vocab_per_mb * (1 + bubble_fraction)
                 + passes * (t_first + t_last - vocab_per_mb))
    return np.where(pp > 1, pipelined, n_mb * (t_first + t_last))


@plan_key(*STAGE_BLOCKS_KEY, carried=("dense", "moe", "t_first", "t_last", "t_mtp"))
def _slowest_stage_with_vocab(workload: Workload, plans: ParallelPlans,
                              dense: BlockTimes | HybridLayerTimes, moe: BlockTimes,
                              t_first: np.ndarray, t_last: np.ndarray, t_mtp: np.ndarray
                              ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray,
                                         np.ndarray]:
    """The stage that paces the pipeline when the embedding, the loss and the MTP modules
    take pipeline slots (vocab_in_pipeline_split, or a stated pipeline layout): the slowest
    candidate rank (the first, a middle one, the last; every rank under a layout), each
    with its blocks and its vocabulary work (:func:`_rank_vocab_s`). Returns its block terms
    per micro-batch, its block and MoE-block counts and its vocabulary seconds per
    micro-batch."""
    layouts = workload.pipeline_layouts
    stages = (candidate_stages(workload.geometry, plans, layouts) if layouts
              else ("first", "middle", "last"))
    return _slowest([(*_stage(workload, plans, dense, moe, stage,
                              workload.vocab_in_pipeline_split),
                      _rank_vocab_s(workload, plans, stage, t_first, t_last, t_mtp))
                     for stage in stages])


def _rank_vocab_s(workload: Workload, plans: ParallelPlans, stage: Stage,
                  t_first: np.ndarray, t_last: np.ndarray, t_mtp: np.ndarray) -> np.ndarray:
    """Vocabulary seconds per micro-batch of the rank of ``stage``: the embedding on rank 0,
    the LM head and losses on the last rank (both on a single stage), and each MTP module's
    own work on the rank holding it (schedule.mtp_modules)."""
    rank = stage_rank(plans, stage)
    held_mtp = mtp_modules(workload.geometry, plans, stage, workload.pipeline_layouts)
    return (np.where(rank == 0, t_first, 0.0) + np.where(rank == plans.pp - 1, t_last, 0.0)
            + held_mtp * t_mtp)


def _average_hybrid_layer(geometry: Geometry, layers: HybridLayerTimes) -> BlockTimes:
    """A hybrid model's mean layer: each kind's times weighted by its share of the layers."""
    shares = geometry.hybrid_shares
    return weighted_block_times([
        (shares[HybridLayer.MAMBA], layers.mamba), (shares[HybridLayer.GDN], layers.gdn),
        (shares[HybridLayer.ATTENTION], layers.attention),
        (shares[HybridLayer.MLP], layers.mlp), (shares[HybridLayer.MOE], layers.moe)])


def _activation_offload_exposed_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                                  block: BlockTimes, blocks: np.ndarray,
                                  moe_blocks: np.ndarray) -> np.ndarray:
    """Per micro-batch: the activation-offload copies no block compute hides.

    Transformer Engine's offload handler (cpu_offload.py, AsyncDoubleBufferGroupOffloadHandler,
    behind Megatron-Core cpu_offloading_num_layers) copies an offloaded block's saved tensors
    to the host on a side stream while the next block's forward runs, and back while the
    block after it in backward order runs its backward; the stream waits on each copy before
    the buffer is reused, so a copy longer than the block it hides behind is exposed by the
    difference. A copy moves the block's saved bytes
    (:func:`~mosaic.perf.memory.mean_block_activation_bytes`) over the device's host link,
    one direction (catalog ``host_link_bw_bytes_per_s``: PCIe, or NVLink-C2C on Grace
    systems). Zero when nothing is offloaded.
    """
    offloaded = offloaded_blocks(workload, blocks)
    if not np.any(offloaded):
        return np.zeros(len(plans))
    bandwidth = machine.host_link_bw_bytes_per_s
    if bandwidth is None:
        raise MosaicInputError(
            f"offloaded_activation_layers: the catalog states no host link bandwidth for "
            f"{machine.device_name} (host_link_bw_bytes_per_s, docs/hardware.md), so the "
            "offload copies cannot be costed; add it with --catalog")
    copy_s = mean_block_activation_bytes(workload, plans, blocks, moe_blocks) / bandwidth
    backward = block.compute - block.forward
    return offloaded * (np.maximum(0.0, copy_s - block.forward)
                        + np.maximum(0.0, copy_s - backward))


@cache
def _term_labels(names: tuple[str, ...]) -> dict[str, str]:
    """Source label of each breakdown term (and of the "calibration" term the calibrated
    breakdown adds): calibrated where the term's record says so, else analytical."""
    return {name: "calibrated" if step_term(name).source == "calibrated" else "analytical"
            for name in (*names, "calibration")}


def predict_step(workload: Workload, plans: ParallelPlans, machine: Machine,
                 calibration: Calibration, *,
                 memory_breakdown: dict[str, np.ndarray] | None = None) -> StepPrediction:
    """Step time, throughput, utilisation and memory of every plan.

    ``memory_breakdown``: :func:`memory_breakdown_bytes` of these plans at the calibration's
    memory scale, when the caller already has it (a search that checks memory before
    timing); else it is computed here.
    """
    geometry = workload.geometry
    check_dispatcher_runs(machine.device_name, workload.stack, workload.dispatcher,
                          geometry.moe is not None)
    kernel = resolve_attention_kernel(workload.attention_kernel, workload.stack,
                                      machine.device_name)
    stack_factor = calibration.attention_multiplier(workload.stack)
    machine = apply_microbench(machine, calibration.microbench)  # calibrate --microbench
    machine = with_attention_efficiency(machine, kernel.fwd_multiplier * stack_factor,
                                        kernel.bwd_multiplier * stack_factor)
    if workload.fp8_dot_product_attention:
        if kernel.kernel != AttentionKernel.CUDNN:  # e.g. an AMD GPU runs FlashAttention-2
            raise MosaicInputError(
                f"fp8_dot_product_attention on {machine.device_name}: FP8 attention is "
                f"Transformer Engine's cuDNN fused attention, and this GPU runs {kernel.kernel}")
        machine = with_fp8_attention(machine)
    # memory first: the stage parameters it finds serve the data-parallel terms below
    memory = (memory_breakdown_bytes(workload, plans, calibration.memory_scale)
              if memory_breakdown is None else memory_breakdown)
    n_mb = n_microbatches(workload, plans).astype(float)
    dense: BlockTimes | HybridLayerTimes
    if geometry.is_hybrid:
        # a hybrid model: its layer kinds, and for the per-block terms below (a pipeline
        # chunk's forward, the DP overlap) its average layer
        dense = hybrid_layer_times(machine, workload, plans)
        block = _average_hybrid_layer(geometry, dense)
    else:
        dense = dense_block_times(machine, workload, plans)
        block = moe_block_times(machine, workload, plans) if geometry.moe else dense
    t_first, t_last, t_mtp = _vocab_stage_times(machine, workload, plans)
    # Without a stated layout the MTP modules sit with the loss on the last rank.
    t_last_all = t_last + geometry.mtp_layers * t_mtp
    # the plans whose embedding, loss and MTP modules take pipeline slots
    slotted = laid_out(plans, workload.pipeline_layouts) | workload.vocab_in_pipeline_split
    if slotted.any():
        block_terms, blocks, moe_blocks, vocab_per_mb = _slowest_stage_with_vocab(
            workload, plans, dense, block, t_first, t_last, t_mtp)
    if not slotted.all():
        default_terms, default_blocks, default_moe = _heaviest_stage_blocks(
            workload, plans, dense, block)
        if slotted.any():  # a stated layout, and plans of another pp or vpp
            block_terms = {name: np.where(slotted, values, default_terms[name])
                           for name, values in block_terms.items()}
            blocks = np.where(slotted, blocks, default_blocks)
            moe_blocks = np.where(slotted, moe_blocks, default_moe)
        else:
            block_terms, blocks, moe_blocks = default_terms, default_blocks, default_moe
    pipeline_p2p = _pipeline_send_recv(machine, workload, plans,
                                       block.forward * blocks / plans.vpp)
    attention_core_per_mb = block_terms.pop("attention_core_recompute") + block_terms[
        "compute_attention_core"]
    imbalance = calibration.routing_multiplier(workload.routing) if geometry.moe else 1.0
    # The busiest EP rank's expert GEMMs and all-to-all scale with its routed tokens
    # (perf/routing_load.py); the calibrated per-regime factor acts on that load.
    load = routed_load_factor(workload, plans)
    even_routed_per_mb = block_terms["compute_experts"] + block_terms["ep_all_to_all"]
    block_terms["expert_load_imbalance"] = (load - 1.0) * even_routed_per_mb
    routed_per_mb = load * even_routed_per_mb
    block_terms["routing_imbalance"] = (imbalance - 1.0) * routed_per_mb
    # Element-wise kernels move the bytes their implementation's kernels read and write
    # (perf/elementwise_traffic: eager torch, Inductor, Transformer Engine, XLA), and the
    # forward kernels checkpointing repeats move them again; the calibrated residual
    # elementwise_traffic_factor adds (factor - 1) analytical counts on top.
    # compute_elementwise holds the MoE token movement as the stack and dispatcher run it
    # (perf/moe_permute_traffic); both scale only the analytical count (with the analytical
    # permute), which is what their sourced multiplier and fitted residual are in units of.
    elementwise_per_mb = block_terms["compute_elementwise"]
    analytical_per_mb = elementwise_per_mb - block_terms.pop("moe_permute_excess")
    recomputed = _recomputed_elementwise_s(workload, plans, analytical_per_mb)
    unfused = (elementwise_traffic_multiplier(workload) - 1.0) * (analytical_per_mb + recomputed)
    # A stack whose fused kernels move fewer bytes than the analytical count (a fused SwiGLU
    # backward reads and writes 16 B per element, the count 18) lowers the minimum itself,
    # so no breakdown term is negative; the sum is the same.
    block_terms["compute_elementwise"] = elementwise_per_mb + np.minimum(unfused, 0.0)
    block_terms["compute_elementwise_unfused"] = np.maximum(unfused, 0.0)
    block_terms["compute_elementwise_extra"] = ((calibration.elementwise_traffic_factor - 1.0)
                                                * analytical_per_mb)
    expert_host_floor = expert_gemm_host_floor_s(workload, plans, moe_blocks, calibration,
                                                 machine.device_name)
    per_mb = {**block_terms, "pp_send_recv": pipeline_p2p,
              "moe_host_sync": moe_host_sync_s(workload, expert_host_floor),
              "activation_offload": _activation_offload_exposed_s(
                  machine, workload, plans, block, blocks, moe_blocks)}
    t_cmp = _sum(per_mb.values())
    # a hybrid model's layer is half a transformer block: one norm, one mixer or FFN, one
    # residual, so half of a block's kernel launches
    kernel_blocks = blocks / 2 if geometry.is_hybrid else blocks
    t_disp = dispatch_floor_s(workload, plans, kernel_blocks, moe_blocks, expert_host_floor,
                               calibration)
    dispatch_extra = np.maximum(0.0, t_disp - t_cmp)
    breakdown = {name: n_mb * value for name, value in per_mb.items()}
    breakdown["dispatch_floor"] = n_mb * dispatch_extra
    t_block = n_mb * (t_cmp + dispatch_extra)
    # each pipeline schedule fills and drains once: the bubble of its own micro-batches
    passes = schedule_passes(workload, plans)
    f_bubble = bubble_fraction(plans.pp, plans.vpp,
                               microbatches_per_schedule(workload, plans).astype(float),
                               uses_dualpipe(workload))
    breakdown["pipeline_bubble"] = f_bubble * t_block
    attention_core_s = n_mb * attention_core_per_mb * (1 + f_bubble)
    elementwise_s = n_mb * analytical_per_mb * (1 + f_bubble)
    block_compute_s = n_mb * t_cmp * (1 + f_bubble)
    block_dispatch_floor_s = n_mb * t_disp * (1 + f_bubble)
    routed_expert_s = n_mb * routed_per_mb * (1 + f_bubble)
    if vocab_ends_share_a_rank(workload):
        breakdown["vocab_stage"] = shared_rank_vocab_stage_s(t_first, t_last_all, n_mb,
                                                             f_bubble, plans.pp)
    elif slotted.all():
        breakdown["vocab_stage"] = balanced_vocab_stage_s(vocab_per_mb, t_first, t_last_all,
                                                          n_mb, f_bubble, plans.pp, passes)
    elif slotted.any():
        breakdown["vocab_stage"] = np.where(
            slotted, balanced_vocab_stage_s(vocab_per_mb, t_first, t_last_all, n_mb, f_bubble,
                                            plans.pp, passes),
            vocab_stage_s(t_first, t_last_all, n_mb, f_bubble, plans.pp, passes))
    else:
        breakdown["vocab_stage"] = vocab_stage_s(t_first, t_last_all, n_mb, f_bubble, plans.pp,
                                                 passes)

    fwd_block = block.forward
    bwd_block = block.compute - block.forward
    breakdown.update(data_parallel_times(machine, workload, plans, fwd_block, bwd_block,
                                          blocks, n_mb, calibration))
    breakdown["optimizer"] = optimizer_s(machine, workload, plans, blocks)

    analytic = _sum(breakdown.values())
    stack = calibration.stack_multiplier(workload.stack)
    # (a hybrid model's all-to-all runs in its MoE layers only)
    a2a_blocks = moe_blocks if geometry.is_hybrid else blocks
    a2a_s = n_mb * a2a_blocks * expert_all_to_all_s(machine, workload, plans)
    drivers = chi_drivers(machine, plans, a2a_s, analytic)
    chi = chi_sys(drivers, calibration)
    step_time_s = analytic * chi * stack

    tokens = workload.tokens_per_step
    counts = count_parameters(geometry)
    cluster_peak = machine.mfu_peak_flops_per_s * machine.n_devices
    model_flops = model_flops_per_token(counts) * tokens
    attention_flops = sequence_mixing_flops_per_token(geometry, workload.seq_len) * tokens
    recompute_share = np.where(plans.checkpointing == Checkpointing.FULL,
                               workload.checkpointed_block_fraction / TRAIN_TO_FORWARD_FLOPS, 0.0)
    if workload.traits.selective_recompute is SelectiveRecompute.BLOCKS:  # f of the blocks
        recompute_share = np.where(plans.checkpointing == Checkpointing.SELECTIVE,
                                   workload.checkpointed_block_fraction / TRAIN_TO_FORWARD_FLOPS,
                                   recompute_share)
    selective_recompute_flops = np.where(plans.checkpointing == Checkpointing.SELECTIVE,
                                         selective_recompute_flops_per_token(workload)
                                         * tokens, 0.0)
    # the MTP modules the step charges (schedule.mtp_modules: blocks of their rank, with a
    # second LM head each), which 6·N_act and its attention term leave out
    mtp_flops = mtp_block_flops_per_token(geometry, counts, workload.seq_len) * tokens
    hardware_flops = ((model_flops + attention_flops + mtp_flops) * (1 + recompute_share)
                      + selective_recompute_flops
                      + (1 + geometry.mtp_layers) * lm_head_flops_per_token(geometry) * tokens)
    memory_total = total_memory_bytes(memory)
    feasible, overshoot = feasibility(memory_total, machine.hbm_bytes,
                                     machine.usable_memory_fraction)
    return StepPrediction(
        step_time_s=step_time_s,
        analytic_breakdown_s=breakdown,
        step_multiplier=chi * stack,
        labels=dict(_term_labels(tuple(breakdown))),
        tokens_per_s=tokens / step_time_s,
        tokens_per_s_per_gpu=tokens / step_time_s / machine.n_devices,
        mfu=model_flops / (step_time_s * cluster_peak),
        mfu_with_attention=(model_flops + attention_flops) / (step_time_s * cluster_peak),
        hfu=hardware_flops / (step_time_s * cluster_peak),
        memory_bytes=memory_total,
        memory_breakdown_bytes=memory,
        feasible=feasible,
        overshoot_bytes=overshoot,
        chi_sys=chi,
        analytic_step_time_s=analytic,
        attention_core_s=attention_core_s,
        elementwise_s=elementwise_s,
        block_compute_s=block_compute_s,
        block_dispatch_floor_s=block_dispatch_floor_s,
        routed_expert_s=routed_expert_s,
        chi_drivers=drivers,
        attention_kernel=kernel.kernel,
        gemm_lane_peak_ratio=machine.gemm_lane_peak_ratio,
    )
