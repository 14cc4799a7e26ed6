"""The ZooKeeper-coordinated consumer: Kafka 0.7's ZookeeperConsumerConnector, in Python.

::

    with ZkConsumer(zookeeper="zk1:2181/kafka", group="audit", autooffset_reset="smallest") as consumer:
        consumer.subscribe(["clicks", "views"])
        while running:
            for record in consumer.poll(1.0):
                handle(record.topic, record.broker_id, record.partition, record.value)

or with 0.7's streams, one per processing thread::

    streams = consumer.create_message_streams({"clicks": 2})["clicks"]
    # each stream yields the records of the partitions its thread id owns

The group coordinates through ZooKeeper exactly as 0.7 consumers do (layout and
algorithm: :mod:`~rill.client.zookeeper.assignment`, :mod:`~rill.client.zookeeper.consumer_nodes`,
:mod:`~rill.client.zookeeper.rebalance_thread`), so rill and 0.7 consumers can share a group.
A background thread rebalances and auto-commits whether or not the application is
calling ``poll()``.

Replicated topics, which 0.7's layout does not list, are read from rill's
(:mod:`~rill.client.zookeeper.replicated_view`): their partitions are named by id, as
Kafka 0.8 names them, fetched from their leaders (committed messages only) and followed
to a new leader from the consumed offsets.

With ``security.protocol`` (and ``ssl.*``, ``sasl.*``: every rill client's security
settings) the fetchers connect to each broker's listener of that protocol, as the
broker registered it in ZooKeeper, with TLS and SASL; ``poll()`` and the streams raise
AuthenticationFailed when a broker refuses them. ZooKeeper is reached as before.

A record counts as consumed once ``poll()`` or a stream has returned it: that is the
offset committed (auto commit every ``autocommit.interval.ms``, at every rebalance
before the partition is released, and at ``close()``), as in 0.7. Delivery is
at-least-once: records delivered after the last commit are delivered again to the
next owner when a session is lost or the process dies.

Thread-safety: ``poll``, ``commit``, ``assignment`` and each stream may be used from
different threads; one stream should be read by one thread. A stream whose records
are not read holds up the broker fetches feeding it (its buffer is bounded, as 0.7's
queues were).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, NamedTuple

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from rill.client.errors import RillError
from rill.client.security.client_security import from_settings
from rill.client.topic_names import validate_topic
from rill.client.zookeeper.assignment import FilterSubscription, StaticSubscription, Subscription, consumer_id
from rill.client.zookeeper.fetcher_threads import FetchConfig, FetcherPool
from rill.client.zookeeper.consumer_nodes import ZkGroup
from rill.client.zookeeper.rebalance_thread import RebalanceConfig, Rebalancer
from rill.client.zookeeper.replicated_view import ReplicatedRegistryView
from rill.client.zookeeper.zk_consumer_settings import zk_consumer_settings
from rill.client.zookeeper.streams import PartitionKey, StreamBuffers, ZkRecord

__all__ = ["Blacklist", "Whitelist", "ZkConsumer", "ZkConsumerError", "ZkStream"]

log = structlog.get_logger(__name__)

ZK_ERRORS = (KazooException, KazooTimeoutError)
MAX_POLL_RECORDS = 500


class ZkConsumerError(RillError):
    """A ZooKeeper consumer call that cannot be served (not connected, subscribed twice, closed)."""


class Whitelist(NamedTuple):
    """Consume every topic whose name the regex matches in full (0.7's Whitelist; ``,`` means ``|``)."""

    regex: str


class Blacklist(NamedTuple):
    """Consume every topic whose name the regex does not match (0.7's Blacklist)."""

    regex: str


class ZkStream:
    """One of 0.7's KafkaStreams: the records of the partitions owned by one thread id.

    Iterating blocks for the next record; it ends after ``consumer.timeout.ms``
    without one (never, with -1) and when the consumer is closed. Iterating again
    after a timeout waits again.
    """

    def __init__(self, buffers: StreamBuffers, index: int, timeout_ms: int, thread_suffix: int) -> None:
        self._buffers = buffers
        self._index = index
        self._timeout = None if timeout_ms < 0 else timeout_ms / 1000
        self.thread_index = thread_suffix  # the ``i`` of ``<consumer id>-<i>``

    def __iter__(self) -> Iterator[ZkRecord]:
        return self

    def __next__(self) -> ZkRecord:
        records = self._buffers.take(self._index, self._timeout, 1)
        if not records:
            raise StopIteration
        return records[0]


class ZkConsumer:
    """A member of a ZooKeeper-coordinated consumer group (see the module docstring).

    Settings are 0.7's (:mod:`~rill.client.zookeeper.zk_consumer_settings`): ``zookeeper`` and
    ``group`` are ``zk.connect`` and ``groupid``; other keys go in ``config`` dotted
    or as keywords with underscores (``rebalance_backoff_ms=500``).

    Raises:
        ConfigError: an unknown setting or a bad value (unreadable TLS files, a SASL
            protocol without ``sasl.plain.username``).
        ZkConsumerError: ZooKeeper could not be reached within ``zk.connectiontimeout.ms``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *, zookeeper: str | None = None,
                 group: str | None = None, **kwargs: Any) -> None:
        extra = dict(kwargs)
        if zookeeper is not None:
            extra["zk_connect"] = zookeeper
        if group is not None:
            extra["groupid"] = group
        self.settings = zk_consumer_settings(config, extra)
        self.security = from_settings(self.settings)  # before ZooKeeper: bad TLS files fail here
        self.group = self.settings["groupid"]
        self.consumer_id = consumer_id(self.group, socket.gethostname(), int(time.time() * 1000),
                                       given=self.settings["consumerid"])
        self.log = log.bind(group=self.group, consumer=self.consumer_id)
        self.zk = KazooClient(hosts=self.settings["zk.connect"], timeout=self.settings["zk.sessiontimeout.ms"] / 1000)
        self._connect()
        self.registry = ReplicatedRegistryView(self.zk)
        self.registry.start()
        self._group = ZkGroup(self.zk, self.group, self.consumer_id)
        self._buffers: StreamBuffers | None = None
        self._rebalancer: Rebalancer | None = None
        self._closed = False

    def _connect(self) -> None:
        timeout = self.settings["zk.connectiontimeout.ms"] / 1000
        try:
            self.zk.start(timeout=timeout)
            if self.zk.exists("/") is None:  # a chroot that does not exist yet
                _create_chroot(self.settings["zk.connect"], timeout)
        except ZK_ERRORS as exc:
            self.zk.close()
            raise ZkConsumerError(f"cannot connect to ZooKeeper at {self.settings['zk.connect']} within "
                                  f"{timeout:g}s (zk.connectiontimeout.ms): {exc or type(exc).__name__}") from exc

    # -- subscribing ------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | Mapping[str, int]) -> None:
        """Join the group for ``topics`` (a list: one stream each; a dict: topic -> streams), for ``poll()``.

        Returns after the first rebalance round (as 0.7's createMessageStreams did).
        """
        counts = dict(topics) if isinstance(topics, Mapping) else {t: 1 for t in topics}
        self._create_static(counts)

    def subscribe_pattern(self, *, whitelist: str | None = None, blacklist: str | None = None,
                          streams: int = 1) -> None:
        """Join the group for every topic a whitelist regex allows (or a blacklist does not refuse)."""
        if (whitelist is None) == (blacklist is None):
            raise ValueError("give exactly one of whitelist= or blacklist=")
        topic_filter = Whitelist(whitelist) if whitelist is not None else Blacklist(blacklist or "")
        self.create_message_streams_by_filter(topic_filter, streams)

    def create_message_streams(self, topic_count: Mapping[str, int]) -> dict[str, list[ZkStream]]:
        """0.7's createMessageStreams: topic -> that many streams, each fed by one thread id's partitions."""
        return self._create_static(dict(topic_count))

    def create_message_streams_by_filter(self, topic_filter: Whitelist | Blacklist, streams: int = 1
                                         ) -> list[ZkStream]:
        """0.7's createMessageStreamsByFilter: ``streams`` streams over every topic the filter allows
        (topics created later included); stream ``i`` carries thread id ``<consumer id>-i`` of each topic."""
        _check_streams(streams)
        subscription = FilterSubscription(topic_filter.regex, streams, blacklist=isinstance(topic_filter, Blacklist))
        subscription.pattern  # noqa: B018 - a bad regex raises re.error here, not on the rebalance thread
        buffers = self._start(subscription, streams, lambda _topic, index: index)
        timeout = self.settings["consumer.timeout.ms"]
        return [ZkStream(buffers, i, timeout, i) for i in range(streams)]

    def _create_static(self, counts: dict[str, int]) -> dict[str, list[ZkStream]]:
        if not counts:
            raise ValueError("subscribe to at least one topic")
        first: dict[str, int] = {}
        total = 0
        for topic, streams in counts.items():
            validate_topic(topic)
            _check_streams(streams)
            first[topic] = total
            total += streams
        buffers = self._start(StaticSubscription(counts), total, lambda topic, index: first[topic] + index)
        timeout = self.settings["consumer.timeout.ms"]
        return {topic: [ZkStream(buffers, first[topic] + i, timeout, i) for i in range(streams)]
                for topic, streams in counts.items()}

    def _start(self, subscription: Subscription, streams: int, stream_of: Callable[[str, int], int]) -> StreamBuffers:
        if self._closed:
            raise ZkConsumerError("the consumer is closed")
        if self._rebalancer is not None:
            raise ZkConsumerError("already subscribed: a ZkConsumer registers one subscription (0.7 consumers "
                                  "register their topics once); create another consumer for more")
        s = self.settings
        buffers = StreamBuffers(streams, s["queuedchunks.max"])
        fetchers = FetcherPool(buffers, FetchConfig(s["fetch.size"], s["fetch.wait.max.ms"],
                                                    s["autooffset.reset"] == "smallest",
                                                    s["socket.timeout.ms"] / 1000, self.security))
        config = RebalanceConfig(s["rebalance.retries.max"], s["rebalance.backoff.ms"] / 1000,
                                 s["autocommit.enable"], s["autocommit.interval.ms"] / 1000)
        self._buffers = buffers
        self._rebalancer = Rebalancer(self.zk, self._group, self.registry, buffers, fetchers, subscription,
                                      stream_of, config)
        self._rebalancer.start()
        first_round_s = s["zk.sessiontimeout.ms"] / 1000 + s["rebalance.retries.max"] * (
            s["rebalance.backoff.ms"] / 1000 + 5)
        if not self._rebalancer.first_round.wait(first_round_s):
            self.log.warning("zookeeper_consumer.first_rebalance_pending", waited_s=first_round_s)
        return buffers

    # -- consuming ------------------------------------------------------------------------

    def poll(self, timeout_s: float | None = 1.0, max_records: int = MAX_POLL_RECORDS) -> list[ZkRecord]:
        """Records from every owned partition, waiting up to ``timeout_s`` for the first (None: forever).

        Returns:
            Up to ``max_records`` records, in offset order per partition; [] on timeout,
            while the ZooKeeper connection is down, or once closed.

        Raises:
            ZkConsumerError: not subscribed.
            CorruptMessageError, InvalidFetchSize: a fetch failed for good (raised once).
        """
        buffers = self._require_buffers()
        return buffers.take(None, timeout_s, max_records)

    def commit(self) -> None:
        """Write the consumed offset of every owned partition to ZooKeeper (0.7's commitOffsets).

        Raises:
            KazooException: ZooKeeper refused or could not be reached.
        """
        if self._rebalancer is not None and not self._closed:
            self._rebalancer.commit()

    def assignment(self) -> set[PartitionKey]:
        """The partitions this consumer owns and delivers now (empty while rebalancing)."""
        return set(self._buffers.owned()) if self._buffers is not None else set()

    def thread_assignment(self) -> dict[str, list[PartitionKey]]:
        """Thread id -> the partitions it owns (the values of our owner nodes)."""
        out: dict[str, list[PartitionKey]] = {}
        if self._buffers is not None:
            for key, entry in sorted(self._buffers.owned().items()):
                out.setdefault(entry.thread, []).append(key)
        return out

    def _require_buffers(self) -> StreamBuffers:
        if self._buffers is None:
            raise ZkConsumerError("subscribe() or create_message_streams*() first")
        return self._buffers

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop, commit (auto commit), release our owner nodes, delete our ids node, end the session.

        Idempotent. ZooKeeper errors are logged: ending the session removes every
        ephemeral node anyway. While ZooKeeper is unreachable nothing is committed
        (logged as ``zookeeper_consumer.closed_without_zookeeper``) and close does not wait for it.
        """
        if self._closed:
            return
        self._closed = True
        rebalancer = self._rebalancer
        if rebalancer is not None:
            if self.zk.connected and rebalancer.stop(wait_s=30):
                try:
                    rebalancer.release_all()
                    self._group.unregister()
                except ZK_ERRORS as exc:
                    self.log.warning("zookeeper_consumer.close_error", error=repr(exc))
            else:
                rebalancer.abandon()
                self.log.warning("zookeeper_consumer.closed_without_zookeeper",
                                 note="offsets since the last commit are not committed; our nodes vanish "
                                      "with the session")
        if self._buffers is not None:
            self._buffers.close()
        try:
            self.zk.stop()  # fails any call still waiting for the connection
        finally:
            self.zk.close()
        self.registry.close()
        if rebalancer is not None:
            rebalancer.stop(wait_s=10)
            rebalancer.fetchers.stop()
        self.log.info("zookeeper_consumer.closed")

    def __enter__(self) -> ZkConsumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _check_streams(streams: int) -> None:
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ValueError(f"the number of streams must be a positive int, got {streams!r}")


def _create_chroot(connect: str, timeout: float) -> None:
    """Create the chroot of ``connect`` (a chrooted session cannot create its own root)."""
    hosts, _, chroot = connect.partition("/")
    root = KazooClient(hosts=hosts, timeout=timeout)
    root.start(timeout=timeout)
    try:
        root.ensure_path("/" + chroot.strip("/"))
    finally:
        root.stop()
        root.close()
