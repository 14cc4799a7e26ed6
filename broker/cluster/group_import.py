"""Upgrading in place: the groups a partition of ``__rill_groups`` starts with.

Before the groups topic, a cluster's coordinators kept each group in their own local
log (``<log.dir>/.coordinator/offsets-0``) and checkpointed it to ZooKeeper
(``/rill/groups/[group]``, rill.coordinator.group_checkpoint), and a single broker kept
its groups in that local log alone. When a broker first leads a partition of the groups
topic whose log is **empty**, it imports that partition's groups from both sources, as
the old takeover did (:func:`~rill.coordinator.group_checkpoint.decide`): a checkpoint
written by another broker is newer than this broker's local copy; one written by this
broker (its instance id) is not, so the local state wins; a tombstone drops the group.
The imported records are written through the replicated partition like any others, so
the import happens once: afterwards the partition's log is not empty.

What is not imported: commits a coordinator acknowledged in the last
``offsets.checkpoint.interval.ms`` before it was killed (not stopped) under the old
version, when that coordinator is not the broker that leads the group's partition now.
Stopping the old brokers cleanly writes every group's final state to ZooKeeper first
(docs/cluster.md, "Upgrading group state").

The legacy local log is only read; it and the ZooKeeper nodes are left in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import structlog

from rill.broker.cluster.checkpoint_store import CheckpointStore
from rill.coordinator.group_checkpoint import Decision, GroupSnapshot, Writer, decide, load_records, snapshot_of
from rill.coordinator.records import (GenerationStarted, GroupCreated, GroupDeleted, GroupReleased,
                                      OffsetsCommitted, OffsetsDeleted, Record)
from rill.client.structs import TopicPartition

__all__ = ["fold_legacy", "import_records"]

log = structlog.get_logger(__name__)


def fold_legacy(records: Iterable[Record]) -> dict[str, GroupSnapshot]:
    """The groups a legacy local log holds at its end, as snapshots (released groups are gone)."""
    settings: dict[str, GroupCreated] = {}
    generations: dict[str, int] = {}
    offsets: dict[str, dict[TopicPartition, int]] = {}
    for record in records:
        name = record.group
        if isinstance(record, GroupCreated):
            settings[name] = record
            offsets.setdefault(name, {})
        elif isinstance(record, (GroupDeleted, GroupReleased)):
            settings.pop(name, None)
            generations.pop(name, None)
            offsets.pop(name, None)
        elif isinstance(record, GenerationStarted) and name in settings:
            generations[name] = max(generations.get(name, 0), record.generation)
        elif isinstance(record, OffsetsCommitted) and name in settings:
            offsets[name].update((TopicPartition(t, p), o) for t, p, o in record.offsets)
        elif isinstance(record, OffsetsDeleted) and name in settings:
            offsets[name] = {tp: o for tp, o in offsets[name].items() if tp.topic not in record.topics}
    return {name: snapshot_of(s, generations.get(name, 0), offsets.get(name, {})) for name, s in settings.items()}


def import_records(belongs: Callable[[str], bool], checkpoints: CheckpointStore | None,
                   legacy: Mapping[str, GroupSnapshot], me: Writer) -> list[Record]:
    """The records that start an empty partition: its groups (``belongs(name)``) from both sources.

    Raises:
        KazooException: reading ZooKeeper failed (nothing was written; the load is retried).
    """
    names = {n for n in legacy if belongs(n)}
    if checkpoints is not None:
        names.update(n for n in checkpoints.names() if belongs(n))
    out: list[Record] = []
    for name in sorted(names):
        checkpoint = checkpoints.read(name)[0] if checkpoints is not None else None
        local = legacy.get(name)
        takeover = decide(name, local, checkpoint, me)
        if takeover.decision is Decision.KEEP_LOCAL and local is not None:
            out.extend(load_records(local))
        elif takeover.decision is Decision.LOAD:
            out.extend(r for r in takeover.records if not isinstance(r, GroupReleased))
        else:
            continue
        log.info("group.imported", group=name, source="local log" if takeover.decision is Decision.KEEP_LOCAL
                 else "zookeeper checkpoint")
    return out

