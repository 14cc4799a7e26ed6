"""Replicas of replicated topics in the log manager: create, find, reload, limits, conflicts, delete."""

from __future__ import annotations

import os

import pytest
import structlog

from rill.broker.log import LogConfig, LogManager, checkpoint
from rill.broker.log.leader_epochs import EPOCH_FILE, EpochEntry
from rill.broker.log.loading import NEW_REPLICA_DIR
from rill.client.errors import (InvalidRequest, InvalidTopic, PartitionLimitReached, StorageError, UnknownTopic,
                                WrongPartition)
from rill.client.protocol.messages import encode_message_set


def _tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, names in os.walk(root) for n in dirs + names}


def _crash(manager: LogManager) -> None:
    """Simulate kill -9 of the broker holding ``manager``: nothing is flushed or written."""
    for log in manager.logs():
        log.abandon()
    os.close(manager._lock_fd)


@pytest.fixture
def data(tmp_path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def manager(data):
    manager = LogManager(data, LogConfig())
    yield manager
    manager.close()


def test_create_replica_makes_a_marked_directory(data, manager):
    """create_replica makes <topic>-<p> with an empty leader-epoch-checkpoint and a first segment."""
    log = manager.create_replica("r", 5)
    directory = os.path.join(data, "r-5")
    assert log.directory == directory and log.end_offset == 0
    assert open(os.path.join(directory, EPOCH_FILE), "rb").read() == b"0\n0\n"
    assert "00000000000000000000.log" in os.listdir(directory)
    assert not os.path.exists(os.path.join(data, NEW_REPLICA_DIR))


def test_replicas_are_found_by_get_but_not_in_topics(manager):
    """A replica is in replicas() and get(), never in topics() (no 0.7 registration)."""
    log = manager.create_replica("r", 2)
    assert manager.get("r", 2) is log
    assert dict(manager.replicas()) == {("r", 2): log}
    assert dict(manager.topics()) == {}


def test_create_replica_is_idempotent(manager):
    """Creating a replica held already returns the same log and counts it once."""
    log = manager.create_replica("r", 0)
    assert manager.create_replica("r", 0) is log
    assert manager.partition_count == 1


def test_only_the_replicas_held_are_there(data, manager):
    """A broker holding partitions 0, 2 and 5 of a topic has those only: get() of another is UnknownTopic."""
    for partition in (0, 2, 5):
        manager.create_replica("r", partition)
    with pytest.raises(UnknownTopic, match="no replica of partition 1"):
        manager.get("r", 1)
    assert sorted(n for n in os.listdir(data) if n.startswith("r-")) == ["r-0", "r-2", "r-5"]


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_keeps_replicas_as_replicas(data, clean):
    """After a clean stop or a crash, replicas load as replicas, with their data, only the partitions held."""
    manager = LogManager(data, LogConfig())
    end = manager.create_replica("r", 2).append(encode_message_set([b"kept"])).next_offset
    manager.create_replica("r", 5)
    manager.create_topic("local", 2)
    manager.close() if clean else _crash(manager)
    manager = LogManager(data, LogConfig())
    assert manager.clean_start is clean
    assert sorted(manager.replicas()) == [("r", 2), ("r", 5)]
    assert dict(manager.topics()) == {"local": 2}
    assert manager.get("r", 2).end_offset == end
    assert sorted(n for n in os.listdir(data) if n.startswith("r-")) == ["r-2", "r-5"]  # no missing partitions made
    manager.close()


def test_leader_epochs_persist_across_reopen(data):
    """A replica's leader-epoch cache is loaded with it: entries assigned before a stop are there after it."""
    manager = LogManager(data, LogConfig())
    log = manager.create_replica("r", 0)
    manager.leader_epochs("r", 0).assign(0, 0)
    second = log.append(encode_message_set([b"a" * 50])).next_offset
    manager.leader_epochs("r", 0).assign(3, second)
    log.append(encode_message_set([b"b" * 50]))
    manager.close()
    manager = LogManager(data, LogConfig())
    assert manager.leader_epochs("r", 0).entries() == (EpochEntry(0, 0), EpochEntry(3, second))
    assert manager.get("r", 0).leader_epochs is manager.leader_epochs("r", 0)
    manager.close()


def test_leader_epochs_are_cut_to_the_recovered_log_at_load(data):
    """At load, epochs starting at or past the log end (a torn tail recovery cut) are dropped, as Kafka does."""
    manager = LogManager(data, LogConfig())
    log = manager.create_replica("r", 0)
    manager.leader_epochs("r", 0).assign(0, 0)
    kept = log.append(encode_message_set([b"a" * 50])).next_offset
    manager.flush_all()
    manager.leader_epochs("r", 0).assign(1, kept)
    log.append(encode_message_set([b"b" * 50]))
    _crash(manager)
    os.truncate(log.segments[0].path, kept + 10)  # the second message was torn
    manager = LogManager(data, LogConfig())
    assert manager.get("r", 0).end_offset == kept
    assert manager.leader_epochs("r", 0).entries() == (EpochEntry(0, 0),)
    manager.close()


def test_leader_epochs_of_a_partition_not_held_is_unknown(manager):
    """leader_epochs() of a partition held as no replica (or of a 0.7-style topic) raises UnknownTopic."""
    manager.create_topic("local", 1)
    for topic, partition in (("r", 0), ("local", 0)):
        with pytest.raises(UnknownTopic):
            manager.leader_epochs(topic, partition)


@pytest.mark.parametrize("partition", [-1, 10_000, True, "0"])
def test_partition_outside_the_limit_is_refused_before_the_disk(tmp_path, manager, partition):
    """A partition outside 0 .. num.partitions.max - 1 raises WrongPartition and touches no path."""
    before = _tree(tmp_path)
    with pytest.raises(WrongPartition):
        manager.create_replica("r", partition)
    assert _tree(tmp_path) == before


def test_invalid_topic_name_is_refused_before_the_disk(tmp_path, manager):
    """An illegal topic name raises InvalidTopic and touches no path."""
    before = _tree(tmp_path)
    for name in ("../x", "", "a/b"):
        with pytest.raises(InvalidTopic):
            manager.create_replica(name, 0)
    assert _tree(tmp_path) == before


def test_replicas_count_against_max_partitions(tmp_path, data):
    """Replicas and 0.7-style partitions share max.broker.partitions; the one too many touches no path."""
    manager = LogManager(data, LogConfig(), max_partitions=3)
    manager.create_topic("local", 2)
    manager.create_replica("r", 7)
    before = _tree(tmp_path)
    with pytest.raises(PartitionLimitReached):
        manager.create_replica("r", 8)
    with pytest.raises(PartitionLimitReached):
        manager.create_topic("other", 1)
    assert _tree(tmp_path) == before and manager.partition_count == 3
    manager.close()


def test_replica_of_a_local_topic_name_is_refused(tmp_path, manager):
    """A topic that is a 0.7-style topic here cannot also have replicas (InvalidRequest, nothing made)."""
    manager.create_topic("t", 2)
    before = _tree(tmp_path)
    with pytest.raises(InvalidRequest, match="0.7-style"):
        manager.create_replica("t", 3)
    assert _tree(tmp_path) == before and dict(manager.replicas()) == {}


def test_local_topic_of_a_replicated_topic_name_is_refused(manager):
    """A topic with replicas here cannot be created the 0.7 way, also not by auto-creation."""
    manager.create_replica("r", 1)
    with pytest.raises(InvalidRequest, match="replicated topic"):
        manager.create_topic("r", 2)
    with pytest.raises(InvalidRequest, match="replicated topic"):
        manager.get_or_create("r")
    assert dict(manager.topics()) == {}


def test_delete_replica_renames_it_aside(data, manager):
    """delete_replica unpublishes the replica and renames its directory to <dir>.<ms>.deleted; again it is a no-op."""
    log = manager.create_replica("r", 0)
    log.append(encode_message_set([b"x"]))
    assert manager.delete_replica("r", 0) is True
    [aside] = [n for n in os.listdir(data) if n.startswith("r-0")]
    assert aside.startswith("r-0.") and aside.endswith(".deleted")
    assert os.path.exists(os.path.join(data, aside, EPOCH_FILE))
    assert dict(manager.replicas()) == {} and manager.partition_count == 0
    with pytest.raises(UnknownTopic):
        manager.get("r", 0)
    assert manager.delete_replica("r", 0) is False


def test_deleted_replica_is_not_loaded_again(data):
    """A replica set aside is skipped at start-up without an 'unexpected entry' warning, and can be made anew."""
    manager = LogManager(data, LogConfig())
    manager.create_replica("r", 0)
    manager.delete_replica("r", 0)
    manager.close()
    with structlog.testing.capture_logs() as events:
        manager = LogManager(data, LogConfig())
    assert dict(manager.replicas()) == {} and dict(manager.topics()) == {}
    assert not [e for e in events if e["event"] == "logs.unexpected_entry"]
    assert manager.create_replica("r", 0).end_offset == 0
    manager.close()


def test_delete_replica_refuses_a_local_topic(manager):
    """delete_replica of a 0.7-style topic's partition raises InvalidRequest and keeps it."""
    manager.create_topic("t", 1)
    with pytest.raises(InvalidRequest):
        manager.delete_replica("t", 0)
    assert manager.get("t", 0).partition == 0


def test_topic_with_both_kinds_of_directory_refuses_to_start(data):
    """A topic with a replica directory and a plain one is a start-up error naming both kinds."""
    manager = LogManager(data, LogConfig())
    manager.create_replica("r", 0)
    manager.close()
    os.makedirs(os.path.join(data, "r-1"))
    with pytest.raises(StorageError, match=r"partitions \[0\].*partitions \[1\]"):
        LogManager(data, LogConfig())


def test_interrupted_replica_creation_is_removed_at_start(data):
    """A .replica-new directory left by a crash is removed at start-up and loads as nothing."""
    os.makedirs(os.path.join(data, NEW_REPLICA_DIR))
    open(os.path.join(data, NEW_REPLICA_DIR, EPOCH_FILE), "wb").write(b"0\n0\n")
    manager = LogManager(data, LogConfig())
    assert not os.path.exists(os.path.join(data, NEW_REPLICA_DIR))
    assert dict(manager.replicas()) == {} and dict(manager.topics()) == {}
    manager.close()


def test_corrupt_epoch_file_refuses_to_start(data):
    """A corrupt leader-epoch-checkpoint stops the start with StorageError naming the file and line."""
    manager = LogManager(data, LogConfig())
    manager.create_replica("r", 0)
    manager.close()
    open(os.path.join(data, "r-0", EPOCH_FILE), "wb").write(b"0\n1\n7\n")
    with pytest.raises(StorageError, match=f"r-0/{EPOCH_FILE}: line 3"):
        LogManager(data, LogConfig())


def test_corrupt_epoch_file_is_kept_aside_with_truncate_corrupt(data):
    """With truncate_corrupt a corrupt epoch file is kept aside and the replica starts with no epochs."""
    manager = LogManager(data, LogConfig())
    manager.create_replica("r", 0)
    manager.close()
    open(os.path.join(data, "r-0", EPOCH_FILE), "wb").write(b"0\n1\n7\n")
    manager = LogManager(data, LogConfig(), truncate_corrupt=True)
    assert manager.leader_epochs("r", 0).entries() == ()
    [side] = [n for n in os.listdir(os.path.join(data, "r-0")) if n.startswith(f"{EPOCH_FILE}.corrupt-")]
    assert open(os.path.join(data, "r-0", side), "rb").read() == b"0\n1\n7\n"
    manager.close()


def test_replicas_are_flushed_and_checkpointed(data):
    """flush_all and close cover replicas: their flushed offsets reach the recovery-point checkpoint."""
    manager = LogManager(data, LogConfig())
    end = manager.create_replica("r", 3).append(encode_message_set([b"x" * 10])).next_offset
    manager.flush_all()
    assert manager.get("r", 3).flushed_offset == end
    manager.close()
    assert checkpoint.read_checkpoint(data) == {("r", 3): end}


def test_truncation_rewrites_the_recovery_point_checkpoint(data, manager):
    """A cut rewrites the checkpoint at once: no recovery point stays above the cut (bytes after it are new)."""
    log = manager.create_replica("r", 0)
    cut = log.append(encode_message_set([b"a" * 20])).next_offset
    log.append(encode_message_set([b"b" * 20]))
    manager.flush_all()
    manager.write_checkpoint()
    assert checkpoint.read_checkpoint(data) == {("r", 0): log.end_offset}
    log.truncate_to(cut)
    assert checkpoint.read_checkpoint(data) == {("r", 0): cut}
    log.truncate_fully_and_start_at(900)
    assert checkpoint.read_checkpoint(data) == {("r", 0): 900}
