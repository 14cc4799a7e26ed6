"""Client quotas on the data plane: count what each connection uses, and mute the ones over quota.

Kafka's way (KIP-219): a request over quota is served in full and answered at once,
then its connection is **muted**, not read, for the delay that brings its quota group
back under its quota. A Kafka 0.7 response has no throttle-time field, so the mute is
the whole mechanism; it also holds back clients that would ignore such a field. Other
connections are not slowed: a muted connection costs the event loop nothing.

What is counted (rill.broker.security.quota_manager does the arithmetic):

- ``producer_byte_rate``: the bytes of each PRODUCE, MULTIPRODUCE and PRODUCE_ACK request;
- ``consumer_byte_rate``: the message bytes of fetch responses, counted as they are
  queued for sending (so a long poll counts when it is answered);
- ``request_percentage``: the event loop's time spent handling each request.

The quota group is the connection's principal's user name (``ANONYMOUS`` when it did not
authenticate) and the client id it named with CLIENT_HELLO (rill's clients send their
``client.id``; a Kafka 0.7 client names none and is the ``<default>`` client id).
Brokers' own connections (replica fetches) are never counted, as replication is not
a client in Kafka either.

Runs on the event-loop thread. When no quota is configured anywhere, a request costs
one attribute check (:attr:`ConnectionQuotas.active`).
"""

from __future__ import annotations

import time

from rill.broker.dataplane.server_connection import Connection
from rill.broker.security.quota_manager import QuotaManager
from rill.client.protocol.requests import RequestType
from rill.client.security.principal import name_of

__all__ = ["ConnectionQuotas"]

PRODUCE_TYPES = frozenset({RequestType.PRODUCE, RequestType.MULTIPRODUCE, RequestType.PRODUCE_ACK})


class ConnectionQuotas:
    """Records usage per request and mutes connections (see the module docstring).

    ``loop`` is the broker's event loop (``call_later`` and ``mark_dirty``).
    """

    def __init__(self, manager: QuotaManager, loop: object) -> None:
        self.manager = manager
        self.loop = loop
        self.throttle_seconds = {"produce": 0.0, "fetch": 0.0, "request": 0.0}
        """Seconds of mute imposed for each kind of quota (rill_quota_throttle_seconds_total)."""

    @property
    def active(self) -> bool:
        """Whether any quota is configured (else nothing is measured)."""
        return self.manager.configured

    def after_request(self, conn: Connection, kind: int, nbytes: int, seconds: float) -> None:
        """``conn`` sent a request of ``kind`` and ``nbytes`` that took ``seconds`` to handle."""
        if conn.replica:
            return
        now = time.monotonic()
        user, client_id = name_of(conn.principal), conn.client_id
        delay = self.manager.record_request_time(user, client_id, seconds, now)
        if delay > 0.0:
            self.throttle_seconds["request"] += delay
        if kind in PRODUCE_TYPES:
            produce_delay = self.manager.record_produce(user, client_id, nbytes, now)
            if produce_delay > 0.0:
                self.throttle_seconds["produce"] += produce_delay
                delay = max(delay, produce_delay)
        self._mute(conn, delay, now)

    def fetched(self, conn: Connection, nbytes: int) -> None:
        """``nbytes`` of messages were queued for sending to ``conn`` (fetch responses)."""
        if conn.replica or not self.manager.configured:
            return
        now = time.monotonic()
        delay = self.manager.record_fetch(name_of(conn.principal), conn.client_id, nbytes, now)
        if delay > 0.0:
            self.throttle_seconds["fetch"] += delay
        self._mute(conn, delay, now)

    def _mute(self, conn: Connection, delay: float, now: float) -> None:
        if delay <= 0.0:
            return
        until = now + delay
        if conn.muted_until >= until:
            return
        conn.muted_until = until
        self.loop.call_later(delay, lambda: self._unmute(conn, until))  # type: ignore[attr-defined]

    def _unmute(self, conn: Connection, until: float) -> None:
        if conn.muted_until == until:  # not muted longer since
            conn.muted_until = 0.0
            self.loop.mark_dirty(conn)  # type: ignore[attr-defined]
