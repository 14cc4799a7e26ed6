"""The Consumer's calls on positions: where poll() reads each owned partition from, and pauses.

position(), seek(), seek_to_beginning()/seek_to_end(), pause()/resume()/paused(), and
the log bounds beginning_offsets()/end_offsets(). Positions are local: nothing here
commits (see :mod:`~rill.client.consumer.group_offsets`). Lookups by time go through
:class:`~rill.client.consumer.offset_fetcher.OffsetFetcher` (blocking OFFSETS requests).

Not thread-safe: see :class:`~rill.client.consumer.consumer.Consumer`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rill.client.consumer.calls import ConsumerCalls, PartitionLike, to_tp
from rill.client.consumer.errors import NoOffsetForPartition
from rill.client.consumer.subscription import EARLIEST, LATEST, TopicPartition
from rill.client.protocol import requests as rq


class PositionCalls(ConsumerCalls):
    """Position, seek, pause and log-bound calls of the Consumer."""

    def position(self, partition: PartitionLike) -> int:
        """The offset of the next message poll() will return for an owned partition.

        A pending reset (``auto.offset.reset``, seek_to_beginning/end) is resolved now
        (blocking, one OFFSETS request).

        Raises:
            IllegalStateError: the partition is not owned. NoOffsetForPartition: no
            position and ``auto.offset.reset`` is "none". BrokerError, ConnectionClosed:
            the lookup failed.
        """
        self._check_open()
        tp = self._owned(partition)
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
        """Each partition's log end offset: where the next message will go (blocking OFFSETS requests)."""
        self._check_open()
        return self._offsets_at(partitions, rq.LATEST_TIME)

    def _offsets_at(self, partitions: Iterable[PartitionLike], time_value: int) -> dict[TopicPartition, int]:
        tps = list(map(to_tp, partitions))
        self._offsets.refresh_leaders(tps)  # one refresh for every partition with no known leader
        return {tp: self._offsets.offset_for(tp, time_value) for tp in tps}
