"""BrokerChannel over a real loopback socket: pipelined requests, split responses, bad sizes, wake-ups."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from rill.client.consumer.network import BrokerChannel, Network


@pytest.fixture
def server() -> Iterator[socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener
    listener.close()


def run_until(network: Network, channel: BrokerChannel, want: int, timeout: float = 5.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and not channel.closed and time.monotonic() < deadline:
        for ch, mask in network.wait(0.05):
            got += ch.handle(mask)
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
    network = Network()
    channel = BrokerChannel(0, "127.0.0.1", server.getsockname()[1], max_response_size=1000)
    channel.connect(network.selector)
    channel.send(b"\x00\x00\x00\x02\x00\x07", "one")
    channel.send(b"\x00\x00\x00\x02\x00\x07", "two")
    got = run_until(network, channel, 2)
    assert [(c, bytes(b)) for c, b in got] == [("one", b"\x00\x00first"), ("two", b"\x00\x00second")]
    thread.join()
    run_until(network, channel, 1)  # the server closes: the channel notices
    assert channel.closed and channel.error
    network.close()


def test_a_response_size_over_the_limit_closes_the_channel(server: socket.socket) -> None:
    """A size field above max_response_size closes the connection before anything is allocated."""
    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(struct.pack(">i", 10_000_000))
        time.sleep(0.2)
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    network = Network()
    channel = BrokerChannel(0, "127.0.0.1", server.getsockname()[1], max_response_size=1000)
    channel.connect(network.selector)
    channel.send(b"\x00\x00\x00\x02\x00\x07", "one")
    run_until(network, channel, 1)
    assert channel.closed and "outside" in (channel.error or "")
    assert channel.take_failed() == ["one"]
    thread.join()
    network.close()


def test_a_refused_connection_is_reported() -> None:
    """Connecting to a closed port fails the channel with a reason."""
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    network = Network()
    channel = BrokerChannel(0, "127.0.0.1", port, max_response_size=1000)
    channel.connect(network.selector)
    run_until(network, channel, 1, timeout=2.0)
    assert channel.closed and "cannot connect" in (channel.error or "")
    network.close()


def test_wake_ends_a_wait_from_another_thread() -> None:
    """wake() from another thread makes a long wait return at once."""
    network = Network()
    threading.Timer(0.05, network.wake).start()
    started = time.monotonic()
    assert network.wait(5.0) == []
    assert time.monotonic() - started < 1.0
    network.close()
    network.wake()  # after close: no error
