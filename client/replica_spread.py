"""Kafka's rack-unaware replica placement rule (``AdminUtils.assignReplicasToBrokersRackUnaware``), as a pure function.

Shared by the broker, which places a new topic's replicas
(``rill.broker.cluster.replica_assignment``, where the rule is described with Kafka's own
test case), and by ``rill topics reassign --generate``, which proposes new places for
existing topics' replicas over a list of brokers, as ``kafka-reassign-partitions.sh`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["spread_replicas"]


def spread_replicas(brokers: Sequence[int], partitions: int, replication_factor: int, start: int,
                    shift: int, first_partition: int = 0) -> list[tuple[int, ...]]:
    """One tuple of replica ids per partition (preferred leader first) over ``brokers`` (sorted, distinct).

    Partition ``p``'s first replica is ``brokers[(p + start) % n]``; its ``j``-th follower
    ``brokers[(first + 1 + (shift + j) % (n - 1)) % n]``, ``shift`` going up by one before
    each partition numbered a non-zero multiple of ``n``. The partitions are numbered from
    ``first_partition`` (Kafka's ``startPartitionId``: partitions added to a topic continue
    its numbering, and the list holds them alone). The caller checks that
    ``1 <= replication_factor <= len(brokers)``.
    """
    n = len(brokers)
    assignment: list[tuple[int, ...]] = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        followers = (brokers[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(replication_factor - 1))
        assignment.append((brokers[first], *followers))
    return assignment
