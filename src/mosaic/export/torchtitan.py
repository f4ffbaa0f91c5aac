"""A torchtitan ``--job.config_file`` TOML (torchtitan v0.2.x ``JobConfig``).

Section and field names: pytorch/torchtitan ``torchtitan/config/job_config.py`` at tag
v0.2.2 (2026-02-20), the last release configured by TOML files (later releases take a
Python ``Trainer.Config``; ``torchtitan/config/README.md``). torchtitan defines model
dimensions in Python (a model ``name`` and a registered ``flavor``), so the geometry is
written as comments for the flavor you register.
"""

from __future__ import annotations

import math
from typing import Any

from mosaic.arch.geometry import AttentionKind
from mosaic.export.spec import ExportSpec
from mosaic.export.targets import ExportResult, header_lines


def model_name(spec: ExportSpec) -> str:
    """The torchtitan model family closest to the geometry."""
    g = spec.geometry
    if g.attention is AttentionKind.MLA:
        return "deepseek_v3"
    if g.attention_sinks:
        return "gpt_oss"
    if g.qk_norm:
        return "qwen3"
    return "llama4" if g.moe else "llama3"


def layers_per_stage(layers: int, stages: int) -> int | None:
    """``pipeline_parallel_layers_per_stage`` giving ``stages`` virtual stages.

    torchtitan v0.2.2 (``torchtitan/distributed/pipeline_parallel.py``) makes
    ceil((layers + 1 + 1) / layers_per_stage) stages, the embedding and the output each
    weighing one layer (``pipeline_parallel_first/last_stage_less_layers`` = 1).
    """
    weighted = layers + 2
    per_stage = math.ceil(weighted / stages)
    return per_stage if math.ceil(weighted / per_stage) == stages else None


def job_config(spec: ExportSpec) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The TOML tables and what torchtitan cannot express."""
    g = spec.geometry
    unsupported = [
        "model dimensions: torchtitan reads them from a registered flavor (Python), "
        f"not from TOML; register flavor 'mosaic' of '{model_name(spec)}' with the "
        "dimensions in the header"]
    if spec.sharding in ("zero1", "zero2"):
        unsupported.append(f"{spec.sharding}: torchtitan shards with FSDP2; exported as FSDP "
                           "that keeps parameters after forward (reshard 'never')")
    if spec.tp > 1 and not spec.sequence_parallel:
        unsupported.append("tensor parallelism without sequence parallelism (torchtitan's TP "
                           "always shards the sequence)")
    if g.moe and spec.etp not in (1, spec.tp):
        unsupported.append(f"etp={spec.etp}: torchtitan supports etp = 1 or etp = tp")
    if spec.dispatcher == "hybridep":
        unsupported.append("HybridEP dispatcher: torchtitan offers 'standard' or 'deepep'")
    if g.moe and g.moe.capacity_factor is not None:
        unsupported.append(f"capacity factor {g.moe.capacity_factor:g}: torchtitan's MoE "
                           "routes dropless")
    if spec.optimizer == "muon":
        unsupported.append("Muon optimizer (torchtitan v0.2.2 optimizers: AdamW, Adam)")
    if spec.precision == "fp16":
        unsupported.append("fp16 mixed precision (torchtitan: bfloat16 or float32)")
    replicate, shard = spec.dp, 1
    if spec.sharding in ("zero1", "zero2", "fsdp"):
        replicate, shard = 1, spec.dp
    elif spec.sharding == "hsdp":
        replicate, shard = spec.hsdp_replicas, spec.dp // spec.hsdp_replicas
    # torchtitan: local_batch_size is one DP rank's batch per forward; with PP it is split
    # into pipeline micro-batches of pipeline_parallel_microbatch_size, without PP the
    # global batch beyond local·dp becomes gradient accumulation (job_config.py docs).
    local = spec.global_seqs // spec.dp if spec.pp > 1 else spec.micro_seqs
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": "never" if spec.sharding in ("zero1", "zero2")
        else "default",
        "tensor_parallel_degree": spec.tp,
        "pipeline_parallel_degree": spec.pp,
        "pipeline_parallel_microbatch_size": spec.micro_seqs,
        "context_parallel_degree": spec.cp,
        "expert_parallel_degree": spec.ep,
        "expert_tensor_parallel_degree": spec.etp,
        "expert_parallel_comm_backend": "deepep" if spec.dispatcher == "deepep"
        else "standard",
    }
    if spec.pp > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B" if spec.vpp > 1 \
            else "1F1B"
        if spec.vpp > 1:
            per_stage = layers_per_stage(g.layers, spec.pp * spec.vpp)
            if per_stage is None:
                unsupported.append(f"{spec.pp * spec.vpp} pipeline stages of {g.layers} layers "
                                   "(no pipeline_parallel_layers_per_stage gives that count)")
            else:
                parallelism["pipeline_parallel_layers_per_stage"] = per_stage
    converters: list[str] = []
    if spec.precision == "fp8":
        converters = ["quantize.linear.float8"] + (
            ["quantize.grouped_mm.float8"] if g.moe else [])
    tables: dict[str, dict[str, Any]] = {
        "job": {"description": f"mosaic export of {spec.source}"},
        "model": {"name": model_name(spec), "flavor": "mosaic", "converters": converters},
        "training": {
            "local_batch_size": local,
            "global_batch_size": spec.global_seqs,
            "seq_len": spec.seq_len,
            "mixed_precision_param": "float32" if spec.precision == "fp32" else "bfloat16",
        },
        "parallelism": parallelism,
        "activation_checkpoint": {"mode": spec.checkpointing}
        | ({"selective_ac_option": "op"} if spec.checkpointing == "selective" else {}),
    }
    return tables, unsupported


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def render(spec: ExportSpec) -> ExportResult:
    """TOML text: header comments, then one table per section."""
    tables, unsupported = job_config(spec)
    lines = [f"# {line}" for line in header_lines(spec, "torchtitan", unsupported)]
    for name, table in tables.items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return ExportResult("torchtitan", "\n".join(lines) + "\n", ".toml", unsupported)
