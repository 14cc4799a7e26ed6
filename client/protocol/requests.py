"""Requests and responses of the Kafka 0.7 protocol and rill's extensions.

Types 0-4 are byte-exact with Kafka 0.7; 5-13 are rill's (docs/protocol.md gives
every layout). A request frame is ``size int32, type int16, body``; single-partition
requests (0, 1, 4) start their body with ``topic string16, partition int32``.
A response frame is ``size int32, error int16, body``. Responses come back in the
order the requests were sent; PRODUCE and MULTIPRODUCE have none.

Server side: :func:`decode_request` turns a frame body into one of the request
tuples below (raising DecodeError for anything malformed). Client side: the
``encode_*`` functions build whole frames and the ``decode_*_response`` functions
parse response bodies (the bytes after the size field). Fetch responses, which the
broker sends partly with sendfile, are encoded and decoded in fetch_response.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import NamedTuple, Union

# the fetch responses live in fetch_response.py; re-exported here, the codec's one front door
from rill.client.protocol.fetch_response import decode_fetch_response as decode_fetch_response
from rill.client.protocol.fetch_response import decode_multifetch_response as decode_multifetch_response
from rill.client.protocol.fetch_response import response_header as response_header
from rill.client.protocol.framing import INT16, INT32, INT64, DecodeError, Reader, string16
from rill.client.protocol.client_hello import ClientHelloRequest, decode_client_hello
from rill.client.protocol.replica_fetch import ReplicaFetchRequest, decode_replica_fetch
from rill.client.protocol.sasl_requests import (SaslAuthenticateRequest, SaslHandshakeRequest, decode_sasl_authenticate,
                                                decode_sasl_handshake)


class RequestType(IntEnum):
    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4
    PRODUCE_ACK = 5  # rill: acknowledged multi-produce
    FETCH_WAIT = 6  # rill: long-poll multi-fetch
    METADATA = 7  # rill: topics and partition counts
    CREATE_TOPIC = 8  # rill: explicit topic creation
    TIME_INDEX = 9  # rill: append times of a partition's index entries
    REPLICA_FETCH = 10  # rill: a follower's fetch from its leader (replica_fetch.py)
    SASL_HANDSHAKE = 11  # rill (Kafka's SaslHandshake): the SASL mechanism (sasl_requests.py)
    SASL_AUTHENTICATE = 12  # rill (Kafka's SaslAuthenticate): one token of the SASL exchange
    CLIENT_HELLO = 13  # rill: the client's client.id, once per connection (client_hello.py)


class Acks(IntEnum):
    """When a PRODUCE_ACK is answered."""

    ALL = -1  # once every in-sync replica has the messages (committed: below the high watermark)
    APPEND = 1  # once the messages are in the leader's log (page cache)
    FSYNC = 2  # once the messages are on the leader's disk


LATEST_TIME = -1
EARLIEST_TIME = -2
TIME_INDEX_MAX_ENTRIES = 65_536  # TIME_INDEX: the most entries a broker puts in one answer (1 MiB)
ANY_PARTITION = -1  # on produce: the broker picks the partition

_FETCH_MIN = 2 + 4 + 8 + 4  # an empty topic, partition, offset, max size
_PRODUCE_MIN = 2 + 4 + 4


class ProduceRequest(NamedTuple):
    topic: str
    partition: int
    messages: memoryview | bytes


class FetchRequest(NamedTuple):
    topic: str
    partition: int
    offset: int
    max_size: int


class OffsetsRequest(NamedTuple):
    topic: str
    partition: int
    time: int
    max_number: int


class TimeIndexRequest(NamedTuple):
    topic: str
    partition: int
    offset: int
    max_entries: int


class MultiFetchRequest(NamedTuple):
    fetches: list[FetchRequest]


class MultiProduceRequest(NamedTuple):
    produces: list[ProduceRequest]


class ProduceAckRequest(NamedTuple):
    acks: int
    timeout_ms: int
    produces: list[ProduceRequest]


class FetchWaitRequest(NamedTuple):
    max_wait_ms: int
    min_bytes: int
    fetches: list[FetchRequest]


class MetadataRequest(NamedTuple):
    topics: list[str]  # empty: every topic


class CreateTopicRequest(NamedTuple):
    topic: str
    partitions: int


Request = Union[ProduceRequest, FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetsRequest,
                ProduceAckRequest, FetchWaitRequest, MetadataRequest, CreateTopicRequest, TimeIndexRequest,
                ReplicaFetchRequest, SaslHandshakeRequest, SaslAuthenticateRequest, ClientHelloRequest]


# ---------------------------------------------------------------- server side


def _produce(r: Reader) -> ProduceRequest:
    topic = r.string16()
    partition = r.int32()
    size = r.int32()
    return ProduceRequest(topic, partition, r.raw(size))


def _fetch(r: Reader) -> FetchRequest:
    return FetchRequest(r.string16(), r.int32(), r.int64(), r.int32())


def _produces(r: Reader) -> list[ProduceRequest]:
    return [_produce(r) for _ in range(r.count(_PRODUCE_MIN))]


def _fetches(r: Reader) -> list[FetchRequest]:
    return [_fetch(r) for _ in range(r.count(_FETCH_MIN))]


_DECODERS: dict[int, Callable[[Reader], Request]] = {
    RequestType.PRODUCE: _produce,
    RequestType.FETCH: _fetch,
    RequestType.MULTIFETCH: lambda r: MultiFetchRequest(_fetches(r)),
    RequestType.MULTIPRODUCE: lambda r: MultiProduceRequest(_produces(r)),
    RequestType.OFFSETS: lambda r: OffsetsRequest(r.string16(), r.int32(), r.int64(), r.int32()),
    RequestType.PRODUCE_ACK: lambda r: ProduceAckRequest(r.int16(), r.int32(), _produces(r)),
    RequestType.FETCH_WAIT: lambda r: FetchWaitRequest(r.int32(), r.int32(), _fetches(r)),
    RequestType.METADATA: lambda r: MetadataRequest([r.string16() for _ in range(r.count(2))]),
    RequestType.CREATE_TOPIC: lambda r: CreateTopicRequest(r.string16(), r.int32()),
    RequestType.TIME_INDEX: lambda r: TimeIndexRequest(r.string16(), r.int32(), r.int64(), r.int32()),
    RequestType.REPLICA_FETCH: decode_replica_fetch,
    RequestType.SASL_HANDSHAKE: decode_sasl_handshake,
    RequestType.SASL_AUTHENTICATE: decode_sasl_authenticate,
    RequestType.CLIENT_HELLO: decode_client_hello,
}


def decode_request(body: memoryview | bytes) -> tuple[int, Request]:
    """Decode a request frame body (after the size field): ``(type, request)``.

    Raises DecodeError for an unknown type, a field that runs past the end, a count
    that cannot fit in the bytes left, or trailing bytes.
    """
    r = Reader(body)
    kind = r.int16()
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise DecodeError(f"unknown request type {kind}")
    request = decoder(r)
    r.expect_end()
    return kind, request


def encode_offsets_response(error: int, offsets: Sequence[int]) -> bytes:
    body = INT32.pack(len(offsets)) + b"".join(INT64.pack(o) for o in offsets)
    return response_header(error, len(body)) + body


class PartitionAck(NamedTuple):
    """Per-partition outcome of a PRODUCE_ACK: -1 offsets when error != 0."""

    error: int
    partition: int
    first_offset: int
    next_offset: int


_ACK_STRUCT = struct.Struct(">hiqq")  # error, partition, first offset, next offset


def encode_produce_ack_response(acks: Sequence[PartitionAck]) -> bytes:
    body = INT16.pack(len(acks)) + b"".join(_ACK_STRUCT.pack(*a) for a in acks)
    return response_header(0, len(body)) + body


class BrokerInfo(NamedTuple):
    """A broker as METADATA describes it: its id and where its two ports are."""

    broker_id: int
    host: str
    port: int  # the Kafka 0.7 data plane
    grpc_port: int  # group coordinator and admin services


NO_LEADER = -1  # METADATA's leader of a partition whose broker is not alive


class TopicMetadata(NamedTuple):
    """A topic as METADATA describes it: error, and where each partition lives.

    Partition ``p`` is partition ``broker_partitions[p]`` of broker ``leaders[p]``: in a
    cluster each broker numbers its own partitions of a topic from 0 (Kafka 0.7), and
    the cluster-wide number ``p`` comes from the topic's partition map in ZooKeeper.
    On a single broker the two numbers are equal. Requests to a broker carry the
    broker's own number.
    """

    topic: str
    error: int
    leaders: tuple[int, ...]  # leaders[p] is the broker id holding partition p (NO_LEADER: not alive)
    broker_partitions: tuple[int, ...] = ()  # the partition's number on its broker; () means the same as p

    @property
    def partitions(self) -> int:
        return len(self.leaders)

    def broker_partition(self, partition: int) -> int:
        return self.broker_partitions[partition] if self.broker_partitions else partition


class Metadata(NamedTuple):
    brokers: list[BrokerInfo]
    topics: list[TopicMetadata]



_LEADER_STRUCT = struct.Struct(">ii")  # LEADER, BROKER_PARTITION


def encode_metadata_response(error: int, brokers: Sequence[BrokerInfo], topics: Sequence[TopicMetadata]) -> bytes:
    body = [INT16.pack(len(brokers))]
    for b in brokers:
        body.append(INT32.pack(b.broker_id) + string16(b.host) + INT32.pack(b.port) + INT32.pack(b.grpc_port))
    body.append(INT16.pack(len(topics)))
    for t in topics:
        body.append(string16(t.topic) + INT16.pack(t.error) + INT32.pack(len(t.leaders))
                    + b"".join(_LEADER_STRUCT.pack(leader, t.broker_partition(p)) for p, leader in enumerate(t.leaders)))
    data = b"".join(body)
    return response_header(error, len(data)) + data


def encode_create_topic_response(error: int, partitions: int) -> bytes:
    return response_header(error, 4) + INT32.pack(partitions)


def encode_time_index_response(error: int, entries: Sequence[tuple[int, int]]) -> bytes:
    """``COUNT int32`` then ``(OFFSET int64, TIME_MS int64)`` per entry (none after an error)."""
    flat = [v for entry in entries for v in entry]
    body = struct.pack(f">i{len(flat)}q", len(entries), *flat)
    return response_header(error, len(body)) + body


# ---------------------------------------------------------------- client side


def _frame(kind: int, body: bytes) -> bytes:
    return INT32.pack(2 + len(body)) + INT16.pack(kind) + body


def _produce_body(topic: str, partition: int, messages: bytes | memoryview) -> bytes:
    return string16(topic) + INT32.pack(partition) + INT32.pack(len(messages)) + bytes(messages)


def _fetch_body(f: FetchRequest) -> bytes:
    return string16(f.topic) + INT32.pack(f.partition) + INT64.pack(f.offset) + INT32.pack(f.max_size)


def encode_produce(topic: str, partition: int, messages: bytes) -> bytes:
    return _frame(RequestType.PRODUCE, _produce_body(topic, partition, messages))


def _produce_parts(kind: int, head: bytes, produces: Sequence[ProduceRequest]) -> list[bytes | memoryview]:
    """A (multi-)produce frame as buffers to write in order; the message sets are not copied."""
    parts: list[bytes | memoryview] = [b""]
    size = 2 + len(head)
    for topic, partition, messages in produces:
        entry = string16(topic) + INT32.pack(partition) + INT32.pack(len(messages))
        parts += (entry, messages)
        size += len(entry) + len(messages)
    parts[0] = INT32.pack(size) + INT16.pack(kind) + head
    return parts


def encode_multiproduce_parts(produces: Sequence[ProduceRequest]) -> list[bytes | memoryview]:
    """:func:`encode_multiproduce` as a list of buffers (for ``sendmsg``, without copying the sets)."""
    return _produce_parts(RequestType.MULTIPRODUCE, INT16.pack(len(produces)), produces)


def encode_produce_ack_parts(produces: Sequence[ProduceRequest], acks: int = Acks.APPEND,
                             timeout_ms: int = 30_000) -> list[bytes | memoryview]:
    """:func:`encode_produce_ack` as a list of buffers (for ``sendmsg``, without copying the sets)."""
    head = INT16.pack(acks) + INT32.pack(timeout_ms) + INT16.pack(len(produces))
    return _produce_parts(RequestType.PRODUCE_ACK, head, produces)


def encode_multiproduce(produces: Sequence[ProduceRequest]) -> bytes:
    return b"".join(encode_multiproduce_parts(produces))


def encode_produce_ack(produces: Sequence[ProduceRequest], acks: int = Acks.APPEND,
                       timeout_ms: int = 30_000) -> bytes:
    return b"".join(encode_produce_ack_parts(produces, acks, timeout_ms))


def encode_fetch(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    return _frame(RequestType.FETCH, _fetch_body(FetchRequest(topic, partition, offset, max_size)))


def encode_multifetch(fetches: Sequence[FetchRequest]) -> bytes:
    return _frame(RequestType.MULTIFETCH, INT16.pack(len(fetches)) + b"".join(_fetch_body(f) for f in fetches))


def encode_fetch_wait(fetches: Sequence[FetchRequest], max_wait_ms: int, min_bytes: int = 1) -> bytes:
    body = INT32.pack(max_wait_ms) + INT32.pack(min_bytes) + INT16.pack(len(fetches))
    return _frame(RequestType.FETCH_WAIT, body + b"".join(_fetch_body(f) for f in fetches))


def encode_offsets(topic: str, partition: int, time: int, max_number: int) -> bytes:
    body = string16(topic) + INT32.pack(partition) + INT64.pack(time) + INT32.pack(max_number)
    return _frame(RequestType.OFFSETS, body)


def encode_metadata(topics: Sequence[str] = ()) -> bytes:
    return _frame(RequestType.METADATA, INT16.pack(len(topics)) + b"".join(string16(t) for t in topics))


def encode_create_topic(topic: str, partitions: int) -> bytes:
    return _frame(RequestType.CREATE_TOPIC, string16(topic) + INT32.pack(partitions))


def encode_time_index(topic: str, partition: int, offset: int, max_entries: int) -> bytes:
    body = string16(topic) + INT32.pack(partition) + INT64.pack(offset) + INT32.pack(max_entries)
    return _frame(RequestType.TIME_INDEX, body)


def decode_offsets_response(body: memoryview | bytes) -> tuple[int, list[int]]:
    r = Reader(body)
    error = r.int16()
    if not r.remaining():
        return error, []
    n = r.int32()
    if n < 0 or n * 8 != r.remaining():
        raise DecodeError(f"offsets count {n} does not match {r.remaining()} bytes")
    return error, [r.int64() for _ in range(n)]


def decode_produce_ack_response(body: memoryview | bytes) -> tuple[int, list[PartitionAck]]:
    r = Reader(body)
    error = r.int16()
    if not r.remaining():
        return error, []
    n = r.count(_ACK_STRUCT.size)
    acks = [PartitionAck(*_ACK_STRUCT.unpack(r.raw(_ACK_STRUCT.size))) for _ in range(n)]
    r.expect_end()
    return error, acks


def decode_metadata_response(body: memoryview | bytes) -> tuple[int, Metadata]:
    r = Reader(body)
    error = r.int16()
    if not r.remaining():
        return error, Metadata([], [])
    brokers = [BrokerInfo(r.int32(), r.string16(), r.int32(), r.int32()) for _ in range(r.count(14))]
    topics = []
    for _ in range(r.count(8)):
        name, topic_error, count = r.string16(), r.int16(), r.int32()
        if count < 0 or count * _LEADER_STRUCT.size > r.remaining():
            raise DecodeError(f"partition count {count} does not fit in the {r.remaining()} bytes left")
        pairs = [_LEADER_STRUCT.unpack(r.raw(_LEADER_STRUCT.size)) for _ in range(count)]
        topics.append(TopicMetadata(name, topic_error, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)))
    r.expect_end()
    return error, Metadata(brokers, topics)


def decode_create_topic_response(body: memoryview | bytes) -> tuple[int, int]:
    r = Reader(body)
    error = r.int16()
    partitions = r.int32() if r.remaining() else 0
    return error, partitions


def decode_time_index_response(body: memoryview | bytes) -> tuple[int, list[tuple[int, int]]]:
    """A TIME_INDEX response body: (error, [(offset, append time ms), ...] ascending)."""
    r = Reader(body)
    error = r.int16()
    if not r.remaining():
        return error, []
    n = r.int32()
    if n < 0 or n * 16 != r.remaining():
        raise DecodeError(f"time index count {n} does not match {r.remaining()} bytes")
    flat = struct.unpack(f">{2 * n}q", r.raw(16 * n))
    return error, list(zip(flat[0::2], flat[1::2]))
