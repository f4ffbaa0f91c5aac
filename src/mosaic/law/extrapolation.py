"""Where a law is extrapolating: its inputs against the data range it was fitted on.

A law file records its fitted range in ``provenance.data_support`` (``{"n_total": [lo, hi],
"n_active": ..., "tokens": ..., "sparsity": ..., "split_factor": ...}``; the built-in Table 2
law carries the paper's Appendix C range, ``mosaic law fit`` writes the range of its runs).
Every input outside its range is flagged with a ratio >= 1 that says how far outside:

- counts (``n_total``, ``n_active``, ``tokens``) and ``split_factor``: value / high above
  the range, low / value below it;
- ``sparsity``: the same ratio on the active fraction 1 - S (the quantity the law's power
  acts on, Eq. 10), so S = 0.995 against a maximum of 0.981 is (1 - 0.981) / 0.005 = 3.8x;
- ``tokens_per_param``: D / N_act (D / N_tot for a dense law), derived from the tokens and
  the count given: a point can lie inside the tokens' and the parameters' ranges and still
  train far longer per parameter than any run did (the paper's runs: 10.8-70, Table 6; a
  reviewer's trial saw the Table 3 optimum at 84 unflagged).
- ``vocab``: the vocabulary of the runs' tokenizer, where their table records it (``mosaic
  ladder`` and ``ladder collect`` write it): a loss is in nats per token of that tokenizer,
  so a law fitted on byte-level runs (256) says nothing of a 50,257-token model's loss (a
  trial planned GPT-2-vocabulary models with a byte-level law, unflagged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mosaic.arch.counts import sparsity as sparsity_of

ArrayLike = float | np.ndarray

QUANTITIES = ("n_total", "n_active", "tokens", "sparsity", "split_factor", "tokens_per_param",
              "vocab")


@dataclass(frozen=True)
class ExtrapolationFlag:
    """One input outside the law's fitted range."""

    quantity: str
    value: float
    low: float
    high: float
    direction: str  # "above" or "below"
    ratio: float  # >= 1: how many times outside (see the module docstring)

    @property
    def message(self) -> str:
        where = f"the fitted range [{_fmt(self.low)}, {_fmt(self.high)}]"
        if self.quantity == "vocab":
            fitted = (f"{self.low:,.0f}" if self.low == self.high
                      else f"{self.low:,.0f}-{self.high:,.0f}")
            return (f"vocabulary {self.value:,.0f} against the runs' {fitted}: the law's loss "
                    "is in nats per token of their tokenizer, not comparable")
        if self.quantity == "sparsity":
            fraction = "below" if self.direction == "above" else "above"
            return (f"sparsity {self.value:.4g} is {self.direction} {where}: the active "
                    f"fraction 1 - S is {_how_far(self.ratio)} {fraction} its range")
        return (f"{self.quantity} {_fmt(self.value)} is {_how_far(self.ratio)} "
                f"{self.direction} {where}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"message": self.message}


# How far past an edge of the fitted range still counts as on it: a point a rounding away
# from a fitted run's value (a trial saw "is 0.018% below the fitted range") is no
# extrapolation.
EDGE_TOLERANCE = 1e-3


def _how_far(ratio: float) -> str:
    """How many times outside: '2.5x', or a percentage when under 10% out ('0.4%', where
    '1x' would say nothing)."""
    return f"{(ratio - 1) * 100:.2g}%" if ratio < 1.1 else f"{ratio:.3g}x"


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.3g}"


def data_support(law: Any) -> dict[str, tuple[float, float]] | None:
    """The fitted range per quantity from ``law.provenance['data_support']``, or None when
    the law file does not record one."""
    support = (getattr(law, "provenance", None) or {}).get("data_support")
    if not isinstance(support, Mapping):
        return None
    ranges: dict[str, tuple[float, float]] = {}
    for name in QUANTITIES:
        bounds = support.get(name)
        if isinstance(bounds, list | tuple) and len(bounds) == 2:
            low, high = float(bounds[0]), float(bounds[1])
            if np.isfinite(low) and np.isfinite(high) and low <= high:
                ranges[name] = (low, high)
    return ranges or None


def _ratio(name: str, value: np.ndarray, low: float, high: float) -> np.ndarray:
    """Vectorised: 1 inside [low, high], else how many times outside (see module doc)."""
    if name == "sparsity":  # compare active fractions 1 - S; a higher S is a smaller fraction
        value, low, high = 1.0 - value, 1.0 - high, 1.0 - low
    with np.errstate(divide="ignore", invalid="ignore"):
        above = np.where(value > high, value / high, 1.0)
        below = np.where(value < low, low / value, 1.0)
    return np.where(np.isfinite(above) & np.isfinite(below), np.maximum(above, below), np.inf)


def extrapolation_ratios(law: Any, **inputs: Any) -> dict[str, np.ndarray]:
    """Per quantity given (arrays broadcast), the ratio outside the fitted range (1 = inside).

    Quantities the law file has no range for are left out. For the vectorised plan grid.
    """
    support = data_support(law) or {}
    ratios: dict[str, np.ndarray] = {}
    for name, value in inputs.items():
        if name not in QUANTITIES:
            raise TypeError(f"unknown law input {name!r}; expected one of {QUANTITIES}")
        if value is None or name not in support:
            continue
        ratios[name] = _ratio(name, np.asarray(value, dtype=float), *support[name])
    return ratios


def extrapolation_flags(
    law: Any,
    *,
    n_total: float | None = None,
    n_active: float | None = None,
    tokens: float | None = None,
    sparsity: float | None = None,
    split_factor: float | None = None,
    vocab: int | None = None,
) -> list[ExtrapolationFlag]:
    """Flags for the scalar inputs that lie outside the law's fitted range (empty: inside,
    or the law records no range: check :func:`data_support`)."""
    support = data_support(law) or {}
    given = {"n_total": n_total, "n_active": n_active, "tokens": tokens,
             "sparsity": sparsity, "split_factor": split_factor,
             "tokens_per_param": tokens_per_param(tokens, n_active, n_total), "vocab": vocab}
    flags = []
    for name, value in given.items():
        if value is None or name not in support:
            continue
        low, high = support[name]
        ratio = float(_ratio(name, np.asarray(float(value)), low, high))
        if ratio > 1.0 + EDGE_TOLERANCE:
            direction = "above" if float(value) > high else "below"
            flags.append(ExtrapolationFlag(name, float(value), low, high, direction, ratio))
    return flags


def tokens_per_param(tokens: ArrayLike | None, n_active: ArrayLike | None,
                     n_total: ArrayLike | None) -> np.ndarray | None:
    """D / N_act, or D / N_tot without an active count (a dense law), of scalars or arrays;
    None without D or without a positive count."""
    count = n_active if n_active is not None else n_total
    if tokens is None or count is None or not np.all(np.asarray(count, dtype=float) > 0):
        return None
    return np.asarray(tokens, dtype=float) / np.asarray(count, dtype=float)


def extrapolation_document(law: Any, flags: list[ExtrapolationFlag]) -> dict[str, Any]:
    """The JSON block commands print: the fitted range and every flag."""
    support = data_support(law)
    return {
        "data_support": None if support is None else {k: list(v) for k, v in support.items()},
        "extrapolating": bool(flags),
        "flags": [flag.to_dict() for flag in flags],
    }


def extrapolation_rows(extrapolation: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) rows of an :func:`extrapolation_document`: one per law input outside
    the fitted range, or one saying the range holds or is not recorded (the plan's CLI
    table and its report page say the same)."""
    if not extrapolation:
        return []
    if extrapolation["data_support"] is None:
        return [("law range", "the law file records no fitted range")]
    if not extrapolation["extrapolating"]:
        return [("law range", "inside the fitted range")]
    return [("law extrapolates", flag["message"]) for flag in extrapolation["flags"]]


# A law input this many times outside its fitted range is said on stderr too, not only in
# the plan's table and JSON (a trial's --json plan at 4e4x the runs' N_tot and 6.5e6x their
# D warned of neither); a vocabulary mismatch always is (the loss is not comparable).
FAR_OUTSIDE_RATIO = 10.0


def far_outside_messages(extrapolation: dict[str, Any] | None) -> list[str]:
    """The messages of an :func:`extrapolation_document`'s flags that make its loss a guess:
    a ratio of :data:`FAR_OUTSIDE_RATIO` or more, or another vocabulary."""
    flags = (extrapolation or {}).get("flags") or []
    return [flag["message"] for flag in flags
            if flag["quantity"] == "vocab" or flag["ratio"] >= FAR_OUTSIDE_RATIO]


def support_of_runs(n_total: np.ndarray, tokens: np.ndarray, n_active: np.ndarray | None = None,
                    split_factor: np.ndarray | None = None, vocab: np.ndarray | None = None
                    ) -> dict[str, list[float]]:
    """The ``data_support`` block of a fit: min and max of each input over the runs."""
    def span(values: np.ndarray) -> list[float]:
        return [float(np.min(values)), float(np.max(values))]

    support = {"n_total": span(n_total), "tokens": span(tokens)}
    support["tokens_per_param"] = span(tokens_per_param(tokens, n_active, n_total))
    if n_active is not None:
        support["n_active"] = span(n_active)
        support["sparsity"] = span(sparsity_of(n_active, n_total))
    if split_factor is not None:
        support["split_factor"] = span(split_factor)
    if vocab is not None:
        support["vocab"] = span(vocab)
    return support
