"""What the consumer owns right now, the fetched chunks waiting per stream, and delivery.

One lock (a Condition) guards it all, and it is the one place that decides whether a
record may still be delivered: a record is handed out (by ``take``) only while its
partition is owned in the current generation and delivery is not paused, and handing
it out advances the partition's consumed offset in the same critical section. So
once ``revoke()`` returns, nothing of the revoked partitions is ever delivered again,
and the offsets it returns cover every record delivered before.

Fetcher threads ``put`` chunks (blocking while the stream's buffer holds
``max_chunks``); the application takes them with ``take`` (poll, stream iterators).
Thread-safe: every method may be called from any thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from rill.client.zookeeper.registry import partition_name

__all__ = ["ANY_REPLICA", "Chunk", "OwnedPartition", "PartitionKey", "StreamBuffers", "ZkRecord"]


ANY_REPLICA = -1
"""The ``broker_id`` of a replicated topic's partition: its leader serves it, whichever broker that is."""


class PartitionKey(NamedTuple):
    """A partition as the consumer names it: topic, broker id and partition on that broker
    (0.7), or topic, :data:`ANY_REPLICA` and partition id (a replicated topic)."""

    topic: str
    broker_id: int
    partition: int

    @property
    def name(self) -> str:
        """The name in owner and offset paths: ``"broker-partition"`` (0.7), or the partition
        id of a replicated topic (``"3"``, as Kafka 0.8's ZooKeeper consumer names it)."""
        if self.broker_id == ANY_REPLICA:
            return str(self.partition)
        return partition_name(self.broker_id, self.partition)


class ZkRecord(NamedTuple):
    """One delivered message.

    ``offset`` is its byte position in the partition and ``next_offset`` where the next
    message starts (what gets committed). ``broker_id`` is -1 (:data:`ANY_REPLICA`) for a
    replicated topic, whose ``partition`` is its id. ``key`` is None for the 0.7 message format.
    """

    topic: str
    broker_id: int
    partition: int
    offset: int
    next_offset: int
    value: bytes
    key: bytes | None = None


class Chunk(NamedTuple):
    """Records of one partition from one fetch, tagged with the generation that fetched them."""

    generation: int
    key: PartitionKey
    records: list[ZkRecord]


@dataclass
class OwnedPartition:
    """A partition owned in the current generation: its stream, thread id and consumed offset.

    ``consumed`` is the offset after the last delivered record (None until the start
    offset is known); ``committed`` the last offset written to ZooKeeper.
    """

    stream: int
    thread: str
    consumed: int | None
    committed: int | None


class _Pending:
    """A chunk being handed out, possibly over several takes."""

    __slots__ = ("chunk", "index")

    def __init__(self, chunk: Chunk) -> None:
        self.chunk = chunk
        self.index = 0


class StreamBuffers:
    """Ownership, per-stream chunk buffers and delivery, under one lock."""

    def __init__(self, streams: int, max_chunks: int) -> None:
        self._cond = threading.Condition()
        self._buffers: list[deque[_Pending]] = [deque() for _ in range(streams)]
        self._max_chunks = max_chunks
        self._owned: dict[PartitionKey, OwnedPartition] = {}
        self._generation = 0
        self._epoch = 0  # sessions lost so far
        self._paused = False
        self._closed = False
        self._errors: deque[Exception] = deque()
        self._next_stream = 0  # where a take from every stream starts (rotates, so none starves)

    @property
    def streams(self) -> int:
        return len(self._buffers)

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def epoch(self) -> int:
        """How many times ``lose()`` was called: read before claiming, passed to ``assign``."""
        return self._epoch

    # -- ownership (the rebalancer) -----------------------------------------------------------

    def assign(self, owned: dict[PartitionKey, OwnedPartition], epoch: int) -> int | None:
        """Start a new generation owning ``owned``; returns its number (for the fetchers).

        Returns None, owning nothing, when the session was lost since ``epoch`` was
        read (the claims behind ``owned`` died with it).
        """
        with self._cond:
            if epoch != self._epoch:
                return None
            self._generation += 1
            self._owned = dict(owned)
            for buffer in self._buffers:
                buffer.clear()
            self._cond.notify_all()
            return self._generation

    def revoke(self) -> dict[PartitionKey, OwnedPartition]:
        """Stop delivering everything owned; returns what was owned, with consumed offsets.

        Never blocks for long (safe from a ZooKeeper state listener).
        """
        with self._cond:
            owned, self._owned = self._owned, {}
            self._generation += 1
            for buffer in self._buffers:
                buffer.clear()
            self._cond.notify_all()
            return owned

    def lose(self) -> None:
        """The ZooKeeper session is gone, and our owner nodes with it: revoke everything now."""
        with self._cond:
            self._epoch += 1
            self.revoke()

    def owned(self) -> dict[PartitionKey, OwnedPartition]:
        """A copy of what is owned now (each value a copy too)."""
        with self._cond:
            return {k: OwnedPartition(v.stream, v.thread, v.consumed, v.committed) for k, v in self._owned.items()}

    def mark_committed(self, generation: int, offsets: dict[PartitionKey, int]) -> None:
        with self._cond:
            if generation != self._generation:
                return
            for key, offset in offsets.items():
                if key in self._owned:
                    self._owned[key].committed = offset

    def start_offset(self, generation: int, key: PartitionKey, offset: int) -> None:
        """A fetcher resolved the start of a partition that had no offset (autooffset.reset)."""
        with self._cond:
            entry = self._owned.get(key)
            if generation == self._generation and entry is not None and entry.consumed is None:
                entry.consumed = offset

    def set_paused(self, paused: bool) -> None:
        """Pause delivery (the ZooKeeper connection is down: ownership is uncertain) or resume it."""
        with self._cond:
            self._paused = paused
            self._cond.notify_all()

    def close(self) -> None:
        """End every wait: takers return nothing, putters give up."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def fail(self, error: Exception) -> None:
        """Report a fetch error that the application must see (raised by the next take).

        An error equal to one not yet raised (same type and message: a fetcher retrying
        with the same bad password, say) is not queued again, so errors reported while
        nobody takes do not pile up; each take raises at most one of them.
        """
        with self._cond:
            if not any(type(e) is type(error) and str(e) == str(error) for e in self._errors):
                self._errors.append(error)
            self._cond.notify_all()

    # -- fetchers --------------------------------------------------------------------------

    def put(self, chunk: Chunk, stopped: Callable[[], bool]) -> bool:
        """Queue ``chunk`` on its partition's stream, waiting while that buffer is full.

        Returns False when the chunk was dropped: its generation is over, the
        partition is no longer owned, the buffers are closed, or ``stopped()``.
        """
        with self._cond:
            while True:
                entry = self._owned.get(chunk.key)
                if self._closed or chunk.generation != self._generation or entry is None or stopped():
                    return False
                buffer = self._buffers[entry.stream]
                if len(buffer) < self._max_chunks:
                    buffer.append(_Pending(chunk))
                    self._cond.notify_all()
                    return True
                self._cond.wait(0.1)

    def wake(self) -> None:
        """Wake every waiter (a fetcher is being stopped)."""
        with self._cond:
            self._cond.notify_all()

    # -- delivery ---------------------------------------------------------------------------

    def take(self, stream: int | None, timeout: float | None, max_records: int) -> list[ZkRecord]:
        """Deliver up to ``max_records`` records, waiting up to ``timeout`` seconds (None: forever).

        ``stream`` None takes from every stream, starting one stream further each
        time so that none starves. Returns [] on timeout, when closed, or while paused.

        Raises:
            Exception: a fetch error reported with ``fail`` (once).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if stream is None:
                    n = len(self._buffers)
                    streams = [(self._next_stream + i) % n for i in range(n)]
                    self._next_stream = (self._next_stream + 1) % n
                else:
                    streams = [stream]
                if self._errors:
                    raise self._errors.popleft()
                if self._closed:
                    return []
                if not self._paused:
                    out: list[ZkRecord] = []
                    for s in streams:
                        self._drain(self._buffers[s], out, max_records)
                        if len(out) >= max_records:
                            break
                    if out:
                        return out
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return []
                self._cond.wait(remaining)

    def _drain(self, buffer: deque[_Pending], out: list[ZkRecord], limit: int) -> None:
        while buffer and len(out) < limit:
            pending = buffer[0]
            chunk = pending.chunk
            entry = self._owned.get(chunk.key)
            if chunk.generation != self._generation or entry is None:
                buffer.popleft()
                continue
            records = chunk.records[pending.index:pending.index + limit - len(out)]
            pending.index += len(records)
            if pending.index >= len(chunk.records):
                buffer.popleft()
                self._cond.notify_all()  # room for a fetcher waiting in put
            if records:
                out.extend(records)
                entry.consumed = records[-1].next_offset
