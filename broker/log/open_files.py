"""A bounded cache of open segment files: descriptors do not grow with partitions.

A segment's ``.log`` and ``.index`` files are opened when first needed and kept in a
least-recently-used cache of at most ``max_open`` descriptors (``log.open.files.max``).
Opening one more closes the least recently used one. Two kinds of file are never
closed by the cache:

* a ``.log`` file whose segment has bytes that are not fsynced yet (``Segment.unsynced``):
  its descriptor stays open until the flusher has synced it, so a write-back error is
  reported to the descriptor that wrote the bytes (fsyncgate, reliability.md 1.5);
* any file while someone uses it: eviction only drops the cache's reference, and a
  :class:`SegmentFile` closes when its last reference goes. A :class:`FileSlice` being
  sent, or a flush in progress, keeps its descriptor open until it is done.

So the cache may hold more than ``max_open`` for a while when many segments are
unsynced at once (one per partition written within a flush interval); the count falls
back as the flusher syncs them. :meth:`OpenFiles.close_idle` closes files unused for
``idle_ms`` (``log.open.files.idle.ms``), so a quiet broker holds few descriptors.

Thread-safety: every method may be called from any thread (one short lock; files are
opened outside it).
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

LOG_FILE = 0
INDEX_FILE = 1


class SegmentFile(io.FileIO):
    """A raw file whose descriptor closes quietly when its last reference goes.

    Segments hand this object to readers (``FileSlice.file``); a deleted or evicted
    segment's file stays open for as long as a slice of it is alive.
    """

    def __del__(self) -> None:
        if not self.closed:
            self.close()


class CachedSegment(Protocol):
    """What the cache needs of a segment: where its files are, and whether it must stay open."""

    path: str

    @property
    def index_path(self) -> str: ...

    @property
    def unsynced(self) -> bool: ...


class OpenFiles:
    """At most ``max_open`` open segment files (soft: see the module docstring).

    Raises (constructor): ValueError when ``max_open`` < 2.
    """

    def __init__(self, max_open: int = 4096, idle_ms: int = 600_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_open < 2:
            raise ValueError(f"max_open must be at least 2, got {max_open}")
        self.max_open = max_open
        self.idle_ms = idle_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[CachedSegment, int], tuple[SegmentFile, float]] = OrderedDict()
        self.opened = 0
        """Files opened since start (a cache miss each): a gauge for tests and benchmarks."""

    def __len__(self) -> int:
        return len(self._files)

    def log_file(self, segment: CachedSegment) -> SegmentFile:
        """The open ``.log`` file of ``segment`` (opened now if it is not cached).

        Raises:
            OSError: the file could not be opened (missing, permissions, out of descriptors).
        """
        return self._get(segment, LOG_FILE)

    def index_file(self, segment: CachedSegment) -> SegmentFile:
        """The open ``.index`` file of ``segment``, created empty if it does not exist.

        Raises:
            OSError: the file could not be opened or created.
        """
        return self._get(segment, INDEX_FILE)

    def _get(self, segment: CachedSegment, kind: int) -> SegmentFile:
        key = (segment, kind)
        now = self._clock()
        with self._lock:
            found = self._files.get(key)
            if found is not None and not found[0].closed:
                self._files[key] = (found[0], now)
                self._files.move_to_end(key)
                return found[0]
        if kind == LOG_FILE:
            fd = os.open(segment.path, os.O_RDWR | os.O_CLOEXEC)
        else:
            fd = os.open(segment.index_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        file = SegmentFile(fd, "r+")
        with self._lock:
            raced = self._files.get(key)
            if raced is not None and not raced[0].closed:
                file.close()  # another thread opened it meanwhile: keep one descriptor
                return raced[0]
            self._files[key] = (file, now)
            self.opened += 1
            self._evict(len(self._files) - self.max_open)
        return file

    def _evict(self, excess: int) -> None:
        """Drop up to ``excess`` least recently used entries, skipping pinned ones (lock held)."""
        checked = 0
        limit = len(self._files)
        while excess > 0 and checked < limit:
            key, (file, used) = next(iter(self._files.items()))
            checked += 1
            if key[1] == LOG_FILE and key[0].unsynced:
                self._files.move_to_end(key)  # pinned until synced: look at it again later
                continue
            del self._files[key]
            excess -= 1

    def forget(self, segment: CachedSegment) -> None:
        """Drop ``segment``'s files from the cache (deleted or closed); users' references stay valid."""
        with self._lock:
            self._files.pop((segment, LOG_FILE), None)
            self._files.pop((segment, INDEX_FILE), None)

    def close_idle(self) -> int:
        """Drop files unused for ``idle_ms`` (unsynced log files excepted); return how many."""
        cutoff = self._clock() - self.idle_ms / 1000
        with self._lock:
            stale = []
            for key, (_, used) in self._files.items():
                if used >= cutoff:
                    break  # ordered by last use: the rest are newer
                if not (key[1] == LOG_FILE and key[0].unsynced):
                    stale.append(key)
            for key in stale:
                del self._files[key]
        return len(stale)

    def close_all(self) -> None:
        """Close every cached file now (shutdown: no reader may hold a slice any more)."""
        with self._lock:
            entries, self._files = list(self._files.values()), OrderedDict()
        for file, _ in entries:
            file.close()


UNBOUNDED = 1 << 30
"""``max_open`` of a cache that never evicts: for a standalone log opened outside a LogManager."""
