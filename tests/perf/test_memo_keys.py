"""The terms remembered across top_k (plan_key(remember=without_top_k)) do not read top_k.

The co-design search computes these terms once per shared enumeration and gathers them for
every geometry that differs only in top_k (mosaic.perf.memo_keys). Each test computes a
term directly (every_plan: no per-key evaluation, nothing remembered) for several top_k and
requires the values to be identical, on workloads that exercise the stack traits, optimizer
and precision options the terms read.
"""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.data_parallel_time import data_parallel_collectives_s
from mosaic.perf.factorise import every_plan
from mosaic.perf.layer_costs import dense_block_times, moe_block_times
from mosaic.perf.layouts import enumerate_plans
from mosaic.perf.machine import machine_for
from mosaic.perf.memo_keys import without_top_k
from mosaic.perf.memory import heaviest_rank_parameters, parameter_state_bytes, stage_parameters
from mosaic.perf.optimizer_time import optimizer_update_s
from mosaic.perf.schedule import in_flight_microbatches, stage_layer_counts
from mosaic.perf.step_time import _vocab_stage_times
from mosaic.perf.workload import Workload
from mosaic.plan.envelope import TABLE3_LAYOUT_LIMITS

MACHINE = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4), "bf16")
TOP_KS = (1, 2, 6)
VARIANTS = {
    "megatron-core": {},
    "paper-nemo": dict(stack="paper-nemo"),
    "torchtitan": dict(stack="torchtitan"),
    "vocab-split": dict(vocab_in_pipeline_split=True),
    "uneven": dict(uneven_pipeline_stages=True),
    "muon-bf16-fp8": dict(optimizer="muon", optimizer_dtype="bf16", precision="fp8"),
}


def _workloads(variant: str) -> list[Workload]:
    base = Workload(ladder_geometry(6, 16, 1, 4), global_batch=256, seq_len=2048,
                    **VARIANTS[variant])
    moe = base.geometry.moe
    assert moe is not None
    return [replace(base, geometry=replace(base.geometry, moe=replace(moe, top_k=k)))
            for k in TOP_KS]


def _identical(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__"):
        return all(_identical(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return bool(a == b)


TERMS = {
    "stage_parameters": lambda w, p: [
        stage_parameters(w.geometry, p, stage, w.stage_split,
                         w.vocab_in_pipeline_split) for stage in ("first", "middle", "last")],
    "parameter_state_bytes": lambda w, p: [
        parameter_state_bytes(w, p, stage) for stage in ("first", "middle", "last")],
    "stage_layer_counts": lambda w, p: [
        stage_layer_counts(w.geometry, p, stage, w.stage_split,
                           w.vocab_in_pipeline_split) for stage in ("first", "middle", "last")],
    "in_flight_microbatches": lambda w, p: [
        in_flight_microbatches(w, p, stage) for stage in ("first", "middle", "last")],
    "dense_block_times": lambda w, p: dense_block_times(MACHINE, w, p),
    "_vocab_stage_times": lambda w, p: _vocab_stage_times(MACHINE, w, p),
    "heaviest_rank_parameters": lambda w, p: heaviest_rank_parameters(w, p),
    "data_parallel_collectives_s": lambda w, p: data_parallel_collectives_s(MACHINE, w, p),
    "optimizer_update_s": lambda w, p: optimizer_update_s(MACHINE, w, p),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_terms_remembered_across_top_k_do_not_read_it(variant):
    workloads = _workloads(variant)
    plans = enumerate_plans(workloads[0], MACHINE.n_devices, 8, TABLE3_LAYOUT_LIMITS)
    assert len(plans) > 100
    with every_plan():
        for name, term in TERMS.items():
            reference = term(workloads[0], plans)
            for workload in workloads[1:]:
                assert _identical(term(workload, plans), reference), (name, variant)
        # the comparison sees top_k where a term reads it (the routed experts' block)
        assert not _identical(moe_block_times(MACHINE, workloads[1], plans),
                              moe_block_times(MACHINE, workloads[0], plans))


def test_the_memo_key_differs_only_in_top_k():
    one, two, _ = _workloads("megatron-core")
    assert without_top_k(two) == without_top_k(one) == one
    assert without_top_k(two.geometry) == one.geometry
    assert without_top_k(replace(two, global_batch=512)) != without_top_k(two)
    assert without_top_k(replace(two, stack="paper-nemo")) != without_top_k(two)
    assert without_top_k("first") == "first" and without_top_k(MACHINE) is MACHINE
