"""Requests answered later: long-poll fetches, and acknowledgements that wait for fsync or a commit.

A long-poll fetch (FETCH_WAIT) that finds fewer than ``min_bytes`` is parked under
each partition it reads. Every append to one of those partitions re-checks it, and a
timer answers it at ``max_wait_ms`` with whatever is there (seed 002, "long poll").
A PRODUCE_ACK with acks=fsync is answered when the flusher has synced every partition
it wrote (one fsync serves every waiter on a partition), or with RequestTimedOut for
the partitions not yet synced at its timeout. A PRODUCE_ACK with acks=all is answered
when every replicated partition it wrote is committed (:class:`CommitAcks`).

Everything here runs on the event-loop thread; fsync completions arrive from the
flusher thread through ``server.call_soon_threadsafe``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple, Protocol

import structlog

from rill.broker.dataplane.purgatory import Parked, Purgatory
from rill.broker.dataplane.server_connection import Connection, Slot
from rill.broker.dataplane.storage import FlushScheduler, Loop, PartitionLog
from rill.broker.log.results import FileSlice
from rill.broker.replication.replica import Replica
from rill.client.errors import BrokerError, ErrorCode
from rill.client.net.timer_heap import Timer
from rill.client.protocol import requests as rq
from rill.client.protocol.fetch_response import multifetch_response_parts

log = structlog.get_logger(__name__)


class ReadResult(NamedTuple):
    """One partition's part of a fetch: an error code and a file slice (None on an error or an unknown topic)."""

    error: int
    slice: FileSlice | None

    @property
    def size(self) -> int:
        return self.slice.length if self.slice is not None else 0


class _Fetch(NamedTuple):
    """A parked FETCH_WAIT: where to answer it, and what it reads."""

    conn: Connection
    slot: Slot
    fetches: list[rq.FetchRequest]
    min_bytes: int


class DelayedFetches:
    """Long-poll fetches waiting for data, parked in a :class:`Purgatory` by (topic, partition)."""

    def __init__(self, server: Loop, read: Callable[[rq.FetchRequest], ReadResult]) -> None:
        self.server = server
        self.read = read
        self._parked: Purgatory[_Fetch] = Purgatory(server)

    @staticmethod
    def satisfied(results: list[ReadResult], min_bytes: int) -> bool:
        """Answer now when there is enough data or any partition has an error."""
        return any(r.error for r in results) or sum(r.size for r in results) >= max(min_bytes, 1)

    def park(self, conn: Connection, slot: Slot, fetches: list[rq.FetchRequest], min_bytes: int,
             wait_ms: int) -> None:
        self._parked.park(_Fetch(conn, slot, fetches, min_bytes), [(f.topic, f.partition) for f in fetches],
                          wait_ms, self._complete)

    def on_append(self, topic: str, partition: int) -> None:
        for parked in self._parked.waiting((topic, partition)):
            fetch = parked.request
            if fetch.conn.closed:
                self._complete(parked)
                continue
            results = [self.read(f) for f in fetch.fetches]
            if self.satisfied(results, fetch.min_bytes):
                self._complete(parked, results)

    def _complete(self, parked: Parked[_Fetch], results: list[ReadResult] | None = None) -> None:
        if not self._parked.take(parked):
            return
        fetch = parked.request
        if fetch.conn.closed:
            return
        if results is None:
            results = [self.read(f) for f in fetch.fetches]
        fetch.slot.fill(multifetch_response_parts(results))
        self.server.mark_dirty(fetch.conn)


class CommitWaits(Protocol):
    """Waiting for a replicated partition's high watermark (rill.broker.replication.replica_manager)."""

    def wait_committed(self, replica: Replica, offset: int, callback: Callable[[], None],
                       on_error: Callable[[BaseException], None]) -> None: ...

    def in_sync_count(self, replica: Replica) -> int: ...

    def min_insync_for(self, replica: Replica) -> int: ...


class CommitAcks:
    """Answers one acks=all PRODUCE_ACK once every replicated partition it wrote is committed.

    ``waits`` maps an ack's index to the replica it was appended to (partitions that are
    not replicated are committed once appended and are not listed). Committed means the
    leader's high watermark reached the ack's next offset; if the in-sync replicas then
    number fewer than the topic's ``min.insync.replicas`` the answer is NotEnoughReplicasAfterAppend (the data
    is there and may be read: a retry may duplicate it). Leadership lost first, or no
    commit within ``timeout_ms``, gives RequestTimedOut with the offsets (the messages may
    still be committed later, by the new leader).
    """

    def __init__(self, server: Loop, replicas: CommitWaits, conn: Connection, slot: Slot,
                 acks: list[rq.PartitionAck], waits: dict[int, Replica], timeout_ms: int) -> None:
        self.server, self.replicas, self.conn, self.slot = server, replicas, conn, slot
        self.acks = acks
        self._waiting = dict(waits)
        self.timeout_ms = max(0, timeout_ms)
        self._timer: Timer | None = None

    def start(self) -> None:
        if not self._waiting:
            self._answer()
            return
        self._timer = self.server.call_later(self.timeout_ms / 1000.0, self._time_out)
        for i, replica in list(self._waiting.items()):
            self.replicas.wait_committed(replica, self.acks[i].next_offset, functools.partial(self._committed, i),
                                         functools.partial(self._failed, i))

    def _committed(self, i: int) -> None:
        replica = self._waiting.pop(i, None)
        if replica is None:
            return
        if self.replicas.in_sync_count(replica) < self.replicas.min_insync_for(replica):
            ack = self.acks[i]
            self.acks[i] = rq.PartitionAck(int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND), ack.partition,
                                           ack.first_offset, ack.next_offset)
        if not self._waiting:
            self._answer()

    def _failed(self, i: int, exc: BaseException) -> None:
        if self._waiting.pop(i, None) is None:
            return
        ack = self.acks[i]
        code = exc.code if isinstance(exc, BrokerError) else ErrorCode.UNKNOWN
        if code == ErrorCode.NOT_LEADER_FOR_PARTITION:
            # Leadership moved after the append: a follower may have fetched the messages and
            # now lead with them, so the outcome is unknown. NotLeaderForPartition promises
            # "nothing was written"; answer as a commit timeout does, offsets kept.
            self.acks[i] = rq.PartitionAck(int(ErrorCode.REQUEST_TIMED_OUT), ack.partition,
                                           ack.first_offset, ack.next_offset)
        else:
            self.acks[i] = rq.PartitionAck(int(code), ack.partition, -1, -1)
        if not self._waiting:
            self._answer()

    def _time_out(self) -> None:
        self._timer = None
        for i in self._waiting:
            ack = self.acks[i]
            self.acks[i] = rq.PartitionAck(int(ErrorCode.REQUEST_TIMED_OUT), ack.partition,
                                           ack.first_offset, ack.next_offset)
        log.warning("produce.commit_timeout", partitions=len(self._waiting), timeout_ms=self.timeout_ms)
        self._waiting.clear()
        self._answer()

    def _answer(self) -> None:
        if self.slot.parts is not None:
            return  # answered already (a late callback after the timeout)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.slot.fill([rq.encode_produce_ack_response(self.acks)])
        self.server.mark_dirty(self.conn)


class FsyncAcks:
    """Answers one acks=fsync PRODUCE_ACK once every partition it wrote is synced."""

    def __init__(self, server: Loop, flusher: FlushScheduler, conn: Connection, slot: Slot,
                 results: list[tuple[rq.PartitionAck, PartitionLog | None]], timeout_ms: int) -> None:
        self.server = server
        self.flusher = flusher
        self.conn = conn
        self.slot = slot
        self.acks = [ack for ack, _ in results]
        self._waiting = {i: plog for i, (ack, plog) in enumerate(results) if plog is not None}
        self.timeout_ms = max(0, timeout_ms)
        self._timer: Timer | None = None

    def start(self) -> None:
        if not self._waiting:
            self._answer()
            return
        self._timer = self.server.call_later(self.timeout_ms / 1000.0, self._time_out)
        for i, plog in list(self._waiting.items()):
            def synced(i: int = i) -> None:
                self.server.call_soon_threadsafe(lambda: self._synced(i))
            plog.when_flushed(self.acks[i].next_offset, synced)
        self.flusher.flush_soon([plog for plog in self._waiting.values()])

    def _synced(self, i: int) -> None:
        plog = self._waiting.pop(i, None)
        if plog is None:
            return
        if plog.failed is not None:
            ack = self.acks[i]
            self.acks[i] = rq.PartitionAck(int(ErrorCode.STORAGE_ERROR), ack.partition, -1, -1)
        if not self._waiting:
            self._answer()

    def _time_out(self) -> None:
        for i in self._waiting:
            ack = self.acks[i]
            self.acks[i] = rq.PartitionAck(int(ErrorCode.REQUEST_TIMED_OUT), ack.partition,
                                           ack.first_offset, ack.next_offset)
        log.warning("produce.fsync_timeout", partitions=len(self._waiting), timeout_ms=self.timeout_ms)
        self._waiting.clear()
        self._answer()

    def _answer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.slot.fill([rq.encode_produce_ack_response(self.acks)])
        self.server.mark_dirty(self.conn)
