"""Creating a topic's partitions on disk: off the event loop, and whole or not at all.

A topic of N partitions is N directories ``<topic>-<p>`` (Kafka 0.7's layout), which
no single rename can publish. So creation writes an intent marker first and removes
it last::

    1. <data_dir>/.creating-<topic>   written and fsynced (its text: the partition count)
    2. <topic>-0 .. <topic>-(N-1)     made, each with an empty first segment
    3. fsync <data_dir>                the directories are durable
    4. remove the marker, fsync <data_dir>

A crash before step 4 leaves the marker: at start-up :func:`remove_incomplete` deletes
the topic's directories (they hold no data: nothing is published before step 4) and
logs ``logs.incomplete_topic_removed`` naming the topic. A one-partition topic needs
no marker (one ``mkdir`` is atomic).

All of this runs on one worker thread (:class:`TopicCreator`), so the broker's event
loop never waits for a directory or an fsync; requests that need the new topic wait
for its future (the connection that asked, only).

Thread-safety: :meth:`TopicCreator.submit` may be called from any thread; the work
runs on the creator's thread; the ``publish`` callback runs there too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from rill.broker.log import files
from rill.broker.log.log import Log

MARKER_PREFIX = ".creating-"
_logger = structlog.get_logger(__name__)


def marker_path(data_dir: str, topic: str) -> str:
    return os.path.join(data_dir, f"{MARKER_PREFIX}{topic}")


def write_marker(data_dir: str, topic: str, partitions: int) -> str:
    """Write and fsync the creation marker of ``topic``; return its path."""
    path = marker_path(data_dir, topic)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, b"%d\n" % partitions)
        os.fsync(fd)
    finally:
        os.close(fd)
    files.fsync_dir(data_dir)
    return path


def incomplete_topics(names: list[str]) -> list[str]:
    """The topics whose creation marker is among the data directory entries ``names``."""
    return sorted(name[len(MARKER_PREFIX):] for name in names if name.startswith(MARKER_PREFIX))


def remove_incomplete(data_dir: str, topic: str, partition_dirs: list[str]) -> bool:
    """Delete a topic that was being created when the broker stopped, then its marker.

    ``partition_dirs`` are the topic's directories found at start-up. If one holds a
    non-empty segment, nothing is deleted (that cannot come from an interrupted
    creation): the marker goes, the topic is kept and the case is reported.

    Returns:
        Whether the topic was removed (False: it is kept and should be loaded).
    """
    with_data = [d for d in partition_dirs if _holds_data(d)]
    expected = _marker_count(marker_path(data_dir, topic))
    if with_data:
        _logger.error("logs.incomplete_topic_has_data", topic=topic, directories=with_data,
                      detail="a topic marked as being created holds data: it is kept as it is")
    else:
        for directory in partition_dirs:
            shutil.rmtree(directory, ignore_errors=True)
    os.unlink(marker_path(data_dir, topic))
    files.fsync_dir(data_dir)
    if not with_data:
        _logger.warning("logs.incomplete_topic_removed", topic=topic, partitions_found=len(partition_dirs),
                        partitions_expected=expected,
                        detail="the broker stopped while creating this topic; it was never published")
    return not with_data


def _marker_count(path: str) -> int:
    try:
        with open(path, "rb") as f:
            text = f.read(32).strip()
    except OSError:
        return -1
    return int(text) if text.isdigit() else -1


def _holds_data(directory: str) -> bool:
    try:
        return any(os.path.getsize(os.path.join(directory, name)) > 0
                   for name in os.listdir(directory) if name.endswith(files.SEGMENT_SUFFIX))
    except OSError:
        return False


OpenPartition = Callable[[str, int, str], Log]
"""Opens the new partition ``(topic, partition, directory)``; returns its log."""


class TopicCreator:
    """Creates topics one at a time on a worker thread (see the module docstring)."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rill-topic-creator")

    def submit(self, topic: str, partitions: int, open_partition: OpenPartition,
               publish: Callable[[list[Log]], None], discard: Callable[[Log], None]) -> Future[int]:
        """Create ``topic`` on the worker; the future gives the partition count once it is published.

        ``publish(logs)`` runs on the worker after the marker is gone; on failure each
        opened log is passed to ``discard`` and the directories are removed, and the
        future carries the error.
        """
        return self._executor.submit(self._create, topic, partitions, open_partition, publish, discard)

    def _create(self, topic: str, partitions: int, open_partition: OpenPartition,
                publish: Callable[[list[Log]], None], discard: Callable[[Log], None]) -> int:
        marker = write_marker(self.data_dir, topic, partitions) if partitions > 1 else None
        logs: list[Log] = []
        made: list[str] = []
        try:
            for partition in range(partitions):
                directory = os.path.join(self.data_dir, files.partition_dir_name(topic, partition))
                os.mkdir(directory)
                made.append(directory)
                logs.append(open_partition(topic, partition, directory))
            files.fsync_dir(self.data_dir)
            if marker is not None:
                os.unlink(marker)
                files.fsync_dir(self.data_dir)
        except BaseException as exc:
            _logger.error("logs.topic_create_failed", topic=topic, partitions=partitions,
                          error=str(getattr(exc, "strerror", None) or exc), file=getattr(exc, "filename", None))
            for log in logs:
                discard(log)
            for directory in made:
                shutil.rmtree(directory, ignore_errors=True)
            if marker is not None and not any(os.path.lexists(d) for d in made):
                try:
                    os.unlink(marker)
                except OSError:
                    pass  # the next start removes what is left
            raise
        publish(logs)
        return partitions

    def stop(self) -> None:
        """Finish the creation in progress and cancel those not started."""
        self._executor.shutdown(wait=True, cancel_futures=True)
