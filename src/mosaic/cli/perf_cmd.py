"""`mosaic perf`: step time, MFU and memory of one training job, with breakdowns."""

from __future__ import annotations

from typing import Any

import typer

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    CalibrationOption,
    JobArgument,
    JsonFlag,
    SetOption,
    console,
    guarded,
    print_json,
    print_key_value_table,
    print_table,
)
from mosaic.cli.model_option import ModelOption, model_block
from mosaic.cli.report_cmd import HtmlOption, check_html, write_html
from mosaic.evaluate.job import load_job_spec, predict_job_file
from mosaic.perf.calibration import load_calibration
from mosaic.perf.memory import COMPONENT_MEANINGS
from mosaic.perf.terms import STEP_TERMS, term_meaning
from mosaic.report.plan_report import layout_line, precision_text
from mosaic.report.prediction_document import memory_scale_note, prediction_document
from mosaic.units import GIB


def _training_text(training: dict[str, Any]) -> str:
    """'N steps: D days of steps (no restarts)', with the window at a stated goodput."""
    text = f"{training['compute_days']:.1f} days of steps (no restarts)"
    if training.get("goodput", 1.0) < 1.0:
        text += (f"; a {training['window_days']:.1f}-day window at goodput "
                 f"{training['goodput']:.4g}")
    return text


def _render(document: dict[str, Any]) -> None:
    plan = document["plan"]
    print_key_value_table(
        "Predicted step",
        [
            ("hardware", document["hardware"]["description"]),
            ("stack / calibration", f"{document['stack']}"
             + (f" {document['stack_version']}" if document.get("stack_version") else "")
             + f" / {document['calibration']}"),
            ("layout", layout_line(plan)
             + (", TP comm overlap" if document["tp_comm_overlap"] else "")),
            ("precision / EP dispatcher",
             precision_text(document)  # the lane, its recipe and the GEMMs it runs
             + (", FP4 parameter gathers" if document["fp4_param_gather"] else "")
             + (", FP8 parameter gathers" if document["fp8_param_gather"] else "")
             + f" / {document['dispatcher']}"
             + (", EP overlap" if document["ep_overlap"] else "")
             + (", FP8 dispatch" if document["dispatch_fp8"] else "")
             + (", fused grouped MLP" if document["fused_grouped_mlp"] else "")
             + (", FP8 attention" if document["fp8_dot_product_attention"] else "")
             + (", one CUDA graph per step" if document["full_iteration_cuda_graph"]
                else "")
             + (", a CUDA graph per layer" if document["layer_cuda_graphs"] else "")),
            ("step time", f"{document['step_time_s']:.3f} s"
             + ("" if "measured_step_time_s" not in document else
                # both errors, each named: `validate` reports the tokens/s one (a trial read
                # +25% there and -20% here as a contradiction)
                f" (measured {document['measured_step_time_s']:.3f} s: predicted step time "
                f"{document['step_time_s'] / document['measured_step_time_s'] - 1:+.1%}, "
                f"tokens/s {document['measured_step_time_s'] / document['step_time_s'] - 1:+.1%}"
                " as `validate` reports it)")),
            (
                "tokens/s (per GPU)",
                f"{document['tokens_per_s']:,.0f} ({document['tokens_per_s_per_gpu']:,.0f})",
            ),
            ("MFU (6·N_act, paper Eq. 1)", f"{document['mfu']:.2%}"
             + (f" ({document['mfu_gemm_lane']:.2%} of the GEMM lane's peak)"
                if document["mfu_gemm_lane"] < document["mfu"] else "")),
            ("MFU with causal attention", f"{document['mfu_with_attention']:.2%}"),
            ("HFU (recompute counted)", f"{document['hfu']:.2%}"),
            ("MFU peak", document["mfu_peak"]),
            ("memory per GPU", document["memory_fit"]
             + ("; measured: out of memory" if document.get("measured_oom") else "")),
            *([] if "routed_load_factor" not in document else [(
                "busiest EP rank's load",
                f"{document['routed_load_factor']:.3f}x the even share "
                f"(routing {document['routing']})")]),
            *([] if "training" not in document else [(
                "training (training.tokens)",
                f"{document['training']['tokens']:.4g} tokens = "
                f"{document['training']['steps']:,} steps, "
                + _training_text(document["training"]))]),
            ("chi_sys (Eq. 15)", f"{document['chi_sys']:.3f}"),
            ("attention kernel", document["attention_kernel"]),
        ],
    )
    step = document["step_time_s"]
    # in the order of the term records (perf/terms.py): compute, communication, the rest
    order = {name: index for index, name in enumerate(STEP_TERMS)}
    rows = [
        [name, f"{seconds:.4f}", f"{seconds / step:.1%}", document["labels"][name],
         term_meaning(name)]
        for name, seconds in sorted(document["breakdown_s"].items(),
                                    key=lambda item: order.get(item[0], len(order)))
        if abs(seconds) > 0
    ]
    print_key_value_table("Calibration coverage (intervals from held-out residuals)",
                          [tuple(row) for row in document["coverage_summary"]])
    multiplier = document["step_multiplier"]
    # a multiplier below 1 scales every term, "analytical" ones too (a trial compared two
    # profiles' "analytical" terms and found them different, unexplained)
    scaled = (f" (every term x{multiplier:.4g}, the calibration's step multiplier: this stack "
              "runs faster than the analytical model)" if multiplier < 1 else "")
    print_table("Step-time breakdown" + scaled, ["term", "seconds", "share", "source", "what"],
                rows)
    memory = document["memory_breakdown_bytes"]
    pp = document["plan"]["pp"]
    scaled = memory_scale_note(document)
    notes = [*([f"heaviest stage: pipeline rank {document['memory_stage']} of {pp}"]
               if pp > 1 else []), *([scaled] if scaled else [])]
    print_table(
        "Memory breakdown" + (f" ({'; '.join(notes)})" if notes else ""),
        ["component", "GiB", "what"],
        [[name, f"{value / GIB:.2f}", COMPONENT_MEANINGS.get(name, "")]
         for name, value in memory.items()],
    )
    if document["assumptions"] or document["kernels"]:
        console.print("Assumed where the input is silent:", markup=False, highlight=False)
        for line in [*document["assumptions"], *document["kernels"]]:
            console.print(f"  - {line}", markup=False, highlight=False, soft_wrap=True)


def perf(
    job: JobArgument,
    set_: SetOption = None,
    calibration: CalibrationOption = None,
    json_output: JsonFlag = False,
    model: ModelOption = None,
    html: HtmlOption = None,
    catalog: CatalogFileOption = None,
) -> None:
    """Predict step time, tokens/s, MFU and per-GPU memory of one job, with breakdowns."""
    check_html(html, job, model, calibration, catalog)
    apply_catalog(catalog)
    constants = load_calibration(calibration)
    spec = load_job_spec(job, set_ or [], model_block(model), default_stack=constants.stack)
    result = predict_job_file(spec, constants, job, set_ or [])
    document = prediction_document(result, constants)
    write_html(document, html, "perf")
    if json_output:
        print_json(document)
    else:
        _render(document)


def register(app: typer.Typer) -> None:
    """Attach `mosaic perf` to the root command."""
    app.command("perf")(guarded(perf))
