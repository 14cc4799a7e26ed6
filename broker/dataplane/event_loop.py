"""The broker's event loop: one thread, one selector, timers and calls from other threads.

:class:`EventLoop` is the loop under :class:`~rill.broker.dataplane.server.BrokerServer`.
It owns the selector, a :class:`~rill.client.net.timer_heap.TimerHeap` (long-poll
deadlines, acknowledgement timeouts, the listener's back-off) and a
:class:`~rill.client.net.wakeup.Wakeup` that other threads ring after posting a
callback (the flusher's fsync completions, topic creation's worker). Both are the
client's own pieces: the producer's send thread and the consumer's ``poll()`` wait the
same way. A callback that raises is logged and the loop goes on: one bug must not stop
the loop that serves everyone.

:meth:`EventLoop.submit` posts work whose caller waits for its outcome (the
controller's LeaderAndIsr, replica_manager.py). A stopped loop runs nothing more, so
such work fails with :class:`LoopStopped` instead: at once when submitted after
:meth:`EventLoop.stop`, and at :meth:`EventLoop.close` when it was accepted but the
loop's last turn did not run it. Its caller never waits out a timeout for a loop that
is gone (a stopping broker held its exit 30 s that way).

Thread-safety: only :meth:`EventLoop.call_soon_threadsafe`, :meth:`EventLoop.submit`
and :meth:`EventLoop.stop` may be called from other threads (``stop`` from a signal
handler too: it takes no lock); everything else runs on the loop thread.
"""

from __future__ import annotations

import resource
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import structlog

from rill.client.net.timer_heap import Timer, TimerHeap
from rill.client.net.wakeup import Wakeup

__all__ = ["EventLoop", "LoopStopped", "Timer", "raise_fd_limit"]

log = structlog.get_logger(__name__)
T = TypeVar("T")


class LoopStopped(RuntimeError):
    """The event loop has stopped (the broker is stopping): the work submitted was not run and never will be."""


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
        self._submitted_lock = threading.Lock()  # never taken by stop(): a signal handler may call it
        self._submitted: set[Future[Any]] = set()  # accepted by submit, not yet run

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the loop after ``delay`` seconds (cancel with the returned timer)."""
        return self._timers.call_later(delay, callback)

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop soon. Any thread; never raises."""
        self._calls.append(callback)
        self._wakeup.ring()

    def submit(self, work: Callable[[], T]) -> Future[T]:
        """Run ``work`` on the loop soon; the future gets its return value or the exception it raised. Any thread.

        Returns at once. After :meth:`stop` the future has already failed with
        :class:`LoopStopped` (the work never runs); work accepted before that either runs
        in the loop's last turn or fails with :class:`LoopStopped` at :meth:`close`.
        """
        future: Future[T] = Future()
        with self._submitted_lock:
            if self._stopping:
                future.set_exception(LoopStopped("the event loop has stopped: the broker is stopping"))
                return future
            self._submitted.add(future)

        def run() -> None:
            with self._submitted_lock:
                self._submitted.discard(future)
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(work())
            except BaseException as exc:  # the caller waiting on the future gets it, whatever it is
                future.set_exception(exc)

        self.call_soon_threadsafe(run)
        return future

    def stop(self) -> None:
        """End the loop after its current turn; from now on :meth:`submit` fails at once. Any thread, or a signal
        handler."""
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
        """Release the selector and the wake-up; work submitted but not run fails with :class:`LoopStopped`."""
        with self._submitted_lock:
            self._stopping = True
            left, self._submitted = self._submitted, set()
        for future in left:
            if future.set_running_or_notify_cancel():
                future.set_exception(LoopStopped("the event loop stopped before running it: the broker is stopping"))
        self.selector.close()
        self._wakeup.close()
