"""Log recovery after an unclean shutdown: a plain loop in the shape of Kafka's.

From the recovery point (an offset before which everything was fsynced; see
checkpoint.py) to the end: scan in bounded windows (a length field is checked against
the maximum message size and the bytes left in the file before anything past it is
read, so a garbage length of 0x7FFFFFFF never allocates 2 GiB), rebuild the index
from the scan. The segment holding the recovery point is scanned from the recovery
point itself when its old index reaches it (its entries below are kept), so recovery
reads what was not synced, not whole segments; a log whose recovery point is its end
is not read at all. At invalid bytes:

* nothing valid follows (a torn write, a zero-filled or garbage tail): copy the cut
  bytes to ``<segment>.corrupt-<unix_ms>`` (fsynced), truncate, and log a warning
  naming the file, position and byte count;
* a valid message follows in the same segment, or a later segment holds one: that is
  corruption in the middle of the log. Cutting there would drop good data, and
  refusing to start would take every partition offline for one bad sector: the bytes
  are kept, marked corrupt (integrity.py: reads refuse them with InvalidMessage), and
  logged (``recovery.corrupt_range``, naming the file and position) for an operator
  to repair (repair.py). With ``truncate_corrupt=True`` the log is cut there instead
  and every later segment moved into a side file.

Segments before the recovery point (every segment after a clean shutdown) are not
read at start-up: each loads its index when first used (:func:`index_loader`), and
the index must pass the sanity checks of ``SegmentIndex.load_trusted`` and
``Segment.check_index_tail``, or it is rebuilt by the same scan (never trust a
corrupt index). Base offsets must be contiguous (each segment starts where the
previous one ends); an empty segment whose name does not follow is the leftover of a
crash during a roll and is removed.

Thread-safety: recovery runs once, while a log is being opened, before it is shared;
a lazy index load runs under the segment's load lock.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rill.broker.log import files
from rill.broker.log.index import read_index_file, unpack_entries
from rill.broker.log.integrity import find_valid_from
from rill.broker.log.log_config import LogConfig
from rill.broker.log.open_files import OpenFiles
from rill.broker.log.segment import IndexLoader, Segment, load_trusted_index
from rill.client.errors import StorageError
from rill.client.protocol.messages import SCAN_ERROR_NAMES, SCAN_OK, scan

_WINDOW = 1 << 20
_TORN = -1  # an incomplete message at the end of the file
_LENGTH = struct.Struct(">i")


class CorruptLogError(StorageError):
    """Segments that do not fit together (a gap between them) while valid data follows: refusing to drop it.

    Attributes:
        path: the segment file.
        position: the position of the first invalid byte inside it.
    """

    def __init__(self, path: str, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt log at position {position}: {reason}; refusing to truncate "
                         f"valid data (restart with truncate_corrupt to cut it into a side file)")
        self.path = path
        self.position = position


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening a log did. ``clean`` is True when the scan was skipped;
    ``recovery_point`` is the one read from disk (0 when missing or unreadable)."""

    clean: bool
    segments_scanned: int = 0
    bytes_truncated: int = 0
    side_files: tuple[str, ...] = ()
    recovery_point: int = 0
    corrupt_ranges: int = 0
    """Ranges of invalid bytes kept (valid data follows them) and never served."""
    unsynced: tuple[Segment, ...] = ()
    """Scanned segments the caller must still sync (recovery with ``sync=False``)."""
    bytes_scanned: int = 0


@dataclass(slots=True)
class _ScanOutcome:
    valid_end: int
    error: int  # SCAN_OK, a SCAN_* error, or _TORN
    positions: array[int] = field(default_factory=lambda: array("I"))


def scan_segment(segment: Segment, max_message_size: int, interval: int, start: int = 0,
                 next_mark: int = 0) -> _ScanOutcome:
    """Validate a segment from the boundary ``start`` window by window.

    Returns where valid data ends and the index marks found (positions relative to
    the segment; the first at ``next_mark`` or later, then one per ``interval``).
    """
    file = segment.file
    fd, size = file.fileno(), segment.size
    outcome = _ScanOutcome(start, SCAN_OK)
    position, want = start, _WINDOW
    while position < size:
        wanted = min(want, size - position)
        buf = os.pread(fd, wanted, position)
        result = scan(buf, max_message_size, interval, max(0, next_mark - position))
        if result.marks:
            outcome.positions.extend([position + m for m in result.marks])
            next_mark = outcome.positions[-1] + interval
        position += result.valid_bytes
        if result.error != SCAN_OK:
            outcome.error = result.error
            break
        want = _WINDOW
        if result.valid_bytes or position >= size:
            continue
        if len(buf) < wanted or wanted == size - position:
            outcome.error = _TORN  # the message at `position` runs past the end of the file
            break
        want = 4 + _LENGTH.unpack_from(buf)[0]  # bounded: scan checked it against the maximum
    outcome.valid_end = position
    return outcome


class _Recovery:
    """The state of one log's recovery: configuration, report counters, logger."""

    def __init__(self, config: LogConfig, truncate_corrupt: bool, log: Any, now_ms: int) -> None:
        self.config = config
        self.truncate_corrupt = truncate_corrupt
        self.log = log
        self.now_ms = now_ms
        self.scanned: list[Segment] = []
        self.bytes_truncated = 0
        self.side_files: list[str] = []
        self.corrupt_ranges = 0
        self.bytes_scanned = 0

    def report(self, clean: bool, recovery_point: int) -> RecoveryReport:
        return RecoveryReport(clean, len(self.scanned), self.bytes_truncated, tuple(self.side_files),
                              recovery_point, self.corrupt_ranges, bytes_scanned=self.bytes_scanned)

    def rescan(self, segment: Segment, reason: str, start: int = 0) -> _ScanOutcome:
        """Scan ``segment`` from ``start`` (0 unless its old index reaches it) and rebuild its index.

        Invalid bytes followed by a valid message in the segment are kept and marked
        corrupt (:meth:`keep_corrupt`) and the scan goes on after them, unless
        ``truncate_corrupt`` (then the scan stops there to be cut). The outcome is that
        of the last stretch: ``valid_end < size`` means nothing valid follows in this
        segment.
        """
        max_size, interval = self.config.max_message_size, self.config.index_interval_bytes
        kept_positions, kept_times, start = _index_below(segment, start, max_size)
        next_mark = kept_positions[-1] + interval if kept_positions else 0
        marks = array("I")
        corrupt: list[tuple[int, int, str]] = []
        position = start
        while True:
            outcome = scan_segment(segment, max_size, interval, position, next_mark)
            marks.extend(outcome.positions)
            segment.integrity.add_verified(position, outcome.valid_end)
            if outcome.valid_end >= segment.size or self.truncate_corrupt:
                break
            follows = _find_valid_after(segment, outcome.valid_end + 1, max_size)
            if follows < 0:
                break
            corrupt.append((outcome.valid_end, follows, _reason(outcome)))
            position = next_mark = follows
        segment.rebuild_index(*_rebuilt_entries(segment, kept_positions, kept_times, start, marks,
                                                outcome.valid_end, [(a, b) for a, b, _ in corrupt]))
        self.scanned.append(segment)
        self.log.debug("recovery.scanned", file=segment.path, reason=reason, bytes=segment.size - start,
                       start=start, valid_bytes=outcome.valid_end - start, index_entries=len(segment.index))
        self.bytes_scanned += segment.size - start
        for low, high, why in corrupt:
            self.keep_corrupt(segment, low, high, why)
        return outcome

    def keep_corrupt(self, segment: Segment, start: int, end: int, reason: str) -> None:
        """Keep invalid bytes that valid data follows, but never serve them: a reader gets InvalidMessage."""
        segment.integrity.add_corrupt(start, end, reason)
        self.corrupt_ranges += 1
        self.log.error("recovery.corrupt_range", file=segment.path, position=start, bytes=end - start, reason=reason,
                       hint="kept but never served (reads fail with InvalidMessage); check with "
                            "rill-broker --verify-logs and repair with --repair quarantine or cut")

    def cut(self, segment: Segment, outcome: _ScanOutcome, later: list[Segment]) -> bool:
        """Handle invalid bytes at ``outcome.valid_end`` up to the segment's end; return whether the log ends here.

        A torn tail (nothing valid follows in the log), or any corruption with
        ``truncate_corrupt``: cut there (bytes to side files) and drop ``later``.
        Otherwise a later segment holds valid data: keep the bytes, marked corrupt.
        """
        position = outcome.valid_end
        reason = _reason(outcome)
        holder = next((s for s in later if _holds_valid(s, self.config.max_message_size)), None)
        if holder is not None and not self.truncate_corrupt:
            self.keep_corrupt(segment, position, segment.size, f"{reason}, followed by segment {holder.path}")
            return False
        self.move_tail(segment, position, reason)
        for other in later:
            self.drop(other, "follows a truncated segment")
        return True

    def move_tail(self, segment: Segment, position: int, reason: str) -> None:
        """Copy bytes ``position..end`` to a side file (fsynced), then truncate the segment."""
        count = segment.size - position
        path, out = files.create_side_file(segment.path, self.now_ms)
        source = segment.file
        try:
            _copy_range(source.fileno(), out, position, count)
            os.fsync(out)
        finally:
            os.close(out)
        files.fsync_dir(segment.directory)
        segment.truncate_to(position)
        os.fsync(source.fileno())
        self.bytes_truncated += count
        self.side_files.append(path)
        self.log.warning("recovery.truncated", file=segment.path,
                         position=position, bytes=count, reason=reason, side_file=path)

    def drop(self, segment: Segment, reason: str) -> None:
        """Remove a segment: rename a non-empty one to a side file, unlink an empty one."""
        if segment.size:
            target = files.side_file_name_for_rename(segment.path, self.now_ms)
            os.rename(segment.path, target)
            self.side_files.append(target)
            self.bytes_truncated += segment.size
        else:
            target = None
            os.unlink(segment.path)
        segment.delete()
        segment.close()
        files.fsync_dir(segment.directory)
        self.log.warning("recovery.segment_removed", file=segment.path, bytes=segment.size,
                         reason=reason, side_file=target)

    def discontinuity(self, previous: Segment, segment: Segment, rest: list[Segment]) -> None:
        """``segment`` does not start where ``previous`` ends: remove leftovers or refuse."""
        max_size = self.config.max_message_size
        if not any(_holds_valid(s, max_size) for s in rest) or self.truncate_corrupt:
            for other in rest:
                self.drop(other, f"base offset does not follow the previous segment's end {previous.end_offset}")
            return
        raise CorruptLogError(segment.path, 0, f"base offset {segment.base_offset} does not follow the "
                                               f"previous segment's end {previous.end_offset}")


def index_loader(config: LogConfig, log: Any, now_ms: int) -> IndexLoader:
    """A segment's lazy index loader: the file if it passes the checks, else a rebuild by scanning.

    A rebuild is logged (``recovery.index_rebuilt``); a segment whose data fails its
    checks keeps the index of its valid prefix (reads there fail until an operator cuts it).
    """
    def load(segment: Segment) -> None:
        load_trusted_index(segment)
        if segment.check_index_tail(config.max_message_size):
            return
        state = _Recovery(config, False, log, now_ms)
        outcome = state.rescan(segment, "index failed its checks")
        if outcome.valid_end < segment.size:  # a live log is never cut: the rest is refused to readers
            state.keep_corrupt(segment, outcome.valid_end, segment.size, _reason(outcome))
        log.warning("recovery.index_rebuilt", file=segment.path, index_entries=len(segment.index))
    return load


def open_segments(directory: str, config: LogConfig, *, clean: bool, truncate_corrupt: bool, log: Any,
                  now_ms: int, recovery_point: int = 0, open_files: OpenFiles | None = None,
                  sync_dir: bool = True, sync: bool = True) -> tuple[list[Segment], RecoveryReport]:
    """Open the segments of a partition directory (creating the first one) and recover them.

    ``sync_dir`` False skips the directory fsync when the first segment is created (a
    new topic's partitions). No descriptor stays open and no index is read unless
    recovery scans that segment.

    Raises: as :func:`recover_segments`, and OSError when the directory cannot be listed.
    """
    bases = files.list_segment_offsets(directory)
    loader = index_loader(config, log, now_ms)
    if not bases:
        segments = [Segment.create(directory, 0, config.index_interval_bytes, now_ms, open_files, sync_dir)]
    else:
        segments = [Segment.open(directory, base, config.index_interval_bytes, open_files, loader)
                    for base in bases]
    return recover_segments(segments, config, recovery_point, clean=clean,
                            truncate_corrupt=truncate_corrupt, log=log, now_ms=now_ms, sync=sync)


def recover_segments(segments: list[Segment], config: LogConfig, recovery_point: int, *, clean: bool,
                     truncate_corrupt: bool, log: Any, now_ms: int,
                     sync: bool = True) -> tuple[list[Segment], RecoveryReport]:
    """Check and repair ``segments`` (ascending, at least one); return those kept and a report.

    Scanned segments are fsynced (their data may sit in the page cache only) unless
    ``sync`` is False: then the caller syncs them (the log manager syncs the whole file
    system once after recovering every log; the report lists them in ``unsynced``).

    Raises:
        CorruptLogError: corruption in the middle of the log and not ``truncate_corrupt``.
        OSError: reading, writing or syncing failed.
    """
    state = _Recovery(config, truncate_corrupt, log, now_ms)
    end = segments[-1].end_offset
    if not clean and recovery_point > end:
        log.warning("recovery.log_shorter_than_recovery_point", recovery_point=recovery_point, end_offset=end,
                    detail="synced data is missing from the end of the log; recovering what is there")
        recovery_point = segments[-1].base_offset
    kept: list[Segment] = []
    for i, segment in enumerate(segments):
        if kept and segment.base_offset != kept[-1].end_offset:
            state.discontinuity(kept[-1], segment, segments[i:])
            break
        kept.append(segment)
        if clean or segment.end_offset <= recovery_point:
            continue  # synced before the crash: its index loads (and is checked) when first used
        start = max(0, recovery_point - segment.base_offset)
        outcome = state.rescan(segment, "unflushed", start)
        if outcome.valid_end < segment.size and state.cut(segment, outcome, segments[i + 1:]):
            break
    scanned = [segment for segment in state.scanned if segment in kept]
    if sync:
        for segment in scanned:
            segment.flush()  # recovered data may sit in the page cache only (KAFKA-10101)
    report = state.report(clean, recovery_point)
    return kept, report if sync else replace(report, unsynced=tuple(scanned))


def _index_below(segment: Segment, start: int, max_message_size: int) -> tuple[array[int], array[int], int]:
    """The old index entries below ``start`` and where a scan may begin.

    When the old index's sane prefix has entries below ``start`` and hopping from the
    last of them lands exactly on ``start``, those entries are kept and the scan begins
    at ``start``; otherwise nothing is kept and the scan begins at 0.
    """
    empty = (array("I"), array("q"), 0)
    if start <= 0:
        return empty
    positions, times = _sane_prefix(segment, segment.size)
    below = bisect_right(positions, start - 1)
    if not below or segment.hop(positions[below - 1], start) != start:
        return empty
    return positions[:below], times[:below], start


def _sane_prefix(segment: Segment, limit: int) -> tuple[array[int], array[int]]:
    """The old index file's entries up to the first that breaks an invariant or reaches ``limit``."""
    raw_positions, raw_times = unpack_entries(read_index_file(segment.index_path, segment.size))
    count = 0
    previous_position, previous_time = -1, None
    for position, time_ms in zip(raw_positions, raw_times):
        if (position <= previous_position or position >= limit or (count == 0 and position != 0)
                or (previous_time is not None and time_ms < previous_time)):
            break
        previous_position, previous_time = position, time_ms
        count += 1
    return raw_positions[:count], raw_times[:count]


def _reason(outcome: _ScanOutcome) -> str:
    return "incomplete message" if outcome.error == _TORN else SCAN_ERROR_NAMES[outcome.error]


def _rebuilt_entries(segment: Segment, kept_positions: array[int], kept_times: array[int], start: int,
                     scanned: array[int], valid_end: int,
                     corrupt: Sequence[tuple[int, int]] = ()) -> tuple[array[int], array[int]]:
    """The index of a segment scanned from ``start``, keeping what the old index knew.

    Entries: ``kept`` (the old entries below ``start``), the scan's marks (every
    ``log.index.interval.bytes``) and the old index's entries from ``start`` on that are
    still message boundaries before ``valid_end`` (its time entries, and byte marks
    placed relative to them, which a scan does not reproduce). Times: an old entry
    keeps its own; a mark the old index lacks gets the time of the entry before it,
    which is never later than its true append time (the segment file's modification
    time when there is none). Only the old index's sane prefix (positions increasing,
    times not decreasing) is used, and none of its entries inside a ``corrupt`` range.
    """
    old_positions, old_times = _sane_prefix(segment, valid_end)
    known = {p: t for p, t in zip(old_positions, old_times)
             if p >= start and not any(low <= p < high for low, high in corrupt)}
    marks = set(scanned)
    anchors = sorted(marks | {start})
    for position in list(known):
        if position not in marks:
            floor = anchors[bisect_right(anchors, position) - 1]
            if segment.hop(floor, position) != position:
                del known[position]  # not a message boundary (any more)
    positions = array("I", kept_positions)
    times = array("q", kept_times)
    last: int | None = kept_times[-1] if kept_times else None
    for position in sorted(marks | known.keys()):
        time_ms = known.get(position, last if last is not None else segment.mtime_ms)
        last = time_ms if last is None else max(time_ms, last)
        positions.append(position)
        times.append(last)
    return positions, times


def _find_valid_after(segment: Segment, start: int, max_message_size: int) -> int:
    """The first position >= ``start`` where a whole valid message begins, or -1 (bounded windows)."""
    file = segment.file
    return find_valid_from(file.fileno(), start, segment.size, max_message_size)


def _holds_valid(segment: Segment, max_message_size: int) -> bool:
    return _find_valid_after(segment, 0, max_message_size) >= 0


def _copy_range(src: int, dst: int, position: int, count: int) -> None:
    while count > 0:
        chunk = os.pread(src, min(_WINDOW, count), position)
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        position += len(chunk)
        count -= len(chunk)


def cut_log(directory: str, base_offset: int, position: int, reason: str, config: LogConfig, log: Any,
            now_ms: int) -> list[str]:
    """End a (closed) partition log at ``position`` of its segment ``base_offset``; return the side files.

    The rest of that segment is copied to a side file and cut; every later segment is
    renamed to one (an operator's repair, see repair.py; nothing is deleted).

    Raises:
        ValueError: no segment has that base offset.
        OSError: a file could not be read, written or renamed.
    """
    bases = files.list_segment_offsets(directory)
    if base_offset not in bases:
        raise ValueError(f"{directory} has no segment at base offset {base_offset}")
    segments = [Segment.open(directory, base, config.index_interval_bytes) for base in bases]
    state = _Recovery(config, True, log, now_ms)
    i = bases.index(base_offset)
    try:
        if position < segments[i].size:
            state.move_tail(segments[i], position, reason)
        for later in segments[i + 1:]:
            state.drop(later, reason)
    finally:
        for segment in segments:
            segment.close()
    return state.side_files
