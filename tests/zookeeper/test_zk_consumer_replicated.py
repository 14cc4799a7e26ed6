"""The ZooKeeper consumer on a replicated topic (factor 3 on three brokers on a real ZooKeeper).

A replicated topic is not in 0.7's layout; the consumer finds it in rill's (``/rill/topics``,
each partition's state naming its leader), names its partitions by id as Kafka 0.8's
ZooKeeper consumer does (``/consumers/[group]/owners/[topic]/0``), fetches each from its
leader, receives only committed messages, and moves its fetches when the leader changes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from kazoo.client import KazooClient

from rill.client.simple import SimpleProducer
from rill.client.zookeeper import PartitionKey, ZkConsumer
from tests.zookeeper.replicated_support import (Brokers, create_replicated, hold_high_watermark, leader_of,
                                                move_leadership, produce_acked, replicated_cluster, stop_broker)
from tests.zookeeper.test_broker_registration import wait_for
from tests.zookeeper.zk_consumer_support import FAST, PollLoop, owners, values

TOPIC = "orders"


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[Brokers]:
    with replicated_cluster(tmp_path, zk_connect) as cluster:
        yield cluster


def produce_all(brokers: Brokers, partitions: int, per_partition: int, tag: str) -> list[bytes]:
    acked = []
    for p in range(partitions):
        acked += [v for _, v in produce_acked(brokers, TOPIC, p, [f"{tag}-{p}-{i}".encode()
                                                                   for i in range(per_partition)])]
    return acked


def test_consumes_a_replicated_topic_from_its_leaders(brokers: Brokers, zk: KazooClient, zk_connect: str) -> None:
    """Every acknowledged message is delivered once, in offset order per partition, under partition-id owner and
    offset nodes, with no fetch refused by a broker that does not lead."""
    create_replicated(zk, brokers, TOPIC, 3)
    acked = produce_all(brokers, 3, 20, "a")
    with structlog.testing.capture_logs() as events, \
            ZkConsumer(zookeeper=zk_connect, group="g", **{**FAST, "autocommit_enable": False}) as consumer:
        consumer.subscribe([TOPIC])
        me = consumer.consumer_id
        assert consumer.assignment() == {PartitionKey(TOPIC, -1, p) for p in range(3)}
        assert owners(zk, "g", TOPIC) == {"0": f"{me}-0", "1": f"{me}-0", "2": f"{me}-0"}
        got = []
        wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) >= len(acked), what="every acknowledged message")
        assert sorted(values(got)) == sorted(acked)
        for p in range(3):
            mine = [r for r in got if r.partition == p]
            assert all(r.broker_id == -1 for r in mine)
            assert [r.offset for r in mine] == sorted(r.offset for r in mine)
        consumer.commit()
        for p in range(3):
            last = max((r for r in got if r.partition == p), key=lambda r: r.offset)
            assert zk.get(f"/consumers/g/offsets/{TOPIC}/{p}")[0] == str(last.next_offset).encode()
    assert not [e for e in events if e["event"] in ("zookeeper_consumer.partition_fetch_error",
                                                    "zookeeper_consumer.fetcher_crashed")]


def test_a_group_splits_partitions_by_id_in_numeric_order(brokers: Brokers, zk: KazooClient, zk_connect: str) -> None:
    """Two members (a whitelist and a static subscription) share twelve partitions by the range rule over the
    partition ids sorted as numbers, as Kafka 0.8 does: 0-5 and 6-11."""
    create_replicated(zk, brokers, TOPIC, 12)
    with ZkConsumer(zookeeper=zk_connect, group="g", consumerid="a", **FAST) as first, \
            ZkConsumer(zookeeper=zk_connect, group="g", consumerid="b", **FAST) as second:
        first.subscribe_pattern(whitelist="ord.*")
        second.subscribe([TOPIC])
        want = {str(p): "g_a-0" if p < 6 else "g_b-0" for p in range(12)}
        wait_for(lambda: owners(zk, "g", TOPIC) == want, what="owners by the range rule")
        wait_for(lambda: {k.partition for k in first.assignment()} == set(range(6)), what="a's share delivered")
        wait_for(lambda: {k.partition for k in second.assignment()} == set(range(6, 12)), what="b's share delivered")


@pytest.mark.parametrize("how", ["moved", "controlled-shutdown", "stopped-without-handover"])
def test_keeps_consuming_across_a_leader_change(tmp_path: Path, zk_connect: str, zk: KazooClient, how: str) -> None:
    """When the leader of partition 0 loses leadership (moved while it serves, a controlled shutdown, or a stop
    without handing over), the consumer fetches from the new leader: every acknowledged message once."""
    handover = how != "stopped-without-handover"
    with replicated_cluster(tmp_path, zk_connect, controlled_shutdown_enable=handover) as brokers:
        create_replicated(zk, brokers, TOPIC, 2)
        acked = produce_all(brokers, 2, 20, "before")
        with ZkConsumer(zookeeper=zk_connect, group="g", **FAST) as consumer:
            consumer.subscribe([TOPIC])
            loop = PollLoop(consumer)
            try:
                wait_for(lambda: len(loop.records) >= len(acked), what="the first messages")
                leader = leader_of(brokers, TOPIC, 0)
                assert leader is not None
                if how == "moved":
                    move_leadership(brokers, leader, TOPIC, 2)
                else:
                    brokers = stop_broker(brokers, leader, TOPIC, 2)
                acked += produce_all(brokers, 2, 20, "after")
                wait_for(lambda: len(loop.records) >= len(acked), timeout=20, what="the messages after the change")
                time.sleep(0.3)  # anything delivered twice would show up by now
            finally:
                loop.stop()
        assert sorted(values(loop.records)) == sorted(acked)


def test_never_delivers_above_the_high_watermark(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """Messages on the leader that its followers have not fetched (above the high watermark) are not delivered."""
    with replicated_cluster(tmp_path, zk_connect, replica_lag_time_max_ms=60_000) as brokers:
        create_replicated(zk, brokers, TOPIC, 1)
        committed = produce_all(brokers, 1, 10, "committed")
        leader = hold_high_watermark(brokers, TOPIC, 0)
        with SimpleProducer(leader.host, leader.port) as producer:  # acks=append: on the leader alone
            producer.send(TOPIC, [f"uncommitted-{i}".encode() for i in range(5)], 0)
        with ZkConsumer(zookeeper=zk_connect, group="g", **FAST) as consumer:
            consumer.subscribe([TOPIC])
            got = []
            wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) >= len(committed), what="committed messages")
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                got.extend(consumer.poll(0.1))
        assert values(got) == committed
