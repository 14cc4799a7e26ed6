"""A blocking TCP connection to one broker, speaking size-prefixed frames.

Requests go out as whole frames (``size int32, type int16, body``, built by the
``encode_*`` functions of :mod:`rill.client.protocol.requests`); responses come back
in the order the requests were sent, with no correlation id (Kafka 0.7). So
pipelining is: :meth:`BrokerConnection.send` several frames, then
:meth:`BrokerConnection.read_response` once per frame that has a response (PRODUCE
and MULTIPRODUCE have none).

Every response size is checked against ``max_response_size`` before anything is
allocated for it; the body is then read with ``recv_into`` straight into one buffer
of exactly that size.

Errors: any socket error, EOF or timeout becomes :class:`ConnectionClosed` (raised
``from`` the original exception) and leaves the connection closed, because after a
partial read or a timed-out request the position in the response stream is lost. A
size field outside ``2..max_response_size`` raises
:class:`~rill.client.protocol.framing.FrameTooLarge` and also closes the connection.

Not thread-safe: one thread at a time (the simple clients hold a lock around each
request).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from types import TracebackType

import structlog

from rill.client.errors import ConnectionClosed
from rill.client.protocol.framing import INT32, FrameTooLarge

__all__ = ["BrokerConnection", "DEFAULT_MAX_RESPONSE_SIZE", "parse_address"]

log = structlog.get_logger(__name__)

DEFAULT_MAX_RESPONSE_SIZE = 256 * 1024 * 1024
MIN_RESPONSE_SIZE = 2  # the error code
SAME_TIMEOUT = -1.0  # read_response/request: keep the connection's timeout


class BrokerConnection:
    """A blocking socket connected to ``host:port``.

    ``timeout`` (seconds) bounds the connect and every single socket operation;
    ``None`` waits forever. The connection is opened in the constructor.

    Raises:
        ConnectionClosed: the broker cannot be reached (refused, unresolvable, timed out).
    """

    def __init__(self, host: str, port: int, timeout: float | None = 30.0, *,
                 max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.max_response_size = max_response_size
        self._header = bytearray(4)
        try:
            self._sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectionClosed(f"cannot connect to broker {host}:{port}: {_reason(exc)}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __repr__(self) -> str:
        state = "open" if self._sock is not None else "closed"
        return f"<BrokerConnection {self.host}:{self.port} {state}>"

    @property
    def closed(self) -> bool:
        return self._sock is None

    def send(self, frame: bytes | bytearray | memoryview) -> None:
        """Send one whole request frame (its size field included).

        Raises:
            ConnectionClosed: the connection is closed or broke while sending.
        """
        sock = self._require()
        try:
            sock.sendall(frame)
        except OSError as exc:
            self._broken(exc, "sending")

    def send_many(self, frames: Iterable[bytes | bytearray | memoryview]) -> None:
        """Send several frames in one write (pipelining); read their responses in order."""
        self.send(b"".join(frames))

    def read_response(self, timeout: float | None = SAME_TIMEOUT) -> memoryview:
        """Read the next response and return its body (the bytes after the size field).

        ``timeout`` overrides the connection's timeout for this response only (for a
        long poll); the default keeps it.

        Raises:
            ConnectionClosed: EOF, reset or timeout before the whole response arrived.
            FrameTooLarge: the size field is below 2 or above ``max_response_size``
                (nothing is allocated for it; the connection is closed).
        """
        sock = self._require()
        if timeout != SAME_TIMEOUT:
            sock.settimeout(timeout)
        try:
            self._read_into(sock, memoryview(self._header))
            (size,) = INT32.unpack(self._header)
            if size < MIN_RESPONSE_SIZE or size > self.max_response_size:
                self.close()
                raise FrameTooLarge(f"response size {size} from {self.host}:{self.port} outside "
                                    f"{MIN_RESPONSE_SIZE}..{self.max_response_size}")
            body = bytearray(size)
            self._read_into(sock, memoryview(body))
            return memoryview(body)
        finally:
            if timeout != SAME_TIMEOUT and self._sock is not None:
                self._sock.settimeout(self.timeout)

    def request(self, frame: bytes | bytearray | memoryview, timeout: float | None = SAME_TIMEOUT) -> memoryview:
        """Send a request that has a response and return the response body.

        Only valid when no earlier response is still unread (otherwise that one is
        returned): use :meth:`send` and :meth:`read_response` to pipeline.
        """
        self.send(frame)
        return self.read_response(timeout)

    def close(self) -> None:
        """Close the socket; idempotent. Later calls raise ConnectionClosed."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:  # pragma: no cover - close on a broken socket
                pass

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _require(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionClosed(f"connection to {self.host}:{self.port} is closed")
        return self._sock

    def _read_into(self, sock: socket.socket, view: memoryview) -> None:
        pos, end = 0, len(view)
        try:
            while pos < end:
                n = sock.recv_into(view[pos:], end - pos)
                if n == 0:
                    self.close()
                    raise ConnectionClosed(f"broker {self.host}:{self.port} closed the connection "
                                           f"({pos} of {end} bytes read)")
                pos += n
        except OSError as exc:
            self._broken(exc, "reading")

    def _broken(self, exc: OSError, doing: str) -> None:
        self.close()
        log.info("connection.broken", host=self.host, port=self.port, doing=doing, reason=_reason(exc))
        raise ConnectionClosed(f"connection to broker {self.host}:{self.port} failed while {doing}: "
                               f"{_reason(exc)}") from exc


def _reason(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return exc.strerror or str(exc) or type(exc).__name__


def parse_address(address: str, default_port: int = 9092) -> tuple[str, int]:
    """Split ``host[:port]`` (or ``[v6addr]:port``) into ``(host, port)``.

    Raises:
        ValueError: the port is not a number in 1..65535, or the host is empty.
    """
    address = address.strip()
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad broker address {address!r}: expected [host]:port")
        port_text = rest[1:] if rest else ""
    elif address.count(":") > 1:  # a bare IPv6 address
        host, port_text = address, ""
    else:
        host, _, port_text = address.partition(":")
    if not host:
        raise ValueError(f"bad broker address {address!r}: empty host")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"bad broker address {address!r}: port must be a number in 1..65535")
    return host, int(port_text)
