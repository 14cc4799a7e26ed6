"""SendResponse: the future ``Producer.send`` returns at once (seed 003).

A response covers one message (``send``) or several sent together (``send_many``).
Its messages live in one or more *batches* (a partition's unit of sending); a
response is done when every batch holding its messages is acknowledged or has failed.

Two small building blocks, shared with the accumulator:

- :class:`Completion` resolves once and runs the callbacks added to it (from the
  thread that resolves it, the send thread), or at once when added after it resolved.
  Its :class:`threading.Event` is made only when somebody waits.
- :class:`BatchResult` is a completion that ends with an offset or an error.

Thread-safety: every method of :class:`SendResponse` may be called from any thread.
"""

from __future__ import annotations

import itertools
import operator
import threading
import time
from collections.abc import Callable, Sequence
from typing import ClassVar

from rill.client.producer.errors import ProducerTimeout
from rill.client.structs import RecordMetadata

__all__ = ["SendResponse", "Completion", "BatchResult", "MESSAGE_OVERHEAD"]

MESSAGE_OVERHEAD = 10  # length int32, magic int8, attributes int8, crc uint32: a magic-1 message's header

_LOCK = threading.Lock()  # guards every Completion's callbacks and event (held for a few lines only)


class Completion:
    """Something that resolves once: callbacks run when it does, waiters wake."""

    __slots__ = ("topic", "_callbacks", "_event")
    final: ClassVar[bool] = False  # True for results that hold messages' outcomes

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._callbacks: list[Callable[[], object]] | None = []
        self._event: threading.Event | None = None

    @property
    def resolved(self) -> bool:
        return self._callbacks is None

    def add_callback(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` when this resolves, or now (in this thread) if it has."""
        with _LOCK:
            if self._callbacks is not None:
                self._callbacks.append(fn)
                return
        fn()

    def wait(self, timeout: float | None) -> bool:
        """Block until resolved or ``timeout`` seconds passed; return whether it resolved."""
        with _LOCK:
            if self._callbacks is None:
                return True
            if timeout is not None and timeout <= 0:
                return False
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def resolve(self) -> list[Callable[[], object]]:
        """Mark resolved, wake waiters, and return the callbacks for the caller to run."""
        with _LOCK:
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        return callbacks or []


class BatchResult(Completion):
    """The outcome of a batch of messages sent to one partition together.

    Offsets: message ``i`` of an uncompressed batch is at ``first_offset`` plus the
    encoded sizes of the messages before it (``MESSAGE_OVERHEAD + len(payload)`` each).
    Every message of a compressed batch (one gzip wrapper) has the wrapper's offset. With
    ``acks=none`` nothing is acknowledged: every offset is -1.
    """

    __slots__ = ("error", "first_offset", "compressed", "lengths", "_starts")
    final: ClassVar[bool] = True

    def __init__(self, topic: str) -> None:
        super().__init__(topic)
        self.error: BaseException | None = None
        self.first_offset = -1
        self.compressed = False
        self.lengths: Sequence[int] = ()  # payload sizes, kept once the payloads are dropped
        self._starts: list[int] | None = None

    @classmethod
    def failed(cls, topic: str, error: BaseException) -> BatchResult:
        """A result that failed before anything was queued (invalid topic, message too large ...)."""
        result = cls(topic)
        result.error = error
        result.resolve()
        return result

    @classmethod
    def done_empty(cls, topic: str) -> BatchResult:
        """A result for no messages at all (``send_many`` of an empty list): done at once."""
        result = cls(topic)
        result.resolve()
        return result

    def offsets(self, start: int, count: int) -> list[int]:
        """Offsets of messages ``start .. start+count-1``; only valid once resolved without error."""
        if self.compressed or self.first_offset < 0:
            return [self.first_offset] * count
        starts = self._starts
        if starts is None:
            sizes = map(operator.add, self.lengths, itertools.repeat(MESSAGE_OVERHEAD))
            starts = self._starts = list(itertools.accumulate(sizes, initial=self.first_offset))
        return starts[start:start + count]


Part = tuple[Completion, int, int]  # (batch or placeholder, index of the first message in it, count)


class SendResponse:
    """The future of one ``send`` (one message) or ``send_many`` (several, in order).

    ``topic`` is the topic; ``partition`` the partition chosen (None while the topic's
    partition count is still being discovered, or when the send failed before a
    partition was chosen). ``len(response)`` is the number of messages. ``get_offset``
    is the first message's offset, ``get_offsets`` every message's; both raise the
    error when the send failed.
    """

    # _batch: the completion holding the first message (a batch, a failed result, or the
    #   topic's unassigned placeholder); _where: the first message's index in it when all
    #   the messages are there, else the tuple of every part; _count: number of messages.
    # _assign writes _batch last and readers read it first (see _parts), so a reader that
    # sees a final _batch also sees the _where that goes with it.
    __slots__ = ("_batch", "_where", "_count")

    def __init__(self, parts: tuple[Part, ...], count: int) -> None:
        self._count = count
        self._assign(parts)

    @classmethod
    def _single(cls, batch: Completion, index: int) -> SendResponse:
        """One message at ``index`` of ``batch`` (the hot path of ``send``: no __init__ call)."""
        response = _new(cls)
        response._batch = batch
        response._where = index
        response._count = 1
        return response

    def _assign(self, parts: tuple[Part, ...]) -> None:
        """Point at the completions holding the messages (``parts`` in message order)."""
        self._where = parts[0][1] if len(parts) == 1 else parts
        self._batch = parts[0][0]

    def _parts(self) -> tuple[Part, ...]:
        batch = self._batch
        if not batch.final:
            return ((batch, 0, self._count),)
        where = self._where
        return ((batch, where, self._count),) if type(where) is int else where  # type: ignore[return-value]

    @property
    def topic(self) -> str:
        return self._batch.topic

    @property
    def partition(self) -> int | None:
        return getattr(self._batch, "partition", None)

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        state = "pending"
        if self.done():
            error = self._first_error()
            state = "done" if error is None else f"failed: {error!r}"
        return f"<SendResponse {self.topic}-{self.partition} {self._count} message(s) {state}>"

    def done(self) -> bool:
        """Whether every message has an offset or the send has failed."""
        return all(part.final and part.resolved for part, _, _ in self._parts())

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done or ``timeout`` seconds (None: no limit) have passed; return ``done()``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            parts = self._parts()
            for part, _, _ in parts:
                remaining = None if deadline is None else deadline - time.monotonic()
                if not part.wait(remaining):
                    return False
            if parts[0][0].final:  # a placeholder is replaced before it resolves: look again
                return True

    def get_error(self, timeout: float | None = None) -> BaseException | None:
        """Wait until done; the error if the send failed, else None.

        Raises:
            ProducerTimeout: not done within ``timeout`` seconds.
        """
        self._wait_or_raise(timeout)
        return self._first_error()

    def get_offset(self, timeout: float | None = None) -> int:
        """Wait until done; the offset of the (first) message (-1 with ``acks=none``).

        Raises:
            ProducerTimeout: not done within ``timeout`` seconds.
            the send's error: BrokerError, ConnectionClosed, ProducerTimeout, ProducerClosed ...
        """
        offsets = self.get_offsets(timeout)
        if not offsets:
            raise ValueError("this response covers no messages")
        return offsets[0]

    def get_offsets(self, timeout: float | None = None) -> list[int]:
        """Wait until done; every message's offset, in the order they were given.

        Raises: as :meth:`get_offset` (if any message failed, its error).
        """
        self._wait_or_raise(timeout)
        error = self._first_error()
        if error is not None:
            raise error
        offsets: list[int] = []
        for part, start, count in self._parts():
            assert isinstance(part, BatchResult)
            offsets.extend(part.offsets(start, count))
        return offsets

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """kafka-python's ``future.get``: wait until done; where the (first) message was stored.

        Raises: as :meth:`get_offset`.
        """
        offset = self.get_offset(timeout)
        partition = self.partition
        assert partition is not None  # a send that succeeded has its partition
        return RecordMetadata(self.topic, partition, offset)

    def add_callback(self, fn: Callable[[RecordMetadata], object]) -> SendResponse:
        """kafka-python's ``future.add_callback``: ``fn(record_metadata)`` once the send succeeded
        (never if it failed); from the send thread, as :meth:`on_completion`. Returns self."""
        self.on_completion(lambda r: None if r._first_error() is not None else fn(r.get(0)))
        return self

    def add_errback(self, fn: Callable[[BaseException], object]) -> SendResponse:
        """kafka-python's ``future.add_errback``: ``fn(error)`` once the send failed (never if it
        succeeded); from the send thread, as :meth:`on_completion`. Returns self."""
        def failed(response: SendResponse) -> None:
            error = response._first_error()
            if error is not None:
                fn(error)
        self.on_completion(failed)
        return self

    def on_completion(self, callback: Callable[[SendResponse], object]) -> None:
        """Call ``callback(self)`` once done: from the send thread, or at once (in this
        thread) if already done. Keep it short: it delays every other send.
        Exceptions it raises in the send thread are logged and dropped."""
        parts = self._parts()
        first = parts[0][0]
        if not first.final:  # messages still waiting for their topic's partitions
            first.add_callback(lambda: self.on_completion(callback))
            return
        if len(parts) == 1:
            first.add_callback(lambda: callback(self))
            return
        seen = itertools.count(1)
        total = len(parts)

        def part_done() -> None:
            if next(seen) == total:
                callback(self)

        for part, _, _ in parts:
            part.add_callback(part_done)

    def _wait_or_raise(self, timeout: float | None) -> None:
        if not self.wait(timeout):
            raise ProducerTimeout(f"send to {self.topic!r} not acknowledged within {timeout} s")

    def _first_error(self) -> BaseException | None:
        for part, _, _ in self._parts():
            error = getattr(part, "error", None)
            if error is not None:
                return error  # type: ignore[no-any-return]
        return None


_new = object.__new__
