"""Read-only snapshots of a group for the admin service (``GroupCoordinator.describe``).

Plain frozen values, detached from the coordinator: safe to read without its lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rill.client.structs import TopicPartition
from rill.coordinator.group_state import Group, Member


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A live member: ``assignment`` is what it owns in the current generation
    (empty while it joins its first one); ``last_heartbeat`` is clock seconds;
    ``rejoining`` is true while it waits in a RegisterConsumer; ``rewind_pending``
    while it has rewound partitions it has not re-registered for."""

    consumer_id: str
    client_id: str
    topics: tuple[str, ...]
    static_partitions: tuple[TopicPartition, ...]
    assignment: tuple[TopicPartition, ...]
    session_timeout_ms: int
    last_heartbeat: float
    rejoining: bool
    rewind_pending: bool


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group: settings, state (a GroupState value: "Empty", "PreparingRebalance",
    "Stable"), the current generation and its assignment (member id -> partitions,
    including members that have since left), members sorted by id, and committed
    offsets ((topic, partition) -> offset; partitions with none are absent)."""

    group: str
    state: str
    generation: int
    strategy: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    ephemeral: bool
    topics: tuple[str, ...]
    members: tuple[MemberDescription, ...]
    assignment: Mapping[str, tuple[TopicPartition, ...]] = field(default_factory=dict)
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)


def _member(group: Group, member: Member) -> MemberDescription:
    return MemberDescription(
        consumer_id=member.consumer_id, client_id=member.client_id, topics=tuple(sorted(member.topics)),
        static_partitions=tuple(sorted(member.static)), assignment=group.owned(member.consumer_id),
        session_timeout_ms=member.session_timeout_ms, last_heartbeat=member.last_heartbeat,
        rejoining=member.waiting(), rewind_pending=member.consumer_id in group.rewind_pending)


def describe(group: Group) -> GroupDescription:
    return GroupDescription(
        group=group.name, state=group.state.value, generation=group.generation, strategy=group.strategy,
        session_timeout_ms=group.session_timeout_ms, rebalance_timeout_ms=group.settings.rebalance_timeout_ms,
        ephemeral=group.ephemeral, topics=tuple(sorted(group.topics)),
        members=tuple(_member(group, group.members[mid]) for mid in sorted(group.members)),
        assignment=dict(sorted(group.assignment.items())), offsets=dict(sorted(group.offsets.items())))


def group_partitions(described: GroupDescription, partition_counts: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions a group's lag is reported for, sorted: every partition of the topics it or its
    members consume, those its members own, and those it has committed offsets for."""
    topics = set(described.topics) | {t for m in described.members for t in m.topics}
    wanted = {tp for m in described.members for tp in m.assignment} | set(described.offsets)
    for topic in topics:
        wanted.update(TopicPartition(topic, p) for p in range(partition_counts.get(topic, 0)))
    return sorted(wanted)
