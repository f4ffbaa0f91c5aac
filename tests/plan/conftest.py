"""Shared fixtures: a small real search on one p6-b200 node and synthetic throughput."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from mosaic.arch import LadderGrid, enumerate_ladder_grid
from mosaic.law import ScalingLaw, default_law
from mosaic.perf.calibration import Calibration, default_calibration
from mosaic.plan import Envelope, PlanResult, SearchSpace, ThroughputTable, resolve_system, search

SMALL_SPACE = SearchSpace(q=(4, 6), experts=(8, 16, 32), top_k=(1, 2), split_factor=(1, 4),
                          s_min=0.5)


@pytest.fixture(scope="session")
def law() -> ScalingLaw:
    return default_law()


@pytest.fixture(scope="session")
def calibration() -> Calibration:
    return default_calibration()


@pytest.fixture(scope="session")
def one_node() -> Envelope:
    return Envelope(resolve_system("B200"), n_nodes=1, days=2.0)


@pytest.fixture(scope="session")
def small_result(one_node, law, calibration) -> PlanResult:
    """A real search: 24 geometries on 8 B200 for 2 days (some capped, some too big)."""
    return search(one_node, SMALL_SPACE, law, calibration, workers=1)


def synthetic_table(grid: LadderGrid, n_devices: int,
                    mfu: Callable[[LadderGrid], np.ndarray],
                    peak_flops_per_s: float) -> ThroughputTable:
    """A throughput table with a prescribed MFU per geometry (no performance model)."""
    mfu_values = np.asarray(mfu(grid), dtype=float)
    tokens_per_s = mfu_values * peak_flops_per_s * n_devices / (6.0 * grid.n_active)
    n = len(grid)
    plan = {"tp": 1, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": n_devices,
            "sharding": "zero1", "micro_batch": 1, "checkpointing": "none"}
    return ThroughputTable(
        grid=grid, n_devices=n_devices, tokens_per_s=tokens_per_s, mfu=mfu_values,
        step_time_s=np.ones(n), memory_bytes=np.ones(n), plans=(plan,) * n,
        layout_reasons=("",) * n, plans_evaluated=n, plans_timed=n,
    )


@pytest.fixture
def sparsity_ladder() -> LadderGrid:
    """One backbone (q = 8), G = 4, K = 1, E from 8 to 512: S rises along the rows."""
    return enumerate_ladder_grid([8], [8, 16, 32, 64, 128, 256, 512], [1], [4], s_min=0.0)
