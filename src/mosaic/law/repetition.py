"""Repeated data: the value of tokens seen more than once (data-constrained scaling).

The paper's joint law (Eq. 10) counts every training token as new. When the unique data U
is smaller than the tokens D a run trains on, Muennighoff et al. (2023, "Scaling
Data-Constrained Language Models", NeurIPS; Eq. 5) replace D by the effective data

    D' = U + U·R*·(1 − exp(−R / R*)),   R = D/U − 1 (repetitions beyond the first epoch),

so each further epoch is worth less, and D' never exceeds U·(1 + R*). Their excess-parameter
term has the same shape in N (Eq. 6, with U_N the compute-optimal parameters for U). The
decay constants are the authors' fit, printed in the repository's README ("Parametric Fit",
huggingface/datablations @ 13701315, 2025-06-27): R_D* = 15.387756, R_N* = 5.309743.

Applied to the MoE law here as D' in place of D: the decay was fitted on dense C4 models
(10 M - 9 B parameters), and the MoE law's own excess-parameter regime is not modelled.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

R_D_STAR = 15.387756  # repetitions at which repeated data has lost 1 − 1/e of its value
R_N_STAR = 5.309743  # the same for parameters beyond U_N (Eq. 6)


def repeated_value(total: ArrayLike, unique: ArrayLike, decay: float) -> np.ndarray:
    """U + U·R*·(1 − exp(−R/R*)) with R = total/U − 1 (Eqs. 5 and 6); ``total`` itself
    when it does not exceed ``unique`` (nothing repeated)."""
    total = np.asarray(total, dtype=float)
    unique = np.asarray(unique, dtype=float)
    repeats = np.maximum(total / unique - 1.0, 0.0)
    return np.minimum(total, unique) + unique * decay * -np.expm1(-repeats / decay)


def effective_tokens(tokens: ArrayLike, unique_tokens: float | None) -> np.ndarray:
    """D' of ``tokens`` drawn from ``unique_tokens`` (None: all unique, D' = D)."""
    if unique_tokens is None:
        return np.asarray(tokens, dtype=float)
    return repeated_value(tokens, unique_tokens, R_D_STAR)
