"""The consumer's snapshot for other threads: the known end offsets, the lag, and when poll() takes one."""

from __future__ import annotations

import pytest

from rill.client.consumer.consumer_snapshot import (SNAPSHOT_INTERVAL, Counters, EndOffsets, next_snapshot,
                                                    take_snapshot)
from rill.client.consumer.subscription import SubscriptionState, TopicPartition

A, B, C = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
COUNTERS = Counters(polls=7, records_returned=70, records_buffered=3, fetch_requests=5, bytes_fetched=900,
                    group_stats={"rebalances": 2, "commits": 4, "heartbeats": 9, "evictions": 1},
                    commits_pending=1, generation=3)


def owned(positions: dict[TopicPartition, int]) -> SubscriptionState:
    sub = SubscriptionState("earliest")
    sub.assign(positions)
    return sub


def test_the_end_offset_is_the_largest_known_and_the_lag_is_end_minus_position() -> None:
    """An OFFSETS answer, a fetch's reach and the position each raise the known end; lag is end - position."""
    sub = owned({A: 100, B: 50, C: 10})
    ends = EndOffsets()
    ends.answered({A: 400})
    snap = take_snapshot("c1", "g", COUNTERS, sub.assignment, ends, {A: 300, B: 80})
    figures = {(p.topic, p.partition): p for p in snap.partitions}
    assert (figures["a", 0].end_offset, figures["a", 0].lag) == (400, 300)  # the answer beats the fetch
    assert (figures["a", 1].end_offset, figures["a", 1].lag) == (80, 30)  # the fetch read to 80
    assert (figures["b", 0].end_offset, figures["b", 0].lag) == (10, 0)  # only the position is known
    assert [(p.topic, p.partition) for p in snap.partitions] == [("a", 0), ("a", 1), ("b", 0)]


def test_the_known_end_only_grows_between_answers_and_an_answer_replaces_it() -> None:
    """A later fetch that read less does not lower the end; an OFFSETS answer does (a truncated log)."""
    sub = owned({A: 0})
    ends = EndOffsets()
    take_snapshot("c1", None, COUNTERS, sub.assignment, ends, {A: 500})
    assert take_snapshot("c1", None, COUNTERS, sub.assignment, ends, {A: 200}).partitions[0].end_offset == 500
    ends.answered({A: 300})
    assert take_snapshot("c1", None, COUNTERS, sub.assignment, ends, {}).partitions[0].end_offset == 300


def test_unknown_position_and_end_give_no_lag() -> None:
    """A partition waiting for a reset has no position, so no lag; nothing known about its end: None."""
    sub = SubscriptionState("earliest")
    sub.add_partition(A)
    figures = take_snapshot("c1", None, COUNTERS, sub.assignment, EndOffsets(), {}).partitions[0]
    assert (figures.position, figures.committed, figures.end_offset, figures.lag) == (None, None, None, None)


def test_partitions_no_longer_owned_are_forgotten() -> None:
    """After a rebalance the snapshot lists only what is owned, and the old ends are dropped."""
    ends = EndOffsets()
    ends.answered({A: 100, B: 200})
    snap = take_snapshot("c1", "g", COUNTERS, owned({B: 0}).assignment, ends, {})
    assert [(p.topic, p.partition, p.end_offset) for p in snap.partitions] == [("a", 1, 200)]
    assert ends.known == {B: 200}


def test_counters_are_copied_and_a_closed_consumer_reports_no_partitions() -> None:
    """The snapshot holds plain numbers (later changes to the consumer's dicts do not reach it); owned=False
    (a closed consumer) keeps the counters and lists no partition."""
    stats = dict(COUNTERS.group_stats)
    snap = take_snapshot("c1", "g", COUNTERS._replace(group_stats=stats), owned({A: 0}).assignment, EndOffsets(),
                         {}, owned=False)
    stats["rebalances"] = 99
    assert (snap.client_id, snap.group, snap.polls, snap.records_returned, snap.records_buffered) == (
        "c1", "g", 7, 70, 3)
    assert (snap.fetch_requests, snap.bytes_fetched, snap.rebalances, snap.commits, snap.heartbeats,
            snap.evictions, snap.commits_pending, snap.generation) == (5, 900, 2, 4, 9, 1, 1, 3)
    assert snap.partitions == ()


@pytest.mark.parametrize(("cost", "gap"), [(0.0, SNAPSHOT_INTERVAL), (0.000_01, SNAPSHOT_INTERVAL), (0.05, 5.0)])
def test_a_slow_snapshot_is_taken_less_often(cost: float, gap: float) -> None:
    """poll() takes a snapshot every SNAPSHOT_INTERVAL, or 100 times its cost apart when that is longer."""
    assert next_snapshot(10.0, cost) == pytest.approx(10.0 + gap)
