"""Deliberate BLAS thread use where mosaic parallelises itself (issue 11).

The co-design search runs one worker process per core; if each worker's BLAS also started
one thread per core, N workers would run N² threads on N cores. Workers therefore use one
BLAS thread each. Small-matrix work (the law fit's vectorised starts) is also fastest on one
thread: the arrays are too small to amortise the thread hand-off (measured 5x on the law fit
in issue 11). ``MOSAIC_BLAS_THREADS`` overrides the count.

threadpoolctl (https://github.com/joblib/threadpoolctl) sets the limit in the already loaded
OpenBLAS/MKL; environment variables such as OPENBLAS_NUM_THREADS only act before numpy is
imported, which is too late in forked workers.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

ENV_VAR = "MOSAIC_BLAS_THREADS"


def blas_threads(default: int = 1) -> int:
    """The BLAS threads to use: ``MOSAIC_BLAS_THREADS`` if set to a positive int, else default."""
    text = os.environ.get(ENV_VAR, "")
    return int(text) if text.isdigit() and int(text) > 0 else default


def limit_blas_threads(threads: int | None = None) -> Any:
    """Limit BLAS to ``threads`` (default :func:`blas_threads`) in this process.

    Returns the threadpoolctl limiter (use it as a context manager to restore), or None when
    threadpoolctl is not installed (then the limit is left to the environment).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    # threadpoolctl reaches only the BLAS libraries already loaded: scipy's wheels bundle an
    # OpenBLAS of their own besides numpy's, loaded on scipy's first import, which in the
    # CLI comes after this call (a trial: the law fit ran scipy's on 2 threads, 9.0 s
    # against 2.7 s with OMP_NUM_THREADS=1); load it first
    with contextlib.suppress(ImportError):
        import scipy.linalg  # noqa: F401
    return threadpool_limits(limits=threads or blas_threads(), user_api="blas")
