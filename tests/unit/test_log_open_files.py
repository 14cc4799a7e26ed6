"""The bounded cache of open segment files (rill.broker.log.open_files) and what it means for logs."""

from __future__ import annotations

import os

import pytest

from rill.broker.log import Log, LogConfig, LogManager
from rill.broker.log.open_files import LOG_FILE, OpenFiles
from rill.broker.log.segment import Segment
from rill.client.clock import FakeClock
from rill.client.protocol.messages import decode_message_set, encode_message_set


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _segments(tmp_path, count: int, cache: OpenFiles) -> list[Segment]:
    out = []
    for base in range(count):
        directory = tmp_path / f"p{base}"
        directory.mkdir()
        segment = Segment.create(str(directory), 0, 64, 0, cache)
        segment.append(encode_message_set([b"m%d" % base]), [0], 0)
        segment.flush()
        out.append(segment)
    return out


def test_cache_holds_at_most_max_open_files(tmp_path):
    """Using more segments than max_open keeps only max_open descriptors open (the least recently used close)."""
    cache = OpenFiles(max_open=4)
    segments = _segments(tmp_path, 10, cache)
    before = _fds()
    for segment in segments:
        assert os.pread(segment.file.fileno(), 4, 0)
    assert len(cache) == 4 and _fds() <= before + 4
    assert cache.log_file(segments[-1]) is cache.log_file(segments[-1])  # a hit opens nothing
    opened = cache.opened
    cache.log_file(segments[0])  # evicted long ago: opened again
    assert cache.opened == opened + 1


def test_unsynced_segments_are_evicted_last(tmp_path):
    """A segment with bytes not yet fsynced keeps its descriptor while synced files can be closed instead."""
    cache = OpenFiles(max_open=4)
    dirty = _segments(tmp_path, 1, cache)[0]
    dirty.append(encode_message_set([b"not yet synced"]), [], 0)
    first = dirty.file
    assert dirty.unsynced
    for segment in _more(tmp_path, cache):
        segment.file
    assert dirty.file is first  # still the same open descriptor
    dirty.flush()
    assert not dirty.unsynced


def _more(tmp_path, cache: OpenFiles) -> list[Segment]:
    root = tmp_path / "more"
    root.mkdir()
    return _segments(root, 5, cache)


def test_an_evicted_file_stays_open_while_a_slice_uses_it(tmp_path):
    """Eviction drops only the cache's reference: a file slice taken before still reads its bytes."""
    cache = OpenFiles(max_open=2)
    log = Log.open(str(tmp_path), "t", 0, LogConfig(), open_files=cache)
    log.append(encode_message_set([b"keep me"]))
    log.flush()  # synced: nothing pins the file in the cache any more
    piece = log.read(0, 1000)
    _more(tmp_path, cache)  # evicts t-0's file from the cache
    assert all(key[0] is not log.segments[0] for key in cache._files)
    messages, _ = decode_message_set(os.pread(piece.file.fileno(), piece.length, piece.position))
    assert [m.value for m in messages] == [b"keep me"]
    log.close()


def test_idle_files_are_closed(tmp_path):
    """close_idle drops files no sweep has seen used for idle_ms and keeps the ones used since."""
    clock = FakeClock(1000.0)
    cache = OpenFiles(max_open=100, idle_ms=1000, clock=clock)
    old, new = _segments(tmp_path, 2, cache)
    cache.close_idle()  # both were just used
    clock.now += 2
    new.file
    assert cache.close_idle() == 3  # old's log and index files, and new's index (unused since its flush)
    assert list(cache._files) == [(new, LOG_FILE)] and old.open_log is None and new.open_log is not None


def test_a_broker_with_many_partitions_keeps_descriptors_bounded(tmp_path):
    """300 partitions written and read through a cache of 32 files never hold more than about 32 descriptors."""
    before = _fds()
    manager = LogManager(str(tmp_path), LogConfig(flush_interval_messages=1), open_files=OpenFiles(32))
    manager.create_topic("many", 300)
    peak = 0
    for p in range(300):
        log = manager.get("many", p)
        log.append(encode_message_set([b"x%d" % p]))
        log.flush()  # synced: its file may be evicted
        piece = log.read(0, 100)
        assert piece.length > 0
        del piece
        peak = max(peak, _fds() - before)
    assert peak <= 32 + 4
    manager.close()
    assert _fds() <= before


def test_a_write_flood_over_more_partitions_than_files_stays_within_the_bound(tmp_path):
    """Appends to 300 partitions with no flush in between use at most about 32 descriptors; a flush then syncs all."""
    before = _fds()
    manager = LogManager(str(tmp_path), LogConfig(flush_interval_messages=10**9, flush_interval_ms=3_600_000),
                         open_files=OpenFiles(32))
    manager.create_topic("flood", 300)
    peak = 0
    for p in range(300):
        manager.get("flood", p).append(encode_message_set([b"x%d" % p]))
        peak = max(peak, _fds() - before)
    assert peak <= 32 + 4
    manager.flush_all()
    assert all(log.flushed_offset == log.end_offset > 0 for log in manager.logs())
    manager.close()
    again = LogManager(str(tmp_path), LogConfig())
    assert [again.get("flood", p).end_offset for p in (0, 299)] == [len(encode_message_set([b"x0"])),
                                                                     len(encode_message_set([b"x299"]))]
    again.close()


def test_a_file_that_cannot_be_opened_fails_that_call_only(tmp_path, monkeypatch):
    """Out of descriptors: the append fails with StorageError, the log stays online, other logs are unaffected."""
    from rill.broker.log import open_files
    from rill.client.errors import StorageError

    manager = LogManager(str(tmp_path), LogConfig(), open_files=OpenFiles(16))
    manager.create_topic("a", 1)
    manager.create_topic("b", 1)
    manager.get("b", 0).append(encode_message_set([b"b"]))
    manager.open_files.close_all()
    real_open = os.open

    def no_descriptors(path, *args, **kwargs):
        if "a-0" in str(path):
            raise OSError(24, "Too many open files", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(open_files.os, "open", no_descriptors)
    with pytest.raises(StorageError, match="Too many open files"):
        manager.get("a", 0).append(encode_message_set([b"a"]))
    assert manager.get("b", 0).append(encode_message_set([b"b2"])).first_offset > 0
    monkeypatch.undo()
    assert manager.get("a", 0).failed is None
    assert manager.get("a", 0).append(encode_message_set([b"a"])).first_offset == 0
    manager.close()
