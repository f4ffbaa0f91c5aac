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
from mosaic.config.blocks import training_steps
from mosaic.config.job_schema import JobSpec
from mosaic.config.layout import plan_row_document
from mosaic.evaluate.job import JobPrediction, load_job_spec, predict_job
from mosaic.perf.calibration import Calibration, load_calibration
from mosaic.perf.coverage import summary_lines
from mosaic.perf.elementwise_traffic import kernel_assumptions
from mosaic.perf.headroom import memory_fit_text
from mosaic.perf.machine import mfu_peak_text, usable_gib
from mosaic.perf.memory import COMPONENT_MEANINGS, heaviest_stage
from mosaic.perf.prediction_coverage import assess_plan
from mosaic.perf.terms import STEP_TERMS, term_meaning
from mosaic.units import GIB, SECONDS_PER_DAY


def prediction_document(result: JobPrediction, calibration: Calibration) -> dict[str, Any]:
    """The JSON document of `mosaic perf --json`."""
    p = result.prediction
    machine = result.machine
    coverage = assess_plan(calibration, result.spec.workload, result.spec.plan,
                           machine.device_name, p, usable_memory_gib=usable_gib(machine))
    return {
        "stack": result.spec.workload.stack,
        "calibration": calibration.name,
        "step_time_s": float(p.step_time_s[0]),
        "tokens_per_s": float(p.tokens_per_s[0]),
        "tokens_per_s_per_gpu": float(p.tokens_per_s_per_gpu[0]),
        "mfu": float(p.mfu[0]),
        "mfu_gemm_lane": float(p.mfu_gemm_lane[0]),
        "mfu_with_attention": float(p.mfu_with_attention[0]),
        "hfu": float(p.hfu[0]),
        "mfu_peak": mfu_peak_text(machine),
        "memory_gib": float(p.memory_bytes[0] / GIB),
        "memory_capacity_gib": machine.hbm_bytes / GIB,
        "usable_memory_fraction": machine.usable_memory_fraction,  # perf.headroom
        "feasible": bool(p.feasible[0]),
        "overshoot_gib": float(p.overshoot_bytes[0] / GIB),
        "chi_sys": float(p.chi_sys[0]),
        "attention_kernel": p.attention_kernel,
        "precision": str(result.spec.workload.precision),
        "fp8_recipe": str(result.spec.workload.fp8_recipe),
        "fp8_param_gather": result.spec.workload.fp8_param_gather,
        "fp4_param_gather": result.spec.workload.fp4_param_gather,
        "dispatcher": str(result.spec.workload.dispatcher),
        "ep_overlap": result.spec.workload.ep_overlap,
        "dispatch_fp8": result.spec.workload.dispatch_fp8,
        "fused_grouped_mlp": result.spec.workload.fused_grouped_mlp,
        "fp8_dot_product_attention": result.spec.workload.fp8_dot_product_attention,
        "tp_comm_overlap": result.spec.workload.tp_comm_overlap,
        "full_iteration_cuda_graph": result.spec.workload.full_iteration_cuda_graph,
        "layer_cuda_graphs": result.spec.workload.layer_cuda_graphs,
        "dp_comm_overlap": result.spec.workload.dp_comm_overlap,
        # the element-wise and MoE token-movement implementations the step is costed with
        # (perf/elementwise_traffic.py, perf/moe_permute_traffic.py) and where each comes from
        "kernels": kernel_assumptions(result.spec.workload),
        "breakdown": {name: float(value[0]) for name, value in p.breakdown_s.items()},
        "labels": p.labels,
        "memory_breakdown": {name: float(v[0]) for name, v in p.memory_breakdown_bytes.items()},
        # the pipeline rank whose memory the breakdown is (docs/memory.md "Which stage")
        "memory_stage": int(heaviest_stage(result.spec.workload, result.spec.plan)[0]),
        "plan": plan_row_document(result.spec.plan.row(0)),
        "hardware": {
            "system": result.cluster.system.name,
            "nodes": result.cluster.n_nodes,
            "devices": result.cluster.n_devices,
            "description": result.cluster.description,
        },
        "coverage": coverage.to_document(),
        "coverage_summary": summary_lines(coverage),
        # every default filled in for a field the job (or run record) leaves unstated
        "assumptions": list(result.spec.assumptions),
        # a run record's own measurement (RUNS.yaml#ID); absent for a job
        **({} if result.spec.measured_step_time_s is None
           else {"measured_step_time_s": result.spec.measured_step_time_s}),
        **({} if result.spec.train_tokens is None
           else {"training": training_document(result.spec, float(p.step_time_s[0]))}),
    }


def training_document(spec: JobSpec, step_time_s: float) -> dict[str, Any]:
    """The job's training.tokens as optimizer steps, the time they take at the predicted
    step time (compute_days: without failures, restarts or checkpoints), and the window at
    the job's training.goodput (window_days, = compute_days without one)."""
    workload = spec.workload
    steps = training_steps(spec.train_tokens, workload.global_batch, workload.seq_len)
    compute_days = steps * step_time_s / SECONDS_PER_DAY
    goodput = spec.train_goodput or 1.0
    return {"tokens": spec.train_tokens, "steps": steps, "compute_days": compute_days,
            "goodput": goodput, "window_days": compute_days / goodput}


def _training_text(training: dict[str, Any]) -> str:
    """'N steps: D days of steps (no restarts)', with the window at a stated goodput."""
    text = f"{training['compute_days']:.1f} days of steps (no restarts)"
    if training.get("goodput", 1.0) < 1.0:
        text += (f"; a {training['window_days']:.1f}-day window at goodput "
                 f"{training['goodput']:.4g}")
    return text


def _render(document: dict[str, Any]) -> None:
    plan = document["plan"]
    layout = ", ".join(
        f"{key}={plan[key]}" for key in ("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "micro_batch")
    )
    print_key_value_table(
        "Predicted step",
        [
            ("hardware", document["hardware"]["description"]),
            ("stack / calibration", f"{document['stack']} / {document['calibration']}"),
            ("layout", f"{layout}, {plan['sharding']}, ckpt={plan['checkpointing']}"
             + (", TP comm overlap" if document["tp_comm_overlap"] else "")),
            ("precision / EP dispatcher",
             f"{document['precision']}"
             + (" (nvfp4" + (", FP4 parameter gathers" if document["fp4_param_gather"]
                             else "") + ")" if document["precision"] == "fp4" else "")
             + (f" ({document['fp8_recipe']}"
                + (", FP8 parameter gathers" if document["fp8_param_gather"] else "") + ")"
                if document["fp8_recipe"] != "none" else "")
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
                f" (measured {document['measured_step_time_s']:.3f} s: prediction "
                f"{document['step_time_s'] / document['measured_step_time_s'] - 1:+.1%})")),
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
            ("memory per GPU", memory_fit_text(
                document["memory_gib"], document["memory_capacity_gib"],
                document["usable_memory_fraction"], document["overshoot_gib"])),
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
        for name, seconds in sorted(document["breakdown"].items(),
                                    key=lambda item: order.get(item[0], len(order)))
        if abs(seconds) > 0
    ]
    print_key_value_table("Calibration coverage (intervals from held-out residuals)",
                          [tuple(row) for row in document["coverage_summary"]])
    print_table("Step-time breakdown", ["term", "seconds", "share", "source", "what"], rows)
    memory = document["memory_breakdown"]
    pp = document["plan"]["pp"]
    print_table(
        "Memory breakdown" + (f" (heaviest stage: pipeline rank {document['memory_stage']} of "
                              f"{pp})" if pp > 1 else ""),
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
    result = predict_job(spec, constants)
    document = prediction_document(result, constants)
    write_html(document, html, "perf")
    if json_output:
        print_json(document)
    else:
        _render(document)


def register(app: typer.Typer) -> None:
    """Attach `mosaic perf` to the root command."""
    app.command("perf")(guarded(perf))
