"""Log storage: partitioned, append-only, CRC-checked segment files (Kafka 0.7 style).

Modules, one concept each::

    config.py     LogConfig: sizes, intervals, retention
    files.py      names and paths (partition dirs, segments, side files, markers)
    index.py      SegmentIndex: sparse boundaries + append times per segment
    times.py      append-time lookups over the indexes: OFFSETS, TIME_INDEX, lag times
    segment.py    Segment: one .log file and its index
    segments.py   SegmentList: the immutable (copy-on-write) list of a log's segments
    waiters.py    FlushWaiters: callbacks waiting for an offset to be fsynced
    log.py        Log: one partition (append, read, roll, flush, offsets before a time)
    recovery.py   scanning and repairing segments after an unclean shutdown
    retention.py  deleting old segments by age and size
    flusher.py    Flusher: the background flush/retention thread
    manager.py    LogManager: every log under a data directory

The storage returns :class:`FileSlice` objects, never message bytes: only the
server's transport turns a slice into ``os.sendfile``.
"""

from __future__ import annotations

from rill.broker.log.config import LogConfig
from rill.broker.log.flusher import Flusher
from rill.broker.log.log import AppendInfo, FileSlice, Log
from rill.broker.log.times import EARLIEST_TIME, LATEST_TIME
from rill.broker.log.manager import LogManager
from rill.broker.log.recovery import CorruptLogError, RecoveryReport

__all__ = [
    "EARLIEST_TIME",
    "LATEST_TIME",
    "AppendInfo",
    "CorruptLogError",
    "FileSlice",
    "Flusher",
    "Log",
    "LogConfig",
    "LogManager",
    "RecoveryReport",
]
