"""Encoding for the producer: the C message-set encoder agrees with the Python reference byte for
byte, and produce frames built as buffers have the documented layout."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.client.protocol import messages as m
from rill.client.protocol import requests as rq

needs_speedups = pytest.mark.skipif(m._speedups is None, reason="the C accelerator is not built")

payload_lists = st.lists(st.binary(max_size=300), max_size=30)
magics = st.sampled_from([m.MAGIC_V0, m.MAGIC_V1])


@needs_speedups
@settings(max_examples=300)
@given(payload_lists, magics, st.sampled_from([bytes, bytearray, memoryview]))
def test_c_encode_set_agrees_with_python(payloads: list[bytes], magic: int, kind: type) -> None:
    """The C encode_set and _py_encode_set produce the same bytes for bytes-like payloads of either magic."""
    values = [kind(p) for p in payloads]
    assert m._speedups.encode_set(values, magic) == m._py_encode_set(values, magic)


@given(payload_lists, magics)
def test_encode_set_is_the_messages_back_to_back(payloads: list[bytes], magic: int) -> None:
    """encode_set is encode_message of each payload, concatenated (what encode_message_set always produced)."""
    assert m.encode_set(payloads, magic) == b"".join(m.encode_message(p, magic) for p in payloads)


@needs_speedups
def test_both_refuse_what_is_not_bytes_like_and_unknown_magic() -> None:
    """A str payload raises TypeError and a magic other than 0 or 1 ValueError, in C and in Python."""
    for encode in (m._speedups.encode_set, m._py_encode_set):
        with pytest.raises(TypeError):
            encode([b"ok", "text"], 1)
        with pytest.raises(ValueError):
            encode([b"ok"], 2)


topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=20)
produces = st.lists(st.builds(rq.ProduceRequest, topics, st.integers(-1, 2 ** 31 - 1),
                              st.binary(max_size=200)), max_size=6)


def _entry(p: rq.ProduceRequest) -> bytes:
    return struct.pack(">h", len(p.topic)) + p.topic.encode() + struct.pack(">ii", p.partition, len(p.messages)) \
        + bytes(p.messages)


@given(produces, st.sampled_from([rq.Acks.APPEND, rq.Acks.FSYNC]), st.integers(0, 2 ** 31 - 1))
def test_produce_frame_parts_are_the_documented_layout(entries: list[rq.ProduceRequest], acks: int,
                                                       timeout_ms: int) -> None:
    """The buffers of a PRODUCE_ACK / MULTIPRODUCE frame, written in order, are exactly the docs/protocol.md layout."""
    body = struct.pack(">hhih", rq.RequestType.PRODUCE_ACK, acks, timeout_ms, len(entries))
    body += b"".join(_entry(p) for p in entries)
    assert b"".join(rq.encode_produce_ack_parts(entries, acks, timeout_ms)) == struct.pack(">i", len(body)) + body
    body = struct.pack(">hh", rq.RequestType.MULTIPRODUCE, len(entries)) + b"".join(_entry(p) for p in entries)
    assert b"".join(rq.encode_multiproduce_parts(entries)) == struct.pack(">i", len(body)) + body
