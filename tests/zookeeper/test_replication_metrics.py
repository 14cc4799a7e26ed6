"""Replication figures in a three-broker cluster's /metrics: controller, ISR, under-replicated and
offline partitions, follower lag and leadership changes, compared with what the brokers hold."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.replicated_topics import create_topic
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleProducer
from tests.prometheus_scrape import labelled, scrape_broker, value
from tests.zookeeper.replicated_support import create_replicated, leader_of, replicated_cluster

TOPIC = "metered-replicas"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
def test_replication_metrics_follow_the_cluster(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    with replicated_cluster(tmp_path, zk_connect) as brokers:
        create_replicated(zk, brokers, TOPIC, 2)
        for partition in (0, 1):
            leader = leader_of(brokers, TOPIC, partition)
            assert leader is not None
            with SimpleProducer(leader.host, leader.port, acks=rq.Acks.ALL) as producer:
                for i in range(20):
                    producer.send(TOPIC, [f"m{partition}-{i}".encode()], partition)

        # one controller; each partition's leader reports 3 replicas, all in sync; followers report their lag
        samples = {i: scrape_broker(b) for i, b in brokers.items()}
        assert sorted(value(s, "rill_controller_active") for s in samples.values()) == [0, 0, 1]
        for partition in (0, 1):
            leader = leader_of(brokers, TOPIC, partition)
            assert leader is not None
            key = {"topic": TOPIC, "partition": str(partition)}
            mine = samples[leader.broker_id]
            assert value(mine, "rill_partition_isr_size", **key) == 3
            assert value(mine, "rill_partition_replicas", **key) == 3
            assert value(mine, "rill_partition_high_watermark_bytes", **key) == \
                leader.broker.replicas.replicas[(TOPIC, partition)].high_watermark
            assert value(mine, "rill_leadership_changes_total") >= 1
            followers = [i for i in brokers if i != leader.broker_id]
            wait_for(lambda: all(value(scrape_broker(brokers[i]), "rill_replica_lag_bytes", **key) == 0 for i in followers),
                     "the followers to report no lag")
        assert sum(value(s, "rill_under_replicated_partitions") for s in samples.values()) == 0
        total_led = sum(value(s, "rill_leader_partitions") for s in samples.values())
        assert total_led == sum(1 for b in brokers.values() for r in b.broker.replicas.replicas.values()
                                if r.leader_state is not None)

        # a follower stops: the leaders of both partitions shrink their ISR and report under-replication
        controller = next(i for i, s in samples.items() if value(s, "rill_controller_active") == 1)
        victim = next(i for i in brokers if i != controller)  # a leader or not: either way an ISR shrinks
        create_topic(zk, "metered-solo", 1, 1, None, [victim])  # offline once its broker is gone
        wait_for(lambda: brokers[victim].broker.replicas.replicas.get(("metered-solo", 0)) is not None,
                 "the single-replica topic on the victim")
        offline_before = value(scrape_broker(brokers[controller]), "rill_offline_partitions")
        stopped = brokers.pop(victim)
        stopped.close()

        def shrunk() -> bool:
            for partition in (0, 1):
                leader = leader_of(brokers, TOPIC, partition)
                if leader is None:
                    return False
                s = scrape_broker(leader)
                if value(s, "rill_partition_isr_size", topic=TOPIC, partition=str(partition)) != 2:
                    return False
                if value(s, "rill_under_replicated_partitions") < 1:
                    return False
            return True
        wait_for(shrunk, "the ISRs to shrink to the two live brokers")
        wait_for(lambda: value(scrape_broker(brokers[controller]), "rill_offline_partitions") > offline_before,
                 "the controller to count the single-replica partition offline")
        offline = labelled(scrape_broker(brokers[controller]), "rill_offline_partitions")
        assert list(offline.values())[0] >= 1
