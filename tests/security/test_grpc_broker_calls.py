"""The brokers' own gRPC calls (the broker token), a method without a rule, and a consumer refused by ACLs.

Brokers call each other (the controller's LeaderAndIsr, forwarded group calls) with
``authorization: Bearer <token>``, the cluster's token: such a call is
``principal.BROKER``, which the ACLs never refuse; any other bearer token is
UNAUTHENTICATED, and no user or certificate can pass for the brokers. A consumer whose
group calls the ACLs refuse raises the refusal from poll() instead of retrying quietly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from structlog.testing import capture_logs

from rill.broker.cluster.replica_control_servicer import ReplicaControlClient
from rill.client import Consumer
from rill.client.errors import GroupAuthorizationFailed
from rill.client.security import principal as principals
from rill.client.security.acls import Operation, ResourceType
from rill.coordinator.grpc_auth import CallAuthenticator, Unauthenticated
from rill.coordinator.grpc_authorization import CallAuthorizer
from rill.coordinator.routing import Peers
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import replication_pb2 as rpb
from tests.security.grpc_acls import ADMIN, BOB, Secured, allow, denied, sasl_settings, secured_broker

O, R = Operation, ResourceType
TOKEN = "f" * 64


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_broker(tmp_path_factory.mktemp("broker-calls"), super_users=ADMIN) as s:
        s.call("admin", "GroupCoordinator", "CreateGroup", pb.CreateGroupRequest(consumer_group="hidden"))
        s.call("admin", "Admin", "CreateTopic", apb.CreateTopicRequest(topic="polled", partitions=1))
        yield s


# ---------------------------------------------------------------- the token, as the server reads it


def authenticator(token: str | None = TOKEN) -> CallAuthenticator:
    return CallAuthenticator(lambda _user, _password: True, broker_token=lambda: token)


def test_the_cluster_token_is_the_brokers_principal() -> None:
    """``Bearer <the token>`` is principal.BROKER."""
    assert authenticator().principal([("authorization", f"Bearer {TOKEN}")], None) == principals.BROKER


@pytest.mark.parametrize("value, token", [(f"Bearer {'0' * 64}", TOKEN), ("Bearer ", TOKEN), (f"Bearer {TOKEN}", None),
                                          (f"Bearer {TOKEN}", "")])
def test_any_other_bearer_token_is_unauthenticated(value: str, token: str | None) -> None:
    """A wrong or empty token, or one where the broker has none, fails the call (UNAUTHENTICATED)."""
    with pytest.raises(Unauthenticated, match="invalid broker token"):
        authenticator(token).principal([("authorization", value)], None)


def test_no_user_or_certificate_is_the_brokers_principal() -> None:
    """principal.BROKER is not a User: a SASL user or a certificate of the same name is just that user."""
    from rill.client.security.call_credentials import encode_basic

    name = principals.name_of(principals.BROKER)
    as_user = authenticator().principal([("authorization", encode_basic(name, "anything"))], None)
    as_certificate = authenticator().principal(None, {"x509_common_name": [name.encode()]})
    assert as_user == as_certificate == principals.user(name) != principals.BROKER


# ---------------------------------------------------------------- fail closed


def test_a_method_without_a_rule_is_refused_to_everyone() -> None:
    """A rill method missing from the table is refused, even to the brokers, and logged as an error."""
    authorizer = CallAuthorizer(lambda *_: True)
    method = "/rill.v1.Admin/SomethingNew"
    with capture_logs() as logs:
        refusal = authorizer.refusal(method, authorizer.rule(method), principals.BROKER, "10.0.0.1", None)
    assert refusal is not None and refusal.code == "CLUSTER_AUTHORIZATION_FAILED"
    assert refusal.message == f"{principals.BROKER} may not call {method}: it has no authorization rule"
    assert [(e["event"], e["log_level"]) for e in logs] == [("grpc.authorization_missing", "error"),
                                                            ("audit.denied", "info")]


# ---------------------------------------------------------------- the brokers' own clients


def broker_of(secured: Secured) -> pb.Broker:
    return pb.Broker(broker_id=1, host="127.0.0.1", grpc_port=secured.broker.grpc_port)


def test_forwarded_group_calls_carry_the_token(secured: Secured) -> None:
    """Peers (routing's forwarded ListGroups and CreateGroup) show the token: nothing is trimmed for the brokers,
    while the same call without it is anonymous and sees no group; a wrong token is UNAUTHENTICATED."""
    security = secured.broker.broker.security
    listings = {}
    for name, token in (("broker", lambda: security.broker_token), ("anonymous", None), ("wrong", lambda: TOKEN)):
        peers = Peers(token)
        try:
            listings[name] = [i.group_name for i in peers.stub(broker_of(secured)).ListGroups(
                pb.ListGroupsRequest(), timeout=10).groups_info]
        except grpc.RpcError as exc:
            listings[name] = [exc.code().name]
        finally:
            peers.close()
    assert listings == {"broker": ["hidden"], "anonymous": [], "wrong": ["UNAUTHENTICATED"]}


def test_replica_control_calls_carry_the_token(secured: Secured) -> None:
    """The controller's client shows the token (ClusterAction is not asked of the brokers); without it, refused."""
    security = secured.broker.broker.security
    address = secured.broker.grpc_address
    with_token, without = ReplicaControlClient(lambda: security.broker_token), ReplicaControlClient()
    try:
        answer = with_token.leave_isr(address, rpb.LeaveIsrRequest(broker_id=9), timeout=10)
        assert answer.error == rpb.ReplicaControlError.NOT_CONTROLLER
        with pytest.raises(grpc.RpcError) as refused:
            without.leave_isr(address, rpb.LeaveIsrRequest(broker_id=9), timeout=10)
        assert denied(refused.value) == "CLUSTER_AUTHORIZATION_FAILED"
    finally:
        with_token.close()
        without.close()


# ---------------------------------------------------------------- a consumer


def poll_until_raises(consumer: Consumer, seconds: float = 20) -> BaseException | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            consumer.poll(0.2)
        except GroupAuthorizationFailed as exc:
            return exc
    return None


def test_a_consumer_refused_by_acls_raises_from_poll(secured: Secured) -> None:
    """Without Read on its group, poll() raises GroupAuthorizationFailed (and again later, not quietly);
    with it the consumer joins; when it is taken away, the next refused heartbeat is raised too."""
    topic_read = allow(BOB, O.READ, R.TOPIC, "polled")
    secured.acls.set(topic_read)
    settings = {"bootstrap.servers": f"127.0.0.1:{secured.broker.listener_port('SASL_PLAINTEXT')}",
                **sasl_settings("bob"), "group.id": "bobs-group", "heartbeat.interval.ms": 300,
                "retry.backoff.ms": 100}
    consumer = Consumer(settings)
    try:
        consumer.subscribe(["polled"])
        first = poll_until_raises(consumer)
        assert first is not None and "User:bob may not Read Group:bobs-group" in str(first)
        assert poll_until_raises(consumer) is not None  # asked again after a backoff: refused again
        secured.acls.set(topic_read, allow(BOB, O.READ, R.GROUP, "bobs-group"))
        deadline = time.monotonic() + 20
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        secured.acls.set(topic_read)
        assert poll_until_raises(consumer) is not None
    finally:
        consumer.close()
