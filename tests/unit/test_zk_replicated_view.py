"""How the ZooKeeper consumer names, orders and places a replicated topic's partitions
(rill.client.zookeeper.replicated_view)."""

from __future__ import annotations

import pytest

from rill.client.zookeeper.assignment import StaticSubscription, group_assignment, partition_order
from rill.client.zookeeper.registry import BrokerRegistration, ClusterSnapshot
from rill.client.zookeeper.replicated_view import fetch_broker, partition_key, topic_partitions
from rill.client.zookeeper.streams import ANY_REPLICA, PartitionKey

B1 = BrokerRegistration(1, "c", "h1", 9092)
B2 = BrokerRegistration(2, "c", "h2", 9092)
SNAPSHOT = ClusterSnapshot(brokers={1: B1, 2: B2}, topics={"old": {1: 2}}, replicated_topics=frozenset({"new"}),
                           replicated_leaders={"new": (2, -1, 3)})


def test_replicated_partitions_are_named_by_id_beside_07_names() -> None:
    """A replicated topic's partitions are "0", "1", ...; a 0.7 topic keeps its broker-partition names."""
    assert topic_partitions(SNAPSHOT) == {"old": ["1-0", "1-1"], "new": ["0", "1", "2"]}
    assert partition_key("new", "2") == PartitionKey("new", ANY_REPLICA, 2)
    assert partition_key("old", "1-1") == PartitionKey("old", 1, 1)
    assert PartitionKey("new", ANY_REPLICA, 2).name == "2" and PartitionKey("old", 1, 1).name == "1-1"
    with pytest.raises(ValueError):
        partition_key("new", "x")


def test_partitions_are_fetched_from_their_leader_or_broker() -> None:
    """A replicated partition goes to its live leader (none when it has none or the leader is not registered)."""
    assert fetch_broker(SNAPSHOT, PartitionKey("new", ANY_REPLICA, 0)) == B2
    assert fetch_broker(SNAPSHOT, PartitionKey("new", ANY_REPLICA, 1)) is None  # no leader
    assert fetch_broker(SNAPSHOT, PartitionKey("new", ANY_REPLICA, 2)) is None  # leader 3 is not registered
    assert fetch_broker(SNAPSHOT, PartitionKey("new", ANY_REPLICA, 7)) is None  # no such partition
    assert fetch_broker(SNAPSHOT, PartitionKey("old", 1, 0)) == B1


def test_ids_are_shared_out_in_numeric_order() -> None:
    """Partition ids sort as numbers (Kafka 0.8), so "10" comes after "9"; 0.7 names still sort as strings."""
    assert sorted(["10", "2", "1"], key=partition_order) == ["1", "2", "10"]
    assert sorted(["1-2", "1-10"], key=partition_order) == ["1-10", "1-2"]
    members = {"g_a": StaticSubscription({"t": 1}), "g_b": StaticSubscription({"t": 1})}
    parts = {"t": [str(p) for p in range(12)]}
    owned = group_assignment("g_a", members, parts).owned
    assert sorted(int(name) for _, name in owned) == list(range(6))
