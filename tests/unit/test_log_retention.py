"""Retention: deleting whole segments by age and by size (rill.broker.log.retention)."""

from __future__ import annotations

import os

import pytest

from tests.unit.conftest import FakeClock

from rill.broker.log import Log, LogConfig, LogManager
from rill.broker.log.retention import apply_retention
from rill.client.errors import OffsetOutOfRange
from rill.client.protocol.messages import decode_message_set, encode_message_set

DAY_MS = 24 * 3600 * 1000


def _fill(log: Log, clock: FakeClock, segments: int, step_s: float = 0.0) -> None:
    """Append 400-byte sets until the log has ``segments`` segments (2 sets per 1 KiB segment)."""
    while len(log.segments) < segments or log.segments[-1].size == 0:
        log.append(encode_message_set([b"r" * 190] * 2))
        clock.now += step_s


def _now_ms(clock: FakeClock) -> int:
    return int(clock.now * 1000)


def test_retention_by_time_deletes_old_segments(tmp_path, clock):
    """Segments last written more than retention_ms ago are deleted, newer ones kept."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_ms=DAY_MS), clock)
    _fill(log, clock, 3)
    clock.now += 2 * 86400
    _fill(log, clock, 5)
    deleted = apply_retention(log, _now_ms(clock))
    assert [s.base_offset for s in deleted] == [0, 800]
    assert log.start_offset == 1600
    assert min(n for n in os.listdir(log.directory) if n.endswith(".log")) == "00000000000000001600.log"
    assert not os.path.exists(os.path.join(log.directory, "00000000000000000800.index"))
    log.close()


def test_retention_by_time_never_deletes_the_active_segment(tmp_path, clock):
    """When every segment is old, all but the active one go and the start becomes its base."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_ms=1000), clock)
    _fill(log, clock, 4)
    end = log.end_offset
    clock.now += 10
    apply_retention(log, _now_ms(clock))
    assert len(log.segments) == 1
    assert log.start_offset == log.segments[0].base_offset == 2400
    assert log.end_offset == end
    log.append(encode_message_set([b"after"]))
    assert log.end_offset > end
    log.close()


def test_retention_by_bytes_keeps_at_least_retention_bytes(tmp_path, clock):
    """Oldest segments go while the log stays at least retention_bytes large."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_bytes=2000, retention_ms=-1),
                   clock)
    _fill(log, clock, 5)  # 4 x 800 bytes + active 400
    apply_retention(log, _now_ms(clock))
    assert log.size_bytes >= 2000
    assert [s.size for s in log.segments] == [800, 800, 400]
    log.close()


def test_retention_by_bytes_zero_keeps_only_the_active_segment(tmp_path, clock):
    """retention_bytes 0 deletes every segment but the active one."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_bytes=0, retention_ms=-1), clock)
    _fill(log, clock, 3)
    apply_retention(log, _now_ms(clock))
    assert len(log.segments) == 1 and log.start_offset == 1600
    log.close()


def test_retention_disabled_deletes_nothing(tmp_path, clock):
    """With retention_ms and retention_bytes both -1 nothing is deleted."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_ms=-1), clock)
    _fill(log, clock, 4)
    clock.now += 10 * 365 * 86400
    assert apply_retention(log, _now_ms(clock)) == []
    assert len(log.segments) == 4
    log.close()


def test_reads_after_retention(tmp_path, clock):
    """After deletion, offsets below the new start are out of range and the rest still reads."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_bytes=0, retention_ms=-1), clock)
    _fill(log, clock, 3)
    apply_retention(log, _now_ms(clock))
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert log.read(log.start_offset, 1 << 20).length == log.segments[0].size
    log.close()


def test_in_flight_slice_of_a_deleted_segment_still_reads(tmp_path, clock):
    """A FileSlice taken before its segment was deleted still reads the whole bytes."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_bytes=0, retention_ms=-1), clock)
    _fill(log, clock, 3)
    piece = log.read(0, 1 << 20)
    apply_retention(log, _now_ms(clock))
    assert not os.path.exists(os.path.join(log.directory, "00000000000000000000.log"))
    data = os.pread(piece.file.fileno(), piece.length, piece.position)
    messages, consumed = decode_message_set(data)
    assert consumed == piece.length == 800 and [m.value for m in messages] == [b"r" * 190] * 4
    log.close()


def test_manager_runs_retention_on_every_log(tmp_path, clock):
    """LogManager.run_retention applies the policy to each partition and counts deletions."""
    config = LogConfig(segment_bytes=1024, retention_ms=1000)
    manager = LogManager(str(tmp_path), config, num_partitions=2, clock=clock)
    manager.create_topic("events", 2)
    for partition in range(2):
        _fill(manager.get("events", partition), clock, 3)
    clock.now += 5
    assert manager.run_retention(clock.now) == 4
    manager.close()
