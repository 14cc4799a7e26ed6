"""PendingJoin: a RegisterConsumer waiting for its rebalance (a tiny future).

The coordinator completes it once, with the member's RegisterConsumerResponse
(partitions, offsets, generation) or with an error code (REBALANCE_TIMEOUT,
UNKNOWN_MEMBER, STORAGE_ERROR, ...). Later completions are ignored.

Thread-safety: ``complete`` is called by the coordinator (under its lock);
``wait``, ``done`` and ``add_done_callback`` may be called from any thread. A
callback runs on the completing thread, possibly under the coordinator's lock:
keep it short and do not block in it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from rill.v1 import coordinator_pb2 as pb

_logger = structlog.get_logger(__name__)

DoneCallback = Callable[[pb.RegisterConsumerResponse], None]


class PendingJoin:
    """The answer to one RegisterConsumer, available when the rebalance completes."""

    __slots__ = ("_event", "_lock", "_response", "_callbacks")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._response: pb.RegisterConsumerResponse | None = None
        self._callbacks: list[DoneCallback] = []

    @classmethod
    def completed(cls, response: pb.RegisterConsumerResponse) -> PendingJoin:
        """A PendingJoin that is already done (an immediate answer or an error)."""
        join = cls()
        join.complete(response)
        return join

    def complete(self, response: pb.RegisterConsumerResponse) -> bool:
        """Set the answer; returns False (and changes nothing) if it was already set."""
        with self._lock:
            if self._response is not None:
                return False
            self._response = response
            callbacks, self._callbacks = self._callbacks, []
        self._event.set()
        for callback in callbacks:
            self._run(callback, response)
        return True

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> pb.RegisterConsumerResponse | None:
        """The response, waiting up to ``timeout`` seconds (None: forever); None if not done by then."""
        self._event.wait(timeout)
        return self._response

    def response(self) -> pb.RegisterConsumerResponse | None:
        """The response if done, else None (never waits)."""
        return self._response

    def add_done_callback(self, callback: DoneCallback) -> None:
        """Call ``callback(response)`` when done (at once, on this thread, if already done)."""
        with self._lock:
            if self._response is None:
                self._callbacks.append(callback)
                return
            response = self._response
        self._run(callback, response)

    @staticmethod
    def _run(callback: DoneCallback, response: pb.RegisterConsumerResponse) -> None:
        try:
            callback(response)
        except Exception:
            _logger.exception("pending_join.callback_failed")
