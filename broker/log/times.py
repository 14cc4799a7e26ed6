"""Questions about append times, answered from the segments' sparse indexes.

Each index entry is a message boundary and the wall-clock time of the append that
wrote it (index.py). An entry is written at the first message of a segment, at the
first boundary at least ``log.index.interval.bytes`` after the previous entry, and at
the first message of an append that comes ``log.index.interval.ms`` or more after the
previous entry. So the entry at or before a message gives its append time, never
later than the true one and less than ``log.index.interval.ms`` earlier.

Every function reads one immutable :class:`SegmentList` snapshot plus the log end the
caller read with it; index arrays only grow, on the thread that calls these (the
broker's event loop), so a lookup sees a consistent state.
"""

from __future__ import annotations

from bisect import bisect_right

from rill.broker.log.segments import SegmentList
from rill.client.errors import OffsetOutOfRange

LATEST_TIME = -1  # OFFSETS request: the log end
EARLIEST_TIME = -2  # OFFSETS request: the log start


def append_time_ms(view: SegmentList, end: int, offset: int) -> int | None:
    """When the message at ``offset`` was appended (ms since the epoch), from its floor entry.

    None at or past the log end ``end``, or before the log start.
    """
    if offset >= end or offset < view.start_offset:
        return None
    segment = view.find(offset)
    return segment.index.time_at(offset - segment.base_offset)


def offsets_before(view: SegmentList, end: int, last_append_ms: int, time_ms: int, max_number: int) -> list[int]:
    """Offsets of messages appended before ``time_ms``, newest first, at most ``max_number``.

    ``time_ms == -1`` (latest) gives ``[end]`` and ``-2`` (earliest) the log start.
    Otherwise: the log end if the last append was before ``time_ms`` (or nothing was
    ever appended), then the offsets of index entries appended before ``time_ms``. A
    consumer starting at the first returned offset misses nothing appended at or after
    ``time_ms``. Returns ``[]`` when ``max_number <= 0`` or nothing qualifies.
    """
    if max_number <= 0:
        return []
    if time_ms == LATEST_TIME:
        return [end]
    if time_ms == EARLIEST_TIME:
        return [view.start_offset]
    result = [end] if last_append_ms < time_ms else []
    for segment in reversed(view.segments):
        need = max_number - len(result)
        if need <= 0:
            break
        index = segment.index
        count = index.count_before(time_ms)
        chosen = index.positions[max(0, count - need):count]
        base = segment.base_offset
        result.extend(base + p for p in reversed(chosen))
    return result[:max_number]


def time_entries(view: SegmentList, end: int, offset: int, max_entries: int) -> list[tuple[int, int]]:
    """Index entries ``(offset, append time ms)`` from the one at or before ``offset``, ascending.

    At most ``max_entries``; the next call starts at the last offset returned (which
    it returns again, as the floor entry). A message's append time is that of the last
    entry at or before it.

    Raises:
        OffsetOutOfRange: ``offset`` is before the log start or past the log end ``end``.
    """
    if offset < view.start_offset or offset > end:
        raise OffsetOutOfRange(f"offset {offset} is outside the log [{view.start_offset}, {end}]")
    result: list[tuple[int, int]] = []
    first = True
    for segment in view.from_offset(offset):
        need = max_entries - len(result)
        if need <= 0:
            break
        index, base = segment.index, segment.base_offset
        lo = max(0, bisect_right(index.positions, offset - base) - 1) if first else 0
        first = False
        hi = min(len(index.positions), lo + need)
        result.extend(zip((base + p for p in index.positions[lo:hi]), index.times[lo:hi]))
    return result
