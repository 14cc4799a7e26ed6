"""The replication fault tests' cluster with every process in a network namespace of its own.

:func:`net_cluster` builds a :class:`~tests.process.netns.NetLab` with nodes ``zk``,
``b1``-``b3`` and the client namespaces asked for, starts a real ZooKeeper in ``zk``
(listening on that namespace's address) and broker ``i`` in ``b<i>``, creates the
topic, and on the way out heals every link, stops the brokers and ZooKeeper (by their
PIDs) and deletes the namespaces. The test process stays in the root namespace as the
observer: it reads ZooKeeper and the final logs through the bridge and is never cut.

:class:`NsWorkload` is the :class:`~tests.process.replicated_cluster.Workload` with each
thread moved into a client namespace first (``placement``: thread name -> node,
``clients`` otherwise), so a client can be cut off like a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from rill.client.cli.spawned_zookeeper import ZkServer
from tests.process.broker_process import BrokerProcess
from tests.process.netns import NetLab, probe
from tests.process.replicated_cluster import BROKERS, Cluster, Workload
from tests.process.replication_checker import History

ZK_PORT = 2181
NET_SETTINGS: dict[str, object] = {
    "zookeeper.session.timeout.ms": 3000,
    "replica.lag.time.max.ms": 2000,
    "replica.socket.timeout.ms": 1500,       # a follower notices a silent leader after this
    "controller.socket.timeout.ms": 2000,    # a LeaderAndIsr to a silent broker blocks the controller this long
    "controlled.shutdown.max.retries": 1,
}


def node(broker_id: int) -> str:
    return f"b{broker_id}"


class NetCluster(Cluster):
    """Brokers 1-3, broker ``i`` in namespace ``b<i>`` of ``lab``, listening on (and advertising) its address."""

    def __init__(self, tmp_path: Path, lab: NetLab, zk_connect: str, zk: KazooClient, **overrides: object) -> None:
        super().__init__(tmp_path, zk_connect, zk, **{**NET_SETTINGS, **overrides})
        self.lab = lab

    def host(self, broker_id: int) -> str:
        return self.lab.ip(node(broker_id))

    def process(self, broker_id: int, data_dir: Path, *extra: str) -> BrokerProcess:
        host = self.host(broker_id)
        return BrokerProcess(data_dir, *self.args(broker_id), "--set", f"advertised.host.name={host}", *extra,
                             host=host, prefix=self.lab.prefix(node(broker_id)))

    def events(self, broker_id: int, name: str) -> list[dict[str, object]]:
        """``broker_id``'s log events called ``name`` (of its current process)."""
        return [e for e in self.procs[broker_id].events() if e.get("event") == name]


    def stale(self, topic: str, partitions: int) -> dict[int, list[int]]:
        """Brokers that have not applied the leader epoch ZooKeeper holds for some partition they replicate:
        broker -> those partitions (a LeaderAndIsr that never reached them)."""
        out: dict[int, list[int]] = {}
        for p in range(partitions):
            zk_epoch = self.state(p, topic).leader_epoch
            for b in BROKERS:
                applied = [int(str(e.get("leader_epoch", -1))) for e in self.procs[b].events()
                           if e.get("event") in ("replica.became_leader", "replica.became_follower")
                           and e.get("topic") == topic and e.get("partition") == p]
                if max(applied, default=-1) < zk_epoch:
                    out.setdefault(b, []).append(p)
        return out


def event_time(event: Mapping[str, object]) -> float:
    """A log event's ``timestamp`` in seconds since the epoch (0.0 when it has none)."""
    stamp = event.get("timestamp")
    if not isinstance(stamp, str):
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class NsWorkload(Workload):
    """The workload with each thread in a client namespace: ``placement[thread name]``, else ``clients``."""

    def __init__(self, cluster: NetCluster, history: History, *, placement: Mapping[str, str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(cluster, history, **kwargs)
        self.lab = cluster.lab
        self.placement = dict(placement or {})

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        where = self.placement.get(str(args[0]) if args else "consumer", "clients")

        def entered(*a: object) -> None:
            self.lab.enter(where)
            target(*a)

        super()._spawn(entered, *args)


@contextmanager
def net_cluster(tmp_path: Path, clients: tuple[str, ...] = ("clients",), **overrides: object) -> Iterator[NetCluster]:
    """A started :class:`NetCluster` with the topic created; everything torn down on exit (see the module)."""
    probe()
    with NetLab(["zk", *(node(b) for b in BROKERS), *clients]) as lab:
        server = ZkServer(tmp_path / "zookeeper", host=lab.ip("zk"), port=ZK_PORT, prefix=lab.prefix("zk"))
        zk: KazooClient | None = None
        cluster: NetCluster | None = None
        try:
            server.start()
            server.wait_ready(60)
            connect = server.address  # a ZooKeeper of this test's own: no chroot needed
            zk = KazooClient(hosts=connect, timeout=10)
            zk.start(timeout=20)
            cluster = NetCluster(tmp_path, lab, connect, zk, **overrides)
            cluster.start_all()
            cluster.create()
            yield cluster
        finally:
            lab.heal_all()
            if cluster is not None:
                cluster.stop()
            if zk is not None:
                zk.stop()
                zk.close()
            server.stop()
