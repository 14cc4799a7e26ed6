"""Creating topics: on a worker thread, within the partition limits, whole or not at all (rill.broker.log.creator)."""

from __future__ import annotations

import os
import threading

import pytest
import structlog

from rill.broker.log import LogConfig, LogManager, creator
from rill.client.errors import InvalidPartitions, InvalidTopic, PartitionLimitReached, StorageError
from rill.client.protocol.messages import encode_message_set


def _dirs(root) -> set[str]:
    return {name for name in os.listdir(root) if not name.startswith(".")} - {"recovery-point-offset-checkpoint"}


def test_creation_runs_on_the_creator_thread(tmp_path, monkeypatch):
    """create_topic_async returns before any directory exists; the work happens on rill-topic-creator."""
    manager = LogManager(str(tmp_path), LogConfig())
    release, threads = threading.Event(), []
    real_mkdir = os.mkdir

    def slow_mkdir(path, *args, **kwargs):
        threads.append(threading.current_thread().name)
        release.wait(5)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(creator.os, "mkdir", slow_mkdir)
    future = manager.create_topic_async("t", 3)
    assert not future.done() and "t" not in manager.topics()
    assert manager.create_topic_async("t", 3) is future  # the same creation, not a second one
    release.set()
    assert future.result(5) == 3 and manager.topics()["t"] == 3
    assert set(threads) == {"rill-topic-creator_0"}
    manager.close()


def test_partition_limits_are_checked_before_the_disk(tmp_path):
    """num.partitions.max and max.broker.partitions (topics being created included) refuse before any directory is made."""
    manager = LogManager(str(tmp_path), LogConfig(), max_topic_partitions=8, max_partitions=10)
    with pytest.raises(InvalidPartitions, match="num.partitions.max"):
        manager.create_topic_async("big", 9)
    manager.create_topic("a", 8)
    with pytest.raises(PartitionLimitReached, match="max.broker.partitions"):
        manager.create_topic_async("b", 3)
    with pytest.raises(InvalidTopic):
        manager.create_topic_async("../x", 1)
    assert _dirs(tmp_path) == {f"a-{p}" for p in range(8)}
    manager.create_topic("c", 2)  # exactly at the limit is fine
    assert manager.partition_count == 10
    with pytest.raises(PartitionLimitReached):
        manager.get_or_create("auto")  # auto-creation is held to the same limit
    manager.close()


def test_an_interrupted_creation_is_removed_at_start_up(tmp_path):
    """A creation marker left by a crash removes the topic's directories at the next start, with a log line naming it."""
    manager = LogManager(str(tmp_path), LogConfig())
    manager.create_topic("kept", 2)
    manager.close()
    creator.write_marker(str(tmp_path), "half", 10)
    for p in range(4):
        os.mkdir(tmp_path / f"half-{p}")
        open(tmp_path / f"half-{p}" / "00000000000000000000.log", "wb").close()
    with structlog.testing.capture_logs() as events:
        again = LogManager(str(tmp_path), LogConfig())
    [removed] = [e for e in events if e["event"] == "logs.incomplete_topic_removed"]
    assert (removed["topic"], removed["partitions_found"], removed["partitions_expected"]) == ("half", 4, 10)
    assert "half" not in again.topics() and again.topics()["kept"] == 2
    assert _dirs(tmp_path) == {"kept-0", "kept-1"}
    assert not os.path.exists(creator.marker_path(str(tmp_path), "half"))
    again.close()


def test_an_interrupted_creation_never_deletes_data(tmp_path):
    """A directory holding messages under a creation marker is kept and reported, not deleted."""
    manager = LogManager(str(tmp_path), LogConfig())
    manager.create_topic("t", 2)
    manager.get("t", 1).append(encode_message_set([b"precious"]))
    manager.close()
    creator.write_marker(str(tmp_path), "t", 2)
    with structlog.testing.capture_logs() as events:
        again = LogManager(str(tmp_path), LogConfig())
    assert any(e["event"] == "logs.incomplete_topic_has_data" for e in events)
    assert again.get("t", 1).end_offset > 0
    again.close()


def test_a_creation_that_fails_on_disk_leaves_nothing(tmp_path, monkeypatch):
    """A creation failing half-way removes what it made and its marker, gives back its reservation, and can be retried."""
    manager = LogManager(str(tmp_path), LogConfig(), max_partitions=20)
    real_mkdir = os.mkdir

    def full_disk(path, *args, **kwargs):
        if str(path).endswith("-5"):
            raise OSError(28, "No space left on device", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(creator.os, "mkdir", full_disk)
    with structlog.testing.capture_logs() as events:
        with pytest.raises(StorageError, match="No space left on device"):
            manager.create_topic("t", 10)
    assert any(e["event"] == "logs.topic_create_failed" and e["topic"] == "t" for e in events)
    assert _dirs(tmp_path) == set() and not os.path.exists(creator.marker_path(str(tmp_path), "t"))
    assert "t" not in manager.topics() and manager.partition_count == 0
    monkeypatch.undo()
    manager.create_topic("t", 20)
    assert manager.topics()["t"] == 20
    manager.close()


def test_a_one_partition_topic_needs_no_marker(tmp_path, monkeypatch):
    """Auto-created one-partition topics cost one directory and one data-directory fsync, no marker file."""
    manager = LogManager(str(tmp_path), LogConfig())
    markers: list[str] = []
    monkeypatch.setattr(creator, "write_marker", lambda *args: markers.append(args[1]) or "")
    assert manager.get_or_create("solo") == 1
    assert markers == [] and _dirs(tmp_path) == {"solo-0"}
    manager.close()
