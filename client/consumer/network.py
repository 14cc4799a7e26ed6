"""Non-blocking broker connections and the one wait of the consumer's loop.

:class:`BrokerChannel` is one TCP connection to a broker in non-blocking mode. Requests
are whole frames; a broker answers a connection's requests in order (no correlation
ids, docs/protocol.md), so each request sent is remembered with a caller's context in
a FIFO and each complete response is paired with the oldest one. A response is read
as a 4-byte size, checked against ``max_response_size`` before anything is allocated,
then straight into one buffer of exactly that size (``recv_into``).

:class:`Network` owns the selector and a wake-up socket pair. ``wait(timeout)`` is the
loop's single blocking call; besides the channels, it returns early when
:meth:`Network.wake` is called from another thread: the one thing the consumer lets
another thread do (gRPC futures' done-callbacks call it, so a coordinator answer ends
the wait at once).

Errors: a broken connection, a response nobody asked for or a size outside
``2..max_response_size`` closes the channel; :attr:`BrokerChannel.error` says why and
the requests that were in flight are handed back by :meth:`BrokerChannel.take_failed`.

Not thread-safe, apart from :meth:`Network.wake`.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections import deque
from typing import Any

import structlog

from rill.client.protocol.framing import INT32

log = structlog.get_logger(__name__)

MIN_RESPONSE_SIZE = 2  # the error code


class BrokerChannel:
    """A non-blocking connection to ``host:port``, opened by :meth:`connect`.

    ``in_flight`` holds ``(context, sent_at)`` per request awaiting its response, oldest
    first; ``sent_at`` is ``time.monotonic()``.
    """

    def __init__(self, node_id: int, host: str, port: int, max_response_size: int) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.max_response_size = max_response_size
        self.sock: socket.socket | None = None
        self.connected = False
        self.error: str | None = None
        self.in_flight: deque[tuple[Any, float]] = deque()
        self._out: deque[memoryview] = deque()
        self._header = bytearray(4)
        self._header_pos = 0
        self._body: bytearray | None = None
        self._body_view: memoryview | None = None
        self._body_pos = 0
        self._selector: selectors.BaseSelector | None = None
        self._events = 0

    def __repr__(self) -> str:
        state = "closed" if self.sock is None else ("connected" if self.connected else "connecting")
        return f"<BrokerChannel {self.node_id} {self.host}:{self.port} {state} in_flight={len(self.in_flight)}>"

    @property
    def closed(self) -> bool:
        return self.sock is None

    def connect(self, selector: selectors.BaseSelector) -> None:
        """Start connecting (never blocks on the connect itself; name resolution may)."""
        self._selector = selector
        try:
            family, kind, proto, _, address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            self.error = f"cannot connect to broker {self.host}:{self.port}: {exc}"
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            self.error = f"cannot connect to broker {self.host}:{self.port}: {errno.errorcode.get(code, code)}"
            return
        self.sock = sock
        self.connected = code == 0
        self._events = selectors.EVENT_READ | (0 if self.connected else selectors.EVENT_WRITE)
        selector.register(sock, self._events, self)

    def send(self, frame: bytes, context: Any) -> None:
        """Queue a request frame (sent at once if possible); its response will carry ``context``."""
        if self.sock is None:
            raise RuntimeError("send on a closed channel")
        self.in_flight.append((context, time.monotonic()))
        self._out.append(memoryview(frame))
        if self.connected:
            self._flush()

    def handle(self, mask: int) -> list[tuple[Any, memoryview]]:
        """React to selector readiness; returns ``(context, response body)`` for each complete response."""
        if self.sock is None:
            return []
        if mask & selectors.EVENT_WRITE:
            if not self.connected:
                code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    self._fail(f"cannot connect to broker {self.host}:{self.port}: {errno.errorcode.get(code, code)}")
                    return []
                self.connected = True
            self._flush()
        if mask & selectors.EVENT_READ and self.sock is not None:
            return self._read()
        return []

    def take_failed(self) -> list[Any]:
        """The contexts of requests that will never be answered (after the channel closed)."""
        contexts = [context for context, _ in self.in_flight]
        self.in_flight.clear()
        return contexts

    def close(self, reason: str | None = None) -> None:
        """Close the socket; in-flight requests stay listed for :meth:`take_failed`."""
        sock, self.sock = self.sock, None
        if reason is not None and self.error is None:
            self.error = reason
        if sock is None:
            return
        if self._selector is not None:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):  # pragma: no cover - never registered
                pass
        sock.close()
        self._out.clear()
        self.connected = False

    # ---------------------------------------------------------------- internals

    def _want_write(self, want: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
        if events != self._events and self.sock is not None and self._selector is not None:
            self._selector.modify(self.sock, events, self)
            self._events = events

    def _flush(self) -> None:
        assert self.sock is not None
        out = self._out
        try:
            while out:
                view = out[0]
                sent = self.sock.send(view)
                if sent < len(view):
                    out[0] = view[sent:]
                    break
                out.popleft()
        except BlockingIOError:
            pass
        except OSError as exc:
            self._fail(f"connection to broker {self.host}:{self.port} failed while sending: {exc}")
            return
        self._want_write(bool(out))

    def _read(self) -> list[tuple[Any, memoryview]]:
        sock = self.sock
        assert sock is not None
        done: list[tuple[Any, memoryview]] = []
        try:
            while True:
                if self._body_view is None:
                    n = sock.recv_into(memoryview(self._header)[self._header_pos:])
                    if n == 0:
                        self._fail(f"broker {self.host}:{self.port} closed the connection")
                        return done
                    self._header_pos += n
                    if self._header_pos < 4:
                        continue
                    (size,) = INT32.unpack(self._header)
                    self._header_pos = 0
                    if size < MIN_RESPONSE_SIZE or size > self.max_response_size:
                        self._fail(f"response size {size} from {self.host}:{self.port} outside "
                                   f"{MIN_RESPONSE_SIZE}..{self.max_response_size}")
                        return done
                    self._body = bytearray(size)
                    self._body_view = memoryview(self._body)
                    self._body_pos = 0
                n = sock.recv_into(self._body_view[self._body_pos:])
                if n == 0:
                    self._fail(f"broker {self.host}:{self.port} closed the connection mid-response")
                    return done
                self._body_pos += n
                if self._body_pos == len(self._body_view):
                    body = self._body_view
                    self._body = self._body_view = None
                    if not self.in_flight:
                        self._fail(f"broker {self.host}:{self.port} sent a response to no request")
                        return done
                    context, _ = self.in_flight.popleft()
                    done.append((context, body))
        except BlockingIOError:
            return done
        except OSError as exc:
            self._fail(f"connection to broker {self.host}:{self.port} failed while reading: {exc}")
            return done

    def _fail(self, reason: str) -> None:
        log.info("consumer.connection_failed", broker=self.node_id, host=self.host, port=self.port, reason=reason)
        self.close(reason)


class Network:
    """The selector of the consumer's loop plus a wake-up socket pair; see the module docstring."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.closed = False

    def wake(self, *_: Any) -> None:
        """Make the current or next :meth:`wait` return at once. Thread-safe; never raises."""
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (a wake-up is already pending) or closed
            pass

    def wait(self, timeout: float) -> list[tuple[BrokerChannel, int]]:
        """Block up to ``timeout`` seconds (0: just look); the channels that are ready."""
        ready = []
        for key, mask in self.selector.select(max(timeout, 0.0)):
            if key.data is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except OSError:
                    pass
            else:
                ready.append((key.data, mask))
        return ready

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()
