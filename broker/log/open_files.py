"""A bounded cache of open segment files: descriptors do not grow with partitions.

A segment's ``.log`` and ``.index`` files are opened when first needed and kept in a
least-recently-used cache of at most ``max_open`` descriptors (``log.open.files.max``).
Opening one more closes the least recently used one, preferring files whose bytes are
all fsynced: a ``.log`` file with unsynced bytes (``Segment.unsynced``) is closed only
when nothing else is left to close (a write flood over more partitions than
``max_open`` within one flush interval). That is safe: fsync works on the file, not on
the descriptor, so the flusher's later fsync through a new descriptor syncs those
bytes, and Linux (4.16 and later) reports a write-back error nobody has seen yet to
that later fsync (fsyncgate, reliability.md 1.5). So the bound holds however many
partitions are written at once.

A file in use is never closed under its user: eviction only drops the cache's
reference, and a :class:`SegmentFile` closes when its last reference goes. A
:class:`FileSlice` being sent, or a flush in progress, keeps its descriptor open until
it is done (so the count can exceed ``max_open`` by the slices in flight).
:meth:`OpenFiles.close_idle` closes files unused for ``idle_ms``
(``log.open.files.idle.ms``), so a quiet broker holds few descriptors.

Thread-safety: every method may be called from any thread. A hit takes no lock (it
reads the segment's ``open_log`` slot; a concurrent eviction only means the caller
holds the last reference); opening and evicting take one short lock, and files are
opened outside it.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections import OrderedDict
from itertools import islice
from collections.abc import Callable
from typing import Protocol

LOG_FILE = 0
INDEX_FILE = 1
EVICT_SCAN = 64


class SegmentFile(io.FileIO):
    """A raw file whose descriptor closes quietly when its last reference goes.

    Segments hand this object to readers (``FileSlice.file``); a deleted or evicted
    segment's file stays open for as long as a slice of it is alive.
    """

    def __del__(self) -> None:
        if not self.closed:
            self.close()


class CachedSegment(Protocol):
    """What the cache needs of a segment: its files, whether it must stay open, and two slots of its own.

    ``open_log`` is the segment's open ``.log`` file while the cache holds it (None
    otherwise), so a hit is one attribute read (``Segment.file``); ``log_used`` is set
    on every hit and cleared by the cache (the CLOCK algorithm's reference bit).
    """

    path: str
    open_log: SegmentFile | None
    log_used: bool

    @property
    def index_path(self) -> str: ...

    @property
    def unsynced(self) -> bool: ...


class OpenFiles:
    """At most ``max_open`` open segment files (see the module docstring).

    Eviction is CLOCK, the usual approximation of least-recently-used: files sit in
    a ring in the order they were opened; a file asked for since the hand last passed
    gets a second chance (its ``log_used`` bit is cleared and it goes to the back), an
    unsynced ``.log`` file goes to the back too, and the first other file is closed. A
    hit therefore costs one attribute write instead of a reordering.

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
        self._files: OrderedDict[tuple[CachedSegment, int], SegmentFile] = OrderedDict()  # the ring, hand at front
        self._seen: dict[tuple[CachedSegment, int], float] = {}  # when each was last known to be used
        self.opened = 0
        """Files opened since start (a cache miss each): a gauge for tests and benchmarks."""

    def __len__(self) -> int:
        return len(self._files)

    def log_file(self, segment: CachedSegment) -> SegmentFile:
        """The open ``.log`` file of ``segment`` (opened now if it is not cached).

        Raises:
            OSError: the file could not be opened (missing, permissions, out of descriptors).
        """
        found = segment.open_log
        if found is not None:
            segment.log_used = True
            return found
        return self._open(segment, LOG_FILE)

    def index_file(self, segment: CachedSegment) -> SegmentFile:
        """The open ``.index`` file of ``segment``, created empty if it does not exist.

        Raises:
            OSError: the file could not be opened or created.
        """
        found = self._files.get((segment, INDEX_FILE))
        if found is not None:
            return found
        return self._open(segment, INDEX_FILE)

    def _open(self, segment: CachedSegment, kind: int) -> SegmentFile:
        key = (segment, kind)
        if kind == LOG_FILE:
            fd = os.open(segment.path, os.O_RDWR | os.O_CLOEXEC)
        else:
            fd = os.open(segment.index_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        file = SegmentFile(fd, "r+")
        with self._lock:
            raced = self._files.get(key)
            if raced is not None:
                file.close()  # another thread opened it meanwhile: keep one descriptor
                return raced
            self._files[key] = file
            self._seen[key] = self._clock()
            if kind == LOG_FILE:
                segment.open_log, segment.log_used = file, True
            self.opened += 1
            self._evict(len(self._files) - self.max_open, key)
        return file

    def _evict(self, excess: int, keep: tuple[CachedSegment, int]) -> None:
        """Close ``excess`` files other than ``keep`` by CLOCK, synced ones first (lock held).

        The hand looks at no more than ``EVICT_SCAN`` files for one to close, so an
        eviction costs O(1) even when every file is in use or unsynced (a write flood).
        """
        checked = 0
        while excess > 0 and checked < EVICT_SCAN and self._files:
            key = next(iter(self._files))
            checked += 1
            segment, kind = key
            if key == keep or (kind == LOG_FILE and (segment.log_used or segment.unsynced)):
                if kind == LOG_FILE:
                    segment.log_used = False  # a second chance
                self._files.move_to_end(key)
                continue
            self._drop(key)
            excess -= 1
        if excess > 0:  # only recently used or unsynced files near the hand: the bound holds all the same
            for key in list(islice((k for k in self._files if k != keep), excess)):
                self._drop(key)

    def _drop(self, key: tuple[CachedSegment, int]) -> None:
        """Forget one file (lock held); it closes when its last user lets go of it."""
        if self._files.pop(key, None) is not None and key[1] == LOG_FILE:
            key[0].open_log = None
        self._seen.pop(key, None)

    def forget(self, segment: CachedSegment) -> None:
        """Drop ``segment``'s files from the cache (deleted or closed); users' references stay valid."""
        with self._lock:
            self._drop((segment, LOG_FILE))
            self._drop((segment, INDEX_FILE))

    def close_idle(self) -> int:
        """Drop files unused for ``idle_ms`` (unsynced log files are left for the flusher); return how many.

        A ``.log`` file used since the last call counts as used now (its bit is cleared).
        """
        now = self._clock()
        cutoff = now - self.idle_ms / 1000
        with self._lock:
            stale = []
            for key in self._files:
                segment, kind = key
                if kind == LOG_FILE and segment.log_used:
                    segment.log_used = False
                    self._seen[key] = now
                elif self._seen.get(key, now) < cutoff and not (kind == LOG_FILE and segment.unsynced):
                    stale.append(key)
            for key in stale:
                self._drop(key)
        return len(stale)

    def close_all(self) -> None:
        """Close every cached file now (shutdown: no reader may hold a slice any more)."""
        with self._lock:
            entries = list(self._files.items())
            self._files, self._seen = OrderedDict(), {}
        for (segment, kind), file in entries:
            if kind == LOG_FILE:
                segment.open_log = None
            file.close()


UNBOUNDED = 1 << 30
"""``max_open`` of a cache that never evicts: for a standalone log opened outside a LogManager."""
