"""Retention: delete whole segments by age and by total size, oldest first.

Policy (Kafka's, applied to a prefix of the segment list so bases stay contiguous):

* by time (``retention_ms`` >= 0): the oldest segments whose last append is more
  than ``retention_ms`` before now;
* by size (``retention_bytes`` >= 0): then the oldest segments while deleting one
  still leaves the log at least ``retention_bytes`` large.

The active segment is never deleted, so the log end never goes backwards; when every
other segment goes, the log start becomes the active segment's base offset. The new
segment list is swapped in before the files are unlinked (copy-on-write), so readers
never block, and a FileSlice of a deleted segment still reads (its descriptor closes
with its last reference).

Thread-safety: runs on the background thread; :meth:`Log.delete_oldest_segments`
serialises it with rolls.
"""

from __future__ import annotations

from rill.broker.log.log import Log
from rill.broker.log.log_config import LogConfig
from rill.broker.log.segment import Segment


def segments_to_delete(segments: tuple[Segment, ...], config: LogConfig, now_ms: int) -> int:
    """How many of the oldest ``segments`` to delete (the last, active one is never counted)."""
    candidates = len(segments) - 1
    count = 0
    if config.retention_ms >= 0:
        cutoff = now_ms - config.retention_ms
        while count < candidates and segments[count].last_append_ms < cutoff:
            count += 1
    if config.retention_bytes >= 0:
        excess = sum(s.size for s in segments[count:]) - config.retention_bytes
        while count < candidates and excess - segments[count].size >= 0:
            excess -= segments[count].size
            count += 1
    return count


def apply_retention(log: Log, now_ms: int) -> list[Segment]:
    """Delete the segments that retention allows; return them (oldest first)."""
    config = log.config
    if config.retention_ms < 0 and config.retention_bytes < 0:
        return []
    return log.delete_oldest_segments(lambda segments: segments_to_delete(segments, config, now_ms))
