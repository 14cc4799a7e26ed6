"""The iterator protocol: ``for message in consumer:`` (kafka-python's KafkaConsumer iteration).

Each ``next()`` returns one message. They come from poll()'s loop in batches of up to
``max.poll.records``, but taking a batch does not move the positions: each message
moves its partition's position when ``next()`` returns it, as kafka-python's iterator
does. So commit(), auto-commit and close() store exactly what the application was given
(a message still waiting in the batch is never committed), and the waiting messages of a
partition that was seeked, reset or taken away meanwhile are dropped, never returned. A
partition paused meanwhile keeps its waiting messages until it is resumed.

``consumer.timeout.ms`` (kafka-python's ``consumer_timeout_ms``, and Kafka 0.7's
high-level consumer setting; -1, the default: forever) ends the iteration
(StopIteration) when a ``next()`` has waited that long without a message; a new ``for``
loop iterates again. Whatever poll() raises (MemberEvicted, a partition's error ...),
``next()`` raises. A closed consumer ends the iteration.

poll() called while the iterator holds messages returns those first (moving their
positions), so mixing the two neither loses nor repeats a message.

Not thread-safe: see :class:`~rill.client.consumer.consumer.Consumer`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Self

from rill.client.consumer.calls import ConsumerCalls
from rill.client.consumer.subscription import TopicPartition
from rill.client.protocol.messages import Message

Waiting = tuple[Message, int]
"""A message taken from the fetcher and not returned yet, with its partition's epoch when taken."""


class IterationCalls(ConsumerCalls):
    """``__iter__`` / ``__next__`` of the Consumer, and the messages they hold."""

    _waiting: deque[Waiting]  # in the order fetched; set by Consumer.__init__
    _held: dict[TopicPartition, deque[Waiting]]  # messages of paused partitions, in order
    # the poll loop, the Consumer's method (timeout, limit, advance): up to limit messages, [] after timeout
    _fetch_records: Callable[[float | None, int, bool], list[Message]]

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Message:
        """The next message; waits (running poll()'s loop) up to ``consumer.timeout.ms``.

        Raises:
            StopIteration: no message for ``consumer.timeout.ms``, or the consumer is closed (as
                kafka-python's iterator ends then).
            What poll() raises.
        """
        if self._closed:
            raise StopIteration
        timeout_ms = self.config["consumer.timeout.ms"]
        deadline = None if timeout_ms < 0 else self._clock() + timeout_ms / 1000.0
        while True:
            taken = self._take_waiting(1)
            if taken:
                return taken[0]
            remaining = None if deadline is None else max(0.0, deadline - self._clock())
            records = self._fetch_records(remaining, self.config["max.poll.records"], False)  # positions stay
            if records:
                self._keep(records)
            elif deadline is not None and self._clock() >= deadline:
                raise StopIteration

    def _keep(self, records: list[Message]) -> None:
        """Hold a batch taken without moving positions, each message with its partition's epoch now."""
        assignment = self._subscription.assignment
        epochs: dict[tuple[str, int], int] = {}
        waiting = self._waiting
        for m in records:
            key = (m.topic, m.partition)
            epoch = epochs.get(key)
            if epoch is None:
                epoch = epochs[key] = assignment[TopicPartition(*key)].epoch
            waiting.append((m, epoch))

    def _take_waiting(self, limit: int) -> list[Message]:
        """Up to ``limit`` held messages that may still be returned, moving their positions ([] if none)."""
        if not self._waiting and not self._held:
            return []
        sub = self._subscription
        for tp in [tp for tp in self._held if tp not in sub.paused]:  # resumed: before anything newer
            self._waiting.extendleft(reversed(self._held.pop(tp)))
        out: list[Message] = []
        while self._waiting and len(out) < limit:
            message, epoch = self._waiting.popleft()
            tp = TopicPartition(message.topic, message.partition)
            state = sub.assignment.get(tp)
            if state is None or state.epoch != epoch:
                continue  # seeked, reset or taken away since: dropped
            if tp in sub.paused:
                self._hold(tp, (message, epoch))
                continue
            state.position = message.next_offset
            out.append(message)
        return out

    def _hold(self, tp: TopicPartition, first: Waiting) -> None:
        """Set aside the waiting messages of paused ``tp`` (``first`` and those after it) until resumed."""
        held = self._held.setdefault(tp, deque())
        held.append(first)
        rest: deque[Waiting] = deque()
        for item in self._waiting:
            (held if (item[0].topic, item[0].partition) == tp else rest).append(item)
        self._waiting = rest

    def _drop_waiting(self) -> None:
        """Forget the held messages (the consumer closes)."""
        self._waiting.clear()
        self._held.clear()
