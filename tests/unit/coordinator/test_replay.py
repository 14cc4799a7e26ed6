"""Replay rebuilds persisted state from records; snapshot_records is a compact equivalent."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rill.coordinator.describe import GroupDescription
from rill.coordinator.records import (
    GenerationStarted, GroupCreated, GroupDeleted, OffsetsCommitted, Record, decode, encode,
)
from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import TIMEOUT_MS, Harness


def _persisted(d: GroupDescription | None) -> GroupDescription | None:
    """What survives a restart: everything but the live members and state."""
    return None if d is None else replace(d, members=(), state="Empty")


def _all(h: Harness) -> dict[str, GroupDescription | None]:
    return {name: _persisted(h.coord.describe(name)) for name in h.coord.group_names()}


def _restarted(records: list[Record]) -> Harness:
    fresh = Harness()
    for record in records:
        fresh.coord.replay(decode(encode(record)))
    return fresh


def _busy(h: Harness) -> None:
    """A history with every record type: groups created and deleted, rebalances, commits, a rewind."""
    for p in range(4):
        h.catalog.append("t", p, [10, 10])
    h.create("gone")
    h.call(h.coord.delete_group, pb.DeleteGroupRequest(consumer_group=["gone"]))
    h.create("eph", ephemeral=True)
    h.create()
    a, b = h.stable(2)
    h.commit({tp: 14 for tp in [(p.topic, p.partition) for p in a.partitions_to_own]}, a)
    h.commit({("t", 0): 28}, group="loader")
    h.rewind({(p.topic, p.partition): 0 for p in b.partitions_to_own})
    h.leave(b)


def test_replaying_every_record_rebuilds_equal_state() -> None:
    """A fresh coordinator replaying the whole record history has the same groups, generations and offsets."""
    h = Harness()
    _busy(h)
    assert {type(r) for r in h.records} == {GroupCreated, GroupDeleted, GenerationStarted, OffsetsCommitted}
    assert _all(_restarted(h.records)) == _all(h)


@pytest.mark.parametrize("record", [
    GroupCreated("g", 10_000, 0, ("t",), "sticky", False),
    GenerationStarted("g", 3, {"m": (("t", 0), ("t", 1))}),
    OffsetsCommitted("g", (("t", 0, 14), ("t", 1, 0))),
    OffsetsCommitted("g", (("t", 0, 0),), rewind=True),
    GroupDeleted("g"),
])
def test_each_record_type_sets_what_it_names(record: Record) -> None:
    """Each record type, replayed after a group exists, sets exactly its own part of the state."""
    h = Harness()
    h.coord.replay(GroupCreated("g", TIMEOUT_MS, 0, ("t",), "range", False))
    h.coord.replay(record)
    described = h.coord.describe("g")
    if isinstance(record, GroupDeleted):
        assert described is None
        return
    assert described is not None
    if isinstance(record, GroupCreated):
        assert (described.strategy, described.session_timeout_ms) == ("sticky", 10_000)
    elif isinstance(record, GenerationStarted):
        assert described.generation == 3 and described.assignment == record.assignment
        assert described.state == "Empty"
    else:
        assert described.offsets == {(t, p): o for t, p, o in record.offsets}


def test_replay_is_idempotent() -> None:
    """Replaying the history twice gives the same state as once (records set, never add)."""
    h = Harness()
    _busy(h)
    assert _all(_restarted(h.records + h.records)) == _all(h)


def test_an_older_generation_is_ignored() -> None:
    """A GenerationStarted older than the current generation changes nothing."""
    h = Harness()
    h.coord.replay(GroupCreated("g", TIMEOUT_MS, 0, ("t",), "range", False))
    h.coord.replay(GenerationStarted("g", 5, {"m": (("t", 0),)}))
    h.coord.replay(GenerationStarted("g", 4, {}))
    assert h.described().generation == 5


def test_snapshot_records_rebuild_equal_describe_output() -> None:
    """snapshot_records replayed into a fresh coordinator gives the same describe() as the full history."""
    h = Harness()
    _busy(h)
    snapshot = h.coord.snapshot_records()
    assert len(snapshot) <= 3 * len(h.coord.group_names())
    from_history, from_snapshot = _restarted(h.records), _restarted(snapshot)
    for name in h.coord.group_names():
        assert from_snapshot.coord.describe(name) == from_history.coord.describe(name)
    assert _all(from_snapshot) == _all(h)


def test_after_a_restart_members_re_register(h: Harness) -> None:
    """Members are live-only: after replay a heartbeat gets UNKNOWN_MEMBER and a fresh register gets a new generation."""
    member = h.join()
    restarted = _restarted(h.records)
    assert restarted.heartbeat(member) == pb.UNKNOWN_MEMBER
    assert restarted.join(consumer_id=member.consumer_id).error_code == pb.UNKNOWN_MEMBER
    assert restarted.join().generation == member.generation + 1
