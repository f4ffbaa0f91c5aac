"""Activations saved for the backward pass, per layer kind and recompute policy, and per
pipeline stage over its in-flight micro-batches (Korthikanti et al. 2022, arXiv 2205.05198,
re-derived tensor by tensor; docs/memory.md).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from mosaic.arch import AttentionKind, HybridLayer
from mosaic.arch.counts import ffn_up_projections
from mosaic.errors import MosaicInputError
from mosaic.perf.attention_kernels import materialises_scores, stack_default_kernel
from mosaic.perf.element_bytes import ACTIVATION_BYTES, FP32_BYTES
from mosaic.perf.elementwise_traffic import RMSNORM_ERAS, ElementwiseKernels, elementwise_kernels
from mosaic.perf.factorise import plan_key
from mosaic.perf.memory.logits import logits_bytes
from mosaic.perf.memory.parameter_states import holds_lm_head
from mosaic.perf.memory.plan_keys import BLOCK_ACTIVATION_KEY, STAGE_ACTIVATION_KEY
from mosaic.perf.plan import Checkpointing, ParallelPlans
from mosaic.perf.routing_load import routed_load_factor
from mosaic.perf.schedule import (
    MIRROR_STAGE,
    Stage,
    in_flight_microbatches,
    lm_head_stage,
    mirror_in_flight_microbatches,
    mtp_modules,
    stage_hybrid_counts,
    stage_layer_counts,
    uses_dualpipe,
)
from mosaic.perf.shapes import (
    attention_widths,
    expert_copies,
    mla_input_projections,
    routed_tokens,
    sequence_shard_divisor,
    tokens_per_rank,
)
from mosaic.perf.workload import Workload
from mosaic.stacks import SelectiveRecompute

INDEX_BYTES = 8  # int64 routing indices
# Eager torch model code whose RMSNorm upcasts to fp32 (ElementwiseKernels.EAGER_FP32_NORM:
# HF transformers LlamaRMSNorm @ 4.34, torchtitan's RMSNorm run eagerly before PyTorch 2.9's
# fused kernel, which saves only the input and a per-row rstd): x.to(float32) is
# saved by pow and by the normalising mul (4 B), the normalised bf16 tensor by the weight mul
# (2 B), the output by the next linear (counted as its GEMM input), and the bf16 input x by
# nothing (the cast's backward needs no input): 4 B per element more than the norm input the
# counts above keep. An eager SwiGLU, act_fn(gate) * up, saves the SiLU output for the mul
# beside gate, up and their product: one more bf16 tensor of the FFN width.
EAGER_NORM_EXTRA_BYTES_PER_ELEMENT = FP32_BYTES  # fp32 copy + normalised bf16 - bf16 input
EAGER_GLU_EXTRA_BYTES_PER_ELEMENT = ACTIVATION_BYTES
# The gated DeltaNet's output norm keeps two tensors of the value width: the norm's input (the
# delta rule's output, for the RMSNorm backward) and its output (for the gate multiply's
# gradient w.r.t. z); gated_delta_net.py _apply_gated_norm @ 0d8e0714.
GDN_GATED_NORM_SAVED = 2
# Transformer blocks ("dense", "moe") and a hybrid model's layers (perf/hybrid_layers.py)
LayerKind = Literal["dense", "moe", "mamba", "gdn", "attention", "mlp", "moe_layer"]
HYBRID_LAYER_KINDS: dict[HybridLayer, LayerKind] = {
    HybridLayer.MAMBA: "mamba", HybridLayer.GDN: "gdn", HybridLayer.ATTENTION: "attention",
    HybridLayer.MLP: "mlp", HybridLayer.MOE: "moe_layer"}
# the FFN part each kind's recompute modules act on (None: no FFN)
_FFN_PART: dict[str, str | None] = {"dense": "dense", "moe": "moe", "mlp": "dense",
                                    "moe_layer": "moe", "mamba": None, "gdn": None,
                                    "attention": None}
# kinds with an attention core (whose softmax statistics core_attn recompute drops)
_ATTENTION_KINDS = frozenset({"dense", "moe", "attention"})


def softmax_statistics_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """What the attention core saves for its backward, and what core-attention recompute
    drops: flash attention keeps an fp32 log-sum-exp per query row and head (Dao 2023,
    FlashAttention-2, Alg. 1) and never stores the s×s matrix; materialised (reference)
    attention keeps the bf16 probabilities, b·h·s_q·s_k per GPU (Korthikanti et al. 2022's
    5as²b term without dropout: the softmax output is what the PV backward needs).
    Levanter's blockwise kernel (jax_flash) saves an fp32 log-sum-exp per row like flash
    attention (flash_attention.py ``ell``), and materialises on sequences under a block."""
    rows = tokens_per_rank(workload, plans) * workload.geometry.heads / plans.tp
    kernel = workload.attention_kernel or stack_default_kernel(workload.stack)
    if materialises_scores(kernel, workload.seq_len):
        return ACTIVATION_BYTES * rows * workload.seq_len
    return FP32_BYTES * rows


def attention_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Bytes one attention block saves per micro-batch with nothing recomputed.

    Korthikanti et al. 2022 Sec. 4.1 count 11sbh + 5as²b; with flash attention, no dropout
    and separate K/V widths this becomes: norm input and QKV-GEMM input (2·2sbh, sharded by
    SP, Sec. 4.2.2), rotated Q, K, V (2sb·(q + k + v)/tp), attention output (the output
    projection's input, 2sb·q/tp), softmax statistics, plus gate tensors for gated
    attention and MLA latents (replicated across TP). GEMM inputs (QKV and output
    projection) take ``Workload.dense_gemm_element_bytes`` (FP8 recipes save the FP8 copy
    Transformer Engine cast for the forward GEMM).
    """
    geometry = workload.geometry
    widths = attention_widths(geometry)
    tokens, tp = tokens_per_rank(workload, plans), plans.tp
    gemm_in = workload.dense_gemm_element_bytes
    sequence_region = (ACTIVATION_BYTES + gemm_in) * tokens * geometry.d_model / (
        sequence_shard_divisor(plans))
    qkv = tokens * (widths.query / tp + widths.key_value_per_rank(tp))
    # QK-norm: the q and k RMSNorms save their input, the QKV GEMM's q and k before the norm
    # (a second copy beside the rotated q, k the attention core keeps): Megatron-Core
    # Attention.forward q_layernorm/k_layernorm (TE RMSNorm saves its input), HF/torchtitan
    # Qwen3 q_norm/k_norm (torch RMSNorm's pow/mul save x)
    qk_norm_inputs = (tokens * (widths.query / tp + widths.key_value_per_rank(tp) / 2)
                      if geometry.qk_norm and geometry.mla is None else 0.0)
    latents = tokens * widths.latent
    # a gate's logits and the pre-gate output it multiplies: per head or per output channel
    gate_width = (geometry.heads if geometry.gated_attention else widths.output)
    gate = (tokens * (gate_width + widths.output) / tp
            if geometry.gated_attention or geometry.attention_output_gate else 0.0)
    stored = (sequence_region + ACTIVATION_BYTES * (qkv + qk_norm_inputs + latents + gate)
              + gemm_in * tokens * widths.output / tp)
    return stored + softmax_statistics_bytes(workload, plans)


def _ffn_bytes(tokens: np.ndarray, width_per_rank: np.ndarray, glu: bool,
               gemm_in: int, gemm1_out: int = ACTIVATION_BYTES) -> np.ndarray:
    """FFN intermediates per token: GEMM-1 output (2 tensors for a GLU: gate and up) at
    ``gemm1_out`` bytes and the activation output, which is GEMM-2's input at ``gemm_in``
    bytes. SwiGLU: 3 tensors of width w; GELU: 2 (Korthikanti's 8sbh + 8sbh for w = 4h in
    bf16)."""
    return tokens * width_per_rank * (ffn_up_projections(glu) * gemm1_out + gemm_in)


def dense_mlp_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Dense FFN block: norm input + GEMM-1 input (2sbh each, SP-sharded) and intermediates."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    gemm_in = workload.dense_gemm_element_bytes
    sequence_region = ((ACTIVATION_BYTES + gemm_in) * tokens * geometry.d_model
                       / sequence_shard_divisor(plans))
    return sequence_region + _ffn_bytes(tokens, geometry.ffn / plans.tp, geometry.glu, gemm_in)


def moe_block_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """MoE FFN block of one layer per micro-batch, with nothing recomputed.

    T routed tokens per GPU, K experts per token, balanced routing. After the all-to-all
    (and the ETP all-gather) a GPU holds C = K·T·etp token copies for experts of width
    d_expert/etp. Saved: norm input and output (2·2Th; the router, dispatcher and shared
    expert read the same norm output), fp32 router logits and scores (2·4TE) with int64
    top-K indices and fp32 top-K probabilities (12TK), permuted expert inputs (2Ch), expert
    intermediates (SwiGLU: 3 tensors of d_expert/etp per copy), expert outputs kept for the
    probability-weighted combine (2KTh) unless the stack scales the expert activation by the
    probabilities instead (trait ``moe_probs_in_activation``: the unpermute is then a plain
    sum that saves nothing), and shared-expert intermediates (TP-split).
    Expert GEMM inputs take ``Workload.gemm_element_bytes`` (1 B under FP8), the shared
    experts' ``Workload.dense_gemm_element_bytes`` (bf16 when only the routed experts are
    quantised); the routed experts' GLU inputs 1 B under ``Workload.fp8_glu_inputs``.
    """
    geometry, moe = workload.geometry, workload.geometry.moe
    if moe is None:
        raise MosaicInputError("activation kind 'moe' needs a geometry with an moe section")
    h = geometry.d_model
    gemm_in = workload.gemm_element_bytes
    routed = routed_tokens(workload, plans)
    copies = expert_copies(workload, plans)
    norm = 2 * ACTIVATION_BYTES * routed * h
    router = routed * (2 * FP32_BYTES * moe.experts + (INDEX_BYTES + FP32_BYTES) * moe.top_k)
    # the busiest EP rank's routed copies (perf/routing_load.py: a learned router's
    # imbalance, a padded capacity), whose saved expert tensors set the peak as its GEMMs
    # set the time
    busiest = copies * routed_load_factor(workload, plans)
    expert_inputs = gemm_in * busiest * h
    # SwiGLU inputs cached in FP8 (Workload.fp8_glu_inputs; DeepSeek-V3 report Sec. 3.3.3)
    glu_in = 1 if workload.fp8_glu_inputs else ACTIVATION_BYTES
    experts = _ffn_bytes(busiest, moe.expert_ffn / plans.etp, geometry.glu, gemm_in, glu_in)
    combine = 0.0 if workload.traits.moe_probs_in_activation else (
        ACTIVATION_BYTES * moe.top_k * routed * h)
    return norm + router + expert_inputs + experts + combine + _shared_expert_bytes(
        workload, plans)


def _shared_expert_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """The shared experts' saved intermediates (TP-split) and, with a shared-expert gate,
    the shared output the gate multiply keeps for the gate's gradient: Megatron-Core
    ``SharedExpertMLP.forward`` computes ``output * sigmoid(linear(hidden_states, gate_weight))``
    after the row-parallel FC2 (megatron/core/transformer/moe/shared_experts.py @ 0d8e0714,
    the core_dev_r0.15.0 commit Megatron-Bridge v0.2.0 pins; HF Qwen2MoeSparseMoeBlock and
    Qwen3NextSparseMoeBlock multiply the same way), d_model wide and SP-sharded; the sigmoid's
    one value per token is left out. Shared-expert recompute drops all of it (the gate runs
    inside the checkpointed forward)."""
    moe, tokens = workload.geometry.moe, tokens_per_rank(workload, plans)
    assert moe is not None
    intermediates = _ffn_bytes(tokens, moe.shared_total_width / plans.tp, workload.geometry.glu,
                               workload.dense_gemm_element_bytes)
    if not (moe.shared_expert_gate and moe.shared_experts):
        return intermediates
    return intermediates + ACTIVATION_BYTES * tokens * workload.geometry.d_model / (
        sequence_shard_divisor(plans))


def mamba_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Bytes one Mamba-2 layer saves per micro-batch (Megatron-Core MambaMixer in training
    runs mamba_ssm's mamba_split_conv1d_scan_combined, state-spaces/mamba @ e9594ce
    ssd_combined.py, which saves the input projection's output z, x, B, C, dt and the
    scan output before its gate, and recomputes the convolution in the backward): the norm
    input and the input projection's input (SP-sharded, as an attention layer's), those
    two, the gated RMSNorm's input and the output projection's input (at the GEMM input's
    precision)."""
    mamba = workload.geometry.mamba
    if mamba is None:
        raise MosaicInputError("activation kind 'mamba' needs a geometry with a mamba section")
    return _mixer_layer_bytes(workload, plans, ACTIVATION_BYTES * (
        mamba.in_proj_width + 2 * mamba.inner_width), mamba.inner_width)


def _mixer_layer_bytes(workload: Workload, plans: ParallelPlans, saved_bytes_per_token: float,
                       out_proj_width: int) -> np.ndarray:
    """A state-space mixer layer's saved bytes: its norm input and input projection's input
    (SP-sharded, as an attention layer's), then per token ``saved_bytes_per_token`` of its
    own tensors and the output projection's input at the GEMM input's precision, both over
    tp."""
    tokens, tp = tokens_per_rank(workload, plans), plans.tp
    gemm_in = workload.dense_gemm_element_bytes
    sequence_region = (ACTIVATION_BYTES + gemm_in) * tokens * workload.geometry.d_model / (
        sequence_shard_divisor(plans))
    return sequence_region + tokens * (saved_bytes_per_token + gemm_in * out_proj_width) / tp


def gdn_activation_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Bytes one gated DeltaNet layer saves per micro-batch (Megatron-Core GatedDeltaNet,
    megatron/core/ssm/gated_delta_net, over flash-linear-attention's chunk_gated_delta_rule,
    whose autograd function keeps q, k, v, the decay and beta, and the solved C×C block):
    the norm input and the input projection's input (SP-sharded), the projection's output
    (the convolution's input and z), the convolution's output (q, k, v), q and k repeated to
    the value heads when there are more of those, the C×C block per value head, the rule's
    output (the gated norm's input), the gated norm's normalised output (the gate multiply
    keeps it for z's gradient: ``_apply_gated_norm`` runs ``y = self.out_norm(x)``, a
    Transformer Engine norm, then ``y * act_fn(gate.float())``, megatron/core/ssm/
    gated_delta_net.py @ 0d8e0714, core_dev_r0.15.0 as Megatron-Bridge v0.2.0 pins it) and
    the output projection's input (at the GEMM input's precision)."""
    gdn = workload.geometry.gdn
    if gdn is None:
        raise MosaicInputError("activation kind 'gdn' needs a geometry with a gdn section")
    repeated = (2 * gdn.value_heads * gdn.key_head_dim
                if gdn.value_heads > gdn.key_heads else 0)
    return _mixer_layer_bytes(workload, plans, ACTIVATION_BYTES * (
        gdn.in_proj_width + gdn.conv_channels + repeated + gdn.value_heads * gdn.chunk_size
        + GDN_GATED_NORM_SAVED * gdn.value_width), gdn.value_width)


def layer_input_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """A block's input, all full recomputation keeps: 2sbh, SP-sharded (Korthikanti Sec. 5)."""
    tokens = tokens_per_rank(workload, plans)
    return ACTIVATION_BYTES * tokens * workload.geometry.d_model / sequence_shard_divisor(plans)


@plan_key(*BLOCK_ACTIVATION_KEY, remember=True)  # (read by every stage)
def layer_working_set_bytes(
    workload: Workload, plans: ParallelPlans, kind: LayerKind
) -> np.ndarray:
    """Everything one block saves with no recomputation (also its recompute working set);
    a hybrid model's layer saves its own part of a block (a Mamba layer
    :func:`mamba_activation_bytes`)."""
    hybrid = {"mamba": mamba_activation_bytes, "gdn": gdn_activation_bytes,
              "attention": attention_activation_bytes,
              "mlp": dense_mlp_activation_bytes, "moe_layer": moe_block_activation_bytes}
    if kind in hybrid:
        return hybrid[kind](workload, plans)
    block = (
        moe_block_activation_bytes(workload, plans)
        if kind == "moe"
        else dense_mlp_activation_bytes(workload, plans)
    )
    return (attention_activation_bytes(workload, plans) + block
            + eager_elementwise_extra_bytes(workload, plans, kind))


def eager_elementwise_extra_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind
                                  ) -> np.ndarray:
    """What eager torch model code (not under torch.compile) saves in a block beyond the
    fused-kernel counts: with the fp32 composite RMSNorm (ElementwiseKernels.
    EAGER_FP32_NORM) 4 B per element of each of the block's two norms
    (EAGER_NORM_EXTRA_BYTES_PER_ELEMENT, on the tokens each norm sees: SP-sharded before
    attention, the routed tokens before an MoE part); with it or PyTorch's fused RMSNorm
    (EAGER_FUSED_RMSNORM), for a GLU, the SiLU output of each FFN (dense, shared experts,
    every routed copy's expert)."""
    kernels = elementwise_kernels(workload)
    if kernels not in RMSNORM_ERAS:
        return np.zeros(len(plans))
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    norm_tokens = tokens / sequence_shard_divisor(plans)
    moe = geometry.moe
    if kind == "moe" and moe is not None:
        second_norm_tokens = routed_tokens(workload, plans)
        glu_elements = (expert_copies(workload, plans) * moe.expert_ffn / plans.etp
                        + tokens * moe.shared_total_width / plans.tp)
    else:
        second_norm_tokens = norm_tokens
        glu_elements = tokens * geometry.ffn / plans.tp
    norm_extra = (EAGER_NORM_EXTRA_BYTES_PER_ELEMENT
                  if kernels is ElementwiseKernels.EAGER_FP32_NORM else 0.0)
    norms = norm_extra * (norm_tokens + second_norm_tokens) * geometry.d_model
    glu = EAGER_GLU_EXTRA_BYTES_PER_ELEMENT * glu_elements if geometry.glu else 0.0
    return norms + glu


def _attention_matmul_widths(workload: Workload, plans: ParallelPlans) -> list[np.ndarray]:
    """Per-token output widths (per TP rank) of a block's attention matmuls in forward order,
    the aten.mm calls torch's per-op SAC counts. GQA/MHA: Q, K, V, O (K/V split over
    min(tp, kv_heads)). MLA: its input projections (:func:`~mosaic.perf.shapes.
    mla_input_projections`), then wo. The output projection's partial sum is full width."""
    geometry, tp = workload.geometry, plans.tp
    full = np.full(len(plans), 1.0)
    if geometry.attention is AttentionKind.MLA and geometry.mla is not None:
        return [*(width for _, width in mla_input_projections(workload, plans)),
                geometry.d_model * full]
    widths = attention_widths(geometry)
    half_kv = widths.key_value_per_rank(tp) / 2
    return [widths.query / tp, half_kv, half_kv, geometry.d_model * full]


def _per_op_sac_attention_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """What per-op SAC keeps of a block up to its FFN or MoE part: the block input (2sbh,
    SP-sharded), the 1st, 3rd, ... attention matmul outputs (torchtitan's _op_sac policy
    saves every second aten.mm of a block: Q and V of Q, K, V, O; wq and wkv_b of MLA's
    wq, wkv_a, wkv_b, wo; bf16) and the attention kernel's output with its softmax
    statistics."""
    widths = attention_widths(workload.geometry)
    tokens = tokens_per_rank(workload, plans)
    saved_width = sum(_attention_matmul_widths(workload, plans)[0::2]) + widths.output / plans.tp
    return (layer_input_bytes(workload, plans) + ACTIVATION_BYTES * tokens * saved_width
            + softmax_statistics_bytes(workload, plans))


def _saved_after_attention(workload: Workload, plans: ParallelPlans,
                           matmuls: list[np.ndarray]) -> np.ndarray:
    """Bytes of the every-second matmul outputs after the attention part: ``matmuls`` are
    the (tokens × width) element counts in forward order; the count continues from the
    attention matmuls, so after an even number the first is saved, after an odd the
    second."""
    parity = len(_attention_matmul_widths(workload, plans)) % 2
    return ACTIVATION_BYTES * sum(matmuls[parity::2], np.zeros(len(plans)))


def per_op_sac_dense_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """A dense block under per-op SAC: the attention part, then every second matmul output
    continuing the count in forward order W1, W3, W2 (GLU) or W1, W2 (bf16, TP-split widths;
    the down projection's partial sum is full width): W1 and W2 after Q, K, V, O."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    ffn = tokens * geometry.ffn / plans.tp
    matmuls = [ffn, *([ffn] if geometry.glu else []), tokens * geometry.d_model]
    return (_per_op_sac_attention_bytes(workload, plans)
            + _saved_after_attention(workload, plans, matmuls))


def per_op_sac_moe_bytes(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """An MoE block under torchtitan's per-op SAC. Its save list holds aten.mm, the
    attention kernels and all_to_all_single, not the grouped expert GEMM
    (pytorch/torchtitan, models/*/infra/parallelize.py ``_op_sac_save_list``), so the routed
    experts are recomputed from the dispatched tokens. Saved: the attention part, every
    second of the router gate's logits and the shared experts' W1, W3, W2 outputs continuing
    the block's matmul count (after Q, K, V, O: the gate and W3), and with ep > 1 the
    dispatch and combine all-to-all outputs (K·T·etp token copies each)."""
    geometry, moe = workload.geometry, workload.geometry.moe
    if moe is None:
        raise MosaicInputError("per-op SAC of an MoE block needs a geometry with an moe section")
    tokens = tokens_per_rank(workload, plans)
    matmuls = [routed_tokens(workload, plans) * moe.experts]
    if moe.shared_experts:
        shared = tokens * moe.shared_total_width / plans.tp
        matmuls += [shared, *([shared] if geometry.glu else []), tokens * geometry.d_model]
    all_to_all = np.where(plans.ep > 1, 2 * ACTIVATION_BYTES * expert_copies(workload, plans)
                          * geometry.d_model, 0.0)
    return (_per_op_sac_attention_bytes(workload, plans)
            + _saved_after_attention(workload, plans, matmuls) + all_to_all)


def save_dots_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind) -> np.ndarray:
    """A block under a save-the-matmuls policy (SelectiveRecompute.SAVE_DOTS: JAX
    checkpoint_dots_with_no_batch_dims + the attention context, MaxText remat_policy
    minimal_flash): the block input (the remat boundary), every weight matmul's output in
    bf16 (the attention projections, then W1, W3, W2; an MoE block's router logits, each
    routed copy's expert outputs and the shared experts' outputs) and the attention context.
    Norms, activations, rotary embedding and the residual adds are recomputed, and so are
    the flash kernel's softmax statistics (not a matmul output, not named): its forward
    runs again in backward."""
    geometry = workload.geometry
    tokens = tokens_per_rank(workload, plans)
    attention = (sum(_attention_matmul_widths(workload, plans))
                 + attention_widths(geometry).output / plans.tp)
    moe = geometry.moe
    up_outputs = ffn_up_projections(geometry.glu)  # W1 and W3 (GLU) or W1
    if kind == "dense" or moe is None:
        ffn_widths = up_outputs * geometry.ffn / plans.tp + geometry.d_model
        ffn = tokens * ffn_widths
    else:
        expert_widths = up_outputs * moe.expert_ffn / plans.etp + geometry.d_model
        ffn = (routed_tokens(workload, plans) * moe.experts
               + expert_copies(workload, plans) * expert_widths)
        if moe.shared_experts:
            shared = moe.shared_total_width / plans.tp
            ffn = ffn + tokens * (up_outputs * shared + geometry.d_model)
    return layer_input_bytes(workload, plans) + ACTIVATION_BYTES * (tokens * attention + ffn)


def _selective_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind,
                     working_set: np.ndarray) -> np.ndarray:
    """What SELECTIVE keeps: per-op SAC on the stacks that run it, else what Megatron's
    recompute_modules leave (core_attn, the default, drops only the softmax statistics), or
    with a block-level policy the input of the checkpointed share of blocks and the working
    set of the others."""
    if workload.traits.selective_recompute is SelectiveRecompute.BLOCKS:
        share = workload.checkpointed_block_fraction
        return share * layer_input_bytes(workload, plans) + (1 - share) * working_set
    if workload.traits.selective_recompute is SelectiveRecompute.SAVE_DOTS:
        return save_dots_bytes(workload, plans, kind)
    if workload.traits.selective_recompute is SelectiveRecompute.PER_OP:
        if kind == "dense":
            return per_op_sac_dense_bytes(workload, plans)
        return per_op_sac_moe_bytes(workload, plans)
    dropped = recompute_module_bytes(workload, plans, kind)
    if "core_attn" in workload.selective_recompute_modules and kind in _ATTENTION_KINDS:
        dropped = dropped + softmax_statistics_bytes(workload, plans)
    return working_set - dropped


def recompute_module_bytes(workload: Workload, plans: ParallelPlans, kind: LayerKind
                           ) -> np.ndarray:
    """Saved bytes of one block that Megatron-Core's fine-grained selective recompute drops
    beyond core_attn (its default; the caller drops the softmax statistics for it)
    (``Workload.recompute_modules``;
    megatron/core/transformer/transformer_config.py ``recompute_modules``):

    * mla_up_proj: the up-projected, rotated Q, K and V of MLA (recomputed from the kept
      latents before core attention's backward);
    * layernorm: outputs of the norms not fused into a Transformer Engine linear (the MoE
      block's pre-MLP norm; MLA's input norm and its q/kv latent norms);
    * moe_act: the routed experts' activation output (GEMM-2 input, recomputed from GEMM-1's);
    * mlp (dense blocks) / moe (MoE blocks): everything of the FFN part but its input;
    * shared_experts: the shared experts' intermediates.
    """
    modules = set(workload.recompute_modules or ())
    geometry = workload.geometry
    tokens, tp = tokens_per_rank(workload, plans), plans.tp
    dropped = np.zeros(len(plans))
    mla = geometry.attention is AttentionKind.MLA and geometry.mla is not None
    if "mla_up_proj" in modules and mla:
        widths = attention_widths(geometry)
        dropped += ACTIVATION_BYTES * tokens * (widths.query / tp
                                                + widths.key_value_per_rank(tp))
    if "layernorm" in modules and mla:
        assert geometry.mla is not None
        latents = (geometry.mla.q_lora_rank or 0) + geometry.mla.kv_lora_rank
        dropped += ACTIVATION_BYTES * (tokens * geometry.d_model / sequence_shard_divisor(plans)
                                       + tokens * latents)
    ffn_part = _FFN_PART[kind]
    if ffn_part is None:  # a hybrid model's mixer layer: its norm is fused into a TE linear
        return dropped
    if ffn_part == "dense":
        if "mlp" in modules:
            dropped += dense_mlp_activation_bytes(workload, plans) - layer_input_bytes(
                workload, plans)
        return dropped
    moe = geometry.moe
    if moe is None:
        return dropped
    routed = routed_tokens(workload, plans)
    if "moe" in modules:
        return dropped + moe_block_activation_bytes(workload, plans) - (
            ACTIVATION_BYTES * routed * geometry.d_model)
    if "layernorm" in modules:
        dropped += ACTIVATION_BYTES * routed * geometry.d_model
    if "moe_act" in modules:
        dropped += (workload.gemm_element_bytes * expert_copies(workload, plans)
                    * moe.expert_ffn / plans.etp)
    if "shared_experts" in modules:
        dropped += _shared_expert_bytes(workload, plans)
    return dropped


@plan_key(*BLOCK_ACTIVATION_KEY, "checkpointing", remember=True)  # (read by every stage)
def activation_bytes_per_layer(
    workload: Workload, plans: ParallelPlans, kind: LayerKind = "dense"
) -> np.ndarray:
    """Bytes one block keeps per micro-batch under each plan's checkpointing mode.

    NONE keeps the working set; SELECTIVE recomputes the attention core (Korthikanti Sec. 5),
    which under flash attention only drops the softmax statistics, or runs per-op SAC on
    the stacks that use it (stack trait ``selective_recompute``); FULL keeps the input of
    the recomputed share of blocks and the working set of the rest (on average per block,
    ``Workload.checkpointed_block_fraction``).
    """
    if kind not in _FFN_PART:
        raise MosaicInputError(f"activation kind must be one of {', '.join(_FFN_PART)}, got "
                               f"{kind!r}")
    working_set = layer_working_set_bytes(workload, plans, kind)
    selective = _selective_bytes(workload, plans, kind, working_set)
    mode = plans.checkpointing
    fraction = workload.checkpointed_block_fraction
    full = fraction * layer_input_bytes(workload, plans) + (1.0 - fraction) * working_set
    return np.select(
        [mode == Checkpointing.FULL, mode == Checkpointing.SELECTIVE],
        [full, selective],
        default=working_set,
    )


@plan_key(*STAGE_ACTIVATION_KEY)
def stage_activation_bytes(workload: Workload, plans: ParallelPlans, stage: Stage) -> np.ndarray:
    """Activations a stage holds at its peak.

    In-flight micro-batches × the stage's blocks; under FULL recomputation plus one block's
    working set while it is recomputed; on the last stage plus the final-norm and LM-head
    inputs of the micro-batch in its backward. Under DualPipe the rank also holds its
    mirror stage's in-flight chunks (:func:`~mosaic.perf.schedule.dualpipe_in_flight`) and,
    on the rank of both ends, the LM head's inputs (:func:`~mosaic.perf.schedule.lm_head_stage`).
    """
    per_microbatch, working_set, blocks = _stage_blocks_activations(workload, plans, stage)
    if uses_dualpipe(workload):
        mirror, mirror_working_set, _ = _stage_blocks_activations(
            workload, plans, MIRROR_STAGE[stage])
        per_microbatch_mirror = mirror
        working_set = np.where(plans.pp > 1, np.maximum(working_set, mirror_working_set),
                               working_set)
    else:
        per_microbatch_mirror = np.zeros(len(plans))
    recomputes_blocks = plans.checkpointing == Checkpointing.FULL
    if (workload.traits.selective_recompute is SelectiveRecompute.BLOCKS
            and workload.checkpointed_block_fraction > 0):
        # a checkpointed block's working set is rebuilt in backward, as under FULL
        recomputes_blocks = recomputes_blocks | (plans.checkpointing == Checkpointing.SELECTIVE)
    recompute = np.where(recomputes_blocks, working_set, 0.0)
    # On the stage with the LM head the loss working set (``logits``) is freed before any
    # block is recomputed: the loss and LM-head backward finish first, then the last block's
    # forward is rerun. The two peaks never coexist, so the recompute set counts only its
    # excess over the loss's.
    head_stage = lm_head_stage(workload, stage)
    lm_head = holds_lm_head(plans, head_stage)
    recompute = np.where(lm_head, np.maximum(
        recompute - logits_bytes(workload, plans, head_stage), 0.0), recompute)
    layer_input = layer_input_bytes(workload, plans)
    head_inputs = np.where(lm_head, 2 * layer_input, 0)
    # an MTP module's projection input [norm(h); norm(embedding)] is two layer inputs wide
    # and saved for its backward with the module's block (counted among the blocks)
    layouts = workload.pipeline_layouts
    mtp_inputs = 2 * mtp_modules(workload.geometry, plans, stage, layouts) * layer_input
    mirror_mtp_inputs = (2 * mtp_modules(workload.geometry, plans, MIRROR_STAGE[stage], layouts)
                         * layer_input if uses_dualpipe(workload) else 0.0)
    in_flight = in_flight_microbatches(workload, plans, stage)
    resident = resident_block_fraction(workload, blocks)
    mirror_in_flight = mirror_in_flight_microbatches(workload, plans, stage)
    return ((in_flight * (per_microbatch + mtp_inputs)
             + mirror_in_flight * (per_microbatch_mirror + mirror_mtp_inputs)) * resident
            + recompute + head_inputs)


def _stage_blocks_activations(workload: Workload, plans: ParallelPlans, stage: Stage
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(saved bytes of one micro-batch through the stage's blocks, the largest block working
    set, the stage's blocks)."""
    geometry = workload.geometry
    if geometry.is_hybrid:
        return _stage_hybrid_activations(workload, plans, stage)
    blocks, moe_blocks = stage_layer_counts(geometry, plans, stage,
                                            workload.stage_split,
                                            workload.vocab_in_pipeline_split,
                                            workload.pipeline_layouts)
    dense_blocks = blocks - moe_blocks
    # The working sets first: activation_bytes_per_layer's plan_key sets then gather these
    # per-key values instead of computing them again (factorise._parent_values).
    working_sets = {kind: layer_working_set_bytes(workload, plans, kind)
                    for kind in (("dense", "moe") if geometry.is_moe else ("dense",))}
    per_microbatch = dense_blocks * activation_bytes_per_layer(workload, plans, "dense")
    working_set = np.where(dense_blocks > 0, working_sets["dense"], 0)
    if geometry.is_moe:
        per_microbatch = per_microbatch + moe_blocks * activation_bytes_per_layer(
            workload, plans, "moe"
        )
        working_set = np.maximum(working_set, np.where(moe_blocks > 0, working_sets["moe"], 0))
    return per_microbatch, working_set, blocks


def _stage_hybrid_activations(workload: Workload, plans: ParallelPlans, stage: Stage
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_stage_blocks_activations` of a hybrid model: each kind's layers on the stage
    times its saved bytes, the largest working set of a kind the stage holds, its layers."""
    geometry = workload.geometry
    held = stage_hybrid_counts(geometry, plans, stage, workload.stage_split,
                               workload.vocab_in_pipeline_split)
    per_microbatch = np.zeros(len(plans))
    working_set = np.zeros(len(plans))
    for symbol, kind in HYBRID_LAYER_KINDS.items():
        if not (geometry.hybrid_count(symbol) or geometry.mtp_layer_counts[symbol]):
            continue
        per_microbatch = per_microbatch + held[symbol] * activation_bytes_per_layer(
            workload, plans, kind)
        working_set = np.maximum(working_set, np.where(
            held[symbol] > 0, layer_working_set_bytes(workload, plans, kind), 0.0))
    layers = sum(held.values(), start=np.zeros_like(plans.pp))
    return per_microbatch, working_set, layers


def offloaded_blocks(workload: Workload, blocks: np.ndarray) -> np.ndarray:
    """Blocks of a stage whose saved activations go to host memory
    (``Workload.offloaded_activation_layers``, Megatron-Core cpu_offloading_num_layers), at
    most all but the stage's last block: its activations are used at once by the backward."""
    return np.minimum(workload.offloaded_activation_layers, np.maximum(blocks - 1, 0))


def mean_block_activation_bytes(workload: Workload, plans: ParallelPlans, blocks: np.ndarray,
                                moe_blocks: np.ndarray) -> np.ndarray:
    """Saved bytes of one micro-batch through a stage's average block: its MoE and dense
    blocks' :func:`activation_bytes_per_layer`, weighted by their counts; a hybrid model's
    layer kinds by their shares of its pattern."""
    geometry = workload.geometry
    if geometry.is_hybrid:
        return sum((share * activation_bytes_per_layer(workload, plans, HYBRID_LAYER_KINDS[kind])
                    for kind, share in geometry.hybrid_shares.items() if share),
                   start=np.zeros(len(plans)))
    per_block = activation_bytes_per_layer(workload, plans, "dense")
    if geometry.is_moe:
        moe_share = moe_blocks / np.maximum(blocks, 1)
        per_block = ((1 - moe_share) * per_block
                     + moe_share * activation_bytes_per_layer(workload, plans, "moe"))
    return per_block


def resident_block_fraction(workload: Workload, blocks: np.ndarray) -> np.ndarray:
    """Share of a stage's saved block activations that stays on the GPU under activation
    CPU offloading (``Workload.offloaded_activation_layers``; Megatron-Core
    cpu_offloading_num_layers over Transformer Engine's get_cpu_offload_context). The copy
    of one offloaded block to the host overlaps the next block's compute and its reload the
    previous block's backward (TE cpu_offload.py, AsyncDoubleBufferGroupOffloadHandler),
    so one offloaded block's tensors are resident at a time: blocks − offloaded + 1 of
    ``blocks`` (all of them when nothing is offloaded)."""
    offloaded = offloaded_blocks(workload, blocks)
    resident = np.where(offloaded > 0, blocks - offloaded + 1, blocks)
    return np.where(blocks > 0, resident / np.maximum(blocks, 1), 1.0)
