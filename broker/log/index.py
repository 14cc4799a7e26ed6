"""The sparse per-segment index: message boundaries every few KiB, with append times.

On-disk format of ``%020d.index`` (big-endian, 12 bytes per entry, no header)::

    position   uint32   position of a message boundary relative to the segment start
    time_ms    int64    wall-clock time (ms) of the append that wrote that message

Entries are written in order: one at the first message of the segment, then one at
the first message boundary at least ``index_interval_bytes`` after the previous entry
(``scan``'s marks compute these for each appended set). Positions are strictly
increasing and times never decrease (the log clamps a clock that goes backwards).

The index serves two things: the message boundary at or before any position (the
floor entry, then a few hops through length headers, bounded by the interval; see
segment.py) and the offsets appended before a time (OFFSETS requests, rewinds).

In memory it is two ``array`` objects (12 bytes per entry: a 5 GB log of 200-byte
messages at the default interval needs about 16 MB). A segment loads its index when
first asked for it (segment.py), so a broker with many partitions starts without
reading every index. Entries are appended to the file lazily by a flush
(``Segment.flush`` writes :meth:`SegmentIndex.unpersisted`) just before the segment and
index are fsynced; entries of unflushed data need not be durable because recovery
rebuilds the index from the recovery point on. The file is created by the first
flush that has entries to write: an empty segment has no index file.

Thread-safety: :meth:`add` and the lookups run on the log's writer thread; the
flushing thread calls :meth:`unpersisted` and :meth:`persisted`, which only read
entries that already exist (arrays only grow outside of recovery, and each array
operation is atomic under the GIL). Loading and resetting happen while the segment
loads its index, under the segment's load lock.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable


ENTRY_SIZE = 12
_POS_TYPE = "I"
_TIME_TYPE = "q"
assert array(_POS_TYPE).itemsize == 4 and array(_TIME_TYPE).itemsize == 8


def pack_entries(positions: array[int], times: array[int]) -> bytes:
    """Encode entries in the on-disk format (C-speed: strided slice copies, no per-entry loop)."""
    pos = array(_POS_TYPE, positions)
    tim = array(_TIME_TYPE, times)
    if sys.byteorder == "little":
        pos.byteswap()
        tim.byteswap()
    pos_bytes, time_bytes = pos.tobytes(), tim.tobytes()
    out = bytearray(ENTRY_SIZE * len(pos))
    for k in range(4):
        out[k::ENTRY_SIZE] = pos_bytes[k::4]
    for k in range(8):
        out[4 + k::ENTRY_SIZE] = time_bytes[k::8]
    return bytes(out)


def unpack_entries(data: bytes) -> tuple[array[int], array[int]]:
    """Decode the whole entries of ``data`` (a trailing partial entry is ignored)."""
    count = len(data) // ENTRY_SIZE
    data = data[:count * ENTRY_SIZE]
    pos_bytes = bytearray(4 * count)
    time_bytes = bytearray(8 * count)
    for k in range(4):
        pos_bytes[k::4] = data[k::ENTRY_SIZE]
    for k in range(8):
        time_bytes[k::8] = data[4 + k::ENTRY_SIZE]
    positions = array(_POS_TYPE, bytes(pos_bytes))
    times = array(_TIME_TYPE, bytes(time_bytes))
    if sys.byteorder == "little":
        positions.byteswap()
        times.byteswap()
    return positions, times


class SegmentIndex:
    """The index of one segment: ``positions[i]`` was appended at ``times[i]`` (ms).

    Holds the entries in memory only; the segment reads and writes its file
    (``Segment.flush``, ``Segment.rebuild_index``) through the open-files cache, so an
    index costs no descriptor while nobody writes it. ``path`` names that file.
    """

    __slots__ = ("path", "interval", "positions", "times", "_persisted")

    def __init__(self, path: str, interval: int) -> None:
        self.path = path
        self.interval = interval
        self.positions: array[int] = array(_POS_TYPE)
        self.times: array[int] = array(_TIME_TYPE)
        self._persisted = 0

    def __len__(self) -> int:
        return len(self.positions)

    # -- loading -----------------------------------------------------------------------

    def load_trusted(self, data: bytes, segment_size: int) -> bool:
        """Take the entries of the file's bytes ``data`` if they pass the sanity checks.

        Checks: whole entries only, no more entries than the segment could hold, the
        first at position 0 (none for an empty segment), positions strictly increasing
        and below ``segment_size``, times non-decreasing. The caller also checks that
        the last entry is a message boundary (see ``Segment.check_index_tail``).
        Returns whether the entries were taken.
        """
        if len(data) % ENTRY_SIZE or len(data) // ENTRY_SIZE > max_entries(segment_size):
            return False
        positions, times = unpack_entries(data)
        if not _sane(positions, times, segment_size):
            return False
        self.positions, self.times = positions, times
        self._persisted = len(positions)
        return True

    def reset(self, positions: array[int], times: array[int]) -> None:
        """Replace every entry (a rebuild); the caller rewrites the file with :meth:`encoded`."""
        self.positions, self.times = positions, times
        self._persisted = len(positions)

    def encoded(self) -> bytes:
        """Every entry in the file format."""
        return pack_entries(self.positions, self.times)

    # -- appending ---------------------------------------------------------------------

    def next_mark(self, segment_size: int) -> int:
        """``next_mark`` for ``scan`` of a set to be appended at ``segment_size``."""
        if not self.positions:
            return 0
        return max(0, self.positions[-1] + self.interval - segment_size)

    def add(self, marks: Iterable[int], base: int, time_ms: int) -> None:
        """Add the boundaries ``base + m`` for each mark (relative to an appended set)."""
        for mark in marks:
            self.positions.append(base + mark)
            self.times.append(time_ms)

    def unpersisted(self) -> tuple[int, int, bytes]:
        """``(first, count, data)``: entries ``first .. count-1`` not yet in the file, encoded.

        ``data`` is empty when every entry is persisted. Call :meth:`persisted` once
        ``data`` is written at ``first * ENTRY_SIZE``.
        """
        count = min(len(self.positions), len(self.times))  # an add() on the writer thread may be half done
        done = self._persisted
        if count <= done:
            return done, done, b""
        return done, count, pack_entries(self.positions[done:count], self.times[done:count])

    def persisted(self, count: int) -> None:
        """Note that the first ``count`` entries are in the file."""
        self._persisted = max(self._persisted, count)

    # -- lookups -----------------------------------------------------------------------

    def floor(self, position: int) -> int:
        """The largest indexed boundary <= ``position`` (0 when none is indexed)."""
        i = bisect_right(self.positions, position) - 1
        return self.positions[i] if i >= 0 else 0

    def time_at(self, position: int) -> int | None:
        """Append time (ms) of the indexed boundary at or before ``position`` (None when none)."""
        i = bisect_right(self.positions, position) - 1
        return self.times[i] if i >= 0 else None

    def count_before(self, time_ms: int) -> int:
        """How many entries were appended strictly before ``time_ms``."""
        return bisect_left(self.times, time_ms)

    @property
    def first_time_ms(self) -> int | None:
        return self.times[0] if self.times else None

    @property
    def last_time_ms(self) -> int | None:
        return self.times[-1] if self.times else None


def max_entries(segment_size: int) -> int:
    """The most entries a segment of this size can have (one per smallest message, 9 bytes)."""
    return segment_size // 9 + 1


def read_index_file(path: str, segment_size: int) -> bytes:
    """The bytes of an index file, at most what a segment of ``segment_size`` could need.

    A missing file reads as empty (an index is created by its first flush).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        size = min(os.fstat(fd).st_size, (max_entries(segment_size) + 1) * ENTRY_SIZE)
        return _pread_all(fd, size, 0)
    finally:
        os.close(fd)


def _sane(positions: array[int], times: array[int], segment_size: int) -> bool:
    if not positions:
        return segment_size == 0
    if positions[0] != 0 or positions[-1] >= segment_size:
        return False
    plist = positions.tolist()
    if plist != sorted(plist) or len(set(plist)) != len(plist):
        return False
    tlist = times.tolist()
    return tlist == sorted(tlist)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


