"""Turn pydantic validation errors and YAML problems into one line a person can act on."""

from __future__ import annotations

import difflib
import json
import math
import re
import stat
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError, model_validator

from mosaic.errors import MosaicInputError, shown
from mosaic.yaml_errors import describe_yaml_error

SchemaT = TypeVar("SchemaT", bound=BaseModel)


def _model_at(schema: type[BaseModel], path: tuple[Any, ...]) -> type[BaseModel] | None:
    """The nested model that holds the fields at ``path`` (names or aliases; list indices
    and dict keys are stepped over), or None where the path leaves the models."""
    model: type[BaseModel] | None = schema
    for part in path:
        if model is None:
            return None
        fields = {(info.alias or name): info for name, info in model.model_fields.items()}
        fields.update(model.model_fields)
        if part not in fields:
            if isinstance(part, str) and fields:
                return None
            continue  # an index into a list/dict of models
        candidates = [fields[part].annotation]
        model = None
        while candidates:
            annotation = candidates.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
                break
            candidates.extend(get_args(annotation))
    return model


def allowed_fields(schema: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names (aliases where set) of the block that holds ``loc``'s last part."""
    model = None if schema is None else _model_at(schema, tuple(loc[:-1]))
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _accepts(schema: type[BaseModel] | None, loc: tuple[Any, ...], name: str,
             value: Any) -> bool:
    """Whether the field ``name`` of the block holding ``loc`` would take ``value`` (a
    "did you mean" that would only fail next is no help: ``gpus: 8`` is a count, not the
    ``gpu`` name)."""
    model = None if schema is None else _model_at(schema, tuple(loc[:-1]))
    if model is None:
        return True
    info = next((f for n, f in model.model_fields.items() if name in (n, f.alias)), None)
    if info is None:
        return True
    try:
        TypeAdapter(info.annotation).validate_python(value)
    except (ValidationError, TypeError, ValueError):
        return False
    return True


# Names other schemas and frameworks give a field -> the name here (each applies only
# where that name is an allowed field).
OTHER_NAMES = {
    "recompute": "checkpointing", "activation_checkpointing": "checkpointing",
    "checkpointing": "recompute",
    "pipeline": "pp", "pipeline_parallel": "pp", "tensor": "tp", "tensor_parallel": "tp",
    "expert": "ep", "expert_parallel": "ep", "context": "cp", "context_parallel": "cp",
    "data": "dp", "data_parallel": "dp",
    "micro_batch": "micro_seqs", "micro_batch_size": "micro_seqs",
    "global_batch": "global_seqs", "global_batch_size": "global_seqs",
    "sequence_length": "seq_len", "seq_length": "seq_len",
}


# HuggingFace config names of MoE fields, written flat in a model block -> where the field
# lives here (model.moe; docs/schema.md). A trial wrote model.num_experts and was given no
# hint, since the nearest model field by spelling is no MoE field.
NESTED_NAMES = {
    "num_experts": "moe.experts", "num_local_experts": "moe.experts",
    "n_routed_experts": "moe.experts", "experts": "moe.experts",
    "num_experts_per_tok": "moe.top_k", "moe_top_k": "moe.top_k", "top_k": "moe.top_k",
    "moe_intermediate_size": "moe.expert_ffn", "expert_ffn": "moe.expert_ffn",
    "n_shared_experts": "moe.shared_experts", "num_shared_experts": "moe.shared_experts",
    "shared_experts": "moe.shared_experts", "first_k_dense_replace": "moe.dense_layers",
}


CLOSE_MATCH_CUTOFF = 0.6  # difflib.get_close_matches' default similarity cutoff


def suggested_field(schema: type[BaseModel] | None, loc: tuple[Any, ...], value: Any
                    ) -> str | None:
    """The allowed field closest to the unknown name at ``loc`` that would take ``value``
    (a misspelling's "did you mean"), or the nested field a known foreign name means
    (``num_experts`` in a model block: ``moe.experts``), or None."""
    allowed = allowed_fields(schema, loc)
    given = str(loc[-1])
    nested = NESTED_NAMES.get(given.strip().lower())
    if nested is not None and nested.split(".", 1)[0] in allowed:
        return ".".join([*(str(part) for part in loc[:-1]), nested])
    # other frameworks' spellings of a degree (ep_size, tp_degree: a trial) are too far
    # from ep or tp for difflib; the name without the suffix is the one meant
    bare = re.sub(r"_(size|degree|parallel_size)$", "", given)
    candidates = [bare] if bare != given and bare in allowed else []
    # other schemas' words for a field (a run record's recompute is a job's checkpointing,
    # "pipeline" is pp), misspellings of them included (pipline: a trial)
    # ranked together by closeness: a direct misspelling beats a far-off foreign name
    # (sequence_parallex meant sequence_parallel, not pipeline_parallel's pp; a fuzz trial)
    spellings = [(name, name) for name in allowed] + [
        (name, target) for name, target in OTHER_NAMES.items() if target in allowed]
    scored = sorted(((difflib.SequenceMatcher(None, given, name).ratio(), target)
                     for name, target in spellings), key=lambda pair: -pair[0])
    candidates += [target for ratio, target in scored if ratio >= CLOSE_MATCH_CUTOFF]
    close = [name for name in candidates if _accepts(schema, loc, name, value)]
    return close[0] if close else None


def _is_union_field(schema: type[BaseModel] | None, loc: tuple[Any, ...]) -> bool:
    """Whether the field at ``loc`` is declared as a union of several types."""
    model = None if schema is None or not loc else _model_at(schema, tuple(loc[:-1]))
    if model is None:
        return False
    info = next((f for n, f in model.model_fields.items() if loc[-1] in (n, f.alias)), None)
    return info is not None and len([a for a in get_args(info.annotation)
                                     if a is not type(None)]) > 1


def describe_validation_error(exc: ValidationError, where: str,
                              schema: type[BaseModel] | None = None) -> str:
    """First problem of ``exc`` as "<where>: <field path>: <message> (got <value>)".

    An unknown field comes first: a misspelt name also leaves its real field missing, and
    the unknown name is the one to fix; with ``schema`` it lists the fields allowed there."""
    errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
    first = errors[0]
    loc = tuple(first["loc"])
    # one field of a union type fails once per member, each error's location ending in the
    # member's tag (uneven_stages.bool, uneven_stages.literal['unstated']): say it once
    members = [e for e in errors if len(loc) > 1 and tuple(e["loc"])[:-1] == loc[:-1]
               and e["type"] != "extra_forbidden" and e.get("input") is first.get("input")]
    if len(members) > 1 and _is_union_field(schema, loc[:-1]):
        loc = loc[:-1]
        first = {**first, "msg": "Input should be " + " or ".join(
            e["msg"].removeprefix("Input should be ") for e in members)}
        errors = [first, *(e for e in errors if e not in members)]
    field_path = ".".join(str(part) for part in loc) or "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    got = first.get("input")
    detail = "" if first["type"] == "missing" else f" (got {shown(got)})"
    if (first["type"].startswith("int_") and isinstance(got, float) and math.isfinite(got)
            and got.is_integer() and abs(got) < 2**53):
        # 1e9: a whole number in float notation (a trial); not 1e30, whose integer is a
        # float's rounding and beyond every range anyway
        detail = (f" (got {got:g}, a number in float notation: write the integer "
                  f"{int(got)})")
    if first["type"] == "extra_forbidden" and (
            allowed := allowed_fields(schema, tuple(first["loc"]))):
        close = suggested_field(schema, tuple(first["loc"]), got)
        suggestion = f"; did you mean {close}?" if close else ""
        detail += f"{suggestion}; allowed: {', '.join(allowed)}"
    return f"{where}: {field_path}: {message}{detail}{_other_problems(errors[1:])}"


OTHER_PROBLEMS_NAMED = 3  # the rest of a file's problems, named after the first


def _other_problems(errors: list[Any]) -> str:
    """'; also batch.global_seqs: missing' for the next few problems (a misspelt field
    leaves its real one missing: naming it shows the pair), then how many more."""
    named = [f"{'.'.join(str(part) for part in e['loc']) or '(top level)'}: "
             + ("missing" if e["type"] == "missing" else "unknown field"
                if e["type"] == "extra_forbidden" else e["msg"])
             for e in errors[:OTHER_PROBLEMS_NAMED]]
    more = len(errors) - len(named)
    return ("; also " + "; ".join(named) if named else "") + (
        f"; and {more} more problem{'s' if more > 1 else ''}" if more else "")


def _mentions(annotation: Any, kinds: tuple[type, ...]) -> bool:
    """Whether ``annotation`` is, or holds (a union, list or dict of), one of ``kinds``."""
    if annotation in kinds:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(arg, kinds) for arg in get_args(annotation))
    return any(_mentions(arg, kinds) for arg in get_args(annotation))


class NoBooleanNumbers(BaseModel):
    """A model whose numeric fields refuse booleans: pydantic's lax mode reads true as 1
    (a trial's ``run.seq_len: true`` trained sequences of one token)."""

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            value = data.get(name)
            values = value if isinstance(value, list) else [value]
            if (any(isinstance(v, bool) for v in values)
                    and _mentions(field.annotation, (int, float))
                    and not _mentions(field.annotation, (bool,))):
                raise ValueError(f"{name}: got {shown(value)}; expected a number, not a boolean")
        return data


def validate_mapping(schema: type[SchemaT], data: Any, where: str) -> SchemaT:
    """Validate ``data`` against ``schema`` or raise a one-line MosaicInputError."""
    if not isinstance(data, dict):
        raise MosaicInputError(f"{where}: expected a mapping, got {type(data).__name__}")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise MosaicInputError(describe_validation_error(exc, where, schema)) from None


# The C loader (libyaml) parses large files several times faster than the pure-Python one;
# both build the same objects with safe (tag-free) construction (PyYAML docs, "Installation").
_FastSafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SafeLoader(_FastSafeLoader):  # type: ignore[misc, valid-type]
    """The safe loader, refusing a key given twice in one mapping (YAML 1.2 requires keys
    to be unique; PyYAML keeps the last one silently, so a second `layers:` would replace
    the first without a word). A mapping's own keys are checked once, before ``<<`` merges
    are folded in: a key that overrides a merged one is not a repeat."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if not getattr(node, "_mosaic_keys_checked", False):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # an unhashable key is refused by check_document_shape
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {shown(key)} given twice in one mapping",
                        key_node.start_mark)
                seen.add(key)
            node._mosaic_keys_checked = True  # an anchored mapping is flattened in place once
        super().flatten_mapping(node)


# Plain scalars as YAML 1.2's core schema reads them (yaml.org/spec/1.2.2, 10.3.2), not
# PyYAML's YAML 1.1: '034' is 34 (1.1: octal 28), '34:08' a string (1.1: base 60, 2048),
# 'yes'/'on' strings (1.1: booleans), and '1e12' a float (1.1 needs '1.0e+12'; a trial's
# training.tokens: 1e12 was refused as "not a valid number").
# Dates are strings too (1.1's timestamp: 'name: 2024-01-01' became a datetime.date a
# string field refused with its Python repr; a fuzz trial).
_BOOL_TAG, _INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG = (
    f"tag:yaml.org,2002:{kind}" for kind in ("bool", "int", "float", "timestamp"))
SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in (_BOOL_TAG, _INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG)]
    for first, resolvers in _FastSafeLoader.yaml_implicit_resolvers.items()}
SafeLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# Thousands may be separated by '_' (1_000_000, as YAML 1.1 and Python allow), in groups of
# three only: '3_2' is a typo, not 32 (a trial's studio form read it as 32 nodes).
_DIGITS = r"(?:[0-9]{1,3}(?:_[0-9]{3})+|[0-9]+)"
_INT_TEXT = re.compile(rf"^[-+]?{_DIGITS}$")
SafeLoader.add_implicit_resolver(_INT_TAG, _INT_TEXT, list("-+0123456789"))
_FLOAT_TEXT = re.compile(rf"^(?:[-+]?(?:\.[0-9]+|{_DIGITS}(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                         r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
SafeLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_TEXT, list("-+0123456789."))
SafeLoader.add_constructor(
    _INT_TAG, lambda loader, node: int(loader.construct_scalar(node), 10))  # never octal


def int_from_text(text: str) -> int:
    """An integer typed as text (a form field), by the rule YAML inputs follow: decimal
    digits, thousands optionally grouped by '_' (Python's int() reads '3_2' as 32);
    ValueError otherwise."""
    stripped = text.strip()
    if not _INT_TEXT.match(stripped):
        raise ValueError(f"not an integer: {shown(text)}")
    return int(stripped, 10)


def float_from_text(text: str) -> float:
    """A number typed as text, by the YAML inputs' rule (see :func:`int_from_text`); also
    Python's 'inf'/'nan' spellings, which callers range-check."""
    stripped = text.strip()
    if not (_FLOAT_TEXT.match(stripped) or stripped.lower().lstrip("+-") in ("inf", "nan")):
        raise ValueError(f"not a number: {shown(text)}")
    lowered = stripped.lower()
    return float(lowered.replace(".inf", "inf").replace(".nan", "nan"))  # YAML's .inf

MAX_FILE_BYTES = 256 * 2**20  # no input file of mosaic is near this; refuse before parsing
MAX_NESTING = 64  # mosaic's deepest schema nests 4 levels
MAX_NODES = 2_000_000  # values in one document (aliases counted each time they are used)


def read_text(path: str | Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``, or a one-line MosaicInputError saying why not (a file
    over ``max_bytes`` is refused before it is read)."""
    if not str(path).strip():
        raise MosaicInputError(f"the {what} name is empty; give a path")
    path = Path(path)
    try:
        if not path.exists():
            # FILE#A#B reads as the file 'FILE#A' (a fuzz trial's 'plan.json#1#2'): say
            # that one reference is read, where the name before its first '#' exists
            head = str(path).split("#", 1)[0]
            extra = (f" (a name takes one #ID or #N reference: {head} exists)"
                     if "#" in str(path) and head and Path(head).exists() else "")
            raise MosaicInputError(f"{path}: {what} not found{extra}")
        if path.is_dir():
            raise MosaicInputError(f"{path}: is a directory; expected a {what}")
        status = path.stat()
        if stat.S_ISCHR(status.st_mode) or stat.S_ISBLK(status.st_mode):
            # refused before reading, as the size limit is: /dev/zero read 256 MiB first
            # (a pipe or FIFO, `<(cat job.yaml)`, is read, bounded below)
            raise MosaicInputError(f"{path}: is a device, not a {what}")
        size = status.st_size
        if size > max_bytes:
            raise MosaicInputError(f"{path}: {what} is {size:,} bytes; the limit is "
                                   f"{max_bytes:,}")
        with path.open("rb") as handle:  # bounded: a stream may not end
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise MosaicInputError(f"{path}: {what} is longer than the limit of "
                                   f"{max_bytes:,} bytes (a device or a stream?)")
    except OSError as exc:
        raise MosaicInputError(f"{_short(path)}: cannot read the {what}: "
                               f"{exc.strerror or exc}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MosaicInputError(f"{path}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} "
                               f"at offset {exc.start})") from None


# The first line of every file `mosaic export` writes (export/targets.py header_lines),
# after its comment marker, and the pattern that knows it again
EXPORT_HEADER_TEXT = "{target} launch config written by `mosaic export` from {source}"
EXPORT_HEADER = re.compile("# " + re.escape(EXPORT_HEADER_TEXT).replace(
    r"\{target\}", "(?P<target>.+?)").replace(r"\{source\}", "(?P<source>.+)"))


def refuse_launch_config(text: str | bytes, where: str) -> None:
    """One line where ``text`` is a launch config `mosaic export` wrote: a framework's file,
    not an input of mosaic (a trial read one back and got 'malformed YAML' or a list of 35
    unknown blocks)."""
    first = (text.decode("utf-8", "replace") if isinstance(text, bytes) else text)[:2000]
    match = EXPORT_HEADER.match(first.splitlines()[0] if first else "")
    if match:
        raise MosaicInputError(
            f"{where}: a {match['target']} launch config written by `mosaic export` from "
            f"{match['source']}, not a mosaic input; read that source instead, or keep a job "
            "of it with `mosaic export SOURCE --to yaml`")


class _RepeatedKeyError(Exception):
    """A key repeated in one JSON object (a trial's config.json with two hidden_size values
    was read as the last without a word)."""


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of ``pairs``; a key repeated with another value is refused (the same value
    twice is harmless, and transformers reads such configs)."""
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document and document[key] != value:
            raise _RepeatedKeyError(key)
        document[key] = value
    return document


def parse_json(text: str | bytes, where: str) -> Any:
    """Parsed JSON, or one line saying why not: empty, a launch config, malformed, or nested
    deeper than the parser can follow (json raises RecursionError there, which no caller
    expects)."""
    if not text.strip():  # a `mosaic plan --json > p.json` that failed leaves it empty
        raise MosaicInputError(f"{where}: empty, no JSON in it (did the command that wrote "
                               "it fail?)")
    refuse_launch_config(text, where)
    try:
        return json.loads(text, object_pairs_hook=_refuse_repeated_keys)
    except _RepeatedKeyError as exc:
        raise MosaicInputError(f"{where}: key {shown(exc.args[0])} appears twice in one object, "
                               "with two values; JSON readers keep the last silently, so say "
                               "it once") from None
    except json.JSONDecodeError as exc:
        # exc.msg can end in "at" ("Unterminated string starting at"), so the position
        # follows a colon, as in json's own message ("... at at line 180" read otherwise)
        raise MosaicInputError(f"{where}: not valid JSON ({exc.msg}: line {exc.lineno}, "
                               f"column {exc.colno})") from None
    except RecursionError:
        raise MosaicInputError(f"{where}: JSON nested too deeply to read") from None
    except UnicodeDecodeError:
        raise MosaicInputError(f"{where}: not UTF-8 text") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise MosaicInputError(f"{where}: unreadable number ({exc})") from None


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


def parse_yaml(text: str, where: str) -> Any:
    """Parse YAML text safely: no tags, bounded nesting and size, string keys only."""
    refuse_launch_config(text, where)
    try:
        data = yaml.load(text, Loader=SafeLoader)  # a safe loader: no tags
    except yaml.YAMLError as exc:
        raise MosaicInputError(f"{where}: malformed YAML{describe_yaml_error(exc)}") from None
    except RecursionError:
        raise MosaicInputError(f"{where}: YAML nested too deeply (limit {MAX_NESTING} levels)"
                               ) from None
    except ValueError as exc:  # a scalar its constructor cannot read (!!int 0x10, 4,301 digits)
        raise MosaicInputError(f"{where}: unreadable value ({exc})") from None
    check_document_shape(data, where)
    return data


def check_document_shape(data: Any, where: str, depth: int = 0,
                         max_nodes: int = MAX_NODES) -> int:
    """Refuse non-string mapping keys, nesting beyond MAX_NESTING and huge documents.

    Iterative, so neither deep nesting nor alias fan-out ("billion laughs") can recurse or
    loop without bound. ``depth`` is the nesting level of ``data`` in its document and
    ``max_nodes`` the values it may hold (a part of a streamed document); returns the
    values visited.
    """
    stack: list[tuple[Any, str, int]] = [(data, "", depth)]
    visited = 0
    while stack:
        value, path, depth = stack.pop()
        visited += 1
        if visited > max_nodes:
            raise MosaicInputError(f"{where}: document too large (over {MAX_NODES:,} values, "
                                   "counting repeated aliases)")
        if depth > MAX_NESTING:
            raise MosaicInputError(f"{where}: {path or '(top level)'}: nested deeper than "
                                   f"{MAX_NESTING} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise MosaicInputError(
                        f"{where}: {path or '(top level)'}: key {shown(key)} is a "
                        f"{type(key).__name__}; field names must be strings")
                stack.append((item, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
    return visited


def path_exists(path: str | Path) -> bool:
    """Whether a file is at ``path``; False for a name the OS cannot hold (a 400-character
    name made ``Path.exists`` raise OSError: File name too long, a traceback)."""
    try:
        return Path(path).exists()
    except OSError:
        return False


def load_yaml_mapping(path: Path, max_bytes: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """Read a YAML file whose top level is a mapping (refused unread over ``max_bytes``);
    clear errors otherwise."""
    path = Path(path)
    if path.suffix.lower() in (".csv", ".parquet", ".pq") and path.is_file():  # a table (a
        # trial's `bench gemm --shapes DIR/gemm.csv`: "top level must be a mapping, got str")
        raise MosaicInputError(f"{path}: a table file ({path.suffix}), not a YAML file")
    text = read_text(path, "YAML file", max_bytes=max_bytes)
    data = parse_yaml(text, str(path))
    if data is None:
        raise MosaicInputError(f"{path}: file is empty" if not text.strip() else
                               f"{path}: holds only null ({text.strip()[:20]!r}); expected a "
                               "mapping of blocks")
    if not isinstance(data, dict):
        raise MosaicInputError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data
