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


def test_the_limit_reaches_scipys_own_blas_loaded_after_it():
    """scipy's wheels bundle an OpenBLAS of their own, loaded on scipy's first import, which
    the CLI's law fit makes after limiting the threads: the fit ran it on every core (a
    trial: 4-10x slower on a busy machine). In a fresh interpreter, every BLAS library is
    at one thread after the limit, scipy's included."""
    import subprocess
    import sys

    pytest.importorskip("threadpoolctl")
    script = ("import numpy\n"
              "from mosaic.threads import limit_blas_threads\n"
              "limit_blas_threads(1)\n"
              "import scipy.optimize\n"
              "from threadpoolctl import threadpool_info\n"
              "print(sorted({i['num_threads'] for i in threadpool_info()\n"
              "              if i['user_api'] == 'blas'}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[1]"
