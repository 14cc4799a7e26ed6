"""Upgrading in place: an empty groups topic partition starts from ZooKeeper checkpoints and the local log."""

from __future__ import annotations

from rill.broker.cluster.group_import import fold_legacy, import_records
from rill.coordinator.group_checkpoint import Checkpoint, Writer, snapshot_of
from rill.coordinator.records import (GenerationStarted, GroupCreated, GroupDeleted, GroupReleased,
                                      OffsetsCommitted)
from rill.client.structs import TopicPartition

ME = Writer(1, "instance-1")
OTHER = Writer(2, "instance-2")


def created(name: str) -> GroupCreated:
    return GroupCreated(name, 10_000, 0, ("t",), "range", False)


class Checkpoints:
    def __init__(self, *checkpoints: Checkpoint) -> None:
        self.by_name = {cp.group: cp for cp in checkpoints}

    def names(self) -> list[str]:
        return sorted(self.by_name)

    def read(self, group: str) -> tuple[Checkpoint | None, int | None]:
        return self.by_name.get(group), 0


def checkpoint(name: str, writer: Writer, offset: int | None, *, released: bool = True) -> Checkpoint:
    snap = None if offset is None else snapshot_of(created(name), 3, {TopicPartition("t", 0): offset})
    return Checkpoint(name, writer, 5, snap, released, 0)


def test_the_legacy_log_folds_to_its_final_groups() -> None:
    folded = fold_legacy([created("a"), OffsetsCommitted("a", (("t", 0, 10),)), GenerationStarted("a", 2),
                          OffsetsCommitted("a", (("t", 0, 20), ("t", 1, 5))), created("b"), GroupReleased("b"),
                          created("c"), GroupDeleted("c")])
    assert sorted(folded) == ["a"]
    assert folded["a"].generation == 2 and folded["a"].offsets == (("t", 0, 20), ("t", 1, 5))


def test_checkpoint_of_another_broker_beats_the_local_copy_and_this_brokers_own_loses_to_it() -> None:
    legacy = fold_legacy([created("g1"), OffsetsCommitted("g1", (("t", 0, 10),)),
                          created("g2"), OffsetsCommitted("g2", (("t", 0, 70),)),
                          created("mine-only"), OffsetsCommitted("mine-only", (("t", 0, 3),))])
    zk = Checkpoints(checkpoint("g1", OTHER, 40),      # another broker coordinated g1 after us: newer
                     checkpoint("g2", ME, 50),         # we wrote it, and our local log went on to 70
                     checkpoint("gone", OTHER, None),  # a tombstone
                     checkpoint("theirs", OTHER, 9))
    records = import_records(lambda name: True, zk, legacy, ME)  # type: ignore[arg-type]
    offsets = {r.group: r.offsets for r in records if isinstance(r, OffsetsCommitted)}
    assert offsets == {"g1": (("t", 0, 40),), "g2": (("t", 0, 70),), "mine-only": (("t", 0, 3),),
                       "theirs": (("t", 0, 9),)}
    assert {r.group for r in records if isinstance(r, GroupCreated)} == {"g1", "g2", "mine-only", "theirs"}
    assert not any(isinstance(r, GroupReleased) for r in records)


def test_only_the_partitions_own_groups_are_imported() -> None:
    zk = Checkpoints(checkpoint("a", OTHER, 1), checkpoint("b", OTHER, 2))
    records = import_records(lambda name: name == "b", zk, {}, ME)  # type: ignore[arg-type]
    assert {r.group for r in records} == {"b"}
    assert import_records(lambda name: True, None, {}, ME) == []
