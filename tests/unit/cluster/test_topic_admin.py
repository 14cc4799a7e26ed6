"""Topic deletion and partition growth without ZooKeeper: the placement of new partitions, the checks, the
deletion roles, and the Admin answers' codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rill.broker.cluster.controller_context import ControllerContext, TopicDeletion
from rill.broker.cluster.create_partitions import create_partitions
from rill.broker.cluster.delete_topic import delete_topic
from rill.broker.cluster.partition_growth import Growth, GrowthResult, growth_problem, new_partitions
from rill.broker.cluster.partition_states import ControllerEpoch
from rill.broker.cluster.reassignment import begin
from rill.broker.cluster.replica_control_servicer import NotController
from rill.broker.cluster.topic_deletion import deletion_roles
from rill.broker.log.manager import LogManager
from rill.client.replica_spread import spread_replicas
from rill.client.zookeeper.replica_layout import LEADER_DURING_DELETE, PartitionState, TopicReplicas
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

BROKERS = [0, 1, 2, 3, 4]
# Kafka's AdminTest.testReplicaAssignment (start 0, shift 0), as replica_assignment.py documents it
KAFKA_TEN = [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1), (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]


def context(topic: TopicReplicas | None = None, *, live: tuple[int, ...] = (0, 1, 2, 3, 4)) -> ControllerContext:
    ctx = ControllerContext(ControllerEpoch(1, 0), live={b: None for b in live})  # type: ignore[misc]
    if topic is not None:
        ctx.add_topic("t", topic, {p: (PartitionState(r[0], 2, r, 1), 0) for p, r in enumerate(topic.replicas)})
    return ctx


def test_partitions_added_continue_the_numbering_of_kafkas_rule() -> None:
    """Growing Kafka's first five partitions to ten gives its last five: the shift goes up at partition 5 as if
    all ten were created at once (Kafka's startPartitionId), and the start is partition 0's leader."""
    assert spread_replicas(BROKERS, 10, 3, 0, 0) == KAFKA_TEN
    assert spread_replicas(BROKERS, 5, 3, 0, 0, first_partition=5) == KAFKA_TEN[5:]
    assert new_partitions(TopicReplicas(tuple(KAFKA_TEN[:5])), 10, BROKERS) == KAFKA_TEN[5:]
    started_at_2 = TopicReplicas(tuple(spread_replicas(BROKERS, 3, 2, 2, 2)))
    added = new_partitions(started_at_2, 6, BROKERS)
    assert [r[0] for r in added] == [0, 1, 2]  # leaders go on round the brokers: 2, 3, 4, then 0, 1, 2
    assert all(len(set(r)) == 2 for r in added)


def test_growth_is_refused_unless_a_held_topic_gets_more_partitions_on_enough_brokers() -> None:
    """Fewer or the same count, over the limit, a factor above the live brokers, a move under way, an unknown,
    0.7-style or deleting topic: each is refused with its own outcome."""
    topic = TopicReplicas(((0, 1, 2), (1, 2, 3)))
    ctx = context(topic)
    assert growth_problem(ctx, "t", 3, BROKERS) is None
    outcomes = {
        "shrink": growth_problem(ctx, "t", 1, BROKERS),
        "same": growth_problem(ctx, "t", 2, BROKERS),
        "limit": growth_problem(ctx, "t", 3001, BROKERS),
        "factor": growth_problem(ctx, "t", 3, [0, 1]),
        "unknown": growth_problem(ctx, "u", 3, BROKERS),
    }
    assert {k: v.outcome for k, v in outcomes.items() if v is not None} == {
        "shrink": Growth.INVALID_PARTITIONS, "same": Growth.INVALID_PARTITIONS, "limit": Growth.INVALID_PARTITIONS,
        "factor": Growth.INVALID_FACTOR, "unknown": Growth.UNKNOWN_TOPIC}
    assert "cannot shrink" in outcomes["shrink"].detail  # type: ignore[union-attr]
    moving = context(begin(topic, {0: (4, 1, 2)}))
    assert growth_problem(moving, "t", 3, BROKERS).outcome is Growth.REASSIGNING  # type: ignore[union-attr]
    ctx.skipped.add("legacy")
    assert growth_problem(ctx, "legacy", 3, BROKERS).outcome is Growth.NOT_REPLICATED  # type: ignore[union-attr]
    ctx.deleting["gone"] = TopicDeletion(topic, {}, set())
    assert "being deleted" in growth_problem(ctx, "gone", 3, BROKERS).detail  # type: ignore[union-attr]


def test_deletion_roles_name_every_partition_with_no_replicas_in_the_next_epoch() -> None:
    deletion = TopicDeletion(TopicReplicas(((0, 1), (1, 0), (0, 1))), {0: 4, 1: 0}, {0, 1})
    roles = deletion_roles("t", deletion)
    assert [(r.partition, r.leader, r.leader_epoch, r.replicas, r.isr) for r in roles] == [
        (0, LEADER_DURING_DELETE, 5, (), ()), (1, LEADER_DURING_DELETE, 1, (), ()),
        (2, LEADER_DURING_DELETE, 1, (), ())]


class Grower:
    def __init__(self, result: GrowthResult | Exception) -> None:
        self.result = result

    def create_partitions(self, topic: str, count: int, *, timeout_s: float = 30.0) -> GrowthResult:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.mark.parametrize(("result", "code"), [
    (GrowthResult(Growth.ADDED, "", 2, ((1, 2), (2, 1))), pb.NONE),
    (GrowthResult(Growth.REASSIGNING, "moving"), pb.REASSIGNMENT_IN_PROGRESS),
    (GrowthResult(Growth.NOT_REPLICATED, "0.7"), pb.INVALID_REQUEST),
    (NotController("no", 3), pb.NOT_CONTROLLER),
    (TimeoutError("slow"), pb.REQUEST_TIMED_OUT),
])
def test_create_partitions_answers(result: GrowthResult | Exception, code: int) -> None:
    """The controller's outcome becomes an ErrorCode; the new partitions are listed with their replicas."""
    response = create_partitions(apb.CreatePartitionsRequest(topic="t", count=4), Grower(result), None)
    assert response.error_code == code
    if code == pb.NONE:
        assert [(p.partition, list(p.replicas)) for p in response.partitions] == [(2, [1, 2]), (3, [2, 1])]
    if code == pb.NOT_CONTROLLER:
        assert response.controller.broker_id == 3


def test_delete_topic_refusals_before_anything_is_touched(tmp_path: Path) -> None:
    """Illegal and internal names, and deletion disabled, are refused whatever the topic; without ZooKeeper an
    unknown topic is UNKNOWN_TOPIC_OR_PARTITION."""
    logs = LogManager(str(tmp_path / "d"))
    try:
        codes = [delete_topic(apb.DeleteTopicRequest(topic=t), logs, None, enabled=e).error_code
                 for t, e in (("bad/name", True), ("__rill_groups", True), ("__rill_other", True), ("t", False),
                              ("t", True))]
    finally:
        logs.close()
    assert codes == [pb.INVALID_TOPIC, pb.INVALID_TOPIC, pb.INVALID_TOPIC, pb.TOPIC_DELETION_DISABLED,
                     pb.UNKNOWN_TOPIC_OR_PARTITION]
