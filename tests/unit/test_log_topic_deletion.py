"""LogManager.delete_topic: a Kafka 0.7-style topic leaves the data directory (local_topic_deletion.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rill.broker.log.log_config import LogConfig
from rill.broker.log.manager import LogManager
from rill.client.errors import InvalidRequest, StorageError, UnknownTopic
from rill.client.protocol.messages import encode_message_set


def test_a_deleted_topic_is_unpublished_its_directories_removed_and_its_name_free(tmp_path: Path) -> None:
    """The partitions leave ``topics()`` and ``get``, appends to a log still held fail, the directories are set
    aside then removed, the listeners hear of it, and a topic created again under the name is empty."""
    data = str(tmp_path / "d")
    manager = LogManager(data, LogConfig())
    heard: list[str] = []
    manager.on_topic_deleted.append(heard.append)
    try:
        manager.create_topic("events", 2)
        held = manager.get("events", 1)
        held.append(encode_message_set([b"old"]))
        assert manager.delete_topic("events") == 2
        with pytest.raises(StorageError):
            held.append(encode_message_set([b"late"]))
        assert "events" not in manager.topics() and heard == ["events"]
        with pytest.raises(UnknownTopic):
            manager.get("events", 0)
        deadline = time.monotonic() + 10
        while [n for n in os.listdir(data) if n.startswith("events-")] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [n for n in os.listdir(data) if n.startswith("events-")]
        with pytest.raises(UnknownTopic):
            manager.delete_topic("events")
        manager.create_topic("events", 1)
        assert manager.get("events", 0).end_offset == 0
    finally:
        manager.close()


def test_replicas_are_not_deleted_as_a_topic(tmp_path: Path) -> None:
    """A name held as replicas of a replicated topic is the controller's to delete (InvalidRequest)."""
    manager = LogManager(str(tmp_path / "d"), LogConfig())
    try:
        manager.create_replica("rep", 0)
        with pytest.raises(InvalidRequest):
            manager.delete_topic("rep")
        assert ("rep", 0) in manager.replicas()
    finally:
        manager.close()
    with pytest.raises(StorageError):
        manager.delete_topic("rep")
