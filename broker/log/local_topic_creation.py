"""Creating Kafka 0.7-style topics: the checks, the reservations and the creations under way.

One definition of the limits for every way of creating a topic (CREATE_TOPIC,
auto-creation, gRPC): a topic has 1 .. ``max_topic_partitions`` partitions
(``num.partitions.max``), and the broker holds at most ``max_partitions``
(``max.broker.partitions``), topics and replicas being created included. Both are
checked, and the new partitions reserved in the :class:`PartitionTable`, before
anything touches the disk; the directories are then made on the creator's thread
(creator.py: whole or not at all), and the topic is published when they all exist. A
name that holds replicas of a replicated topic cannot become a 0.7-style topic.

Thread-safety: :meth:`TopicCreations.create_async` and
:meth:`TopicCreations.ensure_async` may be called from any thread, the event loop
included: they take the table's lock only to check and reserve, and never wait for the
disk. :meth:`TopicCreations.create` and :meth:`TopicCreations.ensure` wait for the
creation (callers off the event loop). The ``published`` callback runs, outside the
lock, on the creator's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

import structlog

from rill.broker.log import creator
from rill.broker.log.log import Log
from rill.broker.log.partition_table import PartitionTable
from rill.client.errors import InvalidPartitions, InvalidRequest, StorageError
from rill.client.topic_names import validate_topic

_logger = structlog.get_logger(__name__)


class TopicCreations:
    """Starts and tracks the creation of 0.7-style topics in the manager's :class:`PartitionTable`.

    ``open_new`` opens the log of a partition directory just made (on the creator's
    thread); ``published`` is told ``(topic, partition count)`` once a topic is published.
    """

    def __init__(self, table: PartitionTable, topic_creator: creator.TopicCreator, num_partitions: int,
                 max_topic_partitions: int, *, open_new: creator.OpenPartition,
                 published: Callable[[str, int], None]) -> None:
        self._table = table
        self._creator = topic_creator
        self._num_partitions = num_partitions
        self._max_topic_partitions = max_topic_partitions
        self._open_new = open_new
        self._published = published

    def create_async(self, topic: str, partitions: int) -> Future[int]:
        """Start creating ``topic`` with ``partitions`` partitions; the future gives the count.

        A topic that exists with that count gives a completed future; one being created
        with it, that creation's future. The directories are made on the creator's thread.

        Raises (at once, before anything touches the disk):
            InvalidTopic: an illegal name.
            InvalidPartitions: a count outside 1 .. ``max_topic_partitions``.
            InvalidRequest: the topic exists (or is being created) with another count.
            PartitionLimitReached: the broker would hold more than ``max_partitions``.
            StorageError: the manager is closed.
        """
        validate_topic(topic)
        if (isinstance(partitions, bool) or not isinstance(partitions, int)
                or not 1 <= partitions <= self._max_topic_partitions):
            raise InvalidPartitions(f"partition count must be between 1 and {self._max_topic_partitions} "
                                    f"(num.partitions.max), got {partitions!r}")
        table = self._table
        with table.lock:
            table.check_open()
            if topic in table.replica_topics:
                raise InvalidRequest(f"topic {topic!r} is a replicated topic on this broker (it holds replicas of "
                                     f"it): it cannot also be a local, Kafka 0.7-style topic")
            existing = table.topics.get(topic)
            pending = table.creating.get(topic)
            if existing is None and pending is not None:
                existing, future = pending
            else:
                future = None
            if existing is not None:
                if existing != partitions:
                    raise InvalidRequest(f"topic {topic!r} already exists with {existing} partitions")
                return future if future is not None else _done(existing)
            table.reserve(partitions, f"creating {topic!r} with {partitions} partitions")
            future = self._creator.submit(topic, partitions, self._open_new, lambda logs: self._finish(topic, logs),
                                          Log.abandon)
            table.creating[topic] = (partitions, future)
        future.add_done_callback(lambda f: self._release(topic, partitions))
        return future

    def _finish(self, topic: str, logs: list[Log]) -> None:
        """Publish a created topic (creator thread), then tell ``published``."""
        with self._table.lock:
            self._table.publish_topic(topic, logs)
            self._table.reserved -= len(logs)
            self._table.creating.pop(topic, None)
        _logger.info("logs.topic_created", topic=topic, partitions=len(logs))
        self._published(topic, len(logs))

    def _release(self, topic: str, partitions: int) -> None:
        """After a creation ended: give back the reservation of one that failed."""
        with self._table.lock:
            entry = self._table.creating.get(topic)
            if entry is not None and entry[1].done():
                del self._table.creating[topic]
                self._table.reserved -= partitions

    def create(self, topic: str, partitions: int, timeout: float | None = None) -> None:
        """Create ``topic`` and wait for it (callers off the event loop: gRPC, tests).

        Raises: as :meth:`create_async`, and StorageError when the creation failed on disk.
        """
        _wait(self.create_async(topic, partitions), timeout)

    def ensure_async(self, topic: str) -> Future[int]:
        """The partition count of ``topic``, creating it with ``num_partitions`` if needed (auto-create).

        Raises: as :meth:`create_async`.
        """
        count = self._table.topics.get(topic)
        if count is not None:
            return _done(count)
        with self._table.lock:
            pending = self._table.creating.get(topic)
        if pending is not None:
            return pending[1]
        try:
            return self.create_async(topic, self._num_partitions)
        except InvalidRequest:  # created meanwhile with another count: use it (unless it is a replicated topic)
            count = self._table.topics.get(topic)
            if count is None:
                raise
            return _done(count)

    def ensure(self, topic: str, timeout: float | None = None) -> int:
        """The partition count of ``topic``, creating it with ``num_partitions`` and waiting if needed.

        Raises: as :meth:`ensure_async`; StorageError when the creation failed on disk.
        """
        return _wait(self.ensure_async(topic), timeout)


def _done(count: int) -> Future[int]:
    future: Future[int] = Future()
    future.set_result(count)
    return future


def _wait(future: Future[int], timeout: float | None) -> int:
    try:
        return future.result(timeout)
    except OSError as exc:
        raise StorageError(f"creating the topic failed: {exc.strerror or exc}: {exc.filename}") from exc
