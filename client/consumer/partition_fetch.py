"""One partition's fetch: its state between fetches, and what its block of a response does.

A FETCH_WAIT carries one block per partition it asked for. The
:class:`~rill.client.consumer.fetcher.Fetcher` matches each block to the
:class:`Fetched` entry it answers and, when the partition is still current, hands it to
:func:`decode_chunk` (data) or :func:`handle_error` (an error code). The outcomes:

- data: a :class:`Chunk`; the position moves as poll() returns its messages.
- a message failing its CRC or framing check: the messages before it form a chunk;
  once they are returned, the partition fails with CorruptMessageError (the bad
  message is never returned; see SubscriptionState.fail).
- a first message bigger than the fetch: no chunk; the partition's next fetch grows to
  the message's size, up to 64 MiB (``DEFAULT_FETCH_SIZE_LIMIT``), as the simple
  consumer does; beyond that the partition fails with InvalidFetchSize.
- OffsetOutOfRange (retention deleted the data): the position is reset by
  ``auto.offset.reset`` (logged as ``consumer.offset_out_of_range``), or with "none"
  the partition fails with OffsetOutOfRange.
- UnknownTopic, RequestTimedOut, StorageError, Unknown: retried after
  ``retry.backoff.ms`` (logged); any other broker error fails the partition.

No I/O: the functions change the :class:`PartitionFetch` and the subscription only.
Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import structlog

from rill.client.consumer.subscription import EARLIEST, LATEST, SubscriptionState, TopicPartition
from rill.client.errors import CorruptMessageError, ErrorCode, InvalidFetchSize, OffsetOutOfRange, error_for_code
from rill.client.protocol.messages import LENGTH, Message, decode_message_set, scan
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT

log = structlog.get_logger(__name__)

RETRIABLE = frozenset({ErrorCode.UNKNOWN, ErrorCode.UNKNOWN_TOPIC, ErrorCode.REQUEST_TIMED_OUT,
                       ErrorCode.STORAGE_ERROR, ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                       ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE})


class Fetched(NamedTuple):
    """One partition of an in-flight request: where it fetched from and in which epoch."""

    tp: TopicPartition
    epoch: int
    offset: int
    max_size: int


class Chunk:
    """Decoded messages of one partition from one response; ``pos`` of them already returned."""

    __slots__ = ("tp", "epoch", "records", "pos", "end", "error")

    def __init__(self, tp: TopicPartition, epoch: int, records: list[Message], end: int,
                 error: BaseException | None) -> None:
        self.tp = tp
        self.epoch = epoch
        self.records = records
        self.pos = 0
        self.end = end  # the offset after the chunk's last whole message
        self.error = error  # raised (via SubscriptionState.fail) once the records are returned


class PartitionFetch:
    """Fetch state of one owned partition in one epoch."""

    __slots__ = ("epoch", "offset", "in_flight", "chunks", "size", "retry_at")

    def __init__(self, epoch: int, offset: int) -> None:
        self.epoch = epoch
        self.offset = offset  # where the next fetch starts
        self.in_flight = False
        self.chunks = 0  # chunks buffered and not yet fully returned
        self.size = 0  # a grown fetch size for a message bigger than the usual one (0: usual)
        self.retry_at = 0.0


def decode_chunk(sub: SubscriptionState, f: Fetched, state: PartitionFetch, data: memoryview) -> Chunk | None:
    """Decode a partition's data (every CRC checked) into a chunk, moving ``state`` past it.

    Returns:
        The chunk (counted in ``state.chunks``); None when not even the first message
        was whole: the next fetch grows to fit it, or the partition failed.
    """
    error: BaseException | None = None
    try:
        records, consumed = decode_message_set(data, f.tp.topic, f.tp.partition, f.offset)
    except CorruptMessageError as exc:
        error = exc
        valid = scan(data).valid_bytes
        records, consumed = decode_message_set(data[:valid], f.tp.topic, f.tp.partition, f.offset)
        log.error("consumer.corrupt_message", topic=f.tp.topic, partition=f.tp.partition,
                  offset=f.offset + consumed, error=str(exc))
    if consumed == 0 and error is None:
        _grow(sub, f, state, data)
        return None
    state.size = 0
    state.offset = f.offset + consumed
    if error is not None:
        state.retry_at = math.inf  # nothing after a corrupt message is fetched (the partition fails)
    state.chunks += 1
    return Chunk(f.tp, f.epoch, records, f.offset + consumed, error)


def _grow(sub: SubscriptionState, f: Fetched, state: PartitionFetch, data: memoryview) -> None:
    needed = 4 + LENGTH.unpack_from(data)[0] if len(data) >= 4 else f.max_size + 1
    if needed > DEFAULT_FETCH_SIZE_LIMIT:
        sub.fail(f.tp, InvalidFetchSize(
            f"{f.tp.topic}-{f.tp.partition}: the message at offset {f.offset} needs a fetch of {needed} bytes, "
            f"over the limit of {DEFAULT_FETCH_SIZE_LIMIT}"))
        return
    state.size = min(max(2 * f.max_size, needed), DEFAULT_FETCH_SIZE_LIMIT)
    log.warning("consumer.fetch_size_too_small", topic=f.tp.topic, partition=f.tp.partition, offset=f.offset,
                fetch_size=f.max_size, new_fetch_size=state.size)


def handle_error(sub: SubscriptionState, f: Fetched, state: PartitionFetch, code: int,
                 clock: Callable[[], float], retry_backoff: float) -> bool:
    """Reset, retry (after ``retry_backoff`` seconds) or fail the partition for a broker error ``code``.

    Returns:
        True when cluster metadata should be refreshed (the topic is unknown to the broker, or
        the broker does not lead the partition).
    """
    exc = error_for_code(code, f"fetch of {f.tp.topic}-{f.tp.partition} at offset {f.offset}: "
                               f"{error_for_code(code)}")
    if isinstance(exc, OffsetOutOfRange):
        reset = sub.default_reset
        if reset in (EARLIEST, LATEST):
            log.warning("consumer.offset_out_of_range", topic=f.tp.topic, partition=f.tp.partition,
                        offset=f.offset, reset=reset)
            sub.request_reset(f.tp, reset)
        else:
            log.error("consumer.offset_out_of_range", topic=f.tp.topic, partition=f.tp.partition,
                      offset=f.offset, reset=reset)
            sub.fail(f.tp, exc)
        return False
    if code in RETRIABLE:
        state.retry_at = clock() + retry_backoff
        log.warning("consumer.fetch_error", topic=f.tp.topic, partition=f.tp.partition, offset=f.offset,
                    error=type(exc).__name__, retry_in_s=retry_backoff)
        return exc.invalid_metadata  # unknown topic, or the partition's leader moved: refresh metadata
    log.error("consumer.fetch_error", topic=f.tp.topic, partition=f.tp.partition, offset=f.offset,
              error=type(exc).__name__, detail=str(exc))
    sub.fail(f.tp, exc)
    return False
