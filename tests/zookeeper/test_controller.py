"""The controller against a real ZooKeeper, with brokers that are real gRPC servers recording each LeaderAndIsr."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from kazoo.client import KazooClient

from rill.broker.cluster.controller import create_topic, read_broker_epoch
from rill.broker.cluster.partition_states import TopicExists, create_replicated_topic, read_states, read_topic
from rill.broker.cluster.replica_assignment import InvalidReplicationFactor
from rill.broker.cluster.replicated_topics import MAX_REPLICATED_PARTITIONS
from rill.client.errors import InvalidPartitions
from rill.client.zookeeper.replica_layout import CONTROLLER_EPOCH_PATH, PartitionState, TopicReplicas, state_path
from rill.v1 import replication_pb2 as rpb
from tests.zookeeper.controller_support import ControllerNode, FakeBroker, shutdown_server, wait_for
from tests.zookeeper.test_broker_registration import expire_session


@pytest.fixture
def brokers(zk_connect: str) -> Iterator[dict[int, FakeBroker]]:
    """Brokers 1, 2 and 3, registered."""
    made = {b: FakeBroker(zk_connect, b) for b in (1, 2, 3)}
    for broker in made.values():
        broker.register()
    yield made
    for broker in made.values():
        broker.close()


def states(zk: KazooClient, topic: str) -> dict[int, PartitionState]:
    replicas = read_topic(zk, topic)
    assert replicas is not None
    return {p: s for p, (s, _) in read_states(zk, topic, range(replicas.partitions)).items()}


def full_requests(broker: FakeBroker, epoch: int) -> int:
    return sum(1 for call in broker.applier.snapshot() if call.full and call.controller_epoch == epoch)


def active(node: ControllerNode) -> bool:
    return node.controller.is_active


def test_failover_between_two_controllers(zk_connect: str, zk: KazooClient, brokers: dict[int, FakeBroker]) -> None:
    """When the controller's session expires the other broker takes over with a higher epoch and sends full LeaderAndIsr."""
    create_topic(zk, "orders", 3, 3, None, [1, 2, 3])
    first = ControllerNode(zk_connect, 1).start()
    try:
        wait_for(lambda: active(first), what="first controller")
        second = ControllerNode(zk_connect, 2).start()
        try:
            epoch = first.controller.epoch
            assert epoch is not None
            for broker in brokers.values():
                wait_for(lambda: full_requests(broker, epoch) == 1, what=f"full request to {broker.broker_id}")
                call = broker.applier.snapshot()[-1]
                assert call.controller_id == 1 and {r.partition for r in call.roles} == {0, 1, 2}
                assert [b.broker_id for b in call.brokers] == [1, 2, 3]
            assert not second.controller.is_active
            expire_session(first.zk, zk_connect)
            wait_for(lambda: active(second), what="second controller")
            new_epoch = second.controller.epoch
            assert new_epoch is not None and new_epoch > epoch
            for broker in brokers.values():
                wait_for(lambda: full_requests(broker, new_epoch) == 1, what=f"new full request to {broker.broker_id}")
                assert broker.applier.snapshot()[-1].controller_id == 2
            wait_for(lambda: not first.controller.is_active, what="first controller resigned")
        finally:
            second.close()
    finally:
        first.close()


def test_broker_failure_elects_in_one_batch(zk_connect: str, zk: KazooClient, brokers: dict[int, FakeBroker]) -> None:
    """A vanished broker's partitions get the next live ISR member by assignment order, a shrunk ISR and epoch +1,
    written in one batch, and each surviving broker gets exactly one LeaderAndIsr."""
    replicas = create_topic(zk, "orders", 12, 3, None, [1, 2, 3], rng=random.Random(7))
    node = ControllerNode(zk_connect, 2).start()
    try:
        wait_for(lambda: active(node), what="controller")
        epoch = node.controller.epoch
        assert epoch is not None
        for broker in brokers.values():
            wait_for(lambda: full_requests(broker, epoch) == 1, what="initial full requests")
            broker.applier.clear()
        with structlog.testing.capture_logs() as logs:
            brokers[1].unregister()
            for b in (2, 3):
                wait_for(lambda: len(brokers[b].applier.snapshot()) == 1, what=f"LeaderAndIsr to {b}")
            time.sleep(0.3)
        for b in (2, 3):
            (call,) = brokers[b].applier.snapshot()
            assert not call.full and len(call.roles) == 12 and [x.broker_id for x in call.brokers] == [2, 3]
        after = states(zk, "orders")
        for p, assigned in enumerate(replicas.replicas):
            expected_leader = assigned[0] if assigned[0] != 1 else next(b for b in assigned if b != 1)
            assert after[p].leader == expected_leader
            assert after[p].isr == tuple(b for b in assigned if b != 1)
            assert after[p].leader_epoch == 1 and after[p].controller_epoch == epoch
        (event,) = [e for e in logs if e["event"] == "controller.elections" and e["reason"] == "broker_failure"]
        assert event["partitions"] == 12 and event["changed"] == 12
        assert event["total_ms"] < 1000
    finally:
        node.close()


def test_no_live_isr_member_unclean_off_and_on(zk_connect: str, zk: KazooClient,
                                               brokers: dict[int, FakeBroker]) -> None:
    """With no live ISR member a partition goes offline (leader -1) unless its topic enables unclean election,
    which picks a live out-of-sync replica; the dead broker's return brings the clean one back."""
    for topic, config in (("clean", {}), ("dirty", {"unclean.leader.election.enable": "true"})):
        replicas = TopicReplicas(((1, 2),), config)
        create_replicated_topic(zk, topic, replicas, {0: PartitionState(1, 0, (1,), 0)}, None)
    node = ControllerNode(zk_connect, 3).start()
    try:
        wait_for(lambda: active(node), what="controller")
        wait_for(lambda: full_requests(brokers[2], node.controller.epoch or -1) == 1, what="initial request")
        brokers[1].unregister()
        wait_for(lambda: states(zk, "clean")[0].leader_epoch == 1 and states(zk, "dirty")[0].leader_epoch == 1,
                 what="elections")
        assert states(zk, "clean")[0] == PartitionState(-1, 1, (1,), node.controller.epoch or -1)
        assert states(zk, "dirty")[0] == PartitionState(2, 1, (2,), node.controller.epoch or -1)
        brokers[1].applier.clear()
        brokers[1].register()
        wait_for(lambda: states(zk, "clean")[0].leader == 1, what="clean leader back")
        assert states(zk, "clean")[0].leader_epoch == 2
        wait_for(lambda: any(c.full for c in brokers[1].applier.snapshot()), what="full request to the joiner")
        joined = [c for c in brokers[1].applier.snapshot() if c.full][0]
        assert joined.role("clean", 0).leader == 1 and joined.role("dirty", 0).leader == 2
    finally:
        node.close()


def test_stale_controller_write_fails_and_resigns(zk_connect: str, zk: KazooClient,
                                                  brokers: dict[int, FakeBroker]) -> None:
    """A controller whose epoch was overtaken has its next write refused (ControllerMoved) and resigns."""
    create_topic(zk, "orders", 3, 3, None, [1, 2, 3])
    node = ControllerNode(zk_connect, 2).start()
    try:
        wait_for(lambda: active(node), what="controller")
        old_epoch = node.controller.epoch
        zk.set(CONTROLLER_EPOCH_PATH, b"99")  # a successor's epoch (the only thing a write is fenced by)
        with structlog.testing.capture_logs() as logs:
            brokers[1].unregister()
            wait_for(lambda: any(e["event"] == "controller.resigned" for e in logs), what="resignation")
        resigned = next(e for e in logs if e["event"] == "controller.resigned")
        assert resigned["epoch"] == old_epoch and resigned["reason"].startswith("controller moved")
        assert all(s.controller_epoch != old_epoch or s.leader_epoch == 0 for s in states(zk, "orders").values())
    finally:
        node.close()


def test_new_topic_reaches_every_broker(zk_connect: str, zk: KazooClient, brokers: dict[int, FakeBroker]) -> None:
    """A replicated topic created after the election is loaded through the watch and sent to every live broker."""
    node = ControllerNode(zk_connect, 1).start()
    try:
        wait_for(lambda: active(node), what="controller")
        create_topic(zk, "late", 4, 2, {"min.insync.replicas": "1"}, [1, 2, 3])
        for broker in brokers.values():
            wait_for(lambda: any(len(c.roles) == 4 and not c.full for c in broker.applier.snapshot()),
                     what=f"new topic at {broker.broker_id}")
    finally:
        node.close()


def test_controlled_shutdown_moves_leadership(zk_connect: str, zk: KazooClient,
                                              brokers: dict[int, FakeBroker]) -> None:
    """ControlledShutdown over gRPC moves every leadership and ISR membership off the stopping broker; a stale
    broker epoch is refused, and a broker that is not the controller answers NOT_CONTROLLER."""
    create_topic(zk, "orders", 6, 3, None, [1, 2, 3])
    create_topic(zk, "single", 3, 1, None, [1, 2, 3], rng=random.Random(0))
    node = ControllerNode(zk_connect, 2).start()
    server, stub = shutdown_server(node.controller)
    try:
        wait_for(lambda: active(node), what="controller")
        epoch = read_broker_epoch(zk, 1)
        assert epoch is not None
        stale = stub.ControlledShutdown(rpb.ControlledShutdownRequest(broker_id=1, broker_epoch=epoch - 1), timeout=10)
        assert stale.error == rpb.ReplicaControlError.STALE_BROKER_EPOCH
        answer = stub.ControlledShutdown(rpb.ControlledShutdownRequest(broker_id=1, broker_epoch=epoch), timeout=10)
        assert answer.error == rpb.ReplicaControlError.NONE and list(answer.remaining) == []
        for p, state in states(zk, "orders").items():
            assert state.leader != 1 and 1 not in state.isr
        assert any(s.leader == 1 for s in states(zk, "single").values())  # factor 1: cannot move, not reported
        other = brokers[3].servicer.ControlledShutdown(rpb.ControlledShutdownRequest(broker_id=1), None)
        assert other.error == rpb.ReplicaControlError.NOT_CONTROLLER
    finally:
        server.stop(0)
        node.close()


def test_controlled_shutdown_does_not_wait_for_partitions_no_other_live_replica_can_take(
        zk_connect: str, zk: KazooClient, brokers: dict[int, FakeBroker]) -> None:
    """The last live replica of a partition cannot hand it over: ControlledShutdown reports it not remaining, so the
    broker stops at once instead of retrying (the last broker of a cluster stopped in 10 s before)."""
    create_topic(zk, "stranded", 2, 2, None, [1, 4], rng=random.Random(0))  # broker 4 is not live
    node = ControllerNode(zk_connect, 2).start()
    server, stub = shutdown_server(node.controller)
    try:
        wait_for(lambda: active(node) and all(s.leader == 1 for s in states(zk, "stranded").values()),
                 what="broker 1 leading both partitions")
        request = rpb.ControlledShutdownRequest(broker_id=1, broker_epoch=read_broker_epoch(zk, 1) or 0)
        answer = stub.ControlledShutdown(request, timeout=10)
        assert answer.error == rpb.ReplicaControlError.NONE and list(answer.remaining) == []
        assert all(s.leader == 1 for s in states(zk, "stranded").values())  # nobody else could take them
    finally:
        server.stop(0)
        node.close()


def test_create_topic_spreads_leaders_and_refuses_bad_factors(zk: KazooClient) -> None:
    """create_topic gives each live broker an equal share of leaders and refuses a factor above the live brokers,
    an existing topic and too many partitions."""
    replicas = create_topic(zk, "even", 9, 3, {"min.insync.replicas": "2"}, [4, 5, 6])
    leaders = [r[0] for r in replicas.replicas]
    assert sorted(leaders.count(b) for b in (4, 5, 6)) == [3, 3, 3]
    assert all(s == PartitionState(replicas.replicas[p][0], 0, replicas.replicas[p], 0)
               for p, s in states(zk, "even").items())
    assert read_topic(zk, "even") == replicas
    with pytest.raises(InvalidReplicationFactor):
        create_topic(zk, "wide", 3, 4, None, [4, 5, 6])
    with pytest.raises(TopicExists):
        create_topic(zk, "even", 3, 1, None, [4, 5, 6])
    with pytest.raises(InvalidPartitions):
        create_topic(zk, "huge", MAX_REPLICATED_PARTITIONS + 1, 1, None, [4, 5, 6])


def test_thousand_partitions_fail_over_within_a_second(zk_connect: str, zk: KazooClient,
                                                       brokers: dict[int, FakeBroker]) -> None:
    """A dead broker's share of 1,000 partitions (factor 3) is re-elected, written and sent in under a second."""
    create_topic(zk, "big", 1000, 3, None, [1, 2, 3])
    node = ControllerNode(zk_connect, 2).start()
    try:
        wait_for(lambda: active(node), what="controller")
        wait_for(lambda: full_requests(brokers[3], node.controller.epoch or -1) == 1, what="initial request")
        brokers[3].applier.clear()
        with structlog.testing.capture_logs() as logs:
            brokers[1].unregister()
            wait_for(lambda: len(brokers[3].applier.snapshot()) == 1, what="LeaderAndIsr to 3")
            wait_for(lambda: any(e["event"] == "controller.elections" and e["reason"] == "broker_failure"
                                 for e in logs), what="the elections log")
        (event,) = [e for e in logs if e["event"] == "controller.elections" and e["reason"] == "broker_failure"]
        assert event["changed"] == 1000 and event["total_ms"] < 1000, event
        assert all(s.leader != 1 and 1 not in s.isr for s in states(zk, "big").values())
    finally:
        node.close()


def test_a_follower_a_leader_readded_to_the_isr_is_removed_when_it_dies(zk_connect: str, zk: KazooClient,
                                                                        brokers: dict[int, FakeBroker]) -> None:
    """Leaders change their ISR in ZooKeeper without telling the controller; a dead follower that its leader had
    put back in the ISR is still taken out of it (the controller reads the states before deciding)."""
    create_replicated_topic(zk, "late", TopicReplicas(((2, 1, 3),)), {0: PartitionState(2, 0, (2, 1), 0)}, None)
    node = ControllerNode(zk_connect, 2).start()
    try:
        wait_for(lambda: active(node), what="controller")
        _, stat = zk.get(state_path("late", 0))
        zk.set(state_path("late", 0), PartitionState(2, 0, (2, 1, 3), 0).encode(), version=stat.version)  # the leader
        brokers[3].unregister()
        wait_for(lambda: states(zk, "late")[0].isr == (2, 1), what="broker 3 out of the ISR")
        assert states(zk, "late")[0].leader == 2
    finally:
        node.close()


def test_a_leader_and_isr_a_broker_missed_is_sent_again_in_full(zk_connect: str, zk: KazooClient,
                                                                 brokers: dict[int, FakeBroker]) -> None:
    """A broker that cannot be reached when a LeaderAndIsr is sent (a cut network, a stall) is sent every role again,
    in full, every retry_backoff_s until it answers; before, it learned of the change only at its next one, so a
    leader elected while unreachable never knew it led (found by the network-partition tests)."""
    failing = brokers[2].applier
    refused = {"on": True}
    original = failing.apply_roles

    def apply_roles(*args: Any, **kwargs: Any) -> Any:
        if refused["on"]:
            raise RuntimeError("unreachable (the test's stand-in for a cut link)")
        return original(*args, **kwargs)

    failing.apply_roles = apply_roles  # type: ignore[method-assign]
    node = ControllerNode(zk_connect, 1).start()
    try:
        wait_for(lambda: active(node), what="controller")
        create_topic(zk, "missed", 3, 3, None, [1, 2, 3])
        wait_for(lambda: any(len(c.roles) == 3 for c in brokers[3].applier.snapshot()), what="broker 3 told")
        time.sleep(1.0)  # several retries fail meanwhile
        assert not any(c.roles for c in failing.snapshot())
        refused["on"] = False
        wait_for(lambda: any(c.full and {(r.topic, r.partition) for r in c.roles} >= {("missed", p) for p in range(3)}
                             for c in failing.snapshot()), timeout=5.0, what="broker 2 sent every role again")
        time.sleep(1.0)
        resent = sum(1 for c in failing.snapshot() if c.full)
        time.sleep(1.0)
        assert sum(1 for c in failing.snapshot() if c.full) == resent  # answered: no more resends
    finally:
        node.close()
