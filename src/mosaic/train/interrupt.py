"""Ctrl-C or SIGTERM during training: stop promptly, keep every applied step, then exit.

SIGTERM is how Slurm (scancel, a time limit: SIGTERM, then SIGKILL after KillWait, 30 s by
default, slurm.conf) and Kubernetes (terminationGracePeriodSeconds, 30 s by default) stop a
job; a trial's killed rung lost every step since its last checkpoint. Both signals are
handled alike. The first one:

* in a single process, while a step is still in its forward/backward passes (nothing of it
  applied yet: parameters, optimizer state, router biases and the loss smoother change only
  after them), raises :class:`StepAbandoned` at once; the trainer drops that step, saves
  the steps before it and stops. A trial's 60 s CPU step outlived the 30 s grace period, so
  finishing it lost everything since the last checkpoint to the SIGKILL;
* otherwise (the optimizer step, logging, checkpointing, or any point under torchrun) only
  records the request; the trainer reads it after the step, and under torchrun the ranks
  agree on it through the step's own all-reduce (so every rank saves the same step and no
  collective is left half-entered; a rank that left its forward pass on its own would hang
  the others in their next all-gather).

A second signal stops at once, as Ctrl-C always did. torchrun's agent forwards the
terminal's SIGINT to its workers, which already received it from the terminal
(torch.distributed.elastic: the agent's ``_shutdown`` sends the signal it got to every
worker, then SIGKILL after its grace period), so a second signal within
:data:`REPEAT_WINDOW_S` of the first counts as the same press. That grace period is
``torchrun --shutdown-timeout`` (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), 30 s by default and
fixed at 30 s before pytorch/pytorch#172596 (merged 3 March 2026; in torch 2.13): under
torchrun, where the stop waits for the step under way, a step plus its checkpoint longer
than it is killed unsaved.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

REPEAT_WINDOW_S = 2.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StepAbandoned(KeyboardInterrupt):
    """The first stop signal arrived before the step under way had applied anything: the
    trainer drops the step and saves the ones before it (a KeyboardInterrupt, so code that
    does not know it still stops as Ctrl-C does)."""


class StopRequest:
    """Whether Ctrl-C or SIGTERM asked this process to stop."""

    def __init__(self) -> None:
        self.requested = False
        self._first_s: float | None = None
        self._announce = False
        self._abandonable = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if not self.requested:
            self.requested, self._first_s = True, now
            name = signal.Signals(signum).name
            if self._abandonable:
                self._abandonable = False
                self._say(f"progress: interrupted ({name}); stopping now: the step under way "
                          "is dropped (nothing of it was applied; a rerun repeats it) and the "
                          "steps before it are kept in a checkpoint")
                raise StepAbandoned
            self._say(f"progress: interrupted ({name}); stopping after this step to write a "
                      "checkpoint (the same signal again stops at once)")
            return
        if self._first_s is not None and now - self._first_s > REPEAT_WINDOW_S:
            raise KeyboardInterrupt

    def _say(self, line: str) -> None:
        if self._announce:
            print(line, file=sys.stderr, flush=True)

    @contextmanager
    def abandonable(self, enabled: bool = True) -> Iterator[None]:
        """Inside the block (when ``enabled``) the first signal raises :class:`StepAbandoned`
        instead of waiting for the step to end: the block must change no training state. A
        request that arrived before the block (while the last step logged or checkpointed)
        stops it as it starts."""
        if enabled and self.requested:
            raise StepAbandoned
        self._abandonable = enabled
        try:
            yield
        finally:
            self._abandonable = False

    @contextmanager
    def installed(self, announce: bool) -> Iterator[StopRequest]:
        """Handle SIGINT and SIGTERM this way inside the block (only the main thread can take
        signals; elsewhere they keep their usual meaning)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        self._announce = announce
        previous = {number: signal.signal(number, self._handle) for number in STOP_SIGNALS}
        try:
            yield self
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
