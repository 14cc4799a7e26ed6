"""Preferred leaders on three in-process brokers and a real ZooKeeper: a restarted broker gets its leadership back.

Broker 1 stops with a controlled shutdown (its leaderships move to the others) and starts
again on the same data directory: it follows everything until a preferred election (Admin
ElectLeaders, ``rill topics elect-leaders``, or the controller's automatic rebalance)
makes it lead the partitions it is first in the assignment of.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.partition_states import read_controller, read_states, read_topic
from rill.broker.testing import RunningBroker
from rill.client import Producer
from rill.client.topic_names import GROUPS_TOPIC
from rill.client.cli.main import main
from rill.client.grpc_client import AdminClient
from rill.client.simple import SimpleConsumer
from rill.v1 import coordinator_pb2 as pb
from tests.zookeeper.replicated_support import (Brokers, cluster_broker, create_replicated, leader_of,
                                                replicated_cluster, stop_broker, wait_leaders)
from tests.zookeeper.test_broker_registration import wait_for

TOPIC = "orders"
PARTITIONS = 3


def preferred_partition(zk: KazooClient, broker_id: int) -> int:
    """The partition whose first assigned replica is ``broker_id`` (create_topic gives each broker one of three)."""
    replicas = read_topic(zk, TOPIC)
    assert replicas is not None
    (p,) = [p for p, assigned in enumerate(replicas.replicas) if assigned[0] == broker_id]
    return p


def restart_broker_1(stack: contextlib.ExitStack, tmp_path: Path, zk_connect: str, zk: KazooClient,
                     brokers: Brokers, **overrides: object) -> Brokers:
    """Controlled shutdown of broker 1, then start it again on its data; returns the brokers once it is back in
    every ISR (it then follows every partition)."""
    remaining = stop_broker(brokers, brokers[1], TOPIC, PARTITIONS)
    back = stack.enter_context(cluster_broker(tmp_path, zk_connect, 1, **overrides))
    brokers = {**remaining, 1: back}
    wait_for(lambda: all(1 in s.isr for s, _ in read_states(zk, TOPIC, range(PARTITIONS)).values()), timeout=20,
             what="broker 1 back in every ISR")
    return brokers


def not_controller(zk: KazooClient, brokers: Brokers) -> RunningBroker:
    found = read_controller(zk)
    assert found is not None
    return next(b for i, b in sorted(brokers.items()) if i != found.broker_id)


def test_elect_leaders_gives_a_restarted_broker_its_partitions_back(tmp_path: Path, zk_connect: str, zk: KazooClient,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """After broker 1's restart `rill topics elect-leaders --all-topics`, sent to a broker that is not the
    controller, makes it lead its preferred partition again; asked again, ElectLeaders says it already does."""
    with contextlib.ExitStack() as stack:
        brokers = stack.enter_context(replicated_cluster(tmp_path, zk_connect, auto_leader_rebalance_enable=False))
        create_replicated(zk, brokers, TOPIC, PARTITIONS)
        p1 = preferred_partition(zk, 1)
        brokers = restart_broker_1(stack, tmp_path, zk_connect, zk, brokers, auto_leader_rebalance_enable=False)
        assert leader_of(brokers, TOPIC, p1) is not brokers[1]
        capsys.readouterr()
        asked = not_controller(zk, brokers)
        assert main(["topics", "elect-leaders", "--grpc", asked.grpc_address, "--all-topics"]) == 0
        out = capsys.readouterr().out.splitlines()
        lines = [line for line in out if f" {TOPIC}-" in line]  # --all-topics covers __rill_groups too
        assert lines[p1] == f"Successfully completed leader election (PREFERRED) for partition {TOPIC}-{p1}: leader 1"
        assert [line.startswith("Valid replica already elected") for line in lines[:PARTITIONS]] == [
            p != p1 for p in range(PARTITIONS)]
        groups = sum(f" {GROUPS_TOPIC}-" in line for line in out)
        assert out[-1] == (f"Summary: 1 elected, {2 + groups} already had their preferred leader, 0 failed "
                           f"({3 + groups} partitions).")
        assert wait_leaders(brokers, TOPIC, PARTITIONS)[p1] is brokers[1]
        with AdminClient(asked.grpc_address) as client:
            (again,) = client.elect_leaders([(TOPIC, p1)]).results
        assert (again.partition, again.error_code, again.leader) == (p1, pb.ELECTION_NOT_NEEDED, 1)


@pytest.mark.parametrize("enabled", [True, False])
def test_automatic_rebalance_moves_leadership_back_only_when_enabled(tmp_path: Path, zk_connect: str,
                                                                      zk: KazooClient, enabled: bool) -> None:
    """With auto.leader.rebalance.enable and a short check interval the restarted broker leads its preferred
    partition again by itself; with it disabled leadership stays where the shutdown moved it."""
    settings = {"auto_leader_rebalance_enable": enabled, "leader_imbalance_check_interval_seconds": 0.3}
    with contextlib.ExitStack() as stack:
        brokers = stack.enter_context(replicated_cluster(tmp_path, zk_connect, **settings))
        create_replicated(zk, brokers, TOPIC, PARTITIONS)
        p1 = preferred_partition(zk, 1)
        brokers = restart_broker_1(stack, tmp_path, zk_connect, zk, brokers, **settings)
        if enabled:
            wait_for(lambda: leader_of(brokers, TOPIC, p1) is brokers[1], timeout=10, what="broker 1 leading again")
            assert wait_leaders(brokers, TOPIC, PARTITIONS)[p1] is brokers[1]  # every broker's METADATA says so
        else:
            time.sleep(1.5)  # five check intervals
            assert leader_of(brokers, TOPIC, p1) is not brokers[1]


def test_acks_all_producer_loses_nothing_through_shutdown_restart_and_rebalance(tmp_path: Path, zk_connect: str,
                                                                                 zk: KazooClient) -> None:
    """A retrying acks=all Producer sending all along (controlled shutdown, restart, automatic preferred election)
    has every send acknowledged, and every acknowledged message is on the partition's leader afterwards."""
    settings = {"leader_imbalance_check_interval_seconds": 0.3}
    with contextlib.ExitStack() as stack:
        brokers = stack.enter_context(replicated_cluster(tmp_path, zk_connect, **settings))
        create_replicated(zk, brokers, TOPIC, PARTITIONS)
        p1 = preferred_partition(zk, 1)
        acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        failed: list[BaseException] = []
        stop = threading.Event()
        bootstrap = ",".join(b.address for b in brokers.values())
        sender = threading.Thread(target=produce_until, args=(bootstrap, stop, acked, failed), daemon=True)
        sender.start()
        try:
            wait_for(lambda: all(len(v) >= 5 for v in acked.values()), what="first acknowledgements")
            brokers = restart_broker_1(stack, tmp_path, zk_connect, zk, brokers, **settings)
            wait_for(lambda: leader_of(brokers, TOPIC, p1) is brokers[1], timeout=10, what="broker 1 leading again")
            count = sum(map(len, acked.values()))
            wait_for(lambda: sum(map(len, acked.values())) >= count + 30, what="acknowledgements after the election")
        finally:
            stop.set()
            sender.join(60)
        assert not failed
        for p, values in acked.items():
            leader = leader_of(brokers, TOPIC, p)
            assert leader is not None
            stored = read_all(leader, p)
            assert set(values) <= set(stored), f"partition {p}: {sorted(set(values) - set(stored))[:5]} lost"


def produce_until(bootstrap: str, stop: threading.Event, acked: dict[int, list[bytes]],
                  failed: list[BaseException]) -> None:
    """Send to the partitions in turn, each send waited for, until ``stop``; record what was acknowledged."""
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=100,
                  retry_backoff_ms=50) as producer:
        i = 0
        while not stop.is_set():
            p = i % PARTITIONS
            value = f"m{i}".encode()
            try:
                producer.send(TOPIC, value, partition=p).get_offset(timeout=30)
            except Exception as exc:  # noqa: BLE001 - the test asserts there were none
                failed.append(exc)
                return
            acked[p].append(value)
            i += 1


def read_all(b: RunningBroker, partition: int) -> list[bytes]:
    """Every message of the partition, read from ``b`` (its leader) up to the high watermark."""
    values: list[bytes] = []
    offset = 0
    with SimpleConsumer(b.host, b.port, timeout=10) as consumer:
        while True:
            messages = consumer.fetch(TOPIC, partition, offset, 1 << 20)
            if not messages:
                return values
            values.extend(m.value for m in messages)
            offset = messages[-1].next_offset

