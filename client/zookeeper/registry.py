"""A live, watched view of the brokers' registry in ZooKeeper (seed 000 5.6, seed 004).

Brokers publish (rill.broker.cluster.registration writes them):

    /brokers/ids/[broker_id]        -> "creator:host:port"
    /brokers/topics/[topic]/[id]    -> number of partitions of the topic on that broker
    /rill/brokers/[broker_id]       -> {"host", "port", "grpc_port", "endpoints"} (rill's own: the gRPC
                                       port (the TLS one for a broker without plaintext gRPC),
                                       and each listener's advertised address by its name)
    /rill/topics/[topic]            -> {"partitions": [[broker_id, partition], ...]} (rill's own)

The last is the topic's partition map for rill's native clients: partition ``i`` of
the topic is the broker partition at index ``i``. Brokers only ever append to it
(rill.broker.partition_map), so a partition's number never changes.

A client finds a broker on its own listener (``security.protocol``) with
:meth:`BrokerRegistration.address_for`: ``/brokers/ids`` names one address only (the
PLAINTEXT listener's, when the broker has one).

``RegistryView`` reads all of it into an immutable ``ClusterSnapshot`` and keeps it
current: every read sets a one-shot watch, and any watch firing (or the session
reconnecting) wakes one refresher thread that reads everything again, so a burst of
changes costs one re-read. Listeners get each new snapshot that differs from the
last, on the refresher thread; they must not block for long.

Partitions are named the 0.7 way, ``"brokerid-partition"``, and ``broker_partitions``
sorts them exactly as Kafka 0.7's ZkUtils.getPartitionsForTopics does: as strings
(so ``"1-10"`` sorts before ``"1-2"``). Every 0.7 consumer in a group must use the
same order, or two of them can claim one partition.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from rill.client.security.client_security import ClientSecurity
from rill.client.zookeeper.wake_loop import run_when_woken

log = structlog.get_logger(__name__)

IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
RILL_BROKERS_PATH = "/rill/brokers"
RILL_TOPICS_PATH = "/rill/topics"


class BrokerRegistration(NamedTuple):
    broker_id: int
    creator: str
    host: str
    port: int
    grpc_port: int = 0  # from /rill/brokers/[id]; 0 for a broker that is not rill (or not yet listed)
    endpoints: tuple[tuple[str, str, int, int], ...] = ()
    """(listener name, host, data port, gRPC port) per listener, from /rill/brokers/[id]."""
    grpc_tls_port: int = -1
    """The TLS gRPC port (``grpc.ssl.port``), from /rill/brokers/[id]; -1: none, or not listed."""

    def address_for(self, listener: str) -> tuple[str, int, int]:
        """Where a client of ``listener`` reaches this broker: (host, data port, gRPC port); its
        registered address if it has no such listener."""
        for name, host, port, grpc_port in self.endpoints:
            if name == listener:
                return host, port, grpc_port
        return self.host, self.port, self.grpc_port

    def grpc_address(self, listener: str | None = None) -> str:
        """``"host:port"`` where another broker calls this one's gRPC services: the gRPC port advertised
        for ``listener`` (the inter-broker listener, when brokers call each other over TLS: a TLS
        listener is advertised with the TLS gRPC port), or with None the registered ``host:grpc_port``
        (the plaintext gRPC port, when the broker has one)."""
        host, _, grpc_port = (self.host, self.port, self.grpc_port) if listener is None else self.address_for(listener)
        return f"{host}:{grpc_port}"

    def lists(self, listener: str) -> bool:
        """Whether the broker registered a ``listener`` endpoint (False for one that lists none: a
        Kafka 0.7 broker, or a rill broker not yet in ``/rill/brokers``)."""
        return any(name == listener for name, *_ in self.endpoints)


def client_listener(security: ClientSecurity | None) -> str:
    """The listener a client with ``security`` connects to: its ``security.protocol``, PLAINTEXT without."""
    return security.protocol if security is not None else "PLAINTEXT"


def parse_broker(broker_id: int, value: bytes) -> BrokerRegistration:
    """``b"creator:host:port"`` -> registration; split as seed 004 says (host is the second field).

    The port is the last field, so an IPv6 host (with colons) still parses.
    """
    text = value.decode("utf-8", errors="replace")
    creator, sep, rest = text.partition(":")
    host, sep2, port = rest.rpartition(":")
    if not sep or not sep2 or not port.isdigit():
        raise ValueError(f"broker {broker_id}: registration {text!r} is not creator:host:port")
    return BrokerRegistration(broker_id, creator, host, int(port))


def partition_name(broker_id: int, partition: int) -> str:
    """The 0.7 name of a broker partition, as used in owner and offset paths: ``"2-0"``."""
    return f"{broker_id}-{partition}"


def parse_partition_name(name: str) -> tuple[int, int]:
    """``"2-0"`` -> (2, 0); ValueError otherwise."""
    broker, sep, partition = name.partition("-")
    if not sep or not broker.isdigit() or not partition.isdigit():
        raise ValueError(f"{name!r} is not a broker-partition name")
    return int(broker), int(partition)


def parse_partition_map(value: bytes) -> tuple[tuple[int, int], ...]:
    """``{"partitions": [[broker, partition], ...]}`` -> ((broker, partition), ...); ValueError when malformed."""
    try:
        entries = json.loads(value)["partitions"]
        parsed = tuple((int(b), int(p)) for b, p in entries)
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ValueError(f"not a partition map: {value[:80]!r}") from exc
    if len(set(parsed)) != len(parsed) or any(b < 0 or p < 0 for b, p in parsed):
        raise ValueError(f"partition map lists a partition twice or a negative id: {value[:80]!r}")
    return parsed


def is_replicated_topic_value(data: bytes) -> bool:
    """True when a topic node's bytes are meant as a replicated topic, not a 0.7 partition map.

    That is: a JSON object with a ``"version"`` or ``"replicas"`` key (a 0.7 map has
    neither). Only the kind is decided here: a value this accepts may still be
    malformed, which :meth:`TopicReplicas.decode` reports. Never raises; anything that
    is not a JSON object is False.
    """
    try:
        value = json.loads(data)
    except (ValueError, TypeError, RecursionError):
        return False
    return isinstance(value, dict) and ("version" in value or "replicas" in value)


def encode_partition_map(entries: Sequence[tuple[int, int]]) -> bytes:
    return json.dumps({"partitions": [[b, p] for b, p in entries]}, separators=(",", ":")).encode()


@dataclass(frozen=True)
class ClusterSnapshot:
    """The registry at one moment: live brokers, and per topic the partition count on each broker."""

    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    topics: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    partition_maps: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    replicated_topics: frozenset[str] = frozenset()
    """Names of replicated topics (/rill/topics/[topic] holding replica lists, not a 0.7 map)."""
    replicated_leaders: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Replicated topic -> the leader of each partition (-1: none), from the partitions' state
    nodes. Only a view that watches them fills it in (the ZooKeeper consumer's,
    rill.client.zookeeper.replicated_view); empty otherwise."""

    def broker_partitions(self, topic: str) -> list[str]:
        """Every ``"broker-partition"`` of the topic, sorted as strings (Kafka 0.7's order).

        Lists the topic registry as it stands, including a broker whose id node is gone
        but whose topic node has not yet expired (0.7 did the same).
        """
        names = [partition_name(b, p) for b, count in self.topics.get(topic, {}).items() for p in range(count)]
        return sorted(names)

    def partition_count(self, topic: str, broker_id: int) -> int | None:
        """Partitions the broker lists for the topic; None when it does not list it."""
        return self.topics.get(topic, {}).get(broker_id)


class RegistryView:
    """Keeps a ``ClusterSnapshot`` of ``/brokers`` current with watches; ``start()`` reads it once."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self._snapshot = ClusterSnapshot()
        self._listeners: list[Callable[[ClusterSnapshot], None]] = []
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._loaded = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def add_listener(self, listener: Callable[[ClusterSnapshot], None]) -> None:
        self._listeners.append(listener)

    def start(self, timeout: float = 10.0) -> ClusterSnapshot:
        """Read the registry, start watching; returns the first snapshot."""
        self.zk.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="rill-zk-registry", daemon=True)
        self._thread.start()
        self._wake.set()
        if not self._loaded.wait(timeout):
            raise TimeoutError(f"could not read {TOPICS_PATH} and {IDS_PATH} from ZooKeeper in {timeout:g}s")
        return self._snapshot

    def refresh(self) -> None:
        """Ask for a re-read (never blocks)."""
        self._wake.set()

    def close(self) -> None:
        self._stopping.set()
        self._wake.set()
        self.zk.remove_listener(self._on_state)
        if self._thread is not None and self._thread is not threading.current_thread():
            # a read blocked on an unreachable ZooKeeper ends when the session is closed next
            self._thread.join(timeout=1.0)

    # -- refresher -------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._wake.set()

    def _watch(self, _event: Any) -> None:
        self._wake.set()

    def _run(self) -> None:
        run_when_woken(self._stopping, self._wake, self._refresh, failed="zookeeper.registry_read_failed")

    def _refresh(self) -> None:
        snapshot = self._read()
        self._loaded.set()
        if snapshot != self._snapshot:
            self._snapshot = snapshot
            for listener in list(self._listeners):
                try:
                    listener(snapshot)
                except Exception:
                    log.exception("zookeeper.registry_listener_failed")

    def _read(self) -> ClusterSnapshot:
        brokers: dict[int, BrokerRegistration] = {}
        for child in self._children(IDS_PATH):
            if not child.isdigit():
                continue
            value = self._data(f"{IDS_PATH}/{child}")
            if value is None:
                continue
            try:
                registration = parse_broker(int(child), value)
            except ValueError as exc:
                log.warning("zookeeper.bad_broker_registration", path=f"{IDS_PATH}/{child}", error=str(exc))
                continue
            grpc_port, endpoints, grpc_tls_port = self._rill_registration(int(child))
            brokers[int(child)] = registration._replace(grpc_port=grpc_port, endpoints=endpoints,
                                                        grpc_tls_port=grpc_tls_port)
        topics: dict[str, dict[int, int]] = {}
        for topic in self._children(TOPICS_PATH):
            counts: dict[int, int] = {}
            for child in self._children(f"{TOPICS_PATH}/{topic}"):
                value = self._data(f"{TOPICS_PATH}/{topic}/{child}")
                if value is None or not child.isdigit():
                    continue
                try:
                    counts[int(child)] = int(value.decode())
                except ValueError:
                    log.warning("zookeeper.bad_partition_count", path=f"{TOPICS_PATH}/{topic}/{child}",
                                value=value[:40])
            topics[topic] = dict(sorted(counts.items()))
        maps: dict[str, tuple[tuple[int, int], ...]] = {}
        replicated: set[str] = set()
        for topic in self._children(RILL_TOPICS_PATH):
            value = self._data(f"{RILL_TOPICS_PATH}/{topic}")
            if value is not None and is_replicated_topic_value(value):
                replicated.add(topic)
            elif value is not None:
                try:
                    maps[topic] = parse_partition_map(value)
                except ValueError as exc:
                    log.warning("zookeeper.bad_partition_map", path=f"{RILL_TOPICS_PATH}/{topic}", error=str(exc))
        return ClusterSnapshot(dict(sorted(brokers.items())), dict(sorted(topics.items())), maps, frozenset(replicated))

    def _rill_registration(self, broker_id: int) -> tuple[int, tuple[tuple[str, str, int, int], ...], int]:
        """The gRPC port, listeners' endpoints and TLS gRPC port from ``/rill/brokers/[id]`` ((0, (), -1) when
        missing)."""
        value = self._data(f"{RILL_BROKERS_PATH}/{broker_id}")
        if value is None:
            if self.zk.exists(f"{RILL_BROKERS_PATH}/{broker_id}", watch=self._watch) is not None:
                self._wake.set()  # created since the read: a watch set now would not see it appear
            return 0, (), -1
        try:
            parsed = json.loads(value)
            port = parsed["grpc_port"]
            endpoints = tuple((str(name), str(e["host"]), int(e["port"]), int(e.get("grpc_port", port)))
                              for name, e in sorted(parsed.get("endpoints", {}).items()))
            tls_port = int(parsed.get("grpc_tls_port", -1))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("zookeeper.bad_rill_registration", path=f"{RILL_BROKERS_PATH}/{broker_id}", value=value[:80])
            return 0, (), -1
        return (port if isinstance(port, int) else 0), endpoints, tls_port

    def _children(self, path: str) -> list[str]:
        """Children of ``path`` with a watch; a missing path is empty and watched for creation.

        A path created between the read and the exists watch is read again: that watch
        fires on data changes and deletion only, never for children added later.
        """
        while True:
            try:
                return sorted(self.zk.get_children(path, watch=self._watch))
            except NoNodeError:
                if self.zk.exists(path, watch=self._watch) is None:
                    return []

    def _data(self, path: str) -> bytes | None:
        try:
            data, _ = self.zk.get(path, watch=self._watch)
            return bytes(data)
        except NoNodeError:
            return None
