"""The cluster as this broker describes it: brokers, topics and where each partition lives.

Alone (no ``zookeeper.connect``) the cluster is this broker and its own topics: partition
``p`` of a topic is its own partition ``p``. On ZooKeeper the cluster is what the
registry lists (rill.client.zookeeper.registry): the live brokers, and per topic the
partition map that brokers append to (``/rill/topics/[topic]``), in which partition
``p`` is partition ``broker_partitions[p]`` of broker ``leaders[p]``. A partition
whose broker is not alive has no leader (``NO_LEADER``) until it returns; its number
stays.

Both are answered from memory (the registry keeps a snapshot current), so METADATA on
the event loop and the coordinator's catalog never wait for ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from rill.broker.log.manager import LogManager
from rill.client.protocol import requests as rq
from rill.client.security.client_security import ClientSecurity
from rill.client.simple import SimpleConsumer
from rill.client.zookeeper.registry import ClusterSnapshot, RegistryView


class ReplicatedPlacement(Protocol):
    """The leaders of replicated topics (rill.broker.replication.replica_manager.ReplicaManager)."""

    def placement(self, topic: str) -> tuple[int, ...] | None: ...

    def replicated_topics(self) -> list[str]: ...


class Placement:
    """Where partition ``p`` of a topic lives: (leader broker or NO_LEADER, its number on that broker)."""

    __slots__ = ("leaders", "broker_partitions")

    def __init__(self, leaders: tuple[int, ...], broker_partitions: tuple[int, ...]) -> None:
        self.leaders = leaders
        self.broker_partitions = broker_partitions

    def __len__(self) -> int:
        return len(self.leaders)


class ClusterView:
    """Brokers and partition placement, from the local logs or from ZooKeeper's registry."""

    def __init__(self, logs: LogManager, identity: Callable[[], rq.BrokerInfo],
                 registry: RegistryView | None = None) -> None:
        self.logs = logs
        self.identity = identity
        self.registry = registry
        self.replicated: ReplicatedPlacement | None = None
        """Where replicated topics' partitions are led (the replica manager, told by the controller)."""
        self.endpoints: dict[str, tuple[str, int, int]] = {}
        """This broker's advertised (host, data port, gRPC port) per listener name."""
        self.peer_listener: str | None = None  # security.inter.broker.protocol: how this broker reaches the others
        self.peer_security: ClientSecurity | None = None

    def peer_client(self, broker: rq.BrokerInfo, timeout: float) -> SimpleConsumer:
        """A client of another broker's data plane (offsets, time indexes for Admin answers), on the
        inter-broker listener with this broker's own credentials, as its replica fetchers connect."""
        host, port = broker.host, broker.port
        registration = self.registry.snapshot.brokers.get(broker.broker_id) if self.registry is not None else None
        if registration is not None and self.peer_listener is not None:
            host, port, _ = registration.address_for(self.peer_listener)
        return SimpleConsumer(host, port, timeout=timeout, security=self.peer_security)

    def identity_for(self, listener: str) -> rq.BrokerInfo:
        """This broker as METADATA describes it to a client of ``listener``."""
        me = self.identity()
        host, port, grpc_port = self.endpoints.get(listener, (me.host, me.port, me.grpc_port))
        return rq.BrokerInfo(me.broker_id, host, port, grpc_port)

    @property
    def clustered(self) -> bool:
        return self.registry is not None

    def brokers(self, listener: str | None = None) -> list[rq.BrokerInfo]:
        """Live brokers (this one first when alone; sorted by id in a cluster), each at its address for
        ``listener`` (a listener's name: METADATA answers with the addresses of the listener it came in on)."""
        me = self.identity() if listener is None else self.identity_for(listener)
        if self.registry is None:
            return [me]
        brokers = []
        for b in self.registry.snapshot.brokers.values():
            host, port, grpc_port = (b.host, b.port, b.grpc_port) if listener is None else b.address_for(listener)
            brokers.append(rq.BrokerInfo(b.broker_id, host, port, grpc_port))
        if all(b.broker_id != me.broker_id for b in brokers):
            brokers.append(me)  # our own registration is on its way (or being renewed): we are alive
        return sorted(brokers)

    def topic_names(self) -> list[str]:
        names = set(self.logs.topics())
        if self.registry is not None:
            snapshot = self.registry.snapshot
            names.update(snapshot.partition_maps)
        if self.replicated is not None:
            names.update(self.replicated.replicated_topics())
        return sorted(names)

    def placement(self, topic: str) -> Placement | None:
        """Where each partition of ``topic`` lives; None when no broker has it.

        A replicated topic's partition ``p`` is partition ``p`` on every replica; its
        leader is the one the controller named (NO_LEADER while it has none).
        """
        if self.replicated is not None:
            leaders = self.replicated.placement(topic)
            if leaders is not None:
                alive = {b.broker_id for b in self.brokers()}
                return Placement(tuple(b if b in alive else rq.NO_LEADER for b in leaders), tuple(range(len(leaders))))
        local = self.logs.topics().get(topic)
        if self.registry is None:
            if local is None:
                return None
            me = self.identity().broker_id
            return Placement((me,) * local, tuple(range(local)))
        return _cluster_placement(self.registry.snapshot, topic, self.identity().broker_id, local)

    def partition_counts(self) -> Mapping[str, int]:
        """Topic -> number of partitions cluster-wide (the coordinator assigns these)."""
        if self.registry is None:
            return self.logs.topics()
        counts: dict[str, int] = {}
        for name in self.topic_names():
            placed = self.placement(name)
            if placed is not None and len(placed):
                counts[name] = len(placed)
        return counts

    def locate(self, topic: str, partition: int) -> tuple[rq.BrokerInfo | None, int]:
        """(leader broker or None, its number for the partition); KeyError when there is no such partition."""
        placed = self.placement(topic)
        if placed is None or not 0 <= partition < len(placed):
            raise KeyError(f"{topic}-{partition}")
        leader = placed.leaders[partition]
        brokers = {b.broker_id: b for b in self.brokers()}
        return brokers.get(leader), placed.broker_partitions[partition]


def _cluster_placement(snapshot: ClusterSnapshot, topic: str, me: int, local: int | None) -> Placement | None:
    entries = snapshot.partition_maps.get(topic)
    if entries is None:
        if local is None:
            return None
        # created here a moment ago: our registration writes the map next, listing these first
        return Placement((me,) * local, tuple(range(local)))
    listed = dict(snapshot.topics.get(topic, {}))
    if local is not None:
        listed[me] = local  # we know our own partitions before ZooKeeper does
    alive = set(snapshot.brokers) | {me}
    leaders = tuple(b if b in alive and p < listed.get(b, 0) else rq.NO_LEADER for b, p in entries)
    return Placement(leaders, tuple(p for _, p in entries))
