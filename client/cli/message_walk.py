"""Walking N messages from an offset, for ``rill groups rewind --shift-by N``.

Offsets are byte positions (Kafka 0.7), so "N messages on" is not ``offset + N``: it is
the N-th message boundary after the offset, found by reading the messages.

- **Forward** (N > 0): fetch from the offset and step over N messages; the answer is
  where the N-th one ends.
- **Backward** (N < 0): a log cannot be read backwards, so the walk jumps back to the
  last index entry before the offset (TIME_INDEX: every entry is a message boundary,
  at most ``log.index.interval.bytes`` apart), reads forward from there to the offset
  collecting the boundaries, and jumps back again until it has N of them.

A compressed wrapper message is one step: a consumer can only start at its beginning
or after its end (rill.client.protocol.messages). The walk stops at the log start and
end (Kafka clamps a shift to them too). Blocking: one request per fetch or index look-up.
"""

from __future__ import annotations

from typing import Protocol

from rill.client.protocol.messages import Message

__all__ = ["PartitionLog", "shift_offset"]


class PartitionLog(Protocol):
    """One partition's reads (a SimpleConsumer bound to the partition's broker and number)."""

    def fetch(self, offset: int) -> list[Message]: ...

    def index_at_or_before(self, offset: int) -> int | None: ...


def shift_offset(log: PartitionLog, offset: int, count: int, start: int, end: int) -> int:
    """The message boundary ``count`` messages after (``count`` > 0) or before (< 0) the boundary ``offset``,
    within the log ``[start, end]``."""
    offset = min(max(offset, start), end)
    if count > 0:
        return _forward(log, offset, count, end)
    if count < 0:
        return _backward(log, offset, -count, start)
    return offset


def _forward(log: PartitionLog, offset: int, count: int, end: int) -> int:
    while count > 0 and offset < end:
        messages = log.fetch(offset)
        if not messages:
            break
        for m in messages:
            if m.next_offset > offset:  # inside a compressed wrapper only its last message moves on
                offset = m.next_offset
                count -= 1
                if count == 0:
                    break
    return min(offset, end)


def _backward(log: PartitionLog, offset: int, count: int, start: int) -> int:
    found: list[int] = []  # boundaries before ``offset``, ascending, none missing between them and it
    upper = offset
    while upper > start:
        entry = log.index_at_or_before(upper - 1)
        anchor = start if entry is None or entry >= upper else max(entry, start)
        found = _boundaries(log, anchor, upper) + found
        if len(found) >= count:
            return found[-count]
        upper = anchor
    return start


def _boundaries(log: PartitionLog, low: int, high: int) -> list[int]:
    """The offsets where messages (outer ones: a wrapper once) start in ``[low, high)``."""
    out: list[int] = []
    offset = low
    while offset < high:
        messages = log.fetch(offset)
        if not messages:
            break
        for m in messages:
            if m.offset >= high:
                return out
            if not out or out[-1] != m.offset:
                out.append(m.offset)
        offset = messages[-1].next_offset
    return out
