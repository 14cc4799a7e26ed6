"""REPLICA_FETCH (10): the follower's request and the leader's response, both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.client.errors import ErrorCode, NotLeaderForPartition, error_for_code
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import INT32, DecodeError
from rill.client.protocol.replica_fetch import (NO_EPOCH, ReplicaFetchBlock, ReplicaFetchPartition, ReplicaFetchRequest,
                                                decode_replica_fetch_response, encode_replica_fetch,
                                                replica_fetch_response_parts)

topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=40)
int32s = st.integers(-(2 ** 31), 2 ** 31 - 1)
int64s = st.integers(-(2 ** 63), 2 ** 63 - 1)
partitions = st.lists(st.builds(ReplicaFetchPartition, topics, int32s, int32s, int64s, int32s, int32s), max_size=6)


class Slice:
    """A stand-in for the broker's file slice: the bytes a sendfile placeholder stands for."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def length(self) -> int:
        return len(self.data)


def _wire(parts: list[bytes | Slice]) -> bytes:
    return b"".join(p.data if isinstance(p, Slice) else p for p in parts)


@given(int32s, int32s, int32s, partitions)
def test_request_round_trip(replica: int, wait: int, min_bytes: int, parts: list[ReplicaFetchPartition]) -> None:
    """A REPLICA_FETCH frame decodes through the broker's request table to the same request."""
    request = ReplicaFetchRequest(replica, wait, min_bytes, parts)
    frame = encode_replica_fetch(request)
    assert INT32.unpack_from(frame)[0] == len(frame) - 4
    kind, decoded = rq.decode_request(memoryview(frame)[4:])
    assert kind == rq.RequestType.REPLICA_FETCH
    assert decoded == request


def test_request_with_a_hostile_count_is_refused_before_allocating() -> None:
    """A partition count larger than the bytes left is a DecodeError, not a huge allocation."""
    frame = bytearray(encode_replica_fetch(ReplicaFetchRequest(1, 500, 1, [])))
    frame[-2:] = (32_000).to_bytes(2, "big")
    with pytest.raises(DecodeError, match="does not fit"):
        rq.decode_request(memoryview(frame)[4:])


def test_request_with_trailing_bytes_is_refused() -> None:
    """Bytes after the last partition close the connection like any malformed request."""
    frame = encode_replica_fetch(ReplicaFetchRequest(1, 500, 1, [ReplicaFetchPartition("t", 0, 3, 100, 2, 1024)]))
    with pytest.raises(DecodeError, match="unexpected bytes"):
        rq.decode_request(memoryview(frame + b"\0")[4:])


def test_response_carries_data_placeholders_and_decodes_in_order() -> None:
    """Blocks come back in request order; data travels as placeholders and decodes to the same bytes."""
    first = ReplicaFetchBlock(0, 700, 0, 3, NO_EPOCH, NO_EPOCH, memoryview(b""))
    diverging = ReplicaFetchBlock(0, 90, 0, NO_EPOCH, 2, 4200, memoryview(b""))
    refused = ReplicaFetchBlock(int(ErrorCode.NOT_LEADER_FOR_PARTITION), -1, -1, NO_EPOCH, NO_EPOCH, NO_EPOCH,
                                memoryview(b""))
    parts = replica_fetch_response_parts([(first, Slice(b"abcdef")), (diverging, None), (refused, None)])
    assert any(isinstance(p, Slice) for p in parts)
    wire = _wire(parts)
    assert INT32.unpack_from(wire)[0] == len(wire) - 4
    error, blocks = decode_replica_fetch_response(memoryview(wire)[4:])
    assert error == 0
    assert [bytes(b.messages) for b in blocks] == [b"abcdef", b"", b""]
    assert blocks[0]._replace(messages=b"") == first._replace(messages=b"")
    assert (blocks[1].diverging_epoch, blocks[1].diverging_end_offset) == (2, 4200)
    assert isinstance(error_for_code(blocks[2].error), NotLeaderForPartition)


def test_response_whose_data_runs_past_the_body_is_a_decode_error() -> None:
    """A MESSAGES_LENGTH beyond the bytes received is refused, never read past the buffer."""
    block = ReplicaFetchBlock(0, 10, 0, 1, NO_EPOCH, NO_EPOCH, memoryview(b""))
    wire = bytearray(_wire(replica_fetch_response_parts([(block, Slice(b"xyz"))])))
    wire[-7:-3] = (1000).to_bytes(4, "big")  # MESSAGES_LENGTH of the only block
    with pytest.raises(DecodeError):
        decode_replica_fetch_response(memoryview(bytes(wire))[4:])


def test_response_level_error_has_no_blocks() -> None:
    """A whole-response error code decodes with no blocks."""
    wire = rq.response_header(int(ErrorCode.INVALID_REQUEST), 0)
    assert decode_replica_fetch_response(memoryview(wire)[4:]) == (int(ErrorCode.INVALID_REQUEST), [])


def test_new_error_codes_map_to_retriable_exceptions() -> None:
    """The replication codes decode to their own classes; those a client retries say so."""
    retriable = {ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.FENCED_LEADER_EPOCH,
                 ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE}
    for code in list(retriable) + [ErrorCode.INVALID_REPLICATION_FACTOR]:
        exc = error_for_code(int(code))
        assert exc.code == code
        assert exc.retriable == (code in retriable)
