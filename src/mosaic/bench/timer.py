"""Timing of one callable on a device: warm-up, calls per sample, repeats until stable.

GPU: CUDA events around the calls of one sample (torch.cuda.Event, elapsed_time in ms;
https://pytorch.org/docs/stable/generated/torch.cuda.Event.html). CPU and other devices:
``time.perf_counter`` after a device synchronisation on both sides. Short calls are run
``calls_per_sample`` times back to back per sample so that a sample lasts at least
``target_sample_s`` (timer resolution and event overhead amortised); the sample is divided
by the count, which measures the call's throughput time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from mosaic.bench.stats import TimingSummary, summarize

MAX_CALLS_PER_SAMPLE = 1000

# The time.monotonic() value a bench's --time-budget ends at, for the case being timed
# (set by the run loop around each case; None: no budget).
_DEADLINE: ContextVar[float | None] = ContextVar("bench_deadline", default=None)


class OutOfBudget(Exception):  # noqa: N818 (a stop signal, not an error)
    """The case being timed would end past the time budget: it is left for a rerun."""


@contextmanager
def budget_deadline(deadline: float | None) -> Iterator[None]:
    """Within: :func:`time_call` gives up a case that its first calls show cannot end by
    ``deadline`` (a ``time.monotonic()`` value), and takes no sample past it beyond the
    policy's minimum."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _check_budget(call_s: float, calls_left: int) -> None:
    """Raise :class:`OutOfBudget` when ``calls_left`` more calls of ``call_s`` each would
    end past the deadline."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() + call_s * calls_left > deadline:
        raise OutOfBudget(f"{calls_left} more calls of {call_s:.3g} s would pass the budget")


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often one case is timed."""

    warmup: int = 3
    """Untimed calls first (allocator, autotuning, caches, lazy init)."""
    min_repeats: int = 5
    """Samples at least."""
    max_repeats: int = 50
    """Samples at most."""
    min_time_s: float = 0.2
    """Keep sampling (up to ``max_repeats``) until this much time was measured."""
    target_sample_s: float = 1e-3
    """Run short calls back to back until one sample lasts this long."""

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(f"bad timing policy {self}: need warmup >= 0, "
                             "1 <= min_repeats <= max_repeats")


QUICK = TimingPolicy(warmup=1, min_repeats=3, max_repeats=5, min_time_s=0.0,
                     target_sample_s=2e-4)
"""For tests and dry checks on CPU: few samples, no minimum time."""


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (no-op on CPU, whose torch ops are synchronous)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _sample_s(fn: Callable[[], Any], device: Any, calls: int) -> float:
    """Seconds per call over ``calls`` back-to-back calls."""
    import torch

    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / calls
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - t0) / calls


def time_call(fn: Callable[[], Any], device: Any, policy: TimingPolicy
              ) -> tuple[TimingSummary, int]:
    """(summary of seconds per call, calls per sample) for ``fn`` on ``device``."""
    # Under a time budget every call up to the probe is timed, so that a case whose calls
    # are long (a large GEMM on a CPU) is given up after one call, not after the whole case.
    single_calls_s = []
    for done in range(policy.warmup):
        single_calls_s.append(_sample_s(fn, device, 1))
        _check_budget(single_calls_s[-1], policy.warmup - done - 1 + 1 + policy.min_repeats)
    single_calls_s.append(_sample_s(fn, device, 1))
    # The call's duration is the fastest single call (warm-up included): one preempted by a
    # busy host's scheduler (an 8 ms stall of a 10 us kernel, a trial) would otherwise set
    # one call per sample, and then every sample measured the stalls, the same in every run
    probe_s = min(single_calls_s)
    calls = 1
    if probe_s < policy.target_sample_s:
        calls = min(MAX_CALLS_PER_SAMPLE,
                    math.ceil(policy.target_sample_s / max(probe_s, 1e-9)))
    _check_budget(probe_s, calls * policy.min_repeats)
    samples: list[float] = []
    measured_s = 0.0
    deadline = _DEADLINE.get()
    while len(samples) < policy.max_repeats:
        samples.append(_sample_s(fn, device, calls))
        measured_s += samples[-1] * calls
        if len(samples) >= policy.min_repeats and (
                measured_s >= policy.min_time_s
                or (deadline is not None and time.monotonic() >= deadline)):
            break
    return summarize(np.array(samples)), calls
