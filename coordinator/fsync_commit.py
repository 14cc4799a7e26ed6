"""When a coordinator record is durable: the ways an offset store waits before it acknowledges.

The offset store (rill.coordinator.offsets_log) writes a batch, then waits with a
:class:`Commit` until the batch is durable, and only then does the coordinator apply it
and answer. Two kinds:

- :class:`FsyncCommit` (a single broker's local log): durable once fsynced. Fsyncs are
  shared (group commit): one thread at a time fsyncs, covering every batch written
  before it started, and a thread whose batch is already covered returns without one.
- a replicated partition's leader (rill.broker.cluster.group_partition_log): durable once
  the partition's high watermark passes the batch, i.e. every in-sync replica has it.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from rill.client.errors import StorageError

__all__ = ["Commit", "FlushableLog", "FsyncCommit", "remaining"]

_FLUSH_ATTEMPTS = 3


class Commit(Protocol):
    def wait(self, end: int, deadline: float | None) -> None:
        """Return once everything before offset ``end`` is durable.

        Raises:
            TimeoutError: ``deadline`` (a ``time.monotonic()`` value; None: none) passed first;
                the batch is written and may still become durable.
            StorageError: it cannot become durable here (the log failed or was closed).
            NotCoordinator: (replicated) this broker stopped leading the partition.
        """
        ...


class FlushableLog(Protocol):
    @property
    def flushed_offset(self) -> int: ...

    def flush(self) -> None: ...


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


class FsyncCommit:
    """Durable once fsynced, with fsyncs shared between threads (see the module docstring)."""

    def __init__(self, log: FlushableLog) -> None:
        self._log = log
        self._cond = threading.Condition()  # guards _flushing
        self._flushing = False

    def wait(self, end: int, deadline: float | None) -> None:
        """Return once ``flushed_offset >= end``, fsyncing unless another thread's fsync covers it.

        A flush covers every set written before it starts, so one flush by this
        thread is enough; a second is tried only if ``flushed_offset`` still reads
        short (another thread's older flush may publish its offset after ours).
        """
        for _ in range(_FLUSH_ATTEMPTS):
            with self._cond:
                while self._flushing and self._log.flushed_offset < end:
                    left = remaining(deadline)
                    if left is not None and left <= 0:
                        raise TimeoutError("offsets log: timed out waiting for the fsync; the batch is written "
                                           "and may still become durable")
                    self._cond.wait(left)
                if self._log.flushed_offset >= end:
                    return
                self._flushing = True
            try:
                self._log.flush()
            finally:
                with self._cond:
                    self._flushing = False
                    self._cond.notify_all()
            if self._log.flushed_offset >= end:
                return
        raise StorageError(f"offsets log: not flushed past offset {end} (was the log closed?)")
