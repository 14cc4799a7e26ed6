"""Partitions that appeared since the group's previous generation start at 0, committed
(rill.coordinator.new_partitions)."""

from __future__ import annotations

from rill.coordinator.records import GenerationStarted, OffsetsCommitted, decode, encode
from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import Harness, offsets_of, owned


def _rejoin(h: Harness, member: pb.RegisterConsumerResponse, **kw: object) -> pb.RegisterConsumerResponse:
    assert h.heartbeat(member) == pb.REBALANCE_IN_PROGRESS
    return h.join(consumer_id=member.consumer_id, **kw)


def test_a_topic_created_after_a_member_subscribed_starts_at_0_and_is_committed() -> None:
    """A member subscribed to a missing topic; once created it is assigned at offset 0, committed before
    the generation starts."""
    h = Harness({})
    h.create(topics=())
    member = h.join(topics=["later"])
    assert owned(member) == set()
    h.catalog.create_topic("later", 2)
    assert h.coord.on_topics_changed() == ["g"]
    again = _rejoin(h, member, topics=["later"])
    assert offsets_of(again) == {("later", 0): 0, ("later", 1): 0}
    started = next(i for i, r in enumerate(h.records) if isinstance(r, GenerationStarted) and r.generation == 2)
    assert h.records[started - 1] == OffsetsCommitted("g", (("later", 0, 0), ("later", 1, 0)))
    assert h.fetch() == {("later", 0): 0, ("later", 1): 0}


def test_a_topic_a_member_subscribes_to_later_is_new_if_it_appeared_since_the_last_generation() -> None:
    """A member with no topics of its own (a pattern that matched nothing) re-registers with a topic created
    since: it starts at 0; a topic that already existed at the previous generation gets -1."""
    h = Harness({"old": 1})
    h.create(topics=())
    member = h.join()
    h.catalog.create_topic("fresh", 1)
    assert h.coord.on_topics_changed() == []  # nobody names it yet
    again = h.join(consumer_id=member.consumer_id, topics=["fresh", "old"])
    assert offsets_of(again) == {("fresh", 0): 0, ("old", 0): -1}


def test_the_first_generation_applies_the_reset_policy() -> None:
    """In a group's first generation nothing is new: no committed offset is -1, and nothing is committed."""
    h = Harness()
    h.create()
    assert set(offsets_of(h.join()).values()) == {-1}
    assert not [r for r in h.records if isinstance(r, OffsetsCommitted)]


def test_a_group_that_became_empty_starts_over() -> None:
    """Partitions created while the group had no member are not new to the member that comes back."""
    h = Harness()
    h.create()
    h.leave(h.join())
    h.catalog.create_topic("t", 6)
    assert set(offsets_of(h.join()).values()) == {-1}


def test_a_committed_offset_is_kept(h: Harness) -> None:
    """A new partition that already has a committed offset (a standalone commit) keeps it."""
    h.catalog.create_topic("t", 5)
    h.catalog.append("t", 4, [10, 10])
    assert h.commit({("t", 4): 14}).error_code == pb.NONE
    member = h.join()
    h.catalog.create_topic("t", 6)
    h.coord.on_topics_changed()
    assert offsets_of(_rejoin(h, member))[("t", 4)] == 14


def test_a_member_that_joins_later_gets_the_committed_start(h: Harness) -> None:
    """The first owner of a new partition commits nothing; the member that gets it next still starts at 0."""
    first = h.join()
    h.catalog.create_topic("t", 6)
    h.coord.on_topics_changed()
    again = _rejoin(h, first)
    assert offsets_of(again)[("t", 5)] == 0
    later = h.register(client_id="later")
    again = _rejoin(h, again)
    joined = later.wait(0)
    assert joined is not None and joined.error_code == pb.NONE
    answers = {**offsets_of(again), **offsets_of(joined)}
    assert (answers[("t", 4)], answers[("t", 5)]) == (0, 0)
    assert set(answers) == {("t", p) for p in range(6)}


def test_after_a_reload_the_last_assignment_says_what_existed(h: Harness) -> None:
    """A coordinator that loaded the group from its records: partitions added to an assigned topic are new,
    a topic the group never had is not."""
    h.join(topics=["t"])
    h.catalog.create_topic("u", 1)
    fresh = Harness({"t": 4, "u": 1})
    for record in h.records:
        fresh.coord.replay(decode(encode(record)))
    fresh.catalog.create_topic("t", 5)
    back = fresh.join(topics=["t", "u"])
    assert offsets_of(back) == {**{("t", p): -1 for p in range(4)}, ("t", 4): 0, ("u", 0): -1}
