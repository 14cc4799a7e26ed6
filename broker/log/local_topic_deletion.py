"""Deleting a Kafka 0.7-style topic from one data directory (Admin DeleteTopic of a topic that is not replicated).

A 0.7-style topic lives whole on the broker that holds it, so deleting it is local, in
Kafka's two steps (as a replica moved away is deleted, replica_logs.py): every partition
is unpublished from the :class:`~rill.broker.log.partition_table.PartitionTable` and its
log closed without a flush (``Log.abandon``: an append racing the deletion fails with
StorageError), its directory is renamed ``<topic>-<p>.<unix_ms>.deleted`` at once
(durably, skipped by a restart), and the renamed directories are removed on a background
thread. From the rename on, the name is free: a new topic of that name starts empty.

Thread-safety: :func:`delete_local_topic` runs on the calling thread (never the event
loop: the renames fsync the data directory), taking the table's lock only to check and
unpublish.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Sequence

import structlog

from rill.broker.log import loading
from rill.broker.log.log import Log
from rill.broker.log.partition_table import PartitionTable
from rill.client.errors import InvalidRequest, StorageError, UnknownTopic
from rill.client.topic_names import validate_topic

__all__ = ["delete_local_topic"]

_logger = structlog.get_logger(__name__)


def delete_local_topic(table: PartitionTable, data_dir: str, topic: str, forget: Callable[[Log], None]) -> int:
    """Delete every partition of the 0.7-style ``topic`` held in ``table``; ``forget`` drops each log from the
    manager's flush bookkeeping.

    Returns:
        The number of partitions deleted.

    Raises:
        InvalidTopic: an illegal name.
        UnknownTopic: no 0.7-style topic of that name here.
        InvalidRequest: the name holds replicas of a replicated topic here, or the topic is being created.
        StorageError: the manager is closed, or a directory could not be renamed (its partition is
            unpublished anyway; the others are deleted).
    """
    validate_topic(topic)
    with table.lock:
        table.check_open()
        if topic in table.creating:
            raise InvalidRequest(f"topic {topic!r} is being created on this broker: delete it once it exists")
        count = table.topics.get(topic)
        if count is None:
            if topic in table.replica_topics:
                raise InvalidRequest(f"topic {topic!r} is a replicated topic here: the controller deletes it")
            raise UnknownTopic(f"unknown topic {topic!r}")
        logs = [table.logs[(topic, p)] for p in range(count) if (topic, p) in table.logs]
        table.logs = {k: v for k, v in table.logs.items() if k[0] != topic}
        table.topics = {t: c for t, c in table.topics.items() if t != topic}
    aside, failures = _set_aside(data_dir, logs, forget)
    if aside:
        threading.Thread(target=_remove, args=(topic, aside), name="rill-topic-delete", daemon=True).start()
    _logger.info("logs.topic_deleted", topic=topic, partitions=count, directories=aside)
    if failures:
        raise StorageError(f"deleting topic {topic}: {'; '.join(failures)}")
    return count


def _set_aside(data_dir: str, logs: Sequence[Log], forget: Callable[[Log], None]) -> tuple[list[str], list[str]]:
    """Close each log and rename its directory aside; (the new paths, the failures as messages)."""
    aside: list[str] = []
    failures: list[str] = []
    for log in logs:
        forget(log)
        log.abandon()
        try:
            aside.append(loading.set_replica_aside(data_dir, log.directory))
        except OSError as exc:
            failures.append(f"cannot rename {log.directory}: {exc.strerror or exc}")
    return aside, failures


def _remove(topic: str, directories: list[str]) -> None:
    size = 0
    for directory in directories:
        for root, _, names in os.walk(directory):
            size += sum(os.path.getsize(os.path.join(root, n)) for n in names if os.path.isfile(os.path.join(root, n)))
        shutil.rmtree(directory, ignore_errors=True)
    _logger.info("logs.topic_files_deleted", topic=topic, directories=len(directories), bytes=size)
