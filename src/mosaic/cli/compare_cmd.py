"""`mosaic compare A B`: two jobs or two plans side by side, and what differs in their inputs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    JsonFlag,
    console,
    guarded,
    print_json,
    print_key_value_table,
    print_table,
)
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.cli.report_cmd import HtmlOption, check_html, write_html
from mosaic.errors import MosaicInputError, shown
from mosaic.limits import check_range, is_finite_number, is_number, shown_number
from mosaic.report.calibration_terms import (
    calibrated_terms,
    calibration_term_table,
    calibration_text,
    step_scale_note,
)
from mosaic.report.comparison import (
    NO_BREAKDOWNS,
    compare_document,
    compared_rows,
    difference_rows,
    flatten,
    footnotes,
    has_breakdowns,
    memory_rows,
    shown_input,
    side_by_side_rows,
    side_notes,
    step_rows,
)
from mosaic.schema_validation import parse_json, path_exists, read_text
from mosaic.units import GIB, HOURS_PER_DAY, SECONDS_PER_DAY


# --- One side --------------------------------------------------------------------------------
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


STACK_FIELD = "performance.stack"  # the job field naming its software stack (docs/schema.md)
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
             price: float | None, model: dict[str, Any] | None = None,
             goodput_from: str = "--goodput") -> dict[str, Any]:
    """Predict one job (its model replaced by ``model`` when given) and put its figures on
    the common footing. ``goodput_from`` names where ``goodput`` came from (the option, or
    its default), shown beside a job that does not state training.goodput where the other
    does."""
    from mosaic.arch import count_parameters
    from mosaic.config.job_schema import resolved_job_document
    from mosaic.evaluate.job import load_job_spec, predict_job
    from mosaic.report.prediction_document import prediction_document

    spec = load_job_spec(path, model=model, default_stack=calibration.stack)
    result = predict_job(spec, calibration)
    doc = prediction_document(result, calibration)
    counts = count_parameters(spec.workload.geometry)
    # the profile is an input: one job under two profiles differs there (docs/perf.md)
    inputs = _job_inputs(path, spec, model) | {"calibration": calibration_text(calibration)}
    gpus = doc["hardware"]["devices"]
    training = doc.get("training")
    if spec.train_goodput is not None:  # the job's own goodput (a plan's, exported)
        goodput = spec.train_goodput
    if training is not None:  # the job's own D: the window is the time its steps take
        tokens = float(training["tokens"])
        days = training["compute_days"] / goodput
    else:  # D = tokens/s x T_train x goodput (paper Eq. 25)
        tokens = doc["tokens_per_s"] * days * SECONDS_PER_DAY * goodput
        # within the law's range of D, as `law predict --tokens` (a --goodput of 1e-320 gave
        # 3e-306 tokens and a loss of 4e65 nats; a fuzz trial)
        check_range(f"{path}: tokens = tokens/s x days x goodput ({doc['tokens_per_s']:.3g} x "
                    f"{days:g} x {goodput:g})", tokens, "tokens")
    loss, flags = _loss_and_flags(spec.workload.geometry, tokens, law)
    gpu_hours = gpus * days * HOURS_PER_DAY
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
        "usable_memory_fraction": doc["usable_memory_fraction"],
        "memory_fit": doc["memory_fit"],
        # the profile the side was predicted with (its file, or a built-in's name), its
        # memory scale (1: as derived) and the constants it applied to this job
        "calibration": doc["calibration"], "calibration_source": calibration_text(calibration),
        "memory_scale": doc["memory_scale"],
        "calibration_terms": calibrated_terms(
            calibration, spec.workload.stack,
            spec.workload.routing if spec.workload.geometry.moe else None,
            doc["chi_sys"], doc["step_multiplier"]),
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
        # the profile is an input: one job under two profiles differs there (docs/perf.md)
        "inputs": inputs,
        # what the job runs with where its file is silent: the command line's goodput for a
        # job without training.goodput (a review saw "training.goodput | 0.8 | -" under
        # --goodput 0.5), named by where it came from
        "resolved_inputs": flatten(resolved_job_document(spec))
        | ({} if spec.train_goodput is not None else {"training.goodput": goodput}),
        "resolved_from": ({} if spec.train_goodput is not None
                          else {"training.goodput": goodput_from})
        # a profile's own stack for a job that names none (load_job_spec's default_stack)
        | ({} if calibration.stack is None or STACK_FIELD in inputs
           else {STACK_FIELD: f"calibration {calibration.name}"}),
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
_ENVELOPE_NUMBERS = ("days", "n_devices", "gpu_hours", "hbm_bytes_per_device")
# numbers a plan writes above zero: the window, the days its run trains and the window's
# GPU-hours (N_dev x T_train, plan.cost.days_cost) (a hand-edited optimum.train_days of 0
# costed that side at 0 GPU-hours; an envelope.days of 0 showed a 0-day window beside the
# window's GPU-hours; an envelope.gpu_hours of 0 showed 0 GPU-hours beside a priced cost)
_POSITIVE_NUMBERS = {("optimum", "train_days"), ("envelope", "days"), ("envelope", "gpu_hours")}
# the optimum's figures compare sets side by side, which a plan writes for every candidate
# (plan.search.PlanResult.candidate): one missing is an edited plan, refused rather than
# compared as a bare null (a fuzz trial; the CLI contract, cli.contract)
_OPTIMUM_REQUIRED = ("step_time_s", "tokens_per_s", "mfu", "memory_bytes", "n_total",
                     "n_active", "tokens", "loss")


def _plan_caveats(document: dict[str, Any], optimum: dict[str, Any]) -> list[str]:
    """What the plan said of its optimum's prediction: each dimension outside the calibrated
    envelope and each part of its coverage note (a trial compared two plans and saw neither
    the winner's extrapolated layout nor the other's memory that may not fit); and how many
    geometries its search lost to a GPU count the batch does not divide (a later trial's
    B200 plan lost 727 of 1,092 at 768 GPUs and batch 1024, unsaid beside a GB300 plan)."""
    from mosaic.perf.coverage import shown_dimension_value

    coverage = optimum.get("coverage") or {}
    # the value as perf, layouts and the plan print it (1.033e+12, not 1032848424960.0)
    caveats = [f"outside the calibrated envelope: {o.get('dimension')} "
               f"{shown_dimension_value(o.get('value'))} not in {o.get('calibrated')}"
               for o in coverage.get("outside") or []]
    note = coverage.get("note")
    caveats += note.split("; ") if isinstance(note, str) and note else []
    if "coverage" not in optimum:  # a ranked candidate (PLAN.json#N): looked empty (a trial)
        caveats.append("calibration coverage not assessed: a plan assesses its optimum only "
                       "(`mosaic export PLAN.json#N --to yaml` and `mosaic perf` assess a "
                       "candidate)")
    from mosaic.plan.search import NO_DIVIDING_LAYOUT, model_parallel_factor_note

    lost = (document.get("infeasible_summary") or {}).get(NO_DIVIDING_LAYOUT)
    envelope = document.get("envelope") or {}
    devices, batch = envelope.get("n_devices"), envelope.get("global_batch")
    if lost and isinstance(devices, int) and isinstance(batch, int) and devices and batch:
        total = (document.get("counts") or {}).get("geometries")
        caveats.append(f"{lost}{f' of {total}' if total else ''} geometries had no layout: "
                       f"{NO_DIVIDING_LAYOUT}" + model_parallel_factor_note(devices, batch))
    return caveats


def _plan_interval_draws(document: dict[str, Any]) -> str:
    """What the plan's loss intervals drew ('law', 'throughput' or both, from its
    ``uncertainty.sources``): without --bootstrap-samples the law's coefficients are exact and
    a candidate at the tokens-per-parameter cap gets a zero-width interval (a review's two
    such plans read "the intervals do not overlap")."""
    from mosaic.report.plan_report import sampled_uncertainties

    uncertainty = document.get("uncertainty")
    sources = uncertainty.get("sources") if isinstance(uncertainty, dict) else None
    lines = [line for line in sources if isinstance(line, str)] \
        if isinstance(sources, list) else None
    return sampled_uncertainties(lines)


def _plan_loss_interval(document: dict[str, Any], geometry: dict[str, Any]
                        ) -> list[float] | None:
    """The optimum's loss interval from the plan's uncertainty, where it drew one."""
    keys = ("q", "experts", "top_k", "split_factor")
    for candidate in document.get("uncertainty_candidates") or []:
        interval = candidate.get("loss_interval")
        if all(candidate.get(k) == geometry.get(k) for k in keys) and interval:
            return [float(interval[0]), float(interval[1])]
    return None


def _check_envelope_devices(path: Path, envelope: dict[str, Any]) -> None:
    """A plan's node count is a whole number and, with its GPUs per node, its device count:
    a hand-edited nodes "12" was listed among the inputs that differ while both plans were
    costed on the document's 256 GPUs (a fuzz trial; `export` refused it)."""
    nodes, per_node, devices = (envelope.get(k) for k in ("nodes", "gpus_per_node",
                                                          "n_devices"))
    if nodes is None:
        return
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise MosaicInputError(f"{path}: envelope.nodes is {nodes!r}; a `mosaic plan --json` "
                               "document holds a whole number of nodes there")
    if (isinstance(per_node, int) and isinstance(devices, int)
            and nodes * per_node != devices):
        raise MosaicInputError(f"{path}: envelope.nodes {nodes} x gpus_per_node {per_node} is "
                               f"not its n_devices {devices} (an edited plan?); rerun "
                               "`mosaic plan` for another node count")


# the blocks of a plan document compare reads beyond export's, and what each holds
_PLAN_BLOCKS: tuple[tuple[tuple[str, ...], type], ...] = (
    (("optimum_step",), dict), (("assumptions",), dict), (("assumptions", "law"), dict),
    (("assumptions", "law", "provenance"), dict), (("assumptions", "calibration"), dict),
    (("assumptions", "layout_limits"), dict), (("search_space",), dict), (("counts",), dict),
    (("infeasible_summary",), dict), (("uncertainty_candidates",), list),
    (("envelope", "goodput"), dict), (("envelope", "memory_headroom"), dict),
    (("optimum", "plan"), dict), (("optimum", "coverage"), dict),
    (("optimum", "coverage", "outside"), list), (("optimum", "extrapolation"), dict),
    (("optimum", "extrapolation", "flags"), list))


def _check_plan_blocks(path: Path, document: dict[str, Any]) -> None:
    """Each block compare reads is a mapping or a list where a plan writes one, and its
    price a finite, non-negative number: a hand-edited plan's ``assumptions.law: 0.5`` or
    ``price_usd_per_gpu_hour: "abc"`` ended in a traceback (a fuzz trial)."""
    for keys, kind in _PLAN_BLOCKS:
        value: Any = document
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, kind):
            what = "a mapping" if kind is dict else "a list"
            raise MosaicInputError(f"{path}: '{'.'.join(keys)}' is a {type(value).__name__}; "
                                   f"a `mosaic plan --json` document holds {what} there")
        if kind is list and any(not isinstance(item, dict) for item in value or []):
            raise MosaicInputError(f"{path}: '{'.'.join(keys)}' holds a non-mapping entry; a "
                                   "`mosaic plan --json` document lists mappings there")
    step = document.get("optimum_step") or {}
    for block in ("breakdown_s", "memory_breakdown_bytes"):  # shown term by term
        terms = step.get(block)
        if terms is None:
            if step:  # a plan writes both with its optimum's step; one alone ended in a
                # TypeError, the other's absence in a bare null (a fuzz trial)
                raise MosaicInputError(f"{path}: optimum_step has no field {block!r}; "
                                       "expected the output of `mosaic plan --json`")
            continue
        if not isinstance(terms, dict):
            raise MosaicInputError(f"{path}: 'optimum_step.{block}' is a "
                                   f"{type(terms).__name__}; a `mosaic plan --json` document "
                                   "holds a mapping there")
        for name, value in terms.items():
            if not is_finite_number(value) or value < 0:
                shown = shown_number(value)
                raise MosaicInputError(f"{path}: optimum_step.{block}.{name} is {shown:.60}; "
                                       "a `mosaic plan --json` document holds a finite, "
                                       "non-negative number there")
    for candidate in document.get("uncertainty_candidates") or []:
        interval = candidate.get("loss_interval")
        if interval is not None and not (isinstance(interval, list) and len(interval) == 2
                                         and all(is_finite_number(v) for v in interval)):
            raise MosaicInputError(f"{path}: an uncertainty candidate's loss_interval is "
                                   f"{interval!r:.60}; a `mosaic plan --json` document holds "
                                   "two finite numbers there")
    for name in ("price_usd_per_gpu_hour", "price_per_gpu_hour"):
        value = document.get(name)
        if value is not None and (not is_finite_number(value) or value < 0):
            raise MosaicInputError(f"{path}: {name} is {value!r:.60}; a `mosaic plan --json` "
                                   "document holds a finite, non-negative number there")


def _check_plan_ranges(path: Path, optimum: dict[str, Any], envelope: dict[str, Any]) -> None:
    """The optimum's loss, sparsity and MFU and the envelope's goodput and usable memory
    share within the ranges a plan writes them in: a hand-edited usable_memory_fraction
    'abc' repeated that string by the device's bytes (MemoryError), -1 gave a negative
    usable memory, and a goodput of 1.5 or a loss of 1e30 were compared as given (plan
    documents mutated field by field). Shares are (0, 1] as a job's training.goodput and
    hardware.usable_memory_fraction (config.blocks, config.job_schema; high stated, so the
    'fraction' kind's own reason, a share of runs, is not given); MFU is bounded by the
    widest GEMM lane's multiple of the bf16 peak (cli.contract)."""
    from mosaic.cli.contract import MAX_LANE_TO_BF16_PEAK

    goodput = envelope.get("goodput") or {}
    headroom = envelope.get("memory_headroom") or {}
    checks = (("optimum.loss", optimum.get("loss"), "loss", {}),
              ("optimum.sparsity", optimum.get("sparsity"), "sparsity", {}),
              ("optimum.mfu", optimum.get("mfu"), "fraction",
               {"above_low": True, "high": MAX_LANE_TO_BF16_PEAK}),
              ("envelope.goodput.goodput", goodput.get("goodput"), "fraction",
               {"above_low": True, "high": 1.0}),
              ("envelope.memory_headroom.usable_memory_fraction",
               headroom.get("usable_memory_fraction"), "fraction",
               {"above_low": True, "high": 1.0}))
    for field_name, value, kind, narrowed in checks:
        if value is not None:
            check_range(f"{path}: {field_name}", value, kind, **narrowed)


def _absent_notes(sources: dict[str, tuple[Any, str]]) -> dict[str, str]:
    """A ``<key>_note`` for each side figure whose plan field (``sources``: key -> (value,
    field)) is absent, saying which."""
    return {f"{key}_note": f"no {key}: the plan file has no {field} (an edited plan, or one "
                           "written before plans recorded it); rerun `mosaic plan`"
            for key, (value, field) in sources.items() if value is None}


def _plan_cost(document: dict[str, Any], optimum: dict[str, Any], envelope: dict[str, Any],
               price: float | None, at_own_price: bool) -> dict[str, Any]:
    """A plan side's GPU-hours and cost as the plan costs them (plan.cost.days_cost): of the
    days its candidate trains (``train_days``: fewer than the window's where D is held at
    tpp_max and the run stops early; compare costed a 1 M USD budget plan whose run stops
    after 5.6 of 65.1 days at the whole 1 M, where plan says 86k), the window's beside
    them; a plan file written before plans recorded those days is costed at its whole
    window, with a note where its run may stop early. ``at_own_price``: ``price`` is the
    plan's own (in USD), so its stated window cost stands."""
    from mosaic.plan.cost import days_cost

    gpus, days = envelope.get("n_devices"), envelope.get("days")
    if not isinstance(gpus, int) or days is None:  # an edited plan: the envelope's own hours
        hours = envelope.get("gpu_hours")
        return {"gpu_hours": hours,
                "cost": None if price is None or hours is None else hours * price}
    train_days = optimum.get("train_days")
    # the window's cost as the plan stated it (its dollar budget, in USD) where priced alike
    stated = document.get("window_cost_usd") if at_own_price else None
    cost = days_cost(gpus, days, train_days, price,
                     window_gpu_hours=envelope.get("gpu_hours"), window_cost_usd=stated)
    side: dict[str, Any] = {"gpu_hours": cost.gpu_hours, "cost": cost.cost_usd,
                            "train_days": cost.train_days}
    if cost.ends_early:
        side |= {"window_gpu_hours": cost.window_gpu_hours,
                 **({} if cost.window_cost_usd is None else {"window_cost": cost.window_cost_usd})}
    if train_days is None and optimum.get("tpp_capped") is not False:
        side["cost_note"] = ("this plan file was written before plans recorded the days the "
                             "run trains (train_days): costed at its whole window, more than "
                             "a run that stops early at tpp_max pays; rerun `mosaic plan`")
    return side


def plan_side(path: Path, document: dict[str, Any], price: float | None,
              currency: str = "USD") -> dict[str, Any]:
    """The optimum of a `mosaic plan --json` document on the common footing, costed at
    ``price`` per GPU-hour in ``currency`` (None: the plan's own price, in USD)."""
    from mosaic.export.spec import spec_from_plan_document
    from mosaic.perf.headroom import memory_fit_text

    # the checks `mosaic export` makes (shape, model, layout, batch), in one line each
    spec_from_plan_document(document, str(path))
    optimum = document.get("optimum")
    envelope = document.get("envelope") or {}
    if not optimum:
        raise MosaicInputError(f"{path}: not a `mosaic plan --json` document with an optimum")
    for name in _OPTIMUM_REQUIRED:
        if optimum.get(name) is None:
            raise MosaicInputError(f"{path}: optimum has no field {name!r}; expected the "
                                   "output of `mosaic plan --json`")
    # numbers a plan writes are finite and not negative; a hand-edited -6 s step was
    # compared as given (a fuzz trial)
    for block, values, names in (("optimum", optimum, _OPTIMUM_NUMBERS),
                                 ("envelope", envelope, _ENVELOPE_NUMBERS)):
        for name in names:
            value = values.get(name)
            positive = (block, name) in _POSITIVE_NUMBERS
            if value is not None and (not is_finite_number(value) or value < 0
                                      or (positive and value == 0)):
                raise MosaicInputError(f"{path}: {block}.{name} is {value!r}; a `mosaic plan "
                                       "--json` document holds a finite, "
                                       f"{'positive' if positive else 'non-negative'} number "
                                       "there")
    _check_envelope_devices(path, envelope)
    _check_plan_blocks(path, document)
    _check_plan_ranges(path, optimum, envelope)
    step = document.get("optimum_step") or {}
    gpus = envelope.get("n_devices")
    own_price = document.get("price_usd_per_gpu_hour", document.get("price_per_gpu_hour"))
    if price is None:  # the plan's own price, in USD (plan files before 0.2: no currency)
        price = own_price
    # the plan's price stands where the price given is the same number in the same currency
    # (a plan prices in USD): an equal number in EUR replaces it, and its USD window cost
    kept_own_price = price == own_price and currency == "USD"
    cost = _plan_cost(document, optimum, envelope, price, kept_own_price)
    capacity = step.get("capacity_bytes") or envelope.get("hbm_bytes_per_device")
    capacity_from = "optimum_step.capacity_bytes or envelope.hbm_bytes_per_device"
    fraction = (envelope.get("memory_headroom") or {}).get("usable_memory_fraction")
    goodput = (envelope.get("goodput") or {}).get("goodput")
    memory_bytes = optimum.get("memory_bytes")
    tokens_per_s = optimum.get("tokens_per_s")
    assumptions = document.get("assumptions") or {}
    law = assumptions.get("law") or {}
    # the candidate's own geometry and layout are inputs too: two candidates of one plan
    # share everything else (a trial read "Inputs that differ: (none)" for #1 against #2)
    geometry = {k: optimum.get(k) for k in ("q", "layers", "d_model", "experts", "top_k",
                                            "split_factor", "expert_ffn")}
    read = flatten({"geometry": geometry, "layout": optimum.get("plan") or {},
                    "envelope": envelope, "search_space": document.get("search_space") or {},
                    "layout_limits": assumptions.get("layout_limits") or {},
                    "law": {"form": law.get("form"),
                            "source": (law.get("provenance") or {}).get("source")},
                    "calibration": (assumptions.get("calibration") or {}).get("name")})
    inputs = {name: shown_input(value) for name, value in read.items()}
    for field_name, value in inputs.items():  # listed among the inputs that differ
        if is_number(value) and not is_finite_number(value):
            shown = shown_number(value)
            raise MosaicInputError(f"{path}: {field_name} is {shown}; a `mosaic plan --json` "
                                   "document holds a finite number there")
    return {
        "kind": "plan", "source": str(path), "gpus": gpus, "system": envelope.get("system"),
        "layout": step.get("plan") or optimum.get("plan"),
        "step_time_s": optimum.get("step_time_s"), "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": tokens_per_s / gpus if tokens_per_s and gpus else None,
        "mfu": optimum.get("mfu"), "hfu": step.get("hfu"),  # absent from older plan files
        # why HFU is null: a ranked candidate (#N) carries no step of its own, and a plan
        # written before HFU was recorded has none in its optimum's (a --json reader saw a
        # bare null; the CLI contract asks for a reason beside it)
        **({"hfu_note": "no HFU: a plan file holds its optimum's step only; `mosaic export "
                        "PLAN.json#N --to yaml` and `mosaic perf` give a ranked candidate's"
            if "optimum_step" not in document else
                        "no HFU: this plan file was written before plans recorded it; rerun "
                        "`mosaic plan`, or `mosaic export PLAN.json --to yaml` and `mosaic "
                        "perf` give it"}
           if step.get("hfu") is None else {}),
        "memory_gib": optimum["memory_bytes"] / GIB if optimum.get("memory_bytes") else None,
        "memory_capacity_gib": capacity / GIB if capacity else None,
        "feasible": True,  # the planner keeps only plans that fit
        "usable_memory_gib": capacity * fraction / GIB if capacity and fraction else None,
        "usable_memory_fraction": fraction,
        "memory_fit": (memory_fit_text(memory_bytes / GIB, capacity / GIB, fraction, 0.0)
                       if memory_bytes and capacity and fraction else "fits"),
        # the profile the plan was searched with (its own; --calibration is the jobs')
        "calibration": (assumptions.get("calibration") or {}).get("name"),
        "n_total": optimum.get("n_total"), "n_active": optimum.get("n_active"),
        "days": envelope.get("days"),
        "goodput": goodput,
        # why an envelope figure is null: the plan file lacks what it comes from (the CLI
        # contract: no bare null where a number belongs)
        **_absent_notes({
            "days": (envelope.get("days"), "envelope.days"),
            "goodput": (goodput, "envelope.goodput.goodput"),
            "memory_capacity_gib": (capacity, capacity_from),
            "usable_memory_gib": (
                (fraction, "envelope.memory_headroom.usable_memory_fraction") if capacity
                else (None, capacity_from))}),
        "tokens": optimum.get("tokens"),
        # the data the loss counted where the plan had --unique-tokens (Muennighoff et al.)
        **({"effective_tokens": optimum["effective_tokens"], "epochs": optimum.get("epochs")}
           if (document.get("search_space") or {}).get("unique_tokens")
           and optimum.get("effective_tokens") else {}),
        # D held at the plan's tokens-per-parameter cap, below tokens/s x T x goodput
        "tokens_capped": bool(optimum.get("tpp_capped")),
        "loss": optimum.get("loss"),
        "law_extrapolation": [f.get("message", "") for f in
                              ((optimum.get("extrapolation") or {}).get("flags") or [])],
        "price_per_gpu_hour": price, **cost,
        # a plan file holds its optimum's breakdowns only: a ranked candidate (#N) has none
        "breakdown_s": step.get("breakdown_s") if step else None,
        "memory_breakdown_bytes": step.get("memory_breakdown_bytes") if step else None,
        "geometry": geometry,
        "inputs": inputs,
        # the plan's own price where --price-per-gpu-hour replaced it (said on screen)
        "replaced_price_per_gpu_hour": (own_price if own_price is not None
                                        and not kept_own_price else None),
        "caveats": _plan_caveats(document, optimum),
        "loss_interval": _plan_loss_interval(document, geometry),
        "loss_interval_draws": _plan_interval_draws(document),
    }


# --- Rendering --------------------------------------------------------------------------------
def render(document: dict[str, Any]) -> None:
    """The comparison as terminal tables (the HTML page: report.html.compare_page)."""
    print_key_value_table("Compared", compared_rows(document))
    print_table("Inputs that differ", ["field", "A", "B"],
                difference_rows(document) or [["(none)", "", ""]])
    print_table("Side by side", ["quantity", "A", "B", "B / A"], side_by_side_rows(document))
    for line in footnotes(document):
        console.print(line, markup=False, highlight=False)
    for part in side_notes(document):
        if isinstance(part, str):
            console.print(part, markup=False, highlight=False)
        else:
            print_key_value_table(*part)
    if not has_breakdowns(document):
        console.print(NO_BREAKDOWNS, markup=False, highlight=False)
    if terms := calibration_term_table(document.get("calibration_terms") or []):
        print_table("Calibrated terms that differ (each side's profile, for its job)",
                    ["term", "A", "B", "B / A"], terms)
    if steps := step_rows(document):
        print_table("Step-time breakdown (s)", ["term", "A", "B", "B - A"], steps)
        if note := step_scale_note(document["a"], document["b"]):
            console.print(note, markup=False, highlight=False)
    if memory := memory_rows(document):
        print_table("Memory breakdown per GPU (GiB)", ["part", "A", "B", "B - A"], memory)


def side_prices(text: str | None, currency: str) -> tuple[float | None, float | None]:
    """A's and B's price per GPU-hour from ``--price-per-gpu-hour``: one price for both, or
    'A,B' for two GPU kinds (a lead compared the same model on H100 and B200 at one price);
    each positive and finite, and in USD noted when it looks like a node's price."""
    if text is None:
        return None, None
    parts = _side_parts(text)
    try:
        values = [float(part) for part in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(math.isfinite(v) and v > 0 for v in values):
        raise MosaicInputError(f"--price-per-gpu-hour must be one positive number, or two "
                               f"('A,B': A's and B's), got {shown(text)}")
    if currency == "USD":  # a node's price given per GPU is noted (plan.cost.check_price)
        from mosaic.plan.cost import check_price

        for value in values:
            check_price(value)
    return (values[0], values[-1])


def _side_parts(text: str) -> list[str]:
    """An 'A,B' option's items, stripped: one for both sides, or A's and B's."""
    return [part.strip() for part in text.split(",")]


def side_calibration_names(text: str | None) -> tuple[str | None, str | None]:
    """A's and B's profile from ``--calibration``: one (a built-in name or a YAML file) for
    both, or 'A,B' for one job under two (what a refit moved); a file whose own name holds
    a comma is one profile. None: the default profile."""
    if text is None:
        return None, None
    if path_exists(text):
        return text, text
    parts = _side_parts(text)
    if len(parts) not in (1, 2) or not all(parts):
        raise MosaicInputError("--calibration must be one profile (a built-in name or a YAML "
                               f"file), or two ('A,B': A's and B's), got {shown(text)}")
    return parts[0], parts[-1]


def side_calibrations(names: tuple[str | None, str | None]) -> tuple[Any, Any]:
    """A's and B's calibration, loaded once where both sides name one profile; a profile
    that cannot be read is named by its side where the sides differ."""
    from mosaic.perf.calibration import load_calibration

    if names[0] == names[1]:
        calibration = load_calibration(names[0])
        return calibration, calibration
    loaded = []
    for side, name in zip("AB", names, strict=True):
        try:
            loaded.append(load_calibration(name))
        except MosaicInputError as error:
            raise MosaicInputError(f"--calibration, {side}'s profile {shown(name)}: "
                                   f"{error}") from None
    return loaded[0], loaded[1]


def _kind(path: Path) -> tuple[str, Any]:
    """('job', None) for a YAML file or a JSON one holding a job's model block (perf and
    export read a job written as JSON; a fuzz trial's compare refused it as 'not a plan
    document'), else ('plan', its parsed document, or None where it was not read: a
    PLAN.json#N candidate, or a damaged file, refused as such when the plan is read). The
    document is handed on so a plan file is parsed once (a fuzz trial's 254 MB plan took
    7 s a parse)."""
    from mosaic.config.job_schema import is_plan_document
    from mosaic.export.spec import split_plan_reference

    file, rank = split_plan_reference(path)
    if file.suffix.lower() != ".json":
        return "job", None
    if rank is not None:
        return "plan", None
    try:
        document = parse_json(read_text(file, "plan document"), str(file))
    except MosaicInputError:  # unreadable: read as the plan it is named like, and refused
        return "plan", None
    if isinstance(document, dict) and "model" in document and not is_plan_document(document):
        return "job", None
    return "plan", document


DEFAULT_DAYS = 20.0  # the training window of a job comparison when --days is not given


def compare(
    # metavars A and B: a missing side is named as the help names it (a trial read 'b')
    a: Annotated[Path, typer.Argument(metavar="A", help="job YAML or `mosaic plan --json` "
                                      "output")],
    b: Annotated[Path, typer.Argument(metavar="B", help="the other side: job YAML or "
                                      "`mosaic plan --json` output")],
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
    calibration: Annotated[str | None, typer.Option(
        "--calibration", help="jobs: calibration profile (default, paper-p6b200 or a YAML "
        "file) for both sides, or A's and B's as 'A,B' (one job under two profiles: what a "
        "refit moved)")] = None,
    model: ModelOption = None,
    catalog: CatalogFileOption = None,
    json_output: JsonFlag = False,
    html: HtmlOption = None,
) -> None:
    """Compare two jobs or two plans: step time, memory, MFU, tokens, loss, cost, inputs."""
    calibration_names = side_calibration_names(calibration)
    check_html(html, a, b, law_file, *calibration_names, model, catalog)
    (kind_a, read_a), (kind_b, read_b) = _kind(a), _kind(b)
    kinds = {kind_a, kind_b}
    if len(kinds) != 1:
        plan = a if kind_a == "plan" else b
        raise MosaicInputError("compare two jobs (YAML or JSON) or two plans (JSON of `mosaic plan "
                               f"--json`), not a {kind_a} ({a}) with a {kind_b} ({b}); "
                               "a .json file holding a job's model block is read as a job, any "
                               "other .json file as a plan; to compare the plan's chosen job, "
                               f"write it with `mosaic export {plan} --to yaml --out job.yaml` "
                               "and compare job.yaml")
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
    days_given, goodput_given = days, goodput
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

        law = load_law_file(law_file)
        calibrations = side_calibrations(calibration_names)
        block = model_block(model)  # one model for both jobs
        goodput_from = "--goodput" if goodput_given is not None else "--goodput default"
        sides = [job_side(p, calib, law, days, goodput, price, block, goodput_from)
                 for p, price, calib in zip((a, b), prices, calibrations, strict=True)]
        if all(side["tokens_stated"] for side in sides):  # no window was used
            assumed = [text for text in assumed if "(--days)" not in text]
        if all(side["goodput_stated"] for side in sides):  # each job states its own
            assumed = [text for text in assumed if "(--goodput)" not in text]
        # an option neither job read (a trial's --days 10 beside two exported plans, whose
        # 30-day window stood without a word)
        unread = [f"{flag} (both state {field})" for flag, value, key, field in (
            ("--days", days_given, "tokens_stated", "training.tokens: the window is the time "
             "their steps take"),
            ("--goodput", goodput_given, "goodput_stated", "training.goodput"))
            if value is not None and all(side[key] for side in sides)]
        if unread:
            raise MosaicInputError(f"neither job reads {'; '.join(unread)}, as a plan's "
                                   "exported job does; drop the option, or the jobs' "
                                   "training block")
    else:
        sides = []
        from mosaic.export.spec import plan_candidate, split_plan_reference

        for path, price, read in zip((a, b), prices, (read_a, read_b), strict=True):
            file, rank = split_plan_reference(path)  # PLAN.json#N: the rank-N candidate
            document = (read if read is not None
                        else parse_json(read_text(file, "plan document"), str(file)))
            if rank is not None:
                document = plan_candidate(document, rank, str(path))
            sides.append(plan_side(path, document, price, currency))
    document = compare_document(sides[0], sides[1], currency, assumed)
    if json_output:
        print_json(document)
    else:
        render(document)
    write_html(document, html, "compare")


def register(app: typer.Typer) -> None:
    """Attach `mosaic compare` to the root command."""
    app.command("compare")(guarded(compare))
