"""Three real brokers (in-process, real TCP and gRPC) on a real ZooKeeper replicate a topic end to end.

The topic is created the way Admin CreateTopic does it (replicated_topics.create_topic);
the brokers' controller elects leaders, tells every broker, the followers fetch from
their leaders, and acks=all produces are answered once every in-sync replica has them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.replicated_topics import create_topic
from rill.broker.replication.replica import Role
from rill.broker.testing import RunningBroker, running_broker
from rill.client.errors import BrokerError, NotLeaderForPartition
from rill.client.protocol import requests as rq
from rill.client import Consumer, Producer
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.conftest import RawClient

TOPIC = "replicated"


def wait_for(condition: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[dict[int, RunningBroker]]:
    with contextlib.ExitStack() as stack:
        brokers = {i: stack.enter_context(running_broker(
            tmp_path / f"data-{i}", broker_id=i, zookeeper_connect=zk_connect, zookeeper_session_timeout_ms=4000,
            replica_fetch_wait_max_ms=200, replica_fetch_backoff_ms=100, controlled_shutdown_retry_backoff_ms=200,
            replica_lag_time_max_ms=3000,
            # groups survive a broker's stop (factor 1 put every group on the first broker: when the test stopped
            # it, a consumer group had no coordinator)
            offsets_topic_replication_factor=3)) for i in (1, 2, 3)}
        yield brokers


def leader_of(brokers: dict[int, RunningBroker], partition: int) -> RunningBroker | None:
    for b in brokers.values():
        replica = b.broker.replicas.replicas.get((TOPIC, partition))
        if replica is not None and replica.role is Role.LEADER:
            return b
    return None


def segment_bytes(b: RunningBroker, partition: int) -> bytes:
    directory = os.path.join(b.broker.logs.data_dir, f"{TOPIC}-{partition}")
    return b"".join(Path(directory, name).read_bytes() for name in sorted(os.listdir(directory))
                    if name.endswith(".log"))


def test_acks_all_produce_is_replicated_byte_for_byte(cluster: dict[int, RunningBroker], zk: KazooClient) -> None:
    """Every replica of each partition ends with the leader's exact bytes, and acks=all answers real offsets."""
    create_topic(zk, TOPIC, 2, 3, None, list(cluster))
    wait_for(lambda: all(leader_of(cluster, p) for p in (0, 1)), "a leader for every partition")
    for partition in (0, 1):
        leader = leader_of(cluster, partition)
        assert leader is not None
        with SimpleProducer(leader.host, leader.port, acks=rq.Acks.ALL) as producer:
            acks = [producer.send(TOPIC, [f"m{partition}-{i}".encode()], partition) for i in range(50)]
        assert all(a.next_offset > a.first_offset for a in acks)
        end = acks[-1].next_offset
        wait_for(lambda: all(b.broker.logs.get(TOPIC, partition).end_offset == end for b in cluster.values()),
                 "every replica to reach the leader's end")
        assert len({segment_bytes(b, partition) for b in cluster.values()}) == 1


def test_consumer_reads_committed_data_from_the_leader_only(cluster: dict[int, RunningBroker], zk: KazooClient) -> None:
    """The leader serves the acknowledged messages; a follower refuses the fetch with NotLeaderForPartition."""
    create_topic(zk, TOPIC, 1, 3, None, list(cluster))
    wait_for(lambda: leader_of(cluster, 0), "a leader")
    leader = leader_of(cluster, 0)
    assert leader is not None
    with SimpleProducer(leader.host, leader.port, acks=rq.Acks.ALL) as producer:
        producer.send(TOPIC, [b"one", b"two"], 0)
    with SimpleConsumer(leader.host, leader.port) as consumer:
        assert [m.value for m in consumer.fetch(TOPIC, 0, 0)] == [b"one", b"two"]
    follower = next(b for b in cluster.values() if b is not leader)
    with SimpleConsumer(follower.host, follower.port) as consumer, pytest.raises(NotLeaderForPartition):
        consumer.fetch(TOPIC, 0, 0)


def test_leader_stopping_hands_over_and_nothing_acknowledged_is_lost(cluster: dict[int, RunningBroker],
                                                                     zk: KazooClient) -> None:
    """A leader stopped with SIGTERM's path moves leadership first; the new leader has every acknowledged message."""
    create_topic(zk, TOPIC, 1, 3, None, list(cluster))
    wait_for(lambda: leader_of(cluster, 0), "a leader")
    leader = leader_of(cluster, 0)
    assert leader is not None
    with SimpleProducer(leader.host, leader.port, acks=rq.Acks.ALL) as producer:
        acked = [producer.send(TOPIC, [f"before-{i}".encode()], 0) for i in range(20)]
    began = time.monotonic()
    leader.close()
    remaining = {i: b for i, b in cluster.items() if b is not leader}
    wait_for(lambda: leader_of(remaining, 0), "a new leader")
    handover_s = time.monotonic() - began
    new_leader = leader_of(remaining, 0)
    assert new_leader is not None and new_leader is not leader
    expected = [f"before-{i}".encode() for i in range(len(acked))]
    with SimpleConsumer(new_leader.host, new_leader.port) as consumer:
        # consumers read below the new leader's high watermark, which reaches its log end once the other
        # in-sync follower has fetched from it (Kafka's too): every acknowledged message, soon
        wait_for(lambda: [m.value for m in consumer.fetch(TOPIC, 0, 0, 1 << 20)] == expected,
                 "every acknowledged message readable from the new leader")
    with SimpleProducer(new_leader.host, new_leader.port, acks=rq.Acks.ALL) as producer:
        assert producer.send(TOPIC, [b"after"], 0).first_offset == acked[-1].next_offset
    assert handover_s < 15


def test_metadata_from_any_broker_names_each_partitions_leader(cluster: dict[int, RunningBroker],
                                                               zk: KazooClient) -> None:
    """METADATA on every broker lists the replicated topic with its leaders, partition p being p on each replica."""
    create_topic(zk, TOPIC, 3, 2, None, list(cluster))
    wait_for(lambda: all(leader_of(cluster, p) for p in range(3)), "a leader for every partition")
    expected = tuple(leader_of(cluster, p).broker_id for p in range(3))  # type: ignore[union-attr]
    for b in cluster.values():
        def described(b: RunningBroker = b) -> bool:
            with SimpleConsumer(b.host, b.port) as consumer:
                topic = consumer.metadata([TOPIC]).topics[0]
            return topic.leaders == expected and [topic.broker_partition(p) for p in range(3)] == [0, 1, 2]
        wait_for(described, f"broker {b.broker_id}'s metadata")


def test_producer_and_consumer_follow_a_new_leader(cluster: dict[int, RunningBroker], zk: KazooClient) -> None:
    """Producer (acks=all) and poll() consumer ride through the leader's stop: every acknowledged message is
    consumed once, in order, from the new leader."""
    create_topic(zk, TOPIC, 1, 3, None, list(cluster))
    wait_for(lambda: leader_of(cluster, 0), "a leader")
    leader = leader_of(cluster, 0)
    assert leader is not None
    bootstrap = ",".join(b.address for b in cluster.values())
    acked: list[bytes] = []
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=20, retry_backoff_ms=100) as producer:
        for i in range(60):
            if i == 30:
                leader.close()
            value = f"v{i}".encode()
            producer.send(TOPIC, value, partition=0).get_offset(timeout=30)
            acked.append(value)
    consumer = Consumer(bootstrap_servers=",".join(b.address for b in cluster.values() if b is not leader),
                        group_id="follow", auto_offset_reset="earliest", enable_auto_commit=False)
    received: list[bytes] = []
    try:
        consumer.add_topic(TOPIC)
        deadline = time.monotonic() + 30
        while len(received) < len(acked) and time.monotonic() < deadline:
            received.extend(m.value for m in consumer.poll(0.2))
    finally:
        consumer.close()
    assert received == acked


def test_a_broker_in_controlled_shutdown_does_not_rejoin_the_isr(tmp_path: Path, zk_connect: str,
                                                                 zk: KazooClient) -> None:
    """After a leader's controlled shutdown the new leader commits at once: the stopping broker, made a follower,
    must not fetch its way back into the ISR (it would hold the high watermark until replica.lag.time.max.ms)."""
    with contextlib.ExitStack() as stack:
        brokers = {i: stack.enter_context(running_broker(
            tmp_path / f"data-{i}", broker_id=i, zookeeper_connect=zk_connect, zookeeper_session_timeout_ms=4000,
            replica_fetch_wait_max_ms=100, replica_lag_time_max_ms=60_000)) for i in (1, 2, 3)}
        create_topic(zk, TOPIC, 1, 3, None, list(brokers))
        wait_for(lambda: leader_of(brokers, 0), "a leader")
        leader = leader_of(brokers, 0)
        assert leader is not None
        with SimpleProducer(leader.host, leader.port, acks=rq.Acks.ALL) as producer:
            producer.send(TOPIC, [b"before"], 0)
        leader.close()
        remaining = {i: b for i, b in brokers.items() if b is not leader}
        wait_for(lambda: leader_of(remaining, 0), "a new leader")
        new_leader = leader_of(remaining, 0)
        assert new_leader is not None
        state = new_leader.broker.replicas.replicas[(TOPIC, 0)].leader_state
        assert state is not None and leader.broker_id not in state.isr
        began = time.monotonic()
        with SimpleProducer(new_leader.host, new_leader.port, acks=rq.Acks.ALL, ack_timeout_ms=20_000) as producer:
            assert producer.send(TOPIC, [b"after"], 0).first_offset > 0
        assert time.monotonic() - began < 5


def test_produce_racing_a_replicated_topics_creation_never_makes_a_07_topic(tmp_path: Path, zk_connect: str,
                                                                            zk: KazooClient) -> None:
    """A produce that reaches a broker before the controller has described a new replicated topic is refused
    (retriable) instead of auto-creating a 0.7 topic of that name, which would block its replicas there for good."""
    with running_broker(tmp_path / "data", broker_id=1, zookeeper_connect=zk_connect) as b:
        assert b.broker.controller is not None
        b.broker.controller.close()  # the controller is slow to act: the window stays open
        create_topic(zk, TOPIC, 1, 1, None, [1])
        assert b.broker.registry is not None
        wait_for(lambda: TOPIC in b.broker.registry.snapshot.replicated_topics, "the registry to list the topic")
        with SimpleProducer(b.host, b.port) as producer, pytest.raises(BrokerError) as refused:
            producer.send(TOPIC, [b"early"], 0)
        assert refused.value.retriable
        assert TOPIC not in b.broker.logs.topics()


def test_a_broker_without_the_partitions_replica_answers_not_leader(
        cluster: dict[int, RunningBroker], zk: KazooClient) -> None:
    """A client whose metadata is stale produces to (or fetches from) a broker that holds no replica of the
    partition: it is told NotLeaderForPartition (refresh metadata, go to the leader), as Kafka answers, not
    UnknownTopic (or an empty set)."""
    create_topic(zk, "on-one", 1, 1, None, [1])
    other = cluster[2]
    wait_for(lambda: "on-one" in other.broker.replicas.partition_leaders, "broker 2 told of the topic's leader")
    with SimpleProducer(other.host, other.port) as producer, pytest.raises(NotLeaderForPartition):
        producer.send("on-one", [b"misdirected"], 0)
    with SimpleProducer(cluster[1].host, cluster[1].port) as producer:
        producer.send("on-one", [b"at the leader"], 0)
    # a consumer as misdirected is told the same, rather than served an empty set it would poll forever
    with SimpleConsumer(other.host, other.port) as consumer, pytest.raises(NotLeaderForPartition):
        consumer.fetch("on-one", 0, 0)
    raw = RawClient(other.host, other.port)  # a 0.7 FETCH keeps 0.7's answer: the empty set, no error
    try:
        assert rq.decode_fetch_response(raw.request(rq.encode_fetch("on-one", 0, 0, 1 << 16))) == (0, b"")
    finally:
        raw.close()
