"""How far a micro-batch reads: Spark's ``maxOffsetsPerTrigger`` (messages), rill's ``maxBytesPerTrigger``
(bytes) and ``minOffsetsPerTrigger``, applied on the driver to the offsets a stream would read up to.

rill offsets are byte positions, so a number of messages is not a difference of offsets:
the driver counts them. :func:`end_after` fetches from a partition's current offset
(``fetchBytes`` at a time, from the leader's page cache) and counts messages until it has
enough, so a cap in messages is exact except that a compressed wrapper is never split
(its messages share one offset): a micro-batch holds at most ``maxOffsetsPerTrigger``
messages, plus at most one wrapper's worth per partition, and every partition with a
backlog advances by one message (or wrapper) at least, as with Spark's Kafka source.
The cost is one more read, on the driver, of the bytes a capped micro-batch covers; a
backlog too small to hold more messages than the cap (fewer than ``cap * 10`` bytes,
10 bytes being the smallest 0.7 message) is not read.

The budget is shared across partitions in proportion to their backlog in bytes (Spark
shares it by backlog in messages). ``maxBytesPerTrigger`` cuts at message boundaries the
broker's index reports, else after one fetch. Not thread-safe: a stream reader's driver
process calls these one at a time.
"""

from __future__ import annotations

from collections.abc import Mapping

from rill.client.spark.planning import Cluster, TopicPartition

__all__ = ["MIN_MESSAGE_BYTES", "end_after", "capped_by_messages", "capped_by_bytes", "count_up_to"]

Offsets = dict[TopicPartition, int]
MIN_MESSAGE_BYTES = 10  # a 0.7 message on the log: 4-byte length, magic, attributes, CRC, empty payload


def end_after(c: Cluster, tp: TopicPartition, start: int, end: int, count: int, fetch_bytes: int) -> tuple[int, int]:
    """(offset, messages): where the first ``count`` messages from ``start`` end, and how many were counted.

    Stops at ``end`` (then fewer may be counted), never splits a compressed wrapper (its messages
    share an offset) and always takes the first one. ``start == end``: ``(start, 0)``.
    """
    offset, seen = start, 0
    while offset < end and seen < count:
        messages = c.reads.fetch(tp[0], tp[1], offset, max(1, min(fetch_bytes, end - offset)))
        if not messages:
            break
        i = 0
        while i < len(messages):
            first = messages[i].offset
            if first >= end:
                return offset, seen
            j = i
            while j < len(messages) and messages[j].offset == first:
                j += 1
            if seen and seen + (j - i) > count:
                return offset, seen
            seen += j - i
            offset = messages[j - 1].next_offset
            i = j
            if seen >= count:
                return offset, seen
    return offset, seen


def count_up_to(c: Cluster, current: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
                limit: int, fetch_bytes: int) -> int:
    """The messages between ``current`` and ``ends`` over all partitions, counted up to ``limit`` at most."""
    total = 0
    for tp, end in ends.items():
        if total >= limit:
            break
        if end > current[tp]:
            total += end_after(c, tp, current[tp], end, limit - total, fetch_bytes)[1]
    return total


def _shares(current: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
            budget: int) -> dict[TopicPartition, int] | None:
    """``budget`` shared by backlog in bytes (one at least each); None when the backlog fits in it."""
    backlog = {tp: ends[tp] - current[tp] for tp in ends if ends[tp] > current[tp]}
    total = sum(backlog.values())
    if total <= budget:
        return None
    return {tp: max(1, budget * size // total) for tp, size in backlog.items()}


def capped_by_messages(c: Cluster, current: Offsets, ends: Offsets, limit: int, fetch_bytes: int) -> Offsets:
    """``ends`` cut so that about ``limit`` messages are read in all (see the module doc)."""
    backlog = {tp: ends[tp] - current[tp] for tp in ends if ends[tp] > current[tp]}
    total = sum(backlog.values())
    if total <= limit * MIN_MESSAGE_BYTES:
        return ends  # too few bytes to hold more than ``limit`` messages: nothing to count
    result = dict(ends)
    for tp, size in backlog.items():
        share = max(1, limit * size // total)
        result[tp] = end_after(c, tp, current[tp], ends[tp], share, fetch_bytes)[0]
    return result


def capped_by_bytes(c: Cluster, current: Offsets, ends: Offsets, budget: int) -> Offsets:
    """``ends`` cut so that the bytes read total about ``budget``, split by backlog, at message
    boundaries; each partition with a backlog advances by one message at least."""
    shares = _shares(current, ends, budget)
    if shares is None:
        return ends
    result = dict(ends)
    for tp, share in shares.items():
        allowed = current[tp] + share
        inside = [b for b in c.boundaries_near(tp, [allowed]) if current[tp] < b <= allowed]
        result[tp] = inside[-1] if inside else _one_fetch_end(c, tp, current[tp], share)
    return result


def _one_fetch_end(c: Cluster, tp: TopicPartition, offset: int, size: int) -> int:
    """The end of the messages one fetch of ``size`` bytes at ``offset`` returns (one message at least)."""
    messages = c.reads.fetch(tp[0], tp[1], offset, max(size, 1))
    return messages[-1].next_offset if messages else offset


def bytes_per_message(c: Cluster, tp: TopicPartition, start: int, end: int, sample_bytes: int = 65536) -> float:
    """The average size of the messages of ``[start, end)`` on the log, from one fetch of up to
    ``sample_bytes`` at ``start`` (a compressed wrapper's bytes are shared by its messages)."""
    stop, seen = end_after(c, tp, start, min(end, start + sample_bytes), sample_bytes, sample_bytes)
    return max(stop - start, 1) / max(seen, 1)
