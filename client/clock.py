"""Injected time, shared by the coordinator, the log storage and the clients: a clock to read and a timer.

``Clock.time()`` returns seconds (wall-clock seconds since the epoch for
:class:`SystemClock`; the coordinator only subtracts and compares them, and shows
them as a member's last heartbeat). The producer and consumer take a plain
``Callable[[], float]`` (``time.monotonic``); :class:`FakeClock` is one too. ``Timer.schedule(delay_s, callback)`` runs
``callback()`` once, about ``delay_s`` seconds later, unless the returned handle's
``cancel()`` is called first.

Two implementations:

- :class:`ThreadTimer`: one daemon thread for every timer, a heap of due times
  and a condition variable (never a thread per timer). Callbacks run on that
  thread, one at a time; an exception in one is logged and the thread goes on.
  ``schedule`` and ``cancel`` are safe from any thread. Delays are measured on
  ``time.monotonic``, so a wall-clock jump neither fires nor delays timers.
- :class:`FakeClock` and :class:`FakeTimer` for tests (Kafka's MockTime and
  MockTimer), the only test clock of the project: time stands still until ``advance(seconds)``, which moves it forward
  and runs, synchronously and in due order, every callback that falls due on the
  way (including those scheduled by callbacks). No threads, no sleeping: a session
  timeout is one ``advance`` call. A callback's exception propagates out of
  ``advance``. Not thread-safe; drive them from one thread.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol

import structlog

_logger = structlog.get_logger(__name__)

Callback = Callable[[], object]  # the return value is ignored


class Clock(Protocol):
    """Where the coordinator and the log storage read the time, in seconds."""

    def time(self) -> float: ...


class TimerHandle(Protocol):
    """A scheduled callback; ``cancel()`` is idempotent and harmless after it ran."""

    def cancel(self) -> None: ...


class Timer(Protocol):
    """Runs a callback once after a delay, in seconds."""

    def schedule(self, delay_s: float, callback: Callback) -> TimerHandle: ...


class SystemClock:
    """The real clock: ``time.time()``."""

    def time(self) -> float:
        return time.time()


class _Entry:
    """One scheduled callback: ordered by due time, then by scheduling order."""

    __slots__ = ("due", "seq", "callback", "cancelled")

    def __init__(self, due: float, seq: int, callback: Callback) -> None:
        self.due = due
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def __lt__(self, other: _Entry) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)

    def cancel(self) -> None:
        self.cancelled = True


def _run(entry: _Entry) -> None:
    try:
        entry.callback()
    except Exception:  # a failing callback must not stop the other timers
        _logger.exception("timer.callback_failed", callback=repr(entry.callback))


MAX_WAIT_S = 3600.0
"""The longest single wait of a ThreadTimer (it waits again if nothing is due yet)."""


class ThreadTimer:
    """A :class:`Timer` served by one daemon thread (started on construction).

    ``clock`` is the clock that goes with it (the coordinator reads time from it);
    :class:`SystemClock` by default. ``stop()`` ends the thread; callbacks still
    pending are dropped, and a ``schedule`` after ``stop`` is ignored.
    """

    def __init__(self, clock: Clock | None = None, name: str = "rill-coordinator-timer") -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_s: float, callback: Callback) -> TimerHandle:
        entry = _Entry(time.monotonic() + max(0.0, delay_s), next(self._seq), callback)
        with self._cond:
            if self._stopped:
                entry.cancelled = True
                return entry
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify()
        return entry

    def pending(self) -> int:
        """How many callbacks are scheduled and not cancelled."""
        with self._cond:
            return sum(1 for e in self._heap if not e.cancelled)

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _next_due(self) -> _Entry | None:
        """Wait (holding the condition) until an entry is due; None once stopped."""
        while not self._stopped:
            while self._heap and self._heap[0].cancelled:
                heapq.heappop(self._heap)
            if not self._heap:
                self._cond.wait()
                continue
            wait = self._heap[0].due - time.monotonic()
            if wait <= 0:
                return heapq.heappop(self._heap)
            self._cond.wait(min(wait, MAX_WAIT_S))  # a far deadline (an old, huge timeout) must not overflow
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                entry = self._next_due()
            if entry is None:
                return
            if not entry.cancelled:
                _run(entry)


class FakeClock:
    """A test clock: ``time()`` (or calling it) moves only through :meth:`advance` (or by setting ``now``).

    ``advance`` also runs the due callbacks of every :class:`FakeTimer` built on
    this clock, each at its own due time (``now`` is set to it before the call).
    """

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now
        self._timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def __call__(self) -> float:
        """The same as :meth:`time`: a FakeClock also stands in for ``time.monotonic``."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, running callbacks that fall due on the way."""
        target = self.now + max(0.0, seconds)
        while True:
            dues = [d for d in (t.next_due() for t in self._timers) if d is not None and d <= target]
            if not dues:
                break
            self.now = max(self.now, min(dues))
            for timer in self._timers:
                timer.run_due(self.now)
        self.now = target

    def _attach(self, timer: FakeTimer) -> None:
        self._timers.append(timer)


class FakeTimer:
    """A test :class:`Timer` on a :class:`FakeClock`: callbacks run inside ``advance``."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock if clock is not None else FakeClock()
        self.clock._attach(self)
        self._heap: list[_Entry] = []
        self._seq = itertools.count()

    def schedule(self, delay_s: float, callback: Callback) -> TimerHandle:
        entry = _Entry(self.clock.now + max(0.0, delay_s), next(self._seq), callback)
        heapq.heappush(self._heap, entry)
        return entry

    def advance(self, seconds: float) -> None:
        """Same as ``self.clock.advance(seconds)``."""
        self.clock.advance(seconds)

    def pending(self) -> int:
        """How many callbacks are scheduled and not cancelled."""
        return sum(1 for e in self._heap if not e.cancelled)

    def next_due(self) -> float | None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].due if self._heap else None

    def run_due(self, now: float) -> None:
        """Run, in order, every callback due at or before ``now`` (also ones they schedule)."""
        while True:
            due = self.next_due()
            if due is None or due > now:
                return
            heapq.heappop(self._heap).callback()  # a failing callback fails the test
