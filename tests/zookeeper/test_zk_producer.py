"""The ZooKeeper-aware producer (seed 004, "Producer" and "Creating New Topics")."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from rill.client.producer import Producer
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer
from rill.client.zookeeper.producer_metadata import ZkRegistrySource, ZkTopicLayout
from rill.client.zookeeper.registry import BrokerRegistration, ClusterSnapshot
from tests.zookeeper.test_broker_registration import wait_for, zk_broker


def snapshot(brokers: list[int], topics: dict[str, dict[int, int]]) -> ClusterSnapshot:
    return ClusterSnapshot({b: BrokerRegistration(b, f"h-{b}", "127.0.0.1", 9000 + b) for b in brokers}, topics)


def test_layout_sends_a_new_topic_to_partition_0_of_every_broker_and_keeps_numbers() -> None:
    layout = ZkTopicLayout()
    t = layout.metadata(snapshot([1, 2], {}), ["new"]).topics[0]
    assert (t.leaders, t.broker_partitions) == ((1, 2), (0, 0))
    # broker 2 created it with 3 partitions and lists them: added after what was there
    t = layout.metadata(snapshot([1, 2], {"new": {2: 3}}), ["new"]).topics[0]
    assert (t.leaders, t.broker_partitions) == ((1, 2, 2, 2), (0, 0, 1, 2))
    assert layout.pair("new", 3) == (2, 2)
    # broker 1 goes away: its partition keeps its number, without a leader
    t = layout.metadata(snapshot([2], {"new": {2: 3}}), ["new"]).topics[0]
    assert t.leaders == (rq.NO_LEADER, 2, 2, 2)
    # no live broker at all: the topic is left out (its messages wait)
    assert layout.metadata(snapshot([], {}), ["new"]).topics == []


def test_a_listed_topic_follows_kafka_07_order() -> None:
    t = ZkTopicLayout().metadata(snapshot([0, 1], {"dogs": {0: 2, 1: 11}}), ["dogs"]).topics[0]
    pairs = list(zip(t.leaders, t.broker_partitions))
    assert pairs[:3] == [(0, 0), (0, 1), (1, 0)]
    assert pairs.index((1, 10)) < pairs.index((1, 2))  # "1-10" sorts before "1-2", as 0.7 sorts


def messages_everywhere(brokers: list, topic: str) -> list[bytes]:
    found: list[bytes] = []
    for b in brokers:
        with SimpleConsumer(b.host, b.port, timeout=5) as c:
            for p in range(b.broker.logs.topics().get(topic, 0)):  # the broker's own partitions
                found.extend(m.value for m in c.fetch(topic, p, 0))
    return found


def test_producer_finds_brokers_in_zookeeper_and_creates_topics_on_each(tmp_path: Path, zk_connect: str) -> None:
    with ExitStack() as stack:
        b1 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1, num_partitions=2))
        b2 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2, num_partitions=3))
        with Producer(zookeeper_connect=zk_connect, linger_ms=1) as producer:
            values = [f"v{i}".encode() for i in range(60)]
            for v in values:
                assert producer.send("fresh", v).get_error(timeout=10) is None
            # the new topic went to partition 0 of both brokers, which created it with their own counts
            wait_for(lambda: b1.broker.logs.topics().get("fresh") == 2 and b2.broker.logs.topics().get("fresh") == 3,
                     what="topic created on both brokers")
            deadline = time.monotonic() + 10
            more = [f"w{i}".encode() for i in range(200)]
            responses = [producer.send("fresh", v) for v in more]
            for r in responses:
                assert r.get_error(timeout=10) is None
            assert time.monotonic() < deadline
            # once listed, every partition of every broker receives messages
            used = {r.partition for r in responses}
            assert used == set(range(5)), used
        assert sorted(messages_everywhere([b1, b2], "fresh")) == sorted(values + more)


def test_producer_keeps_sending_when_a_broker_goes(tmp_path: Path, zk_connect: str) -> None:
    with ExitStack() as stack:
        b1 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1, num_partitions=2))
        b2 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2, num_partitions=2))
        for b in (b1, b2):
            b.broker.logs.create_topic("steady", 2)
        with Producer(zookeeper_connect=zk_connect, linger_ms=1, retries=5) as producer:
            assert producer.send("steady", b"before").get_error(timeout=10) is None
            b2.close()
            source = producer._metadata_source
            assert isinstance(source, ZkRegistrySource)
            layout = source.layout

            def only_broker_1_used() -> bool:
                # the send thread applies a registry change after the registry sees it: a message
                # sent in between may be placed on broker 2's partition (and wait for it), as in Kafka
                state = producer._acc.topics.get("steady")
                available = state.available if state is not None else None
                return available is not None and {layout.pair("steady", p)[0] for p in available} == {1}
            wait_for(only_broker_1_used, what="the producer stopped using broker 2's partitions")
            after = [producer.send("steady", f"a{i}".encode()) for i in range(30)]
            for r in after:
                assert r.get_error(timeout=15) is None
            # every message went to one of broker 1's partitions (numbered in the order the producer saw them)
            assert {layout.pair("steady", r.partition)[0] for r in after} == {1}  # type: ignore[index, arg-type]
        with SimpleConsumer(b1.host, b1.port, timeout=5) as c:
            on_b1 = [m.value for p in range(2) for m in c.fetch("steady", p, 0)]
        assert [f"a{i}".encode() for i in range(30)] == [v for v in on_b1 if v.startswith(b"a")] or \
            sorted(f"a{i}".encode() for i in range(30)) == sorted(v for v in on_b1 if v.startswith(b"a"))
