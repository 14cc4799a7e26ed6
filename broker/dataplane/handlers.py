"""Request handlers: one table from request type to the function that serves it.

Each handler takes a decoded request and returns the connection's response
:class:`Slot` (filled now, or later for long polls and fsync acknowledgements) or
``None`` for PRODUCE and MULTIPRODUCE, which have no response in 0.7. Errors about a
partition (unknown topic, bad offset, invalid messages) become error codes in the
response; only a malformed frame (DecodeError, raised by decode_request) closes the
connection. Everything runs on the event-loop thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.dataplane.delayed import DelayedFetches, FsyncAcks, ReadResult
from rill.broker.dataplane.server import BrokerServer
from rill.broker.dataplane.server_connection import Connection, Slot
from rill.broker.dataplane.storage import FlushScheduler, PartitionLog, PartitionStore
from rill.broker.dataplane.topic_creation import DataPlaneTopics
from rill.client.errors import BrokerError, ErrorCode, InvalidFetchSize, InvalidRequest, UnknownTopic
from rill.client.protocol import requests as rq
from rill.client.protocol.fetch_response import fetch_response_parts, multifetch_response_parts
from rill.client.protocol.replica_fetch import (NO_EPOCH, ReplicaFetchBlock, ReplicaFetchRequest,
                                                replica_fetch_response_parts)
from rill.client.topic_names import validate_topic

log = structlog.get_logger(__name__)

Outcome = tuple[rq.PartitionAck, PartitionLog | None]  # an append's ack, and the log it went to (None: refused)


class RequestHandlers:
    """Serves every request type against the broker's partitions (a :class:`PartitionStore`)."""

    def __init__(self, server: BrokerServer, logs: PartitionStore, flusher: FlushScheduler, cluster: ClusterView, *,
                 auto_create: bool = True, max_wait_ms: int = 30_000) -> None:
        self.server = server
        self.logs = logs
        self.flusher = flusher
        self.auto_create = auto_create
        self.max_wait_ms = max_wait_ms
        self.cluster = cluster
        self.delayed = DelayedFetches(server, self.read)
        self.topics = DataPlaneTopics(server, logs, auto_create)
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._table: dict[int, Callable[[Connection, Any], Slot | None]] = {
            rq.RequestType.PRODUCE: self.produce,
            rq.RequestType.FETCH: self.fetch,
            rq.RequestType.MULTIFETCH: self.multifetch,
            rq.RequestType.MULTIPRODUCE: self.multiproduce,
            rq.RequestType.OFFSETS: self.offsets,
            rq.RequestType.PRODUCE_ACK: self.produce_ack,
            rq.RequestType.FETCH_WAIT: self.fetch_wait,
            rq.RequestType.METADATA: self.metadata,
            rq.RequestType.CREATE_TOPIC: self.create_topic,
            rq.RequestType.TIME_INDEX: self.time_index,
            rq.RequestType.REPLICA_FETCH: self.replica_fetch,
        }

    def __call__(self, conn: Connection, body: memoryview) -> Slot | None:
        kind, request = rq.decode_request(body)
        return self._table[kind](conn, request)

    # ---------------------------------------------------------------- produce

    def append(self, req: rq.ProduceRequest, refused: Mapping[str, BrokerError]) -> Outcome:
        """Append one partition's message set: (ack, the partition's log or None on error).

        ``refused`` are topics whose auto-creation failed (from :meth:`DataPlaneTopics.ensure`).
        """
        partition = req.partition
        try:
            validate_topic(req.topic)
            if req.topic in refused:
                raise refused[req.topic]
            if partition == rq.ANY_PARTITION:
                partition = self._pick_partition(req.topic)
            partition_log = self.logs.get(req.topic, partition)
            info = partition_log.append(req.messages)
        except BrokerError as exc:
            log.info("produce.refused", topic=req.topic, partition=partition, error=exc.code.name, reason=str(exc))
            return rq.PartitionAck(int(exc.code), partition, -1, -1), None
        self.delayed.on_append(req.topic, partition)
        return rq.PartitionAck(0, partition, info.first_offset, info.next_offset), partition_log

    def _pick_partition(self, topic: str) -> int:
        count = self.logs.topics().get(topic)
        if not count:
            raise UnknownTopic(f"unknown topic {topic!r}" + ("" if self.auto_create else
                                                             " (auto.create.topics.enable is false)"))
        counter = self._round_robin.setdefault(topic, itertools.count())
        return next(counter) % int(count)

    def _append_all(self, conn: Connection, produces: list[rq.ProduceRequest]) -> list[Outcome]:
        """Create missing topics first (may raise Deferred, before anything is appended), then append each."""
        refused = self.topics.ensure(conn, (p.topic for p in produces))
        return [self.append(p, refused) for p in produces]

    def produce(self, conn: Connection, req: rq.ProduceRequest) -> None:
        self._append_all(conn, [req])
        return None

    def multiproduce(self, conn: Connection, req: rq.MultiProduceRequest) -> None:
        self._append_all(conn, req.produces)
        return None

    def produce_ack(self, conn: Connection, req: rq.ProduceAckRequest) -> Slot:
        if req.acks not in (rq.Acks.APPEND, rq.Acks.FSYNC):
            acks = [rq.PartitionAck(int(ErrorCode.INVALID_REQUEST), p.partition, -1, -1) for p in req.produces]
            return Slot([rq.encode_produce_ack_response(acks)])
        results = self._append_all(conn, req.produces)
        acks = [ack for ack, _ in results]
        if req.acks == rq.Acks.APPEND:
            return Slot([rq.encode_produce_ack_response(acks)])
        slot = Slot()
        FsyncAcks(self.server, self.flusher, conn, slot, results, req.timeout_ms).start()
        return slot

    # ---------------------------------------------------------------- fetch

    def read(self, fetch: rq.FetchRequest) -> ReadResult:
        """Read one partition for a fetch: (error code, file slice or None)."""
        try:
            validate_topic(fetch.topic)
            if fetch.max_size < 0:
                raise InvalidFetchSize(f"max size {fetch.max_size} is negative")
            partition_log = self.logs.get(fetch.topic, fetch.partition)
            return ReadResult(0, partition_log.read(fetch.offset, fetch.max_size))
        except UnknownTopic:
            return ReadResult(0, None)  # Kafka 0.7 answers an unknown topic with an empty set
        except BrokerError as exc:
            return ReadResult(int(exc.code), None)

    def fetch(self, conn: Connection, req: rq.FetchRequest) -> Slot:
        result = self.read(req)
        return Slot(fetch_response_parts(result.error, result.slice))

    def multifetch(self, conn: Connection, req: rq.MultiFetchRequest) -> Slot:
        return Slot(multifetch_response_parts([self.read(f) for f in req.fetches]))

    def fetch_wait(self, conn: Connection, req: rq.FetchWaitRequest) -> Slot:
        if req.max_wait_ms < 0 or req.min_bytes < 0:
            return Slot([rq.response_header(int(ErrorCode.INVALID_REQUEST), 0)])
        results = [self.read(f) for f in req.fetches]
        wait_ms = min(req.max_wait_ms, self.max_wait_ms)
        if wait_ms == 0 or DelayedFetches.satisfied(results, req.min_bytes):
            return Slot(multifetch_response_parts(results))
        slot = Slot()
        self.delayed.park(conn, slot, req.fetches, req.min_bytes, wait_ms)
        return slot

    # ---------------------------------------------------------------- offsets and topics

    def _log_with_count(self, topic: str, partition: int, count: int, what: str) -> PartitionLog:
        """The log of a partition for a request asking for ``count`` items (never negative)."""
        validate_topic(topic)
        if count < 0:
            raise InvalidRequest(f"{what} {count} is negative")
        return self.logs.get(topic, partition)

    def offsets(self, conn: Connection, req: rq.OffsetsRequest) -> Slot:
        try:
            partition_log = self._log_with_count(req.topic, req.partition, req.max_number, "max number")
            offsets = partition_log.offsets_before(req.time, req.max_number)
        except UnknownTopic:
            # Kafka 0.7 (Log.getEmptyOffsets): [0] for latest/earliest, nothing otherwise
            offsets = [0] if req.time in (rq.LATEST_TIME, rq.EARLIEST_TIME) and req.max_number else []
        except BrokerError as exc:
            return Slot([rq.encode_offsets_response(int(exc.code), [])])
        return Slot([rq.encode_offsets_response(0, offsets)])

    def time_index(self, conn: Connection, req: rq.TimeIndexRequest) -> Slot:
        try:
            partition_log = self._log_with_count(req.topic, req.partition, req.max_entries, "max entries")
            entries = partition_log.time_entries(req.offset, min(req.max_entries, rq.TIME_INDEX_MAX_ENTRIES))
        except BrokerError as exc:
            return Slot([rq.encode_time_index_response(int(exc.code), [])])
        return Slot([rq.encode_time_index_response(0, entries)])

    def metadata(self, conn: Connection, req: rq.MetadataRequest) -> Slot:
        names = req.topics or self.cluster.topic_names()
        rows = [_metadata_row(name, self.cluster) for name in names]
        return Slot([rq.encode_metadata_response(0, self.cluster.brokers(), rows)])

    def create_topic(self, conn: Connection, req: rq.CreateTopicRequest) -> Slot:
        return self.topics.create_topic(conn, req)

    def replica_fetch(self, conn: Connection, req: ReplicaFetchRequest) -> Slot:
        """A follower's fetch. This broker leads no replicated partition yet (replication is being
        built, issue 13), so every partition is answered NotLeaderForPartition with no data."""
        refused = ReplicaFetchBlock(int(ErrorCode.NOT_LEADER_FOR_PARTITION), -1, -1, NO_EPOCH, NO_EPOCH, NO_EPOCH,
                                    memoryview(b""))
        return Slot(replica_fetch_response_parts([(refused, None) for _ in req.partitions]))


def _metadata_row(name: str, cluster: ClusterView) -> rq.TopicMetadata:
    try:
        validate_topic(name)
    except BrokerError as exc:
        return rq.TopicMetadata(name, int(exc.code), ())
    placed = cluster.placement(name)
    if placed is None:
        return rq.TopicMetadata(name, int(ErrorCode.UNKNOWN_TOPIC), ())
    return rq.TopicMetadata(name, 0, placed.leaders, placed.broker_partitions)

