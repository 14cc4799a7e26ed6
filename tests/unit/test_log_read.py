"""Appending to and reading from a partition log (rill.broker.log.Log)."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.broker.log import FileSlice, Log, LogConfig
from rill.client.errors import (InvalidFetchSize, InvalidMessage, InvalidOffset, MessageTooLarge,
                                OffsetOutOfRange)
from rill.client.protocol.messages import decode_message_set, encode_message, encode_message_set


def _bytes(piece: FileSlice) -> bytes:
    return os.pread(piece.file.fileno(), piece.length, piece.position)


def _values(piece: FileSlice) -> list[bytes]:
    messages, _ = decode_message_set(_bytes(piece), base_offset=piece.offset)
    return [m.value for m in messages]


def _read_all(log: Log, offset: int, max_size: int = 1 << 20) -> list[bytes]:
    out: list[bytes] = []
    while offset < log.end_offset:
        piece = log.read(offset, max_size)
        out += _values(piece)
        offset = piece.next_offset
    return out


@pytest.fixture
def log(tmp_path):
    log = Log.open(str(tmp_path), "topic", 0, LogConfig(index_interval_bytes=64))
    yield log
    log.close()


def test_append_then_read_round_trip(log):
    """Messages appended are read back byte for byte from the returned offset."""
    info = log.append(encode_message_set([b"one", b"two", b"three"]))
    assert (info.first_offset, info.count) == (0, 3)
    assert info.next_offset == log.end_offset == 3 * 10 + 3 + 3 + 5
    assert _values(log.read(0, 1000)) == [b"one", b"two", b"three"]


def test_offsets_are_byte_positions(log):
    """Each message's offset is the previous offset plus 4 plus its length field."""
    log.append(encode_message_set([b"a" * 10, b"b" * 20]))
    messages, _ = decode_message_set(_bytes(log.read(0, 1000)))
    assert [(m.offset, m.next_offset) for m in messages] == [(0, 20), (20, 50)]


def test_read_at_end_is_empty(log):
    """Reading at the log end returns an empty slice, not an error."""
    log.append(encode_message_set([b"x"]))
    piece = log.read(log.end_offset, 1000)
    assert (piece.length, piece.offset, piece.next_offset) == (0, log.end_offset, log.end_offset)


def test_read_of_empty_log_is_empty(log):
    """A new log reads as empty at offset 0."""
    assert log.read(0, 100).length == 0


def test_read_beyond_end_is_out_of_range(log):
    """An offset past the end raises OffsetOutOfRange naming the start and end."""
    log.append(encode_message_set([b"x"]))
    with pytest.raises(OffsetOutOfRange, match=r"log start 0, end 11"):
        log.read(log.end_offset + 1, 100)


def test_read_before_start_is_out_of_range(tmp_path):
    """An offset below the log start raises OffsetOutOfRange."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, retention_bytes=0))
    for _ in range(30):
        log.append(encode_message_set([b"z" * 90]))
    log.delete_oldest_segments(lambda segments: 1)
    assert log.start_offset > 0
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-5, 100)
    log.close()


def test_read_mid_message_is_invalid_offset(log):
    """An offset inside a message raises InvalidOffset."""
    log.append(encode_message_set([b"m" * 100] * 50))
    for offset in (1, 109, 111, 2000):
        with pytest.raises(InvalidOffset):
            log.read(offset, 1000)
    assert log.read(110, 1000).offset == 110


def test_slice_ends_on_a_message_boundary(log):
    """A slice holds only whole messages when at least one fits."""
    log.append(encode_message_set([b"m" * 100] * 50))  # 110-byte entries
    piece = log.read(220, 500)
    assert (piece.length, piece.next_offset) == (440, 660)
    assert _values(piece) == [b"m" * 100] * 4


def test_slice_stops_at_log_end(log):
    """A slice larger than what remains stops at the log end."""
    log.append(encode_message_set([b"q"] * 3))
    assert log.read(0, 1 << 20).length == log.end_offset


def test_first_message_larger_than_max_size_gives_partial_slice(log):
    """When not even one message fits, the slice is the first max_size bytes of it (Kafka 0.7)."""
    log.append(encode_message_set([b"L" * 500, b"s"]))
    piece = log.read(0, 100)
    assert (piece.length, piece.next_offset) == (100, 100)
    assert decode_message_set(_bytes(piece)) == ([], 0)


def test_zero_max_size_reads_nothing_and_negative_is_refused(log):
    """max_size 0 gives an empty slice; a negative max_size raises InvalidFetchSize."""
    log.append(encode_message_set([b"x"]))
    assert log.read(0, 0).length == 0
    with pytest.raises(InvalidFetchSize):
        log.read(0, -1)


def test_empty_set_is_refused(log):
    """An empty message set raises InvalidMessage."""
    with pytest.raises(InvalidMessage):
        log.append(b"")
    assert log.end_offset == 0


def test_set_with_bad_crc_is_refused_whole(log):
    """One corrupt message refuses the whole set and nothing is written."""
    good = encode_message(b"good")
    bad = bytearray(encode_message(b"bad!"))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidMessage, match="CRC"):
        log.append(good + bytes(bad) + good)
    assert log.end_offset == 0 and log.segments[-1].size == 0


def test_incomplete_tail_is_refused(log):
    """A set ending in a partial message raises InvalidMessage and writes nothing."""
    data = encode_message_set([b"a", b"b"])
    with pytest.raises(InvalidMessage, match="incomplete"):
        log.append(data[:-2])
    assert log.end_offset == 0


def test_too_large_message_is_refused(tmp_path):
    """A message over max_message_bytes raises MessageTooLarge."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(max_message_bytes=100))
    log.append(encode_message_set([b"x" * 100]))
    with pytest.raises(MessageTooLarge):
        log.append(encode_message_set([b"x" * 101]))
    assert log.end_offset == 110
    log.close()


def test_append_accepts_memoryview_and_magic_zero(log):
    """Sets may be any buffer and may use the magic-0 format."""
    log.append(memoryview(encode_message_set([b"v1"])))
    log.append(encode_message_set([b"v0"], magic=0))
    assert _read_all(log, 0) == [b"v1", b"v0"]


def test_reads_across_segments(tmp_path):
    """Consecutive reads walk through every segment in order."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=1024, index_interval_bytes=100))
    payloads = [bytes([i]) * (50 + i) for i in range(60)]
    for p in payloads:
        log.append(encode_message_set([p]))
    assert len(log.segments) > 3
    assert _read_all(log, 0) == payloads
    log.close()


@settings(max_examples=50, deadline=None)
@given(batches=st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=8), min_size=1, max_size=20),
       max_size=st.integers(min_value=1, max_value=3000))
def test_property_every_append_offset_reads_back_exactly(batches, max_size):
    """Any appends of random payloads read back exactly from every returned offset."""
    with tempfile.TemporaryDirectory() as data_dir:
        log = Log.open(data_dir, "prop", 0, LogConfig(segment_bytes=1024, index_interval_bytes=50))
        infos = [log.append(encode_message_set(batch)) for batch in batches]
        for i, info in enumerate(infos):
            expected = [p for batch in batches[i:] for p in batch]
            assert _read_all(log, info.first_offset, max(max_size, 310 + 10)) == expected
            piece = log.read(info.first_offset, max_size)
            assert piece.offset == info.first_offset and 0 < piece.length <= max_size
        assert infos[-1].next_offset == log.end_offset
        log.close()
