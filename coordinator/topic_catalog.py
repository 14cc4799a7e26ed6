"""What the coordinator needs to know about topics: the :class:`Catalog` protocol.

The broker implements it over its log manager (the coordinator does not import the
broker); :class:`StaticCatalog` is an in-memory implementation for tests.
Offsets are byte positions (Kafka 0.7): a message at offset ``o`` with a payload of
``n`` bytes is followed by the next message at ``o + 4 + n``. The end offset (where
the next message will go) is a valid position; offsets past it, or before the log
start, are out of range.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rill.client.errors import (
    BrokerError, InvalidOffset, InvalidTopic, OffsetOutOfRange, UnknownTopic, WrongPartition,
)
from rill.v1 import coordinator_pb2 as pb


class Catalog(Protocol):
    """The topics the coordinator assigns and validates offsets against.

    Called with the coordinator's lock held, from gRPC worker threads and the timer
    thread: implementations must be thread-safe and quick (no disk reads on a hot path).
    """

    def topics(self) -> Mapping[str, int]:
        """Topic name -> partition count, for every topic that exists."""
        ...

    def offset_range(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, log end offset). Raises KeyError for an unknown topic or partition."""
        ...

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        """Return if ``offset`` is a message boundary of the log (the end offset is one).

        Raises:
            UnknownTopic / WrongPartition: no such topic or partition.
            OffsetOutOfRange: before the log start or past the log end.
            InvalidOffset: inside the log but not where a message starts.
        """
        ...

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first message appended at or after ``timestamp_ms`` (to one index interval); the end if none.

        Raises KeyError (or UnknownTopic / WrongPartition) for an unknown topic or partition.
        """
        ...


_ERROR_CODES: dict[type[BrokerError], pb.ErrorCode] = {
    OffsetOutOfRange: pb.OFFSET_OUT_OF_RANGE,
    InvalidOffset: pb.INVALID_OFFSET,
    UnknownTopic: pb.UNKNOWN_TOPIC_OR_PARTITION,
    WrongPartition: pb.UNKNOWN_TOPIC_OR_PARTITION,
    InvalidTopic: pb.UNKNOWN_TOPIC_OR_PARTITION,
}


def error_code_for(exc: BaseException) -> pb.ErrorCode:
    """The coordinator error code for an exception raised by a catalog (UNKNOWN if unexpected)."""
    if isinstance(exc, KeyError):
        return pb.UNKNOWN_TOPIC_OR_PARTITION
    for cls, code in _ERROR_CODES.items():
        if isinstance(exc, cls):
            return code
    return pb.UNKNOWN


@dataclass(slots=True)
class _Partition:
    start: int = 0
    end: int = 0
    boundaries: list[int] = field(default_factory=list)   # offsets where retained messages start
    times: list[int] = field(default_factory=list)        # their append times, ms, non-decreasing


class StaticCatalog:
    """An in-memory :class:`Catalog` for tests.

    ``StaticCatalog({"orders": 4})`` has one topic of four empty partitions.
    :meth:`append` adds messages (offsets move by ``4 + size``), :meth:`truncate`
    applies retention, :meth:`create_topic` creates or grows a topic. Not
    thread-safe beyond what the GIL gives single dict operations.
    """

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self._parts: dict[str, list[_Partition]] = {}
        for topic, count in (topics or {}).items():
            self.create_topic(topic, count)

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic``, or grow it to ``partitions`` (never shrinks)."""
        parts = self._parts.setdefault(topic, [])
        parts.extend(_Partition() for _ in range(partitions - len(parts)))

    def append(self, topic: str, partition: int, sizes: Iterable[int] = (10,), timestamp_ms: int = 0) -> list[int]:
        """Append messages with these payload sizes, all at ``timestamp_ms``; returns their offsets."""
        part = self._part(topic, partition)
        offsets = []
        for size in sizes:
            offsets.append(part.end)
            part.boundaries.append(part.end)
            part.times.append(timestamp_ms)
            part.end += 4 + size
        return offsets

    def truncate(self, topic: str, partition: int, before: int) -> None:
        """Drop the messages that start before ``before`` (retention); the log start moves."""
        part = self._part(topic, partition)
        keep = bisect.bisect_left(part.boundaries, before)
        del part.boundaries[:keep], part.times[:keep]
        part.start = part.boundaries[0] if part.boundaries else part.end

    def topics(self) -> Mapping[str, int]:
        return {t: len(parts) for t, parts in self._parts.items()}

    def offset_range(self, topic: str, partition: int) -> tuple[int, int]:
        parts = self._parts.get(topic)
        if parts is None or not 0 <= partition < len(parts):
            raise KeyError(f"{topic}-{partition}")
        return parts[partition].start, parts[partition].end

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        part = self._part(topic, partition)
        if offset < part.start or offset > part.end:
            raise OffsetOutOfRange(f"{topic}-{partition}: offset {offset} outside {part.start}..{part.end}")
        if offset != part.end:
            i = bisect.bisect_left(part.boundaries, offset)
            if i == len(part.boundaries) or part.boundaries[i] != offset:
                raise InvalidOffset(f"{topic}-{partition}: no message starts at {offset}")

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        part = self._part(topic, partition)
        i = bisect.bisect_left(part.times, timestamp_ms)
        return part.boundaries[i] if i < len(part.boundaries) else part.end

    def _part(self, topic: str, partition: int) -> _Partition:
        parts = self._parts.get(topic)
        if parts is None:
            raise UnknownTopic(f"unknown topic {topic!r}")
        if not 0 <= partition < len(parts):
            raise WrongPartition(f"{topic}: no partition {partition}")
        return parts[partition]
