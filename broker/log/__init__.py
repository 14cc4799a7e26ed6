"""Log storage: partitioned, append-only, CRC-checked segment files (Kafka 0.7 style).

Modules, one concept each::

    log_config.py LogConfig: sizes, intervals, retention
    files.py      names and paths (partition dirs, segments, side files, markers)
    index.py      SegmentIndex: sparse boundaries + append times per segment
    times.py      append-time lookups over the indexes: OFFSETS, TIME_INDEX, lag times
    segment.py    Segment: one .log file and its index
    segments.py   SegmentList: the immutable (copy-on-write) list of a log's segments
    waiters.py    FlushWaiters: callbacks waiting for an offset to be fsynced
    open_files.py OpenFiles: the bounded cache of open segment and index files
    results.py    FileSlice, AppendInfo, FlushToken: what the log's calls return
    integrity.py  ranges of a segment verified good or found corrupt; checking messages
    reads.py      reading a log: file slices of whole, checked messages
    log.py        Log: one partition (append, read, roll, flush, offsets before a time)
    leader_epochs.py  LeaderEpochCache: a replica's leader-epoch-checkpoint file
    truncation.py cutting a follower's log back, the cut bytes kept aside
    recovery.py   scanning and repairing segments after an unclean shutdown
    retention.py  deleting old segments by age and size
    checkpoint.py the recovery-point checkpoint file of a data directory
    batch_sync.py flushing many logs with one syncfs
    dirty_logs.py DirtyLogs: the logs with unflushed data, flushing those due
    flusher.py    Flusher: the background flush/retention thread
    scrubber.py   Scrubber: re-checks every segment in the background
    creator.py    TopicCreator: creating a topic's partitions, whole or not at all
    loading.py    opening a data directory: lock, clean-shutdown marker, every log
    partition_table.py  PartitionTable: the partitions held, of both kinds, and reservations
    local_topic_creation.py  TopicCreations: 0.7-style topic creation (limits, reservations)
    replica_logs.py     ReplicaLogs: creating, listing, deleting replicas; their epoch caches
    manager.py    LogManager: every log under a data directory
    verify.py     --verify-logs: checking a stopped broker's segments
    repair.py     cutting or quarantining the corrupt ranges it finds

The storage returns :class:`FileSlice` objects, never message bytes: only the
server's transport turns a slice into ``os.sendfile``.
"""

from __future__ import annotations

from rill.broker.log.flusher import Flusher
from rill.broker.log.log import Log
from rill.broker.log.log_config import LogConfig
from rill.broker.log.manager import LogManager
from rill.broker.log.recovery import CorruptLogError, RecoveryReport
from rill.broker.log.results import AppendInfo, FileSlice
from rill.broker.log.times import EARLIEST_TIME, LATEST_TIME

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
