"""The partitions a log manager holds, of both kinds, and those being created.

A data directory holds two kinds of partition: Kafka 0.7-style topics (every partition
of the topic is here) and replicas of replicated topics (some partitions of each). A
topic name is one kind or the other on a broker. :class:`PartitionTable` keeps::

    logs            {(topic, partition): Log}   every published log, of both kinds
    topics          {topic: partition count}    the 0.7-style topics
    replicas        {(topic, partition): Log}   the replicas
    replica_topics  {topic: replica count}      replicas held or being created, per topic
    creating        {topic: (count, future)}    0.7-style topics being created
    reserved        partitions of either kind being created (they count against the limit)

Thread-safety: ``logs``, ``topics``, ``replicas`` and ``replica_topics`` are
copy-on-write: a reader takes the attribute once and never blocks (the event loop's
lookups); each change swaps in a new dictionary under ``lock`` (at start-up, before any
other thread runs, without it). ``creating``, ``reserved`` and ``closed`` are changed,
and read for a decision, under ``lock`` only (``partition_count`` outside it is a
snapshot). The methods that check or change the table expect ``lock`` held.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from rill.broker.log.log import Log
from rill.client.errors import PartitionLimitReached, StorageError


class PartitionTable:
    """The copy-on-write tables of a log manager's partitions, with their reservations and one lock."""

    def __init__(self, max_partitions: int) -> None:
        self.max_partitions = max_partitions
        self.lock = threading.Lock()
        self.logs: dict[tuple[str, int], Log] = {}
        self.topics: dict[str, int] = {}
        self.replicas: dict[tuple[str, int], Log] = {}
        self.replica_topics: dict[str, int] = {}
        """Replicas held or being created, per topic (copy-on-write): such a name is no 0.7-style topic."""
        self.creating: dict[str, tuple[int, Future[int]]] = {}
        self.reserved = 0
        self.closed = False

    @property
    def partition_count(self) -> int:
        """Partitions of both kinds, including those being created."""
        return len(self.logs) + self.reserved

    def check_open(self) -> None:
        """Raises: StorageError: the manager is closed."""
        if self.closed:
            raise StorageError("the log manager is closed")

    def reserve(self, partitions: int, what: str) -> None:
        """Count ``partitions`` about to be created (``what``: they, for the error) against ``max_partitions``.

        Raises:
            PartitionLimitReached: the broker would hold more than ``max_partitions``.
        """
        if self.partition_count + partitions > self.max_partitions:
            raise PartitionLimitReached(f"{what} would exceed max.broker.partitions ({self.max_partitions}); "
                                        f"the broker holds {self.partition_count}")
        self.reserved += partitions

    def publish_topic(self, topic: str, logs: list[Log]) -> None:
        """Swap in new dictionaries (copy-on-write) holding 0.7-style ``topic``'s logs."""
        self.logs = {**self.logs, **{(topic, log.partition): log for log in logs}}
        self.topics = {**self.topics, topic: len(logs)}

    def publish_replicas(self, logs: list[Log]) -> None:
        """Swap in new dictionaries (copy-on-write) holding the replica ``logs`` (counted already)."""
        added = {(log.topic, log.partition): log for log in logs}
        self.logs = {**self.logs, **added}
        self.replicas = {**self.replicas, **added}

    def unpublish_replica(self, log: Log) -> None:
        """Swap in new dictionaries (copy-on-write) without the replica ``log``, and uncount it."""
        key = (log.topic, log.partition)
        self.logs = {k: v for k, v in self.logs.items() if k != key}
        self.replicas = {k: v for k, v in self.replicas.items() if k != key}
        self.count_replicas(log.topic, -1)

    def count_replicas(self, topic: str, delta: int) -> None:
        """Change the replicas counted for ``topic`` (copy-on-write)."""
        counts = dict(self.replica_topics)
        counts[topic] = counts.get(topic, 0) + delta
        if counts[topic] <= 0:
            del counts[topic]
        self.replica_topics = counts
