"""The log manager: topics, partitions, start-up, shutdown and the background flusher."""

from __future__ import annotations

import os
import threading

import pytest

from rill.broker.log import LogConfig, LogManager, batch_sync, files
from rill.client.errors import (InvalidPartitions, InvalidRequest, InvalidTopic, StorageError, UnknownTopic,
                                WrongPartition)
from rill.client.protocol.messages import encode_message_set

BAD_NAMES = ["../x", "", ".", "..", "a/b", "a\x00b", "x" * 250, "a b", "../../etc/passwd"]


def _tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, names in os.walk(root) for n in dirs + names}


@pytest.fixture
def manager(tmp_path):
    manager = LogManager(str(tmp_path / "data"), LogConfig(), num_partitions=3)
    yield manager
    manager.close()


def test_create_topic_makes_partition_directories(tmp_path, manager):
    """create_topic makes one <topic>-<partition> directory with a first segment per partition."""
    manager.create_topic("orders", 2)
    data = tmp_path / "data"
    assert {"orders-0", "orders-1"} <= set(os.listdir(data))
    assert "00000000000000000000.log" in os.listdir(data / "orders-1")
    assert manager.topics() == {"orders": 2}


def test_create_topic_is_idempotent_with_same_count(manager):
    """Creating an existing topic with the same count does nothing; another count is refused."""
    manager.create_topic("orders", 2)
    log = manager.get("orders", 0)
    manager.create_topic("orders", 2)
    assert manager.get("orders", 0) is log
    with pytest.raises(InvalidRequest, match="2 partitions"):
        manager.create_topic("orders", 3)


@pytest.mark.parametrize("count", [0, -1, 10_001])
def test_create_topic_refuses_bad_partition_counts(manager, count):
    """A partition count outside 1..num.partitions.max (10000 by default) is refused."""
    with pytest.raises(InvalidPartitions):
        manager.create_topic("t", count)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_topic_names_touch_no_path(tmp_path, manager, name):
    """An invalid topic name is refused before any file or directory is created."""
    before = _tree(tmp_path)
    with pytest.raises(InvalidTopic):
        manager.create_topic(name, 1)
    with pytest.raises(InvalidTopic):
        manager.get_or_create(name)
    with pytest.raises(InvalidTopic):
        manager.get(name, 0)
    assert _tree(tmp_path) == before


def test_get_or_create_auto_creates_with_default_partitions(manager):
    """get_or_create creates an unknown topic with num_partitions and returns the count."""
    assert manager.get_or_create("auto") == 3
    assert manager.get_or_create("auto") == 3
    assert manager.get("auto", 2).partition == 2


def test_get_unknown_topic_and_wrong_partition(manager):
    """get raises UnknownTopic for a missing topic and WrongPartition outside 0..count-1."""
    with pytest.raises(UnknownTopic):
        manager.get("missing", 0)
    manager.create_topic("t", 2)
    for partition in (2, -1):
        with pytest.raises(WrongPartition):
            manager.get("t", partition)


def test_reopen_finds_topics_with_dashes(tmp_path):
    """Topics (including names with '-') and their data are found again at start-up."""
    data = str(tmp_path / "data")
    manager = LogManager(data, LogConfig())
    manager.create_topic("my-topic-1", 2)
    info = manager.get("my-topic-1", 1).append(encode_message_set([b"kept"]))
    manager.close()
    manager = LogManager(data, LogConfig())
    assert manager.topics() == {"my-topic-1": 2}
    assert manager.get("my-topic-1", 1).end_offset == info.next_offset
    manager.close()


def test_startup_ignores_unrelated_entries_and_fills_missing_partitions(tmp_path):
    """Unrelated entries are skipped; a missing partition directory of a topic is recreated."""
    data = tmp_path / "data"
    os.makedirs(data / "t-0")
    os.makedirs(data / "t-2")
    os.makedirs(data / "not a partition")
    (data / "stray.txt").write_text("x")
    manager = LogManager(str(data), LogConfig())
    assert manager.topics() == {"t": 3}
    assert os.path.isdir(data / "t-1")
    manager.close()


def test_close_writes_the_clean_marker(tmp_path):
    """close flushes every log and writes the clean-shutdown marker; start-up removes it."""
    data = str(tmp_path / "data")
    manager = LogManager(data, LogConfig())
    manager.create_topic("t", 1)
    log = manager.get("t", 0)
    log.append(encode_message_set([b"x"]))
    manager.close()
    assert log.flushed_offset == log.end_offset
    assert os.path.exists(os.path.join(data, files.CLEAN_SHUTDOWN_MARKER))
    LogManager(data, LogConfig()).close()


def test_a_log_that_fails_at_close_is_named_in_the_marker_and_recovered(tmp_path, monkeypatch):
    """A log that cannot be flushed at close does not stop the close: the marker names it and its next start recovers it."""
    data = str(tmp_path / "data")
    manager = LogManager(data, LogConfig())
    manager.create_topic("t", 2)
    manager.get("t", 0).append(encode_message_set([b"x"]))
    real_fsync = os.fsync
    broken = {manager.get("t", 0).segments[-1].file.fileno()}

    def fsync(fd):
        if fd in broken:
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    def syncfs(path):  # the write-back error shows in the file system's sync, then in that file's own fsync
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(batch_sync, "sync_filesystem", syncfs)
    assert manager.close() == ["t-0"]
    monkeypatch.undo()
    with open(os.path.join(data, files.CLEAN_SHUTDOWN_MARKER)) as f:
        assert f.read() == "t 0\n"
    again = LogManager(data, LogConfig())
    assert not again.get("t", 0).recovery_report.clean and again.get("t", 1).recovery_report.clean
    assert again.get("t", 0).recovery_report.segments_scanned == 1
    again.close()


def test_data_directory_is_locked(tmp_path, manager):
    """A second manager on the same data directory is refused."""
    with pytest.raises(StorageError, match="in use"):
        LogManager(str(tmp_path / "data"), LogConfig())


def test_flush_due_and_flush_all(tmp_path):
    """flush_due flushes only logs past their interval; flush_all flushes everything."""
    manager = LogManager(str(tmp_path / "data"), LogConfig(flush_interval_messages=5))
    manager.create_topic("t", 2)
    busy, idle = manager.get("t", 0), manager.get("t", 1)
    busy.append(encode_message_set([b"m"] * 5))
    idle.append(encode_message_set([b"m"]))
    assert manager.flush_due(0.0) == 1
    assert busy.flushed_offset == busy.end_offset and idle.flushed_offset == 0
    manager.flush_all()
    assert idle.flushed_offset == idle.end_offset
    manager.close()


def test_background_flusher_flushes_after_m_messages(tmp_path):
    """With the flusher started, an append crossing M messages is fsynced soon and its callback runs."""
    manager = LogManager(str(tmp_path / "data"), LogConfig(flush_interval_messages=10, flush_interval_ms=60_000))
    manager.start()
    manager.create_topic("t", 1)
    log = manager.get("t", 0)
    done = threading.Event()
    info = log.append(encode_message_set([b"m"] * 10))
    log.when_flushed(info.next_offset, done.set)
    assert done.wait(5)
    assert log.flushed_offset >= info.next_offset
    manager.close()
    assert not any(t.name == "rill-log-flusher" for t in threading.enumerate())


def test_background_flusher_flushes_after_s_milliseconds(tmp_path):
    """With the flusher started, a single unflushed message is fsynced once flush_interval_ms passes."""
    manager = LogManager(str(tmp_path / "data"), LogConfig(flush_interval_messages=10**9, flush_interval_ms=50))
    manager.start()
    manager.create_topic("t", 1)
    log = manager.get("t", 0)
    done = threading.Event()
    info = log.append(encode_message_set([b"lonely"]))
    log.when_flushed(info.next_offset, done.set)
    assert done.wait(5)
    manager.close()


def test_on_topic_created_is_called_once_per_new_topic(tmp_path):
    """Listeners hear of a topic when it is created, by either path, and not when it already existed."""
    manager = LogManager(str(tmp_path / "data"), LogConfig(), num_partitions=2)
    created: list[tuple[str, int]] = []
    manager.on_topic_created.append(lambda topic, partitions: created.append((topic, partitions)))
    manager.create_topic("a", 3)
    manager.create_topic("a", 3)
    assert manager.get_or_create("b") == 2
    assert manager.get_or_create("b") == 2
    assert created == [("a", 3), ("b", 2)]
    manager.close()


def test_closed_manager_refuses_new_topics(tmp_path):
    """After close, creating topics raises StorageError."""
    manager = LogManager(str(tmp_path / "data"), LogConfig())
    manager.close()
    manager.close()
    with pytest.raises(StorageError):
        manager.create_topic("late", 1)
