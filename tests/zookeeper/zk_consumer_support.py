"""Helpers for the ZooKeeper consumer tests: brokers in ZooKeeper, owner snapshots, poll loops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.broker.testing import RunningBroker
from rill.client.simple import SimpleProducer
from rill.client.zookeeper import ZkConsumer, ZkRecord
from tests.zookeeper.test_broker_registration import wait_for, zk_broker

# short timings for tests (0.7's defaults are 2000 ms backoff and a 6000 ms session)
FAST: dict[str, Any] = {"rebalance_backoff_ms": 200, "zk_sessiontimeout_ms": 2000, "autooffset_reset": "smallest",
                        "fetch_wait_max_ms": 50, "autocommit_interval_ms": 500}


@contextmanager
def zk_brokers(tmp_path: Path, zk_connect: str, topics: Mapping[str, int], ids: Sequence[int] = (0, 1),
               zk: KazooClient | None = None) -> Iterator[list[RunningBroker]]:
    """Brokers ``ids`` registered in ZooKeeper, each holding ``topics`` (name -> partitions)."""
    with ExitStack() as stack:
        brokers = [stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=i)) for i in ids]
        for b in brokers:
            for topic, count in topics.items():
                b.broker.logs.create_topic(topic, count)
        if zk is not None:
            for i in ids:
                for topic in topics:
                    wait_for(lambda: zk.exists(f"/brokers/topics/{topic}/{i}") is not None,
                             what=f"/brokers/topics/{topic}/{i}")
        yield brokers


def owners(zk: KazooClient, group: str, topic: str) -> dict[str, str]:
    """``"broker-partition"`` -> the owner node's value, for one topic of the group."""
    base = f"/consumers/{group}/owners/{topic}"
    try:
        children = zk.get_children(base)
    except NoNodeError:
        return {}
    out: dict[str, str] = {}
    for child in children:
        try:
            out[child] = zk.get(f"{base}/{child}")[0].decode()
        except NoNodeError:
            pass
    return out


def owner_nodes(zk: KazooClient, group: str) -> dict[str, tuple[str, int]]:
    """Every owner node of the group: ``"topic/broker-partition"`` -> (value, ephemeral owner session)."""
    base = f"/consumers/{group}/owners"
    out: dict[str, tuple[str, int]] = {}
    try:
        topics = zk.get_children(base)
    except NoNodeError:
        return out
    for topic in topics:
        try:
            children = zk.get_children(f"{base}/{topic}")
        except NoNodeError:
            continue
        for child in children:
            try:
                data, stat = zk.get(f"{base}/{topic}/{child}")
            except NoNodeError:
                continue
            out[f"{topic}/{child}"] = (data.decode(), stat.ephemeralOwner)
    return out


def produce(brokers: Sequence[RunningBroker], topic: str, partitions: int, per_partition: int,
            tag: str = "m") -> set[bytes]:
    """Send ``per_partition`` numbered messages to every partition of every broker; returns the values."""
    sent: set[bytes] = set()
    for b in brokers:
        with SimpleProducer(b.host, b.port) as producer:
            for p in range(partitions):
                values = [f"{tag}-{b.broker.config['broker.id']}-{p}-{i}".encode() for i in range(per_partition)]
                producer.send(topic, values, p)
                sent.update(values)
    return sent


class PollLoop:
    """Polls a consumer on its own thread, keeping every record it returns."""

    def __init__(self, consumer: ZkConsumer) -> None:
        self.consumer = consumer
        self.records: list[ZkRecord] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.records.extend(self.consumer.poll(0.05))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def values(records: Sequence[ZkRecord]) -> list[bytes]:
    return [r.value for r in records]


def settle(seconds: float) -> None:
    time.sleep(seconds)
