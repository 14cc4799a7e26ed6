"""Preferred leader election by the controller, on a real ZooKeeper, with brokers that record each LeaderAndIsr.

Broker 1 "restarts" (its registration ends, so the controller moves its leaderships and
takes it out of the ISRs, then it registers again); the partitions' leaders then add it
back to their ISRs in ZooKeeper, as a leader does once its follower has caught up, without
telling the controller.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
import structlog
from kazoo.client import KazooClient

from rill.broker.cluster.controller import create_topic
from rill.broker.cluster.partition_states import read_states, read_topic
from rill.broker.cluster.preferred_election import Outcome, RebalancePolicy
from rill.broker.cluster.replica_control_servicer import NotController
from rill.client.zookeeper.replica_layout import PartitionState, state_path
from tests.zookeeper.controller_support import ControllerNode, FakeBroker, wait_for

TOPIC = "orders"


@pytest.fixture
def brokers(zk_connect: str) -> Iterator[dict[int, FakeBroker]]:
    """Brokers 1, 2 and 3, registered."""
    made = {b: FakeBroker(zk_connect, b) for b in (1, 2, 3)}
    for broker in made.values():
        broker.register()
    yield made
    for broker in made.values():
        broker.close()


def states(zk: KazooClient) -> dict[int, PartitionState]:
    replicas = read_topic(zk, TOPIC)
    assert replicas is not None
    return {p: s for p, (s, _) in read_states(zk, TOPIC, range(replicas.partitions)).items()}


def bounce_broker_1(zk: KazooClient, node: ControllerNode, brokers: dict[int, FakeBroker]) -> None:
    """Broker 1 leaves (its leaderships move, it leaves every ISR), registers again, and its leaders add it back
    to their ISRs (unfenced versioned writes, as a leader's ISR expansion)."""
    wait_for(lambda: node.controller.is_active, what="controller")
    brokers[1].unregister()
    wait_for(lambda: all(s.leader != 1 and 1 not in s.isr for s in states(zk).values()), what="broker 1 moved off")
    brokers[1].applier.clear()
    brokers[1].register()
    wait_for(lambda: any(c.full for c in brokers[1].applier.snapshot()), what="full LeaderAndIsr to the returner")
    replicas = read_topic(zk, TOPIC)
    assert replicas is not None
    for p, (state, version) in read_states(zk, TOPIC, range(replicas.partitions)).items():
        grown = PartitionState(state.leader, state.leader_epoch, (*state.isr, 1), state.controller_epoch)
        zk.set(state_path(TOPIC, p), grown.encode(), version=version)


def test_elect_leaders_returns_preferred_partitions(zk_connect: str, zk: KazooClient,
                                                    brokers: dict[int, FakeBroker]) -> None:
    """After broker 1 returns, an on-demand election gives it back the partitions it is preferred for, each in a new
    leader epoch, tells every broker in one LeaderAndIsr, and reports the others as already preferred."""
    replicas = create_topic(zk, TOPIC, 6, 3, None, [1, 2, 3], rng=random.Random(3))
    preferred_by_1 = {p for p, assigned in enumerate(replicas.replicas) if assigned[0] == 1}
    assert len(preferred_by_1) == 2
    node = ControllerNode(zk_connect, 2).start()
    try:
        bounce_broker_1(zk, node, brokers)
        before = states(zk)
        for broker in brokers.values():
            broker.applier.clear()
        with structlog.testing.capture_logs() as logs:
            results = node.controller.elect_preferred_leaders(None, timeout_s=10)
        assert [(r.partition, r.outcome) for r in results] == [
            (p, Outcome.ELECTED if p in preferred_by_1 else Outcome.ALREADY_PREFERRED) for p in range(6)]
        after = states(zk)
        for p in range(6):
            assert after[p].leader == replicas.replicas[p][0] and set(after[p].isr) == {1, 2, 3}
            assert after[p].leader_epoch == before[p].leader_epoch + (p in preferred_by_1)
        for broker in brokers.values():
            wait_for(lambda: len(broker.applier.snapshot()) == 1, what=f"LeaderAndIsr to {broker.broker_id}")
            (call,) = broker.applier.snapshot()
            assert not call.full and {(r.partition, r.leader) for r in call.roles} == {(p, 1) for p in preferred_by_1}
        (event,) = [e for e in logs if e["event"] == "controller.elections"]
        assert (event["reason"], event["changed"], event["brokers"]) == ("preferred_election", 2, [1])
        again = node.controller.elect_preferred_leaders([(TOPIC, None)], timeout_s=10)
        assert {r.outcome for r in again} == {Outcome.ALREADY_PREFERRED}
    finally:
        node.close()


def test_elect_leaders_explains_what_it_cannot_do(zk_connect: str, zk: KazooClient,
                                                  brokers: dict[int, FakeBroker]) -> None:
    """A preferred replica that is not live or not in the ISR is not elected; unknown topics and partitions are named; a broker that is
    not the controller refuses, naming the controller."""
    replicas = create_topic(zk, TOPIC, 3, 3, None, [1, 2, 3], rng=random.Random(3))
    p1 = next(p for p, assigned in enumerate(replicas.replicas) if assigned[0] == 1)
    node = ControllerNode(zk_connect, 2).start()
    other = ControllerNode(zk_connect, 3).start()
    try:
        wait_for(lambda: node.controller.is_active, what="controller")
        brokers[1].unregister()
        wait_for(lambda: all(s.leader != 1 for s in states(zk).values()), what="broker 1 moved off")
        (gone,) = node.controller.elect_preferred_leaders([(TOPIC, p1)], timeout_s=10)
        assert (gone.outcome, gone.detail) == (Outcome.NOT_AVAILABLE, "preferred replica 1 is not live")
        brokers[1].applier.clear()
        brokers[1].register()
        wait_for(lambda: any(c.full for c in brokers[1].applier.snapshot()), what="full LeaderAndIsr to the returner")
        results = node.controller.elect_preferred_leaders([(TOPIC, p1), (TOPIC, 7), ("nope", None)], timeout_s=10)
        assert [(r.topic, r.partition, r.outcome) for r in results] == [
            ("nope", -1, Outcome.UNKNOWN_PARTITION), (TOPIC, p1, Outcome.NOT_AVAILABLE),
            (TOPIC, 7, Outcome.UNKNOWN_PARTITION)]
        assert "not in the ISR" in results[1].detail and results[1].leader == states(zk)[p1].leader
        with pytest.raises(NotController) as refused:
            other.controller.elect_preferred_leaders(None, timeout_s=10)
        assert refused.value.controller_id == 2
    finally:
        other.close()
        node.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_automatic_rebalance(zk_connect: str, zk: KazooClient, brokers: dict[int, FakeBroker], enabled: bool) -> None:
    """With auto.leader.rebalance.enable the check gives broker 1 its preferred partitions back by itself (it leads
    none of its 2: 100% > 10%); disabled, leadership stays where it moved."""
    replicas = create_topic(zk, TOPIC, 6, 3, None, [1, 2, 3], rng=random.Random(3))
    node = ControllerNode(zk_connect, 2, rebalance=RebalancePolicy(enabled, interval_s=0.2, percentage=10)).start()
    try:
        with structlog.testing.capture_logs() as logs:
            bounce_broker_1(zk, node, brokers)
            if enabled:
                wait_for(lambda: all(s.leader == replicas.replicas[p][0] for p, s in states(zk).items()),
                         what="preferred leaders back")
                # logged once the LeaderAndIsr went out, after the states were written
                wait_for(lambda: any(e["event"] == "controller.elections" and e["reason"] == "auto_rebalance"
                                     for e in logs), what="the auto_rebalance elections logged")
            else:
                time.sleep(1.0)
                assert not any(s.leader == 1 for s in states(zk).values())
        imbalance = [e for e in logs if e["event"] == "controller.leader_imbalance" and e["electing"]]
        rebalanced = [e for e in logs if e["event"] == "controller.elections" and e["reason"] == "auto_rebalance"]
        if enabled:
            assert imbalance[0]["broker"] == 1 and imbalance[0]["ratio"] == 1.0 and imbalance[0]["electing"] == 2
            assert rebalanced[0]["changed"] == 2
        else:
            assert not imbalance and not rebalanced
    finally:
        node.close()
