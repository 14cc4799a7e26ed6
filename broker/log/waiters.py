"""Callbacks waiting for a log's flushed offset to reach an offset (acknowledge after fsync).

Thread-safety: every method may be called from any thread. Registration happens on
the broker's event loop and :meth:`FlushWaiters.advance` / :meth:`FlushWaiters.fail`
on the flushing thread; a short lock guards the heap and the flushed offset, and the
callbacks run outside it, on the thread that advanced or failed (or, for an offset
already flushed, at once on the registering thread). :attr:`flushed_offset` is a
plain int, so reading it needs no lock.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any

Callback = Callable[[], object]
ErrorCallback = Callable[[BaseException], object]


class FlushWaiters:
    """A heap of ``(offset, callback, on_error)`` released as the flushed offset advances."""

    def __init__(self, flushed_offset: int, logger: Any) -> None:
        self.flushed_offset = flushed_offset
        self.error: BaseException | None = None
        self._logger = logger
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, Callback, ErrorCallback | None]] = []
        self._seq = itertools.count()

    def register(self, offset: int, callback: Callback, on_error: ErrorCallback | None = None) -> None:
        """Call ``callback()`` once ``flushed_offset >= offset`` (at once if it already is);
        call ``on_error(exc)`` instead if the log fails first (or has failed)."""
        with self._lock:
            error = self.error
            if error is None and self.flushed_offset < offset:
                heapq.heappush(self._heap, (offset, next(self._seq), callback, on_error))
                return
        self._call(callback, on_error, error)

    def advance(self, flushed_offset: int) -> None:
        """Record a new flushed offset and run the callbacks it satisfies.

        Concurrent flushes may report out of order: the flushed offset only ever grows.
        """
        ready = []
        with self._lock:
            flushed_offset = max(flushed_offset, self.flushed_offset)
            self.flushed_offset = flushed_offset
            while self._heap and self._heap[0][0] <= flushed_offset:
                ready.append(heapq.heappop(self._heap))
        for _, _, callback, on_error in ready:
            self._call(callback, on_error, None)

    def fail(self, error: BaseException) -> None:
        """Record a failure and run every pending ``on_error``; later registrations fail at once."""
        with self._lock:
            self.error = error
            ready, self._heap = self._heap, []
        for _, _, callback, on_error in sorted(ready):
            self._call(callback, on_error, error)

    def _call(self, callback: Callback, on_error: ErrorCallback | None, error: BaseException | None) -> None:
        try:
            if error is None:
                callback()
            elif on_error is not None:
                on_error(error)
        except Exception:  # one bad callback must not stop the flush or the others
            self._logger.exception("log.flush_callback_failed")
