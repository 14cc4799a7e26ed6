"""The coordinator's offset store: records appended durably to a log, replayed at start-up.

On-disk format: the log is an ordinary rill partition log (Kafka 0.7 message sets,
see rill.client.protocol.messages). Each record is one message whose payload is
``records.encode(record)`` (JSON). The records of one :meth:`OffsetStore.append`
land together or not at all: one record is one plain message; several are wrapped
in one gzip-compressed message, so a single CRC covers the whole batch and recovery
after a crash keeps all of it or none of it (a plain message set torn by a crash
would leave a valid prefix behind). Compaction writes plain messages (see below).

Durability: :meth:`OffsetStore.append` returns only once the batch is durable, as
its :class:`~rill.coordinator.fsync_commit.Commit` says: by default once the log is
fsynced past the batch (a single broker's local log), so an acknowledged commit
survives ``kill -9`` and power loss (reliability.md 1.4), with fsyncs shared between
threads (group commit); in a cluster, once the groups topic partition's high
watermark passes it (every in-sync replica has it). Appends are serialized by a lock.

Compaction: every record *sets* state, so appending a snapshot of the whole state
(the coordinator's ``snapshot_records``) makes everything before it redundant;
whole segments that end at or before the snapshot are then deleted. The snapshot
must equal the state after every record before it in the log. The coordinator
applies records *after* ``append`` returns (persist, then apply), so a batch
written by another thread may not be applied yet when the snapshot is taken.
The store therefore counts a batch as *pending* from its write until the thread
that appended it calls :meth:`OffsetStore.maybe_compact` or ``append`` again
(that is when RecordSink has applied it) or fails. Compaction pauses new appends,
waits (at most ``drain_timeout`` seconds) until no batch is pending, takes the
snapshot, writes it, and lets appends go on. A batch that raised is never pending:
its caller does not apply it. Compaction runs once the records (or payload bytes)
appended since the last snapshot reach the configured amount and at least the
snapshot's own size, so rewriting the snapshot costs O(1) per appended record.

Thread-safety: ``append`` and ``maybe_compact`` may be called from any number of
threads. ``replay`` is for start-up, before the first append. The log handed in
belongs to the store from then on (:meth:`OffsetStore.close` closes it); its own
background flusher, if any, may still flush it.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import structlog

from rill.client.errors import BrokerError, StorageError
from rill.client.protocol.messages import CODEC_GZIP, MAGIC_V1, encode_message, encode_message_set
from rill.coordinator import records
from rill.coordinator.fsync_commit import Commit, FsyncCommit, remaining as _remaining
from rill.coordinator.record_log import RecordLog, SegmentInfo, read_messages
from rill.coordinator.records import Record

__all__ = ["OffsetStore", "RecordLog"]

DEFAULT_MAX_BATCH_BYTES = 1 << 20
DEFAULT_COMPACT_EVERY_BYTES = 4 << 20


# -- the store --------------------------------------------------------------------------------


class OffsetStore:
    """Coordinator records in a log: durable group-commit appends, replay, compaction.

    Args:
        log: the coordinator's own log (see :class:`RecordLog`); the store owns it.
        compact_every_records: compact once this many records (and at least as many
            as the last snapshot held) were appended or replayed since the last
            compaction.
        compact_every_bytes: or once this many bytes of record payload (and at least
            as many as the last snapshot's) were. Replay time follows the bytes
            decoded, so this bounds it when records are large (100-partition commits).
        max_batch_bytes: the size of each read during replay, and the largest message
            set a snapshot is written in (a snapshot is several sets).
        drain_timeout: how long compaction waits for pending batches (see the module
            docstring) before it gives up until as many records again were appended.
        commit: when an appended batch counts as durable (rill.coordinator.fsync_commit);
            by default once the log is fsynced past it.
    """

    def __init__(self, log: RecordLog, *, compact_every_records: int = 10_000,
                 compact_every_bytes: int = DEFAULT_COMPACT_EVERY_BYTES,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, drain_timeout: float = 2.0,
                 commit: Commit | None = None) -> None:
        for name, value in (("compact_every_records", compact_every_records),
                            ("compact_every_bytes", compact_every_bytes), ("max_batch_bytes", max_batch_bytes)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self._log = log
        self._compact_every = _Size(compact_every_records, compact_every_bytes)
        self._max_batch_bytes = max_batch_bytes
        self._drain_timeout = drain_timeout
        self._logger = structlog.get_logger(__name__)
        self._cond = threading.Condition()  # guards the fields below and every log.append
        self._pending: dict[int, threading.Thread] = {}  # thread id -> thread with an unapplied batch
        self._compacting = False
        self._closed = False
        self._since_compaction = _Size(0, 0)  # appended (or replayed) since the last snapshot
        self._snapshot_size = _Size(0, 0)
        self._commit: Commit = commit if commit is not None else FsyncCommit(log)

    # -- append ------------------------------------------------------------------------------

    def append(self, batch: Sequence[Record], timeout: float | None = None) -> None:
        """Append ``batch`` as one all-or-nothing unit; return once it is fsynced.

        An empty batch returns at once. ``timeout`` (seconds, ``None`` = no limit)
        bounds the waits for a compaction in progress and for another thread's fsync;
        an fsync this thread started runs to its end, and a batch that is durable is
        acknowledged even if that took longer than ``timeout``.

        Raises:
            StorageError: the store is closed, the log refused the batch (nothing was
                written), or the write or an fsync failed (the log is offline).
            TimeoutError: ``timeout`` passed. If it passed while waiting for the
                fsync, the batch is written and may still become durable (an
                ambiguous outcome, like Kafka's RequestTimedOut).
        """
        if not batch:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        message_set, size = _encode_batch(batch)
        end = self._write(message_set, size, deadline)
        try:
            self._commit.wait(end, deadline)
        except BaseException:
            self._settle()  # the caller will not apply this batch
            raise

    def _write(self, message_set: bytes, size: _Size, deadline: float | None) -> int:
        """Write one set under the lock once no compaction is running; return the log end after it."""
        me = threading.get_ident()
        with self._cond:
            if self._pending.pop(me, None) is not None:
                self._cond.notify_all()  # this thread's previous batch is settled
            while self._compacting and not self._closed:
                remaining = _remaining(deadline)
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("offsets log: timed out waiting for compaction; nothing was written")
                self._cond.wait(remaining)
            self._check_open()
            end = self._append_locked(message_set)
            self._since_compaction = self._since_compaction.plus(size)
            self._pending[me] = threading.current_thread()
            return end

    def _append_locked(self, message_set: bytes) -> int:
        try:
            return self._log.append(message_set).next_offset
        except StorageError:
            raise
        except BrokerError as exc:  # refused before anything was written (e.g. MessageTooLarge)
            raise StorageError(f"offsets log refused a set of {len(message_set)} bytes: {exc}") from exc

    def _settle(self) -> None:
        with self._cond:
            if self._pending.pop(threading.get_ident(), None) is not None:
                self._cond.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("offsets log is closed")

    # -- replay ------------------------------------------------------------------------------

    def replay(self) -> Iterator[Record]:
        """Yield every record in the log, oldest first (call at start-up, before appending).

        A message that is not a valid record is skipped and logged
        (``offsets_log.bad_record`` with its offset); so is a message that fails to
        decode. An empty log yields nothing.

        Raises:
            StorageError: the log is closed.
        """
        started = time.monotonic()
        count = skipped = payload = 0
        for offset, value in read_messages(self._log, self._max_batch_bytes, self._logger):
            try:
                record = records.decode(value)
            except (ValueError, RecursionError) as exc:
                skipped += 1
                self._logger.error("offsets_log.bad_record", offset=offset, error=str(exc),
                                   hint="skipped; the state it held, if any, is lost")
                continue
            count += 1
            payload += len(value)
            yield record
        with self._cond:
            self._since_compaction = _Size(count, payload)
        self._logger.info("offsets_log.loaded", records=count, skipped=skipped, start_offset=self._log.start_offset,
                          end_offset=self._log.end_offset, elapsed_ms=round((time.monotonic() - started) * 1000, 1))

    # -- compaction ----------------------------------------------------------------------------

    def maybe_compact(self, snapshot: Callable[[], list[Record]]) -> bool:
        """Mark this thread's last batch applied; compact if enough records were appended.

        Compacting appends ``snapshot()`` (records re-stating the whole state), waits
        for it to be fsynced, then deletes every whole segment ending at or before
        the snapshot's first offset. ``snapshot`` is called with appends paused and
        no store lock held; it must not wait for a thread that is inside ``append``.

        Returns:
            True when this call compacted. False when compaction is not due, another
            thread is compacting, the store is closed, pending batches did not
            settle within ``drain_timeout``, or ``snapshot`` raised (both logged;
            retried once as many records again were appended).

        Raises:
            StorageError: writing or fsyncing the snapshot failed (the log is offline).
        """
        with self._cond:
            if self._pending.pop(threading.get_ident(), None) is not None:
                self._cond.notify_all()
            if self._closed or self._compacting or not self._due():
                return False
            self._compacting = True
        started = time.monotonic()
        try:
            written = self._write_snapshot(snapshot) if self._drain() else None
        finally:
            with self._cond:
                self._compacting = False
                self._cond.notify_all()
        if not written:
            return False
        paused = time.monotonic() - started
        start, end, size = written
        self._commit.wait(end, None)
        deleted = self._log.delete_oldest_segments(lambda segments: _ending_by(segments, start))
        self._logger.info("offsets_log.compacted", snapshot_records=size.records, snapshot_offset=start,
                          snapshot_bytes=end - start, deleted_segments=len(deleted),
                          start_offset=self._log.start_offset, appends_paused_ms=round(paused * 1000, 1),
                          elapsed_ms=round((time.monotonic() - started) * 1000, 1))
        return True

    def _due(self) -> bool:
        since, every, last = self._since_compaction, self._compact_every, self._snapshot_size
        return (since.records >= max(every.records, last.records)
                or since.payload_bytes >= max(every.payload_bytes, last.payload_bytes))

    def _drain(self) -> bool:
        """Wait until no other thread has an unapplied batch (appends are paused)."""
        with self._cond:
            if self._cond.wait_for(self._drained, self._drain_timeout):
                return True
            self._since_compaction = _Size(0, 0)
            self._logger.warning("offsets_log.compaction_postponed", pending_batches=len(self._pending),
                                 drain_timeout_s=self._drain_timeout,
                                 hint="a thread appended a batch and has not applied it")
            return False

    def _drained(self) -> bool:
        for ident, thread in list(self._pending.items()):
            if not thread.is_alive():
                del self._pending[ident]
        return not self._pending

    def _write_snapshot(self, snapshot: Callable[[], list[Record]]) -> tuple[int, int, _Size] | None:
        """Write the snapshot's records; return (first offset, end offset, its size).

        Returns None, logged and postponed, when ``snapshot`` raises or the log
        refuses a set (a record over the log's max message size): the commit that
        triggered compaction is durable and applied, so that must not fail it. A
        refused set may leave the snapshot's first sets written: harmless, since
        they re-state the state the log already holds, and nothing is deleted.

        Raises:
            StorageError: the log failed or is closed.
        """
        try:
            sets, size = _chunked_sets(snapshot(), self._max_batch_bytes)
            with self._cond:
                self._check_open()
                start = end = self._log.end_offset
                for message_set in sets:
                    end = self._log.append(message_set).next_offset
                self._since_compaction = _Size(0, 0)
                self._snapshot_size = size
            return start, end, size
        except StorageError:
            raise
        except Exception:  # a bug in the snapshot, or a refused set: never fail the commit that got here
            self._logger.exception("offsets_log.compaction_failed",
                                   hint="postponed; the log keeps every record until a compaction succeeds")
            with self._cond:
                self._since_compaction = _Size(0, 0)
            return None

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse further appends, then flush and close the log. Idempotent.

        Raises:
            StorageError: the log's final flush failed (its files are closed anyway).
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._log.close()


# -- encoding ---------------------------------------------------------------------------------


class _Size(NamedTuple):
    """An amount of records: how many, and their payload bytes."""

    records: int
    payload_bytes: int

    def plus(self, other: _Size) -> _Size:
        return _Size(self.records + other.records, self.payload_bytes + other.payload_bytes)


def _encode_batch(batch: Sequence[Record]) -> tuple[bytes, _Size]:
    """One message for one record; several go into one gzip wrapper (one CRC: all or nothing)."""
    payloads = [records.encode(record) for record in batch]
    size = _Size(len(payloads), sum(len(p) for p in payloads))
    if len(payloads) == 1:
        return encode_message_set(payloads), size
    inner = encode_message_set(payloads)
    return encode_message(gzip.compress(inner, compresslevel=1, mtime=0), MAGIC_V1, CODEC_GZIP), size


def _chunked_sets(state: Sequence[Record], max_bytes: int) -> tuple[list[bytes], _Size]:
    """Plain message sets of at most ``max_bytes`` each (one larger record goes alone)."""
    sets: list[bytes] = []
    chunk: list[bytes] = []
    size = payload = 0
    for record in state:
        value = records.encode(record)
        payload += len(value)
        message = encode_message(value)
        if chunk and size + len(message) > max_bytes:
            sets.append(b"".join(chunk))
            chunk, size = [], 0
        chunk.append(message)
        size += len(message)
    if chunk:
        sets.append(b"".join(chunk))
    return sets, _Size(len(state), payload)


def _ending_by(segments: tuple[SegmentInfo, ...], offset: int) -> int:
    """How many of the oldest segments end at or before ``offset``."""
    count = 0
    for segment in segments:
        if segment.end_offset > offset:
            break
        count += 1
    return count
