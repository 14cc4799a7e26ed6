"""The leader-epoch cache of a replica: which leader epoch began at which byte offset (Kafka's KIP-101/279).

Each election gives a partition a new leader epoch; the new leader records
``(epoch, its log end)`` before it takes a write, and followers record the epochs they
copy. Comparing caches tells a follower where its log leaves its leader's
(../shared/notes/replication.md 2.3-2.4, broker/replication/divergence.py), instead of
truncating to a high watermark that lags by a round trip.

On-disk format of ``<partition dir>/leader-epoch-checkpoint`` (Kafka's
``LeaderEpochCheckpointFile``: ASCII text, each line ended by ``\\n``)::

    0            version (always 0)
    3            number of entries
    0 0          epoch, start offset: one line per entry, one space between
    1 4200
    3 9800

Invariants: epochs and start offsets are >= 0 and strictly ascending (an epoch with no
data is replaced when a later one starts at the same offset), and a start offset is a
byte offset of the partition's log where a message begins. The file is replaced as a
whole (temporary file, fsync, rename, fsync of the directory: ``files.write_file_durably``),
so a crash leaves the old or the new file. In a data directory this file also marks the
partition directory as a replica of a replicated topic (loading.py).

Loading is strict: anything but exactly that format raises :class:`CorruptEpochFile`
naming the file and the line, and the caller decides (the log manager refuses to start,
or with ``truncate_corrupt`` keeps the file aside and starts with no epochs). A missing
file reads as no entries.

Thread-safety: not thread-safe. One thread uses a cache: the broker's event loop once
the replica is published (before that, the thread that opens or creates it).
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from typing import NamedTuple

import structlog

from rill.broker.log import files

EPOCH_FILE = "leader-epoch-checkpoint"
VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_NUMBER = re.compile(r"-?[0-9]{1,19}\Z")  # at most 19 digits: int64, and no unbounded int() parse
_logger = structlog.get_logger(__name__)


class EpochEntry(NamedTuple):
    """Leader epoch ``epoch`` began at ``start_offset``: the byte offset of the first message written in it."""

    epoch: int
    start_offset: int


class CorruptEpochFile(ValueError):
    """A ``leader-epoch-checkpoint`` file that is not exactly in the format (module docstring).

    Attributes:
        path: the file.
        line: the 1-based line where the problem was found.
    """

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}: line {line}: {reason}")
        self.path = path
        self.line = line


def encode_entries(entries: tuple[EpochEntry, ...]) -> bytes:
    """The file's bytes for ``entries`` (``0\\n<count>\\n`` then ``<epoch> <start>\\n`` each)."""
    lines = [str(VERSION), str(len(entries)), *(f"{e.epoch} {e.start_offset}" for e in entries)]
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_entries(data: bytes, path: str) -> tuple[EpochEntry, ...]:
    """The entries of a file's bytes ``data``, checked strictly (the final newline may be missing).

    Raises:
        CorruptEpochFile: not ASCII, a version other than 0, a count that is not a
            number or disagrees with the entry lines, a blank or malformed line, a
            non-numeric or negative field, or entries not strictly ascending.
    """
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CorruptEpochFile(path, data[:exc.start].count(b"\n") + 1, "not ASCII text") from exc
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if not lines or lines[0] != str(VERSION):
        raise CorruptEpochFile(path, 1, f"version {lines[0]!r} is not {VERSION}" if lines else "empty file")
    if len(lines) < 2:
        raise CorruptEpochFile(path, 2, "missing the entry count")
    count = _number(lines[1], path, 2, "entry count")
    if count != len(lines) - 2:
        raise CorruptEpochFile(path, 2, f"entry count {count} but {len(lines) - 2} entry lines follow")
    entries: list[EpochEntry] = []
    for number, line in enumerate(lines[2:], start=3):
        fields = line.split(" ")
        if len(fields) != 2:
            raise CorruptEpochFile(path, number, f"expected 'epoch start_offset', got {line!r}")
        entry = EpochEntry(_number(fields[0], path, number, "epoch"), _number(fields[1], path, number, "start offset"))
        if entries and not (entry.epoch > entries[-1].epoch and entry.start_offset > entries[-1].start_offset):
            raise CorruptEpochFile(path, number, f"entry {entry.epoch} {entry.start_offset} does not follow "
                                                 f"{entries[-1].epoch} {entries[-1].start_offset} (both must ascend)")
        entries.append(entry)
    return tuple(entries)


def _number(field: str, path: str, line: int, what: str) -> int:
    if not _NUMBER.match(field):
        raise CorruptEpochFile(path, line, f"{what} {field!r} is not a number")
    value = int(field)
    if value < 0:
        raise CorruptEpochFile(path, line, f"negative {what} {value}")
    return value


def read_entries(path: str) -> tuple[EpochEntry, ...]:
    """The entries of the file at ``path``; none when it does not exist.

    Raises:
        CorruptEpochFile: see :func:`parse_entries`.
        OSError: the file exists but cannot be read.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return ()
    return parse_entries(data, path)


class LeaderEpochCache:
    """The epochs of one replica, in memory and in ``<directory>/leader-epoch-checkpoint``.

    Every change is persisted before it shows in memory, so the two agree even when a
    write fails. Not thread-safe (module docstring).

    Raises (constructor):
        CorruptEpochFile: the file exists but is not in the format.
        OSError: the file exists but cannot be read.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, EPOCH_FILE)
        self._entries = read_entries(self.path)
        self._logger = _logger.bind(file=self.path)

    def entries(self) -> tuple[EpochEntry, ...]:
        """Every entry, ascending in epoch and start offset (empty when none)."""
        return self._entries

    def latest_entry(self) -> EpochEntry | None:
        """The entry of the newest epoch, or None when there is none."""
        return self._entries[-1] if self._entries else None

    def latest_epoch(self) -> int:
        """The newest epoch, or -1 (``UNDEFINED_EPOCH``) when there is none."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` began at ``start_offset`` (Kafka's ``LeaderEpochFileCache.assign``).

        The latest epoch again does nothing (idempotent, whatever the offset). Otherwise
        entries that the new one does not strictly follow (epoch >= ``epoch`` or start
        >= ``start_offset``) are removed first; that is logged as a warning
        (``leader_epochs.conflicting_entries_removed``) unless it only replaced the
        latest epoch by one starting at the same offset (no data was written in it:
        Kafka's rule). Then the file is rewritten.

        Raises:
            ValueError: a negative epoch or offset (nothing changes).
            OSError: the file could not be written (nothing changes).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"{self.path}: invalid leader epoch entry {epoch} {start_offset}")
        latest = self.latest_entry()
        if latest is not None and latest.epoch == epoch:
            return
        kept = tuple(e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset)
        removed = self._entries[len(kept):]
        self._persist(kept + (EpochEntry(epoch, start_offset),))
        if len(removed) > 1 or (removed and removed[-1].start_offset != start_offset):
            self._logger.warning("leader_epochs.conflicting_entries_removed", epoch=epoch, start_offset=start_offset,
                                 removed=[tuple(e) for e in removed], entries=len(self._entries))
        elif removed:
            self._logger.debug("leader_epochs.empty_epoch_replaced", epoch=epoch, start_offset=start_offset,
                               removed=tuple(removed[0]))

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Where ``requested_epoch`` ends on this log: Kafka's ``LeaderEpochFileCache.endOffsetFor`` (KIP-279).

        Returns ``(epoch, end_offset)``:

        * ``(-1, -1)`` when ``requested_epoch`` is -1, or no epoch after it is known
          (and it is not the latest);
        * ``(latest epoch, log_end_offset)`` when it is the latest epoch;
        * otherwise ``(largest known epoch <= requested, start of the first epoch >
          requested)``, or ``(requested, that start)`` when no epoch <= requested is known.
        """
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if entries and entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right([e.epoch for e in entries], requested_epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return requested_epoch, entries[0].start_offset
        return entries[higher - 1].epoch, entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut back to end at ``end_offset``: drop the entries starting at or after it.

        A negative ``end_offset`` changes nothing (Kafka's rule). The file is rewritten
        only when an entry goes.

        Raises:
            OSError: the file could not be written (nothing changes).
        """
        if end_offset < 0:
            return
        kept = tuple(e for e in self._entries if e.start_offset < end_offset)
        if kept != self._entries:
            self._persist(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset`` (retention, a full truncation): Kafka's ``truncateFromStart``.

        Entries starting at or before ``start_offset`` go, except the last of them, which
        now starts at ``start_offset`` (its epoch still covers the log's first bytes). The
        file is rewritten only when something changed.

        Raises:
            OSError: the file could not be written (nothing changes).
        """
        before = [e for e in self._entries if e.start_offset <= start_offset]
        if not before:
            return
        kept = (EpochEntry(before[-1].epoch, start_offset),) + self._entries[len(before):]
        if kept != self._entries:
            self._persist(kept)

    def clear(self) -> None:
        """Remove every entry; the file is rewritten (empty, but present: it still marks a replica).

        Raises:
            OSError: the file could not be written (nothing changes).
        """
        self._persist(())

    def _persist(self, entries: tuple[EpochEntry, ...]) -> None:
        files.write_file_durably(self.path, encode_entries(entries))
        self._entries = entries

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path!r}, {list(map(tuple, self._entries))})"
