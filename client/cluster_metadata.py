"""What a client knows of the cluster: brokers, partition counts and leaders.

Learned from any broker with rill's METADATA request (docs/protocol.md), starting
from the ``bootstrap.servers`` and then from any broker already known. Blocking:
call it from the thread that owns it (the producer's send thread, the consumer's
poll loop). Not thread-safe.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import structlog

from rill.client.errors import AuthenticationFailed, ConnectionClosed, ErrorCode, RillError, TopicAuthorizationFailed
from rill.client.protocol import requests as rq
from rill.client.security.client_security import ClientSecurity
from rill.client.simple import SimpleConsumer

log = structlog.get_logger(__name__)


class ClusterMetadata:
    """Brokers by id and topics by name, refreshed on demand."""

    def __init__(self, bootstrap: Sequence[tuple[str, int]], timeout: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = list(bootstrap)
        self.timeout = timeout
        self.security = security
        self.brokers: dict[int, rq.BrokerInfo] = {}
        self.topics: dict[str, rq.TopicMetadata] = {}
        self.refused: dict[str, int] = {}  # topics the brokers' ACLs refuse this client, with the error

    def addresses(self) -> list[tuple[str, int]]:
        """Addresses to try: the known brokers (shuffled), then the bootstrap addresses not among them."""
        known = [(b.host, b.port) for b in self.brokers.values()]
        random.shuffle(known)
        return known + [a for a in self.bootstrap if a not in known]

    def refresh(self, topics: Iterable[str] = ()) -> rq.Metadata:
        """Ask one reachable broker; raises ConnectionClosed when none answers.

        With ``topics`` only those are asked for (and merged in); otherwise every topic.
        """
        names = sorted(set(topics))
        errors: list[str] = []
        refusals: list[AuthenticationFailed] = []
        for host, port in self.addresses():
            try:
                with SimpleConsumer(host, port, timeout=self.timeout, security=self.security) as client:
                    meta = client.metadata(names)
            except AuthenticationFailed as exc:
                refusals.append(exc)
                errors.append(f"{host}:{port}: {exc}")
                continue
            except RillError as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            self._merge(meta, names)
            return meta
        if refusals and len(refusals) == len(errors):
            raise refusals[0]  # every broker refused this client's TLS or SASL: say that, as it is
        raise ConnectionClosed("no broker answered a metadata request: " + "; ".join(errors))

    def _merge(self, meta: rq.Metadata, names: Sequence[str]) -> None:
        if meta.brokers:
            self.brokers = {b.broker_id: b for b in meta.brokers}
        if not names:
            self.topics = {}
        for t in meta.topics:
            if t.error == 0:
                self.topics[t.topic] = t
                self.refused.pop(t.topic, None)
            else:
                self.topics.pop(t.topic, None)
                if t.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    self.refused[t.topic] = t.error
                else:
                    self.refused.pop(t.topic, None)

    def partitions(self, topic: str) -> int | None:
        """Partition count, or None when the topic is not known (yet).

        Raises:
            TopicAuthorizationFailed: the brokers' ACLs refuse this client the topic (Describe).
        """
        t = self.topics.get(topic)
        if t is None and topic in self.refused:
            raise TopicAuthorizationFailed(f"not authorized to access topic {topic!r} (ACLs: Describe)")
        return t.partitions if t is not None else None

    def leader(self, topic: str, partition: int) -> rq.BrokerInfo | None:
        """The broker holding the partition; None when unknown or not alive."""
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < t.partitions:
            return None
        return self.brokers.get(t.leaders[partition])

    def broker_partition(self, topic: str, partition: int) -> int:
        """The partition's number on its broker, which requests to that broker carry.

        In a cluster each broker numbers its own partitions of a topic from 0 (Kafka 0.7),
        so partition 5 of a topic may be partition 1 of its broker; alone, they are equal.
        """
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < t.partitions:
            return partition
        return t.broker_partition(partition)
