"""The fetcher: pipelined long-poll fetches to every broker the consumer reads from.

For each broker leading a partition the consumer owns, one FETCH_WAIT (rill's long
poll, docs/protocol.md) is in flight at a time, carrying every partition of that
broker that may be fetched. A response is decoded (and every CRC checked) as soon as
it arrives, into a **chunk** per partition, and the partition's next fetch offset is
the end of the whole messages received; poll() takes messages from the chunks in
arrival order, and sends the next fetches before it returns, so the brokers work
while the user processes (pipelining).

Memory bound: a partition is fetched only while it holds at most one chunk, so it
has at most two (the one poll() is returning and the next one, buffered or in
flight), each at most ``max.partition.fetch.bytes`` of messages, and one response
carries at most ``fetch.max.bytes`` (shared equally by its partitions). The one
exception is a message larger than those: the fetch of that partition grows to the
message's size, up to 64 MiB (``DEFAULT_FETCH_SIZE_LIMIT``), as the simple consumer
does.

Per-partition outcomes of a fetch:

- data: a chunk; the position moves as poll() returns its messages.
- a message failing its CRC or framing check: the messages before it form a chunk;
  once they are returned, the partition fails with CorruptMessageError (the bad
  message is never returned; see SubscriptionState.fail).
- OffsetOutOfRange (retention deleted the data): the position is reset by
  ``auto.offset.reset`` (logged as ``consumer.offset_out_of_range``), or with "none"
  the partition fails with OffsetOutOfRange.
- UnknownTopic, RequestTimedOut, StorageError, Unknown: retried after
  ``retry.backoff.ms`` (logged); any other broker error fails the partition.
- connection failures and request timeouts: the broker's fetches are retried after a
  backoff and metadata is refreshed (the partition may have moved).

Results of a fetch sent before a seek, a reset or a rebalance are dropped (the
partition's epoch changed). When every partition of a broker's in-flight fetch is
stale and there is something new to fetch, the connection is dropped and reopened
rather than waiting out a long poll nobody needs.

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import structlog

from rill.client.consumer.network import BrokerChannel, Network
from rill.client.consumer.subscription import EARLIEST, LATEST, SubscriptionState, TopicPartition
from rill.client.errors import (CorruptMessageError, ErrorCode, InvalidFetchSize, OffsetOutOfRange,
                                error_for_code)
from rill.client.metadata import ClusterMetadata
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import DecodeError
from rill.client.protocol.messages import LENGTH, Message, decode_message_set, scan
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT, SimpleConsumer

log = structlog.get_logger(__name__)

RETRIABLE = frozenset({ErrorCode.UNKNOWN, ErrorCode.UNKNOWN_TOPIC, ErrorCode.REQUEST_TIMED_OUT,
                       ErrorCode.STORAGE_ERROR})
RESPONSE_OVERHEAD = 64 * 1024  # frame and block headers on top of the message bytes


class FetchConfig(NamedTuple):
    max_bytes: int  # fetch.max.bytes
    max_partition_bytes: int  # max.partition.fetch.bytes
    max_wait_ms: int
    min_bytes: int
    request_timeout: float  # seconds
    retry_backoff: float  # seconds


class _Fetched(NamedTuple):
    """One partition of an in-flight request: where it fetched from and in which epoch."""

    tp: TopicPartition
    epoch: int
    offset: int
    max_size: int


class _Request(NamedTuple):
    """An in-flight FETCH_WAIT: its partitions, and whether the broker may hold it (long poll)."""

    fetches: list[_Fetched]
    long_poll: bool


class _Chunk:
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


class _PartitionFetch:
    """Fetch state of one owned partition in one epoch."""

    __slots__ = ("epoch", "offset", "in_flight", "chunks", "size", "retry_at")

    def __init__(self, epoch: int, offset: int) -> None:
        self.epoch = epoch
        self.offset = offset  # where the next fetch starts
        self.in_flight = False
        self.chunks = 0  # chunks buffered and not yet fully returned
        self.size = 0  # a grown fetch size for a message bigger than the usual one (0: usual)
        self.retry_at = 0.0


class Fetcher:
    """Pipelined fetches for the partitions of a SubscriptionState; see the module docstring."""

    def __init__(self, subscription: SubscriptionState, metadata: ClusterMetadata, network: Network,
                 config: FetchConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.subscription = subscription
        self.metadata = metadata
        self.network = network
        self.config = config
        self.clock = clock
        self.channels: dict[int, BrokerChannel] = {}
        self._retry_broker_at: dict[int, float] = {}
        self._partitions: dict[TopicPartition, _PartitionFetch] = {}
        self._completed: list[_Chunk] = []
        self._offset_clients: dict[int, SimpleConsumer] = {}
        self.needs_metadata = False
        self.stats = {"fetches": 0, "bytes": 0, "records": 0}

    # ---------------------------------------------------------------- sending

    def _state(self, tp: TopicPartition) -> _PartitionFetch | None:
        """The fetch state of a fetchable partition in its current epoch (None: not fetchable)."""
        sub = self.subscription
        if not sub.fetchable(tp):
            return None
        ps = sub.assignment[tp]
        state = self._partitions.get(tp)
        if state is None or state.epoch != ps.epoch:
            assert ps.position is not None
            state = self._partitions[tp] = _PartitionFetch(ps.epoch, ps.position)
        return state

    def send_fetches(self) -> int:
        """Send a FETCH_WAIT to each broker with no fetch in flight and partitions to fetch; how many sent.

        Head-of-line blocking is avoided two ways. A request is a long poll only when no
        partition of that broker is held back for having two chunks buffered (otherwise
        ``max_wait_ms`` 0: the broker answers at once, so the held-back partition is not
        stuck behind a long poll once poll() has returned its messages). And a long poll
        in flight is abandoned (the connection is dropped and reopened: the broker's
        answer would carry nothing we lack) when a partition it does not cover can be
        fetched now (after a seek, a resume, a reset or a retry backoff), or when every
        partition it covers was seeked, reset or revoked since.
        """
        now = self.clock()
        wanted, held = self._eligible(now)
        abandoned = False
        for node in wanted:
            channel = self.channels.get(node)
            if channel is not None and not channel.closed and channel.in_flight:
                request: _Request = channel.in_flight[-1][0]
                if request.long_poll or self._all_stale(channel):
                    self._abandon(channel)
                    abandoned = True
        if abandoned:
            wanted, held = self._eligible(now)
        sent = 0
        for node, partitions in wanted.items():
            channel = self._channel(node, now)
            if channel is None or channel.in_flight:
                continue
            self._send(channel, partitions, long_poll=node not in held)
            sent += 1
        self._forget_stale()
        return sent

    def _eligible(self, now: float) -> tuple[dict[int, list[tuple[TopicPartition, _PartitionFetch]]], set[int]]:
        """Partitions to fetch now by leader, and the leaders with a partition held back (two chunks buffered)."""
        wanted: dict[int, list[tuple[TopicPartition, _PartitionFetch]]] = {}
        held: set[int] = set()
        for tp in self.subscription.assignment:
            state = self._state(tp)
            if state is None or state.in_flight or state.retry_at > now:
                continue
            leader = self.metadata.leader(tp.topic, tp.partition)
            if leader is None:
                self.needs_metadata = True
            elif state.chunks > 1:
                held.add(leader.broker_id)
            else:
                wanted.setdefault(leader.broker_id, []).append((tp, state))
        return wanted, held

    def _abandon(self, channel: BrokerChannel) -> None:
        """Drop a connection whose in-flight fetches nobody should wait for (not a failure: no backoff)."""
        channel.close()
        if self.channels.get(channel.node_id) is channel:
            del self.channels[channel.node_id]
        self._release(channel.take_failed())

    def _release(self, requests: list[_Request]) -> None:
        for request in requests:
            for f in request.fetches:
                state = self._partitions.get(f.tp)
                if state is not None and state.epoch == f.epoch:
                    state.in_flight = False

    def _send(self, channel: BrokerChannel, wanted: list[tuple[TopicPartition, _PartitionFetch]],
              long_poll: bool) -> None:
        share = max(1, min(self.config.max_partition_bytes, self.config.max_bytes // len(wanted)))
        fetched = []
        for tp, state in wanted:
            size = max(share, state.size)
            fetched.append(_Fetched(tp, state.epoch, state.offset, size))
            state.in_flight = True
        max_wait = self.config.max_wait_ms if long_poll else 0
        frame = rq.encode_fetch_wait([rq.FetchRequest(f.tp.topic, f.tp.partition, f.offset, f.max_size)
                                      for f in fetched], max_wait, self.config.min_bytes)
        channel.send(frame, _Request(fetched, long_poll and max_wait > 0))
        self.stats["fetches"] += 1

    def _channel(self, node: int, now: float) -> BrokerChannel | None:
        channel = self.channels.get(node)
        if channel is not None and not channel.closed:
            return channel
        if channel is not None:
            self._channel_failed(channel, now)
        if self._retry_broker_at.get(node, 0.0) > now:
            return None
        broker = self.metadata.brokers.get(node)
        if broker is None:
            self.needs_metadata = True
            return None
        channel = self._open_channel(node, broker)
        if channel.closed:
            self._channel_failed(channel, now)
            return None
        self.channels[node] = channel
        return channel

    def _open_channel(self, node: int, broker: rq.BrokerInfo) -> BrokerChannel:
        channel = BrokerChannel(node, broker.host, broker.port,
                                max(self.config.max_bytes, DEFAULT_FETCH_SIZE_LIMIT) + RESPONSE_OVERHEAD)
        channel.connect(self.network.selector)
        return channel

    def _all_stale(self, channel: BrokerChannel) -> bool:
        for request, _ in channel.in_flight:
            for f in request.fetches:
                state = self._partitions.get(f.tp)
                if state is not None and state.epoch == f.epoch and self._current(f.tp, f.epoch):
                    return False
        return True

    def _current(self, tp: TopicPartition, epoch: int) -> bool:
        ps = self.subscription.assignment.get(tp)
        return ps is not None and ps.epoch == epoch and ps.error is None

    def _forget_stale(self) -> None:
        """Drop fetch state of partitions no longer owned (their in-flight results are dropped on arrival)."""
        if len(self._partitions) > len(self.subscription.assignment):
            for tp in [tp for tp in self._partitions if tp not in self.subscription.assignment]:
                del self._partitions[tp]

    # ---------------------------------------------------------------- receiving

    def handle(self, channel: BrokerChannel, mask: int) -> None:
        """A channel is ready: read what came, decode it into chunks; notice a broken connection."""
        if self.channels.get(channel.node_id) is not channel:
            return  # closed by this fetcher in the same turn (abandoned or timed out)
        for context, body in channel.handle(mask):
            self._on_response(channel, context, body)
        if channel.closed:
            self._channel_failed(channel, self.clock())

    def check_timeouts(self) -> None:
        """Close channels whose oldest request is overdue (request timeout plus the long-poll wait)."""
        now = self.clock()
        limit = self.config.request_timeout + self.config.max_wait_ms / 1000.0
        for channel in list(self.channels.values()):
            if channel.in_flight and now - channel.in_flight[0][1] > limit:
                channel.close(f"no answer from broker {channel.host}:{channel.port} in {limit:.1f} s")
                self._channel_failed(channel, now)

    def next_deadline(self, now: float) -> float | None:
        """The earliest future time the loop must wake for the fetcher (request timeouts, retries)."""
        limit = self.config.request_timeout + self.config.max_wait_ms / 1000.0
        deadlines = [c.in_flight[0][1] + limit for c in self.channels.values() if c.in_flight]
        deadlines += [t for t in self._retry_broker_at.values() if now < t]
        deadlines += [s.retry_at for s in self._partitions.values() if now < s.retry_at < math.inf]
        return min(deadlines) if deadlines else None

    def _channel_failed(self, channel: BrokerChannel, now: float) -> None:
        if self.channels.get(channel.node_id) is channel:
            del self.channels[channel.node_id]
        lost = channel.take_failed()
        self._release(lost)
        self._retry_broker_at[channel.node_id] = now + self.config.retry_backoff
        self.needs_metadata = True
        log.warning("consumer.fetch_failed", broker=channel.node_id, host=channel.host, port=channel.port,
                    reason=channel.error, requests_lost=len(lost))

    def _on_response(self, channel: BrokerChannel, request: _Request, body: memoryview) -> None:
        context = request.fetches
        self._retry_broker_at.pop(channel.node_id, None)
        try:
            error, blocks = rq.decode_multifetch_response(body)
            if error == 0 and len(blocks) != len(context):
                raise DecodeError(f"{len(blocks)} blocks for {len(context)} fetches")
        except DecodeError as exc:
            channel.close(f"malformed fetch response from {channel.host}:{channel.port}: {exc}")
            self._release([request])
            return
        if error:
            blocks = [(error, memoryview(b""))] * len(context)
        for f, (code, data) in zip(context, blocks):
            state = self._partitions.get(f.tp)
            if state is None or state.epoch != f.epoch or not self._current(f.tp, f.epoch):
                continue  # fetched before a seek, reset or rebalance: drop
            state.in_flight = False
            if code:
                self._on_error(f, state, code)
            elif data:
                self._on_data(f, state, data)
            self.stats["bytes"] += len(data)

    def _on_data(self, f: _Fetched, state: _PartitionFetch, data: memoryview) -> None:
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
            self._grow(f, state, data)
            return
        state.size = 0
        state.offset = f.offset + consumed
        if error is not None:
            state.retry_at = math.inf  # nothing after a corrupt message is fetched (the partition fails)
        state.chunks += 1
        self.stats["records"] += len(records)
        self._completed.append(_Chunk(f.tp, f.epoch, records, f.offset + consumed, error))

    def _grow(self, f: _Fetched, state: _PartitionFetch, data: memoryview) -> None:
        needed = 4 + LENGTH.unpack_from(data)[0] if len(data) >= 4 else f.max_size + 1
        if needed > DEFAULT_FETCH_SIZE_LIMIT:
            self.subscription.fail(f.tp, InvalidFetchSize(
                f"{f.tp.topic}-{f.tp.partition}: the message at offset {f.offset} needs a fetch of {needed} bytes, "
                f"over the limit of {DEFAULT_FETCH_SIZE_LIMIT}"))
            return
        state.size = min(max(2 * f.max_size, needed), DEFAULT_FETCH_SIZE_LIMIT)
        log.warning("consumer.fetch_size_too_small", topic=f.tp.topic, partition=f.tp.partition, offset=f.offset,
                    fetch_size=f.max_size, new_fetch_size=state.size)

    def _on_error(self, f: _Fetched, state: _PartitionFetch, code: int) -> None:
        exc = error_for_code(code, f"fetch of {f.tp.topic}-{f.tp.partition} at offset {f.offset}: "
                                   f"{error_for_code(code)}")
        if isinstance(exc, OffsetOutOfRange):
            reset = self.subscription.default_reset
            if reset in (EARLIEST, LATEST):
                log.warning("consumer.offset_out_of_range", topic=f.tp.topic, partition=f.tp.partition,
                            offset=f.offset, reset=reset)
                self.subscription.request_reset(f.tp, reset)
            else:
                log.error("consumer.offset_out_of_range", topic=f.tp.topic, partition=f.tp.partition,
                          offset=f.offset, reset=reset)
                self.subscription.fail(f.tp, exc)
            return
        if code in RETRIABLE:
            state.retry_at = self.clock() + self.config.retry_backoff
            if code == ErrorCode.UNKNOWN_TOPIC:
                self.needs_metadata = True
            log.warning("consumer.fetch_error", topic=f.tp.topic, partition=f.tp.partition, offset=f.offset,
                        error=type(exc).__name__, retry_in_s=self.config.retry_backoff)
            return
        log.error("consumer.fetch_error", topic=f.tp.topic, partition=f.tp.partition, offset=f.offset,
                  error=type(exc).__name__, detail=str(exc))
        self.subscription.fail(f.tp, exc)

    # ---------------------------------------------------------------- returning messages

    def has_records(self) -> bool:
        """Are there messages poll() could return now (fetched, current, not paused)?"""
        sub = self.subscription
        for chunk in self._completed:
            if chunk.tp not in sub.paused and self._current(chunk.tp, chunk.epoch):
                return True
        return False

    def take(self, max_records: int) -> list[Message]:
        """Up to ``max_records`` messages in fetch order, moving the positions past them.

        Chunks of paused partitions stay buffered; chunks from an older epoch are dropped.
        A chunk ending at a corrupt message fails its partition once its messages are taken.
        """
        sub = self.subscription
        out: list[Message] = []
        i = 0
        completed = self._completed
        while i < len(completed) and len(out) < max_records:
            chunk = completed[i]
            if not self._current(chunk.tp, chunk.epoch):
                del completed[i]
                continue
            if chunk.tp in sub.paused:
                i += 1
                continue
            want = max_records - len(out)
            records = chunk.records
            if chunk.pos == 0 and len(records) <= want:
                taken = records
            else:
                taken = records[chunk.pos:chunk.pos + want]
            chunk.pos += len(taken)
            if out:
                out.extend(taken)
            else:
                out = taken  # a fully taken chunk's list is handed over as is: the chunk is dropped below
            if chunk.pos < len(records):
                sub.advance(chunk.tp, taken[-1].next_offset)
                break
            del completed[i]
            sub.advance(chunk.tp, chunk.end)
            state = self._partitions.get(chunk.tp)
            if state is not None and state.epoch == chunk.epoch:
                state.chunks -= 1
            if chunk.error is not None:
                sub.fail(chunk.tp, chunk.error)
        return out

    def buffered_records(self) -> int:
        """Messages fetched and not yet returned (current epochs only)."""
        return sum(len(c.records) - c.pos for c in self._completed if self._current(c.tp, c.epoch))

    def discard(self) -> None:
        """Drop every buffered chunk (a rebalance began): nothing fetched before it is returned."""
        self._completed.clear()
        self._partitions.clear()

    # ---------------------------------------------------------------- offsets (OFFSETS requests)

    def reset_positions(self) -> None:
        """Look up the earliest or latest offset of every partition waiting for a reset.

        Blocking: one OFFSETS request per partition to its leader, over a plain
        connection of its own (the fetch connections may be busy with a long poll),
        bounded by ``request.timeout.ms``. A failed lookup is retried on a later poll
        after ``retry.backoff.ms``.
        """
        now = self.clock()
        for tp in self.subscription.needs_reset():
            state = self.subscription.assignment[tp]
            strategy = state.reset
            pending = self._partitions.get(tp)
            if pending is not None and pending.epoch == state.epoch and pending.retry_at > now:
                continue
            try:
                offset = self.offset_for(tp, rq.EARLIEST_TIME if strategy == EARLIEST else rq.LATEST_TIME)
            except Exception as exc:  # noqa: BLE001 - any failure: log and retry later
                log.warning("consumer.offset_lookup_failed", topic=tp.topic, partition=tp.partition,
                            reset=strategy, error=str(exc))
                retry = _PartitionFetch(state.epoch, -1)
                retry.retry_at = now + self.config.retry_backoff
                self._partitions[tp] = retry
                continue
            log.info("consumer.position_reset", topic=tp.topic, partition=tp.partition, reset=strategy,
                     offset=offset)
            self.subscription.seek(tp, offset)

    def offset_for(self, tp: TopicPartition, time_value: int) -> int:
        """OFFSETS for one partition at ``time_value`` (EARLIEST_TIME, LATEST_TIME or ms); blocking.

        Raises:
            BrokerError, ConnectionClosed: the lookup failed. LookupError: the leader is unknown.
        """
        leader = self.metadata.leader(tp.topic, tp.partition)
        if leader is None:
            self.metadata.refresh([tp.topic])
            leader = self.metadata.leader(tp.topic, tp.partition)
            if leader is None:
                raise LookupError(f"no leader known for {tp.topic}-{tp.partition}")
        client = self._offset_clients.get(leader.broker_id)
        if client is None or (client.host, client.port) != (leader.host, leader.port):
            client = self._offset_clients[leader.broker_id] = SimpleConsumer(
                leader.host, leader.port, timeout=self.config.request_timeout)
        offsets = client.offsets_before(tp.topic, tp.partition, time_value, 1)
        return offsets[0] if offsets else 0

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        self.channels.clear()
        for client in self._offset_clients.values():
            client.close()
        self._offset_clients.clear()
        self.discard()
