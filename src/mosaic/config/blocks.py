"""The one vocabulary of a training job: ``model``, ``parallelism`` and ``batch`` blocks.

Job files, run records, ``mosaic plan --json`` documents and exports all write these three
blocks with these field names (docs/schema.md). Field names are the library's own
(:class:`mosaic.arch.Geometry`, :class:`mosaic.perf.plan.ParallelPlans`); counts carry their
unit in the name (``global_seqs`` = sequences). ``None`` means "not stated": whoever reads
the block (a job or a run record, :mod:`mosaic.config.convert`) fills it in by a documented
rule and says so. Older spellings are translated before validation
(:mod:`mosaic.config.spelling`).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mosaic.limits import LIMITS

_WIDTH = LIMITS["width"].high
_LAYERS = LIMITS["layers"].high
_EXPERTS = LIMITS["experts"].high
_DEGREE = LIMITS["parallel_degree"].high
_TOKENS = LIMITS["tokens"].high

Activation = Literal["swiglu", "geglu", "gelu", "relu", "squared_relu"]
Sharding = Literal["none", "zero1", "zero2", "fsdp", "hsdp"]
# Settings jobs, run records and record settings name alike (one spelling each; the values of
# the model's enums, tests/config/test_vocabulary.py).
Routing = Literal["balanced", "dropless", "token_drop", "unknown"]
CrossEntropyName = Literal["fused", "fused_out_of_place", "fp32_upcast", "compiled", "bf16",
                           "te"]
OptimizerDtypeName = Literal["fp32", "bf16", "bf16_moments"]
RecomputeName = Literal["none", "selective", "full"]
# the MoE token-movement code a run uses (mosaic.perf.moe_permute_traffic.MoePermute)
MoePermuteName = Literal["te_fused", "torch_index", "torchtitan", "torchtitan_2510",
                         "torchtitan_2604", "levanter"]
# the torch era of an eager RMSNorm model (mosaic.perf.elementwise_traffic.RMSNORM_ERAS):
# the fp32 composite before PyTorch 2.9, or its fused kernel
EagerKernelsName = Literal["eager_fp32_norm", "eager_fused_rmsnorm"]
# how the routed-expert GEMMs run (mosaic.perf.workload.EXPERT_GEMMS)
ExpertGemmName = Literal["grouped", "xla_expanded"]
# which GEMMs a low-precision recipe quantises (mosaic.perf.workload.QuantisedGemms)
QuantisedGemmsName = Literal["all", "routed_experts"]
QUANTISED_GEMMS_HELP = ("which GEMMs the fp8/mxfp8/nvfp4 precision runs: all, or "
                        "routed_experts (the routed experts' grouped GEMMs alone, attention, "
                        "dense and shared-expert GEMMs in bf16: torchtitan's "
                        "quantize.grouped_mm converters with fqns ['experts'])")


class StrictBlock(BaseModel):
    """Unknown fields are errors; values are not coerced across types (no "8" for 8)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MLABlock(StrictBlock):
    """DeepSeek multi-head latent attention dimensions (DeepSeek-V2 Sec. 2.1; HF names)."""

    kv_lora_rank: int = Field(gt=0, le=_WIDTH, description="compressed KV width d_c")
    q_lora_rank: int | None = Field(default=None, gt=0, le=_WIDTH,
                                    description="compressed query width; None = no query LoRA")
    qk_nope_head_dim: int = Field(gt=0, le=_WIDTH,
                                  description="per-head query/key width without RoPE")
    qk_rope_head_dim: int = Field(gt=0, le=_WIDTH, description="per-head decoupled RoPE width")
    v_head_dim: int = Field(gt=0, le=_WIDTH, description="per-head value width")


class RouterBlock(StrictBlock):
    """How the trained router scores, picks and weights experts (mosaic.arch.RouterConfig)."""

    score: Literal["softmax", "sigmoid"] = Field(
        default="softmax", description="softmax over the experts' logits, or a sigmoid per "
                                       "expert (DeepSeek-V3, the paper's Alg. 1)")
    balancing: Literal["aux_loss", "loss_free"] | None = Field(
        default=None, description="aux_loss (a balance loss) or loss_free (a per-expert "
                                  "selection bias, Wang et al. 2024); None = the stack's")
    normalize_top_k: bool = Field(default=True,
                                  description="the K selected weights sum to 1 (norm_topk_prob)")
    top_k_scaling: float = Field(default=1.0, gt=0, le=1e3, allow_inf_nan=False,
                                 description="routed output multiplier (routed_scaling_factor)")
    groups: int | None = Field(
        default=None, ge=1, le=_EXPERTS, description="group-limited routing: equal groups of "
        "consecutive experts (n_group; DeepSeek-V3's 8); None = no groups")
    top_groups: int | None = Field(
        default=None, ge=1, le=_EXPERTS, description="each token's experts lie in its best "
        "top_groups groups (topk_group; DeepSeek-V3's 4); set with groups")


class MoEBlock(StrictBlock):
    """The routed part of an MoE model (paper Sec. 3.1 terms)."""

    experts: int = Field(gt=0, le=_EXPERTS, description="routed experts E per MoE layer")
    top_k: int = Field(gt=0, le=_EXPERTS, description="routed experts K per token")
    expert_ffn: int = Field(gt=0, le=_WIDTH, description="hidden width of one routed expert")
    shared_experts: int = Field(default=0, ge=0, le=_EXPERTS,
                                description="always-active shared experts per MoE layer")
    shared_expert_ffn: int | None = Field(default=None, gt=0, le=_WIDTH,
                                          description="shared expert width; None = expert_ffn")
    dense_layers: int = Field(default=0, ge=0, le=_LAYERS, description="leading dense blocks")
    moe_every: int = Field(default=1, gt=0, le=_LAYERS,
                           description="after the dense prefix, every n-th block is MoE")
    capacity_factor: float | None = Field(
        default=None, gt=0, le=1024, allow_inf_nan=False,
        description="token capacity per expert (a multiple of the even share); None = "
                    "dropless. Exported to Megatron, NeMo and MaxText; with token_drop "
                    "routing it caps the busiest EP rank's routed load (docs/perf.md)")
    expert_bias: bool = Field(default=False, description="expert linears carry biases")
    router_bias: bool = Field(default=False, description="router linear carries a bias")
    shared_expert_gate: bool = Field(default=False,
                                     description="sigmoid gate on the shared experts' output")
    router: RouterBlock | None = Field(
        default=None, description="the trained router's scoring and balancing; None = not "
                                  "stated (the stack's balancing; exports leave the framework's)")


class MambaBlock(StrictBlock):
    """The Mamba-2 mixer of a hybrid model's 'M' layers (Megatron-Core MambaMixer names)."""

    heads: int = Field(gt=0, le=_WIDTH, description="SSM heads (mamba_num_heads)")
    head_dim: int = Field(default=64, gt=0, le=_WIDTH, description="channels per head")
    state_dim: int = Field(default=128, gt=0, le=_WIDTH, description="SSM state size N")
    groups: int = Field(default=8, gt=0, le=_WIDTH, description="B/C groups (n_groups)")
    conv_kernel: int = Field(default=4, gt=0, le=64, description="causal convolution width")
    chunk_size: int = Field(default=128, gt=0, le=_WIDTH, description="SSD scan chunk length")
    conv_bias: bool = Field(default=True, description="the convolution carries a bias")


class GatedDeltaNetBlock(StrictBlock):
    """The gated DeltaNet mixer of a hybrid model's 'G' layers (Qwen3-Next's linear attention;
    Megatron-Core/HF linear_* names)."""

    key_heads: int = Field(gt=0, le=_WIDTH, description="query/key heads (linear_num_key_heads)")
    value_heads: int = Field(gt=0, le=_WIDTH,
                             description="value heads (linear_num_value_heads)")
    key_head_dim: int = Field(default=128, gt=0, le=_WIDTH, description="channels per key head")
    value_head_dim: int = Field(default=128, gt=0, le=_WIDTH,
                                description="channels per value head")
    conv_kernel: int = Field(default=4, gt=0, le=64, description="causal convolution width")
    chunk_size: int = Field(default=64, gt=0, le=_WIDTH, description="delta-rule chunk length")


class ModelBlock(StrictBlock):
    """A decoder-only transformer (or a hybrid of Mamba, gated DeltaNet, attention, MLP and MoE
    layers);
    ``moe`` None means dense."""

    name: str | None = Field(default=None, min_length=1, description="model name")
    layers: int = Field(gt=0, le=_LAYERS, description="transformer blocks L (no MTP modules)")
    d_model: int = Field(gt=0, le=_WIDTH, description="residual width d")
    heads: int | None = Field(default=None, gt=0, le=_WIDTH, description="query heads")
    kv_heads: int | None = Field(default=None, gt=0, le=_WIDTH, description="key/value heads")
    head_dim: int | None = Field(default=None, gt=0, le=_WIDTH,
                                 description="per-head width; None = d_model / heads")
    ffn: int | None = Field(default=None, gt=0, le=_WIDTH,
                            description="dense FFN hidden width; None allowed when all blocks "
                                        "are MoE")
    activation: Activation | None = Field(
        default=None, description="FFN activation; swiglu/geglu are gated (three matrices)")
    vocab: int | None = Field(default=None, gt=0, le=LIMITS["vocab"].high,
                              description="vocabulary size")
    tied_embeddings: bool | None = Field(default=None,
                                         description="input embedding shared with the LM head")
    attention: Literal["mha", "gqa", "mla"] | None = Field(
        default=None, description="None = mla with an mla block, else mha/gqa from kv_heads")
    mla: MLABlock | None = None
    norm: Literal["layernorm", "rmsnorm"] | None = Field(default=None,
                                                         description="None = layernorm")
    gated_attention: bool = Field(default=False, description="per-head sigmoid output gate")
    attention_output_gate: bool = Field(default=False, description="elementwise sigmoid gate "
                                        "on the attention output (Qwen3-Next)")
    qk_norm: bool = Field(default=False, description="norms of queries and keys")
    qk_norm_span: Literal["head", "projection"] = Field(
        default="head", description="what one q/k norm spans: each head (Qwen3) or the "
                                    "whole projection (OLMoE, MiniMax-M2)")
    qkv_bias: bool = Field(default=False, description="biases on the Q, K, V projections")
    output_bias: bool = Field(default=False, description="bias on the attention output")
    lm_head_bias: bool = Field(default=False, description="bias on the LM head's logits "
                                                          "(Phi-3.5-MoE)")
    attention_sinks: bool = Field(default=False, description="one learned sink logit per head")
    rope_base: float | None = Field(default=None, gt=1, lt=1e12, allow_inf_nan=False,
                                    description="rotary base θ (HF rope_theta); None = the "
                                                "framework's default")
    rope_fraction: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False,
                                 description="share of each head that rotates (HF "
                                             "partial_rotary_factor)")
    zero_centered_norm: bool = Field(default=False, description="norm gains stored as 1 + w "
                                     "(Qwen3-Next)")
    sliding_window: int | None = Field(default=None, ge=1, description="keys a window "
                                       "layer's query attends, itself included (HF "
                                       "sliding_window); None = full causal attention")
    full_attention_every: int | None = Field(default=None, ge=2, description="with a window, "
                                             "every N-th layer keeps full attention (Megatron "
                                             "--window-attn-skip-freq); None = all windowed")
    mtp_layers: int | None = Field(default=None, ge=0, le=_LAYERS,
                                   description="multi-token-prediction modules; None = 0")
    moe: MoEBlock | None = None
    hybrid_pattern: str | None = Field(
        default=None, min_length=1, max_length=_LAYERS,
        description="a hybrid model's layers, one symbol each: M Mamba, G gated DeltaNet, "
                    "* attention, - MLP, E MoE (Megatron-Core hybrid_layer_pattern); None = a "
                    "transformer")
    mtp_pattern: str | None = Field(
        default=None, min_length=1, max_length=_LAYERS,
        description="a hybrid model's MTP depth, one hybrid_pattern symbol per layer "
                    "(Megatron-Core hybrid_layer_pattern '<main>/<mtp>/...'); required with "
                    "hybrid_pattern and mtp_layers > 0")
    mamba: MambaBlock | None = None
    gdn: GatedDeltaNetBlock | None = None


class ParallelismBlock(StrictBlock):
    """The parallel layout (Megatron-Core mesh: devices = tp·pp·cp·dp; experts inside)."""

    tp: int = Field(default=1, gt=0, le=_DEGREE, description="tensor parallel degree")
    pp: int = Field(default=1, gt=0, le=_DEGREE, description="pipeline stages")
    vpp: int | None = Field(default=None, gt=0, le=LIMITS["vpp"].high,
                            description="virtual stages per pipeline rank; None = stack default")
    cp: int = Field(default=1, gt=0, le=_DEGREE, description="context parallel degree")
    dp: int | None = Field(default=None, gt=0, le=_DEGREE,
                           description="data-parallel replicas; None = devices / (tp·pp·cp)")
    ep: int | None = Field(default=None, gt=0, le=_DEGREE, description="expert parallel degree")
    etp: int | None = Field(default=None, gt=0, le=_DEGREE,
                            description="expert tensor parallel degree; None = 1")
    sequence_parallel: bool | None = Field(default=None,
                                           description="TP activations split along the "
                                                       "sequence; None = tp > 1")
    sharding: Sharding = Field(default="zero1", description="data-parallel sharding mode "
                               "(aliases: zero3/fsdp2 = fsdp, ddp = none, zero-1, zero-2)")
    hsdp_shard: int | None = Field(default=None, gt=0, le=_DEGREE,
                                   description="HSDP shard group size; None = the dp group")
    dispatcher: str | None = Field(
        default=None, min_length=1,
        description="MoE token dispatcher: alltoall, deepep or hybridep (a name containing "
                    "one of them), or Megatron's flex (its default backend, deepep); None = "
                    "alltoall")
    vocab_in_pipeline_split: bool = Field(
        default=False,
        description="the embedding and the loss each take one layer slot when blocks are split "
                    "over pipeline stages (Megatron-LM --account-for-embedding-in-pipeline-split "
                    "and --account-for-loss-in-pipeline-split); pp·vpp must divide layers + 2")
    pipeline_layout: str | None = Field(
        default=None, min_length=1, max_length=4096,
        description="the layers of every pipeline chunk (Megatron-Core "
                    "--pipeline-model-parallel-layout): E embedding, t block, m MTP module, L "
                    "loss, '|' between chunks, x*n and (...)*n repeats, e.g. Et*4|(t*4|)*14tmL; "
                    "its chunk count sets vpp; None = the even split")
    ep_overlap: bool = Field(
        default=False,
        description="batch-level EP all-to-all overlap with another micro-batch's compute "
                    "(Megatron-Core --overlap-moe-expert-parallel-comm, DeepSeek DualPipe); "
                    "off by default, as in Megatron-Core")
    dispatch_fp8: bool = Field(
        default=False,
        description="the EP dispatch payload (and the combine's backward gradient) crosses "
                    "the wire as MXFP8 (Megatron-Core --moe-dispatch-fwd-dtype / "
                    "--moe-combine-bwd-dtype mxfp8, DeepEP FP8 dispatch); needs precision fp8; "
                    "off by default (bf16), as in Megatron-Core")
    tp_comm_overlap: bool = Field(
        default=False,
        description="sequence-parallel TP all-gathers and reduce-scatters overlapped with the "
                    "TP GEMMs in chunks (Megatron-Core --tp-comm-overlap, Transformer Engine "
                    "userbuffers; torchtitan enable_async_tensor_parallel); needs "
                    "sequence_parallel; off by default, as in both")

    @field_validator("sharding", mode="before")
    @classmethod
    def _sharding_alias(cls, value: object) -> object:
        """The aliases `mosaic layouts --sharding` takes (perf.plan.Sharding.parse), so a
        job and the command line accept the same names; anything else is refused below."""
        from mosaic.errors import MosaicInputError
        from mosaic.perf.plan import Sharding as ShardingMode

        if not isinstance(value, str):
            return value
        try:
            return ShardingMode.parse(value).name.lower()
        except MosaicInputError:
            return value


class BatchBlock(StrictBlock):
    """Batch sizes in sequences of ``seq_len`` tokens."""

    global_seqs: int = Field(gt=0, le=LIMITS["global_batch"].high,
                             description="sequences per optimizer step")
    micro_seqs: int | None = Field(default=None, gt=0, le=LIMITS["micro_batch"].high,
                                   description="sequences per micro-batch per dp rank; "
                                               "None = the stack's default")
    local_seqs: int | None = Field(
        default=None, gt=0, le=LIMITS["global_batch"].high,
        description="sequences per dp rank per forward-backward pass (torchtitan's and NeMo "
                    "AutoModel's local batch): the step accumulates global_seqs / (dp · "
                    "local_seqs) passes, each one whole pipeline schedule on those stacks; "
                    "None = one pass of the whole per-rank batch")
    seq_len: int = Field(gt=0, le=LIMITS["seq_len"].high, description="tokens per sequence")


class TrainingBlock(StrictBlock):
    """How long the run trains."""

    tokens: float | None = Field(
        default=None, gt=0, le=_TOKENS, allow_inf_nan=False,
        description="tokens the run trains (a plan's D); exports write them as optimizer "
        "steps of the global batch, perf as the time those steps take")
    goodput: float | None = Field(
        default=None, gt=0, le=1, allow_inf_nan=False,
        description="share of the window spent training (a plan's goodput: failures, "
        "restarts, checkpoints); the window is the steps' time over it; None = 1")


def training_steps(tokens: float, global_seqs: int, seq_len: int) -> int:
    """Optimizer steps that train ``tokens`` at ``global_seqs`` x ``seq_len`` tokens a step,
    the last one whole."""
    return max(1, math.ceil(tokens / (global_seqs * seq_len)))
