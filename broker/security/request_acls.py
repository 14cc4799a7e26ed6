"""The data plane's ACL checks: what each request type needs, asked of the authorizer per connection.

Every request type is checked before it acts (docs/security.md, "What each request
needs"), with the connection's principal and address:

| request | needs |
|---|---|
| PRODUCE, MULTIPRODUCE, PRODUCE_ACK | Write on each topic; a topic that does not exist yet also Create (on the cluster, or on the topic) |
| FETCH, MULTIFETCH, FETCH_WAIT | Read on each topic |
| OFFSETS, TIME_INDEX | Describe on the topic |
| METADATA | Describe on each topic (unnamed topics the caller may not Describe are left out) |
| CREATE_TOPIC | Create on the cluster, or on the topic |
| REPLICA_FETCH | ClusterAction on the cluster (brokers only) |
| SASL_HANDSHAKE, SASL_AUTHENTICATE | nothing (they are how a client authenticates) |
| CLIENT_HELLO | nothing (it names the client for quotas) |

A refusal is the request type's own error code, per partition where the response has
one (TopicAuthorizationFailed, 25; ClusterAuthorizationFailed, 27), never a closed
connection; PRODUCE and MULTIPRODUCE have no response in Kafka 0.7, so their refused
messages are dropped, as any refused 0.7 produce is. :data:`CHECKS` names the check of
every request type, so that a new type cannot go unchecked (tests/security checks that
every RequestType has one).

The audit log (logger ``rill.audit``) has a line for every refusal and every Create
allowed: who, from where, what.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from rill.broker.dataplane.server_connection import Connection
from rill.client.protocol.requests import RequestType
from rill.client.security.acls import CLUSTER_NAME, Operation, ResourceType

__all__ = ["CHECKS", "AuthorizeFn", "DataPlaneAcls"]

audit = structlog.get_logger("rill.audit")

AuthorizeFn = Callable[[str, str, Operation, ResourceType, str], bool]

CHECKS: dict[RequestType, str] = {
    RequestType.PRODUCE: "Write Topic (+ Create for a new topic)",
    RequestType.MULTIPRODUCE: "Write Topic (+ Create for a new topic)",
    RequestType.PRODUCE_ACK: "Write Topic (+ Create for a new topic)",
    RequestType.FETCH: "Read Topic",
    RequestType.MULTIFETCH: "Read Topic",
    RequestType.FETCH_WAIT: "Read Topic",
    RequestType.OFFSETS: "Describe Topic",
    RequestType.TIME_INDEX: "Describe Topic",
    RequestType.METADATA: "Describe Topic (filtered)",
    RequestType.CREATE_TOPIC: "Create Cluster or Create Topic",
    RequestType.REPLICA_FETCH: "ClusterAction Cluster",
    RequestType.SASL_HANDSHAKE: "none",
    RequestType.SASL_AUTHENTICATE: "none",
    RequestType.CLIENT_HELLO: "none",
}
"""Every request type's check, as docs/security.md states it (a test holds each to it)."""


class DataPlaneAcls:
    """Asks ``authorize(principal, host, operation, resource type, name)`` for a connection's requests."""

    def __init__(self, authorize: AuthorizeFn) -> None:
        self.authorize = authorize

    def allowed(self, conn: Connection, operation: Operation, kind: ResourceType, name: str,
                request: str = "") -> bool:
        """Whether ``conn``'s principal may; a refusal is audited."""
        if self.authorize(conn.principal, conn.ip, operation, kind, name):
            return True
        audit.info("audit.denied", principal=conn.principal, host=conn.ip, operation=operation.value,
                   resource=f"{kind.value}:{name}", request=request, listener=conn.listener)
        return False

    def denied_topics(self, conn: Connection, operation: Operation, topics: Iterable[str],
                      request: str = "") -> set[str]:
        """The topics among ``topics`` that ``conn`` may not ``operation`` (usually none)."""
        return {t for t in set(topics) if not self.allowed(conn, operation, ResourceType.TOPIC, t, request)}

    def may_create_topic(self, conn: Connection, topic: str, request: str = "") -> bool:
        """Create on the cluster, or else on the topic (Kafka's rule); an allowed creation is audited."""
        if not (self.authorize(conn.principal, conn.ip, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
                or self.allowed(conn, Operation.CREATE, ResourceType.TOPIC, topic, request)):
            return False
        audit.info("audit.allowed", principal=conn.principal, host=conn.ip, operation=Operation.CREATE.value,
                   resource=f"{ResourceType.TOPIC.value}:{topic}", request=request, listener=conn.listener)
        return True

    def cluster_action(self, conn: Connection, request: str = "") -> bool:
        return self.allowed(conn, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, request)
