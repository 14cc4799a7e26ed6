"""The log manager: every partition log under one data directory.

At start-up it takes an exclusive lock on ``<data_dir>/.lock`` (one broker per
directory), reads and removes the clean-shutdown marker (so a crash from now on is
detected), removes topics whose creation was interrupted (creator.py), then opens
every ``<topic>-<partition>`` directory. After a clean shutdown nothing is read but
the directory listings (indexes load when first used); after an unclean one each log
is recovered from its recovery point (checkpoint.py, recovery.py), and what recovery
kept is synced with one syncfs before anything is served. A partition named in the
marker (it had failed) is recovered even after a clean shutdown.

Limits (one definition for every way of creating a topic, data plane and gRPC): a
topic has 1 .. ``max_topic_partitions`` partitions (``num.partitions.max``), and the
broker holds at most ``max_partitions`` (``max.broker.partitions``), topics and
replicas being created included. Both are checked before anything touches the disk.

Replicas: besides Kafka 0.7-style topics (``topics()``: every partition here, and
registered in ZooKeeper the 0.7 way) the broker holds replicas of replicated topics,
some partitions of each (``replicas()``), made by :meth:`LogManager.create_replica`
and recognised at start-up by their ``leader-epoch-checkpoint`` (loading.py). A
replica's log carries its leader-epoch cache as ``Log.leader_epochs``, so a
truncation keeps the two in step (truncation.py) and the cache lives and goes with
its log. A topic name is one kind or the other on a broker. ``get`` finds both kinds;
flushes, retention, checkpoints and close cover both.

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
background threads; creating a topic takes a short lock to reserve its partitions,
and the work runs on the creator's thread; :meth:`create_replica` and
:meth:`delete_replica` do their disk work on the calling thread (never the event
loop), one at a time; :meth:`flush_due`, :meth:`run_retention` and :meth:`housekeeping`
are called by the :class:`Flusher` thread (started by :meth:`start`), and the
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
from rill.broker.log.flusher import Flusher
from rill.broker.log.integrity import CorruptRange
from rill.broker.log.leader_epochs import LeaderEpochCache
from rill.broker.log.log import Log
from rill.broker.log.log_config import Clock, LogConfig
from rill.broker.log.open_files import OpenFiles
from rill.broker.log.retention import apply_retention
from rill.broker.log.scrubber import Scrubber
from rill.client.errors import (InvalidPartitions, InvalidRequest, InvalidTopic, PartitionLimitReached, StorageError,
                                UnknownTopic, WrongPartition)
from rill.client.topic_names import is_valid_topic, validate_topic

FREEZE_EVERY = 1000  # logs opened between two gc.freeze() calls
BATCH_SYNC_MIN = 64  # logs due at once from which one syncfs replaces an fsync each
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
                 scrub_bytes_per_second: int = 0, scrub_interval_s: float = 168 * 3600) -> None:
        if not 1 <= num_partitions <= max_topic_partitions:
            raise ValueError(f"num_partitions must be between 1 and {max_topic_partitions}, got {num_partitions}")
        self.data_dir = os.path.realpath(data_dir)
        self.config = config if config is not None else LogConfig()
        self.num_partitions = num_partitions
        self.max_topic_partitions = max_topic_partitions
        self.max_partitions = max_partitions
        self.clock = clock
        self.open_files = open_files if open_files is not None else OpenFiles()
        self._truncate_corrupt = truncate_corrupt
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._topics: dict[str, int] = {}
        self._replicas: dict[tuple[str, int], Log] = {}
        self._replica_topics: dict[str, int] = {}
        """Replicas held or being created, per topic (copy-on-write): such a name is no 0.7-style topic."""
        self._replica_lock = threading.Lock()
        self._creating: dict[str, tuple[int, Future[int]]] = {}
        self._reserved = 0
        self._dirty_lock = threading.Lock()
        self._dirty: set[Log] = set()
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
        self._closed = False
        self.on_topic_created: list[Callable[[str, int], object]] = []
        """Called with (topic, partition count) after a new topic is published."""
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
            self._publish(topic, [self._opened(log) for log in loading.load_topic(
                topic, local[topic], self.data_dir, self.config, self.clock, open_files=self.open_files,
                clean_start=self.clean_start, must_recover=self._must_recover, points=points,
                truncate_corrupt=self._truncate_corrupt)])
        for topic in sorted(replicas):
            logs = [self._opened(log) for log in loading.load_replicas(
                topic, replicas[topic], self.config, self.clock, open_files=self.open_files,
                clean_start=self.clean_start, must_recover=self._must_recover, points=points,
                truncate_corrupt=self._truncate_corrupt)]
            self._count_replicas(topic, len(logs))
            self._publish_replicas(logs)
        loading.sync_recovered(self.logs(), self.data_dir)
        loading.report_recovery(self.logs(), time.monotonic() - started)
        if self._logs and (not self.clean_start or self._must_recover):
            self.write_checkpoint()  # recovery synced what it kept: a crash now need not scan it again
        _logger.info("logs.loaded", data_dir=self.data_dir, topics=len(self._topics), partitions=len(self._logs),
                     replicas=len(self._replicas), clean_start=self.clean_start, open_files=len(self.open_files))

    def _opened(self, log: Log) -> Log:
        self._opened_count += 1
        if self._opened_count % FREEZE_EVERY == 0:
            gc.freeze()  # logs live as long as the broker: keep the cyclic collector off them (module docstring)
        log.flush_signal = self._wake_flusher
        log.on_dirty = self._add_dirty
        log.on_truncated = self._truncated
        log.on_corruption = self._corruption_found
        return log

    def _corruption_found(self, log: Log, corrupt: CorruptRange) -> None:
        for listener in self.on_corruption:
            try:
                listener(log, corrupt)
            except Exception:  # a listener's bug must not fail the read that found it
                _logger.exception("logs.corruption_listener_failed", file=corrupt.path)

    def _publish(self, topic: str, logs: list[Log]) -> None:
        """Swap in new dictionaries (copy-on-write) holding ``topic``'s logs."""
        self._logs = {**self._logs, **{(topic, log.partition): log for log in logs}}
        self._topics = {**self._topics, topic: len(logs)}

    def _publish_replicas(self, logs: list[Log]) -> None:
        """Swap in new dictionaries (copy-on-write) holding the replica ``logs`` (counted already)."""
        added = {(log.topic, log.partition): log for log in logs}
        self._logs = {**self._logs, **added}
        self._replicas = {**self._replicas, **added}

    def _count_replicas(self, topic: str, delta: int) -> None:
        """Change the replicas counted for ``topic`` (copy-on-write; under ``_lock`` after start-up)."""
        counts = dict(self._replica_topics)
        counts[topic] = counts.get(topic, 0) + delta
        if counts[topic] <= 0:
            del counts[topic]
        self._replica_topics = counts

    def start(self) -> None:
        """Start the background flusher (flush by time and count, retention). Idempotent."""
        with self._lock:
            if not self._flusher_started and not self._closed:
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

    def _add_dirty(self, log: Log) -> None:
        with self._dirty_lock:
            self._dirty.add(log)

    # -- topics ---------------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        """Partitions of every topic, including those being created."""
        return len(self._logs) + self._reserved

    def create_topic_async(self, topic: str, partitions: int) -> Future[int]:
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
                or not 1 <= partitions <= self.max_topic_partitions):
            raise InvalidPartitions(f"partition count must be between 1 and {self.max_topic_partitions} "
                                    f"(num.partitions.max), got {partitions!r}")
        with self._lock:
            if self._closed:
                raise StorageError("the log manager is closed")
            if topic in self._replica_topics:
                raise InvalidRequest(f"topic {topic!r} is a replicated topic on this broker (it holds replicas of "
                                     f"it): it cannot also be a local, Kafka 0.7-style topic")
            existing = self._topics.get(topic)
            pending = self._creating.get(topic)
            if existing is None and pending is not None:
                existing, future = pending
            else:
                future = None
            if existing is not None:
                if existing != partitions:
                    raise InvalidRequest(f"topic {topic!r} already exists with {existing} partitions")
                return future if future is not None else _done(existing)
            if self.partition_count + partitions > self.max_partitions:
                raise PartitionLimitReached(
                    f"creating {topic!r} with {partitions} partitions would exceed max.broker.partitions "
                    f"({self.max_partitions}); the broker holds {self.partition_count}")
            self._reserved += partitions
            future = self._creator.submit(topic, partitions, self._open_new, lambda logs: self._finish(topic, logs),
                                          Log.abandon)
            self._creating[topic] = (partitions, future)
        future.add_done_callback(lambda f: self._release(topic, partitions))
        return future

    def _open_new(self, topic: str, partition: int, directory: str) -> Log:
        return self._opened(Log.load(directory, topic, partition, self.config, self.clock, new=True,
                                     open_files=self.open_files))

    def _finish(self, topic: str, logs: list[Log]) -> None:
        """Publish a created topic (creator thread), then tell the listeners."""
        with self._lock:
            self._publish(topic, logs)
            self._reserved -= len(logs)
            self._creating.pop(topic, None)
        _logger.info("logs.topic_created", topic=topic, partitions=len(logs))
        for listener in self.on_topic_created:
            listener(topic, len(logs))

    def _release(self, topic: str, partitions: int) -> None:
        """After a creation ended: give back the reservation of one that failed."""
        with self._lock:
            entry = self._creating.get(topic)
            if entry is not None and entry[1].done():
                del self._creating[topic]
                self._reserved -= partitions

    def create_topic(self, topic: str, partitions: int, timeout: float | None = None) -> None:
        """Create ``topic`` and wait for it (callers off the event loop: gRPC, tests).

        Raises: as :meth:`create_topic_async`, and StorageError when the creation failed on disk.
        """
        _wait(self.create_topic_async(topic, partitions), timeout)

    def ensure_topic_async(self, topic: str) -> Future[int]:
        """The partition count of ``topic``, creating it with ``num_partitions`` if needed (auto-create).

        Raises: as :meth:`create_topic_async`.
        """
        count = self._topics.get(topic)
        if count is not None:
            return _done(count)
        with self._lock:
            pending = self._creating.get(topic)
        if pending is not None:
            return pending[1]
        try:
            return self.create_topic_async(topic, self.num_partitions)
        except InvalidRequest:  # created meanwhile with another count: use it (unless it is a replicated topic)
            count = self._topics.get(topic)
            if count is None:
                raise
            return _done(count)

    def get_or_create(self, topic: str, timeout: float | None = None) -> int:
        """The partition count of ``topic``, creating it with ``num_partitions`` and waiting if needed.

        Raises: as :meth:`ensure_topic_async`; StorageError when the creation failed on disk.
        """
        return _wait(self.ensure_topic_async(topic), timeout)

    def get(self, topic: str, partition: int) -> Log:
        """The log of a partition.

        Raises:
            InvalidTopic: an illegal name. UnknownTopic: no such topic.
            WrongPartition: the partition is outside ``0 .. count-1``.
        """
        log = self._logs.get((topic, partition))
        if log is not None:
            return log
        count = self._topics.get(topic)
        if count is None:
            if not isinstance(topic, str) or not is_valid_topic(topic):
                raise InvalidTopic(f"invalid topic name {topic!r}")
            if topic in self._replica_topics:
                raise UnknownTopic(f"this broker holds no replica of partition {partition!r} of topic {topic!r}")
            raise UnknownTopic(f"unknown topic {topic!r}")
        raise WrongPartition(f"topic {topic!r} has partitions 0..{count - 1}, not {partition!r}")

    def topics(self) -> Mapping[str, int]:
        """A read-only snapshot of ``{topic: partition count}`` of the 0.7-style topics (O(1): copy-on-write).

        Replicas of replicated topics are not in it (see :meth:`replicas`).
        """
        return MappingProxyType(self._topics)

    # -- replicas of replicated topics ----------------------------------------------------

    def replicas(self) -> Mapping[tuple[str, int], Log]:
        """A read-only snapshot of ``{(topic, partition): log}`` of the replicas held here (O(1): copy-on-write)."""
        return MappingProxyType(self._replicas)

    def leader_epochs(self, topic: str, partition: int) -> LeaderEpochCache:
        """The leader-epoch cache of a replica held here (``Log.leader_epochs``; event-loop thread only).

        Raises:
            UnknownTopic: this broker holds no replica of ``topic``-``partition``.
        """
        log = self._replicas.get((topic, partition))
        if log is None or log.leader_epochs is None:
            raise UnknownTopic(f"this broker holds no replica of partition {partition!r} of topic {topic!r}")
        return log.leader_epochs

    def create_replica(self, topic: str, partition: int) -> Log:
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
                or not 0 <= partition < self.max_topic_partitions):
            raise WrongPartition(f"partition must be between 0 and {self.max_topic_partitions - 1} "
                                 f"(num.partitions.max), got {partition!r}")
        with self._replica_lock:
            with self._lock:
                existing = self._replicas.get((topic, partition))
                if existing is not None:
                    return existing
                self._reserve_replica(topic)
            log = None
            try:
                log = self._opened(loading.make_replica(self.data_dir, topic, partition, self.config, self.clock,
                                                        self.open_files))
            except OSError as exc:
                raise StorageError(f"creating replica {topic}-{partition} failed: {exc.strerror or exc}: "
                                   f"{exc.filename}") from exc
            finally:
                self._settle_replica(topic, log)
        _logger.info("logs.replica_created", topic=topic, partition=partition)
        return log

    def _reserve_replica(self, topic: str) -> None:
        """Check a new replica against the closed state, 0.7-style topics and the limit; count it (under ``_lock``)."""
        if self._closed:
            raise StorageError("the log manager is closed")
        if topic in self._topics or topic in self._creating:
            raise InvalidRequest(f"topic {topic!r} is a local, Kafka 0.7-style topic on this broker: it cannot "
                                 f"also hold replicas of a replicated topic")
        if self.partition_count + 1 > self.max_partitions:
            raise PartitionLimitReached(f"a replica of {topic!r} would exceed max.broker.partitions "
                                        f"({self.max_partitions}); the broker holds {self.partition_count}")
        self._reserved += 1
        self._count_replicas(topic, 1)

    def _settle_replica(self, topic: str, log: Log | None) -> None:
        """End a reservation: publish the new replica ``log``, or uncount a failed one (None).

        Raises:
            StorageError: the manager was closed meanwhile (the new log is closed, not published).
        """
        with self._lock:
            self._reserved -= 1
            closed = self._closed
            if log is not None and not closed:
                self._publish_replicas([log])
                return
            self._count_replicas(topic, -1)
        if log is not None:
            log.close()
            raise StorageError("the log manager is closed")

    def delete_replica(self, topic: str, partition: int) -> bool:
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
        key = (topic, partition)
        with self._replica_lock:
            with self._lock:
                log = self._replicas.get(key)
                if log is None:
                    if topic in self._topics:
                        raise InvalidRequest(f"topic {topic!r} is a local, Kafka 0.7-style topic: it has no replicas")
                    return False
                self._logs = {k: v for k, v in self._logs.items() if k != key}
                self._replicas = {k: v for k, v in self._replicas.items() if k != key}
                self._count_replicas(topic, -1)
            with self._dirty_lock:
                self._dirty.discard(log)
            log.abandon()
            try:
                aside = loading.set_replica_aside(self.data_dir, log.directory)
            except OSError as exc:
                raise StorageError(f"deleting replica {topic}-{partition}: cannot rename {log.directory}: "
                                   f"{exc.strerror or exc}") from exc
        _logger.info("logs.replica_deleted", topic=topic, partition=partition, directory=aside)
        return True

    def logs(self) -> list[Log]:
        """Every open log (a snapshot)."""
        return list(self._logs.values())

    # -- background work -------------------------------------------------------------------

    def flush_due(self, now: float) -> int:
        """Flush the logs that need it (``Log.needs_flush``); return how many were flushed.

        Only logs with unflushed data are looked at: a log puts itself in the dirty set
        on its first append after a flush, and stays there while it has unflushed data.
        From ``BATCH_SYNC_MIN`` logs due at once, one syncfs flushes them all.
        """
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        still: list[Log] = []
        due = []
        for log in dirty:
            log.in_dirty_set = False  # before looking at its data: an append from now on re-adds it
            if log.needs_flush(now):
                due.append(log)
        if len(due) >= BATCH_SYNC_MIN:
            failed = set(batch_sync.flush_together(due, self.data_dir))
        else:
            failed = set()
            for log in due:
                try:
                    log.flush()
                except StorageError as exc:
                    failed.add(log)
                    _logger.error("log.flush_failed", topic=log.topic, partition=log.partition, error=str(exc))
        flushed = len(due) - len(failed)
        for log in dirty:
            if log.has_unflushed and log.failed is None and not log.in_dirty_set:
                log.in_dirty_set = True
                still.append(log)
        if still:
            with self._dirty_lock:
                self._dirty.update(still)
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
        with self._lock:
            if self._closed:
                return []
            self._closed = True
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


def _done(count: int) -> Future[int]:
    future: Future[int] = Future()
    future.set_result(count)
    return future


def _wait(future: Future[int], timeout: float | None) -> int:
    try:
        return future.result(timeout)
    except OSError as exc:
        raise StorageError(f"creating the topic failed: {exc.strerror or exc}: {exc.filename}") from exc
