"""Token-choice routing and load balancing (paper Algorithm 1, Appendix A.3) and a baseline.

* :func:`route_lflb_gumbel` — Algorithm 1: row-normalised router, sigmoid scores, the
  LFLB bias for selection only, a Gumbel top-M proposal on log clean scores with
  per-expert centred noise, the bias-aware top-K correction inside the proposal, gates
  from clean scores renormalised over the selected set, per-expert counts.
* :func:`update_bias` — the RMS-normalised bias controller of Eq. 19, re-centred.
* :func:`z_loss` (Eq. 23), :func:`sequence_aux_loss` (DeepSeek-V3 Eqs. 17-20) and the
  baseline's :func:`route_softmax_topk` with the Switch load-balancing loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention

_UNIFORM_CLAMP = 1e-20  # keeps -log(-log(u)) finite at u -> 0 or 1


@dataclass
class RouterOutput:
    """What a router returns for T tokens routed to E experts with top-K.

    Attributes:
        experts: (T, K) selected expert indices, distinct per token.
        gates: (T, K) gate weights; each row sums to one (Algorithm 1 line 11).
        counts: (E,) tokens per expert, n_i (Algorithm 1 line 13), int64.
        logits: (T, E) pre-activation router logits Theta (for the z-loss).
        scores: (T, E) clean affinities (sigmoid for Algorithm 1, softmax for the baseline).
        proposal: (T, M) the proposal set C_t (Algorithm 1 only; None for the baseline).
    """

    experts: torch.Tensor
    gates: torch.Tensor
    counts: torch.Tensor
    logits: torch.Tensor
    scores: torch.Tensor
    proposal: torch.Tensor | None = None


def row_normalize(weight: torch.Tensor, target_norm: float) -> torch.Tensor:
    """RowNorm(W_r, c_r): each router row l2-normalised to ``target_norm`` (A.3)."""
    return target_norm * weight / weight.norm(dim=1, keepdim=True).clamp_min(1e-12)


def gumbel_noise(shape: tuple[int, int], generator: torch.Generator | None,
                 device: torch.device) -> torch.Tensor:
    """I.i.d. standard Gumbel(0, 1) samples, -log(-log U) with U ~ Uniform(0, 1)."""
    uniform = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    uniform = uniform.clamp(_UNIFORM_CLAMP, 1.0 - 1e-7)
    return -torch.log(-torch.log(uniform))


def _fp32_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """H W^T in fp32 even inside autocast, which would run the matmul in bf16 (whose 8-bit
    mantissa flips near-tied top-K choices and the bias of Eq. 18 moves in 1e-3 steps
    (Eq. 19), below bf16's resolution of scores near 1; DeepSeek-V3, arXiv 2412.19437,
    Sec. 3.3.1, likewise keeps the MoE gating out of low precision)."""
    with torch.autocast(hidden.device.type, enabled=False):
        return hidden.float() @ weight.float().t()


def proposal_size(top_k: int, experts: int, rho: int) -> int:
    """M = min(rho·K, E) (Eq. 21)."""
    return min(rho * top_k, experts)


def route_lflb_gumbel(
    hidden: torch.Tensor,
    router_weight: torch.Tensor,
    bias: torch.Tensor,
    top_k: int,
    *,
    tau: float = 0.01,
    rho: int = 12,
    router_norm: float | None = 1.0,
    center_noise: bool = True,
    generator: torch.Generator | None = None,
) -> RouterOutput:
    """Algorithm 1 for hidden states (T, d), router W_r (E, d) and bias phi (E,).

    Routing runs in fp32 whatever the autocast dtype; the gates carry gradient to W_r
    through the clean scores, selection does not (top-k indices are not differentiable).
    """
    experts = router_weight.shape[0]
    weight = router_weight.float()
    if router_norm is not None:
        weight = row_normalize(weight, router_norm)  # line 1
    logits = _fp32_logits(hidden, weight)  # line 2: Theta
    clean = torch.sigmoid(logits)  # line 3: s'
    with torch.no_grad():
        selection = clean + bias.float()  # line 4: s = s' + phi (Eq. 18)
        perturbed = F.logsigmoid(logits)  # log s', computed stably
        if tau > 0:
            noise = gumbel_noise(tuple(logits.shape), generator, logits.device)  # line 6
            if center_noise:
                noise = noise - noise.mean(dim=0, keepdim=True)  # line 7
            perturbed = perturbed + tau * noise
        m = proposal_size(top_k, experts, rho)
        proposal = torch.topk(perturbed, m, dim=1).indices  # line 8: C_t
        corrected = torch.topk(selection.gather(1, proposal), top_k, dim=1).indices  # line 9
        chosen = proposal.gather(1, corrected)
        counts = torch.bincount(chosen.reshape(-1), minlength=experts)  # line 13
    picked = clean.gather(1, chosen)
    gates = picked / picked.sum(dim=1, keepdim=True)  # lines 10-11: clean scores, sum 1
    return RouterOutput(chosen, gates, counts, logits, clean, proposal)


def route_softmax_topk(hidden: torch.Tensor, router_weight: torch.Tensor,
                       top_k: int) -> RouterOutput:
    """Baseline: softmax over router logits, top-K, gates renormalised over the top-K."""
    logits = _fp32_logits(hidden, router_weight)
    probs = torch.softmax(logits, dim=-1)
    top = torch.topk(probs, top_k, dim=1)
    gates = top.values / top.values.sum(dim=1, keepdim=True)
    counts = torch.bincount(top.indices.reshape(-1), minlength=router_weight.shape[0])
    return RouterOutput(top.indices, gates, counts, logits, probs, None)


def update_bias(bias: torch.Tensor, counts: torch.Tensor, mu_b: float = 1e-3,
                eps: float = 1e-4) -> torch.Tensor:
    """Eq. 19 in place: phi_i += mu_b·(n̄ - n_i)/sqrt(mean_j (n̄ - n_j)^2 + eps); re-centre."""
    n = counts.to(torch.float64)
    violation = n.mean() - n
    u = violation / torch.sqrt((violation**2).mean() + eps)
    updated = bias.to(torch.float64) + mu_b * u
    updated = updated - updated.mean()  # only relative bias matters (A.3)
    bias.copy_(updated.to(bias.dtype))
    return bias


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """Eq. 23: mean over tokens of (log sum_i exp Theta_{t,i})^2 (Zoph et al., 2022)."""
    return torch.logsumexp(logits.float(), dim=-1).pow(2).mean()


def sequence_aux_loss(scores: torch.Tensor, experts: torch.Tensor, n_experts: int,
                      seq_len: int) -> torch.Tensor:
    """DeepSeek-V3 sequence-wise balance loss (arXiv 2412.19437, Eqs. 17-20), unscaled.

    Per sequence of T tokens: f_i = E/(K·T) · #{t : i in TopK_t}, P_i = mean_t s_{i,t}/sum_j
    s_{j,t} (affinities normalised over all experts), loss = sum_i f_i·P_i; averaged over
    the sequences of the batch. ``scores`` is (B·T, E), ``experts`` (B·T, K).
    """
    tokens, top_k = experts.shape
    sequences = tokens // seq_len
    normalized = scores / scores.sum(dim=-1, keepdim=True)
    p = normalized.view(sequences, seq_len, n_experts).mean(dim=1)
    hits = torch.zeros(sequences, n_experts, device=scores.device, dtype=scores.dtype)
    index = experts.view(sequences, seq_len * top_k)
    hits.scatter_add_(1, index, torch.ones_like(index, dtype=scores.dtype))
    f = hits * (n_experts / (top_k * seq_len))
    return (f * p).sum(dim=1).mean()


def load_balancing_loss(probs: torch.Tensor, counts: torch.Tensor, top_k: int) -> torch.Tensor:
    """Switch Transformer auxiliary loss (Fedus et al., 2022, Eq. 4), unscaled.

    E · sum_i f_i·P_i with f_i the fraction of routed assignments to expert i and P_i the
    mean router probability; equals 1 at perfect balance.
    """
    n_experts = probs.shape[-1]
    f = counts.to(probs.dtype) / (probs.shape[0] * top_k)
    return n_experts * (f * probs.mean(dim=0)).sum()


def load_statistics(counts: torch.Tensor) -> dict[str, float]:
    """Router statistics of one layer from its per-expert counts.

    max/mean load; experts that got no token; starved experts, those with fewer than 5% of
    the tokens a uniform assignment would send them (paper Appendix C.2).
    """
    n = counts.to(torch.float64)
    mean = float(n.mean())
    if mean == 0:
        return {"load_max_over_mean": float("nan"), "empty_experts": int(n.numel()),
                "starved_experts": int(n.numel())}
    return {
        "load_max_over_mean": float(n.max()) / mean,
        "empty_experts": int((n == 0).sum()),
        "starved_experts": int((n < 0.05 * mean).sum()),
    }
