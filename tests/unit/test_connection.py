"""BrokerConnection against a scripted loopback server (no broker)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from rill.client.blocking_connection import BrokerConnection, parse_address
from rill.client.errors import ConnectionClosed
from rill.client.protocol.framing import INT32, FrameTooLarge


class ScriptedServer:
    """Accepts one connection and runs ``script(conn)`` on it in a thread."""

    def __init__(self, script: Callable[[socket.socket], object]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = bytearray()
        self._script = script
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            self._script(conn)

    def close(self) -> None:
        self._thread.join(timeout=5)
        self.listener.close()


Serve = Callable[[Callable[[socket.socket], object]], ScriptedServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[ScriptedServer] = []

    def start(script: Callable[[socket.socket], object]) -> ScriptedServer:
        servers.append(ScriptedServer(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def send_then_wait(data: bytes) -> Callable[[socket.socket], None]:
    """A script that sends ``data`` then waits for the client to go away."""
    def script(conn: socket.socket) -> None:
        conn.sendall(data)
        recv_exact(conn, 1)
    return script


def test_pipelined_responses_come_back_in_order(serve: Serve) -> None:
    """Three frames sent before any read get their three responses, in order, split across writes."""
    def script(conn: socket.socket) -> None:
        recv_exact(conn, 3 * 6)
        stream = b"".join(INT32.pack(2 + i) + b"\0\0" + b"r" * i for i in range(3))
        for i in range(0, len(stream), 5):  # dribble it out in small pieces
            conn.sendall(stream[i:i + 5])

    server = serve(script)
    with BrokerConnection("127.0.0.1", server.port, timeout=5) as conn:
        conn.send_many([INT32.pack(2) + b"\0\1"] * 3)
        bodies = [bytes(conn.read_response()) for _ in range(3)]
    assert bodies == [b"\0\0", b"\0\0r", b"\0\0rr"]


def test_oversized_response_is_refused_before_reading_it(serve: Serve) -> None:
    """A size field over max_response_size raises FrameTooLarge from the header alone and closes."""
    server = serve(send_then_wait(INT32.pack(2 ** 31 - 1)))
    conn = BrokerConnection("127.0.0.1", server.port, timeout=5, max_response_size=1024)
    with pytest.raises(FrameTooLarge):
        conn.read_response()
    assert conn.closed
    with pytest.raises(ConnectionClosed):
        conn.send(b"x")


@pytest.mark.parametrize("size", [0, 1, -5])
def test_response_without_room_for_an_error_code_is_refused(serve: Serve, size: int) -> None:
    """A size field below 2 (no error code) raises FrameTooLarge."""
    server = serve(send_then_wait(INT32.pack(size)))
    with BrokerConnection("127.0.0.1", server.port, timeout=5) as conn, pytest.raises(FrameTooLarge):
        conn.read_response()


def test_eof_in_the_middle_of_a_body_raises_connection_closed(serve: Serve) -> None:
    """A peer closing after part of a response raises ConnectionClosed and leaves the connection closed."""
    server = serve(lambda conn: conn.sendall(INT32.pack(100) + b"\0\0partial"))
    conn = BrokerConnection("127.0.0.1", server.port, timeout=5)
    with pytest.raises(ConnectionClosed, match="closed the connection"):
        conn.read_response()
    assert conn.closed


def test_timeout_raises_connection_closed(serve: Serve) -> None:
    """No response within the timeout raises ConnectionClosed (the stream position is lost)."""
    done = threading.Event()
    server = serve(lambda conn: done.wait(5))
    conn = BrokerConnection("127.0.0.1", server.port, timeout=0.1)
    with pytest.raises(ConnectionClosed, match="timed out"):
        conn.request(INT32.pack(2) + b"\0\1")
    done.set()
    assert conn.closed


def test_connection_refused_raises_connection_closed() -> None:
    """Connecting to a port nobody listens on raises ConnectionClosed naming the address."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(ConnectionClosed, match=f"127.0.0.1:{port}"):
        BrokerConnection("127.0.0.1", port, timeout=2)


@pytest.mark.parametrize("text, expected", [
    ("localhost:9093", ("localhost", 9093)),
    ("broker1", ("broker1", 9092)),
    ("[::1]:9000", ("::1", 9000)),
    ("[::1]", ("::1", 9092)),
    ("::1", ("::1", 9092)),
    (" 10.0.0.1:1 ", ("10.0.0.1", 1)),
])
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    """host[:port] and [v6]:port split into host and port, 9092 by default."""
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", [":9092", "host:0", "host:65536", "host:x", "[::1", "[::1]x"])
def test_parse_address_rejects_bad_input(text: str) -> None:
    """An empty host, a non-numeric or out-of-range port, or broken brackets raise ValueError."""
    with pytest.raises(ValueError):
        parse_address(text)
