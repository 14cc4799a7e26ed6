"""The broker's Kafka 0.7 requests and rill's extensions, over real TCP, byte by byte."""

from __future__ import annotations

import struct
import time

from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import decode_message_set, encode_message, encode_message_set
from rill.client.protocol.replica_fetch import (NO_EPOCH, ReplicaFetchPartition, ReplicaFetchRequest,
                                                decode_replica_fetch_response, encode_replica_fetch)

from tests.conftest import RawClient


def produce_ack(raw: RawClient, topic: str, partition: int, payloads: list[bytes], acks: int = 1) -> rq.PartitionAck:
    body = raw.request(rq.encode_produce_ack([rq.ProduceRequest(topic, partition, encode_message_set(payloads))], acks))
    error, parts = rq.decode_produce_ack_response(body)
    assert error == 0
    return parts[0]


def fetch(raw: RawClient, topic: str, partition: int, offset: int, max_size: int = 1 << 20) -> tuple[int, bytes]:
    error, data = rq.decode_fetch_response(raw.request(rq.encode_fetch(topic, partition, offset, max_size)))
    return error, bytes(data)


def test_produce_then_fetch_returns_the_exact_bytes(raw: RawClient) -> None:
    """A 0.7 PRODUCE (no response) is readable byte-for-byte with a 0.7 FETCH."""
    payload = encode_message_set([b"one", b"two", b"three"])
    raw.send(rq.encode_produce("t", 0, payload))
    deadline = time.time() + 5
    while True:
        error, data = fetch(raw, "t", 0, 0)
        if data or time.time() > deadline:
            break
    assert error == 0
    assert data == payload


def test_fetch_response_header_is_0_7_exact(raw: RawClient) -> None:
    """FETCH answers length int32, error int16 (0), then the stored message bytes."""
    produce_ack(raw, "t", 0, [b"x"])
    raw.send(rq.encode_fetch("t", 0, 0, 1000))
    header = raw.recv_exact(6)
    size, error = struct.unpack(">ih", header)
    body = raw.recv_exact(size - 2)
    assert error == 0
    assert body == encode_message(b"x")


def test_produce_ack_reports_byte_offsets(raw: RawClient) -> None:
    """Offsets are byte positions: the next offset is offset + 4 + message length."""
    first = produce_ack(raw, "t", 1, [b"aaaa", b"bb"])
    assert (first.error, first.partition, first.first_offset) == (0, 1, 0)
    assert first.next_offset == len(encode_message_set([b"aaaa", b"bb"]))
    second = produce_ack(raw, "t", 1, [b"c"])
    assert second.first_offset == first.next_offset
    messages, _ = decode_message_set(fetch(raw, "t", 1, second.first_offset)[1], "t", 1, second.first_offset)
    assert [m.value for m in messages] == [b"c"]


def test_any_partition_is_picked_by_the_broker(raw: RawClient) -> None:
    """Partition -1 on produce lets the broker choose among the topic's partitions."""
    partitions = {produce_ack(raw, "rr", -1, [b"m"]).partition for _ in range(6)}
    assert partitions == {0, 1}


def test_multifetch_answers_each_partition_in_order(raw: RawClient) -> None:
    """MULTIFETCH returns one (length, error, bytes) block per fetch, in request order."""
    produce_ack(raw, "a", 0, [b"a0"])
    produce_ack(raw, "b", 1, [b"b1"])
    fetches = [rq.FetchRequest("b", 1, 0, 1000), rq.FetchRequest("a", 0, 0, 1000), rq.FetchRequest("a", 0, 999, 1000)]
    error, blocks = rq.decode_multifetch_response(raw.request(rq.encode_multifetch(fetches)))
    assert error == 0
    assert [b[0] for b in blocks] == [0, 0, ErrorCode.OFFSET_OUT_OF_RANGE]
    assert bytes(blocks[0][1]) == encode_message_set([b"b1"])
    assert bytes(blocks[1][1]) == encode_message_set([b"a0"])


def test_multiproduce_appends_to_every_partition(raw: RawClient) -> None:
    """MULTIPRODUCE (no response) writes each partition's set."""
    raw.send(rq.encode_multiproduce([rq.ProduceRequest("m", 0, encode_message_set([b"p0"])),
                                     rq.ProduceRequest("m", 1, encode_message_set([b"p1"]))]))
    deadline = time.time() + 5
    while fetch(raw, "m", 1, 0)[1] == b"" and time.time() < deadline:
        time.sleep(0.01)
    assert fetch(raw, "m", 0, 0)[1] == encode_message_set([b"p0"])
    assert fetch(raw, "m", 1, 0)[1] == encode_message_set([b"p1"])


def test_offsets_latest_and_earliest(raw: RawClient) -> None:
    """OFFSETS with -1 gives the log end and with -2 the log start."""
    ack = produce_ack(raw, "o", 0, [b"x" * 10, b"y"])
    error, latest = rq.decode_offsets_response(raw.request(rq.encode_offsets("o", 0, rq.LATEST_TIME, 10)))
    assert (error, latest) == (0, [ack.next_offset])
    error, earliest = rq.decode_offsets_response(raw.request(rq.encode_offsets("o", 0, rq.EARLIEST_TIME, 10)))
    assert (error, earliest) == (0, [0])


def test_offsets_for_unknown_topic_follow_0_7(raw: RawClient) -> None:
    """An unknown topic answers [0] for latest, as Kafka 0.7 did, and nothing for a time."""
    assert rq.decode_offsets_response(raw.request(rq.encode_offsets("nope", 0, -1, 1))) == (0, [0])
    assert rq.decode_offsets_response(raw.request(rq.encode_offsets("nope", 0, 12345, 1))) == (0, [])


def test_fetch_errors_use_0_7_codes(raw: RawClient) -> None:
    """Beyond the end is OffsetOutOfRange, a bad partition WrongPartition, a negative size InvalidFetchSize."""
    ack = produce_ack(raw, "e", 0, [b"hello"])
    assert fetch(raw, "e", 0, ack.next_offset + 100)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(raw, "e", 0, ack.next_offset) == (0, b"")
    assert fetch(raw, "e", 7, 0)[0] == ErrorCode.WRONG_PARTITION
    assert fetch(raw, "e", 0, 0, -1)[0] == ErrorCode.INVALID_FETCH_SIZE


def test_a_misaligned_offset_is_out_of_range_on_0_7_fetches_and_invalid_on_rills_own(raw: RawClient) -> None:
    """A 0.7 client knows no error 7: FETCH and MULTIFETCH answer OffsetOutOfRange, which makes it reset
    per its own policy; rill's FETCH_WAIT keeps the precise InvalidOffset."""
    produce_ack(raw, "m", 0, [b"hello", b"world"])
    assert fetch(raw, "m", 0, 3)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
    fetches = [rq.FetchRequest("m", 0, 3, 1000), rq.FetchRequest("m", 0, 0, 1000)]
    error, blocks = rq.decode_multifetch_response(raw.request(rq.encode_multifetch(fetches)))
    assert (error, [code for code, _ in blocks]) == (0, [ErrorCode.OFFSET_OUT_OF_RANGE, 0])
    error, blocks = rq.decode_multifetch_response(raw.request(rq.encode_fetch_wait(fetches, max_wait_ms=0)))
    assert (error, [code for code, _ in blocks]) == (0, [ErrorCode.INVALID_OFFSET, 0])


def test_unknown_topic_fetch_is_empty_like_0_7(raw: RawClient) -> None:
    """A fetch of a topic that does not exist returns an empty set and no error."""
    assert fetch(raw, "ghost", 0, 0) == (0, b"")


def test_invalid_topic_names_are_refused_without_touching_disk(raw: RawClient, broker, tmp_path) -> None:
    """Topic names with path separators, dots only, or over 249 chars get InvalidTopic."""
    for name in ["../x", "..", ".", "a/b", "x" * 250, "", "sp ace", "nul\x00"]:
        body = raw.request(rq.encode_produce_ack([rq.ProduceRequest(name, 0, encode_message_set([b"m"]))]))
        assert rq.decode_produce_ack_response(body)[1][0].error == ErrorCode.INVALID_TOPIC, name
        assert fetch(raw, name, 0, 0)[0] == ErrorCode.INVALID_TOPIC
    assert sorted(p.name for p in (tmp_path / "data").iterdir() if not p.name.startswith(".")) == []
    assert not (tmp_path / "x").exists()


def test_corrupt_message_set_is_refused_whole(raw: RawClient) -> None:
    """A set with one bad CRC is refused with InvalidMessage and nothing is appended."""
    good = encode_message_set([b"good"])
    bad = bytearray(encode_message_set([b"evil"]))
    bad[-1] ^= 0xFF
    body = raw.request(rq.encode_produce_ack([rq.ProduceRequest("c", 0, good + bytes(bad))]))
    assert rq.decode_produce_ack_response(body)[1][0].error == ErrorCode.INVALID_MESSAGE
    assert fetch(raw, "c", 0, 0)[0] in (0, ErrorCode.OFFSET_OUT_OF_RANGE)
    assert fetch(raw, "c", 0, 0)[1] == b""


def test_message_over_max_bytes_is_refused(tmp_path) -> None:
    """A message larger than message.max.bytes gets MessageTooLarge."""
    from rill.broker.testing import running_broker

    with running_broker(tmp_path, message_max_bytes=1000) as b:
        client = RawClient(b.host, b.port)
        body = client.request(rq.encode_produce_ack([rq.ProduceRequest("big", 0, encode_message_set([b"z" * 2000]))]))
        assert rq.decode_produce_ack_response(body)[1][0].error == ErrorCode.MESSAGE_TOO_LARGE
        assert produce_ack(client, "big", 0, [b"z" * 900]).error == 0
        client.close()


def test_fetch_ends_on_a_message_boundary(raw: RawClient) -> None:
    """A fetch whose max size falls inside a message returns only whole messages."""
    payloads = [bytes([65 + i]) * 100 for i in range(5)]
    produce_ack(raw, "b", 0, payloads)
    error, data = fetch(raw, "b", 0, 0, 250)
    messages, consumed = decode_message_set(data, "b", 0, 0)
    assert error == 0
    assert consumed == len(data)
    assert [m.value for m in messages] == payloads[:2]


def test_fetch_smaller_than_first_message_returns_a_partial_message(raw: RawClient) -> None:
    """As in 0.7, a max size below the first message gives that many bytes of it."""
    produce_ack(raw, "p", 0, [b"q" * 500])
    error, data = fetch(raw, "p", 0, 0, 100)
    assert error == 0 and len(data) == 100
    assert decode_message_set(data, "p", 0, 0) == ([], 0)


def test_long_poll_wakes_on_append(broker) -> None:
    """FETCH_WAIT parks until data arrives, then answers at once (well before max wait)."""
    consumer = RawClient(broker.host, broker.port)
    producer = RawClient(broker.host, broker.port)
    produce_ack(producer, "lp", 0, [b"first"])
    end = produce_ack(producer, "lp", 0, [b"second"]).next_offset
    consumer.send(rq.encode_fetch_wait([rq.FetchRequest("lp", 0, end, 1 << 20)], max_wait_ms=10_000))
    time.sleep(0.2)
    started = time.monotonic()
    produce_ack(producer, "lp", 0, [b"third"])
    error, blocks = rq.decode_multifetch_response(consumer.response())
    assert time.monotonic() - started < 5
    assert error == 0 and blocks[0][0] == 0
    assert [m.value for m in decode_message_set(blocks[0][1], "lp", 0, end)[0]] == [b"third"]
    consumer.close()
    producer.close()


def test_long_poll_times_out_empty(raw: RawClient) -> None:
    """FETCH_WAIT with no new data answers with an empty block after max_wait_ms."""
    ack = produce_ack(raw, "lt", 0, [b"x"])
    started = time.monotonic()
    body = raw.request(rq.encode_fetch_wait([rq.FetchRequest("lt", 0, ack.next_offset, 1000)], max_wait_ms=300))
    elapsed = time.monotonic() - started
    error, blocks = rq.decode_multifetch_response(body)
    assert 0.25 <= elapsed < 5
    assert blocks == [(0, b"")] or (blocks[0][0], bytes(blocks[0][1])) == (0, b"")


def test_responses_keep_request_order_behind_a_long_poll(raw: RawClient) -> None:
    """A request pipelined after a parked long poll is answered after it, in order."""
    ack = produce_ack(raw, "ord", 0, [b"x"])
    raw.send(rq.encode_fetch_wait([rq.FetchRequest("ord", 0, ack.next_offset, 1000)], max_wait_ms=300)
             + rq.encode_offsets("ord", 0, -1, 1))
    first = rq.decode_multifetch_response(raw.response())
    second = rq.decode_offsets_response(raw.response())
    assert first[1][0][0] == 0
    assert second == (0, [ack.next_offset])


def test_fsync_ack_answers_after_sync(raw: RawClient, broker) -> None:
    """acks=fsync answers with offsets once the partition's data is synced."""
    ack = produce_ack(raw, "fs", 0, [b"durable"], acks=rq.Acks.FSYNC)
    assert ack.error == 0
    plog = broker.broker.logs.get("fs", 0)
    assert plog.flushed_offset >= ack.next_offset


def test_metadata_and_create_topic(raw: RawClient) -> None:
    """CREATE_TOPIC makes a topic with the given partitions; METADATA lists it."""
    assert rq.decode_create_topic_response(raw.request(rq.encode_create_topic("made", 5))) == (0, 5)
    assert rq.decode_create_topic_response(raw.request(rq.encode_create_topic("bad/name", 5)))[0] == ErrorCode.INVALID_TOPIC
    assert rq.decode_create_topic_response(raw.request(rq.encode_create_topic("zero", 0)))[0] == ErrorCode.INVALID_PARTITIONS
    error, meta = rq.decode_metadata_response(raw.request(rq.encode_metadata()))
    assert rq.TopicMetadata("made", 0, (0,) * 5, (0, 1, 2, 3, 4)) in meta.topics
    error, meta = rq.decode_metadata_response(raw.request(rq.encode_metadata(["made", "missing"])))
    assert meta.topics == [rq.TopicMetadata("made", 0, (0,) * 5, (0, 1, 2, 3, 4)), rq.TopicMetadata("missing", ErrorCode.UNKNOWN_TOPIC, ())]


def test_metadata_names_the_brokers_and_their_grpc_port(raw: RawClient, broker) -> None:
    """METADATA lists this broker with its data-plane and gRPC ports."""
    error, meta = rq.decode_metadata_response(raw.request(rq.encode_metadata()))
    assert error == 0
    assert [(b.port, b.grpc_port) for b in meta.brokers] == [(broker.port, broker.grpc_port)]


def test_pipelined_produces_are_answered_in_order(raw: RawClient) -> None:
    """Many PRODUCE_ACKs sent before reading any response come back in order with rising offsets."""
    frames = [rq.encode_produce_ack([rq.ProduceRequest("pipe", 0, encode_message_set([b"%d" % i]))])
              for i in range(200)]
    raw.send(b"".join(frames))
    offsets = [rq.decode_produce_ack_response(raw.response())[1][0].first_offset for _ in frames]
    assert offsets == sorted(offsets) and len(set(offsets)) == 200


def test_replica_fetch_to_a_broker_leading_no_replica_is_refused_per_partition(raw: RawClient) -> None:
    """REPLICA_FETCH for a partition the broker does not lead gets NotLeaderForPartition and no bytes, and
    the connection goes on serving (a 0.7 topic's partition is never a replica)."""
    produce_ack(raw, "plain", 0, [b"x"])
    wanted = [ReplicaFetchPartition("plain", 0, 0, 0, NO_EPOCH, 1 << 20), ReplicaFetchPartition("other", 3, 1, 0, 0, 10)]
    error, blocks = decode_replica_fetch_response(raw.request(encode_replica_fetch(ReplicaFetchRequest(7, 0, 1, wanted))))
    assert error == 0
    assert [b.error for b in blocks] == [int(ErrorCode.NOT_LEADER_FOR_PARTITION)] * 2
    assert all(len(b.messages) == 0 for b in blocks)
    assert fetch(raw, "plain", 0, 0)[0] == 0
