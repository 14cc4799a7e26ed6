"""A consumer group and its members, as the coordinator holds them in memory.

Two kinds of state live here:

- persisted (changed only by ``GroupCoordinator.replay``): the settings from
  GroupCreated, ``generation`` and ``assignment`` from GenerationStarted,
  ``offsets`` from OffsetsCommitted;
- live (lost on restart; members re-register): ``state``, ``members``, each
  member's heartbeat and pending join, ``rewind_pending``, the timers, and
  ``topics_seen`` (what existed when the current generation was computed:
  rill.coordinator.new_partitions).

Not thread-safe: the coordinator's lock guards every Group and Member.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rill.client.clock import TimerHandle
from rill.client.structs import TopicPartition
from rill.coordinator.pending import PendingJoin
from rill.coordinator.records import GroupCreated
from rill.coordinator.state import GroupState

EXPIRY_SLACK_S = 1e-6  # float rounding of "last heartbeat + timeout" must not postpone an expiry forever


@dataclass(slots=True, eq=False)
class Member:
    """A live member of a group.

    ``topics`` is its own subscription (empty: the group's topics, unless it claims
    static partitions, in which case it consumes only those); ``static`` the
    partitions it claimed (never reassigned). ``last_heartbeat`` is clock seconds.
    ``join`` is its RegisterConsumer while that waits for the rebalance: a waiting
    member counts as alive and is never expired by its session timeout.
    """

    consumer_id: str
    client_id: str
    topics: frozenset[str]
    static: frozenset[TopicPartition]
    session_timeout_ms: int
    last_heartbeat: float
    join: PendingJoin | None = None

    def subscription(self, group_topics: frozenset[str]) -> frozenset[str]:
        """The topics this member is assigned partitions of dynamically."""
        if self.topics or self.static:
            return self.topics
        return group_topics

    def waiting(self) -> bool:
        """Has this member (re-)registered and is waiting for the rebalance to complete?"""
        return self.join is not None and not self.join.done()

    def deadline(self) -> float:
        """When its session expires, in clock seconds (if it does not heartbeat before)."""
        return self.last_heartbeat + self.session_timeout_ms / 1000.0

    def expired(self, now: float) -> bool:
        return not self.waiting() and now >= self.deadline() - EXPIRY_SLACK_S


@dataclass(slots=True, eq=False)
class Group:
    """A consumer group: settings, generation, assignment, offsets, and live members."""

    name: str
    settings: GroupCreated
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    assignment: dict[str, tuple[TopicPartition, ...]] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)
    rewind_pending: set[str] = field(default_factory=set)
    rebalance_timer: TimerHandle | None = None
    session_timer: TimerHandle | None = None
    session_due: float | None = None
    topics_seen: dict[str, int] | None = None
    """Partition counts of every topic when the current generation was computed, if it had members
    (None: it had none, or the group was loaded from the log); see rill.coordinator.new_partitions."""
    topics_planned: dict[str, int] | None = None
    """The same for the completion computed last and not applied yet (it becomes ``topics_seen``)."""

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self.settings.topics)

    @property
    def ephemeral(self) -> bool:
        return self.settings.ephemeral

    @property
    def strategy(self) -> str:
        return self.settings.strategy

    @property
    def session_timeout_ms(self) -> int:
        return self.settings.session_timeout_ms

    @property
    def rebalance_timeout_ms(self) -> int:
        """How long a rebalance waits for members to re-register (the session timeout when unset)."""
        return self.settings.rebalance_timeout_ms or self.settings.session_timeout_ms

    def all_joined(self) -> bool:
        """Has every live member registered in the current rebalance?"""
        return all(m.waiting() for m in self.members.values())

    def subscriptions(self) -> dict[str, frozenset[str]]:
        return {mid: m.subscription(self.topics) for mid, m in self.members.items()}

    def static_claims(self) -> dict[TopicPartition, str]:
        return {tp: mid for mid, m in self.members.items() for tp in m.static}

    def owned(self, member_id: str) -> tuple[TopicPartition, ...]:
        """What the member owns in the current generation (empty for unknown members)."""
        return self.assignment.get(member_id, ())

    def live_owners(self) -> dict[TopicPartition, str]:
        """(topic, partition) -> the live member owning it in the current generation."""
        return {tp: mid for mid, tps in self.assignment.items() if mid in self.members for tp in tps}

    def subscribed_topics(self) -> frozenset[str]:
        """Every topic some live member consumes dynamically."""
        return frozenset(t for m in self.members.values() for t in m.subscription(self.topics))

    def committed(self, tp: TopicPartition) -> int:
        """The committed offset, or -1 when none."""
        return self.offsets.get(tp, -1)

    def cancel_timers(self) -> None:
        for handle in (self.rebalance_timer, self.session_timer):
            if handle is not None:
                handle.cancel()
        self.rebalance_timer = self.session_timer = None
        self.session_due = None
