"""Byte ranges of partitions: the unit of work of a Spark task, and how big ones are split.

A :class:`ByteRange` is ``[start, end)`` of one topic-partition: the task reads every
message whose offset is at least ``start`` and below ``end``. Both ends are message
boundaries (offsets are byte positions, 0.7 semantics), so consecutive ranges of a
partition read each message exactly once.

Splitting needs boundaries inside a partition. The broker reports its sparse index
entries (one every ``log.index.interval.bytes``, 4 KiB by default) in answer to a
TIME_INDEX request; the planner asks for the two entries around each even share
(``Cluster.boundaries_near``). Each is the offset of a message. :func:`split` cuts at
the boundary nearest to each share, so pieces are about equal; with no boundary
inside, a range stays whole.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

__all__ = ["ByteRange", "split", "pieces_for"]


@dataclass(frozen=True)
class ByteRange(InputPartition):
    """Messages of ``topic``-``partition`` with ``start <= offset < end``, read from the
    broker at ``host``:``port`` (the partition's leader when planned), where the partition
    is number ``broker_partition``; ``port`` 0 when the planner knew no leader. The task
    follows the leader if it has moved since (rill.client.spark.leaders). Picklable: a
    task gets a copy."""

    topic: str
    partition: int
    start: int
    end: int
    host: str
    port: int
    broker_partition: int

    @property
    def size(self) -> int:
        return self.end - self.start


def pieces_for(size: int, split_bytes: int) -> int:
    """How many pieces a range of ``size`` bytes becomes with pieces of about ``split_bytes``."""
    return max(1, -(-size // split_bytes))


def split(whole: ByteRange, pieces: int, boundaries: Sequence[int]) -> list[ByteRange]:
    """Cut ``whole`` into up to ``pieces`` ranges at message ``boundaries`` (ascending).

    Returns:
        Consecutive ranges covering exactly ``whole`` (fewer than ``pieces`` when the
        boundaries inside are too few; ``[whole]`` when there are none or ``pieces <= 1``).
    """
    if pieces <= 1 or whole.size <= 0:
        return [whole]
    lo, hi = bisect_left(boundaries, whole.start + 1), bisect_left(boundaries, whole.end)
    inside = boundaries[lo:hi]  # strictly between start and end
    cuts: list[int] = []
    for k in range(1, pieces):
        target = whole.start + whole.size * k // pieces
        i = bisect_left(inside, target)
        near = [inside[j] for j in (i - 1, i) if 0 <= j < len(inside)]
        if near:
            cut = min(near, key=lambda b: abs(b - target))
            if not cuts or cut > cuts[-1]:
                cuts.append(cut)
    edges = [whole.start, *cuts, whole.end]
    return [ByteRange(whole.topic, whole.partition, a, b, whole.host, whole.port, whole.broker_partition)
            for a, b in zip(edges, edges[1:])]
