"""Adapters for public scaling-law datasets, and the published fits they are checked against."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd

from mosaic.errors import MosaicInputError
from mosaic.law.rundata import RunData

# Hoffmann et al. (2022), "Training Compute-Optimal LLMs", Sec. 3.3 (Approach 3 fit).
HOFFMANN_2022_FIT = MappingProxyType(
    {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
)
# Epoch AI's converged Huber fit (delta 1e-3, summed over the 240 kept rows, residual
# log L_pred - log L_obs) of the Chinchilla form to their reconstruction of Hoffmann et al.
# Fig. 4 (Besiroglu et al. 2024, arXiv:2404.10102; github.com/epoch-research/analyzing-chinchilla).
EPOCH_HUBER_FIT = MappingProxyType(
    {"E": 1.8172, "A": 477.8, "B": 2143.0, "alpha": 0.3473, "beta": 0.3672}
)
EPOCH_HUBER_OBJECTIVE = 0.00101827
EPOCH_HUBER_DELTA = 1e-3
EPOCH_DROPPED_ROWS = 5  # Epoch drop the 5 largest-loss rows, keeping 240


def load_epoch_chinchilla(path: str | Path) -> RunData:
    """Epoch's ``svg_extracted_data.csv`` as run data: N = "Model Size", D = C / (6 N).

    The five rows with the largest loss are dropped (as in Epoch's analysis), leaving 240.
    """
    path = Path(path)
    if not path.is_file():
        raise MosaicInputError(f"Epoch Chinchilla data {str(path)!r} does not exist")
    frame = pd.read_csv(path)
    needed = ["Model Size", "Training FLOP", "loss"]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise MosaicInputError(f"{path}: missing column(s) {missing} of Epoch's CSV")
    cutoff = np.sort(frame["loss"].to_numpy())[-EPOCH_DROPPED_ROWS]
    kept = frame[frame["loss"] < cutoff]
    n_params = kept["Model Size"].to_numpy(dtype=float)
    return RunData(
        n_total=n_params,
        tokens=kept["Training FLOP"].to_numpy(dtype=float) / (6.0 * n_params),  # C = 6 N D
        loss=kept["loss"].to_numpy(dtype=float),
        source=str(path),
    )
