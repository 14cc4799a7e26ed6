"""``commit_async()``: commits that do not block; their callbacks run later, on the consumer's thread.

``Consumer.commit_async(offsets, callback)`` queues a :class:`PendingCommit` and
returns. The queue is sent one commit at a time, in order, each as a gRPC future
(CommitOffsets answers once the offsets are durable on the coordinator): a commit is
sent when the one before it has been answered, so the coordinator stores them in the
order they were made and an older commit never lands after a newer one. (Kafka sends
them concurrently and leaves the ordering to the application; one round trip each is
cheap next to that surprise.) The future's done-callback only wakes the poll loop (the
gRPC library's thread touches nothing else); the answer is read, and
``callback(offsets, exception or None)`` runs, inside a later ``poll()``, ``commit()``
or ``close()``, on the consumer's thread. A callback that raises is logged
(``consumer.commit_callback_failed``) and the others still run.

A synchronous commit (``commit()``, auto-commit) first waits for the queue to drain, so
it never overtakes an earlier asynchronous one; ``close()`` waits too. Each wait is
bounded (``request.timeout.ms`` in all); what is left then fails with ConnectionClosed
(it may or may not have been stored).

A commit is made as the consumer that asked for it: its member id and generation when
``commit_async()`` was called (a manual assignment's standalone commit: ``""`` and -1).
If the consumer rejoined its group since, the commit is not sent and fails with
ILLEGAL_GENERATION, as the coordinator would answer; one asked for while the consumer
was between registrations fails with REBALANCE_IN_PROGRESS, as ``commit()`` does.

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
import structlog

from rill.client.consumer.errors import CommitFailed
from rill.client.errors import ConnectionClosed, RillError
from rill.client.grpc_client import call_error
from rill.client.net.selector_loop import SelectorLoop
from rill.client.structs import TopicPartition
from rill.v1 import coordinator_pb2 as pb

if TYPE_CHECKING:
    from rill.client.consumer.group_client import GroupClient

log = structlog.get_logger(__name__)

__all__ = ["AsyncCommits", "CommitCallback", "PendingCommit"]

CommitCallback = Callable[[dict[TopicPartition, int], "BaseException | None"], object]
"""``callback(offsets, exception)``: the offsets of the commit, and None when they were stored."""

Identity = tuple[str, int]
"""(member id, generation) a commit is made as; ``("", -1)`` for a standalone commit."""


@dataclass(eq=False, slots=True)
class PendingCommit:
    """One ``commit_async()`` call: what to commit, as whom, and where it stands.

    ``identity`` is None when the commit was refused before being sent (``error`` says
    why); ``future`` is the CommitOffsets call once sent.
    """

    offsets: dict[TopicPartition, int]
    callback: CommitCallback | None
    identity: Identity | None
    error: BaseException | None = None
    future: grpc.Future | None = None


class AsyncCommits:
    """The queue of one group client's asynchronous commits; see the module docstring."""

    def __init__(self, client: GroupClient, network: SelectorLoop, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.network = network
        self.clock = clock
        self._queue: deque[PendingCommit] = deque()

    def __len__(self) -> int:
        """Commits not yet answered (their callbacks not yet run)."""
        return len(self._queue)

    def submit(self, offsets: Mapping[TopicPartition, int], callback: CommitCallback | None) -> None:
        """Queue a commit of ``offsets``; sent now if it is first in line and the coordinator is known."""
        try:
            identity: Identity | None = self.client.commit_identity(offsets)
            error = None
        except CommitFailed as exc:
            identity, error = None, exc
        pending = PendingCommit(dict(offsets), callback, identity, error)
        self._queue.append(pending)
        if len(self._queue) == 1 and _to_send(pending):
            self._send(pending, may_block=False)  # never finished here: the callback runs in a later call

    def pump(self, may_block: bool) -> None:
        """Finish the answered commits at the head of the queue (running their callbacks), then send the next.

        ``may_block``: finding an unknown coordinator (blocking, bounded) is allowed; without it a
        commit waits in the queue for a call that allows it (the next poll(), commit() or close()).
        """
        queue = self._queue
        while queue:
            head = queue[0]
            if _to_send(head):
                if head.future is None and not self._send(head, may_block):
                    return
                if head.future is not None:
                    if not head.future.done():
                        return
                    head.error = self._answer(head)
            queue.popleft()
            self._finish(head)

    def flush(self, deadline: float) -> None:
        """Wait (blocking) until every queued commit is answered and its callback has run, or ``deadline``
        (monotonic seconds) passes: the commits left then fail with ConnectionClosed."""
        while True:
            self.pump(may_block=True)
            if not self._queue:
                return
            remaining = deadline - self.clock()
            if remaining <= 0:
                self.fail_all(ConnectionClosed("the coordinator did not answer this commit in time; it may or may "
                                               "not have been stored"))
                return
            future = self._queue[0].future
            if future is not None:
                try:
                    future.result(timeout=remaining)
                except (grpc.RpcError, grpc.FutureTimeoutError, grpc.FutureCancelledError):
                    pass  # read again by pump()

    def fail_all(self, error: BaseException) -> None:
        """Give up every queued commit: its callback gets ``error`` (an in-flight call is cancelled)."""
        while self._queue:
            head = self._queue.popleft()
            if head.future is not None:
                head.future.cancel()
            head.error = head.error or error
            self._finish(head)

    # ---------------------------------------------------------------- one commit

    def _send(self, head: PendingCommit, may_block: bool) -> bool:
        """Send ``head``, or set its error; False when it must wait for a call that may block."""
        client = self.client
        assert head.identity is not None
        if head.identity != client.current_identity():
            head.error = CommitFailed(client.group, head.identity[1], pb.ILLEGAL_GENERATION,
                                      {tp: "ILLEGAL_GENERATION" for tp in head.offsets})
            return True
        coordinator = client.coordinator_lookup.current
        if coordinator is None:
            if not may_block:
                return False
            try:
                coordinator = client.coordinator_lookup.find()
            except RillError as exc:
                head.error = exc
                return True
        consumer_id, generation = head.identity
        request = pb.CommitOffsetsRequest(
            client_id=coordinator.client_id, consumer_group=client.group, consumer_id=consumer_id,
            generation=generation, offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o)
                                            for (t, p), o in head.offsets.items()])
        head.future = coordinator.groups.CommitOffsets.future(request, timeout=client.request_timeout)
        head.future.add_done_callback(self.network.wake)
        return True

    def _answer(self, head: PendingCommit) -> BaseException | None:
        """The outcome of ``head``'s answered call: None (stored), or the error."""
        assert head.future is not None and head.identity is not None
        try:
            response = head.future.result()
        except grpc.FutureCancelledError:
            return ConnectionClosed("the commit was cancelled before the coordinator answered")
        except grpc.RpcError as exc:
            coordinator = self.client.coordinator_lookup.current
            self.client.coordinator_lookup.mark_unknown()
            # a refusal by the ACLs is its AuthorizationFailed; anything else ConnectionClosed
            return call_error(exc, coordinator.address if coordinator is not None else "the coordinator")
        return self.client.commit_result(head.offsets, head.identity, response)

    def _finish(self, head: PendingCommit) -> None:
        if head.callback is None:
            if head.error is not None:
                log.warning("consumer.commit_async_failed", group=self.client.group, error=str(head.error))
            return
        try:
            head.callback(head.offsets, head.error)
        except Exception:  # noqa: BLE001 - a user's callback must not break the loop
            log.exception("consumer.commit_callback_failed", group=self.client.group)


def _to_send(commit: PendingCommit) -> bool:
    """Does ``commit`` need a CommitOffsets call (not refused already, and something to commit)?"""
    return commit.error is None and commit.identity is not None and bool(commit.offsets)
