"""Completing a rebalance: the new assignment, its records, and the join responses.

Pure functions of a group and the topics' partition counts; :mod:`rill.coordinator.membership_protocol`
decides when a rebalance completes, the coordinator's replay applies the records.

- The assignment uses the group's strategy over the live members: each member's
  subscription (its own topics; the group's when it gave neither topics nor
  static partitions), the partition counts of the topics that exist now, the
  previous generation's assignment (for ``sticky``) and the static claims.
- The records: GenerationStarted with generation + 1 and the assignment; when no
  member is left, GroupDeleted for an ephemeral group, else GenerationStarted with
  an empty assignment (the group goes EMPTY; the generation still moves on, so a
  departed member's generation never becomes valid again).
- Partitions that appeared since the previous generation (rill.coordinator.new_partitions)
  and have no committed offset get one: an OffsetsCommitted record of offset 0, before
  the GenerationStarted, as seed 003 says ("set to smallest").
- A member's RegisterConsumerResponse carries, for each partition it owns, the
  committed offset or -1 when none is committed (the consumer then applies its
  ``auto.offset.reset``).
"""

from __future__ import annotations

from collections.abc import Mapping

from rill.coordinator.assignors import get_assignor
from rill.client.structs import TopicPartition
from rill.coordinator.group_state import Group, Member
from rill.coordinator.new_partitions import START_OFFSET, new_partitions, seen_partitions
from rill.coordinator.records import GenerationStarted, GroupDeleted, OffsetsCommitted, Record
from rill.v1 import coordinator_pb2 as pb

AssignmentMap = dict[str, tuple[TopicPartition, ...]]


def compute_assignment(group: Group, topics: Mapping[str, int]) -> AssignmentMap:
    """The group's new assignment over its live members (every member has an entry)."""
    assignor = get_assignor(group.strategy)
    subscriptions = group.subscriptions()
    static = group.static_claims()
    wanted = {t for subscribed in subscriptions.values() for t in subscribed} | {t for t, _ in static}
    partitions = {t: n for t, n in topics.items() if t in wanted}
    previous = {mid: group.owned(mid) for mid in group.members}
    result = assignor(subscriptions, partitions, previous, static)
    return {mid: tuple(result.get(mid, ())) for mid in group.members}


def completion_records(group: Group, topics: Mapping[str, int]) -> list[Record]:
    """The records that complete the group's rebalance now, over ``topics`` (the catalog's counts)."""
    if not group.members and group.ephemeral:
        return [GroupDeleted(group.name)]
    assignment = compute_assignment(group, topics) if group.members else {}
    records: list[Record] = []
    starts = new_partitions(group, assignment)
    if starts:
        records.append(OffsetsCommitted(group.name, tuple((t, p, START_OFFSET) for t, p in starts)))
    records.append(GenerationStarted(group.name, group.generation + 1, assignment))
    return records


def join_response(group: Group, member: Member) -> pb.RegisterConsumerResponse:
    """The member's answer in the group's current generation: partitions and offsets."""
    return pb.RegisterConsumerResponse(
        client_id=member.client_id, consumer_group=group.name, consumer_id=member.consumer_id,
        generation=group.generation, session_timeout=member.session_timeout_ms, error_code=pb.NONE,
        partitions_to_own=[pb.PartitionOffset(topic=t, partition=p, offset=group.committed(TopicPartition(t, p)))
                           for t, p in group.owned(member.consumer_id)])


def join_error(group: str, client_id: str, consumer_id: str, code: pb.ErrorCode) -> pb.RegisterConsumerResponse:
    """A RegisterConsumerResponse that carries only an error."""
    return pb.RegisterConsumerResponse(client_id=client_id, consumer_group=group, consumer_id=consumer_id,
                                       error_code=code)


def topics_grew(group: Group, topics: Mapping[str, int]) -> bool:
    """Does a topic some member subscribes to have more partitions than the last assignment saw?"""
    seen = seen_partitions(group.assignment)
    return any(topics.get(t, 0) > seen.get(t, 0) for t in group.subscribed_topics())
