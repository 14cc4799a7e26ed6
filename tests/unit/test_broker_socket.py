"""BrokerSocket and SelectorLoop over a real loopback socket: pipelined requests, split
responses, bad sizes, refused connections, address rotation, blocking waits, wake-ups."""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rill.client.net.broker_socket import BrokerSocket, SocketState
from rill.client.errors import ConnectionClosed
from rill.client.net.selector_loop import SelectorLoop

REQUEST = b"\x00\x00\x00\x02\x00\x07"


@pytest.fixture
def server() -> Iterator[socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener
    listener.close()


class Driven:
    """A BrokerSocket driven by a SelectorLoop as the clients drive theirs; errors kept as text."""

    def __init__(self, port: int, max_response_size: int = 1000) -> None:
        self.loop = SelectorLoop()
        self.bsock: BrokerSocket[Any] = BrokerSocket(("127.0.0.1", port), max_response_size)
        self.error: str | None = None
        self.failed: list[tuple[Any, bool]] = []
        try:
            self.bsock.connect(time.monotonic(), 5.0)
            self.loop.watch(self.bsock)
        except ConnectionClosed as exc:
            self.fail(exc)

    def fail(self, exc: ConnectionClosed) -> None:
        self.error = str(exc)
        self.failed = self.bsock.fail(time.monotonic(), 0.1)

    def run_until(self, want: int, timeout: float = 5.0) -> list[tuple[Any, memoryview]]:
        got: list[tuple[Any, memoryview]] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and self.bsock.sock is not None and time.monotonic() < deadline:
            for bsock, mask in self.loop.wait(0.05):
                try:
                    if mask & selectors.EVENT_WRITE:
                        if bsock.state is SocketState.CONNECTING:
                            bsock.finish_connect()
                        bsock.write()
                    if mask & selectors.EVENT_READ and bsock.ready:
                        bsock.receive()
                        while (response := bsock.next_response()) is not None:
                            got.append(response)
                    self.loop.watch(bsock)
                except ConnectionClosed as exc:
                    self.fail(exc)
        return got


def test_responses_pair_with_requests_in_order_even_when_split(server: socket.socket) -> None:
    """Two pipelined requests get their responses in order, each reassembled from small pieces."""
    def serve() -> None:
        conn, _ = server.accept()
        for body in (b"\x00\x00first", b"\x00\x00second"):
            frame = struct.pack(">i", len(body)) + body
            for i in range(0, len(frame), 3):
                conn.sendall(frame[i:i + 3])
                time.sleep(0.001)
        time.sleep(0.2)
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    d = Driven(server.getsockname()[1])
    d.bsock.send((REQUEST,), "one")
    d.bsock.send((REQUEST,), "two")
    got = d.run_until(2)
    assert [(c, bytes(b)) for c, b in got] == [("one", b"\x00\x00first"), ("two", b"\x00\x00second")]
    thread.join()
    d.run_until(1)  # the server closes: the socket notices
    assert d.bsock.sock is None and d.error  # EOF, or a reset: the server left our requests unread
    d.loop.close()


def test_a_response_size_over_the_limit_closes_the_connection(server: socket.socket) -> None:
    """A size field above max_response_size closes the connection before anything is allocated."""
    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(struct.pack(">i", 10_000_000))
        time.sleep(0.2)
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    d = Driven(server.getsockname()[1])
    d.bsock.send((REQUEST,), "one")
    d.run_until(1)
    assert d.bsock.sock is None and "outside" in (d.error or "")
    assert d.failed == [("one", True)]  # written, never answered
    thread.join()
    d.loop.close()


def test_a_refused_connection_is_reported() -> None:
    """Connecting to a closed port fails the connection with a reason and sets a back-off."""
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    d = Driven(port)
    d.bsock.send((REQUEST,), "one")
    d.run_until(1, timeout=2.0)
    assert d.bsock.sock is None and "cannot connect" in (d.error or "")
    assert d.failed == [("one", False)]  # never written: safe to send again elsewhere
    assert d.bsock.failures == 1 and d.bsock.retry_at > time.monotonic() - 1
    d.loop.close()


def test_a_blocking_wait_reads_pipelined_responses_one_at_a_time(server: socket.socket) -> None:
    """In blocking mode one receive may bring two responses: each wait returns the next."""
    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(100)
        conn.sendall(b"".join(struct.pack(">i", len(b)) + b for b in (b"\x00\x00a", b"\x00\x00bb")))
        time.sleep(0.2)
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    bsock: BrokerSocket[str] = BrokerSocket(("127.0.0.1", server.getsockname()[1]))
    bsock.connect_blocking(5.0)
    bsock.send((REQUEST,), "one")
    bsock.send((REQUEST,), "two")
    assert [(c, bytes(b)) for c, b in (bsock.wait_response(), bsock.wait_response())] == \
        [("one", b"\x00\x00a"), ("two", b"\x00\x00bb")]
    thread.join()
    bsock.close()


def test_a_blocking_connect_tries_the_next_address(monkeypatch: pytest.MonkeyPatch, server: socket.socket) -> None:
    """A name resolving to a dead address and a live one connects to the live one (rotation)."""
    dead = socket.create_server(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    live = ("127.0.0.1", server.getsockname()[1])
    infos = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", dead_port)),
             (socket.AF_INET, socket.SOCK_STREAM, 6, "", live)]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: infos)
    bsock: BrokerSocket[None] = BrokerSocket(("broker.invalid", 9092))
    bsock.connect_blocking(5.0)
    assert bsock.sock is not None and bsock.sock.getpeername() == live
    bsock.close()


def test_wake_ends_a_wait_from_another_thread() -> None:
    """wake() from another thread makes a long wait return at once."""
    loop = SelectorLoop()
    threading.Timer(0.05, loop.wake).start()
    started = time.monotonic()
    assert loop.wait(5.0) == []
    assert time.monotonic() - started < 1.0
    loop.wake()  # twice: the second ring is still pending, and a wait ends once
    loop.wake()
    assert loop.wait(5.0) == []
    assert time.monotonic() - started < 1.0
    loop.close()
    loop.wake()  # after close: no error
