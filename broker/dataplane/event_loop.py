"""The broker's event loop: one thread, one selector, timers and calls from other threads.

:class:`EventLoop` is the loop under :class:`~rill.broker.dataplane.server.BrokerServer`.
It owns the selector, a :class:`~rill.client.net.timer_heap.TimerHeap` (long-poll
deadlines, acknowledgement timeouts, the listener's back-off) and a
:class:`~rill.client.net.wakeup.Wakeup` that other threads ring after posting a
callback (the flusher's fsync completions, topic creation's worker). Both are the
client's own pieces: the producer's send thread and the consumer's ``poll()`` wait the
same way. A callback that raises is logged and the loop goes on: one bug must not stop
the loop that serves everyone.

Thread-safety: only :meth:`EventLoop.call_soon_threadsafe` and :meth:`EventLoop.stop`
may be called from other threads; everything else runs on the loop thread.
"""

from __future__ import annotations

import resource
import selectors
import time
from collections import deque
from collections.abc import Callable

import structlog

from rill.client.net.timer_heap import Timer, TimerHeap
from rill.client.net.wakeup import Wakeup

__all__ = ["EventLoop", "Timer", "raise_fd_limit"]

log = structlog.get_logger(__name__)


def raise_fd_limit() -> int:
    """Raise the soft open-files limit to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            return soft
    return soft


class EventLoop:
    """Selector loop with timers and a thread-safe call queue.

    The wake-up's read end is registered with ``data=None``; a subclass that registers
    other sockets with ``data=None`` (a listener) tells them apart by ``key.fileobj``
    and calls :meth:`_drain_wakeups` for the wake-up.
    """

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._timers = TimerHeap()
        self._calls: deque[Callable[[], None]] = deque()
        self._wakeup = Wakeup()
        self._wakeup.register(self.selector)
        self._stopping = False

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the loop after ``delay`` seconds (cancel with the returned timer)."""
        return self._timers.call_later(delay, callback)

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop soon. Any thread; never raises."""
        self._calls.append(callback)
        self._wakeup.ring()

    def stop(self) -> None:
        self._stopping = True
        self.call_soon_threadsafe(lambda: None)

    def _next_timeout(self, cap: float) -> float:
        if self._calls:
            return 0.0
        deadline = self._timers.next_deadline()
        if deadline is None:
            return cap
        return max(0.0, min(cap, deadline - time.monotonic()))

    def _run_due(self) -> None:
        while self._calls:
            self._guarded(self._calls.popleft())
        for timer in self._timers.pop_due():
            self._guarded(timer.callback)

    @staticmethod
    def _guarded(callback: Callable[[], None]) -> None:
        """Run a callback; a bug in one must not stop the loop that serves everyone."""
        try:
            callback()
        except Exception:
            log.exception("loop.callback_failed", callback=getattr(callback, "__qualname__", repr(callback)))

    def _drain_wakeups(self) -> None:
        self._wakeup.drain()

    def close(self) -> None:
        self.selector.close()
        self._wakeup.close()
