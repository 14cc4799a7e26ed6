"""Cutting a log back: a follower's truncation (Kafka's ``Log.truncateTo`` and ``truncateFullyAndStartAt``).

A follower copies its leader's bytes, so its log is a byte prefix of the leader's until
leaders change. Then the epoch exchange (broker/replication/divergence.py) names a
message boundary up to which both logs agree, and the follower cuts its log back to
it; or the follower's whole log is below the leader's start, and it starts again,
empty, at that offset. This is :class:`~rill.broker.log.log.Log`'s own code, in a
module of its own for size: only Log's two methods call it, and it reads and sets
Log's private state.

A cut to ``offset``, inside segment S at position ``rel``, in this order:

1. ``offset`` must be a message boundary at or after the log start (the index floor
   and length hops, as reads check); otherwise InvalidOffset, and nothing changed.
2. The segments before S holding unflushed bytes are fsynced: afterwards every byte
   before ``offset`` is durable, so ``flushed_offset`` can be exactly ``offset``.
3. Every segment after S is moved aside, the newest first (renamed to
   ``<segment>.corrupt-<ms>`` by recovery's ``drop``): a crash at any point leaves
   contiguous segments, i.e. a longer prefix of the old log, which the epoch exchange
   cuts again after the restart.
4. S itself. With ``rel > 0``, its bytes from ``rel`` on are copied to a side file
   (fsynced), the file is cut and fsynced (recovery's ``move_tail``), and its index
   loses the entries past the cut (rewritten and fsynced). With ``rel == 0`` S is
   moved aside whole and a new empty segment named ``offset`` becomes the active one:
   the active segment is then the one holding ``offset`` (``SegmentList.find``), a
   sealed segment is never written again (nor rolled at once for being full or old),
   and nothing is copied. At the log start (``offset`` is the first base) the first
   segment is swapped for an empty one instead (:func:`_emptied`), so a crash never
   leaves a directory without segments (opening one starts the log at 0).
5. The new segment list is swapped in; ``end_offset`` and ``flushed_offset`` become
   ``offset``. Then the leader-epoch cache, if the log has one, drops the epochs
   starting at or after ``offset`` (after a crash in between, loading truncates the
   cache to the log's end: loading.py), and the ``on_truncated`` hook runs: the log
   manager rewrites the recovery-point checkpoint at once, as Kafka's
   ``LogManager.truncateTo`` does, since one still naming the old flushed offset would
   let recovery skip bytes appended after the cut and not yet synced.

:func:`truncate_fully_and_start_at` moves every segment aside (the newest first) and
leaves one empty segment named ``offset``, then clears the epoch cache. Costs: renames
and fsyncs, plus a copy of the bytes cut inside S (kept for an operator, as recovery
keeps what it cuts). Recovery's per-file lines go to debug (a truncation is routine
for a follower); one ``log.truncated`` (or ``log.truncated_fully``) line sums it up.

Threads. Both run on the thread that appends (the broker's event loop), never during
an append. They hold the log's flush lock, then its roll lock, for the whole cut, so
retention (on the flusher thread) never sees a half-changed segment list nor deletes a
segment being cut, and no flush runs meanwhile (the event loop waits for a flush in
progress). The flushed offset must go down, and a flush that synced before the cut
must not raise it again, so the cut installs a new FlushWaiters at ``offset``: a flush
reports to the FlushWaiters it read under the flush lock (after a cut that is the old
one, where it changes nothing), and ``end_flush`` ignores a token begun before the cut
(its message count is at most the count at the cut). Callbacks still waiting on the
old FlushWaiters: those at or below ``offset`` are released (those bytes are synced
now), the others fail with NotLeaderForPartition (their bytes are gone from this log).
A FileSlice of a segment moved aside keeps reading its renamed file; one past the cut
of a segment cut in place ends short, and the connection sending it is closed
(server_connection.py), not the broker. The scrubber reads without the log's locks and
may report bytes it read before a cut as corrupt after it: Log.found_corrupt drops
such a report (:func:`outdated_report`).

Failures: an OSError during a cut leaves the files in one of the states above but the
log object behind them, so the log is marked failed (StorageError, as for a failed
fsync) and a restart recovers it. A failed write of the epoch cache fails the log too:
it must not answer with epochs its log no longer has.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rill.broker.log import files, reads
from rill.broker.log.integrity import CorruptRange, verify_messages
from rill.broker.log.leader_epochs import LeaderEpochCache
from rill.broker.log.recovery import _Recovery
from rill.broker.log.segment import Segment
from rill.broker.log.segments import SegmentList
from rill.broker.log.waiters import FlushWaiters
from rill.client.errors import InvalidOffset, NotLeaderForPartition, StorageError

if TYPE_CHECKING:
    from rill.broker.log.log import Log

_REASON = "truncated to its leader's log"
_T = TypeVar("_T")


class _DebugWarnings:
    """A logger whose ``warning`` logs at debug: recovery's per-file lines, for a routine truncation."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger

    def warning(self, event: str, **fields: Any) -> None:
        self._logger.debug(event, **fields)


def truncate_to(log: Log, offset: int) -> int:
    """Cut ``log`` back so that it ends at ``offset``; return the bytes cut (see the module docstring).

    Raises:
        InvalidOffset: ``offset`` is before the log start or not a message boundary (nothing changed).
        StorageError: the log is closed or failed; a file could not be read to check
            ``offset`` (retriable, nothing changed); or the cut failed (the log is now failed).
    """
    with log._flush_lock, log._roll_lock:
        _check_usable(log)
        end, view = log._end_offset, log._view
        if offset >= end:
            return 0
        index = _boundary_segment(log, view, offset)
        state = _Recovery(log.config, True, _DebugWarnings(log._logger), _now_ms(log))
        segments = _guarded(log, lambda: _cut(log, view, index, offset, state))
        old = _install(log, segments, offset)
    old.advance(offset)
    old.fail(_cut_error(log, offset))
    _update_epochs(log, lambda cache: cache.truncate_from_end(offset))
    _tell(log)
    log._logger.info("log.truncated", from_offset=end, to_offset=offset, bytes=end - offset,
                     side_files=list(state.side_files))
    return end - offset


def truncate_fully_and_start_at(log: Log, offset: int) -> None:
    """Move every segment of ``log`` aside and go on with one empty segment at ``offset`` (see the module docstring).

    Afterwards ``start_offset == end_offset == flushed_offset == offset`` and the epoch cache is empty.

    Raises:
        InvalidOffset: a negative ``offset`` (nothing changed).
        StorageError: the log is closed or failed, or the cut failed (the log is now failed).
    """
    if offset < 0:
        raise InvalidOffset(f"{log.topic}-{log.partition}: cannot start the log at a negative offset {offset}")
    with log._flush_lock, log._roll_lock:
        _check_usable(log)
        start, end, view = log.start_offset, log._end_offset, log._view
        state = _Recovery(log.config, True, _DebugWarnings(log._logger), _now_ms(log))
        segments = _guarded(log, lambda: _cut_all(log, view, offset, state))
        old = _install(log, segments, offset)
    old.fail(_cut_error(log, offset))
    _update_epochs(log, LeaderEpochCache.clear)
    _tell(log)
    log._logger.info("log.truncated_fully", from_start_offset=start, from_offset=end, to_offset=offset,
                     bytes=end - start, side_files=list(state.side_files))


def outdated_report(segment: Segment, corrupt: CorruptRange, max_message_size: int) -> bool:
    """Whether a corrupt range reported against ``segment`` is about bytes that a cut has since replaced.

    True when it starts at or past the segment's end, at a position that is no longer a
    message boundary, or where a valid message starts now. A read error keeps the
    report (False).
    """
    position = corrupt.start
    if position >= segment.size:
        return True
    try:
        if not segment.is_boundary(position):
            return True
        file = segment.file
        _, reason = verify_messages(file.fileno(), position, position + 1, segment.size, max_message_size)
    except OSError:
        return False
    return not reason


def _check_usable(log: Log) -> None:
    if log._failed is not None or log._closed:
        raise log._unavailable()


def _boundary_segment(log: Log, view: SegmentList, offset: int) -> int:
    """The index in ``view`` of the segment holding the message boundary ``offset`` (< the log end).

    Raises:
        InvalidOffset: ``offset`` is before the log start or not a message boundary.
        StorageError: the segment or its index could not be read (retriable).
    """
    name = f"{log.topic}-{log.partition}"
    if offset < view.start_offset:
        raise InvalidOffset(f"{name}: cannot truncate to offset {offset}, before the log start {view.start_offset}")
    index = bisect_right(view.bases, offset) - 1
    segment = view.segments[index]
    with reads.storage_access(log._read_context, segment):
        boundary = segment.is_boundary(offset - segment.base_offset)
    if not boundary:
        raise InvalidOffset(f"{name}: cannot truncate to offset {offset}: it is not a message boundary")
    return index


def _cut(log: Log, view: SegmentList, index: int, offset: int, state: _Recovery) -> list[Segment]:
    """Steps 2-4 of the module docstring; return the segments kept (the last is the active one)."""
    segments = list(view.segments)
    segment = segments[index]
    rel = offset - segment.base_offset
    first_unflushed = max(0, bisect_right(view.bases, log._waiters.flushed_offset) - 1)
    for earlier in segments[first_unflushed:index]:
        earlier.flush()
    for later in reversed(segments[index + 1:]):
        state.drop(later, _REASON)
    if rel:
        state.move_tail(segment, rel, _REASON)
        positions, times = segment.index.positions, segment.index.times
        keep = bisect_left(positions, rel)
        segment.rebuild_index(positions[:keep], times[:keep])
        segment.flush()  # the rewritten index (the file itself was synced by move_tail)
        return segments[:index + 1]
    if index == 0:
        return [_emptied(log, segment, offset, state)]
    state.drop(segment, _REASON)
    return segments[:index] + [Segment.create(log.directory, offset, log._index_interval, state.now_ms, log._files)]


def _cut_all(log: Log, view: SegmentList, offset: int, state: _Recovery) -> list[Segment]:
    """Move every segment aside, the newest first; return the one empty segment at ``offset``."""
    for later in reversed(view.segments[1:]):
        state.drop(later, _REASON)
    return [_emptied(log, view.segments[0], offset, state)]


def _emptied(log: Log, segment: Segment, base: int, state: _Recovery) -> Segment:
    """Swap the log's only segment for an empty one named ``base``, with a segment file there at every moment.

    Its bytes are hard-linked to a side file, an empty file is renamed over its name,
    and that file is renamed to ``base``'s name when the base differs (each rename is
    atomic); then the directory is fsynced. A crash in between leaves the old
    segment, or an empty log at its base or at ``base``.
    """
    directory = log.directory
    _unlink(segment.index_path)
    if segment.size:
        side = files.side_file_name_for_rename(segment.path, state.now_ms)
        os.link(segment.path, side)
        empty = f"{segment.path}.new"
        os.close(os.open(empty, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
        os.rename(empty, segment.path)
        state.side_files.append(side)
        state.bytes_truncated += segment.size
    if base != segment.base_offset:
        _unlink(files.index_path(directory, base))
        os.rename(segment.path, files.segment_path(directory, base))
    files.fsync_dir(directory)
    segment.close()
    fresh = Segment.open(directory, base, log._index_interval, log._files)
    fresh.last_append_ms = state.now_ms
    return fresh


def _install(log: Log, segments: list[Segment], end: int) -> FlushWaiters:
    """Swap in the cut state (under both locks); return the old FlushWaiters for the caller to settle."""
    log._view = SegmentList.of(segments)
    log._active = segments[-1]
    log._end_offset = end
    old, log._waiters = log._waiters, FlushWaiters(end, log._logger)
    log._flushed_messages = log._cut_messages = log._appended_messages
    return old


def _guarded(log: Log, cut: Callable[[], _T]) -> _T:
    try:
        return cut()
    except OSError as exc:
        log._fail(exc, "truncate")
        raise StorageError(f"{log.topic}-{log.partition}: truncation failed: {exc}") from exc


def _update_epochs(log: Log, change: Callable[[LeaderEpochCache], None]) -> None:
    cache = log.leader_epochs
    if cache is None:
        return
    try:
        change(cache)
    except OSError as exc:
        log._fail(exc, "leader-epoch write")
        raise StorageError(f"{log.topic}-{log.partition}: writing {cache.path} failed: {exc}") from exc


def _tell(log: Log) -> None:
    """Run the ``on_truncated`` hook (the log manager rewrites its recovery-point checkpoint)."""
    if log.on_truncated is not None:
        log.on_truncated(log)


def _cut_error(log: Log, offset: int) -> NotLeaderForPartition:
    return NotLeaderForPartition(f"{log.topic}-{log.partition}: the log was cut back to offset {offset} before "
                                 f"these bytes were flushed; they are not on this broker any more")


def _now_ms(log: Log) -> int:
    return int(log._clock.time() * 1000)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
