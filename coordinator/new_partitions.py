"""Partitions that appeared after a group subscribed: they start at their beginning (seed 003).

Seed 003, "When new partitions are added to existing topics or new topics are created":
the coordinator answers the new partitions "with the respective offsets to restart
consumption from. For newly added partitions and topics, the offset is set to smallest
(0L)". So a topic created after a consumer subscribed to it (by name or by pattern), or
a partition added to a subscribed topic, is read from its first message whatever the
consumers' ``auto.offset.reset`` says; with ``latest`` its first messages would
otherwise be skipped.

Why the coordinator decides, not the consumer. A consumer could notice that a topic
appeared after its own subscription began, but the partition may be assigned to another
member, one that joined after the topic appeared and cannot know; and the member that
gets it first may hand it over (a rebalance, a crash) before committing anything. The
coordinator sees every member and every generation, and it makes the decision durable:
when it first assigns a new partition that has no committed offset, the completion of
the rebalance commits offset 0 for it (an OffsetsCommitted record persisted with the
GenerationStarted), so that member and every later owner, after restarts too, start at
0. (0 is where every partition's log begins; if retention deleted it by the time a
consumer reads, OffsetOutOfRange applies ``auto.offset.reset`` as for any committed
offset that left the log.)

What counts as new: a partition, with no committed offset, that did not exist when the
group's previous generation was computed, provided that generation had members (the
group was subscribed then). The coordinator keeps, as live state, the partition counts
of every topic at that moment (``Group.topics_seen``). Consequences:

- a topic created after ``add_topic(topic)``, a partition added to a subscribed topic,
  a topic matching a member's pattern: new (members with a pattern register even while
  it matches nothing, so the group has a generation to compare with);
- the first generation of a group, or of a group that had become empty: nothing is new
  (``auto.offset.reset`` applies, as in Kafka);
- a member adding by name a topic that already existed before but was created after the
  group's last rebalance: new as well (the coordinator cannot tell it from a topic a
  pattern matched later); it is read from its beginning;
- after the coordinator restarts or a group moves to another broker, the first
  generation compares with the last assignment it loaded instead: partitions added to
  topics the group was assigned are new, topics it never had are not.
"""

from __future__ import annotations

from collections.abc import Mapping

from rill.client.structs import TopicPartition
from rill.coordinator.group_state import Group

START_OFFSET = 0  # seed 003's "smallest (0L)": where every partition's log begins

Assignment = Mapping[str, tuple[TopicPartition, ...]]


def seen_partitions(assignment: Assignment) -> dict[str, int]:
    """Partition counts the assignment covered (every partition of a subscribed topic is assigned)."""
    seen: dict[str, int] = {}
    for tps in assignment.values():
        for topic, partition in tps:
            seen[topic] = max(seen.get(topic, 0), partition + 1)
    return seen


def new_partitions(group: Group, assignment: Assignment) -> list[TopicPartition]:
    """The partitions of ``assignment`` (the generation being completed) that start at START_OFFSET: no
    committed offset, and absent from the group's previous generation (see the module docstring). Sorted."""
    if group.topics_seen is not None:
        seen = group.topics_seen

        def is_new(tp: TopicPartition) -> bool:
            return tp.partition >= seen.get(tp.topic, 0)
    else:  # the previous generation had no members (nothing is new), or was loaded from the log
        covered = seen_partitions(group.assignment)

        def is_new(tp: TopicPartition) -> bool:
            return tp.topic in covered and tp.partition >= covered[tp.topic]
    return sorted(tp for tps in assignment.values() for tp in tps if tp not in group.offsets and is_new(tp))
