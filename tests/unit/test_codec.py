"""The sans-IO codec: messages, message sets, requests, responses, framing, and the C accelerator."""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rill.client.crc import crc32, crcmod_crc32
from rill.client.errors import CorruptMessageError
from rill.client.protocol import messages as m
from rill.client.protocol import requests as rq
from rill.client.protocol import sasl_requests as sasl
from rill.client.protocol.client_hello import encode_client_hello
from rill.client.protocol.framing import INT32, DecodeError, FrameDecoder, FrameTooLarge, Reader
from rill.client.protocol.replica_fetch import ReplicaFetchPartition, ReplicaFetchRequest, encode_replica_fetch

payloads = st.lists(st.binary(max_size=300), max_size=20)
magics = st.sampled_from([m.MAGIC_V0, m.MAGIC_V1])
topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=40)
int16s = st.integers(-(2 ** 15), 2 ** 15 - 1)
int32s = st.integers(-(2 ** 31), 2 ** 31 - 1)
int64s = st.integers(-(2 ** 63), 2 ** 63 - 1)
message_sets = st.builds(lambda ps, codec: m.encode_message_set(ps, codec), payloads,
                         st.sampled_from([m.CODEC_NONE, m.CODEC_GZIP]))
produces = st.lists(st.builds(rq.ProduceRequest, topics, int32s, message_sets), max_size=5)
fetches = st.lists(st.builds(rq.FetchRequest, topics, int32s, int64s, int32s), max_size=5)


# ---------------------------------------------------------------- messages


@given(payloads, magics, st.integers(0, 2 ** 40))
def test_message_set_round_trip(values: list[bytes], magic: int, base: int) -> None:
    """Uncompressed sets of either magic decode to the same payloads, at byte offsets from ``base``."""
    data = m.encode_message_set(values, m.CODEC_NONE, magic)
    decoded, consumed = m.decode_message_set(data, "t", 3, base)
    assert [d.value for d in decoded] == values
    assert consumed == len(data)
    header = 9 if magic == m.MAGIC_V0 else 10
    offset = base
    for d, value in zip(decoded, values):
        assert (d.topic, d.partition, d.offset, d.key) == ("t", 3, offset, None)
        offset += header + len(value)
        assert d.next_offset == offset


@given(payloads.filter(bool), magics, st.integers(0, 2 ** 40))
def test_gzip_set_round_trip(values: list[bytes], magic: int, base: int) -> None:
    """A gzip wrapper decodes to its payloads; all share its offset and only the last moves past it."""
    data = m.encode_message_set(values, m.CODEC_GZIP, magic)
    decoded, consumed = m.decode_message_set(data, "t", 0, base)
    assert [d.value for d in decoded] == values
    assert consumed == len(data)
    assert {d.offset for d in decoded} == {base}
    assert [d.next_offset for d in decoded] == [base] * (len(values) - 1) + [base + len(data)]


@given(payloads, st.binary(max_size=30))
def test_incomplete_tail_is_not_consumed(values: list[bytes], tail_payload: bytes) -> None:
    """A set cut anywhere inside its last message decodes the whole messages before it only."""
    whole = m.encode_message_set(values)
    last = m.encode_message(tail_payload)
    for cut in range(len(last)):
        decoded, consumed = m.decode_message_set(whole + last[:cut])
        assert consumed == len(whole)
        assert [d.value for d in decoded] == values


def test_message_layout_is_0_7() -> None:
    """A magic-1 message is length, magic, attributes, CRC32 of the payload, payload."""
    payload = b"hello"
    assert m.encode_message(payload) == struct.pack(">iBBI", 11, 1, 0, zlib.crc32(payload)) + payload
    assert m.encode_message(payload, m.MAGIC_V0) == struct.pack(">iBI", 10, 0, zlib.crc32(payload)) + payload


@given(st.lists(st.binary(min_size=1, max_size=100), min_size=1, max_size=10), magics, st.data())
def test_flipped_payload_bit_raises_corrupt_message(values: list[bytes], magic: int, data: st.DataObject) -> None:
    """Flipping any bit of any payload makes decoding raise CorruptMessageError (never a bad message)."""
    encoded = [m.encode_message(v, magic) for v in values]
    which = data.draw(st.integers(0, len(values) - 1))
    header = 9 if magic == m.MAGIC_V0 else 10
    bit = data.draw(st.integers(0, 8 * len(values[which]) - 1))
    target = bytearray(encoded[which])
    target[header + bit // 8] ^= 1 << (bit % 8)
    encoded[which] = bytes(target)
    with pytest.raises(CorruptMessageError):
        m.decode_message_set(b"".join(encoded))


def test_corrupt_gzip_stream_with_valid_crc_raises_corrupt_message() -> None:
    """A wrapper whose CRC is right but whose deflate data is garbage raises CorruptMessageError."""
    good = gzip.compress(m.encode_message_set([b"a" * 100, b"b"]), mtime=0)
    bad = good[:10] + b"\xff\xff\xff" + good[13:]
    with pytest.raises(CorruptMessageError):
        m.decode_message_set(m.encode_message(bad, m.MAGIC_V1, m.CODEC_GZIP))


def test_unknown_codec_raises_corrupt_message() -> None:
    """Snappy (not supported) and codec 3 (undefined) wrappers raise CorruptMessageError."""
    for codec in (m.CODEC_SNAPPY, 3):
        with pytest.raises(CorruptMessageError):
            m.decode_message_set(m.encode_message(b"xyz", m.MAGIC_V1, codec))


def test_deeply_nested_compression_raises_corrupt_message() -> None:
    """Gzip wrappers nested past MAX_COMPRESSION_DEPTH are refused, not a RecursionError."""
    data = m.encode_message(b"x")
    for _ in range(300):
        data = m.encode_message(gzip.compress(data, mtime=0), m.MAGIC_V1, m.CODEC_GZIP)
    with pytest.raises(CorruptMessageError):
        m.decode_message_set(data)


def test_nested_compression_within_the_limit_decodes() -> None:
    """A gzip wrapper inside a gzip wrapper (two levels) still decodes."""
    inner = m.encode_message_set([b"a", b"b"], m.CODEC_GZIP)
    outer = m.encode_message(gzip.compress(inner, mtime=0), m.MAGIC_V1, m.CODEC_GZIP)
    assert [d.value for d in m.decode_message_set(outer)[0]] == [b"a", b"b"]


# ---------------------------------------------------------------- requests


def _decode_frame(frame: bytes) -> tuple[int, rq.Request]:
    (size,) = INT32.unpack_from(frame)
    assert size == len(frame) - 4
    return rq.decode_request(frame[4:])


def _same_produces(decoded: list[rq.ProduceRequest], expected: list[rq.ProduceRequest]) -> bool:
    return [(p.topic, p.partition, bytes(p.messages)) for p in decoded] == \
        [(p.topic, p.partition, bytes(p.messages)) for p in expected]


@given(topics, int32s, message_sets)
def test_produce_round_trip(topic: str, partition: int, messages: bytes) -> None:
    """PRODUCE (0) decodes to its topic, partition and message set."""
    kind, req = _decode_frame(rq.encode_produce(topic, partition, messages))
    assert kind == rq.RequestType.PRODUCE
    assert isinstance(req, rq.ProduceRequest)
    assert _same_produces([req], [rq.ProduceRequest(topic, partition, messages)])


@given(produces)
def test_multiproduce_round_trip(expected: list[rq.ProduceRequest]) -> None:
    """MULTIPRODUCE (3) decodes to its produces, in order."""
    kind, req = _decode_frame(rq.encode_multiproduce(expected))
    assert kind == rq.RequestType.MULTIPRODUCE
    assert isinstance(req, rq.MultiProduceRequest)
    assert _same_produces(req.produces, expected)


@given(produces, int16s, int32s)
def test_produce_ack_round_trip(expected: list[rq.ProduceRequest], acks: int, timeout_ms: int) -> None:
    """PRODUCE_ACK (5) decodes to its acks, timeout and produces."""
    kind, req = _decode_frame(rq.encode_produce_ack(expected, acks, timeout_ms))
    assert kind == rq.RequestType.PRODUCE_ACK
    assert isinstance(req, rq.ProduceAckRequest)
    assert (req.acks, req.timeout_ms) == (acks, timeout_ms)
    assert _same_produces(req.produces, expected)


@given(topics, int32s, int64s, int32s)
def test_fetch_round_trip(topic: str, partition: int, offset: int, max_size: int) -> None:
    """FETCH (1) decodes to the same fields."""
    assert _decode_frame(rq.encode_fetch(topic, partition, offset, max_size)) == \
        (rq.RequestType.FETCH, rq.FetchRequest(topic, partition, offset, max_size))


@given(fetches)
def test_multifetch_round_trip(expected: list[rq.FetchRequest]) -> None:
    """MULTIFETCH (2) decodes to the same fetches."""
    assert _decode_frame(rq.encode_multifetch(expected)) == (rq.RequestType.MULTIFETCH, rq.MultiFetchRequest(expected))


@given(fetches, int32s, int32s)
def test_fetch_wait_round_trip(expected: list[rq.FetchRequest], max_wait_ms: int, min_bytes: int) -> None:
    """FETCH_WAIT (6) decodes to its wait, minimum and fetches."""
    assert _decode_frame(rq.encode_fetch_wait(expected, max_wait_ms, min_bytes)) == \
        (rq.RequestType.FETCH_WAIT, rq.FetchWaitRequest(max_wait_ms, min_bytes, expected))


@given(topics, int32s, int64s, int32s)
def test_offsets_round_trip(topic: str, partition: int, time: int, max_number: int) -> None:
    """OFFSETS (4) decodes to the same fields."""
    assert _decode_frame(rq.encode_offsets(topic, partition, time, max_number)) == \
        (rq.RequestType.OFFSETS, rq.OffsetsRequest(topic, partition, time, max_number))


@given(st.lists(topics, max_size=8))
def test_metadata_round_trip(names: list[str]) -> None:
    """METADATA (7) decodes to the same topic list (empty means all)."""
    assert _decode_frame(rq.encode_metadata(names)) == (rq.RequestType.METADATA, rq.MetadataRequest(names))


@given(topics, int32s)
def test_create_topic_round_trip(topic: str, partitions: int) -> None:
    """CREATE_TOPIC (8) decodes to the same name and partition count."""
    assert _decode_frame(rq.encode_create_topic(topic, partitions)) == \
        (rq.RequestType.CREATE_TOPIC, rq.CreateTopicRequest(topic, partitions))


@given(topics, int32s, int64s, int32s)
def test_time_index_round_trip(topic: str, partition: int, offset: int, max_entries: int) -> None:
    """TIME_INDEX (9) decodes to the same topic, partition, offset and maximum."""
    assert _decode_frame(rq.encode_time_index(topic, partition, offset, max_entries)) == \
        (rq.RequestType.TIME_INDEX, rq.TimeIndexRequest(topic, partition, offset, max_entries))


@given(int16s, st.lists(st.tuples(int64s, int64s), max_size=50))
def test_time_index_response_round_trip(error: int, entries: list[tuple[int, int]]) -> None:
    """A TIME_INDEX response (count, then offset and time per entry) decodes to the same entries."""
    frame = rq.encode_time_index_response(error, entries)
    assert rq.decode_time_index_response(frame[4:]) == (error, entries)
    with pytest.raises(DecodeError):
        rq.decode_time_index_response(frame[4:-1])


def test_fetch_request_is_0_7_byte_exact() -> None:
    """FETCH is size, type 1, topic string16, partition, offset int64, max size, big-endian."""
    assert rq.encode_fetch("ab", 2, 300, 1000) == struct.pack(">ihh2siqi", 2 + 2 + 2 + 4 + 8 + 4, 1, 2, b"ab", 2,
                                                              300, 1000)


@given(st.binary(max_size=64))
def test_decode_request_never_raises_anything_but_decode_error(body: bytes) -> None:
    """Random bodies either decode or raise DecodeError; nothing else escapes."""
    try:
        rq.decode_request(body)
    except DecodeError:
        pass


@given(st.sampled_from(list(rq.RequestType)), st.data())
def test_truncated_or_extended_requests_raise_decode_error(kind: rq.RequestType, data: st.DataObject) -> None:
    """A valid request body cut short or followed by extra bytes raises DecodeError."""
    frames = {
        rq.RequestType.PRODUCE: rq.encode_produce("t", 0, m.encode_message_set([b"x"])),
        rq.RequestType.FETCH: rq.encode_fetch("t", 0, 0, 100),
        rq.RequestType.MULTIFETCH: rq.encode_multifetch([rq.FetchRequest("t", 0, 0, 100)]),
        rq.RequestType.MULTIPRODUCE: rq.encode_multiproduce([rq.ProduceRequest("t", 0, m.encode_message(b"x"))]),
        rq.RequestType.OFFSETS: rq.encode_offsets("t", 0, -1, 1),
        rq.RequestType.PRODUCE_ACK: rq.encode_produce_ack([rq.ProduceRequest("t", 0, m.encode_message(b"x"))]),
        rq.RequestType.FETCH_WAIT: rq.encode_fetch_wait([rq.FetchRequest("t", 0, 0, 100)], 100),
        rq.RequestType.METADATA: rq.encode_metadata(["t"]),
        rq.RequestType.CREATE_TOPIC: rq.encode_create_topic("t", 1),
        rq.RequestType.TIME_INDEX: rq.encode_time_index("t", 0, 0, 10),
        rq.RequestType.REPLICA_FETCH: encode_replica_fetch(ReplicaFetchRequest(
            1, 500, 1, [ReplicaFetchPartition("t", 0, 3, 100, 2, 1 << 20)])),
        rq.RequestType.SASL_HANDSHAKE: sasl.encode_sasl_handshake("SCRAM-SHA-256"),
        rq.RequestType.SASL_AUTHENTICATE: sasl.encode_sasl_authenticate(b"n,,n=alice,r=abc"),
        rq.RequestType.CLIENT_HELLO: encode_client_hello("app-1"),
    }
    body = frames[kind][4:]
    cut = data.draw(st.integers(2, len(body) - 1))
    with pytest.raises(DecodeError):
        rq.decode_request(body[:cut])
    with pytest.raises(DecodeError):
        rq.decode_request(body + data.draw(st.binary(min_size=1, max_size=8)))


# ---------------------------------------------------------------- responses


@given(int16s, st.binary(max_size=200))
def test_fetch_response_round_trip(error: int, data: bytes) -> None:
    """A FETCH response (header + message bytes) decodes to the error and the bytes."""
    frame = rq.response_header(error, len(data)) + data
    assert INT32.unpack_from(frame)[0] == len(frame) - 4
    got_error, got = rq.decode_fetch_response(frame[4:])
    assert (got_error, bytes(got)) == (error, data)


@given(int16s, st.lists(st.tuples(int16s, st.binary(max_size=100)), max_size=6))
def test_multifetch_response_round_trip(error: int, blocks: list[tuple[int, bytes]]) -> None:
    """A MULTIFETCH response decodes to one (error, bytes) per block, in order."""
    body = b"".join(rq.response_header(e, len(d)) + d for e, d in blocks)
    frame = rq.response_header(error, len(body)) + body
    got_error, got = rq.decode_multifetch_response(frame[4:])
    assert got_error == error
    assert [(e, bytes(d)) for e, d in got] == blocks


def test_multifetch_block_shorter_than_its_error_code_raises() -> None:
    """A block whose size field is below 2 (no room for the error) raises DecodeError."""
    with pytest.raises(DecodeError):
        rq.decode_multifetch_response(struct.pack(">hih", 0, 1, 0))


@given(int16s, st.lists(int64s, max_size=20))
def test_offsets_response_round_trip(error: int, offsets: list[int]) -> None:
    """An OFFSETS response decodes to the same error and offsets."""
    assert rq.decode_offsets_response(rq.encode_offsets_response(error, offsets)[4:]) == (error, offsets)


def test_offsets_response_with_wrong_count_raises() -> None:
    """An offsets count that does not match the bytes raises DecodeError."""
    with pytest.raises(DecodeError):
        rq.decode_offsets_response(struct.pack(">hiq", 0, 2, 5))


@given(st.lists(st.builds(rq.PartitionAck, int16s, int32s, int64s, int64s), max_size=10))
def test_produce_ack_response_round_trip(acks: list[rq.PartitionAck]) -> None:
    """A PRODUCE_ACK response decodes to the same per-partition acknowledgements."""
    assert rq.decode_produce_ack_response(rq.encode_produce_ack_response(acks)[4:]) == (0, acks)


def _topic_metadata(topic: str, error: int, placed: list[tuple[int, int]]) -> rq.TopicMetadata:
    return rq.TopicMetadata(topic, error, tuple(b for b, _ in placed), tuple(n for _, n in placed))


@given(int16s,
       st.lists(st.builds(rq.BrokerInfo, int32s, topics, int32s, int32s), max_size=5),
       st.lists(st.builds(_topic_metadata, topics, int16s, st.lists(st.tuples(int32s, int32s), max_size=20)),
                max_size=10))
def test_metadata_response_round_trip(error: int, brokers: list[rq.BrokerInfo],
                                      rows: list[rq.TopicMetadata]) -> None:
    """A METADATA response decodes to the same brokers and per-topic partition leaders."""
    decoded = rq.decode_metadata_response(rq.encode_metadata_response(error, brokers, rows)[4:])
    assert decoded == (error, rq.Metadata(brokers, rows))


@given(int16s, int32s)
def test_create_topic_response_round_trip(error: int, partitions: int) -> None:
    """A CREATE_TOPIC response decodes to the same error and partition count."""
    assert rq.decode_create_topic_response(rq.encode_create_topic_response(error, partitions)[4:]) == \
        (error, partitions)


# ---------------------------------------------------------------- framing


@given(st.lists(st.binary(min_size=1, max_size=50), max_size=10), st.randoms(use_true_random=False))
def test_frame_decoder_with_random_chunking(bodies: list[bytes], rnd: random.Random) -> None:
    """Frames fed 1-3 bytes at a time come out whole, in order, and nothing is left over."""
    stream = b"".join(INT32.pack(len(b)) + b for b in bodies)
    decoder = FrameDecoder(max_frame_size=100)
    out: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rnd.randint(1, 3)
        decoder.feed(stream[pos:pos + step])
        pos += step
        while (frame := decoder.next_frame()) is not None:
            out.append(bytes(frame))
    assert out == bodies
    assert decoder.pending_bytes() == 0


@pytest.mark.parametrize("size", [0, -1, -(2 ** 31), 101, 2 ** 31 - 1])
def test_frame_decoder_refuses_bad_sizes_from_the_header_alone(size: int) -> None:
    """A size <= 0 or > max raises FrameTooLarge as soon as the 4-byte header is in, without its body."""
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(INT32.pack(size))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_frame_decoder_accepts_the_maximum_size() -> None:
    """A frame of exactly max_frame_size bytes is accepted."""
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(INT32.pack(100) + b"x" * 100)
    frame = decoder.next_frame()
    assert frame is not None and bytes(frame) == b"x" * 100


def test_reader_refuses_counts_that_do_not_fit() -> None:
    """An element count whose minimum size exceeds the bytes left raises DecodeError before any loop."""
    with pytest.raises(DecodeError):
        Reader(struct.pack(">h", 3) + b"\0" * 17).count(6)
    with pytest.raises(DecodeError):
        Reader(struct.pack(">h", -1)).count(1)
    assert Reader(struct.pack(">h", 3) + b"\0" * 18).count(6) == 3


def test_huge_counts_in_requests_raise_decode_error() -> None:
    """MULTIFETCH, MULTIPRODUCE and METADATA with a count of 32767 and no elements raise DecodeError."""
    for kind in (rq.RequestType.MULTIFETCH, rq.RequestType.MULTIPRODUCE, rq.RequestType.METADATA):
        with pytest.raises(DecodeError):
            rq.decode_request(struct.pack(">hh", kind, 32767))


def test_reader_refuses_strings_longer_than_the_body() -> None:
    """A string16 whose length runs past the end (or is negative) raises DecodeError."""
    with pytest.raises(DecodeError):
        Reader(struct.pack(">h", 10) + b"abc").string16()
    with pytest.raises(DecodeError):
        Reader(struct.pack(">h", -2) + b"abc").string16()


# ---------------------------------------------------------------- C accelerator vs pure Python

needs_speedups = pytest.mark.skipif(not m.ACCELERATED, reason="the C accelerator is not built")
C: Any = getattr(m, "_speedups")  # None when not built (the tests using it are skipped)

_HUGE_LENGTHS = [2 ** 31 - 1, 2 ** 30, m.DEFAULT_MAX_MESSAGE_SIZE + 1, 5, 4, 0, -1, -(2 ** 31)]


@st.composite
def valid_sets(draw: st.DrawFn) -> bytes:
    """Message sets mixing magic 0 and 1, plain and gzip wrappers."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        values = draw(st.lists(st.binary(max_size=60), max_size=4))
        kind = draw(st.sampled_from(["v0", "v1", "gzip"]))
        if kind == "gzip":
            parts.append(m.encode_message_set(values, m.CODEC_GZIP))
        else:
            parts.append(m.encode_message_set(values, m.CODEC_NONE, m.MAGIC_V0 if kind == "v0" else m.MAGIC_V1))
    return b"".join(parts)


@st.composite
def mutated_sets(draw: st.DrawFn) -> bytes:
    """Valid sets with byte flips, truncations, inserted bytes, odd codecs and huge length fields."""
    data = bytearray(draw(valid_sets()))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "length", "insert", "codec"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "truncate":
            del data[pos:]
        elif op == "length" and len(data) >= 4:
            pos = min(pos, len(data) - 4)
            length = draw(st.sampled_from(_HUGE_LENGTHS) | int32s)
            data[pos:pos + 4] = struct.pack(">i", length)
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "codec" and len(data) >= 6:
            data[5] = (data[5] & ~3) | draw(st.integers(0, 3))
    return bytes(data)


inputs = st.binary(max_size=400) | valid_sets() | mutated_sets()
max_sizes = st.sampled_from([m.DEFAULT_MAX_MESSAGE_SIZE, 2 ** 31 - 1, 5, 6, 20, 64, 200])


@needs_speedups
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(inputs, max_sizes, st.integers(0, 500), st.integers(-1, 300))
def test_scan_agrees_with_python(buf: bytes, max_size: int, interval: int, next_mark: int) -> None:
    """C scan and _py_scan give the same count, valid bytes, error and index marks."""
    expected = m._py_scan(buf, max_size, interval, next_mark)
    assert m.ScanResult(*C.scan(buf, max_size, interval, next_mark)) == expected
    assert m.ScanResult(*C.scan(bytearray(buf), max_size, interval, next_mark)) == expected


@needs_speedups
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(inputs, st.integers(0, 2 ** 40), st.integers(0, 1000))
def test_decode_agrees_with_python(buf: bytes, base: int, partition: int) -> None:
    """C decode and _py_decode return the same messages, consumed bytes and status."""
    expected = m._py_decode(buf, "topic", partition, base, m.Message)
    got = C.decode(buf, "topic", partition, base, m.Message)
    assert got == expected
    assert all(type(x) is m.Message for x in got[0])


@needs_speedups
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(inputs, st.integers(0, 50), max_sizes)
def test_find_valid_agrees_with_python(buf: bytes, start: int, max_size: int) -> None:
    """C find_valid and _py_find_valid find the same first valid message position."""
    assume(start <= len(buf))
    assert C.find_valid(buf, start, max_size) == m._py_find_valid(buf, start, max_size)


@needs_speedups
def test_decode_agrees_on_codec_3() -> None:
    """Both decoders report an undefined codec (3) as SCAN_BAD_CODEC, not as a compressed message."""
    data = m.encode_message(b"xyz", m.MAGIC_V1, 3)
    assert C.decode(data, "t", 0, 0, m.Message) == m._py_decode(data, "t", 0, 0, m.Message) == \
        ([], 0, m.SCAN_BAD_CODEC)


@given(st.binary(max_size=400) | valid_sets() | mutated_sets())
def test_decode_message_set_raises_only_corrupt_message(buf: bytes) -> None:
    """On any input, decode_message_set returns messages or raises CorruptMessageError, nothing else."""
    try:
        decoded, consumed = m.decode_message_set(buf)
    except CorruptMessageError:
        return
    assert 0 <= consumed <= len(buf)


# ---------------------------------------------------------------- CRC


@given(st.binary(max_size=5000))
def test_crc32_matches_crcmod(data: bytes) -> None:
    """zlib's crc32 and crcmod's crc-32 agree on random data."""
    assert crc32(data) == crcmod_crc32(data)
