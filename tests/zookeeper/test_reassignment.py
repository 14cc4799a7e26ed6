"""The controller's reassignment against a real ZooKeeper, with brokers that record each LeaderAndIsr.

The brokers are fakes (tests/zookeeper/controller_support.py): the test plays the leader
by writing the ISR into ZooKeeper the way a leader does when a new replica catches up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.controller import create_topic
from rill.broker.cluster.partition_states import read_states, read_topic
from rill.broker.cluster.reassignment import Outcome
from rill.broker.replication.replication_throttle import ReplicationThrottle
from rill.client.zookeeper.replica_layout import THROTTLE_PATH, PartitionState, TopicReplicas, state_path
from tests.zookeeper.controller_support import ControllerNode, FakeBroker, wait_for


@pytest.fixture
def brokers(zk_connect: str) -> Iterator[dict[int, FakeBroker]]:
    """Brokers 1 to 4, registered, each taking the replication throttle its requests carry."""
    made = {b: FakeBroker(zk_connect, b) for b in (1, 2, 3, 4)}
    for broker in made.values():
        broker.servicer.throttle = ReplicationThrottle()
        broker.register()
    yield made
    for broker in made.values():
        broker.close()


def topic(zk: KazooClient) -> TopicReplicas:
    found = read_topic(zk, "t")
    assert found is not None
    return found


def state(zk: KazooClient) -> tuple[PartitionState, int]:
    return read_states(zk, "t", [0])[0]


def join_isr(zk: KazooClient, broker: int) -> None:
    """What the leader writes when ``broker`` catches up: the ISR with it, same epoch, at the state's zkVersion."""
    current, version = state(zk)
    zk.set(state_path("t", 0), PartitionState(current.leader, current.leader_epoch, (*current.isr, broker),
                                              current.controller_epoch).encode(), version=version)


def last_role(broker: FakeBroker):  # type: ignore[no-untyped-def]
    return [r for call in broker.applier.snapshot() for r in call.roles if (r.topic, r.partition) == ("t", 0)][-1]


def test_move_from_123_to_234_adds_waits_for_the_isr_then_drops_the_old_replica(
        zk_connect: str, zk: KazooClient, brokers: dict[int, FakeBroker]) -> None:
    """Step 1 writes the union with adding/removing and bumps the epoch; nothing completes until 4 is in sync; then
    the leader is in {2,3,4}, the ISR loses 1, the node lists the target alone and broker 1's role leaves it out."""
    create_topic(zk, "t", 1, 3, None, [1, 2, 3])
    node = ControllerNode(zk_connect, 2).start()
    try:
        wait_for(lambda: node.controller.is_active, what="controller")
        wait_for(lambda: state(zk)[0].leader > 0, what="a leader")
        before = state(zk)[0]
        results = node.controller.alter_reassignments([("t", 0, (2, 3, 4))])
        assert [(r.partition, r.outcome) for r in results] == [(0, Outcome.STARTED)]
        moving = topic(zk)
        assert (moving.replicas[0][:3], dict(moving.adding), dict(moving.removing)) == ((2, 3, 4), {0: (4,)}, {0: (1,)})
        assert state(zk)[0].leader_epoch == before.leader_epoch + 1
        wait_for(lambda: bool(brokers[4].applier.snapshot()), what="broker 4 told")
        role = last_role(brokers[4])
        assert (role.replicas, role.adding, role.removing) == ((2, 3, 4, 1), (4,), (1,))
        again = node.controller.alter_reassignments([("t", 0, (2, 3, 4)), ("t", 0, (3, 4, 1))])
        assert [r.outcome for r in again] == [Outcome.INVALID]  # asked twice in one request
        ongoing, throttle = node.controller.list_reassignments()
        assert [(o.partition, o.adding, o.removing) for o in ongoing] == [(0, (4,), (1,))] and throttle == 0
        join_isr(zk, 4)
        wait_for(lambda: not topic(zk).adding, what="the move to complete")
        done, _ = state(zk)
        assert topic(zk).replicas == ((2, 3, 4),)
        assert done.leader in (2, 3, 4) and set(done.isr) == {2, 3, 4}
        wait_for(lambda: last_role(brokers[1]).replicas == (2, 3, 4), what="broker 1 told it is no replica")
        assert node.controller.list_reassignments() == ([], 0)
    finally:
        node.close()


def test_a_new_controller_resumes_the_move_and_the_throttle(zk_connect: str, zk: KazooClient,
                                                            brokers: dict[int, FakeBroker]) -> None:
    """The move and the throttle are in ZooKeeper: the next controller bumps the epoch again, sends the throttle in
    its full LeaderAndIsr, and completes the move once the new replica is in sync."""
    create_topic(zk, "t", 1, 3, None, [1, 2, 3])
    first = ControllerNode(zk_connect, 1).start()
    try:
        wait_for(lambda: first.controller.is_active, what="first controller")
        assert first.controller.alter_throttle(500_000) == 0
        assert json.loads(zk.get(THROTTLE_PATH)[0]) == {"version": 1, "bytes_per_second": 500_000}
        wait_for(lambda: all(b.servicer.throttle.rate == 500_000 for b in brokers.values()),  # type: ignore[union-attr]
                 what="every broker throttled")
        first.controller.alter_reassignments([("t", 0, (2, 3, 4))])
        started_epoch = state(zk)[0].leader_epoch
    finally:
        first.close()
    second = ControllerNode(zk_connect, 3).start()
    try:
        wait_for(lambda: second.controller.is_active, what="second controller")
        wait_for(lambda: state(zk)[0].leader_epoch > started_epoch, what="the move resumed (epoch bumped)")
        assert second.controller.list_reassignments()[1] == 500_000
        join_isr(zk, 4)
        wait_for(lambda: topic(zk).replicas == ((2, 3, 4),), what="the move to complete")
        assert second.controller.alter_throttle(0) == 500_000
        wait_for(lambda: all(b.servicer.throttle.rate == 0 for b in brokers.values()),  # type: ignore[union-attr]
                 what="the throttle removed everywhere")
    finally:
        second.close()
