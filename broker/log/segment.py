"""One segment of a partition log: a ``%020d.log`` file and its sparse index.

On-disk format of ``%020d.log``: messages back to back exactly as on the wire
(``int32 length`` then ``length`` bytes; see rill.client.protocol.messages). The file
name is the log offset of its first byte (the base offset); a position inside the file
is relative to it and always below 2**31 (LogConfig caps segment_bytes).

Descriptors: a segment holds no open file of its own. Its ``.log`` and ``.index``
files come from the log manager's :class:`~rill.broker.log.open_files.OpenFiles`
cache when needed (:attr:`Segment.file`), so a broker with 100,000 partitions does not
hold 200,000 descriptors. Its index is loaded when first asked for
(:attr:`Segment.index`) by the loader recovery gives it: a segment nobody reads costs
no I/O at start-up.

Thread-safety: one writer thread appends (:meth:`Segment.append`) and reads; a
flushing thread may call :meth:`flush` at the same time (fsync does not conflict with
pwrite). :attr:`size` is a plain int, assigned after the bytes are written, so any
thread that reads it sees only whole appended sets. Every user of a file keeps a
reference to the file object while it uses the descriptor, so eviction from the cache
never closes a descriptor under it. :meth:`delete` unlinks the files; a
:class:`FileSlice` (see log.py) taken before still reads, and its descriptor closes
when the last reference goes. Loading the index happens once, under a lock.
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from collections.abc import Callable, Sequence

from rill.broker.log import files
from rill.broker.log.index import ENTRY_SIZE, SegmentIndex, read_index_file
from rill.broker.log.integrity import SegmentIntegrity
from rill.broker.log.open_files import UNBOUNDED, OpenFiles, SegmentFile

_LENGTH = struct.Struct(">i")
_MIN_ENTRY = 4 + 5  # length field + the smallest message (magic 0, crc)
_MAX_HOP_READ = 64 * 1024
_LOAD_LOCK = threading.Lock()

IndexLoader = Callable[["Segment"], None]
"""Loads a segment's index (``Segment.set_index``), rebuilding it from the log if it fails its checks."""


def load_trusted_index(segment: Segment) -> None:
    """The default loader: the index file as it is if it passes the sanity checks, else empty.

    Raises:
        OSError: the index file cannot be read.
    """
    index = SegmentIndex(segment.index_path, segment.index_interval)
    if not index.load_trusted(read_index_file(segment.index_path, segment.size), segment.size):
        index = SegmentIndex(segment.index_path, segment.index_interval)
    segment.set_index(index)


class Segment:
    """A segment file plus its index. Not thread-safe beyond the module contract."""

    __slots__ = ("directory", "base_offset", "path", "index_interval", "size", "synced_size", "mtime_ms",
                 "last_append_ms", "integrity", "open_log", "log_used", "_files", "_index", "_index_loader",
                 "_index_unsynced")

    def __init__(self, directory: str, base_offset: int, size: int, mtime_ms: int, index_interval: int,
                 open_files: OpenFiles | None = None, loader: IndexLoader = load_trusted_index) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = files.segment_path(directory, base_offset)
        self.index_interval = index_interval
        self.size: int = size
        self.synced_size: int = size
        """Bytes known to be fsynced: everything on disk when opened, then what flush synced."""
        self.mtime_ms: int = mtime_ms
        self.last_append_ms: int = mtime_ms
        """Time of the last append (ms): set by appends, else the newer of mtime and the index."""
        self.integrity = SegmentIntegrity()
        """Ranges verified good or found corrupt since the log was opened (integrity.py)."""
        self.open_log: SegmentFile | None = None
        """The open ``.log`` file while the open-files cache holds it (the cache sets and clears it)."""
        self.log_used = False
        """Set on each use of ``open_log``; the cache clears it (its CLOCK reference bit)."""
        self._files = open_files if open_files is not None else OpenFiles(UNBOUNDED)
        self._index: SegmentIndex | None = None
        self._index_loader = loader
        self._index_unsynced = False

    @classmethod
    def open(cls, directory: str, base_offset: int, index_interval: int, open_files: OpenFiles | None = None,
             loader: IndexLoader = load_trusted_index) -> Segment:
        """An existing segment, from one ``stat``: no descriptor is opened and the index is not loaded.

        Raises:
            OSError: the file cannot be stat'ed.
        """
        stat = os.stat(files.segment_path(directory, base_offset))
        return cls(directory, base_offset, stat.st_size, stat.st_mtime_ns // 1_000_000, index_interval,
                   open_files, loader)

    @classmethod
    def create(cls, directory: str, base_offset: int, index_interval: int, now_ms: int,
               open_files: OpenFiles | None = None, sync_dir: bool = True) -> Segment:
        """Create a new, empty segment; fsync the directory unless ``sync_dir`` is False (KAFKA-3968).

        A new topic's partitions pass ``sync_dir=False``: their directories are new, and
        an empty segment lost in a crash is simply created again.

        Raises:
            FileExistsError: a segment with this base offset already exists.
            OSError: the file could not be created.
        """
        path = files.segment_path(directory, base_offset)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        index_file = files.index_path(directory, base_offset)
        if os.path.lexists(index_file):
            os.unlink(index_file)  # a stale index of an earlier file with this name
        if sync_dir:
            files.fsync_dir(directory)
        segment = cls(directory, base_offset, 0, now_ms, index_interval, open_files)
        segment.set_index(SegmentIndex(index_file, index_interval))
        segment.last_append_ms = now_ms
        return segment

    # -- files and index -----------------------------------------------------------------

    @property
    def index_path(self) -> str:
        return files.index_path(self.directory, self.base_offset)

    @property
    def file(self) -> SegmentFile:
        """The open ``.log`` file (from the cache; keep the object while using its descriptor).

        Raises:
            OSError: the file could not be opened.
        """
        found = self.open_log
        if found is not None:  # the hot path: one read and one write of a slot
            self.log_used = True
            return found
        return self._files.log_file(self)

    @property
    def index(self) -> SegmentIndex:
        """The sparse index, loaded on first use.

        Raises:
            OSError: the index (or, for a rebuild, the log) could not be read.
        """
        index = self._index
        if index is None:
            with _LOAD_LOCK:
                if self._index is None:
                    self._index_loader(self)
                index = self._index
            assert index is not None, "an index loader must call set_index"
        return index

    @property
    def index_loaded(self) -> bool:
        return self._index is not None

    def set_index(self, index: SegmentIndex) -> None:
        """Install a loaded index (loaders and recovery) and take the append times it knows."""
        self._index = index
        last = index.last_time_ms
        self.last_append_ms = max(self.mtime_ms, last if last is not None else self.mtime_ms)

    @property
    def unsynced(self) -> bool:
        """Whether bytes were appended since the last fsync (the file must stay open until then)."""
        return self.size > self.synced_size

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    # -- writing -----------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, marks: Sequence[int], now_ms: int,
               handle: SegmentFile | None = None) -> None:
        """Write a validated message set at the end with one pwrite (looping on short writes).

        ``marks`` are index boundaries relative to ``data`` (from ``scan``, which also
        checked every message: the range counts as verified); ``handle`` is the open
        file when the caller already has it.

        Raises:
            OSError: the file could not be opened, or the write failed. After a failed
                write the file is cut back to its old size (best effort) and the
                segment size is unchanged, so no part of the set stays behind.
        """
        position = self.size
        file = handle if handle is not None else self.file
        try:
            files.pwrite_all(file.fileno(), data, position, self.path)
        except OSError:
            try:
                os.ftruncate(file.fileno(), position)
            except OSError:
                pass  # the write error is what the caller reports; recovery cuts the rest
            raise
        if marks:
            (self._index if self._index is not None else self.index).add(marks, position, now_ms)
        end = position + len(data)
        integrity = self.integrity
        if integrity.tail_end == position:  # the caller scanned it: extend the verified range (inlined)
            integrity.tail_end = end
        else:
            integrity.extend_tail(position, end)
        self.size = end
        self.last_append_ms = now_ms

    def flush(self) -> None:
        """Write pending index entries, then fsync the log and the index.

        Raises:
            OSError: a write or fsync failed (never retry an fsync: the pages may be lost).
        """
        size = self.size
        self.write_index()
        log_file = self.file
        os.fsync(log_file.fileno())
        if self._index_unsynced:
            index_file = self._files.index_file(self)
            os.fsync(index_file.fileno())
            self._index_unsynced = False
        self.synced_size = max(self.synced_size, size)

    def write_index(self) -> None:
        """Write the index entries added since the last call (no fsync: the first half of a flush).

        Raises:
            OSError: the write failed.
        """
        index = self._index
        if index is None:
            return
        first, count, data = index.unpersisted()
        if data:
            index_file = self._files.index_file(self)
            files.pwrite_all(index_file.fileno(), data, first * ENTRY_SIZE, self.index_path)
            index.persisted(count)
            self._index_unsynced = True

    def synced_by_others(self, size: int) -> None:
        """The whole file system was synced after ``size`` bytes were written (a batched flush)."""
        self.synced_size = max(self.synced_size, size)
        self._index_unsynced = False

    def truncate_to(self, position: int) -> None:
        """Cut the file at ``position`` (recovery only, before the log is shared); not fsynced."""
        file = self.file
        os.ftruncate(file.fileno(), position)
        self.size = position
        self.synced_size = min(self.synced_size, position)
        self.integrity.forget_after(position)

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
        index = self.index
        if not index.positions:
            return self.size == 0
        last = index.positions[-1]
        if self.size - last > index.interval + 4 + max_message_size:
            return False
        return self._hop(last, self.size) == self.size

    def hop(self, boundary: int, target: int) -> int:
        """The last message boundary <= ``target``, reached from the known ``boundary`` by
        following length headers (recovery checks old index entries with it)."""
        return self._hop(boundary, target)

    def _hop(self, position: int, target: int) -> int:
        """From the boundary ``position``, follow lengths; return the last boundary <= target."""
        if position >= target:
            return position
        file = self.file
        fd = file.fileno()
        block = b""
        block_start = position
        while position < target:
            offset = position - block_start
            if offset + 4 > len(block):
                block = os.pread(fd, min(target + 4 - position, _MAX_HOP_READ), position)
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
        """Release the cached descriptors (they close once no reader holds a slice)."""
        self._files.forget(self)

    def delete(self) -> None:
        """Unlink the log and index files; descriptors close with their last reference."""
        for path in (self.path, self.index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._files.forget(self)

    def rebuild_index(self, positions: array[int], times: array[int]) -> None:
        """Replace the index with entries found by a scan and rewrite its file (synced by the next flush)."""
        index = SegmentIndex(self.index_path, self.index_interval)
        index.reset(positions, times)
        index_file = self._files.index_file(self)
        data = index.encoded()
        files.pwrite_all(index_file.fileno(), data, 0, self.index_path)
        if os.fstat(index_file.fileno()).st_size > len(data):
            os.ftruncate(index_file.fileno(), len(data))  # only when it shrank: a truncate costs a metadata write
        self._index_unsynced = True
        self.set_index(index)

    def __repr__(self) -> str:
        return f"Segment({self.path!r}, size={self.size})"
