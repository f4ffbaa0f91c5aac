"""One job's prediction in words: the summary rows and the breakdown's scale note that
`mosaic perf` prints and its HTML page shows (a trial found lines of the terminal missing
from the page when each wrote its own list)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mosaic.perf.headroom import memory_fit_text
from mosaic.report.plan_report import layout_line, precision_text


def hardware_text(hardware: Mapping[str, Any]) -> str:
    """'512 GPUs: 64 × p6-b200.48xlarge' (the GPUs alone where the node count is not known)."""
    if "description" in hardware:  # the cluster's own words (a part of one host, too)
        return str(hardware["description"])
    nodes = hardware.get("nodes")
    if nodes is None:
        return f"{hardware['devices']} GPUs of {hardware['system']}"
    return f"{hardware['devices']} GPUs: {nodes} × {hardware['system']}"


def model_text(model: Mapping[str, Any]) -> str:
    """'DeepSeek-V3: 671.03 B parameters (669.17 B non-embedding, 35.70 B active); 1 MTP
    module (11.61 B) costed in step and memory': the counts of `mosaic arch`, the
    non-embedding ones those the paper's MFU uses (Eq. 1)."""
    name = f"{model['name']}: " if model.get("name") else ""
    total = model.get("n_total_with_embedding", model["n_total"])
    text = (f"{name}{total / 1e9:,.2f} B parameters ({model['n_total'] / 1e9:,.2f} B "
            f"non-embedding, {model['n_active'] / 1e9:,.2f} B active)")
    modules = int(model.get("mtp_modules") or 0)
    if modules:
        text += (f"; {modules} MTP module{'s' if modules > 1 else ''} "
                 f"({model['mtp_params'] / 1e9:,.2f} B) costed in step and memory")
    return text


def training_text(training: Mapping[str, Any]) -> str:
    """'D days of steps (no restarts)', with the window at a stated goodput."""
    text = f"{training['compute_days']:.1f} days of steps (no restarts)"
    if training.get("goodput", 1.0) < 1.0:
        text += (f"; a {training['window_days']:.1f}-day window at goodput "
                 f"{training['goodput']:.4g}")
    return text


def _switches(document: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """', TP comm overlap, EP overlap': the named settings the document has on (a document
    written before a setting existed has it off)."""
    return "".join(f", {text}" for key, text in names.items() if document.get(key))


def _measured_step_text(document: Mapping[str, Any]) -> str:
    """Both errors, each named: `validate` reports the tokens/s one (a trial read +25% there
    and -20% here as a contradiction)."""
    if "measured_step_time_s" not in document:
        return ""
    predicted_s, measured_s = document["step_time_s"], document["measured_step_time_s"]
    return (f" (measured {measured_s:.3f} s: predicted step time "
            f"{predicted_s / measured_s - 1:+.1%}, tokens/s {measured_s / predicted_s - 1:+.1%}"
            " as `validate` reports it)")


def _measured_memory_text(document: Mapping[str, Any]) -> str:
    """'; measured 52.00 GiB (device): the model reads 51.20 GiB that way, predicted -1.5%
    as `validate` reports it' for a run record that states its memory (a trial read validate's
    48.1 GiB and perf's 50.06 GiB for one record, measured as peak allocated)."""
    if "measured_memory_gib" not in document:
        return ""
    measured, predicted = document["measured_memory_gib"], document["memory_gib_as_measured"]
    measure = document.get("memory_measure", "allocator")
    read = ("" if measure == "allocator"
            else f" ({measure}): the model reads {predicted:.2f} GiB that way,")
    return (f"; measured {measured:.2f} GiB{read or ':'} predicted "
            f"{predicted / measured - 1:+.1%} as `validate` reports it")


def _memory_fit(document: Mapping[str, Any]) -> str:
    """The verdict in the one wording of every command (a document written before it held
    its verdict gets it from its numbers)."""
    if "memory_fit" in document:
        return str(document["memory_fit"])
    return memory_fit_text(document["memory_gib"], document["memory_capacity_gib"],
                           document.get("usable_memory_fraction", 1.0),
                           document["overshoot_gib"])


def prediction_summary_rows(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The 'Predicted step' rows of a `mosaic perf --json` document."""
    plan = document["plan"]
    version = f" {document['stack_version']}" if document.get("stack_version") else ""
    return [
        *([] if "model" not in document else [("model", model_text(document["model"]))]),
        ("hardware", hardware_text(document["hardware"])),
        ("stack / calibration", f"{document.get('stack', '?')}{version} / "
                                f"{document.get('calibration', '?')}"),
        ("layout", layout_line(plan)
         + _switches(document, {"tp_comm_overlap": "TP comm overlap"})),
        ("precision / EP dispatcher",
         precision_text(document)  # the lane, its recipe and the GEMMs it runs
         + _switches(document, {"fp4_param_gather": "FP4 parameter gathers",
                                "fp8_param_gather": "FP8 parameter gathers"})
         + f" / {document.get('dispatcher', '?')}"
         + _switches(document, {"ep_overlap": "EP overlap", "dispatch_fp8": "FP8 dispatch",
                                "fused_grouped_mlp": "fused grouped MLP",
                                "fp8_dot_product_attention": "FP8 attention",
                                "full_iteration_cuda_graph": "one CUDA graph per step",
                                "layer_cuda_graphs": "a CUDA graph per layer"})),
        ("step time", f"{document['step_time_s']:.3f} s" + _measured_step_text(document)),
        ("tokens/s (per GPU)",
         f"{document['tokens_per_s']:,.0f} ({document['tokens_per_s_per_gpu']:,.0f})"),
        ("MFU (6·N_act, paper Eq. 1)", f"{document['mfu']:.2%}"
         + (f" ({document['mfu_gemm_lane']:.2%} of the GEMM lane's peak)"
            if document.get("mfu_gemm_lane", document["mfu"]) < document["mfu"] else "")),
        ("MFU with causal attention", f"{document['mfu_with_attention']:.2%}"),
        ("HFU (recompute counted)", f"{document['hfu']:.2%}"),
        ("MFU peak", document["mfu_peak"]),
        ("memory per GPU", _memory_fit(document) + _measured_memory_text(document)
         + ("; measured: out of memory" if document.get("measured_oom") else "")),
        *([] if "routed_load_factor" not in document else [(
            "busiest EP rank's load",
            f"{document['routed_load_factor']:.3f}x the even share "
            f"(routing {document['routing']})")]),
        *([] if "training" not in document else [(
            "training (training.tokens)",
            f"{document['training']['tokens']:.4g} tokens = "
            f"{document['training']['steps']:,} steps, "
            + training_text(document["training"]))]),
        ("chi_sys (Eq. 15)", f"{document['chi_sys']:.3f}"),
        ("attention kernel", document["attention_kernel"]),
    ]


def breakdown_scale_note(document: Mapping[str, Any]) -> str:
    """' (every term x0.948, ...)' where the calibration's step multiplier is below 1: it
    scales every term, "analytical" ones too (a trial compared two profiles' "analytical"
    terms and found them different, unexplained)."""
    multiplier = document.get("step_multiplier", 1.0)
    if multiplier >= 1:
        return ""
    if not document.get("stack_multiplier_fitted", True):  # Calibration.stack_multiplier
        return (f" (every term x{multiplier:.4g}, the calibration's default step multiplier "
                f"for stacks none of its runs used: not fitted on "
                f"{document.get('stack', 'this stack')})")
    return (f" (every term x{multiplier:.4g}, the calibration's step multiplier: this stack "
            "runs faster than the analytical model)")
