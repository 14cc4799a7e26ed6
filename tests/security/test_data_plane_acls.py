"""Every data-plane request type, tried by a principal without and then with the ACL it needs.

The table below has a row per request type; a test fails when a RequestType has no row
(or no entry in the broker's own list of checks), so a new request type cannot go
unchecked. Each row sends the request as ``User:bob`` over SASL, sees it refused with
its own error code (never a closed connection), grants bob the one ACL the row names,
and sees it served. Other tests: super users, deny winning, Create for auto-created
topics, a Kafka 0.7 client as ``User:ANONYMOUS``, and the audit log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.broker.security.request_acls import CHECKS
from rill.broker.testing import RunningBroker, running_broker
from rill.client.blocking_connection import BrokerConnection
from rill.client.errors import ErrorCode
from rill.client.protocol import messages as m
from rill.client.protocol import requests as rq
from rill.client.protocol.fetch_response import decode_fetch_response, decode_multifetch_response
from rill.client.protocol.replica_fetch import (ReplicaFetchPartition, ReplicaFetchRequest, decode_replica_fetch_response,
                                                encode_replica_fetch)
from rill.client.security.acl_store_file import FileAclStore
from rill.client.security.acls import (AccessControlEntry, AclBinding, AclBindingFilter, Operation, Permission,
                                       ResourcePattern, ResourceType, CLUSTER_NAME)
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from rill.client.simple import SimpleConsumer, SimpleProducer

TOPIC = "guarded"
SASL_ONLY = {rq.RequestType.SASL_HANDSHAKE, rq.RequestType.SASL_AUTHENTICATE, rq.RequestType.CLIENT_HELLO}
"""Need no ACL: how a client authenticates and names itself."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    data = tmp_path / "data"
    data.mkdir()
    with FileEntityConfigs(data) as configs:
        for user in ("admin", "bob"):
            CredentialStore(configs).set_password(user, f"{user}-secret")
    with running_broker(data, listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                        authorizer_enable=True, super_users="User:admin") as b:
        with SimpleProducer("127.0.0.1", b.listener_port("SASL_PLAINTEXT"), acks=1, timeout=5,
                            security=security("admin")) as admin:
            admin.send(TOPIC, [b"first"], 0)
        yield b


def security(user: str) -> object:
    return from_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                          "sasl.plain.username": user, "sasl.plain.password": f"{user}-secret"})


def connect(broker: RunningBroker, user: str) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", broker.listener_port("SASL_PLAINTEXT"), 5,
                            security=security(user))  # type: ignore[arg-type]


def acl(principal: str, operation: Operation, kind: ResourceType = ResourceType.TOPIC, name: str = TOPIC,
        permission: Permission = Permission.ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(kind, name), AccessControlEntry(principal, host, operation, permission))


def grant(broker: RunningBroker, *bindings: AclBinding) -> None:
    store = FileAclStore(broker.broker.config["log.dir"], poll_interval=None)
    try:
        store.add(bindings)
    finally:
        store.close()
    deadline = time.monotonic() + 10
    authorizer = broker.broker.security.authorizer
    assert authorizer is not None
    while authorizer.acl_count < len(store.all()):
        assert time.monotonic() < deadline, "the broker never loaded the ACLs"
        time.sleep(0.05)


def end_offset(broker: RunningBroker) -> int:
    with SimpleConsumer("127.0.0.1", broker.listener_port("SASL_PLAINTEXT"), timeout=5,
                        security=security("admin")) as admin:  # type: ignore[arg-type]
        return admin.latest_offset(TOPIC, 0)


def error_of(body: memoryview) -> int:
    return int.from_bytes(body[:2], "big", signed=True)


@dataclass(frozen=True)
class Row:
    """One request type: what it needs, and how to see whether bob was refused."""

    operation: Operation
    kind: ResourceType
    refused: Callable[[RunningBroker, BrokerConnection], bool]
    name: str = TOPIC


def _produce(kind: rq.RequestType) -> Callable[[RunningBroker, BrokerConnection], bool]:
    def run(broker: RunningBroker, conn: BrokerConnection) -> bool:
        before = end_offset(broker)
        message = m.encode_message_set([b"from bob"])
        if kind == rq.RequestType.PRODUCE:
            conn.send(rq.encode_produce(TOPIC, 0, message))
        else:
            conn.send(rq.encode_multiproduce([rq.ProduceRequest(TOPIC, 0, message)]))
        conn.request(rq.encode_metadata([]))  # answered after the produce: it has been handled
        return end_offset(broker) == before  # refused: nothing appended (0.7 produces have no answer)
    return run


def _produce_ack(broker: RunningBroker, conn: BrokerConnection) -> bool:
    body = conn.request(rq.encode_produce_ack([rq.ProduceRequest(TOPIC, 0, m.encode_message_set([b"x"]))]))
    return rq.decode_produce_ack_response(body)[1][0].error == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _fetch(broker: RunningBroker, conn: BrokerConnection) -> bool:
    return decode_fetch_response(conn.request(rq.encode_fetch(TOPIC, 0, 0, 1000)))[0] == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _multifetch(broker: RunningBroker, conn: BrokerConnection) -> bool:
    body = conn.request(rq.encode_multifetch([rq.FetchRequest(TOPIC, 0, 0, 1000)]))
    return decode_multifetch_response(body)[1][0][0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _fetch_wait(broker: RunningBroker, conn: BrokerConnection) -> bool:
    body = conn.request(rq.encode_fetch_wait([rq.FetchRequest(TOPIC, 0, 0, 1000)], 100))
    return decode_multifetch_response(body)[1][0][0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _offsets(broker: RunningBroker, conn: BrokerConnection) -> bool:
    return rq.decode_offsets_response(conn.request(rq.encode_offsets(TOPIC, 0, rq.LATEST_TIME, 1)))[0] == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _time_index(broker: RunningBroker, conn: BrokerConnection) -> bool:
    return rq.decode_time_index_response(conn.request(rq.encode_time_index(TOPIC, 0, 0, 10)))[0] == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _metadata(broker: RunningBroker, conn: BrokerConnection) -> bool:
    named = rq.decode_metadata_response(conn.request(rq.encode_metadata([TOPIC])))[1].topics[0]
    listed = [t.topic for t in rq.decode_metadata_response(conn.request(rq.encode_metadata([])))[1].topics]
    assert (named.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED) == (TOPIC not in listed)
    return named.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _create_topic(broker: RunningBroker, conn: BrokerConnection) -> bool:
    return rq.decode_create_topic_response(conn.request(rq.encode_create_topic("made-by-bob", 1)))[0] == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _replica_fetch(broker: RunningBroker, conn: BrokerConnection) -> bool:
    request = ReplicaFetchRequest(7, 0, 1, [ReplicaFetchPartition(TOPIC, 0, 0, 0, -1, 1000)])
    blocks = decode_replica_fetch_response(conn.request(encode_replica_fetch(request)))[1]
    return blocks[0].error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


ROWS: dict[rq.RequestType, Row] = {
    rq.RequestType.PRODUCE: Row(Operation.WRITE, ResourceType.TOPIC, _produce(rq.RequestType.PRODUCE)),
    rq.RequestType.MULTIPRODUCE: Row(Operation.WRITE, ResourceType.TOPIC, _produce(rq.RequestType.MULTIPRODUCE)),
    rq.RequestType.PRODUCE_ACK: Row(Operation.WRITE, ResourceType.TOPIC, _produce_ack),
    rq.RequestType.FETCH: Row(Operation.READ, ResourceType.TOPIC, _fetch),
    rq.RequestType.MULTIFETCH: Row(Operation.READ, ResourceType.TOPIC, _multifetch),
    rq.RequestType.FETCH_WAIT: Row(Operation.READ, ResourceType.TOPIC, _fetch_wait),
    rq.RequestType.OFFSETS: Row(Operation.DESCRIBE, ResourceType.TOPIC, _offsets),
    rq.RequestType.TIME_INDEX: Row(Operation.DESCRIBE, ResourceType.TOPIC, _time_index),
    rq.RequestType.METADATA: Row(Operation.DESCRIBE, ResourceType.TOPIC, _metadata),
    rq.RequestType.CREATE_TOPIC: Row(Operation.CREATE, ResourceType.CLUSTER, _create_topic, CLUSTER_NAME),
    rq.RequestType.REPLICA_FETCH: Row(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, _replica_fetch, CLUSTER_NAME),
}


def test_every_request_type_has_a_check_and_a_row() -> None:
    assert set(CHECKS) == set(rq.RequestType)
    assert set(ROWS) == set(rq.RequestType) - SASL_ONLY


@pytest.mark.parametrize("kind", sorted(ROWS), ids=lambda k: rq.RequestType(k).name)
def test_each_request_type_is_refused_without_its_acl_and_served_with_it(
        broker: RunningBroker, kind: rq.RequestType) -> None:
    row = ROWS[kind]
    with connect(broker, "bob") as conn:
        assert row.refused(broker, conn), f"{kind.name} was served without {row.operation.value} {row.kind.value}"
        assert not conn.closed  # a refusal is an answer, never a dropped connection
    grant(broker, acl("User:bob", row.operation, row.kind, row.name))
    with connect(broker, "bob") as conn:
        assert not row.refused(broker, conn), f"{kind.name} was refused with {row.operation.value} {row.kind.value}"


def test_a_super_user_needs_no_acl_and_deny_wins(broker: RunningBroker) -> None:
    with connect(broker, "admin") as conn:
        assert not _fetch(broker, conn)
    grant(broker, acl("User:*", Operation.READ), acl("User:bob", Operation.READ, permission=Permission.DENY))
    with connect(broker, "bob") as conn:
        assert _fetch(broker, conn)


def test_auto_creation_needs_create_as_well_as_write(broker: RunningBroker) -> None:
    grant(broker, acl("User:bob", Operation.WRITE, name="brand-new"))
    with connect(broker, "bob") as conn:
        body = conn.request(rq.encode_produce_ack([rq.ProduceRequest("brand-new", 0, m.encode_message_set([b"x"]))]))
        assert rq.decode_produce_ack_response(body)[1][0].error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "brand-new" not in broker.broker.logs.topics()
    grant(broker, acl("User:bob", Operation.CREATE, name="brand-new"))
    with connect(broker, "bob") as conn:
        body = conn.request(rq.encode_produce_ack([rq.ProduceRequest("brand-new", 0, m.encode_message_set([b"x"]))]))
        assert rq.decode_produce_ack_response(body)[1][0].error == 0
    assert "brand-new" in broker.broker.logs.topics()


def test_a_kafka_07_client_is_anonymous_on_the_plaintext_listener(broker: RunningBroker) -> None:
    with SimpleConsumer("127.0.0.1", broker.port, timeout=5) as anonymous:
        with pytest.raises(Exception, match="TopicAuthorizationFailed"):
            anonymous.fetch(TOPIC, 0, 0)
    grant(broker, acl("User:ANONYMOUS", Operation.READ))
    with SimpleConsumer("127.0.0.1", broker.port, timeout=5) as anonymous:
        assert [msg.value for msg in anonymous.fetch(TOPIC, 0, 0)] == [b"first"]


def test_refusals_and_creations_are_audited(broker: RunningBroker) -> None:
    grant(broker, acl("User:bob", Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME))
    with capture_logs() as logs, connect(broker, "bob") as conn:
        _fetch(broker, conn)
        _create_topic(broker, conn)
    audit = [(e["event"], e["principal"], e["operation"], e["resource"]) for e in logs
             if e["event"].startswith("audit.")]
    assert ("audit.denied", "User:bob", "Read", f"Topic:{TOPIC}") in audit
    assert ("audit.allowed", "User:bob", "Create", "Topic:made-by-bob") in audit
    assert all(e["host"] == "127.0.0.1" for e in logs if e["event"].startswith("audit."))


def test_removing_the_acl_closes_the_topic_again(broker: RunningBroker) -> None:
    grant(broker, acl("User:bob", Operation.READ))
    with connect(broker, "bob") as conn:
        assert not _fetch(broker, conn)
    store = FileAclStore(broker.broker.config["log.dir"], poll_interval=None)
    try:
        store.remove(AclBindingFilter(principal="User:bob"))
    finally:
        store.close()
    deadline = time.monotonic() + 10
    while True:
        with connect(broker, "bob") as conn:
            if _fetch(broker, conn):
                break
        assert time.monotonic() < deadline, "the broker kept bob's removed ACL"
        time.sleep(0.1)
