"""Placing a new topic's replicas on brokers: Kafka's rack-unaware assignment.

The rule of Kafka's ``AdminUtils.assignReplicasToBrokersRackUnaware`` (replication
notes 3.3), over the broker ids sorted ascending (``n`` of them):

- partition ``p``'s first replica, its preferred leader, is ``brokers[(p + start) % n]``,
  so leaders go round-robin from a random start;
- its ``j``-th follower (``j`` from 0) is
  ``brokers[(first + 1 + (shift + j) % (n - 1)) % n]``: the followers come after the
  leader at a distance set by ``shift``, never on the leader's broker;
- ``shift`` goes up by one before each partition whose number is a non-zero multiple of
  ``n``, so the second round of partitions pairs brokers differently from the first.

``start`` and ``shift`` are drawn at random in ``0..n-1`` unless given (Kafka, given a
fixed start index, uses it for both). With factor ``f`` and ``n`` brokers each broker
leads ``partitions // n`` or one more partitions, and no partition lists a broker
twice. For brokers 0-4, 10 partitions, factor 3, start 0 and shift 0 the result is
Kafka's own test case (AdminTest.testReplicaAssignment)::

    0: 0 1 2   1: 1 2 3   2: 2 3 4   3: 3 4 0   4: 4 0 1
    5: 0 2 3   6: 1 3 4   7: 2 4 0   8: 3 0 1   9: 4 1 2

Pure functions; thread-safe as long as a shared ``rng`` is not used by two threads.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rill.client import errors
from rill.client.replica_spread import spread_replicas

__all__ = ["InvalidReplicationFactor", "assign_replicas"]


class InvalidReplicationFactor(errors.InvalidReplicationFactor, ValueError):
    """A replication factor below 1 or above the number of available brokers: the wire's error 20
    (a :class:`~rill.client.errors.BrokerError`), and a ValueError for callers of this function."""


def assign_replicas(broker_ids: Sequence[int], partitions: int, replication_factor: int, *,
                    start_index: int | None = None, shift: int | None = None,
                    rng: random.Random | None = None) -> list[tuple[int, ...]]:
    """Assign ``partitions`` partitions of ``replication_factor`` replicas each to ``broker_ids``.

    Args:
        broker_ids: the available brokers (any order; they are sorted by id first).
        start_index: the position, in the sorted ids, of partition 0's leader; random
            (from ``rng``) when None. Taken modulo the number of brokers.
        shift: the initial follower shift; random when None.
        rng: the random source for what is not given (a fresh ``random.Random()`` when None).

    Returns:
        One tuple per partition, index = partition number, holding its replica broker
        ids in assignment order (the first is the preferred leader); all distinct.

    Raises:
        InvalidReplicationFactor: ``replication_factor`` < 1 or > ``len(broker_ids)``.
        ValueError: ``partitions`` < 1, a broker id listed twice or negative, or a
            negative ``start_index`` or ``shift``.
    """
    if partitions < 1:
        raise ValueError(f"number of partitions must be larger than 0, not {partitions}")
    brokers = sorted(broker_ids)
    if len(set(brokers)) != len(brokers) or any(b < 0 for b in brokers):
        raise ValueError(f"broker ids must be distinct and non-negative: {brokers}")
    n = len(brokers)
    if replication_factor < 1:
        raise InvalidReplicationFactor(f"replication factor must be larger than 0, not {replication_factor}")
    if replication_factor > n:
        raise InvalidReplicationFactor(f"replication factor {replication_factor} larger than available brokers {n}")
    if (start_index is not None and start_index < 0) or (shift is not None and shift < 0):
        raise ValueError(f"start_index and shift must not be negative: {start_index}, {shift}")
    source = rng if rng is not None else random.Random()
    start = start_index if start_index is not None else source.randrange(n)
    next_shift = shift if shift is not None else source.randrange(n)
    return spread_replicas(brokers, partitions, replication_factor, start, next_shift)
