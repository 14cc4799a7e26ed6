"""Reading a log: a file slice of whole, checked messages from an offset.

Functions over one immutable :class:`SegmentList` snapshot and the log end the caller
read with it (as times.py), run on the broker's event loop. A read finds the segment
by binary search, checks that the offset is a message boundary (the index's floor
entry and a few length hops), and ends the slice on the last boundary that fits.

Only checked bytes are served (integrity.py): bytes nobody checked since the log was
opened are checked first, at most ``VERIFY_BUDGET`` of them per read, so a slice may
end early at a message boundary (before a corrupt message, or at the budget). A read
that starts in a corrupt range raises :class:`CorruptDataError` (wire code 2); a
corrupt range it finds is handed to ``found(range)`` (the log records and reports it).

An ``OSError`` of the file system during a read (a file that cannot be opened, out of
descriptors) becomes a retriable :class:`StorageError`: it never fails the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rill.broker.log.integrity import (VERIFY_BUDGET, CorruptDataError, CorruptRange, corrupt_range_at,
                                       verify_messages)
from rill.broker.log.results import FileSlice
from rill.broker.log.segment import Segment
from rill.broker.log.segments import SegmentList
from rill.client.errors import InvalidFetchSize, InvalidOffset, OffsetOutOfRange, StorageError

Found = Callable[[CorruptRange], None]


class ReadContext:
    """What a read of one log needs besides the snapshot: names for errors, limits, reporting."""

    __slots__ = ("topic", "partition", "max_message_size", "found", "logger")

    def __init__(self, topic: str, partition: int, max_message_size: int, found: Found, logger: Any) -> None:
        self.topic, self.partition = topic, partition
        self.max_message_size = max_message_size
        self.found = found
        self.logger = logger

    def corrupt(self, segment: Segment, start: int, end: int, reason: str) -> CorruptDataError:
        return CorruptDataError(self.topic, self.partition,
                                CorruptRange(segment.path, segment.base_offset, start, end, reason))


def read_slice(view: SegmentList, end: int, offset: int, max_size: int, ctx: ReadContext) -> FileSlice:
    """The bytes from ``offset`` (at most ``max_size``) as a slice of one segment.

    The slice ends on the last message boundary <= ``offset + max_size`` when at least
    one whole message fits; otherwise it is the first ``max_size`` bytes of the message
    at ``offset`` (Kafka 0.7: the client sees a partial message and retries with a
    larger size). At ``end`` the slice is empty.

    Raises:
        OffsetOutOfRange: ``offset`` is before the log start or after its end.
        CorruptDataError: the data at ``offset`` failed its check on disk (code 2).
        InvalidOffset: no message starts at ``offset``.
        InvalidFetchSize: ``max_size`` is negative.
        StorageError: a file could not be opened or read (retriable).
    """
    if max_size < 0:
        raise InvalidFetchSize(f"{ctx.topic}-{ctx.partition}: negative fetch size {max_size}")
    if offset == end or max_size == 0:
        if view.start_offset <= offset <= end:
            return _empty_slice(view, end, offset, ctx)
    if offset < view.start_offset or offset > end:
        raise OffsetOutOfRange(f"{ctx.topic}-{ctx.partition}: offset {offset} is out of range: "
                               f"log start {view.start_offset}, end {end}")
    segment = view.find(offset)
    position = offset - segment.base_offset
    limit = min(segment.size, end - segment.base_offset)
    with storage_access(ctx, segment):
        known = segment.integrity.corrupt_in(position, position + 1)
        if known is not None:
            raise ctx.corrupt(segment, known[0], known[1], segment.integrity.reasons.get(known[0], ""))
        if position >= limit or not segment.is_boundary(position):
            raise InvalidOffset(f"{ctx.topic}-{ctx.partition}: offset {offset} is not a message boundary")
        stop = position + max_size
        if stop < limit:
            boundary = segment.find_boundary_at_or_before(stop, position)
            stop = boundary if boundary > position else stop
        else:
            stop = limit
        stop = _checked_stop(segment, position, stop, ctx)
        return FileSlice(segment.file, position, stop - position, offset, offset + stop - position)


def _checked_stop(segment: Segment, position: int, stop: int, ctx: ReadContext) -> int:
    """Where a read of ``[position, stop)`` may end so that it serves only checked bytes.

    Raises:
        CorruptDataError: the message at ``position`` failed its check.
    """
    integrity = segment.integrity
    if integrity.covers(position, stop):
        return stop
    bad = integrity.corrupt_in(position, stop)
    if bad is not None:
        stop = bad[0]
        if integrity.covers(position, stop):
            return stop
    begin = integrity.verified_end(position)
    file = segment.file
    valid_end, reason = verify_messages(file.fileno(), begin, min(stop, begin + VERIFY_BUDGET), segment.size,
                                        ctx.max_message_size)
    integrity.add_verified(begin, valid_end)
    if reason:
        corrupt_end = corrupt_range_at(file.fileno(), valid_end, segment.size, ctx.max_message_size)
        error = ctx.corrupt(segment, valid_end, corrupt_end, reason)
        ctx.found(error.corrupt)
        if valid_end <= position:
            raise error
    return min(stop, valid_end)


def _empty_slice(view: SegmentList, end: int, offset: int, ctx: ReadContext) -> FileSlice:
    segment = view.find(offset)
    with storage_access(ctx, segment):
        if offset != end and not segment.is_boundary(offset - segment.base_offset):
            raise InvalidOffset(f"{ctx.topic}-{ctx.partition}: offset {offset} is not a message boundary")
        return FileSlice(None, offset - segment.base_offset, 0, offset, offset)


@contextmanager
def storage_access(ctx: ReadContext, segment: Segment | None = None) -> Iterator[None]:
    """Turn an OSError of a read (a file that cannot be opened or read) into a retriable StorageError."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or (segment.path if segment is not None else f"{ctx.topic}-{ctx.partition}")
        ctx.logger.warning("log.read_failed", file=where, error=exc.strerror or str(exc))
        raise StorageError(f"{ctx.topic}-{ctx.partition}: cannot read {where}: {exc.strerror or exc} "
                           f"(retriable)") from exc
