"""Reads addressed by cluster-wide partition, each sent to the partition's current leader.

Only a partition's leader serves its reads: another replica of a replicated topic
answers NotLeaderForPartition, and a leader that stops closes its connections.
:class:`LeaderReads` keeps each partition's leader as METADATA gives it (asked of any
known broker, then the bootstrap addresses), sends each request there and, when the
answer says the leader moved (a retriable broker error: NotLeaderForPartition,
OffsetNotAvailable, ...) or the broker cannot be reached, asks METADATA again and
retries on the leader it names. Pauses between attempts grow from 0.05 s to 1 s; after
``wait_s`` (30 s by default, longer than a leader election takes) the last error is
raised. Other errors (OffsetOutOfRange, InvalidOffset, ...) are raised at once, and so
is AuthenticationFailed (a TLS handshake or SASL login refused): asking again with the
same security settings fails the same way. Every connection, to the leaders and for
METADATA, carries the reader's ``security`` (TLS and SASL; None for PLAINTEXT).

Byte offsets are the same on every replica (a follower copies its leader's bytes), so a
read goes on at the new leader from the same offset. A 0.7-style topic's partition lives
on one broker (METADATA names its number there); while that broker is down, requests
wait in the same way, then fail.

Not thread-safe: one per planning call or per Spark task. ``close()`` closes every connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from rill.client.cluster_metadata import ClusterMetadata
from rill.client.errors import AuthenticationFailed, BrokerError, ConnectionClosed, NotLeaderForPartition
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import Message
from rill.client.security.client_security import ClientSecurity
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT, DEFAULT_MAX_FETCH_SIZE, SimpleConsumer
from rill.client.structs import Address, TopicPartition

__all__ = ["DEFAULT_WAIT_S", "Leader", "LeaderReads"]

log = structlog.get_logger(__name__)

T = TypeVar("T")
DEFAULT_WAIT_S = 30.0
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 1.0


@dataclass(frozen=True, slots=True)
class Leader:
    """Where a partition is read: its leader's address, and the partition's number there
    (in a cluster each broker numbers its 0.7-style partitions from 0; a replicated
    partition has the same number on every replica)."""

    host: str
    port: int
    partition: int


class LeaderReads:
    """SimpleConsumer reads by cluster-wide partition that follow each partition's leader (see the module doc)."""

    def __init__(self, bootstrap: Sequence[Address], *, timeout: float = 30.0, wait_s: float = DEFAULT_WAIT_S,
                 max_fetch_size: int = DEFAULT_MAX_FETCH_SIZE,
                 fetch_size_limit: int = DEFAULT_FETCH_SIZE_LIMIT, security: ClientSecurity | None = None) -> None:
        self._metadata = ClusterMetadata(bootstrap, timeout, security)
        self._security = security
        self._timeout = timeout
        self._wait_s = wait_s
        self._fetch_sizes = (max_fetch_size, max(fetch_size_limit, max_fetch_size))
        self._leaders: dict[TopicPartition, Leader] = {}
        self._clients: dict[Address, SimpleConsumer] = {}

    # ---------------------------------------------------------------- leaders

    def metadata(self, topics: Iterable[str] = ()) -> rq.Metadata:
        """METADATA of ``topics`` (every topic when empty) from any reachable broker; learns their leaders.

        Raises:
            ConnectionClosed: no known broker nor bootstrap address answered (AuthenticationFailed:
                every one refused this client's TLS or SASL).
        """
        names = sorted(set(topics))
        meta = self._metadata.refresh(names)
        brokers = {b.broker_id: b for b in meta.brokers}
        for t in meta.topics:
            if t.error:
                continue
            for p, broker_id in enumerate(t.leaders):
                broker = brokers.get(broker_id)
                if broker is None:  # no leader now (NO_LEADER, or a broker that is not alive)
                    self._leaders.pop(TopicPartition(t.topic, p), None)
                else:
                    self._leaders[TopicPartition(t.topic, p)] = Leader(broker.host, broker.port, t.broker_partition(p))
        return meta

    def assume(self, tp: TopicPartition, leader: Leader) -> None:
        """Start with ``leader`` for ``tp`` (the planner's view) unless one is known: no METADATA until it moves."""
        self._leaders.setdefault(tp, leader)

    def leader(self, tp: TopicPartition) -> Leader | None:
        """The leader of ``tp`` as last learned; None when unknown or without a leader."""
        return self._leaders.get(tp)

    # ---------------------------------------------------------------- reads

    def fetch(self, topic: str, partition: int, offset: int, max_size: int | None = None) -> list[Message]:
        """:meth:`SimpleConsumer.fetch` on the leader (empty at the end of what the leader has committed)."""
        return self.call(TopicPartition(topic, partition), lambda c, n: c.fetch(topic, n, offset, max_size))

    def time_index(self, topic: str, partition: int, offset: int, max_entries: int = 8192) -> list[tuple[int, int]]:
        """:meth:`SimpleConsumer.time_index` on the leader."""
        return self.call(TopicPartition(topic, partition), lambda c, n: c.time_index(topic, n, offset, max_entries))

    def offsets_before(self, topic: str, partition: int, time_ms: int, max_number: int) -> list[int]:
        """:meth:`SimpleConsumer.offsets_before` on the leader."""
        return self.call(TopicPartition(topic, partition),
                         lambda c, n: c.offsets_before(topic, n, time_ms, max_number))

    def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start, end) of ``tp`` on its leader; the end is the high watermark of a replicated partition."""
        return self.call(tp, lambda c, n: (c.earliest_offset(tp[0], n), c.latest_offset(tp[0], n)))

    def call(self, tp: TopicPartition, request: Callable[[SimpleConsumer, int], T]) -> T:
        """``request(client, number)`` on the leader of ``tp``, retried on the new leader when it moves.

        Raises:
            BrokerError: a non-retriable answer, at once; a retriable one after ``wait_s``.
            AuthenticationFailed: the leader refused this client's TLS or SASL, at once.
            ConnectionClosed: no leader could be reached within ``wait_s``.
        """
        deadline = time.monotonic() + self._wait_s
        pause = FIRST_PAUSE_S
        while True:
            leader = self._leaders.get(tp)
            try:
                if leader is None:
                    raise NotLeaderForPartition(f"{tp[0]}-{tp[1]} has no leader that is alive")
                return request(self._client(leader), leader.partition)
            except (BrokerError, ConnectionClosed) as exc:
                remaining = deadline - time.monotonic()
                final = isinstance(exc, AuthenticationFailed) or (isinstance(exc, BrokerError) and not exc.retriable)
                if final or remaining <= 0:
                    raise
                log.info("spark.leader_retry", topic=tp[0], partition=tp[1], error=str(exc), retry_in_s=pause,
                         leader=None if leader is None else f"{leader.host}:{leader.port}")
                if leader is not None and isinstance(exc, ConnectionClosed):
                    self._drop((leader.host, leader.port))
            time.sleep(min(pause, remaining))
            pause = min(2 * pause, MAX_PAUSE_S)
            self._relearn(tp)

    def _relearn(self, tp: TopicPartition) -> None:
        """Ask where ``tp`` is led now; while no broker answers, the last known leader is tried again."""
        try:
            self.metadata([tp[0]])
        except ConnectionClosed as exc:
            log.info("spark.metadata_unavailable", topic=tp[0], error=str(exc))

    # ---------------------------------------------------------------- connections

    def _client(self, leader: Leader) -> SimpleConsumer:
        key = (leader.host, leader.port)
        client = self._clients.get(key)
        if client is None:
            size, limit = self._fetch_sizes
            client = self._clients[key] = SimpleConsumer(leader.host, leader.port, max_fetch_size=size,
                                                         fetch_size_limit=limit, timeout=self._timeout,
                                                         security=self._security)
        return client

    def _drop(self, address: Address) -> None:
        client = self._clients.pop(address, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def __enter__(self) -> LeaderReads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
