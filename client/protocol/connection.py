"""One client connection to a broker, without I/O (sans-IO).

In the manner of h11's ``Connection`` and kafka-python's ``KafkaProtocol``: requests go
in and bytes come out; bytes go in and ``(request, response)`` pairs come out. The
object never touches a socket; a driver (rill.client.net.broker_socket) moves the bytes.

It owns the one protocol fact every client relies on (docs/protocol.md): a broker
answers a connection's requests in the order they were sent, without correlation ids
(Kafka 0.7), and requests without a response (PRODUCE, MULTIPRODUCE) take no slot. So
the n-th response belongs to the n-th request that has one, and a request without a
response is done once its last byte is written.

It also owns framing (``size int32`` then the body) with the size limits checked before
anything is allocated (a response is at least 2 bytes: its error code), and the errors:
a bad size raises :class:`~rill.client.protocol.framing.FrameTooLarge`, a response no
request waits for raises :class:`UnexpectedResponse`; both are
:class:`~rill.client.protocol.framing.DecodeError`, after which the stream's position
is lost and the connection must be dropped (:meth:`ProtocolConnection.reset`).

A request is remembered with the caller's ``context`` (any object: the producer's
batches, the consumer's partitions) and comes back with its response.

Not thread-safe.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from rill.client.protocol.framing import DecodeError, FrameDecoder

__all__ = ["DEFAULT_MAX_RESPONSE_SIZE", "MIN_RESPONSE_SIZE", "ProtocolConnection", "UnexpectedResponse"]

C = TypeVar("C")

DEFAULT_MAX_RESPONSE_SIZE = 256 * 1024 * 1024
MIN_RESPONSE_SIZE = 2  # the error code
DIRECT_RESPONSE_BYTES = 64 * 1024
"""Responses larger than this are received straight into a buffer of their own size."""


class UnexpectedResponse(DecodeError):
    """A response arrived while no request was waiting for one."""


class _Request(Generic[C]):
    """A request queued on the connection: its bytes are ``start..end`` of the output stream."""

    __slots__ = ("context", "start", "end")

    def __init__(self, context: C, start: int, end: int) -> None:
        self.context = context
        self.start = start
        self.end = end


class ProtocolConnection(Generic[C]):
    """The state of one broker connection: bytes to write, requests in flight, a frame decoder.

    ``name`` (``host:port``) appears in error messages.
    """

    def __init__(self, name: str, max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE) -> None:
        self.name = name
        self.max_response_size = max_response_size
        self.queued = 0  # bytes handed to the connection so far
        self.written = 0  # bytes reported written so far
        self._out: deque[memoryview] = deque()
        self._awaiting: deque[_Request[C]] = deque()  # requests with a response, in order
        self._unanswered: deque[_Request[C]] = deque()  # requests without one, done once written
        self._decoder = self._new_decoder()
        self._large_last = False  # the last response had a buffer of its own (see receive_size)

    def _new_decoder(self) -> FrameDecoder:
        return FrameDecoder(self.max_response_size, direct_bytes=DIRECT_RESPONSE_BYTES,
                            min_frame_size=MIN_RESPONSE_SIZE)

    # ---------------------------------------------------------------- requests in, bytes out

    def send(self, frame: Sequence[bytes | bytearray | memoryview], context: C, *, answered: bool = True) -> None:
        """Queue a request: ``frame`` is its buffers (the size field included), written in order.

        ``answered``: the broker sends a response to it (False for PRODUCE and MULTIPRODUCE).
        """
        start = self.queued
        for buf in frame:
            view = memoryview(buf)
            self._out.append(view)
            self.queued += view.nbytes
        (self._awaiting if answered else self._unanswered).append(_Request(context, start, self.queued))

    @property
    def has_output(self) -> bool:
        return bool(self._out)

    def output(self, limit: int) -> list[memoryview]:
        """The next buffers to write, at most ``limit`` of them (they stay queued until :meth:`wrote`)."""
        out = self._out
        return list(out) if len(out) <= limit else [out[i] for i in range(limit)]

    def wrote(self, count: int) -> list[C]:
        """``count`` bytes of :meth:`output` were written; returns the contexts of the requests
        without a response that are now done."""
        self.written += count
        out = self._out
        while out and count >= out[0].nbytes:
            count -= out.popleft().nbytes
        if count:
            out[0] = out[0][count:]
        done: list[C] = []
        unanswered = self._unanswered
        while unanswered and unanswered[0].end <= self.written:
            done.append(unanswered.popleft().context)
        return done

    # ---------------------------------------------------------------- bytes in, responses out

    def receive_size(self, default: int) -> int:
        """How many bytes to ask the kernel for when there is no :meth:`receive_target`.

        Right after a large response, and between responses, just the next size field
        (4): responses to fetches come in runs, and a large body that follows is then
        received straight into its own buffer instead of first into ``default`` bytes that
        must be copied (about 12% of a 1 MiB fetch's cost). Otherwise ``default``, so that
        one system call takes in many small responses.
        """
        return 4 if self._large_last and not self._decoder.in_frame() else default

    def receive_target(self) -> memoryview | None:
        """Where to receive the rest of a large response directly, or None (then :meth:`receive`)."""
        if self._large_last:  # only then was just a size field asked for (receive_size): keep the wait for
            self._decoder.start_direct_body()  # a small response free of work (see BrokerSocket.wait_response)
        target = self._decoder.body_target()
        return target if target is not None and len(target) else None  # a full body waits to be handed out

    def received_into(self, count: int) -> None:
        """``count`` bytes were written into :meth:`receive_target`."""
        self._decoder.commit(count)

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes that arrived from the broker."""
        self._decoder.feed(data)

    @property
    def has_input(self) -> bool:
        """Whether bytes were received that are not yet handed out (else :meth:`next_response` has nothing)."""
        return self._decoder.in_frame()

    def next_response(self) -> tuple[C, memoryview] | None:
        """The next whole response (its body, after the size field) and its request's context, or None.

        Raises:
            FrameTooLarge: a size field outside ``2..max_response_size`` (nothing allocated).
            UnexpectedResponse: a response while no request waits for one.
        """
        body = self._decoder.next_frame()
        if body is None:
            return None
        if not self._awaiting:
            raise UnexpectedResponse(f"broker {self.name} sent a response nobody asked for")
        self._large_last = len(body) > DIRECT_RESPONSE_BYTES
        return self._awaiting.popleft().context, body

    # ---------------------------------------------------------------- the requests in flight

    @property
    def in_flight(self) -> int:
        """Requests queued and not done (written but unanswered, or not yet written)."""
        return len(self._awaiting) + len(self._unanswered)

    def oldest(self) -> Iterator[C]:
        """The oldest request of each kind (with and without a response): whose deadline comes first."""
        for queue in (self._awaiting, self._unanswered):
            if queue:
                yield queue[0].context

    def contexts(self) -> Iterator[C]:
        """Every request in flight, those with a response first, each kind in order."""
        for request in self._awaiting:
            yield request.context
        for request in self._unanswered:
            yield request.context

    def reset(self) -> list[tuple[C, bool]]:
        """Forget everything (the connection is gone): returns each request that was in flight,
        in the order it was queued, with whether any of its bytes were written."""
        written = self.written
        requests = sorted([*self._awaiting, *self._unanswered], key=lambda r: r.start)
        self._awaiting.clear()
        self._unanswered.clear()
        self._out.clear()
        self.queued = self.written = 0
        self._decoder = self._new_decoder()
        self._large_last = False
        return [(r.context, r.start < written) for r in requests]
