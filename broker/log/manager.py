"""The log manager: every partition log under one data directory.

At start-up it takes an exclusive lock on ``<data_dir>/.lock`` (one broker per
directory), notes whether the clean-shutdown marker is present and removes it (so a
crash from now on is detected), then opens every ``<topic>-<partition>`` directory:
with the marker, indexes are checked but nothing is scanned; without it, each log is
recovered from its recovery point (recovery.py). :meth:`LogManager.close` flushes
everything and writes the marker (fsynced) only if every log closed cleanly.

Thread-safety: :meth:`get`, :meth:`topics` and :meth:`get_or_create` read
copy-on-write dictionaries and never block on the background thread; creating a
topic takes a short lock; :meth:`flush_due` and :meth:`run_retention` are called by
the :class:`Flusher` thread (started by :meth:`start`). The ``on_topic_created``
listeners are called, outside the lock, on the thread that created a new topic:
they should only post work elsewhere.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

import structlog

from rill.broker.log import files
from rill.broker.log.config import Clock, LogConfig
from rill.broker.log.flusher import Flusher
from rill.broker.log.log import Log
from rill.broker.log.retention import apply_retention
from rill.client.errors import InvalidRequest, InvalidTopic, StorageError, UnknownTopic, WrongPartition
from rill.client.topics import is_valid_topic, validate_topic

MAX_PARTITIONS = 100_000
LOCK_FILE = ".lock"
_logger = structlog.get_logger(__name__)


class LogManager:
    """Opens, creates, flushes, retains and closes the logs of a data directory.

    Raises (constructor):
        StorageError: another process holds the data directory, or a log failed to open
            (``CorruptLogError`` for corruption in the middle of a log).
    """

    def __init__(self, data_dir: str, config: LogConfig | None = None, num_partitions: int = 1,
                 clock: Clock = time, truncate_corrupt: bool = False) -> None:
        if num_partitions < 1 or num_partitions > MAX_PARTITIONS:
            raise ValueError(f"num_partitions must be between 1 and {MAX_PARTITIONS}, got {num_partitions}")
        self.data_dir = os.path.realpath(data_dir)
        self.config = config if config is not None else LogConfig()
        self.num_partitions = num_partitions
        self.clock = clock
        self._truncate_corrupt = truncate_corrupt
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._topics: dict[str, int] = {}
        self._flusher = Flusher(self)
        self._flusher_started = False
        self._closed = False
        self.on_topic_created: list[Callable[[str, int], object]] = []
        """Called with (topic, partition count) after a new topic is published."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._lock_fd = _lock_directory(self.data_dir)
        try:
            self.clean_start = _take_clean_marker(self.data_dir)
            self._load_all()
        except BaseException:
            self._close_logs()
            os.close(self._lock_fd)
            raise

    # -- start-up ------------------------------------------------------------------------

    def _load_all(self) -> None:
        found: dict[str, set[int]] = {}
        for name in sorted(os.listdir(self.data_dir)):
            parsed = files.parse_partition_dir_name(name)
            if parsed is None or not os.path.isdir(os.path.join(self.data_dir, name)):
                if not name.startswith("."):
                    _logger.warning("logs.unexpected_entry", name=name, data_dir=self.data_dir)
                continue
            found.setdefault(parsed[0], set()).add(parsed[1])
        if found and not self.clean_start:
            _logger.warning("recovery.unclean_shutdown", data_dir=self.data_dir,
                            detail="no clean-shutdown marker: recovering every log from its recovery point")
        for topic, partitions in found.items():
            count = max(partitions) + 1
            if len(partitions) != count:
                _logger.warning("logs.missing_partitions", topic=topic,
                                missing=sorted(set(range(count)) - partitions))
            self._publish(topic, [self._open(topic, p, clean=self.clean_start and p in partitions)
                                  for p in range(count)])
        _logger.info("logs.loaded", data_dir=self.data_dir, topics=len(self._topics),
                     partitions=len(self._logs), clean_start=self.clean_start)

    def _open(self, topic: str, partition: int, clean: bool) -> Log:
        log = Log.open(self.data_dir, topic, partition, self.config, self.clock, clean=clean,
                       truncate_corrupt=self._truncate_corrupt)
        log.flush_signal = self._wake_flusher
        return log

    def _publish(self, topic: str, logs: list[Log]) -> None:
        """Swap in new dictionaries (copy-on-write) holding ``topic``'s logs."""
        self._logs = {**self._logs, **{(topic, log.partition): log for log in logs}}
        self._topics = {**self._topics, topic: len(logs)}

    def start(self) -> None:
        """Start the background flusher (flush by time and count, retention). Idempotent."""
        with self._lock:
            if not self._flusher_started and not self._closed:
                self._flusher_started = True
                self._flusher.start()

    @property
    def flusher(self) -> Flusher:
        """The background flusher (for ``flush_soon``); it runs once :meth:`start` was called."""
        return self._flusher

    def _wake_flusher(self) -> None:
        self._flusher.wake()

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions; nothing to do if it exists so.

        Raises:
            InvalidTopic: an illegal name (refused before any path is built).
            InvalidRequest: a partition count out of range, or the topic exists with another.
            StorageError: the manager is closed.
        """
        validate_topic(topic)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidRequest(f"partition count must be between 1 and {MAX_PARTITIONS}, got {partitions!r}")
        existing = self._create(topic, partitions)
        if existing != partitions:
            raise InvalidRequest(f"topic {topic!r} already exists with {existing} partitions")

    def get_or_create(self, topic: str) -> int:
        """Return the partition count of ``topic``, creating it with ``num_partitions`` if needed.

        Raises:
            InvalidTopic: an illegal name. StorageError: the manager is closed.
        """
        count = self._topics.get(topic)
        if count is not None:
            return count
        validate_topic(topic)
        return self._create(topic, self.num_partitions)

    def _create(self, topic: str, partitions: int) -> int:
        with self._lock:
            if self._closed:
                raise StorageError("the log manager is closed")
            existing = self._topics.get(topic)
            if existing is not None:
                return existing
            logs: list[Log] = []
            try:
                for partition in range(partitions):
                    fresh = not os.path.exists(files.partition_dir(self.data_dir, topic, partition))
                    logs.append(self._open(topic, partition, clean=fresh))  # nothing to recover if fresh
            except BaseException:
                for log in logs:
                    log.close()
                raise
            self._publish(topic, logs)
        _logger.info("logs.topic_created", topic=topic, partitions=partitions)
        for listener in self.on_topic_created:
            listener(topic, partitions)
        return partitions

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
            raise UnknownTopic(f"unknown topic {topic!r}")
        raise WrongPartition(f"topic {topic!r} has partitions 0..{count - 1}, not {partition!r}")

    def topics(self) -> Mapping[str, int]:
        """A read-only snapshot of ``{topic: partition count}`` (O(1): the dict is copy-on-write)."""
        return MappingProxyType(self._topics)

    def logs(self) -> list[Log]:
        """Every open log (a snapshot)."""
        return list(self._logs.values())

    # -- background work -------------------------------------------------------------------

    def flush_due(self, now: float) -> int:
        """Flush the logs that need it (``Log.needs_flush``); return how many were flushed."""
        flushed = 0
        for log in self.logs():
            if log.needs_flush(now):
                try:
                    log.flush()
                    flushed += 1
                except StorageError as exc:
                    _logger.error("log.flush_failed", topic=log.topic, partition=log.partition, error=str(exc))
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

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the flusher, flush and close every log, then write the clean-shutdown marker.

        The marker is written (and fsynced) only if every log closed without error.
        Idempotent.

        Raises:
            StorageError: a log failed to flush; no marker is written.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._flusher.stop()
        errors = self._close_logs()
        try:
            if errors:
                raise errors[0]
            files.write_file_durably(os.path.join(self.data_dir, files.CLEAN_SHUTDOWN_MARKER), b"")
            _logger.info("logs.closed_cleanly", data_dir=self.data_dir)
        finally:
            os.close(self._lock_fd)

    def _close_logs(self) -> list[StorageError]:
        errors = []
        for log in self.logs():
            if log.failed is not None:
                errors.append(StorageError(f"{log.topic}-{log.partition} failed: {log.failed}"))
            try:
                log.close()
            except StorageError as exc:
                errors.append(exc)
        return errors


def _lock_directory(data_dir: str) -> int:
    fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StorageError(f"data directory {data_dir} is in use by another process") from exc
    return fd


def _take_clean_marker(data_dir: str) -> bool:
    """Remove the clean-shutdown marker (fsynced); return whether it was there."""
    marker = os.path.join(data_dir, files.CLEAN_SHUTDOWN_MARKER)
    try:
        os.unlink(marker)
    except FileNotFoundError:
        return False
    files.fsync_dir(data_dir)
    return True
