"""A read-only view of a result document that remembers the last field a page builder read.

A hand-edited or truncated document fails inside a page builder as a KeyError or TypeError
that names no place ("'NoneType' object is not subscriptable"). Reading the document
through this view, the report can say which field was read last before the failure
(``optimum.layout.tp``), which is where the bad value sits or just before it.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def _child(path: str, key: object) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


class TracedDict(dict):
    """A dict whose lookups record their path in the shared :class:`Trail`."""

    def __init__(self, data: dict[Any, Any], path: str, trail: Trail) -> None:
        super().__init__(data)
        self._path, self._trail = path, trail

    def _read(self, key: Any) -> str:
        self._trail.last = _child(self._path, key)
        return self._trail.last

    def __getitem__(self, key: Any) -> Any:
        path = self._read(key)
        return traced(super().__getitem__(key), path, self._trail)

    def get(self, key: Any, default: Any = None) -> Any:
        path = self._read(key)
        return traced(super().get(key, default), path, self._trail)

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        return (self[key] for key in self)

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        return ((key, self[key]) for key in self)


class TracedList(list):
    """A list whose items, read by index or in a loop, record their path."""

    def __init__(self, data: list[Any], path: str, trail: Trail) -> None:
        super().__init__(data)
        self._path, self._trail = path, trail

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = index if index >= 0 else len(self) + index
        self._trail.last = _child(self._path, position)
        return traced(super().__getitem__(index), self._trail.last, self._trail)

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))
