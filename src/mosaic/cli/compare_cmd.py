"""`mosaic compare A B`: two jobs or two plans side by side, and what differs in their inputs."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    CalibrationOption,
    JsonFlag,
    console,
    guarded,
    print_json,
    print_key_value_table,
    print_table,
)
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.errors import MosaicInputError
from mosaic.limits import check_range
from mosaic.schema_validation import parse_json, read_text
from mosaic.units import GIB, SECONDS_PER_DAY


# --- One side --------------------------------------------------------------------------------
def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists stay whole."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat |= flatten(inner, f"{prefix}{key}.")
        return flat
    return {prefix.rstrip("."): value}


def _job_inputs(path: Path, spec: Any, model: dict[str, Any] | None) -> dict[str, Any]:
    """The job file's fields as block.field in the canonical spelling (docs/schema.md), its
    model block replaced by ``--model``'s when given; for a run record (RUNS.yaml#ID), its
    job's canonical document, as `export --to yaml` writes it (a record states its whole run
    in the record vocabulary, which a job file does not use)."""
    from mosaic.config.job_schema import canonical_job_document, job_document
    from mosaic.config.run_records import is_run_record_document, split_record_reference
    from mosaic.schema_validation import load_yaml_mapping

    file, _ = split_record_reference(path)
    document = load_yaml_mapping(file)
    if is_run_record_document(document):
        return flatten(job_document(spec))
    canonical = canonical_job_document(document, str(path), set())
    return flatten(canonical if model is None else {**canonical, "model": model})


NO_HYBRID_LOSS = ("no loss: the law is the paper's MoE transformers' (Sec. 4), not a "
                  "hybrid SSM/attention model's")


def _loss_and_flags(geometry: Any, tokens: float, law: Any) -> tuple[float | None, list[str]]:
    """Loss of the law at (N_tot, S, G, D) with non-embedding counts (Table 9 convention),
    and the law's extrapolation flags; no loss (and no flags) for a hybrid SSM/attention
    model, which the paper's transformer law does not describe (NO_HYBRID_LOSS says why)."""
    from mosaic.arch import count_parameters
    from mosaic.law.extrapolation import extrapolation_flags

    if geometry.is_hybrid:
        return None, []

    counts = count_parameters(geometry)
    n_total, sparsity = float(counts.n_total), float(counts.sparsity)
    loss = float(law.predict(n_total, tokens, sparsity, geometry.split_factor))
    flags = extrapolation_flags(law, n_total=n_total, n_active=float(counts.n_active),
                                tokens=tokens, sparsity=sparsity,
                                split_factor=geometry.split_factor, vocab=geometry.vocab)
    return loss, [flag.message for flag in flags]


def job_side(path: Path, calibration: Any, law: Any, days: float, goodput: float,
             price: float | None, model: dict[str, Any] | None = None) -> dict[str, Any]:
    """Predict one job (its model replaced by ``model`` when given) and put its figures on
    the common footing."""
    from mosaic.arch import count_parameters
    from mosaic.config.job_schema import resolved_job_document
    from mosaic.evaluate.job import load_job_spec, predict_job
    from mosaic.report.prediction_document import prediction_document

    spec = load_job_spec(path, model=model, default_stack=calibration.stack)
    result = predict_job(spec, calibration)
    doc = prediction_document(result, calibration)
    counts = count_parameters(spec.workload.geometry)
    gpus = doc["hardware"]["devices"]
    training = doc.get("training")
    if spec.train_goodput is not None:  # the job's own goodput (a plan's, exported)
        goodput = spec.train_goodput
    if training is not None:  # the job's own D: the window is the time its steps take
        tokens = float(training["tokens"])
        days = training["compute_days"] / goodput
    else:  # D = tokens/s x T_train x goodput (paper Eq. 25)
        tokens = doc["tokens_per_s"] * days * SECONDS_PER_DAY * goodput
    loss, flags = _loss_and_flags(spec.workload.geometry, tokens, law)
    gpu_hours = gpus * days * 24.0
    return {
        "kind": "job", "source": str(path), "gpus": gpus,
        "system": doc["hardware"]["system"], "layout": doc["plan"],
        "step_time_s": doc["step_time_s"], "tokens_per_s": doc["tokens_per_s"],
        "tokens_per_s_per_gpu": doc["tokens_per_s_per_gpu"], "mfu": doc["mfu"],
        # a run record's measurement, beside the prediction (a trial wanted the measured B/A)
        **_measured(spec, gpus),
        "hfu": doc["hfu"], "memory_gib": doc["memory_gib"],
        "memory_capacity_gib": doc["memory_capacity_gib"], "feasible": doc["feasible"],
        "usable_memory_gib": doc["usable_memory_fraction"] * doc["memory_capacity_gib"],
        "memory_fit": doc["memory_fit"],
        # the profile the side was predicted with, and its memory scale (1: as derived)
        "calibration": doc["calibration"], "memory_scale": doc["memory_scale"],
        "n_total": float(counts.n_total), "n_active": float(counts.n_active),
        "days": days, "goodput": goodput, "tokens": tokens, "loss": loss,
        "tokens_stated": training is not None,
        "goodput_stated": spec.train_goodput is not None,
        "law_extrapolation": flags,
        # why a hybrid model has no loss (the law is the paper's transformers'), said beside it
        **({"loss_note": NO_HYBRID_LOSS} if loss is None else {}),
        "gpu_hours": gpu_hours, "price_per_gpu_hour": price,
        "cost": None if price is None else gpu_hours * price,
        "geometry": _job_geometry(spec.workload.geometry),
        "breakdown_s": doc["breakdown_s"],
        "memory_breakdown_bytes": doc["memory_breakdown_bytes"],
        "inputs": _job_inputs(path, spec, model),
        "resolved_inputs": flatten(resolved_job_document(spec)),
    }


def _measured(spec: Any, gpus: int) -> dict[str, float]:
    """A run record's measured step time and tokens/s per GPU; nothing for a job."""
    step = spec.measured_step_time_s
    if step is None:
        return {}
    tokens = spec.workload.global_batch * spec.workload.seq_len
    return {"measured_step_time_s": step, "measured_tokens_per_s_per_gpu": tokens / step / gpus}


def _job_geometry(geometry: Any) -> dict[str, Any]:
    """A job's model in the fields a plan's optimum gives (no ladder q)."""
    moe = geometry.moe
    return {"q": None, "layers": geometry.layers, "d_model": geometry.d_model,
            "experts": moe.experts if moe else 0, "top_k": moe.top_k if moe else 0,
            "split_factor": geometry.split_factor if moe else None,
            "expert_ffn": moe.expert_ffn if moe else None}


# the optimum's numbers compare reads and formats
_OPTIMUM_NUMBERS = ("loss", "mfu", "tokens", "tokens_per_s", "step_time_s", "memory_bytes",
                    "n_total", "n_active", "sparsity", "tpp", "train_days")


def _plan_caveats(optimum: dict[str, Any]) -> list[str]:
    """What the plan said of its optimum's prediction: each dimension outside the calibrated
    envelope and each part of its coverage note (a trial compared two plans and saw neither
    the winner's extrapolated layout nor the other's memory that may not fit)."""
    coverage = optimum.get("coverage") or {}
    caveats = [f"outside the calibrated envelope: {o.get('dimension')} {o.get('value')} not in "
               f"{o.get('calibrated')}" for o in coverage.get("outside") or []]
    note = coverage.get("note")
    return [*caveats, *(note.split("; ") if isinstance(note, str) and note else [])]


def _plan_loss_interval(document: dict[str, Any], geometry: dict[str, Any]
                        ) -> list[float] | None:
    """The optimum's loss interval from the plan's uncertainty, where it drew one."""
    keys = ("q", "experts", "top_k", "split_factor")
    for candidate in document.get("uncertainty_candidates") or []:
        interval = candidate.get("loss_interval")
        if all(candidate.get(k) == geometry.get(k) for k in keys) and interval:
            return [float(interval[0]), float(interval[1])]
    return None


def plan_side(path: Path, document: dict[str, Any], price: float | None) -> dict[str, Any]:
    """The optimum of a `mosaic plan --json` document on the common footing."""
    from mosaic.export.spec import spec_from_plan_document
    from mosaic.perf.headroom import memory_fit_text

    # the checks `mosaic export` makes (shape, model, layout, batch), in one line each
    spec_from_plan_document(document, str(path))
    optimum = document.get("optimum")
    envelope = document.get("envelope") or {}
    if not optimum:
        raise MosaicInputError(f"{path}: not a `mosaic plan --json` document with an optimum")
    for name in _OPTIMUM_NUMBERS:
        value = optimum.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise MosaicInputError(f"{path}: optimum.{name} is {value!r}; a `mosaic plan "
                                   "--json` document holds a number there")
    step = document.get("optimum_step") or {}
    gpus = envelope.get("n_devices")
    gpu_hours = envelope.get("gpu_hours")
    own_price = document.get("price_usd_per_gpu_hour", document.get("price_per_gpu_hour"))
    if price is None:  # the plan's own price, in USD (plan files before 0.2: no currency)
        price = own_price
    capacity = step.get("capacity_bytes") or envelope.get("hbm_bytes_per_device")
    fraction = (envelope.get("memory_headroom") or {}).get("usable_memory_fraction")
    memory_bytes = optimum.get("memory_bytes")
    tokens_per_s = optimum.get("tokens_per_s")
    assumptions = document.get("assumptions") or {}
    law = assumptions.get("law") or {}
    # the candidate's own geometry and layout are inputs too: two candidates of one plan
    # share everything else (a trial read "Inputs that differ: (none)" for #1 against #2)
    geometry = {k: optimum.get(k) for k in ("q", "layers", "d_model", "experts", "top_k",
                                            "split_factor", "expert_ffn")}
    inputs = flatten({"geometry": geometry, "layout": optimum.get("plan") or {},
                      "envelope": envelope, "search_space": document.get("search_space") or {},
                      "layout_limits": assumptions.get("layout_limits") or {},
                      "law": {"form": law.get("form"),
                              "source": (law.get("provenance") or {}).get("source")},
                      "calibration": (assumptions.get("calibration") or {}).get("name")})
    return {
        "kind": "plan", "source": str(path), "gpus": gpus, "system": envelope.get("system"),
        "layout": step.get("plan") or optimum.get("plan"),
        "step_time_s": optimum.get("step_time_s"), "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": tokens_per_s / gpus if tokens_per_s and gpus else None,
        "mfu": optimum.get("mfu"), "hfu": step.get("hfu"),  # absent from older plan files
        "memory_gib": optimum["memory_bytes"] / GIB if optimum.get("memory_bytes") else None,
        "memory_capacity_gib": capacity / GIB if capacity else None,
        "feasible": True,  # the planner keeps only plans that fit
        "usable_memory_gib": capacity * fraction / GIB if capacity and fraction else None,
        "memory_fit": (memory_fit_text(memory_bytes / GIB, capacity / GIB, fraction, 0.0)
                       if memory_bytes and capacity and fraction else "fits"),
        "n_total": optimum.get("n_total"), "n_active": optimum.get("n_active"),
        "days": envelope.get("days"),
        "goodput": (envelope.get("goodput") or {}).get("goodput"),
        "tokens": optimum.get("tokens"),
        # D held at the plan's tokens-per-parameter cap, below tokens/s x T x goodput
        "tokens_capped": bool(optimum.get("tpp_capped")),
        "loss": optimum.get("loss"),
        "law_extrapolation": [f.get("message", "") for f in
                              ((optimum.get("extrapolation") or {}).get("flags") or [])],
        "gpu_hours": gpu_hours, "price_per_gpu_hour": price,
        "cost": None if price is None or gpu_hours is None else gpu_hours * price,
        # a plan file holds its optimum's breakdowns only: a ranked candidate (#N) has none
        "breakdown_s": step.get("breakdown_s") if step else None,
        "memory_breakdown_bytes": step.get("memory_breakdown_bytes") if step else None,
        "geometry": geometry,
        "inputs": inputs,
        # the plan's own price where --price-per-gpu-hour replaced it (said on screen)
        "replaced_price_per_gpu_hour": own_price if own_price not in (None, price) else None,
        "caveats": _plan_caveats(optimum),
        "loss_interval": _plan_loss_interval(document, geometry),
    }


# --- Both sides --------------------------------------------------------------------------------
def input_differences(a: dict[str, Any], b: dict[str, Any],
                      a_resolved: dict[str, Any] | None = None,
                      b_resolved: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every input field whose value differs. A field one side does not state takes that
    side's resolved value (``*_resolved``: the job's canonical document, what it runs with),
    so a default the other side writes out (``mtp_layers: 0``) is no difference; such a row
    says which side's value is resolved (``a_stated``/``b_stated`` false)."""
    rows = []
    for key in dict.fromkeys([*a, *b]):
        value_a = a[key] if key in a else (a_resolved or {}).get(key)
        value_b = b[key] if key in b else (b_resolved or {}).get(key)
        if value_a == value_b:
            continue
        row = {"field": key, "a": value_a, "b": value_b}
        if key not in a or key not in b:
            row |= {"a_stated": key in a, "b_stated": key in b}
        rows.append(row)
    return rows


SUMMARY = (  # key, label, unit for printing
    ("gpus", "GPUs", "count"), ("step_time_s", "step time", "s"),
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
)
# rows of run records' measurements, shown when a side has them
MEASURED = (("measured_step_time_s", "measured step time", "s"),
            ("measured_tokens_per_s_per_gpu", "measured tokens/s per GPU", "rate"))


def _summary_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """SUMMARY, with the measured rows after the predicted tokens/s per GPU when a side
    is a run record."""
    measured = [row for row in MEASURED if row[0] in a or row[0] in b]
    at = [key for key, _, _ in SUMMARY].index("tokens_per_s_per_gpu") + 1
    return [*SUMMARY[:at], *measured, *SUMMARY[at:]]


def _ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float) and a and math.isfinite(a):
        return b / a
    return None


def compare_document(a: dict[str, Any], b: dict[str, Any], currency: str,
                     assumed: Sequence[str] = ()) -> dict[str, Any]:
    """The comparison: both sides, their input differences, figures side by side, and what
    was ``assumed`` for both because the command line left it out."""
    summary = [{"quantity": key, "a": a.get(key), "b": b.get(key),
                "ratio_b_over_a": _ratio(a.get(key), b.get(key))}
               for key, _, _ in _summary_rows(a, b)]
    if a["breakdown_s"] is None or b["breakdown_s"] is None:
        return _compared(a, b, currency, assumed, summary, [], [])
    terms = list(dict.fromkeys([*a["breakdown_s"], *b["breakdown_s"]]))
    parts = list(dict.fromkeys([*a["memory_breakdown_bytes"], *b["memory_breakdown_bytes"]]))
    steps = [{"term": t, "a": a["breakdown_s"].get(t, 0.0), "b": b["breakdown_s"].get(t, 0.0)}
             for t in terms]
    memory = [{"part": p, "a": a["memory_breakdown_bytes"].get(p, 0.0),
               "b": b["memory_breakdown_bytes"].get(p, 0.0)} for p in parts]
    return _compared(a, b, currency, assumed, summary, steps, memory)


def _compared(a: dict[str, Any], b: dict[str, Any], currency: str, assumed: Sequence[str],
              summary: list[dict[str, Any]], steps: list[dict[str, Any]],
              memory: list[dict[str, Any]]) -> dict[str, Any]:
    """The comparison document; empty breakdowns where a side has none (a plan's ranked
    candidate), which the rendering says."""
    return {
        "a": {k: v for k, v in a.items() if k not in ("inputs", "resolved_inputs")},
        "b": {k: v for k, v in b.items() if k not in ("inputs", "resolved_inputs")},
        "currency": currency,
        "assumed": list(assumed),
        "input_differences": input_differences(a["inputs"], b["inputs"],
                                               a.get("resolved_inputs"),
                                               b.get("resolved_inputs")),
        "summary": summary,
        "breakdown_s": steps,
        "memory_breakdown_bytes": memory,
    }


# --- Rendering --------------------------------------------------------------------------------
def _cell(value: Any, unit: str, currency: str) -> str:
    if value is None:
        return "-"
    if unit == "share":
        return f"{value:.2%}"
    if unit == "money":
        return f"{value:,.0f} {currency}"
    if unit == "price":
        return f"{value:g} {currency}"
    if unit == "count":
        return f"{value:,.0f}" if value < 1e6 else f"{value:.4g}"
    if unit == "rate":
        return f"{value:,.0f}"
    if unit == "loss":
        return f"{value:.4f}"
    if unit == "gib":
        return f"{value:.2f}"
    if unit == "s":  # as perf prints it (a trial: '11.7' beside '8.832')
        return f"{value:.3f}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _input_text(difference: dict[str, Any], side: str) -> str:
    """One side's value of an input difference; '(resolved)' where the file leaves it out."""
    value = difference[side]
    if value is None and not difference.get(f"{side}_stated", True):
        return "-"  # not in that job at all (e.g. a block the other model has)
    text = (_distinct_number(value, difference["b" if side == "a" else "a"])
            if isinstance(value, float) else json.dumps(value))
    return text if difference.get(f"{side}_stated", True) else f"{text} (resolved)"


def _distinct_number(value: float, other: Any) -> str:
    """``value`` to 6 significant digits, or as many more as tell it from ``other`` (1e+11
    and 1.0000004e+11 printed alike in a table of differences)."""
    for digits in (6, 9, 12, 17):
        text = f"{value:.{digits}g}"
        if not isinstance(other, float) or text != f"{other:.{digits}g}":
            return text
    return repr(value)


def _model_text(side: dict[str, Any]) -> str:
    """'q=12 (48 layers, d=6144) E=128 K=2 G=4, S = 0.9523': the side's model in a line."""
    g = side.get("geometry") or {}
    if not g:
        return "-"
    shape = f"{g['layers']} layers, d={g['d_model']}"
    shape = f"q={g['q']} ({shape})" if g.get("q") else shape
    if not g.get("experts"):
        return f"{shape}, dense"
    n_total, n_active = side.get("n_total"), side.get("n_active")
    sparsity = f", S = {1 - n_active / n_total:.4f}" if n_total and n_active else ""
    split = g.get("split_factor")
    return (f"{shape}, E={g['experts']} K={g['top_k']}"
            + (f" G={split:g}" if split is not None else "") + sparsity)


def _layout(side: dict[str, Any]) -> str:
    plan = side.get("layout") or {}
    keys = ("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "micro_batch", "sharding",
            "checkpointing")
    return ", ".join(f"{k}={plan[k]}" for k in keys if k in plan)


def _marks(quantity: str, side: dict[str, Any]) -> str:
    """Marks on a side's tokens and loss: a plan's D held at its cap, a job that does not
    fit (explained under the table)."""
    if quantity not in ("tokens", "loss"):
        return ""
    capped = " (capped)" if quantity == "tokens" and side.get("tokens_capped") else ""
    stated = " (stated)" if quantity == "tokens" and side.get("tokens_stated") else ""
    return capped + stated + ("" if side.get("feasible", True) else " (no fit)")


def render(document: dict[str, Any]) -> None:
    a, b, currency = document["a"], document["b"], document["currency"]
    print_key_value_table("Compared", [
        ("A", f"{a['kind']} {a['source']}: {a.get('system')}, {_layout(a)}"),
        ("B", f"{b['kind']} {b['source']}: {b.get('system')}, {_layout(b)}"),
        ("A model", _model_text(a)), ("B model", _model_text(b)),
        ("A memory per GPU", a.get("memory_fit") or "-"),
        ("B memory per GPU", b.get("memory_fit") or "-")])
    differences = document["input_differences"]
    print_table("Inputs that differ", ["field", "A", "B"],
                [[d["field"], _input_text(d, "a"), _input_text(d, "b")] for d in differences]
                or [["(none)", "", ""]])
    units = {key: (label, unit) for key, label, unit in (*SUMMARY, *MEASURED)}
    rows = []
    for row in document["summary"]:
        label, unit = units[row["quantity"]]
        ratio = row["ratio_b_over_a"]
        cells = [_cell(row[side], unit, currency) + _marks(row["quantity"], document[side])
                 for side in ("a", "b")]
        rows.append([label, *cells, "-" if ratio is None else f"{ratio:.3f}x"])
    print_table("Side by side", ["quantity", "A", "B", "B / A"], rows)
    if a.get("tokens_stated") or b.get("tokens_stated"):
        console.print("(stated): the job's training.tokens; its window is the time its steps "
                      "take at the predicted step time, over the goodput", markup=False,
                      highlight=False)
    if a.get("tokens_capped") or b.get("tokens_capped"):
        console.print("(capped): D held at the plan's tokens-per-parameter cap (--tpp), below "
                      "tokens/s x T x goodput", markup=False, highlight=False)
    if not (a.get("feasible", True) and b.get("feasible", True)):
        console.print("(no fit): the job does not fit its GPUs' usable memory (out of memory, "
                      "or over the planning headroom: memory per GPU above); its tokens and "
                      "loss are what it would reach if it ran",
                      markup=False, highlight=False)
    if document.get("assumed"):
        console.print("Assumed where not given: " + "; ".join(document["assumed"]))
    replaced = [f"{name}'s own {side['replaced_price_per_gpu_hour']:g}"
                for name, side in (("A", a), ("B", b))
                if side.get("replaced_price_per_gpu_hour") is not None]
    if replaced:
        console.print(f"--price-per-gpu-hour replaces {' and '.join(replaced)} USD per "
                      "GPU-hour: the sides are costed at the price given",
                      markup=False, highlight=False)
    caveats = [(name, text) for name, side in (("A", a), ("B", b))
               for text in side.get("caveats") or []]
    if caveats:
        print_key_value_table("What each prediction said of itself", caveats)
    _echo_loss_gap(a, b)
    flags = [(name, message) for name, side in (("A", a), ("B", b))
             for message in side.get("law_extrapolation") or []]
    if flags:
        print_key_value_table("The loss law is extrapolating (its fitted data range)", flags)
    no_loss = [(name, side["loss_note"]) for name, side in (("A", a), ("B", b))
               if side.get("loss_note")]
    if no_loss:
        print_key_value_table("No loss from the law", no_loss)
    if document["a"]["breakdown_s"] is None or document["b"]["breakdown_s"] is None:
        console.print("(breakdowns: a plan file holds its optimum's only; `mosaic export "
                      "PLAN.json#N --to yaml --out job.yaml` and `mosaic perf job.yaml` give "
                      "a ranked candidate's)", markup=False, highlight=False)
    step_rows = [[r["term"], f"{r['a']:.4f}", f"{r['b']:.4f}", f"{r['b'] - r['a']:+.4f}"]
                 for r in document["breakdown_s"] if abs(r["a"]) > 0 or abs(r["b"]) > 0]
    if step_rows:
        print_table("Step-time breakdown (s)", ["term", "A", "B", "B - A"], step_rows)
    memory_rows = [[r["part"], f"{r['a'] / GIB:.2f}", f"{r['b'] / GIB:.2f}",
                    f"{(r['b'] - r['a']) / GIB:+.2f}"] for r in document["memory_breakdown_bytes"]]
    if memory_rows:
        print_table("Memory breakdown per GPU (GiB)", ["part", "A", "B", "B - A"], memory_rows)


def _echo_loss_gap(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Whether the loss difference exceeds the plans' own loss intervals: a gap inside both
    is not a decision (a trial's 0.0018 nats against intervals 0.035 wide)."""
    intervals = [side.get("loss_interval") for side in (a, b)]
    if a.get("loss") is None or b.get("loss") is None or not all(intervals):
        return
    gap = abs(b["loss"] - a["loss"])
    widths = [high - low for low, high in intervals]
    overlap = intervals[0][0] <= intervals[1][1] and intervals[1][0] <= intervals[0][1]
    verdict = ("the intervals overlap, so the model does not tell the two apart" if overlap
               else "the intervals do not overlap")
    console.print(f"loss gap {gap:.4f} nats; 90% loss intervals {widths[0]:.4f} (A) and "
                  f"{widths[1]:.4f} (B) wide: {verdict}", markup=False, highlight=False)


def side_prices(text: str | None, currency: str) -> tuple[float | None, float | None]:
    """A's and B's price per GPU-hour from ``--price-per-gpu-hour``: one price for both, or
    'A,B' for two GPU kinds (a lead compared the same model on H100 and B200 at one price);
    each positive and finite, and in USD noted when it looks like a node's price."""
    if text is None:
        return None, None
    parts = [part.strip() for part in text.split(",")]
    try:
        values = [float(part) for part in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(math.isfinite(v) and v > 0 for v in values):
        raise MosaicInputError(f"--price-per-gpu-hour must be one positive number, or two "
                               f"('A,B': A's and B's), got {text!r}")
    if currency == "USD":  # a node's price given per GPU is noted (plan.cost.check_price)
        from mosaic.plan.cost import check_price

        for value in values:
            check_price(value)
    return (values[0], values[-1])


def _kind(path: Path) -> str:
    from mosaic.export.spec import split_plan_reference

    return "plan" if split_plan_reference(path)[0].suffix.lower() == ".json" else "job"


DEFAULT_DAYS = 20.0  # the training window of a job comparison when --days is not given


def compare(
    a: Annotated[Path, typer.Argument(help="job YAML or `mosaic plan --json` output")],
    b: Annotated[Path, typer.Argument(help="job YAML or `mosaic plan --json` output")],
    days: Annotated[float | None, typer.Option(
        help="jobs: training window T_train in days (tokens, loss, GPU-hours) of a job "
        "without training.tokens; default 20")
    ] = None,
    goodput: Annotated[float | None, typer.Option(
        help="jobs: constant goodput in (0, 1]; default 1")] = None,
    price_per_gpu_hour: Annotated[str | None, typer.Option(
        "--price-per-gpu-hour", help="price of one GPU-hour for both sides, or A's and B's "
        "as 'A,B' (two GPU kinds); adds the cost")] = None,
    currency: Annotated[str | None, typer.Option(
        help="currency of --price-per-gpu-hour [default: USD]")] = None,
    law_file: Annotated[Path | None, typer.Option(
        "--law", help="law JSON for the jobs' loss (default: Table 2 joint law)")] = None,
    calibration: CalibrationOption = None,
    model: ModelOption = None,
    catalog: CatalogFileOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Compare two jobs or two plans: step time, memory, MFU, tokens, loss, cost, inputs."""
    kinds = {_kind(a), _kind(b)}
    if len(kinds) != 1:
        raise MosaicInputError("compare two jobs (YAML) or two plans (JSON of `mosaic plan "
                               f"--json`), not a {_kind(a)} ({a}) with a {_kind(b)} ({b}); "
                               "a .json file is read as a plan, any other as a job")
    if kinds == {"plan"}:
        given = [flag for flag, value in (("--days", days), ("--goodput", goodput),
                                           ("--law", law_file), ("--calibration", calibration),
                                           ("--model", model))
                 if value is not None]
        if given:  # a plan carries its own window, goodput, law, calibration and models
            raise MosaicInputError(f"{', '.join(given)} set the jobs' side of a comparison; a "
                                   "plan carries its own window, goodput, law, calibration "
                                   "and geometries (plan again with them)")
    assumed = [] if kinds == {"plan"} else [
        text for text, given in (
            (f"a training window of {DEFAULT_DAYS:g} days for a job without training.tokens "
             "(--days)", days),
            ("goodput 1, every second of the window training (--goodput)", goodput))
        if given is None]
    days = DEFAULT_DAYS if days is None else days
    goodput = 1.0 if goodput is None else goodput
    check_range("--days", days, "days")  # 1e-320 days would train ~0 tokens (a fuzz case)
    if not 0 < goodput <= 1:
        raise MosaicInputError(f"--goodput must be in (0, 1], got {goodput:g}")
    if currency is not None and price_per_gpu_hour is None:
        # a plan's own price is in USD: another name would relabel it, not convert it
        raise MosaicInputError("--currency names the currency of --price-per-gpu-hour; give "
                               "both (a plan's own price is in USD)")
    currency = currency or "USD"
    prices = side_prices(price_per_gpu_hour, currency)
    apply_catalog(catalog)
    if kinds == {"job"}:
        from mosaic.law.law import load_law_file
        from mosaic.perf.calibration import load_calibration

        law = load_law_file(law_file)
        calib = load_calibration(calibration)
        block = model_block(model)  # one model for both jobs
        sides = [job_side(p, calib, law, days, goodput, price, block)
                 for p, price in zip((a, b), prices, strict=True)]
        if all(side["tokens_stated"] for side in sides):  # no window was used
            assumed = [text for text in assumed if "(--days)" not in text]
        if all(side["goodput_stated"] for side in sides):  # each job states its own
            assumed = [text for text in assumed if "(--goodput)" not in text]
    else:
        sides = []
        from mosaic.export.spec import plan_candidate, split_plan_reference

        for path, price in zip((a, b), prices, strict=True):
            file, rank = split_plan_reference(path)  # PLAN.json#N: the rank-N candidate
            document = parse_json(read_text(file, "plan document"), str(file))
            if rank is not None:
                document = plan_candidate(document, rank, str(path))
            sides.append(plan_side(path, document, price))
    document = compare_document(sides[0], sides[1], currency, assumed)
    if json_output:
        print_json(document)
    else:
        render(document)


def register(app: typer.Typer) -> None:
    """Attach `mosaic compare` to the root command."""
    app.command("compare")(guarded(compare))
