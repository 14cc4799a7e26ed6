"""The 0.7 requests built by hand from the seed's layouts, not with rill's codec.

If rill's encoder and decoder shared a mistake, the other tests would not see it;
these frames are packed with struct straight from shared/seeds (004 and README).
"""

from __future__ import annotations

import struct
import time
import zlib

from tests.conftest import RawClient


def message_v1(payload: bytes) -> bytes:
    # length int32, magic int8 = 1, attributes int8 = 0, crc int32, payload
    return struct.pack(">ibbI", 1 + 1 + 4 + len(payload), 1, 0, zlib.crc32(payload)) + payload


def message_v0(payload: bytes) -> bytes:
    return struct.pack(">ibI", 1 + 4 + len(payload), 0, zlib.crc32(payload)) + payload


def header(request_type: int, topic: bytes, partition: int) -> bytes:
    return struct.pack(">hh", request_type, len(topic)) + topic + struct.pack(">i", partition)


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_hand_built_produce_fetch_offsets_and_multifetch(raw: RawClient) -> None:
    """PRODUCE, FETCH, OFFSETS, MULTIPRODUCE and MULTIFETCH exactly as 0.7 lays them out."""
    messages = message_v1(b"first") + message_v0(b"second")
    raw.send(frame(header(0, b"wire", 0) + struct.pack(">i", len(messages)) + messages))

    deadline = time.time() + 5
    while True:
        raw.send(frame(header(1, b"wire", 0) + struct.pack(">qi", 0, 300 * 1024)))
        size, error = struct.unpack(">ih", raw.recv_exact(6))
        body = raw.recv_exact(size - 2)
        if body or time.time() > deadline:
            break
    assert error == 0 and body == messages

    raw.send(frame(header(4, b"wire", 0) + struct.pack(">qi", -1, 10)))
    size, error, count = struct.unpack(">ihi", raw.recv_exact(10))
    offsets = struct.unpack(">%dq" % count, raw.recv_exact(8 * count))
    assert (size, error, offsets) == (2 + 4 + 8 * count, 0, (len(messages),))

    more = message_v1(b"third")
    entry = struct.pack(">h", 4) + b"wire" + struct.pack(">ii", 0, len(more)) + more
    raw.send(frame(struct.pack(">hh", 3, 1) + entry))

    fetches = [(b"wire", 0, len(messages)), (b"wire", 0, 0)]
    body = struct.pack(">hh", 2, len(fetches)) + b"".join(
        struct.pack(">h", len(t)) + t + struct.pack(">iqi", p, o, 1 << 20) for t, p, o in fetches)
    deadline = time.time() + 5
    while True:
        raw.send(frame(body))
        size, error = struct.unpack(">ih", raw.recv_exact(6))
        rest = raw.recv_exact(size - 2)
        first_size, first_error = struct.unpack_from(">ih", rest, 0)
        if first_size > 2 or time.time() > deadline:
            break
    assert error == 0
    first = rest[6:4 + first_size]
    second_size, second_error = struct.unpack_from(">ih", rest, 4 + first_size)
    second = rest[4 + first_size + 6:]
    assert (first_error, first) == (0, more)
    assert second_error == 0 and second == messages + more and second_size == 2 + len(second)
