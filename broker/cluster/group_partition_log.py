"""One partition of the groups topic as the coordinator's offset store writes it, while this broker leads it.

In a cluster the coordinator keeps each group's records in partition ``p`` of the
internal topic ``__rill_groups`` (rill.coordinator.group_shards). While this broker
leads ``p`` in one *leadership term* (from becoming leader until it stops; a new leader
epoch of the same leader continues the term, as in Kafka), an
:class:`~rill.coordinator.offsets_log.OffsetStore` is built over:

- :class:`PartitionRecordLog`: the replica's log (reads, compaction), whose appends run
  on the broker's event loop, where a leader's log is written (replica.py), each only if
  the term is still current and the in-sync replicas number at least
  ``min.insync.replicas``; NotLeaderForPartition or an ended term is
  :class:`~rill.coordinator.group_shards.NotCoordinator`, too few in-sync replicas a
  StorageError (Kafka answers COORDINATOR_NOT_AVAILABLE); nothing is written then.
- :class:`HighWatermarkCommit`: a batch is durable once the partition's high watermark
  passes it (every in-sync replica has it), so a commit acknowledged by this broker is
  on every replica the controller may elect next. Leadership lost first is
  NotCoordinator: the batch may or may not survive (the client commits again at the
  new coordinator; commits set offsets, so a repeat is harmless).

An append that the loop did not start within the caller's time is cancelled (nothing is
written) and raises TimeoutError.

Thread-safety: called from the coordinator's threads (gRPC workers, its timer, the
loader); the work on the replica runs on the loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from rill.broker.dataplane.storage import Loop
from rill.broker.log.results import AppendInfo, FileSlice
from rill.broker.log.segment import Segment
from rill.broker.replication.replica import Replica
from rill.broker.replication.replica_manager import ReplicaManager
from rill.client.errors import NotLeaderForPartition, StorageError
from rill.coordinator.fsync_commit import remaining
from rill.coordinator.group_shards import NotCoordinator

__all__ = ["APPEND_WAIT_S", "HighWatermarkCommit", "LeadershipTerm", "PartitionRecordLog"]

APPEND_WAIT_S = 5.0  # the longest an append waits for the loop to run it


class LeadershipTerm:
    """One uninterrupted leadership of a partition by this broker; ``ended`` once it stops."""

    def __init__(self, topic: str, partition: int, number: int) -> None:
        self.topic, self.partition, self.number = topic, partition, number
        self.ended = False

    def __repr__(self) -> str:
        return f"<LeadershipTerm {self.topic}-{self.partition} #{self.number}{' ended' if self.ended else ''}>"


class PartitionRecordLog:
    """The offset store's log: the replica's log, appended on the loop while ``term`` lasts."""

    def __init__(self, replica: Replica, term: LeadershipTerm, replicas: ReplicaManager, loop: Loop,
                 appended: Callable[[Replica], None]) -> None:
        self.replica = replica
        self.term = term
        self.replicas = replicas
        self.loop = loop
        self.appended = appended  # on the loop, after an append: wake followers and readers

    # -- reads and compaction: the replica's own log ------------------------------------------

    @property
    def start_offset(self) -> int:
        return self.replica.log.start_offset

    @property
    def end_offset(self) -> int:
        return self.replica.log.end_offset

    @property
    def flushed_offset(self) -> int:
        return self.replica.high_watermark

    @property
    def segments(self) -> Sequence[Segment]:
        return self.replica.log.segments

    def read(self, offset: int, max_size: int) -> FileSlice:
        return self.replica.log.read(offset, max_size)

    def flush(self) -> None:
        """Nothing: durability here is the high watermark (:class:`HighWatermarkCommit`)."""

    def delete_oldest_segments(self, choose: Callable[[tuple[Segment, ...]], int]) -> list[Segment]:
        return self.replica.log.delete_oldest_segments(choose)

    def close(self) -> None:
        """Nothing: the replica's log belongs to the broker's log manager."""

    # -- appends, on the loop -------------------------------------------------------------------

    def append(self, message_set: bytes) -> AppendInfo:
        state = {"started": False, "cancelled": False}
        lock = threading.Lock()
        done: Future[AppendInfo] = Future()

        def run() -> None:
            with lock:
                if state["cancelled"]:
                    return
                state["started"] = True
            try:
                done.set_result(self._append_on_loop(message_set))
            except BaseException as exc:  # handed to the waiting thread
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        try:
            return done.result(APPEND_WAIT_S)
        except FutureTimeout:
            with lock:
                if not state["started"]:
                    state["cancelled"] = True
                    raise TimeoutError("groups topic: the broker's event loop did not take the append in time; "
                                       "nothing was written") from None
            return done.result()  # it is running now: a single write, soon done

    def _append_on_loop(self, message_set: bytes) -> AppendInfo:
        replica = self.replica
        if self.term.ended:
            raise NotCoordinator(f"{replica.topic}-{replica.partition}: this broker's leadership ended")
        try:
            if self.replicas.leader(replica.topic, replica.partition) is not replica:
                raise NotCoordinator(f"{replica.topic}-{replica.partition} is not held here any more")
        except NotLeaderForPartition as exc:
            raise NotCoordinator(str(exc)) from exc
        count, needed = self.replicas.in_sync_count(replica), self.replicas.min_insync_for(replica)
        if count < needed:
            raise StorageError(f"{replica.topic}-{replica.partition} has {count} in-sync replicas, "
                               f"min.insync.replicas is {needed}: group state cannot be written")
        info = replica.log.append(message_set)
        self.replicas.appended(replica)
        self.appended(replica)
        return info


class HighWatermarkCommit:
    """Durable once the partition's high watermark passes the batch (see the module docstring)."""

    def __init__(self, replica: Replica, term: LeadershipTerm, replicas: ReplicaManager, loop: Loop) -> None:
        self.replica = replica
        self.term = term
        self.replicas = replicas
        self.loop = loop

    def wait(self, end: int, deadline: float | None) -> None:
        if self.replica.leader_state is not None and self.replica.high_watermark >= end and not self.term.ended:
            return
        done: Future[None] = Future()

        def committed() -> None:
            if not done.done():
                done.set_result(None)

        def failed(exc: BaseException) -> None:
            if not done.done():
                done.set_exception(NotCoordinator(str(exc)) if isinstance(exc, NotLeaderForPartition) else exc)

        def register() -> None:
            if self.term.ended:
                failed(NotCoordinator(f"{self.replica.topic}-{self.replica.partition}: leadership ended"))
                return
            self.replicas.wait_committed(self.replica, end, committed, failed)

        self.loop.call_soon_threadsafe(register)
        try:
            done.result(remaining(deadline))
        except FutureTimeout:
            raise TimeoutError("groups topic: the in-sync replicas did not all have the batch in time; it is "
                               "written and may still be committed") from None
