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
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.dataplane.delayed import CommitAcks, DelayedFetches, FsyncAcks, ReadResult
from rill.broker.dataplane.server import BrokerServer
from rill.broker.dataplane.server_connection import Connection, Slot
from rill.broker.dataplane.storage import FlushScheduler, PartitionLog, PartitionStore
from rill.broker.dataplane.topic_creation import DataPlaneTopics
from rill.broker.replication.leader_reads import LeaderReads
from rill.broker.replication.replica import Replica
from rill.broker.replication.replica_manager import ReplicaManager
from rill.broker.dataplane.connection_quotas import ConnectionQuotas
from rill.broker.metrics.request_metrics import RequestMetrics
from rill.broker.security.request_acls import DataPlaneAcls
from rill.broker.security.sasl_authenticator import refuse_out_of_order
from rill.client.errors import (BrokerError, ErrorCode, InvalidFetchSize, InvalidRequest, NotEnoughReplicas,
                                NotLeaderForPartition, OffsetNotAvailable, TopicAuthorizationFailed, UnknownTopic)
from rill.client.protocol import requests as rq
from rill.client.protocol.fetch_response import fetch_response_parts, multifetch_response_parts
from rill.client.protocol.client_hello import ClientHelloRequest, valid_client_id
from rill.client.protocol.sasl_requests import SaslHandshakeRequest
from rill.client.protocol.replica_fetch import (NO_EPOCH, ReplicaFetchBlock, ReplicaFetchRequest,
                                                replica_fetch_response_parts)
from rill.client.security.acls import Operation
from rill.client.topic_names import refuse_internal, validate_topic

log = structlog.get_logger(__name__)

_REFUSED_READ = ReadResult(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), None)
Outcome = tuple[rq.PartitionAck, PartitionLog | None]  # an append's ack, and the log it went to (None: refused)


class RequestHandlers:
    """Serves every request type against the broker's partitions (a :class:`PartitionStore`)."""

    def __init__(self, server: BrokerServer, logs: PartitionStore, flusher: FlushScheduler, cluster: ClusterView, *,
                 auto_create: bool = True, max_wait_ms: int = 30_000, replicas: ReplicaManager | None = None,
                 acls: DataPlaneAcls | None = None) -> None:
        self.server = server
        self.logs = logs
        self.flusher = flusher
        self.auto_create = auto_create
        self.max_wait_ms = max_wait_ms
        self.cluster = cluster
        self.replicas = replicas
        self.delayed = DelayedFetches(server, self.read)
        self.topics = DataPlaneTopics(server, logs, auto_create, replicas=replicas)
        self.acls = acls  # None: no authorizer (every request allowed, at no cost)
        self.quotas: ConnectionQuotas | None = None  # client quotas (rill.broker.dataplane.connection_quotas)
        self.metrics: RequestMetrics | None = None  # None: metrics.port = 0 (nothing counted, at no cost)
        if acls is not None:
            self.topics.may_create = acls.may_create_topic
        self.leader_reads = LeaderReads(replicas, server, max_wait_ms=max_wait_ms) if replicas is not None else None
        if replicas is not None:
            replicas.on_high_watermark.append(self.delayed.on_append)  # committed data for parked consumers
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
            rq.RequestType.SASL_HANDSHAKE: self.sasl_out_of_order,
            rq.RequestType.SASL_AUTHENTICATE: self.sasl_out_of_order,
            rq.RequestType.CLIENT_HELLO: self.client_hello,
        }

    def __call__(self, conn: Connection, body: memoryview) -> Slot | None:
        kind, request = rq.decode_request(body)
        if conn.authenticator is not None:  # a SASL listener's connection, not authenticated yet
            return conn.authenticator.handle(conn, kind, request)  # type: ignore[no-any-return]
        quotas = self.quotas
        metrics = self.metrics
        if metrics is None and (quotas is None or not quotas.active):
            return self._table[kind](conn, request)
        started = time.monotonic()
        if quotas is None or not quotas.active:
            slot = self._table[kind](conn, request)
        else:
            try:
                slot = self._table[kind](conn, request)
            finally:
                quotas.after_request(conn, kind, len(body), time.monotonic() - started)
        if metrics is not None:
            metrics.handled(kind, conn.last_active, started, slot)
        return slot

    def client_hello(self, conn: Connection, req: ClientHelloRequest) -> Slot:
        """The connection's client id, for client quotas; a malformed one is InvalidRequest (left unnamed)."""
        if not valid_client_id(req.client_id):
            return Slot([rq.response_header(int(ErrorCode.INVALID_REQUEST), 0)])
        conn.client_id = req.client_id
        return Slot([rq.response_header(0, 0)])

    def sasl_out_of_order(self, conn: Connection, req: object) -> Slot:
        """SASL on a listener without it, or after authenticating: IllegalSaslState, then the connection closes."""
        kind = (rq.RequestType.SASL_HANDSHAKE if isinstance(req, SaslHandshakeRequest)
                else rq.RequestType.SASL_AUTHENTICATE)
        return refuse_out_of_order(conn, kind, "SASL on a listener without SASL, or after authentication")

    # ---------------------------------------------------------------- produce

    def append(self, req: rq.ProduceRequest, refused: Mapping[str, BrokerError], acks: int = rq.Acks.APPEND) -> Outcome:
        """Append one partition's message set: (ack, the partition's log or None on error).

        ``refused`` are topics whose auto-creation failed (from :meth:`DataPlaneTopics.ensure`).
        A replicated partition is written only on its leader, and with ``acks=all`` only
        while its in-sync replicas number at least ``min.insync.replicas`` (nothing is
        written otherwise, so a retry cannot duplicate).
        """
        partition = req.partition
        try:
            refuse_internal(validate_topic(req.topic))
            if req.topic in refused:
                raise refused[req.topic]
            if partition == rq.ANY_PARTITION:
                partition = self._pick_partition(req.topic)
            replica = self.replicas.leader(req.topic, partition) if self.replicas is not None else None
            if replica is not None and acks == rq.Acks.ALL:
                self._require_in_sync(replica)
            try:
                partition_log = self.logs.get(req.topic, partition)
            except UnknownTopic:
                if replica is None and self._led_elsewhere(req.topic, partition):
                    # stale metadata: Kafka's NOT_LEADER, which sends the client to the metadata
                    raise NotLeaderForPartition(f"this broker holds no replica of {req.topic}-{partition}, "
                                                "led by another") from None
                raise
            info = partition_log.append(req.messages)
        except BrokerError as exc:
            log.info("produce.refused", topic=req.topic, partition=partition, error=exc.code.name, reason=str(exc))
            return rq.PartitionAck(int(exc.code), partition, -1, -1), None
        if replica is not None:
            self._leader_appended(replica)
        else:
            self.delayed.on_append(req.topic, partition)
        metrics = self.metrics
        if metrics is not None:  # RequestMetrics.appended, inlined (once per partition of every produce)
            counters = metrics.topics.get(req.topic) or metrics.topic(req.topic)
            counters.bytes_in += len(req.messages)
            counters.messages_in += info.count
        return rq.PartitionAck(0, partition, info.first_offset, info.next_offset), partition_log

    def _led_elsewhere(self, topic: str, partition: int) -> bool:
        """Whether the controller has described ``topic``-``partition`` to this broker, which holds no replica of
        it: a client that asks here has stale metadata (Kafka's NOT_LEADER). A topic only ZooKeeper lists yet
        (being created) or no longer (being deleted) is not: it stays UnknownTopic."""
        placement = self.replicas.placement(topic) if self.replicas is not None else None
        return placement is not None and 0 <= partition < len(placement)

    def _require_in_sync(self, replica: Replica) -> None:
        assert self.replicas is not None
        count, needed = self.replicas.in_sync_count(replica), self.replicas.min_insync_for(replica)
        if count < needed:
            raise NotEnoughReplicas(f"{replica.topic}-{replica.partition} has {count} in-sync replicas, "
                                    f"min.insync.replicas is {needed}")

    def _leader_appended(self, replica: Replica) -> None:
        assert self.replicas is not None
        self.replicas.appended(replica)
        self.replica_appended(replica)

    def replica_appended(self, replica: Replica) -> None:
        """A leader's log grew (a produce, or the group coordinator's records): wake the fetches waiting."""
        assert self.leader_reads is not None
        self.leader_reads.wake(replica.topic, replica.partition)
        self.delayed.on_append(replica.topic, replica.partition)

    def _pick_partition(self, topic: str) -> int:
        if self.replicas is not None and self.replicas.holds_topic(topic):
            led = self.replicas.led_partitions(topic)
            if not led:
                raise NotLeaderForPartition(f"broker {self.replicas.broker_id} leads no partition of {topic!r}")
            counter = self._round_robin.setdefault(topic, itertools.count())
            return led[next(counter) % len(led)]
        count = self.logs.topics().get(topic)
        if not count:
            raise UnknownTopic(f"unknown topic {topic!r}" + ("" if self.auto_create else
                                                             " (auto.create.topics.enable is false)"))
        counter = self._round_robin.setdefault(topic, itertools.count())
        return next(counter) % int(count)

    def _append_all(self, conn: Connection, produces: list[rq.ProduceRequest],
                    acks: int = rq.Acks.APPEND) -> list[Outcome]:
        """Create missing topics first (may raise Deferred, before anything is appended), then append each.
        With the authorizer, topics the principal may not Write are refused before anything else."""
        if self.acls is None:
            refused = self.topics.ensure(conn, (p.topic for p in produces))
        else:
            denied = self.acls.denied_topics(conn, Operation.WRITE, (p.topic for p in produces), "produce")
            refused = dict(self.topics.ensure(conn, (p.topic for p in produces if p.topic not in denied)))
            refused.update({t: TopicAuthorizationFailed(f"{conn.principal} may not Write topic {t!r}") for t in denied})
        return [self.append(p, refused, acks) for p in produces]

    def produce(self, conn: Connection, req: rq.ProduceRequest) -> None:
        self._append_all(conn, [req])
        return None

    def multiproduce(self, conn: Connection, req: rq.MultiProduceRequest) -> None:
        self._append_all(conn, req.produces)
        return None

    def produce_ack(self, conn: Connection, req: rq.ProduceAckRequest) -> Slot:
        if req.acks not in (rq.Acks.APPEND, rq.Acks.FSYNC, rq.Acks.ALL):
            acks = [rq.PartitionAck(int(ErrorCode.INVALID_REQUEST), p.partition, -1, -1) for p in req.produces]
            return Slot([rq.encode_produce_ack_response(acks)])
        results = self._append_all(conn, req.produces, req.acks)
        acks = [ack for ack, _ in results]
        if req.acks == rq.Acks.ALL and self.replicas is not None:
            waits = {i: r for i, (ack, plog) in enumerate(results)
                     if plog is not None and (r := self.replicas.replicas.get((req.produces[i].topic, ack.partition)))
                     is not None}
            if waits:
                slot = Slot()
                CommitAcks(self.server, self.replicas, conn, slot, acks, waits, req.timeout_ms).start()
                return slot
        if req.acks != rq.Acks.FSYNC:
            return Slot([rq.encode_produce_ack_response(acks)])  # append, or all on partitions with one replica
        slot = Slot()
        FsyncAcks(self.server, self.flusher, conn, slot, results, req.timeout_ms).start()
        return slot

    # ---------------------------------------------------------------- fetch

    def read(self, fetch: rq.FetchRequest, led_elsewhere: int = ErrorCode.NOT_LEADER_FOR_PARTITION) -> ReadResult:
        """Read one partition for a fetch: (error code, file slice or None). ``led_elsewhere``: the code for a
        partition led by another broker and without a replica here (0: the 0.7 empty set)."""
        try:
            validate_topic(fetch.topic)
            if fetch.max_size < 0:
                raise InvalidFetchSize(f"max size {fetch.max_size} is negative")
            partition_log = self.logs.get(fetch.topic, fetch.partition)
            high_watermark = self._committed_end(fetch.topic, fetch.partition)
            max_size = fetch.max_size
            if high_watermark is not None:  # consumers read committed data only
                max_size = min(max_size, max(high_watermark - fetch.offset, 0))
            found = partition_log.read(fetch.offset, max_size)
            if self.metrics is not None:
                self.metrics.fetched(fetch.topic, found.length)
            return ReadResult(0, found)
        except UnknownTopic:
            if led_elsewhere and self._led_elsewhere(fetch.topic, fetch.partition):  # stale metadata, as produce
                return ReadResult(int(led_elsewhere), None)
            return ReadResult(0, None)  # Kafka 0.7 answers an unknown topic with an empty set
        except BrokerError as exc:
            return ReadResult(int(exc.code), None)

    def read_0_7(self, fetch: rq.FetchRequest) -> ReadResult:
        """:meth:`read` for the 0.7 request types: a misaligned offset answers OffsetOutOfRange.

        No 0.7 client knows rill's InvalidOffset (7); OffsetOutOfRange makes each reset its
        position by its own policy (``autooffset.reset``), where 7 made them fail or crash.
        rill's own FETCH_WAIT keeps the precise code. A partition led elsewhere, without a
        replica here, is the empty set of a topic 0.7 does not know, as it always was.
        """
        result = self.read(fetch, 0)
        if result.error == ErrorCode.INVALID_OFFSET:
            return ReadResult(int(ErrorCode.OFFSET_OUT_OF_RANGE), None)
        return result

    def _unreadable(self, conn: Connection, fetches: list[rq.FetchRequest], request: str) -> set[str]:
        """The topics of ``fetches`` the principal may not Read (none without the authorizer)."""
        if self.acls is None:
            return set()
        return self.acls.denied_topics(conn, Operation.READ, (f.topic for f in fetches), request)

    def fetch(self, conn: Connection, req: rq.FetchRequest) -> Slot:
        if self._unreadable(conn, [req], "fetch"):
            return Slot(fetch_response_parts(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), None))
        result = self.read_0_7(req)
        return Slot(fetch_response_parts(result.error, result.slice))

    def multifetch(self, conn: Connection, req: rq.MultiFetchRequest) -> Slot:
        denied = self._unreadable(conn, req.fetches, "multifetch")
        return Slot(multifetch_response_parts([_REFUSED_READ if f.topic in denied else self.read_0_7(f)
                                               for f in req.fetches]))

    def fetch_wait(self, conn: Connection, req: rq.FetchWaitRequest) -> Slot:
        if req.max_wait_ms < 0 or req.min_bytes < 0:
            return Slot([rq.response_header(int(ErrorCode.INVALID_REQUEST), 0)])
        denied = self._unreadable(conn, req.fetches, "fetch_wait")
        results = [_REFUSED_READ if f.topic in denied else self.read(f) for f in req.fetches]
        wait_ms = min(req.max_wait_ms, self.max_wait_ms)
        if wait_ms == 0 or denied or DelayedFetches.satisfied(results, req.min_bytes):  # (a parked fetch re-reads all)
            return Slot(multifetch_response_parts(results))
        slot = Slot()
        self.delayed.park(conn, slot, req.fetches, req.min_bytes, wait_ms)
        return slot

    # ---------------------------------------------------------------- offsets and topics

    def _committed_end(self, topic: str, partition: int) -> int | None:
        """A replicated partition's high watermark (None when it is not replicated).

        Raises:
            NotLeaderForPartition: this broker holds it but does not lead it.
        """
        if self.replicas is None:
            return None
        replica = self.replicas.leader(topic, partition)
        return replica.high_watermark if replica is not None else None

    def _log_with_count(self, topic: str, partition: int, count: int, what: str) -> PartitionLog:
        """The log of a partition for a request asking for ``count`` items (never negative)."""
        validate_topic(topic)
        if count < 0:
            raise InvalidRequest(f"{what} {count} is negative")
        return self.logs.get(topic, partition)

    def offsets(self, conn: Connection, req: rq.OffsetsRequest) -> Slot:
        if self.acls is not None and self.acls.denied_topics(conn, Operation.DESCRIBE, [req.topic], "offsets"):
            return Slot([rq.encode_offsets_response(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), [])])
        try:
            partition_log = self._log_with_count(req.topic, req.partition, req.max_number, "max number")
            offsets = partition_log.offsets_before(req.time, req.max_number)
            high_watermark = self._committed_end(req.topic, req.partition)
            if high_watermark is not None:
                offsets = self._committed_offsets(req, offsets, high_watermark)
        except UnknownTopic:
            # Kafka 0.7 (Log.getEmptyOffsets): [0] for latest/earliest, nothing otherwise
            offsets = [0] if req.time in (rq.LATEST_TIME, rq.EARLIEST_TIME) and req.max_number else []
        except BrokerError as exc:
            return Slot([rq.encode_offsets_response(int(exc.code), [])])
        return Slot([rq.encode_offsets_response(0, offsets)])

    def _committed_offsets(self, req: rq.OffsetsRequest, offsets: list[int], high_watermark: int) -> list[int]:
        """OFFSETS on a replicated partition: "latest" is the high watermark, and no answer is past it.

        Raises:
            OffsetNotAvailable: a new leader's HW has not reached the start of its epoch
                (Kafka's KIP-207: "latest" must never go backwards across a leader change).
        """
        assert self.replicas is not None
        replica = self.replicas.leader(req.topic, req.partition)
        state = replica.leader_state if replica is not None else None
        if state is not None and high_watermark < state.epoch_start_offset:
            raise OffsetNotAvailable(f"{req.topic}-{req.partition}: the new leader's high watermark {high_watermark} "
                                     f"has not reached its epoch's start {state.epoch_start_offset}")
        kept = [o for o in offsets if o <= high_watermark]
        if req.time == rq.LATEST_TIME and req.max_number and (not kept or kept[0] != high_watermark):
            kept = [high_watermark, *kept][:req.max_number]
        return kept

    def time_index(self, conn: Connection, req: rq.TimeIndexRequest) -> Slot:
        if self.acls is not None and self.acls.denied_topics(conn, Operation.DESCRIBE, [req.topic], "time_index"):
            return Slot([rq.encode_time_index_response(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), [])])
        try:
            partition_log = self._log_with_count(req.topic, req.partition, req.max_entries, "max entries")
            high_watermark = self._committed_end(req.topic, req.partition)
            entries = partition_log.time_entries(req.offset, min(req.max_entries, rq.TIME_INDEX_MAX_ENTRIES))
            if high_watermark is not None:
                entries = [e for e in entries if e[0] <= high_watermark]
        except BrokerError as exc:
            return Slot([rq.encode_time_index_response(int(exc.code), [])])
        return Slot([rq.encode_time_index_response(0, entries)])

    def metadata(self, conn: Connection, req: rq.MetadataRequest) -> Slot:
        names = req.topics or self.cluster.topic_names()
        rows = [_metadata_row(name, self.cluster) for name in names]
        if self.acls is not None:
            denied = self.acls.denied_topics(conn, Operation.DESCRIBE, names, "metadata")
            if req.topics:  # named: say which are refused
                rows = [rq.TopicMetadata(r.topic, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), ())
                        if r.topic in denied else r for r in rows]
            else:  # every topic: only those the principal may see
                rows = [r for r in rows if r.topic not in denied]
        return Slot([rq.encode_metadata_response(0, self.cluster.brokers(conn.listener), rows)])

    def create_topic(self, conn: Connection, req: rq.CreateTopicRequest) -> Slot:
        if self.acls is not None and not self.acls.may_create_topic(conn, req.topic, "create_topic"):
            return Slot([rq.encode_create_topic_response(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), 0)])
        return self.topics.create_topic(conn, req)

    def replica_fetch(self, conn: Connection, req: ReplicaFetchRequest) -> Slot:
        """A follower's fetch (rill.broker.replication.leader_reads); a broker with no replica
        manager leads nothing and answers every partition NotLeaderForPartition. Only a broker may
        (ClusterAction on the cluster): others get ClusterAuthorizationFailed for every partition."""
        error = ErrorCode.NOT_LEADER_FOR_PARTITION
        if self.acls is not None and not self.acls.cluster_action(conn, "replica_fetch"):
            error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elif self.leader_reads is not None:
            conn.replica = True  # a broker: client quotas do not apply to replication
            return self.leader_reads.handle(conn, req)
        refused = ReplicaFetchBlock(int(error), -1, -1, NO_EPOCH, NO_EPOCH, NO_EPOCH, memoryview(b""))
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

