"""A rill ZkConsumer and an independent model of Kafka 0.7's connector share one group correctly."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.client.zookeeper import ZkConsumer
from tests.zookeeper.kafka07_reference import Kafka07Consumer, reference_split
from tests.zookeeper.test_broker_registration import wait_for
from tests.zookeeper.zk_consumer_support import FAST, owner_nodes, owners, zk_brokers

PARTS = sorted([f"0-{p}" for p in range(5)] + [f"1-{p}" for p in range(4)])  # 9: an uneven split


class Group:
    """The members of group ``g`` in a test: rill's and the 0.7 model's, with their stream counts."""

    def __init__(self, zk_connect: str) -> None:
        self.zk_connect = zk_connect
        self.rill: dict[str, ZkConsumer] = {}
        self.kafka07: dict[str, Kafka07Consumer] = {}
        self.streams: dict[str, int] = {}

    def join_rill(self, name: str, streams: int, pattern: bool = False) -> None:
        self.streams[f"g_{name}"] = streams  # a member before it can own anything
        consumer = ZkConsumer(zookeeper=self.zk_connect, group="g", consumerid=name, **FAST)
        self.rill[consumer.consumer_id] = consumer
        if pattern:
            consumer.subscribe_pattern(whitelist="t", streams=streams)
        else:
            consumer.subscribe({"t": streams})

    def join_kafka07(self, name: str, streams: int) -> None:
        self.streams[f"g_{name}"] = streams
        member = Kafka07Consumer(self.zk_connect, "g", name, {"t": streams}, backoff_s=0.2)
        self.kafka07[member.consumer_id] = member

    def leave(self, consumer_id: str) -> None:
        if consumer_id in self.rill:
            self.rill.pop(consumer_id).close()
        else:
            self.kafka07.pop(consumer_id).close()
        del self.streams[consumer_id]

    def beliefs(self) -> list[tuple[str, str]]:
        """Every (partition, thread) some member believes it owns; duplicates kept."""
        out = [(k.name, thread) for c in self.rill.values() for thread, keys in c.thread_assignment().items()
               for k in keys]
        for member in self.kafka07.values():
            with member.lock:
                out.extend((part, thread) for (_, part), thread in member.owned.items())
        return out

    def expected(self) -> dict[str, str]:
        return reference_split(PARTS, [f"{m}-{i}" for m, n in self.streams.items() for i in range(n)])

    def close(self) -> None:
        for cid in list(self.streams):
            self.leave(cid)


def wait_stable(group: Group, zk: KazooClient) -> None:
    """Every partition owned once, by the thread the 0.7 rule names, in ZooKeeper and in every member's own view."""
    want = group.expected()
    wait_for(lambda: owners(zk, "g", "t") == want, timeout=20, what=f"owners {want}")
    wait_for(lambda: sorted(group.beliefs()) == sorted(want.items()), timeout=20, what="every member agreeing")
    assert len({part for part, _ in group.beliefs()}) == len(PARTS)


@pytest.mark.slow
def test_rill_and_kafka07_members_divide_partitions(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """0.7-model members (2 streams, JSON with spaces) and ZkConsumers join and leave one group: none owned twice, none left out."""
    with zk_brokers(tmp_path, zk_connect, {"t": 5}, ids=(0,), zk=zk), \
            zk_brokers(tmp_path, zk_connect, {"t": 4}, ids=(1,), zk=zk):
        group = Group(zk_connect)
        stop = threading.Event()
        violations: list[str] = []

        def monitor() -> None:
            """Every owner node belongs to a member. Joiners are listed before they can claim and
            leavers unlisted after their nodes are gone, so the members are read first."""
            while not stop.wait(0.02):
                members = list(group.streams)
                for path, (value, _) in owner_nodes(zk, "g").items():
                    if not any(value.startswith(cid + "-") for cid in members):
                        violations.append(f"{path} held by {value}, not a member")
        watcher = threading.Thread(target=monitor, daemon=True)
        try:
            group.join_kafka07("b-kafka07", 2)
            assert zk.get("/consumers/g/ids/g_b-kafka07")[0] == b'{ "t": 2 }'
            wait_stable(group, zk)
            watcher.start()
            group.join_rill("a-rill", 1)
            wait_stable(group, zk)
            group.join_kafka07("d-kafka07", 2)
            group.join_rill("c-rill", 2, pattern=True)
            wait_stable(group, zk)
            group.leave("g_b-kafka07")
            wait_stable(group, zk)
            group.leave("g_a-rill")
            group.join_rill("e-rill", 1)
            wait_stable(group, zk)
            group.leave("g_d-kafka07")
            wait_stable(group, zk)
        finally:
            stop.set()
            if watcher.is_alive():
                watcher.join(5)
            group.close()
        assert violations == []
