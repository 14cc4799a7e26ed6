"""Admin CreatePartitions, as a broker answers it: handed to its controller role (partition_growth.py).

Only the controller adds partitions; another broker answers NOT_CONTROLLER naming it (as
for ElectLeaders, elect_leaders.py says why) and rill's AdminClient asks there. Internal
topics (``__rill...``) are refused with INVALID_TOPIC; a broker without ZooKeeper has
no replicated topics (INVALID_REQUEST). The controller's
:class:`~rill.broker.cluster.partition_growth.Growth` becomes an ErrorCode
(:data:`GROWTH_CODES`). :func:`create_partitions` never raises: failures are codes.
"""

from __future__ import annotations

from typing import Protocol

import structlog
from kazoo.exceptions import KazooException

from rill.broker.cluster.elect_leaders import DEFAULT_TIMEOUT_MS
from rill.broker.cluster.partition_growth import Growth, GrowthResult
from rill.broker.cluster.controller_refusal import refusal
from rill.broker.cluster.replica_control_servicer import NotController
from rill.client.topic_names import is_internal_topic, is_valid_topic
from rill.client.zookeeper.registry import RegistryView
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

__all__ = ["GROWTH_CODES", "PartitionGrower", "create_partitions"]

log = structlog.get_logger(__name__)

GROWTH_CODES: dict[Growth, pb.ErrorCode] = {
    Growth.ADDED: pb.NONE,
    Growth.INVALID_PARTITIONS: pb.INVALID_PARTITIONS,
    Growth.UNKNOWN_TOPIC: pb.UNKNOWN_TOPIC_OR_PARTITION,
    Growth.NOT_REPLICATED: pb.INVALID_REQUEST,
    Growth.INVALID_FACTOR: pb.INVALID_REPLICATION_FACTOR,
    Growth.REASSIGNING: pb.REASSIGNMENT_IN_PROGRESS,
    Growth.FAILED: pb.UNKNOWN,
}

Response = apb.CreatePartitionsResponse


class PartitionGrower(Protocol):
    """The controller's side (partition_growth.ControllerPartitionGrowth)."""

    def create_partitions(self, topic: str, count: int, *, timeout_s: float = 30.0) -> GrowthResult: ...


def create_partitions(request: apb.CreatePartitionsRequest, grower: PartitionGrower | None,
                      registry: RegistryView | None) -> apb.CreatePartitionsResponse:
    """The answer to ``request`` (module docstring)."""
    topic = request.topic
    if not is_valid_topic(topic) or is_internal_topic(topic):
        what = "is internal to rill (names beginning with '__rill' are reserved)" if is_valid_topic(topic) else \
            "is not a valid topic name"
        return Response(error_code=pb.INVALID_TOPIC, error_message=f"topic {topic!r} {what}")
    if request.count <= 0:
        return Response(error_code=pb.INVALID_PARTITIONS,
                        error_message=f"the partition count must be larger than 0, not {request.count}")
    if grower is None:
        return Response(error_code=pb.INVALID_REQUEST, error_message=(
            "this broker is not in a cluster (no zookeeper.connect): only replicated topics get more partitions"))
    timeout_ms = request.timeout_ms if request.timeout_ms > 0 else DEFAULT_TIMEOUT_MS
    try:
        result = grower.create_partitions(topic, request.count, timeout_s=timeout_ms / 1000)
    except (NotController, TimeoutError) as exc:
        return refusal(Response, registry, exc)
    except KazooException as exc:
        log.warning("admin.create_partitions_failed", topic=topic, error=repr(exc))
        return Response(error_code=pb.UNKNOWN, error_message=(
            f"ZooKeeper failed while adding partitions to {topic} ({exc!r}): describe the topic"))
    return Response(error_code=GROWTH_CODES[result.outcome], error_message=result.detail, partitions=[
        apb.NewPartition(partition=result.first + i, replicas=r) for i, r in enumerate(result.added)])
