"""A log event that a hostile client could cause thousands of times a second, written at most once per interval.

Refused connections, failing ``accept()`` calls and the like are logged the first
time, then held back for ``interval`` seconds; the next one that is written says how
many were held back (``suppressed``). The log stays readable and small (a failing
``accept()`` once wrote 563,216 identical lines in a minute).

Thread-safety: none; used from the broker's event-loop thread.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class ThrottledLog:
    """Logs an event at most once per ``interval`` seconds, with how many were held back.

    For events a hostile client can cause thousands of times a second (refused
    connections, failing accepts): the log stays readable and small.
    """

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, event: str, **fields: Any) -> None:
        now = time.monotonic()
        last = self._last.get(event)
        if last is not None and now - last < self.interval:
            self._held[event] = self._held.get(event, 0) + 1
            return
        self._last[event] = now
        log.warning(event, **fields, suppressed=self._held.pop(event, 0), interval_s=self.interval)
