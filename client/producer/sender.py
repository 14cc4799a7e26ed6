"""The producer's send thread: one ``selectors`` loop for every broker (seed 003).

Each turn of the loop, in order:

1. asks for metadata if a topic has messages waiting for its partition count, if an
   error made what it knows stale, or every ``metadata.max.age.ms`` (a METADATA request
   on any ready connection, opening one to a known broker or a bootstrap address if
   none is open); a topic the broker does not know is created by an empty acknowledged
   produce to its partition 0, which makes the broker auto-create it with its own
   ``num.partitions`` (Kafka 0.7 creates topics on produce), then metadata is asked again;
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

Retries: a batch whose request failed with a retriable error (a broken connection, a
request timeout, a broker's retriable code) goes back to the front of its partition's
queue after ``retry.backoff.ms``, at most ``retries`` times. A request that was never
written at all is put back without counting. Everything else fails its futures.

Thread-safety: only :meth:`Sender.wakeup` and :meth:`Sender.stop` may be called from
other threads; everything else runs on the send thread.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from rill.client.errors import (BrokerError, ConnectionClosed, ErrorCode, InvalidMessage, UnknownTopic,
                                WrongPartition, error_for_code)
from rill.client.metadata import ClusterMetadata
from rill.client.producer.accumulator import PartitionQueue, ProducerBatch, RecordAccumulator
from rill.client.producer.errors import ProducerClosed, ProducerTimeout, is_retriable
from rill.client.producer.link import Address, BrokerLink, InFlight, Kind, LinkState
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import DecodeError
from rill.client.protocol.messages import CODEC_NONE, encode_message_set

log = structlog.get_logger(__name__)

__all__ = ["Sender", "SenderConfig", "ProducerMetadata"]

_PRODUCE_ENTRY_OVERHEAD = 2 + 4 + 4  # topic length, partition, message set size (plus the topic)
_MAX_ENTRIES = 0x7FFF  # the int16 count of a produce request


class ProducerMetadata(ClusterMetadata):
    """ClusterMetadata fed by the send thread's own (non-blocking) METADATA requests."""

    def update(self, meta: rq.Metadata, topics: Sequence[str]) -> None:
        self._merge(meta, topics)


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


class Sender:
    """The background thread that sends the accumulator's batches (see the module doc)."""

    def __init__(self, accumulator: RecordAccumulator, cluster: ProducerMetadata, config: SenderConfig) -> None:
        self.acc = accumulator
        self.cluster = cluster
        self.config = config
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._wake_pending = False
        self._stop_error: BaseException | None = None
        self._links: dict[Address, BrokerLink] = {}
        self._metadata_link: BrokerLink | None = None  # where a METADATA request is in flight
        self._metadata_stale = False
        self._metadata_at = float("-inf")  # when metadata last arrived
        self._metadata_not_before = 0.0
        self._metadata_error = "no metadata request answered yet"
        self._probing: set[str] = set()
        self._next_candidate = 0
        self._wanted: set[Address] = set()
        self._changed = False  # this turn failed a connection or put batches back: look again at once
        self.thread = threading.Thread(target=self._run, name=f"rill-producer-{config.client_id}", daemon=True)
        accumulator.wakeup = self.wakeup

    # ---------------------------------------------------------------- other threads

    def start(self) -> None:
        self.thread.start()

    def wakeup(self) -> None:
        """Make the loop look at the accumulator now (cheap when a wake-up is already pending)."""
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self._wake_w.send(b"\0")
            except OSError:  # the buffer is full (a wake-up is pending anyway) or the loop has ended
                pass

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
                if link.sock is not None:
                    link.sock.close()
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _run_once(self) -> None:
        now = time.monotonic()
        self._changed = False
        wake_at = self._update_metadata(now)
        wake_at = min(wake_at, self._send_ready(now))
        wake_at = min(wake_at, self._expire(now))
        if self._changed:  # the deadlines above may be stale (a reconnection, a retry to schedule)
            wake_at = now
        timeout = None if wake_at == float("inf") else max(0.0, wake_at - time.monotonic())
        for key, mask in self._selector.select(timeout):
            link = key.data
            if link is None:
                self._drain_wakeups()
                continue
            if mask & selectors.EVENT_WRITE:
                self._on_writable(link)
            if mask & selectors.EVENT_READ and link.state is LinkState.READY:
                self._on_readable(link)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        # After draining, before the next turn looks at the accumulator: a wakeup() that
        # still saw True changed the accumulator before this line, so the next turn sees it.
        self._wake_pending = False

    # ---------------------------------------------------------------- sending batches

    def _send_ready(self, now: float) -> float:
        limit = self.config.max_request_size
        budgets = {link: (self.config.max_in_flight - link.in_flight) * limit
                   for link in self._links.values() if link.state is LinkState.READY}
        self._wanted.clear()
        taken, stuck, wake_at = self.acc.drain(now, self._route, budgets)
        for link, batches in taken.items():
            self._send_batches(link, batches, now)
        for queue in stuck:
            self._expire_queue(queue, now)
            wake_at = min(wake_at, self.acc.next_deadline(queue))
        for address in self._wanted:
            wake_at = min(wake_at, self._connect(address, now))
        return wake_at

    def _route(self, topic: str, partition: int) -> BrokerLink | None:
        leader = self.cluster.leader(topic, partition)
        if leader is None:
            self._metadata_stale = True
            return None
        address = (leader.host, leader.port)
        link = self._links.get(address)
        if link is None or link.state is not LinkState.READY:
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
        produces = [rq.ProduceRequest(b.topic, b.partition, b.encoded or b"") for b in batches]
        if self.config.acks:
            parts = rq.encode_produce_ack_parts(produces, self.config.acks, int(self.config.request_timeout * 1000))
        else:
            parts = rq.encode_multiproduce_parts(produces)
        self._queue(link, Kind.PRODUCE, parts, now, batches=batches)

    def _queue(self, link: BrokerLink, kind: Kind, frame: Sequence[bytes | memoryview], now: float, *,
               batches: list[ProducerBatch] | None = None, topics: list[str] | None = None) -> None:
        answered = kind is not Kind.PRODUCE or bool(self.config.acks)  # acks=none: MULTIPRODUCE, no answer
        link.queue(kind, frame, now + self._response_timeout(), answered=answered, batches=batches, topics=topics)

    def _response_timeout(self) -> float:
        # the broker waits up to request.timeout.ms for an fsync before answering; allow for the answer
        return self.config.request_timeout * (2 if self.config.acks == rq.Acks.FSYNC else 1)

    # ---------------------------------------------------------------- outcomes

    def _complete(self, batch: ProducerBatch, first_offset: int) -> None:
        batch.first_offset = first_offset
        self._finish(batch)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        batch.error = error
        self._finish(batch)

    def _finish(self, batch: ProducerBatch) -> None:
        batch.encoded = None
        batch.payloads = []
        self.acc.release(batch, batch.size)
        run_callbacks(batch.resolve(), self.config.client_id)

    def _retry_or_fail(self, batches: Sequence[ProducerBatch], error: BaseException, now: float,
                       unsent: Sequence[ProducerBatch] = ()) -> None:
        """Fail ``batches`` with ``error``, or put them back for another attempt when it is
        retriable and they have attempts left; ``unsent`` (never written) go back uncounted.
        Order within each partition is kept."""
        retry: list[ProducerBatch] = []
        retriable = is_retriable(error) and self._stop_error is None
        for batch in batches:
            if retriable and batch.attempts < self.config.retries:
                batch.attempts += 1
                batch.not_before = now + self.config.retry_backoff
                batch.deadline = batch.not_before + self.config.request_timeout
                retry.append(batch)
            else:
                self._fail(batch, error)
        if retry:
            log.warning("producer.retry", client_id=self.config.client_id, batches=len(retry),
                        partitions=sorted({f"{b.topic}-{b.partition}" for b in retry}),
                        attempt=max(b.attempts for b in retry), retries=self.config.retries, error=str(error))
        if retry or unsent:
            self.acc.requeue([*retry, *unsent])
            self._changed = True

    def _expire_queue(self, queue: PartitionQueue, now: float) -> None:
        expired = self.acc.expire(queue, now)
        if not expired:
            return
        leader = self.cluster.leader(queue.topic, queue.partition)
        if leader is None:
            reason = f"no leader known for the partition ({self._metadata_error})"
        else:
            link = self._links.get((leader.host, leader.port))
            reason = f"broker {leader.host}:{leader.port} unreachable" + (
                f" ({link.state.name.lower()})" if link is not None else "")
        count = sum(len(b.lengths) or len(b.payloads) for b in expired)
        log.warning("producer.batch_expired", client_id=self.config.client_id, topic=queue.topic,
                    partition=queue.partition, messages=count, reason=reason)
        error = ProducerTimeout(f"{count} message(s) for {queue.topic}-{queue.partition} not sent within "
                                f"request.timeout.ms={self.config.request_timeout * 1000:.0f}: {reason}")
        for batch in expired:
            self._fail(batch, error)

    def _expire(self, now: float) -> float:
        """Fail whatever waited past its deadline; return the next deadline."""
        wake_at = float("inf")
        for link in list(self._links.values()):
            if link.state is LinkState.CONNECTING:
                if link.connect_deadline <= now:
                    self._link_failed(link, ConnectionClosed(f"cannot connect to broker {link.name}: timed out"), now)
                else:
                    wake_at = min(wake_at, link.connect_deadline)
                continue
            deadline = link.next_deadline()
            if deadline is None:
                continue
            if deadline <= now:
                timeout_ms = self._response_timeout() * 1000
                self._link_failed(link, ProducerTimeout(
                    f"no response from broker {link.name} within {timeout_ms:.0f} ms (request.timeout.ms): "
                    "the messages may or may not have been appended"), now)
            else:
                wake_at = min(wake_at, deadline)
        for topic, since in self.acc.unassigned().items():
            deadline = since + self.config.request_timeout
            if deadline > now:
                wake_at = min(wake_at, deadline)
                continue
            log.warning("producer.metadata_timeout", client_id=self.config.client_id, topic=topic,
                        reason=self._metadata_error)
            error = ProducerTimeout(f"the partitions of topic {topic!r} were not known within request.timeout.ms="
                                    f"{self.config.request_timeout * 1000:.0f}: {self._metadata_error}")
            run_callbacks(self.acc.fail_unassigned(topic, error, forget=True), self.config.client_id)
        return wake_at

    def _abort(self, error: BaseException) -> None:
        """Fail everything queued, unassigned and in flight with ``error``."""
        batches, callbacks = self.acc.abort(error)
        run_callbacks(callbacks, self.config.client_id)
        for link in self._links.values():
            if link.sock is not None:
                self._close_socket(link)
            for request in link.reset():
                batches.extend(request.batches)
        for batch in batches:
            self._fail(batch, error)

    # ---------------------------------------------------------------- metadata

    def _update_metadata(self, now: float) -> float:
        """Send a METADATA request if one is due; return when to look again."""
        if self._metadata_link is not None or not self.acc.topics:
            return float("inf")
        waiting = any(t not in self._probing for t in self.acc.unassigned())
        due = now if (waiting or self._metadata_stale) else self._metadata_at + self.config.metadata_max_age
        due = max(due, self._metadata_not_before)
        if due > now:
            return due
        link, wake_at = self._metadata_target(now)
        if link is None:
            return wake_at
        names = self.acc.topic_names()
        self._queue(link, Kind.METADATA, [rq.encode_metadata(names)], now, topics=names)
        self._metadata_link = link
        self._metadata_not_before = now + self.config.retry_backoff
        self._write(link)
        return float("inf")

    def _metadata_target(self, now: float) -> tuple[BrokerLink | None, float]:
        """A ready connection with room for a request, or (None, when to look again) after
        starting to connect to the next candidate (known brokers, then bootstrap addresses)."""
        links = self._links.values()
        ready = [lk for lk in links if lk.state is LinkState.READY and lk.in_flight < self.config.max_in_flight]
        if ready:
            return min(ready, key=lambda lk: lk.in_flight), now
        if any(lk.state is not LinkState.DISCONNECTED for lk in links):
            return None, float("inf")  # connecting, or busy: a connect or a response wakes the loop
        known = [(b.host, b.port) for b in self.cluster.brokers.values()]
        candidates = known + [a for a in self.cluster.bootstrap if a not in known]
        for i in range(len(candidates)):
            address = candidates[(self._next_candidate + i) % len(candidates)]
            link = self._links.get(address)
            if link is None or link.retry_at <= now:
                self._next_candidate += i + 1
                return None, self._connect(address, now)
        return None, min(lk.retry_at for lk in links)

    def _on_metadata(self, request: InFlight, body: memoryview, now: float) -> None:
        self._metadata_link = None
        error, meta = rq.decode_metadata_response(body)
        if error:
            self._metadata_error = f"metadata request failed: {error_for_code(error)}"
            self._metadata_stale = True
            return
        self.cluster.update(meta, request.topics)
        self._metadata_at = now
        self._metadata_stale = False
        self._metadata_error = "metadata did not list the topic"
        waiting = self.acc.unassigned()
        for t in meta.topics:
            if t.error == 0 and t.partitions > 0:
                run_callbacks(self.acc.assign(t.topic, t.partitions), self.config.client_id)
            elif t.error == ErrorCode.UNKNOWN_TOPIC and t.topic in waiting:
                self._probe(t.topic, now)
            elif t.error and t.topic in waiting:
                exc = error_for_code(t.error, f"topic {t.topic!r}: {error_for_code(t.error)}")
                run_callbacks(self.acc.fail_unassigned(t.topic, exc, forget=True), self.config.client_id)
        log.debug("producer.metadata_updated", client_id=self.config.client_id, brokers=len(meta.brokers),
                  topics={t.topic: t.partitions for t in meta.topics})

    def _probe(self, topic: str, now: float) -> None:
        """Produce nothing to partition 0 of ``topic``: the broker creates the topic (if it
        creates topics on produce) and refuses the empty set with InvalidMessage."""
        if topic in self._probing:
            return
        link = next((lk for lk in self._links.values() if lk.state is LinkState.READY), None)
        if link is None:
            return
        self._probing.add(topic)
        log.info("producer.creating_topic", client_id=self.config.client_id, topic=topic, broker=link.name)
        frame = rq.encode_produce_ack([rq.ProduceRequest(topic, 0, b"")], rq.Acks.APPEND,
                                      int(self.config.request_timeout * 1000))
        self._queue(link, Kind.PROBE, [frame], now, topics=[topic])
        self._write(link)

    def _on_probe(self, request: InFlight, body: memoryview) -> None:
        topic = request.topics[0]
        self._probing.discard(topic)
        error, acks = rq.decode_produce_ack_response(body)
        code = error or (acks[0].error if len(acks) == 1 else int(ErrorCode.UNKNOWN))
        if code in (0, InvalidMessage.code):  # the topic exists now
            self._metadata_not_before = 0.0
            self._metadata_stale = True
            return
        if code == UnknownTopic.code:
            exc: BrokerError = UnknownTopic(f"topic {topic!r} does not exist and the broker does not create "
                                            "topics on produce (auto.create.topics.enable=false)")
        else:
            exc = error_for_code(code, f"creating topic {topic!r}: {error_for_code(code)}")
        log.warning("producer.topic_unavailable", client_id=self.config.client_id, topic=topic, error=str(exc))
        run_callbacks(self.acc.fail_unassigned(topic, exc, forget=True), self.config.client_id)

    # ---------------------------------------------------------------- responses

    def _on_response(self, link: BrokerLink, request: InFlight, body: memoryview, now: float) -> None:
        if request.kind is Kind.METADATA:
            self._on_metadata(request, body, now)
        elif request.kind is Kind.PROBE:
            self._on_probe(request, body)
        else:
            self._on_produce(link, request, body, now)

    def _on_produce(self, link: BrokerLink, request: InFlight, body: memoryview, now: float) -> None:
        batches = request.batches
        try:
            error, acks = rq.decode_produce_ack_response(body)
            if not error and len(acks) != len(batches):
                raise DecodeError(f"produce response has {len(acks)} acknowledgements for {len(batches)} partitions")
        except DecodeError as exc:
            for batch in batches:
                self._fail(batch, exc)
            return
        if error:
            self._retry_or_fail(batches, error_for_code(error, f"produce to {link.name}: {error_for_code(error)}"), now)
            return
        failed: dict[int, list[ProducerBatch]] = {}
        for batch, ack in zip(batches, acks):
            if ack.error == 0:
                self._complete(batch, ack.first_offset)
            else:
                failed.setdefault(ack.error, []).append(batch)
        for code, group in failed.items():
            refusal = error_for_code(code, f"produce to {group[0].topic}-{group[0].partition}: {error_for_code(code)}")
            if isinstance(refusal, (UnknownTopic, WrongPartition)):
                self._metadata_stale = True
            self._retry_or_fail(group, refusal, now)

    # ---------------------------------------------------------------- connections

    def _connect(self, address: Address, now: float) -> float:
        """Start connecting to ``address`` unless connected, connecting, or backing off; return
        when to try again."""
        link = self._links.get(address)
        if link is None:
            link = self._links[address] = BrokerLink(address)
        if link.state is not LinkState.DISCONNECTED:
            return float("inf")
        if link.retry_at > now:
            return link.retry_at
        try:
            link.connect(now, self.config.request_timeout)
        except ConnectionClosed as exc:
            self._link_failed(link, exc, now)
            return link.retry_at
        self._watch(link)
        return link.connect_deadline

    def _on_writable(self, link: BrokerLink) -> None:
        if link.state is LinkState.CONNECTING:
            try:
                link.finish_connect()
            except ConnectionClosed as exc:
                self._link_failed(link, exc, time.monotonic())
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
                self._complete(batch, -1)
        self._watch(link)

    def _on_readable(self, link: BrokerLink) -> None:
        now = time.monotonic()
        try:
            link.receive()
            # one response at a time: if handling one fails the link, the requests behind it
            # are still in flight on it and are settled by _link_failed
            while link.state is LinkState.READY and (response := link.next_response()) is not None:
                request, body = response
                try:
                    self._on_response(link, request, body, now)
                except DecodeError as exc:  # a malformed metadata or probe answer costs this connection only
                    raise ConnectionClosed(f"bad response from broker {link.name}: {exc}") from exc
        except ConnectionClosed as exc:
            self._link_failed(link, exc, now)

    def _watch(self, link: BrokerLink) -> None:
        if link.sock is None:
            return
        events = link.wanted_events()
        if events == link.events:
            return
        if link.events:
            self._selector.modify(link.sock, events, link)
        else:
            self._selector.register(link.sock, events, link)
        link.events = events

    def _close_socket(self, link: BrokerLink) -> None:
        if link.sock is None:
            return
        if link.events:
            self._selector.unregister(link.sock)
        link.sock.close()

    def _link_failed(self, link: BrokerLink, error: ConnectionClosed | ProducerTimeout, now: float) -> None:
        """Close the connection and settle what was in flight on it: requests not written at
        all go back as they were, the others are retried or failed with ``error``."""
        written, was_ready = link.written, link.state is LinkState.READY
        self._close_socket(link)
        requests = link.reset()
        link.failures += 1
        link.retry_at = now + self.config.retry_backoff
        self._metadata_stale = True
        self._changed = True
        self._metadata_error = str(error)
        (log.warning if was_ready else log.info)(
            "producer.connection_failed", client_id=self.config.client_id, broker=link.name, error=str(error),
            in_flight=len(requests))
        sent: list[ProducerBatch] = []
        unsent: list[ProducerBatch] = []
        for request in requests:
            if request.kind is Kind.METADATA:
                self._metadata_link = None
            elif request.kind is Kind.PROBE:
                self._probing.discard(request.topics[0])
            elif request.start >= written:
                unsent.extend(request.batches)
            else:
                sent.extend(request.batches)
        self._retry_or_fail(sent, error, now, unsent)


def run_callbacks(callbacks: Sequence[Callable[[], Any]], client_id: str) -> None:
    """Run completion callbacks; one that raises is logged and the others still run."""
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("producer.callback_failed", client_id=client_id)
