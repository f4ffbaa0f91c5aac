"""Read the one long list of a YAML mapping an item at a time, in bounded memory.

A run-record file is a mapping whose ``runs`` list may hold tens of thousands of records;
``yaml.load`` of the whole file keeps the text, every parsed record and everything built from
them alive at once (about 48 MB per 1,000 records in ``mosaic validate``). Here the file is
read twice with PyYAML's event API (libyaml's C parser when it is installed; PyYAML docs,
"Low-level API": ``parse``/``compose``, https://pyyaml.org/wiki/PyYAMLDocumentation):

1. :func:`scan_mapping` walks the events only, building no objects beyond the small
   top-level values: the file must be one mapping with plain string keys, each once, whose
   list value is a plain sequence (no anchor, alias, tag or merge key there). It returns
   those other values and the number of list items.
2. :func:`iter_list_items` composes and constructs one item at a time with PyYAML's own
   composer and safe constructor (the objects ``yaml.safe_load`` builds; an anchor defined
   earlier in the file stays usable by a later alias), each checked like a whole document
   (:func:`mosaic.schema_validation.check_document_shape`).

Anything else -- a syntax error, another shape, text that is not UTF-8, an oversized file --
makes :func:`scan_mapping` return None: the caller then reads the whole file with
:func:`mosaic.schema_validation.load_yaml_mapping`, which gives the usual one-line error (or
loads an unusual but valid file the ordinary way). A problem met only while streaming the
items raises :class:`StreamError`; callers re-read the whole file for its message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)

from mosaic.errors import MosaicInputError
from mosaic.schema_validation import MAX_FILE_BYTES, MAX_NODES, SafeLoader, check_document_shape
from mosaic.yaml_errors import describe_yaml_error

_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"


class StreamError(Exception):
    """The file stopped being streamable after its scan (the whole-file reader says why)."""


def event_loader_class(base: type) -> type:
    """``base`` (a safe loader: the C one or PyYAML's own) plus PyYAML's Python composer, so
    that nodes can be composed one at a time from the event stream (libyaml's composer
    only builds whole documents)."""

    class EventLoader(base, Composer):  # type: ignore[misc, valid-type]
        def __init__(self, stream: Any) -> None:
            base.__init__(self, stream)
            self.anchors: dict[str, Any] = {}

    return EventLoader


_EventLoader = event_loader_class(SafeLoader)


@dataclass(frozen=True)
class MappingScan:
    """What :func:`scan_mapping` learnt: the other top-level values (in file order) and the
    list's length."""

    head: dict[str, Any]
    n_items: int


class _NotStreamableError(Exception):
    pass


def _open(path: Path) -> Any:
    # utf-8-sig drops a leading byte-order mark and newline="" keeps line ends as written,
    # as read_text does; a byte that is not UTF-8 raises UnicodeDecodeError while reading.
    return path.open(encoding="utf-8-sig", newline="")


def _expect(loader: Any, kind: type) -> Any:
    if not loader.check_event(kind):
        raise _NotStreamableError
    return loader.get_event()


def _skip_node(loader: Any) -> int:
    """Consume one node's events; returns the number of items of a top-level sequence."""
    event = loader.get_event()
    if not isinstance(event, CollectionStartEvent):
        return 0
    depth, items = 1, 0
    while depth:
        event = loader.get_event()
        if depth == 1 and not isinstance(event, (SequenceEndEvent, MappingEndEvent)):
            items += 1
        if isinstance(event, CollectionStartEvent):
            depth += 1
        elif isinstance(event, (SequenceEndEvent, MappingEndEvent)):
            depth -= 1
    return items


def _key(loader: Any, seen: dict[str, Any]) -> str:
    """The next top-level key: a plain string scalar not given before."""
    event = loader.peek_event()
    if not isinstance(event, ScalarEvent) or event.anchor is not None:
        raise _NotStreamableError
    node = loader.compose_node(None, None)
    if node.tag != _STR_TAG:  # a number, null, bool or merge key (<<) as a field name
        raise _NotStreamableError
    key = loader.construct_document(node)
    if key in seen:
        raise _NotStreamableError
    return key


def _document(loader: Any) -> None:
    _expect(loader, StreamStartEvent)
    _expect(loader, DocumentStartEvent)
    _expect(loader, MappingStartEvent)


def _end(loader: Any) -> None:
    _expect(loader, MappingEndEvent)
    _expect(loader, DocumentEndEvent)
    _expect(loader, StreamEndEvent)


def _plain_sequence(event: Any) -> bool:
    return (isinstance(event, SequenceStartEvent) and event.anchor is None
            and (event.implicit or event.tag == _SEQ_TAG))


@contextmanager
def _mapping_events(path: Path) -> Iterator[_EventLoader]:
    """An event loader on ``path``, past the start of its top-level mapping; disposed on
    exit."""
    with _open(path) as stream:
        loader = _EventLoader(stream)
        try:
            _document(loader)
            yield loader
        finally:
            loader.dispose()


def scan_mapping(path: Path, list_key: str) -> MappingScan | None:
    """Check that ``path`` can be streamed (module docstring); None when it cannot."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        head: dict[str, Any] = {}
        n_items = None
        budget = max(MAX_NODES, path.stat().st_size)
        with _mapping_events(path) as loader:
            while not loader.check_event(MappingEndEvent):
                key = _key(loader, head)
                if key == list_key:
                    if not _plain_sequence(loader.peek_event()):
                        raise _NotStreamableError
                    n_items = _skip_node(loader)
                    head[key] = None  # its place among the keys
                    continue
                if isinstance(loader.peek_event(), AliasEvent):
                    raise _NotStreamableError
                value = loader.construct_document(loader.compose_node(None, None))
                budget -= check_document_shape(value, str(path), depth=1, max_nodes=budget)
                head[key] = value
            _end(loader)
    except (_NotStreamableError, yaml.YAMLError, MosaicInputError, RecursionError, OSError,
            UnicodeDecodeError, ValueError):
        return None
    if n_items is None:
        return None
    return MappingScan(head={k: v for k, v in head.items() if k != list_key},
                       n_items=n_items)


def iter_list_items(path: Path, list_key: str) -> Iterator[Any]:
    """Each item of the mapping's ``list_key`` sequence in order, built one at a time.

    For a file :func:`scan_mapping` accepted; raises :class:`StreamError` if it can no
    longer be read so (changed meanwhile, an undefined alias, a non-string key or nesting
    too deep inside an item, over the value budget).
    """
    where = str(path)
    try:
        budget = max(MAX_NODES, path.stat().st_size)
        with _mapping_events(path) as loader:
            while not loader.check_event(MappingEndEvent):
                key = _key(loader, {})
                if key != list_key:
                    # composed (not skipped) so that its anchors stay known
                    loader.compose_node(None, None)
                    continue
                if not _plain_sequence(loader.get_event()):
                    raise _NotStreamableError
                index = 0
                while not loader.check_event(SequenceEndEvent):
                    item = loader.construct_document(loader.compose_node(None, None))
                    budget -= check_document_shape(item, f"{where}: {list_key}[{index}]",
                                                   depth=2, max_nodes=budget)
                    index += 1
                    yield item
                loader.get_event()
            _end(loader)
    except MosaicInputError as exc:
        raise StreamError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise StreamError(f"{where}: malformed YAML{describe_yaml_error(exc)}") from None
    except (_NotStreamableError, RecursionError, OSError, UnicodeDecodeError, ValueError) as exc:
        raise StreamError(f"{where}: cannot be read item by item "
                          f"({type(exc).__name__}: {exc})") from None
