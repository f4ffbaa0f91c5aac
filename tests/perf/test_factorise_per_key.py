"""The shortcuts of the layout search's speed work give the answers computed the plain way.

* plan_key's ``per_key``: the per-key values and inverse gather to the call's own result.
* distinct rows found from what is already known (a wider key's representatives, the dense
  codes of a leading part of the key) equal the ones computed from the field codes alone,
  whatever was known before.
* memory's heaviest stage, chosen from per-key stage terms, is per plan the stage whose
  breakdown (computed directly for every plan) has the largest total: the first on a tie,
  the last only when strictly heavier, the middle only when strictly heavier than both.
"""

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.factorise import PLAN_FIELDS, distinct_rows, every_plan
from mosaic.perf.layouts import LayoutLimits, enumerate_plans
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import (
    COMPONENTS,
    communication_buffer_bytes,
    heaviest_stage,
    logits_bytes,
    memory_breakdown_bytes,
    parameter_state_bytes,
    stage_activation_bytes,
    stage_memory_breakdown_bytes,
    stage_parameters,
    total_memory_bytes,
)
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.schedule import middle_stage_can_be_heaviest, stage_rank
from mosaic.perf.workload import Workload

WORKLOAD = Workload(geometry=ladder_geometry(4, experts=64, top_k=2, split_factor=4),
                    global_batch=256, seq_len=2048)
MACHINE = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4), "bf16")
STAGES = ("first", "middle", "last")


@pytest.fixture(scope="module")
def plans() -> ParallelPlans:
    return enumerate_plans(WORKLOAD, MACHINE.n_devices, 8, LayoutLimits())


def _fresh(plans: ParallelPlans) -> ParallelPlans:
    return plans.take(np.arange(len(plans)))


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and bool(np.array_equal(a, b))


def _terms(plans: ParallelPlans, stage: str):
    params = stage_parameters(WORKLOAD.geometry, plans, stage,
                              WORKLOAD.uneven_pipeline_stages,
                              WORKLOAD.vocab_in_pipeline_split)
    return {
        "parameter_state_bytes": (parameter_state_bytes, (WORKLOAD, plans, stage)),
        "stage_activation_bytes": (stage_activation_bytes, (WORKLOAD, plans, stage)),
        "logits_bytes": (logits_bytes, (WORKLOAD, plans, stage)),
        "communication_buffer_bytes": (communication_buffer_bytes,
                                       (WORKLOAD, plans, params, stage)),
    }


@pytest.mark.parametrize("stage", STAGES)
def test_per_key_values_gather_to_the_call(plans, stage):
    fresh = _fresh(plans)
    for name, (term, args) in _terms(fresh, stage).items():
        values, inverse = term.per_key(*args)
        assert inverse.shape == (len(plans),) and inverse.dtype.kind == "i", name
        called = term(*args)
        if isinstance(called, dict):
            assert values.keys() == called.keys(), name
            assert all(_equal(values[k].take(inverse), called[k]) for k in called), name
        else:
            assert _equal(values.take(inverse), called), name
    with every_plan():  # computed directly: every plan its own row
        for name, (term, args) in _terms(_fresh(plans), stage).items():
            values, inverse = term.per_key(*args)
            np.testing.assert_array_equal(inverse, np.arange(len(plans)), err_msg=name)


KEYS = [tuple(name for name in PLAN_FIELDS if name in key) for key in (
    PLAN_FIELDS, ("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "micro_batch", "sharding",
                  "hsdp_shard", "sequence_parallel"),
    ("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "micro_batch", "checkpointing",
     "sequence_parallel"),
    ("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "sharding", "hsdp_shard"),
    ("tp", "pp", "vpp", "cp", "dp", "ep", "etp"), ("tp", "pp", "vpp", "ep", "etp"),
    ("tp", "pp", "vpp"), ("pp", "vpp"), ("tp", "cp", "micro_batch", "sequence_parallel"),
    ("tp", "cp", "dp", "ep", "etp", "sharding", "hsdp_shard"), ("checkpointing",),
    ("sharding", "hsdp_shard"))]


@pytest.mark.parametrize("seed", range(4))
def test_distinct_rows_do_not_depend_on_what_is_known(plans, seed):
    """Keys asked in a shuffled order (wider keys before or after narrower ones, leading
    parts known or not) give the rows each key gives on plans that know nothing."""
    order = np.random.default_rng(seed).permutation(len(KEYS))
    warm = _fresh(plans)
    found = {KEYS[i]: distinct_rows(warm, KEYS[i]) for i in order}
    for names, (representatives, inverse) in found.items():
        expected_representatives, expected_inverse = distinct_rows(_fresh(plans), names)
        assert _equal(representatives, expected_representatives), names
        assert _equal(inverse, expected_inverse), names
        # and they are what the definition says: plan i equals its key's representative,
        # which is the key's last plan
        rows = np.stack([getattr(plans, name).astype(np.int64) for name in names], axis=1)
        np.testing.assert_array_equal(rows[representatives][inverse], rows)
        last = np.zeros(representatives.size, dtype=np.int64)
        np.maximum.at(last, inverse, np.arange(len(plans)))
        np.testing.assert_array_equal(representatives, last)


def test_heaviest_stage_is_the_stage_with_the_largest_total(plans):
    assert middle_stage_can_be_heaviest(WORKLOAD.geometry)  # all three candidates compete
    with every_plan():
        stages = {stage: stage_memory_breakdown_bytes(WORKLOAD, plans, stage)
                  for stage in STAGES}
    totals = {stage: total_memory_bytes(breakdown) for stage, breakdown in stages.items()}
    pick_last = totals["last"] > totals["first"]
    pick_middle = totals["middle"] > np.maximum(totals["first"], totals["last"])
    assert pick_last.any() and pick_middle.any() and (~pick_last & ~pick_middle).any()
    breakdown = memory_breakdown_bytes(WORKLOAD, _fresh(plans))
    assert list(breakdown) == list(COMPONENTS)
    for name in COMPONENTS:
        expected = np.where(pick_middle, stages["middle"][name],
                            np.where(pick_last, stages["last"][name], stages["first"][name]))
        np.testing.assert_array_equal(breakdown[name], expected, err_msg=name)
    expected_rank = np.where(pick_middle, stage_rank(plans, "middle"),
                             np.where(pick_last, plans.pp - 1, 0))
    np.testing.assert_array_equal(heaviest_stage(WORKLOAD, _fresh(plans)), expected_rank)
