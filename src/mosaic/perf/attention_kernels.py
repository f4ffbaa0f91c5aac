"""Which flash-attention kernel a job runs, and its throughput relative to cuDNN.

The analytical attention model (``kernels.flash_attention_time_s``) is fitted to cuDNN fused
attention. Stacks differ in the kernel they call (FlashAttention-2 through torch SDPA runs
at ~0.6x cuDNN on Hopper), so the family is resolved per job: the workload's explicit
choice, else the stack's default on that GPU generation (stack trait ``attention_kernel``,
``mosaic/stacks/data/stacks.yaml``). The relative rates, with sources, live in
``data/microbench_fits.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mosaic.errors import MosaicInputError
from mosaic.hardware import get_device
from mosaic.perf.fitted_constants import fitted
from mosaic.stacks import get_stack


class AttentionKernel(StrEnum):
    """Flash-attention kernel families with published relative throughput."""

    CUDNN = "cudnn"  # Transformer Engine FusedAttention / torch SDPA cuDNN backend
    FA2 = "fa2"  # FlashAttention-2 (flash-attn 2.x, torch SDPA flash backend)
    FA3 = "fa3"  # FlashAttention-3 (Hopper only)
    # FlashAttention-1 in Triton (HazyResearch flash_attn_triton.py, which llm-foundry copies
    # as attn_impl 'triton' on triton_pre_mlir): the MPT benchmark tables' kernel.
    TRITON = "triton"
    # FlashAttention-1 in CUDA (flash-attn 1.x; llm-foundry's 'gpu' extra pinned 1.0.9 until
    # 2024, FlashAttention-2 only in its 'gpu-flash2' extra).
    FA1 = "fa1"
    # Materialised attention: QK^T and PV as batched GEMMs over the whole s x s score matrix
    # and a softmax pass over it, the probabilities saved for backward (XLA's dot-product
    # attention, MaxText `attention: dot_product`; torch's eager/math SDPA). Costed by its
    # GEMMs and streaming in ``layer_costs``; chosen explicitly, never a stack default.
    REFERENCE = "reference"
    # Levanter's pure-JAX blockwise attention (AttentionBackend.JAX_FLASH, levanter
    # models/flash_attention.py: "pure-jax Flash Attention impl, vaguely following the v2
    # paper"): a while_loop over query blocks and, inside it, over the key blocks up to the
    # diagonal (causal blocks above it skipped), each block pair an XLA QK^T GEMM, an
    # element-wise online softmax over the materialised block of scores and a PV GEMM; a
    # custom VJP saves only the output and an fp32 log-sum-exp per row and recomputes the
    # block scores in backward. It is what levanter runs on NVIDIA GPUs when Transformer
    # Engine is not installed (layers/attention.py _try_te_attention falls back to it), and
    # it falls back in turn to materialised attention when the sequence is shorter than a
    # block. Costed by its GEMMs and streaming in ``layer_costs``.
    JAX_FLASH = "jax_flash"


# Levanter's blockwise attention block: flash_attention.BLOCK_SIZE (1024), used when the model
# config leaves flash_attention_block_size None (LlamaConfig, OlmoConfig); MixtralConfig
# sets 2048 (stanford-crfm/levanter @ 9263f81e src/levanter/models/flash_attention.py
# BLOCK_SIZE, models/llama.py, models/mixtral.py).
JAX_FLASH_BLOCK_TOKENS = 1024

# Kernels the attention model costs from their GEMMs and HBM streaming (layer_costs), not
# from the fitted flash-attention rate, so they take no relative-throughput multiplier.
GEMM_COSTED_KERNELS = frozenset({"reference", "jax_flash"})
# NVIDIA's libraries: cuDNN fused attention and FlashAttention-3 (Hopper and later)
NVIDIA_ONLY_KERNELS = (AttentionKernel.CUDNN, AttentionKernel.FA3)


_RELATIVE: dict[str, dict[str, dict[str, float]]] = fitted(
    "kernels", "attention_kernel_relative_throughput")



@dataclass(frozen=True)
class AttentionKernelChoice:
    """The kernel a job runs and its forward/backward throughput relative to cuDNN."""

    kernel: str
    generation: str | None  # None: a device outside the table (taken at the cuDNN rate)
    fwd_multiplier: float
    bwd_multiplier: float


def gpu_generation(device_name: str) -> str | None:
    """The catalog device's ``architecture`` (``ampere``, ``hopper``, ``blackwell``, ...);
    None for a device outside the catalog or one that does not state it."""
    try:
        return get_device(device_name).architecture
    except MosaicInputError:
        return None


def sfu_exp_time_ratio(device_name: str) -> float:
    """Softmax-exponential time per bf16 FLOP on ``device_name`` relative to the device its
    attention fit comes from (``kernel_fit``): (E/P) of the fit device over (E/P) of this
    one, with E the catalog ``sfu_exp2_per_s`` and P the dense bf16 peak.

    0.5 on Blackwell Ultra (B300, GB300: twice Blackwell's MUFU.EX2 rate per SM at the same
    tensor rate, see the catalog sources); 1.0 where the ratios agree (GB200 on the B200
    fit) or either device does not state its exponential rate.
    """
    try:
        device = get_device(device_name)
        fit = get_device(device.kernel_fit) if device.kernel_fit else device
    except MosaicInputError:
        return 1.0
    if device.sfu_exp2_per_s is None or fit.sfu_exp2_per_s is None:
        return 1.0
    if "bf16" not in device.peak_flops_per_s or "bf16" not in fit.peak_flops_per_s:
        return 1.0
    ratio = ((fit.sfu_exp2_per_s / fit.peak_flops_per_s_for("bf16"))
             / (device.sfu_exp2_per_s / device.peak_flops_per_s_for("bf16")))
    return 1.0 if abs(ratio - 1.0) < 1e-12 else ratio


def resolve_attention_kernel(kernel: str | None, stack: str, device_name: str
                             ) -> AttentionKernelChoice:
    """The kernel ``kernel`` (None = the stack's default on this GPU) and its multipliers."""
    generation = gpu_generation(device_name)
    if not any(generation in table for table in _RELATIVE.values()):
        generation = None  # no published kernel rates for it: taken at the cuDNN rate
    if not runs_nvidia_kernels(device_name):
        # cuDNN and FlashAttention-3 are NVIDIA's; AMD runs the FlashAttention-2 algorithm
        # (ROCm/flash-attention on composable_kernel, PyTorch SDPA's AOTriton flash backend)
        if kernel in NVIDIA_ONLY_KERNELS:
            others = ", ".join(k for k in AttentionKernel if k not in NVIDIA_ONLY_KERNELS)
            raise MosaicInputError(f"attention kernel {str(kernel)!r} runs on NVIDIA GPUs "
                                   f"only, not on {device_name}; choose one of {others}")
        if kernel is None and (stack_default_kernel(stack)
                               or AttentionKernel.CUDNN.value) in NVIDIA_ONLY_KERNELS:
            kernel = AttentionKernel.FA2.value
    if kernel is None:
        # on a GPU outside the tables, the stack's kernel where it runs one on every
        # generation (levanter's jax_flash), as the memory model reads it without the GPU
        defaults = get_stack(stack).attention_kernel
        kernel = (defaults.get(generation, AttentionKernel.CUDNN.value) if generation
                  else stack_default_kernel(stack) or AttentionKernel.CUDNN.value)
    if kernel not in set(AttentionKernel):
        raise MosaicInputError(f"attention kernel {kernel!r}: allowed values are "
                               f"{', '.join(AttentionKernel)}")
    kernel = AttentionKernel(kernel).value
    if generation is None or kernel in GEMM_COSTED_KERNELS:
        return AttentionKernelChoice(kernel, None, 1.0, 1.0)
    rates = _RELATIVE[kernel].get(generation)
    if rates is None:
        offered = sorted(k for k, table in _RELATIVE.items() if generation in table)
        raise MosaicInputError(
            f"attention kernel {kernel!r} has no published rate on {generation} GPUs "
            f"({device_name}); choose one of {', '.join(offered)}"
        )
    return AttentionKernelChoice(kernel, generation, rates["fwd"], rates["bwd"])


def runs_nvidia_kernels(device_name: str) -> bool:
    """Whether ``device_name`` is an NVIDIA GPU, where cuDNN and FlashAttention-3 run."""
    return get_device(device_name).vendor.casefold() == "nvidia"


def stack_default_kernel(stack: str) -> str | None:
    """The attention kernel a stack runs by default when it is the same on every GPU
    generation it lists (levanter: jax_flash everywhere), else None (it depends on the GPU)."""
    kernels = set(get_stack(stack).attention_kernel.values())
    return kernels.pop() if len(kernels) == 1 else None


def materialises_scores(kernel: str | None, seq_len: int) -> bool:
    """Whether attention writes and saves the whole s x s score matrix: the reference kernel,
    and levanter's blockwise kernel on a sequence shorter than one block (flash_attention
    calls simple_attention_with_dropout when QPos.size < block_size)."""
    if kernel == AttentionKernel.REFERENCE:
        return True
    return kernel == AttentionKernel.JAX_FLASH and seq_len < JAX_FLASH_BLOCK_TOKENS
