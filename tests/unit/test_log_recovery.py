"""Recovery after an unclean shutdown (rill.broker.log.recovery)."""

from __future__ import annotations

import glob
import os
import random
import tracemalloc

import pytest
import structlog

from rill.broker.log import CorruptLogError, Log, LogConfig, LogManager, checkpoint, files
from rill.broker.log.checkpoint import read_checkpoint
from rill.broker.log.integrity import CorruptDataError
from rill.client.protocol.messages import decode_message_set, encode_message_set

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=100)


def _crash(log: Log) -> None:
    """Simulate kill -9: drop the descriptors without flushing or writing anything."""
    log.abandon()


def _values(log: Log) -> list[bytes]:
    out, offset = [], log.start_offset
    while offset < log.end_offset:
        piece = log.read(offset, 4 << 20)
        messages, _ = decode_message_set(os.pread(piece.file.fileno(), piece.length, piece.position))
        out += [m.value for m in messages]
        offset = piece.next_offset
    return out


def _written(tmp_path, payloads, config=SMALL, crash=True) -> tuple[Log, list[int]]:
    """A log holding one message per payload; returns it (crashed) and each message's offset."""
    log = Log.open(str(tmp_path), "t", 0, config)
    offsets = [log.append(encode_message_set([p])).first_offset for p in payloads]
    if crash:
        _crash(log)
    return log, offsets


def _segment_file(log: Log, index: int = -1) -> str:
    return log.segments[index].path


def _side_files(log: Log) -> list[str]:
    return sorted(glob.glob(os.path.join(log.directory, "*.corrupt-*")))


def test_torn_tail_is_truncated_to_last_whole_message(tmp_path):
    """A message cut mid-way at the end is removed; everything before it survives."""
    payloads = [bytes([i]) * 40 for i in range(10)]
    log, offsets = _written(tmp_path, payloads, LogConfig())
    os.truncate(_segment_file(log), offsets[-1] + 20)
    with structlog.testing.capture_logs() as events:
        again = Log.open(str(tmp_path), "t", 0, LogConfig())
    assert again.end_offset == offsets[-1] and _values(again) == payloads[:-1]
    assert again.recovery_report.bytes_truncated == 20
    warning = next(e for e in events if e["event"] == "recovery.truncated")
    assert (warning["file"], warning["position"], warning["bytes"]) == (_segment_file(log), offsets[-1], 20)
    again.close()


def test_cut_bytes_are_kept_in_a_side_file(tmp_path):
    """The truncated bytes are copied to <segment>.log.corrupt-<ms> before the cut."""
    log, offsets = _written(tmp_path, [b"a" * 30, b"b" * 30], LogConfig())
    with open(_segment_file(log), "rb") as f:
        original = f.read()
    os.truncate(_segment_file(log), len(original) - 5)
    again = Log.open(str(tmp_path), "t", 0, LogConfig())
    [side] = _side_files(again)
    assert side.startswith(_segment_file(log) + ".corrupt-")
    assert open(side, "rb").read() == original[offsets[1]:-5]
    assert again.recovery_report.side_files == (side,)
    again.close()


@pytest.mark.parametrize("max_message_bytes", [1_000_000, 2**31 - 1 - 10])
def test_huge_length_in_garbage_tail_allocates_nothing(tmp_path, max_message_bytes):
    """A 0x7FFFFFFF length field in a garbage tail is refused before any large read."""
    config = LogConfig(max_message_bytes=max_message_bytes)
    log, _ = _written(tmp_path, [b"ok"] * 5, config)
    with open(_segment_file(log), "ab") as f:
        f.write(b"\x7f\xff\xff\xff" + b"\x01" * 100)
    tracemalloc.start()
    try:
        again = Log.open(str(tmp_path), "t", 0, config)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    assert _values(again) == [b"ok"] * 5 and again.recovery_report.bytes_truncated == 104
    again.close()


def test_zero_filled_tail_is_truncated(tmp_path):
    """A tail of zeros (size updated before the data blocks reached disk) is cut off."""
    log, _ = _written(tmp_path, [b"z" * 100] * 3, LogConfig())
    with open(_segment_file(log), "ab") as f:
        f.write(bytes(8192))
    again = Log.open(str(tmp_path), "t", 0, LogConfig())
    assert again.end_offset == 330 and again.recovery_report.bytes_truncated == 8192
    again.close()


def test_random_garbage_appended_to_log_and_index(tmp_path):
    """Kafka's testCorruptLog: 1-1024 random bytes after 50-99 messages lose no message."""
    rng = random.Random(1234)
    for iteration in range(10):
        directory = tmp_path / str(iteration)
        payloads = [rng.randbytes(rng.randint(0, 40)) for _ in range(rng.randint(50, 99))]
        log, _ = _written(directory, payloads)
        end = log.end_offset
        for path in (_segment_file(log), log.segments[-1].index.path):
            with open(path, "ab") as f:
                f.write(rng.randbytes(rng.randint(1, 1024)))
        again = Log.open(str(directory), "t", 0, SMALL)
        assert again.end_offset == end and _values(again) == payloads
        again.close()


def test_corruption_in_the_middle_is_kept_but_never_served(tmp_path):
    """A bad message followed by valid ones is kept and logged by file and position; reads refuse it and serve the rest."""
    payloads = [bytes([i]) * 50 for i in range(20)]
    log, offsets = _written(tmp_path, payloads, LogConfig())
    path = _segment_file(log)
    with open(path, "r+b") as f:
        f.seek(offsets[5] + 20)
        f.write(b"\xff")
    size = os.path.getsize(path)
    with structlog.testing.capture_logs() as events:
        again = Log.open(str(tmp_path), "t", 0, LogConfig())
    [event] = [e for e in events if e["event"] == "recovery.corrupt_range"]
    assert (event["file"], event["position"], event["bytes"]) == (path, offsets[5], offsets[6] - offsets[5])
    assert os.path.getsize(path) == size and _side_files(log) == [] and again.recovery_report.corrupt_ranges == 1
    assert again.read(0, 10_000).next_offset == offsets[5]
    with pytest.raises(CorruptDataError, match=f"offset {offsets[5]}"):
        again.read(offsets[5], 10_000)
    piece = again.read(offsets[6], 10_000)
    assert [m.value for m in decode_message_set(os.pread(piece.file.fileno(), piece.length, piece.position))[0]] == \
        payloads[6:]
    again.close()


def test_corruption_in_the_middle_is_cut_with_truncate_corrupt(tmp_path):
    """With truncate_corrupt the log is cut at the bad message and the rest kept in a side file."""
    payloads = [bytes([i]) * 50 for i in range(20)]
    log, offsets = _written(tmp_path, payloads, LogConfig())
    path = _segment_file(log)
    original = open(path, "rb").read()
    with open(path, "r+b") as f:
        f.seek(offsets[5] + 20)
        f.write(b"\xff")
    again = Log.open(str(tmp_path), "t", 0, LogConfig(), truncate_corrupt=True)
    assert again.end_offset == offsets[5] and _values(again) == payloads[:5]
    [side] = _side_files(again)
    cut = open(side, "rb").read()
    assert len(cut) == len(original) - offsets[5] and cut[25:] == original[offsets[5] + 25:]
    again.close()


def test_a_zeroed_segment_tail_followed_by_valid_segments_is_kept_as_corrupt(tmp_path):
    """Zeroed bytes at the end of a segment that later segments follow are corruption in the middle: kept, refused."""
    log, offsets = _written(tmp_path, [b"s" * 190] * 12)
    first = _segment_file(log, 0)
    size = os.path.getsize(first)
    with open(first, "r+b") as f:
        f.seek(size - 150)
        f.write(bytes(150))
    again = Log.open(str(tmp_path), "t", 0, SMALL)
    torn = [o for o in offsets if o < again.segments[1].base_offset][-1]
    with pytest.raises(CorruptDataError):
        again.read(torn, 10_000)
    assert again.read(again.segments[1].base_offset, 10_000).length > 0
    again.close()


def test_a_segment_cut_short_before_valid_segments_is_refused(tmp_path):
    """A segment shorter than the next one's base leaves offsets that exist nowhere: the start is refused, naming both."""
    log, _ = _written(tmp_path, [b"s" * 190] * 12)
    first = _segment_file(log, 0)
    os.truncate(first, os.path.getsize(first) - 3)
    with pytest.raises(CorruptLogError) as caught:
        Log.open(str(tmp_path), "t", 0, SMALL)
    assert caught.value.path == _segment_file(log, 1) and "997" in str(caught.value)


def test_torn_segment_with_truncate_corrupt_drops_later_segments(tmp_path):
    """With truncate_corrupt, later segments are moved aside into side files."""
    log, offsets = _written(tmp_path, [b"s" * 190] * 12)
    os.truncate(_segment_file(log, 0), 797)
    again = Log.open(str(tmp_path), "t", 0, SMALL, truncate_corrupt=True)
    assert again.end_offset == 600 and len(again.segments) == 1
    assert len(_side_files(again)) == 1 + (len(log.segments) - 1)
    again.append(encode_message_set([b"new"]))
    assert _values(again)[-1] == b"new"
    again.close()


def test_crash_during_roll_leaves_empty_next_segment(tmp_path):
    """An empty segment named after the previous end (crash right after a roll) becomes active."""
    log, _ = _written(tmp_path, [b"x" * 90] * 5)
    end = log.end_offset
    open(files.segment_path(log.directory, end), "wb").close()
    again = Log.open(str(tmp_path), "t", 0, SMALL)
    assert again.end_offset == end and again.segments[-1].base_offset == end
    assert again.segments[-1].size == 0 and again.recovery_report.bytes_truncated == 0
    again.close()


def test_empty_segment_with_wrong_name_is_removed(tmp_path):
    """An empty segment whose base offset does not follow the previous end is deleted."""
    log, _ = _written(tmp_path, [b"x" * 90] * 5)
    end = log.end_offset
    stray = files.segment_path(log.directory, end + 1000)
    open(stray, "wb").close()
    again = Log.open(str(tmp_path), "t", 0, SMALL)
    assert again.end_offset == end and not os.path.exists(stray)
    again.close()


def test_torn_tail_with_leftover_empty_segment(tmp_path):
    """A torn tail followed only by an empty leftover segment is a torn tail, not corruption."""
    log, offsets = _written(tmp_path, [b"x" * 90] * 5)
    end = log.end_offset
    open(files.segment_path(log.directory, end), "wb").close()
    os.truncate(_segment_file(log), end - 10)
    again = Log.open(str(tmp_path), "t", 0, SMALL)
    assert again.end_offset == offsets[-1] and len(again.segments) == 1
    again.close()


def test_gap_between_segments_is_refused(tmp_path):
    """Valid segments whose base offsets are not contiguous raise CorruptLogError."""
    log, _ = _written(tmp_path, [b"g" * 190] * 8)
    second = _segment_file(log, 1)
    moved = files.segment_path(log.directory, log.segments[1].base_offset + 10)
    os.rename(second, moved)
    with pytest.raises(CorruptLogError) as caught:
        Log.open(str(tmp_path), "t", 0, SMALL)
    assert caught.value.path == moved


def test_empty_log_directory_and_empty_segment(tmp_path):
    """A partition holding only an empty segment file opens as an empty log."""
    directory = files.partition_dir(str(tmp_path), "t", 0)
    os.makedirs(directory)
    open(files.segment_path(directory, 0), "wb").close()
    log = Log.open(str(tmp_path), "t", 0, SMALL)
    assert (log.start_offset, log.end_offset) == (0, 0)
    log.close()


def test_only_segments_after_the_recovery_point_are_scanned(tmp_path):
    """Segments wholly before the last flushed offset are trusted (their index checked when used), not scanned."""
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100)
    log, _ = _written(tmp_path, [b"f" * 190] * 12, config, crash=False)
    log.flush()
    flushed = log.flushed_offset
    log.append(encode_message_set([b"f" * 190] * 4))
    _crash(log)
    again = Log.open(str(tmp_path), "t", 0, config, recovery_point=flushed)
    # segments 0, 1000 and 2000 (400 bytes) were flushed; the set of 800 bytes rolled to 2400
    assert [s.base_offset for s in again.segments] == [0, 1000, 2000, 2400]
    assert again.recovery_report.segments_scanned == 1
    assert [s.index_loaded for s in again.segments] == [False, False, False, True]
    again.close()


def test_the_scan_starts_at_the_recovery_point_inside_its_segment(tmp_path):
    """Recovery reads only what was appended after the recovery point, keeping the index entries before it."""
    config = LogConfig(index_interval_bytes=100)
    log, offsets = _written(tmp_path, [bytes([i]) * 90 for i in range(20)], config, crash=False)
    log.flush()
    flushed, entries = log.flushed_offset, list(log.segments[0].index.positions)
    tail = [bytes([50 + i]) * 90 for i in range(5)]
    for payload in tail:
        log.append(encode_message_set([payload]))
    _crash(log)
    with structlog.testing.capture_logs() as events:
        again = Log.open(str(tmp_path), "t", 0, config, recovery_point=flushed)
    [scanned] = [e for e in events if e["event"] == "recovery.scanned"]
    assert (scanned["start"], scanned["bytes"]) == (flushed, again.end_offset - flushed)
    assert list(again.segments[0].index.positions)[:len(entries)] == entries
    assert _values(again) == [bytes([i]) * 90 for i in range(20)] + tail
    again.close()


def test_recovered_data_is_synced(tmp_path):
    """After recovery the recovered segments are fsynced: the flushed offset is the end (KAFKA-10101)."""
    log, _ = _written(tmp_path, [b"p" * 100] * 4, LogConfig())
    again = Log.open(str(tmp_path), "t", 0, LogConfig())
    assert again.recovery_report.segments_scanned == 1
    assert again.end_offset == again.flushed_offset > 0
    again.close()


def test_clean_shutdown_marker_skips_the_scan(tmp_path):
    """After a clean close the next start scans nothing; after a crash it scans."""
    manager = LogManager(str(tmp_path), SMALL)
    manager.create_topic("t", 1)
    manager.get("t", 0).append(encode_message_set([b"c" * 50] * 30))
    manager.close()
    assert os.path.exists(tmp_path / files.CLEAN_SHUTDOWN_MARKER)
    with structlog.testing.capture_logs() as events:
        manager = LogManager(str(tmp_path), SMALL)
    loaded = next(e for e in events if e["event"] == "logs.loaded")
    assert loaded["clean_start"] is True and loaded["partitions"] == 1
    assert not [e for e in events if e["event"].startswith("recovery.") or e["event"] == "log.loaded"]
    assert manager.get("t", 0).recovery_report.clean
    assert not os.path.exists(tmp_path / files.CLEAN_SHUTDOWN_MARKER)
    manager.close()


def _crash_manager(manager: LogManager) -> None:
    """Simulate kill -9 of the broker holding ``manager``: nothing is flushed or written."""
    for log in manager.logs():
        log.abandon()
    os.close(manager._lock_fd)


def test_missing_marker_triggers_recovery_from_the_checkpoint(tmp_path):
    """Without the marker (a crash) each log is recovered from its checkpointed recovery point, then checkpointed."""
    manager = LogManager(str(tmp_path), SMALL)
    manager.create_topic("t", 2)
    flushed = manager.get("t", 0).append(encode_message_set([b"c" * 50] * 30)).next_offset
    manager.flush_all()
    manager.write_checkpoint()
    end = manager.get("t", 0).append(encode_message_set([b"d" * 50] * 3)).next_offset
    _crash_manager(manager)
    with structlog.testing.capture_logs() as events:
        manager = LogManager(str(tmp_path), SMALL)
    report = manager.get("t", 0).recovery_report
    assert not report.clean and report.recovery_point == flushed and report.segments_scanned == 1
    assert manager.get("t", 0).end_offset == end
    assert manager.get("t", 1).recovery_report.segments_scanned == 0  # empty: nothing to read
    assert [e["event"] for e in events if e["event"].startswith("recovery.")][:2] == [
        "recovery.unclean_shutdown", "recovery.scanned"]
    assert read_checkpoint(str(tmp_path)) == {("t", 0): end, ("t", 1): 0}
    manager.close()


def test_messages_larger_than_the_scan_window_are_recovered(tmp_path):
    """A message bigger than the 1 MiB scan window is read whole and validated."""
    config = LogConfig(max_message_bytes=3 * 2**20)
    payloads = [b"a" * 100, os.urandom(int(1.5 * 2**20)), b"b" * 100]
    log, offsets = _written(tmp_path, payloads, config)
    os.truncate(_segment_file(log), offsets[-1] + 50)
    again = Log.open(str(tmp_path), "t", 0, config)
    assert again.end_offset == offsets[-1] and _values(again) == payloads[:2]
    again.close()


def test_side_file_copy_is_bounded_for_large_tails(tmp_path):
    """A multi-megabyte garbage tail is cut and copied aside in bounded chunks."""
    log, _ = _written(tmp_path, [b"ok"], LogConfig())
    with open(_segment_file(log), "ab") as f:
        f.write(bytes(3 * 2**20 + 17))
    tracemalloc.start()
    try:
        again = Log.open(str(tmp_path), "t", 0, LogConfig())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20 and again.recovery_report.bytes_truncated == 3 * 2**20 + 17
    assert os.path.getsize(again.recovery_report.side_files[0]) == 3 * 2**20 + 17
    again.close()


def test_clean_start_reads_and_writes_nothing_per_partition(tmp_path, monkeypatch):
    """A clean start lists directories only: no checkpoint write, no index read, no descriptor left open."""
    manager = LogManager(str(tmp_path), SMALL)
    manager.create_topic("t", 3)
    for p in range(3):
        manager.get("t", p).append(encode_message_set([b"c" * 100] * 20))
    manager.close()
    writes: list[object] = []
    monkeypatch.setattr(checkpoint, "write_checkpoint", lambda *args: writes.append(args))
    again = LogManager(str(tmp_path), SMALL)
    assert writes == [] and len(again.open_files) == 0
    assert not any(s.index_loaded for log in again.logs() for s in log.segments)
    assert again.get("t", 2).end_offset == 20 * 110
    again.close()
