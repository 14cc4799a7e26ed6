"""CommitOffsets and FetchOffsets: fencing by member and generation, ownership, validation, all-or-nothing."""

from __future__ import annotations

from rill.coordinator.records import GroupCreated, OffsetsCommitted
from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import Harness, owned


def _fill(h: Harness, topic: str = "t", partitions: int = 4, messages: int = 3) -> None:
    for p in range(partitions):
        h.catalog.append(topic, p, [10] * messages)  # offsets 0, 14, 28; end 42


def test_member_commit_is_stored_and_fetched(h: Harness) -> None:
    """A member commits offsets of its partitions and FetchOffsets returns them (-1 for the rest)."""
    _fill(h)
    member = h.join()
    response = h.commit({("t", 0): 14, ("t", 1): 42}, member)
    assert response.error_code == pb.NONE
    assert [o.error_code for o in response.offsets] == [pb.NONE, pb.NONE]
    assert h.fetch() == {("t", 0): 14, ("t", 1): 42}
    fetched = h.call(h.coord.fetch_offsets, pb.FetchOffsetsRequest(
        consumer_group="g", partitions=[pb.TopicPartition(topic="t", partition=p) for p in (0, 3)]))
    assert [(o.partition, o.offset) for o in fetched.offsets] == [(0, 14), (3, -1)]


def test_stale_generation_commit_is_refused(h: Harness) -> None:
    """A commit with an older generation gets ILLEGAL_GENERATION and changes nothing."""
    _fill(h)
    a, _ = h.stable(2)
    mine = sorted(owned(a))[0]
    response = h.commit({mine: 14}, a, generation=a.generation - 1)
    assert response.error_code == pb.ILLEGAL_GENERATION
    assert [o.error_code for o in response.offsets] == [pb.ILLEGAL_GENERATION]
    assert h.fetch() == {}


def test_commit_from_a_removed_member_is_refused(h: Harness) -> None:
    """A zombie whose session expired is an UNKNOWN_MEMBER: its commit changes nothing."""
    _fill(h)
    zombie = h.join()
    h.clock.advance(60)
    assert h.commit({("t", 0): 14}, zombie).error_code == pb.UNKNOWN_MEMBER
    assert h.fetch() == {}


def test_commit_for_a_partition_the_member_does_not_own_is_refused(h: Harness) -> None:
    """NOT_OWNER for another member's partition; all or nothing, so its own partition is not committed either."""
    _fill(h)
    a, b = h.stable(2)
    response = h.commit({sorted(owned(a))[0]: 14, sorted(owned(b))[0]: 14}, a)
    assert response.error_code == pb.NOT_OWNER
    assert [o.error_code for o in response.offsets] == [pb.NONE, pb.NOT_OWNER]
    assert h.fetch() == {}


def test_member_commit_for_an_unknown_topic_or_partition_is_unknown_not_not_owner(h: Harness) -> None:
    """A member's commit for a missing topic or partition gets UNKNOWN_TOPIC_OR_PARTITION, NOT_OWNER only existing ones."""
    _fill(h)
    a, b = h.stable(2)
    mine, theirs = sorted(owned(a))[0], sorted(owned(b))[0]
    response = h.commit({mine: 14, ("nope", 0): 0, ("t", 9): 0, theirs: 15}, a)
    assert [o.error_code for o in response.offsets] == [
        pb.NONE, pb.UNKNOWN_TOPIC_OR_PARTITION, pb.UNKNOWN_TOPIC_OR_PARTITION, pb.NOT_OWNER]
    assert response.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert h.fetch() == {}
    assert not [r for r in h.records if isinstance(r, OffsetsCommitted)]


def test_commit_is_allowed_while_the_group_rebalances(h: Harness) -> None:
    """During PREPARING_REBALANCE a member commits with its current generation before re-registering."""
    _fill(h)
    a = h.join()
    h.register()
    assert h.heartbeat(a) == pb.REBALANCE_IN_PROGRESS
    assert h.commit({("t", 3): 28}, a).error_code == pb.NONE
    assert h.fetch() == {("t", 3): 28}


def test_a_new_member_owns_nothing_until_the_rebalance_completes(h: Harness) -> None:
    """A member waiting for its first generation cannot commit: NOT_OWNER."""
    _fill(h)
    h.join()
    h.register()
    described = h.coord.describe("g")
    assert described is not None
    newcomer = next(m for m in described.members if m.rejoining)
    member = pb.RegisterConsumerResponse(consumer_id=newcomer.consumer_id, generation=described.generation)
    assert h.commit({("t", 0): 0}, member).error_code == pb.NOT_OWNER


def test_standalone_commit_is_accepted_under_the_group_name(h: Harness) -> None:
    """A commit without a consumer id, to a group with no members, is stored."""
    _fill(h)
    assert h.commit({("t", 2): 28}).error_code == pb.NONE
    assert h.fetch() == {("t", 2): 28}


def test_standalone_commit_creates_the_group(h: Harness) -> None:
    """A commit without a consumer id to a missing group creates it, non-ephemeral, with default settings."""
    _fill(h)
    assert h.commit({("t", 0): 0}, group="loader").error_code == pb.NONE
    created = next(r for r in h.records if isinstance(r, GroupCreated) and r.group == "loader")
    assert not created.ephemeral and created.strategy == "range" and created.session_timeout_ms == 45_000
    assert h.fetch("loader") == {("t", 0): 0}
    assert h.commit({("t", 0): 0}, group="bad/name").error_code == pb.INVALID_GROUP_NAME


def test_standalone_commit_for_a_live_members_partition_is_refused(h: Harness) -> None:
    """A commit without a consumer id gets NOT_OWNER for a partition a live member owns."""
    _fill(h)
    h.join()
    assert h.commit({("t", 0): 14}).error_code == pb.NOT_OWNER
    assert h.fetch() == {}


def test_offsets_are_validated_per_partition_all_or_nothing(h: Harness) -> None:
    """Out of range, not a message boundary, unknown partition: per-partition codes and nothing committed."""
    _fill(h)
    member = h.join()
    response = h.commit({("t", 0): 14, ("t", 1): 43, ("t", 2): 15, ("t", 3): 0}, member)
    assert response.error_code == pb.OFFSET_OUT_OF_RANGE
    assert [o.error_code for o in response.offsets] == [pb.NONE, pb.OFFSET_OUT_OF_RANGE, pb.INVALID_OFFSET, pb.NONE]
    unknown = h.commit({("nope", 0): 0, ("t", 9): 0})
    assert [o.error_code for o in unknown.offsets] == [pb.UNKNOWN_TOPIC_OR_PARTITION] * 2
    assert h.fetch() == {}
    assert not [r for r in h.records if isinstance(r, OffsetsCommitted)]


def test_commit_to_a_missing_group_with_a_consumer_id(h: Harness) -> None:
    """A member commit to a group that does not exist gets GROUP_NOT_FOUND and creates nothing."""
    member = pb.RegisterConsumerResponse(consumer_id="x", generation=1)
    assert h.commit({("t", 0): 0}, member, group="nope").error_code == pb.GROUP_NOT_FOUND
    assert h.coord.describe("nope") is None


def test_fetch_from_a_missing_group(h: Harness) -> None:
    """FetchOffsets of an unknown group gets GROUP_NOT_FOUND."""
    response, records = h.coord.fetch_offsets(pb.FetchOffsetsRequest(consumer_group="nope"))
    assert response.error_code == pb.GROUP_NOT_FOUND and records == []
