"""Commits without a consumer id (a standalone consumer's assign(), tools, loaders): accepted only while
the group has no live member, as Kafka accepts them only for an empty group."""

from __future__ import annotations

from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import Harness


def _fill(h: Harness) -> None:
    for p in range(4):
        h.catalog.append("t", p, [10, 10])


def test_a_standalone_commit_to_an_empty_group_is_stored(h: Harness) -> None:
    """No member: the commit is stored (generation -1, Kafka's, is accepted like any other)."""
    _fill(h)
    assert h.commit({("t", 0): 14, ("t", 3): 28}, generation=-1).error_code == pb.NONE
    assert h.fetch() == {("t", 0): 14, ("t", 3): 28}


def test_a_standalone_commit_is_refused_while_the_group_has_live_members(h: Harness) -> None:
    """While a member is live, every partition gets NOT_OWNER, also one no member owns; nothing is stored."""
    _fill(h)
    member = h.join(topics=["nothing-yet"])  # owns no partition of t
    assert owned_nothing(member)
    response = h.commit({("t", 0): 14, ("t", 1): 14}, generation=-1)
    assert response.error_code == pb.NOT_OWNER
    assert [o.error_code for o in response.offsets] == [pb.NOT_OWNER, pb.NOT_OWNER]
    assert h.fetch() == {}


def test_an_unknown_partition_is_named_before_not_owner(h: Harness) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION is the answer for a partition that does not exist, members or not."""
    _fill(h)
    h.join()
    response = h.commit({("t", 0): 14, ("nope", 0): 0}, generation=-1)
    assert [o.error_code for o in response.offsets] == [pb.NOT_OWNER, pb.UNKNOWN_TOPIC_OR_PARTITION]


def test_standalone_commits_are_accepted_again_once_the_members_left(h: Harness) -> None:
    """After the last member leaves (the group is EMPTY) a standalone commit is stored."""
    _fill(h)
    member = h.join()
    assert h.commit({("t", 0): 14}, generation=-1).error_code == pb.NOT_OWNER
    h.leave(member)
    assert h.state() == "Empty"
    assert h.commit({("t", 0): 14}, generation=-1).error_code == pb.NONE
    assert h.fetch() == {("t", 0): 14}


def owned_nothing(member: pb.RegisterConsumerResponse) -> bool:
    return member.error_code == pb.NONE and not member.partitions_to_own
