"""The controller's topic deletion and partition growth against a real ZooKeeper, with brokers that record each
LeaderAndIsr (tests/zookeeper/controller_support.py): what each broker is sent, and how a deletion and a
reassignment of one topic meet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.controller import create_topic
from rill.broker.cluster.delete_topic import delete_topic
from rill.broker.cluster.partition_growth import Growth
from rill.broker.cluster.partition_states import read_states, read_topic
from rill.broker.cluster.reassignment import Outcome
from rill.broker.cluster.topic_deletion import mark_for_deletion
from rill.broker.log.manager import LogManager
from rill.client.zookeeper.replica_layout import (LEADER_DURING_DELETE, PartitionState, delete_marker_path,
                                                  state_path, topic_path)
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb
from tests.zookeeper.controller_support import ControllerNode, FakeBroker, wait_for


@pytest.fixture
def brokers(zk_connect: str) -> Iterator[dict[int, FakeBroker]]:
    made = {b: FakeBroker(zk_connect, b) for b in (1, 2, 3, 4)}
    for broker in made.values():
        broker.register()
    yield made
    for broker in made.values():
        broker.close()


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager(str(tmp_path / "logs"))
    yield manager
    manager.close()


def deletion_roles(broker: FakeBroker, topic: str) -> list[tuple[int, int]]:
    """(partition, leader epoch) of every deletion role ``broker`` was sent for ``topic``."""
    return [(r.partition, r.leader_epoch) for call in broker.applier.snapshot() for r in call.roles
            if r.topic == topic and r.leader == LEADER_DURING_DELETE and r.replicas == ()]


def join_isr(zk: KazooClient, topic: str, broker: int) -> None:
    """What the leader writes once ``broker`` has caught up: the ISR with it, in the same epoch."""
    current, version = read_states(zk, topic, [0])[0]
    zk.set(state_path(topic, 0), PartitionState(current.leader, current.leader_epoch, (*current.isr, broker),
                                                current.controller_epoch).encode(), version=version)


def test_every_broker_is_sent_the_deletion_then_the_nodes_go(zk_connect: str, zk: KazooClient,
                                                             brokers: dict[int, FakeBroker]) -> None:
    """A marked topic's partitions go to every live broker with no replicas, leader -2 and the next leader epoch;
    once all answered, the topic node, its partitions and the marker are gone. A marker naming no replicated
    topic (or no topic name at all) is removed."""
    create_topic(zk, "t", 2, 3, None, [1, 2, 3])
    node = ControllerNode(zk_connect, 1).start()
    try:
        wait_for(lambda: node.controller.is_active, what="controller")
        epochs = {p: s.leader_epoch for p, (s, _) in read_states(zk, "t", range(2)).items()}
        assert mark_for_deletion(zk, "t") and not mark_for_deletion(zk, "t")
        wait_for(lambda: zk.exists(topic_path("t")) is None, what="the topic's nodes deleted")
        assert zk.exists(delete_marker_path("t")) is None
        for broker in brokers.values():  # broker 4 holds no replica: it forgets the metadata
            assert sorted(set(deletion_roles(broker, "t"))) == [(p, epochs[p] + 1) for p in range(2)]
        mark_for_deletion(zk, "ghost")
        zk.create("/rill/admin/delete_topics/not a topic")
        wait_for(lambda: zk.get_children("/rill/admin/delete_topics") == [], what="the markers of no topic dropped")
        assert node.controller.is_active
    finally:
        node.close()


def test_a_deletion_and_a_reassignment_of_one_topic(zk_connect: str, zk: KazooClient, brokers: dict[int, FakeBroker],
                                                    logs: LogManager) -> None:
    """While a partition moves, DeleteTopic and CreatePartitions are refused (REASSIGNMENT_IN_PROGRESS); a marker
    written anyway waits for the move, refuses new moves of the topic, and the deletion proceeds once the move
    completes."""
    create_topic(zk, "t", 1, 3, None, [1, 2, 3])
    node = ControllerNode(zk_connect, 1).start()
    try:
        wait_for(lambda: node.controller.is_active, what="controller")
        wait_for(lambda: read_states(zk, "t", [0])[0][0].leader > 0, what="a leader")
        assert [r.outcome for r in node.controller.alter_reassignments([("t", 0, (2, 3, 4))])] == [Outcome.STARTED]
        refused = delete_topic(apb.DeleteTopicRequest(topic="t"), logs, zk)
        assert refused.error_code == pb.REASSIGNMENT_IN_PROGRESS, refused.error_message
        assert node.controller.create_partitions("t", 2).outcome is Growth.REASSIGNING
        mark_for_deletion(zk, "t")  # a delete that raced the reassignment's start
        moved = node.controller.alter_reassignments([("t", 0, (1, 2, 4))])
        assert [(r.outcome, r.detail) for r in moved] == [(Outcome.INVALID, "topic t is marked for deletion")]
        time.sleep(1.5)  # the controller's retries (every second) find it still moving
        assert not any(deletion_roles(b, "t") for b in brokers.values())
        replicas = read_topic(zk, "t")
        assert replicas is not None and replicas.adding  # still moving, still there
        join_isr(zk, "t", 4)
        wait_for(lambda: zk.exists(topic_path("t")) is None, what="the move, then the deletion, to complete")
        assert all(deletion_roles(b, "t") for b in brokers.values())
    finally:
        node.close()


def test_create_partitions_places_writes_and_sends_the_new_ones(zk_connect: str, zk: KazooClient,
                                                                brokers: dict[int, FakeBroker]) -> None:
    """Growing 2 -> 5 partitions over brokers 1-4 follows Kafka's addPartitions placement from partition 0's
    leader, writes leader = first replica with the whole ISR, and sends the new roles to every broker; the
    config is kept, and asking for fewer is refused."""
    create_topic(zk, "t", 2, 2, {"min.insync.replicas": "2"}, [1, 2, 3, 4])
    node = ControllerNode(zk_connect, 1).start()
    try:
        wait_for(lambda: node.controller.is_active, what="controller")
        before = read_topic(zk, "t")
        assert before is not None
        result = node.controller.create_partitions("t", 5)
        assert (result.outcome, result.first, len(result.added)) == (Growth.ADDED, 2, 3)
        after = read_topic(zk, "t")
        assert after is not None and after.replicas[:2] == before.replicas and after.replicas[2:] == result.added
        assert dict(after.config) == {"min.insync.replicas": "2"}
        start = [1, 2, 3, 4].index(before.replicas[0][0])  # the new leaders go round from partition 0's
        assert [r[0] for r in result.added] == [[1, 2, 3, 4][(p + start) % 4] for p in (2, 3, 4)]
        states = read_states(zk, "t", range(5))
        assert all(states[p][0] == PartitionState(r[0], 0, r, states[p][0].controller_epoch)
                   for p, r in enumerate(after.replicas) if p >= 2)
        for broker in brokers.values():
            wait_for(lambda b=broker: {(r.partition, r.replicas) for c in b.applier.snapshot() for r in c.roles
                                       if r.topic == "t"} >= {(p, after.replicas[p]) for p in (2, 3, 4)},
                     what=f"broker {broker.broker_id} told of the new partitions")
        assert node.controller.create_partitions("t", 3).outcome is Growth.INVALID_PARTITIONS
        assert node.controller.create_partitions("nope", 3).outcome is Growth.UNKNOWN_TOPIC
    finally:
        node.close()
