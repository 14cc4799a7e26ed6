"""The record sink with several shards: each group's records go to its own store, compaction per shard."""

from __future__ import annotations

from pathlib import Path

import pytest

from rill.broker.log import Log
from rill.client.clock import FakeClock, FakeTimer
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.group_shards import NotCoordinator, Shard
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import GroupCreated, GroupDeleted, OffsetsCommitted
from rill.coordinator.service import RecordSink
from rill.coordinator.topic_catalog import StaticCatalog
from rill.v1 import coordinator_pb2 as pb
from tests.unit.coordinator_store.conftest import STORE_CONFIG


class TwoShards:
    """Groups beginning with "a" in one store, "b" in another; anything else is coordinated elsewhere."""

    def __init__(self, tmp_path: Path) -> None:
        self.logs = {k: Log.open(str(tmp_path / k), "groups", 0, STORE_CONFIG, clean=True) for k in "ab"}
        self.shards = {k: Shard(OffsetStore(log, compact_every_records=4), lambda n, k=k: n.startswith(k))
                       for k, log in self.logs.items()}

    def shard_for(self, group: str) -> Shard:
        shard = self.shards.get(group[:1])
        if shard is None:
            raise NotCoordinator(group)
        return shard

    def replayed(self, key: str) -> list[object]:
        return list(OffsetStore(self.logs[key]).replay())


def created(name: str) -> GroupCreated:
    return GroupCreated(name, 10_000, 0, ("t",), "range", False)


@pytest.fixture
def coordinator() -> GroupCoordinator:
    clock = FakeClock()
    return GroupCoordinator(StaticCatalog({"t": 1}), clock, FakeTimer(clock), pb.Broker(broker_id=1))


def test_records_reach_their_groups_store_only(tmp_path: Path, coordinator: GroupCoordinator) -> None:
    shards = TwoShards(tmp_path)
    sink = RecordSink(coordinator, shards)
    sink([created("a1"), created("b1")])
    sink([OffsetsCommitted("a1", (("t", 0, 5),))])
    assert shards.replayed("a") == [created("a1"), OffsetsCommitted("a1", (("t", 0, 5),))]
    assert shards.replayed("b") == [created("b1")]
    assert coordinator.group_names() == ["a1", "b1"]


def test_a_group_coordinated_elsewhere_writes_nothing_and_raises(tmp_path: Path, coordinator: GroupCoordinator) -> None:
    shards = TwoShards(tmp_path)
    sink = RecordSink(coordinator, shards)
    with pytest.raises(NotCoordinator):
        sink([created("a1"), created("z1")])  # routed before anything is written
    assert shards.replayed("a") == []
    assert coordinator.group_names() == []


def test_a_batch_across_shards_applies_what_was_written_before_a_failure(tmp_path: Path,
                                                                          coordinator: GroupCoordinator) -> None:
    shards = TwoShards(tmp_path)
    sink = RecordSink(coordinator, shards)
    sink([created("a1"), created("b1")])
    shards.shards["b"].store.close()  # b's store fails: a's deletion is durable, so it is applied
    with pytest.raises(Exception):
        sink([GroupDeleted("a1"), GroupDeleted("b1")])
    assert coordinator.group_names() == ["b1"]
    assert shards.replayed("a")[-1] == GroupDeleted("a1")


def test_compaction_snapshots_only_the_shards_own_groups(tmp_path: Path, coordinator: GroupCoordinator) -> None:
    shards = TwoShards(tmp_path)
    sink = RecordSink(coordinator, shards)
    sink([created("a1"), created("b1")])
    for offset in range(1, 8):
        sink([OffsetsCommitted("a1", (("t", 0, offset),))])
    replayed = shards.replayed("a")
    assert len(replayed) > 8  # the 8 records appended and a snapshot (one segment: nothing deleted)
    assert all(getattr(r, "group", None) == "a1" for r in replayed)  # no snapshot of b1 in a's store
    assert shards.replayed("b") == [created("b1")]
