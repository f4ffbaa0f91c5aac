"""The studio's plan runner: one co-design search at a time, in a background thread.

The form is validated by the CLI's own :func:`mosaic.cli.plan_cmd.build_inputs` (same
rules, same messages as `mosaic plan`). The search runs serially in a worker thread
(forking worker processes from a threaded server is unsafe) and reports progress after
every block of geometries; that callback is also where a cancel request or the time
limit stops it. A second request while one runs is refused with a message. The result is
the plan report of `mosaic plan --html`, kept in memory for the page to open.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from mosaic.errors import MosaicInputError, shown
from mosaic.plan.batch import (
    DEFAULT_RULE,
    BatchRule,
    check_rule_read,
    is_batch_search,
    parse_batch_rule,
    parse_global_batch,
)
from mosaic.plan.cost import check_price
from mosaic.plan.envelope import (
    TABLE3_DAYS,
    TABLE3_GLOBAL_BATCH,
    TABLE3_NODES,
    TABLE3_S_MIN,
    TABLE3_SEQ_LEN,
)
from mosaic.plan.inputs import (
    TABLE3_EXPERTS_TEXT,
    TABLE3_Q_TEXT,
    TABLE3_SPLIT_TEXT,
    TABLE3_TOP_K_TEXT,
    TABLE3_TPP_TEXT,
    build_inputs,
    dollar_budget_for,
    plan_limits,
)
from mosaic.schema_validation import float_from_text, int_from_text
from mosaic.stacks import DEFAULT_STACK
from mosaic.studio.jobs import GENERAL, FormError, named_fields

DEFAULT_TIME_LIMIT_S = 300.0
# geometries, or geometry-batch pairs of a searched batch; Table 3's grid has 1,092 (paper
# Sec. 7.3)
MAX_GEOMETRIES = 2000
MAX_DEVICES = 65536  # layout enumeration per geometry grows with the device count
KEPT_REPORTS = 8

# The plan form: field -> default text, `mosaic plan`'s own defaults (the paper's Table 3
# envelope and grid, Sec. 7.3: 1,092 geometries, 20 s serially on two cores), so the studio's
# plan is the CLI's; a narrower grid is the user's choice, typed into the form.
DEFAULT_PLAN_FORM: dict[str, str] = {
    # the node type (empty: the GPU's default one); a studio opened on a job fills in its own
    "plan.gpu": "B200", "plan.system": "", "plan.nodes": str(TABLE3_NODES),
    # a what-if scale-out (NIC) rate, Gb/s per GPU one direction (`mosaic plan
    # --scale-out-gbps`; empty: the node type's own)
    "plan.scale_out_gbps": "",
    # goodput: empty = 1.0 (the paper's), or Young-Daly from the MTBF fields below
    # empty: Table 3's 20 days, as `mosaic plan` without --days; a USD budget then sets the
    # window without clearing the field first (a trial's budget was refused beside a
    # pre-filled 20)
    "plan.days": "", "plan.goodput": "",
    # the batch as `mosaic plan --global-batch` reads it: N (fixed), MIN:MAX or auto (searched
    # with the layout under the batch rule, docs/plan.md)
    "plan.global_batch": str(TABLE3_GLOBAL_BATCH), "plan.batch_rule": DEFAULT_RULE,
    "plan.seq_len": str(TABLE3_SEQ_LEN),
    # the grid: the paper's ladder (q), or variants of the model in the editor (`mosaic plan
    # --backbone`: depth and width, E, K, G; an empty axis keeps the model's own value)
    "plan.grid": "ladder", "plan.layers": "", "plan.d_model": "",
    "plan.q": TABLE3_Q_TEXT, "plan.experts": TABLE3_EXPERTS_TEXT, "plan.top_k": TABLE3_TOP_K_TEXT,
    "plan.split_factor": TABLE3_SPLIT_TEXT, "plan.tpp": TABLE3_TPP_TEXT,
    "plan.s_min": f"{TABLE3_S_MIN:g}",
    "plan.stack": DEFAULT_STACK, "plan.precision": "bf16", "plan.quantised_gemms": "all",
    # every candidate's optimizer and its state's dtype (`mosaic plan --optimizer`)
    "plan.optimizer": "adamw", "plan.optimizer_dtype": "fp32",
    # the stack's release recipes, dispatcher and usable memory (empty: the stack's defaults)
    "plan.stack_version": "", "plan.dispatcher": "", "plan.memory_fraction": "",
    # cost and failures: a price adds the cost; a USD budget sets the window (with days too,
    # the shorter of the two, as `mosaic plan --days D --budget-usd B`); an MTBF gives
    # Young-Daly goodput instead of the constant one, at the optimal checkpoint interval or
    # the one the job checkpoints at (`--checkpoint-interval-s`; docs/plan.md)
    "plan.price_per_gpu_hour": "", "plan.budget_usd": "", "plan.mtbf_gpu_hours": "",
    "plan.checkpoint_s": "", "plan.checkpoint_interval_s": "", "plan.restart_s": "",
    # constraints (docs/plan.md "Constraints"); empty = none
    "plan.max_total_params": "", "plan.max_active_params": "", "plan.unique_tokens": "",
    "plan.pp": "", "plan.ep": "", "plan.sharding": "",
}
GRIDS = ("ladder", "model")  # plan.grid's choices
# The plan fields that must hold a value, by what an empty one (or a JSON null) asks for:
# the job form's wording (studio.jobs.ASKED_FOR), where these read "must be an integer,
# got ''" or "got 'None'" (a trial)
PLAN_ASKED_FOR = {"plan.nodes": "the number of nodes",
                  "plan.seq_len": "the sequence length in tokens",
                  "plan.global_batch": "the global batch: N sequences, MIN:MAX or auto",
                  "plan.tpp": "the tokens per active parameter, MIN:MAX (e.g. 40:150)",
                  "plan.s_min": "the sparsity floor", "plan.grid": "the grid: ladder or model",
                  "plan.stack": "the software stack", "plan.precision": "the precision"}
# The optional constraint fields and the option each one is.
CONSTRAINT_FIELDS = ("max_total_params", "max_active_params", "unique_tokens", "pp", "ep",
                     "sharding")


def plan_form_defaults(calibration: Any = None) -> dict[str, str]:
    """The plan form as `mosaic plan` with no options reads it under ``calibration``: on
    the profile's own stack (envelope.planning_stack; a profile `mosaic calibrate` fitted on
    one stack's runs names it), so `mosaic studio --calibration P` plans what `mosaic plan
    --calibration P` plans (a trial: the studio planned paper-p6b200 on megatron-core, at its
    90% headroom, where the CLI planned paper-nemo at 100%)."""
    from mosaic.plan.envelope import planning_stack

    if calibration is None:
        return dict(DEFAULT_PLAN_FORM)
    return {**DEFAULT_PLAN_FORM, "plan.stack": planning_stack(calibration)}


class PlanBusyError(Exception):
    """A plan is already running."""


class _StoppedError(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


# Number fields that may be left empty (None), as the CLI options they are default to none.
OPTIONAL_NUMBERS = ("days", "goodput", "memory_fraction", "price_per_gpu_hour", "budget_usd",
                    "mtbf_gpu_hours", "checkpoint_s", "checkpoint_interval_s", "restart_s",
                    "scale_out_gbps")


def _optional_numbers(form: dict[str, str], names: tuple[str, ...],
                      required: dict[str, type] | None = None) -> dict[str, Any]:
    """The form's optional number fields by name (None where empty) and its ``required``
    ones; FormError naming every field that holds something other than a number."""
    present = {name: float for name in names if str(form.get(f"plan.{name}", "")).strip()}
    return {name: None for name in names} | _numbers(form, {**(required or {}), **present})


def plan_price(form: dict[str, str]) -> float | None:
    """The form's price per GPU-hour (None when empty), the cost of the plan's report."""
    return _optional_numbers({**DEFAULT_PLAN_FORM, **form},
                             ("price_per_gpu_hour",))["price_per_gpu_hour"]


def plan_batches(form: dict[str, str]) -> tuple[tuple[int, ...], BatchRule | None]:
    """The form's global batch by `mosaic plan --global-batch`'s own parser: the candidate
    batches and, for a searched batch (auto or MIN:MAX), its rule (``plan.batch_rule``, read
    as ``--batch-rule``; None for a fixed batch, which no rule bounds). FormError naming the
    field otherwise (a trial's 'auto' was 'must be an integer')."""
    form = {**DEFAULT_PLAN_FORM, **form}
    text = str(form["plan.global_batch"])
    rule_text = str(form["plan.batch_rule"]).strip() or DEFAULT_RULE  # empty: the default
    try:
        batches = parse_global_batch(text)
        rule = parse_batch_rule(rule_text)  # checked as the CLI does
        # the form always holds a rule (the default, which a fixed batch leaves unread, as
        # `mosaic plan` without --batch-rule does); another one with a fixed batch would not
        # be read, and is refused as --batch-rule is (a fixed 1024 planned under 'kaplan')
        check_rule_read(None if rule.name == DEFAULT_RULE else rule_text, text)
    except MosaicInputError as exc:
        raise FormError({plan_field_of(str(exc), set(form)):
                         in_form_words(str(exc), set(form))}) from None
    return batches, (rule if is_batch_search(text) else None)


def _numbers(form: dict[str, str], kinds: dict[str, type]) -> dict[str, Any]:
    """The form's numeric fields by name; FormError naming every field that is not one."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, kind in kinds.items():
        key = f"plan.{name}"
        text = str(form.get(key, "")).strip()
        try:  # the YAML inputs' rule: '3_2' is not 32
            values[name] = int_from_text(text) if kind is int else float_from_text(text)
        except ValueError:
            kind_words = "an integer" if kind is int else "a number"
            errors[key] = f"must be {kind_words}, got {shown(text)}"
    if errors:
        raise FormError(errors)
    return values


_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")
# CLI options the plan form has no field for, named as the field that sets what they set:
# `mosaic plan --gpus-per-node` is a what-if host size; the form's host size is its node
# type's (plan.system; a review found the untrainable advice naming --gpus-per-node)
SET_BY_FIELD = {"gpus-per-node": ("plan.system", "system (its GPUs per node)")}


def in_form_words(message: str, keys: set[str]) -> str:
    """A CLI message with each option the form has as a field named as the field ('--q is
    empty' -> 'q is empty'), and an option the form sets through another field named as
    that field (SET_BY_FIELD); other options keep their CLI spelling."""
    def field(match: re.Match[str]) -> str:
        name = match.group(1).replace("-", "_")
        if f"plan.{name}" in keys:
            return name
        key, words = SET_BY_FIELD.get(match.group(1), ("", ""))
        return words if key in keys else match.group(0)

    return _FLAG.sub(field, message)


def plan_field_of(message: str, keys: set[str]) -> str:
    """The plan-form field a CLI validation message names."""
    if message.startswith("unknown system") or "does not match --system" in message:
        return "plan.system"  # (the node type fixes the GPU: the field to change)
    if message.startswith("the backbone"):
        return "plan.grid"
    # (lowered: "TPP range must ..." is the tpp field's, a trial found it under the form)
    token = (re.split(r"[\s:]", message.strip(), maxsplit=1)[0].lstrip("-").replace("-", "_")
             .lower())
    if f"plan.{token}" in keys:
        return f"plan.{token}"
    if message.startswith("unknown device"):
        return "plan.gpu"
    if "Young-Daly goodput" in message:  # goodput 0, or an MTBF without its checkpoint:
        # the MTBF's fields, not the goodput field left empty for them (a trial)
        return "plan.mtbf_gpu_hours"
    words = message.split()
    if words[0] in ("layout", "unknown") and len(words) > 1:  # a layout limit's message
        axis = words[1].rstrip(":")
        if f"plan.{axis}" in keys:
            return f"plan.{axis}"
    if "grid is empty" in message:
        return "plan.experts"
    named = named_fields(message, keys)  # 'price per GPU-hour must be ...', 'memory fraction'
    return named[0] if named else GENERAL


def with_plan_defaults(form: dict[str, str]) -> dict[str, str]:
    """The plan form with `mosaic plan`'s default for each field it leaves out. Under
    ``plan.grid: model`` the grid's E, K and G left out are the model's own, as `mosaic plan
    --backbone` without --experts, --top-k and --split-factor keeps them (and as the page
    clears the ladder's lists on switching): an API request that left them out planned the
    ladder's lists around the model, 182 geometries where the page and the CLI planned 1
    (a trial)."""
    defaults = DEFAULT_PLAN_FORM
    if str(form.get("plan.grid", defaults["plan.grid"])).strip() == "model":
        defaults = {**defaults, **dict.fromkeys(SHARED_GRID_AXES, "")}
    return {**defaults, **form}


def validate_plan_form(form: dict[str, str], model: Any = None) -> tuple[Any, Any, Any]:
    """(Envelope, SearchSpace, LayoutLimits) of a plan form, or FormError naming the
    fields. ``model`` is the editor's geometry, the backbone of a ``plan.grid: model``
    plan (None when the editor has none to give)."""
    from mosaic.stacks.registry import get_stack

    unknown = sorted(k for k in form if k not in DEFAULT_PLAN_FORM)
    if unknown:  # a misspelt field (or a job field) would plan on the default silently
        raise FormError({GENERAL: f"unknown plan field(s) {unknown}; allowed: "
                                  f"{sorted(DEFAULT_PLAN_FORM)}"})
    form = with_plan_defaults(form)
    empty = {key: f"give {meaning}" for key, meaning in PLAN_ASKED_FOR.items()
             if not str(form[key]).strip()}
    if empty:  # asked for by name, as the job form asks (it read "must be ..., got ''")
        raise FormError(empty)
    required = {"nodes": int, "seq_len": int, "s_min": float}
    try:  # every bad one at once: the batch's error with the numbers'
        batches, _ = plan_batches(form)
        batch_errors: dict[str, str] = {}
    except FormError as exc:
        batches, batch_errors = (TABLE3_GLOBAL_BATCH,), exc.errors
    try:
        parsed = _optional_numbers(form, OPTIONAL_NUMBERS, required)
    except FormError as exc:
        raise FormError({**batch_errors, **exc.errors}) from None
    if batch_errors:
        raise FormError(batch_errors)
    # the smallest candidate, as `mosaic plan` builds its envelope (a search sets each row's)
    values = {**{name: parsed[name] for name in required}, "global_batch": batches[0]}
    optional = {name: parsed[name] for name in OPTIONAL_NUMBERS}
    constraints = {name: str(form[f"plan.{name}"]).strip() or None
                   for name in CONSTRAINT_FIELDS}
    axes = _grid_fields(form, model)
    try:
        budget = dollar_budget_for(optional["budget_usd"], optional["price_per_gpu_hour"],
                                   optional["days"])
        envelope, space = build_inputs(
            gpu=form["plan.gpu"].strip() or None,
            system=str(form["plan.system"]).strip() or None, gpus_per_node=None,
            scale_out_gbps=optional["scale_out_gbps"],
            days=TABLE3_DAYS if optional["days"] is None else optional["days"],
            goodput=optional["goodput"], mtbf_gpu_hours=optional["mtbf_gpu_hours"],
            checkpoint_s=optional["checkpoint_s"], restart_s=optional["restart_s"] or 0.0,
            checkpoint_interval_s=optional["checkpoint_interval_s"],
            memory_fraction=optional["memory_fraction"],  # empty: the stack's headroom
            **axes, tpp=form["plan.tpp"],
            stack=get_stack(form["plan.stack"].strip()).name,
            precision=form["plan.precision"].strip(),
            quantised_gemms=str(form["plan.quantised_gemms"]).strip() or "all",
            optimizer=str(form["plan.optimizer"]).strip() or "adamw",
            optimizer_dtype=str(form["plan.optimizer_dtype"]).strip() or "fp32",
            dispatcher=str(form["plan.dispatcher"]).strip() or None,
            stack_version=str(form["plan.stack_version"]).strip() or None,
            max_total_params=constraints["max_total_params"],
            max_active_params=constraints["max_active_params"],
            unique_tokens=constraints["unique_tokens"], **values)
        envelope = replace(envelope, dollar_budget=budget)  # its window, if given
        # before the search, as the CLI does, on the node type's own GPUs (a per-node price
        # is divided by them, as `plan` and the sweeps say it; a review)
        check_price(optional["price_per_gpu_hour"], envelope.system.gpus_per_node)
        envelope.goodput.require_progress(envelope.n_devices)  # a form error, as before
        limits = plan_limits(envelope, space, pp=constraints["pp"], ep=constraints["ep"],
                             sharding=constraints["sharding"])
    except MosaicInputError as exc:
        raise FormError({plan_field_of(str(exc), set(form)):
                         in_form_words(str(exc), set(form))}) from None
    if envelope.n_devices > MAX_DEVICES:
        raise FormError({"plan.nodes": f"{envelope.n_devices} GPUs; the studio plans at most "
                                       f"{MAX_DEVICES} (use `mosaic plan` for more)"})
    n = len(space.enumerate())
    if n > MAX_GEOMETRIES:
        raise FormError({_longest_axis(form): f"the grid has {n} geometries; the studio plans "
                                              f"at most {MAX_GEOMETRIES} (use `mosaic plan` "
                                              "for more)"})
    # a searched batch profiles every geometry at each candidate (plan.batch.search_batch),
    # the work PlanJob.total counts: the limit holds for those pairs
    if n * len(batches) > MAX_GEOMETRIES:
        raise FormError({"plan.global_batch": (
            f"{n} geometries x {len(batches)} candidate batches = {n * len(batches)} "
            f"geometry-batch pairs; the studio plans at most {MAX_GEOMETRIES} (narrow the "
            "batch range, e.g. MIN:MAX, or the grid, or use `mosaic plan`)")})
    return envelope, space, limits


# The grid's fields: the ladder's seed or the model's depth and width, then E, K and G
GRID_AXES = {"ladder": ("plan.q",), "model": ("plan.layers", "plan.d_model")}
SHARED_GRID_AXES = ("plan.experts", "plan.top_k", "plan.split_factor")


def _longest_axis(form: dict[str, str]) -> str:
    """The grid field (of the form's grid) listing the most values: the one to shorten when
    the grid is too large (a trial grew q and saw the error under the experts field)."""
    axes = (*GRID_AXES.get(str(form.get("plan.grid", "ladder")), ()), *SHARED_GRID_AXES)
    return max(axes, key=lambda key: len([v for v in str(form.get(key, "")).split(",")
                                          if v.strip()]))


def _grid_fields(form: dict[str, str], model: Any) -> dict[str, Any]:
    """The grid's options of `mosaic plan`: the ladder's q, E, K, G, or (``plan.grid:
    model``) the editor's model as the backbone, with its depth, width, E, K and G varied
    where a field lists values and kept where it is empty."""
    grid = str(form["plan.grid"]).strip()
    if grid not in GRIDS:
        raise FormError({"plan.grid": f"allowed: {', '.join(GRIDS)}; got {grid!r}"})

    def text(name: str) -> str | None:
        return str(form[f"plan.{name}"]).strip() or None

    shape = {"layers": text("layers"), "d_model": text("d_model")}
    if grid == "ladder":  # every ladder axis as typed (an empty one is an error, as in the CLI)
        # the depth and width fields belong to the model grid: the page hides them under
        # the ladder, so what they still hold is not planned (a trial's plan was refused
        # by a message on a hidden field, and nothing on the page moved)
        return {"layers": None, "d_model": None,
                **{name: form[f"plan.{name}"]
                   for name in ("q", "experts", "top_k", "split_factor")}}
    if model is None:
        raise FormError({"plan.grid": "the model editor above has no valid model to plan "
                                      "around; fix its fields first"})
    return {**shape, "q": None, "backbone": model,
            **{name: text(name) for name in ("experts", "top_k", "split_factor")}}


@dataclass
class PlanJob:
    """State of one plan request (read by the status endpoint)."""

    job_id: int
    request: dict[str, str]
    state: str = "running"  # running, done, failed, cancelled, timed out
    done: int = 0
    total: int = 0  # geometries, times the candidate batches of a searched batch
    batches: int = 1  # candidate batches (1: a fixed batch)
    started_s: float = field(default_factory=time.monotonic)
    finished_s: float | None = None
    message: str = ""
    summary: dict[str, Any] | None = None


class PlanRunner:
    """Runs at most one plan at a time; keeps the last reports."""

    def __init__(self, calibration: Any, law: Any = None,
                 time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> None:
        self.calibration = calibration
        self.law = law
        self.time_limit_s = time_limit_s
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._current: PlanJob | None = None
        self._history: list[PlanJob] = []
        self._reports: OrderedDict[int, str] = OrderedDict()
        self._next_id = 1
        self._thread: threading.Thread | None = None

    # --- requests -------------------------------------------------------------------------
    def start(self, form: dict[str, str], model: Any = None) -> PlanJob:
        """Validate and start a plan (``model``: the backbone of a ``plan.grid: model``
        plan); PlanBusyError when one is running, FormError when invalid."""
        # a request that leaves the stack out plans on the profile's, as the page's form
        form = {"plan.stack": plan_form_defaults(self.calibration)["plan.stack"], **form}
        envelope, space, limits = validate_plan_form(form, model)
        price = plan_price(form)  # (checked with the rest just above)
        batches, rule = plan_batches(form)  # (and these)
        searched = () if rule is None else batches
        with self._lock:
            if self._current is not None and self._current.state == "running":
                current = self._current
                progress = f"{current.done}/{current.total} {_unit(current)}"
                # a cancel stops the search at its next progress report: a plan asked for
                # in between was told to cancel the plan it had just cancelled (a trial)
                raise PlanBusyError(
                    f"plan {current.job_id} is stopping (cancelled at {progress}); start "
                    "this plan again once its status says cancelled"
                    if self._cancel.is_set() else
                    f"plan {current.job_id} is still running ({progress}); cancel it or "
                    "wait for it to finish")
            job = PlanJob(job_id=self._next_id, request=dict(form),
                          total=len(space.enumerate()) * max(1, len(searched)),
                          batches=max(1, len(searched)))
            self._next_id += 1
            self._current = job
            self._cancel.clear()
        self._thread = threading.Thread(target=self._run,
                                        args=(job, envelope, space, limits, price,
                                              searched, rule),
                                        name=f"mosaic-plan-{job.job_id}", daemon=True)
        self._thread.start()
        return job

    def cancel(self) -> bool:
        """Ask the running plan to stop at its next progress report."""
        with self._lock:
            running = self._current is not None and self._current.state == "running"
        if running:
            self._cancel.set()
        return running

    def report(self, job_id: int) -> str | None:
        with self._lock:
            return self._reports.get(job_id)

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until the worker thread ends (tests and shutdown)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def status(self) -> dict[str, Any]:
        with self._lock:
            job = self._current
            history = [self._describe(j) for j in self._history[-KEPT_REPORTS:]]
            return {"current": None if job is None else self._describe(job),
                    "history": history, "time_limit_s": self.time_limit_s}

    def _describe(self, job: PlanJob) -> dict[str, Any]:
        end = job.finished_s if job.finished_s is not None else time.monotonic()
        return {"id": job.job_id, "state": job.state, "done": job.done, "total": job.total,
                "batches": job.batches,
                "elapsed_s": round(end - job.started_s, 2), "message": job.message,
                "summary": job.summary, "request": job.request,
                "report_url": (f"/report/{job.job_id}" if job.job_id in self._reports
                               else None)}

    # --- worker ---------------------------------------------------------------------------
    def _progress(self, job: PlanJob) -> Any:
        def update(done: int, total: int) -> None:
            job.done, job.total = done, total
            if done >= total:  # every geometry searched: what is left is the ranking, so a
                return  # late cancel or limit would throw a finished plan away (a trial)
            if self._cancel.is_set():
                raise _StoppedError("cancelled")
            if time.monotonic() - job.started_s > self.time_limit_s:
                raise _StoppedError("timed out")
        return update

    def _batch_progress(self, job: PlanJob, batches: tuple[int, ...], n: int,
                        last: int | None) -> Any:
        """The progress of a batch search (:func:`mosaic.plan.batch.search_batch` searches
        each candidate batch in increasing order, over the ``n`` geometries its rule leaves):
        the pairs of earlier batches, and this batch's pruned geometries, count as done. The
        end of ``last``, the largest batch the rule leaves any geometry
        (:func:`mosaic.plan.batch.searched_batches`), is the end of the search: the batches
        after it are pruned whole (a late cancel threw such a finished plan away)."""
        update = self._progress(job)

        def at_batch(batch: int) -> Any:
            before = sorted(batches).index(batch) * n

            def step(done: int, total: int) -> None:
                if batch == last and done >= total:
                    update(job.total, job.total)
                else:
                    update(before + n - total + done, job.total)
            return step
        return at_batch

    def _run(self, job: PlanJob, envelope: Any, space: Any, limits: Any,
             price_per_gpu_hour: float | None, batches: tuple[int, ...] = (),
             rule: Any = None) -> None:
        try:
            document = self._search(job, envelope, space, limits, price_per_gpu_hour,
                                    batches, rule)
            html = _render(document)
            with self._lock:
                self._reports[job.job_id] = html
                while len(self._reports) > KEPT_REPORTS:
                    self._reports.popitem(last=False)
            job.summary = _summary(document)
            job.state, job.message = "done", "finished"
        except _StoppedError as stop:
            job.state = stop.why
            # a stopped search has no optimum to report (the ranking needs every
            # geometry); say what to change (a trial found only the count)
            job.message = (f"stopped after {job.done}/{job.total} {_unit(job)}, no report: "
                           + (f"the studio's limit is {self.time_limit_s:g} s; narrow the "
                              "grid (fewer q, expert or top-k values) or restart the studio "
                              "with a larger --plan-time-limit-s, or run `mosaic plan`"
                              if stop.why == "timed out" else "cancelled"))
        except MosaicInputError as exc:
            # why nothing is trainable, in the form's words ("loosen pp 3 or choose nodes"
            # where the CLI says --pp 3 and --nodes: a trial looked for the flags)
            job.state, job.message = "failed", in_form_words(str(exc), set(DEFAULT_PLAN_FORM))
        except Exception as exc:  # a bug: keep the server alive and say what happened
            job.state, job.message = "failed", f"internal error ({type(exc).__name__}: {exc})"
        finally:
            job.finished_s = time.monotonic()
            with self._lock:
                self._history.append(job)

    def _search(self, job: PlanJob, envelope: Any, space: Any, limits: Any,
                price_per_gpu_hour: float | None, batches: tuple[int, ...] = (),
                rule: Any = None) -> dict[str, Any]:
        """The library calls `mosaic plan --json` makes, with this job's progress hook: a
        fixed batch's search, or (``batches`` and their ``rule``) the batch search of
        `mosaic plan --global-batch auto|MIN:MAX`."""
        from mosaic.jsonable import to_jsonable
        from mosaic.law import default_law
        from mosaic.plan.batch import search_batch, searched_batches
        from mosaic.plan.cost import plan_cost
        from mosaic.plan.search import search
        from mosaic.report import plan_report
        from mosaic.report.plan_result import plan_result_document

        law = self.law or default_law()
        if batches:
            n = len(space.enumerate())
            last = (searched_batches(envelope, space, law, batches, rule) or (None,))[-1]
            result, choice = search_batch(envelope, space, law, self.calibration, batches,
                                          rule, limits,
                                          progress=self._batch_progress(job, batches, n,
                                                                        last),
                                          workers=1)
            job.done = job.total  # (batches the rule pruned whole report no progress)
            batch = choice.to_dict()
        else:
            result = search(envelope, space, law, self.calibration, limits,
                            progress=self._progress(job), workers=1)
            batch = {"mode": "fixed", "global_batch": envelope.global_batch}
        if result.optimum_index is None:
            raise MosaicInputError(plan_report.untrainable_message(result))
        document, _ = plan_result_document(
            result, law, self.calibration, plan_cost(result, price_per_gpu_hour),
            extra={"batch": batch})
        return to_jsonable(document)


def _unit(job: PlanJob) -> str:
    """What a plan's progress counts: geometries, or with a searched batch each geometry at
    each candidate batch."""
    return "geometries" if job.batches == 1 else "geometry-batch pairs"


def _render(document: dict[str, Any]) -> str:
    from mosaic.report.html import render_report

    return render_report(document, "plan")


def _summary(document: dict[str, Any]) -> dict[str, Any]:
    from mosaic.report.plan_report import geometry_label

    o = document["optimum"]
    e = document["envelope"]
    # the goodput that scaled the tokens (D = tokens/s x T x goodput, Eq. 25), as the CLI's
    # envelope prints it (a trial's Young-Daly plan showed its tokens with no goodput)
    return {"cluster": f"{e['nodes']} × {e['system']}", "days": e["days"],
            "goodput": e["goodput"]["goodput"], "goodput_model": e["goodput"]["model"],
            "geometry": geometry_label(o),
            # the optimum's batch, and whether it was searched (under which rule), as `mosaic
            # plan` prints it ("B_global 2048 ... (searched; the optimum's)")
            "global_batch": o["global_batch"], "batch_mode": document["batch"]["mode"],
            "batch_rule": document["batch"].get("rule", {}).get("name"),
            "sparsity": o["sparsity"], "n_active": o["n_active"], "tokens": o["tokens"],
            "mfu": o["mfu"], "loss": o["loss"], "trainable": document["counts"]["trainable"],
            "geometries": document["counts"]["geometries"]}
