"""The most a geometry could train in a window: every GEMM at the device's full peak.

A layout's throughput obeys 6·N_act·tokens/s <= F_lane·N_dev, with F_lane the datasheet dense
peak of the GEMM precision (the model FLOPs of Eq. 25 leave attention out, so the real step
does more work than this counts). So D*(Z) <= F_lane·N_dev·T_train·η_good / (6·N_act), capped
at tpp_max·N_act as the search caps it (Sec. 7.3), and since every law falls with D the loss
at that D is a floor under any plan of the geometry. Used to prune before a layout search:
batch candidates (:mod:`mosaic.plan.batch`) and unreachable target losses
(:mod:`mosaic.plan.cost`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mosaic.arch import LadderGrid
from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.law import ScalingLaw
from mosaic.plan.envelope import Envelope, SearchSpace


@dataclass(frozen=True)
class PeakBound:
    """Per grid row: the tokens and loss of a run at the GEMM lane's full peak."""

    tokens: np.ndarray
    loss: np.ndarray
    trainable: np.ndarray  # the bound reaches tpp_min·N_act (the search's trainability floor)

    @property
    def best_loss(self) -> float:
        """The lowest loss any trainable geometry could reach; inf when none could train."""
        return float(np.min(self.loss[self.trainable])) if self.trainable.any() else np.inf


def peak_bound(envelope: Envelope, space: SearchSpace, law: ScalingLaw,
               grid: LadderGrid | None = None) -> PeakBound:
    """Tokens and loss of each geometry at 100% of the GEMM precision's datasheet peak."""
    grid = space.enumerate() if grid is None else grid
    c_max = (envelope.gemm_peak_flops_per_s_per_device * envelope.n_devices * envelope.train_s
             * envelope.goodput_fraction)
    budget = c_max / (FLOPS_PER_PARAM_TOKEN * grid.n_active)
    tokens = np.minimum(budget, space.tpp_max * grid.n_active)
    # no tokens at all (a cluster whose goodput is 0): the law's limit as D -> 0, infinite
    loss = np.full(len(grid), np.inf)
    some = tokens > 0
    if some.any():
        loss[some] = law.predict(grid.n_total[some], space.law_tokens(tokens[some]),
                                 grid.sparsity[some], grid.split_factor[some])
    return PeakBound(tokens, loss, some & (budget >= space.tpp_min * grid.n_active))
