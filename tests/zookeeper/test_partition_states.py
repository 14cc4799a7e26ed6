"""Replicated topics, partition states and the controller election against a real ZooKeeper."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from rill.broker.cluster.partition_states import (ControllerEpoch, ControllerMoved, EpochCheck, TopicExists,
                                                  create_replicated_topic, elect_controller, read_controller,
                                                  read_states, read_topic, update_states)
from rill.client.zookeeper.registry import encode_partition_map
from rill.client.zookeeper.replica_layout import (CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, PartitionState,
                                                  TopicReplicas, state_path, topic_path)

T = TypeVar("T")


@pytest.fixture
def zk2(zk_connect: str) -> Iterator[KazooClient]:
    """A second session in the test's chroot (another broker)."""
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def race(*calls: Callable[[], T]) -> list[T]:
    """Run the calls at once on their own threads (released together by a barrier); their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[T | None] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int, call: Callable[[], T]) -> None:
        barrier.wait()
        try:
            results[i] = call()
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]


def new_topic(zk: KazooClient, topic: str, partitions: int, check: EpochCheck | None) -> TopicReplicas:
    replicas = TopicReplicas(tuple((p % 3, (p + 1) % 3, (p + 2) % 3) for p in range(partitions)),
                             {"min.insync.replicas": "2"})
    states = {p: PartitionState(p % 3, 0, replicas.replicas[p], 1) for p in range(partitions)}
    create_replicated_topic(zk, topic, replicas, states, check)
    return replicas


def controller_id(zk: KazooClient) -> int | None:
    info = read_controller(zk)
    return None if info is None else info.broker_id


def bumped(state: PartitionState, epoch: int = 1) -> PartitionState:
    return PartitionState(state.leader, state.leader_epoch + 1, state.isr, epoch)


def test_created_topic_reads_back(zk: KazooClient) -> None:
    """A created topic reads back with its config, and every state is Kafka's bytes at zkVersion 0."""
    won = elect_controller(zk, 1)
    assert won is not None
    replicas = new_topic(zk, "orders", 3, won.check)
    assert read_topic(zk, "orders") == replicas
    assert read_topic(zk, "absent") is None
    states = read_states(zk, "orders", range(3))
    assert states == {p: (PartitionState(p % 3, 0, replicas.replicas[p], 1), 0) for p in range(3)}
    assert zk.get(state_path("orders", 0))[0] == (
        b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0,1,2]}')
    assert read_states(zk, "orders", [2, 5, 1]) == {2: states[2], 1: states[1]}  # partition 5 has no state


def test_second_create_raises_topic_exists(zk: KazooClient) -> None:
    """Creating a topic whose node exists, replicated or 0.7, raises TopicExists and changes nothing."""
    new_topic(zk, "orders", 2, None)
    with pytest.raises(TopicExists):
        new_topic(zk, "orders", 5, None)
    assert read_topic(zk, "orders") == TopicReplicas(((0, 1, 2), (1, 2, 0)), {"min.insync.replicas": "2"})
    zk.create(topic_path("legacy"), encode_partition_map([(1, 0)]))
    with pytest.raises(TopicExists):
        new_topic(zk, "legacy", 1, None)
    assert read_topic(zk, "legacy") is None  # a 0.7 topic is not a replicated one
    assert not zk.exists(f"{topic_path('legacy')}/partitions")


def test_create_refuses_states_that_do_not_fit(zk: KazooClient) -> None:
    """States for the wrong partitions or off-assignment replicas, or a topic too big for one request: nothing made."""
    replicas = TopicReplicas(((1, 2), (2, 3)))
    for states in ({0: PartitionState(1, 0, (1, 2), 0)},
                   {0: PartitionState(1, 0, (1, 2), 0), 1: PartitionState(1, 0, (1, 2), 0)}):
        with pytest.raises(ValueError):
            create_replicated_topic(zk, "t", replicas, states, None)
    big = TopicReplicas(tuple((1, 2) for _ in range(5000)))
    with pytest.raises(ValueError, match="over ZooKeeper's limit"):
        create_replicated_topic(zk, "t", big, {p: PartitionState(1, 0, (1, 2), 0) for p in range(5000)}, None)
    assert read_topic(zk, "t") is None


def test_conditional_update_wins_once(zk: KazooClient, zk2: KazooClient) -> None:
    """Two writers racing with the same zkVersion: exactly one writes, the other learns it lost."""
    new_topic(zk, "orders", 1, None)
    (state, version), = read_states(zk, "orders", [0]).values()
    mine, theirs = PartitionState(1, 1, (1, 2), 1), PartitionState(2, 1, (2, 0), 1)
    with capture_logs() as logs:
        results = race(lambda: update_states(zk, {("orders", 0): (mine, version)}, None),
                       lambda: update_states(zk2, {("orders", 0): (theirs, version)}, None))
    winners = [r for r in results if r.versions]
    losers = [r for r in results if r.lost == {("orders", 0)} and not r.versions]
    assert len(winners) == 1 and len(losers) == 1
    expected = mine if results[0] is winners[0] else theirs
    assert read_states(zk, "orders", [0]) == {0: (expected, winners[0].versions[("orders", 0)])}
    assert winners[0].versions[("orders", 0)] == version + 1
    # without a controller-epoch check the writer is a leader changing its ISR: the log says so, not "controller"
    assert [(e["event"], e["writer"], e["lost"]) for e in logs if "lost" in e] == [
        ("partition_states.writes_lost", "leader", 1)]


def test_stale_partitions_do_not_block_the_others(zk: KazooClient) -> None:
    """Stale zkVersions in several chunks (two in one) and a missing state fail alone; all other states are written."""
    won = elect_controller(zk, 1)
    assert won is not None
    new_topic(zk, "orders", 250, won.check)
    zk.delete(state_path("orders", 249))
    current = read_states(zk, "orders", range(250))
    stale = {3, 50, 51, 99, 180}
    updates = {("orders", p): (bumped(s), v + 1 if p in stale else v) for p, (s, v) in current.items()}
    updates[("orders", 249)] = (PartitionState(-1, 1, (), 1), 0)
    result = update_states(zk, updates, won.check)
    assert result.lost == {("orders", p) for p in stale}
    assert result.missing == {("orders", 249)}
    assert set(result.versions) == {("orders", p) for p in range(249)} - result.lost
    after = read_states(zk, "orders", range(250))
    for p in range(249):
        assert after[p] == ((current[p][0], 0) if p in stale else (bumped(current[p][0]), 1))


def test_stale_epoch_check_changes_nothing(zk: KazooClient) -> None:
    """With a stale epoch check, a topic creation and a 250-state write raise ControllerMoved and write nothing."""
    won = elect_controller(zk, 1)
    assert won is not None
    new_topic(zk, "orders", 250, won.check)
    stale = EpochCheck(CONTROLLER_EPOCH_PATH, won.zk_version - 1)
    before = read_states(zk, "orders", range(250))
    with pytest.raises(ControllerMoved) as caught:
        update_states(zk, {("orders", p): (bumped(s), v) for p, (s, v) in before.items()}, stale)
    assert caught.value.applied == {}
    assert read_states(zk, "orders", range(250)) == before
    with pytest.raises(ControllerMoved):
        new_topic(zk, "other", 2, stale)
    assert not zk.exists(topic_path("other"))


def test_election_race_then_failover(zk: KazooClient, zk2: KazooClient) -> None:
    """Two brokers race: one wins epoch 1; when its session ends the other wins epoch 2; the old epoch cannot write."""
    results = race(lambda: elect_controller(zk, 1), lambda: elect_controller(zk2, 2))
    won = [r for r in results if r is not None]
    assert len(won) == 1 and won[0].epoch == 1
    winner, other, other_id = (zk, zk2, 2) if results[0] is not None else (zk2, zk, 1)
    assert controller_id(zk) == 3 - other_id
    assert elect_controller(other, other_id) is None  # still held
    new_topic(other, "orders", 2, won[0].check)
    winner.stop()  # the session ends: the ephemeral /rill/controller goes at once
    second = elect_controller(other, other_id)
    assert second is not None and second.epoch == 2
    assert other.get(CONTROLLER_EPOCH_PATH)[0] == b"2"
    assert controller_id(other) == other_id
    current = read_states(other, "orders", range(2))
    updates = {("orders", p): (bumped(s, 2), v) for p, (s, v) in current.items()}
    with pytest.raises(ControllerMoved):
        update_states(other, updates, won[0].check)
    assert read_states(other, "orders", range(2)) == current
    assert set(update_states(other, updates, second.check).versions) == {("orders", 0), ("orders", 1)}


def test_election_starts_from_the_stored_epoch(zk: KazooClient) -> None:
    """A missing epoch node starts at 0 (first epoch 1), a stored one goes up by one; a winner asking again keeps it."""
    zk.ensure_path("/rill")
    zk.create(CONTROLLER_EPOCH_PATH, b"7")
    won = elect_controller(zk, 4)
    assert won == ControllerEpoch(8, 1)
    assert zk.get(CONTROLLER_PATH)[1].ephemeralOwner == zk.client_id[0]
    assert elect_controller(zk, 4) == won  # this session already holds it: a retry after a lost reply
    zk.delete(CONTROLLER_PATH)
    zk.delete(CONTROLLER_EPOCH_PATH)
    assert elect_controller(zk, 4) == ControllerEpoch(1, 1)


def test_malformed_controller_nodes_raise_value_error(zk: KazooClient) -> None:
    """An epoch node that is not a number stops the election; a garbled controller node is reported, not guessed."""
    zk.ensure_path("/rill")
    zk.create(CONTROLLER_EPOCH_PATH, b"seven")
    with pytest.raises(ValueError, match="controller epoch"):
        elect_controller(zk, 1)
    assert not zk.exists(CONTROLLER_PATH)
    zk.create(CONTROLLER_PATH, b'{"brokerid":1}')
    with pytest.raises(ValueError):
        read_controller(zk)
