"""Groups of ZooKeeper consumers (Kafka 0.7's, rill's ``ZkConsumer``), read from ZooKeeper: ``rill groups
list|describe --zookeeper HOST:PORT[/chroot]``, as Kafka 0.7's ConsumerOffsetChecker showed them.

Those groups have no coordinator: their members, owners and offsets are nodes (seed 004,
rill.client.zookeeper.consumer_nodes)::

    /consumers/[group]/ids/[consumer id]              -> subscription
    /consumers/[group]/owners/[topic]/[partition]     -> owning thread id ("<consumer id>-<n>")
    /consumers/[group]/offsets/[topic]/[partition]    -> next offset, decimal

A partition is named ``broker-partition`` for a 0.7 topic, by its id for a replicated
topic (Kafka 0.8's naming). The brokers' registry (``/brokers``, ``/rill``) gives each
topic's partitions and where they live; their log end and start are asked of those
brokers (OFFSETS), so the lag is ``END - COMMITTED`` (from the log start when nothing is
committed). Nothing is written: the command only reads.

``describe`` prints, tab-separated::

    Group g: 2 member(s), offsets and owners in ZooKeeper 127.0.0.1:2181/chroot
    TOPIC  PARTITION  COMMITTED  END  LAG_BYTES  OWNER

``list`` prints GROUP, MEMBERS and TOPICS (those with owners or offsets) of every group
under ``/consumers``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError
from rill.client.errors import RillError
from rill.client.security.client_security import ClientSecurity
from rill.client.simple import SimpleConsumer
from rill.client.zookeeper.assignment import Subscription, decode_subscription
from rill.client.zookeeper.consumer_nodes import GroupDirs
from rill.client.zookeeper.registry import ClusterSnapshot, client_listener
from rill.client.zookeeper.replicated_view import (ReplicatedRegistryView, fetch_broker, partition_key,
                                                   topic_partitions)

__all__ = ["MemberRow", "add_zookeeper_argument", "run_describe_zookeeper", "run_list_zookeeper",
           "zookeeper_members"]

CONSUMERS = "/consumers"
SESSION_TIMEOUT_S = 10.0


class PartitionRow(NamedTuple):
    topic: str
    name: str  # "broker-partition" (0.7 topic) or the partition id (replicated topic)
    committed: int | None
    start: int | None  # log start and end, from the partition's broker; None when it cannot tell
    end: int | None
    owner: str | None  # the owning thread id


class MemberRow(NamedTuple):
    consumer_id: str
    host: str
    client_id: str
    assignment: list[tuple[str, str]]  # (topic, partition name) owned by one of its threads


def add_zookeeper_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", default=None,
                        help="read a group of ZooKeeper consumers (Kafka 0.7's) from this ZooKeeper instead")


@contextmanager
def _connected(connect: str, timeout: float) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=connect, timeout=SESSION_TIMEOUT_S)
    try:
        zk.start(timeout=timeout)
    except (KazooException, KazooTimeoutError) as exc:
        zk.close()
        raise CliError(f"cannot connect to ZooKeeper {connect}: {exc or type(exc).__name__}") from exc
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def _values(zk: KazooClient, paths: list[str]) -> dict[str, str | None]:
    pending = [(path, zk.get_async(path)) for path in paths]
    out: dict[str, str | None] = {}
    for path, result in pending:
        try:
            out[path] = bytes(result.get()[0]).decode(errors="replace").strip()
        except NoNodeError:
            out[path] = None
    return out


def _members(zk: KazooClient, dirs: GroupDirs) -> dict[str, Subscription | None]:
    """Registered members and their subscriptions (None: a value no 0.7 consumer writes)."""
    members: dict[str, Subscription | None] = {}
    for path, value in _values(zk, [dirs.id_path(c) for c in _children(zk, dirs.ids)]).items():
        if value is None:
            continue
        try:
            members[path.rsplit("/", 1)[1]] = decode_subscription(value.encode())
        except ValueError:
            members[path.rsplit("/", 1)[1]] = None
    return members


def _snapshot(zk: KazooClient, timeout: float) -> ClusterSnapshot:
    view = ReplicatedRegistryView(zk)
    try:
        return view.start(timeout)
    except TimeoutError as exc:
        raise CliError(str(exc)) from exc
    finally:
        view.close()


def _partitions(zk: KazooClient, dirs: GroupDirs, members: dict[str, Subscription | None],
                snapshot: ClusterSnapshot, security: ClientSecurity | None = None) -> list[PartitionRow]:
    known = topic_partitions(snapshot)
    listed = {t: set(_children(zk, f"{dirs.offsets}/{t}")) | set(_children(zk, f"{dirs.owners}/{t}"))
              for t in set(_children(zk, dirs.offsets)) | set(_children(zk, dirs.owners))}
    for subscription in members.values():
        for topic in subscription.streams_by_topic(known) if subscription is not None else {}:
            listed.setdefault(topic, set())
    names = [(t, n) for t in sorted(listed) for n in known.get(t, []) + sorted(listed[t] - set(known.get(t, [])))]
    offsets = _values(zk, [f"{dirs.offsets}/{t}/{n}" for t, n in names])
    owners = _values(zk, [f"{dirs.owners}/{t}/{n}" for t, n in names])
    bounds = _Bounds(snapshot, security)
    rows = []
    for t, n in names:
        text = offsets[f"{dirs.offsets}/{t}/{n}"]
        committed = int(text) if text is not None and text.lstrip("-").isdigit() else None
        start, end = bounds.of(t, n)
        rows.append(PartitionRow(t, n, committed, start, end, owners[f"{dirs.owners}/{t}/{n}"]))
    bounds.close()
    return rows


class _Bounds:
    """Log start and end of partitions, asked of their brokers (one connection per broker)."""

    def __init__(self, snapshot: ClusterSnapshot, security: ClientSecurity | None = None) -> None:
        self.snapshot = snapshot
        self.security = security  # --command-config: each broker is asked on the client's own listener
        self.clients: dict[int, SimpleConsumer] = {}

    def of(self, topic: str, name: str) -> tuple[int | None, int | None]:
        try:
            key = partition_key(topic, name)
        except ValueError:
            return None, None
        broker = fetch_broker(self.snapshot, key)
        if broker is None:
            return None, None
        try:
            client = self.clients.get(broker.broker_id)
            if client is None:
                host, port, _ = broker.address_for(client_listener(self.security))
                client = self.clients[broker.broker_id] = SimpleConsumer(host, port, timeout=10.0,
                                                                         security=self.security)
            return client.earliest_offset(topic, key.partition), client.latest_offset(topic, key.partition)
        except RillError:
            return None, None

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _group_dirs(zk: KazooClient, connect: str, group: str) -> GroupDirs:
    dirs = GroupDirs(group)
    if zk.exists(dirs.root) is None:
        raise CliError(f"group {group!r} is not in ZooKeeper {connect} (no {dirs.root})")
    return dirs


def run_describe_zookeeper(args: argparse.Namespace, group: str) -> int:
    """Owners, committed offsets and lag of a ZooKeeper consumer group (see the module docstring)."""
    with _connected(args.zookeeper, args.timeout) as zk:
        dirs = _group_dirs(zk, args.zookeeper, group)
        members = _members(zk, dirs)
        rows = _partitions(zk, dirs, members, _snapshot(zk, args.timeout), security_of(args))
    print(f"Group {group}: {len(members)} member(s), offsets and owners in ZooKeeper {args.zookeeper}")
    print("TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG_BYTES\tOWNER")
    for r in rows:
        position = r.committed if r.committed is not None else r.start
        lag = "-" if r.end is None or position is None else str(max(0, r.end - position))
        print(f"{r.topic}\t{r.name}\t{_dash(r.committed)}\t{_dash(r.end)}\t{lag}\t{r.owner or '-'}")
    return 0


def zookeeper_members(args: argparse.Namespace, group: str) -> list[MemberRow]:
    """Each registered member with the host in its id (0.7's ``<group>_<host>-<ms>-<uuid>``) and what its
    threads own; CLIENT-ID is ``-`` (ZooKeeper consumers register none)."""
    with _connected(args.zookeeper, args.timeout) as zk:
        dirs = _group_dirs(zk, args.zookeeper, group)
        members = _members(zk, dirs)
        paths = [f"{dirs.owners}/{t}/{n}" for t in _children(zk, dirs.owners)
                 for n in _children(zk, f"{dirs.owners}/{t}")]
        owners = _values(zk, paths)
    owned: dict[str, list[tuple[str, str]]] = {m: [] for m in members}
    for path, thread in owners.items():
        consumer = (thread or "").rsplit("-", 1)[0]
        if consumer in owned:
            topic, name = path.rsplit("/", 2)[1:]
            owned[consumer].append((topic, name))
    return [MemberRow(m, _host(group, m), "-", owned[m]) for m in sorted(members)]


def _host(group: str, consumer: str) -> str:
    """The host name in a 0.7 consumer id ``<group>_<host>-<ms>-<uuid>``; ``-`` for an id given by the user."""
    rest = consumer[len(group) + 1:] if consumer.startswith(f"{group}_") else consumer
    parts = rest.rsplit("-", 2)
    return parts[0] if len(parts) == 3 and parts[1].isdigit() and parts[0] else "-"


def run_list_zookeeper(args: argparse.Namespace) -> int:
    """Every group under /consumers: its member count and the topics it owns or has offsets for."""
    with _connected(args.zookeeper, args.timeout) as zk:
        rows = []
        for group in _children(zk, CONSUMERS):
            dirs = GroupDirs(group)
            topics = sorted(set(_children(zk, dirs.offsets)) | set(_children(zk, dirs.owners)))
            rows.append((group, len(_children(zk, dirs.ids)), topics))
    print("GROUP\tMEMBERS\tTOPICS")
    for group, count, topics in rows:
        print(f"{group}\t{count}\t{','.join(topics)}")
    return 0


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)
