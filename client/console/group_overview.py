"""The groups page and a group's page: state, members and their partitions, committed offsets and lag.

The list is ListGroups (every group the console's principal may describe: the others
are left out by the brokers), with each group's lag from the sampler's newest sample.
A group's page is Admin DescribeGroup at its coordinator (what ``rill groups describe``
prints): per partition the committed offset, the end, the lag in bytes and in seconds
(the age of the oldest unconsumed message, from the partition's time index) and the
owner; -1 (shown ``-``) where unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from rill.client.cli.groups_describe import assignment_text
from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_errors import NotFound
from rill.client.console.lag_sampler import LagPoint, LagSampler, lag_totals
from rill.client.grpc_client import AdminClient, error_name
from rill.client.errors import RillError
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

__all__ = ["GroupRow", "GroupView", "MemberRow", "PartitionLagRow", "group_view", "groups_view"]


@dataclass(frozen=True)
class GroupRow:
    """A group in the list; ``lag`` is the sampler's newest sample (None: not sampled yet)."""

    name: str
    state: str
    generation: int
    members: int
    topics: tuple[str, ...]
    coordinator: int
    lag: LagPoint | None


@dataclass(frozen=True)
class MemberRow:
    """A member: its ids, its partitions (``assignment`` as ``topic(0,1)``) and its last heartbeat (ms since epoch)."""

    consumer_id: str
    client_id: str
    partitions: tuple[tuple[str, int], ...]
    assignment: str
    last_heartbeat_ms: int


@dataclass(frozen=True)
class PartitionLagRow:
    """One partition of the group: offsets are byte positions; -1 where unknown (none committed, broker down)."""

    topic: str
    partition: int
    committed_offset: int
    end_offset: int
    lag_bytes: int
    lag_seconds: float
    owner: str


@dataclass(frozen=True)
class GroupView:
    """A group's page: its description now, its lag now, and the sampler's history of it (oldest first)."""

    name: str
    state: str
    generation: int
    strategy: str
    ephemeral: bool
    session_timeout_ms: int
    coordinator_id: int
    coordinator_address: str
    topics: tuple[str, ...]
    members: tuple[MemberRow, ...]
    partitions: tuple[PartitionLagRow, ...]
    lag: LagPoint
    history: tuple[tuple[float, LagPoint], ...]


def groups_view(access: ClusterAccess, sampler: LagSampler) -> tuple[GroupRow, ...]:
    """Every group the console may describe, by name. Raises RillError (unreachable ...) as ListGroups does."""
    groups = access.admin_call(lambda admin: admin.list_groups()).groups_info
    return tuple(GroupRow(g.group_name, g.state, g.generation, len(g.group_members), tuple(sorted(g.topics)),
                          g.controller_broker.broker_id, sampler.latest_lag(g.group_name))
                 for g in sorted(groups, key=lambda g: g.group_name) if not g.error_code)


def group_view(access: ClusterAccess, sampler: LagSampler, group: str) -> GroupView:
    """The group's page, described by its coordinator.

    Raises:
        NotFound: no such group. GroupAuthorizationFailed: the ACLs refuse it. RillError: a call failed.
    """
    def describe(admin: AdminClient, info: pb.GroupInfo) -> apb.DescribeGroupResponse:
        return admin.describe_group(group)

    d = access.group_call(group, describe)
    if d.error_code == pb.GROUP_NOT_FOUND:
        raise NotFound(f"group {group!r} does not exist")
    if d.error_code:
        raise RillError(f"group {group!r}: {error_name(d.error_code)}")
    members = tuple(MemberRow(m.consumer_id, m.client_id, tuple((a.topic, a.partition) for a in m.assignment),
                              assignment_text([(a.topic, a.partition) for a in m.assignment]), m.last_heartbeat_ms)
                    for m in sorted(d.members, key=lambda m: m.consumer_id))
    partitions = tuple(PartitionLagRow(p.topic, p.partition, p.committed_offset, p.end_offset, p.lag_bytes,
                                       p.lag_seconds, p.owner)
                       for p in sorted(d.partitions, key=lambda p: (p.topic, p.partition)))
    topics = tuple(sorted({*d.topics, *(p.topic for p in partitions)}))
    c = d.coordinator
    return GroupView(group, d.state, d.generation, d.assignment_strategy, d.ephemeral, d.session_timeout,
                     c.broker_id, f"{c.host}:{c.port}", topics, members, partitions, lag_totals(d.partitions),
                     tuple(sampler.lag_history(group)))
