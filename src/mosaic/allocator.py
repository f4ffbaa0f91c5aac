"""Deliberate memory-allocator settings where mosaic evaluates many plans (issue 11).

A vectorised evaluation allocates and frees hundreds of arrays of 0.1-1 MB (one value per
plan). glibc's malloc serves blocks above its mmap threshold with fresh pages and returns
heap memory above its trim threshold to the kernel, so every evaluation faults its memory
in again: 10,671 page faults per evaluation of the 34,110 plans of
``benchmarks/bench_layouts.py``, about a quarter of its CPU time. Raising both thresholds
keeps freed memory in the process for the next evaluation (reused, not leaked: the heap
stays at its peak size). The settings change no computed value.

glibc mallopt(3), M_MMAP_THRESHOLD and M_TRIM_THRESHOLD:
https://man7.org/linux/man-pages/man3/mallopt.3.html. Elsewhere (macOS, musl, Windows)
nothing is changed. ``MOSAIC_KEEP_FREED_MEMORY=0`` leaves the allocator as it is.
"""

from __future__ import annotations

import ctypes
import os
import sys

ENV_VAR = "MOSAIC_KEEP_FREED_MEMORY"
M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
# Largest mmap threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB):
# blocks up to it come from the heap and are reused.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# Free memory kept at the top of the heap before it goes back to the kernel.
TRIM_THRESHOLD_BYTES = 512 * 1024 * 1024

_STATE: dict[str, bool | None] = {"applied": None}


def keep_freed_memory() -> bool:
    """Set the thresholds once per process (forked workers inherit them); True when they
    are in effect."""
    if _STATE["applied"] is None:
        _STATE["applied"] = _apply()
    return bool(_STATE["applied"])


def _apply() -> bool:
    if os.environ.get(ENV_VAR, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
