"""The consumer's figures as an immutable snapshot, for readers on other threads (the Prometheus collector).

The Consumer is not thread-safe and its ``metrics()`` makes blocking OFFSETS requests,
so a reader on another thread (a Prometheus scrape runs on the HTTP server's thread)
must neither call it nor look at the consumer's live state. Instead the consumer's own
thread takes a :class:`ConsumerSnapshot` now and then and publishes it by replacing one
reference (``Consumer.metrics_snapshot``); a reader takes that reference and reads only
the tuple it points to, which nothing changes afterwards.

When the consumer takes one:

- at the end of a turn of poll()'s loop (and of the iterator's), at most once per
  ``SNAPSHOT_INTERVAL`` (0.1 s), and less often when taking it is slow (many partitions:
  about 2 µs each), so that it never takes more than ``SNAPSHOT_BUDGET`` (1%) of the
  consumer's time; otherwise poll() pays one float comparison per turn;
- at every ``metrics()`` call, with the end offsets it has just asked for;
- when the consumer closes (counters kept, no partitions: it owns none).

Freshness of the end offset and the lag: a partition's ``end_offset`` is the largest
log end the consumer has evidence of: the answer of the last ``metrics()`` or
``end_offsets()`` call, raised by its own fetches (a fetch that read up to ``o`` shows
the log reached ``o``; once the consumer has caught up, each fetch reads to the log
end) and by its position. So while a consumer keeps up, end offset and lag are as fresh
as the snapshot; a consumer further behind than what it has fetched sees a lower bound
until its next ``metrics()`` call. The broker's group lag (from the coordinator's
committed offsets) does not depend on the consumer at all.

Not thread-safe except as said: :class:`EndOffsets` and the builder run on the
consumer's thread; a published :class:`ConsumerSnapshot` may be read by any thread.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import NamedTuple

from rill.client.consumer.subscription import PartitionState, TopicPartition

__all__ = ["SNAPSHOT_INTERVAL", "ConsumerSnapshot", "Counters", "EndOffsets", "PartitionFigures", "next_snapshot",
           "take_snapshot"]

SNAPSHOT_INTERVAL = 0.1  # seconds between the snapshots poll() takes, at least
SNAPSHOT_BUDGET = 0.01  # and at least 100 times as long as taking the last one took


def next_snapshot(now: float, cost: float) -> float:
    """When poll() takes the next snapshot, the last one taken at ``now`` in ``cost`` seconds."""
    return now + max(SNAPSHOT_INTERVAL, cost / SNAPSHOT_BUDGET)


class PartitionFigures(NamedTuple):
    """One owned partition in a snapshot; offsets are byte positions in the partition's log.

    ``position``: the offset of the next message poll() returns (None while a reset is
    pending); ``committed``: the offset this consumer last committed or was given by the
    coordinator (None: unknown); ``end_offset``: the log end as last known (see the module
    docstring; None before anything is known); ``lag``: ``end_offset - position`` in bytes
    (None when either is).
    """

    topic: str
    partition: int
    position: int | None
    committed: int | None
    end_offset: int | None
    lag: int | None


class ConsumerSnapshot(NamedTuple):
    """What a consumer reported at one moment, ``taken_at`` (seconds since the epoch); see the module docstring.

    The counters are totals since the consumer started, as ``Consumer.metrics()`` names
    them; ``group`` is None and the group counters 0 without a ``group.id``.
    """

    client_id: str
    group: str | None
    taken_at: float
    polls: int
    records_returned: int
    records_buffered: int
    fetch_requests: int
    bytes_fetched: int
    rebalances: int
    commits: int
    heartbeats: int
    evictions: int
    commits_pending: int
    generation: int
    partitions: tuple[PartitionFigures, ...]


class Counters(NamedTuple):
    """The counters of a snapshot, as the consumer gathers them (the partitions come from the subscription)."""

    polls: int
    records_returned: int
    records_buffered: int
    fetch_requests: int
    bytes_fetched: int
    group_stats: Mapping[str, int]  # rebalances, commits, heartbeats, evictions (empty without a group)
    commits_pending: int
    generation: int


class EndOffsets:
    """The largest log end known for each owned partition (see the module docstring). Consumer's thread only."""

    __slots__ = ("known",)

    def __init__(self) -> None:
        self.known: dict[TopicPartition, int] = {}

    def answered(self, ends: Mapping[TopicPartition, int]) -> None:
        """OFFSETS answers (the log end now): they replace what was known, which may be too high after a
        truncation."""
        self.known.update(ends)

    def update(self, tp: TopicPartition, *seen: int | None) -> int | None:
        """Raise ``tp``'s known end to the largest of ``seen`` (a fetch's reach, a position); the known end."""
        best = self.known.get(tp)
        for value in seen:
            if value is not None and (best is None or value > best):
                best = value
        if best is not None:
            self.known[tp] = best
        return best

    def forget_others(self, owned: Mapping[TopicPartition, object]) -> None:
        """Drop partitions no longer owned."""
        if len(self.known) > len(owned) or any(tp not in owned for tp in self.known):
            self.known = {tp: end for tp, end in self.known.items() if tp in owned}


def take_snapshot(client_id: str, group: str | None, counters: Counters,
                  assignment: Mapping[TopicPartition, PartitionState], ends: EndOffsets,
                  fetched_to: Mapping[TopicPartition, int], owned: bool = True) -> ConsumerSnapshot:
    """A snapshot of the consumer now; ``fetched_to``: how far each partition's fetches have read (current
    epochs); ``owned`` False: report no partitions (a closed consumer). Raises nothing."""
    partitions: list[PartitionFigures] = []
    if owned:
        ends.forget_others(assignment)
        for tp, state in sorted(assignment.items()):
            position = state.position
            end = ends.update(tp, fetched_to.get(tp), position)
            lag = end - position if end is not None and position is not None else None
            partitions.append(PartitionFigures(tp.topic, tp.partition, position, state.committed, end, lag))
    stats = counters.group_stats
    return ConsumerSnapshot(
        client_id, group, time.time(), counters.polls, counters.records_returned, counters.records_buffered,
        counters.fetch_requests, counters.bytes_fetched, stats.get("rebalances", 0), stats.get("commits", 0),
        stats.get("heartbeats", 0), stats.get("evictions", 0), counters.commits_pending, counters.generation,
        tuple(partitions))
