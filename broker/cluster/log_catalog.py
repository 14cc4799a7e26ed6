"""The coordinator's view of the topics: this broker's logs, or the whole cluster's.

Implements rill.coordinator.topic_catalog's Catalog protocol (the coordinator does not
import the broker). Safe to call from gRPC worker threads: it reads the manager's
copy-on-write maps, the logs' atomically published offsets, and the cluster view's
snapshot.

In a cluster (a ClusterView with a registry) partition numbers are cluster-wide and a
partition may live on another broker. Its offsets are then asked of that broker over
the data plane (OFFSETS), which only rewinds and lag reports do. A commit's offsets are
checked against the message boundaries of this broker's own partitions only: for a
partition on another broker the check is that it exists and the offset is not negative,
because a network round trip per commit would cost more than the check is worth (a
consumer commits offsets it was given by the fetches of that very log).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple, TypeVar

from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.log.log import Log
from rill.broker.log.manager import LogManager
from rill.client.errors import BrokerError, ConnectionClosed, OffsetOutOfRange, RillError
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer

REMOTE_TIMEOUT_S = 5.0
T = TypeVar("T")


class _Where(NamedTuple):
    leader: rq.BrokerInfo | None  # None: this broker
    number: int  # the partition's number on its broker
    remote: bool = False


LagPoint = tuple[int, int, int | None]  # (position, log end, append time ms of the message at position)


def _point(committed: int, start: int, end: int, time_at: Callable[[int], int | None]) -> LagPoint:
    position = max(committed if committed >= 0 else start, start)
    return position, end, time_at(position) if position < end else None


def _remote_point(client: SimpleConsumer, topic: str, number: int, committed: int) -> LagPoint:
    def time_at(offset: int) -> int | None:
        entries = client.time_index(topic, number, offset, 1)
        return entries[0][1] if entries else None
    return _point(committed, client.earliest_offset(topic, number), client.latest_offset(topic, number), time_at)


class LogCatalog:
    def __init__(self, logs: LogManager, cluster: ClusterView | None = None) -> None:
        self.logs = logs
        self.cluster = cluster

    def topics(self) -> Mapping[str, int]:
        if self.cluster is not None and self.cluster.clustered:
            return self.cluster.partition_counts()
        return self.logs.topics()

    def _where(self, topic: str, partition: int) -> _Where:
        """Where the partition lives; KeyError for a partition the cluster does not have."""
        if self.cluster is None or not self.cluster.clustered:
            return _Where(None, partition)
        leader, number = self.cluster.locate(topic, partition)
        if leader is not None and leader.broker_id == self.cluster.identity().broker_id:
            return _Where(None, number)
        return _Where(leader, number, remote=True)

    def _log(self, where: _Where, topic: str) -> Log:
        return self.logs.get(topic, where.number)

    def offset_range(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start, log end) of a partition; KeyError when it does not exist."""
        where = self._where(topic, partition)
        if where.remote:
            return self._ask(where, topic, lambda c, p: (c.earliest_offset(topic, p), c.latest_offset(topic, p)))
        try:
            plog = self._log(where, topic)
        except BrokerError as exc:
            raise KeyError(f"{topic}-{partition}") from exc
        return plog.start_offset, plog.end_offset

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        """Raise the broker's error for an offset that is not a message boundary in the log."""
        try:
            where = self._where(topic, partition)
        except KeyError:
            where = _Where(None, partition)  # not in the cluster: the local lookup raises the right error
        if where.remote:
            if offset < 0:
                raise OffsetOutOfRange(f"{topic}-{partition}: offset {offset} is negative")
            return
        plog = self._log(where, topic)
        if offset < plog.start_offset or offset > plog.end_offset:
            raise OffsetOutOfRange(f"{topic}-{partition}: offset {offset} outside "
                                   f"{plog.start_offset}..{plog.end_offset}")
        plog.read(offset, 0)  # raises InvalidOffset when no message starts there

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """An offset at most one index interval before the first message appended at or after the time."""
        where = self._where(topic, partition)
        if where.remote:
            def before(c: SimpleConsumer, p: int) -> int:
                found = c.offsets_before(topic, p, timestamp_ms, 1)
                return found[0] if found else c.earliest_offset(topic, p)
            return self._ask(where, topic, before)
        plog = self._log(where, topic)
        found = plog.offsets_before(timestamp_ms, 1)
        return found[0] if found else plog.start_offset

    def lag_point(self, topic: str, partition: int, committed: int) -> LagPoint:
        """(position, log end, append time ms of the message at position) for a committed offset.

        The position is the committed offset, or the log start when none is committed or
        it is before the start; the time is None at the log end (to one index interval).
        A partition on another broker is asked in one connection (OFFSETS, TIME_INDEX).

        Raises:
            KeyError: the partition does not exist, or its broker is not alive or did not answer.
        """
        where = self._where(topic, partition)
        if where.remote:
            return self._ask(where, topic, lambda c, p: _remote_point(c, topic, p, committed))
        try:
            plog = self._log(where, topic)
        except BrokerError as exc:
            raise KeyError(f"{topic}-{partition}") from exc
        return _point(committed, plog.start_offset, plog.end_offset, plog.append_time_ms)

    def lag_points(self, committed: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], LagPoint]:
        """:meth:`lag_point` of many partitions (partition -> committed offset, -1 for none): this broker's
        read here, another broker's asked over one connection per broker. A partition that does not exist
        or whose broker did not answer is left out."""
        found: dict[tuple[str, int], LagPoint] = {}
        remote: dict[int, tuple[rq.BrokerInfo, list[tuple[str, int, int, int]]]] = {}
        for (topic, partition), offset in committed.items():
            try:
                where = self._where(topic, partition)
                if not where.remote:
                    plog = self._log(where, topic)
                    found[(topic, partition)] = _point(offset, plog.start_offset, plog.end_offset,
                                                       plog.append_time_ms)
                elif where.leader is not None:
                    asks = remote.setdefault(where.leader.broker_id, (where.leader, []))[1]
                    asks.append((topic, partition, where.number, offset))
            except (KeyError, BrokerError):
                continue
        for leader, asks in remote.values():
            try:
                with self._client(leader) as client:
                    for topic, partition, number, offset in asks:
                        try:
                            found[(topic, partition)] = _remote_point(client, topic, number, offset)
                        except BrokerError:
                            continue
            except (ConnectionClosed, OSError, RillError):
                continue
        return found

    def _client(self, leader: rq.BrokerInfo) -> SimpleConsumer:
        """A client of ``leader`` (on the inter-broker listener, as this broker, in a cluster)."""
        if self.cluster is not None:
            return self.cluster.peer_client(leader, REMOTE_TIMEOUT_S)
        return SimpleConsumer(leader.host, leader.port, timeout=REMOTE_TIMEOUT_S)

    def _ask(self, where: _Where, topic: str, call: Callable[[SimpleConsumer, int], T]) -> T:
        """``call(client, its partition number)`` on the partition's leader; KeyError when it cannot answer."""
        leader, number = where.leader, where.number
        if leader is None:
            raise KeyError(f"{topic}: the broker holding this partition is not alive")
        try:
            with self._client(leader) as client:
                return call(client, number)
        except (ConnectionClosed, OSError, RillError) as exc:
            raise KeyError(f"{topic}: broker {leader.broker_id} at {leader.host}:{leader.port} did not answer: "
                           f"{exc}") from exc
