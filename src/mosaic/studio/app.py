"""The studio's web app (FastAPI): a static page plus a small JSON API over the library.

Every answer comes from the functions the CLI calls (`mosaic perf` -> ``predict_job`` and
``prediction_document``, `mosaic layouts` -> ``search_layouts`` and ``search_document``,
`mosaic plan` -> ``search`` and the plan documents); the page only draws. Imported only
by `mosaic studio` (FastAPI is the ``mosaic[studio]`` extra). Work per request is bounded:
form size, device counts, one plan at a time under a time limit.
"""

from __future__ import annotations

import contextlib
import json
import time
from importlib import resources
from typing import TYPE_CHECKING, Any, get_args

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from mosaic.errors import MosaicInputError, shown
from mosaic.export.targets import TARGETS
from mosaic.schema_validation import parse_json
from mosaic.studio.jobs import (
    DEFAULT_FORM,
    GENERAL,
    MODEL_SOURCES,
    SWITCH_CHOICES,
    FormError,
    check_form_layout,
    export_yaml,
    form_text,
    predict_form,
    validate_form,
)
from mosaic.studio.plan_runner import (
    DEFAULT_PLAN_FORM,
    GRIDS,
    PlanBusyError,
    PlanRunner,
    plan_form_defaults,
)

if TYPE_CHECKING:
    from mosaic.config.job_schema import JobSpec
    from mosaic.perf.calibration import Calibration

MAX_BODY_BYTES = 1_000_000
MAX_LAYOUT_DEVICES = 65536  # layout enumeration grows with the divisors of the device count
LAYOUT_ROWS = 200  # rows of the layout table sent to the page
INFEASIBLE_ROWS = 50
MAX_REPORT_DIGITS = 18  # a plan number of /report/N (an int64; plans are numbered from 1)


def _static(name: str) -> str:
    return resources.files("mosaic.studio").joinpath("static", name).read_text()


def _json(payload: Any, status: int = 200) -> Any:
    from mosaic.jsonable import to_jsonable

    return Response(json.dumps(to_jsonable(payload)), status_code=status,
                    media_type="application/json")


def _errors(errors: dict[str, str], status: int = 422) -> Any:
    return _json({"ok": False, "errors": errors}, status)


def options_document(job_document: dict[str, Any] | None,
                     calibration: Calibration | None = None) -> dict[str, Any]:
    """Choices of the page's selects and the initial forms. A `--job` file that names no
    stack is on ``calibration``'s, as `mosaic perf FILE --calibration` reads it
    (job_schema.on_default_stack; `mosaic calibrate` names the stack of its runs): the
    studio predicted and planned such a job on megatron-core. The editor's own starting
    job keeps its stack, whose layout it states."""
    from mosaic.config.job_schema import PerformanceBlock, on_default_stack
    from mosaic.hardware import get_system, list_systems
    from mosaic.perf.plan import Checkpointing, Sharding
    from mosaic.perf.workload import OptimizerDtype, OptimizerKind, Precision, QuantisedGemms
    from mosaic.plan.inputs import PRECISION_NAMES
    from mosaic.stacks.registry import known_stacks

    form = dict(DEFAULT_FORM)
    if job_document is not None:
        form.update(form_from_job(on_default_stack(
            job_document, None if calibration is None else calibration.stack)[0]))
    return {
        "systems": list(list_systems()),
        "stacks": list(known_stacks()),
        "sharding": [s.name.lower() for s in Sharding],
        "checkpointing": [c.name.lower() for c in Checkpointing],
        # the job schema's precision names (mxfp8, nvfp4 too), not only the peak-FLOP/s
        # lanes; plain fp4 is the schema's alias of nvfp4 and is not offered twice
        "precisions": [name for name in
                       get_args(PerformanceBlock.model_fields["precision"].annotation)
                       if name != Precision.FP4.value],
        # `mosaic plan --precision`'s names: the lanes and the FP8/FP4 recipes (fp8-cs, ...)
        "plan_precisions": [name for name in PRECISION_NAMES if name != Precision.FP4.value],
        # an empty first choice leaves it to the job file, else the schema's default: a
        # select without one sent its first choice, and the page's export stated
        # `quantised_gemms: all` (a trial; the switches' empty choice, SWITCH_CHOICES)
        "quantised_gemms": ["", *(str(q) for q in QuantisedGemms)],
        "optimizers": [str(o) for o in OptimizerKind],
        "optimizer_dtypes": [str(d) for d in OptimizerDtype],
        "switches": list(SWITCH_CHOICES),
        # what a select's empty choice reads as, by its choices' name
        "empty_choices": {"switches": "(job or recipe)",
                          "quantised_gemms": "(job or "
                          f"{PerformanceBlock.model_fields['quantised_gemms'].default})"},
        "model_sources": list(MODEL_SOURCES) if job_document is not None
        else [s for s in MODEL_SOURCES if s != "job"],
        "form": form,
        "plan_form": plan_form_from_job(form) if job_document is not None
        else plan_form_defaults(calibration),
        # the plan form follows the job editor's cluster, batch and stack until its own
        # field is typed in (a trial picked DGX-H100 x 16 above and planned on B200 x 32)
        "plan_fields_from_job": PLAN_FIELDS_FROM_JOB,
        "system_gpus": {name: get_system(name).device.name for name in list_systems()},
        "export_targets": _export_targets(),
        "layout_searched_fields": list(LAYOUT_SEARCHED_FIELDS),
        "grids": list(GRIDS),
    }


# The plan-form fields a job's form fills, by the job field that holds each
PLAN_FIELDS_FROM_JOB = {"plan.global_batch": "batch.global_seqs", "plan.seq_len": "batch.seq_len",
                        "plan.nodes": "hardware.nodes", "plan.stack": "performance.stack",
                        "plan.precision": "performance.precision",
                        "plan.quantised_gemms": "performance.quantised_gemms",
                        "plan.stack_version": "performance.stack_version",
                        "plan.dispatcher": "parallelism.dispatcher",
                        "plan.optimizer": "optimizer.kind",
                        "plan.optimizer_dtype": "performance.optimizer_dtype"}


def plan_form_from_job(form: dict[str, str]) -> dict[str, str]:
    """The plan form of a studio opened on a job: the job's node type (so its GPU),
    node count, batch, sequence length, stack, its release and dispatcher, precision and
    optimizer (a studio started from a Megatron-Bridge H100 job planned on megatron-core
    B200s; one opened on a catalog node type planned on the GPU's default node type, another
    network; one on a Bridge 26.04 HybridEP job planned on the stack's defaults: trials; a
    Muon job's plan was costed with AdamW's state: a review)."""
    from mosaic.hardware import get_system

    system = get_system(form["hardware.system"])
    taken = {plan_key: form[job_key] for plan_key, job_key in PLAN_FIELDS_FROM_JOB.items()
             if job_key in form}
    return {**DEFAULT_PLAN_FORM, "plan.gpu": system.device.name, "plan.system": system.name,
            **taken}


def _export_targets() -> list[str]:
    return [t for t in TARGETS if t != "yaml"]  # the page offers the job YAML itself


def model_summary(geometry: Any) -> dict[str, Any]:
    """Parameter counts of the edited model (`mosaic perf`'s, report.prediction_document)."""
    from mosaic.report.prediction_document import geometry_counts

    moe = geometry.moe
    return {"layers": geometry.layers, "d_model": geometry.d_model, **geometry_counts(geometry),
            "experts": None if moe is None else moe.experts,
            "top_k": None if moe is None else moe.top_k}


def form_from_job(document: dict[str, Any]) -> dict[str, str]:
    """Form fields of a job file's blocks (its model stays the job's own): every field as the
    CLI resolves it (defaults, the release's recipe), so the editor's defaults never stand
    in for what the job leaves to the schema."""
    from mosaic.config.job_schema import canonical_job_document, job_document, job_from_document
    from mosaic.hardware import get_system

    form = {"model.source": "job"}
    canonical = as_stated = canonical_job_document(document, "job")
    with contextlib.suppress(MosaicInputError):  # an incomplete job: its own fields only
        canonical = job_document(job_from_document(document, "job"))
    for block, fields in canonical.items():
        if block in ("model", "search") or not isinstance(fields, dict):
            continue
        for name, value in fields.items():
            if isinstance(value, bool):  # the switches' spelling (SWITCH_CHOICES)
                form[f"{block}.{name}"] = str(value).lower()
            elif value is not None and not isinstance(value, dict | list):
                form[f"{block}.{name}"] = str(value)
    # the editor has no dp field: dp is what the node count leaves (jobs.job_document). The
    # job's resolved dp in this form refused an API client's edit of the node count that
    # posted it back ("make them equal"; a trial)
    form.pop("parallelism.dp", None)
    # Fields shown as the job states them, not as they resolve (empty: not stated):
    # - the row choices: a resolved "false" of a tp 1 job would state sequence parallelism
    #   off for a tp 2 edit, which the CLI turns on;
    # - the pipeline split ("empty: none stated"): a release recipe's split for the job's
    #   pp·vpp (deepseek_v3_h100.yaml: 'Et|(tt|)*30mL' for 8·4) was shown and so stated, and
    #   an edit of pp or vpp was refused for its chunk count, where `mosaic perf --set
    #   parallelism.pp=4` splits the edited stages by the recipe (a trial);
    # - the page's switches ("job or recipe", SWITCH_CHOICES): a Bridge 26.06 MXFP8 recipe's
    #   fused grouped MLP shown as 'true' was stated, and an edit to bf16 was refused for it,
    #   where `mosaic perf --set performance.precision=bf16` turns it off (a trial)
    for block, names in (("parallelism", (*ROW_CHOICES, "pipeline_layout")),
                         ("performance", RECIPE_SWITCHES)):
        fields = as_stated.get(block)
        for name in names:
            value = fields.get(name) if isinstance(fields, dict) else None
            form[f"{block}.{name}"] = ("" if value is None else str(value).lower()
                                       if isinstance(value, bool) else str(value))
    stated = as_stated.get("parallelism")
    # a stated dispatcher as stated: the write-back leaves a DeepEP the layout refuses (etp·ep
    # = 1) unstated as a stack's default, and the plan form then planned a Megatron-Core job's
    # stated DeepEP on the all-to-all (a review)
    if isinstance(stated, dict) and stated.get("dispatcher") is not None:
        form["parallelism.dispatcher"] = str(stated["dispatcher"])
    system = get_system(form.get("hardware.system", DEFAULT_FORM["hardware.system"]))
    form["hardware.system"] = system.name  # the catalog's spelling (the select's option)
    devices = (canonical.get("search") or {}).get("devices")
    if devices and "hardware.nodes" not in form:  # the editor counts nodes
        form["hardware.nodes"] = str(max(1, int(devices) // system.gpus_per_node))
    return form


# The page's performance switches a stack release's recipe may resolve (studio.js JOB_FIELDS,
# "select:switches"): the editor shows them as stated only
RECIPE_SWITCHES = ("uneven_stages", "fused_grouped_mlp", "fp8_dot_product_attention")
# Layout fields a job may state that the layout search replaces with its own choice
SEARCHED_AWAY = ("dp", "pipeline_layout")
# Layout fields the search chooses per row whatever the job states (perf.layouts): the
# editor shows them as stated only (empty: the job's, or the default for the layout)
ROW_CHOICES = ("sequence_parallel", "hsdp_shard")
# The job fields a layouts row sets: the search's rows stay the edited job's while only
# these change (the page greys them after any other edit)
LAYOUT_SEARCHED_FIELDS = (*(f"parallelism.{name}" for name in (
    "tp", "pp", "vpp", "cp", "ep", "etp", *SEARCHED_AWAY, "sharding", *ROW_CHOICES)),
    "batch.micro_seqs", "performance.checkpointing")


def _without_searched_layout(document: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job file without the layout fields the search chooses (:data:`SEARCHED_AWAY`,
    under either spelling of the parallelism block)."""
    if document is None:
        return None
    trimmed = dict(document)
    for block in ("parallelism", "parallel"):
        if isinstance(trimmed.get(block), dict):
            trimmed[block] = {k: v for k, v in trimmed[block].items() if k not in SEARCHED_AWAY}
    return trimmed


def create_app(job_document: dict[str, Any] | None = None, calibration: Any = None,
               plan_time_limit_s: float | None = None, record: JobSpec | None = None) -> Any:
    """The FastAPI app; ``job_document`` is the parsed `--job` file (its model can be
    chosen in the editor). ``record``: the run record's job spec (server.load_run_record)
    when `--job` names one: predicted against its device as `mosaic perf` reads a record,
    its layouts searched under the planning headroom as `mosaic layouts` searches one, and
    explained against its measured step as `mosaic explain` explains it."""
    from mosaic.perf.calibration import load_calibration

    calibration = calibration or load_calibration(None)
    job_is_record = record is not None
    runner = PlanRunner(calibration, **({} if plan_time_limit_s is None
                                        else {"time_limit_s": plan_time_limit_s}))
    app = FastAPI(title="mosaic studio", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.runner = runner
    plotly_cache: dict[str, str] = {}

    async def read_form(request: Request, key: str = "form") -> dict[str, str]:
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            raise FormError({GENERAL: f"request larger than {MAX_BODY_BYTES} bytes"})
        try:
            payload = parse_json(body or b"{}", "request body")
        except MosaicInputError:
            raise FormError({GENERAL: "request body is not JSON"}) from None
        form = payload.get(key) if isinstance(payload, dict) else None
        if not isinstance(form, dict):
            raise FormError({GENERAL: f"request needs a '{key}' object"})
        return {str(k): form_text(v) for k, v in form.items()}

    @app.exception_handler(FormError)
    async def form_error(_request: Request, exc: FormError) -> Any:
        return _errors(exc.errors)

    @app.exception_handler(MosaicInputError)
    async def input_error(_request: Request, exc: MosaicInputError) -> Any:
        return _errors({GENERAL: str(exc)})

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, exc: Exception) -> Any:
        return _errors({GENERAL: f"internal error ({type(exc).__name__}: {exc}); this is a "
                                 "bug in mosaic, please report it"}, 500)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return _static("index.html")

    @app.get("/favicon.ico")
    def favicon() -> Any:
        return Response(status_code=204)

    @app.get("/assets/{name}")
    def asset(name: str) -> Any:
        from mosaic.report.html.page import asset_text, plotly_js

        types = {".js": "text/javascript", ".css": "text/css"}
        if name == "plotly.js":
            if "js" not in plotly_cache:
                plotly_cache["js"] = plotly_js()
            text = plotly_cache["js"]
        elif name in ("table.js", "figures.js", "report.css"):
            text = asset_text(name)
        elif name in ("studio.js", "studio.css"):
            text = _static(name)
        else:
            return PlainTextResponse("not found", status_code=404)
        return Response(text, media_type=types[name[name.rfind("."):]])

    @app.get("/api/options")
    def options() -> Any:
        return _json(options_document(job_document, calibration))

    @app.post("/api/perf")
    async def perf(request: Request) -> Any:
        form = await read_form(request)
        return predict_response(form)

    def predict_response(form: dict[str, str]) -> Any:
        from mosaic.report.html.breakdown import (
            layout_label,
            memory_breakdown_figure,
            step_breakdown_figure,
        )
        from mosaic.report.html.page import figure_json
        from mosaic.report.prediction_document import prediction_document

        start = time.perf_counter()
        job, result = predict_form(form, job_document, calibration)
        document = prediction_document(result, calibration)
        predict_ms = (time.perf_counter() - start) * 1e3
        name = layout_label(document["plan"])
        figures = {
            "step": figure_json(step_breakdown_figure([(name, document["breakdown_s"])],
                                                      document["labels"])),
            "memory": figure_json(memory_breakdown_figure(
                [(name, document["memory_breakdown_bytes"])], result.machine.hbm_bytes,
                usable_fraction=result.machine.usable_memory_fraction)),
        }
        return _json({"ok": True, "prediction": document, "figures": figures,
                      "layout": name, "model": model_summary(job.geometry),
                      "predict_ms": predict_ms,
                      "total_ms": (time.perf_counter() - start) * 1e3})

    @app.post("/api/explain")
    async def explain(request: Request) -> Any:
        form = await read_form(request)
        return explain_response(form)

    def explain_response(form: dict[str, str]) -> Any:
        """What bounds the edited job and its levers, as `mosaic explain` ranks them, with
        the report's lever chart; for a run record's job as recorded, its measured-vs-
        predicted gap as `mosaic explain RUNS.yaml#ID` prints it (rows and findings)."""
        from mosaic.evaluate.diagnosis import diagnose
        from mosaic.evaluate.job import recorded_measurement
        from mosaic.report.explain_document import (
            explain_document,
            levers_that_fit_text,
            measured_gap_rows,
        )
        from mosaic.report.html.explain_page import lever_figure
        from mosaic.report.html.page import figure_json

        start = time.perf_counter()
        _, result = predict_form(form, job_document, calibration)
        measured = recorded_measurement(result.spec, record)
        document = explain_document(diagnose(result, calibration, measured), calibration)
        gap = document["gap"]
        return _json({"ok": True, "bound": document["bound"]["summary"],
                      "fit": levers_that_fit_text(document),
                      "gap": None if gap is None else {
                          "rows": measured_gap_rows(gap, record.assumptions),
                          "findings": gap["findings"]},
                      # a record edited into a what-if: why no gap is shown
                      "gap_note": None if gap is not None or record is None
                      or record.measured_step_time_s is None else
                      "the edited job is not the recorded run: its measured step "
                      f"({record.measured_step_time_s:.4g} s) is not compared",
                      "levers": document["levers"],
                      "figure": figure_json(lever_figure(document["levers"])),
                      "explain_ms": (time.perf_counter() - start) * 1e3})

    @app.post("/api/compare")
    async def compare(request: Request) -> Any:
        from mosaic.report.html.breakdown import (
            memory_breakdown_figure,
            memory_limit_lines,
            step_breakdown_figure,
        )
        from mosaic.report.html.page import figure_json
        from mosaic.report.prediction_document import prediction_document

        try:
            body = parse_json(await request.body() or b"{}", "request body")
        except MosaicInputError:
            raise FormError({GENERAL: "request body is not JSON"}) from None
        forms = body.get("forms") if isinstance(body, dict) else None
        if (not isinstance(forms, list) or len(forms) != 2
                or not all(isinstance(f, dict) for f in forms)):
            raise FormError({GENERAL: "compare needs two forms"})
        documents = []
        for form in forms:
            _, result = predict_form({str(k): form_text(v) for k, v in form.items()},
                                     job_document, calibration)
            documents.append(prediction_document(result, calibration))
        bars = [("A", documents[0]), ("B", documents[1])]
        return _json({"ok": True, "predictions": documents, "figures": {
            "step": figure_json(step_breakdown_figure(
                [(n, d["breakdown_s"]) for n, d in bars], documents[0]["labels"],
                "Step time: A vs B")),
            # each side's own memory lines when A and B run on different GPUs (a trial's
            # out-of-memory B sat under A's lines)
            "memory": figure_json(memory_breakdown_figure(
                [(n, d["memory_breakdown_bytes"]) for n, d in bars],
                title="Memory per GPU: A vs B", **memory_limit_lines(*documents)))}})

    @app.post("/api/layouts")
    async def layouts(request: Request) -> Any:
        form = await read_form(request)
        return layouts_response(form)

    def layouts_response(form: dict[str, str]) -> Any:
        from mosaic.evaluate.job import cluster_for, searched_under_planning_headroom
        from mosaic.perf.layouts import (
            LayoutLimits,
            search_layouts,
            with_searched_remainder_last_layouts,
        )
        from mosaic.perf.machine import machine_for
        from mosaic.report.layout_search_document import out_of_memory_rows, search_document

        # the layout fields are searched: the job's own dp and pipeline layout (one pp·vpp
        # split) go, as `mosaic layouts` sets them aside (a trial: every exported plan,
        # which states dp, failed the search)
        form = {**form, "parallelism.tp": "1", "parallelism.pp": "1", "parallelism.cp": "1",
                "parallelism.vpp": "1", "parallelism.ep": "1", "parallelism.etp": "1",
                **{f"parallelism.{name}": "" for name in (*SEARCHED_AWAY, *ROW_CHOICES)}}
        job = validate_form(form, _without_searched_layout(job_document))
        spec = searched_under_planning_headroom(job.spec) if job_is_record else job.spec
        cluster = cluster_for(spec)
        if cluster.n_devices > MAX_LAYOUT_DEVICES:
            raise FormError({"hardware.nodes": f"{cluster.n_devices} GPUs; the studio searches "
                                               f"layouts of at most {MAX_LAYOUT_DEVICES}"})
        machine = machine_for(cluster, spec.workload.precision, spec.usable_memory_fraction,
                              fp8_recipe=spec.workload.fp8_recipe)
        start = time.perf_counter()
        # as `mosaic layouts`: an uneven_stages job's shapes split remainder last
        # within the job's search block, as `mosaic layouts` searches it
        limits = LayoutLimits(**spec.search_limits)
        workload = with_searched_remainder_last_layouts(spec.workload, cluster.n_devices,
                                                        limits)
        search = search_layouts(workload, machine, calibration, limits)
        if search.n_plans == 0:
            raise FormError({GENERAL: search.no_valid_layout_message(cluster.n_devices)})
        document = search_document(search, cluster, machine, LAYOUT_ROWS, True, calibration,
                                   workload)
        document["infeasible"]["out_of_memory_plans"] = out_of_memory_rows(search,
                                                                           INFEASIBLE_ROWS)
        document["search_ms"] = (time.perf_counter() - start) * 1e3
        return _json({"ok": True, **document})

    @app.post("/api/export")
    async def export_job(request: Request) -> Any:
        form = await read_form(request)  # also checks the body is a JSON object
        body = json.loads(await request.body())
        target = body.get("target", "yaml")
        if not isinstance(target, str) or target not in TARGETS:
            # the page's words, not the CLI's --to (a trial)
            raise FormError({GENERAL: f"export target {target!r} is not one of "
                                      f"{', '.join(TARGETS)}"})
        job = validate_form(form, job_document)
        check_form_layout(job, form)  # the layout rules `mosaic export` and `perf` apply
        if target == "yaml":
            return _json({"ok": True, "filename": "job.yaml",
                          "text": export_yaml(job, calibration)})
        from mosaic.export import export, spec_from_job

        try:
            result = export(spec_from_job(job.spec, "mosaic studio"), target)
        except MosaicInputError as exc:
            raise FormError({GENERAL: str(exc)}) from None
        return _json({"ok": True, "filename": f"launch{result.file_suffix}",
                      "text": result.text, "unsupported": result.unsupported})

    async def plan_model(request: Request, form: dict[str, str]) -> Any:
        """The editor's model (its `job` form), the backbone of a `plan.grid: model` plan."""
        if str(form.get("plan.grid", "")).strip() != "model":
            return None
        try:
            return validate_form(await read_form(request, "job"), job_document).geometry
        except FormError as exc:
            field, message = next(iter(exc.errors.items()))
            where = "" if field == GENERAL else f"{field}: "  # no internal key on the page
            raise FormError({"plan.grid": f"the model editor above is not valid "
                                          f"({where}{message})"}) from None

    @app.post("/api/plan")
    async def plan_start(request: Request) -> Any:
        form = await read_form(request)
        try:
            job = runner.start(form, await plan_model(request, form))
        except PlanBusyError as exc:
            return _json({"ok": False, "errors": {GENERAL: str(exc)}}, 409)
        return _json({"ok": True, "id": job.job_id, "total": job.total})

    @app.get("/api/plan/status")
    def plan_status() -> Any:
        return _json({"ok": True, **runner.status()})

    @app.post("/api/plan/cancel")
    def plan_cancel() -> Any:
        return _json({"ok": True, "cancelled": runner.cancel()})

    @app.get("/report/{job_id}", response_class=HTMLResponse)
    def plan_report(job_id: str) -> Any:
        # a plan number, said in words otherwise (FastAPI's int parsing answered with its
        # validation JSON, a trial); ASCII digits, few enough for int() (5,000 digits passed
        # str.isdigit and int() raised past Python's 4,300-digit limit: an internal error)
        if not (job_id.isascii() and job_id.isdigit()) or len(job_id) > MAX_REPORT_DIGITS:
            return PlainTextResponse(f"no report {shown(job_id)}: reports are numbered by plan, "
                                     "e.g. /report/1", status_code=404)
        html = runner.report(int(job_id))
        if html is None:
            return PlainTextResponse(f"no report {job_id} (reports are kept for the last "
                                     "plans of this session)", status_code=404)
        return HTMLResponse(html)

    return app
