"""The broker-wide budget for request bytes being received (Kafka's ``queued.max.request.bytes``).

A request larger than 64 KiB (``DIRECT_BODY_BYTES``) gets a buffer of its own, and
reserves its size here when its size field arrives, before that buffer is allocated.
When the budget is spent the connection stops reading (the kernel's socket buffer
fills and TCP pushes back on the client) until enough is given back. Waiting
connections are served first come, first served: once one waits, later reservations
queue behind it, so a large request is never starved by a stream of smaller ones.
Small requests never reserve: a client sending ordinary requests is not slowed by
others' large ones.

Thread-safety: none; everything runs on the broker's event-loop thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

Waiter = TypeVar("Waiter")


class RequestMemory(Generic[Waiter]):
    """At most ``limit`` bytes reserved at once; ``wake(waiter)`` when a waiter's turn comes.

    ``wake`` must not call back into this object at once (the server schedules it).
    """

    def __init__(self, limit: int, wake: Callable[[Waiter], object]) -> None:
        self.limit = limit
        self.used = 0
        self._wake = wake
        self._waiting: deque[tuple[Waiter, int]] = deque()
        self.peak = 0
        """The most bytes ever reserved at once (for tests and benchmarks)."""

    def try_reserve(self, waiter: Waiter, size: int) -> bool:
        """Reserve ``size`` bytes for ``waiter`` now, or queue it (False) to be woken when it may retry."""
        queued = any(w is waiter for w, _ in self._waiting)
        first = bool(self._waiting) and self._waiting[0][0] is waiter
        if (not self._waiting or first) and self.used + size <= self.limit:
            self.used += size
            self.peak = max(self.peak, self.used)
            if first:
                self._waiting.popleft()
                self._wake_first()  # the next one may fit too
            return True
        if not queued:
            self._waiting.append((waiter, size))
        return False

    def release(self, size: int) -> None:
        """Give ``size`` bytes back; wake the first waiter if its request fits now."""
        if size <= 0:
            return
        self.used -= size
        self._wake_first()

    def forget(self, waiter: Waiter) -> None:
        """``waiter`` no longer waits (its connection closed)."""
        was_first = bool(self._waiting) and self._waiting[0][0] is waiter
        self._waiting = deque((w, s) for w, s in self._waiting if w is not waiter)
        if was_first:
            self._wake_first()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _wake_first(self) -> None:
        if self._waiting and self.used + self._waiting[0][1] <= self.limit:
            self._wake(self._waiting[0][0])
