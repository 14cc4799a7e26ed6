"""Kafka's rack-unaware replica assignment (rill.broker.cluster.replica_assignment)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.broker.cluster.replica_assignment import InvalidReplicationFactor, assign_replicas

# AdminTest.testReplicaAssignment: brokers 0-4, 10 partitions, factor 3, fixed start index 0.
KAFKA_EXPECTED = [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
                  (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]


def test_kafkas_own_test_case() -> None:
    """Brokers 0-4, 10 partitions, factor 3, start 0, shift 0 give exactly Kafka's expected assignment."""
    assert assign_replicas(range(5), 10, 3, start_index=0, shift=0) == KAFKA_EXPECTED


def test_start_and_shift_follow_kafkas_formula() -> None:
    """Start 1 and shift 2 over 4 brokers place followers 1 + (shift + j) % 3 after the leader, shift + 1 per round."""
    assert assign_replicas([0, 1, 2, 3], 8, 2, start_index=1, shift=2) == [
        (1, 0), (2, 1), (3, 2), (0, 3),  # shift 2: the follower sits 3 places after the leader
        (1, 2), (2, 3), (3, 0), (0, 1),  # shift 3 = 0 mod 3: 1 place after
    ]


def test_brokers_are_sorted_by_id_first() -> None:
    """The order the ids come in does not matter; positions index the sorted ids."""
    assert assign_replicas([40, 10, 30, 20, 0], 10, 3, start_index=0, shift=0) == [
        tuple(10 * b for b in replicas) for replicas in KAFKA_EXPECTED]


def test_random_start_and_shift_come_from_rng() -> None:
    """Without a start or shift the rng decides them: one seed, one assignment; different seeds differ."""
    first = assign_replicas(range(6), 12, 3, rng=random.Random(7))
    assert assign_replicas(range(6), 12, 3, rng=random.Random(7)) == first
    results = {tuple(assign_replicas(range(6), 12, 3, rng=random.Random(seed))) for seed in range(20)}
    assert len(results) > 1
    assert {a[0][0] for a in results} != {first[0][0]}  # partition 0's leader is not always the same


@given(brokers=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=12, unique=True),
       partitions=st.integers(min_value=1, max_value=60), data=st.data())
def test_replicas_leaders_and_followers_are_spread_evenly(brokers: list[int], partitions: int,
                                                         data: st.DataObject) -> None:
    """Replicas of a partition are distinct; each broker leads n//b or n//b + 1; follower counts differ by < factor."""
    factor = data.draw(st.integers(min_value=1, max_value=len(brokers)))
    start = data.draw(st.integers(min_value=0, max_value=3 * len(brokers)))
    shift = data.draw(st.integers(min_value=0, max_value=3 * len(brokers)))
    assignment = assign_replicas(brokers, partitions, factor, start_index=start, shift=shift)
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == factor and len(set(replicas)) == factor and set(replicas) <= set(brokers)
    n = len(brokers)
    leaders = Counter(r[0] for r in assignment)
    assert {leaders.get(b, 0) for b in brokers} <= {partitions // n, partitions // n + 1}
    followers = Counter(b for r in assignment for b in r[1:])
    counts = [followers.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= factor - 1
    if partitions % n == 0:
        assert set(counts) == {partitions // n * (factor - 1)}


def test_one_broker_one_replica() -> None:
    """A single broker takes every partition alone."""
    assert assign_replicas([7], 3, 1) == [(7,), (7,), (7,)]


@pytest.mark.parametrize(("brokers", "factor", "message"), [
    ([0, 1], 3, "replication factor 3 larger than available brokers 2"),
    ([0, 1], 0, "replication factor must be larger than 0"),
    ([], 1, "replication factor 1 larger than available brokers 0"),
])
def test_impossible_replication_factors_are_refused(brokers: list[int], factor: int, message: str) -> None:
    """A factor below 1 or above the broker count raises InvalidReplicationFactor (a ValueError) in Kafka's words."""
    with pytest.raises(InvalidReplicationFactor, match=message) as caught:
        assign_replicas(brokers, 4, factor)
    assert isinstance(caught.value, ValueError)


def test_bad_partitions_and_brokers_are_refused() -> None:
    """No partitions, a broker listed twice, a negative id, start or shift: ValueError, not a factor error."""
    for call in (lambda: assign_replicas([0, 1], 0, 1), lambda: assign_replicas([0, 1, 1], 2, 2),
                 lambda: assign_replicas([-1, 1], 2, 2), lambda: assign_replicas([0, 1], 2, 2, start_index=-1),
                 lambda: assign_replicas([0, 1], 2, 2, shift=-1)):
        with pytest.raises(ValueError) as caught:
            call()
        assert not isinstance(caught.value, InvalidReplicationFactor)
