"""Forgetting the committed offsets of deleted topics, as Kafka's coordinator does.

When a topic is deleted, every group this broker coordinates that committed offsets of it
gets an :class:`~rill.coordinator.records.OffsetsDeleted` record, persisted like any other
(so the group's partition, or the local log, holds it and a later load replays it): a
topic created again under the same name starts with no committed offsets, and its
consumers start where ``auto.offset.reset`` says instead of at old byte positions that
mean nothing in the new log. Groups coordinated elsewhere are cleaned by their own
coordinator, which learns of the deletion the same way (every broker does).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import structlog

from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.records import OffsetsDeleted, Record

__all__ = ["forget_deleted_topics"]

log = structlog.get_logger(__name__)


def forget_deleted_topics(coordinator: GroupCoordinator, sink: Callable[[Sequence[Record]], None],
                          owns: Callable[[str], bool], topics: Collection[str]) -> list[str]:
    """Persist and apply OffsetsDeleted for every group served here with offsets of ``topics``; the groups.

    A group whose record cannot be written (no longer coordinated here, storage) is logged and
    skipped: its new coordinator cleans it when it learns of the deletion, or never, if it
    loaded the group after (the same window as Kafka's).
    """
    cleaned = []
    for name, of_topics in coordinator.offsets_of_topics(topics).items():
        with coordinator.group_locks.hold(name):
            if not owns(name):
                continue
            try:
                sink([OffsetsDeleted(name, of_topics)])
            except Exception as exc:  # NotCoordinator, StorageError, TimeoutError: the group stays as it was
                log.warning("group.offsets_delete_failed", group=name, topics=list(of_topics), error=str(exc))
                continue
        cleaned.append(name)
    return cleaned
