"""The leader's answer to REPLICA_FETCH: fencing, the divergence check, the read, the long poll.

For each partition of a follower's fetch (client/protocol/replica_fetch.py):

1. this broker must lead it (else NotLeaderForPartition) in the epoch the follower
   names (older: FencedLeaderEpoch, newer: UnknownLeaderEpoch), and the follower must
   be one of its replicas (else InvalidRequest);
2. if the follower's ``(last fetched epoch, fetch offset)`` is not on this log, the
   answer names where they diverge and carries no data (divergence.py);
3. a fetch offset outside the log is OffsetOutOfRange (with the log start, so a
   follower below it can restart there);
4. otherwise the fetch offset is the follower's log end: the replica manager records it
   (which may move the high watermark or grow the ISR), and the answer carries the bytes
   from there up to the next epoch boundary, as a file slice sent with sendfile.

A fetch that finds fewer than MIN_BYTES everywhere (and no error) is parked until an
append to one of its partitions, a change of role, or MAX_WAIT_MS; the follower's
progress is recorded when the request arrives, not when it is answered.

Everything runs on the broker's event loop.
"""

from __future__ import annotations

from typing import NamedTuple

from rill.broker.dataplane.purgatory import Parked, Purgatory
from rill.broker.dataplane.server_connection import Connection, Slot
from rill.broker.dataplane.storage import Loop
from rill.broker.log.results import FileSlice
from rill.broker.replication.divergence import epoch_span, leader_divergence
from rill.broker.replication.replica import Replica
from rill.broker.replication.replica_manager import ReplicaManager
from rill.client.errors import BrokerError, ErrorCode
from rill.client.protocol.replica_fetch import (NO_EPOCH, ReplicaFetchBlock, ReplicaFetchPartition,
                                                ReplicaFetchRequest, replica_fetch_response_parts)

__all__ = ["LeaderReads"]

_EMPTY = memoryview(b"")


class _Answer(NamedTuple):
    block: ReplicaFetchBlock
    data: FileSlice | None

    @property
    def size(self) -> int:
        return self.data.length if self.data is not None else 0


def _error(code: int, hw: int = -1, start: int = -1) -> _Answer:
    return _Answer(ReplicaFetchBlock(code, hw, start, NO_EPOCH, NO_EPOCH, NO_EPOCH, _EMPTY), None)


class _Fetch(NamedTuple):
    """A parked REPLICA_FETCH: where to answer it, and the request."""

    conn: Connection
    slot: Slot
    request: ReplicaFetchRequest


class LeaderReads:
    """Serves followers' fetches for the partitions this broker leads."""

    def __init__(self, manager: ReplicaManager, loop: Loop, *, max_wait_ms: int = 30_000) -> None:
        self.manager = manager
        self.loop = loop
        self.max_wait_ms = max_wait_ms
        self._parked: Purgatory[_Fetch] = Purgatory(loop)
        manager.on_role_change.append(self.wake)
        manager.on_high_watermark.append(self.wake)  # followers learn the new HW without waiting

    def handle(self, conn: Connection, request: ReplicaFetchRequest) -> Slot:
        """Answer a REPLICA_FETCH now, or park it (its slot is filled later)."""
        if request.max_wait_ms < 0 or request.min_bytes < 0:
            return Slot(replica_fetch_response_parts([(a.block, a.data) for a in
                                                      [_error(int(ErrorCode.INVALID_REQUEST))] * len(request.partitions)]))
        answers = [self._answer(request.replica_id, p, record=True) for p in request.partitions]
        wait_ms = min(request.max_wait_ms, self.max_wait_ms)
        if wait_ms == 0 or self._satisfied(answers, request.min_bytes):
            return Slot(replica_fetch_response_parts([(a.block, a.data) for a in answers]))
        slot = Slot()
        self._parked.park(_Fetch(conn, slot, request), [(p.topic, p.partition) for p in request.partitions],
                          wait_ms, self._complete)
        return slot

    @staticmethod
    def _satisfied(answers: list[_Answer], min_bytes: int) -> bool:
        return (any(a.block.error or a.block.diverging_epoch != NO_EPOCH for a in answers)
                or sum(a.size for a in answers) >= max(min_bytes, 1))

    def wake(self, topic: str, partition: int) -> None:
        """Something changed for a partition (an append, a new HW, a role): re-check its parked fetches."""
        for parked in self._parked.waiting((topic, partition)):
            fetch = parked.request
            if fetch.conn.closed:
                self._complete(parked)
                continue
            answers = [self._answer(fetch.request.replica_id, p, record=False) for p in fetch.request.partitions]
            if self._satisfied(answers, fetch.request.min_bytes):
                self._complete(parked, answers)

    def _complete(self, parked: Parked[_Fetch], answers: list[_Answer] | None = None) -> None:
        if not self._parked.take(parked):
            return
        fetch = parked.request
        if fetch.conn.closed:
            return
        if answers is None:
            answers = [self._answer(fetch.request.replica_id, p, record=False) for p in fetch.request.partitions]
        fetch.slot.fill(replica_fetch_response_parts([(a.block, a.data) for a in answers]))
        self.loop.mark_dirty(fetch.conn)

    # -- one partition ---------------------------------------------------------------------

    def _answer(self, follower: int, p: ReplicaFetchPartition, *, record: bool) -> _Answer:
        try:
            replica = self.manager.leader(p.topic, p.partition)
        except BrokerError as exc:
            return _error(int(exc.code))
        if replica is None:
            return _error(int(ErrorCode.NOT_LEADER_FOR_PARTITION))  # not a replicated partition
        code = self._fence(replica, follower, p)
        if code:
            return _error(code)
        log_ = replica.log
        hw, start, end = replica.high_watermark, log_.start_offset, log_.end_offset
        diverging = leader_divergence(replica.epochs, p.last_fetched_epoch, p.fetch_offset, end)
        if diverging is not None:
            return _Answer(ReplicaFetchBlock(0, hw, start, NO_EPOCH, diverging.epoch, diverging.end_offset, _EMPTY),
                           None)
        if not start <= p.fetch_offset <= end or p.max_bytes < 0:
            code = ErrorCode.OFFSET_OUT_OF_RANGE if p.max_bytes >= 0 else ErrorCode.INVALID_FETCH_SIZE
            return _error(int(code), hw, start)
        if record:
            self.manager.follower_fetched(replica, follower, p.fetch_offset)
            hw = replica.high_watermark
        return self._read(replica, p, hw, start)

    def _fence(self, replica: Replica, follower: int, p: ReplicaFetchPartition) -> int:
        if p.current_leader_epoch < replica.leader_epoch:
            return int(ErrorCode.FENCED_LEADER_EPOCH)
        if p.current_leader_epoch > replica.leader_epoch:
            return int(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if follower == self.manager.broker_id or follower not in replica.replicas:
            return int(ErrorCode.INVALID_REQUEST)
        return 0

    def _read(self, replica: Replica, p: ReplicaFetchPartition, hw: int, start: int) -> _Answer:
        log_ = replica.log
        span = epoch_span(replica.epochs.entries(), p.fetch_offset, log_.end_offset)
        # at least one whole message, however small MAX_BYTES is; never past the epoch's end
        limit = min(span.end_offset - p.fetch_offset, max(p.max_bytes, log_.config.max_message_size + 64))
        if limit <= 0:
            return _Answer(ReplicaFetchBlock(0, hw, start, span.epoch, NO_EPOCH, NO_EPOCH, _EMPTY), None)
        try:
            data = log_.read(p.fetch_offset, limit)
        except BrokerError as exc:
            return _error(int(exc.code), hw, start)
        return _Answer(ReplicaFetchBlock(0, hw, start, span.epoch, NO_EPOCH, NO_EPOCH, _EMPTY), data)
