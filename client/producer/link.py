"""One non-blocking connection to a broker, for the producer's send thread.

A :class:`BrokerLink` owns a socket, the bytes queued for it, and the requests in flight
on it in the order they were written: the broker answers a connection's requests in
order and without correlation ids (Kafka 0.7), so the n-th response belongs to the n-th
request that has one. Requests without a response (0.7's MULTIPRODUCE) are done once
their last byte is written. The link does the I/O and reports failures as
:class:`~rill.client.errors.ConnectionClosed`; deciding what to do about them (retry,
fail, reconnect later) is the sender's business.

Not thread-safe: the send thread only.
"""

from __future__ import annotations

import enum
import errno
import itertools
import os
import selectors
import socket
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from rill.client.connection import DEFAULT_MAX_RESPONSE_SIZE
from rill.client.errors import ConnectionClosed
from rill.client.producer.accumulator import ProducerBatch
from rill.client.protocol.framing import DecodeError, FrameDecoder

__all__ = ["Address", "BrokerLink", "InFlight", "Kind", "LinkState"]

Address = tuple[str, int]
_IOV_MAX = 512  # buffers per sendmsg (Linux allows 1024)
_RECV_SIZE = 1 << 18


class Kind(enum.Enum):
    PRODUCE = "produce"
    METADATA = "metadata"
    PROBE = "probe"  # the empty produce that makes the broker create a topic


class LinkState(enum.Enum):
    DISCONNECTED = 0
    CONNECTING = 1
    READY = 2


@dataclass(eq=False)
class InFlight:
    """A request queued on a link: ``start``/``end`` are its bytes' positions in the link's
    output stream (so it was written at all once ``written > start``)."""

    kind: Kind
    start: int
    end: int
    deadline: float
    batches: list[ProducerBatch] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)


class BrokerLink:
    """A non-blocking connection to ``address`` and its requests in flight (see the module doc)."""

    def __init__(self, address: Address) -> None:
        self.address = address
        self.name = f"{address[0]}:{address[1]}"
        self.sock: socket.socket | None = None
        self.state = LinkState.DISCONNECTED
        self.events = 0  # what the selector watches for
        self.out: deque[memoryview] = deque()
        self.queued = 0  # bytes handed to this link so far
        self.written = 0  # bytes written to the socket so far
        self.awaiting: deque[InFlight] = deque()  # requests with a response, in order
        self.unacked: deque[InFlight] = deque()  # requests without one, done once written
        self.decoder = FrameDecoder(DEFAULT_MAX_RESPONSE_SIZE)
        self.retry_at = 0.0  # no new connection before this
        self.connect_deadline = 0.0
        self.failures = 0  # consecutive failed connections (each tries the next resolved address)

    @property
    def in_flight(self) -> int:
        return len(self.awaiting) + len(self.unacked)

    def wanted_events(self) -> int:
        if self.state is LinkState.CONNECTING:
            return selectors.EVENT_WRITE
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)

    def connect(self, now: float, timeout: float) -> None:
        """Start a non-blocking connection (the address after a failure: the next one resolved).

        Raises:
            ConnectionClosed: the address does not resolve or the connection is refused at once.
        """
        try:
            infos = socket.getaddrinfo(*self.address, type=socket.SOCK_STREAM)
            family, kind, proto, _, sockaddr = infos[self.failures % len(infos)]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            raise ConnectionClosed(f"cannot connect to broker {self.name}: {exc}") from exc
        sock.setblocking(False)
        code = sock.connect_ex(sockaddr)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            raise ConnectionClosed(f"cannot connect to broker {self.name}: {os.strerror(code)}")
        self.sock = sock
        self.state = LinkState.CONNECTING
        self.connect_deadline = now + timeout

    def finish_connect(self) -> None:
        """The socket became writable while connecting: connected, or raise ConnectionClosed."""
        assert self.sock is not None
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            raise ConnectionClosed(f"cannot connect to broker {self.name}: {os.strerror(code)}")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.state = LinkState.READY
        self.failures = 0

    def queue(self, kind: Kind, frame: Sequence[bytes | memoryview], deadline: float, *, answered: bool,
              batches: list[ProducerBatch] | None = None, topics: list[str] | None = None) -> InFlight:
        """Queue a request (its frame as buffers, written in order); ``answered``: it has a response."""
        size = sum(map(len, frame))
        request = InFlight(kind, self.queued, self.queued + size, deadline, batches or [], topics or [])
        self.queued = request.end
        self.out.extend(map(memoryview, frame))
        (self.awaiting if answered else self.unacked).append(request)
        return request

    def write(self) -> list[InFlight]:
        """Write what the socket takes now; return the unanswered requests it completed.

        Raises:
            ConnectionClosed: the connection broke.
        """
        sock, out = self.sock, self.out
        if self.state is not LinkState.READY or sock is None:
            return []
        try:
            while out:  # every pending frame in one system call (each call hands the GIL over)
                sent = sock.sendmsg(list(itertools.islice(out, _IOV_MAX)))
                self.written += sent
                while out and sent >= len(out[0]):
                    sent -= len(out.popleft())
                if sent:
                    out[0] = out[0][sent:]
                    break
        except BlockingIOError:
            pass
        except OSError as exc:
            raise ConnectionClosed(f"connection to broker {self.name} failed while sending: "
                                   f"{exc.strerror or exc}") from exc
        done = []
        while self.unacked and self.unacked[0].end <= self.written:
            done.append(self.unacked.popleft())
        return done

    def receive(self) -> None:
        """Read what has arrived into the frame decoder.

        Raises:
            ConnectionClosed: EOF or a broken connection.
        """
        assert self.sock is not None
        try:
            data = self.sock.recv(_RECV_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            raise ConnectionClosed(f"connection to broker {self.name} failed while reading: "
                                   f"{exc.strerror or exc}") from exc
        if not data:
            raise ConnectionClosed(f"broker {self.name} closed the connection")
        self.decoder.feed(data)

    def next_response(self) -> tuple[InFlight, memoryview] | None:
        """The next whole response and the request it answers, or None.

        Raises:
            ConnectionClosed: a bad frame, or a response with no request waiting for it.
        """
        try:
            body = self.decoder.next_frame()
        except DecodeError as exc:
            raise ConnectionClosed(f"bad response from broker {self.name}: {exc}") from exc
        if body is None:
            return None
        if not self.awaiting:
            raise ConnectionClosed(f"broker {self.name} sent a response nobody asked for")
        return self.awaiting.popleft(), body

    def next_deadline(self) -> float | None:
        """The earliest deadline of the requests in flight (the oldest of each kind), or None."""
        heads = [q[0].deadline for q in (self.awaiting, self.unacked) if q]
        return min(heads) if heads else None

    def reset(self) -> list[InFlight]:
        """Forget the socket (already closed); return the requests that were in flight, in the
        order they were queued."""
        requests = sorted([*self.awaiting, *self.unacked], key=lambda r: r.start)
        self.sock = None
        self.state = LinkState.DISCONNECTED
        self.events = 0
        self.out.clear()
        self.awaiting.clear()
        self.unacked.clear()
        self.decoder = FrameDecoder(DEFAULT_MAX_RESPONSE_SIZE)
        return requests
