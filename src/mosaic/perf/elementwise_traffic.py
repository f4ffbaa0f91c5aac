"""HBM bytes each implementation's element-wise kernels move per token of one block.

``layer_costs`` counts a block's element-wise (memory-bound) work analytically: two norms
and two residual adds at ``NORM_RESIDUAL_BYTES_PER_TOKEN_PER_D / 2`` = 10 bytes per token
per unit of d forward, the GLU/GELU activation on the FFN width, MoE permute/unpermute, and
twice each forward for the backward (``compute_elementwise``). Real stacks launch different
kernels for the same maths: eager PyTorch runs every op of an RMSNorm, a RoPE or a SwiGLU
as its own kernel that reads and writes its whole tensor (some in fp32), while Transformer
Engine, Inductor and XLA fuse them; the q/k RMSNorms of a QK-norm model (Qwen3) and MLA's
latent RMSNorms (DeepSeek-V3's q_a_layernorm / kv_a_layernorm) are in no analytical count,
only in each implementation's. :func:`elementwise_traffic_multiplier` is
the ratio of an implementation's counted bytes to the analytical count for a workload's
shapes; the step model scales ``compute_elementwise`` by it (the excess is
``compute_elementwise_unfused``). The counts, per kernel and with their code paths, are in
docs/evidence/elementwise_fusion.md.

Units: bytes per element of the tensor named (bf16 activations = 2 B, fp32 = 4 B).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mosaic.perf.element_bytes import ACTIVATION_BYTES
from mosaic.perf.layer_costs import (
    ACTIVATION_STREAMS,
    BACKWARD_TO_FORWARD_STREAMING,
    GLU_STREAMS,
    NORM_RESIDUAL_BYTES_PER_TOKEN_PER_D,
)
from mosaic.perf.moe_permute_traffic import ANALYTICAL_PERMUTE
from mosaic.perf.workload import Workload
from mosaic.stacks import CrossEntropy


class ElementwiseKernels(StrEnum):
    """How a stack's model code runs its norms, RoPE, activation and residual adds."""

    TE_FUSED = "te_fused"  # Transformer Engine / Megatron-Core fused kernels
    INDUCTOR = "inductor"  # torch.compile of eager model code (each block compiled)
    XLA = "xla"  # JAX/XLA fusions
    EAGER_FP32_NORM = "eager_fp32_norm"  # eager torch, RMSNorm composite with fp32 upcast
    EAGER_NATIVE_NORM = "eager_native_norm"  # eager torch, native fused LayerNorm kernel
    # eager torch whose nn.RMSNorm runs PyTorch's fused RMSNorm kernel (PyTorch >= 2.9)
    EAGER_FUSED_RMSNORM = "eager_fused_rmsnorm"


@dataclass(frozen=True)
class BlockTraffic:
    """Bytes moved per token of one block, forward + backward, per unit of each width.

    norm_residual_per_d: both norms and both residual adds (and the backward's two
        gradient accumulations into the residual stream), per unit of d_model.
    rope_per_element: rotary embedding of q and k, per rotated element.
    glu_per_element / act_per_element: the FFN activation (SwiGLU: silu(gate)*up; else
        GELU), per element of the FFN width.
    qk_norm_per_element: the q and k RMSNorms of a model with QK-norm (``Geometry.qk_norm``:
        Qwen3, OLMoE, MiniMax-M2), per normalised q/k element, per head or across the
        projection alike (the reduction width does not change the bytes).
    q_latent_norm_per_element / kv_latent_norm_per_element: MLA's RMSNorms of the query
        latent (q_lora_rank wide, where the query is compressed) and of the key/value latent
        (kv_lora_rank wide), per normalised latent element. They differ where the kv
        norm's backward replaces a copy the graph makes without it (Inductor, below).
    """

    norm_residual_per_d: float
    rope_per_element: float
    glu_per_element: float
    act_per_element: float
    qk_norm_per_element: float
    q_latent_norm_per_element: float
    kv_latent_norm_per_element: float


# Per-kernel counts (forward + backward, bytes per element); derivations and sources in
# docs/evidence/elementwise_fusion.md.
_TRAFFIC: dict[ElementwiseKernels, BlockTraffic] = {
    # Megatron-Core + TE: TE RMSNorm/LayerNorm fwd reads x, writes y (4) and bwd reads dy, x,
    # writes dx (6) (transformer_engine/pytorch/module/layernorm_linear.py); fused
    # bias-dropout-add reads 2, writes 1 (6) (megatron/core/fusions/fused_bias_dropout.py);
    # backward accumulates the residual gradient with one add (6); per block 2 x (4 + 6) +
    # 2 x (6 + 6) = 44. Fused RoPE (apply_rope_fusion, megatron/core/models/common/embeddings/
    # rope_utils.py -> TE fused_apply_rotary_pos_emb): 4 + 4. Fused bias-SwiGLU
    # (bias_activation_fusion, megatron/core/fusions/fused_bias_swiglu.py): forward reads
    # gate and up, writes 1 (6 per w), backward reads dy, gate, up, writes dgate, dup (10).
    # GELU: 4 + 6. QK-norm (qk_layernorm: TENorm q_layernorm/k_layernorm on [sq, b, heads,
    # head_dim], megatron/core/transformer/attention.py @ d98e8a64dd; NeMo AutoModel's
    # backend.rms_norm "te", components/moe/utils.py @ 01926a5c4): the TE RMSNorm as above,
    # rmsnorm_fwd 4 + rmsnorm_bwd 6 (transformer_engine/pytorch/ops/basic/rmsnorm.py).
    # MLA latent norms: Megatron-Core builds linear_q_up_proj / linear_kv_up_proj as
    # TELayerNormColumnParallelLinear when qk_layernorm is set (megatron/core/models/gpt/
    # gpt_layer_specs.py @ 24bad8e6 and core_v0.14.0; Megatron-Bridge's DeepSeek-V3/Kimi
    # bridges set it, deepseek_v3_bridge.py @ 600d069b), whose norm runs before the GEMM
    # (rmsnorm_fwd writes ln_out, tex.rmsnorm_bwd after the dgrad GEMM, transformer_engine/
    # pytorch/module/layernorm_linear.py @ d0067d0d): 4 + 6 each. NeMo AutoModel's
    # q_a_layernorm / kv_a_layernorm are TE RMSNorm modules with backend.rms_norm "te"
    # (components/models/deepseek_v3/layers.py @ 01926a5c44): the same 4 + 6.
    ElementwiseKernels.TE_FUSED: BlockTraffic(44.0, 8.0, 16.0, 10.0, 10.0, 10.0, 10.0),
    # torch.compile (torchtitan apply_compile compiles each TransformerBlock): the residual
    # add fuses with the following norm (reads 2, writes the sum and the normed: 8), the
    # block's first norm (4) and last add (6) stand alone: forward 18; backward, each norm
    # gradient kernel also adds the residual gradient (reads dy, x, dres, writes dx: 8):
    # 16. RoPE and silu*mul become one pointwise kernel each: 4 + 4 and 6 + 10. QK-norm
    # (torchtitan qwen3 q_norm/k_norm, nn.RMSNorm before RoPE): the norm fuses into the RoPE
    # kernel, which reads the projection and writes the rotated q/k as without it (0), and
    # the RoPE backward kernel becomes the norm's, reading the saved projection too (2); the
    # weight gradient's cross-token sum folds into that kernel (Inductor's mix-order
    # reduction, torch/_inductor/config.py triton.mix_order_reduction, on by default in
    # torch 2.13): 2. One kernel forward and one backward is what torch 2.13 generates
    # (benchmarks/inductor_qk_norm_fusion.py, CPU code generation). MLA latent norms
    # (torchtitan deepseek_v3 q_norm / kv_norm, nn.RMSNorm between two GEMMs): no element-wise
    # kernel to fuse with, so forward one kernel reading the latent, writing the normed (4);
    # the query's backward reads dy and x, writes dx (6); the kv latent is a split of wkv_a's
    # output, whose backward without the norm copies dkv into the concatenated gradient, and
    # the norm's backward writes dx there instead of the copy (6 - 4 = 2); the weight
    # gradient by mix-order reduction as for QK-norm. q 4 + 6, kv 4 + 2: what torch 2.13
    # generates (benchmarks/inductor_mla_latent_norm_fusion.py, CPU code generation).
    ElementwiseKernels.INDUCTOR: BlockTraffic(34.0, 8.0, 16.0, 10.0, 2.0, 10.0, 6.0),
    # XLA fuses the same chains (MaxText layers scanned per block): as Inductor.
    ElementwiseKernels.XLA: BlockTraffic(34.0, 8.0, 16.0, 10.0, 2.0, 10.0, 6.0),
    # Eager torch (torchtitan models/llama/model.py RMSNorm and apply_rotary_emb; HF
    # LlamaRMSNorm / rotate_half; fms LayerNormParameterized): RMSNorm as x.float() (6),
    # pow (8), mean (4), x*rsqrt (8), type_as (6), *weight (4) = 36 forward; autograd
    # backward of those ops 92 (weight grad 12, cast 6, mul 24, mean 4, pow 28, accumulate
    # 12, cast 6); two norms 256 plus two residual adds and their gradient accumulations
    # 24: 280. RoPE: float() cast 6, complex multiply 8, type_as 6 forward, the same in
    # backward: 40. SwiGLU F.silu(w1 x) * w3 x: silu 4 + mul 6 forward; backward mul 12,
    # silu 6: 28. GELU: 4 + 6. QK-norm (HF Qwen3RMSNorm, transformers models/qwen3; torch's
    # composite nn.RMSNorm before 2.9): the same RMSNorm kernels per q/k element, 36 + 92.
    # MLA latent norms (HF DeepseekV3RMSNorm q_a_layernorm / kv_a_layernorm, the fp32-upcast
    # LlamaRMSNorm; torchtitan's nn.RMSNorm q_norm / kv_norm before torch 2.9): 36 + 92 each.
    ElementwiseKernels.EAGER_FP32_NORM: BlockTraffic(280.0, 40.0, 28.0, 10.0, 128.0, 128.0,
                                                     128.0),
    # Eager torch with the native LayerNorm kernel in bf16 (llm-foundry MPT LPLayerNorm ->
    # F.layer_norm, llmfoundry/models/layers/norm.py): forward 4, backward dx 6 plus the
    # gamma/beta reduction reading dy and x again 4; residuals 24: 2 x 14 + 24 = 52. MPT
    # uses ALiBi or learned positions, no RoPE kernel (0). Eager silu*mul if GLU; GELU 4 + 6.
    # QK-norm (MPT qk_ln, the same LayerNorm class across the q and k projections): 14.
    # llm-foundry has no MLA; a latent norm would be the same native kernel: 14.
    ElementwiseKernels.EAGER_NATIVE_NORM: BlockTraffic(52.0, 0.0, 28.0, 10.0, 14.0, 14.0,
                                                       14.0),
    # Eager torch with nn.RMSNorm on PyTorch >= 2.9 (torchtitan since pull request #985,
    # 2025-03-19): F.rms_norm dispatches to aten::_fused_rms_norm, one forward kernel (reads
    # x, writes y and a per-row rstd: 4) and _fused_rms_norm_backward (dx: reads dy, x,
    # writes dx, 6; the weight gradient reads dy and x again, 4), as the native LayerNorm;
    # residuals 24: 52. The kernel landed in PyTorch nightlies in July-August 2025
    # (pytorch/pytorch#153666; #157345: "This will be solved by #153666 when it lands",
    # 2025-07-09, "nightly version have merged fused rmsnorm", 2025-08-13), so release 2.9
    # (October 2025) on. RoPE (complex or rotate_half) and SwiGLU stay eager: 40 and 28.
    # QK-norm (torchtitan qwen3 q_norm/k_norm are nn.RMSNorm): the fused kernel, 4 + 6 + 4.
    # MLA latent norms (torchtitan deepseek_v3 q_norm / kv_norm, nn.RMSNorm, models/
    # deepseek_v3/model/model.py @ 82a9530f6^, 8a7ea9c53): the same fused kernel, 14 each.
    ElementwiseKernels.EAGER_FUSED_RMSNORM: BlockTraffic(52.0, 40.0, 28.0, 10.0, 14.0, 14.0,
                                                         14.0),
}

# What layer_costs counts, forward x (1 + BACKWARD_TO_FORWARD_STREAMING): norms and
# residuals NORM_RESIDUAL_BYTES_PER_TOKEN_PER_D / 2 per d forward (10 B), no RoPE, the
# activation's GLU_STREAMS or ACTIVATION_STREAMS bf16 reads+writes forward, no QK-norm and
# no MLA latent norm.
_PASSES = 1 + BACKWARD_TO_FORWARD_STREAMING
ANALYTICAL_TRAFFIC = BlockTraffic(
    norm_residual_per_d=_PASSES * NORM_RESIDUAL_BYTES_PER_TOKEN_PER_D / 2,
    rope_per_element=0.0,
    glu_per_element=_PASSES * GLU_STREAMS * ACTIVATION_BYTES,
    act_per_element=_PASSES * ACTIVATION_STREAMS * ACTIVATION_BYTES,
    qk_norm_per_element=0.0,
    q_latent_norm_per_element=0.0,
    kv_latent_norm_per_element=0.0)
# MoE permute + unpermute, the analytical count every implementation's multiplier is over
# (layer_costs.moe_block_times; the sourced counts are perf/moe_permute_traffic's).
_PERMUTE_BYTES_PER_COPY_PER_D = (ANALYTICAL_PERMUTE.forward_per_copy
                                 + ANALYTICAL_PERMUTE.backward_per_copy)


def block_traffic(kernels: ElementwiseKernels) -> BlockTraffic:
    """Per-element byte counts of one implementation."""
    return _TRAFFIC[ElementwiseKernels(kernels)]


def block_bytes_per_token(traffic: BlockTraffic, workload: Workload) -> float:
    """Bytes per token of one block (forward + backward) at TP 1 for ``traffic``."""
    g = workload.geometry
    rope = g.heads * g.head_dim + g.kv_heads * g.head_dim  # rotated q and k elements
    q_latent = kv_latent = 0  # MLA's normalised latent elements (arch.counts params_attention_mla)
    if g.mla is not None:  # MLA rotates only the decoupled rope part (one shared key)
        rope = (g.heads + 1) * g.mla.qk_rope_head_dim
        q_latent, kv_latent = g.mla.q_lora_rank or 0, g.mla.kv_lora_rank
    # normalised q and k elements (QK-norm is an MHA/GQA feature, arch.counts
    # params_attention_extras; MLA's latent norms are the terms above)
    qk_norm = g.heads * g.head_dim + g.kv_heads * g.head_dim if g.qk_norm and g.mla is None else 0
    per_width = traffic.glu_per_element if g.glu else traffic.act_per_element
    width = float(g.ffn)
    permute = 0.0
    if g.moe is not None:
        width = g.moe.top_k * g.moe.expert_ffn + g.moe.shared_total_width
        permute = _PERMUTE_BYTES_PER_COPY_PER_D * g.moe.top_k * g.d_model
    return (traffic.norm_residual_per_d * g.d_model + traffic.rope_per_element * rope
            + traffic.qk_norm_per_element * qk_norm
            + traffic.q_latent_norm_per_element * q_latent
            + traffic.kv_latent_norm_per_element * kv_latent + per_width * width + permute)


# Eager PyTorch model code: what torch.compile replaces with Inductor's fused kernels.
EAGER_TORCH_KERNELS = frozenset({ElementwiseKernels.EAGER_FP32_NORM,
                                 ElementwiseKernels.EAGER_NATIVE_NORM,
                                 ElementwiseKernels.EAGER_FUSED_RMSNORM})
# The torch eras of eager RMSNorm model code (RoPE and SwiGLU alike): what a workload's
# ``eager_kernels`` chooses between, on a stack whose eager code is one of them.
RMSNORM_ERAS = frozenset({ElementwiseKernels.EAGER_FP32_NORM,
                          ElementwiseKernels.EAGER_FUSED_RMSNORM})


def elementwise_kernels(workload: Workload) -> ElementwiseKernels:
    """The implementation a workload's element-wise kernels run: the stack's; where that is
    eager torch model code, Inductor's when the model is compiled
    (``Workload.compiles_model``), and for eager RMSNorm code the workload's own
    ``eager_kernels`` (its torch era) if stated."""
    kernels = ElementwiseKernels(workload.traits.elementwise_kernels)
    if kernels not in EAGER_TORCH_KERNELS:
        return kernels
    if workload.compiles_model:
        return ElementwiseKernels.INDUCTOR
    if kernels in RMSNORM_ERAS and workload.eager_kernels is not None:
        return ElementwiseKernels(workload.eager_kernels)
    return kernels


def elementwise_traffic_multiplier(workload: Workload) -> float:
    """Bytes the workload's implementation moves per token of a block over the analytical
    count (``compute_elementwise``) for its shapes."""
    return (block_bytes_per_token(block_traffic(elementwise_kernels(workload)), workload)
            / block_bytes_per_token(ANALYTICAL_TRAFFIC, workload))


def kernel_assumptions(workload: Workload) -> list[str]:
    """The element-wise, MoE token-movement and LM-loss implementations a workload is costed
    with, and where each comes from (its own setting or its stack's default), for the
    "assumed" notes of `mosaic perf` (text and JSON)."""
    kernels = elementwise_kernels(workload)
    settings = [name for name, value in (("torch_compile", workload.torch_compile),
                                         ("eager_kernels", workload.eager_kernels))
                if value is not None]
    notes = [f"element-wise kernels: {kernels.value} ({workload.stack}"
             + (f"; {' and '.join(settings)} set)" if settings else "'s default)")]
    stack_code = ElementwiseKernels(workload.traits.elementwise_kernels)
    if settings and stack_code not in EAGER_TORCH_KERNELS:
        notes.append(f"{' and '.join(settings)} has no effect on {workload.stack}: its "
                     f"model code runs {stack_code.value} kernels either way")
    elif workload.eager_kernels is not None and kernels is ElementwiseKernels.INDUCTOR:
        notes.append("eager_kernels has no effect on a compiled model (torch_compile)")
    elif workload.eager_kernels is not None and stack_code not in RMSNORM_ERAS:
        notes.append(f"eager_kernels has no effect on {workload.stack}: its eager model "
                     f"code runs {stack_code.value} (no RMSNorm whose torch era differs)")
    if workload.geometry.moe is not None:
        notes.append(f"MoE token movement: {workload.moe_permute_code} ("
                     + ("moe_permute set)" if workload.moe_permute
                        else f"{workload.stack}'s default)"))
    if workload.cross_entropy is None:  # the logits working set (perf.memory)
        loss = workload.loss_implementation
        note = f"LM loss: {loss.value} ({workload.stack}'s default)"
        if loss is CrossEntropy.FUSED:
            # the name is mosaic's, not Megatron's flag: a trial read it as
            # --cross-entropy-loss-fusion, which the Megatron export does not write
            note += ("; one fp32 copy of the logits, max, exp and gradient in place "
                     "(Megatron-Core's vocab_parallel_cross_entropy, megatron/core/"
                     "tensor_parallel/cross_entropy.py), which runs without "
                     "--cross-entropy-loss-fusion")
        if loss is CrossEntropy.COMPILED:
            # torchtitan compiled the loss with the model Oct-Dec 2024 and again from
            # April 2025 (train.py e10cb9494, e8977b007; components/loss.py bbb1b616e)
            note += ("; compiled with the model (4 B per logit): a torchtitan run from "
                     "before April 2025 ran it eager, state cross_entropy: fp32_upcast "
                     "(12 B)")
        notes.append(note)
    return notes
