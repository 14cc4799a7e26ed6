"""A blocking connection to one broker: the client's socket driver waiting on one response.

Requests go out as whole frames (``size int32, type int16, body``, built by the
``encode_*`` functions of :mod:`rill.client.protocol.requests`); responses come back
in the order the requests were sent, with no correlation id (Kafka 0.7). So
pipelining is: :meth:`BrokerConnection.send` several frames, then
:meth:`BrokerConnection.read_response` once per frame that has a response (PRODUCE
and MULTIPRODUCE have none).

This is :class:`~rill.client.net.broker_socket.BrokerSocket` in blocking mode (framing,
size limits and pairing are :class:`~rill.client.protocol.connection.ProtocolConnection`'s):
every response size is checked against ``max_response_size`` before anything is
allocated for it, and a large body is received straight into a buffer of its size.

Errors: any socket error, EOF or timeout becomes :class:`ConnectionClosed` (raised
``from`` the original exception) and leaves the connection closed, because after a
partial read or a timed-out request the position in the response stream is lost. A
size field outside ``2..max_response_size`` raises
:class:`~rill.client.protocol.framing.FrameTooLarge` and also closes the connection.

Not thread-safe: one thread at a time (the simple clients hold a lock around each
request).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from rill.client.errors import ConnectionClosed
from rill.client.net.broker_socket import BrokerSocket
from rill.client.protocol.connection import DEFAULT_MAX_RESPONSE_SIZE
from rill.client.protocol.framing import DecodeError
from rill.client.security.client_security import ClientSecurity

__all__ = ["BrokerConnection", "DEFAULT_MAX_RESPONSE_SIZE", "parse_address"]

SAME_TIMEOUT = -1.0  # read_response/request: keep the connection's timeout


class BrokerConnection:
    """A blocking connection to ``host:port``.

    ``timeout`` (seconds) bounds the connect and every single socket operation;
    ``None`` waits forever. The connection is opened in the constructor, with the TLS
    handshake and SASL authentication ``security`` asks for.

    Raises:
        ConnectionClosed: the broker cannot be reached (refused, unresolvable, timed out).
    """

    def __init__(self, host: str, port: int, timeout: float | None = 30.0, *,
                 max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE, security: ClientSecurity | None = None,
                 client_id: str = "") -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.max_response_size = max_response_size
        self._socket: BrokerSocket[None] = BrokerSocket((host, port), max_response_size, security=security,
                                                         client_id=client_id)
        self._socket.connect_blocking(timeout)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<BrokerConnection {self.host}:{self.port} {state}>"

    @property
    def closed(self) -> bool:
        return self._socket.sock is None

    def send(self, frame: bytes | bytearray | memoryview) -> None:
        """Send one whole request frame (its size field included).

        Raises:
            ConnectionClosed: the connection is closed or broke while sending.
        """
        self._write((frame,), self.timeout)

    def send_many(self, frames: Iterable[bytes | bytearray | memoryview]) -> None:
        """Send several frames in one write (pipelining); read their responses in order."""
        self._write(frames, self.timeout)

    def read_response(self, timeout: float | None = SAME_TIMEOUT) -> memoryview:
        """Read the next response and return its body (the bytes after the size field).

        ``timeout`` overrides the connection's timeout for this response only (for a
        long poll); the default keeps it.

        Raises:
            ConnectionClosed: EOF, reset or timeout before the whole response arrived.
            FrameTooLarge: the size field is below 2 or above ``max_response_size``
                (nothing is allocated for it; the connection is closed).
        """
        self._require()
        self._socket.set_timeout(self.timeout if timeout == SAME_TIMEOUT else timeout)
        return self._wait()

    def request(self, frame: bytes | bytearray | memoryview, timeout: float | None = SAME_TIMEOUT) -> memoryview:
        """Send a request that has a response and return the response body.

        ``timeout`` overrides the connection's timeout for this request (its send and its
        response); the default keeps it.

        Only valid when no earlier response is still unread (otherwise that one is
        returned): use :meth:`send` and :meth:`read_response` to pipeline.
        """
        self._write((frame,), self.timeout if timeout == SAME_TIMEOUT else timeout)
        return self._wait()

    def close(self) -> None:
        """Close the socket; idempotent. Later calls raise ConnectionClosed."""
        self._socket.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _write(self, frames: Iterable[bytes | bytearray | memoryview], timeout: float | None) -> None:
        # Each operation sets its own timeout (no system call while it stays the same: a
        # client repeating one kind of request pays none), and nothing runs between the
        # last byte sent and the wait for the response but the bookkeeping: the broker,
        # woken by that byte, often waits for this core (docs/benchmarks.md, section 13).
        self._require()
        self._socket.set_timeout(timeout)
        for frame in frames:
            self._socket.send((frame,), None)
        self._socket.write()

    def _wait(self) -> memoryview:
        try:
            return self._socket.wait_response()[1]
        except ConnectionClosed as exc:
            if isinstance(exc.__cause__, DecodeError):  # a bad size: say so, as documented
                raise exc.__cause__ from None
            raise

    def _require(self) -> None:
        if self._socket.sock is None:
            raise ConnectionClosed(f"connection to {self.host}:{self.port} is closed")


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
