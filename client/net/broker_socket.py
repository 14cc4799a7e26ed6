"""The one socket driver of the client: a broker connection's bytes to and from the kernel.

:class:`BrokerSocket` moves bytes between a TCP socket and a sans-IO
:class:`~rill.client.protocol.connection.ProtocolConnection` (which owns framing, the
in-order pairing of responses with requests, and the size limits). Every client talks
to brokers through it: the producer's send thread, the consumer's ``poll()`` and, in
blocking mode, :class:`~rill.client.blocking_connection.BrokerConnection` (so the simple
clients, the ZooKeeper consumer's fetchers and the Spark readers too).

What lives here once:

- **Connecting.** :meth:`BrokerSocket.connect` starts a non-blocking connection (a
  selector loop sees it finish, :meth:`BrokerSocket.finish_connect`, or the caller fails
  it at :attr:`BrokerSocket.connect_deadline`); :meth:`BrokerSocket.connect_blocking`
  waits for it. After a failed connection the next one tries the next address the name
  resolves to (rotation), and :meth:`BrokerSocket.fail` sets when to try again
  (:attr:`BrokerSocket.retry_at`, the back-off).
- **Errors.** Everything that ends a connection raises
  :class:`~rill.client.errors.ConnectionClosed`: refused or unresolvable ("cannot
  connect to broker ..."), reset, EOF or timeout ("... closed the connection", "...
  failed while reading: timed out"), and a bad frame ("bad response from broker ...",
  raised from the :class:`~rill.client.protocol.framing.DecodeError`). The socket is
  closed at once; the requests that were in flight come back from :meth:`BrokerSocket.fail`
  or :meth:`BrokerSocket.close` for the caller to retry or fail.
- **Scatter writes.** Queued frames go out in one ``sendmsg`` of up to 512 buffers.
- **Security.** With a :class:`~rill.client.security.client_security.ClientSecurity`, a
  connection is set up (TLS handshake, then SASL: rill.client.net.connection_setup)
  before it is READY; until then it stays CONNECTING and its queued requests wait.
  Over TLS, writes go in chunks through the TLS layer (a chunk that would block is
  resent unchanged) and reads drain what TLS has decrypted.

Not thread-safe: one thread owns a BrokerSocket.
"""

from __future__ import annotations

import enum
import errno
import os
import selectors
import socket
import ssl
import threading
from collections.abc import Sequence
from typing import Generic, NoReturn, TypeVar

import structlog

from rill.client.errors import ConnectionClosed
from rill.client.net.connection_setup import ConnectionSetup
from rill.client.protocol.client_hello import valid_client_id
from rill.client.protocol.connection import DEFAULT_MAX_RESPONSE_SIZE, ProtocolConnection
from rill.client.protocol.framing import DecodeError
from rill.client.security.client_security import ClientSecurity
from rill.client.structs import Address

__all__ = ["BrokerSocket", "SocketState"]

log = structlog.get_logger(__name__)

C = TypeVar("C")
_IOV_MAX = 512  # buffers per sendmsg (Linux allows 1024)
_RECV_SIZE = 1 << 18
_TLS_CHUNK = 1 << 18  # bytes per TLS write
_TLS_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_per_thread = threading.local()


def _scratch() -> memoryview:
    """This thread's buffer for bulk reads (one per thread, made once): the protocol copies
    what it keeps out of it at once, so every socket a thread reads can share it. A fresh
    ``recv(256 KiB)`` per read cost an allocation the size of the buffer each time."""
    buf: memoryview | None = getattr(_per_thread, "buf", None)
    if buf is None:
        buf = _per_thread.buf = memoryview(bytearray(_RECV_SIZE))
    return buf



class SocketState(enum.Enum):
    DISCONNECTED = 0
    CONNECTING = 1
    READY = 2


class BrokerSocket(Generic[C]):
    """A connection to the broker at ``address``; requests carry a caller's context of type ``C``."""

    def __init__(self, address: Address, max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE, *,
                 node_id: int = -1, security: ClientSecurity | None = None, client_id: str = "") -> None:
        self.address = address
        self.node_id = node_id  # the broker's id, when the caller knows it
        self.name = f"{address[0]}:{address[1]}"
        self.protocol: ProtocolConnection[C] = ProtocolConnection(self.name, max_response_size)
        self.sock: socket.socket | None = None
        self.state = SocketState.DISCONNECTED
        self.events = 0  # what the selector watches for (kept by rill.client.net.selector_loop)
        self.selector: selectors.BaseSelector | None = None  # the one it is registered with, if any
        self.retry_at = 0.0  # no new connection before this
        self.connect_deadline = 0.0
        self.failures = 0  # consecutive failed connections (each tries the next resolved address)
        self._blocking = False
        self.security = security
        self.client_id = client_id if valid_client_id(client_id) and client_id.isascii() else ""
        self._setup: ConnectionSetup | None = None  # TLS/SASL/CLIENT_HELLO under way (CONNECTING)
        self._setup_events = selectors.EVENT_WRITE
        self._tls = False
        self._tls_chunk: bytes | None = None  # a TLS write that would block: resent unchanged

    def __repr__(self) -> str:
        return f"<BrokerSocket {self.name} {self.state.name.lower()} in_flight={self.protocol.in_flight}>"

    @property
    def ready(self) -> bool:
        return self.state is SocketState.READY

    @property
    def in_flight(self) -> int:
        return self.protocol.in_flight

    def wanted_events(self) -> int:
        if self.state is SocketState.CONNECTING:
            return self._setup_events if self._setup is not None else selectors.EVENT_WRITE
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self.protocol.has_output else 0)

    # ---------------------------------------------------------------- connecting

    def _resolve(self) -> list[tuple[int, int, int, tuple[object, ...]]]:
        try:
            infos = socket.getaddrinfo(*self.address, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ConnectionClosed(f"cannot connect to broker {self.name}: {_reason(exc)}") from exc
        return [(family, kind, proto, sockaddr) for family, kind, proto, _, sockaddr in infos]

    def _open(self, infos: list[tuple[int, int, int, tuple[object, ...]]]) -> tuple[socket.socket, tuple[object, ...]]:
        """A socket for the address after the last failed one (rotation)."""
        family, kind, proto, sockaddr = infos[self.failures % len(infos)]
        try:
            return socket.socket(family, kind, proto), sockaddr
        except OSError as exc:
            raise ConnectionClosed(f"cannot connect to broker {self.name}: {_reason(exc)}") from exc

    def connect(self, now: float, timeout: float) -> None:
        """Start a non-blocking connection; it must be ready by ``now + timeout``.

        Raises:
            ConnectionClosed: the name does not resolve or the connection is refused at once.
        """
        sock, sockaddr = self._open(self._resolve())
        sock.setblocking(False)
        code = sock.connect_ex(sockaddr)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            raise ConnectionClosed(f"cannot connect to broker {self.name}: {os.strerror(code)}")
        self.sock = sock
        self.state = SocketState.CONNECTING
        self.connect_deadline = now + timeout

    def finish_connect(self) -> None:
        """The socket is ready while connecting: go on connecting (TCP, then TLS and SASL when the
        security asks for them); READY once done. Raises ConnectionClosed (AuthenticationFailed for
        TLS or SASL), the socket closed."""
        assert self.sock is not None
        if self._setup is None:
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self.fail_now()
                raise ConnectionClosed(f"cannot connect to broker {self.name}: {os.strerror(code)}")
            if self.security is not None or self.client_id:
                self._start_setup()
        if self._setup is not None:
            try:
                self._setup_events = self._setup.step(self.sock)
            except ConnectionClosed:
                self.fail_now()
                raise
            if self._setup_events:
                return
            self._setup = None
        self._connected()

    def _start_setup(self) -> None:
        assert self.sock is not None
        if self.sock.family in (socket.AF_INET, socket.AF_INET6):
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # before the handshake's small writes
        self._setup = ConnectionSetup(self.security, str(self.address[0]), self.name, self.client_id)
        self.sock = self._setup.wrap(self.sock)
        self._tls = self.security is not None and self.security.tls
        self._tls_chunk = None

    def connect_blocking(self, timeout: float | None) -> None:
        """Connect and wait for it: every resolved address in turn, each within ``timeout``.

        The socket stays blocking, with ``timeout`` for every later operation.

        Raises:
            ConnectionClosed: no address could be reached (refused, unresolvable, timed out).
        """
        infos = self._resolve()
        last: OSError | None = None
        for _ in infos:
            sock, sockaddr = self._open(infos)
            sock.settimeout(timeout)
            try:
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                self.failures += 1
                last = exc
                continue
            self.sock = sock
            self._blocking = True
            if self.security is not None or self.client_id:
                self._start_setup()
                try:
                    self.finish_connect()
                except ConnectionClosed:
                    self.failures += 1
                    raise
                return
            self._connected()
            return
        assert last is not None
        raise ConnectionClosed(f"cannot connect to broker {self.name}: {_reason(last)}") from last

    def adopt(self, sock: socket.socket) -> None:
        """Use a socket connected elsewhere (a socket pair in tests, an accepted connection) in
        non-blocking mode."""
        sock.setblocking(False)
        self.sock = sock
        self._blocking = False
        self._connected()

    def _connected(self) -> None:
        assert self.sock is not None
        if self.sock.family in (socket.AF_INET, socket.AF_INET6):
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.state = SocketState.READY
        self.failures = 0

    def set_timeout(self, timeout: float | None) -> None:
        """Blocking mode only: the bound on every later socket operation (no system call when unchanged)."""
        if self.sock is not None and self.sock.gettimeout() != timeout:
            self.sock.settimeout(timeout)

    # ---------------------------------------------------------------- requests and responses

    def send(self, frame: Sequence[bytes | bytearray | memoryview], context: C, *, answered: bool = True) -> None:
        """Queue a request (written by :meth:`write`); see ProtocolConnection.send."""
        self.protocol.send(frame, context, answered=answered)

    def write(self) -> list[C]:
        """Write what the socket takes now (blocking mode: everything); return the contexts of
        the requests without a response that this completed.

        Raises:
            ConnectionClosed: the connection broke (the socket is closed).
        """
        sock, protocol = self.sock, self.protocol
        if self.state is not SocketState.READY or sock is None:
            return []
        if self._tls:
            return self._write_tls(sock)
        done: list[C] = []
        try:
            while protocol.has_output:  # every pending frame in one system call (each call hands the GIL over)
                buffers = protocol.output(_IOV_MAX)
                # (one buffer, the usual case of a latency-bound client: send() costs less than sendmsg())
                sent = sock.send(buffers[0]) if len(buffers) == 1 else sock.sendmsg(buffers)
                done += protocol.wrote(sent)
                if not self._blocking and protocol.has_output and sent < sum(b.nbytes for b in buffers):
                    break  # the socket is full
        except BlockingIOError:
            pass
        except OSError as exc:
            self._send_failed(exc)
        return done

    def _send_failed(self, exc: OSError) -> NoReturn:
        self.fail_now()
        raise ConnectionClosed(f"connection to broker {self.name} failed while sending: {_reason(exc)}") from exc

    def _write_tls(self, sock: socket.socket) -> list[C]:
        """:meth:`write` over TLS: chunks of up to 256 KiB, each resent unchanged while it would block."""
        protocol = self.protocol
        done: list[C] = []
        try:
            while self._tls_chunk is not None or protocol.has_output:
                if self._tls_chunk is None:
                    taken, size = [], 0
                    for buffer in protocol.output(_IOV_MAX):
                        taken.append(buffer[:_TLS_CHUNK - size])
                        size += taken[-1].nbytes
                        if size >= _TLS_CHUNK:
                            break
                    self._tls_chunk = b"".join(taken)
                sent = sock.send(self._tls_chunk)
                self._tls_chunk = None
                done += protocol.wrote(sent)
        except _TLS_WOULD_BLOCK:
            pass
        except OSError as exc:
            self._send_failed(exc)
        return done

    def receive(self) -> None:
        """Receive what has arrived (blocking mode: wait up to the timeout for something);
        :meth:`next_response` then hands out the complete responses.

        Raises:
            ConnectionClosed: EOF, a broken connection or a timeout (the socket is closed).
        """
        sock, protocol = self.sock, self.protocol
        if sock is None:
            raise ConnectionClosed(f"connection to broker {self.name} is closed")
        try:
            while True:
                target = protocol.receive_target()
                if target is not None:
                    want = len(target)
                    n = sock.recv_into(target)
                    protocol.received_into(n)
                else:
                    want = protocol.receive_size(_RECV_SIZE)
                    scratch = _scratch()
                    n = sock.recv_into(scratch, want)
                    protocol.receive(scratch[:n])
                if n == 0:
                    self.fail_now()
                    raise ConnectionClosed(f"broker {self.name} closed the connection")
                if self._blocking or (n < want and not self._tls):
                    break  # (a full buffer: more is probably there, read on without a select)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except ssl.SSLZeroReturnError as exc:
            self.fail_now()
            raise ConnectionClosed(f"broker {self.name} closed the connection") from exc
        except OSError as exc:
            self.fail_now()
            raise ConnectionClosed(f"connection to broker {self.name} failed while reading: "
                                   f"{_reason(exc)}") from exc

    def next_response(self) -> tuple[C, memoryview] | None:
        """The next complete response received and its request's context, or None.

        Raises:
            ConnectionClosed: a bad frame (raised from the DecodeError; the socket is closed).
        """
        try:
            return self.protocol.next_response()
        except DecodeError as exc:
            self.fail_now()
            raise ConnectionClosed(f"bad response from broker {self.name}: {exc}") from exc

    def wait_response(self) -> tuple[C, memoryview]:
        """Blocking mode: write what is queued, then receive until the next response is whole.

        Raises:
            ConnectionClosed: as :meth:`write` and :meth:`receive` (a timeout loses the stream's position).
        """
        protocol = self.protocol
        if protocol.has_output:
            self.write()
        # Straight from the last byte sent to the wait, with as little as possible in between:
        # the broker, woken by that byte, may be waiting for this very core (docs/benchmarks.md 13).
        response = self.next_response() if protocol.has_input else None
        while response is None:
            self.receive()
            response = self.next_response()
        return response

    # ---------------------------------------------------------------- closing

    def fail_now(self) -> None:
        """Close the socket at once (the requests stay for :meth:`fail` or :meth:`close`)."""
        sock, self.sock = self.sock, None
        if sock is not None:
            if self.events and self.selector is not None:
                self.selector.unregister(sock)
            sock.close()
        self.state = SocketState.DISCONNECTED
        self.events = 0
        self._setup = None
        self._tls = False
        self._tls_chunk = None

    def fail(self, now: float, backoff: float) -> list[tuple[C, bool]]:
        """The connection failed: close it, count the failure, try again after ``backoff``;
        returns the requests that were in flight (see ProtocolConnection.reset)."""
        self.failures += 1
        self.retry_at = now + backoff
        return self.close()

    def close(self) -> list[tuple[C, bool]]:
        """Close the socket (idempotent); returns the requests that were in flight, in the order
        they were queued, each with whether any of its bytes were written."""
        self.fail_now()
        return self.protocol.reset()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__
