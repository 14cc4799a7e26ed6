"""SubscriptionState: assignment, positions, epochs, pauses, errors and what a commit sends."""

from __future__ import annotations

import re

from rill.client.consumer.subscription import EARLIEST, LATEST, SubscriptionState, TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_assign_takes_committed_offsets_and_marks_the_rest_for_reset() -> None:
    """An offset of -1 from the coordinator means: apply auto.offset.reset."""
    sub = SubscriptionState("latest")
    sub.assign({A: 120, B: -1})
    assert sub.positions() == {A: 120}
    assert sub.needs_reset() == [B]
    assert sub.state(B).reset == LATEST
    assert sub.fetchable(A) and not sub.fetchable(B)


def test_reset_policy_none_leaves_partitions_without_offsets() -> None:
    """With auto.offset.reset none, a partition without an offset is reported, not reset."""
    sub = SubscriptionState("none")
    sub.assign({A: -1})
    assert sub.needs_reset() == [] and sub.missing_offsets() == [A]


def test_every_seek_reset_and_assignment_moves_the_epoch() -> None:
    """Epochs grow with each change of position, so older fetch results can be told apart."""
    sub = SubscriptionState(EARLIEST)
    sub.assign({A: 0})
    epochs = [sub.state(A).epoch]
    sub.seek(A, 40)
    epochs.append(sub.state(A).epoch)
    sub.request_reset(A, LATEST)
    epochs.append(sub.state(A).epoch)
    sub.assign({A: 0})
    epochs.append(sub.state(A).epoch)
    assert epochs == sorted(set(epochs))


def test_uncommitted_lists_only_positions_that_moved() -> None:
    """Positions equal to the last committed offset are not committed again."""
    sub = SubscriptionState(EARLIEST)
    sub.assign({A: 10, B: 20})
    assert sub.uncommitted() == {}
    sub.advance(A, 30)
    assert sub.uncommitted() == {A: 30}
    sub.mark_committed({A: 30})
    assert sub.uncommitted() == {}


def test_a_failed_partition_is_not_fetched_until_seeked() -> None:
    """fail() stops fetching and reports the error until seek() clears it; pausing hides it."""
    sub = SubscriptionState(EARLIEST)
    sub.assign({A: 0})
    error = ValueError("bad")
    sub.fail(A, error)
    assert not sub.fetchable(A) and sub.errors() == [(A, error)]
    sub.pause([A])
    assert sub.errors() == []
    sub.resume([A])
    sub.seek(A, 5)
    assert sub.fetchable(A) and sub.errors() == []


def test_pauses_survive_only_for_partitions_still_owned() -> None:
    """A new assignment forgets pauses of partitions it took away."""
    sub = SubscriptionState(EARLIEST)
    sub.assign({A: 0, B: 0})
    sub.pause([A, B])
    assert not sub.fetchable(A)
    sub.assign({A: 0})
    assert sub.paused == {A}


def test_pattern_matching_reports_changes() -> None:
    """The pattern must match whole topic names; a change of the matched set is reported."""
    sub = SubscriptionState(EARLIEST)
    sub.pattern = re.compile(r"orders-.*")
    assert sub.set_matched(["orders-eu", "audit", "xorders-eu"])
    assert sub.matched == {"orders-eu"}
    assert not sub.set_matched(["orders-eu"])
    assert sub.set_matched(["orders-eu", "orders-us"])
    assert sub.subscribed_topics() == {"orders-eu", "orders-us"}
