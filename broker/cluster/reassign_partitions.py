"""Admin AlterPartitionReassignments, ListPartitionReassignments and AlterReplicationThrottle, as a broker answers.

Only the controller moves partitions. The broker asked hands each request to its own
controller role (a :class:`Reassigner`: the ``Controller``'s reassignment methods,
controller_reassignments.py); when it is not the controller the answer is
NOT_CONTROLLER naming the controller (as ElectLeaders, elect_leaders.py says why), and
rill's AdminClient asks there. A broker without ZooKeeper has no replicated topics:
every partition named is UNKNOWN_TOPIC_OR_PARTITION, the list is empty, and a
throttle is refused.

Per partition, reassignment.py's :class:`~rill.broker.cluster.reassignment.Outcome`
becomes an ErrorCode (:data:`OUTCOME_CODES`). The functions never raise: failures are codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import structlog
from kazoo.exceptions import KazooException

from rill.broker.cluster.controller_reassignments import Ongoing
from rill.broker.cluster.controller_refusal import refusal
from rill.broker.cluster.elect_leaders import DEFAULT_TIMEOUT_MS
from rill.broker.cluster.reassignment import Outcome, ReassignmentResult
from rill.broker.cluster.reassignment_steps import Asked
from rill.broker.cluster.replica_control_servicer import NotController
from rill.client.zookeeper.registry import RegistryView
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

__all__ = ["OUTCOME_CODES", "Reassigner", "alter_reassignments", "alter_throttle", "list_reassignments"]

log = structlog.get_logger(__name__)

OUTCOME_CODES: dict[Outcome, pb.ErrorCode] = {
    Outcome.STARTED: pb.NONE,
    Outcome.NOTHING_TO_DO: pb.NONE,
    Outcome.UNKNOWN_PARTITION: pb.UNKNOWN_TOPIC_OR_PARTITION,
    Outcome.INVALID_FACTOR: pb.INVALID_REPLICATION_FACTOR,
    Outcome.INVALID: pb.INVALID_REQUEST,
    Outcome.FAILED: pb.UNKNOWN,
}

STANDALONE = "this broker is not in a cluster (no zookeeper.connect): it has no replicated topics"


class Reassigner(Protocol):
    """The controller's side of the three RPCs (controller_reassignments.ControllerReassignments)."""

    def alter_reassignments(self, asked: Asked, *, timeout_s: float = 30.0) -> list[ReassignmentResult]: ...

    def list_reassignments(self, topics: Sequence[str] = (), *,
                           timeout_s: float = 30.0) -> tuple[list[Ongoing], int]: ...

    def alter_throttle(self, bytes_per_second: int, *, timeout_s: float = 30.0) -> int: ...


def alter_reassignments(request: apb.AlterPartitionReassignmentsRequest, reassigner: Reassigner | None,
                        registry: RegistryView | None) -> apb.AlterPartitionReassignmentsResponse:
    """Start the moves asked (one result per partition, in (topic, partition) order)."""
    Response = apb.AlterPartitionReassignmentsResponse
    if not request.reassignments:
        return Response(error_code=pb.INVALID_REQUEST, error_message="no reassignments given")
    asked = [(r.topic, r.partition, tuple(r.replicas)) for r in request.reassignments]
    if reassigner is None:
        return Response(results=[_result(ReassignmentResult(t, p, Outcome.UNKNOWN_PARTITION, STANDALONE))
                                 for t, p, _ in sorted(set(asked))])
    timeout_ms = request.timeout_ms if request.timeout_ms > 0 else DEFAULT_TIMEOUT_MS
    try:
        results = reassigner.alter_reassignments(asked, timeout_s=timeout_ms / 1000)
    except (NotController, TimeoutError) as exc:
        return refusal(Response, registry, exc)
    except KazooException as exc:
        log.warning("admin.reassignment_failed", error=repr(exc))
        return Response(error_code=pb.UNKNOWN, error_message=(
            f"ZooKeeper failed while starting the reassignment ({exc!r}): some may have started; list them"))
    return Response(results=[_result(r) for r in results])


def list_reassignments(request: apb.ListPartitionReassignmentsRequest, reassigner: Reassigner | None,
                       registry: RegistryView | None) -> apb.ListPartitionReassignmentsResponse:
    """The moves under way and the throttle."""
    Response = apb.ListPartitionReassignmentsResponse
    if reassigner is None:
        return Response()
    try:
        ongoing, throttle = reassigner.list_reassignments(list(request.topics), timeout_s=DEFAULT_TIMEOUT_MS / 1000)
    except (NotController, TimeoutError) as exc:
        return refusal(Response, registry, exc)
    return Response(throttle_bytes_per_second=throttle, reassignments=[
        apb.OngoingReassignment(topic=o.topic, partition=o.partition, replicas=o.replicas, adding_replicas=o.adding,
                                removing_replicas=o.removing, isr=o.isr, leader=o.leader) for o in ongoing])


def alter_throttle(request: apb.AlterReplicationThrottleRequest, reassigner: Reassigner | None,
                   registry: RegistryView | None) -> apb.AlterReplicationThrottleResponse:
    """Set or remove the replication throttle."""
    Response = apb.AlterReplicationThrottleResponse
    if request.bytes_per_second < 0:
        return Response(error_code=pb.INVALID_REQUEST,
                        error_message=f"the throttle must not be negative, not {request.bytes_per_second}")
    if reassigner is None:
        return Response(error_code=pb.INVALID_REQUEST, error_message=STANDALONE)
    try:
        previous = reassigner.alter_throttle(request.bytes_per_second, timeout_s=DEFAULT_TIMEOUT_MS / 1000)
    except (NotController, TimeoutError) as exc:
        return refusal(Response, registry, exc)
    except KazooException as exc:
        log.warning("admin.throttle_failed", error=repr(exc))
        return Response(error_code=pb.UNKNOWN, error_message=f"ZooKeeper failed ({exc!r}): the throttle may be set")
    return Response(previous=previous)


def _result(result: ReassignmentResult) -> apb.ReassignmentResult:
    return apb.ReassignmentResult(topic=result.topic, partition=result.partition,
                                  error_code=OUTCOME_CODES[result.outcome], error_message=result.detail)
