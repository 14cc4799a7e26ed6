"""The producer: ``send`` returns a SendResponse at once; a background thread does the rest.

    with Producer({"bootstrap.servers": "localhost:9092"}) as producer:
        response = producer.send("events", b"payload", key=b"user-42")
        response.on_completion(lambda r: ...)
        offset = response.get_offset()

Threads (seed 003): the caller's thread serializes, partitions and queues (it never
waits for the network, only for buffer space when ``buffer.memory`` is used up); one
send thread (rill.client.producer.sender) fetches metadata, batches, compresses, sends
and completes the futures. Every message ends with an offset or an error on its
future; none is dropped silently, ``close`` included.

Thread-safety: ``send``, ``send_many``, ``flush`` and ``close`` may be called from any
number of threads. Completion callbacks run on the send thread.
"""

from __future__ import annotations

import atexit
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import structlog

from rill.client.client_config import ConfigError, Setting, choice, non_negative, optional_callable, positive, resolve, servers
from rill.client.errors import InvalidTopic, MessageTooLarge, WrongPartition
from rill.client.producer.accumulator import RecordAccumulator, Unassigned, encoded_ends
from rill.client.producer.audit_ledger import AuditEmitter, AuditLedger
from rill.client.producer.errors import ProducerClosed, ProducerTimeout
from rill.client.producer.future import MESSAGE_OVERHEAD, BatchResult, SendResponse
from rill.client.producer.partitioner import partitioner_for
from rill.client.producer.metadata_updater import MetadataSource, MetadataUpdater, ProducerMetadata, UpdaterFactory
from rill.client.producer.metrics import ProducerMetrics
from rill.client.producer.sender import Sender, SenderConfig
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import CODEC_GZIP, CODEC_NONE
from rill.client.security.client_security import SECURITY_SETTINGS, from_settings
from rill.client.topic_names import is_valid_topic, validate_topic

__all__ = ["Producer", "SETTINGS"]

log = structlog.get_logger(__name__)

Serializer = Callable[[Any], Any]


def _audit_topic(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a topic name, got {value!r}")
    if value and not is_valid_topic(value):
        raise ValueError(f"invalid topic name {value!r}")
    return value


def _partitioner(value: Any) -> Any:
    partitioner_for(value)  # validate now; the producer builds its own instance
    return value


SETTINGS = (
    Setting("bootstrap.servers", "localhost:9092",
            "brokers to ask for metadata first, host:port[,host:port...]", servers),
    Setting("zookeeper.connect", "",
            "host:port[,host:port...][/chroot]: find brokers and partitions in ZooKeeper (Kafka 0.7) instead of "
            "asking bootstrap.servers", str),
    Setting("zookeeper.session.timeout.ms", 6000, "ZooKeeper session timeout (with zookeeper.connect)",
            positive(int)),
    Setting("client.id", "rill-producer", "a name for this producer in logs and thread names", str),
    Setting("acks", "append", "when a send counts as done: none, append (the leader has it), fsync (on the "
            "leader's disk), all (every in-sync replica has it; replicated topics)",
            choice("none", "append", "fsync", "all")),
    Setting("batch.size", 65536, "bytes of messages per partition batch", positive(int)),
    Setting("linger.ms", 1, "how long a partition's batch waits for more messages before it is sent",
            non_negative(float)),
    Setting("buffer.memory", 33554432, "bytes of messages queued or in flight, at most", positive(int)),
    Setting("max.block.ms", 60000, "how long send waits for buffer space before raising BufferFull",
            non_negative(float)),
    Setting("max.request.size", 1048576, "bytes per produce request, and the largest message", positive(int)),
    Setting("compression.type", "none", "none or gzip (one gzip message per batch)", choice("none", "gzip")),
    Setting("retries", 3, "times a batch is sent again after a retriable error", non_negative(int)),
    Setting("retry.backoff.ms", 100, "wait before a retry, a reconnect or another metadata request",
            non_negative(float)),
    Setting("max.in.flight.requests.per.connection", 5, "requests awaiting a response per broker",
            positive(int)),
    Setting("request.timeout.ms", 30000, "how long a request may wait for its response, and a ready batch "
            "for a broker", positive(float)),
    Setting("metadata.max.age.ms", 300000, "refresh metadata at least this often", positive(float)),
    Setting("partitioner", "default", "default, round_robin, random, or a callable (topic, key, partitions) -> int",
            _partitioner),
    Setting("key.serializer", None, "callable turning a key into bytes (default: bytes as they are, str as UTF-8)",
            optional_callable),
    Setting("value.serializer", None, "callable turning a value into bytes (default: as for keys)",
            optional_callable),
    Setting("audit.topic", "", "send audit events (acknowledged offsets per topic and send window) to this "
            "topic; empty: off. Needs acks append, fsync or all", _audit_topic),
    Setting("audit.window.ms", 60000, "the length of an audit send window", positive(int)),
    *SECURITY_SETTINGS,
)

_ACKS = {"none": 0, "append": int(rq.Acks.APPEND), "fsync": int(rq.Acks.FSYNC), "all": int(rq.Acks.ALL)}
_CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP}


def _to_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a {what} must be bytes or str, not {type(value).__name__} (or set {what}.serializer)")


def _zookeeper_source(connect: str, session_timeout: float, connect_timeout: float) -> MetadataSource:
    """The ZooKeeper registry as the producer's metadata source (``zookeeper.connect``).

    Imported here, the one place that makes it, rather than at the top: the ZooKeeper
    source builds on this package (its updater is a MetadataUpdater), so rill.client.producer
    does not depend on rill.client.zookeeper, and a producer without ZooKeeper does not load it.
    """
    from rill.client.zookeeper.producer_metadata import ZkRegistrySource

    return ZkRegistrySource(connect, session_timeout, connect_timeout)


def _closer(ref: weakref.ReferenceType[Producer], timeout: float) -> Callable[[], None]:
    """An atexit hook: a producer still open when the interpreter exits sends what it holds
    (for up to ``request.timeout.ms``) instead of dropping it with its daemon send thread."""

    def close_at_exit() -> None:
        producer = ref()
        if producer is not None and not producer._closed:
            log.warning("producer.closed_at_exit", client_id=producer.client_id)
            producer.close(timeout)

    return close_at_exit


class Producer:
    """An asynchronous, batching producer (see the module doc and docs/clients.md).

    ``config`` takes Kafka-style dotted keys; keyword arguments use underscores
    (``linger_ms=5``) and win. See :data:`SETTINGS` for every key and default.

    Raises:
        ConfigError: an unknown key or a bad value.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = resolve(SETTINGS, config, kwargs)
        c = self.config
        self.client_id: str = c["client.id"]
        self._partitioner = partitioner_for(c["partitioner"])
        self._key_serializer: Serializer | None = c["key.serializer"]
        self._value_serializer: Serializer | None = c["value.serializer"]
        self._max_message = min(c["max.request.size"], c["buffer.memory"])
        self._buffer_memory: int = c["buffer.memory"]
        self._closed = False
        self._close_lock = threading.Lock()
        request_timeout = c["request.timeout.ms"] / 1000
        self._acc = RecordAccumulator(
            batch_size=c["batch.size"], linger=c["linger.ms"] / 1000, buffer_memory=c["buffer.memory"],
            max_block=c["max.block.ms"] / 1000, request_timeout=request_timeout, partitioner=self._partitioner)
        self._metrics = ProducerMetrics()
        self._acc.on_failed = self._metrics.failed
        self._metadata_source: MetadataSource | None = None
        metadata: UpdaterFactory = MetadataUpdater
        bootstrap = c["bootstrap.servers"]
        if c["zookeeper.connect"]:
            self._metadata_source = _zookeeper_source(c["zookeeper.connect"], c["zookeeper.session.timeout.ms"] / 1000,
                                                      request_timeout)
            metadata = self._metadata_source.updater(lambda: self._sender.wakeup())
            bootstrap = []
        self._audit = self._audit_emitter()
        self._sender = Sender(self._acc, ProducerMetadata(bootstrap), SenderConfig(
            acks=_ACKS[c["acks"]], codec=_CODECS[c["compression.type"]],
            max_in_flight=c["max.in.flight.requests.per.connection"], request_timeout=request_timeout,
            retries=c["retries"], retry_backoff=c["retry.backoff.ms"] / 1000,
            metadata_max_age=c["metadata.max.age.ms"] / 1000, max_request_size=c["max.request.size"],
            client_id=self.client_id, security=from_settings(c)), metadata, self._audit.ledger.record_batch if self._audit else None,
            self._metrics)
        self._sender.start()
        if self._audit is not None:
            self._audit.start()
        self._at_exit = _closer(weakref.ref(self), request_timeout)
        atexit.register(self._at_exit)
        log.info("producer.started", client_id=self.client_id, zookeeper=c["zookeeper.connect"] or None,
                 bootstrap=[f"{h}:{p}" for h, p in bootstrap], acks=c["acks"],
                 batch_size=c["batch.size"], linger_ms=c["linger.ms"], compression=c["compression.type"],
                 retries=c["retries"], audit_topic=c["audit.topic"] or None)

    def _audit_emitter(self) -> AuditEmitter | None:
        """The audit events' bookkeeping and thread when ``audit.topic`` is set (not started yet)."""
        c = self.config
        if not c["audit.topic"]:
            return None
        if c["acks"] == "none":
            raise ConfigError("setting 'audit.topic': audit events count acknowledged messages; "
                              "acks=none acknowledges nothing (use append, fsync or all)")
        ledger = AuditLedger(c["audit.topic"], c["audit.window.ms"], monotonic=self._acc.clock)
        return AuditEmitter(ledger, self._send_audit_event, self.client_id, socket.gethostname())

    def _send_audit_event(self, topic: str, value: bytes) -> SendResponse:
        """``send`` for the audit events: unkeyed, and still allowed while ``close`` sends the last ones."""
        if len(value) + MESSAGE_OVERHEAD > self._max_message:
            return self._failed(topic, 1, MessageTooLarge(f"an audit event of {len(value)} bytes is larger than "
                                                          "max.request.size or buffer.memory"))
        state = self._acc.topics.get(topic)
        if state is None or state.partitions is None:
            return self._send_unassigned(topic, [value], None, None)
        return self._acc.append(state, state.choose(self._partitioner, None), value)

    # ---------------------------------------------------------------- sending

    def send(self, topic: str, value: Any, key: Any = None, partition: int | None = None) -> SendResponse:
        """Queue one message and return its :class:`SendResponse` at once.

        ``key`` (optional) chooses the partition through the partitioner; it is not stored
        (the Kafka 0.7 message format has no key). ``partition`` overrides both.

        Errors about the message (invalid topic name, a partition that does not exist, a
        message larger than ``max.request.size``) come back on the response.

        Raises:
            BufferFull: ``buffer.memory`` stayed full for ``max.block.ms``.
            ProducerClosed: the producer is closed.
            TypeError: the value or key is not bytes or str and no serializer is set.
        """
        if self._closed:
            raise ProducerClosed("send after close")
        serializer = self._value_serializer
        if serializer is not None:
            value = _to_bytes(serializer(value), "value")
        elif type(value) is not bytes:
            value = _to_bytes(value, "value")
        if key is not None:
            key = self._key_bytes(key)
        if len(value) + MESSAGE_OVERHEAD > self._max_message:
            return self._failed(topic, 1, MessageTooLarge(
                f"a message of {len(value)} bytes is larger than max.request.size or buffer.memory"))
        state = self._acc.topics.get(topic)
        count = state.partitions if state is not None else None
        if state is None or count is None:
            return self._send_unassigned(topic, [value], key, partition)
        if partition is None:
            partition = state.choose(self._partitioner, key)
        elif not 0 <= partition < count:
            return self._missing_partition(topic, partition, count, 1)
        return self._acc.append(state, partition, value)

    def send_many(self, topic: str, values: Iterable[Any], key: Any = None,
                  partition: int | None = None) -> SendResponse:
        """Queue several messages for one partition, in order, and return one
        :class:`SendResponse` for all of them (``get_offsets()`` gives each offset).

        The partition is chosen once, from ``key`` (or round robin), unless given. All
        the messages are queued or none: room for all of them is reserved at once.

        Raises:
            ValueError: the messages together are larger than ``buffer.memory``.
            BufferFull, ProducerClosed, TypeError: as :meth:`send`.
        """
        if self._closed:
            raise ProducerClosed("send after close")
        serializer = self._value_serializer
        if serializer is not None:
            payloads = [_to_bytes(serializer(v), "value") for v in values]
        else:
            payloads = list(values)
            if set(map(type, payloads)) - {bytes}:
                payloads = [_to_bytes(v, "value") for v in payloads]
        if not payloads:
            return SendResponse(((BatchResult.done_empty(topic), 0, 0),), 0)
        if key is not None:
            key = self._key_bytes(key)
        ends = encoded_ends(payloads)
        if ends[-1] > self._buffer_memory:
            raise ValueError(f"{len(payloads)} messages of {ends[-1]} bytes do not fit in buffer.memory="
                             f"{self._buffer_memory}: send them in smaller groups")
        if max(map(len, payloads)) + MESSAGE_OVERHEAD > self._max_message:
            return self._failed(topic, len(payloads), MessageTooLarge(
                "a message is larger than max.request.size or buffer.memory"))
        state = self._acc.topics.get(topic)
        count = state.partitions if state is not None else None
        if state is None or count is None:
            return self._send_unassigned(topic, payloads, key, partition, ends)
        if partition is None:
            partition = state.choose(self._partitioner, key)
        elif not 0 <= partition < count:
            return self._missing_partition(topic, partition, count, len(payloads))
        return self._acc.append_many(state, partition, payloads, ends)

    def _send_unassigned(self, topic: str, payloads: list[bytes], key: bytes | None, partition: int | None,
                         ends: list[int] | None = None) -> SendResponse:
        try:
            validate_topic(topic)
        except InvalidTopic as exc:
            return self._failed(str(topic), len(payloads), exc)
        if partition is not None and partition < 0:
            return self._failed(topic, len(payloads), WrongPartition(f"partition {partition} does not exist"))
        return self._acc.append_unassigned(topic, payloads, ends or encoded_ends(payloads), key, partition)

    def _key_bytes(self, key: Any) -> bytes:
        if self._key_serializer is not None:
            return _to_bytes(self._key_serializer(key), "key")
        return _to_bytes(key, "key")

    def _missing_partition(self, topic: str, partition: int, partitions: int, count: int) -> SendResponse:
        return self._failed(topic, count, WrongPartition(
            f"partition {partition} of topic {topic!r} does not exist (it has {partitions} partitions)"))

    def _failed(self, topic: str, count: int, error: BaseException) -> SendResponse:
        """A response failed at once, before anything was queued (counted in metrics() as errors)."""
        self._metrics.failed(topic, count)
        return SendResponse(((BatchResult.failed(topic, error), 0, count),), count)

    # ---------------------------------------------------------------- flush and close

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now, without waiting for ``linger.ms``, and wait until
        every message sent before this call has an offset or an error.

        Raises:
            ProducerTimeout: some were still pending after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self._flush_until(deadline, timeout)
        if self._audit is not None and self._audit.emit_due():
            self._flush_until(deadline, timeout)

    def _flush_until(self, deadline: float | None, timeout: float | None) -> None:
        pending = self._acc.begin_flush()
        self._sender.wakeup()
        try:
            i = 0
            while i < len(pending):
                item = pending[i]
                i += 1
                remaining = None if deadline is None else deadline - time.monotonic()
                if not item.wait(remaining):
                    left = sum(1 for p in pending[i - 1:] if not p.resolved)
                    raise ProducerTimeout(f"flush: {left} batch(es) still pending after {timeout} s")
                if isinstance(item, Unassigned):
                    pending.extend(item.batches)
        finally:
            self._acc.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the send thread. Idempotent; later sends raise ProducerClosed.

        With a ``timeout`` (seconds), messages still pending when it runs out fail with
        :class:`ProducerClosed` (their futures say so). Called from a completion callback
        (the send thread), it cannot wait: pending messages fail at once.
        """
        with self._close_lock:
            if self._closed:
                if threading.current_thread() is not self._sender.thread:
                    self._sender.thread.join()
                return
            self._closed = True
        atexit.unregister(self._at_exit)
        in_sender = threading.current_thread() is self._sender.thread
        if not in_sender:
            try:
                self.flush(timeout)
                self._close_audit(timeout)
            except ProducerTimeout as exc:
                log.warning("producer.close_timed_out", client_id=self.client_id, reason=str(exc))
        elif self._audit is not None:
            self._audit.stop()
            log.warning("producer.audit_unsent", client_id=self.client_id, windows=self._audit.ledger.pending(),
                        reason="closed from the send thread, which cannot wait for the events")
        self._acc.close()
        self._sender.stop(ProducerClosed("the producer was closed before these messages were acknowledged"))
        if not in_sender:
            self._sender.thread.join()
        if self._metadata_source is not None:
            self._metadata_source.close()
        log.info("producer.closed", client_id=self.client_id)

    def _close_audit(self, timeout: float | None) -> None:
        """Stop the audit thread, then send and flush the events of every window (the current one too)."""
        if self._audit is None:
            return
        self._audit.stop()
        if self._audit.emit_all():
            self._flush_until(None if timeout is None else time.monotonic() + timeout, timeout)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of messages queued or in flight now (at most ``buffer.memory``)."""
        return self._acc.used

    def metrics(self) -> dict[str, Any]:
        """Totals since the producer started (kafka-python's ``metrics()``, as plain numbers): records,
        bytes, batches and requests sent, errors, retries, requests in flight, buffer use, request
        latency, and per topic counts; :meth:`ProducerMetrics.snapshot
        <rill.client.producer.metrics.ProducerMetrics.snapshot>` lists every key. Cheap (no request):
        call it as often as you like, from any thread.
        """
        return self._metrics.snapshot(self._acc.used, self._buffer_memory)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Producer {self.client_id} {state}>"
