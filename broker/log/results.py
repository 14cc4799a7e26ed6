"""What the log's calls return: file slices of reads, where appends went, what a batched flush covers.

Value types only, shared by log.py, reads.py and their callers (the request
handlers, the coordinator's record log, the batch syncer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from rill.broker.log.open_files import SegmentFile

if TYPE_CHECKING:
    from rill.broker.log.segment import Segment


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, to be sent with ``os.sendfile`` (never copied).

    Attributes:
        file: the open segment file (its descriptor stays open while this slice lives);
            None for an empty slice, which needs no descriptor.
        position: where the range starts inside the file.
        length: bytes in the range (0 at the log end).
        offset: the log offset of the first byte.
        next_offset: ``offset + length``: where the next fetch starts. It is a message
            boundary unless the slice is a partial message (a message larger than the
            fetch size: the client sees an incomplete message and can retry larger).
    """

    file: SegmentFile | None
    position: int
    length: int
    offset: int
    next_offset: int


class FlushToken(NamedTuple):
    """What one half-done batched flush covers (see :meth:`Log.begin_flush`)."""

    messages: int
    end: int
    segments: list[tuple[Segment, int]]


class AppendInfo(NamedTuple):
    """Where an appended set went: offsets ``first_offset .. next_offset``, ``count`` messages."""

    first_offset: int
    next_offset: int
    count: int  # type: ignore[assignment]  # shadows tuple.count
