"""Metadata discovery and topic creation for the producer's send thread (seed 003).

The send thread asks for metadata when a topic has messages waiting for its partition
count, when an error made what it knows stale (a connection failed, a partition has no
known leader, a broker refused a partition as unknown), or every
``metadata.max.age.ms``; not again within ``retry.backoff.ms`` unless a topic was just
created. It sends one METADATA request at a time, on any ready connection with room for
it, opening one to a known broker or a bootstrap address (in turn) if none is open.

A topic the broker does not know is created by an empty acknowledged produce to its
partition 0 (a *probe*), which makes the broker auto-create it with its own
``num.partitions`` (Kafka 0.7 creates topics on produce) and refuse the empty message
set; then metadata is asked again. A probe refused with a retriable error
(LeaderNotAvailable: in a cluster with ``default.replication.factor`` above 1 the broker
made a replicated topic whose leaders are being elected) asks for metadata again too,
and the topic is probed again while it stays unknown. Messages waiting for a topic whose
partitions stay unknown for ``request.timeout.ms``, or that the broker will not create, fail.

With ``zookeeper.connect``, the brokers and partitions come from a
:class:`MetadataSource` instead (the ZooKeeper registry,
rill.client.zookeeper.producer_metadata): it gives the send thread an updater of its
own, which derives the metadata without METADATA requests and probes as above.

Not thread-safe: the send thread only (:class:`ProducerMetadata` too, as any
:class:`~rill.client.cluster_metadata.ClusterMetadata`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import structlog

from rill.client.errors import BrokerError, ErrorCode, InvalidMessage, UnknownTopic, error_for_code
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.producer.accumulator import RecordAccumulator
from rill.client.producer.errors import ProducerTimeout
from rill.client.producer.in_flight import BrokerLink, InFlight, Kind, SocketState
from rill.client.producer.outcomes import run_callbacks
from rill.client.protocol import requests as rq
from rill.client.structs import Address

if TYPE_CHECKING:
    from rill.client.producer.sender import SenderConfig

log = structlog.get_logger(__name__)

__all__ = ["MetadataSource", "MetadataUpdater", "ProducerMetadata", "UpdaterFactory"]

Connect = Callable[[Address, float], float]  # start connecting (address, now); return when to look again
Send = Callable[[BrokerLink, Kind, Sequence[bytes | memoryview], float, list[str]], None]  # queue and write
# how the Sender makes its updater: MetadataUpdater itself, or a source's (MetadataSource.updater)
UpdaterFactory = Callable[[RecordAccumulator, "ProducerMetadata", "SenderConfig", Mapping[Address, BrokerLink],
                           Connect, Send], "MetadataUpdater"]


class MetadataSource(Protocol):
    """Where a producer learns brokers and partitions instead of asking brokers for METADATA.

    The Producer makes one when ``zookeeper.connect`` is set (the ZooKeeper registry,
    rill.client.zookeeper.producer_metadata.ZkRegistrySource) and owns it: it asks it
    once for the send thread's updater and closes it after the send thread has ended.
    """

    def updater(self, wakeup: Callable[[], None]) -> UpdaterFactory:
        """The factory the Sender makes its updater with; ``wakeup`` wakes the send thread
        (the source calls it when what it knows changes)."""
        ...

    def close(self) -> None:
        """Let go of what it holds (sessions, watches)."""
        ...


class ProducerMetadata(ClusterMetadata):
    """ClusterMetadata fed by the send thread's own (non-blocking) METADATA requests."""

    def update(self, meta: rq.Metadata, topics: Sequence[str]) -> None:
        self._merge(meta, topics)


class MetadataUpdater:
    """Keeps ``cluster`` current and creates unknown topics (see the module doc).

    ``links`` is the send thread's connections by address (read here, never changed);
    ``connect`` and ``send`` are its ways to open one and to queue and write a request.
    ``stale``: what is known may be wrong, so ask again as soon as allowed. ``error``:
    why metadata is missing, for the errors of the messages that waited for it.
    """

    def __init__(self, accumulator: RecordAccumulator, cluster: ProducerMetadata, config: SenderConfig,
                 links: Mapping[Address, BrokerLink], connect: Connect, send: Send) -> None:
        self.acc = accumulator
        self.cluster = cluster
        self.config = config
        self._links = links
        self._connect = connect
        self._send = send
        self._link: BrokerLink | None = None  # where a METADATA request is in flight
        self.stale = False
        self._at = float("-inf")  # when metadata last arrived
        self._not_before = 0.0
        self.error = "no metadata request answered yet"
        self._probing: set[str] = set()
        self._next_candidate = 0

    def update(self, now: float) -> float:
        """Send a METADATA request if one is due; return when to look again."""
        if self._link is not None or not self.acc.topics:
            return float("inf")
        waiting = any(t not in self._probing for t in self.acc.unassigned())
        due = now if (waiting or self.stale) else self._at + self.config.metadata_max_age
        due = max(due, self._not_before)
        if due > now:
            return due
        link, wake_at = self._target(now)
        if link is None:
            return wake_at
        names = self.acc.topic_names()
        frame = [rq.encode_metadata(names)]
        self._link = link  # before sending: a write that fails the link clears it again
        self._not_before = now + self.config.retry_backoff
        self._send(link, Kind.METADATA, frame, now, names)
        return float("inf")

    def _target(self, now: float) -> tuple[BrokerLink | None, float]:
        """A ready connection with room for a request, or (None, when to look again) after
        starting to connect to the next candidate (known brokers, then bootstrap addresses)."""
        links = self._links.values()
        ready = [lk for lk in links if lk.ready and lk.in_flight < self.config.max_in_flight]
        if ready:
            return min(ready, key=lambda lk: lk.in_flight), now
        if any(lk.state is not SocketState.DISCONNECTED for lk in links):
            return None, float("inf")  # connecting, or busy: a connect or a response wakes the loop
        candidates = self.cluster.addresses()
        for i in range(len(candidates)):
            address = candidates[(self._next_candidate + i) % len(candidates)]
            link = self._links.get(address)
            if link is None or link.retry_at <= now:
                self._next_candidate += i + 1
                return None, self._connect(address, now)
        return None, min(lk.retry_at for lk in links)

    def on_metadata(self, request: InFlight, body: memoryview, now: float) -> None:
        """Learn from a METADATA response (see :meth:`apply`)."""
        self._link = None
        error, meta = rq.decode_metadata_response(body)
        if error:
            self.error = f"metadata request failed: {error_for_code(error)}"
            self.stale = True
            return
        self.apply(meta, request.topics, now)

    def apply(self, meta: rq.Metadata, names: Sequence[str], now: float) -> None:
        """Assign the partitions of the topics waiting for them, probe the unknown ones,
        fail those the broker refused."""
        self.cluster.update(meta, names)
        self._at = now
        self.stale = False
        self.error = "metadata did not list the topic"
        waiting = self.acc.unassigned()
        for t in meta.topics:
            if t.error == 0 and t.partitions > 0:
                live = tuple(p for p, leader in enumerate(t.leaders) if leader in self.cluster.brokers)
                available = live if len(live) < t.partitions else None
                run_callbacks(self.acc.assign(t.topic, t.partitions, available), self.config.client_id)
            elif t.error == ErrorCode.UNKNOWN_TOPIC and t.topic in waiting:
                self._probe(t.topic, now)
            elif t.error and t.topic in waiting:
                exc = error_for_code(t.error, f"topic {t.topic!r}: {error_for_code(t.error)}")
                run_callbacks(self.acc.fail_unassigned(t.topic, exc, forget=True), self.config.client_id)
        log.debug("producer.metadata_updated", client_id=self.config.client_id, brokers=len(meta.brokers),
                  topics={t.topic: t.partitions for t in meta.topics})

    def _probe(self, topic: str, now: float) -> None:
        """Produce nothing to partition 0 of ``topic``: the broker creates the topic (if it
        creates topics on produce) and refuses the empty set with InvalidMessage."""
        if topic in self._probing:
            return
        link = next((lk for lk in self._links.values() if lk.ready), None)
        if link is None:
            return
        self._probing.add(topic)
        log.info("producer.creating_topic", client_id=self.config.client_id, topic=topic, broker=link.name)
        frame = rq.encode_produce_ack([rq.ProduceRequest(topic, 0, b"")], rq.Acks.APPEND,
                                      int(self.config.request_timeout * 1000))
        self._send(link, Kind.PROBE, [frame], now, [topic])

    def on_probe(self, request: InFlight, body: memoryview) -> None:
        """The answer to a probe: the topic exists now (ask for metadata at once), it is not
        ready yet (a retriable error: ask again, after ``retry.backoff.ms``), or it cannot be
        created and the messages waiting for it fail."""
        topic = request.topics[0]
        self._probing.discard(topic)
        error, acks = rq.decode_produce_ack_response(body)
        code = error or (acks[0].error if len(acks) == 1 else int(ErrorCode.UNKNOWN))
        if code in (0, InvalidMessage.code):  # the topic exists now
            self._not_before = 0.0
            self.stale = True
            return
        if code == UnknownTopic.code:
            exc: BrokerError = UnknownTopic(f"topic {topic!r} does not exist and the broker does not create "
                                            "topics on produce (auto.create.topics.enable=false)")
        else:
            exc = error_for_code(code, f"creating topic {topic!r}: {error_for_code(code)}")
            if exc.retriable:  # e.g. a replicated topic just made, whose leaders are being elected
                log.info("producer.topic_not_ready", client_id=self.config.client_id, topic=topic, error=str(exc))
                self.error = str(exc)
                self.stale = True
                return
        log.warning("producer.topic_unavailable", client_id=self.config.client_id, topic=topic, error=str(exc))
        run_callbacks(self.acc.fail_unassigned(topic, exc, forget=True), self.config.client_id)

    def connection_failed(self, error: BaseException, requests: Sequence[InFlight]) -> None:
        """A connection broke with ``requests`` in flight on it: metadata is stale, and the
        METADATA request or probes among them are forgotten (to be sent again)."""
        self.stale = True
        self.error = str(error)
        for request in requests:
            if request.kind is Kind.METADATA:
                self._link = None
            elif request.kind is Kind.PROBE:
                self._probing.discard(request.topics[0])

    def unreachable(self, topic: str, partition: int) -> str:
        """Why a ready batch for ``topic``-``partition`` could not be sent: no leader known,
        or the leader's broker unreachable."""
        leader = self.cluster.leader(topic, partition)
        if leader is None:
            return f"no leader known for the partition ({self.error})"
        link = self._links.get((leader.host, leader.port))
        return f"broker {leader.host}:{leader.port} unreachable" + (
            f" ({link.state.name.lower()})" if link is not None else "")

    def expire_unassigned(self, now: float) -> float:
        """Fail the messages of topics whose partitions stayed unknown for ``request.timeout.ms``;
        return when the next of them would."""
        wake_at = float("inf")
        for topic, since in self.acc.unassigned().items():
            deadline = since + self.config.request_timeout
            if deadline > now:
                wake_at = min(wake_at, deadline)
                continue
            log.warning("producer.metadata_timeout", client_id=self.config.client_id, topic=topic,
                        reason=self.error)
            error = ProducerTimeout(f"the partitions of topic {topic!r} were not known within request.timeout.ms="
                                    f"{self.config.request_timeout * 1000:.0f}: {self.error}")
            run_callbacks(self.acc.fail_unassigned(topic, error, forget=True), self.config.client_id)
        return wake_at
