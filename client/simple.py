"""Blocking, stateless request/response clients for one broker, after Kafka 0.7's SimpleConsumer.

:class:`SimpleConsumer` fetches from an offset the caller keeps (nothing is stored on
the broker); :class:`SimpleProducer` appends message sets, acknowledged (PRODUCE_ACK)
or fire-and-forget (0.7's PRODUCE and MULTIPRODUCE). Each holds one
:class:`~rill.client.blocking_connection.BrokerConnection`, opened on first use.

Both are blocking: each call sends its request and waits, in the calling thread, for
the broker's answer (or, fire-and-forget, until the request is written), for at most
``timeout`` seconds per socket operation (None: no limit); there is no background
thread, no batching and no group membership. For a client that does not block the
caller, use :class:`~rill.client.producer.Producer` (sends return a future) and
:class:`~rill.client.consumer.Consumer` (``poll()`` with a timeout).

Errors:

- a broker error code raises its :class:`~rill.client.errors.BrokerError` subclass
  (``UnknownTopic``, ``OffsetOutOfRange`` ...); :meth:`SimpleConsumer.multifetch` and
  :meth:`SimpleConsumer.fetch_wait` instead report them per fetch (see
  :class:`FetchResult`), so one bad partition does not hide the others' data;
- a message that fails its CRC or framing check raises
  :class:`~rill.client.errors.CorruptMessageError` and is never returned;
- a broken connection raises :class:`~rill.client.errors.ConnectionClosed`. Reads
  (fetches, offsets, metadata) reconnect and retry once first, as Kafka 0.7's
  SimpleConsumer does; produces are not retried (a retry could append twice).

Thread-safety: each method holds the client's lock for the whole request, so a
client may be shared by threads (requests are then serialized).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import NamedTuple

import structlog

from rill.client.blocking_connection import DEFAULT_MAX_RESPONSE_SIZE, SAME_TIMEOUT, BrokerConnection
from rill.client.errors import BrokerError, ConnectionClosed, InvalidFetchSize, error_for_code
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import DecodeError
from rill.client.protocol.messages import CODEC_NONE, LENGTH, Message, decode_message_set, encode_message_set
from rill.client.security.client_security import ClientSecurity
from rill.client.topic_names import validate_topic

__all__ = ["FetchResult", "SimpleConsumer", "SimpleProducer", "DEFAULT_MAX_FETCH_SIZE", "DEFAULT_FETCH_SIZE_LIMIT"]

log = structlog.get_logger(__name__)

DEFAULT_MAX_FETCH_SIZE = 1_048_576
DEFAULT_FETCH_SIZE_LIMIT = 64 * 1_048_576
ACK_TIMEOUT_MARGIN = 5.0  # seconds the client waits beyond the broker's own ack timeout


class FetchResult(NamedTuple):
    """The outcome of one fetch of a multi-fetch.

    ``messages`` are the whole, CRC-checked messages from ``offset`` (empty at the log
    end or on error). ``next_offset`` is where the next fetch starts: ``offset`` plus
    the bytes of whole messages returned (``offset`` itself on error or at the end).
    ``error`` is the broker's error for this partition, or ``None``.
    """

    topic: str
    partition: int
    offset: int
    messages: list[Message]
    next_offset: int
    error: BrokerError | None = None


class _Client:
    """A lazily opened connection, with one lock around each request."""

    def __init__(self, host: str, port: int, timeout: float | None, max_response_size: int,
                 security: ClientSecurity | None = None, client_id: str = "") -> None:
        self.host = host
        self.security = security
        self.client_id = client_id  # sent once per connection (CLIENT_HELLO), for the broker's client quotas
        self.port = port
        self.timeout = timeout
        self.max_response_size = max_response_size
        self._conn: BrokerConnection | None = None
        self._lock = threading.Lock()
        self._broker = f"{host}:{port}"  # log context (not a bound logger: that would pin the config)

    def connect(self) -> None:
        """Open the connection now rather than on first use.

        Raises:
            ConnectionClosed: the broker cannot be reached.
        """
        with self._lock:
            self._connection()

    def _connection(self) -> BrokerConnection:
        if self._conn is None or self._conn.closed:
            self._conn = BrokerConnection(self.host, self.port, self.timeout,
                                          max_response_size=self.max_response_size, security=self.security,
                                          client_id=self.client_id)
        return self._conn

    def _request(self, frame: bytes, *, retry: bool, timeout: float | None = SAME_TIMEOUT) -> memoryview:
        with self._lock:
            conn = self._connection()
            try:
                return conn.request(frame, timeout)
            except ConnectionClosed as exc:
                if not retry:
                    raise
                log.info("client.reconnect", broker=self._broker, reason=str(exc))
            except BaseException:  # interrupted mid-request: the response stream position is lost
                conn.close()
                raise
            conn = self._connection()
            try:
                return conn.request(frame, timeout)
            except BaseException:
                conn.close()
                raise

    def _send(self, frame: bytes) -> None:
        with self._lock:
            conn = self._connection()
            try:
                conn.send(frame)
            except BaseException:  # a partly sent frame would garble the stream
                conn.close()
                raise

    def close(self) -> None:
        """Close the connection; idempotent. A later request opens a new one."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class SimpleConsumer(_Client):
    """A blocking client that fetches messages and offsets from one broker; the caller keeps the offsets.

    Every method sends its request and blocks the calling thread until the broker
    answers (a fetch whose first message does not fit asks again with a larger size;
    a read whose connection broke reconnects and asks once more), waiting at most
    ``timeout`` seconds per socket operation (None: no limit; :meth:`fetch_wait` adds
    its ``max_wait_ms``); a timeout raises :class:`~rill.client.errors.ConnectionClosed`.
    Requests from several threads are serialized. For a consumer that does not block
    the caller, with group membership, use :class:`~rill.client.consumer.Consumer`.

    ``max_fetch_size`` is the default ``max_size`` of a fetch (bytes of messages per
    partition). A message bigger than the fetch size comes back cut short; the
    consumer then retries with a larger size (doubling, or straight to the message's
    size when its length field arrived) up to ``fetch_size_limit``, and raises
    :class:`InvalidFetchSize` for a message that does not fit even then.
    """

    def __init__(self, host: str, port: int, *, max_fetch_size: int = DEFAULT_MAX_FETCH_SIZE,
                 fetch_size_limit: int = DEFAULT_FETCH_SIZE_LIMIT, timeout: float | None = 30.0,
                 max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE, security: ClientSecurity | None = None,
                 client_id: str = "") -> None:
        if max_fetch_size <= 0 or fetch_size_limit < max_fetch_size:
            raise ValueError("need 0 < max_fetch_size <= fetch_size_limit")
        super().__init__(host, port, timeout, max(max_response_size, fetch_size_limit + 64), security, client_id)
        self.max_fetch_size = max_fetch_size
        self.fetch_size_limit = fetch_size_limit

    def __enter__(self) -> SimpleConsumer:
        return self

    # ---------------------------------------------------------------- fetch

    def fetch(self, topic: str, partition: int, offset: int, max_size: int | None = None) -> list[Message]:
        """Fetch the messages of ``topic``-``partition`` starting at byte ``offset``.

        Sent as rill's FETCH_WAIT without a wait, not 0.7's FETCH: the broker answers a
        0.7 FETCH at an offset inside a message with OffsetOutOfRange (what 0.7 clients
        recover from), rill's own request with the precise InvalidOffset.

        Returns:
            Whole, CRC-checked messages in offset order; the next offset to fetch is
            ``messages[-1].next_offset``. Empty at the end of the log (and, as in
            Kafka 0.7, for a topic the broker does not have).

        Raises:
            OffsetOutOfRange, InvalidOffset, WrongPartition, ...: the broker's error.
            InvalidFetchSize: the message at ``offset`` is larger than ``fetch_size_limit``.
            CorruptMessageError: a message failed its CRC or framing check.
            ConnectionClosed: the broker could not be reached (after one reconnect).
        """
        size = max_size or self.max_fetch_size
        while True:
            frame = rq.encode_fetch_wait([rq.FetchRequest(topic, partition, offset, size)], 0, 0)
            error, blocks = rq.decode_multifetch_response(self._request(frame, retry=True))
            _check(error, "fetch")
            if len(blocks) != 1:
                raise DecodeError(f"fetch response has {len(blocks)} blocks for 1 fetch")
            error, data = blocks[0]
            _check(error, f"fetch of {topic}-{partition} at offset {offset}")
            messages, consumed = decode_message_set(data, topic, partition, offset)
            if messages or not data:
                return messages
            if consumed:  # only compressed wrappers holding no messages: skip them
                offset += consumed
                continue
            size = self._grown_size(topic, partition, offset, size, data)

    def multifetch(self, fetches: Sequence[rq.FetchRequest]) -> list[FetchResult]:
        """Fetch several partitions in one request (FETCH_WAIT without a wait: see :meth:`fetch`).

        Returns:
            One :class:`FetchResult` per fetch, in order. A partition's broker error is
            in its ``error`` (its messages are then empty); a message larger than the
            fetch's ``max_size`` is fetched again alone with a larger size.

        Raises:
            CorruptMessageError: a message failed its CRC check (no result is returned).
            BrokerError: the response as a whole carried an error.
            ConnectionClosed, DecodeError: the connection broke or the response is malformed.
        """
        if not fetches:
            return []
        body = self._request(rq.encode_fetch_wait(fetches, 0, 0), retry=True)
        return self._results(fetches, body)

    def fetch_wait(self, fetches: Sequence[rq.FetchRequest], max_wait_ms: int, min_bytes: int = 1) -> list[FetchResult]:
        """Long-poll: like :meth:`multifetch`, but the broker answers only once
        ``min_bytes`` are available across the fetches or ``max_wait_ms`` has passed.

        Returns, Raises: as :meth:`multifetch` (the results may all be empty after the wait).
        """
        if not fetches:
            return []
        frame = rq.encode_fetch_wait(fetches, max_wait_ms, min_bytes)
        timeout = None if self.timeout is None else self.timeout + max_wait_ms / 1000
        return self._results(fetches, self._request(frame, retry=True, timeout=timeout))

    def _results(self, fetches: Sequence[rq.FetchRequest], body: memoryview) -> list[FetchResult]:
        error, blocks = rq.decode_multifetch_response(body)
        _check(error, "multi-fetch")
        if len(blocks) != len(fetches):
            raise DecodeError(f"multi-fetch response has {len(blocks)} blocks for {len(fetches)} fetches")
        return [self._result(f, block_error, data) for f, (block_error, data) in zip(fetches, blocks)]

    def _result(self, f: rq.FetchRequest, error: int, data: memoryview) -> FetchResult:
        if error:
            exc = _error(error, f"fetch of {f.topic}-{f.partition} at offset {f.offset}")
            return FetchResult(f.topic, f.partition, f.offset, [], f.offset, exc)
        messages, consumed = decode_message_set(data, f.topic, f.partition, f.offset)
        if messages or consumed or not data:
            return FetchResult(f.topic, f.partition, f.offset, messages, f.offset + consumed)
        try:  # the first message did not fit in max_size
            size = self._grown_size(f.topic, f.partition, f.offset, f.max_size, data)
            messages = self.fetch(f.topic, f.partition, f.offset, size)
        except BrokerError as exc:
            return FetchResult(f.topic, f.partition, f.offset, [], f.offset, exc)
        next_offset = messages[-1].next_offset if messages else f.offset
        return FetchResult(f.topic, f.partition, f.offset, messages, next_offset)

    def _grown_size(self, topic: str, partition: int, offset: int, size: int, data: memoryview) -> int:
        """The next fetch size after a partial first message of ``data``, or raise InvalidFetchSize."""
        needed = 4 + LENGTH.unpack_from(data)[0] if len(data) >= 4 else size + 1
        if needed > self.fetch_size_limit or size >= self.fetch_size_limit:
            raise InvalidFetchSize(
                f"{topic}-{partition}: the message at offset {offset} needs a fetch size of at least "
                f"{needed} bytes, over the limit of {self.fetch_size_limit}")
        new_size = min(max(2 * size, needed), self.fetch_size_limit)
        log.warning("fetch.size_too_small", broker=self._broker, topic=topic, partition=partition, offset=offset,
                    fetch_size=size, new_fetch_size=new_size)
        return new_size

    # ---------------------------------------------------------------- offsets and topics

    def offsets_before(self, topic: str, partition: int, time: int, max_number: int) -> list[int]:
        """OFFSETS: up to ``max_number`` segment start offsets before ``time`` (ms since
        the epoch, or LATEST_TIME / EARLIEST_TIME), newest first, as in Kafka 0.7.

        Returns:
            The offsets, possibly empty (no data that old).

        Raises:
            BrokerError: the broker's error (WrongPartition ...).
        """
        body = self._request(rq.encode_offsets(topic, partition, time, max_number), retry=True)
        error, offsets = rq.decode_offsets_response(body)
        _check(error, f"offsets of {topic}-{partition}")
        return offsets

    def time_index(self, topic: str, partition: int, offset: int, max_entries: int = 8192) -> list[tuple[int, int]]:
        """TIME_INDEX (rill): the partition's index entries ``(offset, append time ms)``,
        ascending, from the one at or before ``offset``; at most ``max_entries`` (the
        broker caps an answer at 65,536). A message was appended at the time of the last
        entry at or before it, to within ``log.index.interval.ms`` (docs/protocol.md).

        Raises:
            BrokerError: the broker's error (OffsetOutOfRange, UnknownTopic, WrongPartition ...).
        """
        body = self._request(rq.encode_time_index(topic, partition, offset, max_entries), retry=True)
        error, entries = rq.decode_time_index_response(body)
        _check(error, f"time index of {topic}-{partition}")
        return entries

    def earliest_offset(self, topic: str, partition: int) -> int:
        """The first offset still in the log (0 when the broker returns none, as for an unknown topic)."""
        offsets = self.offsets_before(topic, partition, rq.EARLIEST_TIME, 1)
        return offsets[0] if offsets else 0

    def latest_offset(self, topic: str, partition: int) -> int:
        """The log end offset: where the next message will be appended."""
        offsets = self.offsets_before(topic, partition, rq.LATEST_TIME, 1)
        return offsets[0] if offsets else 0

    def topics(self, names: Sequence[str] = ()) -> dict[str, int]:
        """METADATA: partition count by topic name; every topic when ``names`` is empty.

        Raises:
            UnknownTopic, InvalidTopic: for a name in ``names`` the broker does not have.
        """
        result: dict[str, int] = {}
        for t in self.metadata(names).topics:
            _check(t.error, f"topic {t.topic!r}")
            result[t.topic] = t.partitions
        return result

    def metadata(self, names: Sequence[str] = ()) -> rq.Metadata:
        """METADATA: the cluster's brokers (with their gRPC ports) and each topic's partition leaders.

        Per-topic errors are in the result (``TopicMetadata.error``), not raised.
        """
        body = self._request(rq.encode_metadata(list(names)), retry=True)
        error, metadata = rq.decode_metadata_response(body)
        _check(error, "metadata")
        return metadata

    def partitions_for(self, topic: str) -> int:
        """The partition count of ``topic``.

        Raises:
            UnknownTopic: the broker does not have it. InvalidTopic: an illegal name.
        """
        validate_topic(topic)
        return self.topics([topic])[topic]

    def create_topic(self, topic: str, partitions: int) -> int:
        """Create ``topic`` with ``partitions`` partitions.

        Returns:
            The topic's partition count as the broker reports it.

        Raises:
            InvalidTopic: an illegal name (checked before anything is sent).
            BrokerError: the broker refused (InvalidRequest for a bad partition count ...).
        """
        validate_topic(topic)
        body = self._request(rq.encode_create_topic(topic, partitions), retry=False)
        error, count = rq.decode_create_topic_response(body)
        _check(error, f"create topic {topic!r}")
        return count


class SimpleProducer(_Client):
    """Append message sets to one broker.

    ``acks`` is when an acknowledged send is answered (Acks.APPEND: in the log;
    Acks.FSYNC: on disk); ``codec`` compresses each partition's batch into one wrapper
    message (CODEC_GZIP) or not (CODEC_NONE). ``ack_timeout_ms`` bounds the broker's
    wait for the fsync (default: ``timeout``).
    """

    def __init__(self, host: str, port: int, *, acks: int = rq.Acks.APPEND, codec: int = CODEC_NONE,
                 timeout: float | None = 30.0, ack_timeout_ms: int | None = None,
                 max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE, security: ClientSecurity | None = None,
                 client_id: str = "") -> None:
        super().__init__(host, port, timeout, max_response_size, security, client_id)
        self.acks = rq.Acks(acks)
        self.codec = codec
        if ack_timeout_ms is None:
            ack_timeout_ms = 30_000 if timeout is None else int(timeout * 1000)
        self.ack_timeout_ms = ack_timeout_ms
        self._read_timeout = None if timeout is None else timeout + ACK_TIMEOUT_MARGIN

    def __enter__(self) -> SimpleProducer:
        return self

    def send(self, topic: str, payloads: Sequence[bytes], partition: int = rq.ANY_PARTITION) -> rq.PartitionAck:
        """Append ``payloads`` to one partition (the broker picks one for ANY_PARTITION).

        Returns:
            The acknowledgement: the partition used, the offset of the first message
            and the offset after the last.

        Raises:
            InvalidTopic: an illegal name (nothing is sent).
            BrokerError: the broker's error for the partition (UnknownTopic,
                WrongPartition, MessageTooLarge, RequestTimedOut, StorageError ...).
            ConnectionClosed: the connection broke; the messages may or may not be appended.
        """
        return self.send_many({(topic, partition): payloads})[(topic, partition)]

    def send_many(self, batches: Mapping[tuple[str, int], Sequence[bytes]], *,
                  raise_errors: bool = True) -> dict[tuple[str, int], rq.PartitionAck]:
        """Append to several partitions in one PRODUCE_ACK request.

        Returns:
            The acknowledgement per ``(topic, partition)`` key of ``batches`` (for an
            ANY_PARTITION key, ``ack.partition`` is the partition the broker chose).
            With ``raise_errors=False`` failed partitions are returned with their error
            code and offsets of -1 instead of raising.

        Raises:
            BrokerError: the first failed partition's error (when ``raise_errors``);
                the other partitions' messages may have been appended.
            InvalidTopic, ConnectionClosed: as :meth:`send`.
        """
        keys = list(batches)
        produces = [rq.ProduceRequest(validate_topic(t), p, encode_message_set(batches[(t, p)], self.codec))
                    for t, p in keys]
        frame = rq.encode_produce_ack(produces, self.acks, self.ack_timeout_ms)
        error, acks = rq.decode_produce_ack_response(self._request(frame, retry=False, timeout=self._read_timeout))
        _check(error, "produce")
        if len(acks) != len(keys):
            raise DecodeError(f"produce response has {len(acks)} acknowledgements for {len(keys)} partitions")
        result = dict(zip(keys, acks))
        if raise_errors:
            for (topic, _), ack in result.items():
                _check(ack.error, f"produce to {topic}-{ack.partition}")
        return result

    def send_async(self, topic: str, payloads: Sequence[bytes], partition: int = rq.ANY_PARTITION) -> None:
        """Fire and forget: a Kafka 0.7 PRODUCE, which has no response.

        Nothing tells whether the broker appended the messages (it drops a set it
        refuses). Raises InvalidTopic (nothing sent) or ConnectionClosed.
        """
        self._send(rq.encode_produce(validate_topic(topic), partition, encode_message_set(payloads, self.codec)))

    def send_many_async(self, batches: Mapping[tuple[str, int], Sequence[bytes]]) -> None:
        """Fire and forget to several partitions: a Kafka 0.7 MULTIPRODUCE (no response)."""
        produces = [rq.ProduceRequest(validate_topic(topic), partition, encode_message_set(payloads, self.codec))
                    for (topic, partition), payloads in batches.items()]
        self._send(rq.encode_multiproduce(produces))

    def flush(self) -> None:
        """Wait until the broker has handled every fire-and-forget request sent so far.

        A broker handles one connection's requests in order and answers in order, so
        the answer to a small METADATA request sent after them arrives only once they
        have been handled. It does not tell whether they succeeded (0.7's PRODUCE has
        no answer). No-op when nothing was sent.

        Raises:
            ConnectionClosed: the connection broke (earlier requests may be lost).
        """
        if self._conn is None:
            return
        self._request(rq.encode_metadata(["."]), retry=False)


def _error(code: int, context: str) -> BrokerError:
    """The exception for a non-zero error code, its message saying what failed."""
    exc = error_for_code(code)
    return error_for_code(code, f"{context}: {exc}")


def _check(code: int, context: str) -> None:
    if code:
        raise _error(code, context)
