"""Callbacks due at deadlines, kept in a heap: the timers of a single-threaded loop.

Shared by the broker's event loop (delayed fetches and produces, idle sweeps) and any
client loop that wants callbacks rather than computing its own deadlines. Cancelling
a timer marks it; it leaves the heap when it reaches the top.

Not thread-safe: the loop's thread only.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable

__all__ = ["Timer", "TimerHeap"]


class Timer:
    __slots__ = ("deadline", "callback", "cancelled")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class TimerHeap:
    """``call_later`` timers on the monotonic clock (or ``clock``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.clock() + delay, callback)
        heapq.heappush(self._heap, (timer.deadline, next(self._seq), timer))
        return timer

    def next_deadline(self) -> float | None:
        """When the earliest live timer is due, or None."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self) -> list[Timer]:
        """Remove and return the live timers due now, earliest first."""
        now = self.clock()
        heap, due = self._heap, []
        while heap and heap[0][0] <= now:
            timer = heapq.heappop(heap)[2]
            if not timer.cancelled:
                due.append(timer)
        return due
