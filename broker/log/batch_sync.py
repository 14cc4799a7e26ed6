"""Flushing many logs with one ``syncfs`` instead of one fsync each.

A stop with 10,000 partitions to flush, a recovery that scanned 10,000 of them, or a
flusher pass that finds hundreds due at once would cost two fsyncs per partition (about
0.3 ms each on a fast disk, several on a slow one). Linux's ``syncfs(2)`` writes back
every dirty page of one file system in a single call (measured here: 4,000 files in
0.11 s against 1.08 s one by one), and since Linux 5.8 it reports a write-back error
that happened on that file system.

:func:`flush_together` writes each log's pending index entries (``Log.begin_flush``),
syncs the file system once, then records every log as flushed (``Log.end_flush``). If
``syncfs`` fails, or is not available (not Linux), it falls back to flushing the logs
one by one, in parallel: each log's own fsync then reports its own error, so exactly
the logs whose data is at risk are marked failed.

Thread-safety: callable from any one thread at a time per set of logs (the flusher,
the log manager's close, recovery at start-up).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import structlog

from rill.broker.log.fsync_stats import FSYNC_SECONDS
from rill.broker.log.log import Log
from rill.client.errors import StorageError

PARALLEL_FSYNCS = 8
_logger = structlog.get_logger(__name__)
_libc = ctypes.CDLL(None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)


def sync_filesystem(path: str) -> None:
    """Write back every dirty page of the file system holding ``path``.

    Raises:
        OSError: a write-back error was reported, or syncfs is not available here.
    """
    if _syncfs is None:
        raise OSError(38, "syncfs is not available on this system", path)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), path)
    finally:
        os.close(fd)


def flush_together(logs: Sequence[Log], path: str) -> list[Log]:
    """Flush ``logs`` (all on the file system holding ``path``); return those that failed.

    Never raises for a log's failure: a failed log is marked failed (its waiters get
    the error) and returned.
    """
    tokens = []
    failed: list[Log] = []
    for log in logs:
        try:
            token = log.begin_flush()
        except StorageError:
            failed.append(log)
            continue
        if token is not None:
            tokens.append((log, token))
    if not tokens:
        return failed
    started = time.monotonic()
    try:
        sync_filesystem(path)
        FSYNC_SECONDS.observe(time.monotonic() - started)
    except OSError as exc:
        _logger.warning("log.batch_sync_failed", path=path, error=exc.strerror or str(exc),
                        detail="flushing the logs one by one to find which failed")
        return failed + flush_each([log for log, _ in tokens])
    for log, token in tokens:
        log.end_flush(token)
    return failed


def flush_each(logs: Sequence[Log]) -> list[Log]:
    """Flush ``logs`` one by one, ``PARALLEL_FSYNCS`` at a time (fsync releases the GIL); return the failed."""
    def flush(log: Log) -> Log | None:
        try:
            log.flush()
        except StorageError as exc:
            _logger.error("log.flush_failed", topic=log.topic, partition=log.partition, error=str(exc))
            return log
        return None

    with ThreadPoolExecutor(max_workers=PARALLEL_FSYNCS, thread_name_prefix="rill-log-sync") as pool:
        return [log for log in pool.map(flush, logs) if log is not None]
