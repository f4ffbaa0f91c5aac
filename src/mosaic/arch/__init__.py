"""Architecture calculator: geometry, exact parameter/FLOP counts, the geometry ladder."""

from mosaic.arch.counts import (
    LayerParameters,
    ParameterCounts,
    count_parameters,
    layer_breakdown,
)
from mosaic.arch.flops import (
    FlopConvention,
    attention_flops_per_token,
    gdn_flops_per_token,
    lm_head_flops_per_token,
    model_flops_per_token,
    ssd_scan_flops_per_token,
    useful_flops_per_token,
)
from mosaic.arch.geometry import (
    AttentionKind,
    GatedDeltaNetConfig,
    Geometry,
    HybridLayer,
    MambaConfig,
    MLAConfig,
    MoEConfig,
    NormKind,
    QKNormSpan,
    RouterConfig,
)
from mosaic.arch.ladder import LadderGrid, enumerate_ladder_grid, ladder_backbone, ladder_geometry

__all__ = [
    "AttentionKind",
    "FlopConvention",
    "GatedDeltaNetConfig",
    "Geometry",
    "HybridLayer",
    "LadderGrid",
    "LayerParameters",
    "MLAConfig",
    "MambaConfig",
    "MoEConfig",
    "NormKind",
    "ParameterCounts",
    "QKNormSpan",
    "RouterConfig",
    "attention_flops_per_token",
    "count_parameters",
    "enumerate_ladder_grid",
    "gdn_flops_per_token",
    "ladder_backbone",
    "ladder_geometry",
    "layer_breakdown",
    "lm_head_flops_per_token",
    "model_flops_per_token",
    "ssd_scan_flops_per_token",
    "useful_flops_per_token",
]
