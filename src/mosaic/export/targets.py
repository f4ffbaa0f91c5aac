"""The export targets: name -> renderer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mosaic.errors import MosaicInputError
from mosaic.export.spec import ExportSpec
from mosaic.schema_validation import EXPORT_HEADER_TEXT


@dataclass(frozen=True)
class ExportResult:
    """A rendered launch config, the settings the target could not express, and the
    architecture fields it was given that the source did not state (``assumed``)."""

    target: str
    text: str
    file_suffix: str
    unsupported: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)


def _renderers() -> dict[str, Callable[[ExportSpec], ExportResult]]:
    from mosaic.export import job_yaml, maxtext, megatron, nemo, torchtitan

    return {"megatron": megatron.render, "nemo": nemo.render,
            "torchtitan": torchtitan.render, "maxtext": maxtext.render,
            "yaml": job_yaml.render}


# The one list of targets (the CLI's --to and the studio read it); 'yaml' is the source as
# a mosaic job file.
TARGETS = ("megatron", "nemo", "torchtitan", "maxtext", "yaml")
# the targets with a hybrid SSM/attention model: Megatron-Core's hybrid model (Megatron-LM
# pretrain_hybrid.py, Megatron-Bridge's MambaModelProvider), and the job file itself
HYBRID_TARGETS = ("megatron", "nemo", "yaml")


# The stacks whose runs each target's file launches (mosaic.stacks names): a job of another
# stack was costed with other kernels, schedules and defaults than the file runs with, so
# the export costs it again under the first one (the yaml target writes the job itself).
LAUNCHED_STACKS = {"megatron": ("megatron-core", "megatron-bridge", "paper-nemo", "other"),
                   "nemo": ("megatron-bridge", "megatron-core", "paper-nemo", "other"),
                   "torchtitan": ("torchtitan",), "maxtext": ("jax-xla",)}


def launched_stack(target: str, stack: str) -> str | None:
    """The stack a ``target`` file of a ``stack`` job runs with, where it is another one
    (None: the same, or the yaml target)."""
    launched = LAUNCHED_STACKS.get(target)
    return None if launched is None or stack in launched else launched[0]


def launched_job_document(spec: ExportSpec, target: str) -> dict[str, Any] | None:
    """The job document of ``spec`` as a ``target`` file runs it, where that is another
    stack (:func:`launched_stack`): that stack, no release of the former one, and the
    sharding the file writes (torchtitan and MaxText: FSDP for zero1 and zero2; a trial saw
    MaxText's note cost the ZeRO-2 memory of a file that shards with FSDP); None otherwise."""
    stack = launched_stack(target, spec.stack)
    if stack is None or not spec.job:
        return None
    document = {**dict(spec.job)}
    performance = {k: v for k, v in (document.get("performance") or {}).items()
                   if k != "stack_version"}
    document["performance"] = {**performance, "stack": stack}
    if target in ("torchtitan", "maxtext"):
        from mosaic.export.spec import fsdp_for_zero

        parallelism = {**(document.get("parallelism") or {})}
        parallelism["sharding"] = fsdp_for_zero(spec.sharding)
        document["parallelism"] = parallelism
    return document


def _stack_named(target: str) -> str | None:
    """The stack a ``--to`` text names, if any: a stack's name or its first word ('hf',
    'jax'; not a later one: 'fsdp' is no more fms-fsdp's than anyone's), else a stack
    keyword ('accelerate', 'deepspeed')."""
    from mosaic.stacks import known_stacks, stack_for_software
    from mosaic.stacks.registry import OTHER_STACK

    key = target.strip().casefold()
    for name in known_stacks():
        if key in (name, name.split("-")[0]):
            return name
    stack = stack_for_software(key).name
    return None if stack == OTHER_STACK else stack


def check_target(target: str) -> None:
    """MosaicInputError unless ``target`` is one of :data:`TARGETS`; a stack's name says
    which target launches that stack, or that none does (a trial typed --to hf for an
    hf-transformers job)."""
    if target in TARGETS:
        return
    stack = _stack_named(target)
    targets = [name for name, stacks in LAUNCHED_STACKS.items() if stack in stacks]
    if stack is None:
        why = ""
    elif targets:
        why = f" ({stack} jobs export with --to {' or --to '.join(targets)})"
    else:
        why = (f" (no target writes a launch config for {stack}: another target's file "
               "says what mosaic predicts under the stack it runs, and --to yaml writes the "
               "job)")
    raise MosaicInputError(f"--to {target!r} is not a target; allowed: "
                           f"{', '.join(TARGETS)}{why}")


def export(spec: ExportSpec, target: str) -> ExportResult:
    """Render ``spec`` for ``target`` (one of :data:`TARGETS`)."""
    check_target(target)
    renderers = _renderers()
    # MaxText's qwen3_next decoder builds Qwen3-Next's regular cycle of gated DeltaNet and
    # full-attention blocks (ExportSpec.full_attention_cycle)
    maxtext_qwen3_next = target == "maxtext" and spec.full_attention_cycle() is not None
    if spec.geometry.is_hybrid and target not in HYBRID_TARGETS and not maxtext_qwen3_next:
        also = (" (maxtext: a Qwen3-Next cycle of gated DeltaNet and full-attention MoE "
                "blocks)" if spec.geometry.gdn is not None else "")
        raise MosaicInputError(
            f"--to {target}: a hybrid SSM/attention model (model.hybrid_pattern) has no "
            f"{target} model to write; targets that build one: {', '.join(HYBRID_TARGETS)}"
            f"{also}")
    result = renderers[target](spec)
    return replace(result, assumed=list(spec.architecture_assumptions))


def precision_label(spec: ExportSpec) -> str:
    """'bf16', 'fp4 (NVFP4, FP4 parameter gathers)' or 'fp8 (recipe mxfp8, FP8 parameter
    gathers)'."""
    if spec.precision == "fp4":
        return "fp4 (NVFP4" + (", FP4 parameter gathers)" if spec.fp4_param_gather else ")")
    if spec.fp8_recipe == "none":
        return spec.precision
    return (f"{spec.precision} (recipe {spec.fp8_recipe}"
            + (", FP8 parameter gathers)" if spec.fp8_param_gather else ")"))


def header_lines(spec: ExportSpec, target: str, unsupported: list[str]) -> list[str]:
    """Comment lines (without the comment marker) that open every exported file: the job,
    mosaic's verdicts on it (``WARNING``), the architecture fields the source did not state
    (``ASSUMED``), then what the target cannot express (``NOT EXPRESSED``)."""
    g = spec.geometry
    lines = [
        EXPORT_HEADER_TEXT.format(target=target, source=spec.source or "a job"),
        f"{spec.n_devices} GPUs = tp {spec.tp} x pp {spec.pp} x cp {spec.cp} x dp {spec.dp}; "
        f"ep {spec.ep}, etp {spec.etp}, vpp {spec.vpp}",
        # a hybrid pattern counts its mixers and its FFN/MoE blocks apart, which a target
        # may pair into decoder layers (a trial read "96 layers" over num_layers: 48)
        f"model: {g.layers} "
        + ("layers of the hybrid pattern (mixers and FFN/MoE blocks counted apart)"
           if g.is_hybrid else "layers")
        + f", d_model {g.d_model}, {g.heads} heads ({g.kv_heads} kv, "
        f"head_dim {g.head_dim}), ffn {g.ffn}, vocab {g.vocab}"
        + (f", {g.moe.experts} experts top-{g.moe.top_k} width {g.moe.expert_ffn}, "
           f"{g.moe.shared_experts} shared, {g.moe.dense_layers} dense-first"
           if g.moe else ""),
        f"batch: {spec.global_seqs} x {spec.seq_len} tokens, micro-batch {spec.micro_seqs}; "
        f"{precision_label(spec)}; recompute {spec.checkpointing}; sharding {spec.sharding}"
        # the dispatcher and routing of MoE layers: a dense model has neither (a trial read
        # 'dispatcher alltoall' on a dense Qwen3-8B)
        + (f"; dispatcher {spec.dispatcher}; routing {spec.routing}"
           + (f", capacity factor {spec.capacity_factor:g}"
              + (" padded" if spec.pad_to_capacity else "")
              if spec.capacity_factor is not None else "")
           if g.moe else ""),
    ]
    if spec.calibration is not None:  # a plan's profile, or a job's --calibration
        lines.append(f"predicted under mosaic calibration profile '{spec.calibration}'")
    lines += [f"NOTE: {item}" for item in spec.notes]
    lines += training_lines(spec)
    lines += warning_lines(spec)
    lines += [f"ASSUMED (not stated in the source): {item}"
              for item in spec.architecture_assumptions]
    lines += [f"assumed: {item}" for item in spec.assumptions
              if not item.startswith("model.")]
    lines += [f"NOT EXPRESSED: {item}" for item in unsupported]
    return lines


def training_lines(spec: ExportSpec) -> list[str]:
    """The header line of the token budget (a plan's D, a job's training.tokens) as steps
    of its global batch; none without a budget."""
    if spec.train_steps is None:
        return []
    return [f"training: {spec.train_tokens:.4g} tokens = {spec.train_steps} steps of "
            f"{spec.global_seqs} x {spec.seq_len}"]


def warning_lines(spec: ExportSpec) -> list[str]:
    """The header lines of mosaic's verdicts on the job (``ExportSpec.warnings``)."""
    return [f"WARNING: {item}" for item in spec.warnings]
