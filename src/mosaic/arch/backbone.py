"""A geometry grid around the user's own backbone (issue 10: plan over what the user runs).

The paper's ladder (:mod:`mosaic.arch.ladder`) derives every dimension from one seed q.
A backbone grid instead starts from a model the user gives (a HuggingFace config or a
mosaic model file) and varies only the search axes, keeping everything else:

* depth: the number of blocks L (the dense prefix and the MoE period are kept, so at
  least one block past the dense prefix must remain MoE);
* width: the residual width d. Query heads scale with d at the backbone's head width
  (head_dim, or the MLA dimensions, unchanged); GQA keeps its KV-head count, which must
  divide the new head count; the dense FFN width scales as d_ff·d'/d (an integer);
* experts E and active experts K;
* split factor G = d_ff / d_expert (paper Eq. 8): d_expert = d_ff'/G, an integer.
  Shared experts keep their count and their width relative to a routed expert (the
  paper's ladder: one shared expert as wide as a routed one, Sec. 3.1); DeepSeek-V3's
  fine-grained segmentation likewise splits shared and routed experts alike (DeepSeekMoE,
  Dai et al. 2024, Sec. 3).

Attention kind (MHA/GQA/MLA, gates, norms, biases, sinks), vocabulary, embedding tying,
normalisation and MTP modules are the backbone's. A dense backbone becomes an MoE with
every block routed and no shared expert.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from mosaic.arch.counts import count_parameters
from mosaic.arch.geometry import AttentionKind, Geometry, MoEConfig, RouterConfig
from mosaic.arch.ladder import LadderGrid
from mosaic.errors import MosaicInputError


def backbone_split_factor(backbone: Geometry) -> int:
    """The backbone's own G = d_ff / d_expert; an error when it is not an integer."""
    if backbone.moe is None:
        return 1
    ratio = backbone.ffn / backbone.moe.expert_ffn
    if ratio != int(ratio):
        raise MosaicInputError(
            f"the backbone's d_ff / d_expert = {backbone.ffn} / {backbone.moe.expert_ffn} = "
            f"{ratio:.3g} is not an integer split factor; pass --split-factor values")
    return int(ratio)


def width_step(backbone: Geometry) -> int:
    """The smallest width w whose multiples scale the backbone's heads and d_ff to integers
    (heads·d/d0 and d_ff·d/d0, :func:`backbone_variant`): d0/gcd(d0, heads) divides d, and
    so does d0/gcd(d0, d_ff). 56 for DeepSeek-V3 (d0 7168, 128 heads, d_ff 18432)."""
    d0 = backbone.d_model
    return math.lcm(d0 // math.gcd(d0, backbone.heads), d0 // math.gcd(d0, backbone.ffn))


def _fractions_of(d_model: int, step: int) -> list[int]:
    """The backbone's d/4, 3d/8 and d/2 where all three are widths (whole multiples of
    ``step``): the round widths a user reaches for first (DeepSeek-V3: 1792, 2688, 3584)."""
    widths = [d_model * n / 8 for n in (2, 3, 4)]
    if all(w == int(w) and int(w) % step == 0 for w in widths):
        return [int(w) for w in widths]
    return []


def backbone_variant(backbone: Geometry, layers: int, d_model: int, experts: int, top_k: int,
                     split_factor: int) -> Geometry:
    """The backbone at depth ``layers``, width ``d_model`` and MoE axes (E, K, G).

    Raises :class:`MosaicInputError` naming the rule a combination breaks.
    """
    heads = backbone.heads * d_model / backbone.d_model
    ffn = backbone.ffn * d_model / backbone.d_model
    if heads != int(heads) or ffn != int(ffn):
        step = width_step(backbone)
        below = max(step, d_model // step * step)
        near = " and ".join(map(str, sorted({below, below + step})))
        fractions = _fractions_of(backbone.d_model, step)
        also = f"; {', '.join(map(str, fractions))} are d/4, 3d/8, d/2" if fractions else ""
        raise MosaicInputError(
            f"d={d_model} does not scale the backbone's {backbone.heads} heads and d_ff "
            f"{backbone.ffn} to integers (d={backbone.d_model}); the widths that do are the "
            f"multiples of {step} (nearest: {near}{also})")
    heads, ffn = int(heads), int(ffn)
    if ffn % split_factor:
        raise MosaicInputError(f"G={split_factor} does not divide d_ff={ffn}")
    expert_ffn = ffn // split_factor
    kv_heads = {AttentionKind.GQA: backbone.kv_heads}.get(backbone.attention, heads)
    base = backbone.moe
    if base is None:
        moe = MoEConfig(experts=experts, top_k=top_k, expert_ffn=expert_ffn)
    else:
        shared = base.shared_expert_ffn
        if shared is not None:  # same width relative to a routed expert as the backbone's
            shared = max(1, round(shared * expert_ffn / base.expert_ffn))
        moe = replace(base, experts=experts, top_k=top_k, expert_ffn=expert_ffn,
                      shared_expert_ffn=shared, router=_variant_router(base, experts, top_k))
        if layers <= moe.dense_layers:
            raise MosaicInputError(
                f"L={layers} leaves no MoE block after the {moe.dense_layers} dense ones")
    return replace(backbone, layers=layers, d_model=d_model, heads=heads, kv_heads=kv_heads,
                   ffn=ffn, moe=moe)


def _variant_router(base: MoEConfig, experts: int, top_k: int) -> RouterConfig | None:
    """The backbone's router for a variant with ``experts`` and ``top_k``: its expert groups
    kept where they still divide the experts and hold the K chosen, else dropped (the
    variant's routing is then not group-limited)."""
    router = base.router
    if router is not None and router.group_misfit(experts, top_k) is not None:
        return replace(router, groups=None, top_groups=None)
    return router


def _axis(name: str, values: Iterable[int]) -> tuple[int, ...]:
    axis = tuple(sorted({int(v) for v in values}))
    if not axis:
        raise MosaicInputError(f"grid axis {name} is empty; give at least one value")
    if axis[0] <= 0:
        raise MosaicInputError(f"grid axis {name} must hold positive integers, got {axis}")
    return axis


def enumerate_backbone_grid(
    backbone: Geometry,
    layers: Iterable[int],
    d_model: Iterable[int],
    experts: Iterable[int],
    top_k: Iterable[int],
    split_factor: Iterable[int],
    *,
    s_min: float = 0.0,
) -> tuple[LadderGrid, str]:
    """Every admissible variant of ``backbone`` over the product of the axes.

    Guards: K ≤ E, integer widths (see :func:`backbone_variant`), S ≥ s_min. Returns the
    grid (rows in axis order, q = 0: not a ladder rung) and, when a combination was
    refused, the first refusal's reason ('' when none was).
    """
    if backbone.is_hybrid:
        raise MosaicInputError("a hybrid SSM/attention backbone (model.hybrid_pattern) "
                               "cannot be scaled over the ladder's depth and width axes: the "
                               "scaling law and the geometry grid are the paper's transformers")
    axes = [_axis(name, values) for name, values in (
        ("layers", layers), ("d_model", d_model), ("experts", experts), ("top_k", top_k),
        ("split_factor", split_factor))]
    rows: list[tuple[int, ...]] = []
    counts: list[tuple[float, float, float]] = []
    refusal = ""
    for combo in np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 5).tolist():
        n_layers, width, n_experts, k, g = combo
        if k > n_experts:
            continue
        try:
            geometry = backbone_variant(backbone, n_layers, width, n_experts, k, g)
        except MosaicInputError as exc:
            refusal = refusal or str(exc)
            continue
        c = count_parameters(geometry)
        if float(c.sparsity) < s_min:
            refusal = refusal or f"S = {float(c.sparsity):.3f} < s_min = {s_min:g}"
            continue
        assert geometry.moe is not None
        rows.append((n_layers, width, n_experts, k, g, geometry.moe.expert_ffn))
        counts.append((float(c.n_total), float(c.n_active), float(c.sparsity)))
    table = np.asarray(rows, dtype=np.int64).reshape(-1, 6)
    stats = np.asarray(counts, dtype=float).reshape(-1, 3)
    grid = LadderGrid(
        q=np.zeros(len(table), dtype=np.int64), layers=table[:, 0], d_model=table[:, 1],
        experts=table[:, 2], top_k=table[:, 3], split_factor=table[:, 4],
        expert_ffn=table[:, 5], n_total=stats[:, 0], n_active=stats[:, 1],
        sparsity=stats[:, 2], backbone=backbone)
    return grid, refusal
