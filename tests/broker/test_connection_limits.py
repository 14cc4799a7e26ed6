"""Connection limits on a running broker: room for newcomers, idle and slow connections, request memory."""

from __future__ import annotations

import socket
import struct
import time

from rill.broker.testing import running_broker
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set

from tests.conftest import RawClient


def _wait(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _served(host: str, port: int, source: str = "127.0.0.1") -> bool:
    sock = socket.create_connection((host, port), timeout=5, source_address=(source, 0))
    client = RawClient.__new__(RawClient)
    client.sock = sock
    try:
        return rq.decode_offsets_response(client.request(rq.encode_offsets("x", 0, -1, 1))) == (0, [0])
    finally:
        sock.close()


def test_a_newcomer_gets_in_when_a_flood_holds_every_connection(tmp_path):
    """With max.connections held by idle connections, a new client is served and the oldest idle one makes room."""
    with running_broker(tmp_path / "data", max_connections=20) as b:
        flood = [socket.create_connection((b.host, b.port)) for _ in range(20)]
        assert _wait(lambda: len(b.server.connections) == 20)
        assert _served(b.host, b.port)
        flood[0].settimeout(5)
        assert flood[0].recv(1) == b""  # the least recently active idle connection was closed
        assert len(b.server.connections) <= 20
        for sock in flood:
            sock.close()


def test_max_connections_per_ip_cycles_only_that_address(tmp_path):
    """One address over max.connections.per.ip loses its own oldest idle connection; another address is untouched."""
    with running_broker(tmp_path / "data", max_connections_per_ip=3) as b:
        other = socket.create_connection((b.host, b.port), source_address=("127.0.0.1", 0))
        mine = [socket.create_connection((b.host, b.port), source_address=("127.0.0.2", 0)) for _ in range(3)]
        assert _wait(lambda: len(b.server.connections) == 4)
        assert _served(b.host, b.port, source="127.0.0.2")
        mine[0].settimeout(5)
        assert mine[0].recv(1) == b""
        assert b.server.table.count("127.0.0.2") <= 3 and b.server.table.count("127.0.0.1") == 1
        for sock in [other, *mine]:
            sock.close()


def test_idle_connections_are_closed_after_connections_max_idle_ms(tmp_path):
    """A connection with nothing in flight is closed once idle for connections.max.idle.ms; a waiting long poll is not."""
    with running_broker(tmp_path / "data", connections_max_idle_ms=300, fetch_max_wait_ms=5000) as b:
        idle = socket.create_connection((b.host, b.port))
        polling = RawClient(b.host, b.port)
        polling.send(rq.encode_fetch_wait([rq.FetchRequest("quiet", 0, 0, 1000)], max_wait_ms=2000, min_bytes=1))
        idle.settimeout(5)
        start = time.monotonic()
        assert idle.recv(1) == b""
        assert 0.3 <= time.monotonic() - start < 3
        error, blocks = rq.decode_multifetch_response(polling.response())  # answered at max_wait, not cut off
        assert error == 0 and len(blocks) == 1
        polling.close()
        idle.close()


def test_a_large_request_that_trickles_is_cut_off_and_its_memory_returned(tmp_path):
    """A request over 64 KiB that does not arrive within request.read.timeout.ms closes its connection and frees its reservation."""
    with running_broker(tmp_path / "data", request_read_timeout_ms=400) as b:
        slow = socket.create_connection((b.host, b.port))
        slow.sendall(struct.pack(">i", 1_000_000) + b"\x00" * 1000)
        assert _wait(lambda: b.server.memory.used == 1_000_000)
        slow.settimeout(5)
        assert slow.recv(1) == b""
        assert _wait(lambda: b.server.memory.used == 0)
        assert _served(b.host, b.port)
        slow.close()


def test_request_memory_bounds_large_requests_without_holding_up_small_ones(tmp_path):
    """With the budget spent, a second large request waits (not read) while small requests are served; then it completes."""
    limit = 2 * 1024 * 1024
    with running_broker(tmp_path / "data", socket_request_max_bytes=limit, queued_max_request_bytes=limit) as b:
        payload = encode_message_set([b"p" * 100_000] * 15)
        frame = rq.encode_produce_ack([rq.ProduceRequest("big", 0, payload)])
        first, second = RawClient(b.host, b.port), RawClient(b.host, b.port)
        first.send(frame[:len(frame) // 2])  # holds ~1.5 MiB of the 2 MiB budget
        assert _wait(lambda: b.server.memory.used == len(frame) - 4)
        second.send(frame)  # does not fit: waits for memory
        assert _wait(lambda: b.server.memory.waiting == 1)
        assert _served(b.host, b.port)
        first.send(frame[len(frame) // 2:])
        for client in (first, second):
            _, [ack] = rq.decode_produce_ack_response(client.response())
            assert ack.error == 0
        assert b.server.memory.peak <= limit and _wait(lambda: b.server.memory.used == 0)
        first.close()
        second.close()
