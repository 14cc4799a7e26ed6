"""Authorization of every gRPC call: what each RPC needs from the ACLs, refusals, listings, audit, brokers.

A broker with ``authorizer.enable``, super user ``User:admin`` and the users admin and
bob serves the coordinator, admin and replica control services, on the sync server and
on the aio one. Every RPC of the three services has a row in :data:`ROWS` (the test
fails when one has none): without the ACLs the row names, bob's call is refused with
PERMISSION_DENIED and the ``rill-error`` trailer (a listing leaves the item out); with
them it is not. ACLs are written to the broker's file as ``rill acls`` writes them and
the broker reads the file again at once, instead of at its next one-second look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from structlog.testing import capture_logs

from rill.client.cli.main import main as rill
from rill.client.errors import (AuthenticationFailed, ClusterAuthorizationFailed, GroupAuthorizationFailed,
                                TopicAuthorizationFailed)
from rill.client.grpc_client import AdminClient
from rill.client.security import principal as principals
from rill.client.security.acls import CLUSTER_NAME, Operation, Permission, ResourceType
from rill.client.security.client_security import from_settings
from rill.coordinator.grpc_authorization import RULES
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import replication_pb2 as rpb
from tests.security.grpc_acls import (ADMIN, BOB, SERVICES, Grant, Secured, allow, denied, sasl_settings,
                                      secured_broker)

O, R = Operation, ResourceType


@pytest.fixture(scope="module", params=["sync", "aio"])
def secured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_broker(tmp_path_factory.mktemp(f"authorized-{request.param}"), request.param,
                        super_users=ADMIN) as s:
        # what the listings list: a topic with an offset committed in a group, and a second topic
        for topic in ("listed-topic", "other-topic"):
            assert s.call("admin", "Admin", "CreateTopic", apb.CreateTopicRequest(topic=topic, partitions=1)
                          ).error_code == pb.NONE
        assert s.call("admin", "GroupCoordinator", "CreateGroup", pb.CreateGroupRequest(
            consumer_group="listed-group", session_timeout=10_000)).error_code == pb.NONE
        assert s.call("admin", "GroupCoordinator", "CommitOffsets", pb.CommitOffsetsRequest(
            consumer_group="listed-group", offsets=[pb.PartitionOffset(topic=t, partition=0, offset=0)
                                                    for t in ("listed-topic", "other-topic")])).error_code == pb.NONE
        yield s


# ---------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    """An RPC, a request, the ACLs that let bob make it, and what he gets without the last of them: the
    ``refused`` code, or (a listing) a response whose ``listed`` names leave out ``item``."""

    service: str
    method: str
    request: Callable[[], Any]
    grants: tuple[Grant, ...]
    refused: str = ""
    listed: Callable[[Any], list[str]] | None = None
    item: str = ""

    def __str__(self) -> str:
        return self.method


TOPIC_REFUSED, GROUP_REFUSED, CLUSTER_REFUSED = ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                                                 "CLUSTER_AUTHORIZATION_FAILED")
CLUSTER_ALTER: tuple[Grant, ...] = ((O.ALTER, R.CLUSTER, CLUSTER_NAME),)
CLUSTER_ACTION: tuple[Grant, ...] = ((O.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME),)
G, A, RC = "GroupCoordinator", "Admin", "ReplicaControl"

ROWS = [
    Row(G, "CreateGroup", lambda: pb.CreateGroupRequest(consumer_group="new-group", session_timeout=10_000),
        ((O.READ, R.GROUP, "new-group"),), GROUP_REFUSED),
    Row(G, "DeleteGroup", lambda: pb.DeleteGroupRequest(consumer_group=["gone-group", "gone-too"]),
        ((O.DELETE, R.GROUP, "gone-group"), (O.DELETE, R.GROUP, "gone-too")), GROUP_REFUSED),
    Row(G, "ListGroups", pb.ListGroupsRequest, ((O.DESCRIBE, R.GROUP, "listed-group"),),
        listed=lambda r: [i.group_name for i in r.groups_info], item="listed-group"),
    Row(G, "RegisterConsumer", lambda: pb.RegisterConsumerRequest(consumer_group="no-group", topics=["t"]),
        ((O.READ, R.GROUP, "no-group"),), GROUP_REFUSED),
    Row(G, "Heartbeat", lambda: pb.HeartbeatRequest(consumer_group="no-group", consumer_id="m", generation=1),
        ((O.READ, R.GROUP, "no-group"),), GROUP_REFUSED),
    Row(G, "RewindConsumer", lambda: pb.RewindConsumerRequest(consumer_group="no-group", target=pb.EARLIEST),
        ((O.ALTER, R.GROUP, "no-group"),), GROUP_REFUSED),
    Row(G, "CommitOffsets", lambda: pb.CommitOffsetsRequest(consumer_group="no-group", offsets=[
        pb.PartitionOffset(topic="listed-topic", partition=0, offset=0)]),
        ((O.READ, R.GROUP, "no-group"), (O.READ, R.TOPIC, "listed-topic")), TOPIC_REFUSED),
    Row(G, "FetchOffsets", lambda: pb.FetchOffsetsRequest(consumer_group="listed-group", partitions=[
        pb.TopicPartition(topic="listed-topic", partition=0)]),
        ((O.DESCRIBE, R.GROUP, "listed-group"), (O.DESCRIBE, R.TOPIC, "listed-topic")), TOPIC_REFUSED),
    Row(G, "LeaveGroup", lambda: pb.LeaveGroupRequest(consumer_group="no-group", consumer_id="m"),
        ((O.READ, R.GROUP, "no-group"),), GROUP_REFUSED),
    Row(A, "CreateTopic", lambda: apb.CreateTopicRequest(topic="bobs-topic", partitions=1),
        ((O.CREATE, R.TOPIC, "bobs-topic"),), TOPIC_REFUSED),
    Row(A, "ListTopics", apb.ListTopicsRequest, ((O.DESCRIBE, R.TOPIC, "listed-topic"),),
        listed=lambda r: [t.topic for t in r.topics], item="listed-topic"),
    Row(A, "DescribeTopics", lambda: apb.DescribeTopicsRequest(topics=["listed-topic"]),
        ((O.DESCRIBE, R.TOPIC, "listed-topic"),), TOPIC_REFUSED),
    Row(A, "DescribeCluster", apb.DescribeClusterRequest, ((O.DESCRIBE, R.CLUSTER, CLUSTER_NAME),), CLUSTER_REFUSED),
    Row(A, "DescribeGroup", lambda: apb.DescribeGroupRequest(consumer_group="listed-group"),
        ((O.DESCRIBE, R.GROUP, "listed-group"),), GROUP_REFUSED),
    Row(A, "ElectLeaders", lambda: apb.ElectLeadersRequest(all_topics=True, timeout_ms=1000), CLUSTER_ALTER,
        CLUSTER_REFUSED),
    Row(A, "AlterTopicConfig", lambda: apb.AlterTopicConfigRequest(topic="listed-topic", delete_config=["x"]),
        ((O.ALTER_CONFIGS, R.TOPIC, "listed-topic"),), TOPIC_REFUSED),
    Row(A, "AlterPartitionReassignments", lambda: apb.AlterPartitionReassignmentsRequest(timeout_ms=1000),
        CLUSTER_ALTER, CLUSTER_REFUSED),
    Row(A, "ListPartitionReassignments", apb.ListPartitionReassignmentsRequest,
        ((O.DESCRIBE, R.CLUSTER, CLUSTER_NAME),), CLUSTER_REFUSED),
    Row(A, "AlterReplicationThrottle", lambda: apb.AlterReplicationThrottleRequest(bytes_per_second=0),
        CLUSTER_ALTER, CLUSTER_REFUSED),
    Row(A, "DeleteTopic", lambda: apb.DeleteTopicRequest(topic="no-such-topic", timeout_ms=1000),
        ((O.DELETE, R.TOPIC, "no-such-topic"),), TOPIC_REFUSED),
    Row(A, "CreatePartitions", lambda: apb.CreatePartitionsRequest(topic="listed-topic", count=2, timeout_ms=1000),
        ((O.ALTER, R.TOPIC, "listed-topic"),), TOPIC_REFUSED),
    Row(RC, "LeaderAndIsr", lambda: rpb.LeaderAndIsrRequest(controller_id=1, controller_epoch=0), CLUSTER_ACTION,
        CLUSTER_REFUSED),
    Row(RC, "ControlledShutdown", lambda: rpb.ControlledShutdownRequest(broker_id=9), CLUSTER_ACTION,
        CLUSTER_REFUSED),
    Row(RC, "LeaveIsr", lambda: rpb.LeaveIsrRequest(broker_id=9), CLUSTER_ACTION, CLUSTER_REFUSED),
]


def every_method() -> set[str]:
    return {f"/{service.full_name}/{m.name}" for name, (module, _) in SERVICES.items()
            for service in [module.DESCRIPTOR.services_by_name[name]] for m in service.methods}


def test_every_rpc_has_a_row_here_and_in_the_broker_table() -> None:
    """A new RPC fails this test until it has a row in ROWS and in grpc_authorization.RULES."""
    assert {f"/rill.v1.{r.service}/{r.method}" for r in ROWS} == every_method()
    assert set(RULES) == every_method()


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_each_rpc_needs_its_acls(secured: Secured, row: Row) -> None:
    """Without the row's last ACL bob is refused (or the listing leaves the item out); with all, he is not."""
    if row.service == RC and secured.kind == "aio":  # the aio server serves no ReplicaControl at all
        result = secured.call("admin", row.service, row.method, row.request())
        assert isinstance(result, grpc.RpcError) and result.code() == grpc.StatusCode.UNIMPLEMENTED, result
        return
    secured.acls.set(*(allow(BOB, *g) for g in row.grants[:-1]))
    without = secured.call("bob", row.service, row.method, row.request())
    if row.listed is None:
        assert denied(without) == row.refused, without
        assert f"User:bob may not {row.grants[-1][0].value} {row.grants[-1][1].value}:" in without.details()
    else:
        assert denied(without) is None and row.item not in row.listed(without)
    secured.acls.set(*(allow(BOB, *g) for g in row.grants))
    granted = secured.call("bob", row.service, row.method, row.request())
    assert denied(granted) is None, granted
    if row.listed is not None:
        assert row.item in row.listed(granted)


# ---------------------------------------------------------------- how the authorizer decides


def test_a_super_user_needs_no_acl(secured: Secured) -> None:
    """User:admin (super.users) is refused nothing, and lists every group, with no ACL at all."""
    secured.acls.set()
    assert denied(secured.call("admin", A, "DeleteTopic", apb.DeleteTopicRequest(topic="nope", timeout_ms=500))) is None
    assert denied(secured.call("admin", A, "ElectLeaders", apb.ElectLeadersRequest(all_topics=True))) is None
    listing = secured.call("admin", G, "ListGroups", pb.ListGroupsRequest())
    assert "listed-group" in [i.group_name for i in listing.groups_info]


def test_deny_wins_over_allow(secured: Secured) -> None:
    """An applying Deny refuses whatever Allows there are (User:* included)."""
    secured.acls.set(allow(BOB, O.DESCRIBE, R.GROUP, "listed-group"), allow("User:*", O.ALL, R.GROUP, "listed-group"),
                     allow(BOB, O.DESCRIBE, R.GROUP, "listed-group", Permission.DENY))
    request = apb.DescribeGroupRequest(consumer_group="listed-group")
    assert denied(secured.call("bob", A, "DescribeGroup", request)) == GROUP_REFUSED
    assert denied(secured.call("admin", A, "DescribeGroup", request)) is None


def test_create_topic_with_create_on_the_cluster(secured: Secured) -> None:
    """CreateTopic needs Create on the Cluster or, failing that, on the topic (Kafka's CreateTopics); the audit
    names the topic created."""
    secured.acls.set(allow(BOB, O.CREATE, R.CLUSTER, CLUSTER_NAME))
    with capture_logs() as logs:
        created = secured.call("bob", A, "CreateTopic", apb.CreateTopicRequest(topic="cluster-created", partitions=1))
    assert denied(created) is None and created.error_code == pb.NONE
    assert [(e["event"], e["resource"]) for e in logs if e["event"] == "audit.allowed"] == [
        ("audit.allowed", "Topic:cluster-created")]


def test_listings_are_trimmed_to_what_the_caller_may_describe(secured: Secured) -> None:
    """ListGroups shows everything with Describe on the Cluster; DescribeTopics without names and FetchOffsets
    of every partition leave out the topics bob may not describe."""
    secured.acls.set(allow(BOB, O.DESCRIBE, R.CLUSTER, CLUSTER_NAME), allow(BOB, O.READ, R.TOPIC, "listed-topic"),
                     allow(BOB, O.DESCRIBE, R.GROUP, "listed-group"))
    groups = secured.call("bob", G, "ListGroups", pb.ListGroupsRequest())
    assert "listed-group" in [i.group_name for i in groups.groups_info]
    topics = secured.call("bob", A, "DescribeTopics", apb.DescribeTopicsRequest())
    assert [t.topic for t in topics.topics] == ["listed-topic"]
    offsets = secured.call("bob", G, "FetchOffsets", pb.FetchOffsetsRequest(consumer_group="listed-group"))
    assert [o.topic for o in offsets.offsets] == ["listed-topic"]
    named = secured.call("bob", A, "DescribeTopics", apb.DescribeTopicsRequest(topics=["listed-topic", "other-topic"]))
    assert denied(named) == TOPIC_REFUSED and "Topic:other-topic" in named.details()


def test_an_anonymous_call_gets_what_acls_give_user_anonymous(secured: Secured) -> None:
    """A call without credentials on the plaintext gRPC port is User:ANONYMOUS, allowed what its ACLs allow."""
    secured.acls.set(allow(principals.ANONYMOUS, O.DESCRIBE, R.GROUP, "listed-group"))
    allowed = secured.call(None, A, "DescribeGroup", apb.DescribeGroupRequest(consumer_group="listed-group"))
    assert denied(allowed) is None and allowed.error_code == pb.NONE
    refused = secured.call(None, A, "DescribeGroup", apb.DescribeGroupRequest(consumer_group="new-group"))
    assert denied(refused) == GROUP_REFUSED
    assert refused.details() == "User:ANONYMOUS may not Describe Group:new-group"


def test_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    """With allow.everyone.if.no.acl.found a resource no ACL matches is open to all; its first ACL closes it."""
    with secured_broker(tmp_path, allow_everyone_if_no_acl_found=True) as s:
        request = apb.DescribeGroupRequest(consumer_group="open-group")
        assert denied(s.call("bob", A, "DescribeGroup", request)) is None
        s.acls.set(allow("User:alice", O.DESCRIBE, R.GROUP, "open-group"))
        assert denied(s.call("bob", A, "DescribeGroup", request)) == GROUP_REFUSED


# ---------------------------------------------------------------- audit


def test_refusals_and_allowed_changes_are_audited(secured: Secured) -> None:
    """audit.denied for a refusal; audit.allowed for an allowed Delete (or Create, Alter, AlterConfigs);
    nothing for an allowed describe."""
    secured.acls.set(allow(BOB, O.DELETE, R.GROUP, "audited"), allow(BOB, O.DESCRIBE, R.GROUP, "listed-group"))
    with capture_logs() as logs:
        secured.call("bob", G, "DeleteGroup", pb.DeleteGroupRequest(consumer_group=["audited", "listed-group"]))
        secured.call("bob", G, "DeleteGroup", pb.DeleteGroupRequest(consumer_group=["audited"]))
        secured.call("bob", A, "DescribeGroup", apb.DescribeGroupRequest(consumer_group="listed-group"))
    audits = [e for e in logs if str(e["event"]).startswith("audit.")]
    who = {"principal": BOB, "host": "127.0.0.1", "operation": "Delete", "rpc": "/rill.v1.GroupCoordinator/DeleteGroup"}
    assert [(e["event"], e["resource"]) for e in audits] == [("audit.denied", "Group:listed-group"),
                                                            ("audit.allowed", "Group:audited")]
    assert all(e | who == e for e in audits)
    assert [e for e in logs if e["event"] == "rpc.failed"] == []  # a refusal is no server failure


# ---------------------------------------------------------------- clients


def test_admin_client_and_cli_raise_the_refusal(secured: Secured, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """AdminClient raises TopicAuthorizationFailed (Group..., Cluster...) for a refusal, AuthenticationFailed
    for wrong credentials; the CLI prints one line for each."""
    secured.acls.set()
    settings = sasl_settings("bob")
    with AdminClient(secured.broker.grpc_address, 5, security=from_settings(settings)) as admin:
        with pytest.raises(TopicAuthorizationFailed, match="^User:bob may not Describe Topic:listed-topic$"):
            admin.describe_topics(["listed-topic"])
        with pytest.raises(GroupAuthorizationFailed, match="Delete Group:listed-group"):
            admin.delete_groups(["listed-group"])
        with pytest.raises(ClusterAuthorizationFailed):
            admin.describe_cluster()
    with AdminClient(secured.broker.grpc_address, 5, security=from_settings({**settings, "sasl.plain.password": "no"})
                     ) as admin, pytest.raises(AuthenticationFailed, match="UNAUTHENTICATED"):
        admin.describe_cluster()
    config = tmp_path / "bob.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    capsys.readouterr()
    assert rill(["topics", "delete", "-t", "listed-topic", "--grpc", secured.broker.grpc_address,
                 "--command-config", str(config)]) != 0
    printed = [line for line in capsys.readouterr().err.splitlines() if "audit." not in line]  # (the broker's)
    assert printed == ["rill: error: the broker refused the request: User:bob may not Delete Topic:listed-topic"]
