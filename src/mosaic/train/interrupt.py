"""Ctrl-C or SIGTERM during training: finish the optimizer step, write a checkpoint, then stop.

SIGTERM is how Slurm (scancel, a time limit: SIGTERM, then SIGKILL after KillWait, 30 s by
default, slurm.conf) and Kubernetes (terminationGracePeriodSeconds, 30 s by default) stop a
job; a trial's killed rung lost every step since its last checkpoint. Both signals are
handled alike. The first only records the request; the trainer reads it after each step, and the
ranks agree on it through the step's own all-reduce (so every rank saves the same step and
no collective is left half-entered). A second signal stops at once, as Ctrl-C always did.
torchrun's agent forwards the terminal's SIGINT to its workers, which already received it
from the terminal (torch.distributed.elastic: the agent's ``_shutdown`` sends the signal
it got to every worker, then SIGKILL after its grace period), so a second signal within
:data:`REPEAT_WINDOW_S` of the first counts as the same press.
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


class StopRequest:
    """Whether Ctrl-C or SIGTERM asked this process to stop after the current step."""

    def __init__(self) -> None:
        self.requested = False
        self._first_s: float | None = None
        self._announce = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if not self.requested:
            self.requested, self._first_s = True, now
            if self._announce:
                name = signal.Signals(signum).name
                print(f"progress: interrupted ({name}); stopping after this step to write a "
                      "checkpoint (the same signal again stops at once)", file=sys.stderr,
                      flush=True)
            return
        if self._first_s is not None and now - self._first_s > REPEAT_WINDOW_S:
            raise KeyboardInterrupt

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
