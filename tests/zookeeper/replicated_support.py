"""Helpers of the client tests on a replicated topic: three in-process brokers on a real ZooKeeper.

The cluster is the one of test_replication_cluster.py (short session, fetch and lag
timings, so a leader's stop hands over within a second or two); the topic is created
the way Admin CreateTopic does it (``replicated_topics.create_topic``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from rill.broker.cluster.controlled_shutdown import request_controlled_shutdown
from rill.broker.cluster.replica_control_servicer import ReplicaControlClient
from rill.broker.cluster.replicated_topics import create_topic
from rill.broker.replication.replica import Role
from rill.broker.testing import RunningBroker, running_broker
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.zookeeper.test_broker_registration import wait_for

Brokers = dict[int, RunningBroker]


CLUSTER_SETTINGS: dict[str, Any] = {"zookeeper_session_timeout_ms": 4000, "replica_fetch_wait_max_ms": 200,
                                    "replica_fetch_backoff_ms": 100, "controlled_shutdown_retry_backoff_ms": 200,
                                    "replica_lag_time_max_ms": 3000}


def cluster_broker(tmp_path: Path, zk_connect: str, broker_id: int,
                   **overrides: Any) -> contextlib.AbstractContextManager[RunningBroker]:
    """Broker ``broker_id`` of the cluster (data in ``tmp_path/data-<id>``: starting it again restarts it)."""
    return running_broker(tmp_path / f"data-{broker_id}", broker_id=broker_id, zookeeper_connect=zk_connect,
                          advertised_host_name="127.0.0.1", **{**CLUSTER_SETTINGS, **overrides})


@contextlib.contextmanager
def replicated_cluster(tmp_path: Path, zk_connect: str, **overrides: Any) -> Iterator[Brokers]:
    """Brokers 1, 2 and 3 on ``zk_connect``, stopped (if still running) on exit."""
    with contextlib.ExitStack() as stack:
        yield {i: stack.enter_context(cluster_broker(tmp_path, zk_connect, i, **overrides)) for i in (1, 2, 3)}


def leader_of(brokers: Brokers, topic: str, partition: int) -> RunningBroker | None:
    """The running broker whose replica of ``topic``-``partition`` leads, if any."""
    for b in brokers.values():
        replica = b.broker.replicas.replicas.get((topic, partition))
        if replica is not None and replica.role is Role.LEADER:
            return b
    return None


def create_replicated(zk: KazooClient, brokers: Brokers, topic: str, partitions: int) -> None:
    """Create ``topic`` with factor 3 and wait until every broker's METADATA names each partition's leader."""
    create_topic(zk, topic, partitions, 3, None, list(brokers))
    wait_leaders(brokers, topic, partitions)


def wait_leaders(brokers: Brokers, topic: str, partitions: int) -> dict[int, RunningBroker]:
    """Wait for a leader of every partition, known to every running broker's METADATA; partition -> leader."""
    wait_for(lambda: all(leader_of(brokers, topic, p) for p in range(partitions)), timeout=20,
             what=f"a leader for every partition of {topic}")
    leaders = {p: leader_of(brokers, topic, p) for p in range(partitions)}
    expected = tuple(leaders[p].broker_id for p in range(partitions))  # type: ignore[union-attr]

    def described(b: RunningBroker) -> bool:
        with SimpleConsumer(b.host, b.port, timeout=5) as consumer:
            return consumer.metadata([topic]).topics[0].leaders == expected

    for b in brokers.values():
        wait_for(lambda b=b: described(b), timeout=20, what=f"broker {b.broker_id}'s metadata of {topic}")
    return {p: b for p, b in leaders.items() if b is not None}


def move_leadership(brokers: Brokers, b: RunningBroker, topic: str, partitions: int) -> None:
    """Move every leadership off ``b``, which keeps serving as a follower (a controlled shutdown's first
    half): a read or produce there is NotLeaderForPartition. Waits until the brokers' METADATA says so."""
    assert b.broker.zookeeper is not None and b.broker.registry is not None
    client = ReplicaControlClient()
    try:
        assert request_controlled_shutdown(b.broker.zookeeper.zk, b.broker.registry, client, b.broker_id,
                                           retries=5, backoff_s=0.2, timeout_s=5)
    finally:
        client.close()
    wait_leaders(brokers, topic, partitions)
    assert all(leader_of(brokers, topic, p) is not b for p in range(partitions))


def stop_broker(brokers: Brokers, b: RunningBroker, topic: str, partitions: int) -> Brokers:
    """Stop ``b`` (a controlled shutdown unless its config disables it); the running brokers, once every
    partition has a leader among them again."""
    b.close()
    remaining = {i: other for i, other in brokers.items() if other is not b}
    wait_leaders(remaining, topic, partitions)
    return remaining


def produce_acked(brokers: Brokers, topic: str, partition: int, values: Sequence[bytes]) -> list[tuple[int, bytes]]:
    """Send ``values`` one by one with acks=all to the partition's leader; their (offset, value)."""
    leader = leader_of(brokers, topic, partition)
    assert leader is not None, f"{topic}-{partition} has no leader"
    acked = []
    with SimpleProducer(leader.host, leader.port, acks=rq.Acks.ALL) as producer:
        for value in values:
            acked.append((producer.send(topic, [value], partition).first_offset, value))
    return acked


def hold_high_watermark(brokers: Brokers, topic: str, partition: int) -> RunningBroker:
    """Stop the followers of ``topic``-``partition`` fetching, so the leader's high watermark stays where it is
    (with a long ``replica.lag.time.max.ms`` they stay in the ISR); returns the leader."""
    leader = leader_of(brokers, topic, partition)
    assert leader is not None
    for b in brokers.values():
        if b is not leader:
            b.broker.replicas.fetchers.remove([b.broker.replicas.replicas[(topic, partition)]])
    return leader


def latest(b: RunningBroker, topic: str, partition: int) -> int:
    """OFFSETS latest on ``b`` (the high watermark, on a leader)."""
    with SimpleConsumer(b.host, b.port, timeout=5) as consumer:
        return consumer.latest_offset(topic, partition)


def log_end(b: RunningBroker, topic: str, partition: int) -> int:
    """The end of ``b``'s own log of the partition (past the high watermark on a leader with stalled followers)."""
    return int(b.broker.logs.get(topic, partition).end_offset)
