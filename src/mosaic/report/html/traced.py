"""A read-only view of a result document that remembers the last field a page builder read.

A hand-edited or truncated document fails inside a page builder as a KeyError or TypeError
that names no place ("'NoneType' object is not subscriptable"). Reading the document
through this view, the report can say which field was read last before the failure
(``optimum.layout.tp``), which is where the bad value sits or just before it.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, ValuesView
from typing import Any


class Trail:
    """The path of the field read last, shared by every view of one document."""

    def __init__(self) -> None:
        self.last = ""


def traced(value: Any, path: str, trail: Trail) -> Any:
    """``value`` wrapped when it is an object or a list, so reading inside it is recorded."""
    if isinstance(value, dict):
        return TracedDict(value, path, trail)
    if isinstance(value, list):
        return TracedList(value, path, trail)
    return value


def plain_types(message: str) -> str:
    """An error message with the views' class names read as the JSON types they wrap."""
    return message.replace("TracedDict", "dict").replace("TracedList", "list")


def missing_field(error: KeyError, trail: Trail) -> str:
    """The document path of a field ``error`` says is missing: the trail's last read when
    that was the lookup that failed, else the bare key (a page builder's own table, not the
    document, can raise a KeyError too)."""
    key = str(error.args[0]) if error.args else ""
    read = trail.last
    if read and (read == key or read.endswith(f".{key}") or read.endswith(f"[{key}]")):
        return read
    return f"{key} (the last field read: {read or 'none'})"


def _child(path: str, key: object) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


class _TracedItems(ItemsView):
    """``items()`` of a traced dict: each value traced, its path recorded as it is read."""

    _mapping: TracedDict

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return ((key, self._mapping[key]) for key in self._mapping)


class _TracedValues(ValuesView):
    """``values()`` of a traced dict, read through it."""

    _mapping: TracedDict

    def __iter__(self) -> Iterator[Any]:
        return (self._mapping[key] for key in self._mapping)


class TracedDict(dict):
    """A dict whose lookups record their path in the shared :class:`Trail`; a nested
    object or list is wrapped once, when first read."""

    def __init__(self, data: dict[Any, Any], path: str, trail: Trail) -> None:
        super().__init__(data)
        self._path, self._trail = path, trail
        self._views: dict[Any, Any] = {}

    def _read(self, key: Any) -> str:
        self._trail.last = _child(self._path, key)
        return self._trail.last

    def _view(self, key: Any, value: Any) -> Any:
        if key not in self._views:
            self._views[key] = traced(value, _child(self._path, key), self._trail)
        return self._views[key]

    def __getitem__(self, key: Any) -> Any:
        self._read(key)
        return self._view(key, super().__getitem__(key))

    def get(self, key: Any, default: Any = None) -> Any:
        self._read(key)
        return self._view(key, super().__getitem__(key)) if key in self else default

    def items(self) -> ItemsView[Any, Any]:  # type: ignore[override]
        return _TracedItems(self)

    def values(self) -> ValuesView[Any]:  # type: ignore[override]
        return _TracedValues(self)


class TracedList(list):
    """A list whose items, read by index or in a loop, record their path; a nested object
    or list is wrapped once, when first read."""

    def __init__(self, data: list[Any], path: str, trail: Trail) -> None:
        super().__init__(data)
        self._path, self._trail = path, trail
        self._views: dict[int, Any] = {}

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = index if index >= 0 else len(self) + index
        self._trail.last = _child(self._path, position)
        value = super().__getitem__(index)
        if position not in self._views:
            self._views[position] = traced(value, self._trail.last, self._trail)
        return self._views[position]

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))
