"""Rolling the active segment by size and by age (rill.broker.log.Log)."""

from __future__ import annotations

import os

import pytest

from rill.broker.log import Log, LogConfig
from rill.client.clock import FakeClock
from rill.client.protocol.messages import decode_message_set, encode_message_set


def _segment_names(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))


@pytest.fixture
def clock():
    return FakeClock()


def test_roll_when_segment_would_exceed_segment_bytes(tmp_path):
    """A set that would push the active segment past segment_bytes goes into a new segment."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024))
    batch = encode_message_set([b"x" * 190] * 2)  # 400 bytes
    for _ in range(3):
        log.append(batch)
    assert [s.size for s in log.segments] == [800, 400]
    assert [s.base_offset for s in log.segments] == [0, 800]
    assert _segment_names(log.directory) == ["00000000000000000000.log", "00000000000000000800.log"]
    log.close()


def test_segment_may_be_filled_exactly(tmp_path):
    """A set that makes the segment exactly segment_bytes does not roll."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024))
    log.append(encode_message_set([b"y" * (1024 - 10)]))
    assert [s.size for s in log.segments] == [1024]
    log.close()


def test_set_larger_than_segment_bytes_goes_alone_into_fresh_segment(tmp_path):
    """An oversized set is written whole into a new, otherwise empty segment."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024))
    log.append(encode_message_set([b"a" * 10]))
    big = log.append(encode_message_set([b"b" * 1000] * 3))
    log.append(encode_message_set([b"c" * 10]))
    assert [s.size for s in log.segments] == [20, 3030, 20]
    assert log.segments[1].base_offset == big.first_offset == 20
    log.close()


def test_empty_segment_takes_an_oversized_set_without_rolling(tmp_path):
    """The first append to an empty segment never rolls, whatever its size."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024))
    log.append(encode_message_set([b"b" * 2000]))
    assert len(log.segments) == 1
    log.close()


def test_roll_by_age(tmp_path, clock):
    """A segment whose first append is roll_ms old is rolled on the next append."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(roll_ms=60_000), clock)
    log.append(encode_message_set([b"first"]))
    clock.now += 59.999
    log.append(encode_message_set([b"second"]))
    assert len(log.segments) == 1
    clock.now += 0.001
    log.append(encode_message_set([b"third"]))
    assert len(log.segments) == 2 and log.segments[1].base_offset == 31
    log.close()


def test_no_roll_by_age_of_an_empty_segment(tmp_path, clock):
    """An empty active segment is not rolled however old it is."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(roll_ms=1000), clock)
    clock.now += 3600
    log.append(encode_message_set([b"late"]))
    assert len(log.segments) == 1
    log.close()


def test_rolled_segment_reads_continue_across_the_boundary(tmp_path):
    """A read at the end of one segment continues at the base of the next."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024))
    for i in range(10):
        log.append(encode_message_set([bytes([65 + i]) * 190]))
    boundary = log.segments[1].base_offset
    first = log.read(0, 1 << 20)
    assert first.next_offset == boundary  # a slice never spans two segments
    second = log.read(boundary, 1 << 20)
    messages, _ = decode_message_set(os.pread(second.file.fileno(), second.length, second.position),
                                     base_offset=second.offset)
    assert messages[0].offset == boundary and messages[0].value == bytes([65 + 5]) * 190
    log.close()


def test_roll_survives_reopen(tmp_path):
    """Segments created by rolls are found again, in order, when the log is reopened."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024))
    for _ in range(12):
        log.append(encode_message_set([b"r" * 190]))
    bases, end = [s.base_offset for s in log.segments], log.end_offset
    log.close()
    again = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024))
    assert [s.base_offset for s in again.segments] == bases and again.end_offset == end
    again.close()
