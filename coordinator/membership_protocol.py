"""The membership protocol of seed 003: registers, heartbeats, leaves, timeouts.

Live state only: members, their heartbeats and pending joins, the group state and
the timers. Persisted state (generation, assignment, offsets) changes only when the
coordinator replays the records this module returns; completing a rebalance is two
steps: :meth:`Membership.register` (or a leave or a timer) returns GenerationStarted,
and :meth:`Membership.generation_applied`, called from replay, answers the waiting
RegisterConsumer calls.

- A RegisterConsumer from a new or existing member starts a rebalance
  (PREPARING_REBALANCE) unless one is running, which it joins. Every other member
  that has not re-registered gets REBALANCE_IN_PROGRESS in its heartbeats. When all
  have, or the rebalance timeout passes (absentees are removed), the rebalance
  completes with generation + 1.
- Exception (rewind): a member whose partitions were rewound re-registers in a
  STABLE group with an unchanged subscription and is answered at once, in the same
  generation, with its partitions and their (new) committed offsets. A rewind moves
  offsets, not ownership, so the other members need not stop: nobody else's
  generation changes.
- A member missing its session timeout is removed, and the others rebalance; a
  member waiting in a RegisterConsumer is never expired. One session timer per
  group, set for the earliest deadline and re-set when it fires.
- A RegisterConsumer with a consumer id the coordinator does not know (a member
  removed, or any member after a coordinator restart) gets UNKNOWN_MEMBER: the
  consumer registers again with an empty id and gets a fresh, unguessable one
  (``client_id-<uuid4 hex>``).
- RegisterConsumer checks: ``session_timeout`` 0 means the group's, else it must be
  within the bounds (INVALID_SESSION_TIMEOUT); topic names (INVALID_TOPIC); static
  partitions must exist (UNKNOWN_TOPIC_OR_PARTITION) and not be claimed by another
  live member (PARTITION_ALREADY_CLAIMED); a new member beyond ``max_group_size``
  gets INVALID_REQUEST (the proto has no group-full code). A member that names
  neither topics nor static partitions consumes the group's topics; one that
  claims static partitions and names no topics consumes only its claims.
- Heartbeats: UNKNOWN_MEMBER; REBALANCE_IN_PROGRESS when a rebalance waits for this
  member or its partitions were rewound (whatever generation it sends); else
  ILLEGAL_GENERATION unless it sends the current generation. Only a heartbeat from a
  known member that is not refused for its generation refreshes the session. A
  member's session timeout is set when it registers, as in Kafka (the Heartbeat
  carries none: its field 2 is reserved).
- A completed rebalance commits offset 0 for the partitions that appeared since the
  previous generation (rill.coordinator.new_partitions: seed 003's "set to smallest").

Not thread-safe: the coordinator calls everything here with its lock held.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

import structlog

from rill.client.topic_names import is_valid_topic
from rill.coordinator.topic_catalog import Catalog
from rill.client.clock import Clock, TimerHandle
from rill.client.structs import TopicPartition
from rill.coordinator.group_state import Group, Member
from rill.coordinator.limits import Limits
from rill.coordinator.pending import PendingJoin
from rill.coordinator.rebalance_completion import completion_records, join_error, join_response, topics_grew
from rill.coordinator.records import GenerationStarted, Record
from rill.coordinator.state import GroupState, transition
from rill.v1 import coordinator_pb2 as pb

_logger = structlog.get_logger(__name__)

TimerAction = Callable[[Group], list[Record]]
Schedule = Callable[[Group, float, TimerAction], TimerHandle]


class Membership:
    """Membership operations on groups; ``schedule(group, delay_s, action)`` sets a group timer
    whose ``action(group)`` runs under the coordinator's lock and returns records to persist."""

    def __init__(self, catalog: Catalog, clock: Clock, schedule: Schedule, limits: Limits) -> None:
        self.catalog = catalog
        self.clock = clock
        self.schedule = schedule
        self.limits = limits

    # ------------------------------------------------------------------ register

    def register(self, group: Group, req: pb.RegisterConsumerRequest) -> tuple[PendingJoin, list[Record]]:
        """Add or refresh a member and start (or join) a rebalance; see the module docstring."""
        code = self._check_register(group, req)
        if code != pb.NONE:
            _logger.info("group.register_refused", group=group.name, member=req.consumer_id,
                         error=pb.ErrorCode.Name(code))
            return PendingJoin.completed(join_error(group.name, req.client_id, req.consumer_id, code)), []
        topics = frozenset(req.topics)
        static = frozenset(TopicPartition(tp.topic, tp.partition) for tp in req.static_partitions)
        timeout = req.session_timeout or group.session_timeout_ms
        member = group.members.get(req.consumer_id)
        if member is not None and self._rewind_rejoin(group, member, topics, static, timeout):
            return PendingJoin.completed(join_response(group, member)), []
        if member is None:
            member = Member(f"{req.client_id or 'consumer'}-{uuid.uuid4().hex}", req.client_id, topics, static,
                            timeout, self.clock.time())
            group.members[member.consumer_id] = member
            _logger.info("group.member_added", group=group.name, member=member.consumer_id)
        else:
            member.topics, member.static, member.session_timeout_ms = topics, static, timeout
            member.client_id = req.client_id
        if member.join is not None:
            member.join.complete(join_error(group.name, req.client_id, member.consumer_id, pb.REBALANCE_IN_PROGRESS))
        member.join = PendingJoin()
        group.rewind_pending.discard(member.consumer_id)
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare(group, f"register of {member.consumer_id}")
        return member.join, self._maybe_complete(group)

    def _check_register(self, group: Group, req: pb.RegisterConsumerRequest) -> pb.ErrorCode:
        if req.consumer_id and req.consumer_id not in group.members:
            return pb.UNKNOWN_MEMBER
        if req.session_timeout and not self.limits.session_timeout_ok(req.session_timeout):
            return pb.INVALID_SESSION_TIMEOUT
        if not all(is_valid_topic(t) for t in req.topics):
            return pb.INVALID_TOPIC
        topics = self.catalog.topics()
        claims = group.static_claims()
        for tp in req.static_partitions:
            if not 0 <= tp.partition < topics.get(tp.topic, 0):
                return pb.UNKNOWN_TOPIC_OR_PARTITION
            if claims.get(TopicPartition(tp.topic, tp.partition), req.consumer_id) != req.consumer_id:
                return pb.PARTITION_ALREADY_CLAIMED
        if not req.consumer_id and len(group.members) >= self.limits.max_group_size:
            return pb.INVALID_REQUEST
        return pb.NONE

    def _rewind_rejoin(self, group: Group, member: Member, topics: frozenset[str],
                       static: frozenset[TopicPartition], timeout: int) -> bool:
        """Answer a rewound member at once when nothing but its offsets changed."""
        if (group.state is not GroupState.STABLE or member.consumer_id not in group.rewind_pending
                or (member.topics, member.static, member.session_timeout_ms) != (topics, static, timeout)):
            return False
        group.rewind_pending.discard(member.consumer_id)
        member.last_heartbeat = self.clock.time()
        _logger.info("group.member_rewound", group=group.name, member=member.consumer_id,
                     generation=group.generation)
        return True

    # ------------------------------------------------------------------ heartbeat and leave

    def heartbeat(self, group: Group, req: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        member = group.members.get(req.consumer_id)
        if member is None:
            return pb.HeartbeatResponse(controller_generation=group.generation, error_code=pb.UNKNOWN_MEMBER)
        rejoin = member.consumer_id in group.rewind_pending or (
            group.state is GroupState.PREPARING_REBALANCE and not member.waiting())
        if not rejoin and req.generation != group.generation:
            return pb.HeartbeatResponse(controller_generation=group.generation, error_code=pb.ILLEGAL_GENERATION)
        member.last_heartbeat = self.clock.time()
        return pb.HeartbeatResponse(controller_generation=group.generation,
                                    error_code=pb.REBALANCE_IN_PROGRESS if rejoin else pb.NONE)

    def leave(self, group: Group, consumer_id: str) -> tuple[pb.ErrorCode, list[Record]]:
        """Remove a member that leaves cleanly; the others rebalance."""
        if consumer_id not in group.members:
            return pb.UNKNOWN_MEMBER, []
        _logger.info("group.member_left", group=group.name, member=consumer_id)
        self._remove(group, consumer_id, pb.UNKNOWN_MEMBER)
        return pb.NONE, self._after_removal(group, f"{consumer_id} left")

    # ------------------------------------------------------------------ timers

    def expire_sessions(self, group: Group) -> list[Record]:
        """Session timer action: remove every member past its deadline."""
        group.session_timer, group.session_due = None, None
        now = self.clock.time()
        expired = [m.consumer_id for m in group.members.values() if m.expired(now)]
        for consumer_id in expired:
            _logger.info("group.member_expired", group=group.name, member=consumer_id,
                         reason="session timeout")
            self._remove(group, consumer_id, pb.UNKNOWN_MEMBER)
        records = self._after_removal(group, "session timeout") if expired else []
        self.arm_session_timer(group)
        return records

    def rebalance_timed_out(self, group: Group) -> list[Record]:
        """Rebalance timer action: drop the members that did not re-register, then complete."""
        group.rebalance_timer = None
        if group.state is not GroupState.PREPARING_REBALANCE:
            return []
        for consumer_id in [m.consumer_id for m in group.members.values() if not m.waiting()]:
            _logger.info("group.member_not_rejoined", group=group.name, member=consumer_id,
                         generation=group.generation)
            self._remove(group, consumer_id, pb.REBALANCE_TIMEOUT)
        records = self._maybe_complete(group)
        self._arm_rebalance_timer(group)  # a retry, should persisting the completion fail
        return records

    def arm_session_timer(self, group: Group) -> None:
        """(Re)set the group's session timer for the earliest deadline of a non-waiting member."""
        deadlines = [m.deadline() for m in group.members.values() if not m.waiting()]
        if not deadlines:
            if group.session_timer is not None:
                group.session_timer.cancel()
            group.session_timer, group.session_due = None, None
            return
        due = min(deadlines)
        if group.session_timer is not None and group.session_due is not None and group.session_due <= due:
            return
        if group.session_timer is not None:
            group.session_timer.cancel()
        group.session_timer = self.schedule(group, max(0.0, due - self.clock.time()), self.expire_sessions)
        group.session_due = due

    def _arm_rebalance_timer(self, group: Group) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        group.rebalance_timer = self.schedule(group, group.rebalance_timeout_ms / 1000.0, self.rebalance_timed_out)

    # ------------------------------------------------------------------ topics

    def on_topics_changed(self, group: Group, topics: Mapping[str, int]) -> bool:
        """Start a rebalance if a subscribed topic has partitions the last assignment did not see."""
        if group.state is not GroupState.STABLE or not topics_grew(group, topics):
            return False
        self._prepare(group, "new topics or partitions")
        return True

    # ------------------------------------------------------------------ replay hooks (live effects)

    def generation_applied(self, group: Group, record: GenerationStarted) -> None:
        """Answer the waiting members of a completed rebalance (replay of GenerationStarted)."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return  # start-up replay, or the same completion applied twice
        group.topics_seen, group.topics_planned = group.topics_planned, None
        now = self.clock.time()
        for member in group.members.values():
            if member.waiting() and member.consumer_id in record.assignment:
                assert member.join is not None
                member.join.complete(join_response(group, member))
                member.join, member.last_heartbeat = None, now
        if all(mid in record.assignment for mid in group.members):
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
            group.rebalance_timer = None
            transition(group, GroupState.STABLE if group.members else GroupState.EMPTY)
            _logger.info("group.stabilized", group=group.name, generation=group.generation,
                         members=len(group.members), state=group.state.value)
        else:  # members joined after the assignment was computed: they get the next generation
            self._arm_rebalance_timer(group)
        self.arm_session_timer(group)

    def rewind_applied(self, group: Group, partitions: list[TopicPartition]) -> None:
        """Mark the live owners of rewound partitions: they re-register to learn the new offsets.

        A member already waiting in a RegisterConsumer is not marked: its answer is built
        when the rebalance completes, from the offsets committed then.
        """
        owners = group.live_owners()
        for tp in partitions:
            owner = owners.get(tp)
            if owner is not None and not group.members[owner].waiting():
                group.rewind_pending.add(owner)

    def persist_failed(self, group: Group) -> None:
        """Completion records could not be persisted: answer the waiting members STORAGE_ERROR.

        They stay members; the rebalance goes on (their heartbeats say re-register, and
        the rebalance timer removes those that do not).
        """
        for member in group.members.values():
            if member.join is not None and member.waiting():
                member.join.complete(join_error(group.name, member.client_id, member.consumer_id, pb.STORAGE_ERROR))
            member.join = None
        if group.state is GroupState.PREPARING_REBALANCE and group.rebalance_timer is None:
            self._arm_rebalance_timer(group)
        self.arm_session_timer(group)

    # ------------------------------------------------------------------ internals

    def _prepare(self, group: Group, reason: str) -> None:
        _logger.info("group.preparing_rebalance", group=group.name, old_state=group.state.value,
                     generation=group.generation, reason=reason)
        transition(group, GroupState.PREPARING_REBALANCE)
        self._arm_rebalance_timer(group)

    def _maybe_complete(self, group: Group) -> list[Record]:
        if group.state is not GroupState.PREPARING_REBALANCE or not group.all_joined():
            return []
        topics = dict(self.catalog.topics())
        group.topics_planned = topics if group.members else None  # topics_seen once applied
        return completion_records(group, topics)

    def _remove(self, group: Group, consumer_id: str, code: pb.ErrorCode) -> None:
        member = group.members.pop(consumer_id)
        group.rewind_pending.discard(consumer_id)
        if member.join is not None:
            member.join.complete(join_error(group.name, member.client_id, consumer_id, code))

    def _after_removal(self, group: Group, reason: str) -> list[Record]:
        if group.state is GroupState.STABLE:
            self._prepare(group, reason)
        return self._maybe_complete(group)
