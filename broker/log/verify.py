"""``rill-broker --verify-logs``: check every message of every segment of a stopped broker.

Reads each partition's segments (and the group coordinator's internal log) from start
to end, checking every message's length and CRC (integrity.py), and reports every
corrupt range: the file, the position inside it, the log offset, how many bytes, why,
and whether valid data follows (corruption in the middle of a log, as opposed to a
torn tail). Memory is bounded (a few MiB of buffer whatever the segment size), and a
progress line is logged every few seconds.

It takes the data directory's lock, so it never runs beside a broker using the same
directory. repair.py acts on what it finds.

Thread-safety: runs alone, on the calling thread.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import structlog

from rill.broker.log import files
from rill.broker.log.integrity import CorruptRange, corrupt_range_at, verify_messages
from rill.broker.log.log_config import LogConfig

COORDINATOR_LOG = os.path.join(".coordinator", "offsets-0")
PROGRESS_EVERY_S = 5.0
_logger = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Finding:
    """A corrupt range of one partition's log."""

    directory: str
    corrupt: CorruptRange
    valid_after: bool
    """Whether valid messages follow it in the log (False: a torn or garbage tail)."""

    def describe(self) -> str:
        c = self.corrupt
        tail = "valid data follows" if self.valid_after else "nothing valid follows (a torn tail)"
        return (f"CORRUPT {os.path.relpath(c.path, os.path.dirname(self.directory))} position {c.start} "
                f"(offset {c.offset}): {c.length} bytes, {c.reason}; {tail}")


@dataclass(slots=True)
class Report:
    findings: list[Finding]
    partitions: int = 0
    segments: int = 0
    bytes_checked: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        ranges = len(self.findings)
        damaged = len({f.directory for f in self.findings})
        return (f"checked {self.partitions} partitions, {self.segments} segments, {self.bytes_checked:,} bytes "
                f"in {self.seconds:.1f} s: {ranges} corrupt range(s) in {damaged} partition(s)")


def partition_directories(data_dir: str) -> Iterator[str]:
    """Every partition directory of ``data_dir`` (sorted), then the coordinator's log if there is one."""
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if files.parse_partition_dir_name(name) is not None and os.path.isdir(path) and not os.path.islink(path):
            yield path
    coordinator = os.path.join(data_dir, COORDINATOR_LOG)
    if os.path.isdir(coordinator):
        yield coordinator


def verify_data_dir(data_dir: str, config: LogConfig) -> Report:
    """Check every segment under ``data_dir``; return every corrupt range found.

    Raises:
        OSError: a file could not be read (named in the error).
    """
    report = Report([])
    started = last_progress = time.monotonic()
    for directory in partition_directories(data_dir):
        report.partitions += 1
        found = list(verify_partition(directory, config, report))
        report.findings.extend(found)
        now = time.monotonic()
        if now - last_progress >= PROGRESS_EVERY_S:
            last_progress = now
            _logger.info("verify.progress", partitions=report.partitions, bytes=report.bytes_checked,
                         corrupt_ranges=len(report.findings), directory=directory)
    report.seconds = time.monotonic() - started
    return report


def verify_partition(directory: str, config: LogConfig, report: Report | None = None) -> Iterator[Finding]:
    """The corrupt ranges of one partition's segments, oldest first."""
    bases = files.list_segment_offsets(directory)
    pending: list[tuple[CorruptRange, int]] = []  # ranges, and the index of their segment
    for i, base in enumerate(bases):
        path = files.segment_path(directory, base)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            for corrupt in _segment_ranges(fd, path, base, size, config.max_message_size):
                pending.append((corrupt, i))
        finally:
            os.close(fd)
        if report is not None:
            report.segments += 1
            report.bytes_checked += size
    last_data = _last_segment_with_data(directory, bases)
    for corrupt, i in pending:
        follows = corrupt.end < os.path.getsize(corrupt.path) or i < last_data
        yield Finding(directory, corrupt, follows)


def _segment_ranges(fd: int, path: str, base: int, size: int, max_message_size: int) -> Iterator[CorruptRange]:
    position = 0
    while position < size:
        valid_end, reason = verify_messages(fd, position, size, size, max_message_size)
        if not reason:
            return
        end = corrupt_range_at(fd, valid_end, size, max_message_size)
        yield CorruptRange(path, base, valid_end, end, reason)
        position = end


def _last_segment_with_data(directory: str, bases: list[int]) -> int:
    for i in range(len(bases) - 1, -1, -1):
        if os.path.getsize(files.segment_path(directory, bases[i])) > 0:
            return i
    return -1
