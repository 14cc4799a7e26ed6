"""The producer's send thread: one ``selectors`` loop for every broker (seed 003).

Each turn of the loop, in order:

1. asks for metadata when it is due, creating unknown topics on the way
   (rill.client.producer.metadata_updater);
2. takes the ready batches from the accumulator for every leader that can take more
   requests, encodes them (gzip when asked), collates them per broker into PRODUCE_ACK
   requests (MULTIPRODUCE with ``acks=none``) of at most ``max.request.size`` bytes,
   and writes them (several requests in flight per connection, answered in order);
3. fails what waited too long: a request without a response after
   ``request.timeout.ms`` (the connection is closed: without correlation ids the
   stream's position is lost), ready batches that could not be sent by their deadline
   (no leader, broker unreachable), unassigned messages whose topic stayed unknown;
4. waits once in ``select``, bounded by the earliest deadline (linger expiry, retry
   backoff, request timeout, reconnect backoff, metadata refresh), then reads
   responses (completing each batch's future with its offset or error) and writes
   what is pending.

This module holds the loop, its wake-ups, the connections in the selector and the
sending of batches. What becomes of a batch sent (completed, retried after a retriable
error, or failed) is decided in rill.client.producer.outcomes.

Thread-safety: only :meth:`Sender.wakeup` and :meth:`Sender.stop` may be called from
other threads; everything else runs on the send thread.
"""

from __future__ import annotations

import selectors
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from rill.client.errors import ConnectionClosed
from rill.client.producer.accumulator import ProducerBatch, RecordAccumulator
from rill.client.producer.errors import ProducerClosed, ProducerTimeout
from rill.client.producer.in_flight import BrokerLink, InFlight, Kind, SocketState, next_deadline
from rill.client.security.client_security import ClientSecurity
from rill.client.producer.metadata_updater import MetadataUpdater, ProducerMetadata, UpdaterFactory
from rill.client.producer.metrics import ProducerMetrics
from rill.client.producer.outcomes import BatchOutcomes, run_callbacks
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import DecodeError
from rill.client.net.selector_loop import SelectorLoop
from rill.client.protocol.messages import CODEC_NONE, encode_message_set
from rill.client.structs import Address

log = structlog.get_logger(__name__)

__all__ = ["Sender", "SenderConfig"]

_PRODUCE_ENTRY_OVERHEAD = 2 + 4 + 4  # topic length, partition, message set size (plus the topic)
_MAX_ENTRIES = 0x7FFF  # the int16 count of a produce request


@dataclass(frozen=True)
class SenderConfig:
    acks: int  # 0: none (MULTIPRODUCE), else rq.Acks
    codec: int
    max_in_flight: int
    request_timeout: float  # seconds
    retries: int
    retry_backoff: float
    metadata_max_age: float
    max_request_size: int
    client_id: str
    security: ClientSecurity | None = None  # TLS and SASL for every broker connection


class Sender:
    """The background thread that sends the accumulator's batches (see the module doc)."""

    def __init__(self, accumulator: RecordAccumulator, cluster: ProducerMetadata, config: SenderConfig,
                 metadata: UpdaterFactory = MetadataUpdater,
                 audit: Callable[[ProducerBatch], None] | None = None,
                 metrics: ProducerMetrics | None = None) -> None:
        self.acc = accumulator
        self.cluster = cluster
        self.config = config
        self._loop = SelectorLoop()
        self._stop_error: BaseException | None = None
        self._links: dict[Address, BrokerLink] = {}
        self._wanted: set[Address] = set()
        self._changed = False  # this turn failed a connection (and maybe put batches back): look again at once
        self._metadata = metadata(accumulator, cluster, config, self._links, self._connect, self._request)
        self.metrics = metrics if metrics is not None else ProducerMetrics()
        self._outcomes = BatchOutcomes(accumulator, config, stopping=lambda: self._stop_error is not None,
                                       metrics=self.metrics)
        self._outcomes.audit = audit  # each acknowledged batch, for the audit events (None: off)
        self.thread = threading.Thread(target=self._run, name=f"rill-producer-{config.client_id}", daemon=True)
        accumulator.wakeup = self.wakeup

    # ---------------------------------------------------------------- other threads

    def start(self) -> None:
        self.thread.start()

    def wakeup(self) -> None:
        """Make the loop look at the accumulator now (cheap when a wake-up is already pending)."""
        self._loop.wake()

    def stop(self, error: BaseException) -> None:
        """End the loop: whatever is still queued or in flight fails with ``error``."""
        self._stop_error = error
        self.wakeup()

    # ---------------------------------------------------------------- the loop

    def _run(self) -> None:
        try:
            while self._stop_error is None:
                self._run_once()
            self._abort(self._stop_error)
        except BaseException as exc:  # a bug here must not leave futures hanging
            log.exception("producer.sender_failed", client_id=self.config.client_id)
            error = ProducerClosed(f"the producer's send thread failed: {exc!r}")
            error.__cause__ = exc
            self._abort(error)
        finally:
            for link in self._links.values():
                link.close()
            self._loop.close()

    def _run_once(self) -> None:
        now = time.monotonic()
        self._changed = False
        wake_at = self._metadata.update(now)
        wake_at = min(wake_at, self._send_ready(now))
        wake_at = min(wake_at, self._expire(now))
        if self._changed:  # the deadlines above may be stale (a reconnection, a retry to schedule)
            wake_at = now
        timeout = None if wake_at == float("inf") else max(0.0, wake_at - time.monotonic())
        self.metrics.requests_in_flight = sum(link.in_flight for link in self._links.values())
        for link, mask in self._loop.wait(timeout):
            if mask & selectors.EVENT_WRITE or link.state is SocketState.CONNECTING:  # (TLS handshakes also read)
                self._on_writable(link)
            if mask & selectors.EVENT_READ and link.ready:
                self._on_readable(link)

    # ---------------------------------------------------------------- sending batches

    def _send_ready(self, now: float) -> float:
        limit = self.config.max_request_size
        budgets = {link: (self.config.max_in_flight - link.in_flight) * limit
                   for link in self._links.values() if link.ready}
        self._wanted.clear()
        taken, stuck, wake_at = self.acc.drain(now, self._route, budgets)
        for link, batches in taken.items():
            self._send_batches(link, batches, now)
        for queue in stuck:
            self._outcomes.expire(queue, now, self._metadata.unreachable)
            wake_at = min(wake_at, self.acc.next_deadline(queue))
        for address in self._wanted:
            wake_at = min(wake_at, self._connect(address, now))
        return wake_at

    def _route(self, topic: str, partition: int) -> BrokerLink | None:
        leader = self.cluster.leader(topic, partition)
        if leader is None:
            self._metadata.stale = True
            return None
        address = (leader.host, leader.port)
        link = self._links.get(address)
        if link is None or not link.ready:
            self._wanted.add(address)
            return None
        return link

    def _send_batches(self, link: BrokerLink, batches: list[ProducerBatch], now: float) -> None:
        codec, limit = self.config.codec, self.config.max_request_size
        request: list[ProducerBatch] = []
        size = 0
        for batch in batches:
            if batch.encoded is None:
                payloads = batch.payloads
                batch.lengths = list(map(len, payloads))
                batch.encoded = encode_message_set(payloads, codec)
                batch.compressed = codec != CODEC_NONE
                batch.payloads = []
            entry = _PRODUCE_ENTRY_OVERHEAD + len(batch.topic) + len(batch.encoded)
            if request and (size + entry > limit or len(request) == _MAX_ENTRIES):
                self._send_produce(link, request, now)
                request, size = [], 0
            request.append(batch)
            size += entry
        if request:
            self._send_produce(link, request, now)
        self._write(link)

    def _send_produce(self, link: BrokerLink, batches: list[ProducerBatch], now: float) -> None:
        # routed a moment ago from the same metadata: the broker's own number for each partition
        number = self.cluster.broker_partition
        produces = [rq.ProduceRequest(b.topic, number(b.topic, b.partition), b.encoded or b"") for b in batches]
        if self.config.acks:
            parts = rq.encode_produce_ack_parts(produces, self.config.acks, int(self.config.request_timeout * 1000))
        else:
            parts = rq.encode_multiproduce_parts(produces)
        self._queue(link, Kind.PRODUCE, parts, now, batches=batches)
        self.metrics.request_sent()

    def _queue(self, link: BrokerLink, kind: Kind, frame: Sequence[bytes | memoryview], now: float, *,
               batches: list[ProducerBatch] | None = None, topics: list[str] | None = None) -> None:
        answered = kind is not Kind.PRODUCE or bool(self.config.acks)  # acks=none: MULTIPRODUCE, no answer
        link.send(frame, InFlight(kind, now + self._response_timeout(), batches or [], topics or [], now),
                  answered=answered)

    def _request(self, link: BrokerLink, kind: Kind, frame: Sequence[bytes | memoryview], now: float,
                 topics: list[str]) -> None:
        """Queue a METADATA request or a probe and write what the socket takes."""
        self._queue(link, kind, frame, now, topics=topics)
        self._write(link)

    def _response_timeout(self) -> float:
        # the broker waits up to request.timeout.ms for an fsync before answering; allow for the answer
        return self.config.request_timeout * (2 if self.config.acks == rq.Acks.FSYNC else 1)

    # ---------------------------------------------------------------- deadlines and shutdown

    def _expire(self, now: float) -> float:
        """Fail whatever waited past its deadline; return the next deadline."""
        wake_at = float("inf")
        for link in list(self._links.values()):
            if link.state is SocketState.CONNECTING:
                if link.connect_deadline <= now:
                    self._link_failed(link, ConnectionClosed(f"cannot connect to broker {link.name}: timed out"), now)
                else:
                    wake_at = min(wake_at, link.connect_deadline)
                continue
            deadline = next_deadline(link)
            if deadline is None:
                continue
            if deadline <= now:
                timeout_ms = self._response_timeout() * 1000
                self._link_failed(link, ProducerTimeout(
                    f"no response from broker {link.name} within {timeout_ms:.0f} ms (request.timeout.ms): "
                    "the messages may or may not have been appended"), now)
            else:
                wake_at = min(wake_at, deadline)
        return min(wake_at, self._metadata.expire_unassigned(now))

    def _abort(self, error: BaseException) -> None:
        """Fail everything queued, unassigned and in flight with ``error``."""
        batches, callbacks = self.acc.abort(error)
        run_callbacks(callbacks, self.config.client_id)
        for link in self._links.values():
            for request, _ in link.close():
                batches.extend(request.batches)
        for batch in batches:
            self._outcomes.fail(batch, error)

    # ---------------------------------------------------------------- responses

    def _on_response(self, link: BrokerLink, request: InFlight, body: memoryview, now: float) -> None:
        if request.kind is Kind.METADATA:
            self._metadata.on_metadata(request, body, now)
        elif request.kind is Kind.PROBE:
            self._metadata.on_probe(request, body)
        else:
            self.metrics.answered(now - request.queued_at)
            if self._outcomes.on_produce(link, request, body, now):
                self._metadata.stale = True

    # ---------------------------------------------------------------- connections

    def _connect(self, address: Address, now: float) -> float:
        """Start connecting to ``address`` unless connected, connecting, or backing off; return
        when to try again."""
        link = self._links.get(address)
        if link is None:
            link = self._links[address] = BrokerLink(address, security=self.config.security,
                                                     client_id=self.config.client_id)
        if link.state is not SocketState.DISCONNECTED:
            return float("inf")
        if link.retry_at > now:
            return link.retry_at
        try:
            link.connect(now, self.config.request_timeout)
        except ConnectionClosed as exc:
            self._link_failed(link, exc, now)
            return link.retry_at
        self._loop.watch(link)
        return link.connect_deadline

    def _on_writable(self, link: BrokerLink) -> None:
        if link.state is SocketState.CONNECTING:
            try:
                link.finish_connect()
            except ConnectionClosed as exc:
                self._link_failed(link, exc, time.monotonic())
                return
            if not link.ready:  # TLS or SASL under way
                self._loop.watch(link)
                return
            log.debug("producer.connected", client_id=self.config.client_id, broker=link.name)
        self._write(link)

    def _write(self, link: BrokerLink) -> None:
        try:
            done = link.write()
        except ConnectionClosed as exc:
            self._link_failed(link, exc, time.monotonic())
            return
        for request in done:  # acks=none: done once written
            for batch in request.batches:
                self._outcomes.complete(batch, -1)
        self._loop.watch(link)

    def _on_readable(self, link: BrokerLink) -> None:
        now = time.monotonic()
        try:
            link.receive()
            # one response at a time: if handling one fails the link, the requests behind it
            # are still in flight on it and are settled by _link_failed
            while link.ready and (response := link.next_response()) is not None:
                request, body = response
                try:
                    self._on_response(link, request, body, now)
                except DecodeError as exc:  # a malformed metadata or probe answer costs this connection only
                    raise ConnectionClosed(f"bad response from broker {link.name}: {exc}") from exc
        except ConnectionClosed as exc:
            self._link_failed(link, exc, now)

    def _link_failed(self, link: BrokerLink, error: ConnectionClosed | ProducerTimeout, now: float) -> None:
        """Close the connection and settle what was in flight on it: requests not written at
        all go back as they were, the others are retried or failed with ``error``."""
        was_ready = link.ready
        requests = link.fail(now, self.config.retry_backoff)
        self._changed = True
        (log.warning if was_ready else log.info)(
            "producer.connection_failed", client_id=self.config.client_id, broker=link.name, error=str(error),
            in_flight=len(requests))
        self._metadata.connection_failed(error, [request for request, _ in requests])
        self._outcomes.settle(requests, error, now)
