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

from mosaic.arch import (
    AttentionKind,
    Geometry,
    HybridLayer,
    count_parameters,
    lm_head_flops_per_token,
)
from mosaic.arch.counts import ParameterCounts, hybrid_mixer_parameters
from mosaic.arch.flops import (
    TRAIN_TO_FORWARD_FLOPS,
    model_flops_per_token,
    sequence_mixing_flops_per_token,
)
from mosaic.errors import MosaicInputError
from mosaic.perf.attention_kernels import AttentionKernel, resolve_attention_kernel
from mosaic.perf.calibration import Calibration
from mosaic.perf.collectives import (
    all_gather_time_s,
    all_reduce_time_s,
    ep_and_pp_nodes_spanned,
    group_placement,
    reduce_scatter_time_s,
    send_recv_time_s,
)
from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.elementwise_traffic import elementwise_traffic_multiplier
from mosaic.perf.factorise import plan_key
from mosaic.perf.hybrid_layers import HybridLayerTimes, hybrid_layer_times
from mosaic.perf.kernels import gemm_time_s, te_grouped_linear_host_floor_s
from mosaic.perf.kernels import memory_bound_time_s as streaming_time_s
from mosaic.perf.layer_costs import (
    BACKWARD_TO_FORWARD_STREAMING,
    MOE_BLOCK_KEY,
    BlockTimes,
    dense_block_times,
    expert_all_to_all_s,
    gemm_s,
    moe_block_times,
    weighted_block_times,
)
from mosaic.perf.machine import Machine, with_attention_efficiency, with_fp8_attention
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.memory import (
    PARAMETER_STATE_KEY,
    STAGE_PARAMETER_KEY,
    StageParameters,
    feasibility,
    gradient_bytes_per_param,
    mean_block_activation_bytes,
    memory_breakdown_bytes,
    offloaded_blocks,
    optimizer_update_bytes,
    rank_parameters,
    shard_degrees,
    total_memory_bytes,
)
from mosaic.perf.microbench_constants import apply_microbench
from mosaic.perf.plan import Checkpointing, ParallelPlans, Sharding
from mosaic.perf.recompute_flops import selective_recompute_flops_per_token
from mosaic.perf.routing_load import expert_counts_reach_host, routed_load_factor
from mosaic.perf.schedule import (
    Stage,
    bubble_fraction,
    candidate_stages,
    fsdp_gathered_through_step,
    laid_out,
    middle_stage_can_be_heaviest,
    mtp_modules,
    n_microbatches,
    pp_transfers_overlap_compute,
    stage_hybrid_counts,
    stage_layer_counts,
    stage_rank,
    uses_dualpipe,
    vocab_ends_share_a_rank,
)
from mosaic.perf.shapes import local_experts, tokens_per_rank
from mosaic.perf.terms import step_term
from mosaic.perf.workload import OptimizerKind, Workload
from mosaic.stacks import SelectiveRecompute

# Muon: 5 Newton-Schulz iterations, each 4·m²·n + 2·m³ FLOPs for an m×n matrix, m ≤ n
# (Jordan et al. 2024, "Muon"); the work is spread over data-parallel ranks (Liu et al.
# 2025, "Muon is Scalable for LLM Training", distributed Muon).
MUON_ITERATIONS = 5
# The Newton-Schulz GEMMs run at half the large-GEMM rate: an assumption, not a measurement
# (each iteration chains small square products on one matrix at a time; no public trace of
# their rate was found); the Appendix E job's optimizer term is 0.05% of its step (21 ms of
# 41.3 s, `mosaic perf examples/appendix_e.yaml`).
NEWTON_SCHULZ_GEMM_RATE_FRACTION = 0.5
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
    uneven = workload.uneven_pipeline_stages
    if isinstance(dense, HybridLayerTimes):
        counts = stage_hybrid_counts(geometry, plans, stage, uneven, vocab_in_split)
        kinds = ((dense.mamba, counts[HybridLayer.MAMBA], "compute_mlp"),
                 (dense.gdn, counts[HybridLayer.GDN], "compute_mlp"),
                 (dense.attention, counts[HybridLayer.ATTENTION], "compute_mlp"),
                 (dense.mlp, counts[HybridLayer.MLP], "compute_mlp"),
                 (dense.moe, counts[HybridLayer.MOE], "compute_experts"))
        blocks = _sum(counts.values())
        return (_stage_terms(kinds, plans, workload.checkpointed_block_fraction, True),
                blocks, counts[HybridLayer.MOE])
    blocks, moe_blocks = stage_layer_counts(geometry, plans, stage, uneven, vocab_in_split,
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
    recompute = np.where(full, full_fraction * (total("forward") + total("tp_communication") / 2),
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
    sequence_split = np.where(plans.sequence_parallel, plans.tp, 1)
    message = (tokens_per_rank(workload, plans) * workload.geometry.d_model
               * ACTIVATION_BYTES / sequence_split)
    stage_stride = plans.tp * plans.cp * plans.dp
    crosses = ~group_placement(plans.pp, stage_stride, ic.scale_up_domain_gpus).inside_domain
    per_boundary = send_recv_time_s(message, crosses, ic)
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
    vocab_shard = geometry.vocab / plans.tp
    head = gemm_time_s(tokens, vocab_shard, geometry.d_model, machine.bf16_gemm_rate_flops_per_s,
                       machine.hbm_bw_bytes_per_s, machine.sm_count, params=machine.gemm_params)
    cross_entropy = streaming_time_s(tokens * vocab_shard * CROSS_ENTROPY_BYTES_PER_LOGIT,
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
                  bubble_fraction: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Eq. 13: (n_mb − 1)·max(t_first, t_last) + t_first + t_last + t_last·n_mb·f_bubble;
    with one stage both ends run every micro-batch: n_mb·(t_first + t_last)."""
    pipelined = ((n_mb - 1) * np.maximum(t_first, t_last) + t_first + t_last
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
                           n_mb: np.ndarray, bubble_fraction: np.ndarray, pp: np.ndarray
                           ) -> np.ndarray:
    """Vocabulary time of a pipeline whose ends hold fewer blocks (embedding and loss in the
    split): the slowest stage's vocabulary share ``vocab_per_mb`` on every micro-batch (and
    in the bubble), plus each end's once in fill and drain; one stage runs both ends on
    every micro-batch, as in Eq. 13."""
    pipelined = (n_mb * vocab_per_mb * (1 + bubble_fraction) + t_first + t_last
                 - vocab_per_mb)
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


def _moe_block_share(counts: ParameterCounts) -> float:
    """The share of an MoE model's blocks that are MoE blocks (the rest dense: a dense
    prefix, or MoE every k-th block): the weight of each kind in the mean FSDP unit."""
    return counts.moe_layers / counts.layers


def _fsdp_unit_parameters(workload: Workload, plans: ParallelPlans
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(dense, routed-expert) parameters per GPU of the mean block, whose gather and
    reduce-scatter each block's traffic is costed by (each transformer block one FSDP unit,
    torchtitan's ``fully_shard`` per block): an MoE model's dense blocks (DeepSeek-V3's first
    three, MoE every k-th block) gather their dense FFN and no experts; a hybrid's layers
    are its units. The mean times the blocks is the stage's traffic. Not the buffer's size:
    the memory model sizes that by the stage's largest unit
    (memory.StageParameters.largest_unit), a different quantity."""
    counts = count_parameters(workload.geometry)
    norms = counts.norms_per_layer
    geometry = workload.geometry
    if geometry.is_hybrid:
        # each layer is one unit; per layer on average (the step gathers and reduces units
        # per layer, so the mean layer times the layers is the stage's traffic): every kind's
        # matrices by its share of the layers, the routed experts only in the MoE layers'
        share = geometry.hybrid_shares
        matrices = sum(share[symbol] * hybrid_mixer_parameters(counts, symbol)
                       for symbol in HybridLayer)
        dense = (matrices / plans.tp + norms
                 + share[HybridLayer.MOE] * counts.router_per_layer)
        expert = (share[HybridLayer.MOE] * counts.experts * counts.routed_expert
                  / (plans.ep * plans.etp))
        return dense, expert
    if workload.geometry.moe is None:
        dense = (counts.attention_per_layer + counts.dense_ffn_per_layer) / plans.tp + norms
        return dense, np.zeros(len(plans))
    moe_share = _moe_block_share(counts)
    dense = ((counts.attention_per_layer + moe_share * counts.shared_experts_per_layer
              + (1 - moe_share) * counts.dense_ffn_per_layer) / plans.tp
             + norms + moe_share * counts.router_per_layer)
    expert = moe_share * counts.experts * counts.routed_expert / (plans.ep * plans.etp)
    return dense, expert


def _fsdp_extra_tensor_gathers(workload: Workload, plans: ParallelPlans
                               ) -> tuple[float, np.ndarray]:
    """(dense, routed-expert) all-gathers beyond the first of each group in the mean block
    on one GPU, as a per-tensor gather sees the block's tensors: separate Q, K, V and output
    projections (MLA: q down/up, kv down/up, output and the two latent norms), an optional
    attention gate, two block norms, and the FFN matrices (3 with a GLU, else 2) of a dense
    block or, in an MoE block, the router, the shared experts' matrices and each local
    expert's matrices (weighted by the blocks of each kind, as
    :func:`_fsdp_unit_parameters`)."""
    geometry = workload.geometry
    ffn_matrices = 3 if geometry.glu else 2
    attention = 7 if geometry.attention is AttentionKind.MLA else 4
    dense = attention + int(geometry.gated_attention) + 2
    if geometry.moe is None:
        return dense + ffn_matrices - 1, np.zeros(len(plans))
    moe = geometry.moe
    moe_share = _moe_block_share(count_parameters(geometry))
    dense += moe_share * (1 + moe.shared_experts * ffn_matrices) + (1 - moe_share) * ffn_matrices
    expert_tensors = local_experts(workload, plans) * ffn_matrices
    return dense - 1, moe_share * np.maximum(expert_tensors - 1, 0)


def _data_parallel_collectives_s(machine: Machine, workload: Workload, plans: ParallelPlans
                                 ) -> dict[str, np.ndarray]:
    """Seconds of each data-parallel collective before any overlap: per step for DDP's
    all-reduce, ZeRO's reduce-scatter and all-gather (of the heavier end stage's
    parameters); per FSDP unit for its gather, reduce-scatter and HSDP's replica
    all-reduce."""
    return {**_gradient_collectives_s(machine, workload, plans),
            **_fsdp_unit_collectives_s(machine, workload, plans)}


# DDP's and ZeRO's collectives read neither the sharding mode nor the HSDP shard group, and
# FSDP's per-unit ones not the pipeline split: each is computed once per value of its own
# fields (mosaic.perf.factorise).
@plan_key(*STAGE_PARAMETER_KEY, "cp", "dp", remember=without_top_k)
def _gradient_collectives_s(machine: Machine, workload: Workload, plans: ParallelPlans
                            ) -> dict[str, np.ndarray]:
    """DDP's all-reduce, ZeRO's reduce-scatter and all-gather, per step."""
    params = _heaviest_stage_parameters(workload, plans)
    ic = machine.interconnect
    dense_group = plans.dp * plans.cp
    dense_stride = plans.tp
    expert_group = np.maximum(plans.edp, 1)
    expert_stride = plans.etp * plans.ep
    # Gradients reduce in their buffer's dtype, the one the memory model holds (fp32, or
    # bf16 where the recipe sets grad_reduce_in_fp32 False: Megatron-Core DDP communicates
    # the grad buffer as it is, megatron/core/distributed/param_and_grad_buffer.py).
    grad_bytes = gradient_bytes_per_param(workload)
    grad_dense = params.non_expert * grad_bytes
    grad_expert = params.expert * grad_bytes
    # Updated bf16 parameters, the block GEMMs' weights in 8 bits under fp8_param_gather.
    gemm_weight_bytes = workload.gemm_weight_gather_bytes(ACTIVATION_BYTES)
    weight_dense = (params.dense * gemm_weight_bytes
                    + (params.replicated + params.vocab) * ACTIVATION_BYTES)
    weight_expert = params.expert * gemm_weight_bytes

    # DDP: one all-reduce of all gradients; ZeRO-1/2: reduce-scatter of gradients and an
    # all-gather of updated bf16 parameters (Megatron-Core distributed optimizer).
    # A stage without routed experts launches no expert-group collective (not even its
    # zero-byte latency).
    has_experts = params.expert > 0
    all_reduce = (all_reduce_time_s(grad_dense, dense_group, dense_stride, ic)
                  + np.where(has_experts, all_reduce_time_s(grad_expert, expert_group,
                                                            expert_stride, ic), 0.0))
    reduce_scatter = (reduce_scatter_time_s(grad_dense, dense_group, dense_stride, ic)
                      + np.where(has_experts, reduce_scatter_time_s(
                          grad_expert, expert_group, expert_stride, ic), 0.0))
    all_gather = (all_gather_time_s(weight_dense, dense_group, dense_stride, ic)
                  + np.where(has_experts, all_gather_time_s(weight_expert, expert_group,
                                                            expert_stride, ic), 0.0))
    return {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter,
            "all_gather": all_gather}


@plan_key("tp", "cp", "dp", "ep", "etp", "sharding", "hsdp_shard", remember=without_top_k)
def _fsdp_unit_collectives_s(machine: Machine, workload: Workload, plans: ParallelPlans
                             ) -> dict[str, np.ndarray]:
    """FSDP's gather and reduce-scatter and HSDP's replica all-reduce, per unit."""
    ic = machine.interconnect
    dense_group = plans.dp * plans.cp
    dense_stride = plans.tp
    expert_stride = plans.etp * plans.ep
    grad_bytes = gradient_bytes_per_param(workload)
    # FSDP / HSDP (Zhao et al. 2023, PyTorch FSDP): per block, gather parameters before
    # forward and backward and reduce-scatter gradients after backward, prefetching one
    # block ahead; with pp > 1 parameters stay gathered for the step (torchtitan).
    # Dense parameters shard over the (HSDP shard group of the) data-parallel ranks, routed
    # experts over the expert-data-parallel ranks, which sit ep·etp ranks apart (Eq. 24).
    shard_group, expert_shard_group = shard_degrees(plans)
    block_dense, block_expert = _fsdp_unit_parameters(workload, plans)
    # Gathered parameters travel in the stack's gather dtype: bf16 for torch FSDP2 with a
    # bf16 param_dtype, fp32 for JAX/XLA trainers whose weights rest in fp32 (stack trait
    # fsdp_gather_bytes_per_param).
    # Float8 FSDP all-gather (torchtitan enable_fsdp_float8_all_gather): the block's
    # weights travel in 8 bits (its norms, a few thousand parameters, counted with them).
    gather_bytes = workload.gemm_weight_gather_bytes(workload.traits.fsdp_gather_bytes_per_param)
    unit_experts = block_expert > 0
    gather = (all_gather_time_s(block_dense * gather_bytes, shard_group, dense_stride, ic)
              + np.where(unit_experts, all_gather_time_s(block_expert * gather_bytes,
                                                         expert_shard_group, expert_stride,
                                                         ic), 0.0))
    scatter = (reduce_scatter_time_s(block_dense * grad_bytes, shard_group, dense_stride, ic)
               + np.where(unit_experts, reduce_scatter_time_s(block_expert * grad_bytes,
                                                              expert_shard_group,
                                                              expert_stride, ic), 0.0))
    if workload.fsdp_gathers_per_tensor:
        # Every tensor beyond the first of each group (dense, routed experts) pays one more
        # all-gather's fixed cost (launch and per-step latency: the zero-byte time of the
        # same collective). Gradients still reduce-scatter in buckets (DeepSpeed ZeRO-3's
        # reduce_bucket_size), so the scatter is unchanged.
        dense_extra, expert_extra = _fsdp_extra_tensor_gathers(workload, plans)
        gather = gather + (dense_extra * all_gather_time_s(0.0, shard_group, dense_stride, ic)
                           + expert_extra * all_gather_time_s(0.0, expert_shard_group,
                                                              expert_stride, ic))
    # HSDP: each unit's reduce-scattered gradient shard is then all-reduced across the
    # replicas, per unit, on a stream of its own (torch FSDP1 _runtime_utils._reduce_grad:
    # dist.all_reduce on state._all_reduce_stream after it waits for the post-backward
    # stream; FSDP2's foreach_reduce likewise all-reduces each unit's shard after its
    # reduce-scatter), so it overlaps the backward of the units after it.
    replicas = np.maximum(dense_group // np.maximum(shard_group, 1), 1)
    # Routed experts shard over their share of the expert-data-parallel group
    # (memory.shard_degrees) and are replicated across the rest of it: edp / that share
    # copies, none where each expert lives on one rank (edp = 1 under ep = dp).
    edp = np.maximum(plans.edp, 1)
    expert_replicas = np.maximum(edp // np.maximum(expert_shard_group, 1), 1)
    dense_replica = np.where(replicas > 1, all_reduce_time_s(
        block_dense * grad_bytes / shard_group, replicas, dense_stride * shard_group, ic), 0.0)
    expert_replica = np.where(unit_experts & (expert_replicas > 1), all_reduce_time_s(
        block_expert * grad_bytes / expert_shard_group, expert_replicas,
        expert_stride * expert_shard_group, ic), 0.0)
    unit_replica = dense_replica + expert_replica
    return {"unit_gather": gather, "unit_scatter": scatter, "unit_replica": unit_replica}


def _data_parallel_times(machine: Machine, workload: Workload, plans: ParallelPlans,
                         fwd_block_s: np.ndarray, bwd_block_s: np.ndarray, blocks: np.ndarray,
                         n_mb: np.ndarray, calibration: Calibration
                         ) -> dict[str, np.ndarray]:
    """Exposed data-parallel communication per step, by collective."""
    collectives = _data_parallel_collectives_s(machine, workload, plans)
    sharding = plans.sharding
    # A stack run without DDP/ZeRO overlap reduces and gathers after the passes
    # (Workload.dp_comm_overlap); FSDP below overlaps per unit regardless.
    overlap = calibration.dp_overlap_fraction if workload.dp_comm_overlap else 0.0
    hide_bwd = overlap * bwd_block_s * blocks
    hide_fwd = overlap * fwd_block_s * blocks
    is_ddp = sharding == Sharding.NONE
    is_zero = (sharding == Sharding.ZERO1) | (sharding == Sharding.ZERO2)
    is_fsdp = (sharding == Sharding.FSDP) | (sharding == Sharding.HSDP)
    gather, scatter = collectives["unit_gather"], collectives["unit_scatter"]
    # HSDP's replica all-reduce of a unit (zero otherwise) runs beside the next units'
    # gathers and reduce-scatters: inside the shard group they use the scale-up links, the
    # replicas the network. The last unit's has no backward left to hide behind.
    replica = np.where(sharding == Sharding.HSDP, collectives["unit_replica"], 0.0)
    gather_fwd_exposed = np.maximum(0.0, gather - fwd_block_s)
    gather_bwd_exposed = np.maximum(0.0, gather - bwd_block_s)
    scatter_exposed = (np.maximum(0.0, np.maximum(gather + scatter, replica) - bwd_block_s)
                       - gather_bwd_exposed)
    reductions = np.where(fsdp_gathered_through_step(workload, plans), 1, n_mb)
    gathers_per_step = reductions * blocks
    # The two ends of each pass have no compute to hide behind (Zhao et al. 2023, "PyTorch
    # FSDP", arXiv 2304.11277, Fig. 5: AG0 runs before FWD0, RS0 after BWD0): the first unit's
    # forward gather waits in full, and so do the last unit's reduce-scatter and replica
    # all-reduce, which the end of backward waits for (torch FSDP1
    # _runtime_utils._post_backward_final_callback and FSDP2's root post-backward callback
    # make the compute stream wait on the reduction stream). Once per gathering forward and
    # once per reducing backward.
    # (The last unit's replica all-reduce is already counted in full below.)
    first_gather = gather - gather_fwd_exposed
    last_scatter = np.maximum(0.0, scatter - scatter_exposed)
    fsdp_gather = (gathers_per_step * (gather_fwd_exposed + gather_bwd_exposed)
                   + reductions * first_gather)
    fsdp_scatter = (gathers_per_step * scatter_exposed + reductions * (replica + last_scatter))
    zero = np.zeros(len(plans))
    # DDP's and ZeRO's bucketed collectives hide behind compute except the bucket that ends
    # the pass: the last gradient bucket, reduced after the last backward compute, and the
    # first parameter bucket, which the first forward block waits for.
    edge = _dp_edge_bucket_share(workload, plans, blocks)

    def exposed(collective_s: np.ndarray, hide_s: np.ndarray, uses: np.ndarray
                ) -> np.ndarray:
        if not uses.any():
            return np.zeros_like(zero)  # a term of its own: terms may be summed in place
        return np.where(uses, np.maximum(edge * collective_s, collective_s - hide_s), 0.0)

    return {
        "dp_all_reduce": exposed(collectives["all_reduce"], hide_bwd, is_ddp),
        "dp_reduce_scatter": exposed(collectives["reduce_scatter"], hide_bwd, is_zero),
        "dp_all_gather": exposed(collectives["all_gather"], hide_fwd, is_zero),
        "fsdp_all_gather": np.where(is_fsdp, fsdp_gather, zero),
        "fsdp_reduce_scatter": np.where(is_fsdp, fsdp_scatter, zero),
    }


# Megatron-Core DDP's default gradient bucket: max(4e7, 1e6 x dp) parameters ("larger DP
# sizes need larger buckets to ensure collectives do not become latency-bound"),
# megatron/core/distributed/distributed_data_parallel.py and distributed_data_parallel_config.py
# (NVIDIA/Megatron-LM @ d98e8a64dd).
MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_DP_RANK = 1_000_000


def _dp_edge_bucket_share(workload: Workload, plans: ParallelPlans,
                          blocks: np.ndarray) -> np.ndarray:
    """Share of the stage's DDP/ZeRO collective that ends a pass with nothing to hide
    behind (the stack trait ``dp_last_bucket``): Megatron-Core's default bucket over the
    heavier end stage's parameters, one block of ``blocks`` for per-unit stacks (FSDP
    SHARD_GRAD_OP), zero where the stack's bucketing is not modelled."""
    rule = workload.traits.dp_last_bucket
    if rule == "megatron":
        return _megatron_last_bucket_share(workload, plans)
    if rule == "unit":
        return 1.0 / np.maximum(blocks, 1)
    return np.zeros(len(plans))


@plan_key(*STAGE_PARAMETER_KEY, "cp", "dp", remember=without_top_k)
def _megatron_last_bucket_share(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Megatron-Core's default gradient bucket over the heavier end stage's parameters."""
    bucket = np.maximum(MEGATRON_MIN_BUCKET_PARAMS,
                        MEGATRON_BUCKET_PARAMS_PER_DP_RANK * plans.dp * plans.cp)
    stage = _heaviest_stage_parameters(workload, plans).total
    return np.minimum(1.0, bucket / np.maximum(stage, 1.0))


def _matrix_newton_schulz_flops(rows: float, cols: float) -> float:
    small, large = min(rows, cols), max(rows, cols)
    return MUON_ITERATIONS * (4 * small * small * large + 2 * small**3)


@plan_key(*PARAMETER_STATE_KEY, remember=without_top_k)
def _optimizer_update_s(machine: Machine, workload: Workload, plans: ParallelPlans
                        ) -> np.ndarray:
    """Streaming optimizer update over the local shard of the heavier end stage's
    parameters."""
    params = _heaviest_stage_parameters(workload, plans)
    return streaming_time_s(optimizer_update_bytes(workload, params, plans),
                            machine.hbm_bw_bytes_per_s)


def _optimizer_s(machine: Machine, workload: Workload, plans: ParallelPlans,
                 blocks: np.ndarray) -> np.ndarray:
    """Streaming optimizer update over the local shard (+ Muon's Newton-Schulz FLOPs)."""
    update = _optimizer_update_s(machine, workload, plans)
    if workload.optimizer is not OptimizerKind.MUON:
        return update
    geometry = workload.geometry
    d = geometry.d_model
    counts = count_parameters(geometry)
    attention = _matrix_newton_schulz_flops(d, counts.attention_per_layer / d)
    mlp = _matrix_newton_schulz_flops(d, counts.dense_ffn_per_layer / d)
    expert_share = 1.0
    if geometry.is_hybrid:  # a mean layer: each kind's matrices by its share of the layers
        share = geometry.hybrid_shares
        mamba, gdn = geometry.mamba, geometry.gdn
        mixer = (_matrix_newton_schulz_flops(d, mamba.in_proj_width)
                 + _matrix_newton_schulz_flops(mamba.inner_width, d)) if mamba else 0.0
        delta_net = (_matrix_newton_schulz_flops(d, gdn.in_proj_width)
                     + _matrix_newton_schulz_flops(gdn.value_width, d)) if gdn else 0.0
        dense_matrix_flops = (share[HybridLayer.ATTENTION] * attention
                              + share[HybridLayer.MAMBA] * mixer
                              + share[HybridLayer.GDN] * delta_net
                              + share[HybridLayer.MLP] * mlp)
        expert_share = share[HybridLayer.MOE]
    else:
        dense_matrix_flops = attention + mlp
    block_flops = np.full(len(plans), dense_matrix_flops) / plans.tp**2
    if geometry.moe is not None:
        expert = _matrix_newton_schulz_flops(d, counts.routed_expert / d)
        block_flops = block_flops + (expert_share * local_experts(workload, plans) * expert
                                     / plans.etp**2)
    ns_flops = blocks * block_flops / np.maximum(plans.dp * plans.cp, 1)
    return update + ns_flops / (machine.gemm_rate_flops_per_s
                                * NEWTON_SCHULZ_GEMM_RATE_FRACTION)


@dataclass(frozen=True)
class ChiDrivers:
    """The physical quantities Eq. 15 scales (arrays over plans).

    Node spans come from the actual rank placement (EP stride etp, PP stride tp·cp·dp)
    instead of the paper's ceil(P·P_TP / N_gpu/node).
    """

    a2a_share: np.ndarray  # t_A2A / t_iter, zero when the EP group stays in one node
    pp_extra_nodes: np.ndarray  # N_PP_node − 1
    deep_local_pipeline: np.ndarray  # pp ≥ GPUs per node and the pipeline in one node


def chi_drivers(machine: Machine, plans: ParallelPlans, a2a_s: np.ndarray,
                t_iter: np.ndarray) -> ChiDrivers:
    """Drivers of χ_sys for every plan."""
    ep_nodes, pp_nodes = _nodes_spanned_by_ep_and_pp(machine, plans)
    return ChiDrivers(
        a2a_share=np.where(ep_nodes > 1, a2a_s / np.maximum(t_iter, 1e-30), 0.0),
        pp_extra_nodes=(pp_nodes - 1).astype(float),
        deep_local_pipeline=((plans.pp >= machine.gpus_per_node) & (pp_nodes == 1)).astype(float),
    )


@plan_key("tp", "pp", "cp", "dp", "ep", "etp")
def _nodes_spanned_by_ep_and_pp(machine: Machine, plans: ParallelPlans
                                ) -> tuple[np.ndarray, np.ndarray]:
    """Hosts an EP group spans and hosts the pipeline spans
    (:func:`~mosaic.perf.collectives.ep_and_pp_nodes_spanned`)."""
    return ep_and_pp_nodes_spanned(plans.ep, plans.etp, plans.pp, plans.tp, plans.cp, plans.dp,
                                   machine.interconnect.gpus_per_node)


def chi_sys(drivers: ChiDrivers, calibration: Calibration) -> np.ndarray:
    """Eq. 15: 1 + c_A2A·t_A2A/t_iter·[EP spans nodes] + c_PP·(N_PP_node − 1)
    + c_ovl·[pp ≥ GPUs/node and the pipeline stays in one node]."""
    return (1.0 + calibration.chi_a2a * drivers.a2a_share
            + calibration.chi_pp * drivers.pp_extra_nodes
            + calibration.chi_overlap * drivers.deep_local_pipeline)


def _average_hybrid_layer(geometry: Geometry, layers: HybridLayerTimes) -> BlockTimes:
    """A hybrid model's mean layer: each kind's times weighted by its share of the layers."""
    shares = geometry.hybrid_shares
    return weighted_block_times([
        (shares[HybridLayer.MAMBA], layers.mamba), (shares[HybridLayer.GDN], layers.gdn),
        (shares[HybridLayer.ATTENTION], layers.attention),
        (shares[HybridLayer.MLP], layers.mlp), (shares[HybridLayer.MOE], layers.moe)])


def _expert_host_floor_s(workload: Workload, plans: ParallelPlans, moe_blocks: np.ndarray,
                         calibration: Calibration) -> np.ndarray:
    """Host floor of a stage's grouped expert GEMMs per micro-batch: up and down
    projections, forward and backward, over the E/ep local experts of each MoE block
    (:func:`~mosaic.perf.kernels.te_grouped_linear_host_floor_s`, an isolated-call
    benchmark), times the calibration's ``host_in_block_factor`` (what a launch costs the
    host between a training block's other kernels over what it costs alone); zero for a
    dense model."""
    moe = workload.geometry.moe
    if moe is None or workload.traits.expert_gemm_launch == "one_op":
        # One compiled op per expert projection (stack trait expert_gemm_launch one_op:
        # jax.lax.ragged_dot_general is one HLO instruction however many groups it has):
        # its launch is one of the layer's kernels, with no per-expert host work.
        return np.zeros(len(plans))
    experts_here = local_experts(workload, plans)
    return calibration.host_in_block_factor * moe_blocks * 2 * (
        te_grouped_linear_host_floor_s(experts_here)
        + te_grouped_linear_host_floor_s(experts_here, backward=True))


def _moe_host_sync_s(workload: Workload, expert_host_floor_s: np.ndarray) -> np.ndarray:
    """Per micro-batch: host time of the grouped expert GEMMs that no GPU work hides.

    With a host-device synchronisation in every MoE layer the host cannot run ahead of the
    GPU, so the measured GroupedLinear host floor (up and down projections, forward and
    backward) adds to the GPU time instead of overlapping it (Eq. 11's max assumes a host
    that runs ahead). Zero for drop-and-pad routing on the all-to-all dispatcher, dense
    models and stacks without TE GroupedLinear (:func:`~mosaic.perf.routing_load.
    expert_counts_reach_host`), and for a step captured as one CUDA graph (its MoE layers
    run on a static per-rank token budget, Workload.full_iteration_cuda_graph). Fit
    evidence: leave-one-source-out MoE tokens/s MAPE on the published runs drops from 22.8%
    to 17.2% with this term (docs/perf.md).
    """
    if not expert_counts_reach_host(workload) or workload.full_iteration_cuda_graph:
        return np.zeros_like(expert_host_floor_s)
    return expert_host_floor_s


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


def _dispatch_floor_s(workload: Workload, plans: ParallelPlans, blocks: np.ndarray,
                      moe_blocks: np.ndarray, expert_host_floor_s: np.ndarray,
                      calibration: Calibration) -> np.ndarray:
    """t_disp = L_stage·(κ0 + κ1·E_loc)·t_gap + t_host (Eq. 11), per micro-batch.

    The per-local-expert launches are costed one of two ways: by the kernel-count law's κ1
    when the calibration states one (the paper's ScalePlan measured κ1 = 7.29 kernels per
    local expert from its stack's profiler traces, dlcalc/utils/kernel_launch.py), else by
    the measured host floor of the grouped expert GEMMs (``expert_host_floor_s``), never
    both. With ep > 1, each MoE block adds the host cost of the token permutation and
    all-to-all dispatch path (ScalePlan: ~10 ms per MoE-layer execution on the paper's
    Megatron-Core stack, from the same traces); zero in calibrations that do not state it.
    """
    launched_per_expert = (local_experts(workload, plans)
                           if workload.traits.expert_gemm_launch == "per_group" else 0.0)
    kernels = (calibration.kernels_per_layer_base * blocks
               + calibration.kernels_per_local_expert * launched_per_expert * moe_blocks)
    experts_host = (expert_host_floor_s if calibration.kernels_per_local_expert == 0
                    else np.zeros(len(plans)))
    ep_dispatch = np.where(plans.ep > 1, moe_blocks
                           * calibration.ep_dispatch_host_s_per_moe_layer, 0.0)
    if workload.full_iteration_cuda_graph or workload.layer_cuda_graphs:
        # One graph launch replays the step's kernels (Megatron-Core FullCudaGraphWrapper,
        # docs/user-guide/features/cuda_graph.md), or one per layer and pass (the per-layer
        # CudaGraphManager): the host issues nothing per kernel, and a graph launch (tens
        # of microseconds per layer) is left out.
        return np.zeros(len(plans))
    return (kernels * calibration.dispatch_gap_s + experts_host + ep_dispatch
            + calibration.host_overhead_per_microbatch_s)


@plan_key(*STAGE_PARAMETER_KEY, remember=without_top_k)
def _heaviest_stage_parameters(workload: Workload, plans: ParallelPlans) -> StageParameters:
    """The parameters of the pipeline rank that holds the most (of
    :func:`~mosaic.perf.schedule.candidate_stages`; the later rank on a tie): what the
    data-parallel collectives and the optimizer step move."""
    stages = candidate_stages(workload.geometry, plans, workload.pipeline_layouts)
    params = rank_parameters(workload, plans, stages[-1])
    for stage in reversed(stages[:-1]):
        other = rank_parameters(workload, plans, stage)
        heavier = other.total > params.total
        params = StageParameters(**{
            name: np.where(heavier, getattr(other, name), getattr(params, name))
            for name in StageParameters.__dataclass_fields__})
    return params


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

    ``memory_breakdown``: :func:`memory_breakdown_bytes` of these plans when the caller
    already has it (a search that checks memory before timing); else it is computed.
    """
    geometry = workload.geometry
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
    memory = (memory_breakdown_bytes(workload, plans) if memory_breakdown is None
              else memory_breakdown)
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
    expert_host_floor = _expert_host_floor_s(workload, plans, moe_blocks, calibration)
    per_mb = {**block_terms, "pp_send_recv": pipeline_p2p,
              "moe_host_sync": _moe_host_sync_s(workload, expert_host_floor),
              "activation_offload": _activation_offload_exposed_s(
                  machine, workload, plans, block, blocks, moe_blocks)}
    t_cmp = _sum(per_mb.values())
    # a hybrid model's layer is half a transformer block: one norm, one mixer or FFN, one
    # residual, so half of a block's kernel launches
    kernel_blocks = blocks / 2 if geometry.is_hybrid else blocks
    t_disp = _dispatch_floor_s(workload, plans, kernel_blocks, moe_blocks, expert_host_floor,
                               calibration)
    dispatch_extra = np.maximum(0.0, t_disp - t_cmp)
    breakdown = {name: n_mb * value for name, value in per_mb.items()}
    breakdown["dispatch_floor"] = n_mb * dispatch_extra
    t_block = n_mb * (t_cmp + dispatch_extra)
    f_bubble = bubble_fraction(plans.pp, plans.vpp, n_mb, uses_dualpipe(workload))
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
                                                          n_mb, f_bubble, plans.pp)
    elif slotted.any():
        breakdown["vocab_stage"] = np.where(
            slotted, balanced_vocab_stage_s(vocab_per_mb, t_first, t_last_all, n_mb, f_bubble,
                                            plans.pp),
            vocab_stage_s(t_first, t_last_all, n_mb, f_bubble, plans.pp))
    else:
        breakdown["vocab_stage"] = vocab_stage_s(t_first, t_last_all, n_mb, f_bubble, plans.pp)

    fwd_block = block.forward
    bwd_block = block.compute - block.forward
    breakdown.update(_data_parallel_times(machine, workload, plans, fwd_block, bwd_block,
                                          blocks, n_mb, calibration))
    breakdown["optimizer"] = _optimizer_s(machine, workload, plans, blocks)

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
    hardware_flops = ((model_flops + attention_flops) * (1 + recompute_share)
                      + selective_recompute_flops + lm_head_flops_per_token(geometry) * tokens)
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
