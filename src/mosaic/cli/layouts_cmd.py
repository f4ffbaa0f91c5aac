"""`mosaic layouts`: every parallel layout of a job, ranked by predicted throughput."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    CalibrationOption,
    JsonFlag,
    SetOption,
    console,
    guarded,
    print_json,
    print_key_value_table,
)
from mosaic.cli.layout_options import (
    CheckpointingModes,
    Cp,
    Ep,
    Etp,
    MaxTp,
    MemoryFraction,
    Pp,
    ShardingModes,
    Tp,
    Vpp,
)
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.cli.progress import progress_reporter
from mosaic.cli.report_cmd import HtmlOption, check_html, write_html
from mosaic.cli.stream_table import plain_cells, plain_title
from mosaic.config.job_schema import (
    JobSpec,
    apply_overrides,
    canonical_job_document,
    load_job,
)
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import cluster_for, load_job_spec, searched_under_planning_headroom
from mosaic.hardware import Cluster
from mosaic.limits import check_range
from mosaic.perf.calibration import load_calibration
from mosaic.perf.constraints import rule_text
from mosaic.perf.coverage import shown_dimension_value
from mosaic.perf.layouts import (
    LayoutLimits,
    search_layouts,
    with_balanced_layouts,
    with_searched_remainder_last_layouts,
)
from mosaic.perf.machine import machine_for
from mosaic.plan.inputs import layout_limits
from mosaic.report.layout_search_document import job_limit_notes, search_document
from mosaic.report.plan_report import sharding_text
from mosaic.schema_validation import load_yaml_mapping
from mosaic.stacks import DEFAULT_STACK
from mosaic.units import GIB

TABLE_COLUMNS = ["#", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "sharding", "mbs", "ckpt",
                 "tok/s/GPU", "MFU", "step s", "GiB"]
LAYOUT_PLACEHOLDER = "parallelism.dp=1"
CHECKPOINTING_SHORT = {"none": "none", "selective": "sel", "full": "full"}


# --- Input ---------------------------------------------------------------------------------
# The job fields the search replaces, and the option that pins each (None: derived).
SEARCHED_FIELDS = {"parallelism.tp": "--tp", "parallelism.pp": "--pp", "parallelism.vpp": "--vpp",
                   "parallelism.cp": "--cp", "parallelism.ep": "--ep", "parallelism.etp": "--etp",
                   "parallelism.dp": None, "parallelism.sharding": "--sharding",
                   "parallelism.hsdp_shard": "--sharding", "batch.micro_seqs": "--mbs",
                   "performance.checkpointing": "--checkpointing"}


def check_searched_overrides(overrides: list[str]) -> None:
    """A --set of a field the search replaces would be dropped without a word (a trial:
    `layouts --set parallelism.ep=16` ranked every ep): refused, naming the option that
    pins it."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() in SEARCHED_FIELDS:
            option = SEARCHED_FIELDS[key.strip()]
            how = (f"pin it with {option} {value.strip()}" if option is not None
                   else "it follows from the GPUs and the other degrees")
            raise MosaicInputError(f"--set {override}: `mosaic layouts` searches this field "
                                   f"and would ignore the value; {how}")



def _gives_devices(document: dict[str, Any]) -> bool:
    """Whether a canonical job document sets search.devices."""
    search = document.get("search") or {}
    return isinstance(search, dict) and search.get("devices") is not None


def load_search_job(path: Path, overrides: list[str], devices: int | None,
                    model: dict[str, Any] | None = None, default_stack: str | None = None,
                    memory_fraction: float | None = None
                    ) -> tuple[JobSpec, Cluster, dict[str, Any]]:
    """The job and cluster of a job file, ignoring its layout, and the parallelism block it
    states (empty for a run record), whose degrees the search replaces.

    GPUs: ``devices`` if given, else ``search.devices``, else ``hardware.nodes``. The
    parallelism block must be well-formed but its degrees are not checked: dp=1 is set
    so that any layout validates, and the search replaces the whole layout. A run record
    (``RUNS.yaml#ID``) loads as ``validate`` reads it; its GPUs are the run's.
    ``memory_fraction`` (--memory-fraction) replaces the share of device memory a layout
    may fill: a job file's ``hardware.usable_memory_fraction``, a record's planning headroom.
    """
    from mosaic.config.run_records import is_run_record_document, split_record_reference
    from mosaic.perf.headroom import memory_headroom

    if devices is not None:  # bounded before the divisor enumeration sizes arrays by it
        check_range("--devices", devices, "devices", integer=True)
    document = load_yaml_mapping(split_record_reference(path)[0])
    if is_run_record_document(document):
        spec = load_job_spec(path, overrides, model)
        if devices is not None:
            spec = replace(spec, n_devices=devices)
        spec = searched_under_planning_headroom(spec, memory_fraction)
        return spec, cluster_for(spec), {}
    if memory_fraction is not None:  # refused out of (0, 1] as plan refuses it
        fraction = memory_headroom(memory_fraction, DEFAULT_STACK).usable_fraction
        overrides = [*overrides, f"hardware.usable_memory_fraction={fraction!r}"]
    spec = load_job(path, [*overrides, LAYOUT_PLACEHOLDER], model=model,
                    default_stack=default_stack)
    canonical = canonical_job_document(document, str(path), set())
    if devices is not None:
        spec = replace(spec, n_devices=devices, nodes=None)
    elif not _gives_devices(apply_overrides(canonical, overrides, set())):
        if spec.nodes is None:
            raise MosaicInputError(f"{path}: give --devices, search.devices or hardware.nodes")
        spec = replace(spec, n_devices=None)
    return spec, cluster_for(spec), canonical.get("parallelism") or {}


# --- Output --------------------------------------------------------------------------------
def _table_cells(row: dict[str, Any]) -> list[str]:
    return [
        *(str(row[name]) for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")),
        sharding_text(row), str(row["micro_batch"]), CHECKPOINTING_SHORT[row["checkpointing"]],
        f"{row['tokens_per_s_per_gpu']:,.0f}", f"{row['mfu']:.2%}",
        f"{row['step_time_s']:.3f}", f"{row['memory_gib']:.1f}",
    ]


def _print_compact_table(title: str, columns: list[str], rows: list[list[str]],
                         wrap: bool = False) -> None:
    """A table with one-space column gaps (15 columns fit 80 characters); numbers are
    right-aligned, wrapped text left-aligned."""
    table = Table(title=plain_title(title), title_justify="left", box=box.SIMPLE_HEAD,
                  padding=0, show_edge=False)
    for column in columns:
        table.add_column(column, justify="left" if wrap else "right", no_wrap=not wrap)
    for row in rows:
        table.add_row(*plain_cells(row))
    console.print(table)


def _render(document: dict[str, Any], capacity_gib: float) -> None:
    hardware = document["hardware"]
    console.print(
        f"{hardware['description']}; {document['n_candidates']:,} "
        f"candidate layouts, {document['n_plans']:,} pass the divisibility rules, "
        f"{document['n_feasible']:,} fit in {hardware['usable_memory_fraction']:.0%} of "
        f"{capacity_gib:.1f} GiB per GPU. "
        f"MFU against the {document['mfu_peak']}.", highlight=False)
    for line in job_limit_notes(document):
        console.print(line, highlight=False)
    rows = document["rows"]
    if rows:
        _print_compact_table("Layouts by predicted throughput", TABLE_COLUMNS,
                             [[str(r["rank"]), *_table_cells(r)] for r in rows])
        for row in rows:  # the stated, recipe or balanced layout the pipelined rows ran
            if "pipeline_layout" in row:
                console.print(f"#{row['rank']} pipeline layout: {row['pipeline_layout']}",
                              highlight=False)
        _render_coverage(document)
    else:
        console.print("No layout fits in memory.", highlight=False)
    infeasible = document["infeasible"]
    if "out_of_memory_plans" in infeasible:
        _render_infeasible(infeasible)
    else:
        rejected = sum(item["plans"] for item in infeasible["rejected"])
        console.print(f"{_over_memory_text(infeasible)}, {rejected:,} break a divisibility "
                      "rule (--show-infeasible lists them).", highlight=False)


def _over_memory_text(infeasible: dict[str, Any]) -> str:
    """'N layouts do not fit the usable memory (M of them under device memory, over the
    planning headroom)', or 'N layouts run out of memory' when none is under the device's
    memory (a review: the headroom's refusals were counted as out of memory)."""
    over, headroom = infeasible["out_of_memory"], infeasible["over_planning_headroom"]
    if not headroom:
        return f"{over:,} layouts run out of memory"
    return (f"{over:,} layouts do not fit the usable memory ({headroom:,} of them under "
            "device memory, over the planning headroom: --memory-fraction)")


def _render_coverage(document: dict[str, Any]) -> None:
    """The best layout's envelope verdict and intervals, and other rows outside it."""
    print_key_value_table(f"Layout #1 against calibration {document['calibration']!r} "
                          "(intervals from held-out residuals)",
                          [tuple(row) for row in document["coverage_summary"]])
    others = [f"#{r['rank']}: " + ", ".join(f"{o['dimension']}={shown_dimension_value(o['value'])}"
                                           for o in r["coverage"]["outside"])
              for r in document["rows"][1:] if r["coverage"]["outside"]]
    if others:
        console.print("Also outside the calibrated envelope: " + "; ".join(others),
                      highlight=False)
    inside = document.get("best_inside_envelope")
    if inside is not None:
        best = document["rows"][0]["tokens_per_s_per_gpu"]
        degrees = " ".join(f"{axis}{inside[axis]}" for axis in
                           ("tp", "pp", "vpp", "cp", "ep", "etp", "dp"))
        console.print(
            f"Best layout inside the calibrated envelope: #{inside['rank']} ({degrees} "
            f"{sharding_text(inside)} mbs{inside['micro_batch']} {inside['checkpointing']}), "
            f"{inside['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU "
            f"({inside['tokens_per_s_per_gpu'] / best - 1:+.0%} against #1): runs like it "
            "are what the model was checked on, #1 lies beyond them", highlight=False)


def _render_infeasible(infeasible: dict[str, Any]) -> None:
    plans = infeasible["out_of_memory_plans"]
    if plans:
        _print_compact_table("Over the usable memory (out of memory, or over the planning "
                             "headroom), closest to fitting first (over: GiB)",
                             [*TABLE_COLUMNS[1:], "over"],
                             [[*_table_cells(r), f"{r['overshoot_gib']:.2f}"] for r in plans])
    rejected = infeasible["rejected"]
    if rejected:
        _print_compact_table("Rejected by the divisibility rules (first broken rule)",
                             ["rule", "layouts", "example"],
                             [[rule_text(item["rule"]), f"{item['plans']:,}", item["example"]]
                              for item in rejected], wrap=True)


def with_job_search_limits(options: dict[str, Any], stated: dict[str, Any]
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The layout options (``layout_limits``' keywords) with each limit the job's search
    block states (``JobSpec.search_limits``) where the option is not given, and the limits
    taken from the job."""
    merged, from_job = dict(options), {}
    # tp's pins and cap go together: an option for one sets aside the job's other (a review:
    # a job's max_tp 2 with --tp 4 was refused as '--tp 4 exceeds --max-tp 2')
    tp_given = options.get("tp") is not None or options.get("max_tp") is not None
    for name, value in stated.items():
        option = "mbs" if name == "micro_batches" else name
        if merged.get(option) is None and not (tp_given and name in ("tp", "max_tp")):
            from_job[name] = value
            merged[option] = value if name == "max_tp" else ",".join(map(str, value))
    return merged, from_job


def unpinned_job_degrees(parallelism: dict[str, Any], limits: LayoutLimits
                         ) -> dict[str, int]:
    """{'tp': 2, 'ep': 8}: the degrees above 1 a job's ``parallelism`` block states that
    the search replaces because no option pins them; a trial's ep=8 was searched over
    without a word."""
    return {axis: value for axis in ("tp", "pp", "vpp", "cp", "ep", "etp")
            if isinstance(value := parallelism.get(axis), int) and value > 1
            and getattr(limits, axis) is None}


# --- Command -------------------------------------------------------------------------------
def layouts(
    job: Annotated[Path, typer.Argument(
        help="job YAML or a run record as RUNS.yaml#ID; its layout (degrees, sharding, "
             "micro-batch, checkpointing) is searched, its other settings (dispatcher, "
             "overlaps, kernels) kept")],
    devices: Annotated[int | None, typer.Option(
        min=1, help="GPUs to lay out (default: search.devices, else hardware.nodes × "
        "the system's GPUs per node)")] = None,
    top: Annotated[int, typer.Option(min=1, help="layouts to list")] = 10,
    max_tp: MaxTp = None, tp: Tp = None, pp: Pp = None, vpp: Vpp = None, cp: Cp = None,
    ep: Ep = None, etp: Etp = None,
    mbs: Annotated[str | None, typer.Option(help="micro-batch sizes (default 1,2,4,8)")] = None,
    sharding: ShardingModes = None, checkpointing: CheckpointingModes = None,
    show_infeasible: Annotated[bool, typer.Option(
        "--show-infeasible",
        help="list out-of-memory and rule-rejected layouts with their reasons")] = False,
    uneven_stages: Annotated[bool, typer.Option(
        "--uneven-stages",
        help="also try pp·vpp that does not divide the layers (uneven pipeline stages)")
    ] = False,
    balanced_pipeline: Annotated[bool, typer.Option(
        "--balanced-pipeline",
        help="split every pipeline by a balanced Megatron layout: embedding, loss and MTP "
             "modules count as layer slots (--json gives each row's layout string)")
    ] = False,
    set_: SetOption = None,
    calibration: CalibrationOption = None,
    json_output: JsonFlag = False,
    model: ModelOption = None,
    html: HtmlOption = None,
    catalog: CatalogFileOption = None,
    memory_fraction: MemoryFraction = None,
) -> None:
    """Rank every parallel layout of a job by predicted tokens/s (paper Sec. 5.2, App. E).

    The job's layout is searched: tp, pp, vpp, cp, ep, etp, micro-batch, sharding and
    checkpointing (pin them with the options; a --set of one is refused).
    """
    check_html(html, job, model, calibration, catalog)
    apply_catalog(catalog)
    constants = load_calibration(calibration)
    check_searched_overrides(set_ or [])
    spec, cluster, stated = load_search_job(job, set_ or [], devices, model_block(model),
                                            default_stack=constants.stack,
                                            memory_fraction=memory_fraction)
    workload = spec.workload
    if uneven_stages:
        workload = replace(workload, uneven_pipeline_stages=True)
    options, from_job = with_job_search_limits(
        {"max_tp": max_tp, "tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "etp": etp,
         "mbs": mbs, "sharding": sharding, "checkpointing": checkpointing}, spec.search_limits)
    limits = layout_limits(**options)
    if balanced_pipeline:
        workload = with_balanced_layouts(workload, cluster.n_devices, limits)
    workload = with_searched_remainder_last_layouts(workload, cluster.n_devices, limits)
    machine = machine_for(cluster, workload.precision, spec.usable_memory_fraction,
                          fp8_recipe=workload.fp8_recipe)
    with progress_reporter(json_output) as bar:
        search = search_layouts(workload, machine, constants, limits,
                                progress=bar("evaluating layouts"))
    if search.n_plans == 0:
        raise MosaicInputError(search.no_valid_layout_message(cluster.n_devices))
    details = show_infeasible or search.n_feasible == 0  # nothing fits: say how close
    document = search_document(search, cluster, machine, top, details,
                               constants, workload)
    document["job_degrees_searched"] = unpinned_job_degrees(stated, limits)
    document["limits_from_job"] = from_job
    if json_output or html is not None:  # `mosaic report` draws them from the JSON too
        from mosaic.report.html.documents import layout_breakdowns

        document.update(layout_breakdowns(search))
    if html is not None:
        from mosaic.report.html.documents import layouts_scatter_block

        write_html({**document, **layouts_scatter_block(search)}, html, "layouts")
    if json_output:
        print_json(document)
    else:
        _render(document, machine.hbm_bytes / GIB)


def register(app: typer.Typer) -> None:
    """Attach `mosaic layouts` to the root command."""
    app.command("layouts")(guarded(layouts))
