"""Offsets for times: ``startingTimestamp``, ``endingTimestamp`` and the ``...OffsetsByTimestamp`` options.

rill answers "where were messages appended at time T" from each partition's time index
(an entry every ``log.index.interval.bytes``, 4 KiB by default, and at the first append
``log.index.interval.ms`` after the previous entry, 1 s by default). The offset of a time
T is the last index entry appended before T (OFFSETS with a time): a read starting there
misses nothing appended at or after T and includes at most one index interval of earlier
messages; a read ending there stops at most one interval early. Both use the same
offset, so consecutive time windows ``[T1, T2)``, ``[T2, T3)`` tile the log with no gap or
overlap. A time before every message gives the log start; a time after the last append
has no offset: a start fails (Spark's ``startingOffsetsByTimestampStrategy=error``) or
takes the log end (``latest``), an end takes the log end (as Spark's).
"""

from __future__ import annotations

from rill.client.spark.options import OffsetSpec, ReadOptions, SourceOptionError, TimeSpec
from rill.client.spark.planning import Cluster, TopicPartition

__all__ = ["offset_for_time", "start_offset", "end_offset", "check_time_partitions"]


def offset_for_time(c: Cluster, tp: TopicPartition, time_ms: int, bounds: tuple[int, int]) -> int | None:
    """The offset of ``time_ms`` in ``tp`` (see the module doc); None when nothing was appended at or after it."""
    low, high = bounds
    found = c.reads.offsets_before(tp[0], tp[1], time_ms, 1)
    if not found:
        return low
    if found[0] >= high:
        return None
    return max(found[0], low)


def start_offset(c: Cluster, opts: ReadOptions, tp: TopicPartition, bounds: tuple[int, int]) -> int:
    """Where a read of ``tp`` starts: a start time if one applies to it, else ``startingOffsets``.

    Raises:
        SourceOptionError: a start time after the last message (strategy ``error``), or a bad offset.
    """
    times = opts.starting_times
    wanted = times.time_for(*tp) if times is not None else None
    if times is None or wanted is None:
        return c.resolve(opts.starting, tp, "startingOffsets", bounds)
    offset = offset_for_time(c, tp, wanted, bounds)
    if offset is not None:
        return offset
    if opts.time_strategy == "latest":
        return bounds[1]
    raise SourceOptionError(f"option {times.option!r}: no message of {tp[0]}-{tp[1]} was appended at or after "
                            f"{wanted} (the partition's newest message is older); set "
                            f"startingOffsetsByTimestampStrategy=latest to start such partitions at their end")


def end_offset(c: Cluster, opts: ReadOptions, tp: TopicPartition, bounds: tuple[int, int]) -> int:
    """Where a batch read of ``tp`` ends: an end time if one applies to it (the log end for a time after the
    last message), else ``endingOffsets``."""
    times = opts.ending_times
    wanted = times.time_for(*tp) if times is not None else None
    if times is None or wanted is None:
        return c.resolve(opts.ending, tp, "endingOffsets", bounds)
    offset = offset_for_time(c, tp, wanted, bounds)
    return bounds[1] if offset is None else offset


def check_time_partitions(c: Cluster, times: TimeSpec | None) -> None:
    """Every partition a ``...OffsetsByTimestamp`` JSON names must be subscribed and exist."""
    if times is not None and times.per_partition:
        c.check_named_partitions(OffsetSpec(0, times.per_partition), c.partition_counts, times.option)
