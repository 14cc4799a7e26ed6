"""Fixtures for the offset store tests: a real Log in tmp_path and a small state model."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rill.broker.log import Log, LogConfig
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import GenerationStarted, GroupCreated, GroupDeleted, OffsetsCommitted, Record

TOPIC = "__coordinator"
# What the broker should give this log: small segments (compaction deletes whole
# ones), no count/time flushes (the store fsyncs itself), no retention.
STORE_CONFIG = LogConfig(segment_bytes=1 << 20, flush_interval_messages=2**62, flush_interval_ms=2**62,
                         retention_ms=-1, retention_bytes=-1, max_message_bytes=8 << 20)

OpenLog = Callable[..., Log]


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[OpenLog]:
    """Open (or reopen) the coordinator log under tmp_path; every log opened is closed at the end."""
    opened: list[Log] = []

    def open_(*, clean: bool = False, config: LogConfig = STORE_CONFIG) -> Log:
        log = Log.open(str(tmp_path), TOPIC, 0, config, clean=clean)
        opened.append(log)
        return log

    yield open_
    for log in opened:
        if log.failed is None:
            log.close()


@pytest.fixture
def log(open_log: OpenLog) -> Log:
    return open_log()


@pytest.fixture
def store(log: Log) -> OffsetStore:
    return OffsetStore(log)


def reopen(open_log: OpenLog, store: OffsetStore | None = None, **kwargs: Any) -> list[Record]:
    """Close ``store`` (if given), open the log again (unclean) and return everything replayed.

    Without ``store`` the old log is left open, as after ``kill -9``.
    """
    if store is not None:
        store.close()
    return list(OffsetStore(open_log(clean=False), **kwargs).replay())


@dataclass
class Model:
    """Coordinator state reduced to what records set: the reference for replay tests."""

    groups: dict[str, GroupCreated] = field(default_factory=dict)
    generations: dict[str, GenerationStarted] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def apply(self, records: Iterable[Record]) -> Model:
        for record in records:
            if isinstance(record, GroupCreated):
                self.groups[record.group] = record
            elif isinstance(record, GroupDeleted):
                self.groups.pop(record.group, None)
                self.generations.pop(record.group, None)
                self.offsets.pop(record.group, None)
            elif isinstance(record, GenerationStarted):
                self.generations[record.group] = record
            else:
                group = self.offsets.setdefault(record.group, {})
                group.update(((topic, partition), offset) for topic, partition, offset in record.offsets)
        return self

    def snapshot(self) -> list[Record]:
        """Records that re-state the whole state (what the coordinator's snapshot_records returns)."""
        out: list[Record] = list(self.groups.values())
        out.extend(self.generations.values())
        out.extend(OffsetsCommitted(group, tuple((t, p, o) for (t, p), o in offsets.items()))
                   for group, offsets in self.offsets.items())
        return out


def group_created(group: str) -> GroupCreated:
    return GroupCreated(group, session_timeout_ms=10_000, rebalance_timeout_ms=30_000, topics=("t",),
                        strategy="range", ephemeral=False)


def commit(group: str, partition: int, offset: int, topic: str = "t") -> OffsetsCommitted:
    return OffsetsCommitted(group, ((topic, partition, offset),))
