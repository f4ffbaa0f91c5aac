"""Router health of a finished run: its starved experts over the final steps.

The paper calls an expert *starved* when a batch sends it fewer than 5% of the tokens a
uniform assignment would (Appendix C.2), and reports for its healthy runs that the starved
count per MoE layer "collapses to near zero early in training and stays there" (Fig. 16).
A run that ends with a starved expert in every layer on average has not reached that state
(a collapsed router sends every token to K experts and starves E - K), so its loss is not
the loss of the architecture the law is fitted to: the ladder flags such rungs and
``mosaic ladder fit`` leaves them out unless asked to keep them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from mosaic.errors import MosaicInputError

# the share of a run's steps, at its end, over which the starved count is averaged
FINAL_WINDOW_FRACTION = 0.1
# a run is unbalanced when its final steps starve this many experts per MoE layer or more
STARVED_EXPERTS_LIMIT = 1.0


def final_window_steps(total_steps: int) -> int:
    """Steps at the end of a run whose router statistics decide its health (at least 1)."""
    return max(1, math.ceil(FINAL_WINDOW_FRACTION * total_steps))


def is_unbalanced(starved_experts: float | None) -> bool:
    """Whether a run's mean starved experts per layer marks its routing as unhealthy
    (False for a dense run or one without the statistic: nothing to judge)."""
    return starved_experts is not None and not math.isnan(starved_experts) and (
        starved_experts >= STARVED_EXPERTS_LIMIT)


def starved_value(row: Mapping[str, Any]) -> float | None:
    """A runs.csv row's ``starved_experts`` as a number (None where empty or absent)."""
    raw = row.get("starved_experts")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise MosaicInputError(f"runs.csv row {row.get('name', '?')!r}: starved_experts is "
                               f"{raw!r}, which is not a number") from None
    return None if math.isnan(value) else value


def unbalanced_rows(rows: Iterable[Mapping[str, Any]]) -> list[bool]:
    """Per runs.csv row: whether its routers ended unbalanced."""
    return [is_unbalanced(starved_value(row)) for row in rows]


def rows_of_split_factor(rows: list[Mapping[str, Any]], split_factor: float | None
                         ) -> list[bool]:
    """Which runs.csv rows a fit of one G stratum reads (every row without a G, when the
    table has no split_factor column, or when no row has that G: the fit names the strata
    present then)."""
    mask = [split_factor is None or row.get("split_factor") is None
            or float(row["split_factor"]) == split_factor for row in rows]
    return mask if any(mask) else [True] * len(rows)


def unbalanced_names(rows: list[Mapping[str, Any]]) -> list[str]:
    """Names of the runs.csv rows whose routers ended unbalanced ("row N" without one)."""
    return [str(row.get("name") or f"row {index}")
            for index, (row, bad) in enumerate(zip(rows, unbalanced_rows(rows), strict=True),
                                               start=1) if bad]


LADDER_FIT_LEAVES_THEM_OUT = ("`mosaic ladder fit` leaves them out (--keep-unbalanced keeps "
                              "them)")


def unbalanced_warning(names: list[str], consequence: str = LADDER_FIT_LEAVES_THEM_OUT) -> str:
    """One line that names the unbalanced rungs, says what it means and what the command
    does with them (``consequence``)."""
    return (f"{len(names)} rung(s) ended with at least {STARVED_EXPERTS_LIMIT:g} starved "
            f"expert per MoE layer over their last {FINAL_WINDOW_FRACTION:.0%} of steps "
            f"(paper App. C.2: a healthy run has about none): {', '.join(names)}; their "
            f"routers are unbalanced or collapsed; {consequence}; docs/train.md 'Router "
            "collapse in short runs'")
