"""File and directory names of the log storage, and the small file-system helpers.

Layout of a data directory::

    <data_dir>/
        .rill-clean-shutdown              written (and fsynced) by a clean close; removed at start
        <topic>-<partition>/              one directory per partition (topic may contain '-')
            00000000000000000000.log      a segment: messages back to back, named by base offset
            00000000000000000000.index    its sparse index (see index.py)
            00000000000000012345.log.corrupt-1700000000000
                                          bytes cut off by recovery, kept for inspection
            recovery-point                the last flushed offset (see write_recovery_point)

Every path built from a topic name goes through :func:`partition_dir`, which validates
the name and checks that the result stays inside the data directory, so an invalid
topic is refused before anything touches the disk.

Thread-safety: the functions are stateless; concurrent calls on different files are safe.
"""

from __future__ import annotations

import errno
import os
import re
import zlib

from rill.client.errors import InvalidTopic, WrongPartition
from rill.client.topic_names import is_valid_topic, validate_topic

SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
CORRUPT_SUFFIX = ".corrupt-"
CLEAN_SHUTDOWN_MARKER = ".rill-clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point"
MAX_NAME_BYTES = 255
_SEGMENT_NAME = re.compile(r"(\d{20})\.log\Z")
_PARTITION = re.compile(r"(0|[1-9]\d{0,9})\Z")


def partition_dir_name(topic: str, partition: int) -> str:
    """Return ``<topic>-<partition>``.

    Raises:
        InvalidTopic: the topic name is illegal, or the directory name would be too long.
        WrongPartition: the partition is negative or not an int.
    """
    validate_topic(topic)
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise WrongPartition(f"invalid partition {partition!r}: must be an int >= 0")
    name = f"{topic}-{partition}"
    if len(name) > MAX_NAME_BYTES:
        raise InvalidTopic(f"directory name for {topic!r} partition {partition} exceeds {MAX_NAME_BYTES} bytes")
    return name


def partition_dir(data_dir: str, topic: str, partition: int) -> str:
    """Return the directory of a partition; it is checked to lie inside ``data_dir``.

    Raises:
        InvalidTopic, WrongPartition: as :func:`partition_dir_name`, or the path escapes.
    """
    name = partition_dir_name(topic, partition)
    root = os.path.realpath(data_dir)
    path = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, path]) != root or path == root:
        raise InvalidTopic(f"topic {topic!r} partition {partition} resolves outside the data directory")
    return path


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """Split ``<topic>-<partition>`` on the last '-'; ``None`` if it is not such a name."""
    topic, sep, number = name.rpartition("-")
    if not sep or not _PARTITION.match(number) or not is_valid_topic(topic):
        return None
    return topic, int(number)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def segment_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, segment_name(base_offset))


def index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{INDEX_SUFFIX}")


def list_segment_offsets(directory: str) -> list[int]:
    """Base offsets of the ``%020d.log`` files in ``directory``, ascending.

    Raises:
        IsADirectoryError: an entry with a segment's name is not a regular file (named).
        OSError: the directory cannot be listed.
    """
    bases = []
    with os.scandir(directory) as entries:
        for entry in entries:
            match = _SEGMENT_NAME.match(entry.name)
            if match:
                if not entry.is_file(follow_symlinks=False):
                    raise IsADirectoryError(errno.EISDIR, "not a regular file", entry.path)
                bases.append(int(match.group(1)))
    return sorted(bases)


def create_side_file(segment_file: str, now_ms: int) -> tuple[str, int]:
    """Create ``<segment_file>.corrupt-<unix_ms>`` exclusively; never overwrite one.

    If the name is taken the millisecond is increased until a free name is found.
    Returns ``(path, fd)``; the caller writes, fsyncs and closes it.
    """
    stamp = now_ms
    while True:
        path = f"{segment_file}{CORRUPT_SUFFIX}{stamp}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            stamp += 1
            continue
        return path, fd


def side_file_name_for_rename(segment_file: str, now_ms: int) -> str:
    """A free ``<segment_file>.corrupt-<unix_ms>`` name to rename a whole segment to."""
    stamp = now_ms
    while os.path.lexists(f"{segment_file}{CORRUPT_SUFFIX}{stamp}"):
        stamp += 1
    return f"{segment_file}{CORRUPT_SUFFIX}{stamp}"


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int, path: str) -> None:
    """Write all of ``data`` at ``offset``, looping on short writes.

    Raises:
        OSError: the write failed, or wrote nothing (EIO: never spin on a zero-byte write).
    """
    length = len(data)
    done = 0
    while done < length:
        written = os.pwrite(fd, data if not done else memoryview(data)[done:], offset + done)
        if written <= 0:
            raise OSError(errno.EIO, f"short write to {path}")
        done += written


def fsync_dir(path: str) -> None:
    """fsync a directory so that entries created, renamed or removed in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temporary file, fsync it, rename, fsync the dir."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def write_recovery_point(directory: str, offset: int) -> None:
    """Persist the recovery point as ``<offset> <crc32 of the decimal offset>\\n``."""
    text = str(offset).encode()
    write_file_durably(os.path.join(directory, RECOVERY_POINT_FILE),
                       b"%s %d\n" % (text, zlib.crc32(text)))


def read_recovery_point(directory: str) -> int:
    """Return the persisted recovery point, or 0 when it is missing or unreadable.

    0 is always safe: it only means that recovery scans more.
    """
    try:
        with open(os.path.join(directory, RECOVERY_POINT_FILE), "rb") as f:
            raw = f.read(64)
    except FileNotFoundError:
        return 0
    parts = raw.split()
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return 0
    if zlib.crc32(parts[0]) != int(parts[1]):
        return 0
    return int(parts[0])
