"""The logs with unflushed data, and flushing those that are due.

The flusher looks only at the dirty set, never at every log: a log puts itself in it
(``Log.on_dirty``, with ``Log.in_dirty_set`` so it is added once) on its first append
after a flush, and stays there while it has unflushed data. From ``BATCH_SYNC_MIN``
logs due at once, one syncfs flushes them all (batch_sync.py) instead of an fsync each.

Thread-safety: :meth:`DirtyLogs.add` runs on the appending thread (the event loop),
:meth:`DirtyLogs.flush_due` on the flusher's thread, :meth:`DirtyLogs.discard` on the
thread deleting a replica; a lock guards the set, and no flush runs under it.
"""

from __future__ import annotations

import threading

import structlog

from rill.broker.log import batch_sync
from rill.broker.log.log import Log
from rill.client.errors import StorageError

BATCH_SYNC_MIN = 64  # logs due at once from which one syncfs replaces an fsync each
_logger = structlog.get_logger(__name__)


class DirtyLogs:
    """The dirty set of the logs under ``data_dir`` (see the module docstring)."""

    def __init__(self, data_dir: str) -> None:
        self._data_dir = data_dir
        self._lock = threading.Lock()
        self._dirty: set[Log] = set()

    def __len__(self) -> int:
        """How many logs have data not yet flushed (the flusher's backlog)."""
        return len(self._dirty)

    def add(self, log: Log) -> None:
        """Put ``log`` in the set (its ``on_dirty`` hook)."""
        with self._lock:
            self._dirty.add(log)

    def discard(self, log: Log) -> None:
        """Take ``log`` out of the set for good (a deleted replica: it is flushed no more)."""
        with self._lock:
            self._dirty.discard(log)

    def flush_due(self, now: float) -> int:
        """Flush the logs that need it (``Log.needs_flush``); return how many were flushed.

        A log that still holds unflushed data afterwards (not due yet, or appended to
        meanwhile) stays in the set, unless it has failed (``Log.failed``).
        """
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        still: list[Log] = []
        due = []
        for log in dirty:
            log.in_dirty_set = False  # before looking at its data: an append from now on re-adds it
            if log.needs_flush(now):
                due.append(log)
        if len(due) >= BATCH_SYNC_MIN:
            failed = set(batch_sync.flush_together(due, self._data_dir))
        else:
            failed = set()
            for log in due:
                try:
                    log.flush()
                except StorageError as exc:
                    failed.add(log)
                    _logger.error("log.flush_failed", topic=log.topic, partition=log.partition, error=str(exc))
        for log in dirty:
            if log.has_unflushed and log.failed is None and not log.in_dirty_set:
                log.in_dirty_set = True
                still.append(log)
        if still:
            with self._lock:
                self._dirty.update(still)
        return len(due) - len(failed)
