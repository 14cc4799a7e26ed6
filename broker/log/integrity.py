"""What is known about a segment's bytes: ranges verified good, ranges found corrupt.

Bytes on disk can rot after they were written (a bad sector, a flipped bit). Kafka
leaves that to consumers; rill never serves a range it has not checked, and never one
it knows is corrupt:

* a range is *verified* when every message in it passed its length and CRC check
  since this broker opened the log: an append is checked before it is written, a
  recovery scan checks what it reads, and a read of bytes nobody checked yet checks
  them first (:func:`verify_messages`, at most ``VERIFY_BUDGET`` bytes per read on the
  event loop), as does the background scrubber (scrubber.py);
* a range is *corrupt* from the first byte that fails a check to the next position
  where a valid message starts (or the end of the segment). Reads refuse it with
  InvalidMessage (error code 2) naming the file and position; the scrubber, a read or
  ``rill-broker --verify-logs`` finds it; an operator cuts or quarantines it
  (repair.py), and a replica of a replicated topic fetches the good bytes again from
  its in-sync peers (the log manager's ``on_corruption`` listeners:
  broker/replication/replica_healer.py).

Positions are relative to the segment. Thread-safety: the ranges are immutable
tuples replaced as a whole (copy-on-write), so the event loop reads them without a
lock while the scrubber adds to them; a short lock serialises writers. A lost race
only means a range is checked twice.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from dataclasses import dataclass

from rill.client.errors import InvalidMessage
from rill.client.protocol.messages import SCAN_ERROR_NAMES, SCAN_OK, find_valid, scan

VERIFY_BUDGET = 4 * 1024 * 1024
"""About the most unverified bytes one read checks on the event loop, rounded up to whole read windows
(256 KiB) and messages: a fetch gets less than it asked for rather than waiting longer."""
_WINDOW = 256 * 1024

Range = tuple[int, int]


@dataclass(frozen=True, slots=True)
class CorruptRange:
    """``[start, end)`` of a segment failed its checks; ``reason`` says how (``start`` is where it failed)."""

    path: str
    base_offset: int
    start: int
    end: int
    reason: str

    @property
    def offset(self) -> int:
        """The log offset of the first bad byte."""
        return self.base_offset + self.start

    @property
    def length(self) -> int:
        return self.end - self.start


class CorruptDataError(InvalidMessage):
    """A read reached bytes that failed their check on disk; they are not served (wire code 2).

    Attributes:
        corrupt: the corrupt range (file, positions, reason).
        resume_offset: the log offset where valid data starts again (the range's end).
    """

    def __init__(self, topic: str, partition: int, corrupt: CorruptRange) -> None:
        super().__init__(f"{topic}-{partition}: the data at offset {corrupt.offset} is corrupt on disk "
                         f"({corrupt.reason}; {corrupt.path} position {corrupt.start}, {corrupt.length} bytes); "
                         f"it is not served (see rill-broker --verify-logs)")
        self.corrupt = corrupt
        self.resume_offset = corrupt.base_offset + corrupt.end


class SegmentIntegrity:
    """Verified and corrupt ranges of one segment (see the module docstring)."""

    __slots__ = ("verified", "corrupt", "reasons", "tail_start", "tail_end", "_lock")

    def __init__(self) -> None:
        self.tail_start = self.tail_end = -1
        """The verified range appends extend (two ints: no allocation per append); -1 when none."""
        self.verified: tuple[Range, ...] = ()
        self.corrupt: tuple[Range, ...] = ()
        self.reasons: dict[int, str] = {}
        """Why the corrupt range starting at each position failed."""
        self._lock = threading.Lock()

    def covers(self, start: int, stop: int) -> bool:
        """Whether ``[start, stop)`` lies inside one verified range (and no corrupt one)."""
        if self.tail_start <= start and stop <= self.tail_end and not self.corrupt:
            return True  # the append path's range: the usual case for a consumer keeping up
        ranges = self._all_verified()
        i = bisect_right(ranges, (start, 1 << 62)) - 1
        return i >= 0 and ranges[i][0] <= start and stop <= ranges[i][1] and not self.corrupt_in(start, stop)

    def _all_verified(self) -> tuple[Range, ...]:
        if self.tail_end < 0:
            return self.verified
        return _merged(self.verified + ((self.tail_start, self.tail_end),))

    def corrupt_in(self, start: int, stop: int) -> Range | None:
        """The first corrupt range overlapping ``[start, stop)``, or None."""
        for low, high in self.corrupt:
            if low < stop and start < high:
                return low, high
        return None

    def verified_end(self, start: int) -> int:
        """The end of the verified range holding ``start`` (``start`` itself when none does)."""
        ranges = self._all_verified()
        i = bisect_right(ranges, (start, 1 << 62)) - 1
        return ranges[i][1] if i >= 0 and ranges[i][0] <= start < ranges[i][1] else start

    def extend_tail(self, start: int, stop: int) -> None:
        """Appended (and so checked) bytes ``[start, stop)``: the append path, O(1) (one writer thread)."""
        if start == self.tail_end:
            self.tail_end = stop
            return
        if self.tail_end > self.tail_start:
            self.add_verified(self.tail_start, self.tail_end)
        self.tail_start, self.tail_end = start, stop

    def add_verified(self, start: int, stop: int) -> None:
        """Note ``[start, stop)`` as verified (merged with touching ranges)."""
        if stop <= start:
            return
        with self._lock:
            self.verified = _merged(self.verified + ((start, stop),))

    def add_corrupt(self, start: int, stop: int, reason: str = "") -> None:
        with self._lock:
            self.reasons.setdefault(start, reason)
            self.corrupt = _merged(self.corrupt + ((start, stop),))

    def forget_after(self, position: int) -> None:
        """The segment was cut at ``position``: nothing is known beyond it."""
        with self._lock:
            self.verified = tuple((a, min(b, position)) for a, b in self.verified if a < position)
            self.corrupt = tuple((a, min(b, position)) for a, b in self.corrupt if a < position)
            if self.tail_start >= position:
                self.tail_start = self.tail_end = -1
            else:
                self.tail_end = min(self.tail_end, position)


def _merged(ranges: tuple[Range, ...]) -> tuple[Range, ...]:
    out: list[Range] = []
    for start, stop in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return tuple(out)


def verify_messages(fd: int, start: int, stop: int, size: int, max_message_size: int) -> tuple[int, str]:
    """Check the whole messages from the boundary ``start`` until one ends at or past ``stop``.

    Returns ``(valid_end, reason)``: every message in ``[start, valid_end)`` passed its
    checks; ``reason`` is "" when the check reached ``stop`` (or the segment's ``size``),
    otherwise why the message at ``valid_end`` failed. A message that runs past
    ``size`` is incomplete (a torn or cut tail), which is a failure too.
    """
    position = start
    while position < stop:
        want = min(max(_WINDOW, stop - position), size - position, VERIFY_BUDGET + max_message_size + 4)
        data = os.pread(fd, want, position)
        result = scan(data, max_message_size)
        position += result.valid_bytes
        if result.error != SCAN_OK:
            return position, SCAN_ERROR_NAMES[result.error]
        if result.valid_bytes == 0:  # one message longer than `want`, or a tail cut short
            if len(data) < 4 or position + 4 + int.from_bytes(data[:4], "big", signed=True) > size:
                return position, "incomplete message at the end of the segment"
            big = os.pread(fd, 4 + int.from_bytes(data[:4], "big", signed=True), position)
            result = scan(big, max_message_size)
            if result.error != SCAN_OK or result.valid_bytes == 0:
                return position, SCAN_ERROR_NAMES[result.error] if result.error else "incomplete message"
            position += result.valid_bytes
    return position, ""


def corrupt_range_at(fd: int, position: int, size: int, max_message_size: int) -> int:
    """Where the corrupt range starting at ``position`` ends: the next valid message, or ``size``."""
    found = find_valid_from(fd, position + 1, size, max_message_size)
    return found if found >= 0 else size


def find_valid_from(fd: int, start: int, size: int, max_message_size: int) -> int:
    """The first position >= ``start`` (and < ``size``) where a whole valid message begins, or -1.

    Reads bounded windows, so a long stretch of garbage costs time, not memory.
    """
    cursor = start
    while cursor < size:
        data = os.pread(fd, min(_WINDOW + 4 + max_message_size, size - cursor), cursor)
        found = find_valid(data, 0, max_message_size)
        if found >= 0:
            return cursor + found
        cursor += _WINDOW
    return -1
