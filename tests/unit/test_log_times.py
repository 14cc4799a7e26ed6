"""Append times from the index: entries per interval of time, and TIME_INDEX's lookup."""

from __future__ import annotations

import pytest

from rill.broker.log import Log, LogConfig
from rill.client.errors import OffsetOutOfRange
from rill.client.protocol.messages import encode_message_set


def _entries(log: Log) -> list[tuple[int, int]]:
    return [(s.base_offset + p, t) for s in log.segments for p, t in zip(s.index.positions, s.index.times)]


def test_an_append_after_the_time_interval_gets_its_own_entry(tmp_path, clock):
    """Small appends far apart in time each get an entry; close together, they do not."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=4096, index_interval_ms=1000), clock)
    first = log.append(encode_message_set([b"a" * 10]))
    clock.now += 0.5
    log.append(encode_message_set([b"b" * 10]))  # 500 ms later: no entry
    clock.now += 0.6
    third = log.append(encode_message_set([b"c" * 10]))  # 1100 ms after the last entry: an entry
    assert _entries(log) == [(first.first_offset, int((clock.now - 1.1) * 1000)),
                             (third.first_offset, int(clock.now * 1000))]
    log.close()


def test_time_entries_do_not_disturb_the_byte_interval(tmp_path, clock):
    """A time entry at a set's first message and the byte marks inside it stay strictly increasing."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=100, index_interval_ms=1000), clock)
    log.append(encode_message_set([b"x" * 60] * 3))
    clock.now += 2
    info = log.append(encode_message_set([b"y" * 60] * 5))
    offsets = [o for o, _ in _entries(log)]
    assert offsets == sorted(set(offsets)) and info.first_offset in offsets
    log.close()
    again = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=100), clock, clean=True)
    assert again.recovery_report.segments_scanned == 0  # the index passed the sanity checks
    assert [o for o, _ in _entries(again)] == offsets
    again.close()


def _paced_log(tmp_path, clock) -> tuple[Log, list[tuple[int, int]]]:
    """Ten 100-byte messages per second for 5 seconds, interval 1 s: (offset, true append ms)."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=4096, index_interval_ms=1000), clock)
    truth = []
    for _ in range(50):
        info = log.append(encode_message_set([b"m" * 90]))
        truth.append((info.first_offset, int(clock.now * 1000)))
        clock.now += 0.1
    return log, truth


def test_append_times_are_precise_to_the_time_interval(tmp_path, clock):
    """Each message's floor entry time is at most its true time and less than 1 s before it."""
    log, truth = _paced_log(tmp_path, clock)
    for offset, true_ms in truth:
        found = log.append_time_ms(offset)
        assert found is not None and true_ms - 1000 < found <= true_ms
    log.close()


def test_time_entries_start_at_the_floor_entry_and_page(tmp_path, clock):
    """time_entries returns the entry at or before the offset, then later ones, at most max."""
    log, truth = _paced_log(tmp_path, clock)
    every = _entries(log)
    middle = truth[25][0]
    floor = max(e for e in every if e[0] <= middle)
    page = log.time_entries(middle, 2)
    assert page[0] == floor and len(page) == 2 and page[1][0] > middle
    assert log.time_entries(0, 1000) == every
    assert log.time_entries(log.end_offset, 10) == every[-1:]  # the last entry is the end's floor
    assert log.time_entries(0, 0) == []
    log.close()


def test_time_entries_span_segments(tmp_path, clock):
    """Entries come from every segment from the offset on, in offset order."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, index_interval_bytes=4096), clock)
    for _ in range(12):
        log.append(encode_message_set([b"x" * 390]))
        clock.now += 1
    assert len(log.segments) > 3
    assert log.time_entries(0, 10_000) == _entries(log)
    bases = [s.base_offset for s in log.segments]
    assert log.time_entries(bases[2], 1)[0][0] == bases[2]
    log.close()


@pytest.mark.parametrize("offset", [-1, 10**9])
def test_time_entries_outside_the_log_raise(tmp_path, clock, offset):
    """An offset before the log start or past its end is OffsetOutOfRange."""
    log, _ = _paced_log(tmp_path, clock)
    with pytest.raises(OffsetOutOfRange):
        log.time_entries(offset, 10)
    log.close()


def test_unclean_restart_keeps_time_entries_and_never_dates_later(tmp_path, clock):
    """A crash rescans the segment: persisted time entries keep their times, the unflushed tail
    gets the last known time (never later than the truth), and every entry is a message start."""
    config = LogConfig(index_interval_bytes=4096, index_interval_ms=1000)
    log = Log.open(str(tmp_path), "t", 0, config, clock)
    truth = []
    for i in range(40):
        if i == 30:
            log.flush()  # persists the index: entries of the first 30 appends
            flushed = _entries(log)
        info = log.append(encode_message_set([b"s" * 100]))
        truth.append((info.first_offset, int(clock.now * 1000)))
        clock.now += 1.5  # every append gets a time entry; none gets a byte-interval mark
    assert len(flushed) == 30
    for segment in log.segments:
        segment.close()  # a crash: no clean-shutdown marker, the last 10 entries never written
    again = Log.open(str(tmp_path), "t", 0, config, clock)
    assert again.recovery_report.segments_scanned == 1
    assert _entries(again)[:30] == flushed
    for offset, true_ms in truth[:30]:
        assert again.append_time_ms(offset) == true_ms
    for offset, true_ms in truth[30:]:
        assert again.append_time_ms(offset) == truth[29][1] <= true_ms
    boundaries = {o for o, _ in truth}
    assert {o for o, _ in _entries(again)} <= boundaries
    again.close()


def test_unclean_restart_drops_old_entries_that_are_not_message_starts(tmp_path, clock):
    """An old index entry that is no longer a message boundary is dropped by the rebuild."""
    config = LogConfig(index_interval_bytes=4096, index_interval_ms=1000)
    log = Log.open(str(tmp_path), "t", 0, config, clock)
    starts = []
    for _ in range(5):
        starts.append(log.append(encode_message_set([b"q" * 100])).first_offset)
        clock.now += 2
    log.flush()
    index_path = log.segments[0].index.path
    for segment in log.segments:
        segment.close()
    import struct
    with open(index_path, "r+b") as f:  # entry 2 now points inside message 2
        f.seek(2 * 12)
        f.write(struct.pack(">I", starts[2] + 7))
    again = Log.open(str(tmp_path), "t", 0, config, clock)
    offsets = [o for o, _ in _entries(again)]
    assert starts[2] + 7 not in offsets and set(offsets) <= set(starts) and 0 in offsets
    times = [t for _, t in _entries(again)]
    assert times == sorted(times)
    again.close()
