"""The background thread that flushes logs and applies retention.

It wakes every ``min(flush_interval_ms, 100)`` ms, or at once when signalled, asks
its target (the LogManager) to flush the logs that need it (M messages or S
seconds), flushes the logs someone asked to have flushed soon (produces that wait
for the fsync), lets the target do its housekeeping (the recovery-point checkpoint,
closing idle files), and every ``retention_check_interval_ms`` applies retention.

Signals: :meth:`Flusher.wake` (the LogManager hooks it to each log's ``flush_signal``,
raised when a log reaches ``flush_interval_messages``); :meth:`Flusher.flush_soon`
for logs whose waiters should not wait for M or S.

Thread-safety: :meth:`wake` and :meth:`flush_soon` may be called
from any thread (an ``Event`` and a short lock); :meth:`stop` from any thread but
the flusher itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import structlog

from rill.broker.log.log_config import Clock, LogConfig
from rill.client.errors import StorageError

_logger = structlog.get_logger(__name__)
MAX_WAKE_INTERVAL_MS = 100


class Flushable(Protocol):
    def flush(self) -> None: ...


class FlushTarget(Protocol):
    """What the flusher drives (the LogManager). ``now`` is in seconds, from the clock."""

    config: LogConfig
    clock: Clock

    def flush_due(self, now: float) -> int: ...

    def run_retention(self, now: float) -> int: ...

    def housekeeping(self, now: float) -> None: ...


class Flusher(threading.Thread):
    """A daemon thread calling ``target.flush_due`` and ``target.run_retention`` on schedule.

    ``config`` and ``clock`` default to the target's; ``wake_interval_ms`` to
    ``min(flush_interval_ms, 100)`` (tests raise it so that only signals wake the thread).
    """

    def __init__(self, target: FlushTarget, config: LogConfig | None = None, clock: Clock | None = None,
                 wake_interval_ms: int | None = None) -> None:
        super().__init__(name="rill-log-flusher", daemon=True)
        self._target = target
        self._config = config if config is not None else target.config
        self._clock = clock if clock is not None else getattr(target, "clock", time)
        if wake_interval_ms is None:
            wake_interval_ms = min(self._config.flush_interval_ms, MAX_WAKE_INTERVAL_MS)
        self._period = wake_interval_ms / 1000
        self._retention_interval = self._config.retention_check_interval_ms / 1000
        self._signal = threading.Event()
        self._lock = threading.Lock()
        self._urgent: dict[int, Flushable] = {}
        self._stopping = False

    def wake(self) -> None:
        """Ask for a flush pass now."""
        self._signal.set()

    def flush_soon(self, logs: Iterable[Flushable]) -> None:
        """Flush ``logs`` on the next pass even if neither M nor S is reached."""
        with self._lock:
            for log in logs:
                self._urgent[id(log)] = log
        self._signal.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the current pass and wait for the thread to end."""
        self._stopping = True
        self._signal.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        next_retention = self._clock.time() + self._retention_interval
        while True:
            self._signal.wait(self._period)
            self._signal.clear()
            if self._stopping:
                return
            now = self._clock.time()
            self._guarded(self._flush_urgent, now)
            self._guarded(self._target.flush_due, now)
            self._guarded(self._target.housekeeping, now)
            if now >= next_retention:
                self._guarded(self._target.run_retention, now)
                next_retention = now + self._retention_interval

    def _flush_urgent(self, now: float) -> None:
        with self._lock:
            urgent, self._urgent = self._urgent, {}
        for log in urgent.values():
            try:
                log.flush()
            except StorageError as exc:  # the log is now failed; its waiters got the error
                _logger.error("log.flush_failed", error=str(exc))

    def _guarded(self, step: Callable[[float], object], now: float) -> None:
        try:
            step(now)
        except Exception:  # keep the thread alive: one failed log must not stop the others
            _logger.exception("flusher.task_failed", task=getattr(step, "__name__", str(step)))
