"""The send thread against a fake broker on a real socket: timeouts, retries, malformed answers."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from rill.client.producer import Producer, ProducerTimeout
from rill.client.protocol import requests as rq


class FakeBroker:
    """Accepts connections and answers each request with ``answer(kind, request, port)`` (None: no answer);
    CLIENT_HELLO is answered as a broker does, and not recorded."""

    def __init__(self, answer: Callable[[int, Any, int], bytes | None]) -> None:
        self.answer = answer
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests: list[tuple[int, Any]] = []
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", self._read(conn, 4))
                kind, request = rq.decode_request(self._read(conn, size))
                if kind == rq.RequestType.CLIENT_HELLO:  # a client naming itself, as a broker answers it
                    conn.sendall(rq.response_header(0, 0))
                    continue
                self.requests.append((kind, request))
                reply = self.answer(kind, request, self.port)
                if reply is not None:
                    conn.sendall(reply)
        except (OSError, EOFError):
            return

    @staticmethod
    def _read(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def close(self) -> None:
        self.server.close()
        for conn in self.conns:
            conn.close()


def metadata_answer(request: rq.MetadataRequest, port: int) -> bytes:
    me = rq.BrokerInfo(0, "127.0.0.1", port, 0)
    return rq.encode_metadata_response(0, [me], [rq.TopicMetadata(t, 0, (0,)) for t in request.topics])


@pytest.fixture
def silent_on_produce() -> Iterator[FakeBroker]:
    """Answers METADATA (one partition per topic, led by itself) and never answers a produce."""
    broker = FakeBroker(lambda kind, req, port: metadata_answer(req, port) if kind == rq.RequestType.METADATA
                        else None)
    yield broker
    broker.close()


def test_unanswered_request_times_out_and_is_retried_then_fails(silent_on_produce: FakeBroker) -> None:
    """A produce without an answer fails its connection after request.timeout.ms, is sent again
    `retries` times, then its future fails with ProducerTimeout."""
    with capture_logs() as logs:
        with Producer(bootstrap_servers=f"127.0.0.1:{silent_on_produce.port}", request_timeout_ms=300,
                      retries=1, retry_backoff_ms=10) as p:
            error = p.send("t", b"x").get_error(timeout=10)
    assert isinstance(error, ProducerTimeout)
    produces = [r for kind, r in silent_on_produce.requests if kind == rq.RequestType.PRODUCE_ACK]
    assert len(produces) == 2 and all(r.produces[0].topic == "t" for r in produces)
    assert [e["event"] for e in logs if e["event"] == "producer.retry"] == ["producer.retry"]


def test_malformed_answer_costs_the_connection_not_the_producer() -> None:
    """A METADATA answer that does not parse closes that connection; the producer keeps working."""
    garbage = struct.pack(">ih", 4, 0) + b"\x7f\xff"  # error 0, then a broker count far beyond the body
    broker = FakeBroker(lambda kind, req, port: garbage)
    try:
        with capture_logs() as logs:
            with Producer(bootstrap_servers=f"127.0.0.1:{broker.port}", request_timeout_ms=300,
                          retry_backoff_ms=10) as p:
                first = p.send("t", b"x")
                assert isinstance(first.get_error(timeout=10), ProducerTimeout)
                second = p.send("t", b"y")  # the send thread is alive: no ProducerClosed
                assert isinstance(second.get_error(timeout=10), ProducerTimeout)
        assert any(e["event"] == "producer.connection_failed" and "bad response" in e["error"] for e in logs)
        assert not any(e["event"] == "producer.sender_failed" for e in logs)
    finally:
        broker.close()
