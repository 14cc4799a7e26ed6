"""Records: the only way coordinator state changes, live and at start-up.

A handler validates a request against the current state and returns a response plus
records; ``GroupCoordinator.replay(record)`` applies a record. The offset store
appends records to the coordinator's internal log (one message per record, JSON
payload) and replays them at start-up. Every record *sets* state (never adds to
it), so replaying a compacted copy of the state after older records gives the same
state: that is how the store compacts its log.

Encoding: ``encode(record) -> bytes`` and ``decode(bytes) -> Record`` (JSON with a
``"type"`` field; unknown types raise ValueError).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Union

from rill.client.structs import TopicPartition


@dataclass(frozen=True, slots=True)
class GroupCreated:
    """A group exists with these settings (created, or re-stated by compaction)."""

    group: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    strategy: str
    ephemeral: bool


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    """The group and its committed offsets are gone."""

    group: str


@dataclass(frozen=True, slots=True)
class GenerationStarted:
    """A rebalance completed: the group's generation and who owns what.

    ``assignment`` maps consumer id to its (topic, partition) list. Persisted so that
    generations keep increasing across restarts (a zombie's old generation is never
    reused) and so that lag tools can show the last assignment.
    """

    group: str
    generation: int
    assignment: dict[str, tuple[TopicPartition, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OffsetsCommitted:
    """Committed offsets of a group: (topic, partition, offset) triples.

    ``rewind`` marks offsets set by RewindConsumer (the only way a committed offset
    may move backwards outside its owner's own commits).
    """

    group: str
    offsets: tuple[tuple[str, int, int], ...]
    rewind: bool = False


@dataclass(frozen=True, slots=True)
class OffsetsDeleted:
    """The group's committed offsets of these topics are gone (the topics were deleted, as Kafka
    drops a deleted topic's offsets), so a topic created again under the name starts afresh."""

    group: str
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupReleased:
    """Another broker coordinates the group now (a cluster moved it): this broker forgets it.

    Unlike GroupDeleted the group goes on elsewhere, from the checkpoint this broker
    wrote when it let the group go (rill.coordinator.group_checkpoint); its members are told
    NOT_COORDINATOR and find the new coordinator.
    """

    group: str


Record = Union[GroupCreated, GroupDeleted, GenerationStarted, OffsetsCommitted, OffsetsDeleted, GroupReleased]

_TYPES: dict[str, type] = {cls.__name__: cls for cls in (GroupCreated, GroupDeleted, GenerationStarted, OffsetsCommitted,
                                                         OffsetsDeleted, GroupReleased)}


_FIELDS: dict[type, tuple[str, ...]] = {cls: tuple(f.name for f in fields(cls)) for cls in _TYPES.values()}
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def encode(record: Record) -> bytes:
    """JSON of the record's fields plus its type (tuples become lists; no deep copy)."""
    cls = type(record)
    body: dict[str, Any] = {name: getattr(record, name) for name in _FIELDS[cls]}
    body["type"] = cls.__name__
    return _ENCODER.encode(body).encode()


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def decode(data: bytes) -> Record:
    """Decode one record; raises ValueError for anything that is not a known record."""
    try:
        body = json.loads(data)
        cls = _TYPES[body.pop("type")]
        if cls is GenerationStarted:
            body["assignment"] = {k: tuple(TopicPartition(str(t), int(p)) for t, p in v)
                                  for k, v in body["assignment"].items()}
        else:
            body = {k: _tuples(v) for k, v in body.items()}
        return cls(**body)  # type: ignore[no-any-return]
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a coordinator record: {data[:80]!r}") from exc
