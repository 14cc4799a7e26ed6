"""Topics the data plane creates in a cluster honour ``default.replication.factor`` (Kafka's auto-creation).

In-process brokers on a real ZooKeeper: with a factor above 1 a produce to an unknown
topic (``auto.create.topics.enable``) and CREATE_TOPIC make a replicated topic through
ZooKeeper, as Admin CreateTopic does; the produce that caused it is refused as
LeaderNotAvailable with nothing written, and the Producer retries until the leaders are
elected. Factor 1 keeps Kafka 0.7-style topics.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from rill.broker.cluster.partition_states import read_topic
from rill.broker.testing import RunningBroker, running_broker
from rill.client import Consumer, Producer
from rill.client.errors import InvalidReplicationFactor, InvalidRequest, LeaderNotAvailable
from rill.client.grpc_client import AdminClient
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

TOPIC = "orders"


def wait_for(condition: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def brokers(tmp_path: Path, zk_connect: str, ids: tuple[int, ...], **settings: object) -> Iterator[
        dict[int, RunningBroker]]:
    """Brokers ``ids`` on ``zk_connect`` with ``settings``; yields once each sees them all in the registry."""
    with contextlib.ExitStack() as stack:
        running = {i: stack.enter_context(running_broker(
            tmp_path / f"data-{i}", broker_id=i, zookeeper_connect=zk_connect, zookeeper_session_timeout_ms=4000,
            replica_fetch_wait_max_ms=200, replica_fetch_backoff_ms=100, controlled_shutdown_retry_backoff_ms=200,
            replica_lag_time_max_ms=3000, **settings)) for i in ids}
        for b in running.values():
            registry = b.broker.registry
            assert registry is not None
            wait_for(lambda: set(ids) <= set(registry.snapshot.brokers), f"broker {b.broker_id} to see the others")
        yield running


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[dict[int, RunningBroker]]:
    """Three brokers with default.replication.factor=3 and num.partitions=2."""
    with brokers(tmp_path, zk_connect, (1, 2, 3), default_replication_factor=3, num_partitions=2) as running:
        yield running


def describe(b: RunningBroker, topic: str = TOPIC) -> apb.TopicDescription:
    with AdminClient(b.grpc_address, timeout=10) as admin:
        return admin.describe_topics([topic]).topics[0]


def all_led(b: RunningBroker, partitions: int, topic: str = TOPIC) -> bool:
    """Whether every partition has a leader answering its offsets, with all three replicas in sync."""
    d = describe(b, topic)
    return len(d.partitions) == partitions and all(
        p.leader != rq.NO_LEADER and p.end_offset >= 0 and sorted(p.isr) == [1, 2, 3] for p in d.partitions)


def assert_replicated(cluster: dict[int, RunningBroker], zk: KazooClient, partitions: int) -> None:
    """The topic is replicated with factor 3 (ZooKeeper, Admin) and no broker made a 0.7-style topic of it."""
    replicas = read_topic(zk, TOPIC)
    assert replicas is not None and (replicas.partitions, replicas.replication_factor) == (partitions, 3)
    wait_for(lambda: all_led(cluster[2], partitions), "a leader for every partition, every replica in sync")
    d = describe(cluster[3])
    assert (d.partition_count, d.replication_factor) == (partitions, 3)
    assert all(sorted(p.replicas) == [1, 2, 3] for p in d.partitions)
    assert all(TOPIC not in b.broker.logs.topics() for b in cluster.values())


def consume(bootstrap: str, count: int) -> list[bytes]:
    consumer = Consumer(bootstrap_servers=bootstrap, group_id="reader", auto_offset_reset="earliest",
                        enable_auto_commit=False)
    received: list[bytes] = []
    try:
        consumer.add_topic(TOPIC)
        deadline = time.monotonic() + 20
        while len(received) < count and time.monotonic() < deadline:
            received.extend(m.value for m in consumer.poll(0.2))
    finally:
        consumer.close()
    return received


def test_producer_to_an_unknown_topic_makes_it_replicated(cluster: dict[int, RunningBroker],
                                                          zk: KazooClient) -> None:
    """A Producer (acks=all) sending to a missing topic ends with it replicated (factor 3, num.partitions,
    leaders elected) and every acknowledged message readable by a Consumer."""
    bootstrap = ",".join(b.address for b in cluster.values())
    values = [f"order-{i}".encode() for i in range(40)]
    with capture_logs() as logs, Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=10,
                                          retry_backoff_ms=50, request_timeout_ms=20_000) as producer:
        responses = [producer.send(TOPIC, value) for value in values]
        offsets = [r.get_offset(timeout=20) for r in responses]
    assert all(o >= 0 for o in offsets)
    created = [e for e in logs if e["event"] == "topics.replicated_topic_created"]
    assert [(e["topic"], e["partitions"], e["replication_factor"], e["auto_created"]) for e in created] == [
        (TOPIC, 2, 3, True)]
    assert any(e["event"] == "producer.topic_not_ready" for e in logs)
    assert_replicated(cluster, zk, 2)
    assert sorted(consume(bootstrap, len(values))) == sorted(values)


def test_produce_that_creates_the_topic_is_refused_and_writes_nothing(cluster: dict[int, RunningBroker],
                                                                      zk: KazooClient) -> None:
    """The produce that auto-creates a replicated topic gets LeaderNotAvailable (retriable) and no replica
    holds its messages; once the leaders are elected the leader takes a produce from offset 0."""
    with SimpleProducer(cluster[1].host, cluster[1].port, acks=rq.Acks.ALL) as producer, \
            pytest.raises(LeaderNotAvailable) as refused:
        producer.send(TOPIC, [b"early"], 0)
    assert refused.value.retriable and refused.value.invalid_metadata
    assert_replicated(cluster, zk, 2)
    assert [b.broker.logs.get(TOPIC, 0).end_offset for b in cluster.values()] == [0, 0, 0]
    leader = cluster[describe(cluster[1]).partitions[0].leader]
    with SimpleProducer(leader.host, leader.port, acks=rq.Acks.ALL) as producer:
        assert producer.send(TOPIC, [b"later"], 0).first_offset == 0


def test_create_topic_request_makes_a_replicated_topic(cluster: dict[int, RunningBroker], zk: KazooClient) -> None:
    """Data-plane CREATE_TOPIC creates the topic in ZooKeeper with factor 3 and the requested count; asking
    again with that count answers it, with another count is InvalidRequest."""
    with SimpleConsumer(cluster[2].host, cluster[2].port) as client:
        assert client.create_topic(TOPIC, 4) == 4
        assert client.create_topic(TOPIC, 4) == 4
        with pytest.raises(InvalidRequest):
            client.create_topic(TOPIC, 5)
    assert_replicated(cluster, zk, 4)


def test_factor_one_keeps_kafka07_topics(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """With default.replication.factor=1 auto-creation and CREATE_TOPIC make 0.7-style topics, as before."""
    with brokers(tmp_path, zk_connect, (1, 2), num_partitions=2) as running:
        b = running[1]
        with Producer(bootstrap_servers=b.address, linger_ms=0) as producer:
            assert producer.send("auto", b"x").get_offset(timeout=10) == 0
        with SimpleConsumer(b.host, b.port) as client:
            assert client.create_topic("explicit", 3) == 3
        assert {t: b.broker.logs.topics().get(t) for t in ("auto", "explicit")} == {"auto": 2, "explicit": 3}
        assert read_topic(zk, "auto") is None and read_topic(zk, "explicit") is None
        assert all(b.broker.replicas.placement(t) is None for t in ("auto", "explicit"))


def test_factor_above_the_live_brokers_is_refused(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """Factor 3 on two brokers: CREATE_TOPIC and the Producer fail with InvalidReplicationFactor, nothing created."""
    with brokers(tmp_path, zk_connect, (1, 2), default_replication_factor=3) as running:
        b = running[1]
        with SimpleConsumer(b.host, b.port) as client, pytest.raises(InvalidReplicationFactor):
            client.create_topic(TOPIC, 1)
        with Producer(bootstrap_servers=b.address, linger_ms=0) as producer:
            error = producer.send(TOPIC, b"x").get_error(timeout=10)
        assert isinstance(error, InvalidReplicationFactor)
        assert "default.replication.factor" in str(error)
        assert not zk.exists(f"/rill/topics/{TOPIC}")
        assert all(TOPIC not in r.broker.logs.topics() for r in running.values())


def test_a_kafka07_topic_elsewhere_stays_kafka07(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """A name another broker holds as a 0.7-style topic is created here as a 0.7-style topic, not replicated."""
    with brokers(tmp_path, zk_connect, (1,)) as first, \
            brokers(tmp_path, zk_connect, (2,), default_replication_factor=2) as second:
        with SimpleConsumer(first[1].host, first[1].port) as client:
            client.create_topic("legacy", 1)
        registry = second[2].broker.registry
        assert registry is not None
        wait_for(lambda: "legacy" in registry.snapshot.partition_maps, "broker 2 to see the 0.7 topic")
        with SimpleConsumer(second[2].host, second[2].port) as client:
            assert client.create_topic("legacy", 1) == 1
        assert second[2].broker.logs.topics().get("legacy") == 1
        assert read_topic(zk, "legacy") is None


def test_cli_produce_creates_the_topic_and_retries_until_it_has_leaders(
        cluster: dict[int, RunningBroker], zk: KazooClient, tmp_path: Path) -> None:
    """``rill produce --acks all`` to a missing topic: its first batch creates the topic and is refused
    (LeaderNotAvailable, nothing written); the CLI asks for metadata again and sends it where the leaders are,
    so one run delivers every line exactly once."""
    from rill.client.cli.main import main

    lines = [f"line-{i}" for i in range(30)]
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"{line}\n" for line in lines))
    assert main(["produce", "--broker", cluster[1].address, "--topic", TOPIC, "--acks", "all", "--batch-size", "7",
                 "--file", str(source)]) == 0
    assert_replicated(cluster, zk, 2)
    assert sorted(consume(",".join(b.address for b in cluster.values()), len(lines))) == sorted(
        line.encode() for line in lines)


def test_cli_create_with_factor_one_makes_a_kafka07_topic_where_the_default_is_three(
        cluster: dict[int, RunningBroker], zk: KazooClient, capsys: pytest.CaptureFixture[str]) -> None:
    """An explicit ``--replication-factor 1`` goes through Admin CreateTopic, which can say 1: a 0.7 topic on the
    broker asked, not one of the default factor (CREATE_TOPIC carries no factor)."""
    from rill.client.cli.main import main

    assert main(["topics", "create", "--broker", cluster[2].address, "--topic", "local", "--partitions", "2",
                 "--replication-factor", "1"]) == 0
    assert capsys.readouterr().out == "Created topic local with 2 partitions.\n"
    assert cluster[2].broker.logs.topics().get("local") == 2
    assert read_topic(zk, "local") is None
