"""One client connection: frames in, responses out (bytes and sendfile'd file slices).

Responses leave in the order their requests arrived (the 0.7 protocol has no
correlation ids). Each request that has a response takes a :class:`Slot` in the
connection's queue when it is read; a slot is filled at once or later (a long poll,
an fsync acknowledgement), and the writer sends slots from the head as they become
ready. Parts are ``bytes`` or :class:`~rill.broker.log.results.FileSlice` ranges of segment
files, which go out with ``os.sendfile`` straight from the page cache.

Memory: a connection owns no receive buffer. Reads go into the server's shared buffer
and only the bytes of an incomplete frame stay behind (dropped when it completes). A
request over 64 KiB first reserves its size from the broker's
:class:`~rill.broker.dataplane.request_memory.RequestMemory` (given back once it is handled);
one over 1 MiB is received straight into a buffer of exactly its size. An idle
connection costs a socket, this object and a few dozen bytes.

A handler that cannot serve a request yet (it needs a topic that is being created)
raises :class:`Deferred`: the connection holds that frame, reads nothing more, and
handles the frame again once the future is done (the server calls :meth:`resume`),
so requests keep their order and other connections are not held up.

Not thread-safe: every method runs on the broker's event-loop thread.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import structlog

from rill.broker.dataplane.request_memory import RequestMemory
from rill.broker.log.results import FileSlice
from rill.client.protocol.framing import DecodeError, FrameDecoder
from rill.client.security.principal import ANONYMOUS

log = structlog.get_logger(__name__)

MAX_PENDING_SLOTS = 1024  # stop reading a connection whose responses are not being read


Part = bytes | FileSlice  # a response part: bytes to write, or a segment file's range to sendfile


class Slot:
    """A place in a connection's response order, filled now or later."""

    __slots__ = ("parts", "meta", "ready_at")

    def __init__(self, parts: list[Part] | None = None) -> None:
        self.parts = parts
        self.meta: Any = None
        """With metrics on: (its request type's stats, when read, when handled); see request_metrics."""
        self.ready_at = 0.0  # with metrics on: when its parts were set (monotonic seconds)

    def fill(self, parts: list[Part]) -> None:
        self.parts = parts
        if self.meta is not None:
            self.ready_at = time.monotonic()


Handler = Callable[["Connection", memoryview], "Slot | None"]


class Deferred(Exception):
    """Raised by a handler that can serve its request only once ``future`` is done.

    The handler must not have changed anything before raising: the frame is handled
    again from the start, with this object added to :attr:`Connection.deferrals`
    (``key`` says what it waited for, for example a topic name).
    """

    def __init__(self, future: Future[Any], key: str = "") -> None:
        super().__init__(f"request deferred until {key or 'a future'} is done")
        self.future = future
        self.key = key


class Connection:
    """One client connection (see the module docstring)."""

    def __init__(self, sock: socket.socket, addr: Any, max_request_size: int,
                 memory: RequestMemory[Connection] | None = None) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.addr = addr
        self.ip = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        self.max_request_size = max_request_size
        self.memory = memory
        self.decoder = FrameDecoder(max_request_size, reserve=self._reserve if memory is not None else None)
        self.pending: deque[Slot] = deque()
        self._out: deque[Part] = deque()  # parts of head slots being written
        self._out_pos = 0  # bytes of self._out[0] already sent
        self.body_since: float | None = None  # when the large request being received began to arrive
        self.last_active = time.monotonic()
        self.closed = False
        self.events = 0  # what the selector watches for this connection now
        self.held: memoryview | None = None  # a frame whose handler raised Deferred
        self.held_reserved = 0  # request memory the held frame holds
        self.waiting_for: Deferred | None = None
        self.deferrals: list[Deferred] = []
        """What the frame being handled waited for so far (each future done), oldest first."""
        self.principal = ANONYMOUS
        """Who the client is: User:ANONYMOUS until a certificate or SASL says otherwise."""
        self.listener = "PLAINTEXT"  # the name of the listener it came in on (METADATA answers with its addresses)
        self.authenticator: Any = None
        """The SASL exchange under way on a SASL listener (rill.broker.security.sasl_authenticator);
        None once authenticated, and on other listeners. While set, only SASL requests are served."""
        self.setup_deadline: float | None = None
        """When the TLS handshake and SASL authentication must be done by (None: done, or none needed)."""
        self.closing = False  # answered a request that ends the connection: handle nothing more, close once sent
        self.muted_until = 0.0
        """Over a client quota: not read until then (monotonic seconds; 0: not muted; connection_quotas)."""
        self.replica = False  # a broker's replica fetches come in here: no client quota applies
        self.client_id = ""  # from CLIENT_HELLO ("": the default client id, as every Kafka 0.7 client)
        self.on_fetched: Callable[[Connection, int], None] | None = None
        """Told the message bytes of each fetch response queued (client quotas; None: not counted)."""
        self.sending: list[Slot] = []  # slots with metrics being written: told when the last byte is out

    # ---------------------------------------------------------------- reading

    def read(self, handle: Handler, buffer: memoryview) -> bool:
        """Read what is available and handle each whole frame. Returns False on EOF.

        ``buffer`` is the server's shared receive buffer; a large request's body is
        received straight into its own buffer instead.

        Raises DecodeError for a malformed or oversized frame (the caller closes this
        connection only).
        """
        while True:
            target = self.decoder.body_target()
            try:
                n = self._recv_into(target if target is not None else buffer)
            except OSError:
                return False
            if n is None:
                return True
            if n == 0:
                return False
            self.last_active = time.monotonic()
            if target is not None:
                self.decoder.commit(n)
            else:
                self.decoder.feed(buffer[:n])
            self.process_frames(handle)
            if self.decoder.receiving_body():
                self.body_since = self.body_since or self.last_active
            else:
                self.body_since = None
            if not self._buffered() or self.closed:
                return True

    def _recv_into(self, target: memoryview) -> int | None:
        """Receive into ``target``: the byte count (0 at EOF), None when nothing is there yet."""
        try:
            return self.sock.recv_into(target)
        except (BlockingIOError, InterruptedError):
            return None

    def _buffered(self) -> bool:
        """Whether received bytes wait in user space where the selector cannot see them (TLS)."""
        return False

    def _reserve(self, size: int) -> bool:
        assert self.memory is not None
        return self.memory.try_reserve(self, size)

    def _release(self, size: int) -> None:
        if self.memory is not None:
            self.memory.release(size)

    def process_frames(self, handle: Handler) -> None:
        """Handle buffered whole frames while fewer than MAX_PENDING_SLOTS responses wait.

        Stops at a frame whose handler raises :class:`Deferred` (see :meth:`resume`).
        """
        while (self.waiting_for is None and len(self.pending) < MAX_PENDING_SLOTS and not self.closing
               and not self.muted_until):
            frame: memoryview | None = self.held
            reserved = self.held_reserved
            if frame is None:
                frame = self.decoder.next_frame()  # None too while request memory is refused
                if frame is None:
                    return
                reserved = self.decoder.take_reservation()
            try:
                slot = handle(self, frame)
            except Deferred as deferred:
                self.held, self.held_reserved, self.waiting_for = frame, reserved, deferred
                return
            except BaseException:
                self.held, self.held_reserved = None, 0
                self._release(reserved)
                raise
            self.held, self.held_reserved = None, 0
            if self.deferrals:
                self.deferrals = []
            if reserved:
                self._release(reserved)
            if slot is not None:
                self.pending.append(slot)

    def resume(self, handle: Handler) -> None:
        """The held frame's future is done: handle it again, then what follows it."""
        if self.waiting_for is not None:
            self.deferrals.append(self.waiting_for)
            self.waiting_for = None
        self.process_frames(handle)

    def has_unhandled(self) -> bool:
        """Whether a held frame or buffered bytes wait to be handled."""
        return self.held is not None or self.decoder.pending_bytes() > 0

    def accepting_requests(self) -> bool:
        """Whether to read and handle more: no held frame, room for responses, request memory granted."""
        return (self.waiting_for is None and len(self.pending) < MAX_PENDING_SLOTS
                and not self.decoder.waiting_for_memory and not self.closing and not self.muted_until)

    def idle(self) -> bool:
        """Nothing in flight: no response owed, no frame held or half received."""
        return not self.pending and self.held is None and not self.decoder.in_frame()

    # ---------------------------------------------------------------- writing

    def flush(self) -> bool:
        """Send ready responses until done or the socket is full.

        Returns True when everything ready was sent. Raises OSError if the peer is gone.
        """
        while True:
            if not self._out:
                if self.sending:
                    self._report_sent()
                if not self._take_ready():
                    return True
            part = self._out[0]
            if isinstance(part, (bytes, bytearray)):
                sent = self._send_bytes(part)
                total = len(part)
            else:
                sent = self._sendfile(part)
                total = part.length
            if sent is None:
                return False
            self._out_pos += sent
            if self._out_pos >= total:
                self._out.popleft()
                self._out_pos = 0
            else:
                return False

    def _take_ready(self) -> bool:
        """Move ready head slots into the output, joining adjacent bytes into one send."""
        chunk: list[bytes] = []
        fetched = 0
        while self.pending and self.pending[0].parts is not None:
            slot = self.pending.popleft()
            if slot.meta is not None:
                self.sending.append(slot)
            for part in slot.parts or ():
                if isinstance(part, (bytes, bytearray)):
                    chunk.append(part)
                    continue
                if chunk:
                    self._out.append(b"".join(chunk))
                    chunk = []
                if part.length:
                    self._out.append(part)
                    fetched += part.length
        if chunk:
            self._out.append(b"".join(chunk))
        if fetched and self.on_fetched is not None:
            self.on_fetched(self, fetched)
        return bool(self._out)

    def _report_sent(self) -> None:
        """Every slot taken for sending is written: tell their request metrics."""
        now = time.monotonic()
        for slot in self.sending:
            slot.meta[0].sent(slot, now)
        self.sending = []

    def _send_bytes(self, data: bytes) -> int | None:
        try:
            return self.sock.send(memoryview(data)[self._out_pos:])
        except (BlockingIOError, InterruptedError):
            return None

    def _sendfile(self, part: FileSlice) -> int | None:
        if part.file is None:  # only an empty slice has no file, and the codec never emits one
            raise OSError(f"a fetch slice of {part.length} bytes at {part.offset} has no file")
        try:
            sent = os.sendfile(self.fd, part.file.fileno(), part.position + self._out_pos,
                               part.length - self._out_pos)
        except (BlockingIOError, InterruptedError):
            return None
        if sent == 0:  # the file is shorter than the slice: never send a short response
            raise OSError(f"segment file ended inside a fetch slice at {part.position + self._out_pos}")
        return sent

    def close(self) -> None:
        """Close the socket and give back the request memory this connection holds. Idempotent."""
        if not self.closed:
            self.closed = True
            held = self.decoder.release_all() + self.held_reserved
            self.held, self.held_reserved = None, 0
            if self.memory is not None:
                self.memory.forget(self)
            self._release(held)
            try:
                self.sock.close()
            except OSError:
                pass


__all__ = ["Connection", "Deferred", "Slot", "Part", "DecodeError"]
