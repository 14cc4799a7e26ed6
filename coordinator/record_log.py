"""What the offset store needs from a log, and reading a log back message by message.

The coordinator does not import the broker (the broker depends on the coordinator),
so the store is handed a log: :class:`RecordLog` names the part of
``rill.broker.log.Log`` it uses, and a plain ``Log`` satisfies it. Reads go
through the log's file slices (``read`` returns a range of one segment file,
never bytes), so this module preads them itself.

Thread-safety: :func:`read_messages` reads a log no other thread appends to
(start-up replay).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from rill.client.errors import CorruptMessageError, InvalidMessage, StorageError
from rill.client.protocol.messages import LENGTH, MIN_MESSAGE_SIZE, decode_message_set

__all__ = ["Appended", "LogSlice", "RecordLog", "SegmentInfo", "read_messages"]


class _Descriptor(Protocol):
    def fileno(self) -> int: ...


class LogSlice(Protocol):
    """A byte range of one segment file (``rill.broker.log.FileSlice``)."""

    @property
    def file(self) -> _Descriptor | None: ...  # None for an empty slice
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...


class SegmentInfo(Protocol):
    """Where a segment sits in the log (``rill.broker.log.segment.Segment``)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...


class Appended(Protocol):
    """Where an appended message set went (``rill.broker.log.AppendInfo``)."""

    @property
    def next_offset(self) -> int: ...


class RecordLog(Protocol):
    """The part of ``rill.broker.log.Log`` the store uses; a plain ``Log`` is one.

    ``append`` writes one validated message set with one write (raising
    ``StorageError`` once the log has failed); ``flush`` fsyncs everything appended
    before it started and then advances ``flushed_offset``; ``read`` returns a slice
    of one segment ending on a message boundary (or a prefix of one message larger
    than ``max_size``); ``delete_oldest_segments`` never removes the active segment.
    """

    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def flushed_offset(self) -> int: ...
    @property
    def segments(self) -> Sequence[SegmentInfo]: ...

    def append(self, message_set: bytes) -> Appended: ...
    def read(self, offset: int, max_size: int) -> LogSlice: ...
    def flush(self) -> None: ...
    def delete_oldest_segments(self, choose: Callable[[tuple[SegmentInfo, ...]], int]) -> Sequence[object]: ...
    def close(self) -> None: ...


def read_messages(log: RecordLog, read_bytes: int, logger: Any) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, payload)`` of every message from the log start to its end.

    Reads ``read_bytes`` at a time (more for a message larger than that), with one
    ``os.pread`` per slice. Messages inside a compressed wrapper share its offset. A
    slice that does not decode is decoded message by message; a message that does
    not decode is logged (``offsets_log.bad_record``) and skipped.

    Raises:
        StorageError: the log is closed or its files are shorter than it says.
    """
    offset, end = log.start_offset, log.end_offset
    size = read_bytes
    while offset < end:
        try:
            piece = log.read(offset, size)
        except InvalidMessage as exc:  # the broker found corrupt bytes on disk here: skip them
            resume = getattr(exc, "resume_offset", None)
            if resume is None or resume <= offset:
                raise
            logger.error("offsets_log.bad_record", offset=offset, error=str(exc),
                         hint=f"skipped to offset {resume}; the state it held, if any, is lost")
            offset = resume
            continue
        if piece.length == 0 or piece.file is None:  # the end of a segment: go on with the next one
            offset = _next_base(log, offset)
            continue
        data = _pread(piece.file.fileno(), piece.length, piece.position)
        try:
            messages, consumed = decode_message_set(data, base_offset=piece.offset)
        except CorruptMessageError:
            consumed = len(data)
            yield from _one_by_one(data, piece.offset, logger)
        else:
            yield from ((m.offset, m.value) for m in messages)
        if consumed == 0:  # one message larger than the read: read it whole
            whole = 4 + LENGTH.unpack_from(data)[0]
            if whole <= len(data):
                raise StorageError(f"offsets log: cannot decode the message at offset {offset}")
            size = whole
            continue
        offset = piece.offset + consumed
        size = read_bytes


def _one_by_one(data: bytes, base: int, logger: Any) -> Iterator[tuple[int, bytes]]:
    """Decode ``data`` (whole messages) one message at a time, logging and skipping bad ones."""
    position = 0
    while position + 4 <= len(data):
        step = 4 + LENGTH.unpack_from(data, position)[0]
        if step < 4 + MIN_MESSAGE_SIZE:  # recovery never lets this through; do not loop on it
            logger.error("offsets_log.bad_record", offset=base + position, error=f"length field {step - 4}",
                         hint="skipped the rest of the read")
            return
        try:
            messages, _ = decode_message_set(data[position:position + step], base_offset=base + position)
        except CorruptMessageError as exc:
            logger.error("offsets_log.bad_record", offset=base + position, error=str(exc),
                         hint="skipped; the state it held, if any, is lost")
        else:
            yield from ((m.offset, m.value) for m in messages)
        position += step


def _next_base(log: RecordLog, offset: int) -> int:
    for segment in log.segments:
        if segment.base_offset > offset:
            return segment.base_offset
    raise StorageError(f"offsets log: no segment after offset {offset} although the log ends at {log.end_offset}")


def _pread(fd: int, length: int, position: int) -> bytes:
    data = os.pread(fd, length, position)
    while len(data) < length:
        more = os.pread(fd, length - len(data), position + len(data))
        if not more:
            raise StorageError(f"offsets log: segment file ends before position {position + length}")
        data += more
    return data
