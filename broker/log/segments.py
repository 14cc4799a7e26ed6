"""An immutable, ordered list of segments (Kafka's ``LogSegments``), replaced as a whole.

Segment ``k`` holds offsets ``base_k .. base_k + size_k`` and bases are contiguous, so
the segment of an offset is found with one binary search over the base offsets
(seed 000, "Reads"). The last segment is the active one.

Thread-safety: instances never change. A log swaps in a new list to roll or delete
(copy-on-write), so a reader keeps a consistent snapshot for as long as it holds one
and never blocks on the writers.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from rill.broker.log.segment import Segment


@dataclass(frozen=True, slots=True)
class SegmentList:
    """Segments oldest first (at least one) and their base offsets."""

    segments: tuple[Segment, ...]
    bases: tuple[int, ...]

    @classmethod
    def of(cls, segments: list[Segment]) -> SegmentList:
        return cls(tuple(segments), tuple(s.base_offset for s in segments))

    @property
    def start_offset(self) -> int:
        return self.bases[0]

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    def find(self, offset: int) -> Segment:
        """The segment holding ``offset`` (the caller checked ``start_offset <= offset``)."""
        return self.segments[bisect_right(self.bases, offset) - 1]

    def from_offset(self, offset: int) -> tuple[Segment, ...]:
        """The segment holding ``offset`` and every later one."""
        return self.segments[max(0, bisect_right(self.bases, offset) - 1):]

    def appended(self, segment: Segment) -> SegmentList:
        """A new list with ``segment`` added as the active one."""
        return SegmentList(self.segments + (segment,), self.bases + (segment.base_offset,))

    def without_oldest(self, count: int) -> SegmentList:
        """A new list without the ``count`` oldest segments (``count`` < length)."""
        return SegmentList(self.segments[count:], self.bases[count:])
