"""What each gRPC call needs from the ACLs, and the check that runs before its handler.

:data:`RULES` has one row per method of the GroupCoordinator, Admin and ReplicaControl
services (full names, ``/rill.v1.Admin/DeleteTopic``), after Kafka's "Operations and
Resources on Protocols" (docs/security.md, "What each request needs"). A row is

- ``needs(request)``: the checks the call must pass, read from the request message. Each
  need is a tuple of :class:`Check` of which any one suffices (CreateTopic: Create on the
  Cluster, else Create on the Topic); every need of the list must be met. A refusal
  names the need's last check, the most specific one, as Kafka's CreateTopics answers
  TOPIC_AUTHORIZATION_FAILED;
- ``trim(request, response, may)``: for a listing, the response cut down to what the
  caller may Describe, after the handler ran. A listing is never refused.

A method without a row is refused to everyone, super users and brokers included, and
logged as an error (``grpc.authorization_missing``): a new RPC fails closed until
someone writes down what it needs.

A refusal is a :class:`Refusal`: the ``rill-error`` trailer's value
(TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED by the resource type refused, rill.v1.ErrorCode)
and a message such as ``User:alice may not Delete Group:g1``; rill.coordinator.grpc_auth
answers it with PERMISSION_DENIED.

Audit (the structlog logger ``rill.audit``, as the data plane's in
rill.broker.security.request_acls): ``audit.denied`` for every refusal, and
``audit.allowed`` for every allowed Create, Delete, Alter and AlterConfigs, each with
principal, host, operation, resource (``Group:g1``; an allowed need names its last
check's resource, the one acted on: a topic created with Create on the Cluster is
``Topic:<name>``) and rpc. Allowed reads and describes are not logged: they are the hot
path (a heartbeat every few seconds per consumer). Items a listing leaves out are not
logged either (the authorizer logs its own ``acl.denied`` once per distinct question).

Thread-safe: the table is immutable; :class:`CallAuthorizer` keeps no state of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import structlog

from rill.client.security.acls import CLUSTER_NAME, Operation, ResourceType
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

__all__ = ["AUDITED", "Authorize", "CallAuthorizer", "Check", "Need", "RULES", "Refusal", "Rule", "refusal_code"]

log = structlog.get_logger(__name__)
audit = structlog.get_logger("rill.audit")

Authorize = Callable[[str, str, Operation, ResourceType, str], bool]
"""``authorize(principal, host, operation, resource_type, name)``: BrokerSecurity.authorize."""

May = Callable[[Operation, ResourceType, str], bool]
"""The caller's ``authorize``: principal and host already bound."""

O, R = Operation, ResourceType
AUDITED = frozenset({O.CREATE, O.DELETE, O.ALTER, O.ALTER_CONFIGS})
"""The operations whose allowed calls are audited (``audit.allowed``)."""

_CODES = {R.TOPIC: pb.TOPIC_AUTHORIZATION_FAILED, R.GROUP: pb.GROUP_AUTHORIZATION_FAILED,
          R.CLUSTER: pb.CLUSTER_AUTHORIZATION_FAILED}


def refusal_code(resource_type: ResourceType) -> str:
    """The ``rill-error`` name of a refusal on ``resource_type`` (``GROUP_AUTHORIZATION_FAILED``)."""
    return str(pb.ErrorCode.Name(_CODES[resource_type]))


class Check(NamedTuple):
    """One authorization question: may the caller do ``operation`` to ``resource_type``:``name``?"""

    operation: Operation
    resource_type: ResourceType
    name: str

    @property
    def resource(self) -> str:
        """``Type:name``, as the audit log and refusals write it (``Group:g1``)."""
        return f"{self.resource_type.value}:{self.name}"

    def __str__(self) -> str:
        return f"{self.operation.value} {self.resource}"


Need = tuple[Check, ...]
"""Checks of which any one suffices; refused as the last."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A row of the table (see the module docstring). ``trim`` returns the response to send."""

    needs: Callable[[Any], Sequence[Need]]
    trim: Callable[[Any, Any, May], Any] | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a call is refused: ``code``, the ``rill-error`` trailer's value, and ``message``."""

    code: str
    message: str


# ---------------------------------------------------------------- the needs, by request


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _nothing(_request: Any) -> list[Need]:
    return []


def _on_group(operation: Operation) -> Callable[[Any], list[Need]]:
    def needs(request: Any) -> list[Need]:
        return [(Check(operation, R.GROUP, request.consumer_group),)]
    return needs


def _on_topic(operation: Operation) -> Callable[[Any], list[Need]]:
    def needs(request: Any) -> list[Need]:
        return [(Check(operation, R.TOPIC, request.topic),)]
    return needs


def _on_cluster(operation: Operation) -> Callable[[Any], list[Need]]:
    need: list[Need] = [(Check(operation, R.CLUSTER, CLUSTER_NAME),)]

    def needs(_request: Any) -> list[Need]:
        return need
    return needs


def _delete_groups(request: pb.DeleteGroupRequest) -> list[Need]:
    return [(Check(O.DELETE, R.GROUP, g),) for g in _unique(request.consumer_group)]


def _commit(request: pb.CommitOffsetsRequest) -> list[Need]:
    """Kafka's OffsetCommit: Read on the group, then Read on each topic committed."""
    return [(Check(O.READ, R.GROUP, request.consumer_group),),
            *((Check(O.READ, R.TOPIC, t),) for t in _unique(o.topic for o in request.offsets))]


def _fetch_offsets(request: pb.FetchOffsetsRequest) -> list[Need]:
    """Kafka's OffsetFetch: Describe on the group, then on each topic named (the others are trimmed)."""
    return [(Check(O.DESCRIBE, R.GROUP, request.consumer_group),),
            *((Check(O.DESCRIBE, R.TOPIC, t),) for t in _unique(p.topic for p in request.partitions))]


def _create_topic(request: apb.CreateTopicRequest) -> list[Need]:
    return [(Check(O.CREATE, R.CLUSTER, CLUSTER_NAME), Check(O.CREATE, R.TOPIC, request.topic))]


def _describe_topics(request: apb.DescribeTopicsRequest) -> list[Need]:
    """Each topic named must be describable (refused otherwise, as Kafka's describeTopics); none named: trimmed."""
    return [(Check(O.DESCRIBE, R.TOPIC, t),) for t in _unique(request.topics)]


# ---------------------------------------------------------------- the listings' trims


def _trim_groups(_request: pb.ListGroupsRequest, response: pb.ListGroupsResponse, may: May) -> pb.ListGroupsResponse:
    """ListGroups: everything with Describe on the Cluster, else the groups the caller may Describe
    (Kafka's ListGroups); the response's error code is then the first of the groups kept."""
    if may(O.DESCRIBE, R.CLUSTER, CLUSTER_NAME):
        return response
    kept = [i for i in response.groups_info if may(O.DESCRIBE, R.GROUP, i.group_name)]
    if len(kept) == len(response.groups_info):
        return response
    trimmed = pb.ListGroupsResponse(client_id=response.client_id, groups_info=kept)
    trimmed.error_code = next((i.error_code for i in kept if i.error_code != pb.NONE), pb.NONE)
    return trimmed


def _trim_topics(_request: Any, response: Any, may: May) -> Any:
    """ListTopics, DescribeTopics: the topics the caller may Describe (Kafka's Metadata without names)."""
    kept = [t for t in response.topics if may(O.DESCRIBE, R.TOPIC, t.topic)]
    if len(kept) == len(response.topics):
        return response
    return type(response)(topics=kept)


def _trim_offsets(_request: pb.FetchOffsetsRequest, response: pb.FetchOffsetsResponse,
                  may: May) -> pb.FetchOffsetsResponse:
    """FetchOffsets of every partition: those of topics the caller may Describe (Kafka's OffsetFetch)."""
    kept = [o for o in response.offsets if may(O.DESCRIBE, R.TOPIC, o.topic)]
    if len(kept) == len(response.offsets):
        return response
    return pb.FetchOffsetsResponse(error_code=response.error_code, offsets=kept)


# ---------------------------------------------------------------- the table

_GROUPS, _ADMIN, _REPLICAS = "/rill.v1.GroupCoordinator/", "/rill.v1.Admin/", "/rill.v1.ReplicaControl/"

RULES: Mapping[str, Rule] = {
    # group coordination (Kafka's JoinGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DeleteGroups)
    _GROUPS + "CreateGroup": Rule(_on_group(O.READ)),  # Kafka's JoinGroup creates a group with Read
    _GROUPS + "DeleteGroup": Rule(_delete_groups),
    _GROUPS + "ListGroups": Rule(_nothing, _trim_groups),
    _GROUPS + "RegisterConsumer": Rule(_on_group(O.READ)),
    _GROUPS + "Heartbeat": Rule(_on_group(O.READ)),
    _GROUPS + "LeaveGroup": Rule(_on_group(O.READ)),
    _GROUPS + "RewindConsumer": Rule(_on_group(O.ALTER)),  # the choice; Kafka's offset reset needs Read
    _GROUPS + "CommitOffsets": Rule(_commit),
    _GROUPS + "FetchOffsets": Rule(_fetch_offsets, _trim_offsets),
    # administration
    _ADMIN + "CreateTopic": Rule(_create_topic),
    _ADMIN + "DeleteTopic": Rule(_on_topic(O.DELETE)),
    _ADMIN + "CreatePartitions": Rule(_on_topic(O.ALTER)),
    _ADMIN + "AlterTopicConfig": Rule(_on_topic(O.ALTER_CONFIGS)),
    _ADMIN + "ListTopics": Rule(_nothing, _trim_topics),
    _ADMIN + "DescribeTopics": Rule(_describe_topics, _trim_topics),
    _ADMIN + "DescribeGroup": Rule(_on_group(O.DESCRIBE)),
    _ADMIN + "DescribeCluster": Rule(_on_cluster(O.DESCRIBE)),
    _ADMIN + "ListPartitionReassignments": Rule(_on_cluster(O.DESCRIBE)),
    _ADMIN + "ElectLeaders": Rule(_on_cluster(O.ALTER)),
    _ADMIN + "AlterPartitionReassignments": Rule(_on_cluster(O.ALTER)),
    _ADMIN + "AlterReplicationThrottle": Rule(_on_cluster(O.ALTER)),
    # between brokers (the controller's LeaderAndIsr; a stopping or healing broker's requests)
    _REPLICAS + "LeaderAndIsr": Rule(_on_cluster(O.CLUSTER_ACTION)),
    _REPLICAS + "ControlledShutdown": Rule(_on_cluster(O.CLUSTER_ACTION)),
    _REPLICAS + "LeaveIsr": Rule(_on_cluster(O.CLUSTER_ACTION)),
}


class CallAuthorizer:
    """Answers, for one call, whether its principal may make it (:meth:`refusal`) and what of a listing
    it may see (:meth:`trim`), from ``authorize`` and ``rules`` (default :data:`RULES`)."""

    def __init__(self, authorize: Authorize, rules: Mapping[str, Rule] = RULES) -> None:
        self.authorize = authorize
        self.rules = rules

    def rule(self, method: str) -> Rule | None:
        """The row of ``method`` (None: it has none, and every call of it is refused)."""
        return self.rules.get(method)

    def refusal(self, method: str, rule: Rule | None, principal: str, host: str, request: Any) -> Refusal | None:
        """None when ``principal`` from ``host`` may make this call of ``method``; else why not.

        Logs ``audit.denied`` for a refusal, ``audit.allowed`` for an allowed audited operation,
        and ``grpc.authorization_missing`` (an error) for a method without a rule.
        """
        if rule is None:
            log.error("grpc.authorization_missing", rpc=method,
                      detail="no row in rill.coordinator.grpc_authorization.RULES: every call is refused")
            audit.info("audit.denied", principal=principal, host=host, operation=None, resource=None, rpc=method)
            return Refusal(refusal_code(R.CLUSTER), f"{principal} may not call {method}: it has no authorization rule")
        audited: list[Check] = []
        for need in rule.needs(request):
            if not any(self.authorize(principal, host, *c) for c in need):
                refused = need[-1]
                audit.info("audit.denied", principal=principal, host=host, operation=refused.operation.value,
                           resource=refused.resource, rpc=method)
                return Refusal(refusal_code(refused.resource_type), f"{principal} may not {refused}")
            if need[-1].operation in AUDITED:
                audited.append(need[-1])
        for check in audited:  # only once the whole call is allowed
            audit.info("audit.allowed", principal=principal, host=host, operation=check.operation.value,
                       resource=check.resource, rpc=method)
        return None

    def trim(self, rule: Rule | None, principal: str, host: str, request: Any, response: Any) -> Any:
        """``response`` as ``principal`` may see it (itself unless the rule trims a listing)."""
        if rule is None or rule.trim is None or response is None:
            return response
        authorize = self.authorize

        def may(operation: Operation, resource_type: ResourceType, name: str) -> bool:
            return authorize(principal, host, operation, resource_type, name)

        return rule.trim(request, response, may)
