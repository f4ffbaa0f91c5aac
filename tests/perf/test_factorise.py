"""Evaluation per distinct plan key: same values bit for bit, undeclared reads refused."""

import numpy as np
import pytest

from mosaic.arch import Geometry, ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.factorise import (
    UndeclaredPlanFieldError,
    distinct_rows,
    every_plan,
    gather,
    plan_key,
)
from mosaic.perf.layer_costs import dense_block_times, expert_all_to_all_s, moe_block_times
from mosaic.perf.layouts import LayoutLimits, enumerate_plans
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import ParallelPlans, plans_from_columns, single_plan
from mosaic.perf.schedule import in_flight_microbatches, stage_layer_counts
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload

WORKLOAD = Workload(geometry=ladder_geometry(4, experts=64, top_k=2, split_factor=4),
                    global_batch=256, seq_len=2048)
MACHINE = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4), "bf16")


@pytest.fixture(scope="module")
def plans() -> ParallelPlans:
    return enumerate_plans(WORKLOAD, MACHINE.n_devices, 8, LayoutLimits())


def _columns(plans: ParallelPlans, names: tuple[str, ...]) -> np.ndarray:
    return np.stack([getattr(plans, name).astype(np.int64) for name in names], axis=1)


@pytest.mark.parametrize("names", [("pp", "vpp"), ("tp", "cp", "micro_batch", "ep", "etp"),
                                   ("dp", "hsdp_shard", "sharding"), ("checkpointing",)])
def test_distinct_rows_matches_numpy_unique(plans, names):
    representatives, inverse = distinct_rows(plans, names)
    rows = _columns(plans, names)
    expected = np.unique(rows, axis=0)
    assert representatives.size == expected.shape[0]
    np.testing.assert_array_equal(rows[representatives][inverse], rows)
    np.testing.assert_array_equal(np.unique(rows[representatives], axis=0), expected)


def test_distinct_rows_with_huge_values():
    """A column whose range cannot be tabulated is folded in by sorting."""
    plans = plans_from_columns(
        tp=[1, 2, 1, 2, 1], pp=[1, 1, 1, 1, 1], vpp=[1] * 5, cp=[1] * 5,
        dp=[2**40, 3, 2**40, 3, 5], ep=[1] * 5, etp=[1] * 5, micro_batch=[1] * 5,
        sharding=[0] * 5, checkpointing=[0] * 5, hsdp_shard=[1] * 5,
        sequence_parallel=[True] * 5)
    representatives, inverse = distinct_rows(plans, ("tp", "dp"))
    assert representatives.size == 3  # (1, 2^40), (2, 3), (1, 5)
    assert inverse[0] == inverse[2] and inverse[1] == inverse[3]
    rows = _columns(plans, ("tp", "dp"))
    np.testing.assert_array_equal(rows[representatives][inverse], rows)


def test_distinct_rows_with_many_distinct_combinations():
    """Codes that outgrow the direct-address table are renumbered by sorting."""
    rng = np.random.default_rng(1)
    n = 300
    columns = {name: np.ones(n, dtype=int) for name in ("pp", "vpp", "cp", "ep", "etp",
                                                         "sharding", "checkpointing")}
    columns.update(tp=rng.integers(1, 60, n), dp=rng.integers(1, 60, n),
                   micro_batch=rng.integers(1, 60, n), hsdp_shard=np.full(n, 2**50),
                   sequence_parallel=np.ones(n, dtype=bool))
    plans = plans_from_columns(**columns)
    names = ("tp", "dp", "micro_batch", "hsdp_shard")
    representatives, inverse = distinct_rows(plans, names)
    rows = _columns(plans, names)
    assert representatives.size == np.unique(rows, axis=0).shape[0]
    np.testing.assert_array_equal(rows[representatives][inverse], rows)


def _all_fields_equal(a, b):
    for name in a.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_block_costs_equal_the_call_over_all_plans(plans):
    """Per distinct key and then gathered = every plan computed (bit for bit)."""
    _all_fields_equal(moe_block_times(MACHINE, WORKLOAD, plans),
                      moe_block_times.__wrapped__(MACHINE, WORKLOAD, plans))
    _all_fields_equal(dense_block_times(MACHINE, WORKLOAD, plans),
                      dense_block_times.__wrapped__(MACHINE, WORKLOAD, plans))
    np.testing.assert_array_equal(expert_all_to_all_s(MACHINE, WORKLOAD, plans),
                                  expert_all_to_all_s.__wrapped__(MACHINE, WORKLOAD, plans))
    for stage in ("first", "last"):
        for got, want in zip(stage_layer_counts(WORKLOAD.geometry, plans, stage),
                             stage_layer_counts.__wrapped__(WORKLOAD.geometry, plans, stage),
                             strict=True):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(in_flight_microbatches(WORKLOAD, plans, stage),
                                      in_flight_microbatches.__wrapped__(WORKLOAD, plans,
                                                                         stage))


def _equal_trees(got, want, path=""):
    if isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want, err_msg=path)
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), path
        for key in want:
            _equal_trees(got[key], want[key], f"{path}.{key}")
    elif hasattr(want, "__dataclass_fields__"):
        for name in want.__dataclass_fields__:
            _equal_trees(getattr(got, name), getattr(want, name), f"{path}.{name}")
    else:
        assert got == want, path


@pytest.mark.parametrize(("stack", "vocab_in_split"), [
    ("megatron-core", False), ("torchtitan", False), ("deepspeed", False),
    ("megatron-core", True)])
def test_prediction_equals_every_plan_computed(plans, stack, vocab_in_split):
    """The whole step prediction (times, breakdowns, memory) is bit-identical with the
    factorised evaluation switched off, on stacks with different traits and with the
    embedding and loss in the pipeline split."""
    workload = Workload(geometry=WORKLOAD.geometry, global_batch=256, seq_len=2048,
                        stack=stack, vocab_in_pipeline_split=vocab_in_split)
    calibration = default_calibration()
    factorised = predict_step(workload, plans, MACHINE, calibration)
    with every_plan():
        reference = predict_step(workload, plans, MACHINE, calibration)
    _equal_trees(factorised, reference)


def test_dense_prediction_equals_every_plan_computed():
    geometry = Geometry(layers=8, d_model=1024, heads=16, kv_heads=8, head_dim=64, ffn=4096,
                        vocab=32000)
    workload = Workload(geometry=geometry, global_batch=256, seq_len=2048)
    plans = enumerate_plans(workload, MACHINE.n_devices, 8, LayoutLimits())
    factorised = predict_step(workload, plans, MACHINE, default_calibration())
    with every_plan():
        reference = predict_step(workload, plans, MACHINE, default_calibration())
    _equal_trees(factorised, reference)


def _two_plans() -> ParallelPlans:
    return plans_from_columns(
        tp=[2, 4], pp=[1, 2], vpp=[1, 1], cp=[1, 1], dp=[4, 1], ep=[1, 1], etp=[1, 1],
        micro_batch=[1, 1], sharding=[0, 0], checkpointing=[0, 0], hsdp_shard=[4, 1],
        sequence_parallel=[True, True])


def test_reading_an_undeclared_field_fails_loudly():
    @plan_key("tp")
    def reads_dp(plans: ParallelPlans) -> np.ndarray:
        return plans.tp * plans.dp

    with pytest.raises(UndeclaredPlanFieldError, match="'dp'"):
        reads_dp(_two_plans())

    @plan_key("tp")
    def compares_pp(plans: ParallelPlans) -> np.ndarray:
        return np.where(plans.pp > 1, plans.tp, 0)

    with pytest.raises(UndeclaredPlanFieldError, match="'pp'"):
        compares_pp(_two_plans())
    # a single plan has nothing to share: it is computed directly
    np.testing.assert_array_equal(reads_dp(single_plan(tp=2, dp=4)), [8])


def test_len_of_restricted_plans_is_the_distinct_count():
    @plan_key("tp")
    def ones(plans: ParallelPlans) -> np.ndarray:
        return np.full(len(plans), float(len(plans)))

    plans = plans_from_columns(
        tp=[1, 2, 1, 2], pp=[1, 2, 4, 8], vpp=[1] * 4, cp=[1] * 4, dp=[8, 4, 2, 1],
        ep=[1] * 4, etp=[1] * 4, micro_batch=[1] * 4, sharding=[0] * 4, checkpointing=[0] * 4,
        hsdp_shard=[1] * 4, sequence_parallel=[True] * 4)
    np.testing.assert_array_equal(ones(plans), [2.0] * 4)


def test_carried_arrays_are_checked_and_others_refused():
    plans = plans_from_columns(
        tp=[1, 2, 1, 2], pp=[1] * 4, vpp=[1] * 4, cp=[1] * 4, dp=[8, 4, 8, 4],
        ep=[1] * 4, etp=[1] * 4, micro_batch=[1, 1, 2, 2], sharding=[0] * 4,
        checkpointing=[0] * 4, hsdp_shard=[1] * 4, sequence_parallel=[True] * 4)

    @plan_key("tp", carried=("per_tp",))
    def scaled(plans: ParallelPlans, per_tp: np.ndarray) -> np.ndarray:
        return per_tp * plans.tp

    np.testing.assert_array_equal(scaled(plans, np.array([3.0, 5.0, 3.0, 5.0])),
                                  [3.0, 10.0, 3.0, 10.0])
    with pytest.raises(UndeclaredPlanFieldError, match="per_tp"):
        scaled(plans, np.array([3.0, 5.0, 4.0, 5.0]))  # differs at equal tp

    @plan_key("tp")
    def not_carried(plans: ParallelPlans, extra: np.ndarray) -> np.ndarray:
        return extra * plans.tp

    with pytest.raises(UndeclaredPlanFieldError, match="extra"):
        not_carried(plans, np.ones(4))


def test_gather_walks_containers():
    index = np.array([1, 0, 1])
    value = {"a": np.array([10.0, 20.0]), "b": (np.array([1, 2]), 7.0), "c": np.float64(3)}
    out = gather(value, index)
    np.testing.assert_array_equal(out["a"], [20.0, 10.0, 20.0])
    np.testing.assert_array_equal(out["b"][0], [2, 1, 2])
    assert out["b"][1] == 7.0 and out["c"] == 3.0
