"""Checkpoint format and the takeover rules: which of local state and checkpoint a new coordinator keeps."""

from __future__ import annotations

import pytest

from rill.coordinator import group_checkpoint
from rill.coordinator.group_checkpoint import Checkpoint, Decision, GroupSnapshot, Writer, decide
from rill.coordinator.records import GroupCreated, GroupReleased
from rill.v1 import coordinator_pb2 as pb
from tests.unit.coordinator.harness import Harness

ME = Writer(1, "me")
OTHER = Writer(2, "other")
SETTINGS = GroupCreated("g", 10_000, 0, ("t",), "range", False)
OLD = GroupSnapshot(SETTINGS, 3, (("t", 0, 100),))
NEW = GroupSnapshot(SETTINGS, 5, (("t", 0, 300), ("u", 2, 40)))


def cp(writer: Writer, snap: GroupSnapshot | None, seq: int = 4, released: bool = False) -> Checkpoint:
    return Checkpoint("g", writer, seq, snap, released, 1_700_000_000_000)


def test_round_trip() -> None:
    """A checkpoint and a tombstone decode to what was encoded."""
    for value in (cp(ME, NEW, released=True), cp(OTHER, None)):
        assert group_checkpoint.decode(group_checkpoint.encode(value)) == value


def test_garbage_is_refused() -> None:
    """Anything that is not a checkpoint of format 1 raises ValueError."""
    for data in (b"", b"{}", b"[1]", b'{"format": 2}'):
        with pytest.raises(ValueError):
            group_checkpoint.decode(data)


def test_no_checkpoint_keeps_local_state() -> None:
    """Without a checkpoint the local state (if any) stays: it was never written out yet."""
    assert decide("g", OLD, None, ME).decision is Decision.KEEP_LOCAL
    assert decide("g", None, None, ME).decision is Decision.ABSENT


def test_own_older_checkpoint_does_not_discard_newer_local_state() -> None:
    """A checkpoint this instance wrote is never newer than its local state (which only moved on since)."""
    assert decide("g", NEW, cp(ME, OLD, seq=9), ME) == group_checkpoint.Takeover(Decision.KEEP_LOCAL)


def test_returning_broker_does_not_resurrect_its_old_state() -> None:
    """A checkpoint by another coordinator replaces this broker's local state, however many commits it has."""
    takeover = decide("g", NEW, cp(OTHER, OLD), ME)
    assert takeover.decision is Decision.LOAD
    assert takeover.records[0] == GroupReleased("g")
    h = Harness({"t": 1})
    h.persist(takeover.records)
    assert h.coord.export("g") == OLD


def test_same_broker_id_other_instance_is_another_writer() -> None:
    """A broker reusing an id with another data directory does not take the old instance's checkpoint for its own."""
    assert decide("g", NEW, cp(Writer(1, "old-disk"), OLD), ME).decision is Decision.LOAD


def test_tombstone_drops_local_state() -> None:
    """A group deleted by another coordinator is not resurrected from local state."""
    takeover = decide("g", OLD, cp(OTHER, None), ME)
    assert (takeover.decision, takeover.records) == (Decision.DROP, [GroupReleased("g")])


def test_load_rebuilds_settings_generation_and_offsets() -> None:
    """Loading a checkpoint gives the group its settings, generation and offsets; members re-register."""
    h = Harness({"t": 1, "u": 3})
    h.persist(decide("g", None, cp(OTHER, NEW), ME).records)
    assert h.coord.export("g") == NEW
    listing = h.coord.list_groups(pb.ListGroupsRequest(consumer_groups=["g"]))[0]
    assert (listing.groups_info[0].generation, listing.groups_info[0].session_timeout) == (5, 10_000)

