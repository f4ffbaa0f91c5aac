"""Evaluate a cost function once per distinct value of the plan fields it reads.

A layout search scores tens of thousands of plans, but most cost terms read only a few plan
fields: a block's compute and TP/EP communication depend on (tp, etp, cp, ep, micro-batch,
sequence parallelism), not on pp, dp or sharding; the blocks a stage holds depend on
(pp, vpp) only. :func:`plan_key` marks such a function with the fields it reads; the
decorated function is computed on the distinct rows of those fields and its results are
gathered back to every plan. Every cost formula is element-wise over plans, so the gathered
arrays hold the very values a call over all plans computes (bit for bit).

The declaration is checked, not trusted: inside the call every undeclared field is a
:class:`UndeclaredField` that raises on any use of its values, so a function that starts
reading another field fails loudly in every test instead of silently returning the values
of some other plan.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any, ParamSpec, TypeVar

import numpy as np

from mosaic.perf.plan import ParallelPlans

P = ParamSpec("P")
R = TypeVar("R")

PLAN_FIELDS = tuple(f.name for f in fields(ParallelPlans))
# Codes are numbered through a direct-address table of at most max(this, 4 x plans)
# entries; a column or code whose range does not fit is numbered by sorting (np.unique).
MIN_TABLE_KEYS = 1024
# A field whose values span at most this many integers is coded by value (no renumbering).
SMALL_RANGE = 64
# distinct_rows remembers its answers on the plans object (its arrays are never written
# after construction), under this attribute outside the dataclass fields.
_CACHE_ATTRIBUTE = "_distinct_rows_cache"
_OUTPUTS = "outputs"  # entry of that cache: the arrays plan_key functions returned
_PARENT = "parent"  # entry of that cache: (plans, index) this set was taken from (take_plans)
_RESTRICTED = "restricted"  # entry of that cache: restricted plans per (key, function)
_REMEMBERED = "remembered"  # entry of that cache: results of plan_key(remember=...) calls
_PER_KEY = "per key"  # entry of a restricted set's cache: their per-key values
_PARENT_KEYS = "parent keys"  # entry of that cache: a shared subset's rows per parent key
_PREFIXES = "prefixes"  # entry of that cache: dense codes of leading fields of keys folded


_STATE = {"enabled": True}
_FIELDS: dict[type, tuple[str, ...]] = {}


@contextlib.contextmanager
def every_plan() -> Iterator[None]:
    """Inside this block :func:`plan_key` functions compute every plan directly (the
    reference the factorised evaluation must equal, for tests and benchmarks)."""
    before = _STATE["enabled"]
    _STATE["enabled"] = False
    try:
        yield
    finally:
        _STATE["enabled"] = before


class UndeclaredPlanFieldError(RuntimeError):
    """A :func:`plan_key` function read a plan field it does not declare (a bug)."""


class UndeclaredField:
    """Stands in for a plan field a :func:`plan_key` function did not declare.

    It has the field's length (``len(plans)`` keeps working) and raises
    :class:`UndeclaredPlanFieldError` on every use of its values: arithmetic, comparison,
    indexing, reductions and conversion to an array.
    """

    __array_ufunc__ = None  # numpy defers binary operators to the methods below

    def __init__(self, name: str, function: str, size: int) -> None:
        self.name, self.function, self.size = name, function, size
        self.shape = (size,)

    def __len__(self) -> int:
        return self.size

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise UndeclaredPlanFieldError(
            f"{self.function} reads plan field {self.name!r}, which its plan_key does not "
            f"declare; add it to the decorator")

    def __getattr__(self, attribute: str) -> Any:
        return self._refuse()

    def __array__(self, *_: Any, **__: Any) -> Any:
        return self._refuse()


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
            "lshift", "rshift", "matmul", "divmod"):
    setattr(UndeclaredField, f"__{_op}__", UndeclaredField._refuse)
    setattr(UndeclaredField, f"__r{_op}__", UndeclaredField._refuse)
for _op in ("lt", "le", "eq", "ne", "gt", "ge", "neg", "pos", "abs", "invert", "getitem",
            "iter", "bool", "int", "float", "index"):
    setattr(UndeclaredField, f"__{_op}__", UndeclaredField._refuse)
UndeclaredField.__hash__ = None  # type: ignore[assignment]


def _dense_codes(key: np.ndarray, keys_size: int) -> tuple[np.ndarray, int]:
    """(each entry's position among the distinct values of ``key`` (all in
    [0, keys_size)), the number of distinct values), by a direct-address table."""
    seen = np.zeros(keys_size, dtype=bool)
    seen[key] = True
    distinct = np.flatnonzero(seen)
    position = np.empty(keys_size, dtype=np.int64)  # read only where a key was seen
    position[distinct] = np.arange(distinct.size)
    return position[key], int(distinct.size)


def distinct_rows(plans: ParallelPlans, names: tuple[str, ...]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(representatives, inverse): one plan index per distinct value of the fields
    ``names`` and, per plan, the position of its value among them, so plan ``i`` equals
    plan ``representatives[inverse[i]]`` on ``names``.

    Each column is numbered by its distinct values, and the columns are folded into one
    integer code left to right (mixed radix); whenever the next fold would leave the
    direct-address table's size, the codes so far are renumbered densely first."""
    cache = plans.__dict__.setdefault(_CACHE_ATTRIBUTE, {})
    if names not in cache:
        cache[names] = _inherited_rows(plans, cache, names) or _distinct_rows(plans, names)
    found: tuple[np.ndarray, np.ndarray] = cache[names]
    return found


def take_plans(plans: ParallelPlans, index: np.ndarray, *, shared: bool = False
               ) -> ParallelPlans:
    """``plans.take(index)`` that inherits what :func:`distinct_rows` already knows about
    ``plans``: the distinct rows of a key the parent has are renumbered from the parent's
    (one pass over the subset instead of one per field). The answers are the ones the
    subset computes on its own: keys keep their order (by field values, left to right) and
    each key's representative is its last plan in the subset. ``shared``: several subsets
    of ``plans`` will be evaluated, so a key the parent lacks is found on the parent first
    (once for all of them)."""
    subset = plans.take(index)
    subset.__dict__[_CACHE_ATTRIBUTE] = {_PARENT: (lambda: plans, np.asarray(index), None,
                                                   shared)}
    return subset


def _inherited_rows(plans: ParallelPlans, cache: dict[Any, Any], names: Any
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`distinct_rows` (or, for a field name, :func:`_field_codes`) of a subset from
    its parent's answer; None when the parent has none (or the subset has < 2 plans). A
    restricted subset inherits only what its declared fields determine, so a read of an
    undeclared field still fails."""
    link = cache.get(_PARENT)
    n = len(plans)
    if link is None or n < 2:
        return None
    parent_ref, index, allowed, shared = link
    parent = parent_ref()
    if parent is None:
        return None
    if allowed is not None and not allowed.issuperset(
            (names,) if isinstance(names, str) else names):
        return None
    known = parent.__dict__.get(_CACHE_ATTRIBUTE, {}).get(names)
    if known is None and shared and not isinstance(names, str):
        known = distinct_rows(parent, names)
    if known is None:
        return None
    table_limit = max(MIN_TABLE_KEYS, 4 * n)
    if isinstance(names, str):  # field codes: need not be dense, only in [0, count)
        return known[0][index], known[1]
    parent_inverse = known[1][index]
    inverse, count = _renumbered(parent_inverse, int(known[0].size), table_limit)
    return _representatives(inverse, count), inverse


def _renumbered(code: np.ndarray, codes_size: int, table_limit: int
                ) -> tuple[np.ndarray, int]:
    """(``code`` (values in [0, codes_size)) renumbered densely, order kept; the number of
    codes)."""
    if codes_size <= table_limit:
        return _dense_codes(code, codes_size)
    distinct, inverse = np.unique(code, return_inverse=True)
    return inverse.reshape(-1), int(distinct.size)


def _distinct_rows(plans: ParallelPlans, names: tuple[str, ...]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`distinct_rows` computed on ``plans``: on the representatives of the narrowest
    key already known that contains ``names`` (its plans hold every distinct value of
    ``names``, so the codes found there, gathered by that key's inverse, are the codes of
    all plans), else folded on from the dense codes of the longest leading part of
    ``names`` already known (a key, or where an earlier fold renumbered), else from the
    field codes. Each way gives the same answer: the dense codes keep the order of the
    values, left to right, and every key's representative is its last plan."""
    n = len(plans)
    if n <= 1:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    known = {key: found for key, found in plans.__dict__[_CACHE_ATTRIBUTE].items()
             if isinstance(key, tuple) and key != names}
    wider = [found for key, found in known.items()
             if found[0].size < n and set(names) <= set(key)]
    if wider:
        rows, wider_inverse = min(wider, key=lambda found: found[0].size)

        def codes_at_rows(name: str) -> tuple[np.ndarray, int]:
            codes, values = _field_codes(plans, name)
            return codes.take(rows, mode="clip"), values

        row_codes, count = _folded(codes_at_rows, names, 0, {}, rows.size)
        # each key's last plan: the last of the wider keys' last plans (no pass over plans)
        representatives = np.full(count, -1, dtype=np.int64)
        np.maximum.at(representatives, row_codes, rows)
        return representatives, row_codes.take(wider_inverse, mode="clip")
    # dense codes of leading fields: known keys, and where earlier folds renumbered
    prefixes = plans.__dict__[_CACHE_ATTRIBUTE].setdefault(_PREFIXES, {})
    prefixes.update((key, (inverse, int(representatives.size)))
                    for key, (representatives, inverse) in known.items())
    size = next((size for size in range(len(names) - 1, 0, -1) if names[:size] in prefixes), 0)
    code, count = _folded(functools.partial(_field_codes, plans), names, size, prefixes, n)
    return _representatives(code, count), code


def _folded(field_codes: Callable[[str], tuple[np.ndarray, int]], names: tuple[str, ...],
            start: int, prefixes: dict[tuple[str, ...], tuple[np.ndarray, int]], n: int
            ) -> tuple[np.ndarray, int]:
    """(dense codes, count) of ``n`` rows on the fields ``names``: their codes
    (``field_codes``) folded left to right into one integer (mixed radix) after the dense
    codes of the first ``start`` fields (``prefixes``); whenever the next fold would leave
    the direct-address table's size, the codes so far are renumbered densely first (and
    kept in ``prefixes``)."""
    table_limit = max(MIN_TABLE_KEYS, 4 * n)
    code, codes_size = prefixes[names[:start]] if start else (None, 1)
    for position in range(start, len(names)):
        column, values = field_codes(names[position])
        if values == 1:
            continue
        if code is None:  # 0·values + column: the first field's codes (never written)
            code, codes_size = column, values
            continue
        if codes_size * values > table_limit:  # renumber: at most one code per plan
            code, codes_size = _renumbered(code, codes_size, table_limit)
            prefixes[names[:position]] = code, codes_size
        code = code * values
        code += column
        codes_size *= values
    if code is None:
        return np.zeros(n, dtype=np.int64), 1
    return _renumbered(code, codes_size, table_limit)


def _representatives(inverse: np.ndarray, count: int | None = None) -> np.ndarray:
    """The last plan of each key (every key in [0, count) has one: the codes are dense;
    ``count`` defaults to max + 1)."""
    representatives = np.empty(int(inverse.max()) + 1 if count is None else count,
                               dtype=np.int64)
    representatives[inverse] = np.arange(inverse.size)
    return representatives


def _field_codes(plans: ParallelPlans, name: str) -> tuple[np.ndarray, int]:
    """(codes, count): codes in [0, count) in the order of field ``name``'s values, one per
    distinct value (the value minus the smallest when the values span at most
    ``SMALL_RANGE``, else the position among the distinct values), remembered on the plans
    like :func:`distinct_rows`. Only the order matters: :func:`_distinct_rows` renumbers
    the folded codes densely."""
    cache = plans.__dict__.setdefault(_CACHE_ATTRIBUTE, {})
    if name not in cache:
        inherited = _inherited_rows(plans, cache, name)
        if inherited is not None:
            cache[name] = inherited
            return inherited
        column = np.asarray(getattr(plans, name)).astype(np.int64, copy=False)
        low = int(column.min())
        span = int(column.max()) - low + 1
        if span <= SMALL_RANGE:
            cache[name] = column - low, span
        else:
            cache[name] = _renumbered(column - low, span, max(MIN_TABLE_KEYS, 4 * column.size))
    found: tuple[np.ndarray, int] = cache[name]
    return found


def _restricted(plans: ParallelPlans, names: frozenset[str], rows: np.ndarray,
                function: str) -> ParallelPlans:
    """The plans at ``rows`` with every field outside ``names`` an :class:`UndeclaredField`.
    The field codes and distinct rows of ``names`` already known for ``plans`` pass to them
    (taken at ``rows``, :func:`_inherited_rows`)."""
    size = int(rows.size)
    restricted = ParallelPlans(**{  # (an undeclared field of ``plans`` refuses the take)
        name: (getattr(plans, name).take(rows, mode="clip") if name in names
               else UndeclaredField(name, function, size))
        for name in PLAN_FIELDS})
    # What is known for ``plans`` about the declared fields passes on when asked for.
    # (A weak reference: ``plans`` keeps its restricted sets, and no cycle keeps either
    # alive once the plans are dropped.)
    restricted.__dict__[_CACHE_ATTRIBUTE] = {_PARENT: (weakref.ref(plans), rows, names,
                                                       False)}
    return restricted


def _restricted_once(plans: ParallelPlans, key: tuple[str, ...], rows: np.ndarray,
                     function: str) -> ParallelPlans:
    """:func:`_restricted` remembered on ``plans`` per (key, function): a function called
    again on the same plans (e.g. for another stage) gets the same restricted plans, with
    what its own plan_key calls learnt about them."""
    known = plans.__dict__.setdefault(_CACHE_ATTRIBUTE, {}).setdefault(_RESTRICTED, {})
    if (key, function) not in known:
        known[key, function] = _restricted(plans, frozenset(key), rows, function)
    found: ParallelPlans = known[key, function]
    return found


def _key_rows(plans: ParallelPlans, key: tuple[str, ...], function: str
              ) -> tuple[ParallelPlans, np.ndarray, np.ndarray]:
    """(restricted plans, representatives, inverse) of a :func:`plan_key` call: plan ``i``
    takes the function's value at ``inverse[i]`` and ``representatives[k]`` is a plan of
    key ``k``.

    A subset taken with ``take_plans(..., shared=True)`` is evaluated on its parent's keys
    and restricted plans (:func:`_restricted_once` on the parent): every subset of the
    parent then reuses one restricted set per (key, function), with what the nested
    plan_key calls learnt on it, instead of building its own. Keys of the parent that the
    subset lacks are evaluated too (element-wise, with the carried values of the subset's
    first plan) and never gathered."""
    cache = plans.__dict__.setdefault(_CACHE_ATTRIBUTE, {})
    link = cache.get(_PARENT)
    parent = link[0]() if link is not None and link[3] else None
    if parent is None or len(parent) < 2:
        representatives, inverse = distinct_rows(plans, key)
        return _restricted_once(plans, key, representatives, function), representatives, inverse
    known = cache.setdefault(_PARENT_KEYS, {})
    if key not in known:
        parent_representatives, parent_inverse = distinct_rows(parent, key)
        inverse = parent_inverse.take(link[1], mode="clip")
        slots = np.zeros(parent_representatives.size, dtype=np.int64)
        slots[inverse] = np.arange(inverse.size)  # a plan of the subset per parent key
        known[key] = parent_representatives, slots, inverse
    parent_representatives, slots, inverse = known[key]
    return _restricted_once(parent, key, parent_representatives, function), slots, inverse


def _refuse_per_plan_argument(label: str, name: str, value: Any, n: int) -> None:
    """Raise when an argument a keyed term does not declare holds per-plan arrays (it would
    be computed once per key with one plan's values)."""
    if _per_plan_arrays(value, n):
        raise UndeclaredPlanFieldError(f"{label}: argument {name!r} holds per-plan arrays; "
                                       f"declare it in plan_key(carried=...)")


def _one_plan_per_key(plans: ParallelPlans, declared: frozenset[str]) -> bool:
    """Whether ``plans`` are a restricted set (one plan per value of the fields it was
    restricted to) whose fields are all among ``declared``: a function of ``declared`` then
    has nothing to share between its plans and is computed on them directly."""
    link = plans.__dict__.get(_CACHE_ATTRIBUTE, {}).get(_PARENT)
    return link is not None and link[2] is not None and link[2] <= declared


def _parent_values(plans: ParallelPlans, key: tuple[str, ...], function: str, call: Any
                   ) -> tuple[Any, np.ndarray] | None:
    """(per-key values, inverse) of a remembered call on a restricted set whose parent
    already computed the same call on its own keys (e.g. a term a caller reads once for all
    plans and a plan_key function it calls reads again); None otherwise."""
    link = plans.__dict__.get(_CACHE_ATTRIBUTE, {}).get(_PARENT)
    if link is None or link[2] is None or not link[2].issuperset(key):
        return None
    parent = link[0]()
    parent_cache = parent.__dict__.get(_CACHE_ATTRIBUTE, {}) if parent is not None else {}
    restricted = parent_cache.get(_RESTRICTED, {}).get((key, function))
    rows = parent_cache.get(key)
    if restricted is None or rows is None:
        return None
    per_key = restricted.__dict__.get(_CACHE_ATTRIBUTE, {}).get(_PER_KEY, {}).get(call)
    if per_key is None:
        return None
    return per_key, rows[1].take(link[1], mode="clip")


def gather(value: Any, index: np.ndarray) -> Any:
    """The rows ``index`` of every array in ``value`` (tuples, dicts and dataclasses too);
    0-d arrays and non-array values are returned unchanged (they hold for every row).

    ``index`` holds valid rows by construction (an inverse or the representatives of
    :func:`distinct_rows`), so the take skips numpy's bounds check (mode "clip", which
    leaves valid indices as they are; measured ~15% faster)."""
    if isinstance(value, np.ndarray):
        return value.take(index, axis=0, mode="clip") if value.ndim else value
    if isinstance(value, tuple):
        return tuple(gather(v, index) for v in value)
    if isinstance(value, dict):
        return {key: gather(v, index) for key, v in value.items()}
    if isinstance(value, LazyRows):  # rows of rows: one take of the per-key values
        source, rows = value.__dict__[_LAZY][:2]
        return gather(source, rows.take(index, mode="clip"))
    names = _dataclass_fields(type(value))
    if names:
        return type(value)(**{name: gather(getattr(value, name), index) for name in names})
    return value


class LazyRows:
    """A dataclass of per-plan arrays whose fields are gathered from the per-key values
    when first read (a plan_key result whose caller may use few of its fields, such as
    the block times passed on to the stage terms). It is an instance of the dataclass and
    reads like it; its values are the ones an eager gather gives."""


_LAZY = "_lazy_rows"  # instance entry: (per-key dataclass, rows, plans weakref, key)
_LAZY_TYPES: dict[type, type] = {}


def _lazy_type(kind: type) -> type:
    """The :class:`LazyRows` subclass of dataclass ``kind`` (made once per type)."""
    if kind not in _LAZY_TYPES:
        def field(name: str) -> property:
            def read(self: Any) -> np.ndarray:
                found = self.__dict__
                if name not in found:
                    source, rows = found[_LAZY][:2]
                    per_key = getattr(source, name)
                    found[name] = (per_key.take(rows, axis=0, mode="clip")
                                   if isinstance(per_key, np.ndarray) else per_key)
                value: np.ndarray = found[name]
                return value
            return property(read)

        def init(self: Any, **values: Any) -> None:  # eager construction (replace, gather)
            self.__dict__.update(values)

        namespace: dict[str, Any] = {name: field(name) for name in _dataclass_fields(kind)}
        namespace.update(__init__=init, __doc__=kind.__doc__)
        _LAZY_TYPES[kind] = type(f"Lazy{kind.__name__}", (kind, LazyRows), namespace)
    return _LAZY_TYPES[kind]


def _gather_result(value: Any, inverse: np.ndarray, plans: ParallelPlans,
                   declared: frozenset[str]) -> Any:
    """:func:`gather` of a plan_key result to every plan, with dataclasses of per-key arrays
    gathered lazily (:class:`LazyRows`)."""
    if isinstance(value, tuple):
        return tuple(_gather_result(v, inverse, plans, declared) for v in value)
    if isinstance(value, dict):
        return {key: _gather_result(v, inverse, plans, declared) for key, v in value.items()}
    names = _dataclass_fields(type(value))
    if names and not isinstance(value, LazyRows) and all(
            _rows_or_scalar(getattr(value, name)) for name in names):
        lazy = object.__new__(_lazy_type(type(value)))
        lazy.__dict__[_LAZY] = (value, inverse, weakref.ref(plans), declared)
        return lazy
    return gather(value, inverse)


def _rows_or_scalar(value: Any) -> bool:
    """An array of rows, or a Python number that holds for every row (a dataclass default
    such as a hybrid-only block time of 0.0)."""
    if isinstance(value, np.ndarray):
        return bool(value.ndim)
    return isinstance(value, (int, float))


def _dataclass_fields(kind: type) -> tuple[str, ...]:
    """Field names of a dataclass type (empty for other types), looked up once per type."""
    if kind not in _FIELDS:
        _FIELDS[kind] = (tuple(f.name for f in fields(kind))
                         if is_dataclass(kind) and kind is not ParallelPlans else ())
    return _FIELDS[kind]


def _per_plan_arrays(value: Any, n: int) -> list[np.ndarray]:
    """The arrays of length ``n`` inside ``value``: tuples, lists, dicts and dataclasses of
    arrays (such as StageParameters or BlockTimes) are searched; catalog objects (Machine,
    Workload), whose fields are not all arrays, are not."""
    if isinstance(value, np.ndarray):
        return [value] if value.ndim and value.shape[0] == n else []
    if isinstance(value, tuple | list):
        return [a for v in value for a in _per_plan_arrays(v, n)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _per_plan_arrays(v, n)]
    names = _dataclass_fields(type(value))
    if names and all(isinstance(getattr(value, name), np.ndarray | dict) for name in names):
        return [a for name in names for a in _per_plan_arrays(getattr(value, name), n)]
    return []


def _without_narrower(value: Any, plans: ParallelPlans, declared: frozenset[str]) -> Any:
    """``value`` without the :class:`LazyRows` that a plan_key function with a key inside
    ``declared`` returned for ``plans`` (equal across plans that share the key by
    construction, so nothing of them needs reading)."""
    if isinstance(value, LazyRows):
        _, _, plans_ref, key = value.__dict__[_LAZY]
        return None if plans_ref() is plans and key <= declared else value
    if isinstance(value, tuple | list):
        return [_without_narrower(v, plans, declared) for v in value]
    if isinstance(value, dict):
        return [_without_narrower(v, plans, declared) for v in value.values()]
    return value


def _check_carried(label: str, name: str, value: Any, plans: ParallelPlans,
                   declared: frozenset[str], representatives: np.ndarray,
                   inverse: np.ndarray) -> None:
    """Raise unless every per-plan array in ``value`` is equal across the plans that share
    a key (then its values at ``representatives`` stand for every plan). An array that a
    :func:`plan_key` function with a narrower key returned for the same plans is equal
    there by construction and is not compared again."""
    n = len(plans)
    keyed = _outputs(plans)
    owner = None
    for array in _per_plan_arrays(_without_narrower(value, plans, declared), n):
        known = keyed.get(id(array))
        if known is not None and known[0]() is array and known[1] <= declared:
            continue
        owner = representatives[inverse] if owner is None else owner
        same = np.take(array, owner, axis=0)
        if not (np.array_equal(same, array) or (
                array.dtype.kind in "fc" and np.array_equal(same, array, equal_nan=True))):
            raise UndeclaredPlanFieldError(
                f"{label}: argument {name!r} differs between plans its plan_key treats as "
                f"equal; it depends on a plan field the decorator does not declare")


def _outputs(plans: ParallelPlans) -> dict[int, tuple[weakref.ref[np.ndarray], frozenset[str]]]:
    """Arrays plan_key functions returned for ``plans``: id -> (weak reference, key)."""
    found: dict[int, tuple[weakref.ref[np.ndarray], frozenset[str]]] = (
        plans.__dict__.setdefault(_CACHE_ATTRIBUTE, {}).setdefault(_OUTPUTS, {}))
    return found


def _remember_outputs(result: Any, plans: ParallelPlans, declared: frozenset[str]) -> None:
    keyed = _outputs(plans)  # (lazy parts carry their plans and key themselves)
    for array in _per_plan_arrays(_without_narrower(result, plans, declared), len(plans)):
        keyed[id(array)] = (weakref.ref(array), declared)


def plan_key(*names: str, carried: tuple[str, ...] = (),
             remember: bool | Callable[[Any], Any] = False
             ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a cost function of plans that reads only the plan fields ``names``.

    The function takes the plans as its argument ``plans``, computes element-wise over
    plans and returns arrays over plans (or tuples, dicts or dataclasses of them); it then
    runs once per distinct value of ``names``. Arguments listed in ``carried`` may hold
    per-plan arrays that are functions of ``names`` (e.g. a block time passed on): they are
    checked to be equal across plans that share a key and taken at one plan per key.
    Any other per-plan array argument is refused (its rows would not follow the plans).

    ``remember`` (not with ``carried``): the per-key values are kept with the restricted
    plans they were computed on, per value of the other (hashable) arguments, and a later
    call with equal ones gathers them again instead of computing them: a term every
    pipeline stage reads, or, with a shared subset (take_plans(..., shared=True)), every
    subset of one enumeration. A callable ``remember`` maps each argument to what the
    function reads of it (e.g. a workload less the fields the term does not depend on), so
    calls that differ only elsewhere share the values too.

    The decorated function's ``per_key`` attribute makes the same call but returns
    (per-key values, inverse) instead of gathering them (plan ``i`` takes row
    ``inverse[i]``): for a caller that combines terms of one key before gathering, or
    picks per plan which of several calls' rows to gather.
    """
    unknown = sorted(set(names) - set(PLAN_FIELDS))
    if unknown:
        raise ValueError(f"plan_key: unknown plan fields {unknown}; allowed: {PLAN_FIELDS}")
    key = tuple(name for name in PLAN_FIELDS if name in names)
    declared = frozenset(key)
    reads: Callable[[Any], Any] = remember if callable(remember) else (lambda value: value)

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        label = f"{function.__module__}.{function.__qualname__}"
        signature = inspect.signature(function)
        if "plans" not in signature.parameters:
            raise ValueError(f"plan_key: {label} has no argument named 'plans'")
        missing = sorted(set(carried) - set(signature.parameters))
        if missing:
            raise ValueError(f"plan_key: {label} has no arguments {missing}")
        if remember and carried:
            raise ValueError(f"plan_key: {label} cannot remember values of carried arrays")

        parameters = list(signature.parameters)
        plans_position = parameters.index("plans")

        def remembered_call(named: list[tuple[str, Any]]) -> tuple[Any, ...]:
            """What identifies a remembered call: the function and what it reads of its
            arguments other than the plans."""
            return (label, *sorted((name, reads(value)) for name, value in named
                                   if name != "plans"))

        def on_keys(plans: ParallelPlans, named: list[tuple[str, Any]],
                    call: tuple[Any, ...] | None) -> tuple[Any, np.ndarray | None]:
            """(per-key values, inverse) of the call ``named`` (plan ``i`` takes row
            ``inverse[i]``; None: row ``i``), from its parent's remembered values where a
            restricted set's parent has them, else computed once per key (and kept with
            the restricted plans when ``call`` is remembered)."""
            if call is not None:
                known_to_parent = _parent_values(plans, key, label, call)
                if known_to_parent is not None:
                    return known_to_parent
            n = len(plans)
            if _one_plan_per_key(plans, declared):
                for name, value in named:
                    if name != "plans" and name not in carried:
                        _refuse_per_plan_argument(label, name, value, n)
                return function(**dict(named)), None  # type: ignore[arg-type]
            restricted, representatives, inverse = _key_rows(plans, key, label)
            given: dict[str, Any] = {}
            for name, value in named:
                if name == "plans":
                    value = restricted
                elif name in carried:
                    _check_carried(label, name, value, plans, declared, representatives,
                                   inverse)
                    value = gather(value, representatives)
                else:
                    _refuse_per_plan_argument(label, name, value, n)
                given[name] = value
            if call is None:
                return function(**given), inverse  # type: ignore[arg-type]
            known = restricted.__dict__.setdefault(_CACHE_ATTRIBUTE, {}).setdefault(
                _PER_KEY, {})
            if call not in known:
                known[call] = function(**given)  # type: ignore[arg-type]
            return known[call], inverse

        def plans_and_arguments(args: Any, kwargs: Any
                                ) -> tuple[ParallelPlans, list[tuple[str, Any]]]:
            plans = args[plans_position] if len(args) > plans_position else kwargs["plans"]
            return plans, [*zip(parameters, args, strict=False), *kwargs.items()]

        @functools.wraps(function)
        def on_distinct_rows(*args: P.args, **kwargs: P.kwargs) -> R:
            plans, named = plans_and_arguments(args, kwargs)
            if len(plans) < 2 or not _STATE["enabled"]:  # one plan: nothing to share
                return function(*args, **kwargs)
            call = remembered_call(named) if remember else None
            if call is not None:  # the same call on the same plans: the same gathered result
                gathered = plans.__dict__.setdefault(_CACHE_ATTRIBUTE, {}).setdefault(
                    _REMEMBERED, {})
                if call in gathered:
                    return gathered[call]  # type: ignore[no-any-return]
            values, inverse = on_keys(plans, named, call)
            result = values if inverse is None else _gather_result(values, inverse, plans,
                                                                   declared)
            _remember_outputs(result, plans, declared)
            if call is not None:
                gathered[call] = result
            return result  # type: ignore[no-any-return]

        def per_key(*args: P.args, **kwargs: P.kwargs) -> tuple[Any, np.ndarray]:
            """(per-key values, inverse) of a call: its values before they are gathered
            to every plan (plan ``i`` takes row ``inverse[i]``), for a caller that
            combines several terms per key or picks rows of one of them per plan."""
            plans, named = plans_and_arguments(args, kwargs)
            if len(plans) < 2 or not _STATE["enabled"]:
                return function(*args, **kwargs), np.arange(len(plans))
            values, inverse = on_keys(plans, named, remembered_call(named) if remember else None)
            return values, np.arange(len(plans)) if inverse is None else inverse

        on_distinct_rows.per_key = per_key  # type: ignore[attr-defined]
        return on_distinct_rows

    return decorate
