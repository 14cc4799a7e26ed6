"""One segment of a partition log: a ``%020d.log`` file and its sparse index.

On-disk format of ``%020d.log``: messages back to back exactly as on the wire
(``int32 length`` then ``length`` bytes; see rill.client.protocol.messages). The file
name is the log offset of its first byte (the base offset); a position inside the file
is relative to it and always below 2**31 (LogConfig caps segment_bytes).

Thread-safety: one writer thread appends (:meth:`Segment.append`) and reads; a
flushing thread may call :meth:`flush` at the same time (fsync does not conflict with
pwrite). :attr:`size` is a plain int, assigned after the bytes are written, so any
thread that reads it sees only whole appended sets. :meth:`delete` unlinks the files
but leaves the descriptors open: a :class:`FileSlice` (see log.py) taken before the
deletion keeps the file object alive and still reads, and the descriptor closes when
the last reference goes.
"""

from __future__ import annotations

import io
import os
import struct
from array import array
from collections.abc import Sequence

from rill.broker.log import files
from rill.broker.log.index import SegmentIndex

_LENGTH = struct.Struct(">i")
_MIN_ENTRY = 4 + 5  # length field + the smallest message (magic 0, crc)
_MAX_HOP_READ = 64 * 1024


class SegmentFile(io.FileIO):
    """A raw file whose descriptor closes quietly when its last reference goes.

    Segments hand this object to readers (``FileSlice.file``); a deleted segment's
    file stays open for as long as a slice of it is alive.
    """

    def __del__(self) -> None:
        if not self.closed:
            self.close()


class Segment:
    """A segment file plus its index. Not thread-safe beyond the module contract."""

    def __init__(self, directory: str, base_offset: int, file: SegmentFile, index: SegmentIndex) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = files.segment_path(directory, base_offset)
        self.file = file
        self.index = index
        self._fd = file.fileno()
        stat = os.fstat(self._fd)
        self.size: int = stat.st_size
        self.mtime_ms: int = stat.st_mtime_ns // 1_000_000
        self.last_append_ms: int = self.mtime_ms
        """Time of the last append (ms): set by appends, else the newer of mtime and the index."""

    @classmethod
    def open(cls, directory: str, base_offset: int, index_interval: int) -> Segment:
        """Open an existing segment; its index is NOT loaded (see recovery.py)."""
        fd = os.open(files.segment_path(directory, base_offset), os.O_RDWR | os.O_CLOEXEC)
        file = SegmentFile(fd, "r+")
        return cls(directory, base_offset, file, SegmentIndex(files.index_path(directory, base_offset),
                                                              index_interval))

    @classmethod
    def create(cls, directory: str, base_offset: int, index_interval: int, now_ms: int) -> Segment:
        """Create a new, empty segment and fsync the directory (KAFKA-3968).

        Raises:
            FileExistsError: a segment with this base offset already exists.
        """
        path = files.segment_path(directory, base_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        file = SegmentFile(fd, "r+")
        index_file = files.index_path(directory, base_offset)
        if os.path.exists(index_file):
            os.unlink(index_file)  # a stale index of an earlier file with this name
        segment = cls(directory, base_offset, file, SegmentIndex(index_file, index_interval))
        files.fsync_dir(directory)
        segment.last_append_ms = now_ms
        return segment

    def load_times(self) -> None:
        """Set :attr:`last_append_ms` from the loaded index and the file's mtime."""
        last = self.index.last_time_ms
        self.last_append_ms = max(self.mtime_ms, last if last is not None else self.mtime_ms)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    @property
    def first_append_ms(self) -> int | None:
        """Time of the first append (from index entry 0); ``None`` for an empty segment."""
        return self.index.first_time_ms if self.size else None

    # -- writing -----------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, marks: Sequence[int], now_ms: int) -> None:
        """Write a validated message set at the end with one pwrite (looping on short writes).

        ``marks`` are index boundaries relative to ``data`` (from ``scan``).

        Raises:
            OSError: the write failed; the segment size is unchanged.
        """
        position = self.size
        files.pwrite_all(self._fd, data, position, self.path)
        if marks:
            self.index.add(marks, position, now_ms)
        self.size = position + len(data)
        self.last_append_ms = now_ms

    def flush(self) -> None:
        """Write pending index entries, then fsync the log and the index.

        Raises:
            OSError: a write or fsync failed (never retry an fsync: the pages may be lost).
        """
        self.index.persist()
        os.fsync(self._fd)
        self.index.fsync()

    def truncate_to(self, position: int) -> None:
        """Cut the file at ``position`` (recovery only, before the log is shared); not fsynced."""
        os.ftruncate(self._fd, position)
        self.size = position

    # -- finding message boundaries ------------------------------------------------------

    def find_boundary_at_or_before(self, rel_pos: int, known: int = 0) -> int:
        """The last message boundary <= ``rel_pos`` (positions relative to the segment).

        Starts from the index floor entry (or ``known``, a boundary the caller already
        verified, when that is closer) and hops through length headers with a few small
        preads: the distance is bounded by the index interval plus one message.
        """
        target = min(rel_pos, self.size)
        return self._hop(max(self.index.floor(target), known if known <= target else 0), target)

    def is_boundary(self, rel_pos: int) -> bool:
        """Whether a message starts at ``rel_pos`` (the segment end counts as a boundary)."""
        if rel_pos == 0 or rel_pos == self.size:
            return True
        if rel_pos < 0 or rel_pos > self.size:
            return False
        return self._hop(self.index.floor(rel_pos), rel_pos) == rel_pos

    def check_index_tail(self, max_message_size: int) -> bool:
        """Whether hopping from the last index entry lands exactly on the segment end."""
        if not self.index.positions:
            return self.size == 0
        last = self.index.positions[-1]
        if self.size - last > self.index.interval + 4 + max_message_size:
            return False
        return self._hop(last, self.size) == self.size

    def hop(self, boundary: int, target: int) -> int:
        """The last message boundary <= ``target``, reached from the known ``boundary`` by
        following length headers (recovery checks old index entries with it)."""
        return self._hop(boundary, target)

    def _hop(self, position: int, target: int) -> int:
        """From the boundary ``position``, follow lengths; return the last boundary <= target."""
        block = b""
        block_start = position
        while position < target:
            offset = position - block_start
            if offset + 4 > len(block):
                block = os.pread(self._fd, min(target + 4 - position, _MAX_HOP_READ), position)
                block_start, offset = position, 0
                if len(block) < 4:
                    return position
            step = 4 + _LENGTH.unpack_from(block, offset)[0]
            if step < _MIN_ENTRY or position + step > target:
                return position
            position += step
        return position

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the log and index descriptors (only when no reader can hold a slice)."""
        self.file.close()
        self.index.close()

    def delete(self) -> None:
        """Unlink the log and index files; descriptors close with their last reference."""
        for path in (self.path, self.index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def rebuild_index(self, positions: array[int], times: array[int]) -> None:
        """Replace the index with entries found by a scan (recovery only)."""
        self.index.reset(positions, times)
        self.load_times()

    def __repr__(self) -> str:
        return f"Segment({self.path!r}, size={self.size})"
