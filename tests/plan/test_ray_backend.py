"""The Ray backend: identical results to the local backend, one-line errors otherwise."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.hardware.default_systems import resolve_system
from mosaic.law import default_law
from mosaic.perf.calibration import default_calibration
from mosaic.plan.envelope import Envelope, SearchSpace
from mosaic.plan.ray_backend import RayBackend, backend_from_options, execution_backend
from mosaic.plan.search import search


def test_missing_ray_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MosaicInputError, match=r"pip install mosaic\[ray\]"):
        RayBackend().connect()


@pytest.mark.parametrize(("backend", "address", "words"), [
    ("dask", None, "allowed values are local, ray"),
    ("local", "auto", "--address needs --backend ray"),
    ("ray", "no-port", "allowed: auto or HOST:PORT"),
])
def test_bad_backend_options(backend, address, words):
    with pytest.raises(MosaicInputError, match=words):
        backend_from_options(backend, address)


def test_unreachable_cluster_fails_in_seconds():
    pytest.importorskip("ray")
    with pytest.raises(MosaicInputError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1"):
        RayBackend(address="127.0.0.1:1").connect()


@pytest.mark.slow
def test_ray_results_equal_local_results():
    ray = pytest.importorskip("ray")
    envelope = Envelope(resolve_system("B200"), n_nodes=2)
    space = SearchSpace(q=(8,), experts=(8, 16, 32), top_k=(1, 2), split_factor=(1, 4))
    law, calibration = default_law(), default_calibration()
    local = search(envelope, space, law, calibration, workers=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        seen: list[tuple[int, int]] = []
        with execution_backend(RayBackend()):
            remote = search(envelope, space, law, calibration,
                            progress=lambda done, total: seen.append((done, total)))
    finally:
        ray.shutdown()
    assert remote.optimum_index == local.optimum_index
    for name in ("tokens_per_s", "mfu", "step_time_s", "memory_bytes"):
        assert np.array_equal(getattr(remote.throughput, name),
                              getattr(local.throughput, name), equal_nan=True)
    assert remote.throughput.plans == local.throughput.plans
    assert seen[-1] == (len(space.enumerate()), len(space.enumerate()))
