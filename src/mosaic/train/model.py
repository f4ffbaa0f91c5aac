"""The paper's MoE decoder (Appendix A.1) built from a :class:`mosaic.arch.Geometry`.

Decoder-only, pre-LayerNorm, dense blocks where the geometry says so (block 1 in the
ladder) and MoE blocks elsewhere: one shared SwiGLU expert of width d_expert plus E routed
SwiGLU experts, dropless (tokens permuted by expert, no capacity factor) and computed with
grouped GEMMs (``torch.nn.functional.grouped_mm``) where the device supports them. GQA
attention with an optional head-wise sigmoid output gate (Qiu et al., 2025), rotary
positions (no parameters, so the counts are those of ``mosaic arch``), untied embeddings,
no QK-norm, no biases on linear layers. Initialisation N(0, 0.006^2) for fan-in matrices,
router and embeddings; N(0, (0.006/sqrt(2L))^2) for the residual-write projections (A.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention
from torch import nn

from mosaic.arch.geometry import Geometry, NormKind
from mosaic.errors import MosaicInputError
from mosaic.train.config import RoutingConfig
from mosaic.train.routing import (
    RouterOutput,
    load_balancing_loss,
    route_lflb_gumbel,
    route_softmax_topk,
    sequence_aux_loss,
    z_loss,
)

INIT_STD = 0.006  # Appendix A.1
ROPE_BASE = 10000.0  # Su et al. (2021), RoFormer
GROUPED_MM_ALIGN_BYTES = 16  # grouped_mm needs 16-byte aligned strides (torch error message)


def residual_init_std(layers: int) -> float:
    """Depth-scaled std of residual-write projections: 0.006 / sqrt(2L) (A.1)."""
    return INIT_STD / math.sqrt(2 * layers)


def _norm(geometry: Geometry) -> nn.Module:
    if geometry.norm is NormKind.LAYERNORM:
        return nn.LayerNorm(geometry.d_model)
    return nn.RMSNorm(geometry.d_model)


def _rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on (B, H, S, D) with the half-split convention (GPT-NeoX)."""
    half = x.shape[-1] // 2
    freqs = ROPE_BASE ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None] * freqs[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:2 * half]
    rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return torch.cat([rotated, x[..., 2 * half:]], dim=-1) if x.shape[-1] % 2 else rotated


class Attention(nn.Module):
    """Causal GQA self-attention, optional head-wise sigmoid gate before the output."""

    def __init__(self, geometry: Geometry) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            geometry.heads, geometry.kv_heads, geometry.head_dim)
        d = geometry.d_model
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=False)
        # Qiu et al. (2025): one sigmoid gate per head from the block input (d·heads params).
        self.gate_proj = nn.Linear(d, self.heads, bias=False) if geometry.gated_attention else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        positions = torch.arange(seq, device=x.device)
        q, k = _rope(q, positions), _rope(k, positions)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             enable_gqa=self.kv_heads != self.heads)
        if self.gate_proj is not None:
            gate = torch.sigmoid(self.gate_proj(x)).transpose(1, 2).unsqueeze(-1)  # (B,H,S,1)
            out = out * gate
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))


class SwiGLU(nn.Module):
    """Gated FFN W2·(silu(W1 x) ⊙ W3 x) (Shazeer, 2020): 3·d·width parameters."""

    def __init__(self, d_model: int, width: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, width, bias=False)
        self.w3 = nn.Linear(d_model, width, bias=False)
        self.w2 = nn.Linear(width, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous.

    grouped_mm's backward rejects expanded (stride-0) gradients, e.g. from ``.sum()``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad.contiguous()


def grouped_mm_supported(device: torch.device, dtype: torch.dtype, *widths: int) -> bool:
    """Whether torch's grouped GEMM runs here: CPU (any float dtype) or CUDA bf16, SM >= 8.0.

    Sources: the ``torch.nn.functional.grouped_mm`` docstring (CUDA: bf16, SM >= 80) and a
    check on torch 2.13 CPU (fp32 and bf16 forward and backward agree with a per-expert
    loop); strides must be multiples of 16 bytes.
    """
    grouped_mm = getattr(F, "grouped_mm", None)
    if grouped_mm is None:
        return False
    element = torch.finfo(dtype).bits // 8
    if any((w * element) % GROUPED_MM_ALIGN_BYTES for w in widths):
        return False
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        return dtype == torch.bfloat16 and torch.cuda.get_device_capability(device)[0] >= 8
    return False


class RoutedExperts(nn.Module):
    """E SwiGLU experts stored as (E, out, in) tensors, computed dropless on permuted tokens."""

    def __init__(self, experts: int, d_model: int, width: int, compute: str = "auto") -> None:
        super().__init__()
        self.experts, self.d_model, self.width, self.compute = experts, d_model, width, compute
        self.w1 = nn.Parameter(torch.empty(experts, width, d_model))
        self.w3 = nn.Parameter(torch.empty(experts, width, d_model))
        self.w2 = nn.Parameter(torch.empty(experts, d_model, width))
        self.ep: Any = None  # an expert_parallel.ExpertParallel once the experts are split

    def _use_grouped(self, x: torch.Tensor) -> bool:
        if self.compute == "loop":
            return False
        ok = grouped_mm_supported(x.device, x.dtype, self.d_model, self.width)
        if self.compute == "grouped_mm" and not ok:  # a job's choice: one line, not a bug
            raise MosaicInputError(
                f"run.expert_compute: grouped_mm does not run for {x.dtype} on {x.device} with "
                f"d={self.d_model}, d_expert={self.width} (CPU, or CUDA bf16 on SM >= 8.0, "
                f"rows of a multiple of {GROUPED_MM_ALIGN_BYTES} bytes); allowed here: auto "
                "or loop")
        return ok

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x: (N, d) tokens sorted by expert; counts: (E,) tokens per expert."""
        if self.ep is not None:
            from mosaic.train.expert_parallel import dispatch_and_compute

            return dispatch_and_compute(self, x, counts)
        return self.compute_local(x, counts)

    def compute_local(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The experts held here on x (N, d) sorted by local expert; counts (E_local,)."""
        if x.shape[0] == 0:
            # Nothing routed here. Keep x (an all-to-all output under expert parallelism)
            # and the weights in the graph, so that every rank runs the same backward
            # collectives; a rank that skipped one would deadlock the others.
            weights = self.w1.sum() + self.w3.sum() + self.w2.sum()
            return x.new_zeros(0, self.d_model) + 0 * (x.sum() + weights)
        if torch.is_autocast_enabled(x.device.type):  # compute in the autocast dtype (bf16)
            x = x.to(torch.get_autocast_dtype(x.device.type))
        dtype = x.dtype
        w1, w3, w2 = (w.to(dtype) for w in (self.w1, self.w3, self.w2))
        if self._use_grouped(x):
            offsets = torch.cumsum(counts, 0).to(torch.int32)
            hidden = F.silu(_mm(x, w1, offsets)) * _mm(x, w3, offsets)
            return _mm(hidden, w2, offsets)
        outputs = []
        start = 0
        for expert, count in enumerate(counts.tolist()):
            if count:
                chunk = x[start:start + count]
                hidden = F.silu(chunk @ w1[expert].t()) * (chunk @ w3[expert].t())
                outputs.append(hidden @ w2[expert].t())
                start += count
        if not outputs:
            return x.new_zeros(0, self.d_model)
        return torch.cat(outputs)


def _mm(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Grouped x_g @ W_g^T over the expert groups delimited by ``offsets``."""
    return _ContiguousGrad.apply(F.grouped_mm(x, weight.transpose(-2, -1), offs=offsets))


@dataclass
class MoEAux:
    """Per-layer routing outputs and auxiliary losses of one forward pass."""

    counts: torch.Tensor
    z_loss: torch.Tensor
    balance_loss: torch.Tensor  # sequence aux loss (Algorithm 1) or Switch LBL (baseline)
    # Share of the router input's energy along the token-mean direction, |mean_t h|^2 /
    # mean_t |h|^2: 1 when every token arrives identical, where no per-expert bias (Eq. 18)
    # can split the batch between experts.
    input_common: torch.Tensor | None = None


def common_mode_fraction(hidden: torch.Tensor) -> torch.Tensor:
    """|mean_t h_t|^2 / mean_t |h_t|^2 of (T, d) hidden states, in [0, 1]."""
    h = hidden.detach().float()
    return h.mean(dim=0).pow(2).sum() / h.pow(2).sum(dim=1).mean().clamp_min(1e-30)


class MoEFeedForward(nn.Module):
    """Shared expert(s) + E routed experts behind the router of ``routing.kind``."""

    def __init__(self, geometry: Geometry, routing: RoutingConfig, compute: str) -> None:
        super().__init__()
        moe = geometry.moe
        assert moe is not None
        self.top_k, self.experts, self.routing = moe.top_k, moe.experts, routing
        self.router = nn.Linear(geometry.d_model, moe.experts, bias=False)  # W_r (E, d)
        self.register_buffer("bias", torch.zeros(moe.experts, dtype=torch.float32))  # phi
        self.shared = nn.ModuleList(
            SwiGLU(geometry.d_model, moe.shared_width) for _ in range(moe.shared_experts))
        self.routed = RoutedExperts(moe.experts, geometry.d_model, moe.expert_ffn, compute)
        self.generator: torch.Generator | None = None  # set per micro-batch by the trainer

    def route(self, hidden: torch.Tensor) -> RouterOutput:
        if self.routing.kind == "softmax_topk":
            return route_softmax_topk(hidden, self.router.weight, self.top_k)
        r = self.routing
        return route_lflb_gumbel(hidden, self.router.weight, self.bias, self.top_k, tau=r.tau,
                                 rho=r.rho, router_norm=r.router_norm,
                                 center_noise=r.center_noise, generator=self.generator)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, MoEAux]:
        batch, seq, d = x.shape
        flat = x.reshape(-1, d)
        routed = self.route(flat)
        # Dropless dispatch: sort the T·K (token, expert) pairs by expert (stable, so the
        # order is deterministic), run each expert on its contiguous block, scatter back.
        order = torch.argsort(routed.experts.reshape(-1), stable=True)
        token_of = order // self.top_k
        expert_out = self.routed(flat[token_of], routed.counts)
        weights = routed.gates.reshape(-1)[order].unsqueeze(-1).to(expert_out.dtype)
        unsorted = torch.empty_like(expert_out)
        unsorted[order] = expert_out * weights
        out = unsorted.view(-1, self.top_k, d).sum(dim=1)
        for shared in self.shared:
            out = out + shared(flat)
        if self.routing.kind == "softmax_topk":
            balance = load_balancing_loss(routed.scores, routed.counts, self.top_k)
        else:
            balance = sequence_aux_loss(routed.scores, routed.experts, self.experts, seq)
        aux = MoEAux(routed.counts, z_loss(routed.logits), balance,
                     common_mode_fraction(flat))
        return out.view(batch, seq, d), aux


class Block(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + FFN(LN(x)) with a dense or MoE FFN."""

    def __init__(self, geometry: Geometry, moe: bool, routing: RoutingConfig,
                 compute: str) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = _norm(geometry), _norm(geometry)
        self.attn = Attention(geometry)
        self.ffn: nn.Module = (MoEFeedForward(geometry, routing, compute) if moe
                               else SwiGLU(geometry.d_model, geometry.ffn))
        self.is_moe = moe

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, MoEAux | None]:
        x = x + self.attn(self.attn_norm(x))
        if self.is_moe:
            delta, aux = self.ffn(self.ffn_norm(x))
            return x + delta, aux
        return x + self.ffn(self.ffn_norm(x)), None


class MoETransformer(nn.Module):
    """Decoder-only LM of ``geometry``; ``forward`` returns logits and per-MoE-layer aux."""

    def __init__(self, geometry: Geometry, routing: RoutingConfig | None = None,
                 expert_compute: str = "auto") -> None:
        super().__init__()
        if geometry.is_hybrid:
            raise MosaicInputError("the reference trainer builds the paper's transformers; a "
                                   "hybrid SSM/attention model (model.hybrid_pattern) is not "
                                   "supported")
        if geometry.attention_output_gate:
            raise MosaicInputError("the reference trainer builds the paper's per-head gate "
                                   "(model.gated_attention); model.attention_output_gate is "
                                   "not supported")
        if geometry.glu is False:
            raise ValueError("the trainer implements SwiGLU FFNs (glu=True) only")
        self.geometry = geometry
        routing = routing or RoutingConfig()
        self.embed = nn.Embedding(geometry.vocab, geometry.d_model)
        self.blocks = nn.ModuleList(
            Block(geometry, geometry.is_moe_layer(i), routing, expert_compute)
            for i in range(geometry.layers))
        self.final_norm = _norm(geometry)
        self.lm_head = nn.Linear(geometry.d_model, geometry.vocab, bias=False)
        if geometry.tied_embeddings:
            self.lm_head.weight = self.embed.weight
        self.reset_parameters()

    @property
    def moe_layers(self) -> list[MoEFeedForward]:
        return [b.ffn for b in self.blocks if isinstance(b.ffn, MoEFeedForward)]

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Appendix A.1 initialisation; norms gain 1, bias 0; controller bias 0."""
        residual_std = residual_init_std(self.geometry.layers)
        for name, param in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if "norm" in name:
                (nn.init.ones_ if leaf == "weight" else nn.init.zeros_)(param)
            elif name.endswith(("o_proj.weight", "w2.weight")) or name.endswith("routed.w2"):
                nn.init.normal_(param, 0.0, residual_std)
            else:
                nn.init.normal_(param, 0.0, INIT_STD)
        for layer in self.moe_layers:
            layer.bias.zero_()

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[MoEAux]]:
        x = self.embed(tokens)
        aux: list[MoEAux] = []
        for block in self.blocks:
            x, layer_aux = block(x)
            if layer_aux is not None:
                aux.append(layer_aux)
        return self.lm_head(self.final_norm(x)), aux


def count_model_parameters(model: MoETransformer) -> dict[str, int]:
    """Counts from the module's tensors, in mosaic.arch's conventions.

    ``n_total``: all non-embedding parameters; ``n_active``: ``n_total`` with the routed
    experts counted K/E (the experts a token uses); embedding = input table + LM head.
    """
    embedding = model.embed.weight.numel()
    head = 0 if model.geometry.tied_embeddings else model.lm_head.weight.numel()
    total = sum(p.numel() for p in model.parameters()) - embedding - head
    routed_total = sum(p.numel() for layer in model.moe_layers for p in layer.routed.parameters())
    routed_active = sum(
        p.numel() * layer.top_k // layer.experts
        for layer in model.moe_layers for p in layer.routed.parameters())
    return {"n_total": total, "n_active": total - routed_total + routed_active,
            "n_embedding": embedding + head}
