"""Admin ElectLeaders (Kafka's KIP-460 with election type PREFERRED), as a broker answers it.

Only the controller elects. The broker asked hands the request to its own controller
role (a :class:`PreferredElector`: ``Controller.elect_preferred_leaders``). When that
broker is not the controller, the answer is NOT_CONTROLLER naming the controller (id,
host, data and gRPC ports from the registry; broker_id -1 while none is known, during
a controller election) and the client asks it there; rill's AdminClient does so by
itself. This is what Kafka's brokers answer a controller-only request sent elsewhere;
forwarding on the broker would nest one call's deadline in another's and hide which
broker did the work.

Per partition, the controller's :class:`~rill.broker.cluster.preferred_election.Outcome`
becomes an ErrorCode (:data:`OUTCOME_CODES`). A broker without ZooKeeper has no
replicated topics: every partition named is UNKNOWN_TOPIC_OR_PARTITION, and "all" is none.

Thread-safety: :func:`elect_leaders` runs on any gRPC worker thread (the elector posts
to the controller's thread and waits).
"""

from __future__ import annotations

from typing import Protocol

import structlog
from kazoo.exceptions import KazooException

from rill.broker.cluster.controller_refusal import refusal
from rill.broker.cluster.preferred_election import ElectionResult, Outcome, Requested
from rill.broker.cluster.replica_control_servicer import NotController
from rill.client.zookeeper.registry import RegistryView
from rill.client.zookeeper.replica_layout import NO_LEADER
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

__all__ = ["DEFAULT_TIMEOUT_MS", "OUTCOME_CODES", "PreferredElector", "elect_leaders", "requested_partitions"]

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT_MS = 30_000

OUTCOME_CODES: dict[Outcome, pb.ErrorCode] = {
    Outcome.ELECTED: pb.NONE,
    Outcome.ALREADY_PREFERRED: pb.ELECTION_NOT_NEEDED,
    Outcome.NOT_AVAILABLE: pb.PREFERRED_LEADER_NOT_AVAILABLE,
    Outcome.UNKNOWN_PARTITION: pb.UNKNOWN_TOPIC_OR_PARTITION,
    Outcome.FAILED: pb.UNKNOWN,
}


class PreferredElector(Protocol):
    """The controller's side of ElectLeaders."""

    def elect_preferred_leaders(self, partitions: Requested, *, timeout_s: float = 30.0) -> list[ElectionResult]:
        """One result per partition asked. Raises NotController, TimeoutError (and ZooKeeper's errors)."""
        ...


def requested_partitions(request: apb.ElectLeadersRequest) -> Requested | str:
    """The partitions ``request`` asks for (None: all); a str saying what is wrong with it otherwise."""
    if request.all_topics:
        return None
    if not request.topic_partitions:
        return "name the partitions (topic_partitions) or ask for all of them (all_topics)"
    asked: list[tuple[str, int | None]] = []
    for entry in request.topic_partitions:
        if not entry.topic:
            return "a topic_partitions entry has no topic"
        asked.extend([(entry.topic, p) for p in entry.partitions] if entry.partitions else [(entry.topic, None)])
    return asked


def elect_leaders(request: apb.ElectLeadersRequest, elector: PreferredElector | None,
                  registry: RegistryView | None) -> apb.ElectLeadersResponse:
    """The response to ``request`` (see the module docstring). Never raises: failures are error codes."""
    requested = requested_partitions(request)
    if isinstance(requested, str):
        return apb.ElectLeadersResponse(error_code=pb.INVALID_REQUEST, error_message=requested)
    if elector is None:
        return apb.ElectLeadersResponse(results=[_result(r) for r in _standalone(requested)])
    timeout_ms = request.timeout_ms if request.timeout_ms > 0 else DEFAULT_TIMEOUT_MS
    try:
        results = elector.elect_preferred_leaders(requested, timeout_s=timeout_ms / 1000)
    except (NotController, TimeoutError) as exc:
        return refusal(apb.ElectLeadersResponse, registry, exc)
    except KazooException as exc:
        log.warning("admin.elect_leaders_failed", error=repr(exc))
        return apb.ElectLeadersResponse(error_code=pb.UNKNOWN, error_message=(
            f"ZooKeeper failed during the election ({exc!r}): some leaders may have moved; describe the topics"))
    return apb.ElectLeadersResponse(results=[_result(r) for r in results])


def _result(result: ElectionResult) -> apb.PartitionElectionResult:
    return apb.PartitionElectionResult(topic=result.topic, partition=result.partition,
                                       error_code=OUTCOME_CODES[result.outcome], error_message=result.detail,
                                       leader=result.leader)


def _standalone(requested: Requested) -> list[ElectionResult]:
    """Every partition named is unknown to a broker outside a cluster."""
    detail = "this broker is not in a cluster (no zookeeper.connect): it has no replicated topics"
    return [ElectionResult(topic, -1 if p is None else p, Outcome.UNKNOWN_PARTITION, NO_LEADER, detail)
            for topic, p in sorted(set(requested or ()), key=lambda tp: (tp[0], -1 if tp[1] is None else tp[1]))]
