"""The studio's job editor: form fields -> the CLI's job document -> prediction.

A form is a flat mapping ``"block.field" -> text`` (what the page's inputs hold). It is
turned into the same job document a YAML file holds and validated by the CLI's schema
(:func:`mosaic.config.job_schema.job_from_document`), so the studio accepts exactly what
`mosaic perf` accepts. Errors become ``{field: message}`` for the page to show next to
the field.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace
from typing import Any

import yaml

from mosaic.arch import Geometry
from mosaic.arch.ladder import ladder_geometry
from mosaic.config.convert import model_document
from mosaic.config.job_schema import (
    KNOWN_BLOCKS,
    REQUIRED_WHEN_GIVEN,
    JobSpec,
    canonical_job_document,
    field_value,
    job_from_document,
)
from mosaic.errors import MosaicInputError, shown
from mosaic.evaluate.job import JobPrediction, check_job_layout, cluster_for, predict_job
from mosaic.perf.calibration import Calibration
from mosaic.schema_validation import int_from_text, parse_json
from mosaic.stacks import DEFAULT_STACK, known_stacks

WHERE = "job"  # the name validation messages start with ("job: batch: micro_seqs: ...")
MODEL_SOURCES = ("ladder", "job", "hf")
LADDER_FIELDS = ("ladder.q", "ladder.experts", "ladder.top_k", "ladder.split_factor")
GENERAL = "_general"  # errors that belong to no single field
PARALLEL_AXES = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")
# A setting the page offers as a switch: "" leaves it to the job file or the stack's recipe
# (an empty field is not written into the job document), else stated true or false.
SWITCH_CHOICES = ("", "true", "false")
MAX_FORM_FIELDS = 100
MAX_FIELD_CHARS = 200_000  # a pasted HuggingFace config.json


class FormError(Exception):
    """Field -> message for the page."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


# The default form: the paper's Table 4 optimum (q=12, E=96, K=2, G=4) on 32 p6-b200 nodes
# with the Appendix E listing's layout style (ep=8, pp=8, micro-batch 4; Table 4).
DEFAULT_FORM: dict[str, str] = {
    "model.source": "ladder",
    "ladder.q": "12", "ladder.experts": "96", "ladder.top_k": "2", "ladder.split_factor": "4",
    "hf.config": "",
    "hardware.system": "p6-b200.48xlarge", "hardware.nodes": "32",
    "performance.precision": "bf16",
    "batch.global_seqs": "1024", "batch.seq_len": "2048", "batch.micro_seqs": "4",
    "parallelism.tp": "1", "parallelism.pp": "8", "parallelism.vpp": "1",
    "parallelism.cp": "1", "parallelism.ep": "8", "parallelism.etp": "1",
    "parallelism.sharding": "zero1", "performance.stack": DEFAULT_STACK,
    "performance.checkpointing": "full", "optimizer.kind": "adamw",
}


# What a form field that must hold a value asks for when it is empty (or missing, or a
# JSON null): one wording for all of them, naming the field ("give the number of nodes").
# The schema's own "Field required" (batch.seq_len, batch.global_seqs) and a null's
# "(got 'None')" read otherwise beside the node count's and the degrees' (a trial).
ASKED_FOR = {"hardware.nodes": "the number of nodes",
             "batch.global_seqs": "the global batch in sequences",
             "batch.seq_len": "the sequence length in tokens",
             **REQUIRED_WHEN_GIVEN,
             "ladder.q": "the ladder seed q", "ladder.experts": "the experts E (0: dense)",
             "ladder.top_k": "the active experts K", "ladder.split_factor": "the split factor G",
             "hf.config": "the model's HuggingFace config.json (paste its text)"}
_FIELD_REQUIRED = re.compile(rf"^{WHERE}: \w+: \w+: Field required$")  # pydantic's


def form_text(value: Any) -> str:
    """A form value sent as JSON as the page's input holds it: a null is an empty field
    (it read "got 'None'"), anything else its text."""
    return "" if value is None else str(value)


def _int(form: dict[str, str], key: str) -> int:
    text = str(form.get(key, "")).strip()
    try:
        return int_from_text(text)  # '9_6' is not 96 (Python's int() says it is)
    except ValueError:
        # an empty or left-out field is missing, not a bad integer '' (a trial)
        raise FormError({key: f"must be an integer, got {shown(text)}" if text
                         else f"give {ASKED_FOR[key]}"}) from None


def model_geometry(form: dict[str, str], job_document: dict[str, Any] | None) -> Geometry | None:
    """The geometry the form selects; None means "the job document's own model block"."""
    source = form.get("model.source", "ladder")
    if source == "job":
        if job_document is None:
            raise FormError({"model.source": "no job file was given to `mosaic studio --job`"})
        return None
    if source == "hf":
        from mosaic.arch.hf_import import geometry_from_hf_config

        text = str(form.get("hf.config", "")).strip()
        if not text:  # (it read "config.json: empty, ... did the command that wrote it fail?")
            raise FormError({"hf.config": f"give {ASKED_FOR['hf.config']}"})
        try:
            config = parse_json(text, "config.json")
        except MosaicInputError as exc:
            raise FormError({"hf.config": str(exc) + _job_yaml_hint(text)}) from None
        try:
            return geometry_from_hf_config(config, "config.json")
        except MosaicInputError as exc:
            raise FormError({"hf.config": str(exc)}) from None
    if source != "ladder":
        raise FormError({"model.source": f"allowed: {', '.join(MODEL_SOURCES)}"})
    q, experts, top_k, split = (_int(form, key) for key in LADDER_FIELDS)
    try:
        if experts == 0:
            return ladder_geometry(q)
        return ladder_geometry(q, experts, top_k, split)
    except MosaicInputError as exc:
        message = str(exc)
        raise FormError({_first_ladder_field(message): message}) from None


# Blocks of a job file, any spelling (config.job_schema.canonical_job_document), none of
# them a key of a HuggingFace config.json
JOB_FILE_BLOCKS = ("model", "parallelism", "parallel", "batch", "data", "hardware")


def _job_yaml_hint(text: str) -> str:
    """What to do with a job YAML pasted as the config.json: it read "not valid JSON
    (Expecting value: line 1, column 1)" alone (a trial); empty for any other text."""
    from mosaic.schema_validation import parse_yaml

    try:
        document = parse_yaml(text, "config.json")
    except MosaicInputError:
        return ""
    blocks = [key for key in JOB_FILE_BLOCKS if isinstance(document, dict) and key in document]
    if not blocks:
        return ""
    return (f"; this is a job YAML (blocks {', '.join(blocks)}), not a HuggingFace "
            "config.json: open it with `mosaic studio --job FILE`, whose model becomes the "
            "'job' choice of 'model from'")


def _first_ladder_field(message: str) -> str:
    """The ladder field a message names first ("moe.top_k (200) must not exceed moe.experts
    (96)" is about K: a trial found it beside E), else q."""
    positions = {}
    for key in LADDER_FIELDS:
        name = key.split(".")[1]
        found = [i for i in (message.find(name), message.find(name.replace("_", " ")))
                 if i >= 0]
        if found:
            positions[key] = min(found)
    return min(positions, key=positions.__getitem__) if positions else "ladder.q"


def geometry_blocks(geometry: Geometry) -> dict[str, Any]:
    """The job YAML's ``model:`` block for a geometry (docs/schema.md; loads back exactly)."""
    return {"model": model_document(geometry)}


def job_document(form: dict[str, str], geometry: Geometry | None,
                 base: dict[str, Any] | None) -> dict[str, Any]:
    """The job document of a form (values stay text: the schema parses them)."""
    if len(form) > MAX_FORM_FIELDS or any(len(str(v)) > MAX_FIELD_CHARS for v in form.values()):
        raise FormError({GENERAL: "request too large"})
    document: dict[str, Any] = {}
    if geometry is None:
        assert base is not None
        document["model"] = canonical_job_document(base, WHERE, set())["model"]
    else:
        document.update(geometry_blocks(geometry))
    if base is not None:  # the job file's other settings (dispatcher, kernels, ...) carry over
        canonical = canonical_job_document(base, WHERE, set())
        document.update({block: dict(fields) for block, fields in canonical.items()
                         if block not in ("model", "search") and isinstance(fields, dict)})
        # the layouts the job's team runs travel with it (its GPUs come from the form)
        search = canonical.get("search")
        limits = ({name: value for name, value in search.items() if name != "devices"}
                  if isinstance(search, dict) else {})
        if limits:
            document["search"] = limits
    for key, value in form.items():
        block, _, field = key.partition(".")
        if block in KNOWN_BLOCKS and block != "model" and field:
            text = str(value).strip()
            if text != "":  # a YAML scalar, as a job file would hold it ("4" -> 4)
                try:
                    value = field_value((block, field), text, key)
                except MosaicInputError as exc:  # beside its field, not above the form
                    raise FormError({key: str(exc)}) from None
                document.setdefault(block, {})[field] = value
    parallelism = document.get("parallelism", {})
    if "parallelism.dp" not in form:
        # the editor has no dp field: dp is what the node count leaves, as for a job file
        # that states none. A job file's (or a run record's) stated dp refused every edit
        # of the nodes or a degree, and every layouts row of another dp (a trial)
        parallelism.pop("dp", None)
    if "parallelism.pipeline_layout" in form and not str(
            form["parallelism.pipeline_layout"]).strip():
        # the field shows a job file's stated split; cleared (or cleared by a layouts row,
        # whose pp and vpp it would not fit), the split is no longer stated (a review: the
        # job file's came back)
        parallelism.pop("pipeline_layout", None)
    if "batch.local_seqs" in form and not str(form["batch.local_seqs"]).strip():
        # the page's "empty: all" (one pass of the whole per-rank batch, docs/schema.md):
        # a job file's stated local batch came back from the base document, and the field
        # could not be cleared (a trial: a cleared 4 still predicted four passes)
        document.get("batch", {}).pop("local_seqs", None)
    if parallelism.get("sharding", "hsdp") != "hsdp" and not str(
            form.get("parallelism.hsdp_shard", "")).strip():
        # the job file's shard group of hybrid sharding, which the form cannot clear (an
        # empty field is the job's), means nothing once the form picks another sharding (and
        # would be refused). One typed into the form is left for the schema to refuse, as
        # `mosaic perf` refuses a job file stating both ("set sharding: hsdp or drop
        # hsdp_shard"): a trial's typed group was ignored without a word
        parallelism.pop("hsdp_shard", None)
    return document


# "block: field" or "block.field"; a product of fields ("parallelism: pp·vpp = 16·4 ...")
_FIELD_PATH = re.compile(rf"^{WHERE}: (\w+)(?::\s|\.)(\w+(?:·\w+)*)")
_NAMED_VALUE = re.compile(rf"^{WHERE}: (\w+) '")  # "stack 'abc': unknown; known ..."
# (sequence_parallel: a rule refusing it names the degrees it is refused with, and the
# page's switch is the field to change; a review found it beside tp and ep alone)
# A layout rule naming the sharding or the stack ("sharding zero1 with pp=8, ep=8:
# nemo-automodel runs none, zero1, zero2 only with pp = ep = 1") is beside those fields too,
# not only the degrees (a trial); a stack by its registry name, as a whole word (not the
# fallback stack 'other', a word of many messages)
_NAMED_STACKS = tuple(name for name in known_stacks() if name != "other")
# The job quantities a layout rule names ("dp·micro_batch=32·4 must divide
# global_batch=1023", "2·cp=2·2 must divide seq_len=2050", "ep=8 must divide experts=100"),
# by the form field that sets each: a trial's edited batch, sequence length or ladder E was
# refused beside the nodes and degrees alone
_QUANTITY_FIELDS = {"global_batch": "batch.global_seqs", "seq_len": "batch.seq_len",
                    "local_seqs": "batch.local_seqs", "experts": "ladder.experts"}
_AXIS = re.compile(r"\b(" + "|".join((*PARALLEL_AXES, "micro_batch", "hsdp_shard",
                                       "sequence_parallel", "sharding", *_QUANTITY_FIELDS,
                                       *map(re.escape, _NAMED_STACKS))) + r")\b")
# 'unknown system ...' (where the cluster is built) or 'job: unknown device ...' (the job
# schema's hardware.gpu, hardware.default_systems.resolve_system); a catalog kind by the
# form field that names it (a trial found an unknown hardware.gpu in the general line)
_UNKNOWN = re.compile(rf"^(?:{WHERE}: )?unknown (\w+) ")
_KIND_FIELD = {"device": "gpu"}


def shown_fields(form: dict[str, str]) -> set[str]:
    """The form's fields the page shows: the ladder's for a ladder model only, the pasted
    config.json for an imported one only (a message beside a hidden field is not seen)."""
    source = form.get("model.source", "ladder")
    hidden = ({*LADDER_FIELDS} if source != "ladder" else set()) | (
        {"hf.config"} if source != "hf" else set())
    return set(form) - hidden


def message_fields(message: str, form_keys: set[str]) -> dict[str, str]:
    """``message`` beside each form field it is about: every axis a layout rule names
    (dp·micro_batch must divide the batch: the node count and the micro-batch), the field
    of a 'job: block: field' message, else the fields it names (:func:`named_fields`)."""
    # the devices (the node count) not filling tp·pp·cp names the axes too (a trial found it
    # above the results with no field marked)
    spread = "are not a multiple of tp·pp·cp" in message
    if message.startswith("invalid parallel layout") or spread:
        keys = [_axis_field(name, form_keys)
                for name in _AXIS.findall(message.partition(":")[2])]
        keys += ["hardware.nodes"] if spread else []
        found = [key for key in dict.fromkeys(keys) if key in form_keys]
        if found:
            return dict.fromkeys(found, message)
    match = _FIELD_PATH.match(message)
    if match:  # 'job: block: field ...': that field alone, or each of a product's fields
        # (a trial found pp·vpp's message beside pp only)
        block, fields = match.groups()
        keys = [_path_field(block, field, form_keys) for field in fields.split("·")]
        return dict.fromkeys([key for key in keys if key != GENERAL] or [GENERAL], message)
    # a rule across fields beside each field it names ('needs precision fp8 (got bf16)')
    named = named_fields(message, form_keys)
    field = _pattern_field(message, form_keys) or (named[0] if named else None)
    if field is None:
        return {GENERAL: message}
    return dict.fromkeys([field, *named[:2]], message)


# Job-file settings the page has no field for, by the page's field under which they are
# read: Megatron-Core reads (and checks) recompute_modules under recompute_granularity
# 'selective' only (transformer_config.py @ d98e8a64dd; job_schema.refuse_modules_the_model_
# lacks), the page's recompute field (a review found the refusal in the general line)
READ_UNDER = {"performance.recompute_modules": "performance.checkpointing"}


def _path_field(block: str, field: str, form_keys: set[str]) -> str:
    """The form field of a 'job: block: field' message: that field, else the field it is
    read under (READ_UNDER); GENERAL when the form has neither."""
    if block == "model":
        return "hf.config" if "hf.config" in form_keys else "model.source"
    key = f"{block}.{field}"
    if key not in form_keys:
        key = READ_UNDER.get(key, GENERAL)
    return key if key in form_keys else GENERAL


def _pattern_field(message: str, form_keys: set[str]) -> str | None:
    """The form field a message names by its pattern: 'unknown system 'x'', "stack 'abc':
    ...", or too many devices (the node count); None for none of them."""
    for pattern in (_UNKNOWN, _NAMED_VALUE):
        named = pattern.match(message)
        field = None if named is None else _KIND_FIELD.get(named.group(1), named.group(1))
        key = None if field is None else next(
            (k for k in sorted(form_keys) if k.endswith("." + field)), None)
        if key is not None:
            return key
    if "tp·pp·cp·dp = " in message:  # more devices than the limit: the node count
        return _axis_field("dp", form_keys)
    return None


# Field names too common as words to place a message by (optimizer.kind, model.source, ...)
GENERIC_FIELD_NAMES = frozenset({"kind", "source", "config"})


def named_fields(message: str, form_keys: set[str]) -> list[str]:
    """The form fields a message names, first named first: by the field's name
    ('fp8_dot_product_attention needs precision fp8') or its words ('price per GPU-hour',
    'memory fraction'); a rule across two fields ('needs precision fp8') names both. A trial
    found such messages above the form, beside no field."""
    text = " " + re.sub(r"[^a-z0-9_]+", " ", message.lower()) + " "
    words = text.replace("_", " ")
    found: dict[str, int] = {}
    for key in form_keys:
        name = key.partition(".")[2]
        if len(name) < 3 or name in GENERIC_FIELD_NAMES:
            continue
        # a one-word name only as a word of its own: 'experts' is not in 'routed_experts'
        spaced = words.find(f" {name.replace('_', ' ')} ") if "_" in name else -1
        positions = [i for i in (text.find(f" {name} "), spaced) if i >= 0]
        if positions:
            found[key] = min(positions)
    return sorted(found, key=found.__getitem__)


def _axis_field(axis: str, form_keys: set[str]) -> str:
    """The form field that sets a parallel axis: dp, where the form does not state it, is
    what the node count leaves (a trial's 100,000 nodes were blamed on the micro-batch)."""
    if axis == "micro_batch":
        return "batch.micro_seqs"
    if axis in _QUANTITY_FIELDS:
        return _QUANTITY_FIELDS[axis]
    if axis in _NAMED_STACKS:
        return "performance.stack"
    if axis == "dp" and "parallelism.dp" not in form_keys and "hardware.nodes" in form_keys:
        return "hardware.nodes"
    return f"parallelism.{axis}"


# Form fields that are not job-file fields: where the model comes from, and its inputs.
MODEL_FORM_FIELDS = ("model.source", "hf.config", *LADDER_FIELDS)


def check_form_fields(form: dict[str, str]) -> None:
    """Refuse a field no job block has (a typo, or a page of another version) and an empty
    node count; the schema names a bad field of a known block itself."""
    blocks = [block for block in KNOWN_BLOCKS if block != "model"]
    errors = {key: f"unknown field; a job form's fields are block.field with a block of "
                   f"{', '.join(blocks)}, or one of {', '.join(MODEL_FORM_FIELDS)}"
              for key in form
              if key not in MODEL_FORM_FIELDS
              and (key.partition(".")[0] not in blocks or not key.partition(".")[2])}
    if "hardware.nodes" in form and not str(form["hardware.nodes"]).strip():
        errors["hardware.nodes"] = f"give {ASKED_FOR['hardware.nodes']}"
    # an empty degree or micro-batch would be read as the schema's default of 1: a trial's
    # cleared ep predicted ep 1 without a word (vpp and etp left empty mean the stack's)
    for key, meaning in REQUIRED_WHEN_GIVEN.items():
        if key in form and not str(form[key]).strip():
            errors[key] = f"give {meaning}"
    if errors:
        raise FormError(errors)


@dataclass(frozen=True)
class StudioJob:
    """A validated form: the job spec and the document it came from."""

    spec: JobSpec
    document: dict[str, Any]
    geometry: Geometry


def validate_form(form: dict[str, str], base: dict[str, Any] | None) -> StudioJob:
    """Form -> job spec through the CLI's schema; FormError names the bad fields. What the
    model import warns of (an HF sliding window it cannot hold) joins the job's assumptions,
    as the CLI prints it."""
    check_form_fields(form)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        geometry = model_geometry(form, base)
    imported = tuple(str(warning.message) for warning in caught)
    document = job_document(form, geometry, base)
    try:
        spec = job_from_document(document, WHERE)
        if geometry is not None:  # the exact geometry (HF features the YAML cannot hold)
            spec = replace(spec, workload=replace(spec.workload, geometry=geometry))
        cluster_for(spec)  # unknown system, device count vs nodes
        spec = replace(spec, assumptions=(*spec.assumptions, *imported))
    except MosaicInputError as exc:
        errors = message_fields(str(exc), shown_fields(form))
        raise FormError({key: f"give {ASKED_FOR[key]}" if key in ASKED_FOR
                         and _FIELD_REQUIRED.match(message) else message
                         for key, message in errors.items()}) from None
    return StudioJob(spec=spec, document=document, geometry=spec.workload.geometry)


def predict_form(form: dict[str, str], base: dict[str, Any] | None,
                 calibration: Calibration) -> tuple[StudioJob, JobPrediction]:
    """Validate and predict one job (the library call `mosaic perf` makes)."""
    job = validate_form(form, base)
    try:
        return job, predict_job(job.spec, calibration)
    except MosaicInputError as exc:
        message = str(exc)
        raise FormError(message_fields(message, shown_fields(form))) from None


def check_form_layout(job: StudioJob, form: dict[str, str]) -> None:
    """FormError naming the field of the first layout rule the job breaks, as `mosaic
    export` refuses it (a trial exported ep=5 over 96 experts from the studio)."""
    try:
        check_job_layout(job.spec)
    except MosaicInputError as exc:
        raise FormError(message_fields(str(exc), shown_fields(form))) from None


def export_yaml(job: StudioJob, calibration: Calibration | None = None) -> str:
    """The job as a YAML file `mosaic perf` reads, headed by the command that predicts it
    as the studio did: with the studio's --catalog where the job's node type comes from it
    (the header said `mosaic perf job.yaml`, which then answered "unknown system"; a trial)
    and its calibration profile (``calibration``) where that is not the default."""
    from mosaic.export.job_yaml import catalog_option, perf_command

    document = _typed(job.document)
    profile = None if calibration is None else (
        str(calibration.source_path) if calibration.source_path else calibration.name)
    command = perf_command(profile, catalog_option(document)).replace("FILE", "job.yaml")
    header = f"# Exported by mosaic studio; run it with {command}.\n"
    return header + yaml.safe_dump(document, sort_keys=False)


def _typed(document: dict[str, Any]) -> dict[str, Any]:
    """Form text parsed as YAML scalars ("4" -> 4, "true" -> True) for a readable file."""
    out: dict[str, Any] = {}
    for block, fields in document.items():
        if isinstance(fields, dict):
            out[block] = {k: (field_value((block, k), v, WHERE) if isinstance(v, str) else v)
                          for k, v in fields.items() if v is not None}
        else:
            out[block] = fields
    return out
