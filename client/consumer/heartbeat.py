"""The heartbeat timer of a group member (kafka-python's ``Heartbeat``): timestamps, no I/O.

It answers two questions for the coordinator client's loop: is a heartbeat due, and
has the coordinator surely expired this member's session? Times are seconds on the
consumer's monotonic clock, passed in by the caller, so tests need no threads or sleeps.

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations


class Heartbeat:
    """When the next heartbeat is due and whether the session has surely expired (seconds, monotonic).

    ``last_ack`` is when the last successful heartbeat (or the register answer) was
    *received*: the coordinator saw it no later than that, so ``now > last_ack +
    session_timeout`` means its session timer has fired.
    """

    def __init__(self, interval: float, session_timeout: float, now: float) -> None:
        self.interval = interval
        self.session_timeout = session_timeout
        self.last_send = now
        self.last_ack = now

    def reset(self, now: float, session_timeout: float | None = None) -> None:
        """A registration completed (it counts as a heartbeat)."""
        if session_timeout is not None:
            self.session_timeout = session_timeout
        self.last_send = self.last_ack = now

    def sent(self, now: float) -> None:
        self.last_send = now

    def received(self, now: float) -> None:
        self.last_ack = now

    def due(self, now: float) -> bool:
        return now >= self.last_send + self.interval

    def next_due(self) -> float:
        return self.last_send + self.interval

    def session_deadline(self) -> float:
        return self.last_ack + self.session_timeout

    def session_expired(self, now: float) -> bool:
        return now > self.session_deadline()
