"""REPLICA_FETCH (10): a follower's fetch from its leader, both ways (sans-IO).

A follower copies its leader's bytes: rill's offsets are byte positions, so the
follower's log is a byte prefix of the leader's and the fetch offset *is* the
follower's log end (its LEO), which is how the leader learns its progress. Wire
format (docs/protocol.md, "Replication")::

    request  = REPLICA_ID int32, MAX_WAIT_MS int32, MIN_BYTES int32, COUNT int16, partition*
    partition = TOPIC string16, PARTITION int32, CURRENT_LEADER_EPOCH int32,
                FETCH_OFFSET int64, LAST_FETCHED_EPOCH int32, MAX_BYTES int32
    response = SIZE int32, ERROR int16, COUNT int16, block*      (blocks in request order)
    block    = ERROR int16, HIGH_WATERMARK int64, LOG_START_OFFSET int64, EPOCH int32,
               DIVERGING_EPOCH int32, DIVERGING_END_OFFSET int64, MESSAGES_LENGTH int32, messages

- ``CURRENT_LEADER_EPOCH`` fences (Kafka's KIP-320): a leader whose epoch is newer
  answers FencedLeaderEpoch, an older one UnknownLeaderEpoch, a broker that does not
  lead the partition NotLeaderForPartition.
- ``LAST_FETCHED_EPOCH`` is the follower's latest leader epoch (-1 when it has none).
  When ``(LAST_FETCHED_EPOCH, FETCH_OFFSET)`` is not on the leader's log, the leader
  sends no data and names where they diverge: ``DIVERGING_EPOCH`` and
  ``DIVERGING_END_OFFSET`` (the leader's answer to "where did that epoch end", as
  OffsetsForLeaderEpoch gives it, KIP-279); the follower truncates and fetches again.
  Both are -1 otherwise.
- ``EPOCH`` is the leader epoch in which every returned message was written: a block
  never spans an epoch boundary, so the follower records ``(EPOCH, FETCH_OFFSET)`` in
  its leader-epoch cache when it appends bytes of a newer epoch.
- ``HIGH_WATERMARK`` is the leader's; the follower's is ``min(HIGH_WATERMARK, its LEO)``.

The broker sends the message bytes with sendfile: :func:`replica_fetch_response_parts`
returns header bytes and the storage's file slices as placeholders, as
fetch_response.py does for the consumers' fetches.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from rill.client.protocol.fetch_response import SendfilePart, response_header
from rill.client.protocol.framing import INT16, INT32, DecodeError, Reader, string16

__all__ = ["REPLICA_FETCH", "NO_EPOCH", "ReplicaFetchPartition", "ReplicaFetchRequest", "ReplicaFetchBlock",
           "decode_replica_fetch", "encode_replica_fetch", "replica_fetch_response_parts",
           "decode_replica_fetch_response"]

REPLICA_FETCH = 10  # the request type id (requests.RequestType.REPLICA_FETCH)
NO_EPOCH = -1  # no epoch known (an empty follower), or no divergence
_HEAD = struct.Struct(">iii")  # REPLICA_ID, MAX_WAIT_MS, MIN_BYTES
_PARTITION = struct.Struct(">iiqii")  # PARTITION, CURRENT_LEADER_EPOCH, FETCH_OFFSET, LAST_FETCHED_EPOCH, MAX_BYTES
_PARTITION_MIN = 2 + _PARTITION.size  # an empty topic name
_BLOCK = struct.Struct(">hqqiiqi")  # ERROR .. MESSAGES_LENGTH

S = TypeVar("S", bound=SendfilePart)


class ReplicaFetchPartition(NamedTuple):
    """One partition of a REPLICA_FETCH."""

    topic: str
    partition: int
    current_leader_epoch: int  # the epoch the follower believes its leader is in
    fetch_offset: int  # the follower's log end
    last_fetched_epoch: int  # the follower's latest epoch (NO_EPOCH when it has none)
    max_bytes: int


class ReplicaFetchRequest(NamedTuple):
    replica_id: int  # the follower's broker id
    max_wait_ms: int
    min_bytes: int
    partitions: list[ReplicaFetchPartition]


class ReplicaFetchBlock(NamedTuple):
    """One partition's answer; ``messages`` is empty on an error or a divergence."""

    error: int
    high_watermark: int
    log_start_offset: int
    epoch: int  # the epoch of every message in ``messages`` (NO_EPOCH when there are none)
    diverging_epoch: int  # NO_EPOCH unless the follower's log diverges from the leader's
    diverging_end_offset: int
    messages: memoryview


def decode_replica_fetch(r: Reader) -> ReplicaFetchRequest:
    """The request body after its type field (the broker's side).

    Raises:
        DecodeError: a field runs past the end, or a count that cannot fit.
    """
    replica_id, max_wait_ms, min_bytes = r.unpack(_HEAD)
    partitions = []
    for _ in range(r.count(_PARTITION_MIN)):
        topic = r.string16()
        partition, current, offset, last, max_bytes = r.unpack(_PARTITION)
        partitions.append(ReplicaFetchPartition(topic, partition, current, offset, last, max_bytes))
    return ReplicaFetchRequest(replica_id, max_wait_ms, min_bytes, partitions)


def encode_replica_fetch(request: ReplicaFetchRequest) -> bytes:
    """A whole request frame (size, type and body)."""
    parts = [INT16.pack(REPLICA_FETCH), _HEAD.pack(request.replica_id, request.max_wait_ms, request.min_bytes),
             INT16.pack(len(request.partitions))]
    for p in request.partitions:
        parts.append(string16(p.topic))
        parts.append(_PARTITION.pack(p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                                     p.max_bytes))
    body = b"".join(parts)
    return INT32.pack(len(body)) + body


def replica_fetch_response_parts(blocks: Sequence[tuple[ReplicaFetchBlock, S | None]]) -> list[bytes | S]:
    """The response as header bytes and sendfile placeholders: one ``(block, data)`` per
    partition in request order, where ``block.messages`` is ignored and ``data`` (a file
    slice, or None) is what is sent."""
    parts: list[bytes | S] = []
    total = 2
    for block, data in blocks:
        length = data.length if data is not None else 0
        parts.append(_BLOCK.pack(block.error, block.high_watermark, block.log_start_offset, block.epoch,
                                 block.diverging_epoch, block.diverging_end_offset, length))
        if data is not None and length:
            parts.append(data)
        total += _BLOCK.size + length
    return [response_header(0, total) + INT16.pack(len(blocks)), *parts]


def decode_replica_fetch_response(body: memoryview | bytes) -> tuple[int, list[ReplicaFetchBlock]]:
    """A response body (after SIZE): ``(error, blocks)``.

    Raises:
        DecodeError: a block or its messages run past the body, or bytes are left over.
    """
    r = Reader(body)
    error = r.int16()
    if error:
        return error, []
    blocks = []
    for _ in range(r.count(_BLOCK.size)):
        fields = r.unpack(_BLOCK)
        length = fields[-1]
        if length < 0:
            raise DecodeError(f"replica fetch block with {length} bytes of messages")
        error_, hw, start, epoch, diverging_epoch, diverging_end, _ = fields
        blocks.append(ReplicaFetchBlock(error_, hw, start, epoch, diverging_epoch, diverging_end, r.raw(length)))
    r.expect_end()
    return error, blocks
