"""The calibrated constants one job's prediction used, as `mosaic compare` sets two profiles'
side by side (what a refit moved for one job; docs/perf.md "What a profile moved").

Each is a constant of mosaic.perf.calibration.Calibration, looked up for the job's stack
and routing as the step-time model does (perf/step_time.py): the stack multiplier and
chi_sys (Eq. 15) scale the whole step, the attention efficiency the attention core, the
element-wise traffic factor the ``compute_elementwise_extra`` term, the routing imbalance
the routed experts' time.
"""

from __future__ import annotations

import math
from typing import Any

from mosaic.perf.calibration import Calibration

# key, label: the rows of the comparison's calibrated-terms table, in the order a step
# applies them (perf/step_time.py; chi_sys.py for Eq. 15's c_A2A, c_PP and c_ovl)
CALIBRATED_TERMS: tuple[tuple[str, str], ...] = (
    ("stack", "stack the per-stack terms are of"),
    ("stack_multiplier", "stack multiplier (its stack)"),
    ("attention_efficiency", "attention efficiency (its stack)"),
    ("elementwise_traffic_factor", "element-wise traffic factor (the extra term)"),
    ("routing_imbalance", "routing imbalance (its routing; MoE only)"),
    ("chi_a2a", "chi_a2a (Eq. 15 c_A2A)"),
    ("chi_pp", "chi_pp (Eq. 15 c_PP)"),
    ("chi_overlap", "chi_overlap (Eq. 15 c_ovl)"),
    ("chi_sys", "chi_sys of this job (Eq. 15)"),
    ("step_multiplier", "step multiplier (chi_sys x stack)"),
    ("memory_scale", "memory scale"),
)


def calibration_text(calibration: Calibration) -> str:
    """How a comparison names the profile a side used: its file and name, or a built-in's
    name (two files may hold profiles of one name, e.g. two refits of 'default')."""
    path = calibration.source_path
    return calibration.name if path is None else f"{path} ({calibration.name})"


def calibrated_terms(
    calibration: Calibration,
    stack: str,
    routing: str | None,
    chi_sys: float,
    step_multiplier: float,
) -> dict[str, float | str | None]:
    """The constants ``calibration`` applies to a job on ``stack`` with ``routing`` (None:
    a dense model, which has no routed experts), with the job's chi_sys and step multiplier
    (perf --json's ``chi_sys`` and ``step_multiplier``)."""
    return {
        "stack": stack,
        "stack_multiplier": calibration.stack_multiplier(stack),
        "attention_efficiency": calibration.attention_multiplier(stack),
        "elementwise_traffic_factor": calibration.elementwise_traffic_factor,
        "routing_imbalance": None if routing is None else calibration.routing_multiplier(routing),
        "chi_a2a": calibration.chi_a2a,
        "chi_pp": calibration.chi_pp,
        "chi_overlap": calibration.chi_overlap,
        "chi_sys": chi_sys,
        "step_multiplier": step_multiplier,
        "memory_scale": calibration.memory_scale,
    }


def calibration_term_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Each calibrated term of the two sides (their ``calibration_terms``) that differs
    (:func:`_differs`): term, A's, B's and B / A; none where a side has no terms (a plan)."""
    terms_a, terms_b = a.get("calibration_terms"), b.get("calibration_terms")
    if not terms_a or not terms_b:
        return []
    rows = []
    for key, _ in CALIBRATED_TERMS:
        value_a, value_b = terms_a.get(key), terms_b.get(key)
        if not _differs(value_a, value_b):
            continue
        numbers = all(isinstance(v, int | float) for v in (value_a, value_b))
        ratio = value_b / value_a if numbers and value_a else None
        rows.append({"term": key, "a": value_a, "b": value_b, "ratio_b_over_a": ratio})
    return rows


# how far apart two values of a term are to be listed: beyond the 6 significant digits the
# table prints (the default profile's balanced-routing factor 1.0000000095 is no change)
SAME_TERM_REL_TOL = 1e-6


def _differs(a: float | str | None, b: float | str | None) -> bool:
    """Whether a term's two values differ beyond SAME_TERM_REL_TOL (names: at all)."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        return not math.isclose(a, b, rel_tol=SAME_TERM_REL_TOL)
    return a != b


def calibration_term_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The terminal and HTML rows of :func:`calibration_term_rows`: label, A, B, B / A."""
    labels = dict(CALIBRATED_TERMS)

    def text(value: float | str | None) -> str:
        return "-" if value is None else value if isinstance(value, str) else f"{value:.6g}"

    return [
        [
            labels[r["term"]],
            text(r["a"]),
            text(r["b"]),
            "-" if r["ratio_b_over_a"] is None else f"{r['ratio_b_over_a']:.4g}x",
        ]
        for r in rows
    ]


def step_scale_note(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why every step term moves when the two step multipliers differ: below 1 a multiplier
    scales each term, above 1 its excess is the "calibration" term (StepPrediction.breakdown_s
    in perf/step_time.py)."""
    multipliers = [(side.get("calibration_terms") or {}).get("step_multiplier") for side in (a, b)]
    if None in multipliers or multipliers[0] == multipliers[1]:
        return None
    return (
        f"step multipliers A {multipliers[0]:.4g}, B {multipliers[1]:.4g}: each step time "
        "is the analytical one x its multiplier; below 1 every term is scaled by it, "
        "above 1 the excess is the 'calibration' term"
    )
