"""Malformed, oversized and hostile frames close one connection; the broker serves on."""

from __future__ import annotations

import socket
import struct

import pytest

from rill.broker.testing import running_broker
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set

from tests.conftest import RawClient

HOSTILE = [
    pytest.param(struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01", id="2GiB-size"),
    pytest.param(struct.pack(">i", 0), id="zero-size"),
    pytest.param(struct.pack(">i", -5), id="negative-size"),
    pytest.param(struct.pack(">ih", 2, 99), id="unknown-type"),
    pytest.param(struct.pack(">ihh", 4, 2, 0x7FFF), id="multifetch-count-too-large"),
    pytest.param(struct.pack(">ihh", 4, 1, 0x7FFF), id="topic-length-past-end"),
    pytest.param(struct.pack(">ihhbi", 9, 0, 1, 65, 0), id="produce-missing-length"),
    pytest.param(struct.pack(">ihhbii", 13, 0, 1, 65, 0, 0x7FFFFFFF), id="produce-length-past-end"),
    pytest.param(struct.pack(">i", 1) + b"\x00", id="truncated-type"),
    pytest.param(struct.pack(">i", len(rq.encode_offsets("t", 0, -1, 1)) - 3) + rq.encode_offsets("t", 0, -1, 1)[4:] + b"x",
                 id="trailing-byte"),
]


@pytest.mark.parametrize("frame", HOSTILE)
def test_hostile_frame_closes_only_its_connection(broker, frame: bytes) -> None:
    """The offending connection is closed; another connection keeps working, data intact."""
    good = RawClient(broker.host, broker.port)
    body = good.request(rq.encode_produce_ack([rq.ProduceRequest("safe", 0, encode_message_set([b"keep"]))]))
    assert rq.decode_produce_ack_response(body)[1][0].error == 0
    bad = RawClient(broker.host, broker.port)
    bad.send(frame)
    assert bad.is_closed_by_peer()
    bad.close()
    error, data = rq.decode_fetch_response(good.request(rq.encode_fetch("safe", 0, 0, 1000)))
    assert (error, bytes(data)) == (0, encode_message_set([b"keep"]))
    good.close()


def test_request_over_socket_request_max_bytes_is_refused_before_reading(tmp_path) -> None:
    """A size field over socket.request.max.bytes closes the connection at once."""
    with running_broker(tmp_path, socket_request_max_bytes=4096) as b:
        bad = RawClient(b.host, b.port)
        bad.send(struct.pack(">i", 5000))  # no body follows: the broker must not wait for it
        assert bad.is_closed_by_peer(timeout=5)
        ok = RawClient(b.host, b.port)
        assert rq.decode_offsets_response(ok.request(rq.encode_offsets("x", 0, -1, 1))) == (0, [0])
        ok.close()


def test_random_garbage_never_takes_the_broker_down(broker) -> None:
    """Hundreds of random byte strings on fresh connections leave the broker serving."""
    import random

    rng = random.Random(7)
    for _ in range(200):
        s = socket.create_connection((broker.host, broker.port), timeout=5)
        s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))))
        s.close()
    client = RawClient(broker.host, broker.port)
    assert rq.decode_offsets_response(client.request(rq.encode_offsets("x", 0, -2, 1))) == (0, [0])
    client.close()


def test_slow_sender_one_byte_at_a_time(raw: RawClient) -> None:
    """A request arriving one byte per send is reassembled and answered."""
    frame = rq.encode_offsets("slow", 0, -1, 1)
    for i in range(len(frame)):
        raw.send(frame[i:i + 1])
    assert rq.decode_offsets_response(raw.response()) == (0, [0])


def test_many_idle_connections_and_active_ones(broker) -> None:
    """1,000 idle connections plus 50 active ones are served without a thread each."""
    import threading

    idle = [socket.create_connection((broker.host, broker.port), timeout=10) for _ in range(1000)]
    active = [RawClient(broker.host, broker.port) for _ in range(50)]
    for i, c in enumerate(active):
        body = c.request(rq.encode_produce_ack([rq.ProduceRequest("busy", 0, encode_message_set([b"%d" % i]))]))
        assert rq.decode_produce_ack_response(body)[1][0].error == 0
    assert len(broker.server.connections) >= 1050
    assert threading.active_count() < 20
    for s in idle:
        s.close()
    for c in active:
        c.close()


def test_a_failing_handler_costs_one_connection(broker) -> None:
    """An unexpected exception in a handler closes that connection; the broker keeps serving."""
    handlers = broker.broker.handlers
    original = handlers._table[rq.RequestType.METADATA]

    def broken(conn, request):
        raise RuntimeError("simulated handler bug")

    handlers._table[rq.RequestType.METADATA] = broken
    try:
        victim = RawClient(broker.host, broker.port)
        victim.send(rq.encode_metadata())
        assert victim.is_closed_by_peer()
        victim.close()
    finally:
        handlers._table[rq.RequestType.METADATA] = original
    ok = RawClient(broker.host, broker.port)
    assert rq.decode_metadata_response(ok.request(rq.encode_metadata()))[0] == 0
    ok.close()
