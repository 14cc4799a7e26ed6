"""Segments, file names and configuration of the log storage (rill.broker.log)."""

from __future__ import annotations

import os

import pytest

from rill.broker.log import LogConfig, files
from rill.broker.log import segment as segment_module
from rill.broker.log.segment import Segment
from rill.client.errors import InvalidTopic, WrongPartition
from rill.client.protocol.messages import decode_message_set, encode_message_set, scan

INTERVAL = 64


def _append(segment: Segment, payloads: list[bytes], now_ms: int = 1000) -> bytes:
    data = encode_message_set(payloads)
    result = scan(data, 10_000, INTERVAL, segment.index.next_mark(segment.size))
    segment.append(data, result.marks, now_ms)
    return data


@pytest.fixture
def segment(tmp_path):
    seg = Segment.create(str(tmp_path), 0, INTERVAL, 1000)
    yield seg
    seg.close()


def test_create_names_files_by_base_offset(tmp_path):
    """A new segment is an empty %020d.log file; its %020d.index appears with the first flush of entries."""
    seg = Segment.create(str(tmp_path), 12345, INTERVAL, 0)
    assert sorted(os.listdir(tmp_path)) == ["00000000000000012345.log"]
    assert seg.size == 0 and seg.end_offset == 12345
    _append(seg, [b"x"])
    seg.flush()
    assert sorted(os.listdir(tmp_path)) == ["00000000000000012345.index", "00000000000000012345.log"]
    seg.close()


def test_create_fsyncs_the_directory(tmp_path, monkeypatch):
    """Creating a segment fsyncs its parent directory so the new file survives a crash (KAFKA-3968)."""
    synced = []
    monkeypatch.setattr(files, "fsync_dir", synced.append)
    Segment.create(str(tmp_path), 0, INTERVAL, 0).close()
    assert synced == [str(tmp_path)]


def test_create_refuses_an_existing_segment(tmp_path, segment):
    """Creating a segment whose file exists fails instead of overwriting it."""
    with pytest.raises(FileExistsError):
        Segment.create(str(tmp_path), 0, INTERVAL, 0)


def test_append_writes_bytes_and_grows(segment):
    """Appended bytes land at the end of the file and the size follows."""
    data = _append(segment, [b"a" * 10, b"b" * 20])
    assert segment.size == len(data)
    assert os.pread(segment.file.fileno(), len(data), 0) == data


def test_append_loops_on_short_writes(segment, monkeypatch):
    """A short pwrite is continued until the whole set is written."""
    real = os.pwrite
    monkeypatch.setattr(segment_module.os, "pwrite", lambda fd, data, pos: real(fd, bytes(data)[:7], pos))
    data = _append(segment, [b"x" * 50, b"y" * 50])
    assert os.pread(segment.file.fileno(), 1000, 0) == data


def test_a_zero_byte_pwrite_raises_instead_of_spinning(segment, tmp_path, monkeypatch):
    """pwrite returning 0 is an EIO, for segment appends and index writes alike (one guarded pwrite_all)."""
    monkeypatch.setattr(os, "pwrite", lambda fd, data, pos: 0)
    with pytest.raises(OSError, match="short write"):
        _append(segment, [b"never written"])
    assert segment.size == 0
    segment.index.add([0], 0, 1000)
    with pytest.raises(OSError, match="short write"):
        segment.flush()
    fd = os.open(str(tmp_path / "plain"), os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="short write"):
            files.pwrite_all(fd, b"abc", 0, "plain")
    finally:
        os.close(fd)


def test_index_marks_first_message_and_every_interval(segment):
    """The index holds position 0 and then a boundary at least one interval after the previous."""
    for _ in range(10):
        _append(segment, [b"p" * 30] * 3)
    positions = list(segment.index.positions)
    assert positions[0] == 0
    assert all(b - a >= INTERVAL for a, b in zip(positions, positions[1:]))
    assert all(segment.is_boundary(p) for p in positions)


def test_is_boundary(segment):
    """Message starts and the segment end are boundaries; positions inside messages are not."""
    _append(segment, [b"m" * 40] * 10)  # entries of 4 + 6 + 40 = 50 bytes
    assert all(segment.is_boundary(50 * k) for k in range(11))
    assert not any(segment.is_boundary(p) for p in (1, 49, 51, 260, 499, 501))


def test_find_boundary_at_or_before(segment):
    """The last boundary at or before a position is found by hopping from the index."""
    _append(segment, [b"m" * 40] * 10)
    assert segment.find_boundary_at_or_before(0) == 0
    assert segment.find_boundary_at_or_before(49) == 0
    assert segment.find_boundary_at_or_before(50) == 50
    assert segment.find_boundary_at_or_before(377) == 350
    assert segment.find_boundary_at_or_before(10_000) == 500


def test_flush_persists_index_entries(tmp_path, segment):
    """flush writes the pending index entries (12 bytes each) before the fsync."""
    _append(segment, [b"m" * 40] * 10)
    assert not os.path.exists(files.index_path(str(tmp_path), 0))
    segment.flush()
    assert os.path.getsize(files.index_path(str(tmp_path), 0)) == 12 * len(segment.index)


def test_deleted_segment_stays_readable_through_its_file(tmp_path, segment):
    """delete unlinks the files but an open file object still reads the bytes."""
    data = _append(segment, [b"keep"])
    handle = segment.file
    segment.delete()
    assert os.listdir(tmp_path) == []
    assert os.pread(handle.fileno(), len(data), 0) == data
    assert decode_message_set(os.pread(handle.fileno(), len(data), 0))[0][0].value == b"keep"


def test_partition_dir_name_and_parse():
    """Partition directories are <topic>-<partition>, parsed back on the last '-'."""
    assert files.partition_dir_name("my-topic", 3) == "my-topic-3"
    assert files.parse_partition_dir_name("my-topic-3") == ("my-topic", 3)
    assert files.parse_partition_dir_name("t-0") == ("t", 0)
    assert files.parse_partition_dir_name("t--1") == ("t-", 1)
    for bad in ("topic", "topic-", "-3", "t-03", "t-+1", "t-x", "a/b-1", "..-1"):
        assert files.parse_partition_dir_name(bad) is None, bad


def test_partition_dir_rejects_bad_names_and_partitions(tmp_path):
    """Illegal topics, negative partitions and over-long names are refused."""
    for topic in ("../x", "", ".", "..", "a/b", "a\x00b", "x" * 250):
        with pytest.raises(InvalidTopic):
            files.partition_dir(str(tmp_path), topic, 0)
    with pytest.raises(WrongPartition):
        files.partition_dir(str(tmp_path), "t", -1)
    with pytest.raises(InvalidTopic):
        files.partition_dir(str(tmp_path), "x" * 249, 100_000)
    assert os.listdir(tmp_path) == []


def test_partition_dir_must_stay_inside_data_dir(tmp_path):
    """A partition path that resolves outside the data directory (a symlink) is refused."""
    os.symlink("/", tmp_path / "evil-0")
    with pytest.raises(InvalidTopic):
        files.partition_dir(str(tmp_path), "evil", 0)


def test_side_files_are_never_overwritten(tmp_path):
    """A second side file for the same segment and millisecond gets a new name."""
    first, fd1 = files.create_side_file(str(tmp_path / "0.log"), 5)
    second, fd2 = files.create_side_file(str(tmp_path / "0.log"), 5)
    os.close(fd1)
    os.close(fd2)
    assert first != second and first.endswith(".log.corrupt-5")


def test_recovery_point_round_trip_and_damage(tmp_path):
    """The recovery point reads back; a missing or damaged file reads as 0."""
    assert files.read_recovery_point(str(tmp_path)) == 0
    files.write_recovery_point(str(tmp_path), 123456)
    assert files.read_recovery_point(str(tmp_path)) == 123456
    (tmp_path / files.RECOVERY_POINT_FILE).write_bytes(b"999999 1\n")
    assert files.read_recovery_point(str(tmp_path)) == 0


@pytest.mark.parametrize("field,value", [
    ("segment_bytes", 1023), ("segment_bytes", 2**31), ("index_interval_bytes", 0),
    ("retention_ms", 0), ("retention_bytes", -2), ("flush_interval_messages", 0),
    ("max_message_bytes", -1), ("roll_ms", 0),
])
def test_config_rejects_out_of_range_values(field, value):
    """LogConfig refuses values outside their range, naming the field."""
    with pytest.raises(ValueError, match=field):
        LogConfig(**{field: value})


def test_config_defaults_match_kafka():
    """Defaults: 1 GiB segments, 7-day roll and retention, unlimited bytes, 4 KiB index interval."""
    config = LogConfig()
    assert (config.segment_bytes, config.roll_ms, config.retention_ms) == (2**30, 604_800_000, 604_800_000)
    assert (config.retention_bytes, config.index_interval_bytes, config.max_message_size) == (-1, 4096, 1_000_006)


def test_a_failed_append_leaves_no_part_of_the_set_behind(segment, monkeypatch):
    """A write that fails half-way (disk full) is cut back, so no message of the refused set survives a restart."""
    _append(segment, [b"kept"])
    size = segment.size
    real_pwrite = os.pwrite
    calls = []

    def half_then_full(fd, data, position):
        calls.append(position)
        if len(calls) == 1:
            return real_pwrite(fd, bytes(data)[:len(data) // 2], position)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", half_then_full)
    with pytest.raises(OSError, match="No space"):
        _append(segment, [b"x" * 500] * 10)
    monkeypatch.undo()
    assert segment.size == size and os.path.getsize(segment.path) == size
