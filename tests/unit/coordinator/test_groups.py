"""CreateGroup, DeleteGroup, ListGroups and describe()."""

from __future__ import annotations

from rill.coordinator.limits import Limits
from rill.coordinator.records import GroupCreated, GroupDeleted
from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import BROKER, TIMEOUT_MS, Harness


def test_create_names_the_coordinator_and_writes_one_record() -> None:
    """CreateGroup answers with this broker and emits GroupCreated with the defaults filled in."""
    h = Harness()
    response, records = h.coord.create_group(pb.CreateGroupRequest(consumer_group="g", topics=["t", "t", "a"]))
    assert response.error_code == pb.NONE and response.coordinator == BROKER
    assert records == [GroupCreated("g", 45_000, 0, ("a", "t"), "range", False)]


def test_create_is_idempotent_with_the_same_settings(h: Harness) -> None:
    """Creating an existing group with the same settings is NONE with no record; different settings are refused."""
    before = len(h.records)
    assert h.create().error_code == pb.NONE and len(h.records) == before
    assert h.create(topics=["other"]).error_code == pb.GROUP_ALREADY_EXISTS
    assert h.create(assignment_strategy="sticky").error_code == pb.GROUP_ALREADY_EXISTS


def test_create_validates_its_fields() -> None:
    """Bad name, timeout outside the bounds, unknown strategy, bad topic name: one code each, nothing written."""
    h = Harness()
    assert h.create("bad/name").error_code == pb.INVALID_GROUP_NAME
    assert h.create("..").error_code == pb.INVALID_GROUP_NAME
    assert h.create(session_timeout=5_999).error_code == pb.INVALID_SESSION_TIMEOUT
    assert h.create(session_timeout=300_001).error_code == pb.INVALID_SESSION_TIMEOUT
    assert h.create(assignment_strategy="nonsense").error_code == pb.INVALID_ASSIGNMENT_STRATEGY
    assert h.create(topics=["a b"]).error_code == pb.INVALID_TOPIC
    assert h.create(rebalance_timeout=-1).error_code == pb.INVALID_REQUEST
    assert h.records == [] and h.coord.group_names() == []


def test_limits_bound_the_rebalance_timeout() -> None:
    """A rebalance timeout is valid from 0 (the session timeout) up to max_session_timeout_ms, and nothing else."""
    limits = Limits(max_session_timeout_ms=60_000)
    assert [limits.rebalance_timeout_ok(ms) for ms in (0, 1, 60_000)] == [True] * 3
    assert [limits.rebalance_timeout_ok(ms) for ms in (-1, 60_001, 2**62)] == [False] * 3


def test_create_refuses_a_rebalance_timeout_above_the_max_session_timeout() -> None:
    """CreateGroup refuses a rebalance timeout above group.max.session.timeout.ms (2^62 too) with INVALID_REQUEST."""
    h = Harness(max_session_timeout_ms=60_000)
    assert h.create("huge", rebalance_timeout=2**62).error_code == pb.INVALID_REQUEST
    assert h.create("over", rebalance_timeout=60_001).error_code == pb.INVALID_REQUEST
    assert h.records == [] and h.coord.group_names() == []
    assert h.create("at", rebalance_timeout=60_000).error_code == pb.NONE
    assert h.create("unset", rebalance_timeout=0).error_code == pb.NONE
    assert h.described("at").rebalance_timeout_ms == 60_000


def test_delete_rules(h: Harness) -> None:
    """Delete refuses missing, ephemeral and non-empty groups per group, and deletes the rest."""
    h.create("eph", ephemeral=True)
    h.create("busy")
    h.join("busy")
    h.create("idle")
    response = h.call(h.coord.delete_group, pb.DeleteGroupRequest(consumer_group=["nope", "eph", "busy", "idle"]))
    assert list(response.deleted_consumer_groups) == ["idle"]
    assert response.error_code == pb.GROUP_NOT_FOUND
    assert {(e.consumer_group, e.error_code) for e in response.errors} == {
        ("nope", pb.GROUP_NOT_FOUND), ("eph", pb.GROUP_IS_EPHEMERAL), ("busy", pb.GROUP_NOT_EMPTY)}
    assert GroupDeleted("idle") in h.records and h.coord.describe("idle") is None


def test_deleting_a_group_drops_its_offsets(h: Harness) -> None:
    """A deleted and re-created group starts with no offsets and generation 0."""
    h.catalog.append("t", 0, [10])
    h.commit({("t", 0): 14})
    h.join()
    h.clock.advance(TIMEOUT_MS / 1000)
    h.call(h.coord.delete_group, pb.DeleteGroupRequest(consumer_group=["g"]))
    h.create()
    assert h.fetch() == {} and h.described().generation == 0


def test_list_every_group_with_its_state(h: Harness) -> None:
    """ListGroups without names lists every group, members and state included."""
    h.create("other", topics=["u"])
    member = h.join()
    listing = h.call(h.coord.list_groups, pb.ListGroupsRequest())
    info = {g.group_name: g for g in listing.groups_info}
    assert list(info) == ["g", "other"]
    assert list(info["g"].group_members) == [member.consumer_id] and info["g"].state == "Stable"
    assert info["g"].generation == 1 and info["g"].controller_broker == BROKER
    assert info["g"].session_timeout == TIMEOUT_MS and list(info["g"].topics) == ["t"]
    assert info["other"].state == "Empty" and not info["other"].group_members


def test_list_named_groups_reports_missing_ones(h: Harness) -> None:
    """ListGroups with names answers those, in order, with GROUP_NOT_FOUND for a missing one."""
    listing = h.call(h.coord.list_groups, pb.ListGroupsRequest(consumer_groups=["nope", "g"]))
    assert [(g.group_name, g.error_code) for g in listing.groups_info] == [
        ("nope", pb.GROUP_NOT_FOUND), ("g", pb.NONE)]
    assert listing.error_code == pb.GROUP_NOT_FOUND


def test_describe_shows_members_assignment_and_offsets(h: Harness) -> None:
    """describe() is a snapshot: state, generation, strategy, members with assignment and heartbeat, offsets."""
    h.catalog.append("t", 1, [10])
    member = h.join(static=[("t", 1)], topics=["t"])
    h.commit({("t", 1): 14}, member)
    described = h.coord.describe("g")
    assert described is not None
    assert (described.state, described.generation, described.strategy) == ("Stable", 1, "range")
    (m,) = described.members
    assert m.consumer_id == member.consumer_id and m.static_partitions == (("t", 1),)
    assert set(m.assignment) == {("t", p) for p in range(4)} and m.last_heartbeat == h.clock.time()
    assert described.offsets == {("t", 1): 14}
    assert h.coord.describe("nope") is None
