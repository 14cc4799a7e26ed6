"""The ``timestamp`` column: each message's append time, from the broker's time index.

Kafka 0.7 messages carry no timestamp, but the broker's index records when each of
its entries was appended (an entry every ``log.index.interval.bytes`` of log and at
the first append ``log.index.interval.ms`` after the previous entry). A message's
append time is that of the last entry at or before it: never later than the true
time and, by default, less than one second earlier (docs/spark.md, "Schema").

:class:`AppendTimes` asks for the entries of one range lazily, a page (TIME_INDEX
request) at a time as the reader moves forward, keeps only what is still ahead, and
turns a batch's offsets into a timestamp column with one bisect per entry crossed
(the column is built from runs of equal times, at C speed).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Protocol

from rill.client.errors import OffsetOutOfRange
from rill.client.protocol.requests import TIME_INDEX_MAX_ENTRIES

__all__ = ["AppendTimes", "IndexReader", "PAGE_ENTRIES"]


class IndexReader(Protocol):
    """What answers TIME_INDEX requests: a SimpleConsumer, or the leader-following LeaderReads."""

    def time_index(self, topic: str, partition: int, offset: int, max_entries: int = ...) -> list[tuple[int, int]]: ...

PAGE_ENTRIES = 8192  # entries per TIME_INDEX request: 128 KiB of answer, 32 MiB of log at 4 KiB


class AppendTimes:
    """Append times (microseconds since the epoch) of the messages of one partition from ``start`` on."""

    def __init__(self, client: IndexReader, topic: str, partition: int, start: int,
                 page_entries: int = PAGE_ENTRIES) -> None:
        self._client = client
        self._topic = topic
        self._partition = partition  # the partition as ``client`` numbers it
        self._page = max(2, min(page_entries, TIME_INDEX_MAX_ENTRIES))  # 2: a page always moves on
        self._next = start  # where the next page starts (its floor entry comes back again)
        self._offsets: list[int] = []
        self._micros: list[int] = []
        self._exhausted = False

    def column(self, offsets: Sequence[int]) -> list[int | None]:
        """The append time of each message at ``offsets`` (ascending, none before ``start``).

        Raises:
            OffsetOutOfRange: retention deleted the messages' segment meanwhile (the fetch
                of these messages succeeded just before, so this is a narrow race).
        """
        if not offsets:
            return []
        self._load(offsets[0], offsets[-1])
        entry_offsets, micros = self._offsets, self._micros
        i = bisect_right(entry_offsets, offsets[0]) - 1
        out: list[int | None] = []
        pos, n = 0, len(offsets)
        if i < 0:  # no entry at or before them (a broker never answers so): unknown
            pos = bisect_left(offsets, entry_offsets[0]) if entry_offsets else n
            out.extend([None] * pos)
            i = 0
        while pos < n:
            stop = bisect_left(offsets, entry_offsets[i + 1], pos) if i + 1 < len(entry_offsets) else n
            out.extend([micros[i]] * (stop - pos))
            pos, i = stop, i + 1
        self._forget_before(max(0, i - 2))
        return out

    def _load(self, first: int, last: int) -> None:
        """Load pages until an entry lies beyond ``last`` or the index has no more. A page
        starts at ``first`` when the last one ended before it: the entries in between are
        not needed, and may be in a segment retention has deleted since."""
        while not self._exhausted and (not self._offsets or self._offsets[-1] <= last):
            start = max(self._next, first)
            try:
                page = self._client.time_index(self._topic, self._partition, start, self._page)
            except OffsetOutOfRange as exc:
                raise OffsetOutOfRange(f"{self._topic}: the append times of offset {start} are no longer in the "
                                       f"log (deleted by retention?): {exc}") from exc
            fresh = [(o, t) for o, t in page if not self._offsets or o > self._offsets[-1]]
            if not fresh:
                self._exhausted = True
                break
            self._offsets.extend(o for o, _ in fresh)
            self._micros.extend(t * 1000 for _, t in fresh)
            self._next = self._offsets[-1]
            if len(page) < self._page:
                self._exhausted = True  # the rest of the range has no other entry (yet)

    def _forget_before(self, i: int) -> None:
        if i > 4096:
            del self._offsets[:i]
            del self._micros[:i]
