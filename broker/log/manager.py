"""The log manager: every partition log under one data directory.

At start-up it takes an exclusive lock on ``<data_dir>/.lock`` (one broker per
directory), reads and removes the clean-shutdown marker (so a crash from now on is
detected), removes topics whose creation was interrupted (creator.py), then opens
every ``<topic>-<partition>`` directory. After a clean shutdown nothing is read but
the directory listings (indexes load when first used); after an unclean one each log
is recovered from its recovery point (checkpoint.py, recovery.py), and what recovery
kept is synced with one syncfs before anything is served. A partition named in the
marker (it had failed) is recovered even after a clean shutdown.

Two kinds of partition, in one :class:`PartitionTable` (partition_table.py): Kafka
0.7-style topics (``topics()``: every partition here, and registered in ZooKeeper the
0.7 way), created with their limits and reservations by local_topic_creation.py; and
replicas of replicated topics, some partitions of each (``replicas()``), created,
deleted and given their leader-epoch caches by replica_logs.py. A topic name is one
kind or the other on a broker. This class keeps their public methods and delegates;
``get`` finds both kinds; flushes, retention, checkpoints and close cover both.

Descriptors: every log shares one :class:`OpenFiles` cache (``log.open.files.max``).

Garbage collection: each log is a few dozen Python objects that live as long as the
broker. At 100,000 partitions that is two million objects, and each full pass of
Python's cyclic collector over them held the GIL for 0.6 s (every client waited).
After every ``FREEZE_EVERY`` logs opened, ``gc.freeze()`` (O(1)) moves everything
alive to the permanent generation, which the collector never traverses; objects of
requests and connections come and go as before.

Integrity: a :class:`~rill.broker.log.scrubber.Scrubber` re-checks every segment in the
background (``log.scrub.*``); corrupt ranges it or a read finds go to the
``on_corruption`` listeners.

:meth:`LogManager.close` flushes what is unflushed (with one ``syncfs`` for all of
them, batch_sync.py), writes the recovery-point checkpoint, and writes the clean-shutdown marker,
listing the partitions that had failed (their next start recovers them). It does not
raise for a failed partition: a stop after a storage failure is still a clean stop.

Thread-safety: :meth:`get`, :meth:`topics`, :meth:`replicas` and
:meth:`create_topic_async` read copy-on-write dictionaries and never block on the
background threads; creating a topic takes the table's short lock to reserve its
partitions, and the work runs on the creator's thread; :meth:`create_replica` and
:meth:`delete_replica` do their disk work on the calling thread (never the event
loop), one at a time; :meth:`flush_due` (over the dirty set, dirty_logs.py),
:meth:`run_retention` and :meth:`housekeeping` are called by the :class:`Flusher`
thread (started by :meth:`start`), and the
recovery-point checkpoint is also rewritten on the event loop after a truncation
(its writes are serialised by a lock). The
``on_topic_created`` listeners are called, outside the lock, on the thread that
published a new topic: they should only post work elsewhere.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from types import MappingProxyType

import structlog

from rill.broker.log import batch_sync, checkpoint, creator, files, loading
from rill.broker.log.dirty_logs import DirtyLogs
from rill.broker.log.flusher import Flusher
from rill.broker.log.integrity import CorruptRange
from rill.broker.log.leader_epochs import LeaderEpochCache
from rill.broker.log.log import Log
from rill.broker.log.log_config import Clock, LogConfig
from rill.broker.log.open_files import OpenFiles
from rill.broker.log.partition_table import PartitionTable
from rill.broker.log.replica_logs import ReplicaLogs
from rill.broker.log.retention import apply_retention
from rill.broker.log.scrubber import Scrubber
from rill.broker.log.local_topic_creation import TopicCreations
from rill.broker.log.local_topic_deletion import delete_local_topic
from rill.client.errors import InvalidTopic, StorageError, UnknownTopic, WrongPartition
from rill.client.topic_names import is_valid_topic

FREEZE_EVERY = 1000  # logs opened between two gc.freeze() calls
IDLE_FILES_CHECK_S = 5.0
_logger = structlog.get_logger(__name__)


class LogManager:
    """Opens, creates, flushes, retains and closes the logs of a data directory.

    Raises (constructor):
        ValueError: ``num_partitions`` outside 1 .. ``max_topic_partitions``.
        StorageError: another process holds the data directory, or a log failed to open
            (``CorruptLogError`` for corruption in the middle of a log).
    """

    def __init__(self, data_dir: str, config: LogConfig | None = None, num_partitions: int = 1,
                 clock: Clock = time, truncate_corrupt: bool = False, *, max_topic_partitions: int = 10_000,
                 max_partitions: int = 100_000, open_files: OpenFiles | None = None,
                 scrub_bytes_per_second: int = 0, scrub_interval_s: float = 168 * 3600,
                 topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        if not 1 <= num_partitions <= max_topic_partitions:
            raise ValueError(f"num_partitions must be between 1 and {max_topic_partitions}, got {num_partitions}")
        self.data_dir = os.path.realpath(data_dir)
        self.config = config if config is not None else LogConfig()
        self.topic_configs = dict(topic_configs or {})
        """Settings of particular topics (the internal groups topic keeps everything), else :attr:`config`."""
        self.num_partitions = num_partitions
        self.max_topic_partitions = max_topic_partitions
        self.max_partitions = max_partitions
        self.clock = clock
        self.open_files = open_files if open_files is not None else OpenFiles()
        self._truncate_corrupt = truncate_corrupt
        self._table = PartitionTable(max_partitions)
        self._dirty = DirtyLogs(self.data_dir)
        self._flushes_since_checkpoint = 0
        self._checkpoint_lock = threading.Lock()
        self._opened_count = 0
        self._next_checkpoint = clock.time() + self.config.recovery_point_interval_ms / 1000
        self._next_idle_check = clock.time() + IDLE_FILES_CHECK_S
        self._flusher = Flusher(self)
        self._flusher_started = False
        self.scrubber = Scrubber(self.logs, scrub_bytes_per_second, scrub_interval_s) if scrub_bytes_per_second else None
        """The background checker of every segment (None when log.scrub.enable is false)."""
        self._creator = creator.TopicCreator(self.data_dir)
        self._creations = TopicCreations(self._table, self._creator, num_partitions, max_topic_partitions,
                                         open_new=self._open_new, published=self._topic_published)
        self._replica_logs = ReplicaLogs(self._table, self.data_dir, self.config_for, clock, self.open_files,
                                         max_topic_partitions, opened=self._opened, forget=self._dirty.discard)
        self.on_topic_created: list[Callable[[str, int], object]] = []
        """Called with (topic, partition count) after a new topic is published."""
        self.on_topic_deleted: list[Callable[[str], object]] = []
        """Called with the topic after a 0.7-style topic is deleted (:meth:`delete_topic`), on the deleting thread."""
        self.on_corruption: list[Callable[[Log, CorruptRange], object]] = []
        """Called with each corrupt range a read or the scrubber finds (the hook for repair from a replica)."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._lock_fd = loading.lock_directory(self.data_dir)
        try:
            self.clean_start, self._must_recover = loading.take_clean_marker(self.data_dir)
            self._load_all()
        except BaseException:
            for log in self.logs():
                log.abandon()
            self._creator.stop()
            os.close(self._lock_fd)
            raise

    def config_for(self, topic: str) -> LogConfig:
        """The settings of ``topic``'s logs."""
        return self.topic_configs.get(topic, self.config)

    # -- start-up ------------------------------------------------------------------------

    def _load_all(self) -> None:
        found = loading.partition_directories(self.data_dir)
        local, replicas = loading.split_replicas(found)
        points = None if self.clean_start else checkpoint.read_checkpoint(self.data_dir)
        if found and not self.clean_start:
            _logger.warning("recovery.unclean_shutdown", data_dir=self.data_dir,
                            detail="no clean-shutdown marker: recovering every log from its recovery point")
        started = time.monotonic()
        for topic in sorted(local):
            self._table.publish_topic(topic, [self._opened(log) for log in loading.load_topic(
                topic, local[topic], self.data_dir, self.config, self.clock, open_files=self.open_files,
                clean_start=self.clean_start, must_recover=self._must_recover, points=points,
                truncate_corrupt=self._truncate_corrupt)])
        for topic in sorted(replicas):
            logs = [self._opened(log) for log in loading.load_replicas(
                topic, replicas[topic], self.config_for(topic), self.clock, open_files=self.open_files,
                clean_start=self.clean_start, must_recover=self._must_recover, points=points,
                truncate_corrupt=self._truncate_corrupt)]
            self._table.count_replicas(topic, len(logs))
            self._table.publish_replicas(logs)
        loading.sync_recovered(self.logs(), self.data_dir)
        loading.report_recovery(self.logs(), time.monotonic() - started)
        table = self._table
        if table.logs and (not self.clean_start or self._must_recover):
            self.write_checkpoint()  # recovery synced what it kept: a crash now need not scan it again
        _logger.info("logs.loaded", data_dir=self.data_dir, topics=len(table.topics), partitions=len(table.logs),
                     replicas=len(table.replicas), clean_start=self.clean_start, open_files=len(self.open_files))

    def _opened(self, log: Log) -> Log:
        self._opened_count += 1
        if self._opened_count % FREEZE_EVERY == 0:
            gc.freeze()  # logs live as long as the broker: keep the cyclic collector off them (module docstring)
        log.flush_signal = self._wake_flusher
        log.on_dirty = self._dirty.add
        log.on_truncated = self._truncated
        log.on_corruption = self._corruption_found
        return log

    def _corruption_found(self, log: Log, corrupt: CorruptRange) -> None:
        for listener in self.on_corruption:
            try:
                listener(log, corrupt)
            except Exception:  # a listener's bug must not fail the read that found it
                _logger.exception("logs.corruption_listener_failed", file=corrupt.path)

    def _open_new(self, topic: str, partition: int, directory: str) -> Log:
        """Open the log of a partition directory just created (the creator's thread)."""
        return self._opened(Log.load(directory, topic, partition, self.config, self.clock, new=True,
                                     open_files=self.open_files))

    def _topic_published(self, topic: str, partitions: int) -> None:
        """Tell the ``on_topic_created`` listeners of a new topic (the creator's thread, no lock held)."""
        for listener in self.on_topic_created:
            listener(topic, partitions)

    def start(self) -> None:
        """Start the background flusher (flush by time and count, retention). Idempotent."""
        with self._table.lock:
            if not self._flusher_started and not self._table.closed:
                self._flusher_started = True
                self._flusher.start()
                if self.scrubber is not None:
                    self.scrubber.start()

    @property
    def flusher(self) -> Flusher:
        """The background flusher (for ``flush_soon``); it runs once :meth:`start` was called."""
        return self._flusher

    def _wake_flusher(self) -> None:
        self._flusher.wake()

    def _truncated(self, log: Log) -> None:
        """After a truncation (event loop): rewrite the checkpoint now, so no recovery point is above a cut."""
        self.write_checkpoint()


    # -- topics and replicas (local_topic_creation.py, replica_logs.py) --------------------------

    @property
    def partition_count(self) -> int:
        """Partitions of every topic and replica, including those being created."""
        return self._table.partition_count

    def create_topic_async(self, topic: str, partitions: int) -> Future[int]:
        """Start creating 0.7-style ``topic``; the future gives the count (:meth:`TopicCreations.create_async`)."""
        return self._creations.create_async(topic, partitions)

    def create_topic(self, topic: str, partitions: int, timeout: float | None = None) -> None:
        """Create ``topic`` and wait for it, off the event loop (:meth:`TopicCreations.create`)."""
        self._creations.create(topic, partitions, timeout)

    def delete_topic(self, topic: str) -> int:
        """Delete the 0.7-style ``topic`` (local_topic_deletion.py); returns its partition count. Not on the loop."""
        known = topic in self._table.topics
        try:
            return delete_local_topic(self._table, self.data_dir, topic, self._dirty.discard)
        finally:
            if known and topic not in self._table.topics:  # unpublished, even if a rename failed
                for listener in self.on_topic_deleted:
                    listener(topic)

    def ensure_topic_async(self, topic: str) -> Future[int]:
        """The partition count of ``topic``, auto-creating it if needed (:meth:`TopicCreations.ensure_async`)."""
        return self._creations.ensure_async(topic)

    def get_or_create(self, topic: str, timeout: float | None = None) -> int:
        """The partition count of ``topic``, auto-creating it and waiting if needed (:meth:`TopicCreations.ensure`)."""
        return self._creations.ensure(topic, timeout)

    def get(self, topic: str, partition: int) -> Log:
        """The log of a partition (of a 0.7-style topic or a replica).

        Raises:
            InvalidTopic: an illegal name. UnknownTopic: no such topic.
            WrongPartition: the partition is outside ``0 .. count-1``.
        """
        table = self._table
        log = table.logs.get((topic, partition))
        if log is not None:
            return log
        count = table.topics.get(topic)
        if count is None:
            if not isinstance(topic, str) or not is_valid_topic(topic):
                raise InvalidTopic(f"invalid topic name {topic!r}")
            if topic in table.replica_topics:
                raise UnknownTopic(f"this broker holds no replica of partition {partition!r} of topic {topic!r}")
            raise UnknownTopic(f"unknown topic {topic!r}")
        raise WrongPartition(f"topic {topic!r} has partitions 0..{count - 1}, not {partition!r}")

    def topics(self) -> Mapping[str, int]:
        """A read-only snapshot of ``{topic: partition count}`` of the 0.7-style topics (O(1): copy-on-write).

        Replicas of replicated topics are not in it (see :meth:`replicas`).
        """
        return MappingProxyType(self._table.topics)

    def replicas(self) -> Mapping[tuple[str, int], Log]:
        """A read-only snapshot of ``{(topic, partition): log}`` of the replicas held here (O(1): copy-on-write)."""
        return self._replica_logs.replicas()

    def leader_epochs(self, topic: str, partition: int) -> LeaderEpochCache:
        """The leader-epoch cache of a replica held here (:meth:`ReplicaLogs.leader_epochs`)."""
        return self._replica_logs.leader_epochs(topic, partition)

    def create_replica(self, topic: str, partition: int) -> Log:
        """The log of this broker's replica of ``topic``-``partition``, made if needed (:meth:`ReplicaLogs.create`)."""
        return self._replica_logs.create(topic, partition)

    def delete_replica(self, topic: str, partition: int) -> bool:
        """Stop holding a replica; False when none is held here (:meth:`ReplicaLogs.delete`)."""
        return self._replica_logs.delete(topic, partition)

    @property
    def dirty_count(self) -> int:
        """How many logs wait for the flusher (its backlog)."""
        return len(self._dirty)

    def logs(self) -> list[Log]:
        """Every open log (a snapshot)."""
        return list(self._table.logs.values())

    # -- background work -------------------------------------------------------------------

    def flush_due(self, now: float) -> int:
        """Flush the logs of the dirty set that need it (dirty_logs.py); return how many were flushed."""
        flushed = self._dirty.flush_due(now)
        self._flushes_since_checkpoint += flushed
        return flushed

    def flush_all(self) -> None:
        """Flush every log.

        Raises:
            StorageError: some log could not be flushed (the others were).
        """
        errors = []
        for log in self.logs():
            try:
                log.flush()
            except StorageError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def run_retention(self, now: float) -> int:
        """Apply retention to every log; return the number of segments deleted."""
        now_ms = int(now * 1000)
        return sum(len(apply_retention(log, now_ms)) for log in self.logs())

    def housekeeping(self, now: float) -> None:
        """Checkpoint recovery points every ``recovery_point_interval_ms``; close idle files."""
        if now >= self._next_checkpoint:
            self._next_checkpoint = now + self.config.recovery_point_interval_ms / 1000
            if self._flushes_since_checkpoint:
                self._flushes_since_checkpoint = 0
                self.write_checkpoint()
        if now >= self._next_idle_check:
            self._next_idle_check = now + IDLE_FILES_CHECK_S
            self.open_files.close_idle()

    def write_checkpoint(self) -> None:
        """Write every log's flushed offset to the recovery-point checkpoint (logged, never raised).

        Called by the flusher thread and, after a truncation, by the event loop: a lock
        serialises the writers, and each reads the offsets under it, so the last write
        holds the newest ones.
        """
        try:
            with self._checkpoint_lock:
                checkpoint.write_checkpoint(self.data_dir, {(log.topic, log.partition): log.flushed_offset
                                                            for log in self.logs()})
        except OSError as exc:
            _logger.error("recovery.checkpoint_failed", file=checkpoint.checkpoint_path(self.data_dir),
                          error=exc.strerror or str(exc),
                          detail="the previous checkpoint stays: a crash would recover more than needed")

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Stop the background threads, flush and close every log, write the checkpoint and the marker.

        Unflushed logs are flushed together (one syncfs). A partition that failed (now or before)
        is logged and named in the clean-shutdown marker, so the next start recovers it;
        the others start clean. Idempotent.

        Returns:
            The failed partitions, as ``<topic>-<partition>`` (empty when all is well).
        """
        with self._table.lock:
            if self._table.closed:
                return []
            self._table.closed = True
        self._flusher.stop()
        if self.scrubber is not None:
            self.scrubber.stop()
        self._creator.stop()
        logs = self.logs()
        batch_sync.flush_together([log for log in logs if log.has_unflushed], self.data_dir)
        for log in logs:
            _close_quietly(log)
        failed = [log for log in logs if log.failed is not None]
        self.write_checkpoint()
        self.open_files.close_all()
        try:
            marker = "".join(f"{log.topic} {log.partition}\n" for log in failed).encode()
            files.write_file_durably(os.path.join(self.data_dir, files.CLEAN_SHUTDOWN_MARKER), marker)
            if failed:
                _logger.error("logs.closed_with_failed_partitions", data_dir=self.data_dir,
                              partitions=[f"{log.topic}-{log.partition}" for log in failed],
                              detail="they are recovered from their recovery point at the next start")
            else:
                _logger.info("logs.closed_cleanly", data_dir=self.data_dir)
        except OSError as exc:
            _logger.error("logs.marker_failed", file=os.path.join(self.data_dir, files.CLEAN_SHUTDOWN_MARKER),
                          error=exc.strerror or str(exc), detail="the next start recovers every log")
        finally:
            os.close(self._lock_fd)
        return [f"{log.topic}-{log.partition}" for log in failed]


def _close_quietly(log: Log) -> None:
    try:
        log.close()
    except StorageError as exc:  # the log is failed now; close() reports it with the others
        _logger.error("log.close_failed", topic=log.topic, partition=log.partition, error=str(exc))

