"""Partition reassignment without ZooKeeper: the topic node's layout, the checks of a request, and the two steps."""

from __future__ import annotations

import pytest

from rill.broker.cluster.reassign_partitions import alter_reassignments, alter_throttle, list_reassignments
from rill.broker.cluster.reassignment import (Outcome, ReassignmentResult, begin, decide_completion, decide_start,
                                              finish, ready_to_complete, target_problem)
from rill.broker.cluster.replica_control_servicer import NotController
from rill.client.zookeeper.replica_layout import (NO_LEADER, PartitionState, TopicReplicas, decode_throttle,
                                                  encode_throttle)
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

TOPIC = TopicReplicas(((1, 2, 3), (2, 3, 1)), {"min.insync.replicas": "2"})


def state(leader: int, isr: tuple[int, ...], epoch: int = 4) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1)


def test_moving_topic_node_is_kafkas_version_3_layout() -> None:
    """Starting {1,2,3} -> {2,3,4} lists the target then the replica leaving, with adding and removing, as version 3;
    finishing writes the target alone as version 2 again, the config kept throughout."""
    moving = begin(TOPIC, {0: (2, 3, 4)})
    assert moving.replicas[0] == (2, 3, 4, 1) and moving.replicas[1] == (2, 3, 1)
    assert (dict(moving.adding), dict(moving.removing)) == ({0: (4,)}, {0: (1,)})
    assert moving.target(0) == (2, 3, 4) and moving.replication_factor == 3 and moving.reassigning() == [0]
    assert moving.encode() == (b'{"version":3,"replicas":[[2,3,4,1],[2,3,1]],"adding_replicas":{"0":[4]},'
                               b'"removing_replicas":{"0":[1]},"config":{"min.insync.replicas":"2"}}')
    assert TopicReplicas.decode(moving.encode()) == moving
    done = finish(moving, [0])
    assert done == TopicReplicas(((2, 3, 4), (2, 3, 1)), {"min.insync.replicas": "2"})
    assert done.encode().startswith(b'{"version":2,')


@pytest.mark.parametrize(("data", "message"), [
    (b'{"version":2,"replicas":[[1,2]],"adding_replicas":{},"removing_replicas":{}}', "unknown fields"),
    (b'{"version":3,"replicas":[[1,2]]}', "missing fields"),
    (b'{"version":3,"replicas":[[1,2,3]],"adding_replicas":{"0":[3]},"removing_replicas":{}}', "without removing"),
    (b'{"version":3,"replicas":[[1,2,3]],"adding_replicas":{"0":[3]},"removing_replicas":{"0":[3]}}', "disjoint"),
    (b'{"version":3,"replicas":[[1,2,3]],"adding_replicas":{"0":[4]},"removing_replicas":{"0":[1]}}', "among"),
    (b'{"version":3,"replicas":[[1,2,3]],"adding_replicas":{"x":[3]},"removing_replicas":{"x":[1]}}',
     "not a partition number"),
    (b'{"version":3,"replicas":[[1,2,3]],"adding_replicas":{"1":[3]},"removing_replicas":{"1":[1]}}',
     "not one of the 1 partitions"),
    (b'{"version":3,"replicas":[[1,2,3],[1,2,3]],"adding_replicas":{"0":[3]},"removing_replicas":{"0":[1]}}',
     "same replication factor"),
])
def test_malformed_moving_topic_nodes_are_refused(data: bytes, message: str) -> None:
    """A version-3 node must list adding and removing replicas for the same partitions, disjoint, among the replicas."""
    with pytest.raises(ValueError, match=message):
        TopicReplicas.decode(data)


def test_throttle_node_round_trip() -> None:
    assert decode_throttle(encode_throttle(500_000)) == 500_000
    with pytest.raises(ValueError):
        encode_throttle(-1)
    with pytest.raises(ValueError):
        decode_throttle(b'{"version":1,"bytes_per_second":"5"}')


def test_a_request_is_checked_as_kafka_checks_it() -> None:
    """Unknown partitions, repeated or dead brokers and another factor are refused; the same target is nothing to do."""
    live = {1, 2, 3, 4}
    assert target_problem(TOPIC, 0, (2, 3, 4), live) is None
    assert target_problem(None, 0, (2, 3, 4), live)[0] is Outcome.UNKNOWN_PARTITION  # type: ignore[index]
    assert target_problem(TOPIC, 2, (2, 3, 4), live)[0] is Outcome.UNKNOWN_PARTITION  # type: ignore[index]
    assert target_problem(TOPIC, 0, (2, 2, 4), live)[0] is Outcome.INVALID  # type: ignore[index]
    assert target_problem(TOPIC, 0, (2, 3, 5), live) == (Outcome.INVALID, "brokers [5] are not live")
    assert target_problem(TOPIC, 0, (2, 3), live)[0] is Outcome.INVALID_FACTOR  # type: ignore[index]
    assert target_problem(TOPIC, 0, (1, 2, 3), live)[0] is Outcome.NOTHING_TO_DO  # type: ignore[index]
    moving = begin(TOPIC, {0: (2, 3, 4)})
    assert target_problem(moving, 0, (2, 3, 4), live)[0] is Outcome.NOTHING_TO_DO  # type: ignore[index]
    assert target_problem(moving, 0, (3, 4, 1), live)[0] is Outcome.INVALID  # type: ignore[index]


def test_a_reorder_moves_no_data() -> None:
    """The same brokers in another order are written at once: no adding or removing replicas."""
    reordered = begin(TOPIC, {0: (3, 1, 2)})
    assert reordered.replicas[0] == (3, 1, 2) and not reordered.adding and reordered.reassigning() == []


def test_start_bumps_the_epoch_and_keeps_leader_and_isr() -> None:
    assert decide_start(state(1, (1, 2, 3)), controller_epoch=7) == PartitionState(1, 5, (1, 2, 3), 7)


def test_completion_waits_for_every_target_replica_in_the_isr() -> None:
    target = (2, 3, 4)
    assert not ready_to_complete(state(1, (1, 2, 3)), target)
    assert decide_completion(state(1, (1, 2, 3)), target, {1, 2, 3, 4}, controller_epoch=7) is None
    assert ready_to_complete(state(1, (1, 2, 3, 4)), target)


def test_completion_elects_from_the_target_when_the_leader_leaves() -> None:
    """Leader 1 is leaving: the first target replica that is a candidate and in sync leads; the ISR loses 1."""
    assert decide_completion(state(1, (1, 2, 3, 4)), (2, 3, 4), {1, 2, 3, 4}, controller_epoch=7) == PartitionState(
        2, 5, (2, 3, 4), 7)
    assert decide_completion(state(1, (1, 2, 3, 4)), (2, 3, 4), {1, 3, 4}, controller_epoch=7) == PartitionState(
        3, 5, (2, 3, 4), 7)  # 2 is not a candidate (dead or shutting down)
    assert decide_completion(state(1, (1, 2, 3, 4)), (2, 3, 4), {1}, controller_epoch=7) is None  # wait


def test_completion_keeps_a_staying_leader() -> None:
    """Leader 3 stays: it keeps leading in the next epoch with the ISR of the target."""
    assert decide_completion(state(3, (3, 1, 2, 4)), (2, 3, 4), {1, 2, 3, 4}, controller_epoch=7) == PartitionState(
        3, 5, (3, 2, 4), 7)


class FakeReassigner:
    """The controller's side, answering from fixed values (or raising)."""

    def __init__(self, raises: Exception | None = None) -> None:
        self.raises = raises
        self.asked: list[object] = []

    def alter_reassignments(self, asked, *, timeout_s=30.0):  # type: ignore[no-untyped-def]
        if self.raises:
            raise self.raises
        self.asked.append((list(asked), timeout_s))
        return [ReassignmentResult("t", 0, Outcome.STARTED), ReassignmentResult("t", 1, Outcome.INVALID, "dead")]

    def list_reassignments(self, topics=(), *, timeout_s=30.0):  # type: ignore[no-untyped-def]
        if self.raises:
            raise self.raises
        return [], 500

    def alter_throttle(self, bytes_per_second, *, timeout_s=30.0):  # type: ignore[no-untyped-def]
        if self.raises:
            raise self.raises
        return 7


def test_admin_answers_map_outcomes_to_codes_and_redirect_to_the_controller() -> None:
    """Results become ErrorCodes; a broker that is not the controller answers NOT_CONTROLLER with its id."""
    request = apb.AlterPartitionReassignmentsRequest(reassignments=[
        apb.PartitionReassignment(topic="t", partition=0, replicas=[2, 3, 4]),
        apb.PartitionReassignment(topic="t", partition=1, replicas=[2, 3, 9])])
    answer = alter_reassignments(request, FakeReassigner(), None)  # type: ignore[arg-type]
    assert [(r.partition, r.error_code) for r in answer.results] == [(0, pb.NONE), (1, pb.INVALID_REQUEST)]
    moved = alter_reassignments(request, FakeReassigner(NotController("no", 3)), None)  # type: ignore[arg-type]
    assert (moved.error_code, moved.controller.broker_id) == (pb.NOT_CONTROLLER, 3)
    alone = alter_reassignments(request, None, None)
    assert {r.error_code for r in alone.results} == {pb.UNKNOWN_TOPIC_OR_PARTITION}
    assert alter_reassignments(apb.AlterPartitionReassignmentsRequest(), None, None).error_code == pb.INVALID_REQUEST
    listed = list_reassignments(apb.ListPartitionReassignmentsRequest(), FakeReassigner(), None)  # type: ignore[arg-type]
    assert listed.throttle_bytes_per_second == 500 and not listed.reassignments
    throttle = alter_throttle(apb.AlterReplicationThrottleRequest(bytes_per_second=5), FakeReassigner(), None)  # type: ignore[arg-type]
    assert (throttle.error_code, throttle.previous) == (pb.NONE, 7)
    negative = alter_throttle(apb.AlterReplicationThrottleRequest(bytes_per_second=-1), FakeReassigner(), None)  # type: ignore[arg-type]
    assert negative.error_code == pb.INVALID_REQUEST
    late = alter_throttle(apb.AlterReplicationThrottleRequest(bytes_per_second=5), FakeReassigner(TimeoutError("x")),  # type: ignore[arg-type]
                          None)
    assert late.error_code == pb.REQUEST_TIMED_OUT


def test_leaderless_state_is_not_elected_by_completion() -> None:
    assert decide_completion(state(NO_LEADER, (2, 3, 4)), (2, 3, 4), set(), controller_epoch=7) is None
