"""The JSON document of one job's prediction (`mosaic perf --json`), shared by the CLI,
`mosaic compare` and the studio."""

from __future__ import annotations

from typing import Any

from mosaic.arch.counts import ParameterCounts, count_parameters
from mosaic.config.blocks import training_steps
from mosaic.config.job_schema import JobSpec
from mosaic.config.layout import plan_row_document
from mosaic.evaluate.job import JobPrediction
from mosaic.evaluate.validation_report import memory_as_measured
from mosaic.perf.calibration import Calibration
from mosaic.perf.coverage import summary_lines
from mosaic.perf.elementwise_traffic import kernel_assumptions
from mosaic.perf.machine import mfu_peak_text, usable_gib
from mosaic.perf.memory import heaviest_stage
from mosaic.perf.prediction_coverage import assess_plan
from mosaic.perf.routing_load import routed_load_factor
from mosaic.units import GIB, SECONDS_PER_DAY


def geometry_counts(geometry: Any, counts: ParameterCounts | None = None
                    ) -> dict[str, float]:
    """A geometry's parameter counts as every page shows them (arch.counts, ``counts`` where
    the caller has them): non-embedding N_total and N_active, as the paper's MFU counts
    them, and both with embeddings, which model cards quote."""
    counts = count_parameters(geometry) if counts is None else counts
    return {"n_total": float(counts.n_total), "n_active": float(counts.n_active),
            "n_total_with_embedding": float(counts.n_total_with_embedding),
            "n_active_with_embedding": float(counts.n_active_with_embedding)}


def model_summary(spec: JobSpec) -> dict[str, Any]:
    """Which model a prediction is of: its name as the job states it, its counts
    (:func:`geometry_counts`) and its MTP modules, which the step and memory cost (a trial's
    imported DeepSeek-V3 config added 0.9 s a step and 11.6 GiB a GPU through one MTP module
    that no line of `mosaic perf` named)."""
    geometry = spec.workload.geometry
    counts = count_parameters(geometry)
    return {"name": spec.model_name, **geometry_counts(geometry, counts),
            "mtp_modules": int(geometry.mtp_layers), "mtp_params": float(counts.mtp)}


def prediction_document(result: JobPrediction, calibration: Calibration) -> dict[str, Any]:
    """The JSON document of `mosaic perf --json`."""
    p = result.prediction
    machine = result.machine
    coverage = assess_plan(calibration, result.spec.workload, result.spec.plan,
                           machine.device_name, p, usable_memory_gib=usable_gib(machine),
                           system_name=result.cluster.system.name)
    return {
        "model": model_summary(result.spec),
        "stack": result.spec.workload.stack,
        "stack_version": result.spec.stack_version,  # the release the job names, if any
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
        # the verdict in the one wording of every command (perf.headroom.memory_fit_text)
        "memory_fit": result.memory_fit,
        "chi_sys": float(p.chi_sys[0]),
        # chi_sys x the stack's multiplier; below 1 it scales every breakdown term
        # (StepPrediction.breakdown_s), above 1 it is the "calibration" term
        "step_multiplier": float(p.step_multiplier[0]),
        # whether the stack part is fitted on this stack's runs, or the calibration's
        # 'default' entry for stacks it has none of (Calibration.stack_multiplier)
        "stack_multiplier_fitted": result.spec.workload.stack in calibration.stack_overhead,
        "attention_kernel": p.attention_kernel,
        "precision": str(result.spec.workload.precision),
        "fp8_recipe": str(result.spec.workload.fp8_recipe),
        "quantised_gemms": str(result.spec.workload.quantised_gemms),
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
        "breakdown_s": {name: float(value[0]) for name, value in p.breakdown_s.items()},
        "labels": p.labels,
        "memory_breakdown_bytes": {name: float(v[0])
                                   for name, v in p.memory_breakdown_bytes.items()},
        # the calibration's fitted memory scale on the allocator's components (1: as derived;
        # evaluate/memory_scale.py)
        "memory_scale": calibration.memory_scale,
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
        # a run record that ran out of memory, as measured (the verdict above is predicted)
        **({"measured_oom": True} if result.spec.measured_oom else {}),
        # a run record's measured memory, and the model's figure read as it measures it
        # (validate's predicted memory of the record)
        **({} if result.spec.measured_memory_bytes is None else {
            "measured_memory_gib": result.spec.measured_memory_bytes / GIB,
            "memory_measure": result.spec.memory_measure,
            "memory_gib_as_measured": memory_as_measured(
                result.spec.memory_measure, result.spec.plan, float(p.memory_bytes[0])) / GIB}),
        # the busiest EP rank's routed tokens over the even share the MoE terms are costed
        # with (perf.routing_load: stated, or derived from the router's balancing)
        **({} if not result.spec.workload.geometry.is_moe else {
            "routing": str(result.spec.workload.routing),
            "routed_load_factor": float(routed_load_factor(result.spec.workload,
                                                           result.spec.plan)[0])}),
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


def memory_scale_note(document: dict[str, Any]) -> str | None:
    """What a calibration's fitted memory scale did to a prediction's memory, for the text
    and HTML reports alike; None without one (1, or a document written before it)."""
    scale = document.get("memory_scale", 1.0)
    if scale == 1.0:
        return None
    return f"all but the runtime reserve x{scale:.4g}, the calibration's memory scale"
