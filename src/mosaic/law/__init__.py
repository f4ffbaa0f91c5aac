"""Loss-law engine (paper Sec. 4, 6.1; App. A.2, B, C): forms, fitting, uncertainty, optima.

Quick use::

    from mosaic.law import default_law, compute_optimum
    law = default_law()                                   # Eq. 10 with Table 2 coefficients
    law.predict(n_total=327.2e9, tokens=1.42e12, sparsity=0.9556, split_factor=4)
    compute_optimum(law, c_model_flops=1e22, split_factor=4)   # Eq. 16 (+ Eq. 17 lr)
"""

from mosaic.law.bootstrap import (
    BootstrapResult,
    IdentifiabilityResult,
    Interval,
    bca_interval,
    bootstrap_fit,
    identifiability_scan,
    percentile_interval,
)
from mosaic.law.datasets import (
    EPOCH_HUBER_FIT,
    EPOCH_HUBER_OBJECTIVE,
    HOFFMANN_2022_FIT,
    load_epoch_chinchilla,
)
from mosaic.law.fit import (
    FitResult,
    FitSettings,
    HuberLogObjective,
    fit_law,
    polish,
    spread_starts,
    starts_from_values,
)
from mosaic.law.forms import CHINCHILLA, FORMS, JOINT, PER_G, LawForm, PowerTerm, get_form
from mosaic.law.law import ScalingLaw, default_law
from mosaic.law.optimum import (
    Allocation,
    ComputeOptimum,
    compute_optimum,
    peak_learning_rate,
    sparsity_profile,
)
from mosaic.law.rundata import RunData, load_run_data
from mosaic.law.validation import (
    FitMetrics,
    ParityData,
    ValidatedFit,
    evaluate,
    fit_with_holdout,
    holdout_mask,
)

__all__ = [
    "CHINCHILLA",
    "EPOCH_HUBER_FIT",
    "EPOCH_HUBER_OBJECTIVE",
    "FORMS",
    "HOFFMANN_2022_FIT",
    "JOINT",
    "PER_G",
    "Allocation",
    "BootstrapResult",
    "ComputeOptimum",
    "FitMetrics",
    "FitResult",
    "FitSettings",
    "HuberLogObjective",
    "IdentifiabilityResult",
    "Interval",
    "LawForm",
    "ParityData",
    "PowerTerm",
    "RunData",
    "ScalingLaw",
    "ValidatedFit",
    "bca_interval",
    "bootstrap_fit",
    "compute_optimum",
    "default_law",
    "evaluate",
    "fit_law",
    "fit_with_holdout",
    "get_form",
    "holdout_mask",
    "identifiability_scan",
    "load_epoch_chinchilla",
    "load_run_data",
    "peak_learning_rate",
    "percentile_interval",
    "polish",
    "sparsity_profile",
    "spread_starts",
    "starts_from_values",
]
