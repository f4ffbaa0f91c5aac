"""The co-design search's shortcuts are exact: shared enumerations, inherited distinct rows.

``plan.search`` lets geometries that differ only in top_k share one enumeration (and the
per-key bookkeeping on it), and times the plans that fit memory as a subset that inherits
its parent's distinct rows (``perf.factorise.take_plans``). Neither may change a plan or a
number: each test compares against the path without the shortcut, bit for bit.
"""

from dataclasses import fields, replace

import numpy as np
import pytest

from mosaic.arch import Geometry, ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration, load_calibration
from mosaic.perf.layouts import LayoutLimits, best_layout, enumerate_plans
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.workload import Workload
from mosaic.plan import Envelope, SearchSpace, profile_geometries, resolve_system
from mosaic.plan.envelope import TABLE3_LAYOUT_LIMITS
from mosaic.plan.search import (
    _blocks,
    _enumeration_key,
    _shared_plans,
    best_feasible_layout,
    candidate_workload,
)

MACHINE = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4), "bf16")


def _same_plans(a: ParallelPlans, b: ParallelPlans) -> bool:
    return all(np.array_equal(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))


def _with_top_k(workload: Workload, top_k: int) -> Workload:
    moe = workload.geometry.moe
    assert moe is not None
    return replace(workload, geometry=replace(workload.geometry, moe=replace(moe, top_k=top_k)))


WORKLOADS = {
    "megatron-core": dict(),
    "paper-nemo": dict(stack="paper-nemo"),
    "vocab-split": dict(vocab_in_pipeline_split=True),
    "uneven": dict(uneven_pipeline_stages=True),
    "ep-overlap": dict(ep_overlap=True),
}


@pytest.mark.parametrize("variant", sorted(WORKLOADS))
def test_top_k_does_not_change_the_enumeration(variant):
    """The assumption behind the shared enumeration, on every (q, E, G) of a Table 3 slice:
    the plans enumerated for each top_k and granularity whose key equals that of top_k = 1,
    G = 1 are the plans enumerated for it."""
    for q in (4, 8):
        for experts in (8, 16, 96):
            base = Workload(ladder_geometry(q, experts, 1, 1), global_batch=256,
                            seq_len=2048, **WORKLOADS[variant])
            reference = enumerate_plans(base, MACHINE.n_devices, 8, TABLE3_LAYOUT_LIMITS)
            base_key = _enumeration_key(base, MACHINE, TABLE3_LAYOUT_LIMITS)
            for split in (1, 4, 8):
                for top_k in (1, 2, 6, 8):
                    workload = Workload(ladder_geometry(q, experts, top_k, split),
                                        global_batch=256, seq_len=2048, **WORKLOADS[variant])
                    assert _enumeration_key(workload, MACHINE, TABLE3_LAYOUT_LIMITS) == \
                        base_key, (q, experts, split, top_k)
                    plans = enumerate_plans(workload, MACHINE.n_devices, 8,
                                            TABLE3_LAYOUT_LIMITS)
                    assert _same_plans(plans, reference), (q, experts, split, top_k)


def test_an_expert_width_etp_cannot_split_has_its_own_enumeration():
    """The key keeps the expert width's common divisor with the device count: a width that
    some etp candidate does not divide enumerates other plans, under another key."""
    base = Workload(ladder_geometry(4, 16, 2, 1), global_batch=256, seq_len=2048)
    moe = base.geometry.moe
    assert moe is not None
    odd = replace(base, geometry=replace(base.geometry, moe=replace(moe, expert_ffn=12)))
    assert _enumeration_key(odd, MACHINE, TABLE3_LAYOUT_LIMITS) != \
        _enumeration_key(base, MACHINE, TABLE3_LAYOUT_LIMITS)
    plans = enumerate_plans(odd, MACHINE.n_devices, 8, TABLE3_LAYOUT_LIMITS)
    assert not _same_plans(plans, enumerate_plans(base, MACHINE.n_devices, 8,
                                                  TABLE3_LAYOUT_LIMITS))
    assert set(plans.etp.tolist()) == {1, 2, 4}  # 8 does not divide 12


def test_the_enumeration_key_keeps_everything_but_top_k_and_granularity():
    workload = Workload(ladder_geometry(4, 16, 2, 4), global_batch=256, seq_len=2048)
    key = _enumeration_key(workload, MACHINE, TABLE3_LAYOUT_LIMITS)
    for other in (replace(workload, global_batch=512), replace(workload, seq_len=4096),
                  replace(workload, stack="paper-nemo"),
                  replace(workload, geometry=ladder_geometry(6, 16, 2, 4)),
                  replace(workload, geometry=ladder_geometry(4, 32, 2, 4))):
        assert _enumeration_key(other, MACHINE, TABLE3_LAYOUT_LIMITS) != key
    assert _enumeration_key(replace(workload, geometry=ladder_geometry(4, 16, 2, 2)),
                            MACHINE, TABLE3_LAYOUT_LIMITS) == key
    assert _enumeration_key(workload, MACHINE, LayoutLimits()) != key
    dense = Workload(Geometry(layers=8, d_model=1024, heads=16, kv_heads=8, head_dim=64,
                              ffn=4096, vocab=32000), global_batch=256, seq_len=2048)
    assert _enumeration_key(dense, MACHINE, TABLE3_LAYOUT_LIMITS)[0] is dense
    enumerations = {}
    shared = _shared_plans(dense, MACHINE, TABLE3_LAYOUT_LIMITS, enumerations)
    assert shared is _shared_plans(dense, MACHINE, TABLE3_LAYOUT_LIMITS, enumerations)
    assert _same_plans(shared, enumerate_plans(dense, MACHINE.n_devices, 8,
                                               TABLE3_LAYOUT_LIMITS))
    outcome = best_feasible_layout(dense, MACHINE, default_calibration(), TABLE3_LAYOUT_LIMITS,
                                   enumerations)
    reference = best_layout(dense, MACHINE, default_calibration(), TABLE3_LAYOUT_LIMITS)
    assert reference is not None and outcome.plan == reference[0]
    assert _fields_identical(outcome.prediction, reference[1])


def _fields_identical(a, b) -> bool:
    """Every array of two predictions equal bit for bit (NaN equal to NaN)."""
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_fields_identical(a[k], b[k]) for k in a)
    if hasattr(a, "__dataclass_fields__"):
        return all(_fields_identical(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return bool(a == b)


@pytest.mark.parametrize("variant", sorted(WORKLOADS))
@pytest.mark.parametrize("calibration_name", ["default", "paper-p6b200"])
def test_search_path_equals_the_plain_layout_search(variant, calibration_name):
    """best_feasible_layout (shared enumeration, inherited distinct rows, geometries that
    differ in top_k one after the other) chooses the plan best_layout chooses, with the
    same prediction bit for bit."""
    calibration = load_calibration(calibration_name)
    enumerations = {}  # kept over the geometries, as a search block keeps it
    for experts, split in ((16, 4), (96, 2)):
        for top_k in (1, 2, 6):
            workload = Workload(ladder_geometry(6, experts, top_k, split), global_batch=256,
                                seq_len=2048, **WORKLOADS[variant])
            outcome = best_feasible_layout(workload, MACHINE, calibration,
                                           TABLE3_LAYOUT_LIMITS, enumerations)
            reference = best_layout(workload, MACHINE, calibration, TABLE3_LAYOUT_LIMITS)
            if reference is None:
                assert outcome.plan is None
                continue
            plan, prediction = reference
            assert outcome.plan == plan
            assert _fields_identical(outcome.prediction, prediction)
    assert len(enumerations) == 2  # one per (E, G): the top_k variants shared it


def test_profiling_twice_and_per_row_agree():
    """A grid profiled with a warm enumeration cache, and each row profiled on its own,
    give the same table (plans, metrics and counts)."""
    envelope = Envelope(resolve_system("B200"), n_nodes=4, days=2.0)
    space = SearchSpace(q=(4,), experts=(8, 32), top_k=(1, 2, 4), split_factor=(1, 4),
                        s_min=0.5)
    grid = space.enumerate()
    calibration = default_calibration()
    first = profile_geometries(envelope, grid, calibration, workers=1)
    again = profile_geometries(envelope, grid, calibration, workers=1)
    for name in ("tokens_per_s", "mfu", "step_time_s", "memory_bytes"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert first.plans == again.plans and first.layout_reasons == again.layout_reasons
    machine = machine_for(envelope.cluster, envelope.precision, envelope.usable_memory_fraction)
    evaluated = 0
    for row in range(len(grid)):
        workload = candidate_workload(envelope, grid, row)
        plans = enumerate_plans(workload, machine.n_devices,
                                machine.interconnect.scale_up_domain_gpus, TABLE3_LAYOUT_LIMITS)
        evaluated += len(plans)
        reference = best_layout(workload, machine, calibration, TABLE3_LAYOUT_LIMITS)
        if reference is None:
            assert first.plans[row] is None
            continue
        plan, prediction = reference
        assert first.plans[row] == {key: plan[key] for key in first.plans[row]}
        assert first.tokens_per_s[row] == prediction.tokens_per_s[0]
        assert first.memory_bytes[row] == prediction.memory_bytes[0]
    assert first.plans_evaluated == evaluated


def test_blocks_cover_the_rows_and_end_where_the_body_changes():
    grid = SearchSpace().enumerate()  # Table 3: 1,092 rows
    blocks = _blocks(grid, 8)
    assert [row for block in blocks for row in block] == list(range(len(grid)))
    body = np.stack([grid.layers, grid.d_model, grid.experts], axis=1)
    for block in blocks[:-1]:
        assert len(block) >= 8
        # a block ends at a change of body, or is a cut of a long run of one body
        assert (body[block.stop] != body[block.stop - 1]).any() or len(block) == 8
    assert _blocks(SearchSpace(q=(8,), experts=(8,), top_k=(1,), split_factor=(1,),
                               s_min=0.0).enumerate(), 8) == [range(0, 1)]
