"""The Spark reader's append-time column over a fake TIME_INDEX (paging, runs, retention)."""

from __future__ import annotations

from bisect import bisect_right

import pytest

from rill.client.errors import OffsetOutOfRange
from rill.client.spark.append_times import AppendTimes


class FakeIndex:
    """Answers time_index like a broker over fixed entries (offset, ms), counting requests."""

    def __init__(self, entries: list[tuple[int, int]]) -> None:
        self.entries = entries
        self.requests = 0

    def time_index(self, topic: str, partition: int, offset: int, max_entries: int) -> list[tuple[int, int]]:
        self.requests += 1
        lo = max(0, bisect_right([o for o, _ in self.entries], offset) - 1)
        return self.entries[lo:lo + max_entries]


ENTRIES = [(k * 100, 1_000 + k * 10) for k in range(50)]  # an entry every 100 bytes, 10 ms apart


def _expected(offset: int) -> int:
    return max(t for o, t in ENTRIES if o <= offset) * 1000


def test_each_message_gets_its_floor_entry_time_across_pages() -> None:
    """Over many batches and small pages, every message gets its floor entry's time, in microseconds."""
    fake = FakeIndex(ENTRIES)
    times = AppendTimes(fake, "t", 0, 0, page_entries=4)  # type: ignore[arg-type]
    offsets = list(range(0, 5000, 37))
    got = []
    for i in range(0, len(offsets), 9):
        got.extend(times.column(offsets[i:i + 9]))
    assert got == [_expected(o) for o in offsets]
    assert fake.requests <= len(ENTRIES) // 3 + 2  # pages are asked for as the reader moves, not per batch


def test_messages_sharing_an_offset_and_entry_offsets() -> None:
    """Messages of a compressed wrapper share its offset; a message at an entry's offset gets that entry."""
    times = AppendTimes(FakeIndex(ENTRIES), "t", 0, 150)  # type: ignore[arg-type]
    assert times.column([150, 200, 200, 250, 300]) == [_expected(150), _expected(200), _expected(200),
                                                       _expected(250), _expected(300)]
    assert times.column([]) == []


def test_messages_before_the_first_entry_are_unknown() -> None:
    """Should a broker answer without an entry at or before a message (it never does), that message gets None."""
    times = AppendTimes(FakeIndex(ENTRIES[5:]), "t", 0, 0)  # type: ignore[arg-type]
    assert times.column([100, 499, 500, 650]) == [None, None, _expected(500), _expected(650)]


def test_no_entries_at_all_gives_nulls() -> None:
    """An index with no entries (an empty answer) gives None for every message, with one request."""
    fake = FakeIndex([])
    times = AppendTimes(fake, "t", 0, 0)  # type: ignore[arg-type]
    assert times.column([0, 10]) == [None, None] and times.column([20]) == [None]
    assert fake.requests == 1


class RetainedIndex(FakeIndex):
    """A broker whose retention deleted everything before ``log_start``."""

    def __init__(self, entries: list[tuple[int, int]], log_start: int) -> None:
        super().__init__(entries)
        self.log_start = log_start

    def time_index(self, topic: str, partition: int, offset: int, max_entries: int) -> list[tuple[int, int]]:
        if offset < self.log_start:
            raise OffsetOutOfRange(f"offset {offset} before {self.log_start}")
        return super().time_index(topic, partition, offset, max_entries)


def test_a_page_starts_at_the_batch_when_the_last_page_ended_before_it() -> None:
    """After retention removed the last page's end, the next page is asked from the batch's first offset."""
    index = RetainedIndex(ENTRIES, 0)
    times = AppendTimes(index, "t", 0, 0, page_entries=3)  # type: ignore[arg-type]
    assert times.column([0, 150]) == [_expected(0), _expected(150)]
    index.log_start = 2000  # segments before 2000 deleted; the reader's next batch starts at 2050
    assert times.column([2050, 2300]) == [_expected(2050), _expected(2300)]
    index.log_start = 10_000
    with pytest.raises(OffsetOutOfRange, match="deleted by retention"):
        times.column([4990])


def test_a_page_size_above_the_broker_cap_is_capped() -> None:
    """Asking for more than the broker's 65,536 entries per answer would make every page look like the last."""
    fake = FakeIndex(ENTRIES)
    times = AppendTimes(fake, "t", 0, 0, page_entries=10**9)  # type: ignore[arg-type]
    assert times.column([4999]) == [_expected(4999)]
    assert AppendTimes(fake, "t", 0, 0, page_entries=1)._page == 2  # type: ignore[arg-type]
