"""Cutting a log back: Log.truncate_to and Log.truncate_fully_and_start_at (rill.broker.log.truncation)."""

from __future__ import annotations

import glob
import os

import pytest
import structlog

from rill.broker.log import Log, LogConfig
from rill.broker.log.integrity import CorruptRange
from rill.broker.log.leader_epochs import EpochEntry, LeaderEpochCache
from rill.broker.log.recovery import _Recovery
from rill.client.clock import FakeClock
from rill.client.errors import InvalidOffset, NotLeaderForPartition, OffsetOutOfRange, StorageError
from rill.client.protocol.messages import decode_message_set, encode_message_set

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=100)
MESSAGE = len(encode_message_set([b"x" * 90]))  # 100 bytes: 10 fill one 1024-byte segment


def _filled(tmp_path, count: int, config: LogConfig = SMALL, clock: FakeClock | None = None) -> tuple[Log, list[int]]:
    """A log of ``count`` 100-byte messages (payload i repeated); returns it and each message's offset."""
    log = Log.open(str(tmp_path), "t", 0, config, clock if clock is not None else FakeClock())
    return log, [log.append(encode_message_set([bytes([i]) * 90])).first_offset for i in range(count)]


def _values(log: Log, start: int | None = None) -> list[bytes]:
    out, offset = [], log.start_offset if start is None else start
    while offset < log.end_offset:
        piece = log.read(offset, 1 << 20)
        messages, _ = decode_message_set(os.pread(piece.file.fileno(), piece.length, piece.position))
        out += [m.value for m in messages]
        offset = piece.next_offset
    return out


def _payloads(count: int) -> list[bytes]:
    return [bytes([i]) * 90 for i in range(count)]


def _side_files(log: Log) -> list[str]:
    return sorted(glob.glob(os.path.join(log.directory, "*.corrupt-*")))


def _log_bytes(log: Log) -> bytes:
    return b"".join(open(s.path, "rb").read() for s in log.segments)


def test_cut_inside_the_active_segment(tmp_path):
    """A cut inside the active segment shortens it; the log ends, and is flushed, exactly at the cut."""
    log, offsets = _filled(tmp_path, 8)
    assert log.truncate_to(offsets[5]) == 3 * MESSAGE
    assert (log.end_offset, log.flushed_offset) == (offsets[5], offsets[5])
    assert [s.size for s in log.segments] == [5 * MESSAGE]
    assert _values(log) == _payloads(5)
    log.close()


def test_cut_at_a_segment_boundary_starts_an_empty_active_segment(tmp_path):
    """A cut at a segment's base moves that segment aside and the active segment is a new empty one there."""
    log, offsets = _filled(tmp_path, 25)
    second = log.segments[1].base_offset
    log.truncate_to(second)
    assert [(s.base_offset, s.size) for s in log.segments] == [(0, second), (second, 0)]
    assert log.end_offset == second and _values(log) == _payloads(10)
    assert os.path.getsize(log.segments[1].path) == 0
    log.close()


def test_cut_at_the_log_start_leaves_one_empty_segment(tmp_path):
    """A cut at the log start keeps every byte aside and leaves one empty segment with the same base."""
    log, offsets = _filled(tmp_path, 15)
    log.truncate_to(0)
    assert [(s.base_offset, s.size) for s in log.segments] == [(0, 0)]
    assert (log.start_offset, log.end_offset) == (0, 0)
    assert sum(os.path.getsize(p) for p in _side_files(log)) == 15 * MESSAGE
    log.close()


def test_cut_across_several_segments(tmp_path):
    """A cut inside an older segment moves every later segment aside and makes that segment the active one."""
    log, offsets = _filled(tmp_path, 35)
    assert len(log.segments) == 4
    log.truncate_to(offsets[13])
    assert [(s.base_offset, s.size) for s in log.segments] == [(0, 10 * MESSAGE), (10 * MESSAGE, 3 * MESSAGE)]
    assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == [
        "00000000000000000000.log", "00000000000000001000.log"]
    assert _values(log) == _payloads(13)
    log.close()


def test_side_files_hold_exactly_the_cut_bytes(tmp_path):
    """The side files, in segment order, hold exactly the bytes after the cut, and the log event names them."""
    log, offsets = _filled(tmp_path, 35)
    before = _log_bytes(log)
    with structlog.testing.capture_logs() as events:
        log.truncate_to(offsets[13])
    sides = _side_files(log)
    assert b"".join(open(p, "rb").read() for p in sides) == before[offsets[13]:]
    [event] = [e for e in events if e["event"] == "log.truncated"]
    assert (event["topic"], event["partition"]) == ("t", 0)
    assert (event["from_offset"], event["to_offset"], event["bytes"]) == (35 * MESSAGE, offsets[13], 22 * MESSAGE)
    assert sorted(event["side_files"]) == sides and event["log_level"] == "info"
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_after_truncation_gives_the_same_log(tmp_path, clean):
    """Reopened (with or without the clean flag), the cut log has the same end and contents, and no repair happens."""
    log, offsets = _filled(tmp_path, 35)
    log.truncate_to(offsets[13])
    log.close()
    with structlog.testing.capture_logs() as events:
        again = Log.open(str(tmp_path), "t", 0, SMALL, clean=clean)
        values = _values(again)
    assert again.end_offset == offsets[13] and values == _payloads(13)
    assert not [e for e in events if e["log_level"] in ("warning", "error")]
    again.close()


def test_index_lookups_after_the_cut(tmp_path):
    """The index keeps no entry past the cut: reads at every kept boundary work, and hops stop at the end."""
    log, offsets = _filled(tmp_path, 8)
    log.truncate_to(offsets[5])
    segment = log.segments[-1]
    assert max(segment.index.positions) < segment.size
    assert segment.find_boundary_at_or_before(10 ** 6) == offsets[5]
    for i, offset in enumerate(offsets[:5]):
        assert _values(log, offset) == _payloads(5)[i:]
    log.close()


def test_append_time_lookups_after_the_cut(tmp_path):
    """Append times past the cut are forgotten; a message appended at the cut gets its own time."""
    clock = FakeClock()
    zero = int(clock.time() * 1000)
    log = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_ms=0), clock)
    offsets = []
    for i in range(6):
        clock.advance(1.0)
        offsets.append(log.append(encode_message_set([bytes([i]) * 90])).first_offset)
    log.truncate_to(offsets[3])
    assert log.append_time_ms(offsets[3]) is None
    assert log.time_entries(0, 100) == [(offsets[i], zero + 1000 * (i + 1)) for i in range(3)]
    clock.advance(10.0)
    log.append(encode_message_set([b"new"]))
    assert log.append_time_ms(offsets[3]) == zero + 16000
    assert log.offsets_before(zero + 4500, 1) == [offsets[2]]  # the cut message of +4 s is gone
    log.close()


def test_append_after_the_cut_continues_at_the_offset(tmp_path):
    """Appends after a cut start at the cut, and a read across it returns the kept bytes then the new ones only."""
    log, offsets = _filled(tmp_path, 8)
    log.truncate_to(offsets[5])
    info = log.append(encode_message_set([b"after"]))
    assert info.first_offset == offsets[5]
    assert _values(log, offsets[4]) == [bytes([4]) * 90, b"after"]
    log.close()


def test_non_boundary_offset_is_refused_with_nothing_changed(tmp_path):
    """An offset inside a message raises InvalidOffset and changes no file, size or offset."""
    log, offsets = _filled(tmp_path, 15)
    before = (sorted(os.listdir(log.directory)), log.end_offset, log.flushed_offset, _log_bytes(log))
    for bad in (offsets[3] + 1, offsets[12] - 4, offsets[7] + 50):
        with pytest.raises(InvalidOffset, match="not a message boundary"):
            log.truncate_to(bad)
    assert (sorted(os.listdir(log.directory)), log.end_offset, log.flushed_offset, _log_bytes(log)) == before
    log.close()


def test_offset_before_the_log_start_is_refused(tmp_path):
    """An offset before the log start raises InvalidOffset and leaves the log as it was."""
    log, _ = _filled(tmp_path, 3)
    log.truncate_fully_and_start_at(5000)
    log.append(encode_message_set([b"kept"]))
    with pytest.raises(InvalidOffset, match="before the log start"):
        log.truncate_to(4000)
    assert (log.start_offset, _values(log)) == (5000, [b"kept"])
    log.close()


def test_offset_at_or_past_the_end_is_a_no_op(tmp_path):
    """truncate_to at or past the log end returns 0 and changes nothing (not even the offset's alignment is checked)."""
    log, offsets = _filled(tmp_path, 5)
    end = log.end_offset
    assert log.truncate_to(end) == 0 and log.truncate_to(end + 7) == 0
    assert log.end_offset == end and _side_files(log) == [] and _values(log) == _payloads(5)
    log.close()


def test_truncate_fully_and_start_at_then_append_and_read(tmp_path):
    """A full truncation keeps the old segments aside and goes on with one empty segment named by the new start."""
    log, offsets = _filled(tmp_path, 25)
    log.truncate_fully_and_start_at(5000)
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (5000, 5000, 5000)
    assert [n for n in os.listdir(log.directory) if n.endswith(".log")] == ["00000000000000005000.log"]
    assert sum(os.path.getsize(p) for p in _side_files(log)) == 25 * MESSAGE
    assert log.append(encode_message_set([b"fresh"])).first_offset == 5000
    assert _values(log) == [b"fresh"]
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    log.close()
    assert Log.open(str(tmp_path), "t", 0, SMALL, clean=True).start_offset == 5000


def test_truncate_fully_may_start_below_the_old_start(tmp_path):
    """A full truncation may name any offset, also one below the old log start (segments are named by offset)."""
    log, _ = _filled(tmp_path, 3)
    log.truncate_fully_and_start_at(5000)
    log.truncate_fully_and_start_at(300)
    assert (log.start_offset, log.end_offset) == (300, 300)
    assert log.append(encode_message_set([b"x"])).first_offset == 300
    log.close()


def test_crash_after_truncation_recovers_the_cut_log(tmp_path):
    """After a cut, appends and a kill -9, recovery finds the cut log plus the new appends, nothing of the cut tail."""
    log, offsets = _filled(tmp_path, 35)
    log.truncate_to(offsets[13])
    log.append(encode_message_set([b"after"]))
    log.abandon()
    again = Log.open(str(tmp_path), "t", 0, SMALL, clean=False, recovery_point=0)
    assert _values(again) == _payloads(13) + [b"after"]
    assert again.recovery_report.bytes_truncated == 0
    again.close()


def test_failure_in_the_middle_of_a_cut_leaves_a_loadable_prefix(tmp_path, monkeypatch):
    """If a cut fails half-way, the log is failed, and reopening it gives a contiguous prefix of the old log."""
    log, offsets = _filled(tmp_path, 35)
    real_drop, calls = _Recovery.drop, []

    def drop_then_fail(self, segment, reason):
        calls.append(segment.base_offset)
        if len(calls) == 2:
            raise OSError(5, "I/O error")
        real_drop(self, segment, reason)
    monkeypatch.setattr(_Recovery, "drop", drop_then_fail)
    with pytest.raises(StorageError):
        log.truncate_to(offsets[13])
    assert log.failed is not None and calls == [3000, 2000]  # the newest segment goes first
    log.abandon()
    monkeypatch.undo()
    again = Log.open(str(tmp_path), "t", 0, SMALL, clean=False)
    assert _values(again) == _payloads(30)
    again.close()


def test_flush_waiters_before_the_cut_are_released_and_after_it_fail(tmp_path):
    """A when_flushed callback at or below the cut runs (those bytes are synced); one past it fails."""
    log, offsets = _filled(tmp_path, 8)
    done, failed = [], []
    log.when_flushed(offsets[3], lambda: done.append("low"), failed.append)
    log.when_flushed(log.end_offset, lambda: done.append("high"), failed.append)
    log.truncate_to(offsets[5])
    assert done == ["low"]
    assert len(failed) == 1 and isinstance(failed[0], NotLeaderForPartition)
    log.close()


def test_batched_flush_begun_before_the_cut_reports_nothing(tmp_path):
    """end_flush of a token taken before a cut leaves the flushed offset at the cut, not at the old end."""
    log, offsets = _filled(tmp_path, 8)
    token = log.begin_flush()
    assert token is not None and token.end == log.end_offset
    log.truncate_to(offsets[2])
    log.append(encode_message_set([b"after"] * 5))
    log.end_flush(token)
    assert log.flushed_offset == offsets[2]
    fresh = log.begin_flush()
    assert fresh is not None
    log.end_flush(fresh)
    assert log.flushed_offset == log.end_offset
    log.close()


class _CutOnRelease:
    """The log's flush lock, calling ``cut()`` once, just after its first release (between a flush and its report)."""

    def __init__(self, lock, cut) -> None:
        self._lock, self._cut = lock, cut

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self._lock.release()
        cut, self._cut = self._cut, None
        if cut is not None:
            cut()


def test_flush_finishing_after_the_cut_reports_nothing(tmp_path):
    """A flush whose fsync ran before a cut but whose report comes after it cannot raise the flushed offset."""
    log, offsets = _filled(tmp_path, 8)
    log._flush_lock = _CutOnRelease(log._flush_lock, lambda: log.truncate_to(offsets[2]))
    log.flush()
    assert log.flushed_offset == offsets[2] == log.end_offset
    log.close()


def test_cut_makes_every_byte_before_it_durable(tmp_path):
    """After a cut, no kept segment has unsynced bytes: the flushed offset at the cut is true."""
    log, offsets = _filled(tmp_path, 35)
    assert all(s.unsynced for s in log.segments)
    log.truncate_to(offsets[23])
    assert [s.unsynced for s in log.segments] == [False, False, False]
    log.close()


def test_leader_epochs_follow_the_cut(tmp_path):
    """A log's leader-epoch cache loses the epochs starting at or after a cut, and everything on a full truncation."""
    log, offsets = _filled(tmp_path, 8)
    log.leader_epochs = cache = LeaderEpochCache(log.directory)
    for epoch, index in ((0, 0), (1, 4), (2, 6)):
        cache.assign(epoch, offsets[index])
    log.truncate_to(offsets[6])
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(1, offsets[4]))
    log.truncate_fully_and_start_at(7000)
    assert cache.entries() == () and LeaderEpochCache(log.directory).entries() == ()
    log.close()


def test_outdated_corruption_report_after_a_cut_is_dropped(tmp_path):
    """A corrupt range reported for bytes a cut replaced (a scrubber reading before the cut) is not recorded."""
    log, offsets = _filled(tmp_path, 8)
    path = log.segments[-1].path
    log.truncate_to(offsets[3])
    log.append(encode_message_set([b"y" * 190]))  # a new message over the old boundaries at 300 and 400
    for start in (offsets[3], offsets[4], offsets[7]):
        log.found_corrupt(CorruptRange(path, 0, start, 8 * MESSAGE, "incomplete message"))
    assert log.segments[-1].integrity.corrupt == ()
    assert _values(log, offsets[3]) == [b"y" * 190]
    log.close()


def test_real_corruption_after_a_cut_is_still_recorded(tmp_path):
    """After a cut, a corrupt range that is really on disk is still recorded and refused to readers."""
    log, offsets = _filled(tmp_path, 8)
    log.truncate_to(offsets[6])
    log.flush()
    path = log.segments[-1].path
    with open(path, "r+b") as f:
        f.seek(offsets[4] + 10)
        f.write(b"\x00\x00")
    log.found_corrupt(CorruptRange(path, 0, offsets[4], offsets[5], "bad crc"))
    assert log.segments[-1].integrity.corrupt == ((offsets[4], offsets[5]),)
    log.close()


def test_closed_log_refuses_truncation(tmp_path):
    """A closed log raises StorageError for both truncations."""
    log, offsets = _filled(tmp_path, 3)
    log.close()
    with pytest.raises(StorageError):
        log.truncate_to(offsets[1])
    with pytest.raises(StorageError):
        log.truncate_fully_and_start_at(500)
