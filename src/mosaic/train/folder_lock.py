"""One training process per run folder: an advisory lock on ``DIR/.train.lock``.

Two trainers in one folder interleave their metrics lines and overwrite each other's
checkpoints. A trial got there by the documented stop gone wrong: ``kill -9`` on torchrun
alone leaves its workers running (the agent dies before it can forward a signal, and its
workers have no parent-death signal), and the rerun then trained beside them; its
``metrics.jsonl`` ended with 245 lines for 160 steps. The lock is ``flock`` (released by
the kernel when its holder exits, however it exits, so a killed run leaves no stale lock);
under torchrun rank 0 takes it and every rank learns the outcome from one all-reduce, so
all of them stop with the same error. The holder removes the file before it lets go (a
killed one leaves it, unlocked), and a taker that locked a file so removed tries again.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from mosaic.errors import MosaicInputError
from mosaic.train.distributed import DistContext, all_reduce_max

LOCK_FILE = ".train.lock"

try:  # POSIX; elsewhere (Windows) the folder is not locked
    import fcntl
except ImportError:  # pragma: no cover - no such platform in CI
    fcntl = None  # type: ignore[assignment]


def _not_a_file(path: Path, what: str) -> str:
    return (f"{path}: {what}, not a regular file; the trainer keeps its lock there: remove "
            "it and rerun")


def _try_lock(path: Path) -> tuple[int | None, str]:
    """(the open descriptor holding the lock, "") or (None, the holder's pid as written)."""
    while True:
        try:  # (non-blocking: a FIFO there would wait for a writer)
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except IsADirectoryError:
            raise MosaicInputError(_not_a_file(path, "a directory")) from None
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # a FIFO: 'internal error
            os.close(descriptor)  # (OSError: [Errno 22] Invalid argument)' (a trial)
            raise MosaicInputError(_not_a_file(path, "a FIFO, socket or device"))
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 64, 0).decode(errors="replace").strip()
            os.close(descriptor)
            return None, holder
        try:  # the file a holder removed as it ended is not the lock any more: retry
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(descriptor).st_ino:
            break
        os.close(descriptor)
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor, ""


@contextmanager
def training_lock(out_dir: Path, context: DistContext) -> Iterator[None]:
    """Hold ``out_dir``'s lock for the block; refuse (every rank, one line) when another
    process holds it."""
    descriptor, holder, problem = None, "", None
    if context.is_main and fcntl is not None:
        try:
            descriptor, holder = _try_lock(out_dir / LOCK_FILE)
        except MosaicInputError as exc:  # told to every rank below, not raised on one alone
            problem = str(exc)
    # 0: locked; 1: another process holds it; 2: rank 0 cannot lock there (problem)
    outcome = 2.0 if problem is not None else float(
        context.is_main and fcntl is not None and descriptor is None)
    refused = all_reduce_max(torch.tensor([outcome]).to(context.device), context).item()
    if refused == 2:  # rank 0 says why; the others say where
        raise MosaicInputError(problem if problem is not None else
                               f"{out_dir}: rank 0 cannot take the run folder's lock "
                               f"({LOCK_FILE}); its error says why")
    if refused > 0:
        who = f"process {holder}" if holder else "another process"
        raise MosaicInputError(
            f"{out_dir}: {who} is training this run folder (it holds {LOCK_FILE}); wait for "
            "it to end or stop it (after `kill -9` on torchrun alone its workers keep "
            "running: stop torchrun's process group), then rerun to resume")
    try:
        yield
    finally:
        if descriptor is not None:  # removed while held (no file left behind), then freed
            (out_dir / LOCK_FILE).unlink(missing_ok=True)
            os.close(descriptor)
