"""The sans-IO connection fed with bytes: ordering, requests without a response, limits, errors."""

from __future__ import annotations

import struct

import pytest

from rill.client.protocol.connection import ProtocolConnection, UnexpectedResponse
from rill.client.protocol.framing import FrameTooLarge


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def written(conn: ProtocolConnection[str]) -> bytes:
    """Everything queued, as a socket would take it (then reported written)."""
    data = b"".join(bytes(b) for b in conn.output(1024))
    conn.wrote(len(data))
    return data


def test_responses_pair_with_the_requests_that_have_one_in_order() -> None:
    conn: ProtocolConnection[str] = ProtocolConnection("b:1")
    conn.send([frame(b"\x00\x01a")], "metadata")
    conn.send([frame(b"\x00\x00p")], "produce", answered=False)
    conn.send([b"\x00\x00\x00\x03", b"\x00\x02", b"f"], "fetch")
    assert written(conn) == frame(b"\x00\x01a") + frame(b"\x00\x00p") + frame(b"\x00\x02f")
    data = frame(b"\x00\x00one") + frame(b"\x00\x00two")
    for i in range(len(data)):  # byte by byte
        conn.receive(data[i:i + 1])
    first, second = conn.next_response(), conn.next_response()
    assert first is not None and second is not None
    assert [(c, bytes(b)) for c, b in (first, second)] == [("metadata", b"\x00\x00one"), ("fetch", b"\x00\x00two")]
    assert conn.next_response() is None and conn.in_flight == 0


def test_a_request_without_a_response_is_done_once_its_last_byte_is_written() -> None:
    conn: ProtocolConnection[str] = ProtocolConnection("b:1")
    conn.send([frame(b"\x00\x00abc")], "produce", answered=False)
    assert conn.wrote(7) == [] and conn.in_flight == 1
    assert bytes(conn.output(8)[0]) == b"bc"  # the rest stays queued
    assert conn.wrote(2) == ["produce"] and conn.in_flight == 0 and not conn.has_output


@pytest.mark.parametrize("size", [0, 1, 1001])
def test_a_size_outside_2_to_the_limit_raises_before_allocating(size: int) -> None:
    conn: ProtocolConnection[str] = ProtocolConnection("b:1", max_response_size=1000)
    conn.send([frame(b"\x00\x01")], "r")
    conn.receive(struct.pack(">i", size))
    with pytest.raises(FrameTooLarge, match="outside 2..1000"):
        conn.next_response()


def test_a_response_nobody_asked_for_is_an_error() -> None:
    conn: ProtocolConnection[str] = ProtocolConnection("b:1")
    conn.send([frame(b"\x00\x00p")], "produce", answered=False)
    conn.receive(frame(b"\x00\x00"))
    with pytest.raises(UnexpectedResponse, match="nobody asked for"):
        conn.next_response()


def test_a_large_response_is_received_into_a_buffer_of_its_own() -> None:
    conn: ProtocolConnection[str] = ProtocolConnection("b:1")
    conn.send([frame(b"\x00\x01")], "fetch")
    body = b"\x00\x00" + bytes(range(256)) * 1024
    conn.receive(frame(body)[:100])
    assert conn.next_response() is None
    target = conn.receive_target()
    assert target is not None and len(target) == len(body) - 96  # straight into the body, no copy
    target[:] = body[96:]
    conn.received_into(len(target))
    assert conn.receive_target() is None  # whole: nothing more goes into it (a read of 0 bytes would look like EOF)
    response = conn.next_response()
    assert response is not None and response[0] == "fetch" and bytes(response[1]) == body


def test_reset_hands_back_every_request_with_whether_it_was_started() -> None:
    conn: ProtocolConnection[str] = ProtocolConnection("b:1")
    conn.send([frame(b"\x00\x01")], "a")
    conn.send([frame(b"\x00\x00p")], "b", answered=False)
    conn.send([frame(b"\x00\x01")], "c")
    conn.wrote(8)  # all of "a", part of "b"
    assert conn.reset() == [("a", True), ("b", True), ("c", False)]
    assert conn.in_flight == 0 and not conn.has_output and conn.reset() == []


def test_after_a_large_response_the_next_large_body_is_received_in_place() -> None:
    """A run of large responses: each size field is read alone, then the whole body goes into its own buffer."""
    conn: ProtocolConnection[str] = ProtocolConnection("b:1")
    for name in ("f1", "f2", "small"):
        conn.send([frame(b"\x00\x02")], name)
    written(conn)
    big = b"\x00\x00" + b"x" * (200 * 1024)
    assert conn.receive_size(1 << 18) == 1 << 18  # nothing large seen yet: read in bulk
    conn.receive(frame(big)[:1000])  # a bulk read that overshot into the first body
    assert conn.next_response() is None
    rest = frame(big)[1000:]
    target = conn.receive_target()
    assert target is not None and len(target) == len(rest)
    target[:] = rest
    conn.received_into(len(rest))
    first = conn.next_response()
    assert first is not None and first[0] == "f1" and bytes(first[1]) == big
    assert conn.receive_size(1 << 18) == 4  # between responses after a large one: the size field alone
    conn.receive(frame(big)[:4])
    target = conn.receive_target()
    assert target is not None and len(target) == len(big)  # the whole body, nothing copied on the way
    target[:] = big
    conn.received_into(len(big))
    second = conn.next_response()
    assert second is not None and second[0] == "f2" and bytes(second[1]) == big
    conn.receive(frame(b"\x00\x00ok")[:4])  # a small one after it: no buffer of its own, bulk reads again
    assert conn.receive_target() is None and conn.receive_size(1 << 18) == 1 << 18
    conn.receive(frame(b"\x00\x00ok")[4:])
    third = conn.next_response()
    assert third is not None and bytes(third[1]) == b"\x00\x00ok" and conn.receive_size(1 << 18) == 1 << 18
