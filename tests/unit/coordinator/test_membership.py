"""The seed 003 membership protocol: joins, heartbeats, leaves, timeouts, static partitions, topic changes."""

from __future__ import annotations

from structlog.testing import capture_logs

from rill.coordinator.records import GenerationStarted, GroupDeleted
from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import TIMEOUT_MS, Harness, answer, offsets_of, owned

ALL = {("t", p) for p in range(4)}


def test_one_member_joins_and_owns_everything(h: Harness) -> None:
    """A lone member is answered at once with every partition, offset -1 and generation 1."""
    joined = h.join(client_id="app")
    assert joined.error_code == pb.NONE and joined.consumer_id.startswith("app-")
    assert owned(joined) == ALL and set(offsets_of(joined).values()) == {-1}
    assert joined.generation == 1 and joined.session_timeout == TIMEOUT_MS
    assert h.state() == "Stable" and h.heartbeat(joined) == pb.NONE


def test_second_member_rebalances_through_the_first_ones_heartbeat(h: Harness) -> None:
    """The first member's heartbeat says REBALANCE_IN_PROGRESS; once it re-registers both get disjoint halves."""
    first = h.join()
    second = h.register()
    assert not second.done() and h.state() == "PreparingRebalance"
    assert h.heartbeat(first) == pb.REBALANCE_IN_PROGRESS
    again = h.join(consumer_id=first.consumer_id)
    other = second.wait(0)
    assert other is not None and other.error_code == pb.NONE
    assert again.generation == other.generation == 2
    assert owned(again) | owned(other) == ALL and not owned(again) & owned(other)
    assert len(owned(again)) == len(owned(other)) == 2


def test_a_member_that_leaves_hands_its_partitions_over(h: Harness) -> None:
    """After a clean leave the remaining member is told to re-register and gets everything."""
    a, b = h.stable(2)
    assert h.leave(a) == pb.NONE
    assert h.heartbeat(b) == pb.REBALANCE_IN_PROGRESS
    again = h.join(consumer_id=b.consumer_id)
    assert owned(again) == ALL and again.generation == 3
    assert h.heartbeat(a) == pb.UNKNOWN_MEMBER


def test_leave_of_an_unknown_member_is_refused(h: Harness) -> None:
    """leave_group answers UNKNOWN_MEMBER for an id it does not know and GROUP_NOT_FOUND for a missing group."""
    assert h.coord.leave_group("g", "ghost") == (pb.UNKNOWN_MEMBER, [])
    assert h.coord.leave_group("nope", "ghost") == (pb.GROUP_NOT_FOUND, [])


def test_session_expiry_removes_a_silent_member(h: Harness) -> None:
    """A member that stops heartbeating is removed after its session timeout, and the other rebalances."""
    a, b = h.stable(2)
    with capture_logs() as logs:
        for _ in range(4):
            h.clock.advance(TIMEOUT_MS / 1000 / 4)
            assert h.heartbeat(b) in (pb.NONE, pb.REBALANCE_IN_PROGRESS)
    assert {"event": "group.member_expired", "group": "g", "member": a.consumer_id,
            "reason": "session timeout", "log_level": "info"} in logs
    assert h.heartbeat(a) == pb.UNKNOWN_MEMBER
    assert h.heartbeat(b) == pb.REBALANCE_IN_PROGRESS
    assert owned(h.join(consumer_id=b.consumer_id)) == ALL


def test_heartbeats_keep_a_member_alive(h: Harness) -> None:
    """A member heartbeating every half timeout is never expired."""
    a = h.join()
    for _ in range(10):
        h.clock.advance(TIMEOUT_MS / 2000)
        assert h.heartbeat(a) == pb.NONE


def test_a_member_waiting_in_register_is_not_expired(h: Harness) -> None:
    """A pending RegisterConsumer counts as alive: only the rebalance timeout can end it."""
    a = h.join()
    waiting = h.register()
    h.clock.advance(TIMEOUT_MS / 2000)
    assert h.heartbeat(a) == pb.REBALANCE_IN_PROGRESS
    h.join(consumer_id=a.consumer_id)
    assert waiting.done() and h.state() == "Stable"
    assert len(h.described().members) == 2


def test_rebalance_timeout_drops_a_member_that_never_re_registers(h: Harness) -> None:
    """When the rebalance timeout passes the absentee is removed and the waiting member gets everything."""
    a = h.join()
    waiting = h.register()
    h.clock.advance(TIMEOUT_MS / 1000 - 1)
    assert not waiting.done()
    h.clock.advance(1)
    response = waiting.wait(0)
    assert response is not None and owned(response) == ALL and response.generation == 2
    assert h.heartbeat(a) == pb.UNKNOWN_MEMBER


def test_rebalance_timeout_uses_the_group_setting(h: Harness) -> None:
    """A group's own rebalance_timeout, shorter than its session timeout, ends the wait."""
    h.create("fast", rebalance_timeout=1_000)
    h.join("fast")
    waiting = h.register("fast")
    h.clock.advance(1.0)
    assert waiting.done()


def test_stale_generation_heartbeat_is_refused(h: Harness) -> None:
    """A heartbeat with an older generation gets ILLEGAL_GENERATION."""
    a, _ = h.stable(2)
    assert h.heartbeat(a, generation=a.generation - 1) == pb.ILLEGAL_GENERATION
    assert h.heartbeat(a) == pb.NONE


def test_unknown_member_and_group(h: Harness) -> None:
    """Heartbeats and registers with an unknown id get UNKNOWN_MEMBER; an unknown group GROUP_NOT_FOUND."""
    ghost = pb.RegisterConsumerResponse(consumer_id="ghost", generation=1)
    assert h.heartbeat(ghost) == pb.UNKNOWN_MEMBER
    assert h.join(consumer_id="ghost").error_code == pb.UNKNOWN_MEMBER
    assert h.heartbeat(ghost, group="nope") == pb.GROUP_NOT_FOUND
    assert h.join("nope").error_code == pb.GROUP_NOT_FOUND


def test_register_checks_session_timeout_topics_and_group_size() -> None:
    """A register outside the timeout bounds, with a bad topic name, or past max_group_size is refused."""
    h = Harness(max_group_size=1)
    h.create()
    assert h.join(session_timeout=1).error_code == pb.INVALID_SESSION_TIMEOUT
    assert h.join(topics=["../etc"]).error_code == pb.INVALID_TOPIC
    assert h.join().error_code == pb.NONE
    assert h.join().error_code == pb.INVALID_REQUEST


def test_a_member_with_its_own_topics_gets_only_those(h: Harness) -> None:
    """A member's subscription replaces the group's topics."""
    h.catalog.create_topic("u", 2)
    joined = h.join(topics=["u"])
    assert owned(joined) == {("u", 0), ("u", 1)}


def test_re_registering_while_waiting_replaces_the_pending_join(h: Harness) -> None:
    """A retried RegisterConsumer answers the older call REBALANCE_IN_PROGRESS and waits in its place."""
    a = h.join()
    second = h.register()
    again = h.register(consumer_id=_member_id(h, exclude=a.consumer_id))
    assert answer(second).error_code == pb.REBALANCE_IN_PROGRESS
    assert not again.done()
    h.join(consumer_id=a.consumer_id)
    assert answer(again).error_code == pb.NONE


def _member_id(h: Harness, exclude: str) -> str:
    described = h.coord.describe("g")
    assert described is not None
    return next(m.consumer_id for m in described.members if m.consumer_id != exclude)


def test_static_partitions_are_never_reassigned(h: Harness) -> None:
    """A statically claimed partition stays with its claimer through rebalances; others split the rest."""
    static = h.join(static=[("t", 0)], topics=["t"])
    assert ("t", 0) in owned(static)
    joins = [h.register() for _ in range(2)]
    h.join(consumer_id=static.consumer_id, static=[("t", 0)], topics=["t"])
    others = [j.wait(0) for j in joins]
    for other in others:
        assert other is not None and ("t", 0) not in owned(other)
    described = h.coord.describe("g")
    assert described is not None
    assert {tp for m in described.members for tp in m.assignment} == ALL


def test_static_only_member_consumes_only_its_claims(h: Harness) -> None:
    """A member that claims partitions and names no topics gets just its claims, not the group's topics."""
    joined = h.join(static=[("t", 2)])
    assert owned(joined) == {("t", 2)}


def test_conflicting_static_claims_are_refused(h: Harness) -> None:
    """A static claim held by another live member gets PARTITION_ALREADY_CLAIMED; unknown partitions are refused."""
    h.join(static=[("t", 1)])
    assert h.join(static=[("t", 1)]).error_code == pb.PARTITION_ALREADY_CLAIMED
    assert h.join(static=[("t", 9)]).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION


def test_ephemeral_group_disappears_with_its_last_member(h: Harness) -> None:
    """When the last member of an ephemeral group leaves, the group is deleted (GroupDeleted)."""
    h.create("eph", ephemeral=True)
    member = h.join("eph")
    assert h.leave(member, group="eph") == pb.NONE
    assert h.coord.describe("eph") is None and GroupDeleted("eph") in h.records


def test_ephemeral_group_disappears_when_its_last_member_expires(h: Harness) -> None:
    """An ephemeral group whose only member misses its session timeout is deleted."""
    h.create("eph", ephemeral=True)
    h.join("eph")
    h.clock.advance(TIMEOUT_MS / 1000)
    assert h.coord.describe("eph") is None


def test_non_ephemeral_group_goes_empty_with_a_new_generation(h: Harness) -> None:
    """A regular group whose last member leaves stays, EMPTY, at the next generation with no assignment."""
    member = h.join()
    h.leave(member)
    described = h.coord.describe("g")
    assert described is not None and described.state == "Empty"
    assert GenerationStarted("g", 2, {}) in h.records


def test_new_partitions_trigger_a_rebalance(h: Harness) -> None:
    """A subscribed topic that grows starts a rebalance; the members re-register and get the new partitions,
    which start at 0 (seed 003: "set to smallest"); the old ones have no committed offset (-1)."""
    a = h.join()
    assert h.coord.on_topics_changed() == []
    h.catalog.create_topic("t", 6)
    assert h.coord.on_topics_changed() == ["g"]
    assert h.heartbeat(a) == pb.REBALANCE_IN_PROGRESS
    again = h.join(consumer_id=a.consumer_id)
    assert owned(again) == {("t", p) for p in range(6)}
    assert offsets_of(again) == {**{("t", p): -1 for p in range(4)}, ("t", 4): 0, ("t", 5): 0}


def test_a_new_topic_triggers_a_rebalance_for_its_subscribers(h: Harness) -> None:
    """A member subscribed to a topic that did not exist rebalances when it is created; others do not."""
    h.create("other", topics=["t"])
    h.join("other")
    waiting_for = h.join(topics=["later"])
    assert owned(waiting_for) == set()
    h.catalog.create_topic("later", 1)
    assert h.coord.on_topics_changed() == ["g"]
