"""Opening a data directory: its lock, its clean-shutdown marker, and every partition's log.

The log manager's start-up, step by step:

1. :func:`lock_directory` takes ``<data_dir>/.lock`` exclusively (one broker per directory);
2. :func:`take_clean_marker` reads and removes ``.rill-clean-shutdown``: whether the
   last stop was clean, and the partitions it names (they had failed: recover them);
3. :func:`partition_directories` lists the ``<topic>-<partition>`` directories
   (symlinks and stray files are skipped and reported) and removes topics whose
   creation was interrupted (creator.py) and a replica whose creation was;
   :func:`split_replicas` tells the two kinds of topic apart (below);
4. :func:`load_topic` opens each log of a 0.7-style topic, :func:`load_replicas` each
   replica with its leader-epoch cache: after a clean stop nothing is read but
   directory listings; otherwise it is recovered from its recovery point (the
   checkpoint, or an old per-partition ``recovery-point`` file when there is no
   checkpoint yet), without syncing yet;
5. :func:`sync_recovered` makes what recovery kept durable with one syncfs, before
   anything is served (KAFKA-10101), and :func:`report_recovery` logs one
   ``recovery.completed`` line for all of it.

Two kinds of topic. A Kafka 0.7-style topic is held whole: partitions ``0 .. n-1``,
all here (a missing one is created empty). A replicated topic is numbered cluster-wide
and this broker holds only its replicas, any set of partitions: a partition directory
holding a ``leader-epoch-checkpoint`` file (leader_epochs.py) is such a replica. The
file is there from the start: :func:`make_replica` writes it in ``.replica-new`` and
renames that directory into place, so a crash never leaves a replica that would load
as a 0.7-style partition, and the file is only ever replaced, never removed. A topic
with directories of both kinds is refused (StorageError). A replica moved away is
renamed to ``<topic>-<partition>.<unix_ms>.deleted`` (:func:`set_replica_aside`) and
skipped at start-up.

Thread-safety: runs once, on the thread that builds the log manager;
:func:`make_replica` and :func:`set_replica_aside` run on the log manager's caller,
one at a time.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Iterable

import structlog

from rill.broker.log import batch_sync, checkpoint, creator, files
from rill.broker.log.leader_epochs import EPOCH_FILE, CorruptEpochFile, LeaderEpochCache, encode_entries
from rill.broker.log.log import Log
from rill.broker.log.log_config import Clock, LogConfig
from rill.broker.log.open_files import OpenFiles
from rill.client.errors import StorageError

LOCK_FILE = ".lock"
NEW_REPLICA_DIR = ".replica-new"
"""A replica being made (:func:`make_replica`); one left at start-up is removed."""
DELETED_SUFFIX = ".deleted"
_logger = structlog.get_logger(__name__)


def partition_directories(data_dir: str) -> dict[str, dict[int, str]]:
    """``{topic: {partition: directory}}`` of ``data_dir``, after removing half-created topics."""
    found: dict[str, dict[int, str]] = {}
    names = []
    with os.scandir(data_dir) as entries:
        for entry in entries:
            names.append(entry.name)
            parsed = files.parse_partition_dir_name(entry.name)
            if entry.name == NEW_REPLICA_DIR:
                _logger.warning("logs.incomplete_replica_removed", directory=entry.path,
                                detail="the broker stopped while creating a replica; it was never published")
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                continue
            if parsed is None or not entry.is_dir(follow_symlinks=False):
                if (not entry.name.startswith(".") and entry.name != checkpoint.CHECKPOINT_FILE
                        and not entry.name.endswith(DELETED_SUFFIX)):
                    _logger.warning("logs.unexpected_entry", name=entry.name, data_dir=data_dir)
                continue
            found.setdefault(parsed[0], {})[parsed[1]] = entry.path
    for topic in creator.incomplete_topics(names):
        if creator.remove_incomplete(data_dir, topic, sorted(found.get(topic, {}).values())):
            found.pop(topic, None)
    return found


def split_replicas(found: dict[str, dict[int, str]]) -> tuple[dict[str, dict[int, str]], dict[str, dict[int, str]]]:
    """Split :func:`partition_directories`' result into 0.7-style topics and replicated topics' replicas.

    Raises:
        StorageError: a topic has replica directories (holding ``leader-epoch-checkpoint``) and others.
    """
    local: dict[str, dict[int, str]] = {}
    replicas: dict[str, dict[int, str]] = {}
    for topic, directories in found.items():
        marked = sorted(p for p, d in directories.items() if os.path.lexists(os.path.join(d, EPOCH_FILE)))
        if marked and len(marked) != len(directories):
            raise StorageError(f"topic {topic!r} has replica directories (partitions {marked}, holding {EPOCH_FILE}) "
                               f"and 0.7-style ones (partitions {sorted(set(directories) - set(marked))}); a topic "
                               f"is one or the other: move the wrong ones out of the data directory")
        (replicas if marked else local)[topic] = directories
    return local, replicas


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
        logs.append(_load_partition(topic, partition, directory, config, clock, open_files=open_files,
                                    clean_start=clean_start, must_recover=must_recover, points=points,
                                    truncate_corrupt=truncate_corrupt))
    return logs


def load_replicas(topic: str, directories: dict[int, str], config: LogConfig, clock: Clock, *,
                  open_files: OpenFiles, clean_start: bool, must_recover: set[tuple[str, int]],
                  points: checkpoint.RecoveryPoints | None, truncate_corrupt: bool) -> list[Log]:
    """Open the replicas of ``topic`` found here (only those), each with its leader-epoch cache; recovery is not synced.

    The cache is brought in step with the recovered log as Kafka does at load: epochs
    starting at or past the log end go (a cut the cache did not see, a torn tail
    recovery removed), and one starting before the log start is moved up to it.

    Raises:
        StorageError: a ``leader-epoch-checkpoint`` is corrupt and not ``truncate_corrupt``
            (with it the file is kept aside and the replica starts with no epochs).
        CorruptLogError, OSError: as :meth:`Log.load`.
    """
    logs: list[Log] = []
    try:
        for partition in sorted(directories):
            log = _load_partition(topic, partition, directories[partition], config, clock, open_files=open_files,
                                  clean_start=clean_start, must_recover=must_recover, points=points,
                                  truncate_corrupt=truncate_corrupt)
            logs.append(log)
            cache = _open_epochs(log.directory, truncate_corrupt, int(clock.time() * 1000))
            cache.truncate_from_end(log.end_offset)
            cache.truncate_from_start(log.start_offset)
            log.leader_epochs = cache
    except BaseException:
        for log in logs:
            log.abandon()
        raise
    return logs


def _load_partition(topic: str, partition: int, directory: str, config: LogConfig, clock: Clock, *,
                    open_files: OpenFiles, clean_start: bool, must_recover: set[tuple[str, int]],
                    points: checkpoint.RecoveryPoints | None, truncate_corrupt: bool) -> Log:
    clean = clean_start and (topic, partition) not in must_recover
    point = 0
    if not clean:
        point = points.get((topic, partition), 0) if points is not None else files.read_recovery_point(directory)
    return Log.load(directory, topic, partition, config, clock, clean=clean, truncate_corrupt=truncate_corrupt,
                    recovery_point=point, open_files=open_files, sync=False)


def _open_epochs(directory: str, truncate_corrupt: bool, now_ms: int) -> LeaderEpochCache:
    """The leader-epoch cache of a replica directory; a corrupt file refuses the start, or is kept aside.

    Raises:
        StorageError: the file is corrupt and not ``truncate_corrupt``.
        OSError: the file could not be read (or kept aside).
    """
    try:
        return LeaderEpochCache(directory)
    except CorruptEpochFile as exc:
        if not truncate_corrupt:
            raise StorageError(f"{exc}: refusing to start (restart with truncate_corrupt to keep the file aside "
                               f"and start this replica with no leader epochs)") from exc
        side = files.side_file_name_for_rename(exc.path, now_ms)
        os.link(exc.path, side)  # kept aside first: the directory is never without its marker file
        files.write_file_durably(exc.path, encode_entries(()))
        _logger.error("leader_epochs.corrupt_file_kept_aside", file=exc.path, line=exc.line, error=str(exc),
                      side_file=side, detail="the replica starts with no leader epochs")
        return LeaderEpochCache(directory)


def make_replica(data_dir: str, topic: str, partition: int, config: LogConfig, clock: Clock,
                 open_files: OpenFiles) -> Log:
    """Make the directory of a new replica durably, then open its (empty) log with an empty leader-epoch cache.

    The directory is made as ``.replica-new`` holding an empty ``leader-epoch-checkpoint``
    (``0\\n0\\n``), both fsynced, then renamed to ``<topic>-<partition>`` and the data
    directory fsynced: a crash leaves no replica, or one that loads as a replica.

    Raises:
        InvalidTopic, WrongPartition: an illegal name (before anything touches the disk).
        StorageError: ``<topic>-<partition>`` exists already (a directory this broker does not hold).
        OSError: a file or directory could not be made, written or synced.
    """
    directory = files.partition_dir(data_dir, topic, partition)
    if os.path.lexists(directory):
        raise StorageError(f"{directory} exists but is not a replica this broker holds: move it away first")
    staging = os.path.join(data_dir, NEW_REPLICA_DIR)
    shutil.rmtree(staging, ignore_errors=True)
    os.mkdir(staging)
    files.write_file_durably(os.path.join(staging, EPOCH_FILE), encode_entries(()))
    os.rename(staging, directory)
    files.fsync_dir(data_dir)
    try:
        log = Log.load(directory, topic, partition, config, clock, new=True, open_files=open_files)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)  # never published: it holds no data
        raise
    log.leader_epochs = LeaderEpochCache(directory)
    return log


def set_replica_aside(data_dir: str, directory: str) -> str:
    """Rename a (closed) replica's directory to ``<directory>.<unix_ms>.deleted``, durably; return the new path.

    Raises:
        OSError: the rename or the fsync of ``data_dir`` failed.
    """
    stamp = int(time.time() * 1000)
    while os.path.lexists(f"{directory}.{stamp}{DELETED_SUFFIX}"):
        stamp += 1
    target = f"{directory}.{stamp}{DELETED_SUFFIX}"
    os.rename(directory, target)
    files.fsync_dir(data_dir)
    return target


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
