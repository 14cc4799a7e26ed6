"""RewindConsumer on a live group: by offset, earliest, latest and time; during a rebalance; all or nothing."""

from __future__ import annotations

from rill.coordinator.records import OffsetsCommitted
from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import Harness, offsets_of, owned

T0 = 1_700_000_000_000


def _fill(h: Harness) -> None:
    """Partitions 0..3 of t: messages at 0, 14, 28 appended at T0, T0+1000, T0+2000; end 42."""
    for p in range(4):
        for i in range(3):
            h.catalog.append("t", p, [10], timestamp_ms=T0 + 1000 * i)


def _actual(response: pb.RewindConsumerResponse) -> dict[tuple[str, int], int]:
    return {(o.topic, o.partition): o.offset for o in response.actual_offsets}


def test_rewind_by_offset_reaches_the_owner_through_its_heartbeat(h: Harness) -> None:
    """The owner is told to re-register and gets the new offset at once, in the same generation."""
    _fill(h)
    a, b = h.stable(2)
    mine = sorted(owned(a))[0]
    assert h.commit({mine: 42}, a).error_code == pb.NONE
    response = h.rewind({mine: 14})
    assert response.error_code == pb.NONE and _actual(response) == {mine: 14}
    assert h.fetch()[mine] == 14
    assert h.heartbeat(a) == pb.REBALANCE_IN_PROGRESS
    assert h.heartbeat(b) == pb.NONE
    again = h.join(consumer_id=a.consumer_id)
    assert again.generation == a.generation and offsets_of(again)[mine] == 14
    assert h.heartbeat(a) == pb.NONE and h.heartbeat(b) == pb.NONE


def test_a_rewound_member_cannot_commit_over_the_rewind(h: Harness) -> None:
    """Until it re-registers, the owner's commits get REBALANCE_IN_PROGRESS, so the rewind is not undone."""
    _fill(h)
    a = h.join()
    h.rewind({("t", 0): 0})
    assert h.commit({("t", 0): 42}, a).error_code == pb.REBALANCE_IN_PROGRESS
    assert h.fetch()[("t", 0)] == 0
    h.join(consumer_id=a.consumer_id)
    assert h.commit({("t", 0): 42}, a).error_code == pb.NONE


def test_rewind_to_earliest_follows_the_log_start(h: Harness) -> None:
    """EARLIEST resolves to the log start offset, after retention moved it."""
    _fill(h)
    h.catalog.truncate("t", 1, 20)
    response = h.rewind({("t", 0): 999, ("t", 1): 999}, target=pb.EARLIEST)
    assert _actual(response) == {("t", 0): 0, ("t", 1): 28}


def test_rewind_to_latest_is_the_log_end(h: Harness) -> None:
    """LATEST resolves to the log end offset."""
    _fill(h)
    assert _actual(h.rewind({("t", 2): 0}, target=pb.LATEST)) == {("t", 2): 42}


def test_rewind_by_time_finds_the_first_message_at_or_after_it(h: Harness) -> None:
    """TIMESTAMP resolves to the first message appended at or after the time, or the end when none is."""
    _fill(h)
    response = h.rewind({("t", 0): 0, ("t", 1): 0}, target=pb.TIMESTAMP, timestamp=T0 + 500)
    assert _actual(response) == {("t", 0): 14, ("t", 1): 14}
    assert _actual(h.rewind({("t", 0): 0}, target=pb.TIMESTAMP, timestamp=T0 + 9999)) == {("t", 0): 42}


def test_rewind_to_a_negative_timestamp_is_refused(h: Harness) -> None:
    """TIMESTAMP with a time before the epoch (-1, -2^63) is INVALID_REQUEST for the whole request: nothing moves."""
    _fill(h)
    h.commit({("t", 0): 28, ("t", 1): 28})
    for timestamp in (-1, -2**63):
        response = h.rewind({("t", 0): 0, ("t", 1): 0}, target=pb.TIMESTAMP, timestamp=timestamp)
        assert response.error_code == pb.INVALID_REQUEST and not response.actual_offsets
        assert h.rewind({}, target=pb.TIMESTAMP, timestamp=timestamp).error_code == pb.INVALID_REQUEST
    assert h.fetch() == {("t", 0): 28, ("t", 1): 28}
    assert not [r for r in h.records if isinstance(r, OffsetsCommitted) and r.rewind]
    assert _actual(h.rewind({("t", 0): 0}, target=pb.TIMESTAMP, timestamp=0)) == {("t", 0): 0}


def test_rewind_with_no_entries_moves_every_partition_of_the_group(h: Harness) -> None:
    """With a target and no entries, every partition of the group's topics moves."""
    _fill(h)
    response = h.rewind({}, target=pb.LATEST)
    assert _actual(response) == {("t", p): 42 for p in range(4)}
    assert h.rewind({}).error_code == pb.INVALID_REQUEST


def test_rewind_is_all_or_nothing(h: Harness) -> None:
    """One bad entry refuses the whole rewind, with a code per entry, and nothing moves."""
    _fill(h)
    h.commit({("t", 0): 28, ("t", 1): 28})
    response = h.rewind({("t", 0): 0, ("t", 1): 99, ("t", 2): 15, ("x", 0): 0})
    assert response.error_code == pb.OFFSET_OUT_OF_RANGE
    codes = {(o.topic, o.partition): o.error_code for o in response.actual_offsets}
    assert codes == {("t", 0): pb.NONE, ("t", 1): pb.OFFSET_OUT_OF_RANGE, ("t", 2): pb.INVALID_OFFSET,
                     ("x", 0): pb.UNKNOWN_TOPIC_OR_PARTITION}
    assert h.fetch() == {("t", 0): 28, ("t", 1): 28}
    assert not [r for r in h.records if isinstance(r, OffsetsCommitted) and r.rewind]


def test_rewind_during_a_rebalance(h: Harness) -> None:
    """A rewind while the group rebalances reaches the new owners in their RegisterConsumer responses."""
    _fill(h)
    a = h.join()
    h.commit({("t", p): 42 for p in range(4)}, a)
    newcomer = h.register()
    assert h.rewind({("t", p): 14 for p in range(4)}).error_code == pb.NONE
    assert h.commit({("t", 0): 42}, a).error_code == pb.REBALANCE_IN_PROGRESS
    assert h.heartbeat(a) == pb.REBALANCE_IN_PROGRESS
    again = h.join(consumer_id=a.consumer_id)
    other = newcomer.wait(0)
    assert other is not None
    assert set(offsets_of(again).values()) == set(offsets_of(other).values()) == {14}
    assert h.heartbeat(again) == pb.NONE and h.heartbeat(other) == pb.NONE


def test_rewind_after_a_member_re_registered_needs_no_second_round(h: Harness) -> None:
    """A member already waiting in RegisterConsumer gets the rewound offsets in that answer and is not told again."""
    _fill(h)
    a, b = h.stable(2)
    mine = sorted(owned(a))[0]
    newcomer = h.register()
    waiting = h.register(consumer_id=a.consumer_id)
    assert h.rewind({mine: 28}).error_code == pb.NONE
    b_again = h.join(consumer_id=b.consumer_id)
    answers = [waiting.wait(0), b_again, newcomer.wait(0)]
    merged = {tp: o for r in answers if r is not None for tp, o in offsets_of(r).items()}
    assert merged[mine] == 28
    answer = answers[0]
    assert answer is not None and answer.error_code == pb.NONE
    assert h.heartbeat(answer) == pb.NONE


def test_rewind_of_an_unknown_group(h: Harness) -> None:
    """RewindConsumer on a missing group gets GROUP_NOT_FOUND; an unknown target INVALID_REQUEST."""
    assert h.rewind({("t", 0): 0}, group="nope").error_code == pb.GROUP_NOT_FOUND
    assert h.rewind({("t", 0): 0}, target=42).error_code == pb.INVALID_REQUEST
