"""The log of one partition: a list of segments, appends, reads, flushes.

Offsets are byte positions in the partition's stream (Kafka 0.7): the message at
offset ``o`` with length field ``n`` is followed by the one at ``o + 4 + n``. A read
finds its segment with one binary search over the base offsets (segments.py).

Thread-safety contract:

* :meth:`Log.append`, :meth:`Log.read`, the append-time lookups (times.py),
  :meth:`Log.when_flushed` and the truncations (truncation.py) are called from one
  thread (the broker's event loop).
* :meth:`Log.flush` and retention (:meth:`Log.delete_oldest_segments`) run on a
  background thread (the log manager's flusher, which learns of logs with unflushed
  data through ``on_dirty`` instead of polling every log). Readers never block on them: the segment list is an immutable
  snapshot replaced as a whole (copy-on-write), and ``end_offset`` and
  ``flushed_offset`` are plain ints assigned atomically. A short lock serialises
  the two writers of the segment list (a roll and retention); a flush lock
  serialises flushes; ``when_flushed`` callbacks live in a FlushWaiters (waiters.py).
* A :class:`FileSlice` stays readable after its segment is deleted by retention
  (the file object keeps the descriptor open until its last reference goes).

Failures: an fsync (or write) error is never retried, since the kernel may have
dropped the dirty pages (fsyncgate, reliability.md 1.5). The log is marked failed:
the call raises :class:`StorageError`, and so does every later append or flush. A
failed write is cut back first, so no part of a refused set stays behind. A file
that cannot be *opened* (out of descriptors, say) writes nothing: that call fails
with :class:`StorageError` and the log stays online.

Recovery points: a log does not persist its own. Its :attr:`Log.flushed_offset` is
what the log manager writes to the data directory's checkpoint (checkpoint.py), and
what :meth:`Log.open` takes back as ``recovery_point`` after an unclean shutdown.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from rill.broker.log import files, reads, times, truncation
from rill.broker.log.integrity import CorruptRange
from rill.broker.log.fsync_stats import FSYNC_SECONDS
from rill.broker.log.leader_epochs import LeaderEpochCache
from rill.broker.log.log_config import MAX_SEGMENT_BYTES, Clock, LogConfig
from rill.broker.log.open_files import UNBOUNDED, OpenFiles
from rill.broker.log.recovery import RecoveryReport, open_segments
from rill.broker.log.results import AppendInfo, FileSlice, FlushToken
from rill.broker.log.segment import Segment
from rill.broker.log.segments import SegmentList
from rill.broker.log.waiters import Callback, ErrorCallback, FlushWaiters
from rill.client.errors import InvalidMessage, MessageTooLarge, StorageError
from rill.client.protocol.messages import SCAN_ERROR_NAMES, SCAN_TOO_LARGE, scan



class Log:
    """The log of one topic partition. See the module docstring for thread-safety."""

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig, clock: Clock,
                 segments: list[Segment], report: RecoveryReport, logger: Any, open_files: OpenFiles) -> None:
        self.directory, self.topic, self.partition = directory, topic, partition
        self.config = config
        self.recovery_report = report
        self._clock = clock
        self._logger = logger
        self._files = open_files
        self._view = SegmentList.of(segments)
        self._active = segments[-1]
        self._end_offset = self._active.end_offset
        self._waiters = FlushWaiters(self._end_offset, logger)
        self._last_append_ms = max((s.last_append_ms for s in segments if s.size), default=-1)
        self._appended_messages = 0
        self._flushed_messages = 0
        self._last_flush_time = clock.time()
        self._failed: BaseException | None = None
        self._closed = False
        self._files_closed = False
        self._roll_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._max_message_size = config.max_message_size
        self._index_interval = config.index_interval_bytes
        self._index_interval_ms = config.index_interval_ms
        self.flush_signal: Callable[[], object] | None = None
        """Called (from the appending thread) when unflushed messages reach the flush interval."""
        self.on_dirty: Callable[[Log], object] | None = None
        """Called (from the appending thread) when the log gets unflushed data while not in the dirty set."""
        self.in_dirty_set = False
        """Whether the flusher knows this log has unflushed data (set here, cleared by the flusher)."""
        self.on_corruption: Callable[[Log, CorruptRange], object] | None = None
        """Called (from the thread that found it) with each newly found corrupt range: the repair hook."""
        self._read_context = reads.ReadContext(topic, partition, config.max_message_size, self.found_corrupt, logger)
        self._cut_messages = -1
        """``_appended_messages`` at the last truncation (-1: never cut): older flush tokens are stale."""
        self.leader_epochs: LeaderEpochCache | None = None
        """The leader-epoch cache of a replica of a replicated topic (set by the log manager), else None."""
        self.on_truncated: Callable[[Log], object] | None = None
        """Called (on the truncating thread) after a truncation: the recovery-point checkpoint is rewritten."""

    @classmethod
    def open(cls, data_dir: str, topic: str, partition: int, config: LogConfig, clock: Clock = time, *,
             clean: bool = False, truncate_corrupt: bool = False, recovery_point: int = 0,
             open_files: OpenFiles | None = None) -> Log:
        """Open (creating if needed) the log of ``topic``-``partition`` under ``data_dir``.

        ``clean`` says the data directory holds a clean-shutdown marker: nothing is
        scanned, and indexes are checked when first used. Otherwise the log is scanned
        and repaired from ``recovery_point`` on (see recovery.py). ``open_files`` is
        the descriptor cache to share (a private unbounded one by default).

        Raises:
            InvalidTopic, WrongPartition: before anything touches the disk.
            CorruptLogError: corruption in the middle of the log and not ``truncate_corrupt``.
            OSError: the files could not be opened, read or written.
        """
        directory = files.partition_dir(data_dir, topic, partition)
        if not os.path.isdir(directory):
            os.makedirs(directory, exist_ok=True)
            files.fsync_dir(data_dir)
        return cls.load(directory, topic, partition, config, clock, clean=clean, truncate_corrupt=truncate_corrupt,
                        recovery_point=recovery_point, open_files=open_files)

    @classmethod
    def load(cls, directory: str, topic: str, partition: int, config: LogConfig, clock: Clock = time, *,
             clean: bool = False, truncate_corrupt: bool = False, recovery_point: int = 0,
             open_files: OpenFiles | None = None, new: bool = False, sync: bool = True) -> Log:
        """Open the log in the existing, already validated ``directory`` (see :meth:`open`).

        ``new`` says the directory was just made for a new topic: its first segment is
        created without a directory fsync (the topic's creator syncs once for all).
        ``sync`` False leaves the segments recovery scanned unsynced (listed in
        ``recovery_report.unsynced``): the caller syncs them before serving.
        """
        logger = structlog.get_logger(__name__).bind(topic=topic, partition=partition)
        cache = open_files if open_files is not None else OpenFiles(UNBOUNDED)
        kept, report = open_segments(directory, config, clean=clean or new, truncate_corrupt=truncate_corrupt,
                                     log=logger, now_ms=int(clock.time() * 1000), recovery_point=recovery_point,
                                     open_files=cache, sync_dir=not new, sync=sync)
        log = cls(directory, topic, partition, config, clock, kept, report, logger, cache)
        if report.segments_scanned or report.bytes_truncated:
            logger.debug("log.loaded", start_offset=log.start_offset, end_offset=log.end_offset, segments=len(kept),
                        clean=report.clean, segments_scanned=report.segments_scanned,
                        bytes_truncated=report.bytes_truncated)
        return log

    # -- state ---------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._view.start_offset

    @property
    def end_offset(self) -> int:
        return self._end_offset

    @property
    def flushed_offset(self) -> int:
        """Every byte before this offset has been fsynced."""
        return self._waiters.flushed_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._view.segments)

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The current snapshot of segments, oldest first (the last is the active one)."""
        return self._view.segments

    @property
    def has_unflushed(self) -> bool:
        """Whether messages were appended since the last flush began."""
        return self._appended_messages != self._flushed_messages

    @property
    def failed(self) -> BaseException | None:
        """The error that took this log offline, or ``None``."""
        return self._failed

    # -- append --------------------------------------------------------------------------

    def append(self, message_set: bytes | bytearray | memoryview) -> AppendInfo:
        """Validate a whole message set and write it at the end with one write.

        O(1) Python work per call: validation, index marks and CRCs run in ``scan``.

        Raises:
            InvalidMessage: the set is empty, holds an invalid message or ends in an
                incomplete one (nothing is written).
            MessageTooLarge: a length field exceeds the maximum message size.
            StorageError: the log is closed or failed, or the write failed.
        """
        if self._failed is not None or self._closed:
            raise self._unavailable()
        size = len(message_set)
        if not size or size > MAX_SEGMENT_BYTES:
            raise self._refusal(0, 0, size)
        segment = self._active
        now_ms = max(int(self._clock.time() * 1000), self._last_append_ms)
        index = segment.index
        roll = self._should_roll(segment, index.first_time_ms, size, now_ms)
        next_mark = 0 if roll else index.next_mark(segment.size)
        result = scan(message_set, self._max_message_size, self._index_interval, next_mark)
        if result.error or result.valid_bytes != size:
            raise self._refusal(result.error, result.valid_bytes, size)
        marks = result.marks
        last_entry_ms = index.last_time_ms
        if (not roll and last_entry_ms is not None and now_ms - last_entry_ms >= self._index_interval_ms
                and (not marks or marks[0] != 0)):
            marks = [0, *marks]  # an entry per interval of time too: append times stay precise
        try:
            if roll:
                segment = self._roll(now_ms)
            handle = segment.file
        except OSError as exc:  # nothing was written: this append fails, the log stays online
            self._logger.warning("log.open_failed", file=exc.filename or segment.path, error=exc.strerror or str(exc))
            raise StorageError(f"{self.topic}-{self.partition}: cannot open {exc.filename or segment.path}: "
                               f"{exc.strerror or exc} (retriable)") from exc
        try:
            segment.append(message_set, marks, now_ms, handle)
        except OSError as exc:
            self._fail(exc, "write")
            raise StorageError(f"{self.topic}-{self.partition}: write failed: {exc}") from exc
        first = self._end_offset
        self._end_offset = end = segment.base_offset + segment.size
        self._last_append_ms = now_ms
        self._appended_messages += result.message_count
        if not self.in_dirty_set and self.on_dirty is not None:
            self.in_dirty_set = True
            self.on_dirty(self)
        if (self._appended_messages - self._flushed_messages >= self.config.flush_interval_messages
                and self.flush_signal is not None):
            self.flush_signal()
        return AppendInfo(first, end, result.message_count)

    def _should_roll(self, segment: Segment, first_ms: int | None, size: int, now_ms: int) -> bool:
        if not segment.size:
            return False  # a set larger than segment_bytes goes alone into an empty segment
        if segment.size + size > self.config.segment_bytes:
            return True
        return first_ms is not None and now_ms - first_ms >= self.config.roll_ms

    def _refusal(self, error: int, valid_bytes: int, size: int) -> Exception:
        where = f"{self.topic}-{self.partition}: message at position {valid_bytes} of the set"
        if not size:
            return InvalidMessage(f"{self.topic}-{self.partition}: empty message set")
        if error == SCAN_TOO_LARGE:
            return MessageTooLarge(f"{where}: larger than {self.config.max_message_bytes} bytes of payload")
        if error:
            return InvalidMessage(f"{where}: {SCAN_ERROR_NAMES[error]}")
        if size > MAX_SEGMENT_BYTES:
            return MessageTooLarge(f"{self.topic}-{self.partition}: message set of {size} bytes")
        return InvalidMessage(f"{where}: incomplete message at the end of the set")

    def _roll(self, now_ms: int) -> Segment:
        """Start a new segment at the log end (the old one is synced by the next flush)."""
        with self._roll_lock:
            segment = Segment.create(self.directory, self._end_offset, self._index_interval, now_ms, self._files)
            self._view = self._view.appended(segment)
            self._active = segment
        self._logger.info("log.rolled", base_offset=segment.base_offset)
        return segment

    # -- read ----------------------------------------------------------------------------

    def read(self, offset: int, max_size: int) -> FileSlice:
        """The bytes from ``offset`` (at most ``max_size``) as a slice of one segment: see :func:`reads.read_slice`.

        Raises:
            As :func:`reads.read_slice`, and StorageError when the log is closed.
        """
        end = self._end_offset  # read before the view: the view then covers `end`
        view = self._view
        if self._closed:
            raise self._unavailable()
        return reads.read_slice(view, end, offset, max_size, self._read_context)

    def found_corrupt(self, corrupt: CorruptRange) -> None:
        """Record a corrupt range (reads refuse it from now on), log it, and tell the ``on_corruption`` hook."""
        segment = next((s for s in self._view.segments if s.path == corrupt.path), None)
        if (segment is not None and self._cut_messages >= 0
                and truncation.outdated_report(segment, corrupt, self._max_message_size)):
            return  # bytes the scrubber read before a truncation replaced them (truncation.py)
        if segment is not None:
            if segment.integrity.corrupt_in(corrupt.start, corrupt.end) == (corrupt.start, corrupt.end):
                return  # known already
            segment.integrity.add_corrupt(corrupt.start, corrupt.end, corrupt.reason)
        self._logger.error("log.corrupt_data", file=corrupt.path, position=corrupt.start, offset=corrupt.offset,
                           bytes=corrupt.length, reason=corrupt.reason,
                           hint="reads of this range fail with InvalidMessage; see rill-broker --verify-logs")
        if self.on_corruption is not None:
            self.on_corruption(self, corrupt)

    # -- append times (times.py) ------------------------------------------------------------

    def append_time_ms(self, offset: int) -> int | None:
        """When the message at ``offset`` was appended (ms), see :func:`times.append_time_ms`."""
        with reads.storage_access(self._read_context):
            return times.append_time_ms(self._view, self._end_offset, offset)

    def offsets_before(self, time_ms: int, max_number: int) -> list[int]:
        """Offsets appended before ``time_ms``, newest first: see :func:`times.offsets_before`."""
        with reads.storage_access(self._read_context):
            return times.offsets_before(self._view, self._end_offset, self._last_append_ms, time_ms, max_number)

    def time_entries(self, offset: int, max_entries: int) -> list[tuple[int, int]]:
        """Index entries (offset, append time) from ``offset``'s floor: see :func:`times.time_entries`."""
        with reads.storage_access(self._read_context):
            return times.time_entries(self._view, self._end_offset, offset, max_entries)

    # -- flush -----------------------------------------------------------------------------

    def needs_flush(self, now: float) -> bool:
        """Whether M messages were appended, or S seconds passed with unflushed data (``now`` in s)."""
        unflushed = self._appended_messages - self._flushed_messages
        if unflushed <= 0 or self._failed is not None or self._closed:
            return False
        return (unflushed >= self.config.flush_interval_messages
                or (now - self._last_flush_time) * 1000 >= self.config.flush_interval_ms)

    def flush(self) -> None:
        """fsync everything appended so far, then run the ``when_flushed`` callbacks that are due.

        Raises:
            StorageError: the log failed (now or before); an fsync is never retried.
        """
        with self._flush_lock:
            if self._files_closed:
                return
            if self._failed is not None:
                raise self._unavailable()
            messages, end, view, waiters = self._appended_messages, self._end_offset, self._view, self._waiters
            now = self._clock.time()
            flushed = self._waiters.flushed_offset
            if end == flushed and messages == self._flushed_messages:
                self._last_flush_time = now
                return
            started = time.monotonic()
            try:
                for segment in view.from_offset(flushed):
                    segment.flush()
            except OSError as exc:
                self._fail(exc, "fsync")
                raise StorageError(f"{self.topic}-{self.partition}: flush failed: {exc}") from exc
            FSYNC_SECONDS.observe(time.monotonic() - started)
            self._flushed_messages = messages
            self._last_flush_time = now
        waiters.advance(end)  # the waiters read with `end`: after a truncation, the old ones (truncation.py)

    def begin_flush(self) -> FlushToken | None:
        """The first half of a batched flush: write pending index entries and note what a sync will cover.

        The caller then syncs the whole file system (batch_sync.py) and calls
        :meth:`end_flush` with the token. Returns None when there is nothing to flush
        (or the log is failed or closed).

        Raises:
            StorageError: writing the index failed (the log is now failed).
        """
        with self._flush_lock:
            if self._files_closed or self._failed is not None:
                return None
            messages, end, view = self._appended_messages, self._end_offset, self._view
            flushed = self._waiters.flushed_offset
            if end == flushed and messages == self._flushed_messages:
                return None
            segments = [(segment, segment.size) for segment in view.from_offset(flushed)]
            try:
                for segment, _ in segments:
                    segment.write_index()
            except OSError as exc:
                self._fail(exc, "write")
                raise StorageError(f"{self.topic}-{self.partition}: index write failed: {exc}") from exc
            return FlushToken(messages, end, segments)

    def end_flush(self, token: FlushToken) -> None:
        """The second half of a batched flush: the file system was synced after :meth:`begin_flush`."""
        with self._flush_lock:
            if token.messages <= self._cut_messages:
                return  # begun before a truncation: what it synced may be cut (truncation.py)
            for segment, size in token.segments:
                segment.synced_by_others(size)
            self._flushed_messages = max(self._flushed_messages, token.messages)
            self._last_flush_time = self._clock.time()
            waiters = self._waiters
        waiters.advance(token.end)

    def when_flushed(self, offset: int, callback: Callback, on_error: ErrorCallback | None = None) -> None:
        """Call ``callback()`` once ``flushed_offset >= offset``: at once if it already is,
        otherwise from the thread that flushes. If the log fails first, ``on_error(exc)``
        is called instead (if given). Exceptions from callbacks are logged, not raised.
        """
        self._waiters.register(offset, callback, on_error)

    def _fail(self, exc: OSError, what: str) -> None:
        self._failed = exc
        self._logger.error("log.offline", failed=what, error=str(exc), directory=self.directory,
                           hint="the partition takes no more writes until the broker restarts")
        self._waiters.fail(exc)

    def _unavailable(self) -> StorageError:
        if self._failed is not None:
            return StorageError(f"{self.topic}-{self.partition} is offline after a storage error: {self._failed}")
        return StorageError(f"{self.topic}-{self.partition} is closed")

    # -- truncation (truncation.py: steps, locks, side files, crashes) -------------------------

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to end at ``offset`` (appending thread only); return the bytes cut, 0 if ``offset >= end``.

        Raises:
            InvalidOffset: ``offset`` is before the log start or not a message boundary (nothing changed).
            StorageError: the log is closed or failed, or the cut failed (the log is then failed).
        """
        return truncation.truncate_to(self, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Keep every segment aside and go on empty at ``offset``. Raises: InvalidOffset (negative), StorageError."""
        truncation.truncate_fully_and_start_at(self, offset)

    # -- retention and lifetime ---------------------------------------------------------------

    def delete_oldest_segments(self, choose: Callable[[tuple[Segment, ...]], int]) -> list[Segment]:
        """Remove the ``choose(segments)`` oldest segments (never the active one); return them.

        The new segment list is swapped in first, then the files are unlinked, so a
        reader holding the old snapshot (or a FileSlice) still reads the old files.
        """
        with self._roll_lock:
            view = self._view
            count = min(choose(view.segments), len(view.segments) - 1)
            if count <= 0:
                return []
            self._view = view.without_oldest(count)
        removed = list(view.segments[:count])
        for segment in removed:
            self._logger.info("retention.deleted_segment", file=segment.path, size=segment.size)
            try:
                segment.delete()
            except OSError as exc:
                self._logger.error("retention.delete_failed", file=segment.path, error=str(exc))
        return removed

    def close(self) -> None:
        """Flush (unless failed) and close every file. Idempotent.

        Raises:
            StorageError: the final flush failed (the files are closed anyway).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._failed is None:
                self.flush()
        finally:
            with self._flush_lock:
                self._files_closed = True
                for segment in self._view.segments:
                    segment.close()

    def abandon(self) -> None:
        """Release the descriptors without flushing (a log being discarded, or a test simulating kill -9)."""
        self._closed = True
        with self._flush_lock:
            self._files_closed = True
            for segment in self._view.segments:
                segment.close()
