"""Replicas of replicated topics: creating, listing and deleting them, and their leader-epoch caches.

Besides Kafka 0.7-style topics a broker holds replicas of replicated topics, some
partitions of each. A replica is a ``<topic>-<partition>`` directory marked by its
``leader-epoch-checkpoint`` file, made under a temporary name so that a crash never
leaves one that looks like a 0.7 topic (loading.make_replica), and recognised at
start-up by that file (loading.py). A replica's log carries its leader-epoch cache as
``Log.leader_epochs``, so a truncation keeps the two in step (truncation.py) and the
cache lives and goes with its log. Replicas count against ``max.broker.partitions``
like any partition, and a name held as a 0.7-style topic cannot hold replicas.

Thread-safety: :meth:`ReplicaLogs.replicas` and :meth:`ReplicaLogs.leader_epochs` read
the table's copy-on-write dictionaries and never block. :meth:`ReplicaLogs.create` and
:meth:`ReplicaLogs.delete` do their disk work on the calling thread (never the event
loop), one at a time (a lock of their own), and take the table's lock only to reserve,
publish or unpublish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType

import structlog

from rill.broker.log import loading
from rill.broker.log.leader_epochs import LeaderEpochCache
from rill.broker.log.log import Log
from rill.broker.log.log_config import Clock, LogConfig
from rill.broker.log.open_files import OpenFiles
from rill.broker.log.partition_table import PartitionTable
from rill.client.errors import InvalidRequest, StorageError, UnknownTopic, WrongPartition
from rill.client.topic_names import validate_topic

_logger = structlog.get_logger(__name__)


class ReplicaLogs:
    """The replicas of a data directory, kept in the manager's :class:`PartitionTable`.

    ``opened`` hooks a new log up to the manager (flusher, dirty set, listeners) and
    returns it; ``forget`` drops a deleted log from the manager's flush bookkeeping.
    """

    def __init__(self, table: PartitionTable, data_dir: str, config: Callable[[str], LogConfig], clock: Clock,
                 open_files: OpenFiles, max_topic_partitions: int, *, opened: Callable[[Log], Log],
                 forget: Callable[[Log], None]) -> None:
        self._table = table
        self._data_dir = data_dir
        self._config = config
        self._clock = clock
        self._open_files = open_files
        self._max_topic_partitions = max_topic_partitions
        self._opened = opened
        self._forget = forget
        self._lock = threading.Lock()

    def replicas(self) -> Mapping[tuple[str, int], Log]:
        """A read-only snapshot of ``{(topic, partition): log}`` of the replicas held here (O(1): copy-on-write)."""
        return MappingProxyType(self._table.replicas)

    def leader_epochs(self, topic: str, partition: int) -> LeaderEpochCache:
        """The leader-epoch cache of a replica held here (``Log.leader_epochs``; event-loop thread only).

        Raises:
            UnknownTopic: this broker holds no replica of ``topic``-``partition``.
        """
        log = self._table.replicas.get((topic, partition))
        if log is None or log.leader_epochs is None:
            raise UnknownTopic(f"this broker holds no replica of partition {partition!r} of topic {topic!r}")
        return log.leader_epochs

    def create(self, topic: str, partition: int) -> Log:
        """The log of this broker's replica of ``topic``-``partition``, made empty (no epochs) if needed.

        Idempotent. The directory is made durably with its empty ``leader-epoch-checkpoint``
        (loading.make_replica) on the calling thread, which must not be the event loop.

        Raises (the first four before anything touches the disk):
            InvalidTopic: an illegal name.
            WrongPartition: ``partition`` outside ``0 .. max_topic_partitions - 1``.
            InvalidRequest: ``topic`` is a 0.7-style topic here (or being created as one).
            PartitionLimitReached: the broker would hold more than ``max_partitions``.
            StorageError: the manager is closed, the directory exists unknown, or making it failed.
        """
        validate_topic(topic)
        if (isinstance(partition, bool) or not isinstance(partition, int)
                or not 0 <= partition < self._max_topic_partitions):
            raise WrongPartition(f"partition must be between 0 and {self._max_topic_partitions - 1} "
                                 f"(num.partitions.max), got {partition!r}")
        with self._lock:
            with self._table.lock:
                existing = self._table.replicas.get((topic, partition))
                if existing is not None:
                    return existing
                self._reserve(topic)
            log = None
            try:
                log = self._opened(loading.make_replica(self._data_dir, topic, partition, self._config(topic),
                                                        self._clock,
                                                        self._open_files))
            except OSError as exc:
                raise StorageError(f"creating replica {topic}-{partition} failed: {exc.strerror or exc}: "
                                   f"{exc.filename}") from exc
            finally:
                self._settle(topic, log)
        _logger.info("logs.replica_created", topic=topic, partition=partition)
        return log

    def _reserve(self, topic: str) -> None:
        """Check a new replica against the closed state, 0.7-style topics and the limit; count it (table locked)."""
        self._table.check_open()
        if topic in self._table.topics or topic in self._table.creating:
            raise InvalidRequest(f"topic {topic!r} is a local, Kafka 0.7-style topic on this broker: it cannot "
                                 f"also hold replicas of a replicated topic")
        self._table.reserve(1, f"a replica of {topic!r}")
        self._table.count_replicas(topic, 1)

    def _settle(self, topic: str, log: Log | None) -> None:
        """End a reservation: publish the new replica ``log``, or uncount a failed one (None).

        Raises:
            StorageError: the manager was closed meanwhile (the new log is closed, not published).
        """
        with self._table.lock:
            self._table.reserved -= 1
            closed = self._table.closed
            if log is not None and not closed:
                self._table.publish_replicas([log])
                return
            self._table.count_replicas(topic, -1)
        if log is not None:
            log.close()
            raise StorageError("the log manager is closed")

    def delete(self, topic: str, partition: int) -> bool:
        """Stop holding a replica moved away: unpublish it, release its files, rename its directory aside.

        The directory becomes ``<topic>-<partition>.<unix_ms>.deleted`` (durably; skipped at
        start-up, left for an operator). On the calling thread, never the event loop;
        appends to the log fail with StorageError from then on.

        Returns:
            True when a replica was deleted, False when none of ``topic``-``partition`` is held here.

        Raises:
            InvalidTopic: an illegal name. InvalidRequest: ``topic`` is a 0.7-style topic here.
            StorageError: the directory could not be renamed (the replica is unpublished anyway).
        """
        validate_topic(topic)
        with self._lock:
            with self._table.lock:
                log = self._table.replicas.get((topic, partition))
                if log is None:
                    if topic in self._table.topics:
                        raise InvalidRequest(f"topic {topic!r} is a local, Kafka 0.7-style topic: it has no replicas")
                    return False
                self._table.unpublish_replica(log)
            self._forget(log)
            log.abandon()
            try:
                aside = loading.set_replica_aside(self._data_dir, log.directory)
            except OSError as exc:
                raise StorageError(f"deleting replica {topic}-{partition}: cannot rename {log.directory}: "
                                   f"{exc.strerror or exc}") from exc
        _logger.info("logs.replica_deleted", topic=topic, partition=partition, directory=aside)
        return True
