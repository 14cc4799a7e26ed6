"""The recovery-point checkpoint: one file per data directory, as Kafka keeps it.

``<data_dir>/recovery-point-offset-checkpoint`` holds, for every partition, an offset
before which everything was fsynced (its recovery point). After an unclean shutdown
recovery scans each log from there only (recovery.py). Format (Kafka's
``OffsetCheckpointFile``, text)::

    0                       version
    2                       number of entries
    orders 0 1048576        topic, partition, offset (one line each)
    orders 1 0

It is replaced as a whole (temporary file, fsync, rename, fsync of the directory),
so a crash leaves the old or the new file, never a mix. One file for every partition
makes a checkpoint one write whatever the partition count; the writer is the log
manager (every ``log.flush.offset.checkpoint.interval.ms``, after recovery, and at
shutdown).

Reading never fails: a missing file, or one that does not parse, reads as "no
checkpoint" (every log is then scanned from its start, which is slow but safe), and a
damaged file is reported so the operator knows why start-up scans.

Thread-safety: stateless functions; the log manager serialises its writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import structlog

from rill.broker.log import files

CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
VERSION = 0
_logger = structlog.get_logger(__name__)

RecoveryPoints = dict[tuple[str, int], int]


def checkpoint_path(data_dir: str) -> str:
    return os.path.join(data_dir, CHECKPOINT_FILE)


def read_checkpoint(data_dir: str) -> RecoveryPoints | None:
    """The recovery points of ``data_dir``, or None when there is no usable checkpoint file.

    Raises:
        OSError: the file exists but cannot be read (permissions, I/O error).
    """
    path = checkpoint_path(data_dir)
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    points = _parse(text)
    if points is None:
        _logger.warning("recovery.checkpoint_unreadable", file=path,
                        detail="every log is recovered from its start after this unclean shutdown")
    return points


def _parse(text: bytes) -> RecoveryPoints | None:
    lines = text.split(b"\n")
    if len(lines) < 2 or lines[0].strip() != str(VERSION).encode() or not lines[1].strip().isdigit():
        return None
    count = int(lines[1])
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        return None
    points: RecoveryPoints = {}
    for line in entries:
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        try:
            topic = parts[0].decode("ascii")
        except UnicodeDecodeError:
            return None
        points[(topic, int(parts[1]))] = int(parts[2])
    return points


def write_checkpoint(data_dir: str, points: Mapping[tuple[str, int], int]) -> None:
    """Replace the checkpoint of ``data_dir`` with ``points`` (durably: fsynced and renamed).

    Raises:
        OSError: the file could not be written or synced (the old one stays).
    """
    lines = [str(VERSION), str(len(points))]
    lines.extend(f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(points.items()))
    files.write_file_durably(checkpoint_path(data_dir), ("\n".join(lines) + "\n").encode("ascii"))
