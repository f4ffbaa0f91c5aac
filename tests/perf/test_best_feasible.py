"""best_feasible picks rank_feasible's first plan without sorting every plan."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.layouts import (
    LayoutLimits,
    best_feasible,
    predict_in_chunks,
    rank_feasible,
    search_layouts,
    take_prediction,
)
from mosaic.perf.machine import machine_for
from mosaic.perf.workload import Workload

WORKLOAD = Workload(geometry=ladder_geometry(4, experts=64, top_k=2, split_factor=4),
                    global_batch=256, seq_len=2048)
MACHINE = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=4), "bf16")


@pytest.fixture(scope="module")
def search():
    return search_layouts(WORKLOAD, MACHINE, default_calibration(), LayoutLimits())


def test_best_is_rank_one(search):
    assert best_feasible(search.prediction) == int(search.ranking[0])


def test_ties_go_to_smaller_memory_then_earlier_plan(search):
    p = take_prediction(search.prediction, np.arange(6))
    tokens = np.array([1.0, 5.0, 5.0, 5.0, 2.0, 5.0])
    memory = np.array([1.0, 9.0, 3.0, 3.0, 1.0, 4.0])
    feasible = np.array([True, True, True, True, True, False])
    tied = replace(p, tokens_per_s=tokens, memory_bytes=memory, feasible=feasible)
    assert best_feasible(tied) == int(rank_feasible(tied)[0]) == 2
    assert best_feasible(replace(tied, feasible=np.zeros(6, dtype=bool))) is None


def test_nan_throughput_follows_the_sort(search):
    p = take_prediction(search.prediction, np.arange(3))
    odd = replace(p, tokens_per_s=np.array([np.nan, 2.0, 1.0]), feasible=np.ones(3, bool))
    assert best_feasible(odd) == int(rank_feasible(odd)[0])


def test_single_chunk_equals_chunked(search):
    one = predict_in_chunks(WORKLOAD, search.plans, MACHINE, default_calibration())
    np.testing.assert_array_equal(one.step_time_s, search.prediction.step_time_s)
    chunked = predict_in_chunks(WORKLOAD, search.plans, MACHINE, default_calibration(),
                                chunk_plans=max(1, search.n_plans // 3))
    np.testing.assert_array_equal(chunked.step_time_s, one.step_time_s)
    np.testing.assert_array_equal(chunked.memory_bytes, one.memory_bytes)
