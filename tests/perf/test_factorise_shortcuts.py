"""What perf.factorise remembers and passes on gives the answers it would compute afresh.

Distinct rows remembered on the plans, distinct rows a subset inherits from its parent
(take_plans) and restricted sets remembered per (key, function) must equal,
array for array, what a fresh copy of the same plans computes; and an undeclared field must
still fail when the parent knows its codes.
"""

from dataclasses import fields

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.factorise import (
    PLAN_FIELDS,
    UndeclaredPlanFieldError,
    distinct_rows,
    every_plan,
    plan_key,
    take_plans,
)
from mosaic.perf.layouts import LayoutLimits, enumerate_plans, predict_in_chunks
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import memory_breakdown_bytes
from mosaic.perf.plan import ParallelPlans, plans_from_columns
from mosaic.perf.workload import Workload

WORKLOAD = Workload(geometry=ladder_geometry(4, experts=64, top_k=2, split_factor=4),
                    global_batch=256, seq_len=2048)
MACHINE = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4), "bf16")
KEYS = [("pp", "vpp"), ("tp", "pp", "vpp"), ("tp", "pp", "vpp", "cp", "dp"),
        ("tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch", "checkpointing"),
        ("tp", "cp", "micro_batch", "sequence_parallel"), ("dp", "sharding", "hsdp_shard"),
        ("checkpointing",), tuple(PLAN_FIELDS)]


def _fresh(plans: ParallelPlans) -> ParallelPlans:
    """The same plans as a new object, with nothing remembered."""
    return plans.take(np.arange(len(plans)))


@pytest.fixture(scope="module")
def plans() -> ParallelPlans:
    return enumerate_plans(WORKLOAD, MACHINE.n_devices, 8, LayoutLimits())


def _assert_same_rows(found, expected):
    for a, b in zip(found, expected, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_remembered_distinct_rows_change_nothing(plans):
    warm = _fresh(plans)
    for names in KEYS:  # the field codes found for one key serve the next
        distinct_rows(warm, names)
    for names in reversed(KEYS):
        _assert_same_rows(distinct_rows(warm, names), distinct_rows(_fresh(plans), names))


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_subset_inherits_the_distinct_rows_of_its_parent(plans, seed, shared):
    parent = _fresh(plans)
    for names in KEYS[::2]:  # the parent knows some keys, not all
        distinct_rows(parent, names)
    rng = np.random.default_rng(seed)
    index = np.sort(rng.choice(len(plans), size=len(plans) // 3, replace=False))
    subset = take_plans(parent, index, shared=shared)
    for f in fields(ParallelPlans):
        np.testing.assert_array_equal(getattr(subset, f.name), getattr(plans, f.name)[index])
    for names in KEYS:
        _assert_same_rows(distinct_rows(subset, names),
                          distinct_rows(plans.take(index), names))
    # a shared parent found the keys it lacked (for the next subset); else it did not
    assert all((names in parent.__dict__["_distinct_rows_cache"]) == (shared or i % 2 == 0)
               for i, names in enumerate(KEYS))
    tiny = take_plans(parent, index[:1])
    _assert_same_rows(distinct_rows(tiny, KEYS[0]), distinct_rows(plans.take(index[:1]),
                                                                   KEYS[0]))


def test_undeclared_field_fails_even_when_the_parent_knows_it(plans):
    @plan_key("tp", "dp")
    def reads_dp(plans: ParallelPlans) -> np.ndarray:
        return plans.tp * plans.dp

    @plan_key("tp")
    def calls_a_wider_key(plans: ParallelPlans) -> np.ndarray:
        return reads_dp(plans)  # tp-only plans handed to a function that reads dp

    parent = _fresh(plans)
    distinct_rows(parent, ("tp", "dp"))  # the parent knows the dp codes and (tp, dp) rows
    with pytest.raises(UndeclaredPlanFieldError, match="'dp'"):
        calls_a_wider_key(parent)
    np.testing.assert_array_equal(reads_dp(parent), plans.tp * plans.dp)


def test_prediction_on_an_inherited_subset_is_the_fresh_prediction(plans):
    """The search's path: memory on the parent, then time on the plans that fit, taken
    with take_plans; the prediction equals the one on a fresh copy of those plans."""
    calibration = default_calibration()
    parent = _fresh(plans)
    memory_breakdown_bytes(WORKLOAD, parent)
    index = np.arange(0, len(plans), 3)
    inherited = predict_in_chunks(WORKLOAD, take_plans(parent, index), MACHINE, calibration)
    fresh = predict_in_chunks(WORKLOAD, plans.take(index), MACHINE, calibration)
    for name in ("step_time_s", "tokens_per_s", "memory_bytes", "mfu", "chi_sys"):
        np.testing.assert_array_equal(getattr(inherited, name), getattr(fresh, name))
    for name, value in fresh.breakdown_s.items():
        np.testing.assert_array_equal(inherited.breakdown_s[name], value)


def test_dataclass_results_are_gathered_when_read(plans):
    """A dataclass of per-key arrays comes back as a LazyRows instance of that dataclass:
    each field read equals the eager gather, and a field never read is never gathered."""
    from dataclasses import dataclass, replace

    from mosaic.perf.factorise import LazyRows, gather

    @dataclass(frozen=True)
    class Pair:
        product: np.ndarray
        ratio: np.ndarray

    @plan_key("tp", "cp")
    def pair(plans: ParallelPlans) -> Pair:
        return Pair(product=(plans.tp * plans.cp).astype(float), ratio=plans.tp / plans.cp)

    @plan_key("tp", "cp", "pp", carried=("given",))
    def uses(plans: ParallelPlans, given: Pair) -> np.ndarray:
        return given.product * plans.pp

    fresh = _fresh(plans)
    lazy = pair(fresh)
    assert isinstance(lazy, Pair) and isinstance(lazy, LazyRows)
    assert "ratio" not in vars(lazy) and "product" not in vars(lazy)
    np.testing.assert_array_equal(lazy.product, (plans.tp * plans.cp).astype(float))
    assert "product" in vars(lazy) and "ratio" not in vars(lazy)
    # passed on to a wider key on the same plans: used without gathering the rest
    np.testing.assert_array_equal(uses(fresh, lazy), plans.tp * plans.cp * plans.pp)
    assert "ratio" not in vars(lazy)
    np.testing.assert_array_equal(lazy.ratio, plans.tp / plans.cp)
    rows = np.arange(0, len(plans), 7)
    taken = gather(lazy, rows)
    np.testing.assert_array_equal(taken.ratio, (plans.tp / plans.cp)[rows])
    changed = replace(lazy, ratio=np.zeros(len(plans)))
    np.testing.assert_array_equal(changed.product, lazy.product)
    assert not changed.ratio.any()


def test_a_lazy_result_of_a_wider_key_is_still_checked(plans):
    """Carried into a function with a narrower key, a LazyRows result is compared like any
    array: values that differ inside a key are refused."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Box:
        value: np.ndarray

    @plan_key("tp", "pp")
    def wide(plans: ParallelPlans) -> Box:
        return Box(value=(plans.tp * plans.pp).astype(float))

    @plan_key("tp", carried=("box",))
    def narrow(plans: ParallelPlans, box: Box) -> np.ndarray:
        return box.value + plans.tp

    fresh = _fresh(plans)
    with pytest.raises(UndeclaredPlanFieldError, match="'box'"):
        narrow(fresh, wide(fresh))


def test_remembered_values_are_computed_once_per_key_set_and_arguments():
    """plan_key(remember=...) computes a call's per-key values once per restricted set and
    argument values (as the key function maps them), gathers them again for a later equal
    call, and computes every call directly inside every_plan."""
    runs: list[float] = []

    @plan_key("tp", remember=True)
    def scaled(plans: ParallelPlans, factor: float) -> np.ndarray:
        runs.append(factor)
        return plans.tp * factor

    @plan_key("tp", remember=abs)  # reads only the size of the factor
    def by_size(plans: ParallelPlans, factor: float) -> np.ndarray:
        runs.append(factor)
        return plans.tp * abs(factor)

    def four_plans() -> ParallelPlans:
        return plans_from_columns(
            tp=[1, 2, 1, 2], pp=[1] * 4, vpp=[1] * 4, cp=[1] * 4, dp=[8, 4, 8, 4],
            ep=[1] * 4, etp=[1] * 4, micro_batch=[1] * 4, sharding=[0] * 4,
            checkpointing=[0] * 4, hsdp_shard=[1] * 4, sequence_parallel=[True] * 4)

    plans = four_plans()
    np.testing.assert_array_equal(scaled(plans, 3.0), [3.0, 6.0, 3.0, 6.0])
    np.testing.assert_array_equal(scaled(plans, 3.0), [3.0, 6.0, 3.0, 6.0])
    assert runs == [3.0]
    np.testing.assert_array_equal(scaled(plans, 0.5), [0.5, 1.0, 0.5, 1.0])
    assert runs == [3.0, 0.5]
    np.testing.assert_array_equal(scaled(four_plans(), 3.0), [3.0, 6.0, 3.0, 6.0])
    assert runs == [3.0, 0.5, 3.0]  # other plans: their own key set
    with every_plan():
        np.testing.assert_array_equal(scaled(plans, 3.0), [3.0, 6.0, 3.0, 6.0])
    assert runs == [3.0, 0.5, 3.0, 3.0]
    runs.clear()
    np.testing.assert_array_equal(by_size(plans, -2.0), [2.0, 4.0, 2.0, 4.0])
    np.testing.assert_array_equal(by_size(plans, 2.0), [2.0, 4.0, 2.0, 4.0])
    assert runs == [-2.0]
    with pytest.raises(ValueError, match="carried"):
        plan_key("tp", carried=("x",), remember=True)(lambda plans, x: x)


def test_a_shared_subset_is_evaluated_on_its_parents_keys(plans):
    """A subset taken with take_plans(..., shared=True) gathers from its parent's keys and
    restricted sets: the values equal those of a plain copy of the subset, and what a
    remembered term computed for one subset serves the next."""
    runs: list[int] = []

    @plan_key("tp", "pp", remember=True)
    def product(plans: ParallelPlans) -> np.ndarray:
        runs.append(len(plans))
        return (plans.tp * plans.pp).astype(float)

    parent = _fresh(plans)
    half = np.arange(0, len(parent), 2)
    third = np.arange(0, len(parent), 3)
    for rows in (half, third):
        subset = take_plans(parent, rows, shared=True)
        np.testing.assert_array_equal(product(subset), product(parent.take(rows)))
    assert len(runs) == 3  # the parent's keys once, and each plain copy


def test_a_restricted_set_gathers_what_its_parent_remembered(plans):
    """A remembered term called again inside another plan_key function (on that function's
    restricted plans) gathers the values the call on the whole set computed: it is not
    computed again, and the values are those of a direct computation."""
    runs: list[int] = []

    @plan_key("tp", "pp", remember=True)
    def product(plans: ParallelPlans) -> np.ndarray:
        runs.append(len(plans))
        return (plans.tp * plans.pp).astype(float)

    @plan_key("tp", "pp", "dp")
    def outer(plans: ParallelPlans) -> np.ndarray:
        return product(plans) * plans.dp

    fresh = _fresh(plans)
    whole = product(fresh)
    np.testing.assert_array_equal(outer(fresh), whole * fresh.dp)
    assert len(runs) == 1
    with every_plan():
        np.testing.assert_array_equal(outer(fresh), (fresh.tp * fresh.pp) * fresh.dp)
