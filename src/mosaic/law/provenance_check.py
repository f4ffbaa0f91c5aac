"""The parts of a law file's ``provenance`` that commands read, checked when the file loads.

``provenance`` is free-form (source, fit settings, intervals), but four keys written by
`mosaic law fit` are read back by every command that takes ``--law``: ``at_bound`` and
``unidentified`` (:func:`mosaic.law.law.fit_caveats`), ``metrics`` (R² and held-out runs)
and ``data_support`` (the fitted range, :mod:`mosaic.law.extrapolation`). A hand-edited
value of the wrong shape ended in an internal error, or in a nonsense optimum (a negative
split-factor range gave G = -1 and D* = 1 token; a fuzz trial); here it is one line naming
the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mosaic.errors import MosaicInputError
from mosaic.law.extrapolation import QUANTITIES
from mosaic.limits import LIMITS, is_finite_number, is_number


def check_provenance(provenance: Mapping[str, Any], source: str) -> None:
    """Refuse a law file whose read provenance keys have the wrong shape (module doc)."""
    where = f"{source}: provenance"
    _check_at_bound(provenance.get("at_bound"), f"{where}.at_bound")
    _check_unidentified(provenance.get("unidentified"), f"{where}.unidentified")
    _check_metrics(provenance.get("metrics"), f"{where}.metrics")
    _check_data_support(provenance.get("data_support"), f"{where}.data_support")


def _mapping(value: Any, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MosaicInputError(f"{where}: expected {what}, got {value!r:.60}")
    return value


def _check_at_bound(value: Any, where: str) -> None:
    """{coefficient: {"side": "lower"|"upper", "bound": number}} (fit.coefficients_at_bound)."""
    if value is None:
        return
    for name, info in _mapping(value, where, "an object coefficient -> {side, bound}").items():
        info = _mapping(info, f"{where}.{name}", 'an object {"side": ..., "bound": ...}')
        if info.get("side") not in ("lower", "upper") or not is_finite_number(info.get("bound")):
            raise MosaicInputError(
                f"{where}.{name}: expected side 'lower' or 'upper' and a finite number bound, "
                f"got {dict(info)!r:.80}")


def _check_unidentified(value: Any, where: str) -> None:
    """{feature: [exponent names]} (fit.unidentified_exponents)."""
    if value is None:
        return
    for feature, exponents in _mapping(value, where, "an object feature -> [exponents]"
                                       ).items():
        if not isinstance(exponents, list) or not all(isinstance(e, str) for e in exponents):
            raise MosaicInputError(f"{where}.{feature}: expected a list of exponent names, "
                                   f"got {exponents!r:.60}")


def _check_metrics(value: Any, where: str) -> None:
    """An object whose ``r2`` and ``n_heldout``, where present, are numbers."""
    if value is None:
        return
    metrics = _mapping(value, where, "an object of fit metrics")
    for name in ("r2", "n_heldout"):  # NaN allowed: an R² of runs with no spread
        value = metrics.get(name)
        if value is not None and not is_number(value):
            raise MosaicInputError(f"{where}.{name}: expected a number, got {value!r:.60}")


def _check_data_support(value: Any, where: str) -> None:
    """{quantity: [low, high]} with low <= high inside the quantity's domain."""
    if value is None:
        return
    support = _mapping(value, where, "an object quantity -> [low, high]")
    for name in QUANTITIES:
        bounds = support.get(name)
        if bounds is None:
            continue
        if (not isinstance(bounds, list | tuple) or len(bounds) != 2
                or not all(is_finite_number(b) for b in bounds) or bounds[0] > bounds[1]):
            raise MosaicInputError(f"{where}.{name}: expected [low, high], two finite numbers "
                                   f"with low <= high, got {bounds!r:.60}")
        if not _inside_domain(name, bounds[0], bounds[1]):
            raise MosaicInputError(f"{where}.{name}: {list(bounds)} is outside its domain "
                                   f"({_DOMAIN_TEXT.get(name, 'positive')})")


_DOMAIN_TEXT = {"sparsity": "0 <= S < 1",
                "split_factor": f"G in {LIMITS['split_factor'].describe()}"}


def _inside_domain(name: str, low: float, high: float) -> bool:
    """Whether a fitted range [low, high] of ``name`` lies in its physical domain: sparsity
    in [0, 1), a split factor in what every command accepts (mosaic.limits), every other
    quantity positive."""
    if name == "sparsity":
        return low >= 0.0 and high < 1.0
    if name == "split_factor":
        split = LIMITS["split_factor"]
        return low >= split.low and high <= split.high
    return low > 0
