"""Replicated topics created by the data plane: CREATE_TOPIC and auto-creation in a cluster.

In a cluster (``zookeeper.connect``) whose ``default.replication.factor`` is not 1, a
topic the data plane creates (CREATE_TOPIC, or a produce to an unknown topic with
``auto.create.topics.enable``) is a replicated topic, as Kafka's auto-creation makes
topics of ``num.partitions`` partitions and ``default.replication.factor`` replicas.
It is created the way Admin CreateTopic creates one:
:func:`~rill.broker.cluster.replicated_topics.create_topic` over the live brokers that
serve gRPC; the controller then elects the leaders and tells the brokers.

ZooKeeper is never called on the event loop: creations run one at a time on this
object's worker thread, and a creation's future is done once ZooKeeper holds the topic
(its leaders are elected afterwards). Requests for the same creation share one future.

A name that is a Kafka 0.7-style topic somewhere in the cluster (the registry lists its
partition map, or a broker lists partitions of it) is not created here
(:meth:`ReplicatedTopicCreator.creates` is False): it stays a 0.7-style topic.

The future's result is the topic's partition count. Its errors:

- InvalidReplicationFactor: the factor is below 1 or above the live brokers;
- InvalidRequest: CREATE_TOPIC of a replicated topic that exists with another count, or
  the name became a 0.7-style topic meanwhile;
- UnknownError: ZooKeeper failed (the topic may or may not exist).

A topic that exists already as a replicated topic is no error: auto-creation accepts
any count, CREATE_TOPIC the same count (as for 0.7-style topics).

Thread-safety: every method may be called from any thread; the ZooKeeper work runs on
the worker thread (kazoo's client and the registry's snapshot are thread-safe).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from rill.broker.cluster.partition_states import TopicExists, read_topic
from rill.broker.cluster.replicated_topics import MAX_REPLICATED_PARTITIONS, create_topic, replica_brokers
from rill.client.errors import BrokerError, InvalidPartitions, InvalidRequest, UnknownError
from rill.client.topic_names import validate_topic
from rill.client.zookeeper.registry import RegistryView

__all__ = ["ReplicatedTopicCreator"]

log = structlog.get_logger(__name__)

_Key = tuple[str, int, bool]  # (topic, partitions, any count will do)


class ReplicatedTopicCreator:
    """Creates replicated topics in ZooKeeper for the data plane (see the module docstring).

    Args:
        replication_factor: ``default.replication.factor``.
        num_partitions: ``num.partitions``, the partitions of an auto-created topic.
    """

    def __init__(self, zk: KazooClient, registry: RegistryView, replication_factor: int, num_partitions: int) -> None:
        self._zk = zk
        self._registry = registry
        self.replication_factor = replication_factor
        self.num_partitions = num_partitions
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rill-replicated-topics")
        self._lock = threading.Lock()
        self._pending: dict[_Key, Future[int]] = {}
        self._closed = False

    def creates(self, topic: str) -> bool:
        """Whether ``topic``, unknown to this broker, is to be created replicated (False: it is
        a 0.7-style topic elsewhere in the cluster). From memory: never waits for ZooKeeper."""
        snapshot = self._registry.snapshot
        return topic not in snapshot.partition_maps and topic not in snapshot.topics

    def create_async(self, topic: str, partitions: int) -> Future[int]:
        """Start creating ``topic`` with ``partitions`` partitions (CREATE_TOPIC).

        Raises (at once, before ZooKeeper is asked):
            InvalidTopic: an illegal name.
            InvalidPartitions: a count outside 1 .. MAX_REPLICATED_PARTITIONS.
            UnknownError: the broker is stopping.
        """
        return self._submit((topic, partitions, False))

    def ensure_async(self, topic: str) -> Future[int]:
        """Start creating ``topic`` with ``num.partitions`` partitions unless it is a replicated topic
        already (auto-creation). Raises: as :meth:`create_async`."""
        return self._submit((topic, self.num_partitions, True))

    def _submit(self, key: _Key) -> Future[int]:
        topic, partitions, _ = key
        validate_topic(topic)
        if isinstance(partitions, bool) or not 1 <= partitions <= MAX_REPLICATED_PARTITIONS:
            raise InvalidPartitions(f"a replicated topic has 1..{MAX_REPLICATED_PARTITIONS} partitions, "
                                    f"not {partitions}")
        with self._lock:
            if self._closed:
                raise UnknownError(f"not creating topic {topic!r}: the broker is stopping")
            future = self._pending.get(key)
            if future is not None:
                return future
            future = self._executor.submit(self._create, key)
            self._pending[key] = future
        future.add_done_callback(lambda done: self._forget(key, done))  # outside the lock: it may run at once
        return future

    def _forget(self, key: _Key, future: Future[int]) -> None:
        with self._lock:
            if self._pending.get(key) is future:
                del self._pending[key]

    def _create(self, key: _Key) -> int:
        """The worker's part: write the topic to ZooKeeper, or accept the one there."""
        topic, partitions, any_count = key
        factor = self.replication_factor
        live = replica_brokers(self._registry.snapshot)
        bound = log.bind(topic=topic, partitions=partitions, replication_factor=factor, brokers=live)
        try:
            try:
                create_topic(self._zk, topic, partitions, factor, None, live)
            except TopicExists:
                return self._existing(topic, partitions, any_count)
        except BrokerError as exc:
            bound.warning("topics.replicated_create_refused", error=exc.code.name, reason=str(exc))
            raise
        except (KazooException, ValueError) as exc:
            bound.warning("topics.replicated_create_unknown_outcome", error=repr(exc))
            raise UnknownError(f"ZooKeeper failed while creating topic {topic!r} ({exc!r}): "
                               "it may or may not exist") from exc
        bound.info("topics.replicated_topic_created", auto_created=any_count)
        return partitions

    def _existing(self, topic: str, partitions: int, any_count: bool) -> int:
        """The count of the replicated topic that took the name first (see the module docstring)."""
        replicas = read_topic(self._zk, topic)
        if replicas is None:
            raise InvalidRequest(f"topic {topic!r} is a Kafka 0.7-style topic in this cluster, not a replicated one")
        if any_count or replicas.partitions == partitions:
            return replicas.partitions
        raise InvalidRequest(f"topic {topic!r} already exists with {replicas.partitions} partitions")

    def close(self) -> None:
        """Finish the creation under way, cancel the others; later requests fail. Idempotent."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
