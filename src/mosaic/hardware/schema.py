"""The YAML schema of hardware catalog files, validated once at the boundary (pydantic).

A catalog file is a mapping with optional `devices:` and `systems:` lists; every number is
`{value: ..., source: "..."}`. See docs/hardware.md for the full description.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from mosaic.errors import MosaicInputError, shown
from mosaic.limits import LIMITS, shown_number
from mosaic.output_kinds import output_command
from mosaic.schema_validation import parse_yaml, read_text

Dtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "fp4"]
# GPU generations the software defaults know (attention kernels, NCCL protocol caps, MoE
# dispatchers, block-scaled FP8/FP4): a generation outside them would silently get none
# ada: L40S, L4, RTX 6000 Ada (sm_89: FP8 tensor cores, no NVLink); no stack or kernel table
# has Ada entries yet, so it takes the generic defaults, and says so (perf.machine)
Architecture = Literal["ampere", "ada", "hopper", "blackwell", "cdna3"]
NonEmptyStr = Annotated[str, Field(min_length=1, pattern=r"\S")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourcedValue(_Strict):
    """A positive, finite number with its provenance."""

    value: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    source: NonEmptyStr


def _physical(low: float, high: float, unit: str, example: str) -> type[SourcedValue]:
    """A SourcedValue that must lie in [low, high] ``unit``: a figure in the wrong unit
    (TFLOP/s for FLOP/s, GB/s for bytes/s) is off by 10^3-10^12 and is refused, not used
    (a trial's 2250 FLOP/s peak predicted a step of 3.8e10 s)."""

    class PhysicalValue(SourcedValue):
        unit_text: ClassVar[str] = unit  # named by the message of a missing field
        example_text: ClassVar[str] = example

        @model_validator(mode="after")
        def _in_range(self) -> PhysicalValue:
            if not low <= self.value <= high:
                raise ValueError(f"{self.value:g} {unit} is outside {low:g}..{high:g} {unit}; "
                                 f"give it in {unit} ({example})")
            return self

    return PhysicalValue


# Ranges that hold every accelerator and link of 2020-2030 with a factor of 10-100 to spare.
FlopsValue = _physical(1e12, 1e18, "FLOP/s", "2,250 TFLOP/s is 2.25e15")
# the example is the capacity CUDA reports, not the marketing GB (an 80 GB H100 reports
# 79.1 GiB, devices.yaml): 8e10 would read an 80 GB part 6% small (a trial)
MemoryBytesValue = _physical(1e9, 1e13, "bytes",
                             "the capacity CUDA reports: an 80 GB H100 is 8.49e10")
BandwidthValue = _physical(1e8, 1e14, "bytes/s", "900 GB/s is 9e11")
# a NIC's example in the bits per second NICs are sold by (a trial read the NVLink example)
NicBandwidthValue = _physical(1e8, 1e14, "bytes/s", "a 400 Gb/s NIC is 5e10")
# One NIC's rate per direction: 1.6 Tb/s, the next generation announced (ConnectX-9);
# NVIDIA's ConnectX-8 SuperNIC, the fastest shipping, runs 800 Gb/s
MAX_NIC_BYTES_PER_S = 1.6e12 / 8
LatencyValue = _physical(1e-8, 1e-2, "s", "14 us is 1.4e-5")
RateValue = _physical(1e9, 1e16, "per s", "5 Tera-exponentials/s is 5e12")


class SourcedCount(_Strict):
    """A positive integer with its provenance."""

    value: Annotated[StrictInt, Field(ge=1)]
    source: NonEmptyStr


class SourcedFlag(_Strict):
    value: bool
    source: NonEmptyStr


class DeviceEntry(_Strict):
    name: NonEmptyStr
    aliases: list[NonEmptyStr] = []
    vendor: NonEmptyStr
    description: str = ""
    peak_flops_per_s: Annotated[dict[Dtype, FlopsValue], Field(min_length=1)]
    achievable_flops_per_s: dict[Dtype, FlopsValue] = {}
    hbm_bytes: MemoryBytesValue
    hbm_bw_bytes_per_s: BandwidthValue
    scale_up_bw_bytes_per_s: BandwidthValue
    # one direct link to one peer of a switchless (mesh) scale-up fabric; unstated: switched
    scale_up_link_bw_bytes_per_s: BandwidthValue | None = None
    sfu_exp2_per_s: RateValue | None = None
    host_link_bw_bytes_per_s: BandwidthValue | None = None
    # streaming multiprocessors (compute units): the waves a GEMM's tiles fill
    sm_count: SourcedCount | None = None
    architecture: Architecture | None = None
    kernel_fit: NonEmptyStr | None = None
    default_system: NonEmptyStr | None = None  # the node type a bare GPU name means

    @field_validator("peak_flops_per_s", mode="before")
    @classmethod
    def _some_peak(cls, value: Any) -> Any:
        """An empty peak table names the precisions it may hold (pydantic said 'Dictionary
        should have at least 1 item'; a fuzz trial)."""
        if isinstance(value, dict) and not value:
            raise ValueError(f"needs the dense peak of one precision at least, of "
                             f"{', '.join(get_args(Dtype))}")
        return value

    @field_validator("architecture", mode="before")
    @classmethod
    def _architecture_any_case(cls, value: Any) -> Any:
        """Generations match case-insensitively, as device names do (Hopper is hopper)."""
        return value.casefold() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _achievable_below_peak(self) -> DeviceEntry:
        for dtype, achievable in self.achievable_flops_per_s.items():
            peak = self.peak_flops_per_s.get(dtype)
            if peak is None:
                raise ValueError(
                    f"achievable_flops_per_s.{dtype} given but peak_flops_per_s has no {dtype}"
                )
            if achievable.value > peak.value:
                raise ValueError(
                    f"achievable_flops_per_s.{dtype} = {achievable.value:.4g} exceeds "
                    f"peak_flops_per_s.{dtype} = {peak.value:.4g}"
                )
        link = self.scale_up_link_bw_bytes_per_s
        if link is not None and link.value > self.scale_up_bw_bytes_per_s.value:
            raise ValueError(
                f"scale_up_link_bw_bytes_per_s = {link.value:.4g} (one link to one peer) "
                f"exceeds scale_up_bw_bytes_per_s = {self.scale_up_bw_bytes_per_s.value:.4g} "
                "(all of a GPU's links together)")
        return self


class SystemEntry(_Strict):
    name: NonEmptyStr
    aliases: list[NonEmptyStr] = []
    description: str = ""
    device: NonEmptyStr
    gpus_per_node: SourcedCount
    scale_up_domain_gpus: SourcedCount
    nics_per_node: SourcedCount
    nic_bw_bytes_per_s: NicBandwidthValue
    scale_out_fabric: NonEmptyStr
    # per-step collective latencies the model uses in place of its fitted defaults
    # (perf/data/microbench_fits.yaml); unstated, the defaults hold
    scale_up_latency_s: LatencyValue | None = None
    scale_out_latency_s: LatencyValue | None = None
    nccl_low_latency_protocols: SourcedFlag = SourcedFlag(
        value=True, source="NCCL default: LL, LL128 and Simple all enabled")

    @model_validator(mode="after")
    def _counts_in_range(self) -> SystemEntry:
        """GPUs per node and per NVLink domain, and NICs per node, within the largest node
        built: a 10^30-GPU node was shown, and a 10^30-NIC one gave 1.6e39 B/s of scale-out
        per GPU (a fuzz trial)."""
        bounds = LIMITS["gpus_per_node"]
        for name in ("gpus_per_node", "scale_up_domain_gpus", "nics_per_node"):
            value = getattr(self, name).value
            if value > bounds.high:
                shown = shown_number(value)
                why = bounds.why if name != "nics_per_node" else "more NICs than GPUs in " \
                    "the largest NVLink domain announced (NVL576)"
                raise ValueError(f"{name} = {shown}; allowed: an integer in "
                                 f"1..{bounds.high:g} ({why})")
        return self

    @model_validator(mode="after")
    def _nic_rate_is_bytes(self) -> SystemEntry:
        """A NIC above 1.6 Tb/s (2e11 B/s; the fastest shipping, ConnectX-8, is 800 Gb/s)
        is a rate in bits typed as bytes: 400 Gb/s is 5e10, not 4e11."""
        rate = self.nic_bw_bytes_per_s.value
        if rate > MAX_NIC_BYTES_PER_S:
            raise ValueError(
                f"nic_bw_bytes_per_s = {rate:g} is {rate * 8 / 1e12:g} Tb/s per NIC, above "
                f"the fastest NIC announced ({MAX_NIC_BYTES_PER_S * 8 / 1e12:g} Tb/s): bits "
                "typed as bytes (400 Gb/s is 5e10 bytes/s), or the node's NICs summed? give "
                "one NIC's rate and their count as nics_per_node")
        return self

    @model_validator(mode="after")
    def _domain_tiles_nodes(self) -> SystemEntry:
        node, domain = self.gpus_per_node.value, self.scale_up_domain_gpus.value
        if node % domain and domain % node:
            raise ValueError(
                f"scale_up_domain_gpus = {domain} and gpus_per_node = {node}: one must "
                "divide the other (NVLink domains are whole hosts or split hosts evenly)"
            )
        return self


class CatalogFile(_Strict):
    devices: list[DeviceEntry] = []
    systems: list[SystemEntry] = []


def read_catalog_file(path: Path) -> CatalogFile:
    """Parse and validate one catalog YAML file; MosaicInputError naming file, entry, field."""
    # bounded, UTF-8, YAML 1.2 numbers, limited nesting: as every input file
    raw = parse_yaml(read_text(path, "hardware catalog file"), str(path))
    if raw is None:
        raise MosaicInputError(f"{path}: file is empty; a hardware catalog file holds "
                               "'devices:' and/or 'systems:' lists (docs/hardware.md)")
    if not isinstance(raw, dict):
        raise MosaicInputError(
            f"{path}: a hardware catalog file must be a mapping with 'devices:' and/or "
            f"'systems:' lists, got {type(raw).__name__}"
        )
    written_by = output_command(raw)
    if written_by or "runs" in raw or "model" in raw:  # another file given as a catalog
        # (trials: a job file; a plan's JSON answered "Extra inputs are not permitted" once
        # for each of its keys)
        kind = (f"the file that `mosaic {written_by}` writes" if written_by
                else "a run-record file (validate and calibrate read it)" if "runs" in raw
                else "a job file (perf, layouts and explain read it)")
        raise MosaicInputError(f"{path}: {kind}, not a hardware catalog, which holds "
                               "'devices:' and/or 'systems:' lists (docs/hardware.md)")
    lists = list(CatalogFile.model_fields)
    if raw and not set(lists) & set(raw) and not any(
            difflib.get_close_matches(str(key), lists, n=1) for key in raw):
        # neither list, nor a misspelling of one ('device:' is told "did you mean 'devices'?"
        # below): a HuggingFace config.json answered "Extra inputs are not permitted" once
        # for each of its keys (a trial)
        keys = ", ".join(shown(str(key)) for key in list(raw)[:3])
        keys += f" and {len(raw) - 3:,} more" if len(raw) > 3 else ""
        hf = (f"; a HuggingFace config.json (model_type {shown(raw['model_type'])}) is "
              "read with --model" if "model_type" in raw else "")
        raise MosaicInputError(f"{path}: has neither a 'devices:' nor a 'systems:' list, so it "
                               f"is not a hardware catalog (docs/hardware.md); its keys: "
                               f"{keys}{hf}")
    try:
        return CatalogFile.model_validate(raw)
    except ValidationError as exc:
        problems = [_describe(error, raw) for error in exc.errors()]
        raise MosaicInputError(f"{path}: " + "; ".join(problems)) from None


def _describe(error: Any, raw: dict[str, Any]) -> str:
    """One validation error as 'device 'X' (entry 2): field 'hbm_bytes.value': message'."""
    loc = list(error["loc"])
    where = "file"
    schema: type[BaseModel] = CatalogFile  # the model whose fields a misspelt name is among
    if len(loc) >= 2 and loc[0] in ("devices", "systems") and isinstance(loc[1], int):
        kind = loc[0][:-1]
        schema = DeviceEntry if kind == "device" else SystemEntry
        entries = raw.get(loc[0])
        entry = entries[loc[1]] if isinstance(entries, list) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        label = f"{kind} {shown(name)}" if isinstance(name, str) else kind
        where = f"{label} (entry {loc[1] + 1})"
        loc = loc[2:]
    message = error["msg"].removeprefix("Value error, ")
    field = ".".join(str(part) for part in loc).replace(".[key]", " (key)")
    if not field:  # a rule over the entry names its field first ('nic_bw_bytes_per_s = ...')
        named = re.match(r"\w+", message)
        field = (named.group(0) if named and named.group(0) in schema.model_fields
                 else "(whole entry)")
    # a bare number where {value, source} belongs
    if error["type"] == "model_type" and ("Sourced" in message or "PhysicalValue" in message):
        message = "every number is written {value: NUMBER, source: \"where it comes from\"}"
    elif error["type"] == "model_type":  # pydantic's words name its class: "Input should be a
        # valid dictionary or instance of DeviceEntry (got 1)" (a trial)
        if field == "(whole entry)":  # a device or system entry
            fields = [name for name, info in schema.model_fields.items() if info.is_required()]
            message = (f"each {where.split()[0]} must be a mapping of fields "
                       f"({', '.join(fields[:3])}, ...; docs/hardware.md)")
        else:
            message = "must be a mapping of fields (docs/hardware.md)"
        if isinstance(error.get("input"), list):
            message += " (got a list)"
    if error["type"] not in ("missing", "extra_forbidden") and not isinstance(
        error.get("input"), dict | list
    ):
        message += f" (got {shown(error.get('input'))})"
    # a key left empty ('hbm_bytes:' or 'value:' with nothing after it: YAML's null, which
    # no required field takes) is as good as missing
    empty = error["type"].endswith("_type") and error.get("input") is None
    if (error["type"] == "missing" or empty) and loc and str(loc[0]) in schema.model_fields:
        message = f"missing: {_expected_form(schema, [str(part) for part in loc])}"
    if error["type"] == "extra_forbidden" and loc:  # a misspelt field, or value/source
        known = list(schema.model_fields) if len(loc) == 1 else list(SourcedValue.model_fields)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
    return f"{where}: field '{field}': {message}"


_SOURCED = 'source: "where it comes from"'


def _expected_form(schema: type[BaseModel], loc: list[str]) -> str:
    """What the missing field at ``loc`` holds, in the words of docs/hardware.md: its unit
    and the {value, source} form (pydantic said only "Field required"; a trial)."""
    name = loc[0]
    if len(loc) > 1 and loc[-1] == "source":
        return "where the number comes from (a datasheet, URL or measurement)"
    if name == "peak_flops_per_s" and len(loc) == 1:
        return (f"the dense peak FLOP/s of each precision, e.g. bf16: {{value: 9.894e+14, "
                f"{_SOURCED}}}; precisions: {', '.join(get_args(Dtype))}")
    annotation = schema.model_fields[name].annotation
    candidates = [annotation, *get_args(annotation)]  # X | None and dict[K, X]: X among them
    physical = next((c for c in candidates if isinstance(c, type)
                     and issubclass(c, SourcedValue) and hasattr(c, "unit_text")), None)
    if physical is not None:
        return (f"a number in {physical.unit_text}, written {{value: NUMBER, {_SOURCED}}} "
                f"({physical.example_text})")
    if SourcedCount in candidates:
        return f"an integer count, written {{value: N, {_SOURCED}}}"
    return "text" if annotation is str else "a value (docs/hardware.md)"
