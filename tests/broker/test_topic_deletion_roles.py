"""A broker told that a replicated topic is deleted, and told of new partitions (ReplicaManager.apply_roles).

The deletion comes as the controller sends it (topic_deletion.py): each partition with no
replicas and leader LEADER_DURING_DELETE. No ZooKeeper here.
"""

from __future__ import annotations

import os
from pathlib import Path

from rill.broker.replication.replica import PartitionRole
from rill.broker.testing import running_broker
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer
from rill.client.zookeeper.replica_layout import LEADER_DURING_DELETE
from tests.broker.test_replica_removal import wait_until
from tests.broker.test_replication_leader import FOLLOWER, ME, make_role, produce
from tests.conftest import RawClient

OTHERS = [rq.BrokerInfo(FOLLOWER, "127.0.0.1", 1, 0)]


def deleted(partition: int, epoch: int) -> PartitionRole:
    return PartitionRole("rep", partition, LEADER_DURING_DELETE, epoch, (), (), 0)


def test_a_deletion_role_stops_the_replica_deletes_its_files_and_the_metadata(tmp_path: Path) -> None:
    """The leader's replica is stopped (produces refused), its directory goes, METADATA forgets the topic, and a
    partition this broker never held (partition 1) is forgotten as metadata only."""
    data = tmp_path / "data"
    with running_broker(data, auto_create_topics_enable=False) as b:  # a produce would make a 0.7-style "rep"
        other = PartitionRole("rep", 1, FOLLOWER, 1, (FOLLOWER,), (FOLLOWER,), 0)
        assert b.broker.replicas.apply_roles(0, 1, [make_role(epoch=3), other], OTHERS) == {("rep", 0): 0}
        raw = RawClient(b.host, b.port)
        assert produce(raw, [b"old"]).error == 0
        assert b.broker.replicas.placement("rep") == (ME, FOLLOWER)
        assert b.broker.replicas.apply_roles(0, 1, [deleted(0, 4), deleted(1, 2)], OTHERS) == {}
        assert b.broker.replicas.placement("rep") is None and "rep" not in b.broker.replicas.replicated_topics()
        assert wait_until(lambda: not [n for n in os.listdir(data) if n.startswith("rep-")])
        assert produce(raw, [b"refused"]).error == ErrorCode.UNKNOWN_TOPIC
        with SimpleConsumer(b.host, b.port, timeout=5) as consumer:
            assert consumer.metadata(["rep"]).topics[0].error == ErrorCode.UNKNOWN_TOPIC


def test_new_partitions_tell_the_listeners(tmp_path: Path) -> None:
    """on_partitions_added runs when a LeaderAndIsr names a partition not known before (a new topic, or a topic
    grown), and not when it repeats known ones (a leader change)."""
    with running_broker(tmp_path / "data") as b:
        calls: list[int] = []
        b.broker.replicas.on_partitions_added.append(lambda: calls.append(1))
        b.broker.replicas.apply_roles(0, 1, [make_role(epoch=1)], OTHERS)
        b.broker.replicas.apply_roles(0, 1, [make_role(epoch=2)], OTHERS)
        grown = PartitionRole("rep", 1, FOLLOWER, 0, (FOLLOWER,), (FOLLOWER,), 0)
        b.broker.replicas.apply_roles(0, 1, [grown], OTHERS)
        assert len(calls) == 2
        assert b.broker.replicas.placement("rep") == (ME, FOLLOWER)
