"""The producer's queues: one per partition, plus one "unassigned" queue per topic (seed 003).

The caller's thread appends serialized messages to the open batch of the partition the
partitioner chose; the send thread takes whole batches when they are ready and hands
back their outcomes. A batch is *ready* when it is full (``batch.size`` bytes), when it
has waited ``linger`` seconds, when a later batch of its partition exists, or when the
producer is flushing, closing, or out of buffer space. A message bigger than
``batch.size`` gets a batch of its own.

Messages for a topic whose partition count is not known yet go to the topic's
*unassigned* queue; the send thread learns the count (METADATA, creating the topic if
need be) and then partitions them, in the order they were sent, with :meth:`assign`.
So the caller's thread never waits for metadata.

Memory: every queued or in-flight message counts ``MESSAGE_OVERHEAD + len(payload)``
bytes (its encoded size) against ``buffer_memory`` from the moment it is appended until
its batch completes or fails. A send that would go over waits for room up to
``max_block`` seconds, then raises :class:`BufferFull`; a ``send_many`` reserves room
for all its messages at once, so it is queued whole or not at all.

Thread-safety: one lock guards everything here. The caller's threads use the append
methods; only the send thread calls :meth:`drain`, :meth:`requeue`, :meth:`assign`,
:meth:`release` and the other send-thread methods. A batch taken by :meth:`drain`
belongs to the send thread until it is released. The batch and queue types are in
:mod:`rill.client.producer.batches` (re-exported here).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from rill.client.errors import WrongPartition
from rill.client.producer.batches import PartitionQueue, ProducerBatch, TopicState, Unassigned, encoded_ends
from rill.client.producer.errors import BufferFull, ProducerClosed
from rill.client.producer.future import MESSAGE_OVERHEAD, BatchResult, Completion, Part, SendResponse
from rill.client.producer.partitioner import Partitioner

__all__ = ["RecordAccumulator", "ProducerBatch", "PartitionQueue", "TopicState", "Unassigned", "encoded_ends"]

Node = TypeVar("Node", bound=Hashable)

Callbacks = list[Callable[[], object]]


class RecordAccumulator:
    """Per-partition batch queues with linger, batch size and a bounded buffer (see the module doc).

    ``clock`` (monotonic seconds) is injectable for tests; ``wakeup`` is set by the send
    thread and called whenever it should look again sooner than it planned (a queue got
    its first batch, a batch filled up).
    """

    def __init__(self, *, batch_size: int, linger: float, buffer_memory: int, max_block: float,
                 request_timeout: float, partitioner: Partitioner,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.batch_size = batch_size
        self.linger = linger
        self.buffer_memory = buffer_memory
        self.max_block = max_block
        self.request_timeout = request_timeout
        self.partitioner = partitioner
        self.clock = clock
        self.wakeup: Callable[[], None] = lambda: None
        self.topics: dict[str, TopicState] = {}
        self.used = 0  # bytes of queued and in-flight messages
        self.closed = False
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._ready: dict[PartitionQueue, None] = {}  # queues holding batches (insertion ordered)
        self._unassigned: dict[str, Unassigned] = {}  # topics with messages waiting for a partition count
        self._incomplete: set[Completion] = set()  # batches and unassigned placeholders not yet resolved
        self._blocked = 0  # appends waiting for room
        self._flushing = 0
        self.on_failed: Callable[[str, int], None] = lambda topic, records: None
        """Told (topic, messages) when unassigned messages fail (the producer's metrics)."""

    # ---------------------------------------------------------------- caller's thread

    def append(self, state: TopicState, partition: int, payload: bytes) -> SendResponse:
        """Queue one message for ``partition`` of a topic whose partitions are known.

        Raises:
            BufferFull: no room within ``max_block`` seconds. ProducerClosed: closed.
        """
        size = len(payload) + MESSAGE_OVERHEAD
        queue = state.queues[partition]
        with self._lock:
            if self.closed or self.used + size > self.buffer_memory:  # _reserve, inlined: the hot path
                self._wait_for_room(size)
            self.used += size
            batch = queue.open
            wake = False
            if batch is None or (batch.size + size > self.batch_size and batch.payloads):
                wake = not queue.batches
                batch = self._open_batch(queue)
            index = len(batch.payloads)
            batch.payloads.append(payload)
            batch.size += size
            if batch.size >= self.batch_size:
                queue.open = None
                wake = True
        if wake:
            self.wakeup()
        return SendResponse._single(batch, index)

    def append_many(self, state: TopicState, partition: int, payloads: list[bytes],
                    ends: Sequence[int]) -> SendResponse:
        """Queue several messages for one partition, in order, as one response.

        ``ends[i]`` is the encoded size of ``payloads[: i + 1]`` (cumulative). Room for all
        of them is reserved at once.
        """
        queue = state.queues[partition]
        with self._lock:
            self._reserve(ends[-1])
            parts = self._place(queue, payloads, ends)
        self.wakeup()
        return SendResponse(parts, len(payloads))

    def append_unassigned(self, topic: str, payloads: list[bytes], ends: Sequence[int], key: bytes | None,
                          partition: int | None) -> SendResponse:
        """Queue messages for a topic whose partition count is not known (yet).

        They wait in the topic's unassigned queue until the send thread learns the count;
        if it became known meanwhile, they are partitioned now.
        """
        size = ends[-1]
        with self._lock:
            self._reserve(size)
            state = self.topics.get(topic)
            if state is None:
                state = self.topics[topic] = TopicState(topic)
            if state.partitions is not None:
                parts = self._partition(state, payloads, ends, key, partition)
                return SendResponse(parts, len(payloads))
            pending = self._unassigned.get(topic)
            if pending is None:
                pending = self._unassigned[topic] = Unassigned(topic, self.clock())
                self._incomplete.add(pending)
            response = SendResponse(((pending, 0, len(payloads)),), len(payloads))
            pending.entries.append((payloads, key, partition, size, response))
        self.wakeup()
        return response

    def _reserve(self, size: int) -> None:
        if self.closed or self.used + size > self.buffer_memory:
            self._wait_for_room(size)
        self.used += size

    def _wait_for_room(self, size: int) -> None:
        """Wait (lock held, released while waiting) until ``size`` more bytes fit."""
        deadline = time.monotonic() + self.max_block
        self._blocked += 1
        try:
            if self.used + size > self.buffer_memory:
                self.wakeup()  # send everything now: a blocked send makes every batch ready
            while True:
                if self.closed:
                    raise ProducerClosed("the producer is closed")
                if self.used + size <= self.buffer_memory:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferFull(
                        f"no room for {size} bytes within max.block.ms={self.max_block * 1000:.0f}: "
                        f"{self.used} of buffer.memory={self.buffer_memory} bytes are queued or in flight")
                self._space.wait(remaining)
        finally:
            self._blocked -= 1

    def _open_batch(self, queue: PartitionQueue) -> ProducerBatch:
        now = self.clock()
        batch = ProducerBatch(queue.topic, queue.partition, now, now + self.linger + self.request_timeout)
        queue.open = batch
        if not queue.batches and queue not in self._ready:
            self._ready[queue] = None
        queue.batches.append(batch)
        self._incomplete.add(batch)
        return batch

    def _place(self, queue: PartitionQueue, payloads: list[bytes], ends: Sequence[int]) -> tuple[Part, ...]:
        """Append ``payloads`` (room already reserved) across as many batches as they need."""
        parts: list[Part] = []
        i, n, base = 0, len(payloads), 0
        while i < n:
            batch = queue.open or self._open_batch(queue)
            k = bisect.bisect_right(ends, base + self.batch_size - batch.size, i)
            if k == i:
                if batch.payloads:
                    queue.open = None  # full: continue in a new batch
                    continue
                k = i + 1  # a message bigger than batch.size: a batch of its own
            size = ends[k - 1] - base
            parts.append((batch, len(batch.payloads), k - i))
            batch.payloads.extend(payloads[i:k])
            batch.size += size
            if batch.size >= self.batch_size:
                queue.open = None
            i, base = k, ends[k - 1]
        return tuple(parts)

    def _partition(self, state: TopicState, payloads: list[bytes], ends: Sequence[int], key: bytes | None,
                   partition: int | None) -> tuple[Part, ...]:
        """Place messages of a topic whose partitions are known (lock held, room reserved).

        A partition out of range, or a partitioner that raises, fails the messages
        (their room is given back) instead of raising.
        """
        count = state.partitions or 0
        error: BaseException | None = None
        if partition is None:
            try:
                partition = state.choose(self.partitioner, key)
            except Exception as exc:
                error = exc
        if error is None and not (isinstance(partition, int) and 0 <= partition < count):
            error = WrongPartition(f"partition {partition} of topic {state.name!r} does not exist "
                                   f"(it has {count} partitions)")
        if error is not None or partition is None:
            self.used -= ends[-1]
            return ((BatchResult.failed(state.name, error or WrongPartition()), 0, len(payloads)),)
        return self._place(state.queues[partition], payloads, ends)

    # ---------------------------------------------------------------- flush and close

    def begin_flush(self) -> list[Completion]:
        """Make every batch ready until :meth:`end_flush`; return what is pending now."""
        with self._lock:
            self._flushing += 1
            return list(self._incomplete)

    def end_flush(self) -> None:
        with self._lock:
            self._flushing -= 1

    def close(self) -> None:
        """Refuse appends from now on (they raise ProducerClosed); wake blocked senders."""
        with self._lock:
            self.closed = True
            self._space.notify_all()

    def abort(self, error: BaseException) -> tuple[list[ProducerBatch], Callbacks]:
        """Close; fail every unassigned message with ``error`` and take every queued batch
        (for the caller to fail). Returns ``(batches, callbacks to run)``."""
        with self._lock:
            self.closed = True
            self._space.notify_all()
            batches = [b for queue in self._ready for b in queue.batches]
            for queue in self._ready:
                queue.batches.clear()
                queue.open = None
            self._ready.clear()
            topics = list(self._unassigned)
        callbacks: Callbacks = []
        for topic in topics:
            callbacks += self.fail_unassigned(topic, error)
        return batches, callbacks

    # ---------------------------------------------------------------- send thread

    def drain(self, now: float, route: Callable[[str, int], Node | None],
              budgets: dict[Node, int]) -> tuple[dict[Node, list[ProducerBatch]], list[PartitionQueue], float]:
        """Take the ready batches whose leader can take them.

        ``route(topic, partition)`` names the partition's broker (a node), or None when
        there is no leader or no connection to it. ``budgets[node]`` is how many bytes
        that node can take now (missing or <= 0: busy); it is decreased by what is taken.

        Returns ``(batches by node, stuck queues, next check)``: stuck queues have a ready
        batch but no route (the caller expires them); ``next check`` is the earliest time
        a queue that is not ready yet will be (linger or retry backoff), or ``inf``.
        """
        taken: dict[Node, list[ProducerBatch]] = {}
        stuck: list[PartitionQueue] = []
        next_check = float("inf")
        with self._lock:
            force = self._flushing > 0 or self._blocked > 0 or self.closed
            for queue in list(self._ready):
                due = self._due(queue.batches[0], queue, force)
                if due > now:
                    next_check = min(next_check, due)
                    continue
                node = route(queue.topic, queue.partition)
                if node is None:
                    stuck.append(queue)
                    continue
                budget = budgets.get(node, 0)
                if budget > 0:
                    budgets[node], due = self._take(queue, now, force, budget, taken.setdefault(node, []))
                    next_check = min(next_check, due)
        return taken, stuck, next_check

    def _due(self, batch: ProducerBatch, queue: PartitionQueue, force: bool) -> float:
        """When ``batch`` (the first of its queue not taken) is ready to be sent."""
        if batch is queue.open and not force:
            return max(batch.not_before, batch.created + self.linger)
        return batch.not_before

    def _take(self, queue: PartitionQueue, now: float, force: bool, budget: int,
              out: list[ProducerBatch]) -> tuple[int, float]:
        """Move ready batches from ``queue`` to ``out`` within ``budget`` bytes; return the
        budget left and when the next batch of the queue will be ready (``inf``: none left)."""
        batches = queue.batches
        while batches and budget > 0:
            batch = batches[0]
            due = self._due(batch, queue, force)
            if due > now:
                return budget, due
            if batch is queue.open:
                queue.open = None
            batches.popleft()
            out.append(batch)
            budget -= batch.size
        if not batches:
            del self._ready[queue]
        return budget, float("inf")

    def expire(self, queue: PartitionQueue, now: float) -> list[ProducerBatch]:
        """Take the batches at the head of ``queue`` whose deadline has passed."""
        expired = []
        with self._lock:
            batches = queue.batches
            while batches and batches[0].deadline <= now:
                batch = batches.popleft()
                if batch is queue.open:
                    queue.open = None
                expired.append(batch)
            if not batches:
                self._ready.pop(queue, None)
        return expired

    def requeue(self, batches: Sequence[ProducerBatch]) -> None:
        """Put batches taken by :meth:`drain` back at the front of their queues, keeping their order."""
        with self._lock:
            for batch in reversed(batches):
                queue = self.topics[batch.topic].queues[batch.partition]
                queue.batches.appendleft(batch)
                self._ready.setdefault(queue, None)

    def release(self, batch: BatchResult, size: int) -> None:
        """A batch completed or failed: give its bytes back and stop tracking it."""
        with self._lock:
            self.used -= size
            self._incomplete.discard(batch)
            if self._blocked:
                self._space.notify_all()

    def next_deadline(self, queue: PartitionQueue) -> float:
        with self._lock:
            return queue.batches[0].deadline if queue.batches else float("inf")

    def unassigned(self) -> dict[str, float]:
        """Topics with messages waiting for a partition count, and when the oldest arrived."""
        with self._lock:
            return {name: pending.created for name, pending in self._unassigned.items()}

    def topic_names(self) -> list[str]:
        with self._lock:
            return sorted(self.topics)

    def assign(self, topic: str, partitions: int, available: tuple[int, ...] | None = None) -> Callbacks:
        """The topic has ``partitions`` partitions: make queues and partition its unassigned messages.

        ``available``: the partitions with a live broker when some have none (None: all).

        Returns the callbacks to run (outside any lock) for the resolved placeholder.
        """
        with self._lock:
            state = self.topics.get(topic)
            if state is None:
                state = self.topics[topic] = TopicState(topic)
            for p in range(len(state.queues), partitions):
                state.queues.append(PartitionQueue(topic, p))
            if state.partitions is None or partitions > state.partitions:
                state.partitions = partitions
            state.available = available
            pending = self._unassigned.pop(topic, None)
            if pending is None:
                return []
            for payloads, key, partition, size, response in pending.entries:
                ends = encoded_ends(payloads)
                parts = self._partition(state, payloads, ends, key, partition)
                pending.batches.extend(p for p, _, _ in parts if isinstance(p, ProducerBatch))
                response._assign(parts)
            self._incomplete.discard(pending)
        return pending.resolve()

    def fail_unassigned(self, topic: str, error: BaseException, forget: bool = False) -> Callbacks:
        """Fail the topic's unassigned messages with ``error``; ``forget`` also drops the topic
        (when its partitions were never known) so that a later send starts afresh."""
        with self._lock:
            pending = self._unassigned.pop(topic, None)
            if pending is None:
                return []
            state = self.topics.get(topic)
            if forget and state is not None and state.partitions is None:
                del self.topics[topic]
            self._incomplete.discard(pending)
            result = BatchResult.failed(topic, error)
            failed = 0
            for _, _, _, size, response in pending.entries:
                self.used -= size
                failed += len(response)
                response._assign(((result, 0, len(response)),))
            if self._blocked:
                self._space.notify_all()
        self.on_failed(topic, failed)
        return pending.resolve()

