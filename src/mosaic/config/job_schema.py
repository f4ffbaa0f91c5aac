"""Job files: one training job = model, data, precision, optimizer, layout and hardware.

The block and field names follow the paper's Appendix E listing (ScalePlan format:
``model``, ``moe``, ``search``, ``performance``, ``optimizer``, ``data``, ``hardware``) plus
a ``parallelism`` block, so such files load as written. Aliases (``gbs``, ``seqlen``,
``microbatch_sz``, ...) are renamed to one canonical name before validation, so
``--set data.global_batch=512`` works on a file that wrote ``gbs``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mosaic.arch import Geometry
from mosaic.config.model_schema import geometry_from_document
from mosaic.errors import MosaicInputError
from mosaic.hardware import get_system
from mosaic.limits import LIMITS, check_pipeline
from mosaic.perf.collectives import BusBandwidthTable
from mosaic.perf.kernels import GemmTable, GroupedGemmTable
from mosaic.perf.machine import MeasuredTables
from mosaic.perf.plan import Checkpointing, ParallelPlans, Sharding, single_plan
from mosaic.perf.workload import OptimizerKind, Precision, Workload
from mosaic.schema_validation import load_yaml_mapping, parse_yaml, validate_mapping

# alias -> canonical field name, per block (Appendix E names on the left).
FIELD_ALIASES: dict[str, dict[str, str]] = {
    "data": {"gbs": "global_batch", "seqlen": "seq_len", "microbatch_sz": "micro_batch"},
    "performance": {"activation_checkpointing_type": "checkpointing"},
    "optimizer": {"optimizer_type": "kind"},
    "search": {"num_devices": "devices"},
    "hardware": {"node_type": "system"},
}
KNOWN_BLOCKS = {
    "model",
    "moe",
    "search",
    "performance",
    "optimizer",
    "data",
    "hardware",
    "parallelism",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataBlock(_Strict):
    global_batch: int = Field(gt=0, le=LIMITS["global_batch"].high,
                              description="sequences per optimizer step")
    seq_len: int = Field(gt=0, le=LIMITS["seq_len"].high, description="tokens per sequence")
    micro_batch: int = Field(default=1, gt=0, le=LIMITS["micro_batch"].high,
                             description="sequences per micro-batch")


class PerformanceBlock(_Strict):
    checkpointing: Literal["none", "selective", "full"] = "none"
    attention_kernel: Literal["auto", "cudnn", "fa2", "fa3", "reference"] = Field(
        default="auto", description="flash-attention kernel; auto = the stack's default")


class OptimizerBlock(_Strict):
    kind: OptimizerKind = OptimizerKind.ADAMW


class SearchBlock(_Strict):
    devices: int | None = Field(default=None, gt=0, le=LIMITS["devices"].high,
                                description="GPUs in the job")


class HardwareBlock(_Strict):
    system: str = Field(description="node or rack type from the catalog, e.g. p6-b200.48xlarge")
    nodes: int | None = Field(default=None, gt=0, le=LIMITS["nodes"].high,
                              description="nodes; else search.devices")
    precision: Precision | None = None
    usable_memory_fraction: float = Field(
        default=1.0, gt=0, le=1, description="share of device memory a plan may fill"
    )
    gemm_table: Path | None = Field(default=None, description="measured GEMM times CSV/Parquet")
    grouped_gemm_table: Path | None = Field(
        default=None, description="measured grouped expert GEMM times CSV/Parquet"
    )
    collective_table: Path | None = Field(
        default=None, description="measured collective bus bandwidths CSV/Parquet"
    )


class ParallelismBlock(_Strict):
    tp: int = Field(default=1, gt=0, le=LIMITS["parallel_degree"].high)
    pp: int = Field(default=1, gt=0, le=LIMITS["parallel_degree"].high)
    vpp: int = Field(default=1, gt=0, le=LIMITS["vpp"].high)
    cp: int = Field(default=1, gt=0, le=LIMITS["parallel_degree"].high)
    ep: int = Field(default=1, gt=0, le=LIMITS["parallel_degree"].high)
    etp: int = Field(default=1, gt=0, le=LIMITS["parallel_degree"].high)
    dp: int | None = Field(default=None, gt=0, le=LIMITS["parallel_degree"].high,
                           description="default: devices / (tp·pp·cp)")
    sharding: str = "zero1"
    hsdp_shard: int | None = Field(default=None, gt=0, le=LIMITS["parallel_degree"].high)
    sequence_parallel: bool | None = Field(default=None, description="default: tp > 1")
    stack: str = "megatron-core"
    fsdp_gather: Literal["auto", "block", "tensor"] = Field(
        default="auto", description="FSDP gathers per block or per tensor; auto: by stack")
    uneven_stages: bool = Field(
        default=False, description="allow pp·vpp that does not divide the layers")
    dispatcher: Literal["alltoall", "deepep", "hybridep"] = Field(
        default="alltoall", description="EP token dispatch")


@dataclass(frozen=True)
class JobSpec:
    """A validated job: what is trained, how it is laid out, and on which hardware."""

    workload: Workload
    plan: ParallelPlans  # length 1
    system_name: str
    n_devices: int | None
    nodes: int | None
    usable_memory_fraction: float = 1.0
    tables: MeasuredTables = field(default_factory=MeasuredTables)


def _canonical(document: dict[str, Any], where: str) -> dict[str, Any]:
    """Copy of ``document`` with alias field names renamed to canonical ones."""
    unknown = set(document) - KNOWN_BLOCKS
    if unknown:
        raise MosaicInputError(
            f"{where}: unknown block(s) {sorted(unknown)}; allowed: {sorted(KNOWN_BLOCKS)}"
        )
    result = copy.deepcopy(document)
    for block, aliases in FIELD_ALIASES.items():
        section = result.get(block)
        if not isinstance(section, dict):
            continue
        for alias, canonical in aliases.items():
            if alias in section:
                if canonical in section:
                    raise MosaicInputError(
                        f"{where}: {block}: give {alias!r} or {canonical!r}, not both"
                    )
                section[canonical] = section.pop(alias)
    return result


def apply_overrides(document: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``block.field=value`` overrides (values parsed as YAML scalars)."""
    result = copy.deepcopy(document)
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or len(parts) != 2 or not all(parts):
            raise MosaicInputError(f"--set {item!r}: expected block.field=value")
        block, field = parts
        if block not in KNOWN_BLOCKS:
            raise MosaicInputError(f"--set {item!r}: unknown block {block!r}")
        field = FIELD_ALIASES.get(block, {}).get(field, field)
        section = result.setdefault(block, {})
        if not isinstance(section, dict):
            raise MosaicInputError(f"--set {item!r}: block {block!r} is not a mapping")
        section[field] = parse_yaml(raw, f"--set {item!r}")
    return result


def _expert_tp(document: dict[str, Any], parallel: ParallelismBlock, where: str) -> int:
    """ETP from ``parallelism.etp`` or the listing's ``moe.expert_tp_degree``; they must agree."""
    in_parallelism = "etp" in (document.get("parallelism") or {})
    in_moe = (document.get("moe") or {}).get("expert_tp_degree")
    if in_parallelism and in_moe is not None and in_moe != parallel.etp:
        raise MosaicInputError(
            f"{where}: parallelism.etp={parallel.etp} contradicts moe.expert_tp_degree={in_moe}"
        )
    return parallel.etp if in_parallelism or in_moe is None else int(in_moe)


def _measured_tables(hardware: HardwareBlock, base: Path) -> MeasuredTables:
    """Load the measured tables a hardware block names (paths relative to the job file)."""

    def resolve(path: Path | None) -> Path | None:
        return None if path is None else (path if path.is_absolute() else base / path)

    gemm, grouped, collectives = (resolve(p) for p in (
        hardware.gemm_table, hardware.grouped_gemm_table, hardware.collective_table))
    return MeasuredTables(
        gemm=GemmTable.from_file(gemm) if gemm else None,
        grouped_gemm=GroupedGemmTable.from_file(grouped) if grouped else None,
        collectives=BusBandwidthTable.from_file(collectives) if collectives else None,
    )


def _block(schema: type[BaseModel], document: dict[str, Any], name: str, where: str) -> Any:
    data = document.get(name)
    if data is None:
        data = {}
    return validate_mapping(schema, data, f"{where}: {name}")


def job_from_document(document: dict[str, Any], where: str) -> JobSpec:
    """Validate a parsed job document (aliases allowed) into a :class:`JobSpec`."""
    document = _canonical(document, where)
    geometry: Geometry = geometry_from_document(document, where)
    if "data" not in document:
        raise MosaicInputError(f"{where}: missing required block 'data'")
    if "hardware" not in document:
        raise MosaicInputError(f"{where}: missing required block 'hardware'")
    data = _block(DataBlock, document, "data", where)
    performance = _block(PerformanceBlock, document, "performance", where)
    optimizer = _block(OptimizerBlock, document, "optimizer", where)
    search = _block(SearchBlock, document, "search", where)
    hardware = _block(HardwareBlock, document, "hardware", where)
    parallel = _block(ParallelismBlock, document, "parallelism", where)
    model_precision = document["model"].get("precision", "bf16")
    precision = hardware.precision or Precision(model_precision)
    workload = Workload(
        geometry=geometry,
        global_batch=data.global_batch,
        seq_len=data.seq_len,
        precision=precision,
        optimizer=optimizer.kind,
        stack=parallel.stack,
        attention_kernel=(None if performance.attention_kernel == "auto"
                          else performance.attention_kernel),
        fsdp_gather=None if parallel.fsdp_gather == "auto" else parallel.fsdp_gather,
        uneven_pipeline_stages=parallel.uneven_stages,
        dispatcher=parallel.dispatcher,
    )
    devices = search.devices
    if devices is None and hardware.nodes is not None:
        devices = hardware.nodes * get_system(hardware.system).gpus_per_node
    dp = parallel.dp
    if dp is None and devices is not None:
        model_ranks = parallel.tp * parallel.pp * parallel.cp
        if devices % model_ranks:
            raise MosaicInputError(
                f"{where}: {devices} devices are not a multiple of tp·pp·cp={model_ranks}"
            )
        dp = devices // model_ranks
    if dp is None:
        raise MosaicInputError(
            f"{where}: give parallelism.dp, search.devices or hardware.nodes"
        )
    etp = _expert_tp(document, parallel, where)
    check_pipeline(parallel.pp, parallel.vpp, geometry.layers, where)
    ranks = parallel.tp * parallel.pp * parallel.cp * dp
    if ranks > LIMITS["devices"].high:
        raise MosaicInputError(f"{where}: tp·pp·cp·dp = {ranks} devices; allowed: at most "
                               f"{LIMITS['devices'].describe()} ({LIMITS['devices'].why})")
    plan = single_plan(
        tp=parallel.tp,
        pp=parallel.pp,
        vpp=parallel.vpp,
        cp=parallel.cp,
        dp=dp,
        ep=parallel.ep,
        etp=etp,
        micro_batch=data.micro_batch,
        sharding=Sharding.parse(parallel.sharding),
        checkpointing=Checkpointing.parse(performance.checkpointing),
        hsdp_shard=parallel.hsdp_shard,
        sequence_parallel=(
            parallel.sequence_parallel
            if parallel.sequence_parallel is not None
            else parallel.tp > 1
        ),
    )
    n_devices = search.devices if search.devices is not None else int(plan.n_devices[0])
    return JobSpec(
        workload=workload,
        plan=plan,
        system_name=hardware.system,
        n_devices=n_devices,
        nodes=hardware.nodes,
        usable_memory_fraction=hardware.usable_memory_fraction,
        tables=_measured_tables(hardware, Path(where).parent),
    )


def load_job(path: Path, overrides: list[str] | None = None) -> JobSpec:
    """Read, alias-normalise, override and validate a job YAML file."""
    document = _canonical(load_yaml_mapping(path), str(path))
    return job_from_document(apply_overrides(document, overrides or []), str(path))
