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
messages at the default interval needs about 16 MB). Entries are appended to the
file lazily by :meth:`SegmentIndex.persist`, called by a flush just before the
segment and index are fsynced; entries of unflushed data need not be durable
because recovery rebuilds the index of every segment after the recovery point.

Thread-safety: :meth:`add` and the lookups run on the log's writer thread; the
flushing thread calls :meth:`persist` and :meth:`fsync`, which only read entries
that already exist (arrays only grow outside of recovery, and each array operation
is atomic under the GIL). Loading and resetting happen before the log is shared.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from rill.broker.log import files

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
    """The index of one segment: ``positions[i]`` was appended at ``times[i]`` (ms)."""

    def __init__(self, path: str, interval: int) -> None:
        self.path = path
        self.interval = interval
        self.positions: array[int] = array(_POS_TYPE)
        self.times: array[int] = array(_TIME_TYPE)
        self._persisted = 0
        self._fd = -1
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def __len__(self) -> int:
        return len(self.positions)

    # -- loading -----------------------------------------------------------------------

    def read_raw(self, segment_size: int) -> tuple[array[int], array[int]]:
        """The entries currently in the file, unchecked (at most what ``segment_size`` allows)."""
        size = min(os.fstat(self._fd).st_size, (segment_size // 9 + 1) * ENTRY_SIZE)
        return unpack_entries(_pread_all(self._fd, size, 0))

    def load_trusted(self, segment_size: int) -> bool:
        """Load the file if it passes the sanity checks; return whether it did.

        Checks: whole entries only, no more entries than the segment could hold, the
        first at position 0 (none for an empty segment), positions strictly increasing
        and below ``segment_size``, times non-decreasing. The caller also checks that
        the last entry is a message boundary (see ``Segment.check_index_tail``).
        """
        size = os.fstat(self._fd).st_size
        if size % ENTRY_SIZE or size // ENTRY_SIZE > segment_size // 9 + 1:
            return False
        positions, times = unpack_entries(_pread_all(self._fd, size, 0))
        if not _sane(positions, times, segment_size):
            return False
        self.positions, self.times = positions, times
        self._persisted = len(positions)
        return True

    def reset(self, positions: array[int], times: array[int]) -> None:
        """Replace every entry (after a rebuild) and rewrite the file; not fsynced."""
        self.positions, self.times = positions, times
        os.ftruncate(self._fd, 0)
        files.pwrite_all(self._fd, pack_entries(positions, times), 0, self.path)
        self._persisted = len(positions)

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

    def persist(self) -> None:
        """Append to the file the entries added since the last call (no fsync)."""
        count = min(len(self.positions), len(self.times))  # an add() on the writer thread may be half done
        done = self._persisted
        if count > done:
            data = pack_entries(self.positions[done:count], self.times[done:count])
            files.pwrite_all(self._fd, data, done * ENTRY_SIZE, self.path)
            self._persisted = count

    def fsync(self) -> None:
        os.fsync(self._fd)

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

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


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


