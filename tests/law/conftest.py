"""Shared fixtures: Epoch's Chinchilla data (from ../shared) and a synthetic joint-law design."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mosaic.law import RunData, default_law, load_epoch_chinchilla

REPO_ROOT = Path(__file__).resolve().parents[2]
EPOCH_CSV = REPO_ROOT.parent / "shared/research/data/epoch-chinchilla/svg_extracted_data.csv"


@pytest.fixture(scope="session")
def epoch_runs() -> RunData:
    if not EPOCH_CSV.is_file():
        pytest.skip(f"Epoch Chinchilla data not found at {EPOCH_CSV} (needs ../shared)")
    return load_epoch_chinchilla(EPOCH_CSV)


def make_joint_runs(noise: float, seed: int = 0, n_runs: int = 152) -> tuple[RunData, np.ndarray]:
    """Runs spanning App. C, Tables 6-7, with losses from the Table 2 law times
    exp(noise * N(0, 1)); returns (runs, noiseless losses).

    N_act ~ log-uniform [0.104, 2.72] B, S ~ uniform [0.5, 0.981], TPP = D / N_act ~
    log-uniform [10.8, 70]; draws outside N_tot in [0.22, 79.24] B or D in [2.88, 56.38] B
    are rejected; G cycles through {1, 2, 4, 8}.
    """
    rng = np.random.default_rng(seed)
    draws = 8 * n_runs
    n_active = np.exp(rng.uniform(np.log(0.104e9), np.log(2.72e9), draws))
    sparsity = rng.uniform(0.5, 0.981, draws)
    n_total = n_active / (1 - sparsity)
    tokens = n_active * np.exp(rng.uniform(np.log(10.8), np.log(70.0), draws))
    inside = (n_total >= 0.22e9) & (n_total <= 79.24e9) & (tokens >= 2.88e9)
    keep = np.flatnonzero(inside & (tokens <= 56.38e9))[:n_runs]
    assert keep.size == n_runs
    split = np.resize([1.0, 2.0, 4.0, 8.0], n_runs)
    clean = default_law().predict(n_total[keep], tokens[keep], sparsity[keep], split)
    runs = RunData(
        n_total=n_total[keep],
        tokens=tokens[keep],
        loss=clean * np.exp(noise * rng.standard_normal(n_runs)),
        n_active=n_active[keep],
        split_factor=split,
        source="synthetic joint-law runs",
    )
    return runs, clean


@pytest.fixture(scope="session")
def joint_runs_factory() -> Callable[..., tuple[RunData, np.ndarray]]:
    return make_joint_runs


@pytest.fixture(scope="session")
def noisy_joint_fit():
    """Held-out fit of Eq. 10 to 152 synthetic runs with 0.5% log-normal noise, and the
    noiseless losses of those runs."""
    from mosaic.law import JOINT, FitSettings, fit_with_holdout

    runs, clean = make_joint_runs(noise=0.005, seed=0)
    return fit_with_holdout(runs, JOINT, FitSettings(n_polished=4)), runs, clean
