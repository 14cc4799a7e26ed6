"""The producer's metadata from ZooKeeper, the Kafka 0.7 way (seed 004, "Producer").

With ``zookeeper.connect`` set, the Producer does not ask brokers for METADATA: it
reads the brokers' registry (rill.client.zookeeper.registry) and watches it. A topic's
partitions are the ``broker-partition`` pairs brokers list under
``/brokers/topics/[topic]``, in 0.7's order, plus partition 0 of every live broker that
does not list the topic yet: every broker has at least that one, and producing to it
creates the topic there, after which the broker lists all its partitions and the watch
adds them (seed 004, "Creating New Topics"). So a topic no broker has yet is sent to
partition 0 of every broker.

The producer numbers these pairs in the order it first saw them and keeps every number
(:class:`ZkTopicLayout`): a broker that goes away leaves its partitions without a
leader (unkeyed messages avoid them, keyed ones wait for the broker), and one that
joins adds partitions at the end, so a queued batch never changes partition. These
numbers are this producer's own (``SendResponse.partition``); the partition a message
went to on its broker is logged and is the pair at that number (:meth:`ZkTopicLayout.pair`).

Each broker is reached at its listener of the producer's ``security.protocol``, as the
broker registered it in ``/rill/brokers/[id]`` (``/brokers/ids`` names one address only),
and the connections carry the producer's TLS and SASL (``SenderConfig.security``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from kazoo.client import KazooClient

from rill.client.producer.accumulator import RecordAccumulator
from rill.client.errors import AuthenticationFailed
from rill.client.producer.in_flight import BrokerLink, InFlight
from rill.client.producer.metadata_updater import Connect, MetadataUpdater, ProducerMetadata, Send, UpdaterFactory
from rill.client.producer.sender import SenderConfig
from rill.client.protocol import requests as rq
from rill.client.structs import Address
from rill.client.zookeeper.registry import ClusterSnapshot, RegistryView, client_listener, parse_partition_name

log = structlog.get_logger(__name__)


class ZkTopicLayout:
    """Per topic, the ``(broker, partition)`` pairs in the order first seen; numbers never change."""

    def __init__(self) -> None:
        self._pairs: dict[str, list[tuple[int, int]]] = {}

    def pair(self, topic: str, partition: int) -> tuple[int, int] | None:
        pairs = self._pairs.get(topic, [])
        return pairs[partition] if 0 <= partition < len(pairs) else None

    def metadata(self, snapshot: ClusterSnapshot, names: Sequence[str], listener: str = "PLAINTEXT") -> rq.Metadata:
        """METADATA as a broker would answer it on ``listener``, from the registry (each broker at its
        ``listener`` address, or its registered one if it lists none); a topic with no live broker is left out."""
        brokers = [rq.BrokerInfo(b.broker_id, *b.address_for(listener)) for b in snapshot.brokers.values()]
        topics = []
        for name in names:
            listed = snapshot.topics.get(name, {})
            current = [parse_partition_name(n) for n in snapshot.broker_partitions(name)]
            current += [(b, 0) for b in snapshot.brokers if b not in listed]
            pairs = self._pairs.setdefault(name, [])
            known = set(pairs)
            added = [bp for bp in current if bp not in known]
            pairs.extend(added)
            if added:
                log.info("producer.zookeeper_partitions", topic=name, added=[f"{b}-{p}" for b, p in added],
                         partitions=len(pairs))
            live = {bp for bp in current if bp[0] in snapshot.brokers}
            if not live:
                continue
            leaders = tuple(b if (b, p) in live else rq.NO_LEADER for b, p in pairs)
            topics.append(rq.TopicMetadata(name, 0, leaders, tuple(p for _, p in pairs)))
        return rq.Metadata(brokers, topics)


class ZkMetadataUpdater(MetadataUpdater):
    """A MetadataUpdater fed by the registry instead of METADATA requests (send thread only).

    The leaders come from ZooKeeper, not from a broker that let the producer in, so a
    refused TLS handshake or SASL login shows only as an unreachable broker: the last
    refusal (AuthenticationFailed, which names its broker) is kept and added to the
    reason of the messages that expire waiting for one.
    """

    def __init__(self, *args: Any, registry: RegistryView, layout: ZkTopicLayout) -> None:
        super().__init__(*args)
        self.registry = registry
        self.layout = layout
        self._applied: tuple[ClusterSnapshot, tuple[str, ...]] | None = None
        self.error = "no broker registered in ZooKeeper"
        self._refused: str | None = None  # the last AuthenticationFailed, as text

    def connection_failed(self, error: BaseException, requests: Sequence[InFlight]) -> None:
        super().connection_failed(error, requests)
        if isinstance(error, AuthenticationFailed):
            self._refused = str(error)

    def unreachable(self, topic: str, partition: int) -> str:
        why = super().unreachable(topic, partition)
        if self._refused is not None and self.cluster.leader(topic, partition) is not None:
            return f"{why}; last refused: {self._refused}"
        return why

    def update(self, now: float) -> float:
        """Re-derive the metadata when the registry or the topics changed (or it went stale)."""
        if not self.acc.topics:
            return float("inf")
        key = (self.registry.snapshot, tuple(self.acc.topic_names()))
        if key == self._applied and not self.stale:
            return float("inf")  # a registry change wakes the send thread
        if key == self._applied and now < self._not_before:
            return self._not_before  # stale, but nothing changed since: retry after the backoff
        self._not_before = now + self.config.retry_backoff
        self.apply(self.layout.metadata(*key, client_listener(self.config.security)), key[1], now)
        self._applied = key
        return float("inf")


class ZkRegistrySource:
    """The kazoo session and registry view a ZooKeeper-aware producer owns: its
    :class:`~rill.client.producer.metadata_updater.MetadataSource`."""

    def __init__(self, connect: str, session_timeout_s: float, connect_timeout_s: float) -> None:
        self.connect = connect
        self.zk = KazooClient(hosts=connect, timeout=session_timeout_s)
        self.zk.start(timeout=connect_timeout_s)
        self.registry = RegistryView(self.zk)
        try:
            self.registry.start(timeout=connect_timeout_s)
        except BaseException:
            self.close()
            raise
        self.layout = ZkTopicLayout()

    def updater(self, wakeup: Callable[[], None]) -> UpdaterFactory:
        """The Sender's metadata factory; registry changes call ``wakeup``."""
        self.registry.add_listener(lambda _snapshot: wakeup())

        def make(accumulator: RecordAccumulator, cluster: ProducerMetadata, config: SenderConfig,
                 links: Mapping[Address, BrokerLink], connect: Connect, send: Send) -> MetadataUpdater:
            return ZkMetadataUpdater(accumulator, cluster, config, links, connect, send, registry=self.registry,
                                     layout=self.layout)
        return make

    def close(self) -> None:
        self.registry.close()
        self.zk.stop()
        self.zk.close()
