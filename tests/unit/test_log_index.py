"""The sparse segment index: format, sanity checks, rebuilds and offsets before a time."""

from __future__ import annotations

import os
import struct
import sys
from array import array

import pytest
import structlog

from rill.broker.log import Log, LogConfig
from rill.broker.log.index import ENTRY_SIZE, SegmentIndex, pack_entries, unpack_entries
from rill.broker.log.segment import Segment
from rill.client.protocol.messages import encode_message_set


def _reopen_clean(tmp_path, config: LogConfig) -> Log:
    return Log.open(str(tmp_path), "t", 0, config, clean=True)


def test_entries_round_trip_in_big_endian_format():
    """Entries encode as 12 big-endian bytes (uint32 position, int64 time) and decode back."""
    positions, times = array("I", [0, 4096, 2**31 - 1]), array("q", [1, 2**40, -5])
    data = pack_entries(positions, times)
    assert data[:12] == struct.pack(">Iq", 0, 1) and data[24:] == struct.pack(">Iq", 2**31 - 1, -5)
    assert unpack_entries(data + b"xx") == (positions, times)


def test_index_ram_for_5_gb_of_small_messages_is_small(tmp_path):
    """An index covering 5 GB at the default interval takes about 16 MB (under 50 MB)."""
    total = 0
    for k in range(5):  # five 1 GB segments
        index = SegmentIndex(str(tmp_path / f"{k}.index"), 4096)
        index.add(range(0, 10**9, 4096), 0, 1_700_000_000_000)
        total += sys.getsizeof(index.positions) + sys.getsizeof(index.times)
    assert total < 20 * 2**20


@pytest.mark.parametrize("entries,segment_size", [
    ([(4, 1)], 100),                    # first entry not at 0
    ([(0, 1), (50, 1), (50, 1)], 100),  # not strictly increasing
    ([(0, 1), (100, 1)], 100),          # position past the segment
    ([(0, 2), (50, 1)], 100),           # time going backwards
    ([(0, 1)], 0),                      # entries for an empty segment
])
def test_load_trusted_refuses_insane_indexes(tmp_path, entries, segment_size):
    """An index that breaks an invariant is not loaded."""
    data = b"".join(struct.pack(">Iq", p, t) for p, t in entries)
    index = SegmentIndex(str(tmp_path / "i.index"), 64)
    assert not index.load_trusted(data, segment_size)


def test_load_trusted_refuses_partial_entries(tmp_path):
    """An index whose size is not a multiple of 12 bytes is not loaded."""
    index = SegmentIndex(str(tmp_path / "i.index"), 64)
    assert not index.load_trusted(struct.pack(">Iq", 0, 1) + b"\x00", 100)


def test_garbage_index_is_rebuilt_on_clean_open(tmp_path):
    """A corrupt index of a flushed segment is rebuilt by scanning when first used, and reads stay correct."""
    config = LogConfig(index_interval_bytes=100)
    log = Log.open(str(tmp_path), "t", 0, config)
    log.append(encode_message_set([b"i" * 40] * 30))
    expected = list(log.segments[0].index.positions)
    log.close()
    with open(log.segments[0].index.path, "ab") as f:
        f.write(os.urandom(7))
    again = _reopen_clean(tmp_path, config)
    assert not again.segments[0].index_loaded  # nothing is read at start-up
    with structlog.testing.capture_logs() as events:
        assert list(again.segments[0].index.positions) == expected
    assert [e["file"] for e in events if e["event"] == "recovery.index_rebuilt"] == [again.segments[0].path]
    assert os.path.getsize(again.segments[0].index.path) == ENTRY_SIZE * len(expected)
    assert again.read(500, 120).length == 100
    again.close()


def test_index_disagreeing_with_the_log_is_rebuilt(tmp_path):
    """A well-formed index whose entries are not message boundaries is not trusted."""
    config = LogConfig(index_interval_bytes=100)
    log = Log.open(str(tmp_path), "t", 0, config)
    log.append(encode_message_set([b"i" * 40] * 30))
    log.close()
    with open(log.segments[0].index.path, "wb") as f:
        f.write(struct.pack(">Iq", 0, 1) + struct.pack(">Iq", 1457, 1))
    again = _reopen_clean(tmp_path, config)
    with structlog.testing.capture_logs() as events:
        assert 1457 not in again.segments[0].index.positions
    assert any(e["event"] == "recovery.index_rebuilt" for e in events)
    again.close()


def test_sane_index_is_trusted_on_clean_open(tmp_path):
    """A good index of a cleanly closed log is loaded without scanning."""
    config = LogConfig(index_interval_bytes=100)
    log = Log.open(str(tmp_path), "t", 0, config)
    log.append(encode_message_set([b"i" * 40] * 30))
    log.close()
    again = _reopen_clean(tmp_path, config)
    with structlog.testing.capture_logs() as events:
        assert len(again.segments[0].index) > 5
    assert again.recovery_report.segments_scanned == 0 and events == []
    again.close()


def test_rebuild_keeps_append_times_of_matching_entries(tmp_path, clock):
    """Recovery keeps the persisted append times of entries it finds again."""
    config = LogConfig(index_interval_bytes=100)
    log = Log.open(str(tmp_path), "t", 0, config, clock)
    log.append(encode_message_set([b"a" * 140]))
    clock.now += 10
    log.append(encode_message_set([b"b" * 140]))
    log.flush()
    times = list(log.segments[0].index.times)
    log.abandon()  # crash
    again = Log.open(str(tmp_path), "t", 0, config, clock)
    assert again.recovery_report.segments_scanned == 1
    assert list(again.segments[0].index.times) == times
    again.close()


def _timed_log(tmp_path, clock, count: int = 10) -> tuple[Log, list[int], list[float]]:
    """One 200-byte append per second with index_interval 200: one index entry per append."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=200), clock)
    offsets, times = [], []
    for i in range(count):
        times.append(clock.now)
        offsets.append(log.append(encode_message_set([bytes([i]) * 190])).first_offset)
        clock.now += 1
    return log, offsets, times


def test_offsets_before_a_time(tmp_path, clock):
    """Offsets appended strictly before the time come back newest first."""
    log, offsets, times = _timed_log(tmp_path, clock)
    assert log.offsets_before(int(times[4] * 1000), 100) == offsets[:4][::-1]
    assert log.offsets_before(int(times[4] * 1000) + 1, 2) == [offsets[4], offsets[3]]
    log.close()


def test_offsets_before_includes_end_when_everything_is_older(tmp_path, clock):
    """When the last append is before the time, the log end comes first."""
    log, offsets, _ = _timed_log(tmp_path, clock)
    assert log.offsets_before(int(clock.now * 1000), 3) == [log.end_offset, offsets[-1], offsets[-2]]
    log.close()


def test_offsets_before_nothing_older(tmp_path, clock):
    """A time before the first append gives no offsets."""
    log, _, times = _timed_log(tmp_path, clock)
    assert log.offsets_before(int(times[0] * 1000), 10) == []
    log.close()


def test_offsets_before_latest_and_earliest(tmp_path, clock):
    """-1 gives [log end] and -2 gives [log start] whatever max_number (Kafka 0.7 OFFSETS)."""
    log, offsets, _ = _timed_log(tmp_path, clock)
    assert log.offsets_before(-1, 1) == log.offsets_before(-1, 3) == [log.end_offset]
    assert log.offsets_before(-2, 5) == [0]
    assert log.offsets_before(-1, 0) == []
    log.close()


def test_offsets_before_on_empty_log(tmp_path, clock):
    """An empty log answers with its end for latest, earliest and any time."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(), clock)
    assert log.offsets_before(-1, 5) == log.offsets_before(-2, 5) == log.offsets_before(123, 5) == [0]
    log.close()


def test_offsets_before_precision_is_one_index_interval(tmp_path, clock):
    """The newest offset returned is within one index interval of the first message at the time."""
    interval = 512
    log = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=interval), clock)
    first_at: dict[float, int] = {}
    for second in range(20):
        for _ in range(7):  # 7 x 60-byte messages per second
            info = log.append(encode_message_set([b"s" * 50]))
            first_at.setdefault(clock.now, info.first_offset)
        clock.now += 1
    for when, target in first_at.items():
        found = log.offsets_before(int(when * 1000), 1)
        if found:
            assert target - interval - 60 <= found[0] <= target
    log.close()


def test_offsets_before_spans_segments(tmp_path, clock):
    """Offsets before a time come from every segment, newest first, and include segment bases."""
    config = LogConfig(segment_bytes=1024, index_interval_bytes=4096, index_interval_ms=10**9)
    log = Log.open(str(tmp_path), "t", 0, config, clock)
    for i in range(12):
        log.append(encode_message_set([b"x" * 390]))
        clock.now += 1
    bases = [s.base_offset for s in log.segments]
    assert log.offsets_before(int(clock.now * 1000), 100) == [log.end_offset] + bases[::-1]
    log.close()


def test_append_time_of_an_offset_comes_from_the_time_index(tmp_path, clock) -> None:
    """Log.append_time_ms gives the index time at or before the offset, None at the end."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=64), clock)
    first = log.append(encode_message_set([b"a" * 100]))
    clock.now += 5
    second = log.append(encode_message_set([b"b" * 100]))
    assert log.append_time_ms(first.first_offset) == int((clock.now - 5) * 1000)
    assert log.append_time_ms(second.first_offset) == int(clock.now * 1000)
    assert log.append_time_ms(second.next_offset) is None
    log.close()


def test_persist_writes_only_whole_entries_while_an_add_is_half_done(tmp_path):
    """A flush (flush thread) racing add (writer thread) between its two appends writes complete entries only."""
    segment = Segment.create(str(tmp_path), 0, 64, 5)
    segment.size = 300  # the log bytes do not matter here
    index = segment.index
    index.add([0, 100], 0, 5)
    index.positions.append(200)  # add() interrupted after the position, before the time
    segment.flush()
    assert open(segment.index_path, "rb").read() == pack_entries(array("I", [0, 100]), array("q", [5, 5]))
    index.times.append(6)  # the add completes; the next flush writes the rest
    segment.flush()
    assert unpack_entries(open(segment.index_path, "rb").read()) == (array("I", [0, 100, 200]), array("q", [5, 5, 6]))
    segment.close()
