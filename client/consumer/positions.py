"""The Consumer's calls on positions: where poll() reads each owned partition from, and pauses.

position(), seek(), seek_to_beginning()/seek_to_end(), pause()/resume()/paused(), the
log bounds beginning_offsets()/end_offsets(), and offsets_for_times(). Positions are
local: nothing here commits (see :mod:`~rill.client.consumer.group_offsets`). Lookups go
through :class:`~rill.client.consumer.offset_fetcher.OffsetFetcher` (blocking OFFSETS
requests).

Not thread-safe: see :class:`~rill.client.consumer.consumer.Consumer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rill.client.consumer.calls import ConsumerCalls, PartitionLike, to_tp
from rill.client.consumer.errors import NoOffsetForPartition
from rill.client.consumer.subscription import COMMITTED, EARLIEST, LATEST, TopicPartition
from rill.client.protocol import requests as rq
from rill.client.structs import OffsetAndTimestamp


class PositionCalls(ConsumerCalls):
    """Position, seek, pause and log-bound calls of the Consumer."""

    def position(self, partition: PartitionLike) -> int:
        """The offset of the next message poll() will return for an owned partition.

        A pending reset (``auto.offset.reset``, seek_to_beginning/end) is resolved now
        (blocking, one OFFSETS request), and so is the start of a manually assigned
        partition from the group's committed offset (one FetchOffsets).

        Raises:
            IllegalStateError: the partition is not owned. NoOffsetForPartition: no
            position and ``auto.offset.reset`` is "none". BrokerError, ConnectionClosed,
            GroupCoordinatorError: the lookup failed.
        """
        self._check_open()
        tp = self._owned(partition)
        state = self._subscription.state(tp)
        if state.position is None and state.reset == COMMITTED:
            self._require_group("position()").start_from_committed([tp])
            state = self._subscription.state(tp)
        if state.position is None:
            if state.reset in (EARLIEST, LATEST):
                time_value = rq.EARLIEST_TIME if state.reset == EARLIEST else rq.LATEST_TIME
                self._offsets.refresh_leaders([tp])
                self._subscription.seek(tp, self._offsets.offset_for(tp, time_value))
            else:
                raise NoOffsetForPartition([tp])
        position = self._subscription.state(tp).position
        assert position is not None
        return position

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Make ``offset`` the position of an owned partition (local: nothing is committed).

        The next poll() returns messages from there; anything fetched before is dropped.
        ``offset`` must be a message boundary (a message's ``offset`` or
        ``next_offset``); otherwise poll() raises InvalidOffset for the partition.
        Clears the partition's error, if any.

        Raises:
            IllegalStateError: the partition is not owned. ValueError: a negative offset.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._subscription.seek(self._owned((topic, partition)), offset)

    def seek_to_beginning(self, *partitions: PartitionLike) -> None:
        """Start the owned ``partitions`` (default: all owned) from their earliest offset at the next poll()."""
        self._seek_to(EARLIEST, partitions)

    def seek_to_end(self, *partitions: PartitionLike) -> None:
        """Start the owned ``partitions`` (default: all owned) from their end (only new messages)."""
        self._seek_to(LATEST, partitions)

    def _seek_to(self, strategy: str, partitions: tuple[PartitionLike, ...]) -> None:
        self._check_open()
        chosen = [self._owned(p) for p in partitions] if partitions else list(self._subscription.assignment)
        for tp in chosen:
            self._subscription.request_reset(tp, strategy)

    def pause(self, *partitions: PartitionLike) -> None:
        """Stop fetching and returning the owned ``partitions`` until resume() (messages already
        fetched stay buffered). A rebalance forgets pauses of partitions it takes away."""
        self._check_open()
        self._subscription.pause([self._owned(p) for p in partitions])

    def resume(self, *partitions: PartitionLike) -> None:
        self._check_open()
        self._subscription.resume([TopicPartition(*p) for p in partitions])

    def paused(self) -> set[TopicPartition]:
        return set(self._subscription.paused)

    def beginning_offsets(self, partitions: Iterable[PartitionLike]) -> dict[TopicPartition, int]:
        """The first offset still in each partition's log (blocking OFFSETS requests)."""
        self._check_open()
        return self._offsets_at(partitions, rq.EARLIEST_TIME)

    def end_offsets(self, partitions: Iterable[PartitionLike]) -> dict[TopicPartition, int]:
        """Each partition's log end offset: where the next message will go (blocking OFFSETS requests).
        Those of owned partitions also freshen the lag of the next ``metrics_snapshot``."""
        self._check_open()
        ends = self._offsets_at(partitions, rq.LATEST_TIME)
        self._ends.answered({tp: end for tp, end in ends.items() if tp in self._subscription.assignment})
        return ends

    def offsets_for_times(self, timestamps: Mapping[PartitionLike, int]) -> dict[TopicPartition,
                                                                                 OffsetAndTimestamp | None]:
        """For each partition, where to read from to see every message appended at or after its time
        (kafka-python's ``offsets_for_times``); any partition, owned or not. Blocking: three requests
        per partition to its leader (OFFSETS at the time, at the end, and TIME_INDEX).

        ``timestamps``: ``{TopicPartition or (topic, partition): ms since the epoch}``. The
        Kafka 0.7 format has no message timestamps, so times are the broker's append times
        and the answer is as exact as its sparse time index: the offset is a message
        boundary at most one index interval (``log.index.interval.bytes`` /
        ``log.index.interval.ms``) before the first message appended at or after the time,
        never after it (a Kafka 0.7 broker answers to a whole segment); the timestamp is
        the append time of the message at that offset, which may be before the time asked.
        Pass the offset to seek().

        Returns:
            ``{TopicPartition: OffsetAndTimestamp(offset, timestamp)}``, None for a partition
            where nothing was appended at or after the time.

        Raises:
            ValueError: a negative time. LookupError: a partition with no known leader (no such
            topic). BrokerError, ConnectionClosed: a lookup failed.
        """
        self._check_open()
        wanted = {to_tp(p): int(ms) for p, ms in timestamps.items()}
        negative = [f"{t}-{p}: {ms}" for (t, p), ms in wanted.items() if ms < 0]
        if negative:
            raise ValueError(f"timestamps must be >= 0 (ms since the epoch): {', '.join(negative)}")
        self._offsets.refresh_leaders(wanted)
        return {tp: self._offsets.offset_for_time(tp, ms) for tp, ms in wanted.items()}

    def _offsets_at(self, partitions: Iterable[PartitionLike], time_value: int) -> dict[TopicPartition, int]:
        tps = list(map(to_tp, partitions))
        self._offsets.refresh_leaders(tps)  # one refresh for every partition with no known leader
        return {tp: self._offsets.offset_for(tp, time_value) for tp in tps}
