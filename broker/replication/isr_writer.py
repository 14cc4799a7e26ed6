"""A leader's ISR changes, written to ZooKeeper off the event loop with a compare-and-set.

A leader that shrinks or expands its in-sync replicas writes the partition's state node
with the zkVersion it last saw (Kafka 2.4's model, ../shared/notes/replication.md 3.4).
If the controller (or anyone) wrote the node since, the write loses: the leader then
re-reads the node, and if the leader epoch there is still its own it takes the new
version and tries again later; otherwise it has been replaced and must not act on the
change. That is what fences a zombie leader: it cannot shrink the ISR to itself, so
its high watermark cannot pass the followers that left it, so it acknowledges nothing.

Writes run on one worker thread of their own, one at a time in order; each result goes
to its callback on that thread (the replica manager posts it to the event loop).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import NamedTuple

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from rill.broker.cluster.partition_states import read_states, update_states
from rill.client.zookeeper.replica_layout import PartitionState

__all__ = ["IsrWriteResult", "IsrWriter"]

log = structlog.get_logger(__name__)


class IsrWriteResult(NamedTuple):
    """The outcome of one ISR write."""

    written: bool
    zk_version: int  # the node's version now (-1 when it could not be read)
    current: PartitionState | None  # the node's value when the write lost (None when written or unreadable)


Done = Callable[[IsrWriteResult], object]


class IsrWriter:
    """Writes partition states for a leader, in order, on one thread."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self._queue: queue.Queue[tuple[str, int, PartitionState, int, Done] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="rill-isr-writer", daemon=True)
        self._thread.start()

    def write(self, topic: str, partition: int, state: PartitionState, zk_version: int, done: Done) -> None:
        """Queue a conditional write of ``state`` over version ``zk_version``; ``done`` gets the outcome. Any thread."""
        self._queue.put((topic, partition, state, zk_version, done))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            topic, partition, state, version, done = item
            result = self._write(topic, partition, state, version)
            try:
                done(result)
            except Exception:  # a callback's bug must not stop the writer
                log.exception("isr.callback_failed", topic=topic, partition=partition)

    def _write(self, topic: str, partition: int, state: PartitionState, version: int) -> IsrWriteResult:
        key = (topic, partition)
        try:
            outcome = update_states(self.zk, {key: (state, version)}, None)
            if key in outcome.versions:
                log.info("isr.updated", topic=topic, partition=partition, isr=list(state.isr),
                         leader_epoch=state.leader_epoch, zk_version=outcome.versions[key])
                return IsrWriteResult(True, outcome.versions[key], None)
            current = read_states(self.zk, topic, [partition]).get(partition)
        except (KazooException, ValueError) as exc:
            log.warning("isr.write_failed", topic=topic, partition=partition, error=str(exc) or type(exc).__name__)
            return IsrWriteResult(False, -1, None)
        if current is None:
            return IsrWriteResult(False, -1, None)
        log.info("isr.update_lost", topic=topic, partition=partition, proposed=list(state.isr),
                 stored_leader_epoch=current[0].leader_epoch, zk_version=current[1])
        return IsrWriteResult(False, current[1], current[0])
