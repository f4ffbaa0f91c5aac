"""The paper's geometry ladder (Sec. 7.1, Table 9) and the vectorised (q, E, K, G) grid.

A seed q fixes the backbone: L = 4q blocks, 4q heads of width 128, d = 128·heads,
d_ff = 2.5·d, GQA with 8 KV heads (Appendix E listing). The MoE axes follow the paper's
recipe (Sec. 3.1, A.1): block 1 dense, one shared expert of width d_expert = d_ff / G,
SwiGLU experts, pre-LayerNorm, untied GPT-2 vocabulary.

The paper's runs use gated attention (A.1), but its Table 9 counts are reproduced only
without the gate's d·heads parameters per block (0.005% of N_tot), so the ladder leaves
the gate out by default; pass ``gated_attention=True`` to count it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike

from mosaic.arch.counts import build_counts, params_attention_gqa
from mosaic.arch.geometry import AttentionKind, Geometry, MoEConfig, NormKind, RouterConfig
from mosaic.errors import MosaicInputError
from mosaic.limits import check_range

LADDER_MULTIPLIER = 4  # m in L = m·q and heads = m·q (Sec. 7.1)
LADDER_HEAD_DIM = 128  # d_head (Sec. 7.1)
LADDER_FFN_RATIO = 2.5  # d_ff = 2.5·d (Sec. 7.1)
LADDER_KV_HEADS = 8  # n_kv_heads in the Appendix E listing
PAPER_VOCAB = 50257  # GPT-2 BPE (Appendix A.1)
PAPER_SHARED_EXPERTS = 1  # one always-active shared expert (Sec. 3.1)
PAPER_DENSE_LAYERS = 1  # block 1 kept dense (Sec. 3.1)
# The paper's router (Sec. 3.3, Alg. 1, Appendix A.3), which trained every run the loss law
# was fitted on: sigmoid scores, the LFLB selection bias, gate probabilities renormalised
# over the chosen K, unscaled.
PAPER_ROUTER = RouterConfig(score="sigmoid", balancing="loss_free")


@dataclass(frozen=True)
class LadderBackbone:
    """Backbone dimensions a seed q fixes."""

    q: int
    layers: int
    heads: int
    d_model: int
    ffn: int


def ladder_backbone(q: int) -> LadderBackbone:
    """Backbone of seed ``q`` (Table 9 columns L, n_head, d, d_ff)."""
    check_range("ladder seed q", q, "ladder_q", integer=True)
    heads = LADDER_MULTIPLIER * q
    d_model = LADDER_HEAD_DIM * heads
    ffn = round(LADDER_FFN_RATIO * d_model)
    return LadderBackbone(q=q, layers=LADDER_MULTIPLIER * q, heads=heads, d_model=d_model, ffn=ffn)


def ladder_kv_heads(heads: ArrayLike, kv_heads: int = LADDER_KV_HEADS) -> ArrayLike:
    """KV heads of a ladder rung: the listing's 8 where they divide the 4q query heads (even
    q), else the largest count that does, gcd(4q, 8) = 4 for odd q (GQA shares each KV head
    among an equal number of query heads; the paper's sweep has q = 3, Appendix C)."""
    return np.gcd(heads, kv_heads)  # int or array, as ``heads``


def expert_width(ffn: int, split_factor: int) -> int:
    """d_expert = d_ff / G (Eq. 8); G must divide d_ff exactly."""
    if split_factor <= 0 or ffn % split_factor:
        raise MosaicInputError(
            f"split factor G={split_factor} must be a positive divisor of d_ff={ffn}"
        )
    return ffn // split_factor


def ladder_geometry(
    q: int,
    experts: int | None = None,
    top_k: int | None = None,
    split_factor: int = 1,
    *,
    shared_experts: int = PAPER_SHARED_EXPERTS,
    dense_layers: int = PAPER_DENSE_LAYERS,
    vocab: int = PAPER_VOCAB,
    gated_attention: bool = False,
) -> Geometry:
    """The ladder geometry of seed ``q``; dense when ``experts`` is None."""
    backbone = ladder_backbone(q)
    moe = None
    if experts is not None:
        if top_k is None:
            raise MosaicInputError("top_k is required when experts is given")
        width = expert_width(backbone.ffn, split_factor)
        moe = MoEConfig(
            experts=experts,
            top_k=top_k,
            expert_ffn=width,
            shared_experts=shared_experts,
            dense_layers=dense_layers,
            router=PAPER_ROUTER,
        )
    return Geometry(
        layers=backbone.layers,
        d_model=backbone.d_model,
        heads=backbone.heads,
        kv_heads=int(ladder_kv_heads(backbone.heads)),
        head_dim=LADDER_HEAD_DIM,
        ffn=backbone.ffn,
        vocab=vocab,
        glu=True,
        tied_embeddings=False,
        attention=AttentionKind.GQA,
        gated_attention=gated_attention,
        norm=NormKind.LAYERNORM,
        moe=moe,
    )


@dataclass(frozen=True)
class LadderGrid:
    """Columns of the admissible (q, E, K, G) ladder geometries, one row per geometry.

    With ``backbone`` set the rows are variants of that model instead
    (:mod:`mosaic.arch.backbone`: depth, width, E, K, G around it) and ``q`` is 0.
    """

    q: np.ndarray
    experts: np.ndarray
    top_k: np.ndarray
    split_factor: np.ndarray
    layers: np.ndarray
    d_model: np.ndarray
    expert_ffn: np.ndarray
    n_total: np.ndarray
    n_active: np.ndarray
    sparsity: np.ndarray
    backbone: Geometry | None = None

    def __len__(self) -> int:
        return int(self.q.size)

    def take(self, rows: np.ndarray) -> LadderGrid:
        """The grid restricted to ``rows`` (same backbone)."""
        columns = {f.name: getattr(self, f.name)[rows] for f in fields(self)
                   if f.name != "backbone"}
        return LadderGrid(**columns, backbone=self.backbone)

    @property
    def is_ladder(self) -> bool:
        """Rows are rungs of the paper's ladder (else variants of a backbone)."""
        return self.backbone is None

    def geometry(self, row: int) -> Geometry:
        """Materialise row ``row`` as a :class:`Geometry`."""
        if self.backbone is not None:
            from mosaic.arch.backbone import backbone_variant  # backbone imports this module

            return backbone_variant(self.backbone, int(self.layers[row]),
                                    int(self.d_model[row]), int(self.experts[row]),
                                    int(self.top_k[row]), int(self.split_factor[row]))
        return ladder_geometry(
            int(self.q[row]),
            int(self.experts[row]),
            int(self.top_k[row]),
            int(self.split_factor[row]),
        )


def _as_int_axis(name: str, values: Iterable[int]) -> np.ndarray:
    axis = np.unique(np.asarray(list(values), dtype=np.int64))
    if axis.size == 0:
        raise MosaicInputError(f"grid axis {name} is empty")
    if (axis <= 0).any():
        raise MosaicInputError(f"grid axis {name} must hold positive integers, got {axis.tolist()}")
    return axis


def enumerate_ladder_grid(
    q_values: Iterable[int],
    expert_values: Iterable[int],
    top_k_values: Iterable[int],
    split_factor_values: Iterable[int],
    *,
    s_min: float = 0.0,
) -> LadderGrid:
    """All ladder geometries of the product grid that pass the guards, vectorised.

    Guards (Sec. 7.3): K ≤ E, G divides d_ff (integer expert width), S ≥ s_min.
    """
    axes = [
        _as_int_axis("q", q_values),
        _as_int_axis("experts", expert_values),
        _as_int_axis("top_k", top_k_values),
        _as_int_axis("split_factor", split_factor_values),
    ]
    q, experts, top_k, split = (a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    heads = LADDER_MULTIPLIER * q
    d_model = LADDER_HEAD_DIM * heads
    ffn = np.rint(LADDER_FFN_RATIO * d_model).astype(np.int64)
    admissible = (top_k <= experts) & (ffn % split == 0)
    q, experts, top_k, split, heads, d_model, ffn = (
        a[admissible] for a in (q, experts, top_k, split, heads, d_model, ffn)
    )
    layers = LADDER_MULTIPLIER * q
    expert_ffn = ffn // split
    counts = build_counts(
        attention_per_layer=params_attention_gqa(
            d_model, heads, ladder_kv_heads(heads), LADDER_HEAD_DIM, gated=False
        ),
        layers=layers,
        d_model=d_model,
        ffn=ffn,
        glu=True,
        norm=NormKind.LAYERNORM,
        vocab=PAPER_VOCAB,
        tied_embeddings=False,
        moe_layers=np.maximum(layers - PAPER_DENSE_LAYERS, 0),
        experts=experts,
        top_k=top_k,
        expert_ffn=expert_ffn,
        shared_experts=PAPER_SHARED_EXPERTS,
        shared_expert_ffn=expert_ffn,
    )
    sparsity = counts.sparsity
    keep = sparsity >= s_min
    return LadderGrid(
        q=q[keep],
        experts=experts[keep],
        top_k=top_k[keep],
        split_factor=split[keep],
        layers=layers[keep],
        d_model=d_model[keep],
        expert_ffn=expert_ffn[keep],
        n_total=np.asarray(counts.n_total)[keep],
        n_active=np.asarray(counts.n_active)[keep],
        sparsity=sparsity[keep],
    )
