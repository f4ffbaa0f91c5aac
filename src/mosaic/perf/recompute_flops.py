"""FLOPs per token that a stack's selective activation recompute repeats, for HFU.

HFU counts the work the GPUs do, recompute included (the paper's MFU does not). Full
checkpointing and block-level policies repeat whole block forwards (step_time counts them
as a share of the model FLOPs); the selective policies here repeat parts of a block, the
same parts whose time layer_costs adds and whose bytes memory does not keep. 2 FLOPs per
parameter per token forward (Kaplan et al. 2020, Sec. 2.1).
"""

from __future__ import annotations

from mosaic.arch import AttentionKind, count_parameters
from mosaic.arch.counts import ffn_weight_matrices
from mosaic.arch.flops import (
    FLOPS_PER_MULTIPLY_ADD,
    TRAIN_TO_FORWARD_FLOPS,
    attention_flops_per_token,
)
from mosaic.perf.layer_costs import (
    per_op_sac_attention_recomputed,
    per_op_sac_moe_matmul_shares,
)
from mosaic.perf.plan import single_plan
from mosaic.perf.shapes import attention_widths
from mosaic.perf.workload import Workload
from mosaic.stacks import SelectiveRecompute

# one multiply-add per parameter per token in a forward GEMM
FORWARD_FLOPS_PER_PARAMETER = float(FLOPS_PER_MULTIPLY_ADD)


def selective_recompute_flops_per_token(workload: Workload) -> float:
    """Forward FLOPs per token the stack's selective recompute repeats: Megatron-Core's
    module list, torch per-op SAC's unsaved matmuls, or the attention core under a
    save-the-matmuls policy; 0 for block-level policies (counted as a share of blocks)."""
    policy = workload.traits.selective_recompute
    if policy is SelectiveRecompute.ATTENTION_CORE:
        return module_recompute_flops_per_token(workload)
    if policy is SelectiveRecompute.PER_OP:
        return per_op_sac_recompute_flops_per_token(workload)
    if policy is SelectiveRecompute.SAVE_DOTS:
        # the flash kernel's forward again for its unsaved softmax statistics
        # (layer_costs._save_dots_recompute); element-wise kernels count no FLOPs
        return attention_flops_per_token(workload.geometry, workload.seq_len) / (
            TRAIN_TO_FORWARD_FLOPS)
    return 0.0


def module_recompute_flops_per_token(workload: Workload) -> float:
    """Forward GEMM and attention FLOPs per token that Megatron-Core's ``recompute_modules``
    repeat (the modules layer_costs.recompute_modules_forward_s times): core_attn the causal
    attention core's forward, mla_up_proj MLA's up-projections (latent -> heads), mlp the
    dense FFNs, moe the top-k routed experts with the shared experts and the router,
    shared_experts the shared experts alone; layernorm and moe_act are element-wise."""
    geometry = workload.geometry
    counts = count_parameters(geometry)
    chosen = set(workload.selective_recompute_modules)
    if "moe" in chosen:
        chosen -= {"moe_act", "shared_experts"}
    forward = FORWARD_FLOPS_PER_PARAMETER
    flops = 0.0
    if "core_attn" in chosen:
        flops += attention_flops_per_token(geometry, workload.seq_len) / TRAIN_TO_FORWARD_FLOPS
    mla = geometry.mla
    if "mla_up_proj" in chosen and geometry.attention is AttentionKind.MLA and mla is not None:
        up = (geometry.heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)
              * (mla.q_lora_rank or geometry.d_model)
              + geometry.heads * (mla.qk_nope_head_dim + mla.v_head_dim) * mla.kv_lora_rank)
        flops += forward * up * counts.attention_layers
    if "mlp" in chosen:
        flops += forward * counts.dense_layers * counts.dense_ffn_per_layer
    if "moe" in chosen:
        flops += forward * counts.moe_layers * (counts.top_k * counts.routed_expert
                                                + counts.shared_experts_per_layer
                                                + counts.router_per_layer)
    if "shared_experts" in chosen:
        flops += forward * counts.moe_layers * counts.shared_experts_per_layer
    return float(flops)


def per_op_sac_recompute_flops_per_token(workload: Workload) -> float:
    """Forward FLOPs per token torchtitan's per-op SAC repeats (every second aten.mm by the
    block's running count, and the grouped expert GEMMs it never saves; pytorch/torchtitan
    models/*/infra/parallelize.py ``_op_sac_save_list``): in each attention part the
    unsaved input-projection share and the output projection when unsaved
    (layer_costs.per_op_sac_attention_recomputed), W3 of a dense GLU FFN (W2 without a
    GLU), and in an MoE block the top-k routed experts with the unsaved shares of the
    router gate and the shared experts. FLOP shares do not depend on the TP split."""
    geometry = workload.geometry
    counts = count_parameters(geometry)
    plan = single_plan()
    projection_share, output_recomputed = per_op_sac_attention_recomputed(workload, plan)
    widths = attention_widths(geometry)
    attention_params = (float(projection_share[0]) * widths.projection * geometry.d_model
                        + (widths.output * geometry.d_model if output_recomputed else 0))
    ffn_share = 1 / ffn_weight_matrices(geometry.glu)  # W3 of W1, W3, W2; W2 of W1, W2
    params = (counts.attention_layers * attention_params
              + counts.dense_layers * ffn_share * counts.dense_ffn_per_layer)
    if geometry.moe is not None:
        gate_share, shared_share = per_op_sac_moe_matmul_shares(workload, plan)
        params += counts.moe_layers * (counts.top_k * counts.routed_expert
                                       + gate_share * counts.router_per_layer
                                       + shared_share * counts.shared_experts_per_layer)
    return FORWARD_FLOPS_PER_PARAMETER * float(params)
