"""A replicated cluster of its own for benchmarks: a ZooKeeper and N ``rill-broker`` processes.

``rill perf replication`` and ``rill perf failover`` measure what brokers do to each
other (followers fetching, the controller electing, a broker dying), so they start the
whole cluster themselves: a ZooKeeper from Debian's jar (or the one ``--zookeeper``
names, under a chroot of the run's own), and brokers 1..N as child processes
(rill.client.cli.spawned_broker), each on a data directory of its own. Topics are
created and described through the Admin gRPC service, as ``rill topics`` does. Every
process is stopped by the PID this module started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from rill.client.cli.common import CliError
from rill.client.cli.spawned_broker import SpawnedBroker
from rill.client.cli.spawned_zookeeper import ZkServer
from rill.client.grpc_client import AdminClient, error_name
from rill.client.protocol import requests as rq
from rill.v1 import admin_pb2 as apb

POLL_S = 0.02


class SpawnedCluster:
    """ZooKeeper and brokers ``1..brokers`` under ``work``; ``settings`` go to every broker (``--set``)."""

    def __init__(self, work: str, brokers: int, settings: dict[str, Any], *, zookeeper: str | None = None) -> None:
        self.work = work
        self.settings = dict(settings)
        self._own_zk: ZkServer | None = None
        self._zk_given = zookeeper
        self.zookeeper = ""
        self.brokers = {i: SpawnedBroker(os.path.join(work, f"broker-{i}"), self.settings, broker_id=i)
                        for i in range(1, brokers + 1)}

    def start(self) -> None:
        if self._zk_given is None:
            self._own_zk = ZkServer(Path(self.work, "zookeeper"))
            self._own_zk.__enter__()
            self.zookeeper = self._own_zk.address
        else:  # a chroot of this run's own, so that runs never see each other's brokers or topics
            self.zookeeper = f"{self._zk_given}/rill-perf-{time.time_ns()}"
        for broker in self.brokers.values():
            broker.zookeeper = self.zookeeper
            broker.start()

    def stop(self) -> None:
        """Stop every broker still running (SIGTERM, then kill -9 when that fails) and our ZooKeeper."""
        for broker in self.brokers.values():
            if broker.proc is not None and broker.proc.poll() is None:
                try:
                    broker.stop(timeout=60)
                except Exception:  # a benchmark's last resort: never leave a process behind
                    broker.kill9()
        if self._own_zk is not None:
            self._own_zk.stop()
            self._own_zk = None

    def live(self) -> list[SpawnedBroker]:
        return [b for b in self.brokers.values() if b.proc is not None and b.proc.poll() is None]

    def any_live(self, *, but: int | None = None) -> SpawnedBroker:
        for broker in self.live():
            if broker.broker_id != but:
                return broker
        raise CliError("no broker of the cluster is running")

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.live())

    def admin(self, *, but: int | None = None, timeout: float = 30.0) -> AdminClient:
        return AdminClient(f"127.0.0.1:{self.any_live(but=but).grpc_port}", timeout)

    def create_topic(self, topic: str, partitions: int, replication_factor: int, *, timeout: float = 120.0) -> float:
        """Create ``topic`` and wait until every partition has a leader and a full ISR; return the seconds."""
        started = time.monotonic()
        with self.admin() as admin:
            response = admin.create_topic(topic, partitions, replication_factor)
            if response.error_code:
                raise CliError(f"creating {topic}: {error_name(response.error_code)}: {response.error_message}")
        self.wait_in_sync(topic, timeout=timeout)
        return time.monotonic() - started

    def describe(self, topic: str, *, but: int | None = None) -> list[apb.PartitionDescription]:
        with self.admin(but=but) as admin:
            described = admin.describe_topics([topic]).topics
        if not described or described[0].error_code:
            return []
        return list(described[0].partitions)

    def wait_in_sync(self, topic: str, *, timeout: float = 120.0, but: int | None = None) -> None:
        """Until every partition of ``topic`` has a serving leader and every replica in its ISR."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.describe(topic, but=but)
            if rows and all(p.leader != rq.NO_LEADER and p.end_offset >= 0 and not p.under_replicated for p in rows):
                return
            if time.monotonic() > deadline:
                lagging = [p.partition for p in rows if p.leader == rq.NO_LEADER or p.under_replicated]
                raise CliError(f"{topic}: partitions {lagging[:20]} not led and in sync after {timeout:g} s")
            time.sleep(POLL_S * 5)

    def leaders(self, topic: str, *, but: int | None = None) -> dict[int, int]:
        """Partition -> leader broker id, as DescribeTopics answers (NO_LEADER when it has none)."""
        return {p.partition: p.leader for p in self.describe(topic, but=but)}

    def controller_id(self) -> int:
        """The broker that logged winning the controller's election last (-1: none has)."""
        best, who = "", -1
        for broker in self.live():
            for event in broker.events("controller.context_loaded"):
                if str(event.get("timestamp", "")) >= best:
                    best, who = str(event.get("timestamp", "")), -1 if broker.broker_id is None else broker.broker_id
        return who


def cleanup(path: str) -> None:
    """Remove a benchmark's work directory (its data, logs and ZooKeeper) when it made one."""
    with contextlib.suppress(OSError):
        shutil.rmtree(path)


__all__ = ["SpawnedCluster", "cleanup"]
