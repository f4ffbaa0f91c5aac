"""BLAS thread limits (mosaic.threads)."""

from __future__ import annotations

import numpy as np  # noqa: F401 - load OpenBLAS so there is a pool to limit
import pytest

from mosaic.threads import ENV_VAR, blas_threads, limit_blas_threads

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> set[int]:
    return {info["num_threads"] for info in threadpoolctl.threadpool_info()
            if info["user_api"] == "blas"}


def test_limit_sets_one_thread_and_restores():
    before = _blas_threads()
    with limit_blas_threads(1):
        assert _blas_threads() == {1}
    assert _blas_threads() == before


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("0", 1), ("x", 1), ("", 1)])
def test_environment_override(monkeypatch, value, expected):
    monkeypatch.setenv(ENV_VAR, value)
    assert blas_threads() == expected
