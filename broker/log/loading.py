"""Opening a data directory: its lock, its clean-shutdown marker, and every partition's log.

The log manager's start-up, step by step:

1. :func:`lock_directory` takes ``<data_dir>/.lock`` exclusively (one broker per directory);
2. :func:`take_clean_marker` reads and removes ``.rill-clean-shutdown``: whether the
   last stop was clean, and the partitions it names (they had failed: recover them);
3. :func:`partition_directories` lists the ``<topic>-<partition>`` directories
   (symlinks and stray files are skipped and reported) and removes topics whose
   creation was interrupted (creator.py);
4. :func:`load_topic` opens each log: after a clean stop nothing is read but directory
   listings; otherwise it is recovered from its recovery point (the checkpoint, or an
   old per-partition ``recovery-point`` file when there is no checkpoint yet), without
   syncing yet;
5. :func:`sync_recovered` makes what recovery kept durable with one syncfs, before
   anything is served (KAFKA-10101), and :func:`report_recovery` logs one
   ``recovery.completed`` line for all of it.

Thread-safety: runs once, on the thread that builds the log manager.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable

import structlog

from rill.broker.log import batch_sync, checkpoint, creator, files
from rill.broker.log.log import Log
from rill.broker.log.log_config import Clock, LogConfig
from rill.broker.log.open_files import OpenFiles
from rill.client.errors import StorageError

LOCK_FILE = ".lock"
_logger = structlog.get_logger(__name__)


def partition_directories(data_dir: str) -> dict[str, dict[int, str]]:
    """``{topic: {partition: directory}}`` of ``data_dir``, after removing half-created topics."""
    found: dict[str, dict[int, str]] = {}
    names = []
    with os.scandir(data_dir) as entries:
        for entry in entries:
            names.append(entry.name)
            parsed = files.parse_partition_dir_name(entry.name)
            if parsed is None or not entry.is_dir(follow_symlinks=False):
                if not entry.name.startswith(".") and entry.name != checkpoint.CHECKPOINT_FILE:
                    _logger.warning("logs.unexpected_entry", name=entry.name, data_dir=data_dir)
                continue
            found.setdefault(parsed[0], {})[parsed[1]] = entry.path
    for topic in creator.incomplete_topics(names):
        if creator.remove_incomplete(data_dir, topic, sorted(found.get(topic, {}).values())):
            found.pop(topic, None)
    return found


def load_topic(topic: str, directories: dict[int, str], data_dir: str, config: LogConfig, clock: Clock, *,
               open_files: OpenFiles, clean_start: bool, must_recover: set[tuple[str, int]],
               points: checkpoint.RecoveryPoints | None, truncate_corrupt: bool) -> list[Log]:
    """Open every partition of ``topic`` (a missing one is created empty, as before); recovery is not synced."""
    count = max(directories) + 1
    if len(directories) != count:
        _logger.warning("logs.missing_partitions", topic=topic, missing=sorted(set(range(count)) - set(directories)))
    logs = []
    for partition in range(count):
        directory = directories.get(partition)
        if directory is None:
            logs.append(Log.open(data_dir, topic, partition, config, clock, clean=True, open_files=open_files))
            continue
        clean = clean_start and (topic, partition) not in must_recover
        point = 0
        if not clean:
            point = points.get((topic, partition), 0) if points is not None else files.read_recovery_point(directory)
        logs.append(Log.load(directory, topic, partition, config, clock, clean=clean, truncate_corrupt=truncate_corrupt,
                             recovery_point=point, open_files=open_files, sync=False))
    return logs


def sync_recovered(logs: Iterable[Log], data_dir: str) -> None:
    """Make what recovery kept durable before anything is served: one syncfs for every scanned log.

    Raises:
        OSError: syncing failed, also one segment at a time (the start is refused, naming the file).
    """
    unsynced = [segment for log in logs for segment in log.recovery_report.unsynced]
    if not unsynced:
        return
    try:
        batch_sync.sync_filesystem(data_dir)
    except OSError as exc:
        _logger.warning("recovery.batch_sync_failed", error=exc.strerror or str(exc),
                        detail="syncing the recovered segments one by one")
        for segment in unsynced:
            segment.flush()
        return
    for segment in unsynced:
        segment.synced_by_others(segment.size)


def report_recovery(logs: Iterable[Log], seconds: float) -> None:
    """One ``recovery.completed`` line for every log recovery scanned (none when nothing was scanned)."""
    reports = [log.recovery_report for log in logs if log.recovery_report.segments_scanned]
    if reports:
        _logger.info("recovery.completed", partitions=len(reports), segments=sum(r.segments_scanned for r in reports),
                     bytes_scanned=sum(r.bytes_scanned for r in reports),
                     bytes_truncated=sum(r.bytes_truncated for r in reports),
                     corrupt_ranges=sum(r.corrupt_ranges for r in reports), seconds=round(seconds, 3))


def lock_directory(data_dir: str) -> int:
    """Take the data directory's exclusive lock (one process per directory); return its descriptor.

    Raises:
        StorageError: another process holds it.
    """
    fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StorageError(f"data directory {data_dir} is in use by another process") from exc
    return fd


def take_clean_marker(data_dir: str) -> tuple[bool, set[tuple[str, int]]]:
    """Remove the clean-shutdown marker (fsynced); return whether it was there and the partitions it names.

    The marker lists, one ``topic partition`` per line, partitions that had failed:
    they are recovered although the shutdown was clean.
    """
    marker = os.path.join(data_dir, files.CLEAN_SHUTDOWN_MARKER)
    try:
        with open(marker, "rb") as f:
            text = f.read(1 << 20)
    except FileNotFoundError:
        return False, set()
    failed = set()
    for line in text.decode("ascii", "replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            failed.add((parts[0], int(parts[1])))
    os.unlink(marker)
    files.fsync_dir(data_dir)
    return True, failed
