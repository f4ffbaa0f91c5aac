"""Loss-law engine (paper Sec. 4, 6.1; App. A.2, B, C): forms, fitting, uncertainty, optima.

Quick use::

    from mosaic.law import default_law, compute_optimum
    law = default_law()                                   # Eq. 10 with Table 2 coefficients
    law.predict(n_total=327.2e9, tokens=1.42e12, sparsity=0.9556, split_factor=4)
    compute_optimum(law, c_model_flops=1e22, split_factor=4)   # Eq. 16 (+ Eq. 17 lr)

Names are imported on first use (PEP 562), so importing one law module does not load
scipy.stats and the rest: `mosaic` commands start fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Public name -> the submodule that defines it.
_SOURCES: dict[str, str] = {
    "CHINCHILLA": "forms",
    "EPOCH_HUBER_FIT": "datasets",
    "EPOCH_HUBER_OBJECTIVE": "datasets",
    "FORMS": "forms",
    "HOFFMANN_2022_FIT": "datasets",
    "JOINT": "forms",
    "PER_G": "forms",
    "Allocation": "optimum",
    "BootstrapResult": "bootstrap",
    "ComputeOptimum": "optimum",
    "FitMetrics": "validation",
    "FitResult": "fit",
    "FitSettings": "fit",
    "HuberLogObjective": "fit",
    "IdentifiabilityResult": "bootstrap",
    "Interval": "bootstrap",
    "LawForm": "forms",
    "ParityData": "validation",
    "PowerTerm": "forms",
    "RunData": "rundata",
    "ScalingLaw": "law",
    "ValidatedFit": "validation",
    "bca_interval": "bootstrap",
    "bootstrap_fit": "bootstrap",
    "compute_optimum": "optimum",
    "default_law": "law",
    "evaluate": "validation",
    "fit_law": "fit",
    "fit_with_holdout": "validation",
    "get_form": "forms",
    "holdout_mask": "validation",
    "identifiability_scan": "bootstrap",
    "load_epoch_chinchilla": "datasets",
    "load_run_data": "rundata",
    "peak_learning_rate": "optimum",
    "percentile_interval": "bootstrap",
    "polish": "fit",
    "sparsity_profile": "optimum",
    "spread_starts": "fit",
    "starts_from_values": "fit",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    """Import a public name from its submodule the first time it is used."""
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"mosaic.law.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOURCES))
