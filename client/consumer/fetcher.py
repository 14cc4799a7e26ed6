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

What one partition's block of a response does (data, a corrupt message, a message
too big for the fetch, broker errors) is :mod:`~rill.client.consumer.partition_fetch`;
connection failures and request timeouts are the fetcher's: the broker's fetches are
retried after a backoff and metadata is refreshed (the partition may have moved).
Offsets by time and position resets are :mod:`~rill.client.consumer.offset_fetcher`.

Results of a fetch sent before a seek, a reset or a rebalance are dropped (the
partition's epoch changed). When every partition of a broker's in-flight fetch is
stale and there is something new to fetch, the connection is dropped and reopened
rather than waiting out a long poll nobody needs.

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import math
import selectors
import time
from collections.abc import Callable
from typing import NamedTuple

import structlog

from rill.client.net.broker_socket import BrokerSocket, SocketState
from rill.client.consumer.partition_fetch import Chunk, Fetched, PartitionFetch, decode_chunk, handle_error
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.client.errors import ConnectionClosed
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import DecodeError
from rill.client.protocol.messages import Message
from rill.client.net.selector_loop import SelectorLoop
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT

log = structlog.get_logger(__name__)

RESPONSE_OVERHEAD = 64 * 1024  # frame and block headers on top of the message bytes


class FetchConfig(NamedTuple):
    max_bytes: int  # fetch.max.bytes
    max_partition_bytes: int  # max.partition.fetch.bytes
    max_wait_ms: int
    min_bytes: int
    request_timeout: float  # seconds
    retry_backoff: float  # seconds
    client_id: str = ""  # client.id, sent in CLIENT_HELLO (client quotas)


class _Request(NamedTuple):
    """An in-flight FETCH_WAIT: its partitions, whether the broker may hold it (long poll), when sent."""

    fetches: list[Fetched]
    long_poll: bool
    sent_at: float


Channel = BrokerSocket[_Request]
"""A connection to one broker (its ``node_id`` set), carrying the fetches in flight."""


class Fetcher:
    """Pipelined fetches for the partitions of a SubscriptionState; see the module docstring."""

    def __init__(self, subscription: SubscriptionState, metadata: ClusterMetadata, network: SelectorLoop,
                 config: FetchConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.subscription = subscription
        self.metadata = metadata
        self.network = network
        self.config = config
        self.clock = clock
        self.channels: dict[int, Channel] = {}
        self._retry_broker_at: dict[int, float] = {}
        self._partitions: dict[TopicPartition, PartitionFetch] = {}
        self._completed: list[Chunk] = []
        self.needs_metadata = False
        self.stats = {"fetches": 0, "bytes": 0, "records": 0}

    # ---------------------------------------------------------------- sending

    def _state(self, tp: TopicPartition) -> PartitionFetch | None:
        """The fetch state of a fetchable partition in its current epoch (None: not fetchable)."""
        sub = self.subscription
        if not sub.fetchable(tp):
            return None
        ps = sub.assignment[tp]
        state = self._partitions.get(tp)
        if state is None or state.epoch != ps.epoch:
            assert ps.position is not None
            state = self._partitions[tp] = PartitionFetch(ps.epoch, ps.position)
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
            if channel is not None and channel.in_flight:
                request = list(channel.protocol.contexts())[-1]
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
            self._send(channel, partitions, long_poll=node not in held, now=now)
            sent += 1
        self._forget_stale()
        return sent

    def _eligible(self, now: float) -> tuple[dict[int, list[tuple[TopicPartition, PartitionFetch]]], set[int]]:
        """Partitions to fetch now by leader, and the leaders with a partition held back (two chunks buffered)."""
        wanted: dict[int, list[tuple[TopicPartition, PartitionFetch]]] = {}
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

    def _abandon(self, channel: Channel) -> None:
        """Drop a connection whose in-flight fetches nobody should wait for (not a failure: no backoff)."""
        if self.channels.get(channel.node_id) is channel:
            del self.channels[channel.node_id]
        self._release([request for request, _ in channel.close()])

    def _release(self, requests: list[_Request]) -> None:
        for request in requests:
            for f in request.fetches:
                state = self._partitions.get(f.tp)
                if state is not None and state.epoch == f.epoch:
                    state.in_flight = False

    def _send(self, channel: Channel, wanted: list[tuple[TopicPartition, PartitionFetch]],
              long_poll: bool, now: float) -> None:
        share = max(1, min(self.config.max_partition_bytes, self.config.max_bytes // len(wanted)))
        fetched = []
        for tp, state in wanted:
            size = max(share, state.size)
            fetched.append(Fetched(tp, state.epoch, state.offset, size))
            state.in_flight = True
        max_wait = self.config.max_wait_ms if long_poll else 0
        number = self.metadata.broker_partition  # the leader's own number for each partition
        frame = rq.encode_fetch_wait([rq.FetchRequest(f.tp.topic, number(f.tp.topic, f.tp.partition), f.offset,
                                                      f.max_size) for f in fetched], max_wait, self.config.min_bytes)
        channel.send((frame,), _Request(fetched, long_poll and max_wait > 0, now))
        self.stats["fetches"] += 1
        try:
            channel.write()  # nothing yet while connecting: written once connected
        except ConnectionClosed as exc:
            self._channel_failed(channel, now, str(exc))
            return
        self.network.watch(channel)

    def _channel(self, node: int, now: float) -> Channel | None:
        channel = self.channels.get(node)
        if channel is not None:
            return channel
        if self._retry_broker_at.get(node, 0.0) > now:
            return None
        broker = self.metadata.brokers.get(node)
        if broker is None:
            self.needs_metadata = True
            return None
        try:
            channel = self._open_channel(node, broker, now)
        except ConnectionClosed as exc:
            self._broker_failed(node, broker.host, broker.port, now, str(exc), 0)
            return None
        self.network.watch(channel)
        self.channels[node] = channel
        return channel

    def _open_channel(self, node: int, broker: rq.BrokerInfo, now: float) -> Channel:
        """Start connecting to ``broker`` (requests queue until connected; their timeout covers the connect).

        Raises:
            ConnectionClosed: the connection failed at once.
        """
        channel: Channel = BrokerSocket((broker.host, broker.port),
                                        max(self.config.max_bytes, DEFAULT_FETCH_SIZE_LIMIT) + RESPONSE_OVERHEAD,
                                        node_id=node, security=self.metadata.security,
                                        client_id=self.config.client_id)
        channel.connect(now, self.config.request_timeout)
        return channel

    def _all_stale(self, channel: Channel) -> bool:
        for request in channel.protocol.contexts():
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

    def handle(self, channel: Channel, mask: int) -> None:
        """A channel is ready: finish connecting, write, read what came and decode it into
        chunks; notice a broken connection."""
        if self.channels.get(channel.node_id) is not channel:
            return  # closed by this fetcher in the same turn (abandoned or timed out)
        try:
            if channel.state is SocketState.CONNECTING:  # TCP, then TLS and SASL (which also read)
                channel.finish_connect()
                if channel.ready:
                    channel.write()
            elif mask & selectors.EVENT_WRITE:
                channel.write()
            if mask & selectors.EVENT_READ and channel.ready:
                channel.receive()
                while (response := channel.next_response()) is not None:
                    self._on_response(channel, *response)
                    if self.channels.get(channel.node_id) is not channel:
                        return  # the response was malformed: the connection is gone
            self.network.watch(channel)
        except ConnectionClosed as exc:
            self._channel_failed(channel, self.clock(), str(exc))

    def check_timeouts(self) -> None:
        """Close channels whose oldest request is overdue (request timeout plus the long-poll wait)."""
        now = self.clock()
        limit = self.config.request_timeout + self.config.max_wait_ms / 1000.0
        for channel in list(self.channels.values()):
            oldest = next(channel.protocol.oldest(), None)
            if oldest is not None and now - oldest.sent_at > limit:
                self._channel_failed(channel, now, f"no answer from broker {channel.name} in {limit:.1f} s")

    def next_deadline(self, now: float) -> float | None:
        """The earliest future time the loop must wake for the fetcher (request timeouts, retries)."""
        limit = self.config.request_timeout + self.config.max_wait_ms / 1000.0
        deadlines = [r.sent_at + limit for c in self.channels.values() for r in c.protocol.oldest()]
        deadlines += [t for t in self._retry_broker_at.values() if now < t]
        deadlines += [s.retry_at for s in self._partitions.values() if now < s.retry_at < math.inf]
        return min(deadlines) if deadlines else None

    def _channel_failed(self, channel: Channel, now: float, reason: str) -> None:
        if self.channels.get(channel.node_id) is channel:
            del self.channels[channel.node_id]
        lost = [request for request, _ in channel.close()]
        self._release(lost)
        host, port = channel.address
        self._broker_failed(channel.node_id, host, port, now, reason, len(lost))

    def _broker_failed(self, node: int, host: str, port: int, now: float, reason: str, lost: int) -> None:
        self._retry_broker_at[node] = now + self.config.retry_backoff
        self.needs_metadata = True
        log.warning("consumer.fetch_failed", broker=node, host=host, port=port, reason=reason, requests_lost=lost)

    def _on_response(self, channel: Channel, request: _Request, body: memoryview) -> None:
        context = request.fetches
        self._retry_broker_at.pop(channel.node_id, None)
        try:
            error, blocks = rq.decode_multifetch_response(body)
            if error == 0 and len(blocks) != len(context):
                raise DecodeError(f"{len(blocks)} blocks for {len(context)} fetches")
        except DecodeError as exc:
            self._release([request])
            self._channel_failed(channel, self.clock(), f"malformed fetch response from {channel.name}: {exc}")
            return
        if error:
            blocks = [(error, memoryview(b""))] * len(context)
        for f, (code, data) in zip(context, blocks):
            state = self._partitions.get(f.tp)
            if state is None or state.epoch != f.epoch or not self._current(f.tp, f.epoch):
                continue  # fetched before a seek, reset or rebalance: drop
            state.in_flight = False
            if code:
                if handle_error(self.subscription, f, state, code, self.clock, self.config.retry_backoff):
                    self.needs_metadata = True
            elif data:
                chunk = decode_chunk(self.subscription, f, state, data)
                if chunk is not None:
                    self.stats["records"] += len(chunk.records)
                    self._completed.append(chunk)
            self.stats["bytes"] += len(data)

    # ---------------------------------------------------------------- returning messages

    def has_records(self) -> bool:
        """Are there messages poll() could return now (fetched, current, not paused)?"""
        sub = self.subscription
        for chunk in self._completed:
            if chunk.tp not in sub.paused and self._current(chunk.tp, chunk.epoch):
                return True
        return False

    def take(self, max_records: int, advance: bool = True) -> list[Message]:
        """Up to ``max_records`` messages in fetch order, moving the positions past them (unless not
        ``advance``: the consumer's iterator moves each position as it returns each message).

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
                if advance:
                    sub.advance(chunk.tp, taken[-1].next_offset)
                break
            del completed[i]
            if advance:
                sub.advance(chunk.tp, chunk.end)
            state = self._partitions.get(chunk.tp)
            if state is not None and state.epoch == chunk.epoch:
                state.chunks -= 1
            if chunk.error is not None:
                sub.fail(chunk.tp, chunk.error)
        return out

    def fetched_to(self) -> dict[TopicPartition, int]:
        """Where each partition's next fetch starts (current epochs): its log reached at least that far."""
        owned = self.subscription.assignment
        return {tp: s.offset for tp, s in self._partitions.items()
                if s.offset >= 0 and (ps := owned.get(tp)) is not None and ps.epoch == s.epoch}

    def buffered_records(self) -> int:
        """Messages fetched and not yet returned (current epochs only)."""
        return sum(len(c.records) - c.pos for c in self._completed if self._current(c.tp, c.epoch))

    def discard(self) -> None:
        """Drop every buffered chunk (a rebalance began): nothing fetched before it is returned."""
        self._completed.clear()
        self._partitions.clear()

    # ---------------------------------------------------------------- retry backoff of a partition

    def backing_off(self, tp: TopicPartition, epoch: int, now: float) -> bool:
        """Is ``tp`` waiting out a retry backoff (a failed fetch or position reset) set in ``epoch``?"""
        pending = self._partitions.get(tp)
        return pending is not None and pending.epoch == epoch and pending.retry_at > now

    def back_off(self, tp: TopicPartition, epoch: int, until: float) -> None:
        """Retry ``tp`` no earlier than ``until`` (a failed position reset): next_deadline() wakes the loop
        then. Void once its epoch changes (seek, reset, rebalance) and forgotten by discard()."""
        retry = PartitionFetch(epoch, -1)
        retry.retry_at = until
        self._partitions[tp] = retry

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        self.channels.clear()
        self.discard()
