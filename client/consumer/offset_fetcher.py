"""Offsets by time (OFFSETS requests) and the position resets that use them (Kafka's OffsetFetcher).

A partition whose position is unknown (no committed offset, OffsetOutOfRange,
seek_to_beginning/end) waits for a reset to its earliest or latest offset:
:meth:`OffsetFetcher.reset_positions`, called by every poll() before fetching, looks
them up and seeks; a partition whose leader is unknown waits for the poll loop's
metadata refresh (``Fetcher.needs_metadata``, with its backoff). position(),
beginning_offsets(), end_offsets() and metrics() use :meth:`OffsetFetcher.offset_for`
directly, and offsets_for_times() :meth:`OffsetFetcher.offset_for_time`, after one
:meth:`OffsetFetcher.refresh_leaders` for all their partitions.

Blocking: one OFFSETS request per partition to its leader, over a plain connection of
its own (a :class:`~rill.client.simple.SimpleConsumer` per broker: the fetch
connections may be busy with a long poll), bounded by ``request.timeout.ms``. A failed
reset is retried on a later poll after ``retry.backoff.ms``; the backoff is kept in the
fetcher's per-partition state (:meth:`Fetcher.back_off`), so the poll loop's wait
wakes for it, and a seek, reset or rebalance cancels it.

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import structlog

from rill.client.consumer.fetcher import FetchConfig, Fetcher
from rill.client.consumer.subscription import EARLIEST, SubscriptionState, TopicPartition
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer
from rill.client.structs import OffsetAndTimestamp

log = structlog.get_logger(__name__)


class OffsetFetcher:
    """OFFSETS lookups and position resets for the partitions of a SubscriptionState; see the module docstring."""

    def __init__(self, subscription: SubscriptionState, metadata: ClusterMetadata, fetcher: Fetcher,
                 config: FetchConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.subscription = subscription
        self.metadata = metadata
        self.fetcher = fetcher
        self.config = config
        self.clock = clock
        self._clients: dict[int, SimpleConsumer] = {}

    def reset_positions(self) -> None:
        """Look up the earliest or latest offset of every partition waiting for a reset.

        Blocking: one OFFSETS request per partition to its leader, over a plain
        connection of its own (the fetch connections may be busy with a long poll),
        bounded by ``request.timeout.ms``. A failed lookup is retried on a later poll
        after ``retry.backoff.ms``. A partition with no known leader is skipped and
        metadata flagged as needed (no refresh here: the poll loop's MetadataRefresh does it).
        """
        now = self.clock()
        for tp in self.subscription.needs_reset():
            state = self.subscription.assignment[tp]
            strategy = state.reset
            if self.fetcher.backing_off(tp, state.epoch, now):
                continue
            if self.metadata.leader(tp.topic, tp.partition) is None:
                self.fetcher.needs_metadata = True
                continue
            try:
                offset = self.offset_for(tp, rq.EARLIEST_TIME if strategy == EARLIEST else rq.LATEST_TIME)
            except Exception as exc:  # noqa: BLE001 - any failure: log and retry later
                log.warning("consumer.offset_lookup_failed", topic=tp.topic, partition=tp.partition,
                            reset=strategy, error=str(exc))
                self.fetcher.back_off(tp, state.epoch, now + self.config.retry_backoff)
                continue
            log.info("consumer.position_reset", topic=tp.topic, partition=tp.partition, reset=strategy,
                     offset=offset)
            self.subscription.seek(tp, offset)

    def refresh_leaders(self, partitions: Iterable[TopicPartition]) -> None:
        """One metadata refresh (blocking) for the topics of ``partitions`` whose leader is unknown, if any.

        For the user's calls (position(), beginning_offsets(), end_offsets(), metrics()), before offset_for().

        Raises:
            ConnectionClosed: no broker answered.
        """
        missing = {tp.topic for tp in partitions if self.metadata.leader(tp.topic, tp.partition) is None}
        if missing:
            self.metadata.refresh(missing)

    def offset_for(self, tp: TopicPartition, time_value: int) -> int:
        """OFFSETS for one partition at ``time_value`` (EARLIEST_TIME, LATEST_TIME or ms); blocking.

        No metadata refresh here: see :meth:`refresh_leaders`.

        Raises:
            BrokerError, ConnectionClosed: the lookup failed. LookupError: the leader is unknown.
        """
        client, number = self._client_for(tp)
        offsets = client.offsets_before(tp.topic, number, time_value, 1)
        return offsets[0] if offsets else 0

    def offset_for_time(self, tp: TopicPartition, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """Where to read ``tp`` from to see every message appended at or after ``timestamp_ms``; blocking.

        OFFSETS at the time gives a message boundary at most one time-index interval before
        the first such message (the log start when even the first message is that recent);
        the log end means none is (None). TIME_INDEX then gives the append time of the
        message at that offset (its index entry's). Three round trips to the leader.

        Returns:
            ``OffsetAndTimestamp(offset, append time ms)``, or None when nothing was appended
            at or after ``timestamp_ms``.

        Raises:
            BrokerError, ConnectionClosed: a lookup failed. LookupError: the leader is unknown.
        """
        client, number = self._client_for(tp)
        before = client.offsets_before(tp.topic, number, timestamp_ms, 1)
        offset = before[0] if before else client.earliest_offset(tp.topic, number)
        if offset >= client.latest_offset(tp.topic, number):
            return None
        entries = client.time_index(tp.topic, number, offset, 1)
        return OffsetAndTimestamp(offset, entries[0][1] if entries else timestamp_ms)

    def _client_for(self, tp: TopicPartition) -> tuple[SimpleConsumer, int]:
        """The connection to ``tp``'s leader (opened or reopened as needed) and the leader's number for ``tp``.

        Raises:
            LookupError: the leader is unknown.
        """
        leader = self.metadata.leader(tp.topic, tp.partition)
        if leader is None:
            raise LookupError(f"no leader known for {tp.topic}-{tp.partition}")
        client = self._clients.get(leader.broker_id)
        if client is None or (client.host, client.port) != (leader.host, leader.port):
            if client is not None:
                client.close()  # the broker moved: drop the connection to its old address
            client = self._clients[leader.broker_id] = SimpleConsumer(
                leader.host, leader.port, timeout=self.config.request_timeout, security=self.metadata.security)
        return client, self.metadata.broker_partition(tp.topic, tp.partition)

    def close(self) -> None:
        """Close the OFFSETS connections."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
