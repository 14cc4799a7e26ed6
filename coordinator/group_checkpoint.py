"""Group checkpoints in ZooKeeper, as versions before the groups topic wrote them; read to upgrade.

Before group state moved to the replicated topic ``__rill_groups``, the coordinator of a
group wrote, at most once per ``offsets.checkpoint.interval.ms`` while the group changed, a
checkpoint of it to ZooKeeper, and a broker that became the group's coordinator loaded it.
Nothing writes them any more: the first leader of each (empty) groups topic partition
imports them once (rill.broker.cluster.group_import). This module is the pure part: the
format, and the rules that decide between a broker's own local state and a checkpoint.

Format (JSON, one node per group)::

    {"format": 1, "group": "orders-app", "seq": 7, "written_ms": 1700000000000,
     "writer": {"broker_id": 2, "instance": "9f0c..."},
     "released": false, "deleted": false,
     "settings": {"session_timeout_ms": 10000, "rebalance_timeout_ms": 0, "topics": ["orders"],
                  "strategy": "range", "ephemeral": false},
     "generation": 4,
     "offsets": {"orders": {"0": 1048576, "1": 2097152}}}

- ``writer`` is who wrote it: the broker id and its **instance**, a random id kept in
  the broker's data directory, so a broker restarted on the same data recognises its
  own checkpoints and a new broker reusing the id does not.
- ``seq`` grows by one with every write, whoever writes (logs and tools show it);
  the writes themselves are conditional on ZooKeeper's node version, so a broker
  that lost the group cannot overwrite its successor.
- ``released``: the writer gave the group up on purpose (placement moved it, or a
  clean shutdown) and wrote its final state: a successor need not wait for it.
- ``deleted``: a tombstone; the group was deleted (settings and offsets are empty).

Which state wins when an upgrading broker imports a group (:func:`decide`): every
broker that loaded a checkpoint wrote its own claim at once (it became the writer), so
a checkpoint written by *another* instance is newer than anything this broker has
locally (someone coordinated the group after this broker last wrote), and one written
by *this* instance is not newer than its local state (which only moved forward from
what it wrote). Hence: load the checkpoint unless this instance wrote it and still has
the group locally.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rill.client.structs import TopicPartition
from rill.coordinator.records import GenerationStarted, GroupCreated, GroupReleased, OffsetsCommitted, Record

FORMAT = 1
Offsets = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class Writer:
    """A coordinator instance: broker id and the random instance id of its data directory."""

    broker_id: int
    instance: str


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """What a checkpoint keeps of a group: settings, generation, committed offsets (sorted)."""

    settings: GroupCreated
    generation: int = 0
    offsets: Offsets = ()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One group's checkpoint; ``snapshot`` is None for a tombstone (``deleted``)."""

    group: str
    writer: Writer
    seq: int
    snapshot: GroupSnapshot | None
    released: bool = False
    written_ms: int = 0

    @property
    def deleted(self) -> bool:
        return self.snapshot is None


def encode(cp: Checkpoint) -> bytes:
    body: dict[str, Any] = {
        "format": FORMAT, "group": cp.group, "seq": cp.seq, "written_ms": cp.written_ms,
        "writer": {"broker_id": cp.writer.broker_id, "instance": cp.writer.instance},
        "released": cp.released, "deleted": cp.deleted}
    snap = cp.snapshot
    if snap is not None:
        s = snap.settings
        body["settings"] = {"session_timeout_ms": s.session_timeout_ms, "rebalance_timeout_ms": s.rebalance_timeout_ms,
                            "topics": list(s.topics), "strategy": s.strategy, "ephemeral": s.ephemeral}
        body["generation"] = snap.generation
        offsets: dict[str, dict[str, int]] = {}
        for topic, partition, offset in snap.offsets:
            offsets.setdefault(topic, {})[str(partition)] = offset
        body["offsets"] = offsets
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> Checkpoint:
    """Raises ValueError for anything that is not a checkpoint of a known format."""
    try:
        body = json.loads(data)
        if body["format"] != FORMAT:
            raise ValueError(f"unknown checkpoint format {body['format']!r}")
        group = str(body["group"])
        writer = Writer(int(body["writer"]["broker_id"]), str(body["writer"]["instance"]))
        snapshot = None
        if not body["deleted"]:
            s = body["settings"]
            settings = GroupCreated(group, int(s["session_timeout_ms"]), int(s["rebalance_timeout_ms"]),
                                    tuple(str(t) for t in s["topics"]), str(s["strategy"]), bool(s["ephemeral"]))
            offsets = tuple(sorted((str(t), int(p), int(o)) for t, parts in body["offsets"].items()
                                   for p, o in parts.items()))
            snapshot = GroupSnapshot(settings, int(body["generation"]), offsets)
        return Checkpoint(group, writer, int(body["seq"]), snapshot, bool(body["released"]), int(body["written_ms"]))
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a group checkpoint: {data[:80]!r}") from exc


class Decision(enum.Enum):
    """What a broker that becomes a group's coordinator does with its local state and the checkpoint."""

    KEEP_LOCAL = "keep_local"   # this instance wrote the checkpoint and has the group: local is newer or equal
    LOAD = "load"               # the checkpoint replaces the local state (or there is none)
    DROP = "drop"               # the checkpoint is a newer tombstone: the group is gone
    ABSENT = "absent"           # neither exists


@dataclass(frozen=True, slots=True)
class Takeover:
    decision: Decision
    records: list[Record] = field(default_factory=list)   # to persist and apply, in order


def decide(group: str, local: GroupSnapshot | None, checkpoint: Checkpoint | None, me: Writer) -> Takeover:
    """How a broker that becomes ``group``'s coordinator gets its state (see the module docstring)."""
    if checkpoint is None:
        return Takeover(Decision.KEEP_LOCAL if local is not None else Decision.ABSENT)
    if local is not None and checkpoint.writer == me:
        return Takeover(Decision.KEEP_LOCAL)
    dropped: list[Record] = [GroupReleased(group)] if local is not None else []
    if checkpoint.snapshot is None:
        return Takeover(Decision.DROP if local is not None else Decision.ABSENT, dropped)
    return Takeover(Decision.LOAD, dropped + load_records(checkpoint.snapshot))


def load_records(snap: GroupSnapshot) -> list[Record]:
    """The records that create a group in the state of ``snap``."""
    records: list[Record] = [snap.settings]
    if snap.generation:
        records.append(GenerationStarted(snap.settings.group, snap.generation, {}))
    if snap.offsets:
        records.append(OffsetsCommitted(snap.settings.group, snap.offsets))
    return records


def snapshot_of(settings: GroupCreated, generation: int, offsets: Mapping[TopicPartition, int]) -> GroupSnapshot:
    return GroupSnapshot(settings, generation, tuple((t, p, o) for (t, p), o in sorted(offsets.items())))


__all__ = ["Checkpoint", "Decision", "GroupSnapshot", "Takeover", "Writer", "decide", "decode", "encode",
           "load_records", "snapshot_of"]
