"""A comparison of two jobs or two plans (`mosaic compare`): the document both sides make,
and the text its terminal tables and its HTML page share (report.html.compare_page)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from mosaic.arch.counts import sparsity as arch_sparsity
from mosaic.config.recipes import RecipeSettings
from mosaic.report.calibration_terms import calibration_term_rows
from mosaic.report.plan_report import layout_line
from mosaic.units import GIB


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists stay whole."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat |= flatten(inner, f"{prefix}{key}.")
        return flat
    return {prefix.rstrip("."): value}


# a plan input longer than this, or nested, is named by its size in the differences, not
# printed (a fuzz trial's 254 MB nested list in search_space became 1.5 GB of --json output)
MAX_SHOWN_INPUT_ITEMS = 64


def shown_input(value: Any) -> Any:
    """``value`` as the comparison lists it: scalars and short flat lists whole, a long or
    nested list as 'a list of N items (not shown)'."""
    if isinstance(value, list) and (len(value) > MAX_SHOWN_INPUT_ITEMS
                                    or any(isinstance(item, list | dict) for item in value)):
        return f"a list of {len(value):,} items (not shown)"
    return value


# The job fields a stack's recipe may set (mosaic.config.recipes.RecipeSettings; its
# recompute is the job's checkpointing, its pipeline_layouts the job's pipeline_layout)
RECIPE_FIELDS = frozenset({*RecipeSettings.model_fields, "checkpointing", "pipeline_layout"})


# --- Both sides --------------------------------------------------------------------------------
def input_differences(a: dict[str, Any], b: dict[str, Any],
                      a_resolved: dict[str, Any] | None = None,
                      b_resolved: dict[str, Any] | None = None,
                      a_from: dict[str, str] | None = None,
                      b_from: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every input field whose value differs, and every recipe setting neither side states
    whose resolved values differ (both ``*_stated`` false). A field one side does not state takes
    that side's resolved value (``*_resolved``: the job's canonical document, what it runs with),
    so a default the other side writes out (``mtp_layers: 0``) is no difference; such a row
    says which side's value is resolved (``a_stated``/``b_stated`` false) and, where the
    command line gave it (``*_from``: field -> option, e.g. training.goodput -> --goodput,
    or performance.stack -> a --calibration profile's own stack), where from
    (``a_from``/``b_from``); such a field is listed even where neither side states it."""
    rows = []
    for key in dict.fromkeys([*a, *b]):
        value_a = a[key] if key in a else (a_resolved or {}).get(key)
        value_b = b[key] if key in b else (b_resolved or {}).get(key)
        if value_a == value_b:
            continue
        row = {"field": key, "a": value_a, "b": value_b}
        if key not in a or key not in b:
            row |= {"a_stated": key in a, "b_stated": key in b}
            for side, stated, origins in (("a", a, a_from), ("b", b, b_from)):
                if key not in stated and key in (origins or {}):
                    row[f"{side}_from"] = (origins or {})[key]
        rows.append(row)
    # what neither file states but the two run with differently: a recipe setting of one
    # release that differs by GPU (a lead's H100 / B200 pair listed only hardware.system,
    # while the B200 recipe also overlapped the DP collectives and recomputed less); other
    # unstated fields differ as consequences of stated ones (dp of another pp) and are not
    # listed; nor is a field the command line set (``*_from``: the stack of each side's
    # --calibration profile, for one job under two profiles)
    origins = (a_from or {}) | (b_from or {})
    if a_resolved is not None and b_resolved is not None:
        for key in dict.fromkeys([*a_resolved, *b_resolved]):
            if (key in a or key in b or a_resolved.get(key) == b_resolved.get(key)
                    or (key.rpartition(".")[2] not in RECIPE_FIELDS and key not in origins)):
                continue
            row = {"field": key, "a": a_resolved.get(key), "b": b_resolved.get(key),
                   "a_stated": False, "b_stated": False}
            for side, side_from in (("a", a_from), ("b", b_from)):
                if key in (side_from or {}):
                    row[f"{side}_from"] = (side_from or {})[key]
            rows.append(row)
    return rows


SUMMARY = (  # key, label, unit for printing
    ("gpus", "GPUs", "count"), ("step_time_s", "step time (s)", "s"),
    ("tokens_per_s", "tokens/s", "rate"), ("tokens_per_s_per_gpu", "tokens/s per GPU", "rate"),
    ("mfu", "MFU (6·N_act, datasheet peak)", "share"), ("hfu", "HFU", "share"),
    ("memory_gib", "memory per GPU (GiB)", "gib"),
    ("memory_capacity_gib", "memory capacity per GPU (GiB)", "gib"),
    ("usable_memory_gib", "usable memory per GPU (GiB)", "gib"),
    ("n_total", "N_total (non-emb.)", "count"),
    ("n_active", "N_active (non-emb.)", "count"), ("days", "training window (days)", "plain"),
    ("goodput", "goodput (share of the window training)", "plain"),
    ("tokens", "tokens D = tokens/s x T x goodput", "count"), ("loss", "loss (law)", "loss"),
    ("gpu_hours", "GPU-hours", "count"), ("price_per_gpu_hour", "price per GPU-hour", "price"),
    ("cost", "cost", "money"),
    ("cost_per_million_tokens", "cost per million tokens", "unit_price"),
)
# rows of run records' measurements, shown when a side has them
MEASURED = (("measured_step_time_s", "measured step time (s)", "s"),
            ("measured_tokens_per_s_per_gpu", "measured tokens/s per GPU", "rate"))
# the data a plan on repeated tokens (--unique-tokens) scored its loss on, shown when a side
# has it (a trial read raw D beside a loss of D')
REPEATED = (("effective_tokens", "effective tokens D' the law sees (repeated data)", "count"),
            ("epochs", "epochs of the unique data", "plain"))


def summary_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """SUMMARY, with the measured rows after the predicted tokens/s per GPU when a side
    is a run record, and the effective-data rows after D when a side trained on repeats."""
    keys = [key for key, _, _ in SUMMARY]
    measured = [row for row in MEASURED if row[0] in a or row[0] in b]
    repeated = [row for row in REPEATED if a.get(row[0]) or b.get(row[0])]
    at, tokens = keys.index("tokens_per_s_per_gpu") + 1, keys.index("tokens") + 1
    return [*SUMMARY[:at], *measured, *SUMMARY[at:tokens], *repeated, *SUMMARY[tokens:]]


def _ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float) and a and math.isfinite(a):
        return b / a
    return None


def compare_document(a: dict[str, Any], b: dict[str, Any], currency: str,
                     assumed: Sequence[str] = ()) -> dict[str, Any]:
    """The comparison: both sides, their input differences, figures side by side, and what
    was ``assumed`` for both because the command line left it out."""
    a, b = _with_cost_per_token(a), _with_cost_per_token(b)
    summary = [{"quantity": key, "a": a.get(key), "b": b.get(key),
                "ratio_b_over_a": _ratio(a.get(key), b.get(key))}
               for key, _, _ in summary_rows(a, b)]
    if not sides_have_breakdowns(a, b):
        return _compared(a, b, currency, assumed, summary, [], [])
    terms = list(dict.fromkeys([*a["breakdown_s"], *b["breakdown_s"]]))
    parts = list(dict.fromkeys([*a["memory_breakdown_bytes"], *b["memory_breakdown_bytes"]]))
    steps = [{"term": t, "a": a["breakdown_s"].get(t, 0.0), "b": b["breakdown_s"].get(t, 0.0)}
             for t in terms]
    memory = [{"part": p, "a": a["memory_breakdown_bytes"].get(p, 0.0),
               "b": b["memory_breakdown_bytes"].get(p, 0.0)} for p in parts]
    return _compared(a, b, currency, assumed, summary, steps, memory)


def _with_cost_per_token(side: dict[str, Any]) -> dict[str, Any]:
    """The side with its cost per million tokens D: cost / D x 1e6, i.e. price x GPUs x
    step time / tokens per step over the goodput (the days' allocated GPU-hours over the
    tokens they train; None unpriced). Two sides' costs are of their own windows and D, so
    this is the row that says which trains a token cheaper (a lead's trial: an H100 and a
    B200 job over one 20-day window at 2.5 and 4 USD cost 1.600x, 1.046x per token)."""
    cost, tokens = side.get("cost"), side.get("tokens")
    per_token = cost / tokens * 1e6 if cost is not None and tokens else None
    if per_token is not None:
        return side | {"cost_per_million_tokens": per_token}
    # a null says why (the JSON contract, cli/contract.py; a fuzz trial)
    why = ("no price per GPU-hour was given (--price-per-gpu-hour)" if cost is None
           else "no tokens D to spread the cost over")
    return side | {"cost_per_million_tokens": None, "cost_per_million_tokens_reason": why}


# a side's inputs, shown in the comparison's input_differences rather than under the side
SIDE_INPUTS = ("inputs", "resolved_inputs", "resolved_from")


def _compared(a: dict[str, Any], b: dict[str, Any], currency: str, assumed: Sequence[str],
              summary: list[dict[str, Any]], steps: list[dict[str, Any]],
              memory: list[dict[str, Any]]) -> dict[str, Any]:
    """The comparison document; empty breakdowns where a side has none (a plan's ranked
    candidate), which the rendering says."""
    return {
        "a": {k: v for k, v in a.items() if k not in SIDE_INPUTS},
        "b": {k: v for k, v in b.items() if k not in SIDE_INPUTS},
        "currency": currency,
        "assumed": list(assumed),
        "input_differences": input_differences(a["inputs"], b["inputs"],
                                               a.get("resolved_inputs"),
                                               b.get("resolved_inputs"),
                                               a.get("resolved_from"),
                                               b.get("resolved_from")),
        "summary": summary,
        # the calibrated constants that differ (one job under two profiles); none for plans
        "calibration_terms": calibration_term_rows(a, b),
        "breakdown_s": steps,
        "memory_breakdown_bytes": memory,
    }


# --- Text both renderings show ---------------------------------------------------------------
# how each unit of SUMMARY prints ({currency} is the comparison's); steps as perf prints them
# (a trial: '11.7' beside '8.832')
UNIT_FORMATS = {"share": "{value:.2%}", "money": "{value:,.0f} {currency}",
                "price": "{value:g} {currency}", "unit_price": "{value:.4g} {currency}",
                "rate": "{value:,.0f}",
                "loss": "{value:.4f}", "gib": "{value:.2f}", "s": "{value:.3f}"}


def cell_text(value: Any, unit: str, currency: str) -> str:
    """A side-by-side value in its unit (SUMMARY's third field); '-' where there is none."""
    if value is None:
        return "-"
    if unit in UNIT_FORMATS:
        return UNIT_FORMATS[unit].format(value=value, currency=currency)
    if unit == "count":
        return f"{value:,.0f}" if value < 1e6 else f"{value:.4g}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def input_text(difference: dict[str, Any], side: str) -> str:
    """One side's value of an input difference; where the file leaves it out, '(resolved)',
    or the command-line option it came from ('0.5 (--goodput)')."""
    value = difference[side]
    if value is None and not difference.get(f"{side}_stated", True):
        return "-"  # not in that job at all (e.g. a block the other model has)
    text = (_distinct_number(value, difference["b" if side == "a" else "a"])
            if isinstance(value, float) else json.dumps(value))
    if difference.get(f"{side}_stated", True):
        return text
    return f"{text} ({difference.get(f'{side}_from') or 'resolved'})"


def _distinct_number(value: float, other: Any) -> str:
    """``value`` to 6 significant digits, or as many more as tell it from ``other`` (1e+11
    and 1.0000004e+11 printed alike in a table of differences)."""
    for digits in (6, 9, 12, 17):
        text = f"{value:.{digits}g}"
        if not isinstance(other, float) or text != f"{other:.{digits}g}":
            return text
    return repr(value)


def model_text(side: dict[str, Any]) -> str:
    """'q=12 (48 layers, d=6144) E=128 K=2 G=4, S = 0.9523': the side's model in a line."""
    g = side.get("geometry") or {}
    if not g:
        return "-"
    shape = f"{g['layers']} layers, d={g['d_model']}"
    shape = f"q={g['q']} ({shape})" if g.get("q") else shape
    if not g.get("experts"):
        return f"{shape}, dense"
    n_total, n_active = side.get("n_total"), side.get("n_active")
    sparsity = (f", S = {float(arch_sparsity(n_active, n_total)):.4f}" if n_total and n_active
                else "")
    split = g.get("split_factor")
    return (f"{shape}, E={g['experts']} K={g['top_k']}"
            + (f" G={split:g}" if split is not None else "") + sparsity)


def layout_text(side: dict[str, Any]) -> str:
    """The side's layout in a line, as `perf` and `explain` print one."""
    return layout_line(side.get("layout") or {})


def marks(quantity: str, side: dict[str, Any]) -> str:
    """Marks on a side's tokens and loss: a plan's D held at its cap, a job that does not
    fit (explained under the table)."""
    if quantity not in ("tokens", "loss"):
        return ""
    capped = " (capped)" if quantity == "tokens" and side.get("tokens_capped") else ""
    stated = " (stated)" if quantity == "tokens" and side.get("tokens_stated") else ""
    return capped + stated + ("" if side.get("feasible", True) else " (no fit)")


def side_by_side_rows(document: dict[str, Any]) -> list[list[str]]:
    """The "Side by side" rows: quantity, A, B (with their marks) and B / A."""
    units = {key: (label, unit) for key, label, unit in (*SUMMARY, *MEASURED, *REPEATED)}
    rows = []
    for row in document["summary"]:
        label, unit = units[row["quantity"]]
        ratio = row["ratio_b_over_a"]
        cells = [cell_text(row[side], unit, document["currency"])
                 + marks(row["quantity"], document[side]) for side in ("a", "b")]
        rows.append([label, *cells, "-" if ratio is None else f"{ratio:.3f}x"])
    return rows


def footnotes(document: dict[str, Any]) -> list[str]:
    """The lines under the side-by-side table: what its marks mean, what was assumed for
    both sides, and a replaced price."""
    a, b = document["a"], document["b"]
    lines = []
    if a.get("tokens_stated") or b.get("tokens_stated"):
        lines.append("(stated): the job's training.tokens; its window is the time its steps "
                     "take at the predicted step time, over the goodput")
    if a.get("tokens_capped") or b.get("tokens_capped"):
        lines.append("(capped): D held at the plan's tokens-per-parameter cap (--tpp), below "
                     "tokens/s x T x goodput")
    if not (a.get("feasible", True) and b.get("feasible", True)):
        lines.append("(no fit): the job does not fit its GPUs' usable memory (out of memory, "
                     "or over the planning headroom: memory per GPU above); its tokens and "
                     "loss are what it would reach if it ran")
    for name, side in (("A", a), ("B", b)):
        lines += _cost_days_lines(name, side, document["currency"])
    if document.get("assumed"):
        lines.append("Assumed where not given: " + "; ".join(document["assumed"]))
    replaced = [f"{name}'s own {side['replaced_price_per_gpu_hour']:g}"
                for name, side in (("A", a), ("B", b))
                if side.get("replaced_price_per_gpu_hour") is not None]
    if replaced:
        lines.append(f"--price-per-gpu-hour replaces {' and '.join(replaced)} USD per "
                     "GPU-hour: the sides are costed at the price given")
    return lines


def _cost_days_lines(name: str, side: dict[str, Any], currency: str) -> list[str]:
    """What a plan side's GPU-hours and cost count: the days its run trains where it stops
    early at tpp_max (plan.cost.days_cost), with the whole window's beside them; or why a
    plan file written before those days were recorded is costed at its window."""
    if side.get("cost_note"):
        return [f"{name}'s GPU-hours and cost: {side['cost_note']}"]
    if side.get("window_gpu_hours") is None or side.get("train_days") is None:
        return []
    window = side.get("window_cost")
    return [f"{name}'s GPU-hours and cost count the {side['train_days']:.3g} days its run "
            f"trains (D held at tpp_max), not its {side['days']:.3g}-day window "
            f"({side['window_gpu_hours']:,.0f} GPU-hours"
            + ("" if window is None else f", {window:,.0f} {currency}") + ")"]


def sides_have_breakdowns(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether both sides carry their step-time breakdown (a plan's ranked candidate has
    none: null, or an empty mapping in documents written before December 2026)."""
    return bool(a["breakdown_s"]) and bool(b["breakdown_s"])


def has_breakdowns(document: dict[str, Any]) -> bool:
    """:func:`sides_have_breakdowns` of a comparison document's two sides."""
    return sides_have_breakdowns(document["a"], document["b"])


# why a side has no breakdowns, and how to get them
NO_BREAKDOWNS = ("(breakdowns: a plan file holds its optimum's only; `mosaic export "
                 "PLAN.json#N --to yaml --out job.yaml` and `mosaic perf job.yaml` give a "
                 "ranked candidate's)")


def loss_gap_text(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Whether the loss difference exceeds the plans' own loss intervals: a gap inside both
    is not a decision (a trial's 0.0018 nats against intervals 0.035 wide)."""
    intervals = [side.get("loss_interval") for side in (a, b)]
    if a.get("loss") is None or b.get("loss") is None or not all(intervals):
        return None
    gap = abs(b["loss"] - a["loss"])
    widths = [high - low for low, high in intervals]
    overlap = intervals[0][0] <= intervals[1][1] and intervals[1][0] <= intervals[0][1]
    verdict = ("the intervals overlap, so the model does not tell the two apart" if overlap
               else "the intervals do not overlap")
    return (f"loss gap {gap:.4f} nats; 90% loss intervals {widths[0]:.4f} (A) and "
            f"{widths[1]:.4f} (B) wide{_interval_draws_text(a, b)}: {verdict}")


def _interval_draws_text(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What the two plans' loss intervals drew (``loss_interval_draws``: 'law',
    'throughput' or both; absent from comparisons saved before it was recorded), and that
    without the law's samples its coefficients were taken as exact (docs/plan.md, "Law and
    performance uncertainty")."""
    draws = [side.get("loss_interval_draws") for side in (a, b)]
    if not all(draws):
        return ""
    text = (f", over the {draws[0]} uncertainty" if draws[0] == draws[1] else
            f", over the {draws[0]} (A) and {draws[1]} (B) uncertainty")
    without = [name for name, drew in zip("AB", draws, strict=True) if "law" not in drew]
    if without:
        text += (f" (the law's coefficients taken as exact in {' and '.join(without)}: plan "
                 "with --bootstrap-samples to include them)")
    return text


def side_notes(document: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]] | str]:
    """What follows the side-by-side table, in order: per-side notes as (heading, rows of
    (side, text)) where a side has any (what each prediction said of itself, the law's
    extrapolation flags, why a side has no loss), with the loss-gap line after the first."""
    sides = (("A", document["a"]), ("B", document["b"]))
    tables = [
        ("What each prediction said of itself", [
            (name, text) for name, side in sides for text in side.get("caveats") or []]),
        ("The loss law is extrapolating (its fitted data range)", [
            (name, text) for name, side in sides for text in side.get("law_extrapolation") or []]),
        ("No loss from the law", [
            (name, side["loss_note"]) for name, side in sides if side.get("loss_note")]),
    ]
    loss_gap = loss_gap_text(document["a"], document["b"])
    notes: list[tuple[str, list[tuple[str, str]]] | str] = [t for t in tables[:1] if t[1]]
    notes += [loss_gap] if loss_gap else []
    return notes + [t for t in tables[1:] if t[1]]


def compared_rows(document: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Compared" rows: each side's source, cluster and layout, model, calibration
    profile and memory fit."""
    a, b = document["a"], document["b"]
    return [("A", f"{a['kind']} {a['source']}: {a.get('system')}, {layout_text(a)}"),
            ("B", f"{b['kind']} {b['source']}: {b.get('system')}, {layout_text(b)}"),
            ("A model", model_text(a)), ("B model", model_text(b)),
            ("A calibration", a.get("calibration_source") or a.get("calibration") or "-"),
            ("B calibration", b.get("calibration_source") or b.get("calibration") or "-"),
            ("A memory per GPU", a.get("memory_fit") or "-"),
            ("B memory per GPU", b.get("memory_fit") or "-")]


def _signed(value: float, digits: int) -> str:
    """``value`` with its sign, but a difference that rounds to zero as 0 (a trial's
    compare printed '-0.0000' for a term both sides charge alike)."""
    text = f"{value:+.{digits}f}"
    return f"{0:.{digits}f}" if float(text) == 0 else text


def step_rows(document: dict[str, Any]) -> list[list[str]]:
    """Step-time terms either side charges: term, A, B and B - A in seconds."""
    return [[r["term"], f"{r['a']:.4f}", f"{r['b']:.4f}", _signed(r["b"] - r["a"], 4)]
            for r in document["breakdown_s"] if abs(r["a"]) > 0 or abs(r["b"]) > 0]


def memory_rows(document: dict[str, Any]) -> list[list[str]]:
    """Memory components: part, A, B and B - A in GiB per GPU."""
    return [[r["part"], f"{r['a'] / GIB:.2f}", f"{r['b'] / GIB:.2f}",
             _signed((r["b"] - r["a"]) / GIB, 2)] for r in document["memory_breakdown_bytes"]]


def difference_rows(document: dict[str, Any]) -> list[list[str]]:
    """The "Inputs that differ" rows: field, A's value, B's value."""
    return [[d["field"], input_text(d, "a"), input_text(d, "b")]
            for d in document["input_differences"]]
